"""An in-memory client-server pair for tests of the sans-I/O core, as h11's
``ConnectionPair`` and aioquic's ``client_and_server()``: no sockets, no asyncio.

A :class:`Pair` wires a client-role :class:`~vrt.protocol.client.ClientSession` and the
server role (a :class:`~vrt.protocol.server.ServerConnection` per WebSocket, and the
:class:`~vrt.protocol.server.ServerSession` that outlives them) through a fake network
on a fake clock, driving both as ``vrt.client`` and ``vrt.server`` do: every frame a
core writes (``take_outbox()``) goes onto a :class:`Wire` and is handed to the other
side's ``receive_text``/``receive_binary`` with the time; ``timer_deadline()`` and
``on_timer(now)`` run on :attr:`Pair.now`; a ``hello`` is opened, resumed or refused by
:meth:`Pair.decide`.

Faults, each at any point: a latency per connection (:meth:`Pair.connect`), frames
duplicated (:meth:`Wire.duplicate_next`) or lost (:meth:`Wire.lose_next`), delivery
held (:attr:`Wire.held`), a cut at
any byte of either outgoing stream (:meth:`Wire.cut_after`) or now (:meth:`Pair.cut`),
losing what is in flight or not, each side noticing it at its own time (or never, until
its heartbeat says so, §4.4). A resume (§5.4) is one more :meth:`Pair.connect`: the
client sends ``hello`` with its ``sessionId`` and ``resumeFrom``, and frames still in
flight on the old connection may arrive after it (reordering across a resume).

The agent's side is the session itself: tests call :attr:`Pair.session`'s agent API
(``begin_turn``, ``agent_output.send_text``, ``tool_calls.start``...) and then
:meth:`Pair.settle` or :meth:`Pair.advance`. What each side was told collects in
:attr:`Pair.client_events` and :attr:`Pair.agent_events`; every frame delivered is in
:attr:`Pair.trace`.

    pair = Pair()
    pair.connect()
    pair.client.send_text("hi", pair.now)
    pair.settle()
    assert pair.agent_events == [UserTextReceived(text="hi")]
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any, Literal, TypeAlias

from .client import ClientEvent, ClientSession, RunTool
from .messages import UNSET, Hello
from .outputs import Close, Output, dispatch
from .server import AgentInput, ServerConfig, ServerConnection, ServerSession

__all__ = ["Direction", "Link", "Pair", "Wire"]

#: Which way a frame travels.
Direction: TypeAlias = Literal["to_server", "to_client"]


class _Size:
    """The bytes a frame takes on its connection's stream (a close: code and reason)."""

    def text(self, data: bytes) -> int:
        return len(data)

    def binary(self, data: bytes) -> int:
        return len(data)

    def close(self, close: Close) -> int:
        return 2 + len(close.reason.encode())


class _Closes:
    """Whether an output closes its connection."""

    def text(self, data: bytes) -> bool:
        return False

    def binary(self, data: bytes) -> bool:
        return False

    def close(self, close: Close) -> bool:
        return True


_SIZE = _Size()
_CLOSES = _Closes()


class _Receiver:
    """One side's driver handing it what arrived: a text or binary frame, or the peer's
    close (the connection is gone then)."""

    def __init__(
        self,
        text: Callable[[bytes, float], None],
        binary: Callable[[bytes, float], None],
        closed: Callable[[], None],
        now: float,
    ) -> None:
        self._text, self._binary, self._closed, self._now = text, binary, closed, now

    def text(self, data: bytes) -> None:
        self._text(data, self._now)

    def binary(self, data: bytes) -> None:
        self._binary(data, self._now)

    def close(self, close: Close) -> None:
        self._closed()


class Wire:
    """One direction of one connection: frames in flight, in order (a WebSocket is
    ordered), each arriving ``latency`` seconds after it was written."""

    def __init__(self, latency: float) -> None:
        self.latency = latency
        #: Frames in flight: (arrival time, frame).
        self.in_flight: deque[tuple[float, Output]] = deque()
        #: Bytes written so far on this direction of the connection.
        self.written = 0
        #: Nothing is delivered while True (frames wait, in order).
        self.held = False
        #: The byte of the outgoing stream at which the connection is cut, if set.
        self.cut_at: int | None = None
        self._duplicates = 0
        self._losses = 0
        #: Reading is paused until then (the server's read budget, §11).
        self.paused_until = 0.0

    def cut_after(self, nbytes: int) -> None:
        """Cut the connection once ``nbytes`` more bytes were written this way: the
        frames that end within them arrive, the one crossing the cut and all later
        ones never do (nor does anything in flight the other way)."""
        self.cut_at = self.written + nbytes

    def duplicate_next(self, count: int = 1) -> None:
        """The next ``count`` frames written this way arrive twice."""
        self._duplicates += count

    def lose_next(self, count: int = 1) -> None:
        """The next ``count`` frames written this way never arrive, though the
        connection goes on: a gap no WebSocket makes, for a peer that skips sequence
        numbers (§4.3: a receiver must not crash on one)."""
        self._losses += count

    def write(self, item: Output, now: float) -> bool:
        """Put ``item`` in flight; False when it crosses the cut (it is lost)."""
        size = dispatch(item, _SIZE)
        if self.cut_at is not None and self.written + size > self.cut_at:
            return False
        self.written += size
        if self._losses:
            self._losses -= 1
            return True
        copies = 1
        if self._duplicates:
            self._duplicates -= 1
            copies = 2
        for _ in range(copies):
            self.in_flight.append((now + self.latency, item))
        return True

    def next_arrival(self) -> float | None:
        """When the next frame can be delivered; None when none can."""
        if self.held or not self.in_flight:
            return None
        return max(self.in_flight[0][0], self.paused_until)


