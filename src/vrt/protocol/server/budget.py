"""What one connection may make the server read (§11): a token bucket for frames and
one for bytes.

Every WebSocket frame a client sends, of any kind, takes one token from the frame
bucket and its size from the byte bucket; both refill at their rate up to their burst.
A connection that spends beyond its tokens is throttled: the driver stops reading it
until the buckets are back at zero (the client's writes wait in TCP, nothing is lost).
One that goes on regardless (the frames already read when reading stopped take it a
whole burst below zero) is flooding, and is closed with RATE_LIMITED.

Input audio is charged by its duration too (§8.2: what its payload plays, an Opus
packet's from its TOC byte), from a third bucket of seconds that refills at about real
time: a 14-byte Opus packet claiming 120 ms costs what it makes the server decode and
run through voice detection. A connection whose audio runs ahead of it is throttled as
above; audio read a whole burst beyond it is dropped (``ServerConnection``).
"""

from __future__ import annotations

from typing import Final

__all__ = ["DEFAULT_AUDIO_BURST", "DEFAULT_AUDIO_RATE", "ReadBudget"]

#: Seconds of input audio a connection may send per second: real time, and a tenth more
#: for a client clock that runs a little fast (``ServerConfig.audio_rate``).
DEFAULT_AUDIO_RATE: Final = 1.1
#: Seconds of audio saved up: a network stall of two seconds is absorbed
#: (``ServerConfig.audio_burst``).
DEFAULT_AUDIO_BURST: Final = 2.0


class ReadBudget:
    """Both buckets of one connection; spending may go below zero (into debt)."""

    __slots__ = (
        "_at",
        "_audio",
        "_audio_at",
        "_bytes",
        "_frames",
        "audio_burst",
        "audio_rate",
        "byte_burst",
        "byte_rate",
        "frame_burst",
        "frame_rate",
    )

    def __init__(
        self,
        frame_rate: float,
        frame_burst: float,
        byte_rate: float,
        byte_burst: float,
        now: float,
        audio_rate: float = DEFAULT_AUDIO_RATE,
        audio_burst: float = DEFAULT_AUDIO_BURST,
    ) -> None:
        if min(frame_rate, frame_burst, byte_rate, byte_burst, audio_rate, audio_burst) <= 0:
            raise ValueError("a read budget needs positive rates and bursts")
        self.audio_rate = audio_rate
        self.audio_burst = audio_burst
        self._audio = audio_burst
        self._audio_at = now
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

    def spend_audio(self, seconds: float, now: float) -> float:
        """Take ``seconds`` of input audio. Returns 0 within the budget; in debt (stop
        reading), the level as a share of the burst: below -1, a whole burst beyond."""
        audio = self._audio + (now - self._audio_at) * self.audio_rate
        if audio > self.audio_burst:  # noqa: PLR1730
            audio = self.audio_burst
        audio -= seconds
        self._audio = audio
        self._audio_at = now
        return 0.0 if audio >= 0 else audio / self.audio_burst

    def readable_at(self) -> float:
        """When every bucket is back at zero: the time of the last spend when none is
        in debt."""
        frames, data = self._frames, self._bytes
        at = self._at
        if frames < 0 or data < 0:
            at += max(-frames / self.frame_rate, -data / self.byte_rate)
        if self._audio < 0:
            at = max(at, self._audio_at - self._audio / self.audio_rate)
        return at
