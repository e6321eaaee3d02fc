"""The gemini-live agent across provider reconnects, against what the service is
reported to do in long sessions (sources F1-F9 in docs/agent-gemini-live.md, "Sources";
cited in ``gemini_live_standin.py``): a real VrtServer with the adapter, a real
VrtClient.

A connection ends with ``goAway`` and then a close 1008 or 1011 when the client stays
(F1, F2), or is aborted with 1008 mid-session (F3, F4); a resume is refused while the
old connection is open (F9). None of it may end the vRT session, lose an answer or
repeat one; without a usable handle the conversation is replayed (issue 30, point 6)."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Sequence
from typing import ClassVar

import gemini_session
import pytest
from gemini_live_standin import GO_AWAY_1008, GO_AWAY_1011, Call, GeminiStandIn, Reply
from gemini_session import (
    API_KEY,
    MODEL,
    ready,
    serve_agent,
    served,
)
from voice_session import idle, payloads, session, silence_frames, speech_frames, until

from vrt.agents.gemini_live import GeminiConfig, GeminiLiveAgent
from vrt.agents.history import AgentSaid, ConversationLog, UserSaid
from vrt.agents.provider_socket import HELD_AUDIO
from vrt.audio import frame_bytes
from vrt.client import (
    AudioChunk,
    ErrorReceived,
    InterruptedEpoch,
    RunTool,
    SessionFailed,
    TranscriptReceived,
    TurnChanged,
    tool,
)
from vrt.protocol.messages import PCM16_24K

# The shared fixtures (gemini_session.py): pytest finds them here.
api_key_fixture = gemini_session.api_key_fixture
standin_fixture = gemini_session.standin_fixture
url_fixture = gemini_session.url_fixture


def finals(events: Sequence[object]) -> list[str]:
    return [
        e.text
        for e in events
        if isinstance(e, TranscriptReceived) and e.role == "agent" and e.final
    ]


@tool
async def lookup(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


# --- goAway (F1, F2, F9) -------------------------------------------------------------


async def test_go_away_between_turns_leaves_first_and_resumes_unnoticed(
    url: str, standin: GeminiStandIn
) -> None:
    async with session(url) as s:
        await ready(standin)
        await s.client.send_text("remember 42")
        await s.next(TurnChanged, idle)
        await standin.go_away(time_left=5.0)
        await standin.wait_connections(2)
        await ready(standin, 2)
        await s.client.send_text("what number?")
        await s.next(TurnChanged, idle)
        await s.drain(0.05)
        assert not s.all(ErrorReceived)
        assert not s.all(SessionFailed)
    _, second = standin.messages("setup")
    handle = second["sessionResumption"]["handle"]
    assert handle in standin.handles
    resumed = standin.connections[1].history
    assert any("remember 42" in json.dumps(turn) for turn in resumed)
    # The adapter left well within timeLeft, and closed before it resumed (F9).
    assert standin.expired == 0
    assert standin.resumed_while_open == 0
    assert standin.closes == []


async def test_go_away_during_an_answer_waits_for_its_end(url: str, standin: GeminiStandIn) -> None:
    answer = payloads(20, 960, seed=11)
    standin.replies.append(Reply(audio=answer, transcript=["All of it."], interval=0.02))
    async with session(url) as s:
        await ready(standin)
        await s.client.send_text("talk")
        await s.next(AudioChunk)
        await standin.go_away(time_left=5.0)
        await s.next(TurnChanged, idle)
        await standin.wait_connections(2)
        await ready(standin, 2)
        await s.client.send_text("again")
        await s.next(TurnChanged, idle)
        await s.drain(0.05)
    heard = [c.payload for c in s.all(AudioChunk) if c.payload in answer]
    assert heard == answer  # every chunk, once, in order
    assert finals(s.seen) == ["All of it.", "ok"]
    assert not s.all(ErrorReceived)
    assert standin.expired == 0
    assert standin.messages("setup")[1]["sessionResumption"].get("handle")


@pytest.mark.parametrize(("code", "reason"), [(1008, GO_AWAY_1008), (1011, GO_AWAY_1011)])
async def test_the_close_after_go_away_is_expected(api_key: str, code: int, reason: str) -> None:
    """The service cuts the connection after its goAway, 1008 (F1) or 1011 (F2), while
    an answer runs (here before the adapter leaves: any close after a goAway is
    expected). The answer is cut, which the client is told as a recoverable error; the
    conversation resumes."""
    async with GeminiStandIn(api_key=API_KEY, models=(MODEL,)) as standin:
        standin.replies.append(Reply(audio=payloads(200, 960, seed=12), interval=0.02))
        async with served(standin) as url, session(url) as s:
            await ready(standin)
            await s.client.send_text("a long story")
            speaking = await s.next(TurnChanged, lambda e: e.state == "speaking")
            await standin.go_away(time_left=60.0)
            await standin.abort(code, reason)
            error = await s.next(ErrorReceived)
            assert error.recoverable
            cut = await s.find(InterruptedEpoch)
            assert cut.epoch == speaking.epoch
            await standin.wait_connections(2)
            await ready(standin, 2)
            await s.client.send_text("go on")
            final = await s.next(TranscriptReceived, lambda e: e.role == "agent" and e.final)
            assert final.text == "ok"
            assert not s.all(SessionFailed)
        assert [c for c, _ in standin.closes] == [code]
        assert standin.messages("setup")[1]["sessionResumption"].get("handle")


async def test_without_a_boundary_the_adapter_leaves_before_time_left_runs_out(
    url: str, standin: GeminiStandIn
) -> None:
    """An answer longer than the goAway's timeLeft: the adapter does not wait for the
    service's close (F1, F2) but leaves ``LEAVE_MARGIN`` before it (at half of a short
    timeLeft), closing the socket first (F9); the answer is cut as by a dropped link
    (one recoverable error) and the next session resumes with the latest handle."""
    standin.replies.append(Reply(audio=payloads(400, 960, seed=13), interval=0.02))
    async with session(url) as s:
        await ready(standin)
        await s.client.send_text("a very long story")
        speaking = await s.next(TurnChanged, lambda e: e.state == "speaking")
        # The adapter leaves after max(3 - 2, 3 / 2) = 1.5 s; the service cuts at 3 s.
        await standin.go_away(time_left=3.0)
        error = await s.next(ErrorReceived)
        assert error.recoverable
        cut = await s.find(InterruptedEpoch)
        assert cut.epoch == speaking.epoch
        await standin.wait_connections(2)
        await ready(standin, 2)
        await s.client.send_text("go on")
        final = await s.next(TranscriptReceived, lambda e: e.role == "agent" and e.final)
        assert final.text == "ok"
        assert not s.all(SessionFailed)
    assert standin.expired == 0  # the service never had to cut it
    assert standin.closes == []
    assert standin.resumed_while_open == 0
    assert standin.messages("setup")[1]["sessionResumption"].get("handle")


class _Recorded(GeminiLiveAgent):
    """The adapter, each instance kept (to wait for what it holds)."""

    made: ClassVar[list[GeminiLiveAgent]] = []

    def __init__(self, config: GeminiConfig, api_key: str) -> None:
        super().__init__(config, api_key)
        self.made.append(self)


async def test_audio_said_while_the_session_is_replaced_reaches_the_next_one(
    api_key: str, standin: GeminiStandIn
) -> None:
    """The user speaks while a goAway's reconnect is under way (here the new session's
    setup is slow): that audio, the newest ``HELD_AUDIO`` seconds of it, goes to the
    new session once it is set up, in order, before anything else the client sent."""
    _Recorded.made = []
    server, url = await serve_agent(standin, _Recorded, {})
    size = frame_bytes(PCM16_24K, 20)
    # 3 s of quiet frames (samples of at most 149: no speech to the stand-in), each its own
    frames = [n.to_bytes(2, "little") * (size // 2) for n in range(150)]
    try:
        async with session(url) as s:
            await ready(standin)
            await s.client.send_text("remember 42")
            await s.next(TurnChanged, idle)
            standin.setup_gate = asyncio.Event()
            await standin.go_away(time_left=30.0)
            await standin.wait_connections(2)
            for frame in frames:
                assert s.client.send_audio(frame)
            (agent,) = _Recorded.made
            held = agent._held_audio  # every frame taken in: the newest 2 s held, the rest dropped
            await until(lambda: held.size + held.dropped * size == len(frames) * size, "audio held")
            assert held.size == HELD_AUDIO * 2 * 24000
            standin.setup_gate.set()
            await ready(standin, 2)
            await until(lambda: len(standin.messages("realtimeInput", connection=2)) == 100, "sent")
            await s.drain(0.05)
            assert not s.all(ErrorReceived)
        sent = [
            base64.b64decode(m["audio"]["data"])
            for m in standin.messages("realtimeInput", connection=2)
        ]
        assert sent == frames[-100:]  # the newest 2 s, in order, once
    finally:
        await server.close()


# --- aborts after setupComplete (F3, F4) ----------------------------------------------


async def test_a_1008_during_a_tool_call_is_a_failed_link_not_the_end(
    url: str, standin: GeminiStandIn
) -> None:
    standin.replies.append(
        Reply(calls=[Call("fc_1", "lookup", {"city": "Oslo"})], abort_after_calls=True)
    )
    async with session(url, tools=[lookup]) as s:
        await ready(standin)
        await s.client.send_text("weather in Oslo?")
        error = await s.next(ErrorReceived)
        assert error.recoverable
        await standin.wait_connections(2)
        await ready(standin, 2)
        await s.client.send_text("and now?")
        final = await s.next(TranscriptReceived, lambda e: e.role == "agent" and e.final)
        assert final.text == "ok"
        await s.drain(0.05)
        assert not s.all(SessionFailed)
    assert standin.closes == [(1008, "The operation was aborted.")]
    assert standin.messages("setup")[1]["sessionResumption"].get("handle")


async def test_aborts_after_setup_complete_are_retried_up_to_the_limit(
    url: str, standin: GeminiStandIn
) -> None:
    """A service that aborts every session right after it confirmed it: retried with
    the handle, then given up after ``max_failed_links`` (5) short-lived sessions."""
    async with session(url, reconnect=False) as s:
        for n in range(1, 6):
            await ready(standin, n)
            await standin.abort()
        failed = await s.next(SessionFailed)
        assert failed.code == "AGENT_ERROR"
        assert "5 times in a row" in failed.message
    assert len(standin.connections) == 5
    assert [code for code, _ in standin.closes] == [1008] * 5
    assert all(s["sessionResumption"].get("handle") for s in standin.messages("setup")[1:])


async def test_a_1008_before_setup_complete_is_still_a_refusal(
    api_key: str, standin: GeminiStandIn
) -> None:
    async with served(standin, model="gemini-retired") as url, session(url, reconnect=False) as s:
        failed = await s.next(SessionFailed)
        assert failed.code == "AGENT_ERROR"
        assert "check the model option" in failed.message
    assert len(standin.connections) == 1


async def test_a_dropped_connection_mid_answer_is_reported_and_resumed(
    url: str, standin: GeminiStandIn
) -> None:
    standin.replies.append(Reply(audio=payloads(50, 960, seed=8), interval=0.02))
    async with session(url) as s:
        await ready(standin)
        await s.client.send_text("talk")
        speaking = await s.next(TurnChanged, lambda e: e.state == "speaking")
        await s.next(AudioChunk)
        standin.drop()
        error = await s.find(ErrorReceived)
        assert error.recoverable
        interrupted = await s.find(InterruptedEpoch)
        assert interrupted.epoch == speaking.epoch
        await standin.wait_connections(2)
        await ready(standin, 2)
        await s.client.send_text("again")
        await s.next(TurnChanged, idle)
    assert standin.messages("setup")[1]["sessionResumption"].get("handle")


# --- without a usable handle: the conversation is replayed (point 6) ------------------


async def test_without_a_usable_handle_the_conversation_is_replayed(
    url: str, standin: GeminiStandIn
) -> None:
    standin.replies.append(Reply(calls=[Call("fc_1", "lookup", {"city": "Rome"})]))
    standin.replies.append(Reply(audio=payloads(1, 960, seed=13), transcript=["Sunny."]))
    async with session(url, tools=[lookup]) as s:
        await ready(standin)
        await s.client.send_text("weather in Rome?")
        await s.next(RunTool)
        await s.next(TurnChanged, idle)
        standin.handles.clear()  # the service forgot the conversation
        standin.drop()
        await standin.wait_connections(3)  # the resume is refused, then a new one
        await ready(standin, 3)
        await s.client.send_text("and tomorrow?")
        await s.next(TurnChanged, idle)
        await s.drain(0.05)
        assert not s.all(ErrorReceived)  # invisible but for the wait
    setups = standin.messages("setup")
    assert setups[1]["sessionResumption"].get("handle")
    assert setups[2]["sessionResumption"] == {}
    assert standin.closes == [(1008, "Requested entity was not found.")]
    (replay, *_) = standin.messages("clientContent", connection=3)
    assert replay["turnComplete"] is False  # it asks for no answer
    said = json.dumps(replay["turns"])
    assert "weather in Rome?" in said
    assert "lookup" in said
    assert "sunny in Rome" in said
    assert "Sunny." in said
    assert [t["role"] for t in replay["turns"]] == ["user", "model"]
    assert "and tomorrow?" in json.dumps(standin.connections[2].history)


def test_the_replayed_log_is_bounded() -> None:
    """A client that talks for hours (or floods texts) makes the agent keep at most
    ``max_chars`` of conversation, the newest."""
    log = ConversationLog(max_chars=56 * 1024)
    for n in range(5000):
        log.add(UserSaid(text=f"{n:05d} " + "x" * 500))
        log.add(AgentSaid(turn_id=f"t_{n}", text="y" * 100, spoken=True))
    assert log.chars <= log.max_chars
    assert log.chars > log.max_chars * 0.95  # the bound is used, not undershot
    assert len(log) < 10000 * 0.02
    newest = log.entries()[-2]
    assert isinstance(newest, UserSaid)
    assert newest.text.startswith("04999 ")
    assert log.dropped == 10000 - len(log)


# --- a long session (issue 30, "how to test") -----------------------------------------


async def test_a_long_session_over_several_connection_lifetimes(api_key: str) -> None:
    """Four provider connections in one vRT session (each lives three answers, then
    goAway), with tool calls, a barge-in over an answer and speech after an answer's
    turnComplete (F5): every answer reaches the client exactly once, nothing is lost,
    no error at all."""
    async with GeminiStandIn(
        api_key=API_KEY,
        models=(MODEL,),
        lifetime_turns=3,
        lifetime_time_left=5.0,
        playout_lag=5.0,  # the client plays long after an answer: no race with F5
    ) as standin:

        def answer(text: str, seed: int) -> Reply:
            # Seeds 21 apart: no two answers share a chunk (payloads varies by 7).
            return Reply(audio=payloads(3, 960, seed=21 * seed), transcript=[text])

        standin.replies.extend(
            [
                answer("Answer one.", 1),
                Reply(calls=[Call("fc_2", "lookup", {"city": "Paris"})]),
                answer("Answer two.", 2),
                answer("Answer three.", 3),
                # connection 2
                Reply(audio=payloads(80, 480, seed=0), transcript=["Never."], interval=0.02),
                answer("Answer four.", 4),
                answer("Answer five.", 5),
                answer("Answer six.", 6),
                # connection 3
                Reply(calls=[Call("fc_7", "lookup", {"city": "Lima"})]),
                answer("Answer seven.", 7),
                answer("Answer eight.", 8),
                answer("Answer nine.", 9),
                # connection 4
                answer("Answer ten.", 10),
            ]
        )
        async with served(standin) as url, session(url, tools=[lookup]) as s:

            async def ask(text: str) -> None:
                await s.client.send_text(text)
                await s.next(TurnChanged, idle)

            async def voice(frames: list[bytes]) -> None:
                for frame in frames:
                    assert s.client.send_audio(frame)

            await ready(standin)
            await ask("one")
            await ask("weather in Paris?")
            await ask("three")
            await standin.wait_connections(2)
            await ready(standin, 2)
            await s.client.send_text("tell me a long story")
            await s.next(TurnChanged, lambda e: e.state == "speaking")
            await voice(speech_frames(PCM16_24K))  # barge-in over the answer
            await s.next(TurnChanged, lambda e: e.state == "listening")
            await voice(silence_frames(PCM16_24K))
            await s.next(TurnChanged, idle)  # answer four
            await ask("five")
            await voice(speech_frames(PCM16_24K))  # while the client still plays (F5)
            await s.next(TurnChanged, lambda e: e.state == "listening")
            await voice(silence_frames(PCM16_24K))
            await s.next(TurnChanged, idle)  # answer six
            await standin.wait_connections(3)
            await ready(standin, 3)
            await ask("weather in Lima?")
            await ask("eight")
            await ask("nine")
            await standin.wait_connections(4)
            await ready(standin, 4)
            await ask("ten")
            await s.drain(0.1)

        assert finals(s.seen) == [
            "Answer one.",
            "Answer two.",
            "Answer three.",
            "Answer four.",
            "Answer five.",
            "Answer six.",
            "Answer seven.",
            "Answer eight.",
            "Answer nine.",
            "Answer ten.",
        ]
        assert not s.all(ErrorReceived)
        assert not s.all(SessionFailed)
        assert [r.name for r in s.all(RunTool)] == ["lookup", "lookup"]
        assert len(standin.connections) == 4
        assert standin.late_interruptions == 1
        assert standin.expired == 0  # every connection was left before it ran out
        assert standin.resumed_while_open == 0
        assert all(
            setup["sessionResumption"].get("handle") for setup in standin.messages("setup")[1:]
        )
        # Every answer's audio reached the client once.
        delivered = [c.payload for c in s.all(AudioChunk)]
        for seed in range(1, 11):
            for chunk in payloads(3, 960, seed=21 * seed):
                assert delivered.count(chunk) == 1


async def test_a_context_sent_after_the_latest_handle_is_sent_again_on_resume(
    api_key: str,
) -> None:
    """The context changed while idle, after the last handle; then a goAway, and no
    newer handle before timeLeft ran out (the service gives one after a turn): the
    session resumed with that handle lacks the new context, so it is sent again."""
    async with GeminiStandIn(api_key=API_KEY, models=(MODEL,)) as standin:
        async with served(standin) as url, session(url, context={"doc": "a.txt"}) as s:
            await ready(standin)
            await s.client.send_text("hello")
            await s.next(TurnChanged, idle)
            await s.client.update_context({"doc": "b.txt"})
            await standin.wait_for("clientContent", 3)  # a.txt, hello, b.txt
            await standin.go_away(time_left=0.2)
            await standin.wait_connections(2)
            await ready(standin, 2)
            await standin.wait_for("clientContent", 4)
            await s.drain(0.05)
            assert not s.all(ErrorReceived)
        (resent,) = standin.messages("clientContent", connection=2)
        assert "b.txt" in json.dumps(resent)
        assert resent["turnComplete"] is False
        # No boundary with a fresh handle came: the adapter left before timeLeft ran out.
        assert standin.expired == 0
        assert "b.txt" in json.dumps(standin.connections[1].history)
