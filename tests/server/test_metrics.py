"""The operations listener (docs/operations.md): metrics that move as a scripted
conversation runs, /healthz, and /readyz turning false while the server drains."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from support import (
    Connect,
    RunningServer,
    StartServer,
    chunks,
    eventually,
    is_idle,
    speech,
)
from vrt.protocol.codec import encode
from vrt.protocol.errors import LocalProtocolError
from vrt.protocol.messages import (
    PCM16_24K,
    AgentText,
    AudioStart,
    Error,
    Hello,
    Interrupted,
    Pong,
    Ready,
    ToolCall,
    Transcript,
    TurnState,
)
from vrt.server.health import OperationsListener, parse_address
from vrt.server.metrics import ServerMetrics
from vrt.server.telemetry import Telemetry, sent_type

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@dataclass
class Observed:
    running: RunningServer
    operations: OperationsListener

    async def get(self, path: str) -> httpx.Response:
        async with httpx.AsyncClient() as http:
            return await http.get(self.operations.url + path, timeout=5)

    async def scrape(self) -> Samples:
        """Every sample, by name and labels."""
        response = await self.get("/metrics")
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
        return {
            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(response.text)
            for sample in family.samples
        }


def value(
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.fixture
async def observed(start: StartServer) -> AsyncIterator[Observed]:
    metrics = ServerMetrics("scripted")
    running = await start(observer=Telemetry(metrics))
    operations = OperationsListener(running.server, metrics)
    await operations.start("127.0.0.1", 0)
    try:
        yield Observed(running, operations)
    finally:
        await operations.close()


async def test_the_metrics_move_as_a_conversation_runs(
    observed: Observed, connect: Connect
) -> None:
    before = await observed.scrape()
    assert value(before, "vrt_sessions_opened_total") == 0
    assert value(before, "vrt_build_info", version=__import__("vrt").__version__) == 1
    client = await connect(observed.running.url, auto_ack=True)
    ready = await client.hello(tools=[{"name": "add"}])
    await client.text("echo hello world")
    assert chunks(await client.until(is_idle)) == ["hello", " world"]
    await client.text('call add {"a":2,"b":3}')
    call = await client.expect_message(ToolCall)
    await client.send_sequenced(
        "tool.result", callId=call.call_id, epoch=call.epoch, ok=True, output=5
    )
    await client.until(is_idle)
    for frame in speech(300):
        await client.send(frame)
    await client.until(is_idle, timeout=5)
    await client.ping()
    await client.send('{"v":1,"seq":0,"type":"nonsense"}')
    await asyncio.sleep(0.6)  # the event-loop probe runs every 0.5 s

    during = await observed.scrape()
    assert value(during, "vrt_sessions_opened_total") == 1
    assert value(during, "vrt_sessions", state="connected") == 1
    assert value(during, "vrt_connections") >= 1
    assert value(during, "vrt_connections_accepted_total") == 1
    assert value(during, "vrt_messages_received_total", type="hello") == 1
    assert value(during, "vrt_messages_received_total", type="text") == 2
    assert value(during, "vrt_messages_received_total", type="tool.result") == 1
    assert value(during, "vrt_messages_received_total", type="ping") == 1
    assert value(during, "vrt_messages_received_total", type="invalid") == 1
    assert value(during, "vrt_messages_received_total", type="audio") == len(speech(300))
    assert value(during, "vrt_messages_received_bytes_total", type="audio") > 0
    assert value(during, "vrt_messages_sent_total", type="ready") == 1
    assert value(during, "vrt_messages_sent_total", type="text") >= 4
    assert value(during, "vrt_messages_sent_total", type="tool.call") == 1
    assert value(during, "vrt_messages_sent_total", type="pong") == 1
    assert value(during, "vrt_messages_sent_total", type="audio") > 0
    assert value(during, "vrt_messages_sent_bytes_total", type="turn.state") > 0
    assert value(during, "vrt_errors_sent_total", code="UNKNOWN_TYPE") == 1
    assert value(during, "vrt_tool_calls_total", outcome="ok") == 1
    assert value(during, "vrt_tool_call_seconds_count") == 1
    assert value(during, "vrt_text_first_chunk_seconds_count") == 2
    assert 0 < value(during, "vrt_text_first_chunk_seconds_sum") < 2
    assert value(during, "vrt_speech_first_audio_seconds_count") == 1
    assert value(during, "vrt_decode_seconds_count", frame="text") >= 5
    assert value(during, "vrt_decode_seconds_count", frame="binary") == len(speech(300))
    assert value(during, "vrt_event_loop_lag_seconds_count") >= 1
    assert value(during, "vrt_ready") == 1
    assert value(during, "process_resident_memory_bytes") > 0

    client.abort()  # the session parks, then resumes
    server = observed.running.server
    await eventually(lambda: server.parked_count == 1, 5.0, "the session parked")
    parked = await observed.scrape()
    assert value(parked, "vrt_sessions", state="parked") == 1
    assert value(parked, "vrt_sessions", state="connected") == 0
    again = await connect(observed.running.url)
    await again.hello(sessionId=ready.session_id, resumeFrom=client.last_seq)
    stranger = await connect(observed.running.url)
    await stranger.send_hello(sessionId="s_unknown", resumeFrom=0)
    await stranger.closed()
    resumed = await observed.scrape()
    assert value(resumed, "vrt_resumes_total", outcome="resumed") == 1
    assert value(resumed, "vrt_resumes_total", outcome="refused") == 1
    assert value(resumed, "vrt_closes_total", code="4404") == 0  # not a metric name
    assert value(resumed, "vrt_connections_closed_total", code="4404") == 1
    await again.close()
    await eventually(lambda: server.parked_count == 1, 5.0, "parked again")
    await server.close()
    ended = await observed.scrape()
    # In memory a shutdown ends the session; with a shared store it lives on in the store.
    outcome = "handed_off" if server.store.shared else "shutdown"
    assert value(ended, "vrt_sessions_ended_total", outcome=outcome) == 1
    assert value(ended, "vrt_draining") == 1


async def test_refused_upgrades_and_sessions_are_counted(
    start: StartServer, connect: Connect
) -> None:
    metrics = ServerMetrics()
    running = await start(observer=Telemetry(metrics), max_sessions=1)
    operations = OperationsListener(running.server, metrics)
    await operations.start("127.0.0.1", 0)
    try:
        observed = Observed(running, operations)
        async with httpx.AsyncClient() as http:
            refused = await http.get(
                running.url.replace("ws://", "http://"),
                headers={
                    "Origin": "https://evil.example",
                    "Upgrade": "websocket",
                    "Connection": "Upgrade",
                    "Sec-WebSocket-Version": "13",
                    "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
                },
            )
            assert refused.status_code == 403
        first = await connect(running.url)
        await first.hello()
        second = await connect(running.url)
        await second.send_hello()
        await second.closed()
        samples = await observed.scrape()
        assert value(samples, "vrt_connections_refused_total", reason="origin") == 1
        assert value(samples, "vrt_sessions_refused_total", reason="limit") == 1
        assert value(samples, "vrt_errors_sent_total", code="START_FAILED") == 1
        assert value(samples, "vrt_connections_closed_total", code="1011") == 1
    finally:
        await operations.close()


async def test_health_and_readiness_during_a_drain(observed: Observed, connect: Connect) -> None:
    """/readyz answers 503 as soon as shutdown() begins (a load balancer stops sending
    clients) while /healthz stays 200 and the replies in flight finish."""
    assert (await observed.get("/healthz")).text == "ok\n"
    ready = await observed.get("/readyz")
    assert (ready.status_code, ready.text) == (200, "ready\n")
    client = await connect(observed.running.url)
    await client.hello()
    await client.text("speak 1500")  # a reply in flight holds the drain
    await client.expect_message(AudioStart)
    drain = asyncio.get_running_loop().create_task(observed.running.server.shutdown(5.0))
    await asyncio.sleep(0.1)
    assert not drain.done()
    draining = await observed.get("/readyz")
    assert draining.status_code == 503
    assert draining.text.startswith("draining")
    assert (await observed.get("/healthz")).status_code == 200
    samples = await observed.scrape()
    assert value(samples, "vrt_ready") == 0
    await drain
    assert (await observed.get("/nowhere")).status_code == 404


async def test_readiness_follows_a_session_store_that_can_be_pinged(start: StartServer) -> None:
    class Store:
        """A memory store that a test can make unreachable."""

        def __init__(self) -> None:
            from vrt.server import MemorySessionStore

            self.inner = MemorySessionStore()
            self.up = True

        def __getattr__(self, name: str) -> object:
            return getattr(self.inner, name)

        async def ping(self) -> bool:
            if not self.up:
                raise ConnectionError("store down")
            return True

    store = Store()
    metrics = ServerMetrics()
    running = await start(observer=Telemetry(metrics), store=store)
    operations = OperationsListener(running.server, metrics)
    await operations.start("127.0.0.1", 0)
    try:
        observed = Observed(running, operations)
        await eventually(lambda: operations.ready()[0], 5.0, "ready")
        store.up = False
        await eventually(lambda: not operations.ready()[0], 5.0, "not ready")
        answer = await observed.get("/readyz")
        assert (answer.status_code, answer.text) == (503, "the session store does not answer\n")
        store.up = True
        await eventually(lambda: operations.ready()[0], 5.0, "ready again")
    finally:
        await operations.close()


def test_the_sent_type_is_read_from_every_server_message() -> None:
    """The I/O path finds a written frame's type by a byte search, which holds because
    vrt's encoder writes v, seq and type first (codec.encode)."""
    messages = [
        Ready(session_id="s_1", input=PCM16_24K, output=PCM16_24K),
        TurnState(turn_id="t_1", epoch=1, state="thinking"),
        AgentText(text='"type":"error"', turn_id="t_1"),
        Transcript(role="agent", text="x", final=True, item_id=None, turn_id=None),
        Interrupted(epoch=4294967295),
        Pong(),
        Error(code="MALFORMED", message="m", recoverable=True),
        Hello(),
    ]
    for message in messages:
        encoded = []
        for seq in (0, 7, 4294967295):
            with contextlib.suppress(LocalProtocolError):  # a seq of the wrong class (§4.1)
                encoded.append(encode(message, seq))
        assert encoded, message
        for data in encoded:
            assert sent_type(data) == message.TYPE.encode(), data


def test_metrics_addresses() -> None:
    assert parse_address(":9100") == ("127.0.0.1", 9100)
    assert parse_address("0.0.0.0:9100") == ("0.0.0.0", 9100)
    assert parse_address("[::1]:9100") == ("::1", 9100)
    for bad in ("9100", "host:", "host:port", "host:70000"):
        with pytest.raises(ValueError, match="HOST:PORT"):
            parse_address(bad)


async def test_every_metric_is_documented(observed: Observed) -> None:
    """docs/operations.md has a row for every metric the server exports, and no other."""
    from pathlib import Path

    docs = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    documented = set(re.findall(r"^\| `(vrt_[a-z_]+)` \|", docs, re.MULTILINE))
    response = await observed.get("/metrics")
    exported = {
        family.name + ("_total" if family.type == "counter" else "")
        for family in text_string_to_metric_families(response.text)
        if family.name.startswith("vrt_")
    }
    assert exported == documented
