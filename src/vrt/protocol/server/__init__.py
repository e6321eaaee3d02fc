"""The server role, sans I/O: one :class:`ServerConnection` per WebSocket (the §5.1
server table), one :class:`ServerSession` per session, which outlives its connections.

A driver feeds a connection the frames it receives, with the time, and writes out what
:meth:`ServerConnection.take_outbox` returns; it authenticates ``hello`` and finds or
creates the session when :meth:`ServerConnection.take_events` reports a
:class:`HelloReceived`, then calls :meth:`ServerConnection.open` or one of the
``refuse_*`` methods. The agent talks to its :class:`ServerSession` through the methods
under "agent side"; the session reports what the client did as :data:`AgentInput` events.
"""

from . import events
from .config import ServerConfig
from .connection import ServerConnection
from .events import *  # noqa: F403 - what the core reports, as events.__all__ lists it
from .session import ServerSession, SessionRecord, SessionState

__all__ = [
    "ServerConfig",
    "ServerConnection",
    "ServerSession",
    "SessionRecord",
    "SessionState",
]
__all__ += events.__all__
