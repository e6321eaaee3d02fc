"""OpenTelemetry spans: one per session, and one per turn inside it.

They are made only when ``opentelemetry-api`` is installed *and* a tracer provider is
configured (by ``opentelemetry-instrument``, or by the application before the server
starts, docs/operations.md#traces). Otherwise nothing is imported beyond a lookup of the
package, no observer is installed, and the server pays nothing.

A ``vrt.session`` span lasts from the session's ``ready`` to its end, with the session
id, the principal and how it ended; resumes are events on it. A ``vrt.turn`` span, its
child, lasts from the turn's first ``turn.state`` to ``idle`` or its interruption, with
the turn id, the epoch and each state as an event.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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


class _Spans:
    __slots__ = ("session", "turn", "turn_id")

    def __init__(self, session: Any) -> None:
        self.session = session
        self.turn: Any = None
        self.turn_id = ""


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
        spans.turn.add_event("vrt.turn.state", {"vrt.state": state})
        if state == "idle":
            self._end_turn(spans, "idle")

    def interrupted(self, session: ServerSession, epoch: int) -> None:
        spans = self._spans.get(session.session_id)
        if spans is not None and spans.turn is not None:
            self._end_turn(spans, "interrupted")

    def session_ended(self, session: ServerSession, reason: str) -> None:
        spans = self._spans.pop(session.session_id, None)
        if spans is None:
            return
        self._end_turn(spans, "session ended")
        spans.session.set_attribute("vrt.outcome", reason)
        spans.session.end()

    @staticmethod
    def _end_turn(spans: _Spans, outcome: str) -> None:
        if spans.turn is not None:
            spans.turn.set_attribute("vrt.outcome", outcome)
            spans.turn.end()
            spans.turn, spans.turn_id = None, ""
