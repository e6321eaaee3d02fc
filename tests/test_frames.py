"""Binary audio frames (§8.1): kind (1 byte), seq (4 bytes, big-endian), payload."""

from __future__ import annotations

from typing import Final

import pytest

from vrt.protocol import ErrorCode, Invalid
from vrt.protocol.frames import (
    HEADER_SIZE,
    AudioFrame,
    FrameKind,
    build_frame,
    next_audio_seq,
    parse_frame,
)
from vrt.protocol.schemas import Sender

MAX_U32: Final = 0xFFFFFFFF
#: Who receives each kind: "1 input audio (client to server), 2 output audio (server to client)".
RECEIVER: Final[dict[FrameKind, Sender]] = {FrameKind.INPUT: "server", FrameKind.OUTPUT: "client"}
OTHER: Final[dict[Sender, Sender]] = {"server": "client", "client": "server"}


def malformed(result: AudioFrame | Invalid) -> Invalid:
    assert isinstance(result, Invalid), f"expected MALFORMED, got {result!r}"
    assert result.code == ErrorCode.MALFORMED
    assert "§8.1" in result.reason
    return result


def frame_of(result: AudioFrame | Invalid) -> AudioFrame:
    assert isinstance(result, AudioFrame), f"expected a frame, got {result!r}"
    return result


class TestSection8_1Layout:
    """ "The vectors in examples/binary/ define the layout byte for byte"; so do these."""

    def test_header_is_five_bytes(self) -> None:
        assert HEADER_SIZE == 5

    def test_kinds(self) -> None:
        assert int(FrameKind.INPUT) == 1
        assert int(FrameKind.OUTPUT) == 2

    @pytest.mark.parametrize(
        ("kind", "seq", "payload", "expected"),
        [
            (FrameKind.INPUT, 0, b"", "0100000000"),
            (FrameKind.OUTPUT, 0, b"", "0200000000"),
            (FrameKind.INPUT, 1, b"\x01\x02", "01000000010102"),
            (FrameKind.INPUT, 255, b"", "01000000ff"),
            (FrameKind.INPUT, 256, b"", "0100000100"),
            (FrameKind.OUTPUT, 0x01020304, b"\xaa\xbb\xcc", "0201020304aabbcc"),
            (FrameKind.OUTPUT, 0x80000000, b"\x00", "028000000000"),
            (FrameKind.INPUT, MAX_U32, b"\xff", "01ffffffffff"),
        ],
    )
    def test_big_endian_layout_byte_for_byte(
        self, kind: FrameKind, seq: int, payload: bytes, expected: str
    ) -> None:
        data = build_frame(kind, seq, payload)
        assert data.hex() == expected
        parsed = frame_of(parse_frame(bytes.fromhex(expected), RECEIVER[kind]))
        assert parsed == AudioFrame(kind, seq, payload)

    def test_payload_is_carried_unchanged(self) -> None:
        payload = bytes(range(256)) * 8
        data = build_frame(FrameKind.OUTPUT, 7, payload)
        assert len(data) == HEADER_SIZE + len(payload)
        assert data[HEADER_SIZE:] == payload
        parsed = frame_of(parse_frame(data, "client"))
        assert parsed.payload == payload
        assert type(parsed.payload) is bytes


class TestSection8_1Receivers:
    """ "A frame of a kind the receiver does not accept (a server receiving kind 2) is
    malformed too.\""""

    @pytest.mark.parametrize("kind", list(FrameKind))
    def test_each_kind_is_accepted_by_its_receiver(self, kind: FrameKind) -> None:
        parsed = frame_of(parse_frame(build_frame(kind, 3, b"pcm"), RECEIVER[kind]))
        assert parsed.kind is kind
        assert parsed.seq == 3
        assert parsed.payload == b"pcm"

    @pytest.mark.parametrize("kind", list(FrameKind))
    def test_each_kind_is_malformed_for_the_other_receiver(self, kind: FrameKind) -> None:
        receiver = OTHER[RECEIVER[kind]]
        result = malformed(parse_frame(build_frame(kind, 3, b"pcm"), receiver))
        assert f"kind {int(kind)}" in result.reason
        assert receiver in result.reason

    @pytest.mark.parametrize("receiver", ["server", "client"])
    @pytest.mark.parametrize("kind", [0, 3, 4, 0x7F, 0x80, 0xFE, 0xFF])
    def test_unknown_kinds_are_malformed(self, receiver: Sender, kind: int) -> None:
        data = bytes([kind]) + b"\x00\x00\x00\x01" + b"payload"
        result = malformed(parse_frame(data, receiver))
        assert f"kind {kind}" in result.reason
        assert "unknown" in result.reason

    @pytest.mark.parametrize("receiver", ["server", "client"])
    @pytest.mark.parametrize("length", [0, 1, 2, 3, 4])
    def test_frames_shorter_than_the_header_are_malformed(
        self, receiver: Sender, length: int
    ) -> None:
        kind = 1 if receiver == "server" else 2
        data = bytes([kind, 0, 0, 0, 0])[:length]
        result = malformed(parse_frame(data, receiver))
        assert f"{length} bytes" in result.reason

    @pytest.mark.parametrize("kind", list(FrameKind))
    def test_empty_payload_is_valid(self, kind: FrameKind) -> None:
        """ "A frame with an empty payload is valid and MAY be ignored.\""""
        parsed = frame_of(parse_frame(build_frame(kind, 9, b""), RECEIVER[kind]))
        assert parsed == AudioFrame(kind, 9, b"")

    def test_parse_of_a_slice_of_a_larger_buffer(self) -> None:
        data = b"xx" + build_frame(FrameKind.INPUT, 5, b"ab")
        parsed = frame_of(parse_frame(data[2:], "server"))
        assert parsed == AudioFrame(FrameKind.INPUT, 5, b"ab")


class TestSection8_1Seq:
    """ "Audio seq counts frames per direction, starting at 0 and increasing by one per
    frame, wrapping modulo 2^32.\""""

    @pytest.mark.parametrize(
        ("seq", "expected"),
        [(0, 1), (1, 2), (0xFFFFFFFE, MAX_U32), (MAX_U32, 0)],
    )
    def test_next_audio_seq_wraps(self, seq: int, expected: int) -> None:
        assert next_audio_seq(seq) == expected

    @pytest.mark.parametrize(
        ("seq", "wire"),
        [
            (1 << 32, 0),
            ((1 << 32) + 5, 5),
            (-1, MAX_U32),
            ((1 << 33) + 0x01020304, 0x01020304),
        ],
    )
    def test_build_frame_takes_seq_modulo_2_32(self, seq: int, wire: int) -> None:
        data = build_frame(FrameKind.INPUT, seq, b"")
        assert data[1:5] == wire.to_bytes(4, "big")
        assert frame_of(parse_frame(data, "server")).seq == wire

    def test_a_counted_stream_wraps_to_zero(self) -> None:
        seq = 0xFFFFFFFD
        seen = []
        for _ in range(5):
            parsed = frame_of(parse_frame(build_frame(FrameKind.OUTPUT, seq, b"x"), "client"))
            seen.append(parsed.seq)
            seq = next_audio_seq(seq)
        assert seen == [0xFFFFFFFD, 0xFFFFFFFE, MAX_U32, 0, 1]
