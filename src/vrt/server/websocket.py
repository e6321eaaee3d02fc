"""The WebSocket edge of the server: picows frames in, protocol core, frames out.

picows hands over raw frames, so this layer does what a WebSocket library would
otherwise do for us (RFC 6455): it joins fragmented messages and fails a new message
inside an unfinished one (1002), fails frames with reserved bits set (no extension is
ever negotiated, 1002), bounds message size (close 1009), checks that text is UTF-8
(close 1007, messages.md), answers pings itself, echoes the peer's close (an empty close
with an empty one) and completes the close handshake. Every frame it reads, of any
kind, is reported to the core, which keeps the heartbeat (§4.4) and the connection's
read budget; while the budget is spent the edge stops reading.

What it writes is bounded before it is written: above the transport's high-water mark
audio is dropped (late audio is worse than lost, §5.4); a connection with more than
``max_write_buffer`` of output it has not read, or that stays above the high-water mark
for ``write_timeout``, is aborted without a close handshake (one it would never read)
instead of being written to. What it holds is thus at most the bound plus one write. Its
session parks and resumes with nothing lost, since sequenced messages are kept (§4.1).

It never decides protocol behaviour: that is :class:`~vrt.protocol.server.ServerConnection`.
The server that owns the connections is reached only through :class:`ConnectionHooks`,
so this module does not know the application around it.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Callable
from dataclasses import dataclass
from time import perf_counter
from typing import Final, Protocol, cast

from picows import WSCloseCode, WSFrame, WSListener, WSMsgType, WSTransport

from ..protocol.outputs import Close, Output, dispatch_all
from ..protocol.server import ServerConfig, ServerConnection

__all__ = ["ConnectionHooks", "ConnectionMeter", "EdgeLimits", "ServerWebSocket", "WriteGate"]

log = logging.getLogger("vrt.server")

_TEXT: Final = WSMsgType.TEXT
_BINARY: Final = WSMsgType.BINARY
_CONTINUATION: Final = WSMsgType.CONTINUATION
_FIN_TEXT: Final = 0x81
_FIN_BINARY: Final = 0x82
_SHORT: Final = struct.Struct("!BB")
_MEDIUM: Final = struct.Struct("!BBH")
_LONG: Final = struct.Struct("!BBQ")
#: An empty close frame (RFC 6455 §5.5.1: a close without a status code).
_EMPTY_CLOSE: Final = b"\x88\x00"


def _header(first: int, size: int) -> bytes:
    """The header of an unmasked, unfragmented frame (RFC 6455 §5.2)."""
    if size < 126:
        return _SHORT.pack(first, size)
    if size < 1 << 16:
        return _MEDIUM.pack(first, 126, size)
    return _LONG.pack(first, 127, size)


def _sendable_close_code(code: int) -> bool:
    """Close codes a peer may put on the wire (RFC 6455 §7.4): 1004-1006 and 1015 are
    reserved for reports, codes below 1000 and 1012-2999 are not assigned to peers."""
    return code in (1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011) or (3000 <= code <= 4999)


class _Frames:
    """The frames of one write, as :func:`~vrt.protocol.outputs.dispatch_all` hands them
    over, up to a close: each header and payload, built as picows builds a server's
    frames (unmasked, RFC 6455 §5.2). While the connection is ``paused`` audio is
    dropped (realtime audio: late is worse than lost, §5.4). One per connection, emptied
    by each write."""

    __slots__ = ("closing", "parts", "paused")

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.paused = False
        #: The close that ends the write, if any.
        self.closing: Close | None = None

    # _header, inline in each: once per frame written.

    def text(self, data: bytes) -> bool:
        size = len(data)
        if size < 126:
            self.parts += (_SHORT.pack(_FIN_TEXT, size), data)
        elif size < 1 << 16:
            self.parts += (_MEDIUM.pack(_FIN_TEXT, 126, size), data)
        else:
            self.parts += (_LONG.pack(_FIN_TEXT, 127, size), data)
        return False

    def binary(self, data: bytes) -> bool:
        if self.paused:
            return False
        size = len(data)
        if size < 126:
            self.parts += (_SHORT.pack(_FIN_BINARY, size), data)
        elif size < 1 << 16:
            self.parts += (_MEDIUM.pack(_FIN_BINARY, 126, size), data)
        else:
            self.parts += (_LONG.pack(_FIN_BINARY, 127, size), data)
        return False

    def close(self, close: Close) -> bool:
        self.closing = close
        return True


@dataclass(frozen=True, slots=True)
class EdgeLimits:
    """The WebSocket layer's bounds (docs/limits.md)."""

    #: Largest message (joined fragments) read; beyond it, close 1009.
    max_message_bytes: int
    #: Output buffered for one connection beyond which it is aborted rather than
    #: written to (a single write may pass it: a resume resends the kept window).
    max_write_buffer: int = 1 << 20
    #: The transport's high-water mark: above it audio is dropped and ``write_timeout``
    #: runs.
    high_water: int = 256 << 10
    #: How long a connection may stay above the high-water mark before it is aborted.
    write_timeout: float = 10.0
    #: How long a closing connection waits for the peer's close frame before it is
    #: aborted.
    close_timeout: float = 2.0


