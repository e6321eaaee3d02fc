"""One session a server process hosts: everything the server keeps for it, in one record.

A :class:`HostedSession` holds the protocol core's session, the connection it is bound
to, its agent and the task that runs it, its journal (with a shared store) and, while
it is parked, its timer. The registry (``registry.SessionRegistry``) keeps one per
session and owns what happens to them.
"""

from __future__ import annotations

import asyncio

from ..agents.base import Agent, AgentSession
from ..protocol.server import ServerSession
from .journal import SessionJournal
from .websocket import ServerWebSocket

__all__ = ["HostedSession"]


class HostedSession:
    """One session this process hosts: its state, in one place."""

    __slots__ = (
        "agent",
        "agent_session",
        "connection",
        "journal",
        "parked_timer",
        "session",
        "task",
        "write_due",
    )

    def __init__(self, session: ServerSession, journal: SessionJournal | None) -> None:
        self.session = session
        #: With a shared store: the session's write-ahead journal.
        self.journal = journal
        #: The connection the session is bound to; None while parked.
        self.connection: ServerWebSocket | None = None
        self.agent: Agent | None = None
        self.agent_session: AgentSession | None = None
        self.task: asyncio.Task[None] | None = None
        #: While parked: the timer of its deadlines (``parking.ParkingLot``).
        self.parked_timer: asyncio.TimerHandle | None = None
        #: A write of the session is due at the end of this loop step (``coalescing``).
        self.write_due = False
