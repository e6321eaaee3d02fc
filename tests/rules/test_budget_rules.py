"""§11: what one connection may make the server read. ``ReadBudget`` holds a token
bucket for frames and one for bytes; these tests pin its arithmetic exactly (values
exact in binary), so that a changed rate, cap, sign or comparison fails a test."""

from __future__ import annotations

import pytest

from vrt.protocol.server.budget import ReadBudget


def budget(now: float = 0.0) -> ReadBudget:
    """10 frames/s, a burst of 4 frames; 100 bytes/s, a burst of 50 bytes."""
    return ReadBudget(frame_rate=10, frame_burst=4, byte_rate=100, byte_burst=50, now=now)


@pytest.mark.parametrize("zero", range(4))
def test_every_rate_and_burst_must_be_positive(zero: int) -> None:
    values = [1.0, 1.0, 1.0, 1.0]
    message = "^a read budget needs positive rates and bursts$"
    for bad in (0.0, -1.0):
        values[zero] = bad
        frame_rate, frame_burst, byte_rate, byte_burst = values
        with pytest.raises(ValueError, match=message):
            ReadBudget(frame_rate, frame_burst, byte_rate, byte_burst, now=0.0)
    ReadBudget(1.0, 1.0, 1.0, 1.0, now=0.0)  # the smallest positive values are fine


def test_a_connection_starts_with_full_buckets() -> None:
    b = budget()
    for _ in range(4):
        assert b.spend(10, 0.0) == 0.0  # four frames of 10 bytes: within both bursts
    assert b.readable_at() == 0.0


def test_a_frame_beyond_the_frame_burst_is_debt_as_a_share_of_the_burst() -> None:
    b = budget()
    for _ in range(4):
        b.spend(0, 0.0)
    assert b.spend(0, 0.0) == -0.25  # one frame short of a burst of 4
    assert b.spend(0, 0.0) == -0.5
    # Back at zero after 2 frames at 10/s: 0.2 s after the last spend.
    assert b.readable_at() == pytest.approx(0.2)


def test_bytes_beyond_the_byte_burst_are_debt_as_a_share_of_the_burst() -> None:
    b = budget()
    assert b.spend(50, 0.0) == 0.0  # exactly the burst: not in debt
    assert b.spend(25, 0.0) == -0.5  # 25 bytes short of 50
    assert b.readable_at() == pytest.approx(0.25)  # 25 bytes at 100/s


def test_the_deeper_debt_of_the_two_buckets_counts() -> None:
    b = budget()
    for _ in range(4):
        b.spend(0, 0.0)
    # frames: -1 of 4 (-0.25); bytes: 50 - 75 = -25 of 50 (-0.5)
    assert b.spend(75, 0.0) == -0.5
    # frames need 0.1 s, bytes 0.25 s: the later one
    assert b.readable_at() == pytest.approx(0.25)


def test_a_whole_burst_beyond_is_below_minus_one() -> None:
    """The driver closes a connection whose level is below -1 (flooding, §11)."""
    b = budget()
    levels = [b.spend(0, 0.0) for _ in range(9)]
    assert levels[-2] == -1.0  # 8 frames: exactly one burst beyond, not yet flooding
    assert levels[-1] < -1.0


def test_buckets_refill_at_their_rate_up_to_their_burst() -> None:
    b = budget()
    for _ in range(4):
        b.spend(12, 0.0)  # frames 0, bytes 2
    # 0.1 s later: 1 frame and 10 bytes back; the frame is taken again
    assert b.spend(12, 0.1) == 0.0
    assert b.spend(0, 0.1) == -0.25  # nothing was left
    # a long pause refills to the burst, never beyond it
    for _ in range(4):
        assert b.spend(0, 100.0) == 0.0
    assert b.spend(0, 100.0) == -0.25
    b = budget()
    assert b.spend(50, 100.0) == 0.0
    assert b.spend(1, 100.0) == -0.02  # 50 bytes at most, even after 100 s


def test_readable_at_is_the_last_spend_when_not_in_debt() -> None:
    b = budget()
    b.spend(1, 5.0)
    assert b.readable_at() == 5.0
    b.spend(100, 5.0)  # 51 bytes short: 0.51 s more
    assert b.readable_at() == pytest.approx(5.51)


def test_a_partly_refilled_budget_is_within_it_and_readable_at_its_last_spend() -> None:
    """Within the budget, spend() is exactly 0 and readable_at() the last spend, however
    little is left: half a frame here, then half a byte."""
    b = budget()
    for _ in range(4):
        b.spend(0, 0.0)
    assert b.spend(0, 0.15) == 0.0  # 1.5 frames back, one taken: half a frame left
    assert b.readable_at() == 0.15
    b = ReadBudget(frame_rate=10, frame_burst=4, byte_rate=100, byte_burst=50.5, now=0.0)
    assert b.spend(50, 0.0) == 0.0  # half a byte left
    assert b.readable_at() == 0.0
