"""Where sessions live between connections (§5.1).

The server reaches session state only through a store. :class:`MemorySessionStore`
keeps live objects in a dict: a session lives and dies with its process. A
:class:`SharedSessionStore` (``redis_store.RedisSessionStore``) keeps every session
outside the process too, so that it resumes on any process that shares the store
(docs/deploy.md): each session then has a :class:`~vrt.server.journal.SessionJournal`
that writes it to the store before its connection writes what a client could see.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from ..agents.history import HistoryEntry
from ..protocol.server import ServerConfig, ServerSession
from .journal import SessionJournal

__all__ = ["Claim", "MemorySessionStore", "Refusal", "SessionStore", "SharedSessionStore"]


class SessionStore(Protocol):
    async def add(self, session: ServerSession) -> None: ...

    async def get(self, session_id: str) -> ServerSession | None: ...

    async def remove(self, session_id: str) -> None: ...

    def __len__(self) -> int: ...


class MemorySessionStore:
    """Sessions of this process, in memory."""

    def __init__(self) -> None:
        self._sessions: dict[str, ServerSession] = {}

    async def add(self, session: ServerSession) -> None:
        self._sessions[session.session_id] = session

    async def get(self, session_id: str) -> ServerSession | None:
        return self._sessions.get(session_id)

    async def remove(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)

    def __len__(self) -> int:
        return len(self._sessions)


@dataclass(frozen=True, slots=True)
class Claim:
    """A session this process took for a resume (``SharedSessionStore.claim``)."""

    session: ServerSession
    journal: SessionJournal
    #: The conversation so far, for the new agent (empty when not ``restored``).
    history: tuple[HistoryEntry, ...]
    #: True: rebuilt from the store (it was another process's, or this one forgot it);
    #: False: this process's own copy was current.
    restored: bool


#: Why a shared store refused a resume. The client is told RESUME_FAILED for all three
#: (§5.3); the server acts on the difference: only a missing session may be served from
#: this process's own copy (the store lost it, as in a restart).
Refusal = Literal["missing", "ended", "foreign"]


@runtime_checkable
class SharedSessionStore(Protocol):
    """A store that processes share (docs/deploy.md): a session resumes on any of them.

    Every call that reaches the store raises
    :class:`~vrt.server.journal.StoreUnavailable` when it cannot.
    """

    shared: Literal[True]

    async def open(self, config: ServerConfig, on_lost: Callable[[str], None]) -> None:
        """Connect; ``on_lost(session_id)`` is called whenever another process took a
        session of this one (its connection must close with 4000, §5.4)."""

    async def close(self) -> None: ...

    async def create(self, session: ServerSession) -> SessionJournal:
        """Store a new session and take its lease."""

    def adopt(self, session: ServerSession) -> SessionJournal:
        """Keep journalling a session the store could not take (written once it can)."""

    async def claim(
        self, session_id: str, principal: str | None, local: SessionJournal | None
    ) -> Claim | Refusal:
        """Take a session for a resume, or say why not: unknown, ended or another
        principal's (the client gets one answer for all three, §5.3)."""

    async def end(self, journal: SessionJournal) -> None:
        """The session ended: nobody may resume it."""

    def forget(self, journal: SessionJournal) -> None:
        """This process lets the session go; the store keeps it for a resume elsewhere."""

    def __len__(self) -> int: ...
