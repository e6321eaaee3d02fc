"""The openai-realtime agent against what the real service does, beyond the normal path:
tool names it refuses, a refused session configuration, keys refused after the upgrade,
permanent and expected failures, truncations it rejects, transcription events, token
usage. Each stand-in behaviour used here names its source in
``openai_realtime_standin.py``; the issue each test comes from is issue 20 of the
project's tracker (points 1-6).
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from openai_realtime_standin import FunctionCall, Reply, StandIn
from voice_session import (
    Session,
    idle,
    payloads,
    session,
    silence_frames,
    speech_frames,
)

from vrt.agents import load_agent
from vrt.agents.openai_realtime import OpenAIRealtimeAgent, config_from
from vrt.client import (
    AudioChunk,
    AudioStarted,
    ClientTool,
    ErrorReceived,
    RunTool,
    SessionFailed,
    TranscriptReceived,
    TurnChanged,
    tool,
)
from vrt.protocol.messages import PCM16_24K
from vrt.server import VrtServer

_TESTS = str(Path(__file__).resolve().parents[1])
if _TESTS not in sys.path:  # tests/ has no __init__.py: make ``support`` importable
    sys.path.insert(0, _TESTS)

from support import RawClient  # noqa: E402
from support.raw_client import Item  # noqa: E402
from vrt.protocol.codec import Decoded  # noqa: E402
from vrt.protocol.frames import AudioFrame  # noqa: E402
from vrt.protocol.messages import AudioStart, Interrupted  # noqa: E402

API_KEY = "sk-standin-0123456789abcdefSECRET"
WAIT = 5.0


@pytest.fixture
def api_key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    for name in ("MODEL", "VOICE", "INSTRUCTIONS", "BASE_URL", "TRANSCRIPTION_MODEL"):
        monkeypatch.delenv(f"VRT_OPENAI_{name}", raising=False)
    return API_KEY


@pytest.fixture
async def standin() -> AsyncIterator[StandIn]:
    async with StandIn(api_key=API_KEY) as running:
        yield running


async def serve(standin: StandIn, **options: Any) -> tuple[VrtServer, str]:
    """A VrtServer whose agent is the adapter with ``options`` (fast reconnects)."""
    config = replace(
        config_from({"base_url": standin.url, **options}, {}),
        reconnect_initial=0.01,
        reconnect_max=0.05,
        connect_timeout=1.0,
    )
    server = VrtServer(lambda info: OpenAIRealtimeAgent(config, API_KEY))
    return server, await server.start("127.0.0.1", 0)


@pytest.fixture
async def url(standin: StandIn, api_key: str) -> AsyncIterator[str]:
    server, served = await serve(standin)
    yield served
    await server.close()


def errors_sent(standin: StandIn) -> list[dict[str, Any]]:
    return [event["error"] for event in standin.sent_events("error")]


def fatal(event: SessionFailed) -> bool:
    """The session ended on an AGENT_ERROR that is not recoverable (§9.2)."""
    return event.code == "AGENT_ERROR"


async def speak(s: Session, standin: StandIn) -> None:
    """Speech then silence, once the model session is configured (input audio that
    arrives before is dropped, as stale)."""
    await standin.wait_for("session.update")
    while not standin.sent_events("session.updated"):
        await asyncio.sleep(0.002)
    for frame in speech_frames(PCM16_24K) + silence_frames(PCM16_24K):
        assert s.client.send_audio(frame)


# --- 1. tool names and the session configuration ----------------------------------------


async def test_dotted_tool_names_are_mapped_both_ways(url: str, standin: StandIn) -> None:
    """vRT allows ``notes.add``; the service refuses the whole session.update for it."""
    saved: list[str] = []

    async def save(text: str) -> str:
        saved.append(text)
        return "saved"

    notes_add: ClientTool = tool(save, name="notes.add")
    standin.replies.append(
        Reply(calls=[FunctionCall("notes_add", '{"text":"milk"}', "call_n1")], interval=0.01)
    )
    standin.replies.append(Reply(audio=payloads(1, 960, seed=2), transcript=["Saved."]))
    async with session(url, tools=[notes_add]) as s:
        (update,) = await standin.wait_for("session.update")
        assert [t["name"] for t in update["session"]["tools"]] == ["notes_add"]
        await s.client.send_text("note milk")
        run = await s.next(RunTool)
        assert run.name == "notes.add"
        assert run.arguments == {"text": "milk"}
        await s.next(TranscriptReceived, lambda e: e.role == "agent" and e.text == "Saved.")
        await s.next(TurnChanged, idle)
        assert not s.all(ErrorReceived)
    assert saved == ["milk"]
    assert standin.sent_events("session.updated")
    assert not errors_sent(standin)
    (output,) = [
        e["item"]
        for e in standin.events("conversation.item.create")
        if e["item"]["type"] == "function_call_output"
    ]
    assert output["call_id"] == "call_n1"
    assert json.loads(output["output"]) == {"output": "saved"}


async def test_a_rejected_session_update_ends_the_session(api_key: str, standin: StandIn) -> None:
    """Running on the service's defaults (no tools, other formats, no transcripts) is a
    failed start, not a recoverable hiccup."""
    server, url = await serve(standin, voice="psychic")
    try:
        async with session(url, reconnect=False) as s:
            error = await s.next(SessionFailed)
            assert fatal(error)
            assert "session" in error.message
            assert "voice" in error.message
            await s.drain(0.1)
        (update,) = standin.events("session.update")
        assert isinstance(update.get("event_id"), str)
        (rejection,) = errors_sent(standin)
        assert rejection["event_id"] == update["event_id"]
        assert len(standin.connections) == 1  # the same refusal is not asked for again
    finally:
        await server.close()


async def test_a_session_update_never_confirmed_is_a_failed_start(
    api_key: str, standin: StandIn
) -> None:
    standin.confirm_session_update = False
    server, url = await serve(standin)
    try:
        async with session(url, reconnect=False) as s:
            error = await s.next(SessionFailed)
            assert fatal(error)
            assert "session.updated" in error.message
    finally:
        await server.close()


# --- 2. permanent failures end the session; expected ones reconnect, bounded ----------


async def test_a_key_refused_after_the_upgrade_ends_the_session_without_looping(
    api_key: str,
) -> None:
    async with StandIn(api_key="sk-a-different-key") as other:
        server, url = await serve(other)
        try:
            async with session(url, reconnect=False) as s:
                error = await s.next(SessionFailed)
                assert fatal(error), error
                assert "OPENAI_API_KEY" in error.message
                assert API_KEY not in error.message
                await s.drain(0.3)  # a loop would reconnect several times meanwhile
            assert len(other.handshakes) == 1
            assert [e.recoverable for e in s.all(ErrorReceived)].count(True) == 0
        finally:
            await server.close()


async def test_model_not_found_in_a_failed_response_ends_the_session(
    url: str, standin: StandIn
) -> None:
    standin.replies.append(
        Reply(
            failed={
                "type": "invalid_request_error",
                "code": "model_not_found",
                "message": "The model `gpt-realtime-nope` does not exist.",
            }
        )
    )
    async with session(url, reconnect=False) as s:
        await s.client.send_text("hello")
        error = await s.next(SessionFailed)
        assert fatal(error)
        assert "model_not_found" in error.message
        await s.drain(0.1)
    assert len(standin.connections) == 1


async def test_the_maximum_session_duration_is_a_reconnect_the_client_does_not_see(
    url: str, standin: StandIn
) -> None:
    async with session(url) as s:
        await standin.wait_for("session.update")
        await standin.connections[-1].expire()
        await standin.wait_for("session.update", connection=2)
        await s.client.send_text("still there?")
        await s.next(AudioChunk)
        await s.next(TurnChanged, idle)
        await s.drain(0.05)
        assert not s.all(ErrorReceived)  # at a quiet moment: invisible (issue 30, point 6)


async def test_a_link_that_keeps_dropping_is_given_up_after_a_bounded_number(
    api_key: str, standin: StandIn
) -> None:
    standin.drop_on_open = 100
    server, url = await serve(standin)
    try:
        async with session(url, reconnect=False) as s:
            error = await s.next(SessionFailed, fatal)
            assert "giving up" in error.message
            await s.drain(0.2)
            connections = len(standin.connections)
            await asyncio.sleep(0.2)
            assert len(standin.connections) == connections  # it stopped trying
            assert connections <= 6
    finally:
        await server.close()


# --- 3, 4, 6. truncation: only what can be cut, and a default without a report ---------


async def test_an_item_heard_in_full_is_not_truncated(url: str, standin: StandIn) -> None:
    """A truncate that cuts nothing is refused at the full length ("already shorter") or
    changes the model's behaviour (github.com/openai/openai-agents-python/issues/2370)."""
    standin.replies.append(Reply(audio=payloads(5, 960, seed=3), transcript=["Done."]))
    raw = await RawClient.connect(url, auto_ack=True)
    try:
        await raw.hello()
        await raw.text("say something")
        got = await raw.until(
            lambda i: isinstance(i, Decoded) and getattr(i.message, "state", None) == "idle", WAIT
        )
        (started,) = [
            i.message for i in got if isinstance(i, Decoded) and isinstance(i.message, AudioStart)
        ]
        sent_ms = sum(len(i.payload) for i in got if isinstance(i, AudioFrame)) // 48
        await raw.send_sequenced("playback", itemId=started.item_id, playedMs=sent_ms)
        await asyncio.sleep(0.1)
    finally:
        await raw.close()
    assert not standin.events("conversation.item.truncate")
    assert not errors_sent(standin)


