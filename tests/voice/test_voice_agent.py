"""The voice agent behind a real server in this process, so that its conversation history
and timings can be read: barge-in (§6.2) and truncation to what was played (§8.4),
typed text answered in text and speech, the negotiated output formats (§8.2)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import av
import numpy as np
import pytest
from speech import corpus, errors, missing, to_16k

from support import RunningServer, start_server
from vrt.agents import SessionInfo
from vrt.agents.scripted import ScriptedAgent
from vrt.client import (
    AudioChunk,
    AudioStarted,
    InterruptedEpoch,
    TextReceived,
    TranscriptReceived,
    TurnChanged,
    VrtClient,
)
from vrt.protocol.messages import Format
from vrt.voice.agent import VoiceAgent, VoiceConfig
from vrt.voice.chat import Conversation, listen, speak

pytestmark = pytest.mark.timeout(120)

PCM16K = Format(encoding="pcm16", sample_rate=16000)
NUMBERS = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen"
LONG_REPLY = f"{NUMBERS} {NUMBERS} {NUMBERS}"


@pytest.fixture
async def served(stages: Any) -> AsyncIterator[tuple[RunningServer, list[VoiceAgent]]]:
    agents: list[VoiceAgent] = []

    def factory(info: SessionInfo) -> VoiceAgent:
        del info
        agent = VoiceAgent(stages, ScriptedAgent(), VoiceConfig())
        agents.append(agent)
        return agent

    server = await start_server(agent_factory=factory)
    yield server, agents
    await server.close()


async def _until(
    conversation: Conversation, done: Callable[[Any], bool], timeout: float = 20.0, seen: int = 0
) -> Any:
    """The first event from index ``seen`` on for which ``done`` is true."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        for _, event in conversation.events[seen:]:
            if done(event):
                return event
        seen = len(conversation.events)
        await asyncio.sleep(0.02)
    raise AssertionError(f"not seen within {timeout} s: {conversation.events}")


@contextlib.asynccontextmanager
async def _session(
    url: str, *, input: Format = PCM16K, output: Format | None = None
) -> AsyncIterator[tuple[VrtClient, Conversation]]:
    async with VrtClient(url, input=input, output=output) as client:
        conversation = Conversation()
        first = await client.next_event(10.0)
        conversation.output = first.output  # type: ignore[union-attr]
        task = asyncio.create_task(listen(client, conversation))
        try:
            yield client, conversation
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def _idle_after_speech(event: Any, spoke: list[bool]) -> bool:
    if isinstance(event, AudioStarted):
        spoke.append(True)
    return bool(spoke) and isinstance(event, TurnChanged) and event.state == "idle"


async def test_typed_text_is_answered_in_text_and_speech(
    served: tuple[RunningServer, list[VoiceAgent]], stages: Any
) -> None:
    server, agents = served
    async with _session(server.url) as (client, conversation):
        await client.send_text("echo good evening, how was your day")
        spoke: list[bool] = []
        await _until(conversation, lambda e: _idle_after_speech(e, spoke))
    texts = [e.text for _, e in conversation.events if isinstance(e, TextReceived)]
    assert "".join(texts) == "good evening, how was your day"  # the scripted contract
    assert conversation.transcripts("agent") == ["good evening, how was your day"]
    audio, rate = conversation.reply_pcm16()
    back = stages.stt.transcribe(to_16k(audio, rate))
    assert missing("good evening how was your day", back) <= 1, back
    assert agents[0].history == [
        ("user", "echo good evening, how was your day"),
        ("agent", "good evening, how was your day"),
    ]


async def test_a_spoken_answer_continues_the_listening_turn(
    served: tuple[RunningServer, list[VoiceAgent]],
) -> None:
    server, agents = served
    utterance = corpus()[0]  # "what time is it"
    async with _session(server.url) as (client, conversation):
        await speak(client, conversation, utterance.pcm16 + bytes(32000), 16000, PCM16K)
        spoke: list[bool] = []
        await _until(conversation, lambda e: _idle_after_speech(e, spoke))
    turns = [(e.turn_id, e.state) for _, e in conversation.events if isinstance(e, TurnChanged)]
    assert [state for _, state in turns] == ["listening", "thinking", "speaking", "idle"]
    assert len({turn for turn, _ in turns}) == 1, "the reply continues the listening turn"
    assert agents[0].history[0][0] == "user"
    timing = agents[0].timings[-1]
    assert timing.last_voice <= timing.end <= timing.final  # type: ignore[operator]
    assert timing.first_frame is not None


