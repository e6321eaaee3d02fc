"""Audio formats (§8.2): which one a session uses, and how long a payload plays.

Both roles and every helper measure audio with :func:`duration_ms`, so that what the
server counts as sent and what a client counts as received or played agree, Opus
included (its duration is read from the packet's TOC byte, RFC 6716 §3.1).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from .messages import PCM16_24K, Format

__all__ = ["choose_format", "duration_ms", "opus_duration_ms", "same_format"]


def same_format(a: Format, b: Format) -> bool:
    """Whether ``a`` and ``b`` are the same format (a default rate equals its value)."""
    return a.encoding == b.encoding and a.rate == b.rate


def choose_format(preferred: Format | None, supported: Iterable[Format]) -> Format:
    """The client's preference when the agent takes it unchanged, else pcm16 at 24 kHz (§8.2)."""
    if preferred is not None:
        for candidate in supported:
            if same_format(preferred, candidate):
                return Format(encoding=preferred.encoding, sample_rate=preferred.rate)
    return PCM16_24K


def duration_ms(payload: bytes, fmt: Format) -> float:
    """How long ``payload`` plays in ``fmt``, in milliseconds: whole pcm16 samples, one
    pcmu byte per sample, or the frames of one Opus packet."""
    if fmt.encoding == "pcm16":
        return (len(payload) >> 1) * 1000.0 / fmt.rate
    if fmt.encoding == "pcmu":
        return len(payload) / 8.0
    return opus_duration_ms(payload)


#: Frame duration in ms of each TOC configuration (RFC 6716 §3.1, Table 2): SILK
#: 0-11, hybrid 12-15, CELT 16-31.
_OPUS_FRAME_MS: Final = (
    *(10.0, 20.0, 40.0, 60.0) * 3,
    *(10.0, 20.0) * 2,
    *(2.5, 5.0, 10.0, 20.0) * 4,
)


def opus_duration_ms(packet: bytes) -> float:
    """The duration of one Opus packet, from its TOC byte (RFC 6716 §3.1): the frame
    size of its configuration times its frame count (code 0: one, 1 and 2: two, 3: the
    count in the second byte). An empty or truncated packet plays nothing."""
    if not packet:
        return 0.0
    toc = packet[0]
    code = toc & 3
    if code == 0:
        frames = 1
    elif code in (1, 2):
        frames = 2
    elif len(packet) > 1:
        frames = packet[1] & 0x3F
    else:
        return 0.0
    return _OPUS_FRAME_MS[toc >> 3] * frames
