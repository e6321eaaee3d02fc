"""``vrt chat --wav FILE`` takes the recordings people have (issue 34 point 8):
espeak-ng's 22,050 Hz, a CD's 44,100 Hz stereo, float samples; each is converted to
mono pcm16 at 16 kHz with its pitch and length kept. Without the converters, one line
saying what to install."""

from __future__ import annotations

import math
import struct
import sys
import wave
from pathlib import Path

import pytest

pytest.importorskip("soxr")
pytest.importorskip("av")

import numpy as np

from vrt.voice.chat import CONVERTED_RATE, read_wav

TONE_HZ = 440.0
SECONDS = 0.5


def tone(rate: int, channels: int = 1) -> np.ndarray:
    t = np.arange(int(rate * SECONDS)) / rate
    mono = 0.5 * np.sin(2 * math.pi * TONE_HZ * t)
    return np.repeat(mono[:, None], channels, axis=1)


def write_pcm(path: Path, rate: int, channels: int = 1, width: int = 2) -> Path:
    samples = tone(rate, channels)
    scale = {1: 127, 2: 32767, 3: 8388607, 4: 2147483647}[width]
    ints = np.round(samples * scale).astype(np.int64).reshape(-1)
    if width == 1:
        data = (ints + 128).astype(np.uint8).tobytes()  # 8-bit WAV is unsigned
    else:
        data = b"".join(int(v).to_bytes(width, "little", signed=True) for v in ints)
    with wave.open(str(path), "wb") as out:
        out.setnchannels(channels)
        out.setsampwidth(width)
        out.setframerate(rate)
        out.writeframes(data)
    return path


def write_float(path: Path, rate: int) -> Path:
    """A WAVE_FORMAT_IEEE_FLOAT (3) file, 32-bit: what the wave module cannot write
    (the RIFF layout: Microsoft's Multimedia Programming Interface, 'fmt ' chunk)."""
    data = tone(rate).astype("<f4").tobytes()
    fmt = struct.pack("<HHIIHH", 3, 1, rate, rate * 4, 4, 32)
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt
    body += b"data" + struct.pack("<I", len(data)) + data
    path.write_bytes(b"RIFF" + struct.pack("<I", len(body)) + body)
    return path


def dominant_hz(pcm16: bytes, rate: int) -> float:
    samples = np.frombuffer(pcm16, dtype="<i2").astype(np.float64)
    spectrum = np.abs(np.fft.rfft(samples))
    return float(np.argmax(spectrum) * rate / len(samples))


@pytest.mark.parametrize(
    ("name", "make"),
    [
        ("22050 Hz (espeak-ng)", lambda p: write_pcm(p, 22050)),
        ("44100 Hz stereo", lambda p: write_pcm(p, 44100, channels=2)),
        ("24-bit 48000 Hz", lambda p: write_pcm(p, 48000, width=3)),
        ("8-bit 11025 Hz", lambda p: write_pcm(p, 11025, width=1)),
        ("float 44100 Hz", lambda p: write_float(p, 44100)),
    ],
)
def test_a_recording_is_converted_keeping_pitch_and_length(
    tmp_path: Path, name: str, make: object
) -> None:
    path = make(tmp_path / "in.wav")  # type: ignore[operator]
    pcm16, rate = read_wav(path)
    assert rate == CONVERTED_RATE
    assert len(pcm16) / 2 / rate == pytest.approx(SECONDS, abs=0.02)
    assert dominant_hz(pcm16, rate) == pytest.approx(TONE_HZ, abs=5)
    peak = np.abs(np.frombuffer(pcm16, dtype="<i2")).max() / 32767
    assert peak == pytest.approx(0.5, abs=0.05)  # the level kept, not clipped


def test_a_session_rate_is_read_as_it_is(tmp_path: Path) -> None:
    path = write_pcm(tmp_path / "in.wav", 24000)
    pcm16, rate = read_wav(path)
    assert rate == 24000
    assert len(pcm16) == int(24000 * SECONDS) * 2


def test_without_the_converters_one_line_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "soxr", None)
    with pytest.raises(ValueError, match=r"pip install 'vrealtime\[voice\]'") as raised:
        read_wav(write_pcm(tmp_path / "in.wav", 22050))
    assert "\n" not in str(raised.value)


def test_what_is_not_audio_is_one_line(tmp_path: Path) -> None:
    bogus = tmp_path / "speech.wav"
    bogus.write_text("not audio")
    with pytest.raises(ValueError, match="not a WAV file") as raised:
        read_wav(bogus)
    assert "\n" not in str(raised.value)
