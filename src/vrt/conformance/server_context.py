"""What every server check works with: the run's options and probes, one check's
connections and sessions, the registration of checks, and the judgements many checks
share (an error's code, a refusal, a session that still works), so that a check states
only what it judges.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, NoReturn, TypeAlias

from ..audio import frame_bytes, silence, tone
from ..protocol.messages import Format
from .framework import CheckFailed, Level, NotApplicable, Skipped, Suite, title_of
from .spec_tables import DEFAULT_RATES, Row
from .wire import Closed, Connection, FrameLog, Incoming, NoFrame, WireError, audio_frame
from .wire_session import Session

__all__ = [
    "AGENT_SKIP",
    "GLOBAL_IDS",
    "INVALID_MESSAGE",
    "LOOKUP",
    "NEEDS",
    "QUIET",
    "REPLY",
    "SUITE",
    "TOOL_STREAM",
    "ServerContext",
    "ServerSuiteOptions",
    "SpeechDetection",
    "SuiteRun",
    "check",
    "shown",
    "speech_frames",
]

#: How long the suite watches for something that must not happen.
QUIET: Final = 0.3
#: How long an agent's reply may take.
REPLY: Final = 5.0
TOOL_STREAM: Final = "tool-stream-v1"
GLOBAL_IDS: Final = "global-tool-ids-v1"
#: The tool the suite declares in every session it opens.
LOOKUP: Final = {
    "name": "lookup",
    "description": "A tool the conformance suite hosts.",
    "parameters": {"type": "object"},
}
#: A message every server classifies INVALID_FIELD: a sequenced type with seq 0 (§4.1).
INVALID_MESSAGE: Final = {"v": 1, "seq": 0, "type": "text", "text": "conformance"}
AGENT_SKIP: Final = (
    "the server does not implement the scripted agent contract (conformance/README.md)"
)
#: pcm16 at 24000 Hz, the format the suite prefers for input audio.
PCM16: Final = {"encoding": "pcm16", "sampleRate": 24000}

SpeechDetection: TypeAlias = Literal["probe", "yes", "no"]

NEEDS: Final = {
    "scripted": "an agent that follows the scripted agent contract (conformance/README.md); "
    "probed once per run: skipped without it",
    "speech-detection": "the server detects speech in input audio; probed once per run "
    "(skipped when none shows), or declared: --speech-detection yes (judged) or no "
    "(not applicable)",
    "auth": "--auth: a credential the server accepts; without it the server is judged as "
    "one without authentication and the check does not apply",
    "no-auth": "no --auth: the server does not authenticate (with --auth: not applicable)",
    "auth-other": "--auth-other: a credential of a second principal; skipped without it",
    "heartbeat-timeout": "--heartbeat-timeout SEC: the server's heartbeat timeout (§4.4); "
    "skipped without it",
    "tool-timeout": "--tool-timeout SEC: the server's timeout for client tool calls (§7.2); "
    "skipped without it",
    TOOL_STREAM: "offered in hello; not applicable when the server does not put it in effect",
    GLOBAL_IDS: "offered in hello; not applicable when the server does not put it in effect",
}


@dataclass(frozen=True, slots=True)
class ServerSuiteOptions:
    """What the suite knows about the server under test."""

    url: str
    #: A credential the server accepts (sent in ``hello.auth``); None: no authentication.
    auth: str | None = None
    #: A credential of another principal (foreign-resume checks).
    auth_other: str | None = None
    #: The server's heartbeat timeout in seconds, when known (§4.4 is then checked).
    heartbeat_timeout: float | None = None
    #: The server's timeout for client tool calls in seconds, when known (§7.2).
    tool_timeout: float | None = None
    #: Whether the server detects speech: probed, or declared.
    speech_detection: SpeechDetection = "probe"


class SuiteRun:
    """What all checks of one run share: the options and the probes' verdicts."""

    def __init__(self, options: ServerSuiteOptions) -> None:
        self.options = options
        #: Each probe's verdict once made: "" when present, else why not.
        self.probes: dict[str, str] = {}
        self.lock = asyncio.Lock()

    async def probe(self, name: str, probe: Callable[[ServerSuiteOptions], Awaitable[str]]) -> str:
        async with self.lock:
            if name not in self.probes:
                self.probes[name] = await probe(self.options)
        return self.probes[name]


