"""Audio formats (§8.2): the choice of a session's format and one duration for both roles."""

from __future__ import annotations

import pytest

from vrt.protocol.formats import choose_format, duration_ms, opus_duration_ms
from vrt.protocol.messages import PCM16_24K, Format

OPUS = Format(encoding="opus")
PCMU = Format(encoding="pcmu", sample_rate=8000)


class TestSection8_2Duration:
    def test_pcm16_counts_whole_samples(self) -> None:
        assert duration_ms(bytes(480), PCM16_24K) == 10.0
        assert duration_ms(bytes(481), PCM16_24K) == 10.0  # a half sample plays nothing
        assert duration_ms(bytes(320), Format(encoding="pcm16", sample_rate=16000)) == 10.0

    def test_pcmu_is_one_byte_per_sample_at_8_khz(self) -> None:
        assert duration_ms(bytes(160), PCMU) == 20.0

    @pytest.mark.parametrize(
        ("packet", "ms"),
        [
            (b"", 0.0),
            (bytes([0 << 3]), 10.0),  # SILK NB 10 ms, one frame
            (bytes([3 << 3]), 60.0),  # SILK NB 60 ms
            (bytes([13 << 3]), 20.0),  # hybrid SWB 20 ms
            (bytes([16 << 3]), 2.5),  # CELT NB 2.5 ms
            (bytes([31 << 3]) + b"x", 20.0),  # CELT FB 20 ms, the usual WebRTC packet
            (bytes([31 << 3 | 1]), 40.0),  # code 1: two frames of equal size
            (bytes([31 << 3 | 2, 1]), 40.0),  # code 2: two frames of different sizes
            (bytes([31 << 3 | 3, 3]), 60.0),  # code 3: the count in the second byte
            (bytes([31 << 3 | 3, 0x80 | 2]), 40.0),  # VBR and padding flags are not the count
            (bytes([31 << 3 | 3]), 0.0),  # code 3 without its count: truncated
        ],
    )
    def test_opus_duration_comes_from_the_toc_byte(self, packet: bytes, ms: float) -> None:
        """RFC 6716 §3.1: the TOC byte's configuration gives the frame size, its code
        the number of frames."""
        assert opus_duration_ms(packet) == ms
        assert duration_ms(packet, OPUS) == ms


class TestSection8_2Choice:
    def test_a_preference_the_agent_takes_unchanged_is_chosen(self) -> None:
        assert choose_format(PCMU, (PCM16_24K, PCMU)) == PCMU

    def test_otherwise_pcm16_at_24_khz(self) -> None:
        assert choose_format(OPUS, (PCM16_24K, PCMU)) == PCM16_24K
        assert choose_format(None, (PCMU,)) == PCM16_24K

    def test_a_default_rate_matches_its_explicit_value(self) -> None:
        chosen = choose_format(Format(encoding="pcm16"), (PCM16_24K,))
        assert chosen == Format(encoding="pcm16", sample_rate=24000)
