"""One server-side session (§5.1): it outlives its connections and holds both sequence
streams, the epoch and the turn, the pending tool calls, formats, capabilities and
context.

The session is *connected* while a :class:`~vrt.protocol.server.ServerConnection` has
it bound, *parked* between connections (for the resume window) and then *closed*: its
:class:`~vrt.protocol.server.channel.SessionChannel` walks §5.1's session table and
holds what it sends, which the bound connection takes in order with its own frames, and
what the client did, reported to the agent as :data:`AgentInput` events.

An agent (through ``vrt.agents.AgentSession``) acts on three parts of it: the turns,
here (the session stamps turn ids and epochs and gates closed epochs), its tool calls
(:attr:`ServerSession.tool_calls`, which settles them) and its output
(:attr:`ServerSession.agent_output`), so that an agent never sees a seq, an ack or a
closed epoch's leftovers.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from ..capabilities import negotiate
from ..codec import Decoded
from ..errors import ErrorCode, LocalProtocolError
from ..formats import choose_format
from ..handlers import HandlerTables
from ..ids import new_id
from ..messages import (
    PCM16_24K,
    UNSET,
    Ack,
    ContextUpdate,
    Format,
    Hello,
    Interrupt,
    Interrupted,
    Playback,
    Tool,
    ToolResult,
    TurnState,
    TurnStateName,
    UserText,
)
from ..outputs import CloseCode, Output
from ..streams import IncomingStream, OutgoingStream
from ..tables import SessionState
from .agent_output import AgentOutput
from .agent_tools import AgentToolCalls
from .channel import BoundConnection, SessionChannel, SessionObserver
from .config import ServerConfig
from .events import (
    AgentInput,
    AudioReceived,
    ContextChanged,
    PlaybackReported,
    ResponseInterrupted,
    UserTextReceived,
)
from .record import SessionRecord, Turn

__all__ = ["ServerSession", "SessionRecord", "SessionState"]

_NO_NAMES: Final[frozenset[str]] = frozenset()
_NO_TOOLS_JSON: Final = b"[]"
_NO_CONTEXT_JSON: Final = b"null"


class ServerSession:
    """One session, created by the driver for a new ``hello`` and bound to one
    connection at a time (§5.1)."""

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
        tools_json, context_json = _client_state(hello)
        self.record = SessionRecord(
            session_id=session_id or new_id("s_"),
            principal=principal,
            capabilities=negotiate(offered, config.capabilities),
            input=choose_format(_format(hello.input), input_formats),
            output=choose_format(_format(hello.output), output_formats),
            tools_json=tools_json,
            tool_names=frozenset([tool.name for tool in tools]) if tools else _NO_NAMES,
            context_json=context_json,
        )
        self.incoming = IncomingStream()
        self._setup(OutgoingStream(config.max_unacked, max_kept_bytes=config.max_unacked_bytes))

    @classmethod
    def restore(
        cls,
        record: SessionRecord,
        config: ServerConfig,
        *,
        outgoing: OutgoingStream,
        incoming: IncomingStream,
    ) -> ServerSession:
        """A session rebuilt from what a session store kept (its record and both
        streams' state), e.g. on another process than the one that opened it. It is
        parked until a connection binds it."""
        # Made as for a bare hello, then given what was kept: a compiled (mypyc) class
        # is made only through its __init__.
        session = cls(Hello(), config, session_id=record.session_id)
        session.record = record
        session.incoming = incoming
        session._setup(outgoing)
        return session

    def _setup(self, outgoing: OutgoingStream) -> None:
        # Read off the record once: they never change, and drivers read them per
        # message (attributes, not properties: a property is a call).
        self.session_id: str = self.record.session_id
        self.principal: str | None = self.record.principal
        #: The session's lifecycle (§5.1, SESSION_TABLE), and what it sends and reports.
        self.channel = SessionChannel(self.record, outgoing, self.config.resume_window)
        #: The agent's tool calls (§7, §7.5).
        self.tool_calls = AgentToolCalls(self.channel, self.record, self.config)
        #: The agent's text, transcripts, errors and audio (§6.1, §8.3, §9.2).
        self.agent_output = AgentOutput(self.channel, self.record, self.config)

    # -- identity and lifecycle --

    @property
    def status(self) -> SessionState:
        """Connected, parked or closed (§5.1)."""
        return self.channel.state

    @property
    def capabilities(self) -> tuple[str, ...]:
        return self.record.capabilities

    @property
    def epoch(self) -> int:
        return self.record.epoch

    @property
    def tools(self) -> dict[str, Tool]:
        """The client's tools, as declared when the session opened (§5.4); decoded
        from what the session keeps at each call."""
        return {tool.name: tool for tool in _TOOLS.decode(self.record.tools_json)}

    @property
    def context(self) -> Any:
        """The application context (§5.5): data, never instructions; decoded from what
        the session keeps at each call."""
        return msgspec.json.decode(self.record.context_json)

    @staticmethod
    def state_size(hello: Hello) -> int:
        """What a session for ``hello`` would keep of the client's data, in bytes
        (``max_state_bytes``): a driver refuses a larger one before starting it."""
        tools_json, context_json = _client_state(hello)
        return len(tools_json) + len(context_json)

    @property
    def ended(self) -> tuple[int, str] | None:
        """The close code and reason once the session has ended, else None."""
        return self.record.ended

    @property
    def outgoing(self) -> OutgoingStream:
        """The session's sequenced messages (§4.1), kept for resumes (§5.4)."""
        return self.channel.outgoing

    @outgoing.setter
    def outgoing(self, stream: OutgoingStream) -> None:
        self.channel.outgoing = stream

    @property
    def observer(self) -> SessionObserver | None:
        """Sees what the session sends and reports (a session store's journal), if any."""
        return self.channel.observer

    @observer.setter
    def observer(self, observer: SessionObserver | None) -> None:
        self.channel.observer = observer

    @property
    def connection(self) -> BoundConnection | None:
        """The connection the session is bound to, if any."""
        return self.channel.connection

    def close(self, reason: str = "session closed", code: int = CloseCode.NORMAL) -> None:
        """End the session (§5.6): its connection, if any, closes with ``code``; nothing
        resumes it."""
        self.channel.end(code, reason)

    def attach(self, connection: BoundConnection, now: float) -> None:
        """``connection`` binds the session (``ServerConnection.open``); an older one
        is replaced (§5.4)."""
        self.channel.attach(connection, now)

    def park(self, now: float) -> None:
        """The connection ended: wait ``resume_window`` for a resume (§5.1)."""
        self.channel.park(now)

    # -- the bound connection's side --

    def take_events(self) -> list[AgentInput]:
        """What the client did since the last call, in order, for the agent."""
        channel = self.channel
        events, channel.events = channel.events, []
        return events

    def take_outbox(self) -> list[Output]:
        """Frames for the bound connection, in order (its connection takes them)."""
        channel = self.channel
        out = channel.frames
        if not out:
            return []
        channel.frames = []
        return out

    def receive_sequenced(self, decoded: Decoded[Any], now: float) -> None:
        """§5.1 open × sequenced message: deduplicate (§4.3), handle, acknowledge."""
        if self.incoming.receive(decoded.seq, now):
            message = decoded.message
            _HANDLERS.of(type(self))[type(message)](self, message, now)
        # A duplicate is not handled again, but is acknowledged again (§4.3).

    def receive_ack(self, ack: Ack) -> None:
        self.channel.outgoing.ack(ack.up_to)

    def audio_received(self, event: AudioReceived) -> None:
        """An input audio frame, already an event (``ServerConnection.receive_binary``):
        the agent's, never journalled."""
        self.channel.events.append(event)

    def _on_text(self, message: UserText, now: float) -> None:
        self._interrupt_in_flight("user")  # §6.3
        self.channel.report(UserTextReceived(text=message.text))

    def _on_interrupt(self, message: Interrupt, now: float) -> None:
        turn = self.record.turn
        # messages.md: a stale interrupt (naming an epoch before the response's) has no effect.
        if turn is not None and turn.epoch <= message.epoch:
            self._interrupt_in_flight(message.reason)

    def _on_tool_result(self, result: ToolResult, now: float) -> None:
        self.tool_calls.receive_result(result)

    def _on_context(self, message: ContextUpdate, now: float) -> None:
        context_json = msgspec.json.encode(message.context)
        size = len(context_json) + len(self.record.tools_json)
        limit = self.config.max_state_bytes
        if size > limit:
            self.channel.send_error(
                ErrorCode.LIMIT_EXCEEDED,
                f"a context of {len(context_json)} bytes: with the tools this session would "
                f"keep {size} bytes of client data, and keeps at most {limit} (§11); the "
                "previous context stays",
                True,
            )
            return
        self.record.context_json = context_json
        self.channel.report(ContextChanged(context=message.context))

    def _on_playback(self, playback: Playback, now: float) -> None:
        item = self.record.items.get(playback.item_id)
        played = playback.played_ms
        if item is not None:
            played = min(played, int(item.sent_ms))
        self.channel.report(
            PlaybackReported(
                item_id=playback.item_id,
                played_ms=played,
                turn_id=item.turn_id if item is not None else None,
            )
        )

    # -- timers --

    def timer_deadline(self) -> float | None:
        """The earliest of the ack deadline (§4.2, while connected), the tool timeouts
        (§7.2, parked or not) and the end of the resume window (§5.1, while parked)."""
        state = self.channel.state
        if state is _CLOSED:
            return None
        record = self.record
        deadline = record.calls.next_deadline() if record.calls else None
        if state is _CONNECTED:
            ack = self.incoming.ack_deadline()
            if ack is not None and (deadline is None or ack < deadline):
                deadline = ack
        expires = record.expires_at
        if expires is not None and (deadline is None or expires < deadline):
            deadline = expires
        return deadline

    def on_timer(self, now: float) -> None:
        channel = self.channel
        if channel.state is _CLOSED:
            return
        if channel.state is _CONNECTED:
            up_to = self.incoming.take_ack(now)
            if up_to is not None:
                channel.send_transient(Ack(up_to=up_to))
        self.tool_calls.time_out(now)
        expires = self.record.expires_at
        if expires is not None and now >= expires:
            channel.expire(now)

    # -- the agent's side: turns --

    @property
    def turn_id(self) -> str | None:
        """The turn in progress, if any."""
        turn = self.record.turn
        return turn.id if turn is not None else None

    @property
    def response_in_flight(self) -> bool:
        turn = self.record.turn
        return turn is not None and turn.state != "listening"

    def begin_turn(self, state: TurnStateName = "thinking") -> str:
        """Start a turn in ``state``: a new epoch and turn id (§6.1). A turn still in
        progress ends first (idle)."""
        if state == "idle":
            raise LocalProtocolError("a turn begins in listening, thinking, speaking or acting")
        if self.record.turn is not None:
            self.end_turn(self.record.turn.id)
        self.record.epoch += 1
        turn = Turn(new_id("t_"), self.record.epoch, state)
        self.record.turn = turn
        self.channel.send(TurnState(turn_id=turn.id, epoch=turn.epoch, state=state))
        return turn.id

    def set_state(self, turn_id: str, state: TurnStateName) -> bool:
        """Report the turn's new state; ``idle`` ends it. False if the turn is over."""
        turn = self.record.current_turn(turn_id)
        if turn is None:
            return False
        if state == "idle":
            return self.end_turn(turn_id)
        if turn.state != state:
            turn.state = state
            self.channel.send(TurnState(turn_id=turn.id, epoch=turn.epoch, state=state))
        return True

    def end_turn(self, turn_id: str) -> bool:
        """The turn is done: ``turn.state idle``. False if it was already over."""
        turn = self.record.current_turn(turn_id)
        if turn is None:
            return False
        self.tool_calls.end_turn(turn.id)
        self.record.turn = None
        self.channel.send(TurnState(turn_id=turn.id, epoch=turn.epoch, state="idle"))
        return True

    def user_started_speaking(self) -> str:
        """Speech detected: interrupt the response in flight (§6.2, reason speech), then
        begin a ``listening`` turn, or keep the listening turn in progress."""
        turn = self.record.turn
        if turn is not None and turn.state == "listening":
            return turn.id
        self._interrupt_in_flight("speech", tell_agent=False)
        return self.begin_turn("listening")

    def interrupt_response(self, reason: str = "server") -> bool:
        """Interrupt the response in flight on the server's own initiative (§6.2)."""
        return self._interrupt_in_flight(reason, tell_agent=False)

    def cut_short(self, reason: str) -> bool:
        """The turn in progress cannot go on: the session moved to another process, and
        the agent that ran the turn is gone with the old one (docs/deploy.md). A
        response in flight is interrupted (its epoch closes, its client calls settle as
        INTERRUPTED, ``interrupted``, §6.2), the turn ends with ``turn.state idle``, and
        a recoverable ``error TURN_CUT_SHORT`` says why (docs/decisions.md). False when
        no turn is in progress."""
        turn = self.record.turn
        if turn is None:
            return False
        self._interrupt_in_flight("server", tell_agent=False)
        self.record.turn = None
        channel = self.channel
        channel.send(TurnState(turn_id=turn.id, epoch=turn.epoch, state="idle"))
        channel.send_error(ErrorCode.TURN_CUT_SHORT, reason, True)
        return True

    def _interrupt_in_flight(self, reason: str, *, tell_agent: bool = True) -> bool:
        """§6.2 server side: stop the response in flight, if any, close its epoch, settle
        its client calls as INTERRUPTED and send ``interrupted``. The agent hears of it
        unless it asked for it (``tell_agent`` False)."""
        turn = self.record.turn
        if turn is None or turn.state == "listening":
            return False
        closed = turn.epoch
        self.tool_calls.interrupt(closed)
        self.record.turn = None
        self.record.epoch += 1  # §6.1: the epoch increases when a turn is interrupted
        self.channel.send(Interrupted(epoch=closed))
        if tell_agent:
            self.channel.report(ResponseInterrupted(turn_id=turn.id, epoch=closed, reason=reason))
        return True


_TOOLS: Final = msgspec.json.Decoder(tuple[Tool, ...])
# Bound once: reading a member off its enum class goes through the metaclass (channel.py).
_CONNECTED: Final = SessionState.CONNECTED
_CLOSED: Final = SessionState.CLOSED

#: The method that handles each sequenced client message (``handlers.py``).
_HANDLERS: Final = HandlerTables(
    {
        UserText: "_on_text",
        Interrupt: "_on_interrupt",
        ToolResult: "_on_tool_result",
        ContextUpdate: "_on_context",
        Playback: "_on_playback",
    }
)


def _client_state(hello: Hello) -> tuple[bytes, bytes]:
    """The JSON a session keeps of ``hello.tools`` and ``hello.context``."""
    tools, context = hello.tools, hello.context
    return (
        # Constants for what a hello leaves out (most do): asked at every opening.
        _NO_TOOLS_JSON if tools is UNSET or not tools else msgspec.json.encode(tools),
        _NO_CONTEXT_JSON if context is UNSET or context is None else msgspec.json.encode(context),
    )


def _format(value: Format | Any) -> Format | None:
    return value if isinstance(value, Format) else None
