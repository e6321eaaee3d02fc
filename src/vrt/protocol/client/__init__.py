"""The client role, sans I/O: :class:`ClientSession` (the §5.1 client table, the epoch
gate of §6.2, the tool queue of §7) and the events it reports to the application."""

from ..tables import ClientState
from . import events
from .events import *  # noqa: F403 - every event, as events.__all__ lists them
from .session import DEAD_AFTER_INTERVALS, PING_INTERVAL, ClientSession

__all__ = [
    "DEAD_AFTER_INTERVALS",
    "PING_INTERVAL",
    "ClientSession",
    "ClientState",
]
__all__ += events.__all__
