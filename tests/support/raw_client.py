"""A raw vRT WebSocket client for tests, on the ``websockets`` library.

It speaks the protocol by hand: :meth:`RawClient.send` puts exactly what it is given on
the wire (a dict as compact JSON text, a str as a text frame, bytes as a binary frame),
so tests can send anything, valid or not. What the server sends is decoded with
:func:`vrt.protocol.codec.decode_server` (so every server message is also checked
against the schemas) or, for binary frames, parsed as an
:class:`~vrt.protocol.frames.AudioFrame`. Every frame in both directions is kept in
:attr:`RawClient.log`, which assertion messages print.

A background task reads the socket into a queue, so frames are never lost between
calls, and records how the connection closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, TypeAlias, TypeVar

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from vrt.protocol.codec import Decoded, Invalid, decode_server
from vrt.protocol.frames import AudioFrame, parse_frame
from vrt.protocol.messages import Message, Ready, ServerMessage

__all__ = ["Frame", "Item", "Kind", "NoFrame", "RawClient", "ServerClosed"]

#: What :meth:`RawClient.recv` returns: a decoded control message or an audio frame.
Item: TypeAlias = Decoded[ServerMessage] | AudioFrame
#: A message type name (``"turn.state"``) or class (``TurnState``).
Kind: TypeAlias = str | type[Message]

T = TypeVar("T", bound=Message)

#: How many log lines an assertion message shows.
LOG_TAIL = 60


@dataclass(frozen=True, slots=True)
class Frame:
    """One WebSocket data frame: ``>`` sent by the client, ``<`` received from the server."""

    direction: Literal["<", ">"]
    data: bytes
    binary: bool
    #: For received frames: what it decoded to (Invalid when the server sent garbage).
    item: Item | Invalid | None = None

    def __str__(self) -> str:
        if self.binary:
            head = self.data[:5].hex()
            return f"{self.direction} binary {head} +{max(len(self.data) - 5, 0)} bytes"
        text = self.data.decode("utf-8", "replace")
        if len(text) > 240:
            text = text[:237] + "..."
        return f"{self.direction} {text}"


class _Closed(NamedTuple):
    code: int | None
    reason: str


class ServerClosed(AssertionError):
    """The connection closed while a frame was expected."""

    def __init__(self, code: int | None, reason: str, log: str) -> None:
        super().__init__(f"connection closed ({code} {reason!r}) while a frame was expected\n{log}")
        self.code = code
        self.reason = reason


class NoFrame(AssertionError):
    """No (matching) frame arrived in time."""


def type_name(item: Item) -> str:
    """``"audio"`` for an audio frame, else the message's ``type``."""
    if isinstance(item, AudioFrame):
        return "audio"
    return item.message.TYPE


def matches(item: Item, kind: Kind) -> bool:
    if isinstance(item, AudioFrame):
        return kind == "audio"
    if isinstance(kind, str):
        return kind == item.message.TYPE
    return isinstance(item.message, kind)


