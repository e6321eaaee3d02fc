"""When what an agent sends is written: at once for the first of a step, together after.

Every action of an agent (``AgentSession``) ends with a flush, and a flush per message
would cost a write (a system call) per text chunk or audio frame. So writes coalesce:

* outside a delivery (the agent's own task), the first flush of a loop step writes at
  once (no added latency) and what follows in the same step leaves in one write when
  the step is done;
* while the server delivers a session's events to its agent, every caller writes the
  session's frames right after the delivery, so what a listening agent sends while it
  handles them (``AgentSession.listen``) leaves in that same write; but for its first
  reply (a text chunk, an agent transcript, an audio frame, a client tool call), which
  is written at once with what preceded it: a reply the agent produces whole does not
  wait for its last part, and costs two writes, not one per message.

What is a reply is the agent seam's to say (``AgentSession`` calls ``replied`` rather
than ``flush`` after one), not counted by the protocol core.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from .hosted import HostedSession
from .telemetry import ServerObserver

__all__ = ["WriteCoalescer"]


class WriteCoalescer:
    """Delivers sessions' events to their agents and decides when what the agents send
    is written (see the module docstring)."""

    __slots__ = ("_delivering", "_observer", "_reply_due", "_write")

    def __init__(
        self, write: Callable[[HostedSession], None], observer: ServerObserver | None
    ) -> None:
        #: Delivers the session's events and writes its frames now.
        self._write = write
        self._observer = observer
        #: The session whose events are being delivered, if any.
        self._delivering: HostedSession | None = None
        #: While delivering: its agent's first reply is still to be written at once.
        self._reply_due = False

    def deliver(self, hosted: HostedSession) -> None:
        """Hand the session's events to its agent; the caller writes right after."""
        session = hosted.session
        events = session.take_events()
        if events:
            if self._observer is not None:
                self._observer.delivered(session, events)
            agent_session = hosted.agent_session
            if agent_session is not None:
                outer = self._delivering, self._reply_due
                self._delivering, self._reply_due = hosted, True
                try:
                    agent_session.deliver(events)
                finally:
                    self._delivering, self._reply_due = outer

    def flush(self, hosted: HostedSession) -> None:
        """The agent acted on its session (``AgentSession``'s flush)."""
        if hosted is not self._delivering:
            self._soon(hosted)

    def replied(self, hosted: HostedSession) -> None:
        """The agent sent a reply: during a delivery, the first is written at once."""
        if hosted is self._delivering:
            if self._reply_due:
                self._reply_due = False
                connection = hosted.connection
                if connection is not None:
                    connection.write_outbox()
            return
        self._soon(hosted)

    def _soon(self, hosted: HostedSession) -> None:
        """The first call of a step is written at once; the rest when the step is done."""
        if hosted.write_due:
            return
        self._write(hosted)
        hosted.write_due = True
        asyncio.get_running_loop().call_soon(self._due, hosted)

    def _due(self, hosted: HostedSession) -> None:
        hosted.write_due = False
        self._write(hosted)
