"""What the core asks a driver to do on the wire, for both roles.

A driver writes :class:`SendText` as a text frame and :class:`SendBinary` as a binary
frame, and performs :class:`Close` (a WebSocket close with its code and reason), in the
order the core queued them. They are distinct types that never compare equal to each
other, so a text frame can never pass for an audio frame.
"""

from __future__ import annotations

from typing import Final, TypeAlias

import msgspec

__all__ = ["Close", "CloseCode", "Output", "SendBinary", "SendText"]


class CloseCode:
    """WebSocket close codes of §9.3 (advisory: the error before a close is authoritative)."""

    NORMAL: Final = 1000
    GOING_AWAY: Final = 1001
    POLICY: Final = 1008
    START_FAILED: Final = 1011
    REPLACED: Final = 4000
    UNAUTHORIZED: Final = 4401
    UNKNOWN_SESSION: Final = 4404
    HEARTBEAT_TIMEOUT: Final = 4408


class SendText(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One control message, already encoded (a text frame)."""

    data: bytes


class SendBinary(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One audio frame, header included (a binary frame, §8.1)."""

    data: bytes


class Close(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Close the WebSocket with ``code`` (§9.3) after what was queued before it."""

    code: int
    reason: str


Output: TypeAlias = SendText | SendBinary | Close
