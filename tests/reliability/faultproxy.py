"""A byte-level fault-injecting TCP proxy for the reliability tests.

It sits between a client and a server on 127.0.0.1 and forwards raw bytes; it does not
speak WebSocket except to find where a connection's first client frame (the ``hello``)
ends. Each connection through it (a *link*) gets its faults from a :class:`FaultPlan`
drawn from a seed, so a failing run is replayed by drawing the same plan again:

* ``split``: bytes are forwarded in pieces of 1..N bytes, yielding to the event loop
  between pieces, so that frames arrive split across many reads;
* ``delay``: each piece is held up to D ms before it is forwarded (order is kept);
* ``cut``: once K bytes have passed in one direction, the first K are forwarded (often
  ending inside a frame) and both TCP connections are aborted (RST);
* ``half-open``: once K bytes have passed in one direction, that direction is silently
  swallowed while both sockets stay open: only a heartbeat can tell (§4.4);
* ``orphan`` (a server-side connection replaced mid-resume): on a resume, once K bytes
  of the server's answer (``ready`` and resends) have passed, the client's side is
  aborted but the server's side is left open and bound to the session, so the client's
  next resume must replace it (close 4000, §5.4);
* ``ghost`` (likewise): on a resume, as soon as the client's ``hello`` has passed, the
  proxy replays the client's upgrade request and ``hello`` on a second server
  connection, which replaces the client's own server-side connection mid-resume.

Offsets count the bytes of a link from its start (so a cut may land inside the HTTP
upgrade), except for links opened before :meth:`FaultProxy.arm`, which count from the
moment of arming. Nothing is injected before arming or after :meth:`FaultProxy.disarm`
(a fault already in effect, such as a half-open link, stays until the link ends).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import struct
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Final, Literal

__all__ = ["Direction", "FaultPlan", "FaultProxy", "LinkFaults"]

Direction = Literal["c2s", "s2c"]

#: The most bytes a link keeps while it looks for the end of the client's hello frame.
_HELLO_SCAN_LIMIT: Final = 1 << 16


@dataclass(frozen=True, slots=True)
class LinkFaults:
    """The faults of one link. Offsets are byte counts in their direction."""

    split: int = 0
    delay_ms: float = 0.0
    cut: tuple[Direction, int] | None = None
    half_open: tuple[Direction, int] | None = None
    orphan: int | None = None
    ghost: bool = False

    def describe(self) -> str:
        parts = []
        if self.split:
            parts.append(f"split<={self.split}")
        if self.delay_ms:
            parts.append(f"delay<={self.delay_ms:g}ms")
        if self.cut:
            parts.append(f"cut {self.cut[0]}@{self.cut[1]}")
        if self.half_open:
            parts.append(f"half-open {self.half_open[0]}@{self.half_open[1]}")
        if self.orphan is not None:
            parts.append(f"orphan@{self.orphan}")
        if self.ghost:
            parts.append("ghost")
        return ", ".join(parts) or "clean"

    @property
    def disruptive(self) -> bool:
        return bool(self.cut or self.half_open or self.orphan is not None or self.ghost)


def _offset(rng: random.Random, high: int) -> int:
    """A byte offset, log-uniform in [1, high]: small and large ones equally likely."""
    return max(1, int(math.exp(rng.uniform(0.0, math.log(high)))))


@dataclass(slots=True)
class FaultPlan:
    """The faults of links 0, 1, 2, ... in order; links past the list are clean."""

    links: list[LinkFaults] = field(default_factory=list)

    def for_link(self, index: int) -> LinkFaults:
        return self.links[index] if index < len(self.links) else LinkFaults()

    def describe(self) -> str:
        return "; ".join(f"link {i}: {f.describe()}" for i, f in enumerate(self.links))

    @property
    def disruptions(self) -> int:
        return sum(1 for link in self.links if link.disruptive)

    @classmethod
    def draw(cls, rng: random.Random, *, max_links: int = 5) -> FaultPlan:
        """A random plan: 1 to ``max_links`` links, most of them disrupted."""
        links: list[LinkFaults] = []
        for index in range(rng.randint(1, max_links)):
            faults = LinkFaults(
                split=rng.choice([0, 0, 0, 2, 29, 257]),
                delay_ms=rng.choice([0.0, 0.0, 0.0, 2.0, 15.0]),
            )
            roll = rng.random()
            direction: Direction = "s2c" if rng.random() < 0.6 else "c2s"
            high = 12_000 if direction == "s2c" else 2_000
            if roll < 0.45:
                faults = replace(faults, cut=(direction, _offset(rng, high)))
            elif roll < 0.60:
                faults = replace(faults, half_open=(direction, _offset(rng, high)))
            elif roll < 0.72 and index > 0:
                faults = replace(faults, orphan=rng.randint(1, 600))
            elif roll < 0.84 and index > 0:
                faults = replace(faults, ghost=True)
            links.append(faults)
        return cls(links)


class _Link:
    """One client connection through the proxy and its server-side connection."""

    def __init__(
        self,
        proxy: FaultProxy,
        index: int,
        faults: LinkFaults,
        client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        server: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        armed: bool,
    ) -> None:
        self.proxy = proxy
        self.index = index
        self.faults = faults
        self.client_reader, self.client_writer = client
        self.server_reader, self.server_writer = server
        self.rng = random.Random(f"{proxy.seed}:{index}")
        #: Bytes passed in each direction since the link was armed.
        self.passed: dict[Direction, int] = {"c2s": 0, "s2c": 0}
        self.armed = armed
        self.swallowing: set[Direction] = set()
        self.client_gone = False
        self.orphaned = False
        self.ended = False
        self._s2c_body_start: int | None = None  # where the server's HTTP answer ended
        #: The server process that answered the upgrade, when a proxy in front of
        #: several names it (the ``X-Vrt-Server`` header of tests/deploy/fleet.py).
        self.served_by: str | None = None
        self._scan = bytearray()  # the client's upgrade request and first frame
        self._scanned = False

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        pumps: tuple[tuple[Direction, asyncio.StreamReader, asyncio.StreamWriter], ...] = (
            ("c2s", self.client_reader, self.server_writer),
            ("s2c", self.server_reader, self.client_writer),
        )
        for direction, reader, writer in pumps:
            self.proxy.track(loop.create_task(self._pump(direction, reader, writer)))

    def arm(self) -> None:
        if not self.armed:
            self.armed = True
            self.passed = {"c2s": 0, "s2c": 0}

    def abort(self) -> None:
        for writer in (self.client_writer, self.server_writer):
            writer.transport.abort()
        self.ended = True

    # -- pumping --

    async def _pump(
        self, direction: Direction, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                await self._forward(direction, data, writer)
        except (ConnectionError, OSError, RuntimeError):
            pass
        finally:
            self._pump_ended(direction, writer)

    def _pump_ended(self, direction: Direction, writer: asyncio.StreamWriter) -> None:
        if direction == "s2c" and self.orphaned:
            return  # the client side is already gone; the server side just ended
        if direction in self.swallowing:
            return  # half-open: the end is swallowed too, as by a dead network path
        if direction == "c2s" and self.orphaned:
            return  # keep the server side of an orphan open
        self.ended = True
        with contextlib.suppress(Exception):
            writer.close()

    async def _forward(
        self, direction: Direction, data: bytes, writer: asyncio.StreamWriter
    ) -> None:
        if direction == "c2s" and not self._scanned:
            self._scan_hello(data)
        if direction == "s2c" and self._s2c_body_start is None:
            self._note_http_answer(data)
        while data:
            if direction in self.swallowing or (direction == "s2c" and self.orphaned):
                self.passed[direction] += len(data)
                return
            trigger, at = self._next_trigger(direction)
            room = len(data) if at is None else max(0, at - self.passed[direction])
            head, data = data[:room], data[room:]
            await self._write(direction, head, writer)
            if trigger is None or (at is not None and self.passed[direction] < at):
                continue
            self._fire(trigger, direction)
            if self.ended:
                return

    async def _write(self, direction: Direction, data: bytes, writer: asyncio.StreamWriter) -> None:
        faults = self.faults
        split = faults.split if self.armed else 0
        delay = faults.delay_ms if self.armed else 0.0
        if delay and data:
            # One delay per read: latency, not a bandwidth limit.
            await asyncio.sleep(self.rng.uniform(0.0, delay) / 1000)
        view = memoryview(data)
        while view:
            size = self.rng.randint(1, split) if split else len(view)
            piece, view = view[:size], view[size:]
            if self.ended or (direction == "s2c" and self.orphaned):
                return
            writer.write(bytes(piece))
            self.passed[direction] += len(piece)
            await writer.drain()
            if split:
                await asyncio.sleep(0)

    # -- faults --

    def _next_trigger(self, direction: Direction) -> tuple[str | None, int | None]:
        """The next fault of ``direction`` and the offset where it fires."""
        if not (self.armed and self.proxy.armed):
            return None, None
        faults = self.faults
        candidates: list[tuple[int, str]] = []
        if faults.cut and faults.cut[0] == direction and "cut" not in self.proxy.fired_on(self):
            candidates.append((faults.cut[1], "cut"))
        if (
            faults.half_open
            and faults.half_open[0] == direction
            and "half-open" not in self.proxy.fired_on(self)
        ):
            candidates.append((faults.half_open[1], "half-open"))
        if (
            faults.orphan is not None
            and direction == "s2c"
            and self._s2c_body_start is not None
            and "orphan" not in self.proxy.fired_on(self)
        ):
            candidates.append((self._s2c_body_start + faults.orphan, "orphan"))
        if not candidates:
            return None, None
        at, trigger = min(candidates)
        return trigger, at

    def _fire(self, trigger: str, direction: Direction) -> None:
        self.proxy.record(self, trigger, f"{trigger} {direction} at byte {self.passed[direction]}")
        if trigger == "cut":
            self.abort()
        elif trigger == "half-open":
            self.swallowing.add(direction)
        elif trigger == "orphan":
            if self._resuming():
                self.orphaned = True
                self.client_writer.transport.abort()
            else:
                self.proxy.note(f"link {self.index}: orphan skipped (not a resume)")

    def _note_http_answer(self, data: bytes) -> None:
        # Counted from the start of the link, which is where an orphan offset starts.
        head = self.passed["s2c"]
        end = data.find(b"\r\n\r\n")
        if end >= 0:
            self._s2c_body_start = head + end + 4
            for line in data[:end].split(b"\r\n"):
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"x-vrt-server":
                    self.served_by = value.strip().decode("latin-1")

    def _resuming(self) -> bool:
        return b'"sessionId"' in self._hello_payload()

    def _hello_payload(self) -> bytes:
        """The unmasked payload of the client's first frame, once it was all seen."""
        found = _first_frame(bytes(self._scan))
        return found[1] if found is not None else b""

    def _scan_hello(self, data: bytes) -> None:
        self._scan += data
        found = _first_frame(bytes(self._scan))
        if found is None:
            if len(self._scan) > _HELLO_SCAN_LIMIT:
                self._scanned = True
            return
        self._scanned = True
        end, payload = found
        del self._scan[end:]
        if (
            self.faults.ghost
            and self.armed
            and self.proxy.armed
            and b'"sessionId"' in payload
            and "ghost" not in self.proxy.fired_on(self)
        ):
            self.proxy.record(self, "ghost", "ghost resume replayed on a second server connection")
            self.proxy.spawn_ghost(bytes(self._scan))