class Link:
    """One WebSocket between the pair: the server's connection and both directions."""

    def __init__(self, server: ServerConnection, latency: float) -> None:
        self.server = server
        self.to_server = Wire(latency)
        self.to_client = Wire(latency)
        #: The client's current connection, not yet reported lost to it.
        self.client_attached = True
        #: Not yet reported lost to the server (``connection_lost``).
        self.server_open = True
        #: Cut: nothing written from now on arrives.
        self.broken = False
        #: When the server learns of the cut, if it ever does (else by its heartbeat).
        self.server_notices_at: float | None = None

    def wire(self, direction: Direction) -> Wire:
        return self.to_server if direction == "to_server" else self.to_client


class Pair:
    """A client and a server core on a fake network and a fake clock."""

    def __init__(
        self,
        client: ClientSession | None = None,
        config: ServerConfig | None = None,
        *,
        now: float = 0.0,
        run_tool: Callable[[RunTool], Any] | None = None,
    ) -> None:
        """``run_tool``, if given, answers every :class:`RunTool` at once with its
        return value as the output (``ok``); otherwise tests call
        ``client.tool_finished`` themselves."""
        self.client = client if client is not None else ClientSession()
        self.config = config if config is not None else ServerConfig()
        self.now = now
        self.run_tool = run_tool
        #: Every connection made, the newest last.
        self.links: list[Link] = []
        #: The server's sessions, by id; ended ones stay, for inspection.
        self.sessions: dict[str, ServerSession] = {}
        self.client_events: list[ClientEvent] = []
        self.agent_events: list[AgentInput] = []
        #: Every frame delivered: (time, direction, frame).
        self.trace: list[tuple[float, Direction, Output]] = []

    # -- the parts --

    @property
    def link(self) -> Link | None:
        """The newest connection."""
        return self.links[-1] if self.links else None

    @property
    def session(self) -> ServerSession:
        """The server session of the client's session (the agent's side)."""
        session_id = self.client.session_id
        if session_id is None:
            raise LookupError("the client has no session yet")
        return self.sessions[session_id]

    # -- the network --

    def connect(self, latency: float = 0.0) -> Link:
        """Open a new WebSocket: the client sends ``hello``, resuming its session when
        it has one (§5.4). Frames of older connections still in flight go on."""
        link = Link(ServerConnection(self.config, self.now), latency)
        for old in self.links:
            old.client_attached = False
        self.links.append(link)
        self.client.connection_made(self.now)
        self.settle()
        return link

    def cut(
        self,
        link: Link | None = None,
        *,
        lose_in_flight: bool = True,
        client_notices: bool = True,
        server_notices_after: float | None = 0.0,
    ) -> None:
        """Cut ``link`` (the newest by default): nothing written on it arrives any more,
        and what is in flight is lost unless ``lose_in_flight`` is False. The client is
        told at once unless ``client_notices`` is False (its silence timer finds out,
        §4.4); the server after ``server_notices_after`` seconds, or never (None: its
        heartbeat closes the connection, §4.4)."""
        link = link if link is not None else self.links[-1]
        self._break(link, lose_in_flight, client_notices, server_notices_after)
        self.settle()

    def _break(
        self,
        link: Link,
        lose_in_flight: bool,
        client_notices: bool,
        server_notices_after: float | None,
    ) -> None:
        link.broken = True
        if lose_in_flight:
            link.to_server.in_flight.clear()
            link.to_client.in_flight.clear()
        if client_notices:
            self._client_lost(link)
        if server_notices_after == 0.0:
            self._server_lost(link)
        elif server_notices_after is not None and link.server_open:
            link.server_notices_at = self.now + server_notices_after

    def _client_lost(self, link: Link) -> None:
        if link.client_attached:
            link.client_attached = False
            self.client.connection_lost(self.now)

    def _server_lost(self, link: Link) -> None:
        if link.server_open:
            link.server_open = False
            link.server_notices_at = None
            link.server.connection_lost(self.now)

    # -- the server's decisions --

    def decide(self, link: Link, hello: Hello) -> None:
        """What the server does with a ``hello`` (authentication aside, it accepts
        all): open a new session, resume the one named, or refuse a resume of an
        unknown or ended session (§5.4). Override to refuse or defer (then call
        ``link.server.open`` or a ``refuse_*`` method later)."""
        if hello.session_id is UNSET:
            session = ServerSession(hello, self.config)
            self.sessions[session.session_id] = session
            link.server.open(session, self.now)
            return
        found = self.sessions.get(hello.session_id)
        if found is None or found.status == "closed":
            link.server.refuse_resume()
        else:
            link.server.open(found, self.now)

    # -- running --

    def settle(self) -> None:
        """Run both sides at the current time until nothing more moves: write every
        outbox, deliver every frame due, hand over events."""
        while self._flush() | self._deliver_due():
            pass

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` pass: frames arrive and timers fire in time order."""
        self.run_until(self.now + seconds)

    def run_until(self, until: float) -> None:
        """Frames arrive and timers fire in time order, up to ``until``."""
        self.settle()
        while (due := self._next_time()) is not None and due <= until:
            self.now = max(self.now, due)
            self._fire_timers()
            self.settle()
        self.now = max(self.now, until)

    def _next_time(self) -> float | None:
        times: list[float] = []
        deadline = self.client.timer_deadline()
        if deadline is not None:
            times.append(deadline)
        for link in self.links:
            times += [
                t
                for t in (link.to_server.next_arrival(), link.to_client.next_arrival())
                if t is not None
            ]
            if link.server_notices_at is not None:
                times.append(link.server_notices_at)
            if link.server_open and (deadline := link.server.timer_deadline()) is not None:
                times.append(deadline)
        for session in self._parked():
            if (deadline := session.timer_deadline()) is not None:
                times.append(deadline)
        return min(times) if times else None

    def _parked(self) -> list[ServerSession]:
        return [s for s in self.sessions.values() if s.status == "parked"]

    def _fire_timers(self) -> None:
        now = self.now
        deadline = self.client.timer_deadline()
        if deadline is not None and deadline <= now:
            self.client.on_timer(now)
        for link in self.links:
            if link.server_notices_at is not None and link.server_notices_at <= now:
                self._server_lost(link)
            deadline = link.server.timer_deadline() if link.server_open else None
            if deadline is not None and deadline <= now:
                link.server.on_timer(now)
        for session in self._parked():
            deadline = session.timer_deadline()
            if deadline is not None and deadline <= now:
                session.on_timer(now)

    def _flush(self) -> bool:
        """Write what each side queued and hand over events; True if anything moved."""
        moved = self._flush_client()
        for link in self.links:
            for event in link.server.take_events():
                moved = True
                self.decide(link, event.hello)
            if link.server_open:
                moved |= self._write_server(link)
        for session in self.sessions.values():
            events = session.take_events()
            if events:
                moved = True
                self.agent_events += events
        return moved

    def _flush_client(self) -> bool:
        moved = False
        current = self.links[-1] if self.links else None
        for item in self.client.take_outbox():
            moved = True
            if current is None or not current.client_attached:
                continue  # no connection to write on
            if not current.broken and not current.to_server.write(item, self.now):
                self._break(current, True, True, 0.0)
            if dispatch(item, _CLOSES):  # the driver closes the socket and reports it
                self._client_lost(current)
        for event in self.client.take_events():
            moved = True
            self.client_events.append(event)
            if isinstance(event, RunTool) and self.run_tool is not None:
                self.client.tool_finished(
                    event.call_id, True, self.now, output=self.run_tool(event)
                )
        return moved

    def _write_server(self, link: Link) -> bool:
        moved = False
        for item in link.server.take_outbox():
            moved = True
            if link.broken or not link.client_attached:
                if dispatch(item, _CLOSES):  # nobody answers the close: the socket ends
                    self._server_lost(link)
                continue
            if not link.to_client.write(item, self.now):
                self._break(link, True, True, 0.0)
        return moved

    def _deliver_due(self) -> bool:
        moved = False
        for link in list(self.links):
            for direction in ("to_server", "to_client"):
                wire = link.wire(direction)
                while (at := wire.next_arrival()) is not None and at <= self.now:
                    _, item = wire.in_flight.popleft()
                    moved = True
                    self._deliver(link, direction, item)
        return moved

    def _deliver(self, link: Link, direction: Direction, item: Output) -> None:
        now = self.now
        if direction == "to_client":
            if not link.client_attached:
                return  # the client has moved on from this connection
            self.trace.append((now, direction, item))

            def client_closed() -> None:
                self._client_lost(link)
                self._server_lost(link)  # the close handshake is complete

            client = self.client
            receiver = _Receiver(client.receive_text, client.receive_binary, client_closed, now)
            dispatch(item, receiver)
            return
        if not link.server_open:
            return
        self.trace.append((now, direction, item))
        server = link.server
        wire = link.to_server

        def read(data: bytes) -> None:
            if server.frame_received(now, len(data)):  # its read budget paces the wire (§11)
                wire.paused_until = server.readable_at()

        def text(data: bytes, now: float) -> None:
            read(data)
            server.receive_text(data, now)

        def binary(data: bytes, now: float) -> None:
            read(data)
            server.receive_binary(data, now)
            if server.readable_at() > now:  # input audio, charged by its duration
                wire.paused_until = server.readable_at()

        dispatch(item, _Receiver(text, binary, lambda: self._server_lost(link), now))
