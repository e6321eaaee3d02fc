"""The server driver's own frame writing (``vrt.server.websocket``), without sockets:
the header of each frame it writes (RFC 6455 §5.2) and which close codes it echoes
back to a peer (RFC 6455 §7.4). The socket tests (tests/server/test_hardening.py) see
these only through whole conversations; here each boundary is pinned."""

from __future__ import annotations

import pytest

from vrt.server.websocket import _header, _sendable_close_code

TEXT = 0x81  # FIN + text


@pytest.mark.parametrize(
    ("size", "expected"),
    [
        (0, bytes([TEXT, 0])),
        (125, bytes([TEXT, 125])),
        (126, bytes([TEXT, 126, 0, 126])),
        (65_535, bytes([TEXT, 126, 0xFF, 0xFF])),
        (65_536, bytes([TEXT, 127, 0, 0, 0, 0, 0, 1, 0, 0])),
        (1 << 32, bytes([TEXT, 127, 0, 0, 0, 1, 0, 0, 0, 0])),
    ],
)
def test_the_payload_length_takes_the_shortest_form(size: int, expected: bytes) -> None:
    """RFC 6455 §5.2: 7 bits up to 125, 16 bits up to 65,535, 64 bits beyond; a server's
    frames are not masked (the mask bit is clear)."""
    assert _header(TEXT, size) == expected


@pytest.mark.parametrize("code", [1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011])
def test_the_codes_a_peer_may_send_are_echoed(code: int) -> None:
    assert _sendable_close_code(code)


@pytest.mark.parametrize("code", [3000, 3999, 4000, 4999])
def test_the_registered_and_private_ranges_are_echoed(code: int) -> None:
    """RFC 6455 §7.4.2: 3000-3999 (registered) and 4000-4999 (private use)."""
    assert _sendable_close_code(code)


@pytest.mark.parametrize(
    "code", [0, 999, 1004, 1005, 1006, 1012, 1013, 1014, 1015, 1016, 2999, 5000, 65_535]
)
def test_reserved_and_unassigned_codes_are_not_echoed(code: int) -> None:
    """RFC 6455 §7.4.1: 1004-1006 and 1015 are for reports, never on the wire; codes
    below 1000 and up to 2999 not listed are not a peer's to send; 5000 and above are
    outside the ranges."""
    assert not _sendable_close_code(code)