class RawClient:
    """One raw WebSocket to a vRT server. Build it with :meth:`connect`.

    :param auto_ack: acknowledge every new sequenced server message at once (§4.2).
    """

    def __init__(self, ws: ClientConnection, *, auto_ack: bool = False) -> None:
        self.ws = ws
        self.auto_ack = auto_ack
        #: Every data frame, both directions, in order.
        self.log: list[Frame] = []
        #: Every sequenced server message received, duplicates included, in arrival order.
        self.sequenced: list[Decoded[ServerMessage]] = []
        #: The bytes of the first arrival of each server seq.
        self.raw: dict[int, bytes] = {}
        #: The highest server seq received (the client's lastSeq, §4.2).
        self.last_seq = 0
        #: The seq :meth:`send_sequenced` uses next.
        self.next_seq = 1
        #: The frames the last :meth:`expect` / :meth:`until` / :meth:`closed` passed over.
        self.skipped: list[Item] = []
        self.close_info: tuple[int | None, str] | None = None
        self._bad: Invalid | None = None
        #: Server seq after which the connection is cut (see :meth:`cut_after`).
        self._cut_at: int | None = None
        self.cut = False
        self._queue: asyncio.Queue[Item | _Closed] = asyncio.Queue()
        self._reader = asyncio.get_running_loop().create_task(self._read())

    @classmethod
    async def connect(cls, url: str, *, auto_ack: bool = False) -> RawClient:
        ws = await connect(
            url,
            compression=None,
            ping_interval=None,
            max_size=None,
            open_timeout=5,
            close_timeout=1,
        )
        return cls(ws, auto_ack=auto_ack)

    # -- log --

    def format_log(self, last: int = LOG_TAIL) -> str:
        frames = self.log[-last:]
        skipped = len(self.log) - len(frames)
        lines = [f"  ... {skipped} earlier frames"] if skipped else []
        lines.extend(f"  {frame}" for frame in frames)
        if self.close_info is not None:
            lines.append(f"  closed {self.close_info}")
        return "frame log:\n" + "\n".join(lines)

    # -- reading --

    async def _read(self) -> None:
        try:
            async for data in self.ws:
                if self.cut:
                    continue  # already parsed, but never reached the "application"
                item = self._received(data)
                if item is None:
                    continue
                self._queue.put_nowait(item)
                cut_at = self._cut_at
                if cut_at is not None and isinstance(item, Decoded) and item.seq >= cut_at:
                    self.cut = True
                    self.abort()
                    continue
                if self.auto_ack and isinstance(item, Decoded) and item.seq:
                    with contextlib.suppress(ConnectionClosed):
                        await self.ack()
        except ConnectionClosed:
            pass
        finally:
            self.close_info = (self.ws.close_code, self.ws.close_reason or "")
            self._queue.put_nowait(_Closed(*self.close_info))

    def _received(self, data: str | bytes) -> Item | None:
        if isinstance(data, bytes):
            frame = parse_frame(data, "client")
            self.log.append(Frame("<", data, True, frame))
            if isinstance(frame, Invalid):
                return None  # §8.1: a client drops a malformed frame; the log shows it
            return frame
        raw = data.encode()
        decoded = decode_server(raw)
        self.log.append(Frame("<", raw, False, decoded))
        if isinstance(decoded, Invalid):
            # Kept in the log; recv() reports it so a test fails loudly.
            self._bad = decoded
            return None
        if decoded.seq:
            self.sequenced.append(decoded)
            self.raw.setdefault(decoded.seq, raw)
            self.last_seq = max(self.last_seq, decoded.seq)
        return decoded

    def _check_valid(self) -> None:
        if self._bad is not None:
            raise AssertionError(
                f"the server sent an invalid message: {self._bad}\n{self.format_log()}"
            )

    async def recv(self, timeout: float = 2.0) -> Item:
        """The next frame from the server: a decoded control message (seq and message)
        or an audio frame. Raises :class:`ServerClosed` once the connection is closed."""
        try:
            got = await asyncio.wait_for(self._queue.get(), timeout)
        except TimeoutError:
            self._check_valid()
            raise NoFrame(f"no frame within {timeout} s\n{self.format_log()}") from None
        self._check_valid()
        if isinstance(got, _Closed):
            self._queue.put_nowait(got)  # every later recv() sees the close too
            raise ServerClosed(got.code, got.reason, self.format_log())
        return got

    async def until(self, done: Callable[[Item], bool], timeout: float = 2.0) -> list[Item]:
        """Frames up to and including the first for which ``done`` is true."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        items: list[Item] = []
        self.skipped = items
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise NoFrame(f"no matching frame within {timeout} s\n{self.format_log()}")
            try:
                item = await self.recv(remaining)
            except NoFrame:
                raise NoFrame(
                    f"no matching frame within {timeout} s\n{self.format_log()}"
                ) from None
            items.append(item)
            if done(item):
                self.skipped = items[:-1]
                return items

    async def expect(self, kind: Kind, timeout: float = 2.0) -> Decoded[ServerMessage]:
        """The next control message of ``kind``; frames before it are in :attr:`skipped`."""
        items = await self.until(lambda item: matches(item, kind), timeout)
        found = items[-1]
        assert isinstance(found, Decoded)
        return found

    async def expect_message(self, cls: type[T], timeout: float = 2.0) -> T:
        """Like :meth:`expect`, returning the typed message."""
        found = await self.expect(cls, timeout)
        assert isinstance(found.message, cls)
        return found.message

    async def closed(self, timeout: float = 2.0) -> tuple[int | None, str]:
        """Wait for the connection to close; returns its close ``(code, reason)`` (None
        when it ended without a close frame). Frames before are in :attr:`skipped`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        self.skipped = []
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise NoFrame(f"the connection did not close in {timeout} s\n{self.format_log()}")
            try:
                self.skipped.append(await self.recv(remaining))
            except ServerClosed as closed:
                return closed.code, closed.reason
            except NoFrame:
                continue

    async def barrier(self, timeout: float = 2.0) -> list[Item]:
        """Send ``ping`` and return every frame before its ``pong``.

        The server answers ``ping`` while it handles the frame, so everything it sent
        while handling earlier frames comes first. (An agent reacts in its own tasks:
        to see that an agent did nothing, make it do something observable next.)
        """
        await self.ping()
        items = await self.until(lambda item: matches(item, "pong"), timeout)
        return items[:-1]

    # -- sending --

    async def send(self, message: dict[str, Any] | str | bytes) -> None:
        """A dict as compact JSON text, a str as a text frame, bytes as a binary frame."""
        if isinstance(message, dict):
            message = json.dumps(message, separators=(",", ":"), ensure_ascii=False)
        if isinstance(message, str):
            self.log.append(Frame(">", message.encode(), False))
        else:
            self.log.append(Frame(">", bytes(message), True))
        await self.ws.send(message)

    async def send_transient(self, type_: str, **members: Any) -> None:
        """``{"v":1,"seq":0,"type":type_, **members}``."""
        await self.send({"v": 1, "seq": 0, "type": type_, **members})

    async def send_sequenced(self, type_: str, **members: Any) -> int:
        """A sequenced message with the next client seq; returns the seq."""
        seq = self.next_seq
        self.next_seq += 1
        await self.send({"v": 1, "seq": seq, "type": type_, **members})
        return seq

    async def text(self, text: str) -> int:
        """User text (§6.3); returns its seq."""
        return await self.send_sequenced("text", text=text)

    async def ping(self) -> None:
        await self.send_transient("ping")

    async def ack(self, up_to: int | None = None) -> None:
        """``ack`` up to ``up_to`` (default: the last server seq received)."""
        await self.send_transient("ack", upTo=self.last_seq if up_to is None else up_to)

    async def send_hello(self, **members: Any) -> None:
        """``hello`` with ``members`` (wire names: ``sessionId=``, ``resumeFrom=``...)."""
        await self.send_transient("hello", **members)

    async def hello(self, timeout: float = 2.0, **members: Any) -> Ready:
        """Send ``hello`` and return the ``ready`` that answers it."""
        await self.send_hello(**members)
        return await self.expect_message(Ready, timeout)

    # -- closing --

    def cut_after(self, seq: int) -> None:
        """Drop the connection (no close frame) as soon as server seq ``seq`` arrives:
        nothing the server sent after it is seen, wherever it was buffered."""
        self._cut_at = seq

    def abort(self) -> None:
        """Drop the TCP connection at once, without a close frame."""
        transport = self.ws.transport
        if transport is not None:
            transport.abort()

    async def close(self, code: int = 1000, reason: str = "") -> None:
        with contextlib.suppress(Exception):
            await self.ws.close(code, reason)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._reader, 2.0)
        if not self._reader.done():
            self._reader.cancel()
