"""Typed vRT v1 control messages, one frozen struct per message type and direction.

The JSON Schemas in ``schema/`` are normative; these classes mirror them member for
member (a test checks that every schema file has exactly one class here with the same
members). Attribute names are the members' names in snake case; on the wire they are
camel case (``call_id`` is ``callId``).

``v`` and ``seq`` are not attributes: ``v`` is always 1, and ``seq`` belongs to the
stream a message travels in (§4.1), so the codec takes and returns it beside the message.

A member that a schema marks OPTIONAL is :data:`UNSET` when absent, which is different
from an explicit ``None`` (JSON ``null``). Members a receiver does not recognise are kept
in ``extra``, at the top level and inside formats and tools, and written back by the
encoder (§2.2).
"""

from __future__ import annotations

from typing import Any, ClassVar, Final, Generic, Literal, TypeAlias, TypeVar

import msgspec
from msgspec import UNSET, UnsetType

__all__ = [
    "UNSET",
    "Ack",
    "AgentText",
    "AudioStart",
    "ClientMessage",
    "ClientSequencedMessage",
    "ContextUpdate",
    "Error",
    "FailureCode",
    "Format",
    "Hello",
    "Interrupt",
    "InterruptReason",
    "Interrupted",
    "Message",
    "Ping",
    "Playback",
    "Pong",
    "Ready",
    "ServerMessage",
    "Tool",
    "ToolCall",
    "ToolCallDelta",
    "ToolResult",
    "ToolStream",
    "ToolStreamPhase",
    "Transcript",
    "TurnState",
    "TurnStateName",
    "UnsetType",
    "UserText",
]

Encoding: TypeAlias = Literal["pcm16", "pcmu", "opus"]
FailureCode: TypeAlias = Literal["INTERRUPTED", "REJECTED", "INVALID", "TIMEOUT", "FAILED"]
InterruptReason: TypeAlias = Literal["speech", "user", "keyboard"]
TurnStateName: TypeAlias = Literal["listening", "thinking", "speaking", "acting", "idle"]
ToolStreamPhase: TypeAlias = Literal[
    "start",
    "arguments-delta",
    "arguments-complete",
    "progress",
    "settled",
    "cancelled",
    "failed",
]