def shown(items: Iterable[Incoming]) -> str:
    """Frames, one per line, for a failure message."""
    return "\n".join(str(i) for i in items)


def speech_frames(fmt: Any, speech_ms: int = 600, silence_ms: int = 500) -> list[bytes]:
    """Input audio frames of 20 ms in ``fmt`` (pcm16 or pcmu, from ``ready.input``): a
    loud tone, then silence: what a voice activity detector hears as speech."""
    if not isinstance(fmt, dict) or fmt.get("encoding") not in ("pcm16", "pcmu"):
        raise Skipped(
            f"the session's input format is {fmt}: the suite builds speech in pcm16 or pcmu"
        )
    encoding = fmt["encoding"]
    audio_format = Format(
        encoding=encoding, sample_rate=int(fmt.get("sampleRate", DEFAULT_RATES[encoding]))
    )
    payload = tone(speech_ms, audio_format, amplitude=0.3) + silence(silence_ms, audio_format)
    size = frame_bytes(audio_format, 20)
    return [
        audio_frame(k, payload[i : i + size]) for k, i in enumerate(range(0, len(payload), size))
    ]


class ServerContext:
    """One check's view of the server: its connections, their frame log, and the
    judgements checks share."""

    def __init__(self, run: SuiteRun) -> None:
        self.run = run
        self.options = run.options
        self.log = FrameLog()
        self.connections: list[Connection] = []
        self.sessions: list[Session] = []

    # -- connections and sessions --

    async def connect(self, *, auto_ack: bool = False) -> Connection:
        conn = await Connection.open(
            self.options.url, label=len(self.connections) + 1, log=self.log, auto_ack=auto_ack
        )
        self.connections.append(conn)
        return conn

    def auth(self, credential: str | None = None) -> dict[str, Any]:
        """``{"auth": ...}`` with the run's credential (or ``credential``), if any."""
        value = credential if credential is not None else self.options.auth
        return {"auth": value} if value is not None else {}

    def hello(self, **members: Any) -> dict[str, Any]:
        """A ``hello`` with the run's credential and ``members``."""
        return {"v": 1, "seq": 0, "type": "hello", **self.auth(), **members}

    async def session(
        self,
        *,
        tools: Sequence[dict[str, Any]] | None = (LOOKUP,),
        capabilities: Sequence[str] | None = None,
        auto_ack: bool = False,
        **members: Any,
    ) -> Session:
        """Open a new session (``hello`` members in wire names)."""
        hello: dict[str, Any] = {**self.auth(), **members}
        if tools is not None:
            hello["tools"] = list(tools)
        if capabilities is not None:
            hello["capabilities"] = list(capabilities)
        session = await Session.open(self, hello, auto_ack=auto_ack)
        self.sessions.append(session)
        return session

    async def capable(self, *tokens: str, **members: Any) -> Session:
        """A session that offered ``tokens``; not applicable unless all are in effect."""
        session = await self.session(capabilities=list(tokens), **members)
        missing = [t for t in tokens if t not in session.capabilities]
        if missing:
            raise NotApplicable(
                f"the server did not put {', '.join(missing)} in effect when offered "
                "(it does not support it), so this gated rule does not bind it"
            )
        return session

    async def aclose(self) -> None:
        await asyncio.gather(*(c.close() for c in self.connections), return_exceptions=True)

    # -- what the run knows --

    async def has_agent(self) -> bool:
        return await self.run.probe("scripted", _probe_agent) == ""

    async def require(self, need: str) -> None:
        """Skip, or declare not applicable, a check whose ``need`` is not met."""
        options = self.options
        if need == "scripted" and not await self.has_agent():
            raise Skipped(self.run.probes["scripted"])
        if need == "speech-detection":
            if options.speech_detection == "no":
                raise NotApplicable("declared without speech detection (--speech-detection no)")
            if options.speech_detection == "probe":
                why = await self.run.probe("speech", _probe_speech)
                if why:
                    raise Skipped(why)
        if need == "auth" and options.auth is None:
            raise NotApplicable(
                "no --auth: the server is judged as one without authentication "
                "(auth-ignored-without-authentication)"
            )
        if need == "no-auth" and options.auth is not None:
            raise NotApplicable("--auth given: the server authenticates")
        if need == "auth-other" and options.auth_other is None:
            raise Skipped("needs --auth-other: a credential of a second principal (§5.3)")
        if need == "heartbeat-timeout" and options.heartbeat_timeout is None:
            raise Skipped(
                "the heartbeat timeout is server configuration, not on the wire (§4.4): pass "
                "--heartbeat-timeout SEC (the server's timeout; a short one keeps the run short)"
            )
        if need == "tool-timeout" and options.tool_timeout is None:
            raise Skipped(
                "the tool timeout is server configuration, not on the wire (§7.2): pass "
                "--tool-timeout SEC (the server's timeout for client tool calls; start the "
                "server with a short one, e.g. vrt serve --tool-timeout 1)"
            )

    # -- verdicts --

    def frames(self) -> list[str]:
        return self.log.tail()

    def fail(self, message: str, frames: Sequence[str] | None = None) -> NoReturn:
        raise CheckFailed(message, self.frames() if frames is None else frames)

    def expect(self, condition: bool, message: str) -> None:
        if not condition:
            self.fail(message)

    def expect_none(self, items: Sequence[Incoming], what: str) -> None:
        """Fail, listing ``items``, unless there are none."""
        if items:
            self.fail(f"{what}:\n{shown(items)}")

    async def expect_error(
        self, conn: Connection, code: str, *, timeout: float = 3.0, what: str = ""
    ) -> Incoming:
        """The next ``error``; fails unless its code is ``code``."""
        error = await conn.expect("error", timeout)
        self.expect(
            error.get("code") == code,
            f"{what or 'the server'} answered error {error.get('code')}, expected {code}",
        )
        return error

    def expect_sequenced(self, session: Session, item: Incoming, what: str) -> None:
        """``item`` took the session's next seq (§4.1): it is sequenced and follows the
        sequenced message received before it, whatever that was (a ``turn.state`` may
        come in between)."""
        self.expect(
            item.seq > 0, f"{what} has seq 0, but a session is bound: it is sequenced (§4.1)"
        )
        position = next((k for k, i in enumerate(session.unique) if i is item), None)
        self.expect(position is not None, f"{what} (seq {item.seq}) repeats an earlier seq")
        assert position is not None
        expected = session.unique[position - 1].seq + 1 if position else 1
        self.expect(
            item.seq == expected,
            f"{what} has seq {item.seq}; the session's next seq was {expected} (§4.1)",
        )

    async def refusal(self, conn: Connection, row: Row) -> None:
        """A hello refused as §5.1's ``row`` says: its error (seq 0, not recoverable) and
        no ready, then its close."""
        code = row.error
        try:
            items = await conn.until(lambda i: i.type in ("error", "ready"), 5.0, f"error {code}")
        except Closed as closed:
            self.fail(f"the server closed ({closed.code}) without sending error {code} first")
        last = items[-1]
        self.expect(last.type == "error", f"the server sent ready instead of error {code}")
        self.expect(last.get("code") == code, f"expected error {code}, got {last.get('code')}")
        if row.seq_zero:
            self.expect(
                last.seq == 0, f"error {code} has seq {last.seq}: no session is bound (§4.1)"
            )
        self.expect(
            last.get("recoverable") is row.recoverable,
            f"error {code} must be recoverable: {str(row.recoverable).lower()} (§9.2)",
        )
        closed_with, reason = await conn.wait_closed(5.0)
        self.expect(
            not any(i.type == "ready" for i in conn.received),
            f"the server sent ready on a connection it refused with {code}",
        )
        self.expect(
            closed_with == row.close,
            f"after error {code} the server closed with {closed_with} {reason!r}, "
            f"expected {row.close} (§5.1: {row.action})",
        )

    async def alive(self, session: Session, what: str) -> None:
        """The session still works: ``echo`` gets its reply (scripted agent), or else an
        invalid message gets a sequenced error."""
        conn = session.current
        if await self.has_agent():
            word = f"alive-{secrets.token_hex(3)}"
            try:
                await session.reply(f"echo {word}", REPLY, expect=word)
            except WireError as exc:
                self.fail(f"{what}, 'echo {word}' got no reply: {exc}")
            return
        try:
            await conn.barrier()
            await conn.send(INVALID_MESSAGE)
            error = await conn.expect(
                "error", 3.0, where=lambda i: i.get("code") == "INVALID_FIELD"
            )
        except WireError as exc:
            self.fail(f"{what}, an invalid message got no error: {exc}")
        self.expect_sequenced(session, error, f"{what}, the session's next error")

    async def produce(self, session: Session, count: int) -> None:
        """Make the server send ``count`` sequenced messages (invalid messages' errors)."""
        for _ in range(count):
            await session.current.send(INVALID_MESSAGE)
        await session.current.barrier()
        self.expect(
            session.last_seq >= count,
            f"{count} invalid messages gave only {session.last_seq} sequenced messages",
        )


