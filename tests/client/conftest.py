"""Fixtures for the client tests: a real :class:`VrtServer` running the scripted agent
in the test's event loop, a WebSocket-aware TCP proxy that records, drops, holds,
injects and cuts frames between a client and that server, and an event recorder for
:class:`VrtClient`.

The helpers are handed out by fixtures; test modules import the classes only for type
checking (``if TYPE_CHECKING: from conftest import ...``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import struct
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol, TypeAlias, TypeVar
from urllib.parse import urlsplit

import pytest

from support.recording import RecordingAgent
from vrt.agents.base import SessionInfo
from vrt.client import ClientTool, Event, SessionClosed, ToolContext, VrtClient, tool
from vrt.protocol.server import ServerConfig
from vrt.server import Authenticator, VrtServer

#: How long a test waits for something that should happen promptly.
WAIT = 5.0

Direction: TypeAlias = Literal["c2s", "s2c"]
E = TypeVar("E")

OP_TEXT = 1
OP_BINARY = 2
OP_CLOSE = 8


async def eventually(predicate: Callable[[], object], what: str, timeout: float = WAIT) -> None:
    """Wait until ``predicate()`` is true (polling); fail naming ``what`` otherwise."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.002)


Eventually: TypeAlias = Callable[[Callable[[], object], str], Awaitable[None]]


@pytest.fixture
def until() -> Eventually:
    """``await until(predicate, "what")``: poll until true, or fail after a few seconds."""
    return eventually


# --- the server ----------------------------------------------------------------------


class LiveServer:
    """A started :class:`VrtServer` and the agents of its sessions."""

    def __init__(self, server: VrtServer, agents: list[RecordingAgent]) -> None:
        self.server = server
        self.agents = agents

    @property
    def url(self) -> str:
        return self.server.url

    def agent(self, session_id: str | None) -> RecordingAgent:
        for agent in self.agents:
            if agent.session_id == session_id:
                return agent
        raise LookupError(f"no agent for session {session_id}")


class ServerFactory(Protocol):
    def __call__(
        self,
        *,
        config: ServerConfig | None = None,
        resume_window: float = 30.0,
        authenticator: Authenticator | None = None,
    ) -> Awaitable[LiveServer]: ...


@pytest.fixture
async def make_server() -> AsyncIterator[ServerFactory]:
    """Start VrtServer(scripted agent) on port 0 in the test's loop; all closed after."""
    started: list[VrtServer] = []

    async def make(
        *,
        config: ServerConfig | None = None,
        resume_window: float = 30.0,
        authenticator: Authenticator | None = None,
    ) -> LiveServer:
        agents: list[RecordingAgent] = []

        def factory(info: SessionInfo) -> RecordingAgent:
            del info
            agent = RecordingAgent()
            agents.append(agent)
            return agent

        server = VrtServer(
            factory,
            config=replace(config or ServerConfig(), resume_window=resume_window),
            authenticator=authenticator,
        )
        await server.start("127.0.0.1", 0)
        started.append(server)
        return LiveServer(server, agents)

    yield make
    for server in started:
        await server.close()


@pytest.fixture
async def vrt(make_server: ServerFactory) -> LiveServer:
    """The default server: scripted agent, default timers."""
    return await make_server()


@pytest.fixture
def vrt_url(vrt: LiveServer) -> str:
    """The URL of the default server."""
    return vrt.url


# --- the proxy -----------------------------------------------------------------------


#: What the proxy does with a frame (a hook's answer): pass it on, drop it, and
#: optionally cut the connection right after.
Action: TypeAlias = Literal["forward", "drop", "forward+cut", "drop+cut"]


@dataclass(slots=True)
class Frame:
    """One WebSocket frame as it passed the proxy (client frames unmasked)."""

    link: int
    direction: Direction
    opcode: int
    payload: bytes
    dropped: bool = False
    message: dict[str, Any] | None = None

    @property
    def type(self) -> str | None:
        return None if self.message is None else self.message.get("type")

    @property
    def seq(self) -> int | None:
        return None if self.message is None else self.message.get("seq")

    @property
    def sequenced(self) -> bool:
        """A control message with a non-zero seq (§4.1)."""
        return bool(self.seq)


