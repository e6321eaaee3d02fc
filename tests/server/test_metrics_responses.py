"""Per-response metrics and spans over a real server and client (docs/operations.md):
the scripted agent's replies, text and audio, completed and interrupted, and the
tokens per modality of an agent that reports usage as the model adapters do. Values are
checked for what the order of events fixes (the first text before the first audio of
an ``echo``, both within the response), never against elapsed time."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from support import Connect, RunningServer, StartServer, audio, is_idle, of_type, speech
from vrt.agents.base import AgentInput, AgentSession, SessionInfo, UserTextReceived
from vrt.agents.usage import TokenUsage
from vrt.audio import frame_bytes
from vrt.protocol.messages import PCM16_24K, Interrupted, TurnState
from vrt.server.metrics import ServerMetrics, make_registry
from vrt.server.telemetry import Telemetry
from vrt.server.tracing import SessionTracer

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]
log = logging.getLogger("test")


def scrape(metrics: ServerMetrics) -> Samples:
    """Every sample of the exposition ``/metrics`` serves, by name and labels."""
    text = generate_latest(make_registry(metrics)).decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    key = (name, tuple(sorted(labels.items())))
    assert key in samples, f"no sample {key}"
    return samples[key]


@dataclass
class Observed:
    running: RunningServer
    metrics: ServerMetrics
    spans: InMemorySpanExporter

    def responses(self) -> list[ReadableSpan]:
        return [span for span in self.spans.get_finished_spans() if span.name == "vrt.response"]

    def turn_span(self, turn_id: str) -> ReadableSpan:
        (span,) = [
            span
            for span in self.spans.get_finished_spans()
            if span.name == "vrt.turn" and (span.attributes or {}).get("vrt.turn_id") == turn_id
        ]
        return span


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    yield exporter
    exporter.shutdown()


async def observe(
    start: StartServer, spans: InMemorySpanExporter, metrics: ServerMetrics, **options: object
) -> Observed:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    tracer = SessionTracer(provider.get_tracer("test"))
    running = await start(observer=Telemetry(metrics, tracer), **options)
    metrics.bind(running.server)  # as the operations listener does
    return Observed(running, metrics, spans)


def attributes(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def assert_within(span: ReadableSpan) -> None:
    """The span's events lie between its start and end, in the order they happened."""
    assert span.start_time is not None
    assert span.end_time is not None
    times = [span.start_time, *(event.timestamp for event in span.events), span.end_time]
    assert times == sorted(times), times


async def test_a_text_and_audio_reply(
    start: StartServer, connect: Connect, spans: InMemorySpanExporter
) -> None:
    observed = await observe(start, spans, ServerMetrics("scripted"))
    client = await connect(observed.running.url)
    await client.hello()
    await client.text("echo hello world")  # chunks, a transcript, 200 ms of audio, idle
    items = await client.until(is_idle)
    assert audio(items)
    samples = scrape(observed.metrics)
    agent = {"agent": "scripted"}
    duration = "vrt_response_duration_seconds"
    assert value(samples, f"{duration}_count", **agent, outcome="completed") == 1
    assert value(samples, f"{duration}_count", **agent, outcome="interrupted") == 0
    first_text = value(samples, "vrt_response_time_to_first_text_seconds_sum", **agent)
    first_audio = value(samples, "vrt_response_time_to_first_audio_seconds_sum", **agent)
    assert value(samples, "vrt_response_time_to_first_text_seconds_count", **agent) == 1
    assert value(samples, "vrt_response_time_to_first_audio_seconds_count", **agent) == 1
    # echo sends its text before its audio, and both before its end.
    assert (
        0
        <= first_text
        <= first_audio
        <= value(samples, f"{duration}_sum", **agent, outcome="completed")
    )
    for direction in ("input", "output"):
        for modality in ("text", "audio"):
            kind = {**agent, "direction": direction, "modality": modality}
            assert value(samples, "vrt_response_tokens_count", **kind) == 0  # no usage
    assert value(samples, "vrt_response_output_tokens_per_second_count", **agent) == 0

    (response,) = observed.responses()
    found = attributes(response)
    turn = of_type(items, TurnState)[0]
    assert found["vrt.turn_id"] == turn.turn_id
    assert found["vrt.agent"] == "scripted"
    assert found["vrt.outcome"] == "completed"
    assert (
        0 <= found["vrt.response.time_to_first_text"] <= found["vrt.response.time_to_first_audio"]
    )
    assert "gen_ai.usage.input_tokens" not in found
    assert [event.name for event in response.events] == [
        "vrt.response.first_text",
        "vrt.response.first_audio",
    ]
    assert_within(response)
    parent = observed.turn_span(turn.turn_id)
    assert response.parent is not None
    assert response.parent.span_id == parent.context.span_id


