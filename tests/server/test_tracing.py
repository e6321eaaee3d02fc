"""OpenTelemetry spans (tracing.py): one per session and one per turn inside it, when a
tracer provider is configured; none, and no observer at all, when it is not."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from support import Connect, StartServer, is_idle
from vrt.server.telemetry import Telemetry
from vrt.server.tracing import SessionTracer, configured_tracer


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    yield exporter
    exporter.shutdown()


def test_without_a_configured_provider_there_is_no_tracer() -> None:
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    assert configured_tracer() is None


async def test_a_session_span_with_a_span_per_turn(
    start: StartServer, connect: Connect, spans: InMemorySpanExporter
) -> None:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    tracer = SessionTracer(provider.get_tracer("test"))
    running = await start(observer=Telemetry(tracer=tracer))
    client = await connect(running.url)
    ready = await client.hello()
    await client.text("echo one")
    await client.until(is_idle)
    await client.text("speak 2000")
    await client.until(lambda item: True)  # the turn began
    await client.send_sequenced("interrupt", epoch=2, reason="user")
    await client.until(
        lambda item: getattr(getattr(item, "message", None), "TYPE", "") == "interrupted"
    )
    await running.server.close()
    finished = spans.get_finished_spans()
    sessions = [s for s in finished if s.name == "vrt.session"]
    turns = [s for s in finished if s.name == "vrt.turn"]
    assert len(sessions) == 1
    session = sessions[0]
    assert session.attributes is not None
    assert session.attributes["vrt.session_id"] == ready.session_id
    shared = running.server.store.shared
    assert session.attributes["vrt.outcome"] == (
        "handed off to another process" if shared else "server shutting down"
    )
    assert [t.attributes["vrt.outcome"] for t in turns if t.attributes] == ["idle", "interrupted"]
    for turn in turns:
        assert turn.parent is not None
        assert turn.parent.span_id == session.context.span_id
    first_states = [e.attributes["vrt.state"] for e in turns[0].events if e.attributes]
    assert first_states[0] == "thinking"
    assert first_states[-1] == "idle"