async def test_an_item_without_audio_is_never_truncated(url: str, standin: StandIn) -> None:
    """The transcript arrives before the audio; the user interrupts in between."""
    gate = asyncio.Event()
    standin.replies.append(
        Reply(
            audio=payloads(3, 960, seed=4),
            transcript=["Once ", "upon "],
            transcript_first=True,
            gate=gate,
        )
    )
    raw = await RawClient.connect(url, auto_ack=True)
    try:
        await raw.hello()
        await raw.text("tell me a story")
        got = await raw.until(
            lambda i: isinstance(i, Decoded) and getattr(i.message, "role", None) == "agent", WAIT
        )
        epoch = max(
            i.message.epoch for i in got if isinstance(i, Decoded) and hasattr(i.message, "epoch")
        )
        await raw.send_sequenced("interrupt", epoch=epoch, reason="user")
        await raw.until(
            lambda i: isinstance(i, Decoded) and isinstance(i.message, Interrupted), WAIT
        )
        for item in got:
            if isinstance(item, Decoded) and isinstance(item.message, AudioStart):
                await raw.send_sequenced("playback", itemId=item.message.item_id, playedMs=0)
        await standin.wait_for("response.cancel")
        gate.set()
        await asyncio.sleep(0.1)
    finally:
        await raw.close()
    assert not standin.events("conversation.item.truncate")
    assert not errors_sent(standin)
    # The transcript the user never heard does not stay in the model's context.
    (message_item,) = [
        e["item"]["id"]
        for e in standin.sent_events("response.output_item.added")
        if e["item"]["type"] == "message"
    ]
    assert [e["item_id"] for e in standin.events("conversation.item.delete")] == [message_item]