async def test_interrupted_responses_and_a_spoken_exchange(
    start: StartServer, connect: Connect, spans: InMemorySpanExporter
) -> None:
    observed = await observe(start, spans, ServerMetrics("scripted"))
    client = await connect(observed.running.url)
    await client.hello()
    # The client's interrupt (§6.2) once the reply's audio plays.
    await client.text("speak 2000")
    began = await client.expect_message(TurnState)
    await client.until(lambda item: bool(audio([item])))
    await client.send_sequenced("interrupt", epoch=began.epoch, reason="user")
    await client.expect_message(Interrupted)
    # New text over a reply in flight interrupts it (§6.3).
    await client.text("speak 2000")
    spoken = await client.expect_message(TurnState)
    await client.until(lambda item: bool(audio([item])))
    await client.text("echo over")
    await client.until(is_idle)
    # Speech: the response begins when the turn leaves listening.
    for frame in speech(300):
        await client.send(frame)
    heard = await client.until(is_idle, timeout=5)
    listening = [turn.turn_id for turn in of_type(heard, TurnState) if turn.state == "listening"]
    assert listening

    samples = scrape(observed.metrics)
    agent = {"agent": "scripted"}
    duration = "vrt_response_duration_seconds_count"
    assert value(samples, duration, **agent, outcome="interrupted") == 2
    assert value(samples, duration, **agent, outcome="completed") == 2
    assert value(samples, "vrt_response_time_to_first_audio_seconds_count", **agent) == 4
    assert value(samples, "vrt_response_time_to_first_text_seconds_count", **agent) == 2

    responses = {attributes(span)["vrt.turn_id"]: span for span in observed.responses()}
    assert len(responses) == 4
    for turn_id in (began.turn_id, spoken.turn_id):
        interrupted = responses[turn_id]
        found = attributes(interrupted)
        assert found["vrt.outcome"] == "interrupted"
        assert "vrt.response.time_to_first_text" not in found  # speak sends no text
        assert 0 <= found["vrt.response.time_to_first_audio"] <= found["vrt.response.duration"]
        assert_within(interrupted)
        # The turn's span ended with the interrupted frame, before the agent heard of
        # it; the response's span is its child all the same.
        parent = observed.turn_span(turn_id)
        assert interrupted.parent is not None
        assert interrupted.parent.span_id == parent.context.span_id
    answer = responses[listening[-1]]
    assert attributes(answer)["vrt.outcome"] == "completed"
    # The answer to speech is the response of the turn that began listening.
    assert answer.parent is not None
    assert answer.parent.span_id == observed.turn_span(listening[-1]).context.span_id


