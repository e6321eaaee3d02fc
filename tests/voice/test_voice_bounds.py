"""What one voice session can make the server keep or compute (docs/limits.md, the voice
agent's table): an ended session is freed by reference counting alone, opening one
costs little, a reply's text is cut into bounded clauses and spoken up to a bound, and
the synthesiser never sees control characters."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import math
import threading
import weakref
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from speech import corpus

from support import RunningServer, start_server
from support.raw_client import NoFrame, RawClient
from vrt.agents import AudioReceived, SessionInfo
from vrt.agents.scripted import ScriptedAgent
from vrt.client import ErrorReceived, TextReceived, TranscriptReceived, TurnChanged, VrtClient
from vrt.protocol.frames import FrameKind, build_frame
from vrt.protocol.messages import Error, Format, Pong
from vrt.protocol.server import ServerConfig
from vrt.voice.agent import VoiceAgent, VoiceConfig, VoiceStages
from vrt.voice.chat import Conversation, speak
from vrt.voice.clauses import (
    FIRST_LONGEST,
    LONGEST,
    ClauseSplitter,
    first_clause,
    speakable,
)
from vrt.voice.decode_queue import DecodeQueue
from vrt.voice.options import default_session_limit, voice_factory
from vrt.voice.stages import Samples

pytestmark = pytest.mark.timeout(120)

PCM16K = Format(encoding="pcm16", sample_rate=16000)


@contextlib.contextmanager
def _collector_off() -> Iterator[None]:
    collecting = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


async def _until_idle(client: VrtClient, timeout: float = 30.0) -> list[Any]:
    events: list[Any] = []
    async with asyncio.timeout(timeout):
        while True:
            event = await client.next_event()
            events.append(event)
            if isinstance(event, TurnChanged) and event.state == "idle":
                return events


# -- an ended session is freed without the cyclic collector (issue 34.1) --


async def test_an_ended_voice_session_is_freed_without_the_cyclic_collector(
    stages: Any,
) -> None:
    """After a spoken exchange and a typed one, the session ends (its resume window
    passes): its VoiceAgent, and with it the session's decoder, detector, utterances and
    speech, goes by reference counting alone. A cycle through it (the brain's session
    naming the agent as its listener, a speaker naming the agent, an utterance's
    recogniser holding a callback that holds the utterance) kept each ended session's
    megabytes until a full collection, which `vrt serve`'s collector tuning makes rare."""
    agents: list[weakref.ref[VoiceAgent]] = []

    def factory(info: SessionInfo) -> VoiceAgent:
        del info
        agent = VoiceAgent(stages, ScriptedAgent(), VoiceConfig(lead_ms=60_000))
        agents.append(weakref.ref(agent))
        return agent

    server = await start_server(agent_factory=factory, resume_window=0.2)
    try:
        with _collector_off():
            async with VrtClient(server.url, input=PCM16K) as client:
                await client.next_event(10.0)
                utterance = corpus()[0].pcm16 + bytes(32000)  # then a second of silence
                await speak(client, Conversation(), utterance, 16000, PCM16K, realtime=False)
                await _until_idle(client)
                await client.send_text("echo and good night")
                await _until_idle(client)
            async with asyncio.timeout(10.0):
                while server.server.session_count:
                    await asyncio.sleep(0.05)
                for _ in range(40):  # the agent's tasks finish their cancellation
                    if agents[0]() is None:
                        break
                    await asyncio.sleep(0.05)
            assert len(agents) == 1
            assert agents[0]() is None, "the ended session's VoiceAgent is still alive"
    finally:
        await server.close()


# -- opening a voice session is cheap (issue 31.3) --


def _rss() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) << 10
    raise AssertionError("no VmRSS")


async def _open_sessions(url: str, count: int) -> list[VrtClient]:
    clients = []
    for _ in range(count):
        client = VrtClient(url, input=PCM16K)
        await client.connect()
        await client.next_event(10.0)
        client.send_audio(bytes(640))  # the first frame: a session's input state is made
        clients.append(client)
    await asyncio.sleep(0.2)
    return clients