@dataclass(frozen=True, slots=True)
class ConnectionHooks:
    """What a connection tells the server that owns it."""

    #: The WebSocket is open.
    opened: Callable[[ServerWebSocket], None]
    #: The protocol core ran for this connection: act on its events, write its frames.
    pump: Callable[[ServerWebSocket], None]
    #: The WebSocket is gone.
    closed: Callable[[ServerWebSocket], None]


class ConnectionMeter(Protocol):
    """What a connection tells the server's telemetry, when it has any (metrics.py,
    telemetry.py): without, a connection pays one ``None`` test per message."""

    def connected(self) -> None:
        """The WebSocket is open (the upgrade succeeded)."""

    def received(self, text: bool, payload: bytes, seconds: float, now: float) -> None:
        """A message read: text or binary, and the core's time to act on it."""

    def sent(self, outbox: list[Output], paused: bool) -> None:
        """What :meth:`ServerWebSocket.write_outbox` wrote (audio dropped while
        ``paused``; nothing after a close)."""

    def write_paused(self) -> None:
        """The buffered output crossed the high-water mark."""

    def aborted(self, reason: str) -> None:
        """Aborted as a slow reader: ``buffer`` or ``timeout``."""

    def disconnected(self) -> None:
        """The WebSocket is gone."""


class WriteGate(Protocol):
    """What a connection's output passes before it is written, when the session lives in
    a shared store (``journal.SessionJournal``): the store must have it first."""

    def admit(self, writer: ServerWebSocket, outbox: list[Output]) -> bool:
        """True: write ``outbox`` now; False: the gate writes it later
        (:meth:`ServerWebSocket.write_items`), or drops it."""


