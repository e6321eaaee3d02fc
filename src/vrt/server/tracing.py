"""OpenTelemetry spans: one per session, and one per turn inside it.

They are made only when ``opentelemetry-api`` is installed *and* a tracer provider is
configured (by ``opentelemetry-instrument``, or by the application before the server
starts, docs/operations.md#traces). Otherwise nothing is imported beyond a lookup of the
package, no observer is installed, and the server pays nothing.

A ``vrt.session`` span lasts from the session's ``ready`` to its end, with the session
id, the principal and how it ended; resumes are events on it. A ``vrt.turn`` span, its
child, lasts from the turn's first ``turn.state`` to ``idle`` or its interruption, with
the turn id, the epoch and each state as an event. A ``vrt.response`` span, the turn's
child, covers the turn's response as the agent seam measured it
(``vrt.agents.responses``): from its beginning to its end, with its first text and first
audio as events, its latencies and the tokens the model reported as attributes (the
OpenTelemetry GenAI names ``gen_ai.usage.*`` where they exist). It is made once the
response has ended and its turn's span exists, with the times it was measured at.
"""

from __future__ import annotations

import importlib.util
import time
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from ..agents.responses import Response
    from ..protocol.server import ServerSession

__all__ = ["SessionTracer", "configured_tracer"]


def configured_tracer() -> SessionTracer | None:
    """A tracer when OpenTelemetry is installed and a tracer provider is set, else None."""
    if importlib.util.find_spec("opentelemetry") is None:
        return None
    from opentelemetry import trace

    provider = trace.get_tracer_provider()
    if isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider)):
        return None
    from .. import __version__

    return SessionTracer(provider.get_tracer("vrt.server", __version__))


#: Responses whose turn has no span yet, per session, at most (see ``_Pending``).
MAX_PENDING: Final = 8


class _Spans:
    __slots__ = ("ended_turn", "ended_turn_id", "pending", "session", "turn", "turn_id")

    def __init__(self, session: Any) -> None:
        self.session = session
        self.turn: Any = None
        self.turn_id = ""
        #: The last turn span ended: a response can end after its turn's span (the
        #: client's interrupt is written before the agent hears of it).
        self.ended_turn: Any = None
        self.ended_turn_id = ""
        #: Responses that ended before their turn's first frame was written, by turn id.
        self.pending: dict[str, _Pending] = {}


class _Pending:
    """A response's span, measured when it ended, made once its turn's span exists:
    with a shared store a turn's frames are written once its journal reached the store
    (``journal.py``), after the agent may have ended the response. The times are in
    epoch nanoseconds, as spans carry them."""

    __slots__ = ("attributes", "end", "events", "start")

    def __init__(self, session_id: str, response: Response, agent: str) -> None:
        now_ns, now = time.time_ns(), response.ended

        def ns(at: float) -> int:
            return now_ns - round((now - at) * 1e9)

        attributes: dict[str, str | int | float] = {
            "vrt.session_id": session_id,
            "vrt.turn_id": response.turn_id,
            "vrt.agent": agent,
            "vrt.outcome": response.outcome,
            "vrt.response.duration": response.duration,
        }
        events: list[tuple[str, int]] = []
        if response.first_text is not None:
            attributes["vrt.response.time_to_first_text"] = response.first_text - response.started
            events.append(("vrt.response.first_text", ns(response.first_text)))
        if response.first_audio is not None:
            attributes["vrt.response.time_to_first_audio"] = response.first_audio - response.started
            events.append(("vrt.response.first_audio", ns(response.first_audio)))
        usage = response.usage
        if usage is not None:
            attributes.update(
                {
                    "gen_ai.usage.input_tokens": usage.input_tokens,
                    "gen_ai.usage.output_tokens": usage.output_tokens,
                    "gen_ai.usage.cache_read.input_tokens": usage.cached_input_tokens,
                    "vrt.usage.input_text_tokens": usage.input_text_tokens,
                    "vrt.usage.input_audio_tokens": usage.input_audio_tokens,
                    "vrt.usage.output_text_tokens": usage.output_text_tokens,
                    "vrt.usage.output_audio_tokens": usage.output_audio_tokens,
                }
            )
            rate = response.output_tokens_per_second
            if rate is not None:
                attributes["vrt.response.output_tokens_per_second"] = rate
        self.attributes = attributes
        self.events = sorted(events, key=lambda event: event[1])
        self.start = ns(response.started)
        self.end = ns(response.ended)


