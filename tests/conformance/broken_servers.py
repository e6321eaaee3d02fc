"""Deliberately broken vRT servers: our server with one rule of the protocol broken.

Each :class:`Variant` patches the server core (:mod:`vrt.protocol.server`) or the
server (:mod:`vrt.server.opening`) for as long as its :meth:`Variant.patched` context is
open, or runs another agent behind it, and names the checks of the server conformance
suite with the outcome each must have. Broken variants break one rule: the checks
judging it must fail. Correct variants are servers that are not ours as it is (spaced
JSON, other text chunks, an error inside a turn, no speech detection, other session
ids): the checks must pass them (or skip, or not apply, as the variant says).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import secrets
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, cast
from unittest import mock

import vrt.protocol.server.session as core
from vrt.agents import AgentFactory, AgentInput, AgentSession, AudioReceived, Turn, UserTextReceived
from vrt.agents.scripted import ScriptedAgent, scripted_agent
from vrt.conformance.framework import Outcome
from vrt.protocol import ids
from vrt.protocol.errors import ErrorCode
from vrt.protocol.messages import Error, Interrupt, ToolCallDelta, ToolResult
from vrt.protocol.server import ServerSession
from vrt.protocol.server.agent_tools import AgentToolCalls
from vrt.protocol.server.channel import SessionChannel
from vrt.protocol.server.tools import ToolCalls
from vrt.protocol.streams import IncomingStream, OutgoingStream
from vrt.server import opening
from vrt.server.websocket import ServerWebSocket

__all__ = ["VARIANTS", "Variant"]


@dataclass(frozen=True)
class Variant:
    """One server that is not ours as it is: what it breaks (or what is unusual about a
    correct one), the outcome each check named must have against it, how to build it."""

    name: str
    #: What rule it breaks; for a correct server, what is unusual about it.
    breaks: str
    #: check id -> the outcome it must have ("fail" for the checks that catch a broken
    #: rule, "pass" for controls and for the checks a correct server must pass).
    outcomes: Mapping[str, Outcome]
    #: Patches applied while the variant runs (each a context manager factory).
    patches: tuple[Callable[[], contextlib.AbstractContextManager[Any]], ...] = ()
    agent: AgentFactory = scripted_agent
    #: Run with two principals (for the checks that need --auth and --auth-other).
    auth: bool = False
    #: ServerConfig members, and ServerSuiteOptions members, of the run.
    config: Mapping[str, Any] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)
    #: check id -> what its detail must say (a regular expression): the failure blames
    #: the rule broken, a skip says how to run the check.
    says: Mapping[str, str] = field(default_factory=dict)
    #: A correct implementation (the suite must not fail it), not a broken one.
    correct: bool = False

    @contextlib.contextmanager
    def patched(self) -> Iterator[None]:
        with contextlib.ExitStack() as stack:
            for patch in self.patches:
                stack.enter_context(patch())
            yield


def _fails(*checks: str) -> dict[str, Outcome]:
    return dict.fromkeys(checks, "fail")


def _passes(*checks: str) -> dict[str, Outcome]:
    return dict.fromkeys(checks, "pass")


def _session_class(
    cls: type[ServerSession],
) -> Callable[[], contextlib.AbstractContextManager[Any]]:
    """Make the server build sessions of ``cls``."""
    return lambda: mock.patch.object(opening, "ServerSession", cls)


# --- 1. no deduplication (§4.3) -------------------------------------------------------


class _NoDedupeStream(IncomingStream):
    """Reports every sequenced message as new: duplicates are handled again."""

    def receive(self, seq: int, now: float) -> bool:
        super().receive(seq, now)
        return True


# --- 2. callIds reused (§7.1) ---------------------------------------------------------


def _reused_ids() -> contextlib.AbstractContextManager[Any]:
    original = ids.new_id
    cycle = itertools.cycle(["c_reused-one", "c_reused-two"])

    def new_id(prefix: str) -> str:
        return next(cycle) if prefix == "c_" else original(prefix)

    return mock.patch("vrt.protocol.server.agent_tools.new_id", new_id)


# --- 3. previews even with tool-stream-v1 (§7.4) --------------------------------------


class _PreviewAlways(AgentToolCalls):
    """Sends tool.call.delta previews even when tool-stream-v1 is in effect."""

    def arguments_delta(self, call_id: str, delta: str) -> bool:
        call = self._record.calls.get(call_id)
        sent = super().arguments_delta(call_id, delta)
        if sent and call is not None and self._tool_stream:
            self._channel.send(
                ToolCallDelta(
                    call_id=call.call_id,
                    turn_id=call.turn_id,
                    epoch=call.epoch,
                    preview={"argumentsDelta": delta},
                )
            )
        return sent


def _tool_calls(cls: type[AgentToolCalls]) -> Callable[[], contextlib.AbstractContextManager[Any]]:
    """Make the server's sessions keep their tool calls in ``cls``."""
    return lambda: mock.patch.object(core, "AgentToolCalls", cls)


