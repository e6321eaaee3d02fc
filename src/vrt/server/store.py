"""Where sessions live between connections (§5.1).

The server reaches session state only through :class:`SessionStore`, so that a later
store can keep it outside the process (for example in Redis) and let a session resume
on another server process. :class:`MemorySessionStore` keeps live objects in a dict.
"""

from __future__ import annotations

from typing import Protocol

from ..protocol.server import ServerSession

__all__ = ["MemorySessionStore", "SessionStore"]


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
