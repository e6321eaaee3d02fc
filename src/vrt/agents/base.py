"""The agent seam: the one small interface between the vRT server and a model.

An agent says what happens in the conversation (a turn starts, a text chunk, audio
for an item, call tool T, the user started speaking) and hears what the client did
(user text, user audio, context, a tool result, an interruption, how much audio was
heard), as :class:`~vrt.protocol.server.AgentInput` events. The server owns sequence
numbers, acks, epochs, turn ids and tool-call settlement: an agent never sees them,
and whatever it sends for a turn that is over is dropped (the methods return False).

See ``docs/agents.md`` for a complete example.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Protocol, Self, TypeAlias, runtime_checkable

from ..errors import VrtException
from ..protocol.messages import FailureCode, Format, Tool, TurnStateName
from ..protocol.server import (
    AgentInput,
    AudioReceived,
    ContextChanged,
    PlaybackReported,
    ResponseInterrupted,
    ServerSession,
    ToolSettled,
    UserTextReceived,
)

if TYPE_CHECKING:
    from .responses import ResponseWatch

__all__ = [
    "MAX_QUEUED_AUDIO",
    "Agent",
    "AgentFactory",
    "AgentInput",
    "AgentSession",
    "AgentSetupError",
    "AudioItem",
    "AudioReceived",
    "ContextChanged",
    "PlaybackReported",
    "ResponseInterrupted",
    "SessionInfo",
    "ToolCallHandle",
    "ToolSettled",
    "Turn",
    "UserTextReceived",
    "option_name",
]


log = logging.getLogger("vrt.agents")

#: Input audio frames an agent may leave unread (10 s of 20 ms frames). An agent busy
#: elsewhere (a model call) must not make the session hold the microphone's stream
#: without bound; beyond this, new frames are dropped: audio is lossy by design (§5.4),
#: control events never are.
MAX_QUEUED_AUDIO: Final = 500


class AgentSetupError(VrtException):
    """An agent cannot be set up (a missing API key, a bad option). Its message is one
    line telling the user what to set; ``vrt serve`` prints it and exits."""


#: What the user types before an agent's option names while its ``setup`` runs:
#: ``brain.`` for the brain of the voice agent (``load_agent(option_prefix=...)``).
OPTION_PREFIX: ContextVar[str] = ContextVar("vrt_option_prefix", default="")


def option_name(name: str) -> str:
    """Option ``name`` as the user types it on the command line (``brain.model`` for a
    brain's ``model``): for a setup error that tells the user what to set."""
    return OPTION_PREFIX.get() + name


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """What an agent factory knows when a new session opens (from ``hello``, §5.2)."""

    principal: str | None
    tools: tuple[Tool, ...]
    capabilities: tuple[str, ...]
    input: Format | None
    output: Format | None
    context: Any


@runtime_checkable
class Agent(Protocol):
    """One agent per session. ``run`` lasts as long as the session; it is cancelled
    when the session closes.

    An agent may also have ``restore(history)``, taking a sequence of
    :data:`~vrt.agents.history.HistoryEntry`: with a shared session store
    (docs/deploy.md) a session can resume on another process than the one that ran its
    agent; that process builds a new agent with the factory (the ``SessionInfo`` of the
    session as it is now) and calls ``restore`` with the conversation so far, before
    ``run``. It must not block (start any provider work in ``run``). An agent without
    it starts such a session with no memory of the conversation. A turn that was in
    progress is not resumed: the server has already ended it (``TURN_CUT_SHORT``).
    """

    #: Audio formats the agent takes and produces without conversion (§8.2).
    input_formats: tuple[Format, ...]
    output_formats: tuple[Format, ...]

    async def run(self, session: AgentSession) -> None: ...


#: Builds the agent of a new session; raising refuses it with START_FAILED (§5.1).
AgentFactory: TypeAlias = Callable[[SessionInfo], "Agent | Awaitable[Agent]"]


class AgentSession:
    """The session as an agent sees it. Every method sends at once; none blocks.

    The server's driver gives it ``flush``, called after every action of the agent, and
    ``replied``, called instead of ``flush`` after an action that sent a reply (a text
    chunk, an agent transcript, an output audio frame, a client tool call): the driver
    writes the first reply to an event at once (``vrt.server.coalescing``). Without
    ``replied``, ``flush`` is called for those too.
    """

    def __init__(
        self,
        session: ServerSession,
        flush: Callable[[], None],
        clock: Callable[[], float],
        on_failure: Callable[[Exception], None] | None = None,
        *,
        replied: Callable[[], None] | None = None,
    ) -> None:
        self._session = session
        self._flush = flush
        self._replied = flush if replied is None else replied
        self._clock = clock
        self._on_failure = on_failure
        self._handler: Callable[[AgentInput], object] | None = None
        self._handling = False
        # A deque and one waiter rather than an asyncio.Queue, and the deque made only
        # when events wait (a listener leaves none): an idle session pays for neither.
        self._events: deque[AgentInput] | None = None
        self._queued_audio = 0
        #: Input audio frames dropped because the agent left too many unread.
        self.dropped_audio = 0
        self._wakeup: asyncio.Future[None] | None = None
        self._waiting: dict[str, asyncio.Future[ToolSettled]] = {}
        #: What the handles of this session (Turn, AudioItem, ToolCallHandle) act on.
        self._seam = _Seam(session, flush, self._replied, self._waiting)
        #: Measures each response, when the server has metrics or traces
        #: (``responses.py``): the methods below tell it what the turn does.
        self.watch: ResponseWatch | None = None

    @classmethod
    def inside(cls, outer: AgentSession) -> Self:
        """A second view of ``outer``'s session for an agent that runs inside another
        agent (the text brain of a voice agent, ``vrt.voice.brain``): its actions act
        on the same session, and it hears only the events the outer agent hands it with
        :meth:`deliver`. A subclass overrides what the inner agent's actions become."""
        inner = cls(
            outer._session, outer._flush, outer._clock, outer._on_failure, replied=outer._replied
        )
        inner.watch = outer.watch
        return inner

    # -- what the session is --

    @property
    def session_id(self) -> str:
        return self._session.session_id

    @property
    def principal(self) -> str | None:
        return self._session.principal

    @property
    def input_format(self) -> Format:
        return self._session.record.input

    @property
    def output_format(self) -> Format:
        return self._session.record.output

    @property
    def capabilities(self) -> tuple[str, ...]:
        return self._session.capabilities

    @property
    def tools(self) -> dict[str, Tool]:
        """The tools the client hosts, by name."""
        return self._session.tools

    @property
    def context(self) -> Any:
        """The application context: data, never instructions (§5.5, §10)."""
        return self._session.context

    @property
    def turn(self) -> Turn | None:
        """The turn in progress, if any."""
        turn_id = self._session.turn_id
        return Turn(self, turn_id) if turn_id is not None else None

    def now(self) -> float:
        return self._clock()

    # -- what the client did --

    async def next_event(self) -> AgentInput:
        while not self._events:
            self._wakeup = asyncio.get_running_loop().create_future()
            try:
                await self._wakeup
            finally:
                self._wakeup = None
        return self._pop()

    def _pop(self) -> AgentInput:
        assert self._events is not None
        event = self._events.popleft()
        if type(event) is AudioReceived:
            self._queued_audio -= 1
        return event

    async def events(self) -> AsyncIterator[AgentInput]:
        """Every event, in the order the client sent what caused it."""
        while True:
            yield await self.next_event()

    async def listen(self, handler: Callable[[AgentInput], object]) -> None:
        """Take every event through a call of ``handler`` as it arrives, instead of
        :meth:`next_event` or :meth:`events`; returns only when ``run`` is cancelled
        (the session ended). ``await session.listen(self.handle)`` is a whole ``run``.

        There is no task wake-up per event: an input audio frame (every 20 ms per
        session) costs a call, and a reply the handler sends at once leaves in the same
        write as whatever else the server sends for the message that caused it. The
        handler runs inside the server's I/O step, so it must not block: start a task
        for anything that waits. An exception from it fails the session as one from
        ``run`` would. Events are never handed to it re-entrantly: what its own actions
        cause comes after it returns."""
        if self._handler is not None:
            raise RuntimeError("this session already has a listener")
        self._handler = handler
        try:
            self._handle(())
            await asyncio.get_running_loop().create_future()  # until cancelled
        finally:
            self._handler = None

    def deliver(self, events: list[AgentInput]) -> None:
        """Hand the session's events to the agent (the server's driver calls this)."""
        if self._handler is not None and not self._handling and not self._events:
            self._handle(events)  # the listener's common case: no queue at all
            return
        queue = self._events
        if queue is None:
            queue = self._events = deque()
        for event in events:
            if type(event) is AudioReceived:
                if self._queued_audio >= MAX_QUEUED_AUDIO:
                    self._drop_audio()
                    continue
                self._queued_audio += 1
            elif isinstance(event, ToolSettled):
                self._settle(event)
            queue.append(event)
        if self._handler is not None:
            self._handle(())
            return
        wakeup = self._wakeup
        if wakeup is not None and not wakeup.done():
            wakeup.set_result(None)

    def _settle(self, event: ToolSettled) -> None:
        waiting = self._waiting.pop(event.call_id, None)
        if waiting is not None and not waiting.done():
            waiting.set_result(event)

    def _handle(self, events: Iterable[AgentInput]) -> None:
        """Call the listener for ``events``, then for whatever was queued meanwhile (its
        own calls can cause events: they wait for it to return)."""
        handler = self._handler
        if handler is None or self._handling:
            return  # a call in progress takes what was queued meanwhile when it returns
        self._handling = True
        try:
            for event in events:
                if isinstance(event, ToolSettled):
                    self._settle(event)
                handler(event)
            while self._events:
                handler(self._pop())
            self._events = None
        except Exception as exc:
            self._events = None
            self._queued_audio = 0
            if self._on_failure is None:
                raise
            self._on_failure(exc)
        finally:
            self._handling = False

    def _drop_audio(self) -> None:
        if not self.dropped_audio:
            log.warning(
                "session %s: the agent left %d input audio frames unread; dropping new ones",
                self.session_id,
                MAX_QUEUED_AUDIO,
            )
        self.dropped_audio += 1

    # -- what the agent does --

    def begin_turn(self, state: TurnStateName = "thinking") -> Turn:
        """Start a turn (a new epoch, §6.1); a turn still in progress ends first."""
        turn_id = self._session.begin_turn(state)
        if self.watch is not None:
            self.watch.turn(turn_id, state)
        self._flush()
        return Turn(self, turn_id)

    def user_started_speaking(self) -> Turn:
        """Speech detected: the response in flight is interrupted (§6.2) and a
        ``listening`` turn begins (or continues)."""
        turn_id = self._session.user_started_speaking()
        if self.watch is not None:
            self.watch.turn(turn_id, "listening", interrupting=True)
        self._flush()
        return Turn(self, turn_id)

    def interrupt(self) -> bool:
        """Interrupt the response in flight on the agent's own initiative (§6.2)."""
        done = self._session.interrupt_response("server")
        if done and self.watch is not None:
            self.watch.interrupted()
        self._flush()
        return done

    def user_transcript(
        self,
        text: str,
        *,
        final: bool = True,
        item_id: str | None = None,
        turn: Turn | None = None,
    ) -> None:
        """A user transcript, for ``turn`` (default: the turn in progress). A transcription
        that ends after its speech's turn is over still belongs to that turn: pass it."""
        turn_id = turn.id if turn is not None else self._session.turn_id
        self._session.agent_output.send_transcript(
            "user", text, final=final, item_id=item_id, turn_id=turn_id
        )
        self._flush()

    def error(self, message: str, *, recoverable: bool = True) -> None:
        """Report ``AGENT_ERROR`` (§9.2) to the client."""
        self._session.agent_output.error(message, recoverable=recoverable)
        self._flush()

    def close(self, message: str) -> None:
        """End the session for good: ``AGENT_ERROR`` (not recoverable), then close 1000
        (§5.6). The agent's ``run`` is cancelled."""
        self._session.agent_output.error(message, recoverable=False)
        self._session.close(message)
        self._flush()


class _Seam:
    """What the handles of an agent session (:class:`Turn`, :class:`AudioItem`,
    :class:`ToolCallHandle`) act on: the server's session and its parts, the write that
    follows each action (``flush``) and the client calls awaiting their result."""

    __slots__ = ("core", "flush", "replied", "waiting")

    def __init__(
        self,
        core: ServerSession,
        flush: Callable[[], None],
        replied: Callable[[], None],
        waiting: dict[str, asyncio.Future[ToolSettled]],
    ) -> None:
        self.core = core
        self.flush = flush
        #: Called instead of ``flush`` after an action that sent a reply (the driver
        #: writes a delivery's first reply at once).
        self.replied = replied
        self.waiting = waiting

    def provider_members(self, turn_id: str | None, call_id: str | None, members: Any) -> None:
        # The session's observer (a shared store's journal) keeps them; without one
        # nothing outlives this process, so there is nothing to keep.
        observer = getattr(self.core, "observer", None)
        keep = getattr(observer, "provider_members", None)
        if callable(keep):
            keep(turn_id, call_id, members)


def _seam(session: AgentSession) -> _Seam:
    """The seam of ``session``, for its handles."""
    return session._seam  # noqa: SLF001 - the handles are the session's own, in its module


@dataclass(frozen=True, slots=True, init=False)
class Turn:
    """A handle on one turn. Once the turn is over (ended or interrupted) every method
    returns False or None and sends nothing."""

    session: AgentSession
    id: str
    _seam: _Seam = field(init=False, repr=False, compare=False)

    def __init__(self, session: AgentSession, id: str) -> None:
        # Written out rather than generated with a __post_init__: an agent makes a turn
        # for every reply.
        object.__setattr__(self, "session", session)
        object.__setattr__(self, "id", id)
        object.__setattr__(self, "_seam", session._seam)  # noqa: SLF001 - its own session's

    @property
    def active(self) -> bool:
        return self._seam.core.turn_id == self.id

    def _done(self, result: bool) -> bool:
        self._seam.flush()
        return result

    def _sent(self, sent: bool) -> bool:
        """A reply was sent, or nothing was: the driver is told which."""
        seam = self._seam
        (seam.replied if sent else seam.flush)()
        return sent

    def state(self, state: TurnStateName) -> bool:
        changed = self._seam.core.set_state(self.id, state)
        watch = self.session.watch
        if changed and watch is not None:
            watch.turn(self.id, state)
        return self._done(changed)

    def text(self, chunk: str) -> bool:
        sent = self._seam.core.agent_output.send_text(self.id, chunk)
        watch = self.session.watch
        if sent and watch is not None:
            watch.text(self.id)
        return self._sent(sent)

    def transcript(self, text: str, *, final: bool = True, item_id: str | None = None) -> bool:
        sent = self._seam.core.agent_output.send_transcript(
            "agent", text, final=final, item_id=item_id, turn_id=self.id
        )
        watch = self.session.watch
        if sent and watch is not None:
            watch.text(self.id)
        return self._sent(sent)

    def audio(self, item_id: str | None = None) -> AudioItem | None:
        """Begin an output audio item (``audio.start``, §8.3)."""
        started = self._seam.core.agent_output.start_audio(self.id, item_id)
        self._seam.flush()
        return AudioItem(self.session, started) if started is not None else None

    def tool_call(
        self, name: str, *, provider_id: str | None = None, server_side: bool = False
    ) -> ToolCallHandle | None:
        """Begin a tool call whose arguments will stream; None when the turn is over or
        the client does not host ``name`` (for a client tool)."""
        call_id = self._seam.core.tool_calls.start(
            self.id, name, provider_id=provider_id, server_side=server_side
        )
        self._seam.flush()
        return ToolCallHandle(self.session, call_id) if call_id is not None else None

    async def call_tool(
        self, name: str, arguments: Any, *, provider_id: str | None = None
    ) -> ToolSettled:
        """Call a client tool and wait for its one result (the client's, TIMEOUT or
        INTERRUPTED). A call that cannot be made settles FAILED at once."""
        handle = self.tool_call(name, provider_id=provider_id)
        if handle is None:
            return _not_called(name, self.id, provider_id)
        return await handle.issue(arguments)

    def provider_members(self, members: Any) -> None:
        """What the model's provider attached to the agent's message of this turn
        whose text was just sent (e.g. DeepSeek's ``reasoning_content``): kept with
        that text in a shared store's conversation log, so that ``restore`` gives it
        back to an agent rebuilt on another process. Opaque to the server."""
        self._seam.provider_members(self.id, None, members)

    def end(self) -> bool:
        """The turn is done (``turn.state idle``)."""
        ended = self._seam.core.end_turn(self.id)
        watch = self.session.watch
        if ended and watch is not None:
            watch.turn(self.id, "idle")
        return self._done(ended)


@dataclass(frozen=True, slots=True)
class AudioItem:
    session: AgentSession
    id: str
    _seam: _Seam = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_seam", _seam(self.session))

    def write(self, payload: bytes, duration_ms: float | None = None) -> bool:
        """One output frame in the session's output format; False once the turn is over.
        While the client is disconnected frames are lost (§5.4) but True: the turn goes on."""
        seam = self._seam
        sent = seam.core.agent_output.send_audio(self.id, payload, duration_ms)
        watch = self.session.watch  # per frame: this test alone, once the first was timed
        if watch is not None and watch.audio_due and sent:
            watch.audio()
        (seam.replied if sent else seam.flush)()
        return sent


@dataclass(frozen=True, slots=True)
class ToolCallHandle:
    session: AgentSession
    call_id: str
    _seam: _Seam = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_seam", _seam(self.session))

    def delta(self, fragment: str) -> bool:
        """The next fragment of the arguments' JSON text (§7.4, §7.5)."""
        return self._done(self._seam.core.tool_calls.arguments_delta(self.call_id, fragment))

    def issue(self, arguments: Any) -> asyncio.Future[ToolSettled]:
        """The arguments are complete: a client tool is called, and the future resolves
        with its one result; a server tool starts running (the future resolves at once
        with ok; report its end with :meth:`settle`)."""
        seam = self._seam
        future: asyncio.Future[ToolSettled] = asyncio.get_running_loop().create_future()
        issued = seam.core.tool_calls.issue(self.call_id, arguments, self.session.now())
        # A client tool call is a reply (it goes to the client); a server one is not.
        client = issued and seam.core.tool_calls.is_client_call(self.call_id)
        (seam.replied if client else seam.flush)()
        if not issued:
            future.set_result(_not_called("", "", None, self.call_id))
        elif client:
            seam.waiting[self.call_id] = future
        else:
            future.set_result(
                ToolSettled(call_id=self.call_id, provider_id=None, name="", turn_id="", ok=True)
            )
        return future

    def provider_members(self, members: Any) -> None:
        """What the model's provider attached to this call (e.g. Gemini 3's thought
        signature), given before :meth:`issue`: kept with the call in a shared store's
        conversation log (as :meth:`Turn.provider_members`)."""
        self._seam.provider_members(None, self.call_id, members)

    def progress(self, progress: Any) -> bool:
        """Progress of a running server tool (only visible with tool-stream-v1)."""
        return self._done(self._seam.core.tool_calls.progress(self.call_id, progress))

    def settle(self, ok: bool, code: FailureCode | None = None) -> bool:
        """A server tool finished; its output stays on the server (§7.5)."""
        return self._done(self._seam.core.tool_calls.settle_server_call(self.call_id, ok, code))

    def fail(self, message: str) -> bool:
        """The model stopped before completing the arguments (§7.5 ``failed``)."""
        return self._done(self._seam.core.tool_calls.fail(self.call_id, message))

    def _done(self, result: bool) -> bool:
        self._seam.flush()
        return result


def _not_called(name: str, turn_id: str, provider_id: str | None, call_id: str = "") -> ToolSettled:
    return ToolSettled(
        call_id=call_id,
        provider_id=provider_id,
        name=name,
        turn_id=turn_id,
        ok=False,
        code="FAILED",
        message="the call could not be made",
    )
