"""§8.1: why an audio frame is refused, as the error's reason says it (survivors of
mutation testing on ``frames.py``, docs/testing.md#mutation-testing)."""

from __future__ import annotations

from vrt.protocol.codec import Invalid
from vrt.protocol.errors import ErrorCode
from vrt.protocol.frames import parse_frame


def test_a_frame_of_an_unknown_kind_is_called_unknown() -> None:
    """§8.1: kind 3 is no kind at all: MALFORMED, "unknown"."""
    frame = parse_frame(b"\x03\x00\x00\x00\x00", "server")
    assert frame == Invalid(ErrorCode.MALFORMED, "audio frame kind 3 is unknown (§8.1)")


def test_a_frame_of_the_other_direction_is_not_accepted() -> None:
    """§8.1: output audio sent to a server (and input audio to a client) is MALFORMED,
    and the reason names the receiver."""
    to_server = parse_frame(b"\x02\x00\x00\x00\x00", "server")
    assert to_server == Invalid(
        ErrorCode.MALFORMED, "audio frame kind 2 is not accepted by a server (§8.1)"
    )
    to_client = parse_frame(b"\x01\x00\x00\x00\x00", "client")
    assert to_client == Invalid(
        ErrorCode.MALFORMED, "audio frame kind 1 is not accepted by a client (§8.1)"
    )
