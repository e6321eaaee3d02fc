"""§11 and §9.1: the default limits of the codec, at their boundaries (gap 15).

The 1 MiB control-message limit and the 128-tool limit are part of what a peer may rely
on (docs/limits.md): exactly at the limit is accepted, one over is LIMIT_EXCEEDED.
"""

from __future__ import annotations

import orjson

from vrt.protocol.codec import DEFAULT_LIMITS, Decoded, Invalid, decode_client
from vrt.protocol.errors import ErrorCode
from vrt.protocol.messages import Hello, UserText

MIB = 1 << 20


def _text_of_size(size: int) -> bytes:
    """A ``text`` message of exactly ``size`` bytes (written by hand: ``encode`` checks
    what it writes, and refuses a frame over the limit)."""
    bare = b'{"v":1,"seq":1,"type":"text","text":""}'
    frame = bare[:-2] + b"a" * (size - len(bare)) + b'"}'
    assert len(frame) == size
    return frame


def test_default_frame_limit_is_one_mib() -> None:
    """§11: a control message of exactly 1 MiB is accepted by default."""
    assert DEFAULT_LIMITS.max_frame_bytes == MIB
    decoded = decode_client(_text_of_size(MIB))
    assert isinstance(decoded, Decoded), decoded
    assert isinstance(decoded.message, UserText)


def test_one_byte_over_one_mib_is_limit_exceeded() -> None:
    """§11, §9.1: a control message of 1 MiB + 1 byte is LIMIT_EXCEEDED."""
    decoded = decode_client(_text_of_size(MIB + 1))
    assert isinstance(decoded, Invalid)
    assert decoded.code == ErrorCode.LIMIT_EXCEEDED


def _hello_with(count: int) -> bytes:
    tools = [{"name": f"t{i}"} for i in range(count)]
    return orjson.dumps({"v": 1, "seq": 0, "type": "hello", "tools": tools})


def test_default_tool_limit_is_128() -> None:
    """§11: a hello declaring exactly 128 tools is accepted by default."""
    assert DEFAULT_LIMITS.max_tools == 128
    decoded = decode_client(_hello_with(128))
    assert isinstance(decoded, Decoded), decoded
    assert isinstance(decoded.message, Hello)
    assert len(decoded.message.tools) == 128  # type: ignore[arg-type]


def test_129_tools_is_limit_exceeded() -> None:
    """§11, §9.1: a hello declaring 129 tools is LIMIT_EXCEEDED, not INVALID_FIELD."""
    decoded = decode_client(_hello_with(129))
    assert isinstance(decoded, Invalid)
    assert decoded.code == ErrorCode.LIMIT_EXCEEDED
    assert decoded.type == "hello"
