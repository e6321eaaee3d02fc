"""vrt.audio: G.711 µ-law, tones, frame arithmetic, RMS and the energy VAD (§8.2)."""

from __future__ import annotations

import itertools
import math
import struct
import warnings
from array import array
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vrt.audio import (
    EnergyVad,
    VadEvent,
    duration_ms,
    frame_bytes,
    pcm16_to_pcmu,
    pcmu_to_pcm16,
    rms,
    silence,
    tone,
)
from vrt.protocol.messages import PCM16_24K, Format

PCM16_16K = Format(encoding="pcm16", sample_rate=16000)
PCMU = Format(encoding="pcmu")
OPUS = Format(encoding="opus")
ALL_SAMPLES = array("h", range(-32768, 32768)).tobytes()


def pcm(*samples: int) -> bytes:
    return struct.pack(f"<{len(samples)}h", *samples)


def unpack(data: bytes) -> list[int]:
    return list(struct.unpack(f"<{len(data) // 2}h", data))


class TestMuLaw:
    """G.711 µ-law on 16-bit samples."""

    @pytest.mark.parametrize(
        ("sample", "code"),
        [
            (0, 0xFF),
            (1, 0xFF),
            (3, 0xFF),
            (4, 0xFE),
            (-1, 0x7F),  # symmetric decision levels: small negatives are negative zero
            (-3, 0x7F),
            (-4, 0x7E),
            (100, 0xF2),
            (-100, 0x72),
            (32635, 0x80),
            (32767, 0x80),  # clipped
            (-32768, 0x00),
        ],
    )
    def test_known_encodings(self, sample: int, code: int) -> None:
        assert pcm16_to_pcmu(pcm(sample)) == bytes([code])

    @pytest.mark.parametrize(
        ("code", "sample"),
        [
            (0xFF, 0),
            (0x7F, 0),
            (0xFE, 8),
            (0x7E, -8),
            (0x80, 32124),
            (0x00, -32124),
            (0xF0, 120),
            (0xEF, 132),
        ],
    )
    def test_known_decodings(self, code: int, sample: int) -> None:
        assert unpack(pcmu_to_pcm16(bytes([code]))) == [sample]

    def test_decode_is_monotonic_and_symmetric(self) -> None:
        positive = unpack(pcmu_to_pcm16(bytes(range(0xFF, 0x7F, -1))))
        negative = unpack(pcmu_to_pcm16(bytes(range(0x7F, -1, -1))))
        assert positive == sorted(positive)
        assert negative == [-s for s in positive]

    def test_every_code_survives_decode_then_encode(self) -> None:
        codes = bytes(c for c in range(256) if c != 0x7F)  # negative zero re-encodes as 0xFF
        assert pcm16_to_pcmu(pcmu_to_pcm16(codes)) == codes
        assert pcm16_to_pcmu(pcmu_to_pcm16(b"\x7f")) == b"\xff"

    def test_round_trip_error_is_at_most_half_a_step(self) -> None:
        decoded = unpack(pcmu_to_pcm16(pcm16_to_pcmu(ALL_SAMPLES)))
        for sample, back in zip(range(-32768, 32768), decoded, strict=True):
            magnitude = abs(sample)
            if magnitude > 32635:
                assert abs(back) == 32124  # clipped to the largest code
                continue
            # Segment e has steps of 8 << e; the decoder returns the middle of the step.
            segment = max(0, (magnitude + 0x84).bit_length() - 8)
            assert abs(back - sample) <= 4 << segment, sample
            assert back == 0 or (back > 0) == (sample > 0)

    def test_odd_trailing_byte_is_ignored(self) -> None:
        assert pcm16_to_pcmu(pcm(0, 4) + b"\x01") == b"\xff\xfe"
        assert pcm16_to_pcmu(b"") == b""
        assert pcmu_to_pcm16(b"") == b""

    def test_matches_audioop_where_it_is_symmetric(self) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            audioop: Any = pytest.importorskip("audioop")
        encoded = pcm16_to_pcmu(ALL_SAMPLES)
        reference = audioop.lin2ulaw(ALL_SAMPLES, 2)
        # audioop codes sample >> 2 (floor), so it differs for negative samples that
        # are not multiples of 4; elsewhere both must agree exactly.
        for index, sample in enumerate(range(-32768, 32768)):
            if sample >= 0 or sample % 4 == 0:
                assert encoded[index] == reference[index], sample
        assert pcmu_to_pcm16(bytes(range(256))) == audioop.ulaw2lin(bytes(range(256)), 2)


