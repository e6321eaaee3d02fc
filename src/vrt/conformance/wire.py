"""Raw vRT connections for the conformance checks, on the ``websockets`` library.

The suite speaks the protocol by hand, never through the client SDK (:mod:`vrt.client`),
so that a bug there cannot hide one in the server under test. What it sends is exactly
what a check builds (a dict as compact JSON text, a str as a text frame, bytes as a
binary frame); what the server sends is decoded with the protocol core
(:func:`vrt.protocol.codec.decode_server`, :func:`vrt.protocol.frames.parse_frame`), so
every server message is also checked against the schemas.

:class:`Connection` is one WebSocket: a background task reads every frame into
:attr:`Connection.received` (nothing is ever lost between calls), a cursor walks it
(:meth:`~Connection.recv`, :meth:`~Connection.until`, :meth:`~Connection.expect`), and
every frame in both directions goes to a shared :class:`FrameLog` that a failing check
shows. A session across connections is :class:`vrt.conformance.wire_session.Session`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import time
from collections.abc import AsyncIterator, Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, Final

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from ..protocol.codec import Invalid, decode_server
from ..protocol.frames import AudioFrame, FrameKind, build_frame, parse_frame
from ..protocol.messages import ServerMessage

__all__ = [
    "Closed",
    "Connection",
    "FrameLog",
    "Incoming",
    "NoFrame",
    "Refused",
    "WireError",
    "audio_frame",
    "compact",
]

#: The largest frame the suite accepts from a server (it sends huge ones itself).
MAX_RECEIVE: Final = 64 << 20
#: How many characters of a frame a log line shows.
LOG_WIDTH: Final = 400
#: Server message types whose seq is always 0 (§4.1).
TRANSIENT: Final = frozenset({"ready", "audio.start", "ack", "pong"})


def compact(value: Any) -> str:
    """The compact JSON text of ``value`` (ASCII escapes, so any string can be sent)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=True)


def audio_frame(seq: int, payload: bytes, kind: int = FrameKind.INPUT) -> bytes:
    """One binary audio frame (§8.1) of any ``kind`` (1 is input audio)."""
    if kind in (FrameKind.INPUT, FrameKind.OUTPUT):
        return build_frame(FrameKind(kind), seq, payload)
    return bytes([kind & 0xFF]) + (seq % (1 << 32)).to_bytes(4, "big") + payload


# --- errors ---------------------------------------------------------------------------


class WireError(Exception):
    """Something the suite waited for did not happen on the wire."""


class NoFrame(WireError):
    """No (matching) frame arrived in time."""


class Closed(WireError):
    """The connection closed while a frame was expected."""

    def __init__(self, code: int | None, reason: str, waiting_for: str = "") -> None:
        shown = "without a close frame" if code is None else f"with {code} {reason!r}"
        suffix = f" while waiting for {waiting_for}" if waiting_for else ""
        super().__init__(f"the server closed the connection {shown}{suffix}")
        self.code = code
        self.reason = reason


class Refused(WireError):
    """The server answered ``hello`` with an ``error`` instead of ``ready``."""

    def __init__(self, error: Incoming) -> None:
        super().__init__(
            f"the server refused the hello: error {error.get('code')} "
            f"{error.get('message')!r} (seq {error.seq})"
        )
        self.error = error


# --- frames ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Incoming:
    """One frame the server sent, as received.

    ``type`` is the message type, ``"audio"`` for a binary frame, or ``"invalid"`` when
    the frame failed to decode (``invalid`` says why). ``seq`` is the control seq, or the
    audio seq for audio. ``data`` is the parsed JSON object of a text frame (the last
    occurrence of a duplicated member wins), whatever its validity.
    """

    conn: int
    index: int
    at: float
    raw: bytes
    binary: bool
    type: str
    seq: int
    data: dict[str, Any] | None = None
    message: ServerMessage | None = None
    audio: AudioFrame | None = None
    invalid: str | None = None

    def get(self, key: str, default: Any = None) -> Any:
        """A member of the text frame's JSON object."""
        return self.data.get(key, default) if self.data is not None else default

    @property
    def sequenced(self) -> bool:
        """A valid control message with a non-zero seq (§4.1)."""
        return not self.binary and self.type != "invalid" and self.seq > 0

    @property
    def text(self) -> str:
        return self.raw.decode("utf-8", "replace")

    def __str__(self) -> str:
        return f"#{self.conn} < {_shown(self.raw, self.binary)}"


