"""The server role, sans I/O: one :class:`ServerConnection` per WebSocket, one
:class:`ServerSession` per session, which outlives its connections (§5.1).

A driver feeds a connection the frames it receives, with the time, and writes out
what :meth:`ServerConnection.take_outbox` returns; it authenticates ``hello`` and
finds or creates the session when :meth:`take_events` reports a
:class:`HelloReceived`, then calls :meth:`ServerConnection.open` or one of the
``refuse_*`` methods. The agent talks to its :class:`ServerSession` through the
methods under "agent side"; the session reports what the client did as
:class:`AgentInput` events. The session stamps turn ids and epochs, gates closed
epochs and settles tool calls, so an agent never sees a seq, an ack or a closed
epoch's leftovers.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Final, Literal, NamedTuple, TypeAlias

from .capabilities import GLOBAL_TOOL_IDS, TOOL_STREAM, check_gated, negotiate
from .codec import DEFAULT_LIMITS, Decoded, Invalid, Limits, encode, shared_decoder
from .errors import ErrorCode, LocalProtocolError, recoverable_by_default
from .frames import FrameKind, build_frame, next_audio_seq, parse_frame
from .ids import new_id
from .messages import (
    PCM16_24K,
    UNSET,
    Ack,
    AgentText,
    AudioStart,
    ContextUpdate,
    Error,
    FailureCode,
    Format,
    Hello,
    Interrupt,
    Interrupted,
    Message,
    Ping,
    Playback,
    Pong,
    Ready,
    Tool,
    ToolCall,
    ToolCallDelta,
    ToolResult,
    ToolStream,
    Transcript,
    TurnState,
    TurnStateName,
    UserText,
)
from .streams import DEFAULT_MAX_KEPT, IncomingStream, OutgoingStream

__all__ = [
    "AgentInput",
    "AudioReceived",
    "Close",
    "CloseCode",
    "ConnectionState",
    "ContextChanged",
    "HelloReceived",
    "PlaybackReported",
    "ResponseInterrupted",
    "SendBinary",
    "SendText",
    "ServerConfig",
    "ServerConnection",
    "ServerSession",
    "SessionState",
    "ToolSettled",
    "UserTextReceived",
    "choose_format",
]


class CloseCode:
    """WebSocket close codes of §9.3 (advisory: the error before a close is authoritative)."""

    NORMAL: Final = 1000
    POLICY: Final = 1008
    START_FAILED: Final = 1011
    REPLACED: Final = 4000
    UNAUTHORIZED: Final = 4401
    UNKNOWN_SESSION: Final = 4404
    HEARTBEAT_TIMEOUT: Final = 4408


# --- what the core asks the driver to do ----------------------------------------------


class SendText(NamedTuple):
    data: bytes


class SendBinary(NamedTuple):
    data: bytes


class Close(NamedTuple):
    code: int
    reason: str


Outgoing: TypeAlias = SendText | SendBinary | Close


class HelloReceived(NamedTuple):
    """The connection got its ``hello``: authenticate it, then open or refuse (§5.2-5.4)."""

    hello: Hello


# --- what the session reports to the agent --------------------------------------------


class UserTextReceived(NamedTuple):
    text: str


class AudioReceived(NamedTuple):
    """Input audio in the session's input format; ``seq`` is the frame's audio seq."""

    payload: bytes
    seq: int


class ContextChanged(NamedTuple):
    """The application context, replaced in client-stream order (§5.5). Data, not instructions."""

    context: Any


class ToolSettled(NamedTuple):
    """A client tool call has its one result: the client's, TIMEOUT or INTERRUPTED (§7.2)."""

    call_id: str
    provider_id: str | None
    name: str
    turn_id: str
    ok: bool
    output: Any
    code: FailureCode | None
    message: str | None


class ResponseInterrupted(NamedTuple):
    """The client interrupted the response in flight and its epoch closed (§6.2, §6.3):
    stop the model. Not sent for interruptions the agent itself asked for."""

    turn_id: str
    epoch: int
    reason: str


class PlaybackReported(NamedTuple):
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


