"""The vRT server: WebSocket connections, the session registry and the agents.

Usage as a library::

    server = VrtServer(scripted_agent)
    await server.start("127.0.0.1", 8765)
    await server.serve_forever()
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import ssl
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from picows import (
    WSUpgradeRequest,
    WSUpgradeResponse,
    WSUpgradeResponseWithListener,
)

from ..agents.base import Agent, AgentFactory, AgentSession, SessionInfo
from ..agents.history import HistoryEntry
from ..logs import CURRENT_SESSION, Throttled, session_fields
from ..protocol.messages import UNSET, Format, Hello
from ..protocol.outputs import CloseCode
from ..protocol.server import HelloReceived, ServerConfig, ServerSession
from ..protocol.tables import ServerState
from .auth import Authenticator, FailedAuthLimiter, address_key
from .journal import SessionJournal, StoreUnavailable
from .listener import ConnectionCap, default_max_connections, listen
from .origins import OriginPolicy
from .store import Claim, MemorySessionStore, SessionStore, SharedSessionStore
from .telemetry import ServerObserver
from .websocket import ClientConnection, ConnectionHooks, EdgeLimits

__all__ = ["HANDED_OFF", "MOVED", "VrtServer"]

#: Why a session ends on this process when it shuts down with a shared store: it lives on
#: in the store, for another process to resume (docs/deploy.md).
HANDED_OFF = "handed off to another process"
#: Why a session left this process when another one resumed it (§5.4).
MOVED = "resumed on another process"

log = logging.getLogger("vrt.server")

#: No reply count reaches it (AgentSession flushes during a delivery: see _write_soon).
_NEVER = 1 << 62

#: Query parameters that look like credentials; never honoured (§5.3), always warned about.
_CREDENTIAL_PARAMS = frozenset({"token", "auth", "access_token", "key", "api_key", "apikey"})


class _AgentHost:
    """One session's agent: its task and the AgentSession it talks through."""

    __slots__ = ("agent", "agent_session", "task")

    def __init__(self, agent: Agent, agent_session: AgentSession, task: asyncio.Task[None]) -> None:
        self.agent = agent
        self.agent_session = agent_session
        self.task = task