# --- 4. a foreign resume answered unlike an unknown one (§5.3) ------------------------


def _revealing() -> contextlib.AbstractContextManager[Any]:
    """Make the server tell a foreign principal that the session exists."""
    resume = opening.SessionOpener._resume

    async def revealing(
        self: opening.SessionOpener,
        connection: ServerWebSocket,
        session_id: str,
        principal: str | None,
    ) -> None:
        hosted = self._sessions.get(session_id)
        if hosted is not None and hosted.session.principal != principal:
            connection.protocol._refuse(
                ErrorCode.RESUME_FAILED, "the session belongs to another principal", 4404
            )
            self._pump(connection)
            return
        await resume(self, connection, session_id, principal)

    return mock.patch.object(opening.SessionOpener, "_resume", revealing)


# --- 5. nothing resent after a resume (§5.4) ------------------------------------------


class _NoResendStream(OutgoingStream):
    """Agrees to every possible resume but resends nothing."""

    def resend_after(self, resume_from: int) -> list[bytes] | None:
        return [] if super().resend_after(resume_from) is not None else None


# --- 6. errors with seq 0 after ready (§4.1) ------------------------------------------


def _unsequenced_errors() -> contextlib.AbstractContextManager[Any]:
    """Sends its errors with seq 0 even once the session is bound."""

    def send_error(channel: SessionChannel, code: str, message: str, recoverable: bool) -> None:
        channel.send_transient(Error(code=code, message=message, recoverable=recoverable))

    return mock.patch.object(SessionChannel, "send_error", send_error)


# --- 7. a result taken for another call (§7.2) ----------------------------------------


class _ResultByName(ServerSession):
    """Takes a result with an unknown or settled callId for the oldest pending call."""

    def _on_tool_result(self, result: ToolResult, now: float) -> None:
        if self.record.calls.get(result.call_id) is None:
            pending = [c for c in self.record.calls if c.client]
            if pending:
                result = ToolResult(
                    call_id=pending[0].call_id,
                    epoch=pending[0].epoch,
                    ok=result.ok,
                    output=result.output,
                    code=result.code,
                    message=result.message,
                )
        super()._on_tool_result(result, now)


# --- 8. an interrupted epoch's calls kept open (§6.2, §7.5) ---------------------------


class _KeepsInterruptedCalls(ServerSession):
    """Closes the epoch on interruption, but its tool calls stay pending: a late result
    still settles them (the closed epoch's call plays on)."""

    def _interrupt_in_flight(self, reason: str, *, tell_agent: bool = True) -> bool:
        calls, self.record.calls = self.record.calls, ToolCalls()
        try:
            return super()._interrupt_in_flight(reason, tell_agent=tell_agent)
        finally:
            self.record.calls = calls


# --- 9. stale interrupts honoured (messages.md, §6.2) ---------------------------------


class _StaleInterrupts(ServerSession):
    """Interrupts the response in flight whatever epoch the interrupt names."""

    def _on_interrupt(self, message: Interrupt, now: float) -> None:
        self._interrupt_in_flight(message.reason)


# --- 10. a tool call kept pending after its timeout (§7.2) -----------------------------


class _TimeoutKeepsCall(ServerSession):
    """Settles a call TIMEOUT when its timeout fires, but keeps it pending: a late
    result settles it a second time."""

    def on_timer(self, now: float) -> None:
        expiring = self.record.calls.due(now)
        super().on_timer(now)
        for call in expiring:
            call.deadline = None
            if self.record.calls.get(call.call_id) is None:
                self.record.calls.add(call)


# --- 11. session ids: guessable ones, and unusual unguessable ones (§5.2) -------------


def _session_ids(
    make: Callable[[int], str],
) -> Callable[[], contextlib.AbstractContextManager[Any]]:
    """Make the server's session ids ``make(k)`` for the k-th session."""

    def patch() -> contextlib.AbstractContextManager[Any]:
        original = ids.new_id
        counter = itertools.count(1)

        def new_id(prefix: str) -> str:
            return make(next(counter)) if prefix == "s_" else original(prefix)

        return mock.patch("vrt.protocol.server.session.new_id", new_id)

    return patch


# --- correct servers that are not ours as it is ---------------------------------------


class _SpacedJson(ScriptedAgent):
    """Prints the JSON of its replies with spaces after commas and colons."""

    @staticmethod
    def json_text(value: Any) -> str:
        return json.dumps(value, separators=(", ", ": "))


class _ThreeCharacterTurn:
    """A turn whose text goes out in chunks of three characters."""

    def __init__(self, turn: Turn) -> None:
        self._turn = turn

    def text(self, text: str) -> bool:
        pieces = [text[i : i + 3] for i in range(0, len(text), 3)] or [""]
        return all(self._turn.text(piece) for piece in pieces)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._turn, name)


