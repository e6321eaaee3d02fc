"""The two halves of a session's resumable stream (§4.1, §4.2, §4.3, §5.4).

Time is an argument: nothing here sleeps.
"""

from __future__ import annotations

import json
from typing import Final

import pytest

from vrt.protocol import LocalProtocolError, UserText, encode
from vrt.protocol.streams import (
    ACK_AFTER_MESSAGES,
    ACK_DELAY,
    DEFAULT_MAX_KEPT,
    MAX_SEQ,
    IncomingStream,
    OutgoingStream,
)

T0: Final = 1000.0


def seq_of(data: bytes) -> int:
    seq = json.loads(data)["seq"]
    assert isinstance(seq, int)
    return seq


def sent(stream: OutgoingStream, count: int) -> list[bytes]:
    """Send ``count`` numbered text messages; return their bytes."""
    return [stream.send(UserText(text=f"m{stream.last_seq + 1}")) for _ in range(count)]


class TestSection4_1Numbering:
    """ "The first sequenced message a side sends in a session has seq 1; each later one
    has the previous value plus one.\""""

    def test_constants(self) -> None:
        assert MAX_SEQ == 2**32 - 1
        assert ACK_DELAY == 0.25
        assert ACK_AFTER_MESSAGES == 32
        assert DEFAULT_MAX_KEPT == 1024
        assert OutgoingStream().max_kept == DEFAULT_MAX_KEPT

    def test_seq_starts_at_one_and_counts_up(self) -> None:
        stream = OutgoingStream()
        assert stream.last_seq == 0
        datas = sent(stream, 3)
        assert [seq_of(d) for d in datas] == [1, 2, 3]
        assert stream.last_seq == 3

    def test_send_returns_the_encoded_message(self) -> None:
        stream = OutgoingStream()
        message = UserText(text="hello")
        assert stream.send(message) == encode(message, 1)

    def test_counter_continues_from_a_restored_last_seq(self) -> None:
        stream = OutgoingStream(last_seq=41)
        assert seq_of(stream.send(UserText(text="x"))) == 42

    def test_max_kept_must_be_positive(self) -> None:
        with pytest.raises(ValueError, match="max_kept"):
            OutgoingStream(max_kept=0)


class TestSection4_1Exhaustion:
    """ "seq MUST NOT wrap. A side that has sent sequenced message 4294967295 MUST NOT
    send another in that session.\""""

    def test_last_seq_may_be_sent(self) -> None:
        stream = OutgoingStream(last_seq=MAX_SEQ - 1)
        assert not stream.exhausted
        assert seq_of(stream.send(UserText(text="last"))) == MAX_SEQ
        assert stream.exhausted

    def test_sending_after_the_last_seq_raises(self) -> None:
        stream = OutgoingStream(last_seq=MAX_SEQ - 2)
        sent(stream, 2)
        with pytest.raises(LocalProtocolError, match=r"4294967295.*§4\.1"):
            stream.send(UserText(text="one too many"))
        assert stream.last_seq == MAX_SEQ
        assert stream.unacked == 2
        assert [seq_of(d) for d in stream.resend_after(MAX_SEQ - 2) or []] == [MAX_SEQ - 1, MAX_SEQ]

    def test_exhausted_stream_raises_every_time(self) -> None:
        stream = OutgoingStream(last_seq=MAX_SEQ)
        assert stream.exhausted
        for _ in range(2):
            with pytest.raises(LocalProtocolError):
                stream.send(UserText(text="x"))


class TestSection4_2Keeping:
    """ "A sender MUST keep every sequenced message it has sent until the peer
    acknowledges it"; "On ack, the sender MAY discard every kept message with
    seq <= upTo. An ack with a value at or beyond the sender's last seq acknowledges
    everything sent.\""""

    def test_kept_until_acknowledged(self) -> None:
        stream = OutgoingStream()
        datas = sent(stream, 4)
        assert stream.unacked == 4
        assert stream.kept() == list(zip([1, 2, 3, 4], datas, strict=True))
        assert stream.ack(2) == 2
        assert stream.kept() == [(3, datas[2]), (4, datas[3])]

    def test_ack_is_idempotent_and_monotonic(self) -> None:
        stream = OutgoingStream()
        sent(stream, 3)
        assert stream.ack(0) == 0
        assert stream.ack(2) == 2
        assert stream.ack(2) == 0
        assert stream.ack(1) == 0
        assert stream.unacked == 1

    @pytest.mark.parametrize("up_to", [5, 6, MAX_SEQ])
    def test_ack_at_or_beyond_the_last_seq_acknowledges_all(self, up_to: int) -> None:
        stream = OutgoingStream()
        sent(stream, 5)
        assert stream.ack(up_to) == 5
        assert stream.unacked == 0
        assert stream.kept() == []

    def test_new_messages_after_an_ack_are_kept(self) -> None:
        stream = OutgoingStream()
        sent(stream, 3)
        stream.ack(3)
        data = stream.send(UserText(text="four"))
        assert stream.kept() == [(4, data)]