def _first_frame(data: bytes) -> tuple[int, bytes] | None:
    """Where the first WebSocket frame after the HTTP request ends, and its payload."""
    start = data.find(b"\r\n\r\n")
    if start < 0:
        return None
    pos = start + 4
    if len(data) < pos + 2:
        return None
    masked = data[pos + 1] & 0x80
    size = data[pos + 1] & 0x7F
    pos += 2
    if size == 126:
        if len(data) < pos + 2:
            return None
        (size,) = struct.unpack_from("!H", data, pos)
        pos += 2
    elif size == 127:
        if len(data) < pos + 8:
            return None
        (size,) = struct.unpack_from("!Q", data, pos)
        pos += 8
    mask = b""
    if masked:
        if len(data) < pos + 4:
            return None
        mask = data[pos : pos + 4]
        pos += 4
    if len(data) < pos + size:
        return None
    body = data[pos : pos + size]
    if mask:
        body = bytes(b ^ mask[i % 4] for i, b in enumerate(body))
    return pos + size, body


class FaultProxy:
    """The proxy: ``url = await proxy.start()``; clients connect to ``url``."""

    def __init__(self, target: tuple[str, int], plan: FaultPlan, seed: int = 0) -> None:
        host, _ = target
        if host not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError("the fault proxy only forwards to loopback addresses")
        self.target = target
        self.plan = plan
        self.seed = seed
        self.armed = False
        self.links: list[_Link] = []
        #: What happened, in order, for a failing run's report.
        self.log: list[str] = []
        self.fired: Counter[str] = Counter()
        self._fired_on: dict[int, set[str]] = {}
        self._ghosts: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None
        self.url = ""

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"ws://127.0.0.1:{port}"
        return self.url

    def arm(self) -> None:
        """Start injecting faults (links already open count their offsets from now)."""
        self.armed = True
        for link in self.links:
            link.arm()

    def disarm(self) -> None:
        """Inject nothing more; a fault already in effect stays until its link ends."""
        self.armed = False

    async def close(self) -> None:
        self.armed = False
        for link in self.links:
            link.abort()
        for _, writer in self._ghosts:
            writer.transport.abort()
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 1.0)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    # -- bookkeeping --

    def fired_on(self, link: _Link) -> set[str]:
        return self._fired_on.setdefault(link.index, set())

    def record(self, link: _Link, kind: str, what: str) -> None:
        self.fired_on(link).add(kind)
        self.fired[kind] += 1
        self.note(f"link {link.index}: {what}")

    def note(self, what: str) -> None:
        self.log.append(what)

    # -- connections --

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        index = len(self.links)
        faults = self.plan.for_link(index)
        link = _Link(self, index, faults, (reader, writer), upstream, armed=self.armed)
        self.links.append(link)
        self.note(f"link {index} opened: {faults.describe()}")
        link.start()

    def track(self, task: asyncio.Task[None]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def spawn_ghost(self, prefix: bytes) -> None:
        self.track(asyncio.get_running_loop().create_task(self._ghost(prefix)))

    async def _ghost(self, prefix: bytes) -> None:
        """A second server connection that replays a resume, then reads and discards."""
        try:
            reader, writer = await asyncio.open_connection(*self.target)
        except OSError:
            return
        self._ghosts.append((reader, writer))
        try:
            writer.write(prefix)
            await writer.drain()
            while await reader.read(65536):
                pass
        except (ConnectionError, OSError):
            pass
        finally:
            writer.transport.abort()
