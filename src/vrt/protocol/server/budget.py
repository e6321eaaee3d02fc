"""What one connection may make the server read (§11): a token bucket for frames and
one for bytes.

Every WebSocket frame a client sends, of any kind, takes one token from the frame
bucket and its size from the byte bucket; both refill at their rate up to their burst.
A connection that spends beyond its tokens is throttled: the driver stops reading it
until the buckets are back above zero (the client's writes wait in TCP, nothing is
lost). One that goes on regardless (the frames already read when reading stopped take
it a whole burst below zero) is flooding, and is closed with RATE_LIMITED.
"""

from __future__ import annotations

__all__ = ["TokenBucket"]


class TokenBucket:
    """``rate`` tokens per second, at most ``burst`` saved; spending may go below zero."""

    __slots__ = ("_at", "_tokens", "burst", "rate")

    def __init__(self, rate: float, burst: float, now: float) -> None:
        if rate <= 0 or burst <= 0:
            raise ValueError("a token bucket needs a positive rate and burst")
        self.rate = rate
        self.burst = burst
        self._tokens = burst
        self._at = now

    def spend(self, cost: float, now: float) -> float:
        """Take ``cost`` tokens; return the tokens left (negative: in debt)."""
        tokens = self._tokens + (now - self._at) * self.rate
        self._tokens = (tokens if tokens < self.burst else self.burst) - cost
        self._at = now
        return self._tokens

    def tokens(self, now: float) -> float:
        tokens = self._tokens + (now - self._at) * self.rate
        return tokens if tokens < self.burst else self.burst

    def ready_at(self) -> float:
        """When the bucket is back at zero (now or in the past if it is not in debt)."""
        return self._at + max(0.0, -self._tokens) / self.rate
