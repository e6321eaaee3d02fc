"""The WebSocket edge of the server: picows frames in, protocol core, frames out.

picows hands over raw frames, so this layer does what a WebSocket library would
otherwise do for us: it joins fragmented messages, bounds their size (close 1009),
checks that text is UTF-8 (close 1007, messages.md), answers pings itself so that
they count as frames for the heartbeat (§4.4) and completes the close handshake.
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
from typing import Final, cast

from picows import WSCloseCode, WSFrame, WSListener, WSMsgType, WSTransport

from ..protocol.outputs import Close, SendBinary, SendText
from ..protocol.server import ServerConfig, ServerConnection

__all__ = ["ClientConnection", "ConnectionHooks"]

log = logging.getLogger("vrt.server")

#: How long a closing connection waits for the peer's close frame before dropping it.
CLOSE_TIMEOUT: Final = 2.0
#: Buffered output beyond which a slow reader's connection is closed; its session parks
#: and resumes with nothing lost, since sequenced messages are kept (§4.1).
MAX_WRITE_BUFFER: Final = 8 << 20

_TEXT: Final = WSMsgType.TEXT
_BINARY: Final = WSMsgType.BINARY
_FIN_TEXT: Final = 0x81
_FIN_BINARY: Final = 0x82
_SHORT: Final = struct.Struct("!BB")
_MEDIUM: Final = struct.Struct("!BBH")
_LONG: Final = struct.Struct("!BBQ")


def _header(first: int, size: int) -> bytes:
    """The header of an unmasked, unfragmented frame (RFC 6455 §5.2)."""
    if size < 126:
        return _SHORT.pack(first, size)
    if size < 1 << 16:
        return _MEDIUM.pack(first, 126, size)
    return _LONG.pack(first, 127, size)


@dataclass(frozen=True, slots=True)
class ConnectionHooks:
    """What a connection tells the server that owns it."""

    #: The WebSocket is open.
    opened: Callable[[ClientConnection], None]
    #: The protocol core ran for this connection: act on its events, write its frames.
    pump: Callable[[ClientConnection], None]
    #: The WebSocket is gone.
    closed: Callable[[ClientConnection], None]


class ClientConnection(WSListener):
    """One client WebSocket."""

    def __init__(
        self, config: ServerConfig, max_message_bytes: int, hooks: ConnectionHooks
    ) -> None:
        super().__init__()
        self.hooks = hooks
        self.max_message_bytes = max_message_bytes
        self.loop = asyncio.get_running_loop()
        self.protocol = ServerConnection(config, self.loop.time())
        self.transport: WSTransport | None = None
        self.closed = False
        self._fragments: bytearray | None = None
        self._fragment_type = _TEXT
        self._timer: asyncio.Handle | None = None
        self._timer_at = 0.0
        self._paused = False
        self._pump_due = False

    # -- picows callbacks --

    def on_ws_connected(self, transport: WSTransport) -> None:
        self.transport = transport
        self.hooks.opened(self)
        self.arm_timer()

    def on_ws_frame(self, transport: WSTransport, frame: WSFrame) -> None:
        kind = frame.msg_type
        if self.closed or (transport.is_close_frame_sent and kind != WSMsgType.CLOSE):
            return  # a closing connection acts on nothing more (e.g. a frame refused with 1009)
        if kind in (_TEXT, _BINARY):
            if frame.fin:
                self._message(kind, frame.get_payload_as_bytes())
            else:
                self._fragment_type = kind
                self._fragments = bytearray(frame.get_payload_as_memoryview())
                self._check_fragment_size()
        elif kind == WSMsgType.CONTINUATION:
            if self._fragments is None:
                self._fail(WSCloseCode.PROTOCOL_ERROR, "continuation without a message")
                return
            self._fragments += frame.get_payload_as_memoryview()
            if self._check_fragment_size() and frame.fin:
                data, self._fragments = bytes(self._fragments), None
                self._message(self._fragment_type, data)
        elif kind == WSMsgType.PING:
            transport.send_pong(frame.get_payload_as_bytes())
            self.protocol.frame_received(self.loop.time())
        elif kind == WSMsgType.PONG:
            self.protocol.frame_received(self.loop.time())
        elif kind == WSMsgType.CLOSE:
            # Echo the peer's close (RFC 6455 §5.5.1); the session parks on disconnect.
            if not transport.is_close_frame_sent:
                transport.send_close(frame.get_close_code())
            transport.disconnect()
            return
        self._pump_soon()

    def _pump_soon(self) -> None:
        """Hand what a frame did to the server: the first frame of a read at once, the
        frames that arrived with it together when the read is done (one agent wake-up,
        one write)."""
        if not self._pump_due:
            self.hooks.pump(self)
            self._pump_due = True
            self.loop.call_soon(self._pump_now)

    def _pump_now(self) -> None:
        self._pump_due = False
        self.hooks.pump(self)

    def on_ws_disconnected(self, transport: WSTransport) -> None:
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.hooks.closed(self)

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False

    # -- frames --

    def _message(self, kind: WSMsgType, payload: bytes) -> None:
        now = self.loop.time()
        if kind == _TEXT:
            if not payload.isascii():
                try:
                    payload.decode("utf-8")
                except UnicodeDecodeError:
                    self._fail(WSCloseCode.INVALID_TEXT, "text frame is not UTF-8")
                    return
            self.protocol.receive_text(payload, now)
        else:
            self.protocol.receive_binary(payload, now)

    def _check_fragment_size(self) -> bool:
        assert self._fragments is not None
        if len(self._fragments) > self.max_message_bytes:
            self._fail(WSCloseCode.MESSAGE_TOO_BIG, "message too big")
            return False
        return True

    def _fail(self, code: WSCloseCode, reason: str) -> None:
        """A WebSocket-level failure: close at once; the session parks and stays resumable."""
        self._fragments = None
        if self.transport is not None and not self.closed:
            self.transport.send_close(code, reason.encode())
            self.transport.disconnect()

    def write_outbox(self) -> None:
        """Write what the core has for this connection, in one write when there are
        several frames: a burst of chunks or audio costs one system call, not one each."""
        transport = self.transport
        if transport is None:
            return
        outbox = self.protocol.take_outbox()
        if not outbox or self.closed or transport.is_close_frame_sent:
            return
        if len(outbox) == 1 and type(outbox[0]) is SendText:
            transport.send(_TEXT, outbox[0].data)
            return
        parts: list[bytes] = []
        for item in outbox:
            if type(item) is SendText:
                parts += (_header(_FIN_TEXT, len(item.data)), item.data)
            elif type(item) is SendBinary:
                if not self._paused:  # realtime audio: late is worse than lost (§5.4)
                    parts += (_header(_FIN_BINARY, len(item.data)), item.data)
            elif isinstance(item, Close):
                if parts:
                    transport.underlying_transport.write(b"".join(parts))
                    parts = []
                transport.send_close(cast(WSCloseCode, item.code), item.reason.encode())
                self.loop.call_later(CLOSE_TIMEOUT, transport.disconnect)
                return
        if parts:
            # Server frames are unmasked (RFC 6455 §5.1), so they are built here exactly
            # as picows builds them, and written at once.
            transport.underlying_transport.write(b"".join(parts))
        if (
            self._paused
            and transport.underlying_transport.get_write_buffer_size() > MAX_WRITE_BUFFER
        ):
            log.warning("closing a connection that does not read what it is sent")
            self._fail(WSCloseCode.POLICY_VIOLATION, "not reading")

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