# --- configuration --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """What a server supports and the bounds it keeps (§4.4, §7.2, §11; docs/limits.md)."""

    capabilities: tuple[str, ...] = (TOOL_STREAM, GLOBAL_TOOL_IDS)
    heartbeat_timeout: float = 45.0
    tool_timeout: float = 30.0
    max_unacked: int = DEFAULT_MAX_KEPT
    limits: Limits = DEFAULT_LIMITS
    #: Control messages kept while the connection is opening (§5.1).
    max_kept_while_opening: int = 256
    #: Client tool calls awaiting a result at once.
    max_pending_calls: int = 64
    #: Invalid frames tolerated per ``invalid_window`` seconds before RATE_LIMITED.
    max_invalid: int = 100
    invalid_window: float = 10.0
    #: Audio items remembered for playback reports.
    remembered_items: int = 64


def _same_format(a: Format, b: Format) -> bool:
    return a.encoding == b.encoding and a.rate == b.rate


def choose_format(preferred: Format | None, supported: Iterable[Format]) -> Format:
    """The client's preference when the agent takes it unchanged, else pcm16 at 24 kHz (§8.2)."""
    if preferred is not None:
        for candidate in supported:
            if _same_format(preferred, candidate):
                return Format(encoding=preferred.encoding, sample_rate=preferred.rate)
    return PCM16_24K


# --- session --------------------------------------------------------------------------


@dataclass(slots=True)
class _Turn:
    id: str
    epoch: int
    state: TurnStateName


class _CallPhase(Enum):
    STARTED = 1  # arguments may still stream
    ISSUED = 2  # arguments complete: a client call awaits its result, a server call runs


@dataclass(slots=True)
class _Call:
    call_id: str
    provider_id: str | None
    name: str
    turn_id: str
    epoch: int
    client: bool
    phase: _CallPhase = _CallPhase.STARTED
    deadline: float | None = None


@dataclass(slots=True)
class _Item:
    id: str
    turn_id: str
    epoch: int
    sent_ms: float = 0.0


@dataclass(slots=True)
class SessionState:
    """Everything a session is, apart from the streams' kept bytes (see ServerSession)."""

    session_id: str
    principal: str | None
    capabilities: tuple[str, ...]
    input: Format
    output: Format
    tools: dict[str, Tool]
    context: Any = None
    epoch: int = 0
    turn: _Turn | None = None
    calls: dict[str, _Call] = field(default_factory=dict)
    items: dict[str, _Item] = field(default_factory=dict)
    audio_out_seq: int = 0
    parked_at: float | None = None
    closed: bool = False


_Active: TypeAlias = Literal["connected", "parked", "closed"]


