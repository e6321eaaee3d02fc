"""Prototypes of proposed ``src/`` changes, applied to the vrt bench server process only.

Off by default: ``python -m bench --experiment NAME[,NAME...]`` patches the server under
test so that a proposal's effect can be measured side by side before anyone edits
``src/``. They are measurement aids, not fixes: each one states the change it stands for.

``ack-now``
    The server acknowledges at the end of the loop iteration that received a sequenced
    message, instead of 250 ms later (``streams.ACK_DELAY = 0``; §4.2 allows sooner).
``shared-decoder``
    One :class:`~vrt.protocol.codec.Decoder` per (sender, limits) for every connection,
    instead of one built per connection in ``ServerConnection.__init__`` (the decoder
    holds no session state; each one costs ~5.5 KB and ~7 µs).
``light-queue``
    ``AgentSession`` keeps its events in a list with one waiter future instead of an
    ``asyncio.Queue`` (four deques, ~3.3 KB per session).
``tone-cache``
    The scripted agent's 200 ms echo tone is computed once per format, not on every
    ``echo`` (2.8 ms of pure-Python ``math.sin`` on the event loop each time).
``coalesce``
    One flush per connection per loop iteration (connection events and agent writes are
    deferred with ``call_soon``), and a flush of several frames is written to the socket
    with one ``write()`` (frames built in place: server frames are unmasked), instead of
    one ``transport.send`` (one ``send(2)``) per message.
``fast-frames``
    ``parse_frame`` without constructing the ``FrameKind`` enum per frame (~1 µs).
"""

from __future__ import annotations

import asyncio
import functools
import struct
from collections.abc import Callable
from typing import Any

__all__ = ["EXPERIMENTS", "apply"]


def _ack_now() -> None:
    from vrt.protocol import streams

    streams.ACK_DELAY = 0.0  # type: ignore[misc]


def _shared_decoder() -> None:
    from vrt.protocol import codec, server

    @functools.cache
    def shared(sender: Any, limits: Any = codec.DEFAULT_LIMITS) -> codec.Decoder:
        return codec.Decoder(sender, limits)

    server.Decoder = shared  # type: ignore[misc,assignment]


class _LightQueue:
    """What AgentSession uses of asyncio.Queue: put_nowait and get."""

    __slots__ = ("_items", "_waiter")

    def __init__(self) -> None:
        self._items: list[Any] = []
        self._waiter: asyncio.Future[None] | None = None

    def put_nowait(self, item: Any) -> None:
        self._items.append(item)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def get(self) -> Any:
        while not self._items:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        items = self._items
        if len(items) == 1:
            self._items = []
            return items[0]
        return items.pop(0)


def _light_queue() -> None:
    from vrt.agents import base

    original = base.AgentSession.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self._queue = _LightQueue()

    base.AgentSession.__init__ = __init__  # type: ignore[method-assign]


def _tone_cache() -> None:
    from vrt.agents import scripted

    scripted.tone = functools.lru_cache(maxsize=64)(scripted.tone)


def _ws_header(opcode: int, size: int) -> bytes:
    if size < 126:
        return bytes((opcode, size))
    if size < 1 << 16:
        return struct.pack("!BBH", opcode, 126, size)
    return struct.pack("!BBQ", opcode, 127, size)


def _coalesce() -> None:
    from vrt.protocol.server import SendBinary, SendText
    from vrt.server import app, websocket

    pump, flush_session, flush = (
        app.VrtServer._pump,
        app.VrtServer._flush_session,
        websocket.ClientConnection.flush,
    )

    def deferred_pump(self: Any, connection: Any) -> None:
        if connection.__dict__.get("_pump_due"):
            return
        connection._pump_due = True
        connection.loop.call_soon(run_pump, self, connection)

    def run_pump(self: Any, connection: Any) -> None:
        connection._pump_due = False
        pump(self, connection)

    def deferred_flush_session(self: Any, session: Any) -> None:
        due = self.__dict__.setdefault("_flush_due", set())
        if session in due:
            return
        due.add(session)
        asyncio.get_running_loop().call_soon(run_flush_session, self, session)

    def run_flush_session(self: Any, session: Any) -> None:
        self._flush_due.discard(session)
        flush_session(self, session)

    def coalesced_flush(self: Any) -> None:
        core = self.core
        outbox = core._outbox
        if self.transport is None or self.closed or len(outbox) < 2:
            flush(self)
            return
        if any(type(item) is not SendText and type(item) is not SendBinary for item in outbox):
            flush(self)  # a close among them: the original path
            return
        outbox = core.take_outbox()
        parts: list[bytes] = []
        for item in outbox:
            if type(item) is SendText:
                parts.append(_ws_header(0x81, len(item.data)))
                parts.append(item.data)
            elif not self._paused:
                parts.append(_ws_header(0x82, len(item.data)))
                parts.append(item.data)
        self.transport.underlying_transport.write(b"".join(parts))

    app.VrtServer._pump = deferred_pump  # type: ignore[method-assign]
    app.VrtServer._flush_session = deferred_flush_session  # type: ignore[method-assign]
    websocket.ClientConnection.flush = coalesced_flush  # type: ignore[method-assign]


def _fast_frames() -> None:
    from vrt.protocol import frames, server

    header = struct.Struct(">BI")
    audio_frame, original = frames.AudioFrame, frames.parse_frame
    kinds = {"server": (1, frames.FrameKind.INPUT), "client": (2, frames.FrameKind.OUTPUT)}

    def parse_frame(data: bytes, receiver: Any) -> Any:
        if len(data) >= 5:
            kind, seq = header.unpack_from(data)
            accepted, member = kinds[receiver]
            if kind == accepted:
                return audio_frame(member, seq, data[5:])
        return original(data, receiver)

    server.parse_frame = parse_frame


EXPERIMENTS: dict[str, Callable[[], None]] = {
    "ack-now": _ack_now,
    "shared-decoder": _shared_decoder,
    "light-queue": _light_queue,
    "tone-cache": _tone_cache,
    "coalesce": _coalesce,
    "fast-frames": _fast_frames,
}


def apply(names: list[str]) -> None:
    for name in names:
        EXPERIMENTS[name]()
