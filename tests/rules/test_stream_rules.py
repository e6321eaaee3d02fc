"""The outgoing stream's bounds (§4.1, §4.2, §5.4, §11): what it keeps for resends, in
messages and in bytes, and the last seq it may send. Survivors of mutation testing on
``streams.py`` (docs/testing.md#mutation-testing).
"""

from __future__ import annotations

import pytest

from vrt.protocol.errors import LocalProtocolError
from vrt.protocol.messages import AgentText
from vrt.protocol.streams import MAX_SEQ, OutgoingStream


def _text(size: int) -> AgentText:
    return AgentText(text="x" * size, turn_id=None)


def test_bounds_of_one_are_allowed_and_zero_refused() -> None:
    """§11: a stream keeps at least one message (and one byte); 0 is refused."""
    assert OutgoingStream(1).max_kept == 1
    assert OutgoingStream(max_kept_bytes=1).max_kept_bytes == 1
    with pytest.raises(ValueError, match=r"^max_kept must be at least 1$"):
        OutgoingStream(0)
    with pytest.raises(ValueError, match=r"^max_kept_bytes must be at least 1$"):
        OutgoingStream(max_kept_bytes=0)


def test_an_ack_before_any_send_drops_nothing() -> None:
    """§4.2: an ``ack`` when nothing was ever sent acknowledges nothing."""
    assert OutgoingStream().ack(5) == 0


def test_kept_bytes_counts_what_is_kept() -> None:
    """§4.2, §11: ``kept_bytes`` is the size of the unacknowledged messages: it grows
    with each send and shrinks with each ack."""
    stream = OutgoingStream()
    assert stream.kept_bytes == 0
    first = stream.send(_text(10))
    second = stream.send(_text(20))
    assert stream.kept_bytes == len(first) + len(second)
    assert stream.ack(1) == 1
    assert stream.kept_bytes == len(second)
    assert stream.ack(2) == 1
    assert stream.kept_bytes == 0


def test_the_byte_bound_drops_the_oldest_but_keeps_the_newest() -> None:
    """§4.1, §11: past ``max_kept_bytes`` the oldest messages go (a resume needing them
    then fails, §5.4); exactly at the bound nothing goes; the newest message is always
    kept, even alone over the bound."""
    size = len(OutgoingStream().send(_text(50)))  # every message below has this size
    stream = OutgoingStream(max_kept_bytes=2 * size)
    stream.send(_text(50))
    stream.send(_text(50))
    assert (stream.unacked, stream.kept_bytes, stream.lost_through) == (2, 2 * size, 0)
    stream.send(_text(50))
    assert (stream.unacked, stream.kept_bytes, stream.lost_through) == (2, 2 * size, 1)
    assert stream.resend_after(0) is None
    assert stream.resend_after(1) is not None
    big = stream.send(_text(500))
    assert stream.unacked == 1
    assert stream.kept_bytes == len(big)
    assert stream.lost_through == 3
    assert stream.resend_after(3) == [big]


def test_the_message_bound_keeps_the_byte_count() -> None:
    """§11: a message dropped for ``max_kept`` leaves ``kept_bytes``."""
    stream = OutgoingStream(2)
    sizes = [len(stream.send(_text(n))) for n in (10, 20, 30)]
    assert stream.unacked == 2
    assert stream.kept_bytes == sizes[1] + sizes[2]


def test_seq_4294967295_is_the_last() -> None:
    """§4.1: seq 4294967295 may be sent; nothing may follow it."""
    stream = OutgoingStream(last_seq=MAX_SEQ - 1)
    assert not stream.exhausted
    stream.send(_text(1))
    assert stream.last_seq == MAX_SEQ
    assert stream.exhausted
    with pytest.raises(LocalProtocolError, match=r"^the stream has sent seq 4294967295"):
        stream.send(_text(1))
