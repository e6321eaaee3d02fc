"""Error codes (§9.2) and the two kinds of exception the core raises.

Bad input from the peer never raises: the decoder returns an :class:`~vrt.protocol.codec.Invalid`
and the session answers with an ``error`` message. Exceptions are for local misuse of the
core (sending a gated message, sending after the stream is exhausted), as h11 separates
``RemoteProtocolError`` from ``LocalProtocolError``.
"""

from __future__ import annotations

from enum import StrEnum

from ..errors import VrtException

__all__ = ["ErrorCode", "LocalProtocolError", "recoverable_by_default"]


class ErrorCode(StrEnum):
    """The error codes this implementation sends. The set is open (§9.2)."""

    # §9.1: an invalid message or audio frame; recoverable.
    MALFORMED = "MALFORMED"
    UNSUPPORTED_VERSION = "UNSUPPORTED_VERSION"
    UNKNOWN_TYPE = "UNKNOWN_TYPE"
    INVALID_FIELD = "INVALID_FIELD"
    # §9.2
    NO_SESSION = "NO_SESSION"
    DUPLICATE_HELLO = "DUPLICATE_HELLO"
    UNAUTHORIZED = "UNAUTHORIZED"
    RESUME_FAILED = "RESUME_FAILED"
    START_FAILED = "START_FAILED"
    AGENT_ERROR = "AGENT_ERROR"
    # §11 and messages.md: a limit was exceeded, or a peer keeps exceeding them.
    LIMIT_EXCEEDED = "LIMIT_EXCEEDED"
    RATE_LIMITED = "RATE_LIMITED"
    # docs/decisions.md: the server is going away; do not resume on it.
    SERVER_SHUTDOWN = "SERVER_SHUTDOWN"
    # docs/decisions.md: the turn in progress ended early because the session moved to
    # another server process; recoverable (ask again).
    TURN_CUT_SHORT = "TURN_CUT_SHORT"


_NOT_RECOVERABLE = frozenset(
    {
        ErrorCode.NO_SESSION,
        ErrorCode.UNAUTHORIZED,
        ErrorCode.RESUME_FAILED,
        ErrorCode.START_FAILED,
        ErrorCode.RATE_LIMITED,
        ErrorCode.SERVER_SHUTDOWN,
    }
)


def recoverable_by_default(code: ErrorCode) -> bool:
    """The ``recoverable`` flag §9.2 gives ``code`` (AGENT_ERROR is flagged per case)."""
    return code not in _NOT_RECOVERABLE


class LocalProtocolError(VrtException):
    """This side tried to do something the protocol forbids; a bug in the caller."""