def _shown(data: bytes, binary: bool) -> str:
    if binary:
        if len(data) < 5:
            return f"binary {data.hex() or '(empty)'} ({len(data)} bytes)"
        seq = int.from_bytes(data[1:5], "big")
        return f"binary kind={data[0]} seq={seq} payload {len(data) - 5} bytes"
    text = data.decode("utf-8", "replace")
    if len(text) > LOG_WIDTH:
        text = f"{text[: LOG_WIDTH - 40]}... ({len(data)} bytes)"
    return text


@dataclass(slots=True)
class _Line:
    at: float
    conn: int
    direction: str
    seq: int | None
    text: str

    def __str__(self) -> str:
        seq = "" if self.seq is None else f" seq={self.seq}"
        return f"{self.at:7.3f} #{self.conn} {self.direction}{seq} {self.text}"


class FrameLog:
    """Every frame of a check's connections, both directions, in order (for failures)."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.lines: list[_Line] = []

    def add(self, conn: int, direction: str, seq: int | None, text: str) -> None:
        self.lines.append(_Line(time.monotonic() - self.started, conn, direction, seq, text))

    def tail(self, last: int = 80) -> list[str]:
        lines = [str(line) for line in self.lines[-last:]]
        if len(self.lines) > last:
            lines.insert(0, f"... {len(self.lines) - last} earlier frames")
        return lines


def _seq_of(data: dict[str, Any] | None) -> int | None:
    if data is None:
        return None
    seq = data.get("seq")
    return seq if type(seq) is int else None


def _parse(raw: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


# --- connection -----------------------------------------------------------------------


class Connection:
    """One WebSocket to the server under test. Build it with :meth:`open`.

    :param auto_ack: acknowledge every new sequenced server message at once (§4.2).
    """

    def __init__(self, ws: ClientConnection, label: int, log: FrameLog, auto_ack: bool) -> None:
        self.ws = ws
        self.label = label
        self.log = log
        self.auto_ack = auto_ack
        #: Every frame the server sent on this connection, in order.
        self.received: list[Incoming] = []
        #: Index of the next frame :meth:`recv` returns.
        self.cursor = 0
        #: Called with every frame as it arrives (a :class:`Session` listens here).
        self.listeners: list[Callable[[Incoming], None]] = []
        #: The close frame the server sent: ``(code, reason)``; None while open or when
        #: the connection ended without one.
        self.close_frame: tuple[int, str] | None = None
        self.closed = asyncio.Event()
        self._signal = asyncio.Event()
        self._highest = 0
        self._reader = asyncio.get_running_loop().create_task(self._read())

    @classmethod
    async def open(
        cls, url: str, *, label: int, log: FrameLog, auto_ack: bool = False, timeout: float = 5.0
    ) -> Connection:
        ws = await connect(
            url,
            ping_interval=None,
            compression=None,
            proxy=None,
            open_timeout=timeout,
            close_timeout=1,
            max_size=MAX_RECEIVE,
            max_queue=None,
        )
        log.add(label, "--", None, f"connected to {url}")
        return cls(ws, label, log, auto_ack)

    # -- reading --

    async def _read(self) -> None:
        try:
            async for data in self.ws:
                self._arrived(data)
                if self.auto_ack and self.received and self.received[-1].sequenced:
                    seq = self.received[-1].seq
                    if seq > self._highest:
                        self._highest = seq
                        with contextlib.suppress(ConnectionClosed):
                            await self.send({"v": 1, "seq": 0, "type": "ack", "upTo": seq})
        except ConnectionClosed:
            pass
        finally:
            frame = self.ws.protocol.close_rcvd
            if frame is not None:
                self.close_frame = (int(frame.code), frame.reason)
                self.log.add(self.label, "<", None, f"close {frame.code} {frame.reason!r}")
            else:
                self.log.add(self.label, "<", None, "connection ended without a close frame")
            self.closed.set()
            self._signal.set()

    def _arrived(self, data: str | bytes) -> None:
        item = self._decode(data)
        note = f"   [INVALID: {item.invalid}]" if item.invalid and not item.binary else ""
        self.log.add(
            self.label,
            "<",
            None if item.type == "invalid" and item.binary else item.seq,
            _shown(item.raw, item.binary) + note,
        )
        self.received.append(item)
        for listener in self.listeners:
            listener(item)
        self._signal.set()

    def _decode(self, data: str | bytes) -> Incoming:
        """One frame as the suite judges it: decoded by the protocol core (audio by
        :func:`parse_frame`, text by :func:`decode_server`, schemas included)."""
        # What every frame's record has: its connection, place and arrival time.
        arrived = functools.partial(Incoming, self.label, len(self.received), time.monotonic())
        if isinstance(data, bytes):
            binary = functools.partial(arrived, raw=data, binary=True)
            frame = parse_frame(data, "client")
            if isinstance(frame, Invalid):
                return binary(type="invalid", seq=0, invalid=frame.reason)
            return binary(type="audio", seq=frame.seq, audio=frame)
        raw = data.encode("utf-8", "surrogatepass")
        parsed = _parse(raw)
        text = functools.partial(arrived, raw=raw, binary=False, data=parsed)
        decoded = decode_server(raw)
        if isinstance(decoded, Invalid):
            return text(
                type="invalid",
                seq=_seq_of(parsed) or 0,
                invalid=f"{decoded.code}: {decoded.reason}",
            )
        return text(type=decoded.message.TYPE, seq=decoded.seq, message=decoded.message)

    @property
    def close_code(self) -> int | None:
        return self.close_frame[0] if self.close_frame is not None else None

    def pending(self) -> list[Incoming]:
        """Frames received that :meth:`recv` has not returned yet."""
        return self.received[self.cursor :]

    async def recv(self, timeout: float = 2.0, waiting_for: str = "a frame") -> Incoming:
        """The next frame. Raises :class:`NoFrame` after ``timeout`` seconds and
        :class:`Closed` once the connection is closed and every frame was returned."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self.cursor >= len(self.received):
            if self.closed.is_set():
                code, reason = self.close_frame or (None, "")
                raise Closed(code, reason, waiting_for)
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise NoFrame(f"no {waiting_for} within {timeout:g} s")
            self._signal.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._signal.wait(), remaining)
        item = self.received[self.cursor]
        self.cursor += 1
        return item

    async def until(
        self, done: Callable[[Incoming], bool], timeout: float = 2.0, what: str = "a frame"
    ) -> list[Incoming]:
        """Frames up to and including the first for which ``done`` is true."""
        deadline = asyncio.get_running_loop().time() + timeout
        items: list[Incoming] = []
        while True:
            item = await self._recv_by(deadline, timeout, what)
            items.append(item)
            if done(item):
                return items

    async def _recv_by(self, deadline: float, timeout: float, what: str) -> Incoming:
        """The next frame, before the loop time ``deadline`` (``timeout`` after the
        caller began waiting, for the message)."""
        remaining = deadline - asyncio.get_running_loop().time()
        if remaining <= 0:
            raise NoFrame(f"no {what} within {timeout:g} s")
        try:
            return await self.recv(remaining, what)
        except NoFrame:
            raise NoFrame(f"no {what} within {timeout:g} s") from None

    async def expect(
        self,
        types: str | Collection[str],
        timeout: float = 2.0,
        *,
        where: Callable[[Incoming], bool] | None = None,
        skip: Collection[str] | None = None,
    ) -> Incoming:
        """The next frame of ``types`` (for which ``where`` holds, if given).

        ``skip`` None passes over anything else; otherwise only frames whose type is in
        ``skip`` may come first, and any other raises :class:`WireError`.
        """
        wanted = {types} if isinstance(types, str) else set(types)
        what = " or ".join(sorted(wanted))
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            item = await self._recv_by(deadline, timeout, what)
            if item.type in wanted and (where is None or where(item)):
                return item
            if skip is not None and item.type not in skip:
                raise WireError(f"expected {what}, got {item.type}: {item}")

    async def expect_ready(self, timeout: float = 5.0) -> Incoming:
        """The ``ready`` answering a ``hello``; :class:`Refused` when an ``error`` with
        seq 0 comes first (the hello was refused, §5.1)."""

        def decided(item: Incoming) -> bool:
            return item.type == "ready" or (item.type == "error" and item.seq == 0)

        items = await self.until(decided, timeout, "ready")
        if items[-1].type == "error":
            raise Refused(items[-1])
        return items[-1]

    async def barrier(self, timeout: float = 3.0, *, pongs: int = 1) -> list[Incoming]:
        """Send ``ping`` and return every frame before its ``pong`` (the ``pongs``-th
        pong from now, when pings are already on their way).

        A server handles frames in order, so whatever it sent while handling earlier
        frames comes first (an agent reacts in its own time, so this says nothing about
        what an agent will still do).
        """
        await self.send({"v": 1, "seq": 0, "type": "ping"})
        seen = 0

        def last_pong(item: Incoming) -> bool:
            nonlocal seen
            seen += item.type == "pong"
            return seen >= pongs

        items = await self.until(last_pong, timeout, "pong")
        return [i for i in items if i.type != "pong"]

    @contextlib.asynccontextmanager
    async def kept_alive(self, interval: float = 1.0) -> AsyncIterator[None]:
        """Ping every ``interval`` seconds meanwhile, as a client does (§4.4): a long wait
        must not end in the server's heartbeat timeout."""

        async def ping() -> None:
            with contextlib.suppress(WireError):
                while True:
                    await asyncio.sleep(interval)
                    await self.send({"v": 1, "seq": 0, "type": "ping"})

        task = asyncio.get_running_loop().create_task(ping())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def settle(self, quiet: float = 0.3) -> list[Incoming]:
        """Every frame the server sends before the pong of a ``ping`` sent now, and for
        ``quiet`` seconds after it: what the frames sent so far made it do."""
        return await self.barrier() + await self.quiet(quiet)

    async def quiet(self, seconds: float) -> list[Incoming]:
        """Every frame that arrives within ``seconds`` (stops early on a close)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        items: list[Incoming] = []
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return items
            try:
                items.append(await self.recv(remaining))
            except NoFrame:
                return items
            except Closed:
                return items

    async def wait_closed(self, timeout: float = 3.0) -> tuple[int | None, str]:
        """Wait until the server closes; its close ``(code, reason)``, code None when the
        connection ended without a close frame. Frames before it stay readable."""
        try:
            await asyncio.wait_for(self.closed.wait(), timeout)
        except TimeoutError:
            raise NoFrame(f"the connection was not closed within {timeout:g} s") from None
        return self.close_frame or (None, "")

    # -- sending --

    async def send(self, message: Mapping[str, Any] | str | bytes) -> None:
        """A mapping as compact JSON text, a str as a text frame, bytes as a binary frame."""
        if isinstance(message, Mapping):
            message = compact(dict(message))
        if isinstance(message, str):
            raw = message.encode("utf-8", "replace")
            self.log.add(self.label, ">", _seq_of(_parse(raw)), _shown(raw, False))
        else:
            self.log.add(self.label, ">", None, _shown(bytes(message), True))
        try:
            await self.ws.send(message)
        except ConnectionClosed:
            code, reason = self.close_frame or (None, "")
            raise Closed(code, reason, "a send to complete") from None

    # -- closing --

    def abort(self) -> None:
        """Drop the TCP connection at once, without a close frame (a lost connection)."""
        self.log.add(self.label, "--", None, "connection dropped by the suite")
        transport = self.ws.transport
        if transport is not None:
            transport.abort()

    async def close(self, code: int = 1000) -> None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.ws.close(code), 2.0)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._reader, 2.0)
        if not self._reader.done():
            self._reader.cancel()
            with contextlib.suppress(BaseException):
                await self._reader
