"""Where sessions live between connections (§5.1).

The server reaches session state only through a store, one contract for both:
:class:`MemorySessionStore` keeps nothing outside the process, so that a session lives
and dies with it (the server's registry holds its one copy). A shared store
(``redis_store.RedisSessionStore``) keeps every session outside the process too, so
that it resumes on any process that shares the store (docs/deploy.md): each session
then has a :class:`~vrt.server.journal.SessionJournal` that writes it to the store
before its connection writes what a client could see.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

from ..agents.history import HistoryEntry
from ..protocol.server import ServerConfig, ServerSession
from .journal import SessionJournal

__all__ = ["Claim", "MemorySessionStore", "Refusal", "SessionStore"]


@dataclass(frozen=True, slots=True)
class Claim:
    """A session this process took for a resume (``SessionStore.claim``)."""

    session: ServerSession
    journal: SessionJournal
    #: The conversation so far, for the new agent (empty when not ``restored``).
    history: tuple[HistoryEntry, ...]
    #: True: rebuilt from the store (it was another process's, or this one forgot it);
    #: False: this process's own copy was current.
    restored: bool


#: Why a store refused a resume. The client is told RESUME_FAILED for all three (§5.3);
#: the server acts on the difference: only a missing session may be served from this
#: process's own copy (the store lost it, as in a restart, or never had it).
Refusal = Literal["missing", "ended", "foreign"]


class SessionStore(Protocol):
    """Where the server keeps its sessions (see the module docstring).

    Every call of a shared store that reaches it raises
    :class:`~vrt.server.journal.StoreUnavailable` when it cannot.
    """

    @property
    def shared(self) -> bool:
        """True when sessions outlive this process: another process that shares the
        store resumes them (docs/deploy.md)."""

    async def open(self, config: ServerConfig, on_lost: Callable[[str], None]) -> None:
        """Connect; ``on_lost(session_id)`` is called whenever another process took a
        session of this one (its connection must close with 4000, §5.4)."""

    async def close(self) -> None: ...

    async def create(self, session: ServerSession) -> SessionJournal | None:
        """Store a new session and take its lease: its journal, or None when the store
        keeps nothing outside the process (nothing to write ahead)."""

    async def claim(
        self, session_id: str, principal: str | None, local: SessionJournal | None
    ) -> Claim | Refusal:
        """Take a session for a resume, or say why not: unknown, ended or another
        principal's (the client gets one answer for all three, §5.3). ``local``: the
        journal of this process's own copy, if it has one."""

    async def end(self, journal: SessionJournal) -> None:
        """The session ended: nobody may resume it."""

    def forget(self, journal: SessionJournal) -> None:
        """This process lets the session go; the store keeps it for a resume elsewhere."""


class MemorySessionStore:
    """Sessions of this process alone, in its memory: the server's own copy of each is
    the only one, so every claim finds the store without it ("missing") and the server
    resumes from that copy. It gives no journals, so it has none to end or forget."""

    shared: Literal[False] = False

    async def open(self, config: ServerConfig, on_lost: Callable[[str], None]) -> None:
        """Nothing to connect to; no other process takes a session of this one."""

    async def close(self) -> None:
        """Nothing to disconnect."""

    async def create(self, session: ServerSession) -> None:
        """Nothing to write ahead: the session is in memory already."""

    async def claim(
        self, session_id: str, principal: str | None, local: SessionJournal | None
    ) -> Refusal:
        """Nothing outside this process: the server's own copy, if any, is the session."""
        return "missing"

    async def end(self, journal: SessionJournal) -> None:
        """No journals are given (``create``): none ends here."""

    def forget(self, journal: SessionJournal) -> None:
        """No journals are given (``create``): none is forgotten here."""
