"""The client role, sans I/O: a :class:`ClientSession` across its connections (§5.1).

A driver calls :meth:`ClientSession.connection_made` when a WebSocket opens, feeds it
the frames it receives with the time, writes out :meth:`take_outbox`, and hands
:meth:`take_events` to the application. The session keeps the epoch gate (§6.2):
tool calls of a closed epoch never start, and output audio of a closed epoch is never
delivered. Tool calls run one at a time in the order received (§7.1): the session
emits :class:`RunTool` for the next call once the previous one has its result, and the
driver answers with :meth:`ClientSession.tool_finished`.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Final, NamedTuple, TypeAlias

from .capabilities import TOOL_STREAM
from .codec import DEFAULT_LIMITS, Invalid, Limits, encode, shared_decoder
from .errors import ErrorCode, LocalProtocolError
from .frames import FrameKind, build_frame, next_audio_seq, parse_frame
from .messages import (
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
    InterruptReason,
    Message,
    Ping,
    Playback,
    Ready,
    Tool,
    ToolCall,
    ToolCallDelta,
    ToolResult,
    ToolStream,
    Transcript,
    TurnState,
    UserText,
)
from .server import Close, CloseCode, SendBinary, SendText
from .streams import DEFAULT_MAX_KEPT, IncomingStream, OutgoingStream

__all__ = [
    "AudioChunk",
    "AudioStarted",
    "CancelTool",
    "ClientEvent",
    "ClientSession",
    "ClientState",
    "Connected",
    "ErrorReceived",
    "InterruptedEpoch",
    "PlaybackStop",
    "RunTool",
    "SessionFailed",
    "TextReceived",
    "ToolPreview",
    "ToolStreamUpdate",
    "TranscriptReceived",
    "TurnChanged",
]

#: §4.4 RECOMMENDED ping interval.
PING_INTERVAL: Final = 15.0
#: §4.4: a connection silent for this many ping intervals is dead.
DEAD_AFTER_INTERVALS: Final = 2.5


class ClientState(Enum):
    IDLE = "idle"  # no connection
    WAITING = "waiting"  # hello sent, no ready yet
    OPEN = "open"
    CLOSED = "closed"  # the session cannot continue


# --- events for the application -------------------------------------------------------


class Connected(NamedTuple):
    """``ready`` arrived: the session is open (new) or resumed."""

    session_id: str
    resumed: bool
    input: Format
    output: Format
    capabilities: tuple[str, ...]


class SessionFailed(NamedTuple):
    """The session cannot go on: RESUME_FAILED, START_FAILED, ... (§5.4), or the server
    refused the credential (UNAUTHORIZED, §5.3), which only a fresh credential can fix."""

    code: str
    message: str


class ErrorReceived(NamedTuple):
    """An ``error`` from the server, or an invalid frame from it (§9.1)."""

    code: str
    message: str
    recoverable: bool


class TurnChanged(NamedTuple):
    turn_id: str
    epoch: int
    state: str


class TextReceived(NamedTuple):
    text: str
    turn_id: str | None


class TranscriptReceived(NamedTuple):
    role: str
    text: str
    final: bool
    item_id: str | None
    turn_id: str | None


class AudioStarted(NamedTuple):
    item_id: str
    turn_id: str
    epoch: int


class AudioChunk(NamedTuple):
    """Output audio of an item whose epoch is open, in the session's output format."""

    item_id: str
    payload: bytes


class PlaybackStop(NamedTuple):
    """Stop playback now and discard buffered output audio (§8.4, §6.2)."""

    epoch: int


class InterruptedEpoch(NamedTuple):
    """The epoch closed, by the server (``interrupted``) or locally (:meth:`interrupt`)."""

    epoch: int
    local: bool


class ToolPreview(NamedTuple):
    """``tool.call.delta``: display only; never run anything because of it (§7.4)."""

    call_id: str
    turn_id: str
    epoch: int
    preview: Any


class ToolStreamUpdate(NamedTuple):
    """A ``tool.stream`` phase (§7.5), or ``cancelled`` decided locally when the
    client closed the call's epoch."""

    call_id: str
    name: str
    turn_id: str
    epoch: int
    phase: str
    message: ToolStream | None


class RunTool(NamedTuple):
    """Run this call now; answer with :meth:`ClientSession.tool_finished`."""

    call_id: str
    name: str
    arguments: Any
    turn_id: str
    epoch: int