class TestSection5_4Resend:
    """ "resends, in order, every ... sequenced message with seq > resumeFrom. If it no
    longer holds all of them, or if resumeFrom is greater than the last seq it sent",
    the resume fails."""

    @pytest.mark.parametrize("resume_from", [0, 1, 2, 4, 5])
    def test_resend_after_returns_exactly_the_later_messages_in_order(
        self, resume_from: int
    ) -> None:
        stream = OutgoingStream()
        datas = sent(stream, 5)
        assert stream.resend_after(resume_from) == datas[resume_from:]

    def test_resend_is_repeatable(self) -> None:
        stream = OutgoingStream()
        datas = sent(stream, 3)
        assert stream.resend_after(1) == datas[1:]
        assert stream.resend_after(1) == datas[1:]
        assert stream.unacked == 3

    def test_nothing_sent_nothing_to_resend(self) -> None:
        assert OutgoingStream().resend_after(0) == []

    @pytest.mark.parametrize("resume_from", [6, 7, MAX_SEQ])
    def test_beyond_the_last_seq_sent_fails(self, resume_from: int) -> None:
        stream = OutgoingStream()
        sent(stream, 5)
        assert stream.resend_after(resume_from) is None

    def test_beyond_on_an_empty_stream_fails(self) -> None:
        assert OutgoingStream().resend_after(1) is None

    def test_negative_fails(self) -> None:
        stream = OutgoingStream()
        sent(stream, 2)
        assert stream.resend_after(-1) is None

    def test_needed_message_discarded_by_max_kept_fails(self) -> None:
        """§4.1: a sender "MAY bound how many it keeps; a resume that would need a
        discarded message then fails (§5.4)"."""
        stream = OutgoingStream(max_kept=3)
        datas = sent(stream, 5)
        assert stream.unacked == 3
        assert stream.lost_through == 2
        assert stream.resend_after(0) is None
        assert stream.resend_after(1) is None
        assert stream.resend_after(2) == datas[2:]
        assert stream.resend_after(3) == datas[3:]
        assert stream.resend_after(5) == []

    def test_overflow_after_a_partial_ack(self) -> None:
        stream = OutgoingStream(max_kept=2)
        datas = sent(stream, 2)
        stream.ack(1)
        datas += sent(stream, 2)  # keeps 3 and 4, dropping 2 unacknowledged
        assert stream.lost_through == 2
        assert stream.resend_after(1) is None
        assert stream.resend_after(2) == datas[2:]

    def test_acknowledged_and_gone_fails(self) -> None:
        """A peer that acknowledged up to 3 yet resumes from 2 contradicts itself; the
        sender no longer holds seq 3."""
        stream = OutgoingStream()
        datas = sent(stream, 5)
        stream.ack(3)
        assert stream.resend_after(2) is None
        assert stream.resend_after(0) is None
        assert stream.resend_after(3) == datas[3:]
        stream.ack(5)
        assert stream.resend_after(4) is None
        assert stream.resend_after(5) == []

    def test_restore_round_trip(self) -> None:
        stream = OutgoingStream(max_kept=3)
        datas = sent(stream, 5)
        copy = OutgoingStream(max_kept=3, last_seq=stream.last_seq)
        copy.restore(stream.kept(), stream.lost_through)
        assert copy.resend_after(2) == datas[2:]
        assert copy.resend_after(1) is None
        assert seq_of(copy.send(UserText(text="six"))) == 6


