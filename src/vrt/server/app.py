"""The vRT server: WebSocket connections, the sessions they open, and their agents.

Usage as a library::

    server = VrtServer(scripted_agent)
    await server.start("127.0.0.1", 8765)
    await server.serve_forever()

The server accepts WebSockets (``upgrades``), answers their ``hello`` (``opening``,
§5.2-§5.4), admitting new sessions within its limits (``admission``), and keeps each
session it hosts in one record (``hosted``) of one registry (``registry``), whose
agents' writes coalesce (``coalescing``) and whose parked sessions keep their own
timers (``parking``). Sessions live in a store (``store``): this process's memory, or
one that processes share.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from picows import WSUpgradeRequest

from ..agents.base import Agent, AgentFactory, AgentSession
from ..protocol.outputs import CloseCode
from ..protocol.server import HelloReceived, ServerConfig, ServerSession
from ..settings import DEFAULTS, check_ranges
from .admission import Admission
from .auth import Authenticator, FailedAuthLimiter
from .listener import ConnectionCap, default_max_connections, listen
from .opening import SessionOpener
from .origins import OriginPolicy
from .registry import HANDED_OFF, MOVED, SessionRegistry
from .store import MemorySessionStore, SessionStore
from .telemetry import ServerObserver
from .upgrades import UpgradeChecks
from .websocket import ConnectionHooks, EdgeLimits, ServerWebSocket

__all__ = ["HANDED_OFF", "MOVED", "VrtServer"]

log = logging.getLogger("vrt.server")


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
    :param store: where sessions live (:class:`~vrt.server.store.SessionStore`): in this
        process (the default, :class:`~vrt.server.store.MemorySessionStore`), or a
        shared store such as :class:`~vrt.server.redis_store.RedisSessionStore`, which
        every process serving the same clients shares, so that a session resumes on any
        of them (docs/deploy.md).
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
        store: SessionStore | None = None,
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
        check_ranges(max_sessions=max_sessions, max_parked=max_parked)
        self.agent_factory = agent_factory
        self.authenticator = authenticator
        self.auth_failures = FailedAuthLimiter() if auth_failures is None else auth_failures
        self.config = config or ServerConfig()
        self.store: SessionStore = MemorySessionStore() if store is None else store
        self.reuse_port = reuse_port
        self.ssl_context = ssl_context
        if observer is None:
            from .telemetry import Telemetry
            from .tracing import configured_tracer

            tracer = configured_tracer()
            observer = Telemetry(tracer=tracer) if tracer is not None else None
        self.observer = observer
        self._upgrades = UpgradeChecks(OriginPolicy.build(allowed_origins), observer)
        # An agent whose sessions are costly says how many one process serves (the
        # voice agent's factory, vrt.voice.options), and may refuse by load (its
        # ``admit``, issue 31.4): the limit unless one is given.
        if max_sessions is None:
            max_sessions = getattr(agent_factory, "max_sessions", None)
        self.admission = Admission(
            max_sessions,
            getattr(agent_factory, "admit", None),
            self.config.max_state_bytes,
        )
        self.sessions = SessionRegistry(self.store, observer, max_parked)
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
        self._connections: set[ServerWebSocket] = set()
        self._hooks = ConnectionHooks(
            opened=self._connections.add, pump=self._pump, closed=self._disconnected
        )
        self._opener = SessionOpener(
            agent_factory=agent_factory,
            config=self.config,
            authenticator=authenticator,
            auth_failures=self.auth_failures,
            store=self.store,
            sessions=self.sessions,
            admission=self.admission,
            observer=observer,
            pump=self._pump,
        )
        self._opening: set[asyncio.Task[None]] = set()
        self.url = ""

    # -- lifecycle --

    async def start(self, host: str = DEFAULTS.host, port: int = DEFAULTS.port) -> str:
        """Listen; returns the URL clients connect to (``ws://`` or ``wss://``)."""
        await self.store.open(self.config, self.sessions.lose)
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
        origins = self._upgrades.origins = self.origins.listening_on(host)
        for warning in origins.warnings():
            log.warning("%s", warning)
        scheme = "wss" if self.ssl_context is not None else "ws"
        shown = f"[{host}]" if ":" in host else host
        self.url = f"{scheme}://{shown}:{bound_port}"
        return self.url

    async def serve_forever(self) -> None:
        assert self._server is not None, "start() first"
        await self._server.serve_forever()

    async def shutdown(self, drain_timeout: float = DEFAULTS.drain_timeout) -> None:
        """Stop gracefully: stop accepting and refuse new sessions, let the responses in
        flight finish for up to ``drain_timeout`` seconds, then :meth:`close`, which tells
        every client ``SERVER_SHUTDOWN`` so that none tries to resume here."""
        self.admission.draining = True
        if self._server is not None:
            self._server.close()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + drain_timeout
        while loop.time() < deadline and any(
            hosted.session.response_in_flight for hosted in self.sessions.sessions()
        ):
            await asyncio.sleep(0.05)
        await self.close()

    @property
    def draining(self) -> bool:
        """True once :meth:`shutdown` began: no new session is opened."""
        return self.admission.draining

    async def close(self) -> None:
        """Stop at once: stop accepting, end every session with a non-recoverable
        ``SERVER_SHUTDOWN`` error (docs/decisions.md) and close 1001, stop the agents.
        With a shared store, sessions are not ended but parked in the store instead, and
        connections close with 1001 alone, so that clients resume on another process."""
        self.admission.draining = True
        if self._server is not None:
            self._server.close()
        for task in list(self._opening):
            task.cancel()
        if self.store.shared:  # the sessions outlive this process: hand them off
            await self._hand_off()
        else:
            for connection in list(self._connections):
                connection.protocol.shut_down("the server is shutting down; open a new session")
                connection.write_outbox()
            for hosted in self.sessions.sessions():
                self.sessions.end(hosted, "server shutting down", code=CloseCode.GOING_AWAY)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)
        await self.store.close()

    async def _hand_off(self) -> None:
        """Shut down with a shared store: park every session in the store and close every
        connection with 1001, with no SERVER_SHUTDOWN, so that clients resume on another
        process (issue 12's drain, docs/deploy.md). A turn still in progress is cut
        short by whichever process resumes it."""
        await self.sessions.stop_agents()
        for connection in list(self._connections):
            connection.write_outbox()  # what the agents sent last, through the journals
        await self.sessions.hand_off()
        for connection in list(self._connections):
            connection.gate = None
            connection.fail(1001, "the server is going away; resume the session")

    @property
    def origins(self) -> OriginPolicy:
        """The web pages whose browsers may connect (``allowed_origins``)."""
        return self._upgrades.origins

    @property
    def session_count(self) -> int:
        return len(self.sessions)

    @property
    def parked_count(self) -> int:
        """Sessions of this process waiting for a resume."""
        return len(self.sessions.parking)

    def agents(self) -> list[tuple[Agent, AgentSession]]:
        """The agents of the live sessions (for metrics: their counters)."""
        return self.sessions.agents()

    def session(self, session_id: str) -> ServerSession | None:
        """A live session of this process (for tests and operators)."""
        hosted = self.sessions.get(session_id)
        return hosted.session if hosted is not None else None

    # -- connections --

    def _accept(self, request: WSUpgradeRequest) -> Any:
        refusal = self._upgrades.refusal(request)
        if refusal is not None:
            return refusal
        connection = ServerWebSocket(self.config, self.edge, self._hooks)
        if self.observer is not None:
            connection.meter = self.observer.connection(connection)
        return connection

    def _disconnected(self, connection: ServerWebSocket) -> None:
        self._connections.discard(connection)
        protocol = connection.protocol
        session = protocol.session
        protocol.connection_lost(connection.loop.time())
        if session is not None:
            self.sessions.unbind(session.session_id, connection)

    def _pump(self, connection: ServerWebSocket) -> None:
        """After the core ran for ``connection``: start opening a hello, hand the
        session's events to its agent, write frames, re-arm the timer."""
        protocol = connection.protocol
        for event in protocol.take_events():
            self._start_opening(connection, event)
        session = protocol.session
        hosted = self.sessions.get(session.session_id) if session is not None else None
        if hosted is not None:
            if protocol.has_output():
                # The core's own answer (interrupted, pong, an error) leaves before the
                # agent acts on the message: first output after input, at once.
                connection.write_outbox()
            self.sessions.writes.deliver(hosted)
        if protocol.has_output():
            connection.write_outbox()
        connection.arm_timer()
        if hosted is not None and hosted.session.status == "closed":
            self.sessions.end(hosted, "session closed")

    def _start_opening(self, connection: ServerWebSocket, event: HelloReceived) -> None:
        """A hello: answered by its own task (``opening``), cancelled if the server closes."""
        task = asyncio.get_running_loop().create_task(self._opener.open(connection, event.hello))
        self._opening.add(task)
        task.add_done_callback(self._opening.discard)
