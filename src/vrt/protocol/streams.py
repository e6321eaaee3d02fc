"""The two halves of a session's resumable stream (§4): one object per direction.

:class:`OutgoingStream` numbers what this side sends, keeps it until the peer
acknowledges it and answers "resend everything after N". :class:`IncomingStream`
tracks ``lastSeq`` of what the peer sent, drops duplicates and says when an ``ack`` is
due. Neither reads a clock: ``now`` is an argument, in seconds.
"""

from __future__ import annotations

from collections import deque
from typing import Final

from .codec import encode
from .errors import LocalProtocolError
from .messages import Message

__all__ = [
    "ACK_AFTER_MESSAGES",
    "ACK_DELAY",
    "DEFAULT_MAX_KEPT",
    "MAX_SEQ",
    "IncomingStream",
    "OutgoingStream",
]

MAX_SEQ: Final = 4294967295
#: §4.2 RECOMMENDED: acknowledge within 250 ms of the first unacknowledged message...
ACK_DELAY: Final = 0.25
#: ... or after every 32 messages, whichever comes first.
ACK_AFTER_MESSAGES: Final = 32
#: §11: the reference implementation keeps 1024 unacknowledged messages per direction.
DEFAULT_MAX_KEPT: Final = 1024


class OutgoingStream:
    """Numbers, keeps and resends this side's sequenced messages (§4.1, §4.2, §5.4).

    At most ``max_kept`` unacknowledged messages, of at most ``max_kept_bytes`` in all,
    are kept; sending one more discards the oldest, and a resume that needs a discarded
    message then fails (§4.1, §11).
    """

    __slots__ = ("_kept", "_kept_bytes", "_last_seq", "_lost_through", "max_kept", "max_kept_bytes")

    def __init__(
        self,
        max_kept: int = DEFAULT_MAX_KEPT,
        *,
        last_seq: int = 0,
        max_kept_bytes: int | None = None,
    ) -> None:
        if max_kept < 1:
            raise ValueError("max_kept must be at least 1")
        if max_kept_bytes is not None and max_kept_bytes < 1:
            raise ValueError("max_kept_bytes must be at least 1")
        self.max_kept = max_kept
        self.max_kept_bytes = max_kept_bytes
        self._kept_bytes = 0
        # Made by the first send: an idle session keeps nothing, and an empty deque
        # is most of a kilobyte.
        self._kept: deque[tuple[int, bytes]] | None = None
        self._last_seq = last_seq
        #: Highest seq discarded without acknowledgement; a resume needing it fails.
        self._lost_through = 0

    @property
    def last_seq(self) -> int:
        """The seq of the last message sent; 0 before the first."""
        return self._last_seq

    @property
    def exhausted(self) -> bool:
        """True once seq 4294967295 was sent: nothing more may be sent (§4.1)."""
        return self._last_seq >= MAX_SEQ

    @property
    def unacked(self) -> int:
        """How many sent messages are kept, waiting for an ``ack``."""
        return len(self._kept) if self._kept is not None else 0

    @property
    def kept_bytes(self) -> int:
        """The size of the kept messages, in bytes."""
        return self._kept_bytes

    @property
    def first_kept_seq(self) -> int:
        """The seq of the oldest kept message; ``last_seq + 1`` when none is kept."""
        kept = self._kept
        return kept[0][0] if kept else self._last_seq + 1

    @property
    def lost_through(self) -> int:
        """The highest seq dropped unacknowledged to respect ``max_kept``; 0 if none."""
        return self._lost_through

    def send(self, message: Message) -> bytes:
        """Number ``message``, keep its bytes, and return them for the wire."""
        if self._last_seq >= MAX_SEQ:
            raise LocalProtocolError(
                "the stream has sent seq 4294967295; it must not send another (§4.1)"
            )
        seq = self._last_seq + 1
        data = encode(message, seq)
        self._last_seq = seq
        kept = self._kept
        if kept is None:
            kept = self._kept = deque()
        elif len(kept) >= self.max_kept:
            self._drop_oldest(kept)
        kept.append((seq, data))
        self._kept_bytes += len(data)
        limit = self.max_kept_bytes
        if limit is not None:
            while self._kept_bytes > limit and len(kept) > 1:
                self._drop_oldest(kept)
        return data

    def _drop_oldest(self, kept: deque[tuple[int, bytes]]) -> None:
        seq, data = kept.popleft()
        self._lost_through = seq
        self._kept_bytes -= len(data)

    def ack(self, up_to: int) -> int:
        """Discard every kept message with ``seq <= up_to``; return how many (§4.2).

        A value at or beyond the last seq sent acknowledges everything (messages.md).
        """
        kept = self._kept
        if kept is None:
            return 0
        dropped = 0
        while kept and kept[0][0] <= up_to:
            self._kept_bytes -= len(kept.popleft()[1])
            dropped += 1
        return dropped

    def resend_after(self, resume_from: int) -> list[bytes] | None:
        """Every kept message with ``seq > resume_from``, in order; None when that is
        impossible: ``resume_from`` beyond what was sent, or a needed message was
        discarded (§5.4).
        """
        if resume_from < 0 or resume_from > self._last_seq or resume_from < self._lost_through:
            return None
        kept = self._kept or ()
        if resume_from < self._last_seq and (not kept or kept[0][0] > resume_from + 1):
            return None  # acknowledged messages are gone, yet the peer says it lacks them
        return [data for seq, data in kept if seq > resume_from]

    def kept(self) -> list[tuple[int, bytes]]:
        """The kept messages as ``(seq, bytes)``, oldest first (for a session store)."""
        return list(self._kept or ())

    def restore(self, kept: list[tuple[int, bytes]], lost_through: int) -> None:
        """Put back what :meth:`kept` and :attr:`lost_through` returned (session store)."""
        self._kept = deque(kept) if kept else None
        self._kept_bytes = sum(len(data) for _, data in kept)
        self._lost_through = lost_through


