"""The spoken test corpus (``speech/``, made by ``make_speech.py``), generated noises, and
the word error rate."""

from __future__ import annotations

import json
import re
import wave
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import numpy as np
import numpy.typing as npt
import soxr

HERE: Final = Path(__file__).parent / "speech"
RATE: Final = 16000

#: Whisper writes numbers as digits; the corpus spells them.
_NUMBERS: Final = {
    "0": "zero", "1": "one", "2": "two", "3": "three", "4": "four", "5": "five",
    "6": "six", "7": "seven", "8": "eight", "9": "nine", "10": "ten", "11": "eleven",
    "12": "twelve", "20": "twenty",
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Utterance:
    name: str
    words: str
    pcm16: bytes  # 16 kHz mono

    @property
    def samples(self) -> npt.NDArray[np.float32]:
        return np.frombuffer(self.pcm16, dtype="<i2").astype(np.float32) / 32768.0


def corpus() -> list[Utterance]:
    manifest: dict[str, str] = json.loads((HERE / "manifest.json").read_text())
    utterances = []
    for name, words in manifest.items():
        with wave.open(str(HERE / name), "rb") as recording:
            assert recording.getframerate() == RATE
            utterances.append(Utterance(name, words, recording.readframes(recording.getnframes())))
    return utterances


def normalise(text: str) -> list[str]:
    words = re.sub(r"[^a-z0-9' ]", " ", text.lower()).split()
    return [_NUMBERS.get(word, word) for word in words]


def errors(reference: str, hypothesis: str) -> tuple[int, int]:
    """Word edit distance (substitutions, insertions, deletions) and reference length."""
    ref, hyp = normalise(reference), normalise(hypothesis)
    row = list(range(len(hyp) + 1))
    for i, word in enumerate(ref, 1):
        diagonal, row[0] = row[0], i
        for j, heard in enumerate(hyp, 1):
            diagonal, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, diagonal + (word != heard))
    return row[-1], len(ref)


def missing(reference: str, hypothesis: str) -> int:
    """Words of ``reference`` that ``hypothesis`` does not contain in order (insertions are
    free: "contains the words")."""
    ref, hyp = normalise(reference), normalise(hypothesis)
    row = [0] * (len(hyp) + 1)
    for word in ref:
        diagonal = 0
        for j, heard in enumerate(hyp, 1):
            diagonal, row[j] = row[j], diagonal + 1 if word == heard else max(row[j], row[j - 1])
    return len(ref) - row[-1]


def word_error_rate(pairs: list[tuple[str, str]]) -> float:
    wrong = total = 0
    for reference, hypothesis in pairs:
        e, n = errors(reference, hypothesis)
        wrong, total = wrong + e, total + n
    return wrong / max(total, 1)


def pcm16(samples: npt.NDArray[np.float32]) -> bytes:
    return (np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes()


def to_16k(pcm: bytes, rate: int) -> npt.NDArray[np.float32]:
    samples = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0
    if rate == RATE:
        return samples
    resampled: npt.NDArray[np.float32] = soxr.resample(samples, rate, RATE).astype(np.float32)
    return resampled


def silence(seconds: float) -> npt.NDArray[np.float32]:
    return np.zeros(int(seconds * RATE), np.float32)


def white(seconds: float, level: float, seed: int = 1) -> npt.NDArray[np.float32]:
    """White noise of RMS ``level`` (full scale 1)."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(int(seconds * RATE)) * level).astype(np.float32)


def pink(seconds: float, level: float, seed: int = 2) -> npt.NDArray[np.float32]:
    """Pink (1/f) noise of RMS ``level``: white noise shaped in the frequency domain."""
    rng = np.random.default_rng(seed)
    n = int(seconds * RATE)
    spectrum = np.fft.rfft(rng.standard_normal(n))
    frequencies = np.fft.rfftfreq(n, 1 / RATE)
    spectrum[1:] /= np.sqrt(frequencies[1:])
    spectrum[0] = 0
    noise = np.fft.irfft(spectrum, n)
    return (noise / np.sqrt(np.mean(noise**2)) * level).astype(np.float32)


def cough(seconds: float = 0.25, level: float = 0.5, seed: int = 3) -> npt.NDArray[np.float32]:
    """A cough-like burst: band-limited noise with a sharp attack and a fast decay."""
    rng = np.random.default_rng(seed)
    n = int(seconds * RATE)
    spectrum = np.fft.rfft(rng.standard_normal(n))
    frequencies = np.fft.rfftfreq(n, 1 / RATE)
    spectrum[(frequencies < 300) | (frequencies > 3000)] = 0
    burst = np.fft.irfft(spectrum, n)
    envelope = np.exp(-np.arange(n) / (0.25 * n)) * np.minimum(1, np.arange(n) / (0.01 * RATE))
    burst = burst * envelope
    return (burst / np.max(np.abs(burst)) * level).astype(np.float32)
