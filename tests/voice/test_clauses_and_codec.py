"""Units: cutting streamed text into clauses, and the wire-format conversions."""

from __future__ import annotations

import numpy as np
import pytest

from vrt.audio import pcm16_to_pcmu
from vrt.protocol.messages import Format
from vrt.voice.clauses import ClauseSplitter
from vrt.voice.codec import InputDecoder, OutputEncoder


def _split(chunks: list[str]) -> list[str]:
    splitter = ClauseSplitter()
    clauses = [clause for chunk in chunks for clause in splitter.add(chunk)]
    return clauses + splitter.finish()


def test_sentences_end_clauses_as_the_text_streams() -> None:
    splitter = ClauseSplitter()
    assert splitter.add("Sure. The") == ["Sure."]
    assert splitter.add(" time is 3") == []
    assert splitter.add(".5 seconds past") == []  # "3.5" is no sentence end
    assert splitter.add(" noon! Anything") == ["The time is 3.5 seconds past noon!"]
    assert splitter.finish() == ["Anything"]


def test_a_comma_ends_a_clause_once_it_has_a_few_words() -> None:
    assert _split(["Well, I think that we can, if you like, go now"]) == [
        "Well, I think that we can,",
        "if you like, go now",
    ]


def test_a_long_clause_is_cut_at_a_space_and_unspaced_text_waits() -> None:
    words = " ".join(["word"] * 40)
    clauses = _split([words])
    assert all(len(clause) <= 100 for clause in clauses)
    assert " ".join(clauses) == words
    assert ClauseSplitter().add("x" * 150) == []  # one word per chunk, joined later


@pytest.mark.parametrize("chunks", [["a", "b. c"], ["", "  ", "Hi.", " ", "There"]])
def test_no_text_is_lost_or_repeated(chunks: list[str]) -> None:
    assert " ".join(_split(chunks)).split() == "".join(chunks).split()


def _tone(rate: int, seconds: float = 0.5) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    return (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)


@pytest.mark.parametrize(
    "fmt",
    [
        Format(encoding="pcm16", sample_rate=24000),
        Format(encoding="pcm16", sample_rate=16000),
        Format(encoding="pcmu", sample_rate=8000),
        Format(encoding="opus", sample_rate=48000),
    ],
)
def test_output_frames_are_20_ms_and_decode_back(fmt: Format) -> None:
    encoder = OutputEncoder(fmt, 22050)
    tone = _tone(22050)
    frames = encoder.encode(tone[:5000]) + encoder.encode(tone[5000:]) + encoder.flush()
    assert len(frames) == 25  # 500 ms, the last frame padded
    if fmt.encoding != "opus":
        size = fmt.rate // 50 * (2 if fmt.encoding == "pcm16" else 1)
        assert {len(frame) for frame in frames} == {size}
    decoder = InputDecoder(fmt, 16000)
    back = np.concatenate([decoder.decode(frame) for frame in frames])
    assert abs(len(back) - 8000) <= 1600  # the input resampler's delay, at most 100 ms
    # The tone survives: its level, and its pitch (zero crossings per second).
    middle = back[2000:6000]
    assert 0.15 < np.sqrt(np.mean(middle**2)) < 0.25
    crossings = np.count_nonzero(np.diff(np.signbit(middle))) / (len(middle) / 16000) / 2
    assert 420 < crossings < 460


def test_a_bad_opus_packet_is_lost_audio_not_an_error() -> None:
    decoder = InputDecoder(Format(encoding="opus", sample_rate=48000), 16000)
    assert decoder.decode(b"\xff\x00garbage").size == 0
    assert decoder.decode(b"").size == 0


def test_pcmu_input_is_decoded() -> None:
    pcm = (_tone(8000) * 32767).astype("<i2").tobytes()
    decoded = InputDecoder(Format(encoding="pcmu"), 16000).decode(pcm16_to_pcmu(pcm))
    assert 0.15 < np.sqrt(np.mean(decoded[1000:7000] ** 2)) < 0.25


def test_the_first_clause_of_a_reply_ends_early() -> None:
    splitter = ClauseSplitter(first_words=4)
    assert splitter.add("Please add milk and then") == ["Please add milk and"]
    assert splitter.add(" turn the shopping list") == []  # only the first clause is eager
    assert splitter.finish() == ["then turn the shopping list"]
    assert _split_first(["Well, sure. Now"]) == ["Well, sure.", "Now"]
    assert _split_first(["Sure thing, then"]) == ["Sure thing,", "then"]  # after two words
    assert _split_first(["Right, then"]) == ["Right, then"]  # not after one
    assert _split_first(["Yes"]) == ["Yes"]


def test_each_clause_after_the_first_has_at_most_twice_its_words() -> None:
    """A two-word first clause, then a long sentence: cut at 4 words, then 8, so that
    each clause is synthesised while the one before it plays."""
    splitter = ClauseSplitter(first_words=2)
    words = "one two three four five six seven eight nine ten eleven twelve thirteen "
    assert splitter.add(words + "fourteen fifteen.") == [
        "one two",
        "three four five six",
        "seven eight nine ten eleven twelve thirteen fourteen",
    ]
    assert splitter.finish() == ["fifteen."]
    assert ClauseSplitter().add(words) == []  # without first_words: no word cap at all


def _split_first(chunks: list[str]) -> list[str]:
    splitter = ClauseSplitter(first_words=4)
    clauses = [clause for chunk in chunks for clause in splitter.add(chunk)]
    return clauses + splitter.finish()
