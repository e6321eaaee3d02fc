"""Whether a new session may open on this process (docs/limits.md).

A ``hello`` for a new session is refused with ``START_FAILED`` and close 1011 (§5.1)
while the server drains, when the client's tools and context exceed what a session
keeps (§11), at the session limit (once no parked session can be evicted for it), or
when the agent factory's ``admit`` says the agent is saturated. Resumes are never
refused here: their session exists already.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ..logs import Throttled
from ..protocol.messages import Hello
from ..protocol.server import ServerSession

__all__ = ["Admission"]

log = logging.getLogger("vrt.server")

#: At the session limit, one warning per this many seconds, however many refusals.
_FULL_WARNING_EVERY = 10.0


class Admission:
    """The admission of new sessions (see the module docstring).

    :param max_sessions: at most this many live sessions (connected or parked), or None.
    :param admit: asked before each new session: None admits it, a string refuses it
        with that reason (the voice agent's, when its recogniser is saturated).
    :param max_state_bytes: what ``hello.tools`` and ``hello.context`` may take (§11).
    """

    def __init__(
        self,
        max_sessions: int | None,
        admit: Callable[[], str | None] | None,
        max_state_bytes: int,
    ) -> None:
        self.max_sessions = max_sessions
        self.max_state_bytes = max_state_bytes
        self._admit = admit
        #: Set once the server shuts down: no new session then.
        self.draining = False
        #: New sessions between their hello and their registration, which count against
        #: the limit: the opener counts them (a plain counter, not a context manager:
        #: this is every session's opening).
        self.starting = 0
        self._refused_busy = Throttled(log, logging.WARNING)
        self._refused_full = 0  # refusals at the session limit since the last warning
        self._warned_full_at = -1e9

    def refusal(
        self, hello: Hello, live: int, evict: Callable[[], bool], now: float
    ) -> tuple[str, str] | None:
        """None admits the new session of ``hello``; otherwise why not: the reason the
        observer is told (``ServerObserver.session_refused``) and the client's message.
        ``live``: the sessions hosted now; ``evict``: ends the session parked the
        longest, False when none is parked."""
        if self.draining:
            return "draining", "the server is shutting down; try another"
        size, most = ServerSession.state_size(hello), self.max_state_bytes
        if size > most:
            return "too_large", (
                f"hello.tools and hello.context take {size} bytes; this server keeps at most "
                f"{most} per session (§11)"
            )
        limit = self.max_sessions
        if limit is not None and live + self.starting >= limit and not evict():
            self._refused_full += 1
            if now - self._warned_full_at >= _FULL_WARNING_EVERY:
                log.warning(
                    "at the limit of %d sessions: refused %d new session(s)",
                    limit,
                    self._refused_full,
                )
                self._warned_full_at, self._refused_full = now, 0
            return "limit", f"the server is at its limit of {limit} sessions; try again later"
        if self._admit is not None and (reason := self._admit()) is not None:
            self._refused_busy("refused a new session: %s", reason)
            return "capacity", reason
        return None
