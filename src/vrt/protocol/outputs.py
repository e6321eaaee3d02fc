"""What the core asks a driver to do on the wire, for both roles.

A driver writes :class:`SendText` as a text frame and :class:`SendBinary` as a binary
frame, and performs :class:`Close` (a WebSocket close with its code and reason), in the
order the core queued them. They are distinct types that never compare equal to each
other, so a text frame can never pass for an audio frame. Every driver (the client's,
the server's, the in-memory pair of :mod:`vrt.protocol.testing`) hands each output to
its :class:`OutputWriter` with :func:`dispatch`: the one place outputs become frames.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final, Protocol, TypeAlias, TypeVar

import msgspec

__all__ = [
    "Close",
    "CloseCode",
    "Output",
    "OutputWriter",
    "SendBinary",
    "SendText",
    "dispatch",
    "dispatch_all",
]

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


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
    """Close the WebSocket with ``code`` (§9.3) after what was queued before it.
    ``wait``: wait for the peer's close frame (the close handshake); False when the peer
    is gone (§4.4: a connection found dead), so that nothing waits for an answer that
    will not come."""

    code: int
    reason: str
    wait: bool = True


Output: TypeAlias = SendText | SendBinary | Close


class OutputWriter(Protocol[T_co]):
    """What a driver does with each kind of output; what it returns is the driver's (an
    awaitable for an asynchronous one, whether to stop for a synchronous one)."""

    def text(self, data: bytes) -> T_co:
        """Write ``data`` as a text frame."""

    def binary(self, data: bytes) -> T_co:
        """Write ``data`` as a binary frame."""

    def close(self, close: Close) -> T_co:
        """Close the WebSocket; nothing queued after a close is written."""


def dispatch(item: Output, writer: OutputWriter[T]) -> T:
    """Hand ``item`` to the method of ``writer`` for its kind, and return what it returns."""
    # type() is, not isinstance: the outputs have no subclasses, and this runs per frame.
    if type(item) is SendText:
        return writer.text(item.data)
    if type(item) is SendBinary:
        return writer.binary(item.data)
    assert type(item) is Close
    return writer.close(item)


def dispatch_all(items: Iterable[Output], writer: OutputWriter[object]) -> bool:
    """:func:`dispatch` each of ``items`` in order, for a synchronous writer, up to a
    close; True when a close ended it (nothing after a close is written). One call for a
    whole write rather than one per frame: a burst of chunks or audio frames is one."""
    text, binary = writer.text, writer.binary
    for item in items:
        if type(item) is SendText:
            text(item.data)
        elif type(item) is SendBinary:
            binary(item.data)
        else:
            assert type(item) is Close
            writer.close(item)
            return True
    return False