class ServerSession:
    """One session: both sequence streams, the epoch, turns, tool calls, formats and
    capabilities (§5.1). Created by the driver for a new ``hello``; bound to one
    :class:`ServerConnection` at a time.
    """

    def __init__(
        self,
        hello: Hello,
        config: ServerConfig,
        *,
        principal: str | None = None,
        session_id: str | None = None,
        input_formats: tuple[Format, ...] = (PCM16_24K,),
        output_formats: tuple[Format, ...] = (PCM16_24K,),
    ) -> None:
        """``input_formats`` and ``output_formats`` are what the agent takes and
        produces unchanged; the session's formats are chosen from them (§8.2)."""
        self.config = config
        offered = hello.capabilities if hello.capabilities is not UNSET else ()
        tools = hello.tools if hello.tools is not UNSET else ()
        self.state = SessionState(
            session_id=session_id or new_id("s_"),
            principal=principal,
            capabilities=negotiate(offered, config.capabilities),
            input=choose_format(_opt(hello.input), input_formats),
            output=choose_format(_opt(hello.output), output_formats),
            tools={tool.name: tool for tool in tools},
            context=hello.context if hello.context is not UNSET else None,
        )
        self.outgoing = OutgoingStream(config.max_unacked)
        self.incoming = IncomingStream()
        self.connection: ServerConnection | None = None
        self._events: list[AgentInput] = []
        self._out: list[Outgoing] | None = None
        self._announced: str | None = None  # the item of the last audio.start on this connection
        self._tool_stream = TOOL_STREAM in self.state.capabilities

    # -- identity and lifecycle --

    @property
    def session_id(self) -> str:
        return self.state.session_id

    @property
    def principal(self) -> str | None:
        return self.state.principal

    @property
    def status(self) -> _Active:
        if self.state.closed:
            return "closed"
        return "connected" if self.connection is not None else "parked"

    @property
    def capabilities(self) -> tuple[str, ...]:
        return self.state.capabilities

    @property
    def epoch(self) -> int:
        return self.state.epoch

    @property
    def tools(self) -> dict[str, Tool]:
        """The client's tools, as declared when the session opened (§5.4)."""
        return self.state.tools

    @property
    def context(self) -> Any:
        return self.state.context

    def take_events(self) -> list[AgentInput]:
        """What the client did since the last call, in order, for the agent."""
        events, self._events = self._events, []
        return events

    def close(self, reason: str = "session closed", code: int = CloseCode.NORMAL) -> None:
        """End the session (§5.6): its connection closes with ``code``; nothing resumes it."""
        if self.state.closed:
            return
        self.state.closed = True
        if self.connection is not None:
            self.connection._session_closed(code, reason)
        self._detach()

    def park(self, now: float) -> None:
        """The connection ended: wait for a resume (§5.1). The driver closes the session
        when the resume window ends."""
        self._detach()
        if not self.state.closed:
            self.state.parked_at = now

    def expired(self, now: float, resume_window: float) -> bool:
        parked_at = self.state.parked_at
        return (
            parked_at is not None and self.connection is None and now >= parked_at + resume_window
        )

    def _detach(self) -> None:
        self.connection = None
        self._out = None
        self._announced = None

    def _attach(self, connection: ServerConnection, now: float) -> None:
        self.connection = connection
        self._out = connection._outbox
        self._announced = None  # §8.3: a resumed connection starts without a current item
        self.state.parked_at = None

    # -- sending --

    def _send(self, message: Message) -> None:
        """Send a sequenced message: numbered, kept for resume, written if connected."""
        if self.state.closed:
            return
        data = self.outgoing.send(message)
        if self._out is not None:
            self._out.append(SendText(data))
        if self.outgoing.exhausted:
            # §4.1: nothing may follow seq 4294967295; the client opens a new session.
            self.close("sequence numbers exhausted; open a new session")

    def _send_transient(self, message: Message) -> None:
        if self._out is not None:
            self._out.append(SendText(encode(message, 0)))

    def send_error(self, code: str, message: str, recoverable: bool) -> None:
        """A sequenced ``error`` (§4.1: errors are sequenced once a session is bound)."""
        self._send(Error(code=code, message=message, recoverable=recoverable))

    # -- client input (called by ServerConnection once the session is bound) --

    def _receive(self, decoded: Decoded[Any], now: float) -> None:
        message = decoded.message
        if decoded.seq:
            if not self.incoming.receive(decoded.seq, now):
                return  # §4.3 duplicate: not handled again, acknowledged again
            self._handle_sequenced(message, now)
        elif isinstance(message, Ack):
            self.outgoing.ack(message.up_to)
        elif isinstance(message, Ping):
            self._send_transient(Pong())
        elif isinstance(message, Hello):
            self.send_error(
                ErrorCode.DUPLICATE_HELLO, "this connection already has a session (§5.1)", True
            )

    def _handle_sequenced(self, message: Message, now: float) -> None:
        if isinstance(message, UserText):
            self._interrupt_in_flight("user")  # §6.3
            self._events.append(UserTextReceived(message.text))
        elif isinstance(message, Interrupt):
            turn = self.state.turn
            # messages.md: a stale interrupt (naming an epoch before the response's) has no effect.
            if turn is not None and turn.epoch <= message.epoch:
                self._interrupt_in_flight(message.reason)
        elif isinstance(message, ToolResult):
            self._tool_result(message, now)
        elif isinstance(message, ContextUpdate):
            self.state.context = message.context
            self._events.append(ContextChanged(message.context))
        elif isinstance(message, Playback):
            self._playback(message)

    def _tool_result(self, result: ToolResult, now: float) -> None:
        call = self.state.calls.get(result.call_id)
        if call is None or not call.client or call.phase is not _CallPhase.ISSUED:
            return  # §7.2: unknown or already settled: ignored
        if result.ok:
            self._settle(call, True, result.output, None, None)
        else:
            message = result.message if isinstance(result.message, str) else None
            code = result.code if result.code is not UNSET else "FAILED"
            self._settle(call, False, None, code, message)

    def _settle(
        self,
        call: _Call,
        ok: bool,
        output: Any,
        code: FailureCode | None,
        message: str | None,
    ) -> None:
        del self.state.calls[call.call_id]
        if self._tool_stream:
            failure = {} if ok else {"code": code or "FAILED"}
            self._send(self._stream_message(call, "settled", ok=ok, **failure))
        if call.client:
            self._events.append(
                ToolSettled(
                    call.call_id,
                    call.provider_id,
                    call.name,
                    call.turn_id,
                    ok,
                    output,
                    code,
                    message,
                )
            )

    def _playback(self, playback: Playback) -> None:
        item = self.state.items.get(playback.item_id)
        played = playback.played_ms
        if item is not None:
            played = min(played, int(item.sent_ms))
        self._events.append(
            PlaybackReported(playback.item_id, played, item.turn_id if item else None)
        )

    def _interrupt_in_flight(self, reason: str, *, tell_agent: bool = True) -> bool:
        """§6.2 server side: stop the response in flight, if any, and close its epoch.
        The agent hears of it unless it asked for it (``tell_agent`` False)."""
        turn = self.state.turn
        if turn is None or turn.state == "listening":
            return False
        closed = turn.epoch
        for call in [c for c in self.state.calls.values() if c.epoch <= closed]:
            del self.state.calls[call.call_id]
            if self._tool_stream:
                self._send(self._stream_message(call, "cancelled"))
            if call.client and call.phase is _CallPhase.ISSUED:
                self._events.append(
                    ToolSettled(
                        call.call_id,
                        call.provider_id,
                        call.name,
                        call.turn_id,
                        False,
                        None,
                        "INTERRUPTED",
                        "the turn was interrupted",
                    )
                )
        self.state.turn = None
        self.state.epoch += 1  # §6.1: the epoch increases when a turn is interrupted
        self._send(Interrupted(epoch=closed))
        if tell_agent:
            self._events.append(ResponseInterrupted(turn.id, closed, reason))
        return True

    def _audio_in(self, payload: bytes, seq: int) -> None:
        self._events.append(AudioReceived(payload, seq))

    def timer_deadline(self) -> float | None:
        """The earliest of the ack deadline (§4.2) and the tool timeouts (§7.2)."""
        deadlines = [c.deadline for c in self.state.calls.values() if c.deadline is not None]
        ack = self.incoming.ack_deadline()
        if ack is not None and self._out is not None:
            deadlines.append(ack)
        return min(deadlines) if deadlines else None

    def on_timer(self, now: float) -> None:
        if self._out is not None:
            up_to = self.incoming.take_ack(now)
            if up_to is not None:
                self._send_transient(Ack(up_to=up_to))
        for call in [c for c in self.state.calls.values() if c.deadline is not None]:
            if call.deadline is not None and now >= call.deadline:
                self._settle(call, False, None, "TIMEOUT", "no result arrived in time")

    # -- agent side: turns --

    @property
    def turn_id(self) -> str | None:
        """The turn in progress, if any."""
        turn = self.state.turn
        return turn.id if turn is not None else None

    @property
    def response_in_flight(self) -> bool:
        turn = self.state.turn
        return turn is not None and turn.state != "listening"

    def begin_turn(self, state: TurnStateName = "thinking") -> str:
        """Start a turn in ``state``: a new epoch and turn id (§6.1). A turn still in
        progress ends first (idle)."""
        if state == "idle":
            raise LocalProtocolError("a turn begins in listening, thinking, speaking or acting")
        if self.state.turn is not None:
            self.end_turn(self.state.turn.id)
        self.state.epoch += 1
        turn = _Turn(new_id("t_"), self.state.epoch, state)
        self.state.turn = turn
        self._send(TurnState(turn_id=turn.id, epoch=turn.epoch, state=state))
        return turn.id

    def set_state(self, turn_id: str, state: TurnStateName) -> bool:
        """Report the turn's new state; ``idle`` ends it. False if the turn is over."""
        turn = self._turn(turn_id)
        if turn is None:
            return False
        if state == "idle":
            return self.end_turn(turn_id)
        if turn.state != state:
            turn.state = state
            self._send(TurnState(turn_id=turn.id, epoch=turn.epoch, state=state))
        return True

    def end_turn(self, turn_id: str) -> bool:
        """The turn is done: ``turn.state idle``. False if it was already over."""
        turn = self._turn(turn_id)
        if turn is None:
            return False
        for call in [c for c in self.state.calls.values() if c.turn_id == turn.id]:
            if call.phase is _CallPhase.STARTED:  # its arguments can no longer complete
                self.fail_tool_call(call.call_id, "the turn ended before the call was issued")
        self.state.turn = None
        self._send(TurnState(turn_id=turn.id, epoch=turn.epoch, state="idle"))
        return True

    def user_started_speaking(self) -> str:
        """Speech detected: interrupt the response in flight (§6.2, reason speech), then
        begin a ``listening`` turn, or keep the listening turn in progress."""
        turn = self.state.turn
        if turn is not None and turn.state == "listening":
            return turn.id
        self._interrupt_in_flight("speech", tell_agent=False)
        return self.begin_turn("listening")

    def interrupt_response(self, reason: str = "server") -> bool:
        """Interrupt the response in flight on the server's own initiative (§6.2)."""
        return self._interrupt_in_flight(reason, tell_agent=False)

    def _turn(self, turn_id: str) -> _Turn | None:
        turn = self.state.turn
        return turn if turn is not None and turn.id == turn_id else None

    # -- agent side: text, transcripts, errors --

    def send_text(self, turn_id: str, text: str) -> bool:
        """One chunk of the agent's text. Dropped (False) when the turn is over."""
        if self._turn(turn_id) is None:
            return False
        self._send(AgentText(text=text, turn_id=turn_id))
        return True

    def send_transcript(
        self,
        role: Literal["user", "agent"],
        text: str,
        *,
        final: bool = True,
        item_id: str | None = None,
        turn_id: str | None = None,
    ) -> bool:
        """A transcript; an agent transcript of a turn that is over is dropped."""
        if role == "agent" and turn_id is not None and self._turn(turn_id) is None:
            return False
        self._send(Transcript(role=role, text=text, final=final, item_id=item_id, turn_id=turn_id))
        return True

    def agent_error(self, message: str, *, recoverable: bool = True) -> None:
        """``error AGENT_ERROR`` (§9.2), e.g. when the model connection fails."""
        self.send_error(ErrorCode.AGENT_ERROR, message, recoverable)

    # -- agent side: audio --

    def start_audio(self, turn_id: str, item_id: str | None = None) -> str | None:
        """Begin an output audio item of the turn (§8.3); None when the turn is over."""
        turn = self._turn(turn_id)
        if turn is None:
            return None
        item = _Item(item_id or new_id("i_"), turn.id, turn.epoch)
        items = self.state.items
        items[item.id] = item
        while len(items) > self.config.remembered_items:
            del items[next(iter(items))]
        self._announce(item)
        return item.id

    def _announce(self, item: _Item) -> None:
        self._send_transient(AudioStart(item_id=item.id, turn_id=item.turn_id, epoch=item.epoch))
        self._announced = item.id if self._out is not None else None

    def send_audio(self, item_id: str, payload: bytes, duration_ms: float | None = None) -> bool:
        """One output frame of ``item_id``; False when its turn is over. While no
        connection is bound the frame is lost (audio is never resent, §5.4), but the
        turn goes on, so that is still True."""
        item = self.state.items.get(item_id)
        turn = self.state.turn
        if item is None or turn is None or turn.epoch != item.epoch:
            return False
        if self._out is None:
            return True
        item.sent_ms += duration_ms if duration_ms is not None else self._duration(payload)
        if self._announced != item_id:
            self._announce(item)
        seq = self.state.audio_out_seq
        self.state.audio_out_seq = next_audio_seq(seq)
        self._out.append(SendBinary(build_frame(FrameKind.OUTPUT, seq, payload)))
        return True

    def _duration(self, payload: bytes) -> float:
        fmt = self.state.output
        if fmt.encoding == "pcm16":
            return len(payload) * 500.0 / fmt.rate
        if fmt.encoding == "pcmu":
            return len(payload) / 8.0
        return 20.0  # one Opus packet; the common frame size when the agent does not say

    # -- agent side: tool calls --

    def start_tool_call(
        self,
        turn_id: str,
        name: str,
        *,
        provider_id: str | None = None,
        server_side: bool = False,
    ) -> str | None:
        """A tool call begins (its arguments may stream). Returns its public ``callId``,
        a new one for every call even when the provider reuses its own id (§6.3), or None
        when the turn is over or the client does not host ``name``."""
        turn = self._turn(turn_id)
        if turn is None or (not server_side and name not in self.state.tools):
            return None
        call = _Call(new_id("c_"), provider_id, name, turn.id, turn.epoch, not server_side)
        self.state.calls[call.call_id] = call
        if self._tool_stream:
            self._send(self._stream_message(call, "start"))
        return call.call_id

    def tool_arguments_delta(self, call_id: str, delta: str) -> bool:
        """The next fragment of the arguments' JSON text: a preview (§7.4) or an
        ``arguments-delta`` (§7.5)."""
        call = self.state.calls.get(call_id)
        if call is None or call.phase is not _CallPhase.STARTED:
            return False
        if self._tool_stream:
            self._send(self._stream_message(call, "arguments-delta", delta=delta))
        else:
            self._send(
                ToolCallDelta(
                    call_id=call.call_id,
                    turn_id=call.turn_id,
                    epoch=call.epoch,
                    preview={"argumentsDelta": delta},
                )
            )
        return True

    def issue_tool_call(self, call_id: str, arguments: Any, now: float) -> bool:
        """The arguments are complete: a client call is sent as ``tool.call`` and awaits
        its result (timing out after ``tool_timeout``); a server call starts running."""
        call = self.state.calls.get(call_id)
        if call is None or call.phase is not _CallPhase.STARTED:
            return False
        if call.client:
            pending = sum(
                1 for c in self.state.calls.values() if c.client and c.phase is _CallPhase.ISSUED
            )
            if pending >= self.config.max_pending_calls:
                self.fail_tool_call(call_id, "too many tool calls await a result (§11)")
                return False
        call.phase = _CallPhase.ISSUED
        if self._tool_stream:
            self._send(self._stream_message(call, "arguments-complete", arguments=arguments))
        if call.client:
            call.deadline = now + self.config.tool_timeout
            self._send(
                ToolCall(
                    call_id=call.call_id,
                    name=call.name,
                    arguments=arguments,
                    turn_id=call.turn_id,
                    epoch=call.epoch,
                )
            )
        return True

    def call_tool(
        self, turn_id: str, name: str, arguments: Any, now: float, *, provider_id: str | None = None
    ) -> str | None:
        """Start and issue a client tool call at once (a model that does not stream arguments)."""
        call_id = self.start_tool_call(turn_id, name, provider_id=provider_id)
        if call_id is None or not self.issue_tool_call(call_id, arguments, now):
            return None
        return call_id

    def is_client_call(self, call_id: str) -> bool:
        """Whether ``call_id`` is a client tool call still awaiting its result."""
        call = self.state.calls.get(call_id)
        return call is not None and call.client

    def tool_progress(self, call_id: str, progress: Any) -> bool:
        """Progress a running server tool reports; visible only with tool-stream-v1 (§7.5)."""
        call = self.state.calls.get(call_id)
        if call is None or call.client or call.phase is not _CallPhase.ISSUED:
            return False
        if self._tool_stream:
            self._send(self._stream_message(call, "progress", progress=progress))
        return True

    def settle_server_call(self, call_id: str, ok: bool, code: FailureCode | None = None) -> bool:
        """A server tool finished; its output is never sent to the client (§7.5)."""
        call = self.state.calls.get(call_id)
        if call is None or call.client or call.phase is not _CallPhase.ISSUED:
            return False
        self._settle(call, ok, None, None if ok else (code or "FAILED"), None)
        return True

    def fail_tool_call(self, call_id: str, message: str) -> bool:
        """The model stopped before completing the arguments: the call is never issued."""
        call = self.state.calls.get(call_id)
        if call is None or call.phase is not _CallPhase.STARTED:
            return False
        del self.state.calls[call_id]
        if self._tool_stream:
            self._send(self._stream_message(call, "failed", message=message))
        return True

    def _stream_message(self, call: _Call, phase: Any, **members: Any) -> ToolStream:
        check_gated(ToolStream.TYPE, self.state.capabilities)
        return ToolStream(
            call_id=call.call_id,
            name=call.name,
            turn_id=call.turn_id,
            epoch=call.epoch,
            phase=phase,
            **members,
        )