class _Object(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """A protocol object that keeps the members it does not recognise (§2.2)."""

    extra: dict[str, Any] | UnsetType = UNSET


class Format(_Object, frozen=True, kw_only=True):
    """An audio format (§8.2). ``sample_rate`` UNSET means the encoding's default."""

    encoding: Encoding
    sample_rate: int | UnsetType = UNSET

    @property
    def rate(self) -> int:
        """The sample rate in effect: pcm16 defaults to 24000 Hz, pcmu is 8000 Hz, opus 48000 Hz."""
        if isinstance(self.sample_rate, int):
            return self.sample_rate
        return _DEFAULT_RATE[self.encoding]


_DEFAULT_RATE: Final = {"pcm16": 24000, "pcmu": 8000, "opus": 48000}

PCM16_24K: Final = Format(encoding="pcm16", sample_rate=24000)


class Tool(_Object, frozen=True, kw_only=True):
    """A tool the client hosts (§5.2, §7). ``parameters`` is a JSON Schema for the arguments."""

    name: str
    description: str | UnsetType = UNSET
    parameters: dict[str, Any] | UnsetType = UNSET


class Message(_Object, frozen=True, kw_only=True, tag_field="type"):
    """Base of every control message; ``TYPE`` is its ``type`` member on the wire."""

    TYPE: ClassVar[str]


# --- client -> server -----------------------------------------------------------------


class Hello(Message, frozen=True, kw_only=True, tag="hello"):
    """Open a session, or resume one when ``session_id`` is set (§5.2, §5.4)."""

    session_id: str | UnsetType = UNSET
    resume_from: int | UnsetType = UNSET
    tools: tuple[Tool, ...] | UnsetType = UNSET
    input: Format | UnsetType = UNSET
    output: Format | UnsetType = UNSET
    capabilities: tuple[str, ...] | UnsetType = UNSET
    context: Any | UnsetType = UNSET
    auth: str | dict[str, Any] | UnsetType = UNSET


class UserText(Message, frozen=True, kw_only=True, tag="text"):
    """User text input (§6.3): the client's ``text``."""

    text: str


class Interrupt(Message, frozen=True, kw_only=True, tag="interrupt"):
    """The client closed ``epoch`` (§6.2)."""

    epoch: int
    reason: InterruptReason


class Playback(Message, frozen=True, kw_only=True, tag="playback"):
    """The user heard ``played_ms`` of audio item ``item_id`` (§8.4)."""

    item_id: str
    played_ms: int


class ToolResult(Message, frozen=True, kw_only=True, tag="tool.result"):
    """The one result of a tool call (§7.2). Build with :meth:`success` or :meth:`failure`."""

    call_id: str
    epoch: int
    ok: bool
    output: Any | UnsetType = UNSET
    code: FailureCode | UnsetType = UNSET
    message: str | UnsetType | None = UNSET

    @classmethod
    def success(cls, call_id: str, epoch: int, output: Any = None) -> ToolResult:
        return cls(call_id=call_id, epoch=epoch, ok=True, output=output)

    @classmethod
    def failure(
        cls, call_id: str, epoch: int, code: FailureCode, message: str | None = None
    ) -> ToolResult:
        return cls(call_id=call_id, epoch=epoch, ok=False, code=code, message=message)


class ContextUpdate(Message, frozen=True, kw_only=True, tag="context"):
    """Replace the application context; ``None`` clears it (§5.5)."""

    context: Any


class Ack(Message, frozen=True, kw_only=True, tag="ack"):
    """Acknowledge the peer's sequenced messages up to ``up_to`` (§4.2). Both directions."""

    up_to: int


class Ping(Message, frozen=True, kw_only=True, tag="ping"):
    """Client heartbeat (§4.4)."""


# --- server -> client -----------------------------------------------------------------


class Ready(Message, frozen=True, kw_only=True, tag="ready"):
    """The session is open (§5.2); ``resumed_from`` is set iff it was resumed (§5.4)."""

    session_id: str
    input: Format
    output: Format
    resumed_from: int | UnsetType = UNSET
    capabilities: tuple[str, ...] | UnsetType = UNSET


class AudioStart(Message, frozen=True, kw_only=True, tag="audio.start"):
    """Output audio item ``item_id`` begins (§8.3)."""

    item_id: str
    turn_id: str
    epoch: int


class TurnState(Message, frozen=True, kw_only=True, tag="turn.state"):
    """The turn's state changed (§6.1)."""

    turn_id: str
    epoch: int
    state: TurnStateName


class Transcript(Message, frozen=True, kw_only=True, tag="transcript"):
    """A user or agent transcript; a partial is replaced by the next of the same item."""

    role: Literal["user", "agent"]
    text: str
    final: bool
    item_id: str | None
    turn_id: str | None


class AgentText(Message, frozen=True, kw_only=True, tag="text"):
    """One chunk of the agent's text response: the server's ``text``."""

    text: str
    turn_id: str | None


class ToolCallDelta(Message, frozen=True, kw_only=True, tag="tool.call.delta"):
    """Display-only progress of a tool call (§7.4)."""

    call_id: str
    turn_id: str
    epoch: int
    preview: Any


class ToolCall(Message, frozen=True, kw_only=True, tag="tool.call"):
    """Run client tool ``name`` (§7.1)."""

    call_id: str
    name: str
    arguments: Any
    turn_id: str
    epoch: int


class ToolStream(Message, frozen=True, kw_only=True, tag="tool.stream"):
    """One phase of a tool call's lifecycle (§7.5, only with tool-stream-v1)."""

    call_id: str
    name: str
    turn_id: str
    epoch: int
    phase: ToolStreamPhase
    delta: str | UnsetType = UNSET
    arguments: Any | UnsetType = UNSET
    progress: Any | UnsetType = UNSET
    ok: bool | UnsetType = UNSET
    code: FailureCode | UnsetType = UNSET
    message: str | UnsetType = UNSET


class Interrupted(Message, frozen=True, kw_only=True, tag="interrupted"):
    """The server closed ``epoch`` (§6.2)."""

    epoch: int


class Pong(Message, frozen=True, kw_only=True, tag="pong"):
    """Heartbeat answer (§4.4)."""


class Error(Message, frozen=True, kw_only=True, tag="error"):
    """Something went wrong (§9). ``code`` is an open set (§9.2)."""

    code: str
    message: str
    recoverable: bool


ClientMessage: TypeAlias = (
    Hello | UserText | Interrupt | Playback | ToolResult | ContextUpdate | Ack | Ping
)
#: The client's sequenced messages (§4.1): what it keeps until acknowledged.
ClientSequencedMessage: TypeAlias = UserText | ContextUpdate | Interrupt | Playback | ToolResult
ServerMessage: TypeAlias = (
    Ready
    | AudioStart
    | TurnState
    | Transcript
    | AgentText
    | ToolCallDelta
    | ToolCall
    | ToolStream
    | Interrupted
    | Ack
    | Pong
    | Error
)

CLIENT_TYPES: Final[tuple[type[Message], ...]] = (
    Hello,
    UserText,
    Interrupt,
    Playback,
    ToolResult,
    ContextUpdate,
    Ack,
    Ping,
)
SERVER_TYPES: Final[tuple[type[Message], ...]] = (
    Ready,
    AudioStart,
    TurnState,
    Transcript,
    AgentText,
    ToolCallDelta,
    ToolCall,
    ToolStream,
    Interrupted,
    Ack,
    Pong,
    Error,
)


M = TypeVar("M", ClientMessage, ServerMessage)


class Decoded(msgspec.Struct, Generic[M], frozen=True, gc=False):
    """A valid message and the ``seq`` it arrived with. Exported by :mod:`.codec`, which
    decodes to it; defined here with the other structs, which stay interpreted when the
    core is compiled with mypyc (it does not pass the class options to msgspec)."""

    seq: int
    message: M


def _stamp_types() -> None:
    for cls in {*CLIENT_TYPES, *SERVER_TYPES}:
        tag = cls.__struct_config__.tag
        assert isinstance(tag, str)
        cls.TYPE = tag


_stamp_types()