async def test_opening_voice_sessions_costs_little_memory_each(stages: Any) -> None:
    """One Silero model serves every session: a voice session's detector is its state
    alone (1 KB), where each session used to load the model (~10 MB). Forty voice
    sessions, each sent a first audio frame, grow the process by no more than three
    times what forty sessions of the scripted agent do (RSS, measured in this test)."""
    scripted = await start_server(resume_window=0.2)
    voice = await start_server(
        agent_factory=voice_factory(stages, lambda info: ScriptedAgent(), VoiceConfig()),
        resume_window=0.2,
    )
    count = 40
    opened: list[VrtClient] = []
    try:
        await _open_sessions(scripted.url, 4)  # warm up both paths
        await _open_sessions(voice.url, 4)
        before = _rss()
        opened += await _open_sessions(scripted.url, count)
        text_cost = _rss() - before
        before = _rss()
        opened += await _open_sessions(voice.url, count)
        voice_cost = _rss() - before
        page = 1 << 20  # below a megabyte in all, allocator noise
        assert voice_cost <= 3 * max(text_cost, page), (voice_cost, text_cost)
        assert voice.server.session_count >= count
    finally:
        for client in opened:
            await client.close()
        await scripted.close()
        await voice.close()


def test_the_default_session_limit_follows_the_machine() -> None:
    """32 voice sessions per core, and one per 32 MiB of memory at most."""
    assert default_session_limit(cores=2, memory=24 << 30) == 64
    assert default_session_limit(cores=16, memory=4 << 30) == 128
    assert default_session_limit(cores=1, memory=None) == 32
    assert default_session_limit() >= 1


async def test_past_the_voice_session_limit_a_new_session_gets_start_failed(
    stages: Any,
) -> None:
    """The voice agent's limit is the server's: one session more gets START_FAILED and
    close 1011 with the limit named (§5.1, §9.2), the open ones go on."""
    factory = voice_factory(stages, lambda info: ScriptedAgent(), VoiceConfig(), max_sessions=2)
    server = await start_server(agent_factory=factory)
    clients = await _open_sessions(server.url, 2)
    try:
        refused = VrtClient(server.url, input=PCM16K)
        with pytest.raises(Exception, match="limit of 2 sessions"):
            await refused.connect()
        await refused.close()
        await clients[0].send_text("echo still here")
        events = await _until_idle(clients[0])
        assert "still here" in "".join(e.text for e in events if isinstance(e, TextReceived))
    finally:
        for client in clients:
            await client.close()
        await server.close()


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_while_the_recogniser_is_saturated_a_new_voice_session_is_refused(
    stages: Any,
) -> None:
    """Admission by load (issue 31.4): while the shared recogniser's queue is saturated
    a new voice session gets START_FAILED and close 1011 "the voice agent is at
    capacity" (§5.1); the open session goes on; once the load falls, one opens again."""
    clock = _Clock()
    release = threading.Event()

    def decode(audio: Samples, final: bool) -> str:
        release.wait(10.0)
        return ""

    queue = DecodeQueue(decode, ThreadPoolExecutor(1), busy_finals=0, hold=5.0, clock=clock)
    saturating = VoiceStages(vad=stages.vad, stt=SimpleNamespace(queue=queue), tts=stages.tts)
    factory = voice_factory(saturating, lambda info: ScriptedAgent(), VoiceConfig())
    server = await start_server(agent_factory=factory)
    clients = await _open_sessions(server.url, 1)
    try:
        job = queue.submit("someone", np.zeros(160, np.float32), final=True)
        assert queue.saturated
        refused = VrtClient(server.url, input=PCM16K)
        with pytest.raises(Exception, match="the voice agent is at capacity"):
            await refused.connect()
        await refused.close()
        assert server.server.session_count == 1
        await clients[0].send_text("echo still here")
        events = await _until_idle(clients[0])
        assert "still here" in "".join(e.text for e in events if isinstance(e, TextReceived))
        release.set()
        await asyncio.wait([job])
        clock.now += 6.0  # the load fell: no sign of saturation for the hold
        clients += await _open_sessions(server.url, 1)
        assert server.server.session_count == 2
    finally:
        release.set()
        for client in clients:
            await client.close()
        await server.close()


# -- a reply's text, bounded before synthesis (issue 31.2) --


def _split(text: str, chunk: int = 0) -> list[str]:
    splitter = ClauseSplitter(4)
    pieces = [text[i : i + chunk] for i in range(0, len(text), chunk)] if chunk else [text]
    clauses = [clause for piece in pieces for clause in splitter.add(piece)]
    return clauses + splitter.finish()