class CancelTool(NamedTuple):
    """The running call's epoch closed: cancel it cooperatively; its result is already
    sent (INTERRUPTED) and a later outcome is discarded (§7.2)."""

    call_id: str


ClientEvent: TypeAlias = (
    Connected
    | SessionFailed
    | ErrorReceived
    | TurnChanged
    | TextReceived
    | TranscriptReceived
    | AudioStarted
    | AudioChunk
    | PlaybackStop
    | InterruptedEpoch
    | ToolPreview
    | ToolStreamUpdate
    | RunTool
    | CancelTool
)

_TERMINAL_PHASES: Final = frozenset({"settled", "cancelled", "failed"})


@dataclass(slots=True)
class _Item:
    id: str
    epoch: int
    received_ms: float = 0.0


@dataclass(slots=True)
class _Calls:
    """Tool calls: the queue, the one running, and every callId already answered."""

    queue: deque[ToolCall] = field(default_factory=deque)
    running: ToolCall | None = None
    answered: set[str] = field(default_factory=set)


class ClientSession:
    """The client side of one session, across connections and resumes."""

    def __init__(
        self,
        *,
        tools: tuple[Tool, ...] = (),
        input: Format | None = None,
        output: Format | None = None,
        capabilities: tuple[str, ...] = (),
        context: Any = UNSET,
        auth: str | dict[str, Any] | None = None,
        max_kept: int = DEFAULT_MAX_KEPT,
        ping_interval: float = PING_INTERVAL,
        limits: Limits = DEFAULT_LIMITS,
    ) -> None:
        names = [tool.name for tool in tools]
        if len(set(names)) != len(names):
            raise LocalProtocolError("tool names must be unique (§5.2)")
        self.tools = {tool.name: tool for tool in tools}
        self.preferred_input = input
        self.preferred_output = output
        self.offered_capabilities = capabilities
        self.initial_context = context
        self.auth = auth
        self.ping_interval = ping_interval
        self.state = ClientState.IDLE
        self.session_id: str | None = None
        self.input: Format | None = None
        self.output: Format | None = None
        self.capabilities: tuple[str, ...] = ()
        self.outgoing = OutgoingStream(max_kept)
        self.incoming = IncomingStream()
        self.observed_epoch = 0
        self.closed_epoch: int | None = None
        self._decoder = shared_decoder("server", limits)
        self._outbox: list[SendText | SendBinary | Close] = []
        self._events: list[ClientEvent] = []
        self._calls = _Calls()
        self._item: _Item | None = None
        self._items: dict[str, _Item] = {}
        #: tool-stream-v1: the last phase seen of each call, and its message (§7.5).
        self._stream_messages: dict[str, tuple[str, ToolStream]] = {}
        self._audio_out_seq = 0
        self._last_sent = 0.0
        self._last_received = 0.0
        #: The server refused ``auth`` (§5.3): set a fresh credential before reconnecting.
        self.auth_refused = False

    # -- driver interface --

    def take_outbox(self) -> list[SendText | SendBinary | Close]:
        out, self._outbox = self._outbox, []
        return out

    def take_events(self) -> list[ClientEvent]:
        events, self._events = self._events, []
        return events

    @property
    def resumable(self) -> bool:
        """Whether a lost connection may be resumed (§5.4)."""
        return self.session_id is not None and self.state is not ClientState.CLOSED

    def connection_made(self, now: float) -> None:
        """A WebSocket opened: send ``hello``, resuming when a session exists (§5.1)."""
        if self.state is ClientState.CLOSED:
            raise LocalProtocolError("the session is closed; start a new ClientSession")
        self.auth_refused = False
        self._last_received = now
        self._item = None  # §8.3: a new connection starts without a current item
        if self.session_id is None:
            hello = Hello(
                tools=tuple(self.tools.values()) if self.tools else UNSET,
                input=self.preferred_input or UNSET,
                output=self.preferred_output or UNSET,
                capabilities=self.offered_capabilities or UNSET,
                context=self.initial_context,
                auth=self.auth if self.auth is not None else UNSET,
            )
        else:
            # §5.2: context only when opening; tools are those declared at the start (§5.4).
            hello = Hello(
                session_id=self.session_id,
                resume_from=self.incoming.last_seq,
                auth=self.auth if self.auth is not None else UNSET,
            )
        self.state = ClientState.WAITING
        self._write(encode(hello, 0), now)

    def connection_lost(self, now: float) -> None:
        if self.state is not ClientState.CLOSED:
            self.state = ClientState.IDLE
        self._item = None

    def receive_text(self, data: bytes | str, now: float) -> None:
        self._last_received = now
        if self.state is ClientState.CLOSED:
            return
        decoded = self._decoder.decode(data)
        if isinstance(decoded, Invalid):
            # §9.1: a client reports an invalid message and continues.
            self._events.append(ErrorReceived(decoded.code, decoded.reason, True))
            return
        message = decoded.message
        if decoded.seq:
            if self.state is not ClientState.OPEN:
                return  # nothing sequenced precedes ready on a connection
            if not self.incoming.receive(decoded.seq, now):
                return  # §4.3 duplicate
            self._handle_sequenced(message, now)
        elif isinstance(message, Ready):
            self._ready(message, now)
        elif isinstance(message, AudioStart):
            self._audio_start(message)
        elif isinstance(message, Ack):
            self.outgoing.ack(message.up_to)
        elif isinstance(message, Error):  # seq 0: no session bound to the connection
            self._error(message)

    def receive_binary(self, data: bytes, now: float) -> None:
        self._last_received = now
        frame = parse_frame(data, "client")
        if isinstance(frame, Invalid):
            return  # §8.1: a client drops a malformed frame
        item = self._item
        # §8.3: frames before any audio.start, and of a closed epoch, are discarded.
        if item is None or self._is_closed(item.epoch) or self.state is not ClientState.OPEN:
            return
        item.received_ms += self._duration(frame.payload)
        self._events.append(AudioChunk(item.id, frame.payload))

    def timer_deadline(self) -> float | None:
        if self.state in (ClientState.IDLE, ClientState.CLOSED):
            return None
        deadlines = [
            self._last_sent + self.ping_interval,
            self._last_received + DEAD_AFTER_INTERVALS * self.ping_interval,
        ]
        ack = self.incoming.ack_deadline()
        if ack is not None and self.state is ClientState.OPEN:
            deadlines.append(ack)
        return min(deadlines)

    def on_timer(self, now: float) -> None:
        if self.state in (ClientState.IDLE, ClientState.CLOSED):
            return
        if now >= self._last_received + DEAD_AFTER_INTERVALS * self.ping_interval:
            # §4.4: treat the connection as dead, close it and resume.
            self._outbox.append(Close(CloseCode.REPLACED, "no frame from the server"))
            self.connection_lost(now)
            return
        if self.state is ClientState.OPEN:
            up_to = self.incoming.take_ack(now)
            if up_to is not None:
                self._write(encode(Ack(up_to=up_to), 0), now)
        if now >= self._last_sent + self.ping_interval:
            self._write(encode(Ping(), 0), now)  # §4.4: allowed before ready too

    # -- application actions --

    def send_text(self, text: str, now: float) -> None:
        """User text input (§6.3)."""
        self._send(UserText(text=text), now)

    def update_context(self, context: Any, now: float) -> None:
        """Replace the application context; None clears it (§5.5)."""
        self._send(ContextUpdate(context=context), now)

    def interrupt(self, reason: InterruptReason, now: float) -> int:
        """The user interrupted: close the observed epoch locally at once, then tell the
        server (§6.2). Returns the closed epoch."""
        epoch = self.observed_epoch
        self._close_epoch(epoch, local=True, now=now)
        self._send(Interrupt(epoch=epoch, reason=reason), now)
        return epoch

    def playback(self, item_id: str, played_ms: float, now: float) -> int:
        """Report how much of ``item_id`` was played (§8.4), never more than was received."""
        item = self._items.get(item_id)
        limit = item.received_ms if item is not None else 0.0
        played = max(0, int(min(played_ms, limit)))
        self._send(Playback(item_id=item_id, played_ms=played), now)
        return played

    def send_audio(self, payload: bytes, now: float) -> bool:
        """One input audio frame; dropped (False) when no connection is open (audio is
        never sent before ready, nor resent, §5.1, §5.4)."""
        if self.state is not ClientState.OPEN:
            return False
        seq = self._audio_out_seq
        self._audio_out_seq = next_audio_seq(seq)
        self._outbox.append(SendBinary(build_frame(FrameKind.INPUT, seq, payload)))
        self._last_sent = now
        return True

    def tool_finished(
        self,
        call_id: str,
        ok: bool,
        now: float,
        *,
        output: Any = None,
        code: FailureCode | None = None,
        message: str | None = None,
    ) -> bool:
        """The running call ended. Sends its result unless it was already answered
        (interrupted), then starts the next call. False when the outcome is discarded."""
        running = self._calls.running
        if running is None or running.call_id != call_id:
            return False
        self._calls.running = None
        sent = self._answer(running, ok, now, output=output, code=code, message=message)
        self._next_call(now)
        return sent

    # -- internals: sending --

    def _write(self, data: bytes, now: float) -> None:
        self._outbox.append(SendText(data))
        self._last_sent = now

    def _send(self, message: Message, now: float) -> None:
        """A sequenced message: kept for resends; written only once the connection is
        open (§5.1), otherwise sent after the next ready."""
        if self.state is ClientState.CLOSED:
            raise LocalProtocolError("the session is closed")
        data = self.outgoing.send(message)
        if self.state is ClientState.OPEN:
            self._write(data, now)

    def _answer(
        self,
        call: ToolCall,
        ok: bool,
        now: float,
        *,
        output: Any = None,
        code: FailureCode | None = None,
        message: str | None = None,
    ) -> bool:
        """§7.2: exactly one tool.result per call."""
        if call.call_id in self._calls.answered:
            return False
        self._calls.answered.add(call.call_id)
        if ok:
            result = ToolResult.success(call.call_id, call.epoch, output)
        else:
            result = ToolResult.failure(call.call_id, call.epoch, code or "FAILED", message)
        if self.state is not ClientState.CLOSED:
            self._send(result, now)
        return True

    def _answer_interrupted(self, call: ToolCall, now: float) -> bool:
        return self._answer(
            call, False, now, code="INTERRUPTED", message="the turn was interrupted"
        )

    # -- internals: receiving --

    def _ready(self, ready: Ready, now: float) -> None:
        if self.state is not ClientState.WAITING:
            return
        resumed = ready.resumed_from is not UNSET
        if resumed != (self.session_id is not None) or (
            self.session_id is not None and ready.session_id != self.session_id
        ):
            self._fail(ErrorCode.RESUME_FAILED, "ready does not match the session resumed")
            return
        resumed_from = ready.resumed_from if isinstance(ready.resumed_from, int) else 0
        resend = self.outgoing.resend_after(resumed_from)
        if resend is None:
            # §5.4: the client cannot resend what the server lacks.
            self._outbox.append(Close(CloseCode.NORMAL, "resume failed"))
            self._fail(ErrorCode.RESUME_FAILED, "cannot resend what the server missed (§5.4)")
            return
        self.state = ClientState.OPEN
        self.session_id = ready.session_id
        self.input, self.output = ready.input, ready.output
        self.capabilities = ready.capabilities if ready.capabilities is not UNSET else ()
        for data in resend:  # §5.4: in order, before any new sequenced message
            self._write(data, now)
        self._events.append(
            Connected(ready.session_id, resumed, ready.input, ready.output, self.capabilities)
        )

    def _error(self, error: Error) -> None:
        if error.code == ErrorCode.UNAUTHORIZED:
            # §5.3: do not retry the same credential; a fresh one may be tried.
            self.state = ClientState.IDLE
            self.auth_refused = True
            self._events.append(SessionFailed(error.code, error.message))
        elif not error.recoverable and self.state is ClientState.WAITING:
            self._fail(error.code, error.message)  # RESUME_FAILED, START_FAILED, ...
        else:
            self._events.append(ErrorReceived(error.code, error.message, error.recoverable))

    def _fail(self, code: str, message: str) -> None:
        """§5.4: after RESUME_FAILED nothing old is ever resent, here or elsewhere."""
        self.state = ClientState.CLOSED
        self._calls.queue.clear()
        self._events.append(SessionFailed(code, message))

    def _handle_sequenced(self, message: Message, now: float) -> None:
        if isinstance(message, ToolCall):
            self._observe(message.epoch)
            self._tool_call(message, now)
        elif isinstance(message, TurnState):
            self._observe(message.epoch)
            self._events.append(TurnChanged(message.turn_id, message.epoch, message.state))
            if message.state == "listening":
                self._events.append(PlaybackStop(message.epoch))  # §8.4: the user speaks
        elif isinstance(message, AgentText):
            self._events.append(TextReceived(message.text, message.turn_id))
        elif isinstance(message, Transcript):
            self._events.append(
                TranscriptReceived(
                    message.role, message.text, message.final, message.item_id, message.turn_id
                )
            )
        elif isinstance(message, Interrupted):
            self._close_epoch(message.epoch, local=False, now=now)
        elif isinstance(message, ToolCallDelta):
            if not self._is_closed(message.epoch):  # §6.2: SHOULD discard closed previews
                self._events.append(
                    ToolPreview(message.call_id, message.turn_id, message.epoch, message.preview)
                )
        elif isinstance(message, ToolStream):
            self._tool_stream(message)
        elif isinstance(message, Error):
            self._error(message)

    def _observe(self, epoch: int) -> None:
        self.observed_epoch = max(self.observed_epoch, epoch)

    def _is_closed(self, epoch: int) -> bool:
        return self.closed_epoch is not None and epoch <= self.closed_epoch

    def _audio_start(self, start: AudioStart) -> None:
        self._observe(start.epoch)
        item = self._items.get(start.item_id) or _Item(start.item_id, start.epoch)
        self._items[item.id] = item
        while len(self._items) > 64:
            del self._items[next(iter(self._items))]
        self._item = item
        if not self._is_closed(start.epoch):
            self._events.append(AudioStarted(start.item_id, start.turn_id, start.epoch))

    def _duration(self, payload: bytes) -> float:
        fmt = self.output
        if fmt is None or fmt.encoding == "opus":
            return 20.0
        if fmt.encoding == "pcmu":
            return len(payload) / 8.0
        return len(payload) * 500.0 / fmt.rate

    # -- internals: the epoch gate and tools (§6.2, §7) --

    def _close_epoch(self, epoch: int, *, local: bool, now: float) -> None:
        if self.closed_epoch is not None and epoch <= self.closed_epoch:
            return  # §6.2: an epoch already closed has no further effect
        self.closed_epoch = epoch
        self._events.append(PlaybackStop(epoch))
        running = self._calls.running
        if running is not None and self._is_closed(running.epoch):
            # §7.2: answer at once; the tool's later outcome is discarded, and the next
            # call need not wait for it.
            self._calls.running = None
            self._events.append(CancelTool(running.call_id))
            self._answer_interrupted(running, now)
        kept: deque[ToolCall] = deque()
        for call in self._calls.queue:
            if self._is_closed(call.epoch):
                self._answer_interrupted(call, now)
            else:
                kept.append(call)
        self._calls.queue = kept
        self._next_call(now)
        if local and TOOL_STREAM in self.capabilities:
            # §7.5: unterminated calls of the closed epoch count as cancelled at once.
            for call_id, (phase, message) in list(self._stream_messages.items()):
                if phase not in _TERMINAL_PHASES and self._is_closed(message.epoch):
                    self._stream_messages[call_id] = ("cancelled", message)
                    self._events.append(
                        ToolStreamUpdate(
                            call_id, message.name, message.turn_id, message.epoch, "cancelled", None
                        )
                    )
        self._events.append(InterruptedEpoch(epoch, local))

    def _tool_call(self, call: ToolCall, now: float) -> None:
        calls = self._calls
        if call.call_id in calls.answered or (
            calls.running and calls.running.call_id == call.call_id
        ):
            return
        if self._is_closed(call.epoch):
            # §6.2: never start a call of a closed epoch; answer INTERRUPTED.
            self._answer_interrupted(call, now)
            return
        calls.queue.append(call)
        self._next_call(now)

    def _next_call(self, now: float) -> None:
        calls = self._calls
        while calls.running is None and calls.queue:
            call = calls.queue.popleft()
            if self._is_closed(call.epoch):
                self._answer_interrupted(call, now)
                continue
            if call.name not in self.tools:
                self._answer(
                    call, False, now, code="FAILED", message=f"no tool named {call.name!r}"
                )
                continue
            calls.running = call
            self._events.append(
                RunTool(call.call_id, call.name, call.arguments, call.turn_id, call.epoch)
            )

    def _tool_stream(self, message: ToolStream) -> None:
        previous = self._stream_messages.get(message.call_id)
        if previous is not None and previous[0] in _TERMINAL_PHASES:
            return  # after a terminal phase nothing more about the call counts (§7.5)
        if self._is_closed(message.epoch):
            return  # §7.5: SHOULD discard tool.stream of closed epochs
        self._stream_messages[message.call_id] = (message.phase, message)
        if len(self._stream_messages) > 256:
            del self._stream_messages[next(iter(self._stream_messages))]
        self._events.append(
            ToolStreamUpdate(
                message.call_id,
                message.name,
                message.turn_id,
                message.epoch,
                message.phase,
                message,
            )
        )
