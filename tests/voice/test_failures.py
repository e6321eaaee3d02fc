"""Every stage's failure is a one-line ``AgentSetupError`` at startup (``vrt serve``
prints it and exits 2) or a recoverable ``AGENT_ERROR`` mid-session (§9.2) after which
the session goes on; never a hang. The network stages are exercised against a stand-in
of the OpenAI-compatible audio endpoints (``audio_standin.py``)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from audio_standin import AudioStandIn
from speech import corpus, to_16k

from support import RunningServer, start_server
from support.processes import free_port, vrt_command
from vrt.agents import AgentSetupError, SessionInfo, load_agent, load_default_agent
from vrt.agents.scripted import ScriptedAgent
from vrt.client import (
    AudioChunk,
    ErrorReceived,
    TextReceived,
    TranscriptReceived,
    TurnChanged,
    VrtClient,
)
from vrt.protocol.messages import Format
from vrt.voice import models
from vrt.voice.agent import VoiceAgent, VoiceConfig, VoiceStages
from vrt.voice.chat import Conversation, speak
from vrt.voice.network import OpenAISpeechToText, OpenAITextToSpeech, ServiceConfig

pytestmark = pytest.mark.timeout(120)

PCM16K = Format(encoding="pcm16", sample_rate=16000)


# -- at startup --


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"stt_model": "/no/such/model"}, "stt_model: no such file /no/such/model/model.bin"),
        ({"vad_model": "/no/such.onnx"}, "vad_model: no such file /no/such.onnx"),
        ({"stt_sha256": "0" * 64, "stt_model": "BUNDLED"}, "is not the expected file"),
        ({"hangover_ms": "soon"}, "hangover_ms must be a number"),
        ({"threshold": "1.5"}, "threshold must be between 0 and 1"),
        ({"stt": "vosk"}, "stt must be whisper or openai"),
        ({"tts": "say"}, "tts must be piper, espeak or openai"),
        ({"tts": "espeak", "tts_voice": "xx-yy"}, "eSpeak NG has no voice 'xx-yy'"),
        ({"colour": "blue"}, "the voice agent has no option colour"),
        ({"brain": "voice"}, "must be a text agent"),
        ({"brain": "nobody"}, "unknown agent 'nobody'"),
        ({"brain": "openai-chat"}, "brain openai-chat: the openai-chat agent needs a model"),
        ({"stt": "openai", "stt_url": "ftp://x"}, "stt_url must be an http:// or https:// URL"),
    ],
)
def test_setup_failures_are_one_line(options: dict[str, str], says: str) -> None:
    if options.get("stt_model") == "BUNDLED":
        options["stt_model"] = str(models.BUNDLED["whisper-tiny.en"].locate().parent)
    with pytest.raises(AgentSetupError) as failed:
        load_agent("voice", options)
    message = str(failed.value)
    assert says in message
    assert "\n" not in message


def test_a_bundled_model_that_is_not_the_pinned_one_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pinned = models.BUNDLED["silero-vad"]
    forged = models.BundledModel(pinned.package, pinned.module, pinned.path, "ab" * 32)
    monkeypatch.setitem(models.BUNDLED, "silero-vad", forged)
    with pytest.raises(AgentSetupError, match="is not the expected file: its SHA-256 is"):
        load_agent("voice", {})


def test_vrt_serve_prints_the_line_and_exits_2() -> None:
    done = subprocess.run(
        [*vrt_command(), "serve", "--agent", "voice", "--agent-option", "tts_model=/nope.onnx"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "vrt: --agent voice: tts_model: no such file /nope.onnx"
    ]


def _hide_whisper(tmp_path: Path) -> dict[str, str]:
    """An environment in which faster-whisper cannot be imported (as if the voice extra
    were not installed)."""
    (tmp_path / "sitecustomize.py").write_text(
        textwrap.dedent(
            """
            import sys
            sys.modules["faster_whisper"] = None
            """
        )
    )
    return dict(os.environ, PYTHONPATH=str(tmp_path))


def test_without_the_voice_extra_vrt_serve_falls_back_to_the_scripted_agent(
    tmp_path: Path,
) -> None:
    port = free_port()
    process = subprocess.Popen(
        [*vrt_command(), "serve", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_hide_whisper(tmp_path),
    )
    try:
        assert process.stdout is not None
        assert process.stderr is not None
        listening = process.stdout.readline()
        assert "(agent scripted," in listening
        notice = process.stderr.readline()
        assert "offline voice agent is not installed (faster-whisper missing)" in notice
        assert "pip install 'vrealtime[voice]'" in notice
    finally:
        process.terminate()
        process.wait(10)


def test_without_the_voice_extra_agent_voice_says_how_to_get_it(tmp_path: Path) -> None:
    done = subprocess.run(
        [*vrt_command(), "serve", "--agent", "voice"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=_hide_whisper(tmp_path),
    )
    assert done.returncode == 2
    assert "pip install 'vrealtime[voice]'" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_the_default_is_the_voice_agent_when_installed() -> None:
    name, _, notice = load_default_agent()
    assert (name, notice) == ("voice", "")


# -- mid-session: the network stages --


@pytest.fixture
async def standin() -> AsyncIterator[tuple[AudioStandIn, str]]:
    stand_in = AudioStandIn()
    speech = corpus()[17].samples  # "stop the music"
    import soxr

    stand_in.speech = (soxr.resample(speech, 16000, 24000) * 32767).astype("<i2").tobytes()
    url = await stand_in.start()
    yield stand_in, url
    await stand_in.close()


async def _served(stages: Any, stt: Any = None, tts: Any = None) -> RunningServer:
    mixed = VoiceStages(vad=stages.vad, stt=stt or stages.stt, tts=tts or stages.tts)

    def factory(info: SessionInfo) -> VoiceAgent:
        del info
        return VoiceAgent(mixed, ScriptedAgent(), VoiceConfig())

    return await start_server(agent_factory=factory)


async def _collect(client: VrtClient, until_idle: int, timeout: float = 20.0) -> list[Any]:
    events: list[Any] = []
    idle = 0
    async with asyncio.timeout(timeout):
        while idle < until_idle:
            event = await client.next_event()
            events.append(event)
            if isinstance(event, TurnChanged) and event.state == "idle":
                idle += 1
    return events


def _service(url: str) -> ServiceConfig:
    return ServiceConfig(url, "whisper-1", "sk-test", timeout=5.0)


async def test_the_network_stages_recognise_and_speak(
    stages: Any, standin: tuple[AudioStandIn, str]
) -> None:
    stand_in, url = standin
    server = await _served(
        stages, OpenAISpeechToText(_service(url)), OpenAITextToSpeech(_service(url), "alloy")
    )
    try:
        async with VrtClient(server.url, input=PCM16K) as client:
            await client.next_event(10.0)
            conversation = Conversation()
            utterance = corpus()[0]
            speaking = asyncio.create_task(
                speak(client, conversation, utterance.pcm16 + bytes(24000), 16000, PCM16K)
            )
            events = await _collect(client, 1)
            await speaking
    finally:
        await server.close()
    finals = [e.text for e in events if isinstance(e, TranscriptReceived) and e.final]
    assert finals[0] == "hello world"
    audio = b"".join(e.payload for e in events if isinstance(e, AudioChunk))
    back = stages.stt.transcribe(to_16k(audio, 24000))
    assert "music" in back.lower()
    transcription, synthesis = stand_in.requests[0], stand_in.requests[-1]
    assert transcription.path == "/v1/audio/transcriptions"
    assert transcription.headers["authorization"] == "Bearer sk-test"
    assert b'name="model"' in transcription.body
    assert b"RIFF" in transcription.body
    assert synthesis.path == "/v1/audio/speech"
    body = json.loads(synthesis.body)
    assert body["response_format"] == "pcm"
    assert body["input"] == "hello world"


@pytest.mark.parametrize("stage", ["stt", "tts"])
async def test_a_refusing_network_stage_is_a_recoverable_agent_error(
    stages: Any, standin: tuple[AudioStandIn, str], stage: str
) -> None:
    stand_in, url = standin
    stand_in.status = 503
    stt = OpenAISpeechToText(_service(url)) if stage == "stt" else None
    tts = OpenAITextToSpeech(_service(url), "alloy") if stage == "tts" else None
    server = await _served(stages, stt, tts)
    try:
        async with VrtClient(server.url, input=PCM16K) as client:
            await client.next_event(10.0)
            if stage == "stt":
                await speak(client, Conversation(), corpus()[0].pcm16 + bytes(24000), 16000, PCM16K)
            else:
                await client.send_text("echo nobody hears this")
            events = await _collect(client, 1)
            errors = [e for e in events if isinstance(e, ErrorReceived)]
            assert [(e.code, e.recoverable) for e in errors] == [("AGENT_ERROR", True)]
            assert "HTTP 503" in errors[0].message
            # The session goes on: text still gets its text reply.
            stand_in.status = 200
            await client.send_text("echo still here")
            later = await _collect(client, 1)
            assert "".join(e.text for e in later if isinstance(e, TextReceived)) == "still here"
    finally:
        await server.close()


async def test_an_unreachable_network_stage_fails_fast(stages: Any) -> None:
    closed = f"http://127.0.0.1:{free_port()}/v1"
    server = await _served(stages, tts=OpenAITextToSpeech(_service(closed), "alloy"))
    try:
        async with VrtClient(server.url, input=PCM16K) as client:
            await client.next_event(10.0)
            await client.send_text("echo anyone")
            events = await _collect(client, 1, timeout=15.0)
    finally:
        await server.close()
    errors = [e for e in events if isinstance(e, ErrorReceived)]
    assert [(e.code, e.recoverable) for e in errors] == [("AGENT_ERROR", True)]
    assert "ConnectError" in errors[0].message


async def test_a_network_stage_that_hangs_is_an_agent_error_after_its_timeout(
    stages: Any, standin: tuple[AudioStandIn, str]
) -> None:
    stand_in, url = standin
    stand_in.stall = True
    hanging = ServiceConfig(url, "tts-1", None, timeout=1.0)
    server = await _served(stages, tts=OpenAITextToSpeech(hanging, "alloy"))
    try:
        async with VrtClient(server.url, input=PCM16K) as client:
            await client.next_event(10.0)
            await client.send_text("echo hello")
            events = await _collect(client, 1, timeout=15.0)
    finally:
        await server.close()
    errors = [e for e in events if isinstance(e, ErrorReceived)]
    assert [(e.code, e.recoverable) for e in errors] == [("AGENT_ERROR", True)]
    assert "ReadTimeout" in errors[0].message


async def test_a_recogniser_raising_mid_session_is_a_recoverable_agent_error(
    stages: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(audio: Any, **options: Any) -> str:
        raise RuntimeError("the model broke")

    monkeypatch.setattr(stages.stt, "transcribe", broken)
    server = await _served(stages)
    try:
        async with VrtClient(server.url, input=PCM16K) as client:
            await client.next_event(10.0)
            silence = np.zeros(16000, np.int16).tobytes()
            await speak(client, Conversation(), corpus()[3].pcm16 + silence, 16000, PCM16K)
            events = await _collect(client, 1)
    finally:
        await server.close()
    errors = [e for e in events if isinstance(e, ErrorReceived)]
    assert [(e.code, e.recoverable, e.message) for e in errors] == [
        ("AGENT_ERROR", True, "speech recognition failed: RuntimeError")
    ]


async def test_recognition_over_capacity_is_a_recoverable_agent_error(
    stages: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the recognition queue's bound (here 0: every final is past it) the
    utterance is refused with a recoverable AGENT_ERROR saying so, and the session
    goes on (issue 31.4; the bound itself: test_decode_queue.py)."""
    monkeypatch.setattr(stages.stt.queue, "limit", 0)
    server = await _served(stages)
    try:
        async with VrtClient(server.url, input=PCM16K) as client:
            await client.next_event(10.0)
            silence = np.zeros(16000, np.int16).tobytes()
            await speak(client, Conversation(), corpus()[3].pcm16 + silence, 16000, PCM16K)
            events = await _collect(client, 1)
            await client.send_text("echo still here")
            after = await _collect(client, 1)
    finally:
        await server.close()
    errors = [e for e in events if isinstance(e, ErrorReceived)]
    assert [(e.code, e.recoverable) for e in errors] == [("AGENT_ERROR", True)]
    assert "over capacity" in errors[0].message
    assert not any(isinstance(e, TranscriptReceived) and e.role == "user" for e in events)
    assert any(isinstance(e, TranscriptReceived) and e.text == "still here" for e in after)
