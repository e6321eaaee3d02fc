"""The sessions a server process hosts: one record each (``hosted.HostedSession``), in
one registry, which owns what happens to them: hosted, bound to a connection, parked,
written to, ended, lost to another process, handed off.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging

from ..agents.base import Agent, AgentSession
from ..logs import CURRENT_SESSION, session_fields
from ..protocol.server import ServerSession
from ..protocol.tables import ServerState
from .coalescing import WriteCoalescer
from .hosted import HostedSession
from .journal import SessionJournal
from .parking import ParkingLot
from .store import SessionStore
from .telemetry import ServerObserver
from .websocket import ServerWebSocket

__all__ = ["HANDED_OFF", "MOVED", "SessionRegistry"]

#: Why a session ends on this process when it shuts down with a shared store: it lives on
#: in the store, for another process to resume (docs/deploy.md).
HANDED_OFF = "handed off to another process"
#: Why a session left this process when another one resumed it (§5.4).
MOVED = "resumed on another process"

log = logging.getLogger("vrt.server")


class SessionRegistry:
    """Every session of this process, by id (see the module docstring).

    :param store: where the sessions live (``store.SessionStore``).
    :param observer: told when sessions open, get events and end.
    :param max_parked: when given, parking one more session beyond it ends the session
        parked the longest.
    """

    def __init__(
        self, store: SessionStore, observer: ServerObserver | None, max_parked: int | None
    ) -> None:
        self.store = store
        self.observer = observer
        self.max_parked = max_parked
        #: The hosted sessions by id; read it, change it through the registry's methods.
        self.hosted: dict[str, HostedSession] = {}
        #: The hosted session of an id, if any (the dict's own method: no call of ours
        #: on the per-frame path).
        self.get = self.hosted.get
        self.parking = ParkingLot(self._parked_due)
        self.writes = WriteCoalescer(self.write, observer)

    def __len__(self) -> int:
        return len(self.hosted)

    def sessions(self) -> list[HostedSession]:
        return list(self.hosted.values())

    def agents(self) -> list[tuple[Agent, AgentSession]]:
        """The agents of the live sessions."""
        return [
            (hosted.agent, hosted.agent_session)
            for hosted in self.hosted.values()
            if hosted.agent is not None and hosted.agent_session is not None
        ]

    # -- a session arrives, binds, parks --

    def host(
        self,
        session: ServerSession,
        journal: SessionJournal | None,
        connection: ServerWebSocket | None = None,
    ) -> HostedSession:
        """Keep ``session`` (a new one, or one taken from a shared store), bound to
        ``connection`` when given (``bind``, for a session that was never parked)."""
        hosted = HostedSession(session, journal)
        self.hosted[session.session_id] = hosted
        if connection is not None:
            hosted.connection = connection
            connection.gate = journal
        return hosted

    def bind(self, hosted: HostedSession, connection: ServerWebSocket) -> None:
        """``connection`` is the session's now (it opened or resumed it): a parked
        session's timer stops, and with a shared store the connection's output passes
        the journal first."""
        self.parking.leave(hosted)
        hosted.connection = connection
        connection.gate = hosted.journal

    def unbind(self, session_id: str, connection: ServerWebSocket) -> None:
        """``connection`` is gone: the session bound to it, if any, parks (§5.1)."""
        hosted = self.get(session_id)
        if hosted is None or hosted.connection is not connection:
            return
        hosted.connection = None
        if hosted.session.status == "parked":
            self.parking.park(hosted)
            if self.max_parked is not None and len(self.parking) > self.max_parked:
                self.evict_parked()
            if hosted.journal is not None and self.get(session_id) is hosted:
                hosted.journal.changed()  # parked: its resume window, in the store too

    def evict_parked(self) -> bool:
        """End the session parked the longest: its resume fails (RESUME_FAILED, §5.4)."""
        hosted = self.parking.longest()
        if hosted is None:
            return False
        session = hosted.session
        log.info(
            "session %s evicted: parked the longest",
            session.session_id,
            extra=session_fields(session),
        )
        self.end(hosted, "evicted while parked")
        return True

    def _parked_due(self, hosted: HostedSession) -> None:
        """A parked session's timer fired: a tool timeout (§7.2) or its resume window's
        end (§5.1)."""
        session = hosted.session
        if session.status != "parked":
            return
        session.on_timer(asyncio.get_running_loop().time())
        self.writes.deliver(hosted)
        if session.status == "closed":
            log.info("session %s expired", session.session_id, extra=session_fields(session))
            self.end(hosted, "resume window expired")
        elif hosted in self.parking:
            self.parking.rearm(hosted)

    # -- its agent --

    def start_agent(self, hosted: HostedSession, agent: Agent) -> None:
        """Run ``agent`` for the session, through an ``AgentSession`` whose flushes are
        the coalescer's (``coalescing``)."""
        loop = asyncio.get_running_loop()
        session = hosted.session
        writes = self.writes
        # Partials of the plain functions, not of bound methods: a bound method is one
        # more object per session for the collector to walk (parked sessions add up).
        agent_session = AgentSession(
            session,
            functools.partial(WriteCoalescer.flush, writes, hosted),
            loop.time,
            functools.partial(SessionRegistry._agent_failed, self, hosted),
            replied=functools.partial(WriteCoalescer.replied, writes, hosted),
        )
        # What the agent logs from its task carries the session's ids (logs.py).
        token = CURRENT_SESSION.set(session)
        try:
            task = loop.create_task(self._run_agent(hosted, agent, agent_session))
        finally:
            CURRENT_SESSION.reset(token)
        hosted.agent, hosted.agent_session, hosted.task = agent, agent_session, task
        if self.observer is not None:
            self.observer.session_opened(session)
            self.observer.agent_started(session, agent, agent_session)  # before run() runs

    async def _run_agent(
        self, hosted: HostedSession, agent: Agent, agent_session: AgentSession
    ) -> None:
        try:
            await agent.run(agent_session)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._agent_failed(hosted, exc)

    def _agent_failed(self, hosted: HostedSession, exc: Exception) -> None:
        """The agent raised (from ``run`` or a listener): AGENT_ERROR, not recoverable,
        and the session closes (§9.2)."""
        session = hosted.session
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
        self.write(hosted)

    # -- writing --

    def write(self, hosted: HostedSession) -> None:
        """Deliver the session's events, write its frames, re-arm its timer."""
        self.writes.deliver(hosted)
        session = hosted.session
        connection = hosted.connection
        if connection is not None:
            connection.write_outbox()
            connection.arm_timer()
        else:
            if session.status == "parked" and hosted in self.parking:
                self.parking.rearm(hosted)  # the agent may have started a tool call
            if hosted.journal is not None:
                hosted.journal.sync()  # a parked session's messages reach the store all the same
        if session.status == "closed":
            self.end(hosted, "session closed")

    # -- a session leaves --

    def end(self, hosted: HostedSession, reason: str, code: int = 1000) -> None:
        """End the session for good: its connection closes with ``code``, its agent
        stops, and nobody may resume it."""
        session = hosted.session
        if self.get(session.session_id) is not hosted:
            return
        del self.hosted[session.session_id]
        session.close(reason, code)
        self.parking.leave(hosted)
        if hosted.connection is not None:
            hosted.connection.write_outbox()
        self._stop_agent(hosted)
        if self.observer is not None:
            self.observer.session_ended(session, reason, hosted.agent, hosted.agent_session)
        if hosted.journal is not None:
            asyncio.get_running_loop().create_task(self.store.end(hosted.journal))
        _release(hosted)

    def lose(self, session_id: str) -> None:
        """Another process took the session (§5.4): close its connection here with 4000,
        stop its agent and forget it, without writing to the store again."""
        hosted = self.hosted.pop(session_id, None)
        if hosted is None:
            return
        if hosted.journal is not None:
            hosted.journal.lost = True
        self.parking.leave(hosted)
        connection = hosted.connection
        if connection is not None:
            connection.gate = None
            if connection.protocol.state is ServerState.OPEN:
                connection.protocol.replaced(connection.loop.time())
                connection.write_outbox()
        session = hosted.session
        session.close(MOVED)
        self._stop_agent(hosted)
        if self.observer is not None:  # what it kept of the session goes too (its trace)
            self.observer.session_ended(session, MOVED, hosted.agent, hosted.agent_session)
        _release(hosted)

    @staticmethod
    def _stop_agent(hosted: HostedSession) -> None:
        task = hosted.task
        if task is not None and task is not asyncio.current_task():
            task.cancel()

    async def stop_agents(self) -> None:
        """Shutting down with a shared store: stop every agent, and tell the observer
        that its session left this process (the connections write what they sent last
        next, through the journals)."""
        tasks = [hosted.task for hosted in self.hosted.values() if hosted.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for hosted in self.hosted.values():
            if self.observer is not None:
                self.observer.session_ended(
                    hosted.session, HANDED_OFF, hosted.agent, hosted.agent_session
                )
            hosted.agent = hosted.agent_session = hosted.task = None

    async def hand_off(self) -> None:
        """Park every session in the shared store (its state written, within 2 s), and
        let them go: this process writes nothing more for them (issue 12's drain,
        docs/deploy.md)."""
        now = asyncio.get_running_loop().time()
        journals: list[SessionJournal] = []
        for hosted in self.hosted.values():
            self.parking.leave(hosted)
            if hosted.session.status == "connected":
                hosted.session.park(now)
            if hosted.journal is not None:
                hosted.journal.changed()
                journals.append(hosted.journal)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(
                asyncio.gather(*(j.drained() for j in journals), return_exceptions=True), 2.0
            )
        for hosted in self.hosted.values():
            _release(hosted)
        self.hosted.clear()
        for journal in journals:
            self.store.forget(journal)
            journal.lost = True  # given up: this process writes nothing more for it


def _release(hosted: HostedSession) -> None:
    """Let go of what the record holds, so that its agent (whose ``AgentSession`` holds
    the record, through its flushes) is freed by reference counting alone, without
    waiting for the cyclic garbage collector."""
    hosted.connection = None
    hosted.agent = hosted.agent_session = hosted.task = None