class TestToneAndSilence:
    @pytest.mark.parametrize(("fmt", "size"), [(PCM16_24K, 9600), (PCM16_16K, 6400), (PCMU, 1600)])
    def test_lengths(self, fmt: Format, size: int) -> None:
        assert len(tone(200, fmt)) == size
        assert len(silence(200, fmt)) == size
        assert duration_ms(tone(200, fmt), fmt) == 200.0

    def test_zero_length(self) -> None:
        assert tone(0, PCM16_24K) == b""
        assert silence(0, PCMU) == b""

    def test_level(self) -> None:
        # A sine of amplitude A has RMS A / sqrt(2).
        assert rms(tone(200, PCM16_24K), PCM16_24K) == pytest.approx(0.2 / math.sqrt(2), rel=0.01)
        assert rms(tone(200, PCMU), PCMU) == pytest.approx(0.2 / math.sqrt(2), rel=0.03)
        assert rms(tone(200, PCM16_24K, amplitude=1.0), PCM16_24K) == pytest.approx(
            1 / math.sqrt(2), rel=0.01
        )

    def test_frequency(self) -> None:
        # 440 Hz over one second: 880 sign changes, give or take the edges.
        samples = unpack(tone(1000, PCM16_16K))
        crossings = sum(1 for a, b in itertools.pairwise(samples) if (a < 0) != (b < 0))
        assert abs(crossings - 880) <= 2

    def test_slices_of_one_tone_are_continuous(self) -> None:
        whole = tone(100, PCM16_24K)
        size = frame_bytes(PCM16_24K)
        frames = [whole[i : i + size] for i in range(0, len(whole), size)]
        assert len(frames) == 5
        assert b"".join(frames) == whole

    def test_silence_is_silent(self) -> None:
        assert rms(silence(100, PCM16_24K), PCM16_24K) == 0.0
        assert set(silence(20, PCMU)) == {0xFF}
        assert set(pcmu_to_pcm16(silence(20, PCMU))) == {0}

    def test_bad_arguments(self) -> None:
        with pytest.raises(ValueError, match="amplitude"):
            tone(10, PCM16_24K, amplitude=1.5)
        with pytest.raises(ValueError, match="negative"):
            silence(-1, PCM16_24K)


class TestFrames:
    @pytest.mark.parametrize(
        ("fmt", "ms", "size"),
        [(PCM16_24K, 20, 960), (PCM16_16K, 20, 640), (PCMU, 20, 160), (PCM16_24K, 10, 480)],
    )
    def test_frame_bytes(self, fmt: Format, ms: int, size: int) -> None:
        assert frame_bytes(fmt, ms) == size
        assert duration_ms(bytes(size), fmt) == ms

    def test_default_rates(self) -> None:
        assert frame_bytes(Format(encoding="pcm16")) == 960  # 24000 Hz when absent (§8.2)
        assert frame_bytes(Format(encoding="pcmu")) == 160

    def test_rms_edges(self) -> None:
        assert rms(b"", PCM16_24K) == 0.0
        assert rms(b"", PCMU) == 0.0
        assert rms(pcm(-32768, -32768), PCM16_24K) == 1.0
        assert rms(pcm(16384), PCM16_24K) == 0.5

    @pytest.mark.parametrize(
        "call",
        [
            lambda: tone(20, OPUS),
            lambda: silence(20, OPUS),
            lambda: frame_bytes(OPUS),
            lambda: rms(b"x", OPUS),
            lambda: EnergyVad().feed(b"x", OPUS),
        ],
    )
    def test_opus_is_refused(self, call: Callable[[], object]) -> None:
        with pytest.raises(ValueError, match="opus"):
            call()


def feed_in(vad: EnergyVad, payload: bytes, fmt: Format, chunk: int) -> list[VadEvent]:
    events: list[VadEvent] = []
    for i in range(0, len(payload), chunk):
        events += vad.feed(payload[i : i + chunk], fmt)
    return events


