"""A long session of the openai-realtime agent, in compressed time (issue 30, "How to
test"): three provider session lifetimes in one vRT session, each ended as the
service ends a session at its maximum duration (``session_expired``, then close 1001),
each with text questions, a tool call and a barge-in by speech; the first ends at a
quiet moment, the second while a client tool runs. The client sees every answer
exactly once and no error; every new provider session starts with the
conversation the previous one held (the stand-in's record of each session's items,
:meth:`StandIn.conversation`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest
from openai_realtime_standin import FunctionCall, Reply, StandIn
from voice_session import Session, idle, payloads, session, silence_frames, speech_frames

from vrt.agents.openai_realtime import OpenAIRealtimeAgent, config_from
from vrt.client import (
    AudioChunk,
    ErrorReceived,
    InterruptedEpoch,
    RunTool,
    SessionFailed,
    ToolContext,
    TranscriptReceived,
    TurnChanged,
    tool,
)
from vrt.protocol.messages import PCM16_24K
from vrt.server import VrtServer

API_KEY = "sk-standin-0123456789abcdefSECRET"
LIFETIMES = 3


@pytest.fixture
async def standin(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[StandIn]:
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    async with StandIn(api_key=API_KEY, user_transcript="wait a moment") as running:
        yield running


@tool
async def get_weather(city: str, context: ToolContext) -> dict[str, str]:
    """The weather in a city."""
    return {"city": city, "sky": "sunny"}


#: Holds ``slow_weather`` until set: a tool still running when a provider session ends.
SLOW = asyncio.Event()


@tool
async def slow_weather(city: str, context: ToolContext) -> dict[str, str]:
    """The weather in a city, slowly."""
    await SLOW.wait()
    return {"city": city, "sky": "rainy"}


async def configured(standin: StandIn, connection: int) -> None:
    """Until the provider session ``connection`` confirmed its configuration."""
    await standin.wait_connections(connection)
    await standin.wait_for("session.update", connection=connection)
    while not any(
        number == connection and event["type"] == "session.updated"
        for number, event in standin.sent
    ):
        await asyncio.sleep(0.002)


async def called_and_done(standin: StandIn, connection: int, call_id: str) -> None:
    """Until the response that made the call ``call_id`` on ``connection`` is done."""

    def made_it(event: dict[str, Any]) -> bool:
        output = event["response"]["output"] if event["type"] == "response.done" else []
        return any(item.get("call_id") == call_id for item in output)

    while not any(number == connection and made_it(e) for number, e in standin.sent):
        await asyncio.sleep(0.002)


def agent_finals(s: Session) -> list[str]:
    return [e.text for e in s.all(TranscriptReceived) if e.role == "agent" and e.final]


async def one_lifetime(s: Session, standin: StandIn, n: int) -> list[str]:
    """Text, a tool call, a barge-in by speech: the answers the client must hear."""
    standin.replies.append(Reply(audio=payloads(2, 960, seed=n), transcript=[f"Answer {n}."]))
    await s.client.send_text(f"question {n}")
    await s.next(TranscriptReceived, lambda e: e.role == "agent" and e.final)
    await s.next(TurnChanged, idle)

    standin.replies.append(
        Reply(
            audio=payloads(1, 960, seed=10 + n),
            transcript=["Let me check."],
            calls=[FunctionCall("get_weather", f'{{"city":"City{n}"}}', f"call_{n}")],
        )
    )
    standin.replies.append(
        Reply(audio=payloads(2, 960, seed=20 + n), transcript=[f"Sunny in City{n}."])
    )
    await s.client.send_text(f"weather in City{n}?")
    await s.next(RunTool)
    await s.next(TranscriptReceived, lambda e: e.role == "agent" and e.final and "Sunny" in e.text)
    await s.next(TurnChanged, idle)

    # A long answer the user talks over after its first words.
    words = [f"Story {n} word {k} " for k in range(40)]
    # The service sends audio it made before the cancel took effect (after_cancel): the
    # adapter cuts the item to what the client got (conversation.item.truncate).
    standin.replies.append(
        Reply(audio=payloads(40, 960, seed=30 + n), transcript=words, interval=0.05, after_cancel=3)
    )
    standin.replies.append(
        Reply(audio=payloads(2, 960, seed=40 + n), transcript=[f"Sure, waiting {n}."])
    )
    await s.client.send_text(f"tell me story {n}")
    await s.next(AudioChunk)
    for frame in speech_frames(PCM16_24K):
        assert s.client.send_audio(frame)
    await s.next(InterruptedEpoch)
    # Real speech lasts longer than the cancel takes: the silence after it comes later.
    await standin.wait_for("response.cancel", connection=n)
    for frame in silence_frames(PCM16_24K):
        assert s.client.send_audio(frame)
    await s.next(TranscriptReceived, lambda e: e.role == "agent" and e.final and "Sure" in e.text)
    await s.next(TurnChanged, idle)
    # The user's transcript ends asynchronously: wait for it before the session ends.
    await s.find(TranscriptReceived, lambda e: e.role == "user" and e.final)
    return [f"Answer {n}.", "Let me check.", f"Sunny in City{n}.", f"Sure, waiting {n}."]


async def test_three_provider_lifetimes_keep_the_conversation(standin: StandIn) -> None:
    config = replace(
        config_from({"base_url": standin.url}, {}),
        reconnect_initial=0.01,
        reconnect_max=0.05,
        connect_timeout=2.0,
    )
    server = VrtServer(lambda info: OpenAIRealtimeAgent(config, API_KEY))
    url = await server.start("127.0.0.1", 0)
    expected: list[str] = []
    held: list[list[tuple[str, str, str, bool]]] = []
    try:
        async with session(url, tools=[get_weather, slow_weather]) as s:
            for n in range(1, LIFETIMES + 1):
                await configured(standin, n)
                expected += await one_lifetime(s, standin, n)
                await s.drain(0.05)  # let the stand-in see the last truncations
                held.append(standin.conversation(n))
                if n == 1:
                    await standin.connections[-1].expire()  # at a quiet moment
                elif n < LIFETIMES:
                    # While a tool runs: its result goes to the next provider session.
                    SLOW.clear()
                    standin.replies.append(
                        Reply(
                            audio=payloads(1, 960, seed=50),
                            transcript=["One moment."],
                            calls=[FunctionCall("slow_weather", '{"city":"Oslo"}', "call_slow")],
                        )
                    )
                    standin.replies.append(
                        Reply(audio=payloads(2, 960, seed=51), transcript=["Rainy in Oslo."])
                    )
                    await s.client.send_text("weather in Oslo?")
                    await s.next(RunTool)
                    await called_and_done(standin, n, "call_slow")
                    await standin.connections[-1].expire()
                    await configured(standin, n + 1)
                    SLOW.set()
                    await s.next(
                        TranscriptReceived,
                        lambda e: e.role == "agent" and e.final and "Rainy" in e.text,
                    )
                    await s.next(TurnChanged, idle)
                    expected += ["One moment.", "Rainy in Oslo."]
            await s.drain(0.1)
            assert agent_finals(s) == expected  # every answer, exactly once
            assert not s.all(ErrorReceived)
            assert not s.all(SessionFailed)
            assert s.client.connected
    finally:
        await server.close()
    assert len(standin.connections) == LIFETIMES

    for n in range(2, LIFETIMES + 1):
        before = held[n - 2]
        replayed = standin.conversation(n)[: len(before)]
        assert len(replayed) == len(before)
        for old, new in zip(before, replayed, strict=True):
            check_replayed(old, new)
    # The last session holds all three lifetimes: 4 answers, 3 questions typed, one
    # spoken, a call and its output, and the cut story, for each.
    last = standin.conversation(LIFETIMES)
    assert sum(1 for item in last if item[0] == "function_call") == LIFETIMES + 1
    assert ("function_call_output", "", '{"output":{"city":"Oslo","sky":"rainy"}}', False) in last
    assert all(any(item[3] for item in items) for items in held)  # a cut answer in each
    assert sum(1 for item in last if item[1] == "user" and item[2] == "wait a moment") == LIFETIMES


def check_replayed(old: tuple[str, str, str, bool], new: tuple[str, str, str, bool]) -> None:
    """One item of the old provider session as the new one got it: the same type, role
    and words; a truncated answer as far as the user heard it (a start of its words)."""
    kind, role, text, truncated = old
    assert new[:2] == (kind, role), (old, new)
    if truncated:
        assert text.startswith(new[2]), (old, new)
        assert new[2], (old, new)  # something of it was heard
    else:
        assert new[2] == text.strip(), (old, new)  # the words, without edge whitespace
    assert not new[3]