class UsageAgent:
    """Answers each text with a chunk and an audio frame, and reports token usage per
    response as the model adapters do (``TokenUsage.record``): the figures of an
    OpenAI Realtime ``response.done``, whose ``input_tokens`` and ``output_tokens``
    include the audio tokens of ``input_token_details`` and ``output_token_details``
    (openai-python ``types/realtime/realtime_response_usage.py``)."""

    input_formats = (PCM16_24K,)
    output_formats = (PCM16_24K,)

    def __init__(self) -> None:
        self.usage = TokenUsage()

    async def run(self, session: AgentSession) -> None:
        await session.listen(lambda event: self.handle(session, event))

    def handle(self, session: AgentSession, event: AgentInput) -> None:
        if not isinstance(event, UserTextReceived):
            return
        turn = session.begin_turn("thinking")
        turn.text("an answer")
        item = turn.audio()
        assert item is not None
        item.write(bytes(frame_bytes(PCM16_24K, 20)))
        self.usage.record(
            log,
            session.session_id,
            input_tokens=120,
            cached_input_tokens=20,
            input_audio_tokens=80,
            output_tokens=60,
            output_audio_tokens=45,
        )
        turn.end()


async def test_tokens_per_modality_from_the_agents_usage(
    start: StartServer, connect: Connect, spans: InMemorySpanExporter
) -> None:
    def factory(info: SessionInfo) -> UsageAgent:
        return UsageAgent()

    observed = await observe(start, spans, ServerMetrics(), agent_factory=factory)
    client = await connect(observed.running.url)
    await client.hello()
    for text in ("one", "two"):
        await client.text(text)
        await client.until(is_idle)

    samples = scrape(observed.metrics)
    agent = {"agent": "custom"}  # the name of an agent vrt serve does not know
    for direction, modality, tokens in (
        ("input", "text", 40),
        ("input", "audio", 80),
        ("output", "text", 15),
        ("output", "audio", 45),
    ):
        kind = {**agent, "direction": direction, "modality": modality}
        assert value(samples, "vrt_response_tokens_count", **kind) == 2
        assert value(samples, "vrt_response_tokens_sum", **kind) == 2 * tokens
        assert (
            value(samples, "vrt_model_tokens_total", **agent, direction=direction, kind=modality)
            == 2 * tokens
        )
    assert value(samples, "vrt_response_output_tokens_per_second_count", **agent) == 2
    assert value(samples, "vrt_response_output_tokens_per_second_sum", **agent) > 0

    first, second = observed.responses()
    for span in (first, second):
        found = attributes(span)
        assert found["gen_ai.usage.input_tokens"] == 120
        assert found["gen_ai.usage.output_tokens"] == 60
        assert found["gen_ai.usage.cache_read.input_tokens"] == 20
        assert found["vrt.usage.input_text_tokens"] == 40
        assert found["vrt.usage.input_audio_tokens"] == 80
        assert found["vrt.usage.output_text_tokens"] == 15
        assert found["vrt.usage.output_audio_tokens"] == 45
        rate = found["vrt.response.output_tokens_per_second"]
        assert rate == pytest.approx(60 / found["vrt.response.duration"])


async def test_without_telemetry_no_agent_is_watched(start: StartServer, connect: Connect) -> None:
    """The output audio path then tests one attribute per frame and does nothing more."""
    running = await start()
    client = await connect(running.url)
    await client.hello()
    await client.text("echo hi")
    await client.until(is_idle)
    ((_, agent_session),) = running.server.agents()
    assert agent_session.watch is None
    await asyncio.sleep(0)


async def test_a_response_the_session_ending_cuts_short(
    start: StartServer, connect: Connect, spans: InMemorySpanExporter
) -> None:
    observed = await observe(start, spans, ServerMetrics("scripted"))
    client = await connect(observed.running.url)
    await client.hello()
    await client.text("speak 2000")
    began = await client.expect_message(TurnState)
    await client.until(lambda item: bool(audio([item])))
    await observed.running.server.close()
    samples = scrape(observed.metrics)
    count = "vrt_response_duration_seconds_count"
    assert value(samples, count, agent="scripted", outcome="interrupted") == 1
    assert value(samples, count, agent="scripted", outcome="completed") == 0
    (response,) = observed.responses()
    assert attributes(response)["vrt.turn_id"] == began.turn_id
    assert attributes(response)["vrt.outcome"] == "interrupted"