async def test_zero_heard_deletes_the_item_and_a_later_report_cuts_nothing_more(
    url: str, standin: StandIn
) -> None:
    standin.replies.append(
        Reply(audio=payloads(50, 960, seed=5), transcript=["Once ", "upon"], interval=0.02)
    )
    raw = await RawClient.connect(url, auto_ack=True)
    try:
        await raw.hello()
        await raw.text("tell me a story")
        got: list[Item] = []
        while sum(isinstance(item, AudioFrame) for item in got) < 4:
            got.append(await raw.recv(WAIT))
        (started,) = [
            i.message for i in got if isinstance(i, Decoded) and isinstance(i.message, AudioStart)
        ]
        await raw.send_sequenced("interrupt", epoch=started.epoch, reason="user")
        await raw.until(
            lambda i: isinstance(i, Decoded) and isinstance(i.message, Interrupted), WAIT
        )
        await raw.send_sequenced("playback", itemId=started.item_id, playedMs=0)
        (delete,) = await standin.wait_for("conversation.item.delete")
        await raw.send_sequenced("playback", itemId=started.item_id, playedMs=40)
        await asyncio.sleep(0.1)
    finally:
        await raw.close()
    (message_item,) = [e["item"]["id"] for e in standin.sent_events("response.output_item.added")]
    assert delete["item_id"] == message_item
    assert standin.sent_events("conversation.item.deleted")
    assert not errors_sent(standin)


async def test_without_a_playback_report_the_unsent_audio_is_cut(
    url: str, standin: StandIn
) -> None:
    """The service generates faster than real time: when the cancel arrives it holds
    audio the client never got. Without a report, what was sent is taken as heard."""
    standin.replies.append(
        Reply(audio=payloads(50, 960, seed=6), transcript=["Once"], interval=0.02, after_cancel=5)
    )
    async with session(url) as s:
        await s.client.send_text("tell me a story")
        started = await s.next(AudioStarted)
        for _ in range(4):
            await s.next(AudioChunk)
        await s.client.interrupt()
        (truncate,) = await standin.wait_for("conversation.item.truncate")
        await s.drain(0.1)
        received = [e for e in s.all(AudioChunk) if e.item_id == started.item_id]
    sent_ms = sum(len(chunk.payload) for chunk in received) // 48
    (message_item,) = [e["item"]["id"] for e in standin.sent_events("response.output_item.added")]
    assert truncate["item_id"] == message_item
    assert truncate["audio_end_ms"] == sent_ms
    assert standin.sent_events("conversation.item.truncated")
    assert not errors_sent(standin)