class TestEnergyVad:
    def test_speech_start_and_end(self) -> None:
        audio = tone(500, PCM16_24K) + silence(400, PCM16_24K)
        events = feed_in(EnergyVad(), audio, PCM16_24K, frame_bytes(PCM16_24K))
        assert events == [
            VadEvent("speech-start", 0.0, 0.0),
            VadEvent("speech-end", 500.0, 500.0),
        ]

    @pytest.mark.parametrize("chunk", [1, 7 * 48, 4801, 1 << 20])
    def test_chunking_does_not_matter(self, chunk: int) -> None:
        audio = silence(100, PCM16_24K) + tone(300, PCM16_24K) + silence(400, PCM16_24K)
        events = feed_in(EnergyVad(), audio, PCM16_24K, chunk * 2)
        assert events == [
            VadEvent("speech-start", 100.0, 0.0),
            VadEvent("speech-end", 400.0, 300.0),
        ]

    def test_end_needs_the_full_hangover(self) -> None:
        vad = EnergyVad()
        assert vad.feed(tone(100, PCM16_24K), PCM16_24K) == [VadEvent("speech-start", 0.0, 0.0)]
        assert vad.feed(silence(280, PCM16_24K), PCM16_24K) == []
        assert vad.speaking
        assert vad.feed(silence(20, PCM16_24K), PCM16_24K) == [VadEvent("speech-end", 100.0, 100.0)]
        assert not vad.speaking
        assert vad.time_ms == 400.0

    def test_a_short_pause_does_not_split_speech(self) -> None:
        audio = (
            tone(200, PCM16_24K)
            + silence(200, PCM16_24K)
            + tone(200, PCM16_24K)
            + silence(300, PCM16_24K)
        )
        events = EnergyVad().feed(audio, PCM16_24K)
        assert events == [
            VadEvent("speech-start", 0.0, 0.0),
            VadEvent("speech-end", 600.0, 600.0),
        ]

    def test_two_utterances(self) -> None:
        utterance = tone(100, PCM16_24K) + silence(300, PCM16_24K)
        events = EnergyVad().feed(utterance + utterance, PCM16_24K)
        assert [(e.kind, e.at_ms) for e in events] == [
            ("speech-start", 0.0),
            ("speech-end", 100.0),
            ("speech-start", 400.0),
            ("speech-end", 500.0),
        ]

    def test_quiet_audio_is_not_speech(self) -> None:
        vad = EnergyVad()
        assert vad.feed(tone(500, PCM16_24K, amplitude=0.02), PCM16_24K) == []
        louder = EnergyVad(threshold=0.01)
        assert [e.kind for e in louder.feed(tone(100, PCM16_24K, amplitude=0.02), PCM16_24K)] == [
            "speech-start"
        ]

    def test_pcmu(self) -> None:
        audio = tone(240, PCMU) + silence(300, PCMU)
        assert EnergyVad().feed(audio, PCMU) == [
            VadEvent("speech-start", 0.0, 0.0),
            VadEvent("speech-end", 240.0, 240.0),
        ]

    def test_custom_hangover_and_reset(self) -> None:
        vad = EnergyVad(hangover_ms=100)
        audio = tone(60, PCM16_16K) + silence(100, PCM16_16K)
        assert [e.kind for e in vad.feed(audio, PCM16_16K)] == ["speech-start", "speech-end"]
        vad.feed(tone(10, PCM16_16K), PCM16_16K)  # half a frame, pending
        vad.reset()
        assert vad.time_ms == 0.0
        assert vad.feed(silence(20, PCM16_16K), PCM16_16K) == []


class TestVadQuietShortcut:
    """The VAD settles quiet frames from their bytes alone; that must never change a
    decision the RMS would make."""

    @given(
        samples=st.lists(st.integers(-1100, 1100), min_size=160, max_size=160),
        threshold=st.sampled_from([0.0, 0.005, 0.0078125, 0.01, 0.015625, 0.02, 0.03]),
    )
    @settings(max_examples=300, deadline=None)
    def test_pcm16_decision_is_the_rms_decision(self, samples: list[int], threshold: float) -> None:
        fmt = Format(encoding="pcm16", sample_rate=8000)  # 20 ms = 160 samples
        frame = pcm(*samples)
        events = EnergyVad(threshold=threshold).feed(frame, fmt)
        assert bool(events) == (rms(frame, fmt) >= threshold)

    @given(
        codes=st.binary(min_size=160, max_size=160),
        threshold=st.sampled_from([0.0, 0.001, 0.01, 0.02, 0.05]),
    )
    @settings(max_examples=300, deadline=None)
    def test_pcmu_decision_is_the_rms_decision(self, codes: bytes, threshold: float) -> None:
        events = EnergyVad(threshold=threshold).feed(codes, PCMU)
        assert bool(events) == (rms(codes, PCMU) >= threshold)

    def test_a_frame_at_the_edge_of_the_quiet_bytes(self) -> None:
        fmt = Format(encoding="pcm16", sample_rate=8000)
        # 0.02 of full scale is 655.36: high bytes -2..1 (|sample| <= 512) are quiet for
        # sure; a steady 656 is loud and must reach the RMS.
        assert EnergyVad().feed(pcm(*[-512] * 160), fmt) == []
        assert EnergyVad().feed(pcm(*[656] * 160), fmt) == [VadEvent("speech-start", 0.0, 0.0)]
        assert EnergyVad().feed(pcm(*[655] * 160), fmt) == []


class TestPeriodicTone:
    def test_a_long_tone_is_the_sine_at_every_sample(self) -> None:
        # The tone repeats one computed period; each sample must still be the sine.
        samples = unpack(tone(1000, PCM16_16K))
        step = 2 * math.pi * 440 / 16000
        assert all(abs(s - 0.2 * 32767 * math.sin(step * n)) <= 1.0 for n, s in enumerate(samples))

    def test_an_odd_frequency_is_computed_whole(self) -> None:
        samples = unpack(tone(50, PCM16_16K, freq=440.5))
        step = 2 * math.pi * 440.5 / 16000
        assert all(
            abs(s - 0.2 * 32767 * math.sin(step * n)) <= 0.5 + 1e-6 for n, s in enumerate(samples)
        )