Hook: TypeAlias = Callable[[Frame, "Link"], Action]


def ws_frame(opcode: int, payload: bytes) -> bytes:
    """An unmasked (server to client) WebSocket frame."""
    size = len(payload)
    if size < 126:
        header = struct.pack("!BB", 0x80 | opcode, size)
    elif size < 1 << 16:
        header = struct.pack("!BBH", 0x80 | opcode, 126, size)
    else:
        header = struct.pack("!BBQ", 0x80 | opcode, 127, size)
    return header + payload


async def _read_frame(reader: asyncio.StreamReader) -> tuple[bytes, int, bytes]:
    """The raw bytes, opcode and (unmasked) payload of the next frame."""
    head = await reader.readexactly(2)
    opcode = head[0] & 0x0F
    masked = head[1] & 0x80
    size = head[1] & 0x7F
    raw = bytearray(head)
    if size == 126:
        extra = await reader.readexactly(2)
        (size,) = struct.unpack("!H", extra)
        raw += extra
    elif size == 127:
        extra = await reader.readexactly(8)
        (size,) = struct.unpack("!Q", extra)
        raw += extra
    mask = b""
    if masked:
        mask = await reader.readexactly(4)
        raw += mask
    body = await reader.readexactly(size)
    raw += body
    payload = bytes(b ^ mask[i % 4] for i, b in enumerate(body)) if mask else body
    return bytes(raw), opcode, payload


