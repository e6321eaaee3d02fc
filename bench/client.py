"""The load client: one cheap picows client, identical for vrt and for the baselines.

It speaks raw vRT: frames built with :func:`vrt.protocol.codec.encode`, and on receipt
only the envelope is read (``seq`` and ``type`` from their fixed places in the
canonical encoding), so its cost per frame is the same whichever server sent it. It
acknowledges as §4.2 recommends: after 32 sequenced messages, or 250 ms after the
first unacknowledged one.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
from picows import WSCloseCode, WSFrame, WSListener, WSMsgType, WSTransport, ws_connect

from vrt.protocol.codec import encode
from vrt.protocol.messages import Ack, Hello, Interrupt, Message, Ping, UserText

__all__ = ["Peer", "connect", "now_ns"]

TEXT, BINARY = WSMsgType.TEXT, WSMsgType.BINARY
ACK_AFTER = 32
ACK_DELAY = 0.25
_PREFIX = b'{"v":1,"seq":'
now_ns = time.perf_counter_ns


class Peer(WSListener):
    """One client connection. Waits are one at a time: set the target, then ``await``."""

    def __init__(self, *, ack: bool = True) -> None:
        super().__init__()
        self.tr: WSTransport | None = None
        self.loop = asyncio.get_running_loop()
        self.ack_enabled = ack
        self.seq = 0  # the client's own sequenced stream
        self.last_seq = 0  # the highest server seq received
        self._pending = 0
        self._ack_timer: asyncio.TimerHandle | None = None
        self.acks_sent = 0
        self.texts = 0  # server `text` chunks
        self.binary = 0  # binary frames
        self.idles = 0  # turn.state idle messages
        self.epoch = 0  # the newest epoch seen in turn.state (when track_epoch)
        self.track_epoch = False
        self.session_id = ""
        self.closed = False
        # targets
        self._fut: asyncio.Future[tuple[int, bytes]] | None = None
        self._want: bytes | None = None
        self._want_in: bytes | None = None
        self._text_target = 0
        self._bin_target = 0
        self._seq_target = 0
        self._idle_target = 0
        #: first arrival (perf_counter_ns) of each message type, while ``marking``
        self.marks: dict[bytes, int] = {}
        self.marking = False
        self.paused = False
        self._resume: asyncio.Future[None] | None = None

    # -- picows callbacks --

    def on_ws_connected(self, transport: WSTransport) -> None:
        self.tr = transport

    def on_ws_disconnected(self, transport: WSTransport) -> None:
        self.closed = True
        if self._resume is not None and not self._resume.done():
            self._resume.set_result(None)
        if self._ack_timer is not None:
            self._ack_timer.cancel()
        fut = self._fut
        if fut is not None and not fut.done():
            fut.set_exception(ConnectionError("the connection closed"))

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        if self._resume is not None and not self._resume.done():
            self._resume.set_result(None)

    async def writable(self) -> None:
        """Wait while the write buffer is above its high-water mark."""
        while self.paused and not self.closed:
            self._resume = self.loop.create_future()
            await self._resume

    def on_ws_frame(self, transport: WSTransport, frame: WSFrame) -> None:
        kind = frame.msg_type
        if kind == BINARY:
            self.binary += 1
            if self._bin_target and self.binary >= self._bin_target:
                self._bin_target = 0
                self._resolve(b"")
            return
        if kind != TEXT:
            return
        data = frame.get_payload_as_bytes()
        if not data.startswith(_PREFIX):
            return
        comma = data.index(b",", 13)
        seq = int(data[13:comma])
        end = data.index(b'"', comma + 9)
        kind_ = data[comma + 9 : end]
        if seq:
            self.last_seq = seq
            if self.ack_enabled:
                self._pending += 1
                if self._pending >= ACK_AFTER:
                    self.send_ack()
                elif self._ack_timer is None:
                    self._ack_timer = self.loop.call_later(ACK_DELAY, self.send_ack)
        if kind_ == b"text":
            self.texts += 1
            if self._text_target and self.texts >= self._text_target:
                self._text_target = 0
                self._resolve(data)
                return
        elif kind_ == b"turn.state":
            if self.track_epoch:
                self.epoch = max(self.epoch, int(orjson.loads(data)["epoch"]))
            if b'"state":"idle"' in data:
                self.idles += 1
                if self._idle_target and self.idles >= self._idle_target:
                    self._idle_target = 0
                    self._resolve(data)
                    return
        if self.marking and kind_ not in self.marks:
            self.marks[kind_] = now_ns()
        if self._seq_target and seq >= self._seq_target:
            self._seq_target = 0
            self._resolve(data)
        elif kind_ == self._want and (self._want_in is None or self._want_in in data):
            self._want = None
            self._resolve(data)

    # -- acks --

    def send_ack(self) -> None:
        if self._ack_timer is not None:
            self._ack_timer.cancel()
            self._ack_timer = None
        self._pending = 0
        if self.tr is not None and not self.closed:
            self.tr.send(TEXT, encode(Ack(up_to=self.last_seq), 0))
            self.acks_sent += 1

    # -- sending --

    def send_text(self, data: bytes) -> None:
        assert self.tr is not None
        self.tr.send(TEXT, data)

    def send_binary(self, data: bytes) -> None:
        assert self.tr is not None
        self.tr.send(BINARY, data)

    def sequenced(self, message: Message) -> bytes:
        """The bytes of the client's next sequenced message."""
        self.seq += 1
        return encode(message, self.seq)

    def user_text(self, text: str) -> bytes:
        return self.sequenced(UserText(text=text))

    def interrupt(self, epoch: int) -> bytes:
        return self.sequenced(Interrupt(epoch=epoch, reason="user"))

    # -- waiting --

    def _resolve(self, data: bytes) -> None:
        fut = self._fut
        if fut is not None and not fut.done():
            fut.set_result((now_ns(), data))

    def _arm(self) -> asyncio.Future[tuple[int, bytes]]:
        self._fut = fut = self.loop.create_future()
        return fut

    def expect(self, kind: bytes, containing: bytes | None = None) -> asyncio.Future[Any]:
        """A future resolved with (arrival ns, bytes) by the next message of ``kind``."""
        self._want, self._want_in = kind, containing
        return self._arm()

    def expect_texts(self, total: int) -> asyncio.Future[Any]:
        """Resolved when :attr:`texts` reaches ``total``."""
        self._text_target = total
        return self._arm()

    def expect_binary(self, total: int) -> asyncio.Future[Any]:
        self._bin_target = total
        return self._arm()

    def expect_idles(self, total: int) -> asyncio.Future[Any]:
        """Resolved when :attr:`idles` (``turn.state idle`` received) reaches ``total``."""
        if self.idles >= total:
            fut = self._arm()
            fut.set_result((now_ns(), b""))
            return fut
        self._idle_target = total
        return self._arm()

    def expect_seq(self, seq: int) -> asyncio.Future[Any]:
        self._seq_target = seq
        return self._arm()

    async def close(self) -> None:
        tr = self.tr
        if tr is None or self.closed:
            return
        tr.send_close(WSCloseCode.OK)
        tr.disconnect()
        await tr.wait_disconnected()

    def drop(self) -> None:
        """Drop the connection without a close frame."""
        if self.tr is not None and not self.closed:
            self.tr.disconnect(graceful=False)


async def connect(url: str, *, ack: bool = True) -> Peer:
    _tr, peer = await ws_connect(lambda: Peer(ack=ack), url, enable_auto_ping=False)
    assert isinstance(peer, Peer)
    return peer


async def open_session(
    url: str,
    *,
    vrt: bool,
    context: Any = None,
    ack: bool = True,
    session_id: str | None = None,
    resume_from: int = 0,
    timeout: float = 10.0,
) -> Peer:
    """Connect and send ``hello``; for vrt wait for ``ready``, for a bare server for
    the echo of the hello (one round trip either way)."""
    peer = await connect(url, ack=ack)
    if session_id is not None:
        hello = Hello(session_id=session_id, resume_from=resume_from)
    elif context is not None:
        hello = Hello(context=context)
    else:
        hello = Hello()
    fut = peer.expect(b"ready" if vrt else b"hello")
    peer.send_text(encode(hello, 0))
    _t, data = await asyncio.wait_for(fut, timeout)
    if vrt:
        peer.session_id = orjson.loads(data)["sessionId"]
    return peer


PING = encode(Ping(), 0)
