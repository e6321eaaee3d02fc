"""Turn-taking from a voice activity detector: when the user starts speaking, pauses,
resumes and has finished.

Input samples (16 kHz) are cut into the detector's windows (Silero: 32 ms). A window is
speech at ``threshold`` probability or more, silence under ``threshold - 0.15`` (the
hysteresis keeps a word's quiet end from counting as silence), neither in between.

* **Start**: ``min_speech_ms`` of speech windows in a row. Shorter bursts (a cough, a
  click, a door) start nothing. The recogniser then gets the audio from
  ``preroll_ms`` before the start was confirmed, so the first syllable is not lost.
* **Pause**: the first silence window after speech (the recogniser may guess now).
* **Resume**: speech again within the hangover.
* **End**: ``hangover_ms`` of silence (timed from its first window, as Silero's own
  iterator does), or an utterance of ``max_utterance_ms``.

Times are audio time (samples counted), never a clock, so the result does not depend on
how the frames arrive.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Literal

import numpy as np

from .stages import SAMPLE_RATE, Samples, VadStream

__all__ = ["TurnDetector", "TurnEvent"]

_HYSTERESIS = 0.15


@dataclass(frozen=True, slots=True)
class TurnEvent:
    """``audio`` carries the utterance's samples (``start``: the pre-roll and the speech
    that confirmed it; ``audio``: one window). ``at_ms`` is the audio time of the event:
    for ``pause`` and ``end``, the end of the last speech window."""

    kind: Literal["start", "audio", "pause", "resume", "end"]
    at_ms: float
    audio: Samples | None = None
    #: An ``audio`` window the detector judged speech.
    speech: bool = False


class TurnDetector:
    def __init__(
        self,
        vad: VadStream,
        *,
        threshold: float = 0.5,
        min_speech_ms: float = 160.0,
        hangover_ms: float = 300.0,
        preroll_ms: float = 300.0,
        max_utterance_ms: float = 28_000.0,
    ) -> None:
        self._vad = vad
        self.window = vad.window
        self.window_ms = vad.window * 1000 / SAMPLE_RATE
        self.threshold = threshold
        self.hangover_ms = hangover_ms
        self.max_utterance_ms = max_utterance_ms
        self._min_windows = max(1, math.ceil(min_speech_ms / self.window_ms))
        keep = self._min_windows + math.ceil(preroll_ms / self.window_ms)
        self._recent: deque[Samples] = deque(maxlen=keep)
        self._pending = np.zeros(0, np.float32)
        self._time_ms = 0.0
        self._run = 0  # speech windows in a row, before a start
        self.speaking = False
        self._paused = False
        self._utterance_ms = 0.0
        self._last_speech_end = 0.0
        self._silence_since: float | None = None
        #: The latest window's speech probability (for tests and benchmarks).
        self.last_probability = 0.0

    def feed(self, samples: Samples) -> list[TurnEvent]:
        data = np.concatenate((self._pending, samples)) if self._pending.size else samples
        size = self.window
        whole = len(data) - len(data) % size
        events: list[TurnEvent] = []
        for offset in range(0, whole, size):
            self._window(data[offset : offset + size], events)
        self._pending = data[whole:].copy()
        return events

    def _window(self, window: Samples, events: list[TurnEvent]) -> None:
        probability = self._vad.probability(window)
        self.last_probability = probability
        self._time_ms += self.window_ms
        speech = probability >= self.threshold
        silence = probability < self.threshold - _HYSTERESIS
        if not self.speaking:
            self._recent.append(window)
            self._run = self._run + 1 if speech else 0
            if self._run >= self._min_windows:
                self.speaking, self._paused, self._run = True, False, 0
                self._last_speech_end = self._time_ms
                audio = np.concatenate(self._recent)
                self._recent.clear()
                self._utterance_ms = len(audio) * 1000 / SAMPLE_RATE
                events.append(TurnEvent("start", self._time_ms, audio))
            return
        self._utterance_ms += self.window_ms
        events.append(TurnEvent("audio", self._time_ms, window, speech))
        if speech:
            self._last_speech_end = self._time_ms
            self._silence_since = None
            if self._paused:
                self._paused = False
                events.append(TurnEvent("resume", self._time_ms))
        elif silence and self._silence_since is None:
            # As Silero's own iterator: silence is timed from its first window; windows
            # between the thresholds neither start nor reset it.
            self._silence_since = self._time_ms - self.window_ms
            if not self._paused:
                self._paused = True
                events.append(TurnEvent("pause", self._last_speech_end))
        since = self._silence_since
        if (since is not None and self._time_ms - since >= self.hangover_ms) or (
            self._utterance_ms >= self.max_utterance_ms
        ):
            self.speaking, self._silence_since = False, None
            events.append(TurnEvent("end", self._last_speech_end))
