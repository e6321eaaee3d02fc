"""What the server tells its metrics and traces: :class:`Telemetry` watches connections,
sessions and the frames written, and feeds :class:`~vrt.server.metrics.ServerMetrics`
and :class:`~vrt.server.tracing.SessionTracer`, whichever are on.

A server without telemetry has no observer at all, and each message costs one ``None``
test. With it, what a connection reads is classified by its ``type`` (a decode of that
member alone), and what it writes by the ``type`` that vrt's own encoder puts right
after ``v`` and ``seq`` (``vrt.protocol.codec.encode``), found with a byte search: no
frame is decoded twice, except the few that carry what a latency or a trace needs
(``turn.state``, ``interrupted``, ``tool.call``, ``error``).

Each session's agent gets a :class:`~vrt.agents.responses.ResponseWatch`, which the
agent seam (``AgentSession``) tells of every response's steps, whatever the agent; a
response's end feeds the response metrics and a ``vrt.response`` span.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Iterator
from typing import TYPE_CHECKING, Final

import msgspec

from ..agents.responses import Response, ResponseWatch
from ..protocol.frames import FrameKind
from ..protocol.outputs import Output, SendBinary, SendText
from ..protocol.server import (
    AgentInput,
    AudioReceived,
    ResponseInterrupted,
    ServerSession,
    ToolSettled,
)
from .metrics import ServerMetrics, Tally

if TYPE_CHECKING:
    from ..agents.base import Agent, AgentSession
    from .tracing import SessionTracer
    from .websocket import ConnectionMeter, ServerWebSocket

__all__ = ["ServerObserver", "Telemetry", "sent_type"]


class _Type(msgspec.Struct):
    type: str = ""


class _TurnState(msgspec.Struct, rename="camel"):
    turn_id: str
    epoch: int
    state: str


class _Interrupted(msgspec.Struct):
    epoch: int


class _ToolCall(msgspec.Struct, rename="camel"):
    call_id: str


class _Error(msgspec.Struct):
    code: str


_RECEIVED_TYPE: Final = msgspec.json.Decoder(_Type)
_TURN_STATE: Final = msgspec.json.Decoder(_TurnState)
_INTERRUPTED: Final = msgspec.json.Decoder(_Interrupted)
_TOOL_CALL: Final = msgspec.json.Decoder(_ToolCall)
_ERROR: Final = msgspec.json.Decoder(_Error)
#: A frame of vrt's encoder begins ``{"v":1,"seq":N,"type":"``: the comma after the seq
#: is the first from here, and the type begins ``len(',"type":"')`` after it.
_TYPE_FROM: Final = len(b'{"v":1,"seq":0')
_TYPE_SKIP: Final = len(b',"type":"')
#: Output frames whose content a latency or a trace needs.
_WATCHED: Final = frozenset({b"text", b"turn.state", b"interrupted", b"tool.call", b"error"})
_INPUT_AUDIO: Final = bytes([FrameKind.INPUT])


def sent_type(data: bytes) -> bytes:
    """The ``type`` of a frame written by vrt's encoder: ``{"v":1,"seq":N,"type":"``
    and the type up to its closing quote."""
    start = data.find(b",", _TYPE_FROM) + _TYPE_SKIP
    return data[start : data.find(b'"', start)]


class ServerObserver:
    """What :class:`~vrt.server.app.VrtServer` tells its observer; every method is a
    no-op here. Subclass it to watch a server (``VrtServer(observer=...)``)."""

    def connection(self, connection: ServerWebSocket) -> ConnectionMeter | None:
        """A WebSocket upgrade request passed the server's checks; returns the meter
        of the connection, if any."""
        return None

    def upgrade_refused(self, reason: str) -> None:
        """An upgrade was refused: ``origin`` or ``version``."""

    def session_opened(self, session: ServerSession) -> None:
        """A new session is open (§5.2)."""

    def session_refused(self, reason: str) -> None:
        """A new session was refused: ``unauthorized``, ``limit``, ``capacity`` (the
        agent's ``admit``), ``draining``, ``too_large`` or ``agent_failed``."""

    def resumed(self, session_id: str, outcome: str) -> None:
        """A resume (§5.4): ``resumed``, ``refused`` (unknown, foreign or expired) or
        ``failed`` (what the client missed is gone)."""

    def agent_started(
        self, session: ServerSession, agent: Agent, agent_session: AgentSession
    ) -> None:
        """The session's agent was made and is about to run (a new session, or one
        rebuilt on this process from a shared store)."""

    def delivered(self, session: ServerSession, events: list[AgentInput]) -> None:
        """``events`` are handed to the session's agent."""

    def session_ended(
        self,
        session: ServerSession,
        reason: str,
        agent: Agent | None,
        agent_session: AgentSession | None,
    ) -> None:
        """The session ended, for ``reason`` (``vrt.server.registry``)."""


class Telemetry(ServerObserver):
    """Metrics, traces, or both, for one server.

    ``agent`` names the agent in traces (the metrics' own name by default).
    """

    def __init__(
        self,
        metrics: ServerMetrics | None = None,
        tracer: SessionTracer | None = None,
        *,
        agent: str | None = None,
    ) -> None:
        self.metrics = metrics
        self.tracer = tracer
        self.agent = agent or (metrics.agent if metrics is not None else "custom")
        #: The meter of each open connection (their write buffers make a gauge).
        self.meters: set[_Meter] = set()
        #: When each client tool call still unsettled was written, by session.
        self._calls: dict[str, dict[str, float]] = {}
        #: The response watch of each live session's agent.
        self._watches: dict[str, ResponseWatch] = {}
        if metrics is not None:
            metrics.buffered = self._buffered

    def _buffered(self) -> Iterator[int]:
        for meter in self.meters:
            transport = meter.connection.transport
            if transport is not None:
                yield transport.underlying_transport.get_write_buffer_size()

    def connection(self, connection: ServerWebSocket) -> _Meter:
        return _Meter(self, connection)

    def upgrade_refused(self, reason: str) -> None:
        if self.metrics is not None:
            self.metrics.upgrades_refused[reason] = self.metrics.upgrades_refused.get(reason, 0) + 1

    def session_opened(self, session: ServerSession) -> None:
        if self.metrics is not None:
            self.metrics.sessions_opened += 1
        if self.tracer is not None:
            self.tracer.session_opened(session)

    def session_refused(self, reason: str) -> None:
        if self.metrics is not None:
            refused = self.metrics.sessions_refused
            refused[reason] = refused.get(reason, 0) + 1

    def resumed(self, session_id: str, outcome: str) -> None:
        if self.metrics is not None:
            self.metrics.resumes[outcome] = self.metrics.resumes.get(outcome, 0) + 1
        if self.tracer is not None:
            self.tracer.resumed(session_id, outcome)

    def agent_started(
        self, session: ServerSession, agent: Agent, agent_session: AgentSession
    ) -> None:
        sink = functools.partial(self._response_ended, session.session_id)
        watch = ResponseWatch(agent_session.now, sink, agent)
        agent_session.watch = watch
        self._watches[session.session_id] = watch

    def _response_ended(self, session_id: str, response: Response) -> None:
        if self.metrics is not None:
            self.metrics.response_ended(response)
        if self.tracer is not None:
            self.tracer.response_ended(session_id, response, self.agent)

    def delivered(self, session: ServerSession, events: list[AgentInput]) -> None:
        metrics = self.metrics
        for event in events:
            if type(event) is AudioReceived:
                continue  # most events: one test, as before
            if type(event) is ToolSettled:
                if metrics is not None:
                    calls = self._calls.get(session.session_id)
                    written = calls.pop(event.call_id, None) if calls else None
                    seconds = None
                    if written is not None:
                        seconds = asyncio.get_running_loop().time() - written
                    metrics.tool_settled(event.ok, event.code, seconds)
            elif type(event) is ResponseInterrupted:
                # The client interrupted (§6.2) or sent text over the response (§6.3).
                watch = self._watches.get(session.session_id)
                if watch is not None:
                    watch.interrupted(event.turn_id)

    def session_ended(
        self,
        session: ServerSession,
        reason: str,
        agent: Agent | None,
        agent_session: AgentSession | None,
    ) -> None:
        self._calls.pop(session.session_id, None)
        watch = self._watches.pop(session.session_id, None)
        if watch is not None:
            watch.close()  # before the session's span ends: the response's is its child
        if reason == "session closed" and session.ended is not None:
            reason = session.ended[1]  # e.g. "agent failed"
        if self.metrics is not None:
            usage = getattr(agent, "usage", None)
            dropped = agent_session.dropped_audio if agent_session is not None else 0
            self.metrics.session_ended(reason, usage, dropped)
        if self.tracer is not None:
            self.tracer.session_ended(session, reason)

    def tool_call_written(self, session: ServerSession, data: bytes, now: float) -> None:
        """A ``tool.call`` was written (a connection's meter saw it): the call's latency
        runs from now until its result."""
        try:
            call_id = _TOOL_CALL.decode(data).call_id
        except msgspec.DecodeError:
            return
        self._calls.setdefault(session.session_id, {}).setdefault(call_id, now)


class _Meter:
    """One connection's meter (``websocket.ConnectionMeter``).

    The two turn latencies are timed from the connection's frames: a user ``text``
    received starts the clock, which the reply's first ``text`` chunk stops; a turn that
    leaves ``listening`` (the agent heard the end of the speech) starts it, which the
    first output audio frame stops. The clock is dropped when the turn it waits on ends
    or is interrupted without either.
    """

    __slots__ = (
        "connection",
        "listening_turn",
        "loop",
        "metrics",
        "speech_end_at",
        "speech_turn",
        "telemetry",
        "text_at",
        "text_turn",
    )

    def __init__(self, telemetry: Telemetry, connection: ServerWebSocket) -> None:
        self.telemetry = telemetry
        self.metrics = telemetry.metrics
        self.connection = connection
        self.loop = connection.loop
        #: When the user text now waiting for its first reply chunk arrived, and the
        #: turn (id, epoch) that replies to it, once it began.
        self.text_at: float | None = None
        self.text_turn: tuple[str, int] | None = None
        #: When a turn left listening, and that turn, until its first audio.
        self.speech_end_at: float | None = None
        self.speech_turn: tuple[str, int] | None = None
        self.listening_turn = ""

    def received(self, text: bool, payload: bytes, seconds: float, now: float) -> None:
        metrics = self.metrics
        if metrics is None:
            return
        received = metrics.received
        if text:
            metrics.decode_text.observe(seconds)
            try:
                name = _RECEIVED_TYPE.decode(payload).type
            except msgspec.DecodeError:
                name = "invalid"
            tally = received.get(name) or received["invalid"]
            if name == "text":
                self.text_at, self.text_turn = now, None
        else:
            metrics.decode_binary.observe(seconds)
            audio = payload[:1] == _INPUT_AUDIO
            tally = received["audio" if audio else "invalid"]
        tally.count += 1
        tally.bytes += len(payload)

    def sent(self, outbox: list[Output], paused: bool) -> None:
        metrics = self.metrics
        sent: dict[bytes, Tally] | None = metrics.sent if metrics is not None else None
        for item in outbox:
            kind = type(item)
            if kind is SendText:
                data = item.data  # type: ignore[union-attr]
                # sent_type(), inline: "type":" follows the comma after the seq.
                start = data.find(b",", _TYPE_FROM) + _TYPE_SKIP
                name = data[start : data.find(b'"', start)]
                if sent is not None:
                    tally = sent.get(name)
                    if tally is not None:
                        tally.count += 1
                        tally.bytes += len(data)
                if name in _WATCHED:
                    if name == b"text" and self.text_at is None:
                        continue  # a chunk after the first of a reply: nothing to time
                    self._watched(name, data)
            elif kind is SendBinary:
                if metrics is None:
                    continue
                if paused:
                    metrics.output_audio_dropped += 1
                    continue
                tally = metrics.sent[b"audio"]
                tally.count += 1
                tally.bytes += len(item.data)  # type: ignore[union-attr]
                if self.speech_end_at is not None:
                    metrics.speech_first_audio.observe(self.loop.time() - self.speech_end_at)
                    self.speech_end_at = self.speech_turn = None
            else:
                if metrics is not None:
                    metrics.closed(item.code)  # type: ignore[union-attr]
                break

    def _watched(self, name: bytes, data: bytes) -> None:
        """A frame a latency or a trace needs: a reply's first chunk, a turn's state,
        an interruption, a tool call, an error."""
        metrics = self.metrics
        if name == b"text":
            if self.text_at is not None and metrics is not None:
                metrics.text_first_chunk.observe(self.loop.time() - self.text_at)
            self.text_at = self.text_turn = None
            return
        if name == b"error":
            if metrics is not None:
                try:
                    metrics.error_sent(_ERROR.decode(data).code)
                except msgspec.DecodeError:
                    metrics.error_sent("other")
            return
        session = self.connection.protocol.session
        if name == b"tool.call":
            if session is not None:
                self.telemetry.tool_call_written(session, data, self.loop.time())
            return
        tracer = self.telemetry.tracer
        if name == b"interrupted":
            epoch = _INTERRUPTED.decode(data).epoch
            if self.text_turn is not None and self.text_turn[1] == epoch:
                self.text_at = self.text_turn = None
            if self.speech_turn is not None and self.speech_turn[1] == epoch:
                self.speech_end_at = self.speech_turn = None
            if tracer is not None and session is not None:
                tracer.interrupted(session, epoch)
            return
        turn = _TURN_STATE.decode(data)
        key = (turn.turn_id, turn.epoch)
        if turn.state == "idle":
            if key == self.text_turn:
                self.text_at = self.text_turn = None
            if key == self.speech_turn:
                self.speech_end_at = self.speech_turn = None
        else:
            if self.text_at is not None and self.text_turn is None:
                self.text_turn = key
            if turn.state == "listening":
                self.listening_turn = turn.turn_id
            elif self.listening_turn == turn.turn_id:
                self.speech_end_at, self.speech_turn = self.loop.time(), key
                self.listening_turn = ""
        if tracer is not None and session is not None:
            tracer.turn_state(session, turn.turn_id, turn.epoch, turn.state)

    def connected(self) -> None:
        self.telemetry.meters.add(self)
        if self.metrics is not None:
            self.metrics.upgrades_accepted += 1

    def write_paused(self) -> None:
        if self.metrics is not None:
            self.metrics.write_pauses += 1

    def aborted(self, reason: str) -> None:
        if self.metrics is not None:
            self.metrics.aborted[reason] = self.metrics.aborted.get(reason, 0) + 1

    def disconnected(self) -> None:
        self.telemetry.meters.discard(self)