class TestSection4_3Incoming:
    """ "If seq <= lastSeq, it is a duplicate: the receiver MUST NOT handle it again and
    SHOULD acknowledge again"; "A receiver MUST NOT crash on a gap".\""""

    def test_in_order_messages_are_handled(self) -> None:
        stream = IncomingStream()
        assert stream.last_seq == 0
        assert [stream.receive(seq, T0) for seq in (1, 2, 3)] == [True, True, True]
        assert stream.last_seq == 3
        assert stream.gaps == 0

    @pytest.mark.parametrize("duplicate", [1, 2, 3])
    def test_duplicates_are_not_handled(self, duplicate: int) -> None:
        stream = IncomingStream()
        for seq in (1, 2, 3):
            stream.receive(seq, T0)
        assert stream.receive(duplicate, T0) is False
        assert stream.last_seq == 3

    def test_duplicates_are_acknowledged_again(self) -> None:
        stream = IncomingStream()
        stream.receive(1, T0)
        stream.receive(2, T0)
        assert stream.take_ack(T0 + ACK_DELAY) == 2
        assert stream.ack_deadline() is None
        assert stream.receive(2, T0 + 1) is False
        assert stream.ack_deadline() is not None
        assert stream.take_ack(T0 + 1 + ACK_DELAY) == 2

    def test_gaps_are_tolerated_and_counted(self) -> None:
        stream = IncomingStream()
        assert stream.receive(1, T0)
        assert stream.receive(3, T0)
        assert stream.gaps == 1
        assert stream.last_seq == 3
        assert stream.receive(2, T0) is False  # at or below lastSeq: a duplicate now
        assert stream.receive(10, T0)
        assert stream.gaps == 2
        assert stream.receive(11, T0)
        assert stream.gaps == 2

    def test_restored_last_seq(self) -> None:
        stream = IncomingStream(last_seq=10)
        assert stream.receive(10, T0) is False
        assert stream.receive(11, T0) is True
        assert stream.gaps == 0


class TestSection4_2AckSchedule:
    """ "RECOMMENDED: no later than 250 ms after the first unacknowledged message, or
    after every 32 messages, whichever comes first.\""""

    def test_nothing_received_nothing_due(self) -> None:
        stream = IncomingStream()
        assert stream.ack_deadline() is None
        assert stream.take_ack(T0 + 100) is None

    def test_ack_due_250_ms_after_the_first_unacknowledged_message(self) -> None:
        stream = IncomingStream()
        stream.receive(1, T0)
        assert stream.ack_deadline() == pytest.approx(T0 + 0.25)
        stream.receive(2, T0 + 0.2)  # a later message does not push the deadline
        assert stream.ack_deadline() == pytest.approx(T0 + 0.25)
        assert stream.take_ack(T0 + 0.249) is None
        assert stream.take_ack(T0 + 0.25) == 2

    def test_take_ack_resets_the_schedule(self) -> None:
        stream = IncomingStream()
        stream.receive(1, T0)
        assert stream.take_ack(T0 + 1) == 1
        assert stream.ack_deadline() is None
        assert stream.take_ack(T0 + 2) is None
        stream.receive(2, T0 + 3)
        assert stream.ack_deadline() == pytest.approx(T0 + 3.25)
        assert stream.take_ack(T0 + 3.1) is None
        assert stream.take_ack(T0 + 3.3) == 2

    def test_ack_due_after_32_messages(self) -> None:
        stream = IncomingStream()
        for seq in range(1, 32):
            stream.receive(seq, T0)
        assert stream.take_ack(T0) is None
        stream.receive(32, T0)
        deadline = stream.ack_deadline()
        assert deadline is not None
        assert deadline <= T0
        assert stream.take_ack(T0) == 32
        for seq in range(33, 33 + 31):
            stream.receive(seq, T0 + 0.01)
        assert stream.take_ack(T0 + 0.01) is None
        stream.receive(64, T0 + 0.01)
        assert stream.take_ack(T0 + 0.01) == 64

    def test_duplicates_do_not_count_towards_32(self) -> None:
        stream = IncomingStream()
        stream.receive(1, T0)
        for _ in range(40):
            stream.receive(1, T0)
        assert stream.take_ack(T0) is None
        assert stream.take_ack(T0 + ACK_DELAY) == 1

    def test_ack_now_acknowledges_regardless_of_schedule(self) -> None:
        """ "A receiver MAY acknowledge after every message.\""""
        stream = IncomingStream()
        stream.receive(1, T0)
        stream.receive(2, T0)
        assert stream.ack_now() == 2
        assert stream.ack_deadline() is None
        assert stream.take_ack(T0 + 10) is None

    def test_up_to_never_exceeds_the_highest_seq_received(self) -> None:
        """ "upTo MUST NOT exceed the highest seq received.\""""
        stream = IncomingStream()
        stream.receive(1, T0)
        stream.receive(5, T0)
        stream.receive(3, T0)
        assert stream.take_ack(T0 + 1) == 5
        assert IncomingStream().ack_now() == 0