class SessionTracer:
    """Spans of the live sessions, fed by :class:`~vrt.server.telemetry.Telemetry`."""

    def __init__(self, tracer: Any) -> None:
        self.tracer = tracer
        self._spans: dict[str, _Spans] = {}

    def session_opened(self, session: ServerSession) -> None:
        attributes: dict[str, str] = {"vrt.session_id": session.session_id}
        if session.principal is not None:
            attributes["enduser.id"] = session.principal
        span = self.tracer.start_span("vrt.session", attributes=attributes)
        self._spans[session.session_id] = _Spans(span)

    def resumed(self, session_id: str, outcome: str) -> None:
        spans = self._spans.get(session_id)
        if spans is not None:
            spans.session.add_event("vrt.resume", {"vrt.outcome": outcome})

    def turn_state(self, session: ServerSession, turn_id: str, epoch: int, state: str) -> None:
        spans = self._spans.get(session.session_id)
        if spans is None:
            return
        if spans.turn_id != turn_id:
            self._end_turn(spans, "replaced")
            if state == "idle":
                return  # the end of a turn not seen begin (sent before a resume)
            from opentelemetry import trace

            context = trace.set_span_in_context(spans.session)
            spans.turn = self.tracer.start_span(
                "vrt.turn",
                context=context,
                attributes={
                    "vrt.session_id": session.session_id,
                    "vrt.turn_id": turn_id,
                    "vrt.epoch": epoch,
                },
            )
            spans.turn_id = turn_id
            pending = spans.pending.pop(turn_id, None) if spans.pending else None
            if pending is not None:
                self._response_span(pending, spans.turn)
        spans.turn.add_event("vrt.turn.state", {"vrt.state": state})
        if state == "idle":
            self._end_turn(spans, "idle")

    def interrupted(self, session: ServerSession, epoch: int) -> None:
        spans = self._spans.get(session.session_id)
        if spans is not None and spans.turn is not None:
            self._end_turn(spans, "interrupted")

    def response_ended(self, session_id: str, response: Response, agent: str) -> None:
        """A ``vrt.response`` span for ``response``, the child of its turn's span; made
        when that span begins if it has not yet, or as the session's child if it never
        does (the turn's frames were never written: the session was parked)."""
        spans = self._spans.get(session_id)
        if spans is None:
            return
        measured = _Pending(session_id, response, agent)
        turn_id = response.turn_id
        if spans.turn is not None and spans.turn_id == turn_id:
            self._response_span(measured, spans.turn)
        elif spans.ended_turn is not None and spans.ended_turn_id == turn_id:
            self._response_span(measured, spans.ended_turn)
        else:
            pending = spans.pending
            pending[turn_id] = measured
            if len(pending) > MAX_PENDING:  # turns whose frames were never written
                self._response_span(pending.pop(next(iter(pending))), spans.session)

    def session_ended(self, session: ServerSession, reason: str) -> None:
        spans = self._spans.pop(session.session_id, None)
        if spans is None:
            return
        self._end_turn(spans, "session ended")
        for measured in spans.pending.values():
            self._response_span(measured, spans.session)
        spans.session.set_attribute("vrt.outcome", reason)
        spans.session.end()

    def _response_span(self, measured: _Pending, parent: Any) -> None:
        from opentelemetry import trace

        span = self.tracer.start_span(
            "vrt.response",
            context=trace.set_span_in_context(parent),
            attributes=measured.attributes,
            start_time=measured.start,
        )
        for name, at in measured.events:
            span.add_event(name, timestamp=at)
        span.end(end_time=measured.end)

    @staticmethod
    def _end_turn(spans: _Spans, outcome: str) -> None:
        if spans.turn is not None:
            spans.turn.set_attribute("vrt.outcome", outcome)
            spans.turn.end()
            spans.ended_turn, spans.ended_turn_id = spans.turn, spans.turn_id
            spans.turn, spans.turn_id = None, ""
