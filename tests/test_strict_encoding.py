"""Strict encoding (issue: messages that cannot be built wrong): with ``check_encoding``
on, as in every test, the core refuses to write a message the spec forbids."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from vrt.protocol import LocalProtocolError, check_encoding, encode
from vrt.protocol.messages import Ack, Interrupt, Playback, TurnState, UserText


@pytest.fixture
def strict() -> Iterator[None]:
    check_encoding(True)
    yield
    check_encoding(True)  # tests/conftest.py runs every test with it on


@pytest.mark.parametrize(
    ("message", "seq", "why"),
    [
        (Interrupt(epoch=-5, reason="user"), 1, "minimum"),  # §6.1: an epoch is unsigned
        (Playback(item_id="i", played_ms=-1), 1, "minimum"),  # playedMs is non-negative
        (UserText(text="hi"), 0, "seq"),  # §4.1: sequenced messages have seq 1 or more
        (Ack(up_to=1), 7, "seq"),  # §4.1: transient messages have seq 0
        (TurnState(turn_id="", epoch=1, state="idle"), 1, "turnId"),  # ids are non-empty
    ],
)
def test_a_forbidden_message_is_refused(strict: None, message: object, seq: int, why: str) -> None:
    with pytest.raises(LocalProtocolError, match=why):
        encode(message, seq)  # type: ignore[arg-type]


def test_without_checking_the_encoder_writes_what_it_is_given() -> None:
    """Production leaves the check off: it costs one decode per message."""
    check_encoding(False)
    try:
        assert encode(Interrupt(epoch=-5, reason="user"), 1).startswith(b'{"v":1,"seq":1,')
    finally:
        check_encoding(True)


def test_a_valid_message_passes(strict: None) -> None:
    assert encode(UserText(text="hi"), 1) == b'{"v":1,"seq":1,"type":"text","text":"hi"}'
