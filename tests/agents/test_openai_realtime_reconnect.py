"""The openai-realtime agent keeps the conversation across provider sessions (issue 30,
point 6): after the service's maximum duration (``session_expired``, close 1001), a
dropped socket, or a recycle before the limit, the new provider session gets the
conversation so far (what was said, cut to what was heard, each tool call with its
result), and the client sees nothing of it but latency. A real VrtServer, a real
VrtClient, the stand-in of ``openai_realtime_standin.py``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest
from openai_realtime_standin import FunctionCall, Reply, StandIn
from voice_session import idle, payloads, session

from vrt.agents import AgentSetupError
from vrt.agents.history import AgentSaid, ConversationLog, HistoryEntry, UserSaid
from vrt.agents.openai_realtime import OpenAIRealtimeAgent, config_from
from vrt.client import (
    AudioChunk,
    ErrorReceived,
    InterruptedEpoch,
    RunTool,
    ToolContext,
    TranscriptReceived,
    TurnChanged,
    tool,
)
from vrt.server import VrtServer

API_KEY = "sk-standin-0123456789abcdefSECRET"


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    return API_KEY


@pytest.fixture
async def standin() -> AsyncIterator[StandIn]:
    async with StandIn(api_key=API_KEY) as running:
        yield running


async def serve(standin: StandIn, **options: Any) -> tuple[VrtServer, str]:
    config = replace(
        config_from({"base_url": standin.url, **options}, {}),
        reconnect_initial=0.01,
        reconnect_max=0.05,
        connect_timeout=1.0,
    )
    server = VrtServer(lambda info: OpenAIRealtimeAgent(config, API_KEY))
    return server, await server.start("127.0.0.1", 0)


@pytest.fixture
async def url(standin: StandIn) -> AsyncIterator[str]:
    server, served = await serve(standin)
    yield served
    await server.close()


@tool
async def get_weather(city: str, context: ToolContext) -> dict[str, str]:
    """The weather in a city."""
    return {"city": city, "sky": "sunny"}


def created_items(standin: StandIn, connection: int) -> list[dict[str, Any]]:
    """The items the adapter created on ``connection``, as (type, role, words) rows."""
    return [e["item"] for e in standin.events("conversation.item.create", connection=connection)]


def summary(item: dict[str, Any]) -> tuple[Any, ...]:
    if item["type"] == "message":
        return ("message", item["role"], item["content"][0]["text"])
    if item["type"] == "function_call":
        return ("function_call", item["call_id"], item["name"], json.loads(item["arguments"]))
    return ("function_call_output", item["call_id"], json.loads(item["output"]))


async def a_tool_turn(s: Any, standin: StandIn) -> None:
    standin.replies.append(
        Reply(
            audio=payloads(1, 960, seed=1),
            transcript=["Let me check."],
            calls=[FunctionCall("get_weather", '{"city":"Paris"}', "call_P1")],
        )
    )
    standin.replies.append(Reply(audio=payloads(2, 960, seed=2), transcript=["Sunny in Paris."]))
    await s.client.send_text("weather in Paris?")
    await s.next(RunTool)
    await s.next(TranscriptReceived, lambda e: e.role == "agent" and e.final and "Sunny" in e.text)
    await s.next(TurnChanged, idle)


REPLAYED = [
    ("message", "user", "weather in Paris?"),
    ("message", "assistant", "Let me check."),
    ("function_call", "call_P1", "get_weather", {"city": "Paris"}),
    ("function_call_output", "call_P1", {"output": {"city": "Paris", "sky": "sunny"}}),
    ("message", "assistant", "Sunny in Paris."),
]


async def test_the_conversation_is_replayed_after_the_maximum_duration(
    url: str, standin: StandIn
) -> None:
    async with session(url, tools=[get_weather]) as s:
        await standin.wait_for("session.update")
        await a_tool_turn(s, standin)
        await standin.connections[-1].expire()
        await standin.wait_for("session.update", connection=2)
        await s.client.send_text("and tomorrow?")
        await s.next(AudioChunk)
        await s.next(TurnChanged, idle)
        await s.drain(0.05)
        assert not s.all(ErrorReceived)
    replayed = [summary(item) for item in created_items(standin, 2)]
    assert replayed == [*REPLAYED, ("message", "user", "and tomorrow?")]
    received = [e for n, e in standin.received if n == 2]
    assert received[0]["type"] == "session.update"  # the configuration first


async def test_a_dropped_socket_keeps_the_conversation(url: str, standin: StandIn) -> None:
    async with session(url, tools=[get_weather]) as s:
        await standin.wait_for("session.update")
        await a_tool_turn(s, standin)
        standin.drop()
        await standin.wait_for("session.update", connection=2)
        await s.drain(0.05)
        assert not s.all(ErrorReceived)  # at a quiet moment: invisible
    assert [summary(item) for item in created_items(standin, 2)] == REPLAYED


async def test_a_question_whose_answer_had_not_begun_is_answered_by_the_next_session(
    url: str, standin: StandIn
) -> None:
    never = asyncio.Event()
    standin.replies.append(Reply(audio=payloads(1, 960, seed=3), transcript=["Late."], gate=never))
    standin.replies.append(Reply(audio=payloads(1, 960, seed=4), transcript=["Here."]))
    async with session(url) as s:
        await standin.wait_for("session.update")
        await s.client.send_text("are you there?")
        await standin.wait_for("response.create")
        while not standin.sent_events("response.content_part.added"):
            await asyncio.sleep(0.002)
        standin.drop()
        await standin.wait_for("response.create", connection=2)
        final = await s.next(TranscriptReceived, lambda e: e.role == "agent" and e.final)
        await s.next(TurnChanged, idle)
        await s.drain(0.05)
        assert final.text == "Here."
        assert not s.all(ErrorReceived)
        assert not s.all(InterruptedEpoch)
        assert len({e.turn_id for e in s.all(TurnChanged)}) == 1  # one turn, answered once
    assert [summary(item) for item in created_items(standin, 2)] == [
        ("message", "user", "are you there?")
    ]


async def test_an_answer_cut_by_a_drop_is_logged_as_far_as_it_was_sent(
    url: str, standin: StandIn
) -> None:
    words = ["One ", "two ", "three ", "four."]
    # A second between deltas: the drop comes long before the end of the answer.
    standin.replies.append(Reply(audio=payloads(4, 960, seed=5), transcript=words, interval=1.0))
    async with session(url) as s:
        await standin.wait_for("session.update")
        await s.client.send_text("count")
        await s.next(AudioChunk)
        await s.next(TranscriptReceived, lambda e: e.role == "agent")
        standin.drop()
        error = await s.next(ErrorReceived)
        assert error.recoverable
        assert "rest of it is lost" in error.message
        await s.next(InterruptedEpoch)
        await standin.wait_for("session.update", connection=2)
        await s.drain(0.05)
        got = len(s.all(AudioChunk))
    assert 1 <= got < len(words)
    assert [summary(item) for item in created_items(standin, 2)] == [
        ("message", "user", "count"),
        ("message", "assistant", "".join(words[:got]).strip()),  # what the client got
    ]


async def test_a_session_is_recycled_at_a_quiet_moment_when_asked(
    standin: StandIn,
) -> None:
    server, url = await serve(standin, recycle_after="0.2")
    try:
        gate = asyncio.Event()
        standin.replies.append(
            Reply(audio=payloads(1, 960, seed=6), transcript=["Slow answer."], gate=gate)
        )
        async with session(url) as s:
            await standin.wait_for("session.update")
            await s.client.send_text("hello")
            await s.next(TurnChanged, lambda e: e.state == "thinking")
            await asyncio.sleep(0.3)  # due while the answer is pending: not recycled yet
            assert len(standin.connections) == 1
            gate.set()
            await s.next(TurnChanged, idle)
            await standin.wait_connections(2)  # then, once quiet
            await standin.wait_for("session.update", connection=2)
            await s.drain(0.05)
            assert not s.all(ErrorReceived)
        assert standin.connections[0].ws.close_code == 1000
        assert [summary(item) for item in created_items(standin, 2)] == [
            ("message", "user", "hello"),
            ("message", "assistant", "Slow answer."),
        ]
    finally:
        await server.close()


def test_the_conversation_log_keeps_the_newest_within_its_bound() -> None:
    """A client that talks for hours makes the agent keep at most ``max_chars`` of the
    conversation: the oldest entries go first, a late write to a dropped slot is lost,
    and the newest entry stays even alone over the bound."""
    log = ConversationLog(max_chars=10_000)
    early = log.add()  # a transcript still to come
    for n in range(1_000):
        log.add(UserSaid(text=f"{n:04d}" + "x" * 996))
    assert log.chars <= 10_000
    kept = log.entries()
    assert 5 <= len(kept) <= 10
    assert isinstance(kept[-1], UserSaid)
    assert kept[-1].text.startswith("0999")
    early.entry = UserSaid(text="late")
    assert log.entries() == kept
    assert log.chars <= 10_000
    log.add(AgentSaid(turn_id=None, text="y" * 50_000))
    assert len(log.entries()) == 1


async def test_a_tool_call_running_across_a_reconnect_is_answered_by_the_next_session(
    url: str, standin: StandIn
) -> None:
    """The provider session ends while the client runs a tool: the result goes to the
    next session (its call replayed, its output once the result comes), which answers;
    the client sees one turn, no error, no interruption."""
    gate = asyncio.Event()

    @tool
    async def slow_weather(city: str, context: ToolContext) -> dict[str, str]:
        """The weather in a city, slowly."""
        await gate.wait()
        return {"city": city, "sky": "rainy"}

    standin.replies.append(
        Reply(
            audio=payloads(1, 960, seed=7),
            transcript=["Let me check."],
            calls=[FunctionCall("slow_weather", '{"city":"Oslo"}', "call_S1")],
        )
    )
    standin.replies.append(Reply(audio=payloads(1, 960, seed=8), transcript=["Rainy in Oslo."]))
    async with session(url, tools=[slow_weather]) as s:
        await standin.wait_for("session.update")
        await s.client.send_text("weather in Oslo?")
        await s.next(RunTool)
        while not standin.sent_events("response.done"):
            await asyncio.sleep(0.002)
        await standin.connections[-1].expire()
        await standin.wait_for("session.update", connection=2)
        await s.drain(0.05)
        assert [summary(item) for item in created_items(standin, 2)] == [
            ("message", "user", "weather in Oslo?"),
            ("message", "assistant", "Let me check."),
            ("function_call", "call_S1", "slow_weather", {"city": "Oslo"}),
        ]  # no output yet: the tool still runs
        gate.set()
        final = await s.next(
            TranscriptReceived, lambda e: e.role == "agent" and e.final and "Rainy" in e.text
        )
        await s.next(TurnChanged, idle)
        await s.drain(0.05)
        assert not s.all(ErrorReceived)
        assert not s.all(InterruptedEpoch)
        assert len({e.turn_id for e in s.all(TurnChanged)}) == 1
        assert final.turn_id == s.all(TurnChanged)[0].turn_id
    assert summary(created_items(standin, 2)[3]) == (
        "function_call_output",
        "call_S1",
        {"output": {"city": "Oslo", "sky": "rainy"}},
    )
    assert len(standin.events("response.create", connection=2)) == 1


async def test_a_moved_sessions_history_is_replayed_into_every_provider_session(
    standin: StandIn,
) -> None:
    """``restore`` (a session moved from another process) starts the log: the first
    provider session gets it, and so does the one after the maximum duration."""
    history: list[HistoryEntry] = [
        UserSaid(text="my name is Ada"),
        AgentSaid(turn_id="t1", text="Hello Ada.", spoken=True),
    ]
    config = replace(
        config_from({"base_url": standin.url}, {}), reconnect_initial=0.01, connect_timeout=1.0
    )

    def restored(info: object) -> OpenAIRealtimeAgent:
        agent = OpenAIRealtimeAgent(config, API_KEY)
        agent.restore(history)
        return agent

    server = VrtServer(restored)
    try:
        async with session(await server.start("127.0.0.1", 0)) as s:
            await standin.wait_for("session.update")
            await s.client.send_text("what is my name?")
            await s.next(TurnChanged, idle)
            await standin.connections[-1].expire()
            await standin.wait_for("session.update", connection=2)
            await s.drain(0.05)
            assert not s.all(ErrorReceived)
    finally:
        await server.close()
    first = [summary(item) for item in created_items(standin, 1)]
    assert first == [
        ("message", "user", "my name is Ada"),
        ("message", "assistant", "Hello Ada."),
        ("message", "user", "what is my name?"),
    ]
    assert [summary(item) for item in created_items(standin, 2)] == [
        *first,
        ("message", "assistant", "ok"),  # the stand-in's default answer
    ]


@pytest.mark.parametrize("value", ["-1", "soon", "inf"])
def test_recycle_after_must_be_a_number_of_seconds(value: str) -> None:
    with pytest.raises(AgentSetupError, match="recycle_after"):
        config_from({"recycle_after": value}, {})
    assert config_from({}, {"VRT_OPENAI_RECYCLE_AFTER": "1200"}).recycle_after == 1200.0
