"""What the server does with a ``hello`` (§5.2-§5.4).

A hello is authenticated (``hello.auth``, §5.3; failures are counted per address),
then either resumes its session or opens a new one. A resume takes the session from
the store (``store.SessionStore.claim``): this process's own copy while it is current,
or one rebuilt from a shared store with a new agent, a turn it had in progress cut
short; a foreign session is refused exactly as an unknown one (§5.3). A new session is
admitted within the server's limits (``admission``), gets its agent from the factory,
and is stored before its ``ready`` is sent.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable

from ..agents.base import Agent, AgentFactory, SessionInfo
from ..agents.history import HistoryEntry
from ..logs import Throttled, session_fields
from ..protocol.messages import UNSET, Format, Hello
from ..protocol.server import ServerConfig, ServerSession
from .admission import Admission
from .auth import Authenticator, FailedAuthLimiter, address_key
from .hosted import HostedSession
from .journal import StoreUnavailable
from .registry import SessionRegistry
from .store import Claim, SessionStore
from .telemetry import ServerObserver
from .websocket import ServerWebSocket

__all__ = ["SessionOpener"]

log = logging.getLogger("vrt.server")


class SessionOpener:
    """Answers the hellos of a server's connections (see the module docstring).

    :param pump: runs the server's side of a connection after the core acted (writes
        its frames, hands its session's events to the agent).
    """

    def __init__(
        self,
        *,
        agent_factory: AgentFactory,
        config: ServerConfig,
        authenticator: Authenticator | None,
        auth_failures: FailedAuthLimiter,
        store: SessionStore,
        sessions: SessionRegistry,
        admission: Admission,
        observer: ServerObserver | None,
        pump: Callable[[ServerWebSocket], None],
    ) -> None:
        self._agent_factory = agent_factory
        self._config = config
        self._authenticator = authenticator
        self._auth_failures = auth_failures
        self._store = store
        self._sessions = sessions
        self._admission = admission
        self._observer = observer
        self._pump = pump
        # While the shared store is down, every hello and resume is refused: one line
        # per 10 s each, with the count (docs/operations.md#logs).
        self._store_refused_start = Throttled(log, logging.WARNING)
        self._store_refused_resume = Throttled(log, logging.WARNING)

    async def open(self, connection: ServerWebSocket, hello: Hello) -> None:
        """Authenticate ``hello``, then resume its session or open a new one."""
        address = address_key(connection.peer) if self._authenticator is not None else ""
        try:
            if self._authenticator is not None and not self._auth_failures.allows(address):
                if self._observer is not None:
                    self._observer.session_refused("unauthorized")
                connection.protocol.refuse_unauthorized(
                    "too many failed authentications from this address; try again later"
                )
                self._pump(connection)
                return
            # Without an authenticator, no coroutine: this is every session's opening.
            principal = None if self._authenticator is None else await self._authenticate(hello)
        except _Refused:
            self._auth_failures.failed(address)
            if self._observer is not None:
                self._observer.session_refused("unauthorized")
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
        assert self._authenticator is not None
        auth = hello.auth if hello.auth is not UNSET else None
        try:
            result = self._authenticator(auth)
            principal = await result if inspect.isawaitable(result) else result
        except Exception:
            log.exception("the authenticator failed; refusing the hello")
            raise _Refused from None
        if principal is None:
            raise _Refused
        return str(principal)

    async def _resume(
        self, connection: ServerWebSocket, session_id: str, principal: str | None
    ) -> None:
        hosted = await self._claim(connection, session_id, principal)
        protocol = connection.protocol
        if connection.closed:
            return
        if (
            hosted is None
            or hosted.session.principal != principal
            or hosted.session.status == "closed"
        ):
            if self._observer is not None:
                self._observer.resumed(session_id, "refused")
            protocol.refuse_resume()  # §5.3: a foreign session looks exactly like an unknown one
            self._pump(connection)
            return
        session = hosted.session
        previous = hosted.connection
        replaced = protocol.open(session, connection.loop.time())
        if self._observer is not None:
            self._observer.resumed(
                session_id, "failed" if session.status == "closed" else "resumed"
            )
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
            self._sessions.end(hosted, "resume failed")
            self._pump(connection)
            return
        self._sessions.bind(hosted, connection)
        if replaced is not None and previous is not None and previous is not connection:
            previous.write_outbox()
        self._pump(connection)

    async def _claim(
        self, connection: ServerWebSocket, session_id: str, principal: str | None
    ) -> HostedSession | None:
        """The session to resume, taken from the store. This process's own copy when it
        is current (the store does not have it, or says it is still this process's); a
        session of another process, or one this process forgot, is rebuilt here with a
        new agent, and a turn it had in progress is cut short."""
        local = self._sessions.get(session_id)
        journal = local.journal if local is not None else None
        # This process's copy, if it still owned it when it last heard from the store.
        current = local if journal is None or not journal.lost else None
        try:
            claim = await self._store.claim(session_id, principal, journal)
        except StoreUnavailable as exc:
            if current is not None and current.session.principal == principal:
                return current  # go on from memory (the journal resyncs)
            # Whether the session exists cannot be known now: no error, so that the
            # client reconnects and resumes (§5.1) once the store answers again. A
            # session of another principal gets the same answer (§5.3: a foreign
            # session looks exactly like an unknown one).
            self._store_refused_resume("resumes wait: the session store is unreachable (%s)", exc)
            connection.fail(1013, "the session store is unreachable; resume again shortly")
            return None
        if not isinstance(claim, Claim):
            # Only a session the store does not have (a restart, or a store that keeps
            # nothing outside this process) is served from this process's copy.
            if claim == "missing" and current is not None:
                if journal is not None:
                    journal.missing()  # the store lost it: written whole again
                return current
            return None
        if not claim.restored:
            return local
        if local is not None:
            self._sessions.lose(session_id)  # a stale copy: another process had it since
        if connection.closed:
            self._store.forget(claim.journal)  # it stays in the store for the next resume
            return None
        return await self._restored(connection, claim)

    async def _restored(self, connection: ServerWebSocket, claim: Claim) -> HostedSession | None:
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
            made = self._agent_factory(info)
            agent: Agent = await made if inspect.isawaitable(made) else made
            _restore_agent(agent, claim.history)
        except Exception as exc:
            log.exception("the agent of a resumed session could not start")
            connection.protocol.refuse_start(f"the session could not start: {type(exc).__name__}")
            self._sessions.end(
                self._sessions.host(session, claim.journal), "the agent could not start"
            )
            self._pump(connection)
            return None
        hosted = self._sessions.host(session, claim.journal)
        if session.record.turn is not None:
            session.cut_short(
                "the reply was cut short: the session moved to another server process; ask again"
            )
        self._sessions.start_agent(hosted, agent)
        log.info("session %s resumed from the session store", session.session_id)
        return hosted

    async def _open_new(
        self, connection: ServerWebSocket, hello: Hello, principal: str | None
    ) -> None:
        admission = self._admission
        refusal: tuple[str | None, str] | None = admission.refusal(
            hello, len(self._sessions.hosted), self._sessions.evict_parked, connection.loop.time()
        )
        if refusal is None:
            # Admitted: it counts against the limit until it is hosted or given up.
            admission.starting += 1
            try:
                refusal = await self._start_session(connection, hello, principal)
            finally:
                admission.starting -= 1
            if refusal is None:
                return
        reason, message = refusal
        if reason is not None and self._observer is not None:
            self._observer.session_refused(reason)
        connection.protocol.refuse_start(message)
        self._pump(connection)

    async def _start_session(
        self, connection: ServerWebSocket, hello: Hello, principal: str | None
    ) -> tuple[str | None, str] | None:
        """Start the admitted session of ``hello``: None once it is hosted (or its
        connection is gone), else why it could not start, as ``Admission.refusal``
        says it (no reason for the observer when the store is unreachable: that is
        logged, throttled)."""
        info = SessionInfo(
            principal=principal,
            tools=hello.tools if hello.tools is not UNSET else (),
            capabilities=hello.capabilities if hello.capabilities is not UNSET else (),
            input=hello.input if isinstance(hello.input, Format) else None,
            output=hello.output if isinstance(hello.output, Format) else None,
            context=hello.context if hello.context is not UNSET else None,
        )
        try:
            made = self._agent_factory(info)
            agent: Agent = await made if inspect.isawaitable(made) else made
        except Exception as exc:
            log.exception("the agent could not start")
            return "agent_failed", f"the session could not start: {type(exc).__name__}"
        if connection.closed:
            return None
        session = ServerSession(
            hello,
            self._config,
            principal=principal,
            input_formats=agent.input_formats,
            output_formats=agent.output_formats,
        )
        try:
            journal = await self._store.create(session)
        except StoreUnavailable as exc:
            self._store_refused_start(
                "new sessions refused: the session store is unreachable (%s)", exc
            )
            return None, "the session store is unreachable; try again shortly"
        if connection.closed:
            if journal is not None:
                self._store.forget(journal)
            return None
        hosted = self._sessions.host(session, journal, connection)
        self._sessions.start_agent(hosted, agent)
        connection.protocol.open(session, connection.loop.time())
        if log.isEnabledFor(logging.INFO):  # its fields are built only for a line written
            log.info("session %s opened", session.session_id, extra=session_fields(session))
        self._pump(connection)
        return None


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