# --- 5. the events that matter --------------------------------------------------------


async def test_partial_user_transcripts_share_the_final_ones_item(
    url: str, standin: StandIn
) -> None:
    async with session(url) as s:
        await speak(s, standin)
        listening = await s.next(TurnChanged, lambda e: e.state == "listening")
        final = await s.find(TranscriptReceived, lambda e: e.role == "user" and e.final)
        partials = [e for e in s.all(TranscriptReceived) if e.role == "user" and not e.final]
    assert final.text == standin.user_transcript
    assert final.item_id is not None
    assert final.turn_id == listening.turn_id
    # Each partial is the text so far (a partial replaces the previous one, §transcript).
    assert [p.text for p in partials] == [
        "what ",
        "what is ",
        "what is the ",
        "what is the weather ",
    ]
    assert {p.item_id for p in partials} == {final.item_id}


async def test_a_late_user_transcript_belongs_to_its_own_turn(url: str, standin: StandIn) -> None:
    standin.transcript_gate = gate = asyncio.Event()
    async with session(url) as s:
        await speak(s, standin)
        first = await s.next(TurnChanged, lambda e: e.state == "listening")
        await s.next(TurnChanged, idle)
        await speak(s, standin)
        second = await s.next(TurnChanged, lambda e: e.state == "listening")
        assert second.turn_id != first.turn_id
        gate.set()  # both transcriptions end now, during the second turn
        finals: list[TranscriptReceived] = []
        while len(finals) < 2:
            event = await s.next(TranscriptReceived, lambda e: e.role == "user" and e.final)
            finals.append(event)
    assert sorted(e.turn_id or "" for e in finals) == sorted([first.turn_id, second.turn_id])
    assert len({e.item_id for e in finals}) == 2


async def test_a_failed_transcription_is_reported(url: str, standin: StandIn) -> None:
    standin.transcription_fails = True
    async with session(url) as s:
        await speak(s, standin)
        listening = await s.next(TurnChanged, lambda e: e.state == "listening")
        error = await s.find(ErrorReceived)
        assert error.recoverable
        assert "transcri" in error.message
        assert "audio_unintelligible" in error.message
        # The partials shown so far get a final, so no client is left with a dangling one.
        final = await s.find(TranscriptReceived, lambda e: e.role == "user" and e.final)
        assert final.turn_id == listening.turn_id


@pytest.mark.parametrize("reason", ["max_output_tokens", "content_filter"])
async def test_an_incomplete_response_says_why(url: str, standin: StandIn, reason: str) -> None:
    standin.replies.append(
        Reply(audio=payloads(2, 960, seed=7), transcript=["Cut"], incomplete=reason)
    )
    async with session(url) as s:
        await s.client.send_text("talk at length")
        error = await s.next(ErrorReceived)
        assert error.recoverable
        assert reason in error.message
        await s.next(TurnChanged, idle)


# --- usage ----------------------------------------------------------------------------


async def test_token_usage_is_summed_and_logged(
    standin: StandIn, api_key: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="vrt.agents.openai_realtime")
    agents: list[OpenAIRealtimeAgent] = []
    factory = load_agent("openai-realtime", {"base_url": standin.url})

    def keep(info: Any) -> Any:
        agent = factory(info)
        agents.append(agent)  # type: ignore[arg-type]
        return agent

    server = VrtServer(keep)
    url = await server.start("127.0.0.1", 0)
    try:
        async with session(url) as s:
            for text in ("one", "two"):
                await s.client.send_text(text)
                await s.next(TurnChanged, idle)
            await s.drain(0.05)
    finally:
        await server.close()
    reported = [e["response"]["usage"] for e in standin.sent_events("response.done")]
    (agent,) = agents
    assert agent.usage.responses == 2
    assert agent.usage.input_tokens == sum(u["input_tokens"] for u in reported)
    assert agent.usage.output_tokens == sum(u["output_tokens"] for u in reported)
    assert agent.usage.output_audio_tokens == sum(
        u["output_token_details"]["audio_tokens"] for u in reported
    )
    assert agent.usage.cached_input_tokens == sum(
        u["input_token_details"]["cached_tokens"] for u in reported
    )
    assert agent.usage.output_audio_tokens > 0
    logged = [
        r.getMessage()
        for r in caplog.records
        if r.name == "vrt.agents.openai_realtime" and "model usage" in r.getMessage()
    ]
    assert len(logged) == 2
    assert f"'output_tokens': {agent.usage.output_tokens}" in logged[-1]