async def test_speech_interrupts_the_reply_and_the_history_keeps_what_was_played(
    served: tuple[RunningServer, list[VoiceAgent]],
) -> None:
    server, agents = served
    async with _session(server.url) as (client, conversation):
        await client.send_text(f"echo {LONG_REPLY}")
        started = await _until(conversation, lambda e: isinstance(e, AudioStarted))
        await asyncio.sleep(1.5)  # the user hears the reply for a while
        utterance = corpus()[0]
        await speak(client, conversation, utterance.pcm16 + bytes(32000), 16000, PCM16K)
        interrupted = await _until(conversation, lambda e: isinstance(e, InterruptedEpoch))
        assert interrupted.epoch == started.epoch
        # The utterance is answered in a turn of its own, after the interrupted one.
        await _until(
            conversation,
            lambda e: isinstance(e, TurnChanged) and e.epoch > started.epoch and e.state == "idle",
        )
        agent = agents[0]
        # The interruption came from the detector within its minimum speech plus two
        # windows of the speech's onset, in audio time (the session heard nothing before).
        start_ms = agent.timings[-1].start_ms
        assert start_ms <= VoiceConfig().min_speech_ms + 2 * 32 + 32
        said, heard = agent.history[0], agent.history[1]
        assert said == ("user", f"echo {LONG_REPLY}")
        assert heard[0] == "agent"
        heard_words = heard[1].split()
        assert 0 < len(heard_words) < len(LONG_REPLY.split())
        assert LONG_REPLY.split()[: len(heard_words)] == heard_words
        assert [role for role, _ in agent.history[2:]] == ["user", "agent"]
        # The client reports how much it played (§8.4): the history follows it.
        await client.playback(started.item_id, 400)
        await asyncio.sleep(0.3)
        reported = agent.history[1][1].split()
        assert len(reported) < len(heard_words)
        assert LONG_REPLY.split()[: len(reported)] == reported


@pytest.mark.parametrize("encoding", ["pcmu", "opus"])
async def test_output_formats(
    served: tuple[RunningServer, list[VoiceAgent]], stages: Any, encoding: str
) -> None:
    server, _ = served
    fmt = (
        Format(encoding="pcmu")
        if encoding == "pcmu"
        else Format(encoding="opus", sample_rate=48000)
    )
    frames: list[bytes] = []
    async with VrtClient(server.url, input=PCM16K, output=fmt) as client:
        ready = await client.next_event(10.0)
        assert ready.output.encoding == encoding  # type: ignore[union-attr]
        await client.send_text("echo open the window")
        while True:
            event = await client.next_event(20.0)
            if isinstance(event, AudioChunk):
                frames.append(event.payload)
            elif isinstance(event, TurnChanged) and event.state == "idle":
                break
    assert frames
    if encoding == "pcmu":
        assert {len(frame) for frame in frames} == {160}  # 20 ms at 8 kHz
        from vrt.audio import pcmu_to_pcm16

        audio = to_16k(pcmu_to_pcm16(b"".join(frames)), 8000)
    else:
        decoder = av.CodecContext.create("opus", "r")
        decoded = [
            frame.to_ndarray().reshape(-1)
            for packet in frames
            for frame in decoder.decode(av.Packet(packet))
        ]
        pcm = (np.concatenate(decoded) * 32767).astype("<i2").tobytes()
        audio = to_16k(pcm, 48000)
    back = stages.stt.transcribe(audio)
    assert missing("open the window", back) <= 1, back


async def test_pcmu_input_is_recognised(
    served: tuple[RunningServer, list[VoiceAgent]],
) -> None:
    server, _ = served
    utterance = corpus()[6]  # "what is the capital of france"
    import soxr

    narrow = soxr.resample(utterance.samples, 16000, 8000)
    pcm = (np.clip(narrow, -1, 1) * 32767).astype("<i2").tobytes() + bytes(16000)
    async with _session(server.url, input=Format(encoding="pcmu")) as (client, conversation):
        await speak(client, conversation, pcm, 8000, Format(encoding="pcmu"))
        final = await _until(conversation, lambda e: isinstance(e, TranscriptReceived) and e.final)
    # Whisper tiny.en hears this clip at 8 kHz as "what is the capital and friends"
    # (2 errors) with every decoding tried, the one before 2026-12-05 included, when it
    # gets the whole clip; a broken pcmu path (a wrong rate, µ-law misread) loses far more.
    assert errors(utterance.words, final.text)[0] <= 2, final.text


