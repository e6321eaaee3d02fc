"""What the reliability tests share: a live server whose sessions record both streams,
a client whose session records both streams, tools that record when and in which
epoch they ran, and an event recorder.

Recording is done from the outside, without changing ``src``: the server's sessions are
instrumented by a :class:`~vrt.server.store.SessionStore` (``create`` is called for
every new session before it sends or handles anything), the client's by replacing its
outgoing stream before it connects. What is recorded:

* ``sent``: every sequenced message a side sent, with its seq, once (resends of the same
  bytes are not new messages, §5.4);
* ``handled``: every sequenced message a side handled, with its seq (duplicates are
  dropped before this point, §4.3);
* on the server, every output audio frame written, with its item's epoch and the
  highest epoch the server had closed (sent ``interrupted`` for) at that moment.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from support.recording import RecordingAgent
from vrt.agents.base import SessionInfo
from vrt.client import ClientTool, Event, SessionClosed, ToolContext, VrtClient, tool
from vrt.protocol.codec import Decoded, Invalid, decode_server
from vrt.protocol.messages import Interrupted, Message
from vrt.protocol.server import ServerConfig, ServerSession
from vrt.protocol.server.agent_output import AgentOutput
from vrt.protocol.streams import OutgoingStream
from vrt.server import VrtServer
from vrt.server.store import MemorySessionStore

E = TypeVar("E")

Sent = list[tuple[int, Message]]


class RecordingOutgoing(OutgoingStream):
    """An outgoing stream that also appends each new message to ``into``."""

    __slots__ = ("into", "on_send")

    def __init__(
        self, max_kept: int, into: Sent, on_send: Callable[[Message], None] | None = None
    ) -> None:
        super().__init__(max_kept)
        self.into = into
        self.on_send = on_send

    def send(self, message: Message) -> bytes:
        data = super().send(message)
        self.into.append((self.last_seq, message))
        if self.on_send is not None:
            self.on_send(message)
        return data


@dataclass
class ServerRecord:
    """What one server session sent and handled."""

    session: ServerSession
    sent: Sent = field(default_factory=list)
    handled: Sent = field(default_factory=list)
    #: (item id, item epoch, highest epoch closed by ``interrupted`` when it was written)
    audio: list[tuple[str, int, int]] = field(default_factory=list)
    closed_epoch: int = -1

    def _on_send(self, message: Message) -> None:
        if isinstance(message, Interrupted):
            self.closed_epoch = max(self.closed_epoch, message.epoch)


class _RecordingOutput(AgentOutput):
    """The agent's output of a session, recording each audio frame written while it was
    connected: its item, the item's epoch and the highest epoch closed then."""

    def __init__(self, session: ServerSession, record: ServerRecord) -> None:
        super().__init__(session.channel, session.record, session.config)
        self.session = session
        self.record = record

    def send_audio(self, item_id: str, payload: bytes, played_ms: float | None = None) -> bool:
        session, record = self.session, self.record
        connected = session.status == "connected"
        sent = super().send_audio(item_id, payload, played_ms)
        item = session.record.items.get(item_id)
        if sent and connected and item is not None:
            record.audio.append((item_id, item.epoch, record.closed_epoch))
        return sent


def instrument_server_session(session: ServerSession) -> ServerRecord:
    record = ServerRecord(session)
    if session.outgoing.last_seq or session.incoming.last_seq:
        raise AssertionError("the session was instrumented too late")
    session.outgoing = RecordingOutgoing(session.outgoing.max_kept, record.sent, record._on_send)
    receive = session.receive_sequenced

    def handled(decoded: Decoded[Any], now: float) -> None:
        before = session.incoming.last_seq
        receive(decoded, now)
        if session.incoming.last_seq != before:  # new, so handled (§4.3)
            record.handled.append((session.incoming.last_seq, decoded.message))

    setattr(session, "receive_sequenced", handled)  # noqa: B010 - instrumentation
    session.agent_output = _RecordingOutput(session, record)
    return record


