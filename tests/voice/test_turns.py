"""What starts a turn: the Silero detector and the turn rules of ``vrt.voice.turns`` on
generated audio. Speech starts one (the control that makes the others mean something);
silence, white and pink noise at several levels, clipped audio, a cough-length burst and
a speech fragment shorter than the minimum do not."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from speech import corpus, cough, pink, silence, white

from vrt.voice.turns import TurnDetector, TurnEvent


def _events(stages: Any, audio: npt.NDArray[np.float32], **options: float) -> list[TurnEvent]:
    detector = TurnDetector(stages.vad.stream(), **options)
    events: list[TurnEvent] = []
    for offset in range(0, len(audio), 320):  # 20 ms frames, as they arrive
        events.extend(detector.feed(audio[offset : offset + 320]))
    return events


def _kinds(events: list[TurnEvent]) -> list[str]:
    return [event.kind for event in events if event.kind != "audio"]


def test_speech_starts_pauses_and_ends_a_turn(stages: Any) -> None:
    utterance = corpus()[0]
    audio = np.concatenate((silence(0.5), utterance.samples, silence(1.0)))
    events = _events(stages, audio)
    assert _kinds(events)[0] == "start"
    assert _kinds(events)[-2:] == ["pause", "end"]
    start = events[0]
    assert start.audio is not None
    # The pre-roll reaches back before the confirmed start: the first syllable is kept.
    assert len(start.audio) >= 0.3 * 16000
    end = events[-1]
    speech_end_ms = (0.5 * 16000 + len(utterance.samples)) / 16
    assert abs(end.at_ms - speech_end_ms) < 150, (end.at_ms, speech_end_ms)


def test_the_hangover_is_the_silence_that_ends_the_turn(stages: Any) -> None:
    audio = np.concatenate((silence(0.3), corpus()[1].samples, silence(2.0)))
    for hangover in (300, 800):
        events = _events(stages, audio, hangover_ms=hangover)
        end = next(i for i, event in enumerate(events) if event.kind == "end")
        now = events[end - 1].at_ms  # the window that ended the turn
        waited = now - events[end].at_ms  # since the end of the last speech window
        # Silence is timed from its first window; windows between the thresholds may
        # come before it.
        assert hangover <= waited <= hangover + 3 * 32, (hangover, waited)


@pytest.mark.parametrize(
    ("name", "audio"),
    [
        ("silence", silence(3.0)),
        ("white noise, quiet", white(3.0, 0.01)),
        ("white noise, loud", white(3.0, 0.1)),
        ("white noise, very loud", white(3.0, 0.5)),
        ("pink noise, quiet", pink(3.0, 0.02)),
        ("pink noise, loud", pink(3.0, 0.3)),
        ("clipping", np.clip(white(3.0, 3.0), -1, 1)),
        ("a cough", np.concatenate((silence(0.5), cough(), silence(1.0)))),
        (
            "three coughs",
            np.concatenate([np.concatenate((cough(seed=s), silence(0.3))) for s in range(3)]),
        ),
    ],
)
def test_noise_starts_no_turn(stages: Any, name: str, audio: npt.NDArray[np.float32]) -> None:
    assert "start" not in _kinds(_events(stages, audio)), name


def test_speech_shorter_than_the_minimum_starts_no_turn(stages: Any) -> None:
    speech = corpus()[2].samples
    # Its loudest 100 ms, alone: speech to the detector, but no longer than a cough.
    energy = np.convolve(speech**2, np.ones(1600), mode="valid")
    peak = int(np.argmax(energy))
    burst = np.concatenate((silence(0.5), speech[peak : peak + 1600], silence(1.0)))
    assert "start" not in _kinds(_events(stages, burst, min_speech_ms=160))
    # The same fragment is speech once the minimum is below it: the test can fail.
    assert "start" in _kinds(_events(stages, burst, min_speech_ms=32))