async def test_the_brains_own_audio_passes_only_in_a_turn_without_text(
    served: tuple[RunningServer, list[VoiceAgent]],
) -> None:
    server, _ = served
    async with _session(server.url) as (client, conversation):
        await client.send_text("speak 400")  # the scripted tone, no text
        await _until(conversation, lambda e: isinstance(e, TurnChanged) and e.state == "idle")
        tone, rate = conversation.reply_pcm16()
        mark = len(conversation.events)
        await client.send_text("echo hi")  # text: its speech, not the tone
        spoke: list[bool] = []
        await _until(conversation, lambda e: _idle_after_speech(e, spoke), seen=mark)
        speech, _ = conversation.reply_pcm16()
    assert len(tone) == rate * 2 * 400 // 1000
    samples = np.frombuffer(tone, dtype="<i2").astype(np.float32) / 32768
    crossings = np.count_nonzero(np.diff(np.signbit(samples))) / 0.4 / 2
    assert 430 < crossings < 450  # the 440 Hz tone
    starts = [e for _, e in conversation.events if isinstance(e, AudioStarted)]
    assert len(starts) == 2  # one item per turn: the echo's tone was not sent
    assert speech != tone


class _CountingTts:
    """A synthesiser that makes one second of quiet audio per clause, at once."""

    sample_rate = 16000

    def __init__(self) -> None:
        self.calls = 0

    async def synthesize(self, text: str) -> AsyncIterator[Any]:
        self.calls += 1
        yield np.full(16000, 0.01, np.float32)


async def test_a_long_reply_is_synthesised_only_a_little_ahead_of_playback(stages: Any) -> None:
    """What a client can make the server hold: ``burst 10000`` is hours of speech; the
    synthesiser stays a couple of clauses ahead of the real-time writer."""
    from vrt.voice.agent import VoiceStages

    tts = _CountingTts()
    mixed = VoiceStages(vad=stages.vad, stt=stages.stt, tts=tts)
    server = await start_server(
        agent_factory=lambda info: VoiceAgent(mixed, ScriptedAgent(), VoiceConfig())
    )
    try:
        async with _session(server.url) as (client, conversation):
            await client.send_text("burst 10000")
            await _until(conversation, lambda e: isinstance(e, AudioStarted))
            await asyncio.sleep(1.5)
            # About 2 clauses sent (1.5 s and the lead), 2 queued, 1 waiting to be: not
            # the 10,000 an unbounded synthesiser would have made by now.
            assert 1 <= tts.calls <= 8, tts.calls
            before = tts.calls
            await asyncio.sleep(1.5)
            assert tts.calls - before <= 3, (before, tts.calls)  # real time: ~1.5 more
    finally:
        await server.close()


async def test_the_espeak_synthesiser_speaks_as_it_is_made(stages: Any) -> None:
    from vrt.voice.agent import VoiceStages
    from vrt.voice.espeak import EspeakTts

    mixed = VoiceStages(vad=stages.vad, stt=stages.stt, tts=EspeakTts())
    server = await start_server(
        agent_factory=lambda info: VoiceAgent(mixed, ScriptedAgent(), VoiceConfig())
    )
    try:
        async with _session(server.url) as (client, conversation):
            await client.send_text("echo turn on the kitchen lights")
            spoke: list[bool] = []
            await _until(conversation, lambda e: _idle_after_speech(e, spoke))
    finally:
        await server.close()
    audio, rate = conversation.reply_pcm16()
    back = stages.stt.transcribe(to_16k(audio, rate))
    assert missing("turn on the kitchen lights", back) <= 1, back


async def test_an_llm_brain_answers_speech_in_speech(stages: Any) -> None:
    """The OpenAI-compatible chat adapter as the brain (a local Ollama, llama.cpp or
    vLLM makes this a fully local assistant), against the adapters' stand-in server: the
    utterance's transcript is the user message, the streamed completion is spoken."""
    from agents.openai_chat_standin import ChatStandIn, text_reply
    from vrt.agents import load_agent
    from vrt.voice.options import voice_factory

    stand_in = ChatStandIn()
    base_url = await stand_in.start()
    stand_in.reply(text_reply("It is ", "half past ", "ten."))
    brain = load_agent("openai-chat", {"model": "local", "base_url": base_url})
    server = await start_server(agent_factory=voice_factory(stages, brain, VoiceConfig()))
    try:
        async with _session(server.url) as (client, conversation):
            utterance = corpus()[0]  # "what time is it"
            await speak(client, conversation, utterance.pcm16 + bytes(32000), 16000, PCM16K)
            spoke: list[bool] = []
            await _until(conversation, lambda e: _idle_after_speech(e, spoke))
        request = await stand_in.request(0)
    finally:
        await server.close()
        await stand_in.close()
    said = request.body["messages"][-1]
    assert said["role"] == "user"
    assert errors(utterance.words, said["content"])[0] <= 1
    texts = [e.text for _, e in conversation.events if isinstance(e, TextReceived)]
    assert "".join(texts) == "It is half past ten."
    assert conversation.transcripts("agent") == ["It is half past ten."]
    audio, rate = conversation.reply_pcm16()
    assert missing("it is half past ten", stages.stt.transcribe(to_16k(audio, rate))) <= 1
