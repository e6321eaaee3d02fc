"""Spoken scripted commands, end to end (issue 34.2): speech made now by Debian's
``espeak-ng`` (a synthesiser unrelated to the recogniser), at its own 22,050 Hz and
resampled to the session's 24 kHz as a client sends a WAV, streamed by ``VrtClient`` as
20 ms frames in real time to a real ``vrt serve`` (the voice agent, scripted brain).

Each utterance must come back as its words (the user's final transcript) and be
answered in speech holding them, as the command it is: the scripted brain reads a
transcript heard as "Echo, how are you?" as ``echo how are you?`` and answers "how are
you?" (``spoken_command``). The clips
start at their first sample, as a WAV sent whole does: no pre-roll before the speech.
Before the fix these were heard as nothing (an idle turn: Whisper's no-speech verdict
on a 10 s window, where its no-speech probability runs high), or as other words
("Yeah, go at time, is it?"): 10 word errors in 17 words. About 15 s.
"""

from __future__ import annotations

import io
import shutil
import subprocess
import wave
from typing import Final

import numpy as np
import pytest
import soxr
from speech import errors, missing

from vrt.voice.chat import converse

pytestmark = pytest.mark.timeout(120)

#: (words, espeak-ng voice): espeak-ng's default rate (175 words a minute).
COMMANDS: Final = (
    ("echo how are you", "en-us"),
    ("echo what time is it", "en-us"),
    ("echo the weather is nice today", "en-us"),
    ("echo open the window", "en+f3"),
)
#: Word errors allowed over all the commands (decoding differs a little between CPUs).
ERROR_BOUND: Final = 2


def _espeak_24k(words: str, voice: str) -> bytes:
    assert shutil.which("espeak-ng"), "Debian's espeak-ng is needed (apt-get install espeak-ng)"
    wav = subprocess.run(
        ["espeak-ng", "-v", voice, "--stdout", words], capture_output=True, check=True
    ).stdout
    with wave.open(io.BytesIO(wav)) as recording:
        rate = recording.getframerate()
        pcm = recording.readframes(recording.getnframes())
    assert rate == 22050
    samples = np.frombuffer(pcm, "<i2").astype(np.float32) / 32768.0
    wide = soxr.resample(samples, rate, 24000)
    return (np.clip(wide, -1, 1) * 32767).round().astype("<i2").tobytes()


async def test_spoken_commands_are_heard_and_answered(voice_url: str) -> None:
    wrong = acted = 0
    report: list[str] = []
    for words, voice in COMMANDS:
        conversation = await converse(voice_url, _espeak_24k(words, voice), 24000, tail_ms=800)
        finals = conversation.transcripts("user")
        assert finals, f"{words!r} ({voice}) was heard as nothing: {conversation.states()}"
        heard = finals[-1]
        wrong += errors(words, heard)[0]
        report.append(f"{words!r} ({voice}) -> {heard!r}")
        spoken = conversation.transcripts("agent")
        assert spoken, f"{words!r}: no spoken reply"
        # The echo holds what was heard, whatever the command word came back as.
        said = heard.split(maxsplit=1)
        if said[0].strip(".,!?").lower() == "echo":
            acted += 1  # heard as the command: answered with the words after it
            assert spoken[-1].split()[0].strip(".,!?").lower() != "echo", (heard, spoken)
            assert missing(said[1] if len(said) > 1 else "", spoken[-1]) == 0, (heard, spoken)
        else:
            assert missing(heard, spoken[-1]) == 0, (heard, spoken)
    assert wrong <= ERROR_BOUND, f"{wrong} word errors:\n" + "\n".join(report)
    assert acted >= len(COMMANDS) - 1, "commands not heard as commands:\n" + "\n".join(report)