class ServerWebSocket(WSListener):
    """The server's side of one client's WebSocket (the client's is ``vrt.client``'s)."""

    def __init__(
        self,
        config: ServerConfig,
        limits: EdgeLimits,
        hooks: ConnectionHooks,
        meter: ConnectionMeter | None = None,
    ) -> None:
        super().__init__()
        self.hooks = hooks
        self.meter = meter
        self.limits = limits
        self.loop = asyncio.get_running_loop()
        self.protocol = ServerConnection(config, self.loop.time())
        self.transport: WSTransport | None = None
        self.closed = False
        self._closing = False
        self._fragments: bytearray | None = None
        self._fragment_type = _TEXT
        self._timer: asyncio.Handle | None = None
        self._timer_at = 0.0
        self._paused = False
        self._stalled: asyncio.TimerHandle | None = None
        self._throttled: asyncio.TimerHandle | None = None
        #: 0, or 1 when the frames of a read are being pumped, 2 when more than one came.
        self._pump_due = 0
        #: Set while the bound session lives in a shared store (write-ahead).
        self.gate: WriteGate | None = None
        self._frames = _Frames()

    @property
    def peer(self) -> object:
        """The client's address as the socket has it (``(host, port, ...)``), or None."""
        transport = self.transport
        if transport is None:
            return None
        return transport.underlying_transport.get_extra_info("peername")

    # -- picows callbacks --

    def on_ws_connected(self, transport: WSTransport) -> None:
        self.transport = transport
        limits = self.limits
        transport.underlying_transport.set_write_buffer_limits(
            high=limits.high_water, low=limits.high_water // 4
        )
        self.hooks.opened(self)
        if self.meter is not None:
            self.meter.connected()
        self.arm_timer()

    def on_ws_frame(self, transport: WSTransport, frame: WSFrame) -> None:
        kind = frame.msg_type
        if self.closed or (
            (self._closing or transport.is_close_frame_sent) and kind != WSMsgType.CLOSE
        ):
            return  # a closing connection acts on nothing more (e.g. a frame refused with 1009)
        now = self.loop.time()
        if self.protocol.frame_received(now, frame.payload_size):
            self._throttle(now)
        if frame.rsv1 or frame.rsv2 or frame.rsv3:
            self._fail(WSCloseCode.PROTOCOL_ERROR, "reserved bits set, and no extension is agreed")
            return
        if kind is _TEXT or kind is _BINARY:
            if self._fragments is not None:
                self._fail(WSCloseCode.PROTOCOL_ERROR, "a new message inside a fragmented one")
                return
            if frame.fin:
                self._message(kind, frame.get_payload_as_bytes(), now)
            else:
                self._fragment_type = kind
                self._fragments = bytearray(frame.get_payload_as_memoryview())
                self._check_fragment_size()
        elif kind is _CONTINUATION:
            if self._fragments is None:
                self._fail(WSCloseCode.PROTOCOL_ERROR, "continuation without a message")
                return
            self._fragments += frame.get_payload_as_memoryview()
            if self._check_fragment_size() and frame.fin:
                data, self._fragments = bytes(self._fragments), None
                self._message(self._fragment_type, data, now)
        elif kind == WSMsgType.PING:
            transport.send_pong(frame.get_payload_as_bytes())
        elif kind == WSMsgType.CLOSE:
            self._echo_close(transport, frame)
            return
        self._pump_soon()

    def _echo_close(self, transport: WSTransport, frame: WSFrame) -> None:
        """Answer the peer's close (RFC 6455 §5.5.1) with its status code, an empty close
        with an empty one, and a close whose code no peer may send with 1002; then end
        the connection. The session parks when the socket is gone."""
        if not self._closing:
            self._closing = True
            if frame.payload_size == 0:
                transport.underlying_transport.write(_EMPTY_CLOSE)
            else:
                payload = frame.get_payload_as_bytes()
                code = int.from_bytes(payload[:2], "big") if len(payload) >= 2 else 0
                if _sendable_close_code(code):
                    transport.send_close(cast(WSCloseCode, code))
                else:
                    transport.send_close(WSCloseCode.PROTOCOL_ERROR, b"invalid close frame")
        transport.disconnect()

    def _pump_soon(self) -> None:
        """Hand what a frame did to the server: the first frame of a read at once, the
        frames that arrived with it together when the read is done (one agent wake-up,
        one write). A frame alone in its read (audio at real-time rates) is pumped once."""
        due = self._pump_due
        if not due:
            self.hooks.pump(self)
            self._pump_due = 1
            self.loop.call_soon(self._pump_now)
        elif due == 1:
            self._pump_due = 2  # more frames after the first: pumped when the read is done

    def _pump_now(self) -> None:
        more = self._pump_due == 2
        self._pump_due = 0
        if more:
            self.hooks.pump(self)

    def on_ws_disconnected(self, transport: WSTransport) -> None:
        self.closed = True
        for handle in (self._timer, self._stalled, self._throttled):
            if handle is not None:
                handle.cancel()
        self._timer = self._stalled = self._throttled = None
        self.hooks.closed(self)
        if self.meter is not None:
            self.meter.disconnected()

    def pause_writing(self) -> None:
        """Above the high-water mark: audio is dropped, and the peer has ``write_timeout``
        to read before the connection is aborted."""
        self._paused = True
        if self.meter is not None:
            self.meter.write_paused()
        if self._stalled is None:
            self._stalled = self.loop.call_later(self.limits.write_timeout, self._not_reading)

    def resume_writing(self) -> None:
        self._paused = False
        if self._stalled is not None:
            self._stalled.cancel()
            self._stalled = None

    def _not_reading(self) -> None:
        self._stalled = None
        if self._paused:
            log.info(
                "aborted a connection that read nothing for %g s; its session can resume",
                self.limits.write_timeout,
            )
            if self.meter is not None:
                self.meter.aborted("timeout")
            self._abort()

    # -- reading: the budget --

    def _throttle(self, now: float) -> None:
        """Stop reading while the connection's read budget is spent (budget.py)."""
        readable_at = self.protocol.readable_at()
        if readable_at > now and self._throttled is None and self.transport is not None:
            self.transport.underlying_transport.pause_reading()
            self._throttled = self.loop.call_at(readable_at, self._unthrottle)

    def _unthrottle(self) -> None:
        self._throttled = None
        if self.transport is None or self.closed:
            return
        readable_at = self.protocol.readable_at()
        if readable_at > self.loop.time():  # frames read since took it deeper in debt
            self._throttled = self.loop.call_at(readable_at, self._unthrottle)
        else:
            self.transport.underlying_transport.resume_reading()

    # -- frames --

    def _message(self, kind: WSMsgType, payload: bytes, now: float) -> None:
        text = kind == _TEXT
        if text and not payload.isascii():
            try:
                payload.decode("utf-8")
            except UnicodeDecodeError:
                self._fail(WSCloseCode.INVALID_TEXT, "text frame is not UTF-8")
                return
        meter = self.meter
        if meter is None:
            if text:
                self.protocol.receive_text(payload, now)
            else:
                self.protocol.receive_binary(payload, now)
                self._throttle(now)  # input audio is charged by its duration (budget.py)
            return
        started = perf_counter()
        if text:
            self.protocol.receive_text(payload, now)
        else:
            self.protocol.receive_binary(payload, now)
            self._throttle(now)
        meter.received(text, payload, perf_counter() - started, now)

    def _check_fragment_size(self) -> bool:
        assert self._fragments is not None
        if len(self._fragments) > self.limits.max_message_bytes:
            self._fail(WSCloseCode.MESSAGE_TOO_BIG, "message too big")
            return False
        return True

    def _fail(self, code: WSCloseCode, reason: str) -> None:
        """A WebSocket-level failure: close at once; the session parks and stays resumable."""
        self._fragments = None
        transport = self.transport
        if transport is not None and not self.closed and not self._closing:
            self._closing = True
            transport.send_close(code, reason.encode())
            transport.disconnect()

    def fail(self, code: int, reason: str) -> None:
        """Close the WebSocket at once with ``code``, without a vRT ``error`` first (the
        client reconnects and resumes, §5.1)."""
        self._fail(cast(WSCloseCode, code), reason)

    def _abort(self) -> None:
        """End the connection at once, without waiting for the peer (transport abort)."""
        self._closing = True
        if self.transport is not None and not self.closed:
            self.transport.disconnect(graceful=False)

    def write_outbox(self) -> None:
        """Write what the core has for this connection, in one write when there are
        several frames: a burst of chunks or audio costs one system call, not one each.
        Output is bounded before it is written (see the module's docstring)."""
        if self.transport is None:
            return
        outbox = self.protocol.take_outbox()
        if not outbox or self.closed or self._closing:
            return
        gate = self.gate
        if gate is not None and not gate.admit(self, outbox):
            return
        self.write_items(outbox)

    def write_items(self, outbox: list[Output]) -> None:
        """Write frames taken from the core (``write_outbox``, or a gate that held them)."""
        transport = self.transport
        if transport is None or self.closed or self._closing:
            return
        frames = self._frames
        frames.paused = self._paused
        dispatch_all(outbox, frames)  # up to a close: nothing after it is written
        parts = frames.parts
        close, frames.closing = frames.closing, None
        writer = transport.underlying_transport
        if parts:
            # Server frames are unmasked (RFC 6455 §5.1), so they are built here exactly
            # as picows builds them, and written at once.
            buffered = writer.get_write_buffer_size()
            if buffered > self.limits.max_write_buffer:
                parts.clear()
                # What it has not read stays below the bound plus one write (a resume's
                # resend at most: the kept window, max_unacked_bytes).
                log.info(
                    "aborted a connection with %d bytes it has not read; its session can resume",
                    buffered,
                )
                if self.meter is not None:
                    self.meter.aborted("buffer")
                self._abort()
                return
            writer.write(b"".join(parts) if len(parts) > 2 else parts[0] + parts[1])
            parts.clear()  # nothing of a write stays with the connection
        if self.meter is not None:
            self.meter.sent(outbox, self._paused)
        if close is not None:
            self._closing = True
            transport.send_close(cast(WSCloseCode, close.code), close.reason.encode())
            self.loop.call_later(self.limits.close_timeout, self._abort)

    # -- timers --

    def arm_timer(self) -> None:
        """Schedule the core's next deadline (heartbeat, acks, tool timeouts)."""
        deadline = self.protocol.timer_deadline()
        timer = self._timer
        if deadline is None or self.closed:
            if timer is not None:
                timer.cancel()
                self._timer = None
            return
        if timer is not None:
            # The deadline is kept beside the handle: uvloop hands back a plain Handle,
            # without when(), for a time already past.
            if self._timer_at <= deadline:
                return  # fires first; on_timer re-arms for whatever is due then
            timer.cancel()
        self._timer_at = deadline
        self._timer = self.loop.call_at(deadline, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        if self.closed:
            return
        self.protocol.on_timer(self.loop.time())
        self.hooks.pump(self)