class _ThreeCharacterSession:
    def __init__(self, session: AgentSession) -> None:
        self._session = session

    def begin_turn(self, state: Any = "thinking") -> Any:
        return _ThreeCharacterTurn(self._session.begin_turn(state))

    def user_started_speaking(self) -> Any:
        return _ThreeCharacterTurn(self._session.user_started_speaking())

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)


class _Rechunked(ScriptedAgent):
    """Sends its replies in text chunks of three characters, whatever the words."""

    def handle(self, session: AgentSession, event: AgentInput) -> None:
        super().handle(cast(AgentSession, _ThreeCharacterSession(session)), event)


class _TurnAroundError(ScriptedAgent):
    """Answers ``error`` inside a turn: turn.state thinking, the error, idle (§4.1 lets
    other sequenced messages come before the error)."""

    def handle(self, session: AgentSession, event: AgentInput) -> None:
        if isinstance(event, UserTextReceived) and event.text.split()[:1] == ["error"]:
            turn = session.begin_turn("thinking")
            session.error("scripted error", recoverable=True)
            turn.end()
            return
        super().handle(session, event)


class _Deaf(ScriptedAgent):
    """No speech detection: input audio reaches the agent, which never reacts to it."""

    def handle(self, session: AgentSession, event: AgentInput) -> None:
        if not isinstance(event, AudioReceived):
            super().handle(session, event)


#: The checks that read the scripted agent's replies (text, result lines, JSON).
REPLY_CHECKS: Final = (
    "tool-call-declared",
    "tool-result-unknown-ignored",
    "tool-result-duplicate-ignored",
    "tool-result-late-ignored",
    "resume-pending-tool-call",
    "dedupe-duplicate-context-not-applied",
    "tool-stream-settled-failure",
)
#: The checks that read whole reply texts.
TEXT_CHECKS: Final = (
    "dedupe-duplicate-text-once",
    "resume-client-resends-deduped",
    "invalid-not-acted-on",
    "framing-unknown-members-ignored",
    "table-opening-keeps-messages",
    "text-interrupts-response",
    "agent-error-recoverable",
)
SPEECH_CHECKS: Final = ("table-open-audio-passed", "speech-interrupts-response")
SESSION_ID_CHECKS: Final = ("ready-session-id-unguessable", "ready-session-id-122-bits")

