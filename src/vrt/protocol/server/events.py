"""What the server core reports: to the driver (:class:`HelloReceived`) and to the
session's agent (:data:`AgentInput`), as keyword-only frozen structs."""

from __future__ import annotations

from typing import Any, TypeAlias

import msgspec

from ..messages import FailureCode, Hello

__all__ = [
    "AgentInput",
    "AudioReceived",
    "ContextChanged",
    "HelloReceived",
    "PlaybackReported",
    "ResponseInterrupted",
    "ToolSettled",
    "UserTextReceived",
]


class HelloReceived(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """The connection got its ``hello``: authenticate it, then open or refuse (§5.2-5.4)."""

    hello: Hello


class UserTextReceived(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """User text input (§6.3); the response in flight, if any, was interrupted first."""

    text: str


class AudioReceived(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Input audio in the session's input format; ``seq`` is the frame's audio seq (§8.1)."""

    payload: bytes
    seq: int


class ContextChanged(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """The application context, replaced in client-stream order (§5.5). Data, not instructions."""

    context: Any


class ToolSettled(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A client tool call has its one result: the client's, TIMEOUT or INTERRUPTED (§7.2)."""

    call_id: str
    provider_id: str | None
    name: str
    turn_id: str
    ok: bool
    output: Any = None
    code: FailureCode | None = None
    message: str | None = None


class ResponseInterrupted(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """The client interrupted the response in flight and its epoch closed (§6.2, §6.3):
    stop the model. Not sent for interruptions the agent itself asked for."""

    turn_id: str
    epoch: int
    reason: str


class PlaybackReported(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """The user heard ``played_ms`` of ``item_id``: truncate to it (§8.4). Capped at what
    was sent of the item, when the session knows it."""

    item_id: str
    played_ms: int
    turn_id: str | None


AgentInput: TypeAlias = (
    UserTextReceived
    | AudioReceived
    | ContextChanged
    | ToolSettled
    | ResponseInterrupted
    | PlaybackReported
)