class IncomingStream:
    """Tracks ``lastSeq`` of the peer's stream, detects duplicates, schedules acks (§4.2, §4.3)."""

    __slots__ = ("_due_at", "_last_seq", "_pending", "gaps")

    def __init__(self, *, last_seq: int = 0) -> None:
        self._last_seq = last_seq
        self._pending = 0
        self._due_at: float | None = None
        #: How many times a seq skipped ahead; a conforming peer never does (§4.3).
        self.gaps = 0

    @property
    def last_seq(self) -> int:
        """The highest seq handled; 0 before any."""
        return self._last_seq

    def receive(self, seq: int, now: float) -> bool:
        """Note sequenced message ``seq``; True when it is new and must be handled.

        A duplicate (``seq <= lastSeq``) is not to be handled again, but is acknowledged
        again (§4.3). A gap is tolerated and counted: this version defines no recovery.
        """
        if seq <= self._last_seq:
            self._schedule(now)
            return False
        if seq != self._last_seq + 1:
            self.gaps += 1
        self._last_seq = seq
        self._pending += 1
        self._schedule(now)
        if self._pending >= ACK_AFTER_MESSAGES:
            self._due_at = now  # §4.2: every 32 messages, whatever the delay
        return True

    def _schedule(self, now: float) -> None:
        if self._due_at is None:
            self._due_at = now + ACK_DELAY

    def ack_deadline(self) -> float | None:
        """When the next ``ack`` is due, or None when nothing waits for one."""
        return self._due_at

    def take_ack(self, now: float) -> int | None:
        """``upTo`` for an ``ack`` to send now, if one is due; resets the schedule."""
        deadline = self.ack_deadline()
        if deadline is None or now < deadline:
            return None
        return self.ack_now()

    def ack_now(self) -> int:
        """``upTo`` for an ``ack`` sent now regardless of the schedule (§4.2 allows it)."""
        self._pending = 0
        self._due_at = None
        return self._last_seq