VARIANTS: tuple[Variant, ...] = (
    Variant(
        "no-dedupe",
        "handles a duplicate sequenced message again (§4.3)",
        {
            **_fails(
                "dedupe-duplicate-text-once",
                "dedupe-duplicate-context-not-applied",
                "resume-client-resends-deduped",
            ),
            **_passes("seq-sequenced-consecutive"),
        },
        patches=(lambda: mock.patch.object(core, "IncomingStream", _NoDedupeStream),),
    ),
    Variant(
        "reused-call-id",
        "reuses a callId within a session (§7.1)",
        {**_fails("tool-call-ids-unique"), **_passes("tool-call-declared")},
        patches=(_reused_ids,),
    ),
    Variant(
        "preview-with-tool-stream",
        "sends tool.call.delta although tool-stream-v1 is in effect (§7.4)",
        {**_fails("tool-stream-no-preview"), **_passes("tool-stream-client-call")},
        patches=(_tool_calls(_PreviewAlways),),
    ),
    Variant(
        "revealing-foreign-resume",
        "answers a foreign resume unlike an unknown one (§5.3)",
        {**_fails("auth-foreign-resume-like-unknown"), **_passes("resume-unknown-session")},
        patches=(_revealing,),
        auth=True,
    ),
    Variant(
        "no-resend",
        "resends nothing after a resume (§5.4)",
        {
            **_fails(
                "resume-resends-after-resume-from",
                "resume-pending-tool-call",
                "resume-replay-same-ids",
            ),
            **_passes("resume-resumed-from-last-seq"),
        },
        patches=(lambda: mock.patch.object(core, "OutgoingStream", _NoResendStream),),
    ),
    Variant(
        "unsequenced-errors",
        "sends errors with seq 0 after ready (§4.1)",
        {
            **_fails(
                "seq-error-sequenced-in-session",
                "table-duplicate-hello-open",
                "audio-malformed-recoverable",
                "vectors-client-type",
                "agent-error-recoverable",
            ),
            **_passes("seq-error-zero-before-session"),
        },
        patches=(_unsequenced_errors,),
    ),
    Variant(
        "result-by-name",
        "takes an unknown or late tool.result for another pending call (§7.2)",
        {
            **_fails(
                "tool-result-unknown-ignored",
                "tool-result-late-ignored",
                "tool-result-duplicate-ignored",
            ),
            **_passes("tool-call-declared"),
        },
        patches=(_session_class(_ResultByName),),
        says={
            "tool-result-duplicate-ignored": "taken for the other pending call",
            "tool-result-unknown-ignored": "unknown callId .* had an effect",
            "tool-result-late-ignored": "interrupted call.s late result",
        },
    ),
    Variant(
        "keeps-interrupted-calls",
        "keeps an interrupted epoch's tool calls pending: a late result settles them (§6.2, §7.5)",
        {**_fails("tool-stream-cancelled-on-interrupt"), **_passes("interrupt-observed-epoch")},
        patches=(_session_class(_KeepsInterruptedCalls),),
    ),
    Variant(
        "stale-interrupt",
        "interrupts the response in flight on an interrupt naming an older epoch",
        {**_fails("interrupt-stale-no-effect"), **_passes("interrupt-observed-epoch")},
        patches=(_session_class(_StaleInterrupts),),
    ),
    Variant(
        "timeout-keeps-call",
        "keeps a call pending after its timeout settled it: a late result settles it again (§7.2)",
        {**_fails("tool-result-after-timeout-ignored"), **_passes("tool-call-declared")},
        patches=(_session_class(_TimeoutKeepsCall),),
        says={"tool-result-after-timeout-ignored": "after the timeout .* had an effect"},
        config={"tool_timeout": 1.0},
        options={"tool_timeout": 1.0},
    ),
    Variant(
        "counter-session-ids",
        "issues session ids from a counter (§5.2)",
        _fails(*SESSION_ID_CHECKS),
        says={"ready-session-id-unguessable": "a counter or a clock"},
        patches=(_session_ids(lambda k: f"session-{k:08d}"),),
    ),
    Variant(
        "clock-session-ids",
        "issues session ids from the clock, in nanoseconds (§5.2)",
        _fails(*SESSION_ID_CHECKS),
        patches=(_session_ids(lambda k: f"{time.time_ns():x}"),),
    ),
    Variant(
        "narrow-session-ids",
        "issues session ids of 32 random bits (§5.2)",
        _fails(*SESSION_ID_CHECKS),
        patches=(_session_ids(lambda k: f"sess-{secrets.token_hex(4)}"),),
    ),
    Variant(
        "repeated-session-ids",
        "issues session ids whose second half repeats the first: 48 random bits (§5.2)",
        _fails(*SESSION_ID_CHECKS),
        patches=(_session_ids(lambda k: secrets.token_hex(6) * 2),),
    ),
    Variant(
        "uuid-session-ids",
        "session ids are version 4 UUIDs with their dashes: 122 random bits",
        _passes(*SESSION_ID_CHECKS),
        patches=(_session_ids(lambda k: str(uuid.uuid4())),),
        correct=True,
    ),
    Variant(
        "hex-session-ids",
        "session ids are 32 hex digits behind a constant prefix: 128 random bits",
        _passes(*SESSION_ID_CHECKS),
        patches=(_session_ids(lambda k: "vrt-session-" + secrets.token_hex(16)),),
        correct=True,
    ),
    Variant(
        "spaced-json",
        'the agent prints the JSON of its replies with spaces (result ok {"n": 1})',
        _passes(*REPLY_CHECKS),
        agent=lambda info: _SpacedJson(),
        correct=True,
    ),
    Variant(
        "three-character-chunks",
        "the agent's text chunks are three characters each, not words",
        _passes(*REPLY_CHECKS, *TEXT_CHECKS),
        agent=lambda info: _Rechunked(),
        correct=True,
    ),
    Variant(
        "error-inside-turn",
        "the agent's AGENT_ERROR comes inside a turn: turn.state thinking, error, idle",
        _passes("agent-error-recoverable"),
        agent=lambda info: _TurnAroundError(),
        correct=True,
    ),
    Variant(
        "no-speech-detection",
        "no speech detection (probed): the speech checks are skipped, saying how to declare it",
        {**dict.fromkeys(SPEECH_CHECKS, "skip"), **_passes("table-audio-before-hello-ignored")},
        agent=lambda info: _Deaf(),
        says=dict.fromkeys(SPEECH_CHECKS, "--speech-detection no"),
        correct=True,
    ),
    Variant(
        "no-speech-detection-declared",
        "no speech detection, declared (--speech-detection no): the speech checks do not apply",
        dict.fromkeys(SPEECH_CHECKS, "n/a"),
        agent=lambda info: _Deaf(),
        options={"speech_detection": "no"},
        correct=True,
    ),
    Variant(
        "speech-ignored",
        "declares speech detection (--speech-detection yes) and ignores speech (§5.1, §6.2)",
        _fails(*SPEECH_CHECKS),
        agent=lambda info: _Deaf(),
        options={"speech_detection": "yes"},
    ),
)