def _opt(value: Format | Any) -> Format | None:
    return value if isinstance(value, Format) else None


# --- connection -----------------------------------------------------------------------


class ConnectionState(Enum):
    AWAITING_HELLO = "awaiting hello"
    OPENING = "opening"
    OPEN = "open"
    CLOSED = "closed"


class ServerConnection:
    """One WebSocket on the server, through the states of the §5.1 server table."""

    def __init__(self, config: ServerConfig, now: float) -> None:
        self.config = config
        self.state = ConnectionState.AWAITING_HELLO
        self.session: ServerSession | None = None
        self._decoder = shared_decoder("client", config.limits)
        self._outbox: list[Outgoing] = []
        self._events: list[HelloReceived] = []
        self._kept: list[Decoded[Any]] = []
        self._last_frame = now
        self._invalid: deque[float] | None = None  # made on the first invalid frame
        self.hello: Hello | None = None

    # -- driver interface --

    def take_outbox(self) -> list[Outgoing]:
        """Frames to write and closes to perform, in order."""
        out, self._outbox = self._outbox, []
        if self.session is not None and self.session._out is out:
            self.session._out = self._outbox
        return out

    def take_events(self) -> list[HelloReceived]:
        events, self._events = self._events, []
        return events

    def receive_text(self, data: bytes | str, now: float) -> None:
        self._last_frame = now
        if self.state is ConnectionState.CLOSED:
            return
        decoded = self._decoder.decode(data)
        if isinstance(decoded, Invalid):
            self._invalid_input(decoded, now)
            return
        message = decoded.message
        state = self.state
        if state is ConnectionState.OPEN:
            assert self.session is not None
            self.session._receive(decoded, now)
        elif isinstance(message, Ping):
            self._send_unbound(Pong())  # §4.4: pong in any state
        elif state is ConnectionState.AWAITING_HELLO:
            if isinstance(message, Hello):
                self.state = ConnectionState.OPENING
                self.hello = message
                self._events.append(HelloReceived(message))
            else:
                self._error(
                    ErrorCode.NO_SESSION, f"{message.TYPE} before hello: send hello first (§5.1)"
                )
        elif isinstance(message, Hello):  # opening
            self._error(ErrorCode.DUPLICATE_HELLO, "hello was already received (§5.1)")
        elif len(self._kept) >= self.config.max_kept_while_opening:
            self._error(
                ErrorCode.LIMIT_EXCEEDED,
                f"more than {self.config.max_kept_while_opening} messages before ready (§11)",
            )
        else:
            self._kept.append(decoded)  # §5.1: kept, in order, handled after ready

    def receive_binary(self, data: bytes, now: float) -> None:
        self._last_frame = now
        if self.state is ConnectionState.CLOSED:
            return
        limit = self.config.limits.max_audio_frame_bytes
        frame = (
            parse_frame(data, "server")
            if len(data) <= limit
            else Invalid(
                ErrorCode.LIMIT_EXCEEDED,
                f"audio frame of {len(data)} bytes; this server takes at most {limit} (§11)",
            )
        )
        if isinstance(frame, Invalid):
            self._invalid_input(frame, now)
        elif self.state is ConnectionState.OPEN and self.session is not None:
            self.session._audio_in(frame.payload, frame.seq)
        # §8.1: input audio before ready is ignored

    def frame_received(self, now: float) -> None:
        """A WebSocket control frame arrived; it counts for the heartbeat (§4.4)."""
        self._last_frame = now

    def connection_lost(self, now: float) -> None:
        """The WebSocket ended: a bound session is parked (§5.1)."""
        self.state = ConnectionState.CLOSED
        session = self.session
        if session is not None and session.connection is self:
            session.park(now)
        self.session = None

    def timer_deadline(self) -> float | None:
        if self.state is ConnectionState.CLOSED:
            return None
        deadline = self._last_frame + self.config.heartbeat_timeout
        if self.session is not None:
            session_deadline = self.session.timer_deadline()
            if session_deadline is not None:
                deadline = min(deadline, session_deadline)
        return deadline

    def on_timer(self, now: float) -> None:
        if self.state is ConnectionState.CLOSED:
            return
        if now >= self._last_frame + self.config.heartbeat_timeout:
            # §4.4: no frame for the heartbeat timeout; the session stays resumable.
            self._close(CloseCode.HEARTBEAT_TIMEOUT, "heartbeat timeout")
            return
        if self.session is not None:
            self.session.on_timer(now)

    # -- decisions on the hello (opening) --

    def refuse_unauthorized(self, reason: str = "authentication failed") -> None:
        """§5.3: ``error UNAUTHORIZED`` with seq 0, then close 4401."""
        self._refuse(ErrorCode.UNAUTHORIZED, reason, CloseCode.UNAUTHORIZED)

    def refuse_resume(self) -> None:
        """§5.4: unknown, expired and foreign sessions get the very same answer."""
        self._refuse(
            ErrorCode.RESUME_FAILED, "the session cannot be resumed", CloseCode.UNKNOWN_SESSION
        )

    def refuse_start(self, reason: str = "the session could not start") -> None:
        """§5.1: ``error START_FAILED``, close 1011."""
        self._refuse(ErrorCode.START_FAILED, reason, CloseCode.START_FAILED)

    def open(self, session: ServerSession, now: float) -> ServerConnection | None:
        """Bind ``session`` (new, or the one ``hello.sessionId`` names) and send ``ready``.

        For a resume, resends what the client missed (§5.4), or refuses with
        ``RESUME_FAILED`` and closes the session when that is impossible. Then handles
        the messages kept while opening. Returns the older connection this one replaced
        (it has a close 4000 to write), if any.
        """
        if self.state is not ConnectionState.OPENING or self.hello is None:
            raise LocalProtocolError("open() answers a HelloReceived event")
        hello = self.hello
        resuming = hello.session_id is not UNSET
        resume_from = hello.resume_from if resuming and hello.resume_from is not UNSET else 0
        # A new session sends what it produced before ready right after it (§5.2).
        resend = session.outgoing.resend_after(resume_from)
        if resend is None or session.state.closed:
            self.refuse_resume()
            session.close("resume failed")
            return None
        replaced = session.connection
        if replaced is not None:
            replaced._replaced()
        self.session = session
        self.state = ConnectionState.OPEN
        session._attach(self, now)
        ready = Ready(
            session_id=session.session_id,
            input=session.state.input,
            output=session.state.output,
            capabilities=session.capabilities,
            resumed_from=session.incoming.last_seq if resuming else UNSET,
        )
        self._outbox.append(SendText(encode(ready, 0)))
        self._outbox.extend(SendText(data) for data in resend)
        kept, self._kept = self._kept, []
        for decoded in kept:
            session._receive(decoded, now)
        return replaced

    # -- internals --

    def _replaced(self) -> None:
        self._close(CloseCode.REPLACED, "replaced by a newer connection")

    def _session_closed(self, code: int, reason: str) -> None:
        self._close(code, reason)

    def _close(self, code: int, reason: str) -> None:
        if self.state is ConnectionState.CLOSED:
            return
        # The session stays bound until the driver reports the socket gone
        # (connection_lost), which parks it then: the resume window starts at that time.
        self.state = ConnectionState.CLOSED
        self._outbox.append(Close(code, reason))

    def _refuse(self, code: ErrorCode, reason: str, close_code: int) -> None:
        self._error(code, reason)
        self._close(close_code, reason)

    def _error(self, code: ErrorCode, reason: str, recoverable: bool | None = None) -> None:
        """An ``error``: sequenced once a session is bound, seq 0 before (§4.1)."""
        if recoverable is None:
            recoverable = recoverable_by_default(code)
        if self.state is ConnectionState.OPEN and self.session is not None:
            self.session.send_error(code, reason, recoverable)
        else:
            self._send_unbound(Error(code=code, message=reason, recoverable=recoverable))

    def _send_unbound(self, message: Message) -> None:
        self._outbox.append(SendText(encode(message, 0)))

    def _invalid_input(self, invalid: Invalid, now: float) -> None:
        window = self._invalid
        if window is None:
            window = self._invalid = deque()
        window.append(now)
        while window and window[0] <= now - self.config.invalid_window:
            window.popleft()
        if len(window) > self.config.max_invalid:
            self._refuse(
                ErrorCode.RATE_LIMITED,
                f"more than {self.config.max_invalid} invalid frames in "
                f"{self.config.invalid_window:g} s",
                CloseCode.POLICY,
            )
            return
        self._error(invalid.code, invalid.reason, True)