class RecordingStore(MemorySessionStore):
    """The memory store, instrumenting every new session (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.records: dict[str, ServerRecord] = {}

    async def create(self, session: ServerSession) -> None:
        self.records[session.session_id] = instrument_server_session(session)
        await super().create(session)


class LiveServer:
    """A started :class:`VrtServer` (scripted agents) whose sessions record their streams."""

    def __init__(self, server: VrtServer, store: RecordingStore, agents: list[RecordingAgent]):
        self.server = server
        self.store = store
        self.agents = agents

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def record(self, session_id: str | None) -> ServerRecord:
        assert session_id is not None, "the client has no session"
        return self.store.records[session_id]

    def agent(self, session_id: str | None) -> RecordingAgent:
        for agent in self.agents:
            if agent.session_id == session_id:
                return agent
        raise LookupError(f"no agent for session {session_id}")

    async def close(self) -> None:
        await self.server.close()


async def start_live_server(
    *, config: ServerConfig | None = None, resume_window: float = 10.0, **options: Any
) -> LiveServer:
    agents: list[RecordingAgent] = []

    def factory(info: SessionInfo) -> RecordingAgent:
        del info
        agent = RecordingAgent()
        agents.append(agent)
        return agent

    store = RecordingStore()
    config = replace(config or ServerConfig(), resume_window=resume_window)
    server = VrtServer(factory, config=config, store=store, **options)
    await server.start("127.0.0.1", 0)
    return LiveServer(server, store, agents)


# --- the client side ---------------------------------------------------------------


@dataclass
class ClientRecord:
    sent: Sent = field(default_factory=list)
    handled: Sent = field(default_factory=list)


def instrument_client(client: VrtClient) -> ClientRecord:
    """Record the client's two streams; call before :meth:`VrtClient.connect`."""
    core = client.core
    record = ClientRecord()
    if core.outgoing.last_seq:
        raise AssertionError("instrument the client before it sends anything")
    core.outgoing = RecordingOutgoing(core.outgoing.max_kept, record.sent)
    receive = core.receive_text

    def handled(data: bytes | str, now: float) -> None:
        before = core.incoming.last_seq
        receive(data, now)
        if core.incoming.last_seq != before:  # new, so handled (§4.3)
            decoded = decode_server(data)
            assert not isinstance(decoded, Invalid)
            record.handled.append((core.incoming.last_seq, decoded.message))

    setattr(core, "receive_text", handled)  # noqa: B010 - instrumentation
    return record


@dataclass
class Recorder:
    """Reads every event of a :class:`VrtClient` in the background, in order."""

    client: VrtClient
    events: list[Event] = field(default_factory=list)
    _task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        async for event in self.client.events():
            self.events.append(event)

    def of(self, kind: type[E]) -> list[E]:
        return [e for e in self.events if isinstance(e, kind)]

    @property
    def closed(self) -> bool:
        return any(isinstance(e, SessionClosed) for e in self.events)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


@dataclass(frozen=True, slots=True)
class ToolStart:
    """A tool began to run: its call, the call's epoch and the client's closed epoch."""

    call_id: str
    name: str
    epoch: int
    closed_epoch: int | None


class ToolKit:
    """``add(a, b)`` and ``slow(ms)`` (sleeps), recording every start and end."""

    def __init__(self) -> None:
        self.starts: list[ToolStart] = []
        self.finished: list[str] = []
        self.active = 0
        #: Set to the client's epoch gate once the client exists.
        self.closed_epoch: Callable[[], int | None] = lambda: None
        self.tools: list[ClientTool] = [self._add(), self._slow()]

    @contextlib.contextmanager
    def _run(self, name: str, context: ToolContext) -> Any:
        self.starts.append(ToolStart(context.call_id, name, context.epoch, self.closed_epoch()))
        self.active += 1
        try:
            yield
            self.finished.append(context.call_id)
        finally:
            self.active -= 1

    def _add(self) -> ClientTool:
        kit = self

        @tool
        async def add(a: float, b: float, context: ToolContext) -> float:
            """Add two numbers."""
            with kit._run("add", context):
                return a + b

        declared: ClientTool = add
        return declared

    def _slow(self) -> ClientTool:
        kit = self

        @tool
        async def slow(context: ToolContext, ms: int = 10) -> int:
            """Sleep ``ms`` milliseconds, then return it."""
            with kit._run("slow", context):
                await asyncio.sleep(ms / 1000)
                return ms

        declared: ClientTool = slow
        return declared


async def eventually(
    predicate: Callable[[], object], what: str, timeout: float = 5.0, step: float = 0.005
) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(step)
