"""What one connection may make the server read (§11): a token bucket for frames and
one for bytes.

Every WebSocket frame a client sends, of any kind, takes one token from the frame
bucket and its size from the byte bucket; both refill at their rate up to their burst.
A connection that spends beyond its tokens is throttled: the driver stops reading it
until the buckets are back at zero (the client's writes wait in TCP, nothing is lost).
One that goes on regardless (the frames already read when reading stopped take it a
whole burst below zero) is flooding, and is closed with RATE_LIMITED.
"""

from __future__ import annotations

__all__ = ["ReadBudget"]


class ReadBudget:
    """Both buckets of one connection; spending may go below zero (into debt)."""

    __slots__ = ("_at", "_bytes", "_frames", "byte_burst", "byte_rate", "frame_burst", "frame_rate")

    def __init__(
        self, frame_rate: float, frame_burst: float, byte_rate: float, byte_burst: float, now: float
    ) -> None:
        if min(frame_rate, frame_burst, byte_rate, byte_burst) <= 0:
            raise ValueError("a read budget needs positive rates and bursts")
        self.frame_rate = frame_rate
        self.frame_burst = frame_burst
        self.byte_rate = byte_rate
        self.byte_burst = byte_burst
        self._frames = frame_burst
        self._bytes = byte_burst
        self._at = now

    def spend(self, size: int, now: float) -> float:
        """Take one frame of ``size`` bytes (one call per frame, on the hot path: the
        refill is computed inline). Returns 0 within the budget; in debt (stop reading),
        the emptier bucket's level as a share of its burst: below 0, and below -1 a
        whole burst beyond it (flooding)."""
        elapsed = now - self._at
        self._at = now
        # Capped with ifs, not min(): a builtin call each, on every frame.
        frames = self._frames + elapsed * self.frame_rate
        if frames > self.frame_burst:  # noqa: PLR1730
            frames = self.frame_burst
        data = self._bytes + elapsed * self.byte_rate
        if data > self.byte_burst:  # noqa: PLR1730
            data = self.byte_burst
        frames -= 1.0
        data -= size
        self._frames = frames
        self._bytes = data
        if frames >= 0 and data >= 0:
            return 0.0
        return min(frames / self.frame_burst, data / self.byte_burst)

    def readable_at(self) -> float:
        """When both buckets are back at zero: the time of the last spend when neither
        is in debt."""
        frames, data = self._frames, self._bytes
        if frames >= 0 and data >= 0:
            return self._at
        return self._at + max(-frames / self.frame_rate, -data / self.byte_rate)