@pytest.mark.parametrize(
    "text",
    [
        "hello." * 1000,  # no whitespace: was one clause of 6,000 characters
        "x" * 5000,
        "a" * 150 + ". " + "b" * 150 + "!",
        "word " * 30 + "y" * 400,
    ],
)
@pytest.mark.parametrize("chunk", [0, 1, 7])
def test_every_clause_is_bounded_whatever_the_text(text: str, chunk: int) -> None:
    clauses = _split(text, chunk)
    assert max(len(clause) for clause in clauses) <= LONGEST
    assert len(clauses[0]) <= FIRST_LONGEST  # what the user waits for
    assert "".join("".join(clauses).split()) == "".join(text.split())  # none lost or repeated
    assert len(clauses) <= 2 * math.ceil(len(text) / LONGEST) + 2


def test_control_characters_never_reach_the_synthesiser() -> None:
    assert speakable("plain text, kept.") == "plain text, kept."
    assert speakable("a\x00b\x1b[2Jc\u202ed\u200be\tf\r\ng\x9b") == "a b [2Jc d e f g"
    assert speakable("\x00\x07\x1b") == ""


class _RecordingTts:
    """Synthesises instantly: 10 ms of silence per clause, recording each clause."""

    sample_rate = 16000

    def __init__(self) -> None:
        self.clauses: list[str] = []

    async def synthesize(self, text: str) -> AsyncIterator[Samples]:
        self.clauses.append(text)
        yield np.zeros(160, np.float32)


@pytest.fixture
async def recording(stages: Any) -> AsyncIterator[tuple[RunningServer, _RecordingTts]]:
    tts = _RecordingTts()
    mixed = VoiceStages(vad=stages.vad, stt=stages.stt, tts=tts)
    config = VoiceConfig(lead_ms=600_000, max_reply_chars=500)
    server = await start_server(
        agent_factory=voice_factory(mixed, lambda info: ScriptedAgent(), config)
    )
    yield server, tts
    await server.close()


async def test_a_reply_is_spoken_up_to_its_bound_and_its_text_sent_whole(
    recording: tuple[RunningServer, _RecordingTts],
) -> None:
    """`hello.hello.…` (no whitespace, 6,000 characters): the text goes to the client
    whole, the synthesiser gets clauses of at most LONGEST characters and 500 in all
    (max_reply_chars), the client hears one recoverable AGENT_ERROR saying the speech
    stops there, and the turn ends as usual."""
    server, tts = recording
    text = "hello." * 1000
    async with VrtClient(server.url, input=PCM16K) as client:
        await client.next_event(10.0)
        await client.send_text(f"echo {text}")
        events = await _until_idle(client)
    sent = "".join(e.text for e in events if isinstance(e, TextReceived))
    assert sent == text
    assert tts.clauses, "nothing was spoken"
    assert max(len(clause) for clause in tts.clauses) <= LONGEST
    assert sum(len(clause) for clause in tts.clauses) <= 500
    errors = [e for e in events if isinstance(e, ErrorReceived)]
    assert len(errors) == 1
    assert errors[0].recoverable
    assert "500 characters" in errors[0].message
    spoken = [e.text for e in events if isinstance(e, TranscriptReceived) and e.role == "agent"]
    assert spoken
    assert len(spoken[-1]) <= 500


async def test_control_characters_are_sent_as_text_but_not_spoken(
    recording: tuple[RunningServer, _RecordingTts],
) -> None:
    server, tts = recording
    async with VrtClient(server.url, input=PCM16K) as client:
        await client.next_event(10.0)
        await client.send_text("echo red\x1b[31m alert\x00 now\u202e")
        events = await _until_idle(client)
    assert not any(isinstance(e, ErrorReceived) for e in events)
    spoken = " ".join(tts.clauses)
    assert spoken.split() == ["red", "[31m", "alert", "now"]
    assert spoken.isprintable()


# -- input audio charged by its duration, decoded off the event loop (issue 31.1) --

#: A 14-byte Opus packet claiming 120 ms: TOC code 3, six 20 ms CELT frames (RFC 6716
#: §3.1), the frames themselves empty (decoded as loss concealment: silence).
TINY_120MS = bytes([0xFB, 0x06]) + bytes(12)


