"""Speech in, speech out, through a real ``vrt serve`` (the default agent: the offline
voice agent with the scripted brain): recorded utterances are streamed as 20 ms input
frames in real time, as a microphone would send them.

* The recogniser's final transcripts over the whole corpus (24 utterances, 140 words,
  four espeak-ng voices) have a word error rate under :data:`WER_BOUND`. Whisper
  tiny.en measured 11 % on it here (``docs/voice.md``); the bound leaves room for
  decoding differences between machines, and fails if recognition breaks (a wrong
  sample rate or a lost pre-roll costs far more).
* Each spoken reply (the scripted brain echoes what it heard), run back through the
  recogniser, holds the reply's words: over all replies, under
  :data:`REPLY_MISSING_BOUND` of the agent transcripts' words are missing from what the
  recogniser hears (extra words are not counted: tiny models sometimes add a phrase
  after the end of a clip).

About 30 s: four sessions at a time, each speaking its share of the corpus.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
import wave
from pathlib import Path
from typing import Any, Final

import pytest
from speech import HERE, Utterance, corpus, errors, missing, normalise, to_16k, word_error_rate

from support.processes import vrt_command
from vrt.voice.chat import Conversation, converse

pytestmark = pytest.mark.timeout(240)

WER_BOUND: Final = 0.25
REPLY_MISSING_BOUND: Final = 0.1
SESSIONS: Final = 4


async def _speak_all(url: str, utterances: list[Utterance]) -> list[Conversation]:
    return [await converse(url, u.pcm16, 16000, tail_ms=800) for u in utterances]


async def test_speech_is_recognised_and_answered_in_speech(voice_url: str, stages: Any) -> None:
    utterances = corpus()
    assert len(utterances) >= 20
    shares = [utterances[k::SESSIONS] for k in range(SESSIONS)]
    results = await asyncio.gather(*(_speak_all(voice_url, share) for share in shares))
    heard: list[tuple[str, str]] = []
    replies: list[tuple[str, str]] = []
    for share, conversations in zip(shares, results, strict=True):
        for utterance, conversation in zip(share, conversations, strict=True):
            finals = conversation.transcripts("user")
            assert len(finals) == 1, (utterance.name, conversation.events)
            heard.append((utterance.words, finals[0]))
            assert "listening" in conversation.states()
            spoken = conversation.transcripts("agent")
            assert spoken, (utterance.name, "no agent transcript")
            audio, rate = conversation.reply_pcm16()
            assert len(audio) > rate // 5, "the reply has under 200 ms of audio"
            back = stages.stt.transcribe(to_16k(audio, rate))
            replies.append((spoken[-1], back))
    wer = word_error_rate(heard)
    report = "\n".join(f"{e[0]}/{e[1]} {r!r} -> {h!r}" for r, h in heard if (e := errors(r, h))[0])
    assert wer < WER_BOUND, f"word error rate {wer:.1%}:\n{report}"
    lost = sum(missing(said, back) for said, back in replies)
    words = sum(len(normalise(said)) for said, _ in replies)
    assert lost / words < REPLY_MISSING_BOUND, f"{lost} of {words} reply words lost: {replies}"
    print(f"WER {wer:.1%} over {len(heard)} utterances; {lost} of {words} reply words lost")


def test_vrt_chat_speaks_a_recording(voice_url: str, tmp_path: Path) -> None:
    reply = tmp_path / "reply.wav"
    done = subprocess.run(
        [
            *vrt_command(),
            "chat",
            voice_url,
            "--wav",
            str(HERE / "u03.wav"),
            "--save-reply",
            str(reply),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    user = [line for line in done.stdout.splitlines() if line.startswith("user: ")]
    assert errors("how is the weather today", user[-1].removeprefix("user: "))[0] <= 1
    assert "voice to voice" in done.stdout
    with wave.open(str(reply)) as saved:
        assert saved.getnframes() > saved.getframerate() // 2


def test_vrt_chat_refuses_what_is_not_a_wav(tmp_path: Path) -> None:
    bogus = tmp_path / "speech.wav"
    bogus.write_text("not audio")
    done = subprocess.run(
        [*vrt_command(), "chat", "ws://127.0.0.1:9", "--wav", str(bogus)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "not a WAV file" in done.stderr


def test_vrt_chat_voice_talks_through_the_microphone_and_speaker(
    voice_url: str, tmp_path: Path
) -> None:
    """``vrt chat --voice`` with a stand-in sounddevice (``fake_sounddevice/``): what the
    microphone hears is recognised, and the reply comes out of the speaker."""
    import os

    import numpy as np
    import soxr

    utterance = corpus()[7]  # "remind me to call my mother tomorrow"
    mic = tmp_path / "mic.wav"
    with wave.open(str(mic), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(24000)  # the session's input format (pcm16 24 kHz)
        wide = soxr.resample(utterance.samples, 16000, 24000)
        out.writeframes((np.clip(wide, -1, 1) * 32767).astype("<i2").tobytes())
    speaker = tmp_path / "speaker.pcm"
    fake = Path(__file__).parent / "fake_sounddevice"
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(fake), os.environ.get("PYTHONPATH", "")]),
        FAKE_MIC=str(mic),
        FAKE_SPEAKER=str(speaker),
    )
    process = subprocess.Popen(
        [*vrt_command(), "chat", voice_url, "--voice"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    lines: list[str] = []
    try:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line.rstrip())
            if line.startswith("agent: "):
                break
        time.sleep(1.0)  # the speaker plays the reply in real time
    finally:
        process.terminate()
        process.wait(10)
    user = [line.removeprefix("user: ") for line in lines if line.startswith("user: ")]
    assert user, lines
    assert errors(utterance.words, user[-1])[0] <= 2, user
    assert speaker.exists()
    assert speaker.stat().st_size > 24000  # over half a second of the reply was played