class Link:
    """One client connection through the proxy and its upstream connection."""

    def __init__(
        self,
        proxy: Proxy,
        index: int,
        client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        server: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    ) -> None:
        self.proxy = proxy
        self.index = index
        self.client_reader, self.client_writer = client
        self.server_reader, self.server_writer = server
        #: Set while server-to-client frames flow; cleared, they wait (in order).
        self.s2c_flowing = asyncio.Event()
        self.s2c_flowing.set()
        #: Server-to-client bytes are swallowed, and the end of the server side is not
        #: passed on: to the client the link looks dead (§4.4).
        self.frozen = False
        self.closed = False
        self._inject: list[bytes] = []
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._pump("c2s", self.client_reader, self.server_writer)),
            loop.create_task(self._pump("s2c", self.server_reader, self.client_writer)),
        ]

    def cut(self) -> None:
        """Abort both TCP connections at once, as a network failure would."""
        self.closed = True
        for writer in (self.client_writer, self.server_writer):
            writer.transport.abort()

    def inject_after(self, opcode: int, payload: bytes) -> None:
        """Send a frame of our own to the client right after the current frame."""
        self._inject.append(ws_frame(opcode, payload))

    async def _pump(
        self, direction: Direction, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")  # the HTTP upgrade
            writer.write(head)
            while True:
                raw, opcode, payload = await _read_frame(reader)
                await self._frame(direction, writer, raw, opcode, payload)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            if not (direction == "s2c" and self.frozen):
                self.closed = True
                with contextlib.suppress(Exception):
                    writer.close()

    async def _frame(
        self,
        direction: Direction,
        writer: asyncio.StreamWriter,
        raw: bytes,
        opcode: int,
        payload: bytes,
    ) -> None:
        if direction == "s2c":
            await self.s2c_flowing.wait()
            if self.frozen:
                return
        message = None
        if opcode == OP_TEXT:
            with contextlib.suppress(ValueError):
                message = json.loads(payload)
        frame = Frame(self.index, direction, opcode, payload, message=message)
        hook = self.proxy.hook
        action: Action = hook(frame, self) if hook is not None else "forward"
        frame.dropped = action in ("drop", "drop+cut")
        self.proxy.frames.append(frame)
        if self.closed:
            return
        if not frame.dropped:
            writer.write(raw)
        if direction == "s2c":
            for data in self._inject:
                writer.write(data)
            self._inject.clear()
        if action in ("forward+cut", "drop+cut"):
            self.cut()
            return
        with contextlib.suppress(ConnectionError):
            await writer.drain()


class Proxy:
    """A TCP proxy that understands WebSocket framing (no extensions) well enough to
    record every frame in both directions, let a hook drop frames or cut the
    connection at a precise moment, hold or freeze the server's side, and inject frames
    towards the client."""

    def __init__(self, target: str) -> None:
        parts = urlsplit(target)
        assert parts.hostname is not None
        assert parts.port is not None
        self.target = (parts.hostname, parts.port)
        self.frames: list[Frame] = []
        self.links: list[Link] = []
        self.hook: Hook | None = None
        #: While False, new connections are accepted and dropped at once (network down).
        self.accepting = True
        #: New links start with server-to-client frames held (see Link.s2c_flowing).
        self.hold_new_links = False
        self.refused = 0
        self._server: asyncio.Server | None = None
        self.url = ""

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"ws://127.0.0.1:{port}"
        return self.url

    async def close(self) -> None:
        for link in self.links:
            link.cut()
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 1.0)

    def cut(self) -> None:
        """Cut every live connection."""
        for link in self.links:
            if not link.closed:
                link.cut()

    @property
    def live(self) -> Link | None:
        """The newest link, if it is still open."""
        return self.links[-1] if self.links and not self.links[-1].closed else None

    # -- what passed --

    def messages(
        self, direction: Direction, *, link: int | None = None, type: str | None = None
    ) -> list[Frame]:
        """Control messages that passed (dropped ones excluded), optionally filtered."""
        return [
            f
            for f in self.frames
            if f.direction == direction
            and f.message is not None
            and not f.dropped
            and (link is None or f.link == link)
            and (type is None or f.type == type)
        ]

    def tool_calls(self) -> list[str]:
        """The callIds of every ``tool.call`` the server sent, once each, in order."""
        return list(
            dict.fromkeys(
                f.message["callId"] for f in self.messages("s2c", type="tool.call") if f.message
            )
        )

    def tool_results(self) -> dict[str, list[dict[str, Any]]]:
        """The client's ``tool.result`` messages by callId, one per distinct seq: a
        resend after a resume repeats a seq and is the same message (§4.3, §5.4)."""
        by_seq: dict[int, dict[str, Any]] = {}
        for frame in self.messages("c2s", type="tool.result"):
            assert frame.message is not None
            by_seq.setdefault(frame.message["seq"], frame.message)
        results: dict[str, list[dict[str, Any]]] = {}
        for message in by_seq.values():
            results.setdefault(message["callId"], []).append(message)
        return results

    def audio(self, direction: Direction, *, link: int | None = None) -> list[Frame]:
        return [
            f
            for f in self.frames
            if f.direction == direction
            and f.opcode == OP_BINARY
            and not f.dropped
            and (link is None or f.link == link)
        ]

    # -- internals --

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self.accepting:
            self.refused += 1
            writer.transport.abort()
            return
        try:
            upstream = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        link = Link(self, len(self.links), (reader, writer), upstream)
        if self.hold_new_links:
            link.s2c_flowing.clear()
        self.links.append(link)
        link.start()


ProxyFactory: TypeAlias = Callable[[str], Awaitable[Proxy]]


@pytest.fixture
async def make_proxy() -> AsyncIterator[ProxyFactory]:
    """Start a :class:`Proxy` in front of a server URL; all closed after the test."""
    proxies: list[Proxy] = []

    async def make(target: str) -> Proxy:
        proxy = Proxy(target)
        await proxy.start()
        proxies.append(proxy)
        return proxy

    yield make
    for proxy in proxies:
        await proxy.close()


# --- the client ----------------------------------------------------------------------


