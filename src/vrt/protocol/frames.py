"""Binary audio frames (§8.1): ``kind`` (1 byte), ``seq`` (4 bytes, big-endian), payload."""

from __future__ import annotations

import struct
from enum import IntEnum
from typing import Final, NamedTuple

from .codec import Invalid
from .errors import ErrorCode
from .schemas import Sender

__all__ = ["HEADER_SIZE", "AudioFrame", "FrameKind", "build_frame", "next_audio_seq", "parse_frame"]

HEADER_SIZE: Final = 5
_HEADER: Final = struct.Struct(">BI")
_U32: Final = 1 << 32


class FrameKind(IntEnum):
    INPUT = 1  #: input audio, client to server
    OUTPUT = 2  #: output audio, server to client


#: The kind each receiver accepts: a server takes input audio, a client output audio.
_ACCEPTED: Final = {"server": FrameKind.INPUT, "client": FrameKind.OUTPUT}


class AudioFrame(NamedTuple):
    kind: FrameKind
    seq: int
    payload: bytes


def parse_frame(data: bytes, receiver: Sender) -> AudioFrame | Invalid:
    """Parse a binary frame as ``receiver`` gets it. Never raises.

    A frame shorter than the header, of an unknown kind, or of the kind the receiver
    does not accept is ``MALFORMED`` (§8.1). An empty payload is valid.
    """
    if len(data) < HEADER_SIZE:
        return Invalid(
            ErrorCode.MALFORMED,
            f"audio frame of {len(data)} bytes is shorter than its 5-byte header (§8.1)",
        )
    kind, seq = _HEADER.unpack_from(data)
    accepted = _ACCEPTED[receiver]
    if kind != accepted:
        what = "unknown" if kind not in (1, 2) else "not accepted by a " + receiver
        return Invalid(ErrorCode.MALFORMED, f"audio frame kind {kind} is {what} (§8.1)")
    return AudioFrame(accepted, seq, bytes(data[HEADER_SIZE:]))


def build_frame(kind: FrameKind, seq: int, payload: bytes) -> bytes:
    """The bytes of one audio frame; ``seq`` is taken modulo 2^32 (§8.1)."""
    return _HEADER.pack(kind, seq % _U32) + payload


def next_audio_seq(seq: int) -> int:
    """The audio seq after ``seq``: it wraps modulo 2^32 (§8.1)."""
    return (seq + 1) % _U32