class _ThreadNotingVad:
    """The real detector, noting the thread each window is judged on."""

    def __init__(self, vad: Any) -> None:
        self.vad = vad
        self.threads: set[str] = set()

    def stream(self) -> Any:
        stream = self.vad.stream()
        threads = self.threads

        class _Noted:
            window = stream.window

            def probability(self, window: Samples) -> float:
                threads.add(threading.current_thread().name)
                return float(stream.probability(window))

        return _Noted()


async def test_tiny_opus_packets_are_charged_their_duration_and_a_bystander_is_answered(
    stages: Any,
) -> None:
    """1,000 Opus packets of 14 bytes claiming 120 ms each (two minutes of audio, 26 KB)
    from one voice session: its agent gets what two bursts of audio hold (the budget and
    a burst of debt; the audio rate here is near zero so nothing refills during the
    test), the rest waits unread or is dropped with one recoverable RATE_LIMITED. A
    bystander's 20 pings are all answered meanwhile, and the attacker's audio is decoded
    and judged on the detection threads, never on the event loop."""
    vad = _ThreadNotingVad(stages.vad)
    mixed = VoiceStages(vad=vad, stt=stages.stt, tts=stages.tts)
    received: list[int] = []

    class _Counting(VoiceAgent):
        def handle(self, event: Any) -> None:
            if isinstance(event, AudioReceived):
                received.append(len(event.payload))
            super().handle(event)

    server = await start_server(
        agent_factory=lambda info: _Counting(mixed, ScriptedAgent(), VoiceConfig()),
        config=ServerConfig(audio_rate=0.01, audio_burst=1.2),
    )
    attacker = await RawClient.connect(server.url)
    bystander = await RawClient.connect(server.url)
    try:
        ready = await attacker.hello(input={"encoding": "opus", "sampleRate": 48000})
        assert ready.input.encoding == "opus"
        await bystander.hello()
        for seq in range(1000):
            await attacker.send(build_frame(FrameKind.INPUT, seq, TINY_120MS))
        pongs = 0
        for _ in range(20):
            await bystander.ping()
            await bystander.expect_message(Pong, timeout=10.0)
            pongs += 1
        await asyncio.sleep(0.5)  # the detector's last batch
        # Whether any audio was read a whole burst beyond the budget (and so dropped with
        # RATE_LIMITED) depends on how the frames coalesced into reads: the rule itself
        # is tests/rules/test_audio_budget_rules.py's. What did come must be that error.
        came: list[Any] = []
        with contextlib.suppress(NoFrame):
            while True:
                came.append(await attacker.recv(timeout=0.2))
        errors = [
            item.message for item in came if isinstance(getattr(item, "message", None), Error)
        ]
        assert [(e.code, e.recoverable) for e in errors] in ([], [("RATE_LIMITED", True)])
    finally:
        await attacker.close()
        await bystander.close()
        await server.close()
    assert pongs == 20
    assert 0 < len(received) <= round(2 * 1.2 / 0.12) + 1  # 2.4 s of the 120 s sent
    assert vad.threads, "no window was judged"
    assert all(name.startswith("vrt-voice-in") for name in vad.threads), vad.threads


async def test_a_replys_first_clause_is_not_queued_behind_clauses_made_ahead(
    stages: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The synthesiser every session shares makes a reply's first clause (what its user
    waits for) on a thread of its own: while clauses other sessions asked for ahead of
    their playback hold the other thread, the answer is being made (it used to wait
    behind all of them)."""
    tts = stages.tts
    started: list[str] = []
    gate = threading.Event()

    def synthesize_now(text: str, voice: Any) -> Samples:
        del voice
        started.append(text)
        gate.wait(10.0)
        return np.zeros(160, np.float32)

    monkeypatch.setattr(tts, "_synthesize_now", synthesize_now)

    async def speak_clause(text: str, first: bool) -> None:
        first_clause.set(first)
        async for _ in tts.synthesize(text):
            pass

    ahead = [asyncio.create_task(speak_clause(f"ahead {k}", False)) for k in range(4)]
    answer = asyncio.create_task(speak_clause("the answer", True))
    try:
        async with asyncio.timeout(10.0):
            while len(started) < 2:
                await asyncio.sleep(0.01)
        assert sorted(started) == ["ahead 0", "the answer"]
    finally:
        gate.set()
        await asyncio.gather(*ahead, answer)
    assert started[2:] == ["ahead 1", "ahead 2", "ahead 3"]
