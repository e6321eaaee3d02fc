"""``vrt.response`` spans whose turn's span is not there when the response ends
(tracing.py): with a shared store a turn's frames, which start its span, are written
after the agent ended the response; a parked session's are never written."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from vrt.agents.responses import Response
from vrt.protocol.messages import Hello
from vrt.protocol.server import ServerConfig, ServerSession
from vrt.server.tracing import MAX_PENDING, SessionTracer


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    yield exporter
    exporter.shutdown()


def tracer(spans: InMemorySpanExporter) -> SessionTracer:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    return SessionTracer(provider.get_tracer("test"))


def named(spans: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [span for span in spans.get_finished_spans() if span.name == name]


def response(turn_id: str) -> Response:
    return Response(turn_id, started=1.0, first_text=1.5, ended=3.0)


def test_a_response_waits_for_its_turns_span(spans: InMemorySpanExporter) -> None:
    sessions = tracer(spans)
    session = ServerSession(Hello(), ServerConfig())
    sessions.session_opened(session)
    sessions.response_ended(session.session_id, response("t_1"), "scripted")
    assert named(spans, "vrt.response") == []
    sessions.turn_state(session, "t_1", 1, "thinking")
    (made,) = named(spans, "vrt.response")
    sessions.turn_state(session, "t_1", 1, "idle")
    (turn,) = named(spans, "vrt.turn")
    assert made.parent is not None
    assert made.parent.span_id == turn.context.span_id
    assert made.start_time is not None
    assert made.end_time is not None
    assert made.end_time - made.start_time == 2_000_000_000  # the times it was measured at
    assert [event.timestamp - made.start_time for event in made.events] == [500_000_000]


def test_responses_of_turns_never_seen_are_the_sessions_children(
    spans: InMemorySpanExporter,
) -> None:
    """At most MAX_PENDING wait per session: a parked session's agent can go on
    answering, and no frame of its turns is written."""
    sessions = tracer(spans)
    session = ServerSession(Hello(), ServerConfig())
    sessions.session_opened(session)
    for k in range(MAX_PENDING + 3):
        sessions.response_ended(session.session_id, response(f"t_{k}"), "scripted")
    assert [dict(s.attributes or {})["vrt.turn_id"] for s in named(spans, "vrt.response")] == [
        "t_0",
        "t_1",
        "t_2",
    ]
    sessions.session_ended(session, "session closed")
    (session_span,) = named(spans, "vrt.session")
    made = named(spans, "vrt.response")
    assert len(made) == MAX_PENDING + 3
    for span in made:
        assert span.parent is not None
        assert span.parent.span_id == session_span.context.span_id


def test_the_agents_name_in_spans(spans: InMemorySpanExporter) -> None:
    """The metrics' name by default, else the one given, else ``custom``."""
    from vrt.server.metrics import ServerMetrics
    from vrt.server.telemetry import Telemetry

    sessions = tracer(spans)
    assert Telemetry(ServerMetrics("openai-chat"), sessions).agent == "openai-chat"
    assert Telemetry(tracer=sessions, agent="gemini-live").agent == "gemini-live"
    assert Telemetry(tracer=sessions).agent == "custom"
