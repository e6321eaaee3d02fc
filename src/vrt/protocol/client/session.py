"""The client role, sans I/O: a :class:`ClientSession` across its connections, walking
the rows of §5.1's client table.

A driver calls :meth:`ClientSession.connection_made` when a WebSocket opens, feeds it the
frames it receives with the time, writes out :meth:`take_outbox`, and hands
:meth:`take_events` to the application. The session keeps the epoch gate (§6.2): tool
calls of a closed epoch never start, and output audio of a closed epoch is never
delivered. Tool calls run one at a time in the order received (§7.1): the session emits
:class:`RunTool` for the next call once the previous one has its result, and the driver
answers with :meth:`ClientSession.tool_finished`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import msgspec

from ..codec import DEFAULT_LIMITS, Decoded, Invalid, Limits, encode, shared_decoder
from ..errors import ErrorCode, LocalProtocolError
from ..formats import duration_ms
from ..frames import FrameKind, build_frame, next_audio_seq, parse_frame
from ..handlers import HandlerTables
from ..machine import Action, Machine
from ..messages import (
    UNSET,
    Ack,
    AgentText,
    AudioStart,
    ClientSequencedMessage,
    ContextUpdate,
    Error,
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
    ToolStream,
    Transcript,
    TurnState,
    UserText,
)
from ..outputs import Close, CloseCode, Output, SendBinary, SendText
from ..streams import DEFAULT_MAX_KEPT, IncomingStream, OutgoingStream
from ..tables import CLIENT_TABLE, ClientAction, ClientInput, ClientState
from .calls import ToolQueue
from .events import (
    AudioChunk,
    AudioStarted,
    ClientEvent,
    Connected,
    ConnectionLost,
    ErrorReceived,
    PlaybackStop,
    SessionFailed,
    TextReceived,
    TranscriptReceived,
    TurnChanged,
)
from .gate import EpochGate
from .inputs import error_input, ready_input, reconnects

__all__ = ["DEAD_AFTER_INTERVALS", "PING_INTERVAL", "ClientSession"]

#: §4.4 RECOMMENDED ping interval.
PING_INTERVAL: Final = 15.0
#: §4.4: a connection silent for this many ping intervals is dead.
DEAD_AFTER_INTERVALS: Final = 2.5
#: Audio items remembered for playback reports (§8.4).
REMEMBERED_ITEMS: Final = 64


class _Item:
    __slots__ = ("epoch", "id", "received_ms")

    def __init__(self, item_id: str, epoch: int) -> None:
        self.id = item_id
        self.epoch = epoch
        self.received_ms = 0.0


class ClientSession(Machine[ClientState, ClientInput], EpochGate):
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
        self._enter(ClientState.CONNECTING)
        self.session_id: str | None = None
        self.input: Format | None = None
        self.output: Format | None = None
        self.capabilities: tuple[str, ...] = ()
        self.outgoing = OutgoingStream(max_kept)
        self.incoming = IncomingStream()
        self.observed_epoch = 0
        self.closed_epoch: int | None = None
        self._decoder = shared_decoder("server", limits)
        self._outbox: list[Output] = []
        self._events: list[ClientEvent] = []
        self._calls = ToolQueue()
        self._item: _Item | None = None
        self._items: dict[str, _Item] = {}
        #: tool-stream-v1: the last phase seen of each call, and its message (§7.5).
        self._streams: dict[str, tuple[str, ToolStream]] = {}
        self._audio_out_seq = 0
        self._last_sent = 0.0
        self._last_received = 0.0
        #: The server refused ``auth`` (§5.3): set a fresh credential before reconnecting.
        self.auth_refused = False
        #: The highest seq of ours written to a connection, and known handled by the
        #: server (the last ``resumedFrom``, §5.4): what :meth:`unacknowledged` tells.
        self._written_through = 0
        self._handled_through = 0

    # -- driver interface --

    def take_outbox(self) -> list[Output]:
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
        self._input(ClientInput.CONNECTION_OPENED, None, now)

    def connection_lost(self, now: float, code: int | None = None) -> None:
        """The WebSocket ended, with the close ``code`` the server sent, if any: reports
        :class:`ConnectionLost`, which says whether to connect again."""
        self._input(ClientInput.CONNECTION_LOST, None, now)
        reconnect = reconnects(self.state, self.session_id, code)
        self._events.append(ConnectionLost(code=code, reconnect=reconnect))

    def unacknowledged(self) -> list[tuple[int, ClientSequencedMessage, bool]]:
        """Our sequenced messages the server has not handled (§5.4), oldest first: each
        with its seq, and whether it was written to a connection (False: it was sent
        while none was open, to go out after the next ``ready``; True: the server may
        have handled it). Read back from the bytes kept for resends."""
        return [
            (seq, _OWN_MESSAGES.decode(data), seq <= self._written_through)
            for seq, data in self.outgoing.kept()
            if seq > self._handled_through
        ]

    def receive_text(self, data: bytes | str, now: float) -> None:
        self._last_received = now
        decoded = self._decoder.decode(data)
        if isinstance(decoded, Invalid):
            self._input(ClientInput.INVALID, decoded, now)
            return
        message = decoded.message
        if decoded.seq:
            self._input(ClientInput.SEQUENCED, decoded, now)
        elif isinstance(message, Ready):
            if self.state is _WAITING:
                self._input(*ready_input(message, self.session_id, self.outgoing), now)
            else:
                self._input(ClientInput.READY, None, now)
        elif isinstance(message, AudioStart):
            self._input(ClientInput.AUDIO_START, message, now)
        elif isinstance(message, Ack):
            self._input(ClientInput.ACK, message, now)
        elif isinstance(message, Error):  # seq 0: no session bound to the connection
            self._input(error_input(message), message, now)
        else:
            self._input(ClientInput.PONG, message, now)

    def receive_binary(self, data: bytes, now: float) -> None:
        self._last_received = now
        self._input(ClientInput.OUTPUT_AUDIO, data, now)

    def timer_deadline(self) -> float | None:
        # The driver asks after every input: comparisons rather than min() calls.
        state = self.state
        if state is ClientState.CONNECTING or state is ClientState.CLOSED:
            return None
        interval = self.ping_interval
        deadline = self._last_sent + interval
        dead_at = self._last_received + DEAD_AFTER_INTERVALS * interval
        if dead_at < deadline:  # noqa: PLR1730 (see above)
            deadline = dead_at
        if state is ClientState.OPEN:
            ack = self.incoming.ack_deadline()
            if ack is not None and ack < deadline:
                deadline = ack
        return deadline

    def on_timer(self, now: float) -> None:
        if self.state in (ClientState.CONNECTING, ClientState.CLOSED):
            return
        if now >= self._last_received + DEAD_AFTER_INTERVALS * self.ping_interval:
            self._input(ClientInput.SILENT, None, now)
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
        self._input(ClientInput.SEND, UserText(text=text), now)

    def update_context(self, context: Any, now: float) -> None:
        """Replace the application context; None clears it (§5.5)."""
        self._input(ClientInput.SEND, ContextUpdate(context=context), now)

    def interrupt(self, reason: InterruptReason, now: float) -> int:
        """The user interrupted: close the observed epoch locally at once, then tell the
        server (§6.2). Returns the closed epoch."""
        epoch = self.observed_epoch
        self._close_epoch(epoch, local=True, now=now)
        self._input(ClientInput.SEND, Interrupt(epoch=epoch, reason=reason), now)
        return epoch

    def playback(self, item_id: str, played_ms: float, now: float) -> int:
        """Report how much of ``item_id`` was played (§8.4), never more than was received."""
        item = self._items.get(item_id)
        limit = item.received_ms if item is not None else 0.0
        played = max(0, int(min(played_ms, limit)))
        self._input(ClientInput.SEND, Playback(item_id=item_id, played_ms=played), now)
        return played

    def send_audio(self, payload: bytes, now: float) -> bool:
        """One input audio frame; dropped (False) when no connection is open (audio is
        never sent before ready, nor resent, §5.1, §5.4)."""
        sent = self.state is ClientState.OPEN
        self._input(ClientInput.SEND_AUDIO, payload, now)
        return sent

    # -- actions, one per ClientAction --

    def _send_hello(self, argument: None, now: float) -> None:
        self.auth_refused = False
        self._last_received = now
        self._item = None  # §8.3: a new connection starts without a current item
        auth = self.auth if self.auth is not None else UNSET
        if self.session_id is None:
            hello = Hello(
                tools=tuple(self.tools.values()) if self.tools else UNSET,
                input=self.preferred_input or UNSET,
                output=self.preferred_output or UNSET,
                capabilities=self.offered_capabilities or UNSET,
                context=self.initial_context,
                auth=auth,
            )
        else:
            # §5.2: context only when opening; tools are those declared at the start (§5.4).
            hello = Hello(session_id=self.session_id, resume_from=self.incoming.last_seq, auth=auth)
        self._write(encode(hello, 0), now)

    def _open(self, opened: tuple[Ready, list[bytes]], now: float) -> None:
        ready, resend = opened
        self.session_id = ready.session_id
        self.input, self.output = ready.input, ready.output
        granted = ready.capabilities if ready.capabilities is not UNSET else ()
        # §3.3: what is in effect is offered tokens the server supports; one this client
        # never offered (a server's mistake, or a token it does not know) is not in effect.
        self.capabilities = tuple(c for c in granted if c in self.offered_capabilities)
        for data in resend:  # §5.4: in order, before any new sequenced message
            self._write(data, now)
        self._written_through = self.outgoing.last_seq
        resumed_from = ready.resumed_from if isinstance(ready.resumed_from, int) else None
        if resumed_from is not None:
            # Every message of ours up to it was handled, acknowledged or not (§5.4).
            self._handled_through = max(self._handled_through, resumed_from)
        self._events.append(
            Connected(
                session_id=ready.session_id,
                resumed=resumed_from is not None,
                input=ready.input,
                output=ready.output,
                capabilities=self.capabilities,
                resumed_from=resumed_from,
            )
        )

    def _report(self, event: Invalid | Error, now: float) -> None:
        if isinstance(event, Invalid):  # §9.1: a client reports an invalid message and continues
            self._events.append(
                ErrorReceived(code=event.code, message=event.reason, recoverable=True)
            )
        else:
            self._events.append(
                ErrorReceived(code=event.code, message=event.message, recoverable=event.recoverable)
            )

    def _stop(self, error: Error, now: float) -> None:
        """§5.4: after RESUME_FAILED (or another error that ends the session before
        ready) nothing old is ever resent, here or elsewhere."""
        self._calls.clear()
        self._events.append(SessionFailed(code=error.code, message=error.message))

    def _abandon(self, reason: str, now: float) -> None:
        self._outbox.append(Close(code=CloseCode.NORMAL, reason="resume failed"))
        self._calls.clear()
        self._events.append(SessionFailed(code=ErrorCode.RESUME_FAILED, message=reason))

    def _await_credential(self, error: Error, now: float) -> None:
        # §5.3: do not retry the same credential; a fresh one may be tried.
        self.auth_refused = True
        self._events.append(SessionFailed(code=error.code, message=error.message))

    def _handle(self, decoded: Decoded[Any], now: float) -> None:
        if self.incoming.receive(decoded.seq, now):
            message = decoded.message
            _HANDLERS.of(type(self))[type(message)](self, message, now)
        # §4.3: a duplicate is not handled again, and is acknowledged again.

    def _announce(self, start: AudioStart, now: float) -> None:
        self._observe(start.epoch)
        item = self._items.get(start.item_id) or _Item(start.item_id, start.epoch)
        self._items[item.id] = item
        while len(self._items) > REMEMBERED_ITEMS:
            del self._items[next(iter(self._items))]
        self._item = item
        if not self._is_closed(start.epoch):
            self._events.append(
                AudioStarted(item_id=start.item_id, turn_id=start.turn_id, epoch=start.epoch)
            )

    def _play(self, data: bytes, now: float) -> None:
        frame = parse_frame(data, "client")
        if isinstance(frame, Invalid):
            return  # §8.1: a client drops a malformed frame
        item = self._item
        # §8.3: frames before any audio.start, and of a closed epoch, are discarded.
        if item is None or self._is_closed(item.epoch):
            return
        if self.output is not None:
            item.received_ms += duration_ms(frame.payload, self.output)
        self._events.append(AudioChunk(item_id=item.id, payload=frame.payload))

    def _apply_ack(self, ack: Ack, now: float) -> None:
        self.outgoing.ack(ack.up_to)

    def _ignore(self, argument: Any, now: float) -> None:
        pass

    def _reconnect(self, argument: None, now: float) -> None:
        self._item = None

    def _close_dead(self, argument: None, now: float) -> None:
        # §4.4: treat the connection as dead, close it and resume: the server will not
        # answer the close, so the driver does not wait for it.
        self._outbox.append(
            Close(code=CloseCode.REPLACED, reason="no frame from the server", wait=False)
        )
        self._item = None

    def _keep(self, message: Message, now: float) -> None:
        self.outgoing.send(message)  # sent after the next ready (§5.1)

    def _write_message(self, message: Message | bytes, now: float) -> None:
        if isinstance(message, bytes):  # input audio (§8.1)
            seq = self._audio_out_seq
            self._audio_out_seq = next_audio_seq(seq)
            self._outbox.append(SendBinary(data=build_frame(FrameKind.INPUT, seq, message)))
            self._last_sent = now
        else:
            self._write(self.outgoing.send(message), now)
            self._written_through = self.outgoing.last_seq

    def _drop(self, payload: bytes, now: float) -> None:
        pass

    def _refuse(self, argument: Any, now: float) -> None:
        raise LocalProtocolError("the session is closed (§5.4); start a new ClientSession")

    @classmethod
    def _actions(cls) -> Mapping[ClientAction, Action]:
        return {
            ClientAction.SEND_HELLO: cls._send_hello,
            ClientAction.OPEN: cls._open,
            ClientAction.REPORT: cls._report,
            ClientAction.REPORT_AND_STOP: cls._stop,
            ClientAction.AWAIT_CREDENTIAL: cls._await_credential,
            ClientAction.STOP: cls._stop,
            ClientAction.ABANDON: cls._abandon,
            ClientAction.HANDLE: cls._handle,
            ClientAction.ANNOUNCE: cls._announce,
            ClientAction.PLAY: cls._play,
            ClientAction.APPLY_ACK: cls._apply_ack,
            ClientAction.IGNORE: cls._ignore,
            ClientAction.RECONNECT: cls._reconnect,
            ClientAction.CLOSE_DEAD: cls._close_dead,
            ClientAction.KEEP: cls._keep,
            ClientAction.WRITE: cls._write_message,
            ClientAction.DROP: cls._drop,
            ClientAction.REFUSE: cls._refuse,
        }

    # -- internals: sending --

    def _write(self, data: bytes, now: float) -> None:
        self._outbox.append(SendText(data=data))
        self._last_sent = now

    # -- internals: receiving --

    def _on_turn_state(self, message: TurnState, now: float) -> None:
        self._observe(message.epoch)
        self._events.append(
            TurnChanged(turn_id=message.turn_id, epoch=message.epoch, state=message.state)
        )
        if message.state == "listening":
            self._events.append(PlaybackStop(epoch=message.epoch))  # §8.4: the user speaks

    def _on_text(self, message: AgentText, now: float) -> None:
        self._events.append(TextReceived(text=message.text, turn_id=message.turn_id))

    def _on_transcript(self, message: Transcript, now: float) -> None:
        self._events.append(
            TranscriptReceived(
                role=message.role,
                text=message.text,
                final=message.final,
                item_id=message.item_id,
                turn_id=message.turn_id,
            )
        )

    def _on_interrupted(self, message: Interrupted, now: float) -> None:
        self._close_epoch(message.epoch, local=False, now=now)

    def _on_error(self, error: Error, now: float) -> None:
        """A sequenced ``error`` (a session is bound)."""
        self._input(error_input(error), error, now)


#: Reads back our own kept messages (:meth:`ClientSession.unacknowledged`).
_OWN_MESSAGES: Final = msgspec.json.Decoder(ClientSequencedMessage)
# Bound once: reading a member off its enum class goes through the metaclass.
_WAITING: Final = ClientState.WAITING


#: The method that handles each sequenced server message (``handlers.py``).
_HANDLERS: Final = HandlerTables(
    {
        ToolCall: "_on_tool_call",
        TurnState: "_on_turn_state",
        AgentText: "_on_text",
        Transcript: "_on_transcript",
        Interrupted: "_on_interrupted",
        ToolCallDelta: "_on_preview",
        ToolStream: "_on_tool_stream",
        Error: "_on_error",
    }
)


ClientSession.compile_table(CLIENT_TABLE, ClientState)
