"""Which row of §5.1's client table (:data:`~vrt.protocol.tables.CLIENT_TABLE`) an input
is, where the message alone does not say: an ``error`` by its code, a ``ready`` by
whether it matches the session resumed and whether the client can resend (§5.4), and
the end of a connection by whether the session goes on over a new one.
"""

from __future__ import annotations

from typing import Any, Final

from ..errors import ErrorCode
from ..messages import UNSET, Error, Ready
from ..outputs import CloseCode
from ..streams import OutgoingStream
from ..tables import ClientInput, ClientState

__all__ = ["error_input", "ready_input", "reconnects"]

_SESSION_ENDING: Final = frozenset({ErrorCode.AGENT_ERROR, ErrorCode.SERVER_SHUTDOWN})

#: Close codes with which a server ends a first connection before ``ready`` for good: on
#: purpose (1000), by policy (1008) or refusing the credential (4401, §5.3). A first
#: connection lost otherwise (no close frame, declared dead by the heartbeat, §4.4, or
#: closed going away or overloaded) is tried again with a new ``hello``.
_FINAL_BEFORE_READY: Final = frozenset({CloseCode.NORMAL, CloseCode.POLICY, CloseCode.UNAUTHORIZED})


def error_input(error: Error) -> ClientInput:
    """Which row of the client table an ``error`` is."""
    if error.code == ErrorCode.RESUME_FAILED:
        return ClientInput.RESUME_FAILED
    if error.code == ErrorCode.UNAUTHORIZED:
        return ClientInput.UNAUTHORIZED
    if not error.recoverable:
        # §9.2: "the session or connection cannot continue". These two say it is the
        # session; for the others (RATE_LIMITED, ...) a resume tells.
        if error.code in _SESSION_ENDING:
            return ClientInput.SESSION_ENDED
        return ClientInput.ERROR_NOT_RECOVERABLE
    return ClientInput.ERROR


def ready_input(
    ready: Ready, session_id: str | None, outgoing: OutgoingStream
) -> tuple[ClientInput, Any]:
    """The row of a ``ready`` awaited by a client whose session is ``session_id`` (None:
    a new one), and its argument: what the client resends, or why the resume failed."""
    resumed = ready.resumed_from is not UNSET
    if resumed != (session_id is not None) or (
        session_id is not None and ready.session_id != session_id
    ):
        return ClientInput.READY_MISMATCH, "ready does not match the session resumed"
    resumed_from = ready.resumed_from if isinstance(ready.resumed_from, int) else 0
    resend = outgoing.resend_after(resumed_from)
    if resend is None:
        # §5.4: the client cannot resend what the server lacks.
        return ClientInput.CANNOT_RESEND, "cannot resend what the server missed (§5.4)"
    return ClientInput.READY, (ready, resend)


def reconnects(state: ClientState, session_id: str | None, code: int | None) -> bool:
    """Whether a session in ``state`` goes on over a new connection after one ended with
    the server's close ``code``: a resume (§5.4), whatever the code, or a new ``hello``
    when a first connection ended before its ``ready`` without being refused."""
    return state is not ClientState.CLOSED and (
        session_id is not None or code not in _FINAL_BEFORE_READY
    )