@dataclass
class Recorder:
    """Reads every event of a :class:`VrtClient` in the background and keeps it."""

    client: VrtClient
    events: list[Event] = field(default_factory=list)
    cursor: int = 0
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    _task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        async for event in self.client.events():
            self.events.append(event)
            self._changed.set()

    async def next(
        self, predicate: Callable[[Event], bool], timeout: float = WAIT, what: str = ""
    ) -> Event:
        """The first event at or after the cursor that matches; the cursor moves past it."""

        async def find() -> Event:
            while True:
                for index in range(self.cursor, len(self.events)):
                    if predicate(self.events[index]):
                        self.cursor = index + 1
                        return self.events[index]
                self._changed.clear()
                await self._changed.wait()

        try:
            return await asyncio.wait_for(find(), timeout)
        except TimeoutError:
            shown = [type(e).__name__ for e in self.events[self.cursor :]]
            raise AssertionError(f"no event {what or predicate} after {shown}") from None

    async def next_of(self, kind: type[E], timeout: float = WAIT) -> E:
        event = await self.next(lambda e: isinstance(e, kind), timeout, kind.__name__)
        assert isinstance(event, kind)
        return event

    def of(self, kind: type[E]) -> list[E]:
        return [e for e in self.events if isinstance(e, kind)]

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    @property
    def closed(self) -> bool:
        return any(isinstance(e, SessionClosed) for e in self.events)


class ClientFactory(Protocol):
    def __call__(self, url: str, **options: Any) -> tuple[VrtClient, Recorder]: ...


@pytest.fixture
async def make_client() -> AsyncIterator[ClientFactory]:
    """Build a VrtClient (quick reconnects) with a running Recorder; closed after."""
    made: list[tuple[VrtClient, Recorder]] = []

    def make(url: str, **options: Any) -> tuple[VrtClient, Recorder]:
        options.setdefault("backoff_initial", 0.01)
        options.setdefault("backoff_max", 0.05)
        options.setdefault("open_timeout", 2.0)
        client = VrtClient(url, **options)
        recorder = Recorder(client)
        recorder.start()
        made.append((client, recorder))
        return client, recorder

    yield make
    for client, recorder in made:
        await client.close()
        await recorder.stop()


# --- client tools that record what they did --------------------------------------------


class ToolKit:
    """Client tools for the tests, recording every run by callId.

    ``add(a, b)`` adds; ``slow(ms)`` sleeps ``ms`` then returns it; ``block()`` waits
    for :attr:`release` (or its cancellation).
    """

    def __init__(self) -> None:
        self.started: list[str] = []
        self.finished: list[str] = []
        #: callId -> whether its CancelToken was set when asyncio cancelled it.
        self.cancelled: dict[str, bool] = {}
        self.active = 0
        self.max_active = 0
        self.blocking = asyncio.Event()
        self.release = asyncio.Event()
        self.tools: list[ClientTool] = [self._add(), self._slow(), self._block()]

    @property
    def runs(self) -> Counter[str]:
        return Counter(self.started)

    @contextlib.contextmanager
    def _run(self, context: ToolContext) -> Iterator[None]:
        self.started.append(context.call_id)
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        try:
            yield
            self.finished.append(context.call_id)
        except asyncio.CancelledError:
            self.cancelled[context.call_id] = context.cancel.cancelled
            raise
        finally:
            self.active -= 1

    def _add(self) -> ClientTool:
        kit = self

        @tool
        async def add(a: float, b: float, context: ToolContext) -> float:
            """Add two numbers."""
            with kit._run(context):
                return a + b

        declared: ClientTool = add
        return declared

    def _slow(self) -> ClientTool:
        kit = self

        @tool
        async def slow(context: ToolContext, ms: int = 20) -> int:
            """Sleep ``ms`` milliseconds."""
            with kit._run(context):
                await asyncio.sleep(ms / 1000)
                return ms

        declared: ClientTool = slow
        return declared

    def _block(self) -> ClientTool:
        kit = self

        @tool
        async def block(context: ToolContext) -> str:
            """Wait until the test releases it."""
            with kit._run(context):
                kit.blocking.set()
                await kit.release.wait()
                return "released"

        declared: ClientTool = block
        return declared


@pytest.fixture
def kit() -> ToolKit:
    return ToolKit()


@pytest.fixture
def make_kit() -> Callable[[], ToolKit]:
    """A new :class:`ToolKit` per call (for tests that run many conversations)."""
    return ToolKit
