"""A server session's channel: its lifecycle (§5.1), walking the rows of
:data:`~vrt.protocol.tables.SESSION_TABLE`, and the two queues whose fate the lifecycle
decides: frames for the bound connection and events for the agent.

A session is *connected* while a connection has it bound, *parked* between connections
(for the resume window) and then *closed*. While connected, what it sends goes to the
connection's frames; while parked, sequenced messages are only numbered and kept for the
resume (§5.4) and the rest is lost; once closed nothing is sent.

The session and its parts (:class:`~vrt.protocol.server.agent_tools.AgentToolCalls`,
:class:`~vrt.protocol.server.agent_output.AgentOutput`) all send through the one channel
they share, so that none of them reaches into another. It refers to none of them: a
session is never a reference cycle (``docs/reliability.md``, "Memory, and a defect it
found").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Protocol

from ..codec import encode
from ..errors import ErrorCode
from ..machine import Action, Machine
from ..messages import Error, Message
from ..outputs import CloseCode, Output, SendText
from ..streams import OutgoingStream
from ..tables import SESSION_TABLE, SessionAction, SessionInput, SessionState
from .events import AgentInput
from .record import SessionRecord

__all__ = ["BoundConnection", "SessionChannel", "SessionObserver"]

# Bound once: reading a member off its enum class goes through the metaclass, some ten
# times the cost of reading a global, and these are read for every message.
_CONNECTED: Final = SessionState.CONNECTED
_PARKED: Final = SessionState.PARKED
_CLOSED: Final = SessionState.CLOSED


class SessionObserver(Protocol):
    """Sees what a session sends and what it reports to its agent, as it happens: a
    session store journals from it (``vrt.server.journal``). Input audio is not shown
    (it is never stored, §8.1)."""

    def sent(self, seq: int, message: Message, data: bytes) -> None:
        """Sequenced message ``seq`` was numbered and kept; ``data`` is its encoding."""

    def event(self, event: AgentInput) -> None:
        """An event for the agent, other than input audio."""


class BoundConnection(Protocol):
    """The connection a session is bound to, as the session sees it (§5.4: a newer
    connection resuming the session replaces it)."""

    def replaced(self, now: float) -> None:
        """A newer connection took the session: close 4000, and park nothing."""


class SessionChannel(Machine[SessionState, SessionInput]):
    """One session's lifecycle and what it sends and reports (§5.1)."""

    __slots__ = (
        "announced",
        "connection",
        "events",
        "frames",
        "observer",
        "outgoing",
        "record",
        "resume_window",
    )

    def __init__(self, record: SessionRecord, outgoing: OutgoingStream, resume_window: float):
        self.record = record
        #: The session's stream of sequenced messages (§4.1): numbered and kept here.
        self.outgoing = outgoing
        self.resume_window = resume_window
        #: Sees what the session sends and reports (a session store's journal), if any.
        self.observer: SessionObserver | None = None
        #: The connection the session is bound to: None while parked, and once a closed
        #: session's connection is gone.
        self.connection: BoundConnection | None = None
        #: Frames for the bound connection, in order; filled only while connected.
        self.frames: list[Output] = []
        #: What the client did, for the agent, in order.
        self.events: list[AgentInput] = []
        #: The item of the last ``audio.start`` on the bound connection (§8.3).
        self.announced: str | None = None
        self._enter(_CLOSED if record.ended is not None else _PARKED)

    # -- the lifecycle (SESSION_TABLE) --

    def attach(self, connection: BoundConnection, now: float) -> None:
        """``connection`` binds the session (its ``ready``); an older one is replaced."""
        self._input(SessionInput.ATTACH, connection, now)

    def park(self, now: float) -> None:
        """The bound connection ended: wait ``resume_window`` for a resume (§5.1)."""
        self._input(SessionInput.PARK, None, now)

    def expire(self, now: float) -> None:
        """The resume window ended without a resume (§5.1)."""
        self._input(SessionInput.EXPIRE, (CloseCode.NORMAL, "resume window expired"), now)

    def end(self, code: int, reason: str) -> None:
        """End the session (§5.6): its connection, if any, closes with ``code``; nothing
        resumes it."""
        self._input(SessionInput.END, (code, reason), 0.0)

    # -- sending --

    def send(self, message: Message) -> None:
        """A sequenced message: numbered, kept for resume, written if connected."""
        if self.state is _CLOSED:
            return
        outgoing = self.outgoing
        data = outgoing.send(message)
        if self.observer is not None:
            self.observer.sent(outgoing.last_seq, message, data)
        if self.state is _CONNECTED:
            self.frames.append(SendText(data=data))
        if outgoing.exhausted:
            # §4.1: nothing may follow seq 4294967295; the client opens a new session.
            self.end(CloseCode.NORMAL, "sequence numbers exhausted; open a new session")

    def send_error(self, code: ErrorCode, message: str, recoverable: bool) -> None:
        """A sequenced ``error`` (§4.1: errors are sequenced once a session is bound)."""
        self.send(Error(code=code, message=message, recoverable=recoverable))

    def send_transient(self, message: Message) -> None:
        """A transient message (§4.1) on the bound connection; lost while parked."""
        if self.state is _CONNECTED:
            self.frames.append(SendText(data=encode(message, 0)))

    def report(self, event: AgentInput) -> None:
        """An event for the agent, seen by the observer (input audio is reported by
        appending to :attr:`events`: it is never journalled)."""
        self.events.append(event)
        if self.observer is not None:
            self.observer.event(event)

    # -- actions, one per SessionAction --

    def _bind(self, connection: BoundConnection, now: float) -> None:
        self.connection = connection
        self.frames = []
        self.announced = None  # §8.3: a resumed connection starts without a current item
        self.record.expires_at = None

    def _replace(self, connection: BoundConnection, now: float) -> None:
        older = self.connection
        self._bind(connection, now)
        if older is not None and older is not connection:
            older.replaced(now)  # §5.4: close 4000; it parks nothing

    def _park(self, argument: None, now: float) -> None:
        # _release, inline: every connection that ends parks its session.
        self.connection = None
        self.frames = []
        self.announced = None
        self.record.expires_at = now + self.resume_window

    def _release(self, argument: None, now: float) -> None:
        self.connection = None
        self.frames = []  # what the connection did not take is lost, or kept (§5.4)
        self.announced = None

    def _end(self, ended: tuple[int, str], now: float) -> None:
        self.record.ended = ended
        self.record.expires_at = None

    def _ignore(self, argument: Any, now: float) -> None:
        pass

    @classmethod
    def _actions(cls) -> Mapping[SessionAction, Action]:
        return {
            SessionAction.BIND: cls._bind,
            SessionAction.REPLACE: cls._replace,
            SessionAction.PARK: cls._park,
            SessionAction.RELEASE: cls._release,
            SessionAction.END: cls._end,
            SessionAction.IGNORE: cls._ignore,
        }


SessionChannel.compile_table(SESSION_TABLE, SessionState)