class VrtServer:
    """A vRT server: accepts WebSockets, opens and resumes sessions, runs one agent each.

    :param agent_factory: builds the agent of each new session (``SessionInfo`` in).
    :param authenticator: maps ``hello.auth`` to a principal, or None to refuse; without
        one the server does not authenticate and ignores ``auth`` (§5.3).
    :param config: protocol settings, deadlines (the resume window among them) and
        limits (``ServerConfig``); the input and output formats come from each agent.
    :param allowed_origins: the web pages whose browsers may connect, by origin
        (``*`` for any); without, pages from loopback and from the host the server
        listens on (``origins.OriginPolicy``, against cross-site WebSocket hijacking).
        Clients that send no ``Origin`` (not browsers) are not concerned.
    :param max_sessions: when given, at most this many live sessions (connected or
        parked). A ``hello`` for a new one beyond it first evicts the session parked the
        longest (its resume then fails with RESUME_FAILED, §5.4); with none parked it gets
        ``START_FAILED`` and close 1011 (§5.1). Resumes are always served. Without it,
        the agent factory's ``max_sessions`` attribute when it has one (the voice agent's).
        An agent factory may also have an ``admit`` attribute, a callable asked before
        each new session: ``None`` admits it, a string refuses it that way with the
        string as the reason (the voice agent's when its recogniser is saturated,
        docs/limits.md). Resumes are never asked.
    :param max_parked: when given, at most this many parked sessions: parking one more
        evicts the session parked the longest.
    :param max_connections: TCP connections open at once, upgraded or not; beyond it a
        connection is refused at accept with HTTP 503. Default: what the file-handle
        limit allows, with headroom (``listener.default_max_connections``).
    :param edge: the WebSocket layer's bounds (``EdgeLimits``: buffered output, write
        timeout); its ``max_message_bytes`` is ``max_message_bytes``.
    :param observer: told about connections, sessions and frames (metrics and traces,
        ``telemetry.Telemetry``); without one, tracing when OpenTelemetry is configured.
    :param store: where sessions live: in this process (the default), or a
        :class:`~vrt.server.store.SharedSessionStore` such as
        :class:`~vrt.server.redis_store.RedisSessionStore`, which every process serving
        the same clients shares, so that a session resumes on any of them
        (docs/deploy.md).
    :param reuse_port: listen with SO_REUSEPORT, beside other processes on the same
        port (``vrt serve --workers``).
    :param auth_failures: failed authentications allowed per client address (with an
        ``authenticator``); default :class:`~vrt.server.auth.FailedAuthLimiter`'s.
    """

    def __init__(
        self,
        agent_factory: AgentFactory,
        *,
        authenticator: Authenticator | None = None,
        config: ServerConfig | None = None,
        store: SessionStore | SharedSessionStore | None = None,
        ssl_context: ssl.SSLContext | None = None,
        allowed_origins: Iterable[str] | None = None,
        max_message_bytes: int | None = None,
        max_sessions: int | None = None,
        max_parked: int | None = None,
        max_connections: int | None = None,
        edge: EdgeLimits | None = None,
        observer: ServerObserver | None = None,
        reuse_port: bool = False,
        auth_failures: FailedAuthLimiter | None = None,
    ) -> None:
        if max_sessions is not None and max_sessions < 1:
            raise ValueError("max_sessions must be at least 1")
        if max_parked is not None and max_parked < 0:
            raise ValueError("max_parked cannot be negative")
        self.agent_factory = agent_factory
        # An agent whose sessions are costly says how many one process serves (the
        # voice agent's factory, vrt.voice.options): the limit unless one is given.
        self.max_sessions = (
            max_sessions
            if max_sessions is not None
            else getattr(agent_factory, "max_sessions", None)
        )
        # Admission by load (the voice agent's, issue 31.4): asked for new sessions only.
        self._admit: Callable[[], str | None] | None = getattr(agent_factory, "admit", None)
        self.max_parked = max_parked
        self.authenticator = authenticator
        self.auth_failures = FailedAuthLimiter() if auth_failures is None else auth_failures
        self.config = config or ServerConfig()
        if store is None:
            store = MemorySessionStore()
        self.store: SessionStore | SharedSessionStore = store
        #: The shared store, when sessions outlive this process (docs/deploy.md); else
        #: the in-process one.
        self.shared: SharedSessionStore | None = None
        self._memory: SessionStore | None = None
        if isinstance(store, SharedSessionStore):
            self.shared = store
        else:
            self._memory = store
        self.reuse_port = reuse_port
        self.ssl_context = ssl_context
        self.origins = OriginPolicy.build(allowed_origins)
        self._refused_origin = Throttled(log, logging.WARNING)
        self._credential_in_url = Throttled(log, logging.WARNING)
        # While the shared store is down, every hello and resume is refused: one line
        # per 10 s each, with the count (docs/operations.md#logs).
        self._store_refused_start = Throttled(log, logging.WARNING)
        self._store_refused_resume = Throttled(log, logging.WARNING)
        self._refused_busy = Throttled(log, logging.WARNING)
        if observer is None:
            from .telemetry import Telemetry
            from .tracing import configured_tracer

            tracer = configured_tracer()
            observer = Telemetry(tracer=tracer) if tracer is not None else None
        self.observer = observer
        # The WebSocket layer takes more than the decoder's limit, so that a message a
        # little too big gets a recoverable LIMIT_EXCEEDED; far beyond it, close 1009
        # (messages.md).
        self.max_message_bytes = max_message_bytes or 4 * self.config.limits.max_frame_bytes
        self.edge = replace(
            edge or EdgeLimits(max_message_bytes=self.max_message_bytes),
            max_message_bytes=self.max_message_bytes,
        )
        self.connection_cap = ConnectionCap(max_connections or default_max_connections())
        self._server: asyncio.Server | None = None
        self._draining = False
        self._hooks = ConnectionHooks(
            opened=self._connections_add, pump=self._pump, closed=self._disconnected
        )
        self._connections: set[ClientConnection] = set()
        #: Parked sessions, the longest parked first, with the timer of each.
        self._parked: dict[str, asyncio.TimerHandle | None] = {}
        self._bound: dict[str, ClientConnection] = {}
        self._agents: dict[str, _AgentHost] = {}
        self._sessions: dict[str, ServerSession] = {}
        #: With a shared store: each session's write-ahead journal.
        self._journals: dict[str, SessionJournal] = {}
        self._opening: set[asyncio.Task[None]] = set()
        self._write_due_ids: set[str] = set()
        self._delivering: ServerSession | None = None
        #: While a session's events are delivered: the count of its replies at which
        #: its agent's flush writes at once (the first reply), _NEVER once written.
        self._write_at_reply = _NEVER
        self._starting = 0  # new sessions between their hello and their registration
        self._refused_full = 0  # refusals at the session limit since the last warning
        self._warned_full_at = -1e9
        self.url = ""

    # -- lifecycle --

    async def start(self, host: str = "127.0.0.1", port: int = 8765) -> str:
        """Listen; returns the URL clients connect to (``ws://`` or ``wss://``)."""
        if self.shared is not None:
            await self.shared.open(self.config, self._session_lost)
        self._server = await listen(
            self._accept,
            host,
            port,
            cap=self.connection_cap,
            ssl_context=self.ssl_context,
            max_frame_size=self.max_message_bytes,
            handshake_timeout=10.0,
            # Control messages and audio frames are small, and picows grows a buffer
            # that a message or a burst fills: a 16 KiB first read buffer per
            # connection (its default) would be most of an idle session's memory.
            # 2 KiB is its minimum (idle sessions 20.4 -> 18.6 KB, bench/).
            read_buffer_size=2048,
            reuse_port=self.reuse_port,
        )
        bound_port = self._server.sockets[0].getsockname()[1]
        self.origins = self.origins.listening_on(host)
        for warning in self.origins.warnings():
            log.warning("%s", warning)
        scheme = "wss" if self.ssl_context is not None else "ws"
        shown = f"[{host}]" if ":" in host else host
        self.url = f"{scheme}://{shown}:{bound_port}"
        return self.url

    async def serve_forever(self) -> None:
        assert self._server is not None, "start() first"
        await self._server.serve_forever()

    async def shutdown(self, drain_timeout: float = 10.0) -> None:
        """Stop gracefully: stop accepting and refuse new sessions, let the responses in
        flight finish for up to ``drain_timeout`` seconds, then :meth:`close`, which tells
        every client ``SERVER_SHUTDOWN`` so that none tries to resume here."""
        self._draining = True
        if self._server is not None:
            self._server.close()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + drain_timeout
        while loop.time() < deadline and any(
            session.response_in_flight for session in self._sessions.values()
        ):
            await asyncio.sleep(0.05)
        await self.close()

    @property
    def draining(self) -> bool:
        """True once :meth:`shutdown` began: no new session is opened."""
        return self._draining

    async def close(self) -> None:
        """Stop at once: stop accepting, end every session with a non-recoverable
        ``SERVER_SHUTDOWN`` error (docs/decisions.md) and close 1001, stop the agents.
        With a shared store, sessions are not ended but parked in the store instead, and
        connections close with 1001 alone, so that clients resume on another process."""
        self._draining = True
        if self._server is not None:
            self._server.close()
        for task in list(self._opening):
            task.cancel()
        if self.shared is not None:
            await self._hand_off(self.shared)
            return
        for connection in list(self._connections):
            connection.protocol.shut_down("the server is shutting down; open a new session")
            connection.write_outbox()
        for session in list(self._sessions.values()):
            self._end_session(session, "server shutting down", code=CloseCode.GOING_AWAY)
        tasks = [host.task for host in self._agents.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)

    @property
    def session_count(self) -> int:
        return len(self._sessions)

    @property
    def parked_count(self) -> int:
        """Sessions of this process waiting for a resume."""
        return len(self._parked)

    def agents(self) -> list[tuple[Agent, AgentSession]]:
        """The agents of the live sessions (for metrics: their counters)."""
        return [(host.agent, host.agent_session) for host in self._agents.values()]

    def session(self, session_id: str) -> ServerSession | None:
        """A live session of this process (for tests and operators)."""
        return self._sessions.get(session_id)

    # -- connections --

    def _accept(self, request: WSUpgradeRequest) -> Any:
        version = request.headers.get("Sec-WebSocket-Version")
        if version != "13":
            # RFC 6455 §4.4: a version the server does not speak gets 426 and the ones
            # it does.
            if self.observer is not None:
                self.observer.upgrade_refused("version")
            return WSUpgradeResponseWithListener(
                WSUpgradeResponse.create_error_response(
                    426,
                    b"this server speaks WebSocket version 13",
                    {"Sec-WebSocket-Version": "13"},
                ),
                None,
            )
        origin = request.headers.get("Origin")
        if not self.origins.allows(origin):
            self._refused_origin("refused a WebSocket from a page of origin %r", origin)
            if self.observer is not None:
                self.observer.upgrade_refused("origin")
            return WSUpgradeResponseWithListener(
                WSUpgradeResponse.create_error_response(403, b"origin not allowed"), None
            )
        query = urlsplit(request.path.decode("latin-1", "replace")).query
        if any(name.lower() in _CREDENTIAL_PARAMS for name, _ in parse_qsl(query)):
            self._credential_in_url(
                "a client put a credential in the URL; it is ignored: send it in hello.auth (§5.3)"
            )
        if self.observer is None:
            return ClientConnection(self.config, self.edge, self._hooks)
        connection = ClientConnection(self.config, self.edge, self._hooks)
        connection.meter = self.observer.connection(connection)
        return connection

    def _connections_add(self, connection: ClientConnection) -> None:
        self._connections.add(connection)

    def _disconnected(self, connection: ClientConnection) -> None:
        self._connections.discard(connection)
        protocol = connection.protocol
        session = protocol.session
        protocol.connection_lost(connection.loop.time())
        if session is not None and self._bound.get(session.session_id) is connection:
            del self._bound[session.session_id]
            if session.status == "parked":
                self._arm_parked(session)
                journal = self._journals.get(session.session_id)
                if journal is not None:
                    journal.changed()  # parked: its resume window, in the store too

    # -- parked sessions: their timers (tool timeouts, the resume window) --

    def _arm_parked(self, session: ServerSession) -> None:
        """A parked session has no connection to carry its timer: it gets its own, for
        its tool timeouts (§7.2) and the end of its resume window (§5.1). Parking one
        beyond ``max_parked`` evicts the session parked the longest."""
        deadline = session.timer_deadline()
        loop = asyncio.get_running_loop()
        handle = loop.call_at(deadline, self._parked_timer, session) if deadline else None
        self._parked[session.session_id] = handle
        if self.max_parked is not None and len(self._parked) > self.max_parked:
            self._evict_parked()

    def _evict_parked(self) -> bool:
        """End the session parked the longest: its resume fails (RESUME_FAILED, §5.4)."""
        for session_id in self._parked:
            session = self._sessions.get(session_id)
            if session is not None:
                log.info(
                    "session %s evicted: parked the longest",
                    session_id,
                    extra=session_fields(session),
                )
                self._end_session(session, "evicted while parked")
                return True
        return False

    def _disarm_parked(self, session_id: str) -> None:
        handle = self._parked.pop(session_id, None)
        if handle is not None:
            handle.cancel()

    def _parked_timer(self, session: ServerSession) -> None:
        self._parked[session.session_id] = None
        if session.status != "parked":
            return
        session.on_timer(asyncio.get_running_loop().time())
        self._deliver(session)
        if session.status == "closed":
            log.info("session %s expired", session.session_id, extra=session_fields(session))
            self._end_session(session, "resume window expired")
        else:
            self._rearm_parked(session)

    def _rearm_parked(self, session: ServerSession) -> None:
        """Re-arm a parked session's timer where it stands in the parking order."""
        handle = self._parked.get(session.session_id)
        if handle is not None:
            handle.cancel()
        deadline = session.timer_deadline()
        loop = asyncio.get_running_loop()
        self._parked[session.session_id] = (
            loop.call_at(deadline, self._parked_timer, session) if deadline else None
        )

    def _pump(self, connection: ClientConnection) -> None:
        """After the core ran for ``connection``: start opening a hello, hand the
        session's events to its agent, write frames, re-arm the timer."""
        protocol = connection.protocol
        for event in protocol.take_events():
            self._start_opening(connection, event)
        session = protocol.session
        if session is not None:
            if protocol.has_output():
                # The core's own answer (interrupted, pong, an error) leaves before the
                # agent acts on the message: first output after input, at once.
                connection.write_outbox()
            self._deliver(session)
        if protocol.has_output():
            connection.write_outbox()
        connection.arm_timer()
        if session is not None and session.status == "closed":
            self._end_session(session, "session closed")

    def _deliver(self, session: ServerSession) -> None:
        """Hand the session's events to its agent. Every caller writes the session's
        frames right after, so what a listening agent sends while it handles them
        (AgentSession.listen) leaves in that same write; but for its first reply (a
        text chunk, an audio frame, a transcript, a tool call), which is written at
        once with what preceded it (``_write_soon``): a reply the agent produces whole
        does not wait for its last part, and costs two writes, not one per message."""
        events = session.take_events()
        if events:
            if self.observer is not None:
                self.observer.delivered(session, events)
            host = self._agents.get(session.session_id)
            if host is not None:
                outer = self._delivering, self._write_at_reply
                self._delivering, self._write_at_reply = session, session.channel.replies + 1
                try:
                    host.agent_session.deliver(events)
                finally:
                    self._delivering, self._write_at_reply = outer

    def _write_soon(self, session: ServerSession) -> None:
        """After the agent acted on ``session``: the first call of a step is written at
        once (no added latency); what follows in the same step leaves in one write
        when the step is done. While its events are being delivered, the write that
        follows the delivery takes it, but for the agent's first reply, written at once
        (``_deliver``)."""
        if session is self._delivering:
            if session.channel.replies >= self._write_at_reply:
                self._write_at_reply = _NEVER
                connection = self._bound.get(session.session_id)
                if connection is not None:
                    connection.write_outbox()
            return
        if session.session_id in self._write_due_ids:
            return
        self._write_session(session)
        self._write_due_ids.add(session.session_id)
        asyncio.get_running_loop().call_soon(self._write_due, session)

    def _write_due(self, session: ServerSession) -> None:
        self._write_due_ids.discard(session.session_id)
        self._write_session(session)

    def _write_session(self, session: ServerSession) -> None:
        """Deliver the session's events, write its frames, re-arm its timer."""
        self._deliver(session)
        connection = self._bound.get(session.session_id)
        if connection is not None:
            connection.write_outbox()
            connection.arm_timer()
        elif session.status == "parked" and session.session_id in self._parked:
            self._rearm_parked(session)  # the agent may have started a tool call
        if connection is None:
            journal = self._journals.get(session.session_id)
            if journal is not None:
                journal.sync()  # a parked session's messages reach the store all the same
        if session.status == "closed":
            self._end_session(session, "session closed")

    # -- opening (§5.2-§5.4) --

    def _start_opening(self, connection: ClientConnection, event: HelloReceived) -> None:
        task = asyncio.get_running_loop().create_task(self._open(connection, event.hello))
        self._opening.add(task)
        task.add_done_callback(self._opening.discard)

    async def _open(self, connection: ClientConnection, hello: Hello) -> None:
        address = address_key(connection.peer) if self.authenticator is not None else ""
        try:
            if self.authenticator is not None and not self.auth_failures.allows(address):
                if self.observer is not None:
                    self.observer.session_refused("unauthorized")
                connection.protocol.refuse_unauthorized(
                    "too many failed authentications from this address; try again later"
                )
                self._pump(connection)
                return
            principal = await self._authenticate(hello)
        except _Refused:
            self.auth_failures.failed(address)
            if self.observer is not None:
                self.observer.session_refused("unauthorized")
            connection.protocol.refuse_unauthorized()
            self._pump(connection)
            return
        if connection.closed:
            return
        if hello.session_id is not UNSET:
            await self._resume(connection, hello.session_id, principal)
        else:
            await self._open_new(connection, hello, principal)

    async def _authenticate(self, hello: Hello) -> str | None:
        if self.authenticator is None:
            return None
        auth = hello.auth if hello.auth is not UNSET else None
        try:
            result = self.authenticator(auth)
            principal = await result if inspect.isawaitable(result) else result
        except Exception:
            log.exception("the authenticator failed; refusing the hello")
            raise _Refused from None
        if principal is None:
            raise _Refused
        return str(principal)

    async def _resume(
        self, connection: ClientConnection, session_id: str, principal: str | None
    ) -> None:
        if self.shared is not None:
            found = await self._claim(connection, self.shared, session_id, principal)
        else:
            assert self._memory is not None
            found = await self._memory.get(session_id)
        protocol = connection.protocol
        if connection.closed:
            return
        session = found
        if session is None or session.principal != principal or session.status == "closed":
            if self.observer is not None:
                self.observer.resumed(session_id, "refused")
            protocol.refuse_resume()  # §5.3: a foreign session looks exactly like an unknown one
            self._pump(connection)
            return
        previous = self._bound.get(session_id)
        replaced = protocol.open(session, connection.loop.time())
        if self.observer is not None:
            self.observer.resumed(session_id, "failed" if session.status == "closed" else "resumed")
        if session.status == "closed":  # the resume could not resend what the client missed
            outgoing = session.outgoing
            log.info(
                "session %s ended: a resume from %s could not be served (sent through %d, "
                "kept from %d; §5.4)",
                session_id,
                protocol.hello.resume_from if protocol.hello is not None else "?",
                outgoing.last_seq,
                outgoing.first_kept_seq,
                extra=session_fields(session),
            )
            self._end_session(session, "resume failed")
            self._pump(connection)
            return
        self._disarm_parked(session_id)
        self._bound[session_id] = connection
        connection.gate = self._journals.get(session_id)
        if replaced is not None and previous is not None and previous is not connection:
            previous.write_outbox()
        self._pump(connection)

    async def _open_new(
        self, connection: ClientConnection, hello: Hello, principal: str | None
    ) -> None:
        if self._draining:
            if self.observer is not None:
                self.observer.session_refused("draining")
            connection.protocol.refuse_start("the server is shutting down; try another")
            self._pump(connection)
            return
        size, most = ServerSession.state_size(hello), self.config.max_state_bytes
        if size > most:
            if self.observer is not None:
                self.observer.session_refused("too_large")
            connection.protocol.refuse_start(
                f"hello.tools and hello.context take {size} bytes; this server keeps at most "
                f"{most} per session (§11)"
            )
            self._pump(connection)
            return
        limit = self.max_sessions
        if (
            limit is not None
            and len(self._sessions) + self._starting >= limit
            and not self._evict_parked()
        ):
            self._refuse_full(connection, limit)
            return
        if self._admit is not None and (reason := self._admit()) is not None:
            self._refuse_busy(connection, reason)
            return
        self._starting += 1
        try:
            await self._start_session(connection, hello, principal)
        finally:
            self._starting -= 1

    def _refuse_full(self, connection: ClientConnection, limit: int) -> None:
        if self.observer is not None:
            self.observer.session_refused("limit")
        connection.protocol.refuse_start(
            f"the server is at its limit of {limit} sessions; try again later"
        )
        self._pump(connection)
        self._refused_full += 1
        now = connection.loop.time()
        if now - self._warned_full_at >= 10.0:  # one line per 10 s, however many refusals
            log.warning(
                "at the limit of %d sessions: refused %d new session(s)", limit, self._refused_full
            )
            self._warned_full_at, self._refused_full = now, 0

    def _refuse_busy(self, connection: ClientConnection, reason: str) -> None:
        if self.observer is not None:
            self.observer.session_refused("capacity")
        connection.protocol.refuse_start(reason)
        self._pump(connection)
        self._refused_busy("refused a new session: %s", reason)

    async def _start_session(
        self, connection: ClientConnection, hello: Hello, principal: str | None
    ) -> None:
        protocol = connection.protocol
        info = SessionInfo(
            principal=principal,
            tools=hello.tools if hello.tools is not UNSET else (),
            capabilities=hello.capabilities if hello.capabilities is not UNSET else (),
            input=hello.input if isinstance(hello.input, Format) else None,
            output=hello.output if isinstance(hello.output, Format) else None,
            context=hello.context if hello.context is not UNSET else None,
        )
        try:
            made = self.agent_factory(info)
            agent: Agent = await made if inspect.isawaitable(made) else made
        except Exception as exc:
            log.exception("the agent could not start")
            if self.observer is not None:
                self.observer.session_refused("agent_failed")
            protocol.refuse_start(f"the session could not start: {type(exc).__name__}")
            self._pump(connection)
            return
        if connection.closed:
            return
        session = ServerSession(
            hello,
            self.config,
            principal=principal,
            input_formats=agent.input_formats,
            output_formats=agent.output_formats,
        )
        if self.shared is not None:
            try:
                journal = await self.shared.create(session)
            except StoreUnavailable as exc:
                self._store_refused_start(
                    "new sessions refused: the session store is unreachable (%s)", exc
                )
                protocol.refuse_start("the session store is unreachable; try again shortly")
                self._pump(connection)
                return
            if connection.closed:
                self.shared.forget(journal)
                return
            self._journals[session.session_id] = journal
            connection.gate = journal
        else:
            assert self._memory is not None
            await self._memory.add(session)
        self._sessions[session.session_id] = session
        self._bound[session.session_id] = connection
        loop = connection.loop
        self._start_agent(agent, session)
        protocol.open(session, loop.time())
        log.info("session %s opened", session.session_id, extra=session_fields(session))
        self._pump(connection)

    def _start_agent(self, agent: Agent, session: ServerSession) -> None:
        loop = asyncio.get_running_loop()
        agent_session = AgentSession(
            session,
            functools.partial(self._write_soon, session),
            loop.time,
            lambda exc: self._agent_failed(session, exc),
        )
        # What the agent logs from its task carries the session's ids (logs.py).
        token = CURRENT_SESSION.set(session)
        try:
            task = loop.create_task(self._run_agent(agent, agent_session, session))
        finally:
            CURRENT_SESSION.reset(token)
        self._agents[session.session_id] = _AgentHost(agent, agent_session, task)
        if self.observer is not None:
            self.observer.session_opened(session)
            self.observer.agent_started(session, agent, agent_session)  # before run() runs

    async def _run_agent(
        self, agent: Agent, agent_session: AgentSession, session: ServerSession
    ) -> None:
        try:
            await agent.run(agent_session)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._agent_failed(session, exc)

    def _agent_failed(self, session: ServerSession, exc: Exception) -> None:
        """The agent raised (from ``run`` or a listener): AGENT_ERROR, not recoverable,
        and the session closes (§9.2)."""
        if session.status == "closed":  # the agent closed its session, then stopped
            log.info(
                "the agent of session %s stopped: %s",
                session.session_id,
                exc,
                extra=session_fields(session),
            )
            return
        log.error(
            "the agent of session %s failed",
            session.session_id,
            exc_info=exc,
            extra=session_fields(session),
        )
        session.agent_output.error(f"the agent failed: {type(exc).__name__}", recoverable=False)
        session.close("agent failed")
        self._write_session(session)

    def _end_session(self, session: ServerSession, reason: str, code: int = 1000) -> None:
        session_id = session.session_id
        if self._sessions.pop(session_id, None) is None:
            return
        session.close(reason, code)
        self._disarm_parked(session_id)
        connection = self._bound.pop(session_id, None)
        if connection is not None:
            connection.write_outbox()
        host = self._agents.pop(session_id, None)
        if host is not None and host.task is not asyncio.current_task():
            host.task.cancel()
        if self.observer is not None:
            agent, agent_session = (host.agent, host.agent_session) if host else (None, None)
            self.observer.session_ended(session, reason, agent, agent_session)
        journal = self._journals.pop(session_id, None)
        if self.shared is not None:
            if journal is not None:
                asyncio.get_running_loop().create_task(self.shared.end(journal))
        else:
            assert self._memory is not None
            asyncio.get_running_loop().create_task(self._memory.remove(session_id))

    # -- a shared store (docs/deploy.md) --

    async def _claim(
        self,
        connection: ClientConnection,
        shared: SharedSessionStore,
        session_id: str,
        principal: str | None,
    ) -> ServerSession | None:
        """The session to resume, taken from the shared store (its lease is now this
        process's). A session of another process, or one this process forgot, is
        rebuilt here with a new agent, and a turn it had in progress is cut short."""
        local = self._sessions.get(session_id)
        journal = self._journals.get(session_id)
        # This process's copy, if it still owned it when it last heard from the store.
        current = local if journal is not None and not journal.lost else None
        try:
            claim = await shared.claim(session_id, principal, journal)
        except StoreUnavailable as exc:
            if current is not None and current.principal == principal:
                return current  # go on from memory (the journal resyncs)
            # Whether the session exists cannot be known now: no error, so that the
            # client reconnects and resumes (§5.1) once the store answers again. A
            # session of another principal gets the same answer (§5.3: a foreign
            # session looks exactly like an unknown one).
            self._store_refused_resume("resumes wait: the session store is unreachable (%s)", exc)
            connection.fail(1013, "the session store is unreachable; resume again shortly")
            return None
        if not isinstance(claim, Claim):
            # Only a session the store lost (a restart) is served from this process's copy.
            if claim == "missing" and current is not None and journal is not None:
                journal.missing()
                return current
            return None
        if not claim.restored:
            return claim.session
        if local is not None:
            self._session_lost(session_id)  # a stale copy: another process had it since
        if connection.closed:
            shared.forget(claim.journal)  # it stays in the store for the next resume
            return None
        return await self._restored(connection, shared, claim)

    async def _restored(
        self, connection: ClientConnection, shared: SharedSessionStore, claim: Claim
    ) -> ServerSession | None:
        session = claim.session
        record = session.record
        try:
            info = SessionInfo(
                principal=record.principal,
                tools=tuple(session.tools.values()),
                capabilities=record.capabilities,
                input=record.input,
                output=record.output,
                context=session.context,
            )
            made = self.agent_factory(info)
            agent: Agent = await made if inspect.isawaitable(made) else made
            _restore_agent(agent, claim.history)
        except Exception as exc:
            log.exception("the agent of a resumed session could not start")
            connection.protocol.refuse_start(f"the session could not start: {type(exc).__name__}")
            self._sessions[session.session_id] = session
            self._journals[session.session_id] = claim.journal
            self._end_session(session, "the agent could not start")
            self._pump(connection)
            return None
        self._sessions[session.session_id] = session
        self._journals[session.session_id] = claim.journal
        if session.record.turn is not None:
            session.cut_short(
                "the reply was cut short: the session moved to another server process; ask again"
            )
        self._start_agent(agent, session)
        log.info("session %s resumed from the session store", session.session_id)
        return session

    def _session_lost(self, session_id: str) -> None:
        """Another process took the session (§5.4): close its connection here with 4000,
        stop its agent and forget it, without writing to the store again."""
        session = self._sessions.pop(session_id, None)
        journal = self._journals.pop(session_id, None)
        if journal is not None:
            journal.lost = True
        if session is None:
            return
        self._disarm_parked(session_id)
        connection = self._bound.pop(session_id, None)
        if connection is not None:
            connection.gate = None
            if connection.protocol.state is ServerState.OPEN:
                connection.protocol.replaced(connection.loop.time())
                connection.write_outbox()
        session.close(MOVED)
        host = self._agents.pop(session_id, None)
        if host is not None and host.task is not asyncio.current_task():
            host.task.cancel()
        if self.observer is not None:  # what it kept of the session goes too (its trace)
            agent, agent_session = (host.agent, host.agent_session) if host else (None, None)
            self.observer.session_ended(session, MOVED, agent, agent_session)

    async def _hand_off(self, shared: SharedSessionStore) -> None:
        """Shut down with a shared store: park every session in the store and close every
        connection with 1001, with no SERVER_SHUTDOWN, so that clients resume on another
        process (issue 12's drain, docs/deploy.md). A turn still in progress is cut
        short by whichever process resumes it."""
        tasks = [host.task for host in self._agents.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self.observer is not None:
            for session_id, session in self._sessions.items():
                host = self._agents.get(session_id)
                agent, agent_session = (host.agent, host.agent_session) if host else (None, None)
                self.observer.session_ended(session, HANDED_OFF, agent, agent_session)
        self._agents.clear()
        for connection in list(self._connections):
            connection.write_outbox()  # what the agents sent last, through the journals
        loop = asyncio.get_running_loop()
        now = loop.time()
        for session_id, session in list(self._sessions.items()):
            self._disarm_parked(session_id)
            if session.status == "connected":
                session.park(now)
            journal = self._journals.get(session_id)
            if journal is not None:
                journal.changed()
        journals = list(self._journals.values())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(
                asyncio.gather(*(j.drained() for j in journals), return_exceptions=True), 2.0
            )
        self._sessions.clear()
        self._bound.clear()
        for journal in journals:
            shared.forget(journal)
            journal.lost = True  # given up: this process writes nothing more for it
        self._journals.clear()
        for connection in list(self._connections):
            connection.gate = None
            connection.fail(1001, "the server is going away; resume the session")
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)
        await shared.close()


class _Refused(Exception):
    pass


def _restore_agent(agent: Agent, history: tuple[HistoryEntry, ...]) -> None:
    """Give a rebuilt session's new agent the conversation so far (``Agent.restore``,
    docs/agents.md); an agent without ``restore`` starts without it."""
    restore = getattr(agent, "restore", None)
    if callable(restore):
        restore(history)
    elif history:
        log.warning(
            "%s has no restore(history): a session resumed on this process starts its "
            "agent without the conversation so far",
            type(agent).__name__,
        )