async def _probe_agent(options: ServerSuiteOptions) -> str:
    """ "" when the server runs an agent of the scripted contract, else why not."""
    context = ServerContext(SuiteRun(options))
    try:
        session = await context.session(tools=None)
        await session.reply("echo probe", 3.0, expect="probe")
    except NoFrame:
        return f"{AGENT_SKIP}: 'echo probe' got no turn replying 'probe' within 3 s"
    except (WireError, OSError) as exc:
        return f"{AGENT_SKIP}: the probe failed: {exc}"
    finally:
        await context.aclose()
    return ""


async def _probe_speech(options: ServerSuiteOptions) -> str:
    """ "" when speech in input audio begins a listening turn or a user transcript
    within 5 s, else why not."""
    context = ServerContext(SuiteRun(options))
    try:
        session = await context.session(tools=None, input=PCM16)
        assert session.ready is not None
        for frame in speech_frames(session.ready.get("input")):
            await session.current.send(frame)
        await session.current.expect(
            ("turn.state", "transcript"),
            5.0,
            where=lambda i: i.get("state") == "listening" or i.get("role") == "user",
        )
    except Skipped as skipped:
        return str(skipped)
    except NoFrame:
        return (
            "no speech detection showed: 600 ms of a loud tone, then silence, got no "
            "listening turn and no user transcript within 5 s. A server without speech "
            "detection: pass --speech-detection no (the rule then does not apply); with it, "
            "pass --speech-detection yes to have this judged"
        )
    except (WireError, OSError) as exc:
        return f"the speech probe failed: {exc}"
    finally:
        await context.aclose()
    return ""


# --- registration ---------------------------------------------------------------------

SUITE: Final[Suite[ServerContext]] = Suite("server", NEEDS)

CheckFunction = Callable[[ServerContext], Awaitable[None]]


def check(
    section: str,
    level: Level,
    title: str | None = None,
    *,
    id: str | None = None,
    needs: Iterable[str] = (),
) -> Callable[[CheckFunction], CheckFunction]:
    """Register a server check: its id is the function's name without ``check_`` (or
    ``id``), its title the first paragraph of its docstring (or ``title``). Before it
    runs, every need is met, or the check is skipped or not applicable
    (``ServerContext.require``); what went wrong on the wire fails it with the frames."""
    wanted = tuple(needs)

    def register(function: CheckFunction) -> CheckFunction:
        async def run(ctx: ServerContext) -> None:
            for need in wanted:
                await ctx.require(need)
            try:
                await function(ctx)
            except (WireError, OSError) as exc:
                raise CheckFailed(str(exc) or type(exc).__name__, ctx.frames()) from exc

        run.__name__ = function.__name__
        SUITE.check(section, level, title or title_of(function), id=id, needs=wanted)(run)
        return function

    return register
