"""The server conformance suite: a black-box judge of any vRT server, clause by clause.

``vrt conformance server ws://HOST:PORT`` runs it. It speaks raw WebSocket frames
(:mod:`vrt.conformance.wire`), never the client SDK. Each check names the section of
the protocol text it judges and its level (MUST or SHOULD), and passes, fails with the
frames that show it, or is skipped with the reason. Checks that need a driven agent use
the scripted agent's command contract (``docs/agents.md``: ``echo``, ``call``,
``calls``, ``speak``, ``burst``, ``server-tool``, ``error``, ``context?`` and speech by
input audio); the suite probes for it once per run and skips them, saying why, when the
server does not implement it.

See ``conformance/README.md`` for how to run it and for the map from every MUST of the
protocol to its checks.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import math
import re
import secrets
import sys
import time
from array import array
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, NoReturn
from urllib.parse import urlsplit

from ..protocol.artifacts import artifact_root
from ..protocol.capabilities import registry
from .framework import (
    CheckFailed,
    Level,
    Result,
    Skipped,
    Suite,
    must_failed,
    summary_line,
    write_json,
    write_junit,
)
from .wire import (
    Closed,
    Connection,
    FrameLog,
    Incoming,
    NoFrame,
    Refused,
    Session,
    WireError,
    audio_frame,
    compact,
)

__all__ = [
    "AGENT_SKIP",
    "SUITE",
    "ServerContext",
    "ServerSuiteOptions",
    "run_checks",
    "run_server_suite",
]

#: How long the suite watches for something that must not happen.
QUIET: Final = 0.3
#: How long an agent's reply may take.
REPLY: Final = 5.0
AGENT_SKIP: Final = "the server does not implement the scripted agent contract (docs/agents.md)"
TOOL_STREAM: Final = "tool-stream-v1"
GLOBAL_IDS: Final = "global-tool-ids-v1"
LOOKUP: Final = {
    "name": "lookup",
    "description": "A tool the conformance suite hosts.",
    "parameters": {"type": "object"},
}
SEQUENCED_CLIENT: Final = frozenset({"text", "interrupt", "playback", "tool.result", "context"})
TERMINAL: Final = frozenset({"settled", "cancelled", "failed"})
#: A message every server classifies INVALID_FIELD: a sequenced type with seq 0 (§4.1).
INVALID_MESSAGE: Final = {"v": 1, "seq": 0, "type": "text", "text": "conformance"}
#: Members that hold integers in server messages (§2.2: written without fraction/exponent).
INTEGER_MEMBERS: Final = frozenset({"v", "seq", "epoch", "upTo", "resumedFrom", "sampleRate"})


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


class _Run:
    """What all checks of one run share: the options and the agent probe's verdict."""

    def __init__(self, options: ServerSuiteOptions) -> None:
        self.options = options
        #: None until probed; "" when the scripted agent answers; else why not.
        self.agent: str | None = None
        self.lock = asyncio.Lock()


class ServerContext:
    """One check's view of the server: its connections, their frame log, helpers."""

    def __init__(self, run: _Run) -> None:
        self.run = run
        self.options = run.options
        self.log = FrameLog()
        self.connections: list[Connection] = []
        self.sessions: list[Session] = []

    async def connect(self, *, auto_ack: bool = False) -> Connection:
        conn = await Connection.open(
            self.options.url, label=len(self.connections) + 1, log=self.log, auto_ack=auto_ack
        )
        self.connections.append(conn)
        return conn

    def frames(self) -> list[str]:
        return self.log.tail()

    def fail(self, message: str, frames: Sequence[str] | None = None) -> NoReturn:
        raise CheckFailed(message, self.frames() if frames is None else frames)

    def expect(self, condition: bool, message: str) -> None:
        if not condition:
            self.fail(message)

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
        """A session that offered ``tokens``; Skipped unless all are in effect."""
        session = await self.session(capabilities=list(tokens), **members)
        missing = [t for t in tokens if t not in session.capabilities]
        if missing:
            raise Skipped(
                f"the server did not put {', '.join(missing)} in effect when offered "
                "(it does not support it), so this gated behaviour cannot be observed"
            )
        return session

    async def has_agent(self) -> bool:
        async with self.run.lock:
            if self.run.agent is None:
                self.run.agent = await _probe_agent(self.options)
        return self.run.agent == ""

    async def require_agent(self) -> None:
        if not await self.has_agent():
            raise Skipped(self.run.agent or AGENT_SKIP)

    async def aclose(self) -> None:
        await asyncio.gather(*(c.close() for c in self.connections), return_exceptions=True)


async def _probe_agent(options: ServerSuiteOptions) -> str:
    """ "" when the server runs an agent of the scripted contract, else why not."""
    context = ServerContext(_Run(options))
    try:
        session = await context.session(tools=None)
        await session.text("echo probe")
        await session.current.until(
            lambda item: item.type == "text" and item.get("text") == "probe", 3.0, "probe"
        )
    except (WireError, OSError) as exc:
        if isinstance(exc, NoFrame):
            return f"{AGENT_SKIP}: 'echo probe' got no text chunk 'probe' within 3 s"
        return f"{AGENT_SKIP}: the probe failed: {exc}"
    finally:
        await context.aclose()
    return ""


# --- registration ---------------------------------------------------------------------

SUITE: Final[Suite[ServerContext]] = Suite("server")
_KEBAB: Final = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
#: Checks that may take longer than the per-check timeout (they wait for the server).
_LONG: Final[set[str]] = set()

CheckFunction = Callable[[ServerContext], Awaitable[None]]


def check(
    section: str,
    level: Level,
    title: str,
    *,
    id: str,
    agent: bool = False,
    auth: bool = False,
    auth_other: bool = False,
) -> Callable[[CheckFunction], CheckFunction]:
    """Register a server check. ``agent``: it needs the scripted agent; ``auth``: it
    needs ``--auth``; ``auth_other``: it needs ``--auth-other`` too."""
    if not _KEBAB.fullmatch(id):
        raise ValueError(f"check id {id!r} is not kebab-case")

    def register(function: CheckFunction) -> CheckFunction:
        async def run(ctx: ServerContext) -> None:
            if auth and ctx.options.auth is None:
                raise Skipped("needs --auth: a credential the server accepts (§5.3)")
            if auth_other and ctx.options.auth_other is None:
                raise Skipped("needs --auth-other: a credential of a second principal (§5.3)")
            if agent:
                await ctx.require_agent()
            try:
                await function(ctx)
            except (WireError, OSError) as exc:
                raise CheckFailed(str(exc) or type(exc).__name__, ctx.frames()) from exc

        SUITE.check(section, level, title, id=id)(run)
        return function

    return register


# --- helpers --------------------------------------------------------------------------


def _errors(items: Iterable[Incoming]) -> list[Incoming]:
    return [i for i in items if i.type == "error"]


def _invalid(items: Iterable[Incoming]) -> list[Incoming]:
    return [i for i in items if i.type == "invalid"]


async def _expect_error(
    ctx: ServerContext, conn: Connection, code: str, *, timeout: float = 3.0, what: str = ""
) -> Incoming:
    """The next ``error``; fails unless its code is ``code``."""
    error = await conn.expect("error", timeout)
    ctx.expect(
        error.get("code") == code,
        f"{what or 'the server'} answered error {error.get('code')}, expected {code}",
    )
    return error


async def _refusal(ctx: ServerContext, conn: Connection, code: str, close: int) -> None:
    """The refusal of a hello: ``error code`` with seq 0, not recoverable, no ready,
    then the close ``close`` (§5.1, §5.3, §5.4)."""
    try:
        items = await conn.until(lambda i: i.type in ("error", "ready"), 5.0, f"error {code}")
    except Closed as closed:
        ctx.fail(f"the server closed ({closed.code}) without sending error {code} first")
    last = items[-1]
    ctx.expect(last.type == "error", f"the server sent ready instead of error {code}")
    ctx.expect(last.get("code") == code, f"expected error {code}, got {last.get('code')}")
    ctx.expect(last.seq == 0, f"error {code} has seq {last.seq}: no session is bound, so 0 (§4.1)")
    ctx.expect(last.get("recoverable") is False, f"error {code} must be recoverable: false (§9.2)")
    code_closed, reason = await conn.wait_closed(5.0)
    ctx.expect(
        not any(i.type == "ready" for i in conn.received),
        f"the server sent ready on a connection it refused with {code}",
    )
    ctx.expect(
        code_closed == close,
        f"after error {code} the server closed with {code_closed} {reason!r}, expected {close}",
    )


async def _alive(ctx: ServerContext, session: Session, what: str) -> None:
    """The session still works: ``echo`` gets its reply (scripted agent), or else an
    invalid message gets a sequenced error."""
    conn = session.current
    if await ctx.has_agent():
        word = f"alive-{secrets.token_hex(3)}"
        try:
            await session.reply(f"echo {word}", REPLY, expect=word)
        except WireError as exc:
            ctx.fail(f"{what}, 'echo {word}' got no reply: {exc}")
        return
    try:
        await conn.barrier()
        before = session.last_seq
        await conn.send(INVALID_MESSAGE)
        error = await conn.expect("error", 3.0, where=lambda i: i.get("code") == "INVALID_FIELD")
    except WireError as exc:
        ctx.fail(f"{what}, an invalid message got no error: {exc}")
    ctx.expect(
        error.seq == before + 1,
        f"{what}, the session's next error has seq {error.seq}, expected {before + 1}",
    )


def _tone(ms: int, rate: int = 24000, amplitude: float = 0.3) -> bytes:
    count = rate * ms // 1000
    step = 2 * math.pi * 440 / rate
    samples = array("h", (int(amplitude * 32767 * math.sin(step * i)) for i in range(count)))
    if sys.byteorder == "big":
        samples.byteswap()
    return samples.tobytes()


def _frames(payload: bytes, rate: int = 24000, first_seq: int = 0) -> list[bytes]:
    size = rate * 20 // 1000 * 2
    return [
        audio_frame(first_seq + k, payload[i : i + size])
        for k, i in enumerate(range(0, len(payload), size))
    ]


def _speech(rate: int = 24000, speech_ms: int = 600, silence_ms: int = 500) -> list[bytes]:
    """Input audio frames: a loud tone, then silence (speech for the scripted VAD)."""
    return _frames(_tone(speech_ms, rate) + bytes(rate * silence_ms // 1000 * 2), rate)


def _pcm16_rate(ctx: ServerContext, ready: Incoming | None, member: str) -> int:
    fmt = ready.get(member) if ready is not None else None
    if not isinstance(fmt, dict) or fmt.get("encoding") != "pcm16":
        raise Skipped(f"the session's {member} format is {fmt}, not pcm16; cannot build speech")
    rate = fmt.get("sampleRate", 24000)
    return rate if isinstance(rate, int) else 24000


def _same_format(a: Any, b: Any) -> bool:
    if not isinstance(a, dict) or not isinstance(b, dict):
        return False
    defaults = {"pcm16": 24000, "pcmu": 8000, "opus": 48000}
    rate_a = a.get("sampleRate", defaults.get(a.get("encoding", ""), 0))
    rate_b = b.get("sampleRate", defaults.get(b.get("encoding", ""), 0))
    return bool(a.get("encoding") == b.get("encoding") and rate_a == rate_b)


async def _call(
    ctx: ServerContext, session: Session, command: str, count: int = 1
) -> list[Incoming]:
    """Send the ``call``/``calls`` command and return its ``tool.call`` messages."""
    after = session.last_seq
    await session.text(command)
    calls: list[Incoming] = []
    while len(calls) < count:
        calls.append(
            await session.current.expect(
                "tool.call", REPLY, where=lambda i: i.seq > after and i not in calls
            )
        )
    return calls


async def _result(session: Session, call: Incoming, ok: bool = True, **members: Any) -> int:
    fields: dict[str, Any] = {"output": members.pop("output", None)} if ok else {}
    return await session.send(
        "tool.result",
        callId=call.get("callId"),
        epoch=call.get("epoch"),
        ok=ok,
        **fields,
        **members,
    )


def _streams(session: Session, call_id: Any) -> list[Incoming]:
    return session.find("tool.stream", lambda i: i.get("callId") == call_id)


def _lifecycle(streams: list[Incoming]) -> list[str]:
    """What breaks the §7.5 rules for one call's ``tool.stream`` messages, in order."""
    if not streams:
        return ["no tool.stream message for the call"]
    phases = [str(s.get("phase")) for s in streams]
    problems: list[str] = []
    if phases[0] != "start":
        problems.append(f"the first phase is {phases[0]}, not start")
    if phases.count("start") != 1:
        problems.append(f"{phases.count('start')} start phases")
    terminals = [k for k, p in enumerate(phases) if p in TERMINAL]
    if len(terminals) != 1:
        problems.append(f"{len(terminals)} terminal phases (exactly one is required)")
    elif terminals[0] != len(phases) - 1:
        problems.append(f"{phases[terminals[0] + 1 :]} sent after the terminal phase")
    completes = [k for k, p in enumerate(phases) if p == "arguments-complete"]
    if len(completes) > 1:
        problems.append(f"arguments-complete sent {len(completes)} times (at most once)")
    if completes and any(p == "arguments-delta" for p in phases[completes[0] :]):
        problems.append("arguments-delta after arguments-complete")
    for k, p in enumerate(phases):
        if p == "progress" and (
            not completes or k < completes[0] or (terminals and k > terminals[0])
        ):
            problems.append("progress outside arguments-complete .. terminal phase")
            break
    for member in ("callId", "name", "turnId", "epoch"):
        values = {json.dumps(s.get(member)) for s in streams}
        if len(values) > 1:
            problems.append(f"{member} changes within the call: {sorted(values)}")
    if completes:
        text = "".join(str(s.get("delta")) for s in streams if s.get("phase") == "arguments-delta")
        if text:
            try:
                parsed = json.loads(text)
            except ValueError:
                problems.append(f"the arguments-delta fragments do not join to JSON: {text!r}")
            else:
                if parsed != streams[completes[0]].get("arguments"):
                    problems.append("the joined arguments-delta text differs from the arguments")
    return problems


def _vs(items: Iterable[Incoming]) -> list[str]:
    return [str(i) for i in items]


# ======================================================================================
# §2 Transport and framing
# ======================================================================================


async def _exercise(ctx: ServerContext) -> Session:
    """A session that makes the server send as many kinds of message as it can."""
    session = await ctx.session(capabilities=[TOOL_STREAM, GLOBAL_IDS])
    conn = session.current
    await conn.send({"v": 1, "seq": 0, "type": "ping"})
    await conn.send(INVALID_MESSAGE)
    await session.send("context", context={"n": [1, 2.5, {"deep": None}]})
    await conn.barrier()
    if await ctx.has_agent():
        await session.reply("echo framing check", REPLY)
        after = session.last_seq
        calls = await _call(ctx, session, 'call lookup {"n":1,"f":0.5}')
        await _result(session, calls[0], output={"x": 1})
        await session.turn(after, REPLY)
        await session.reply("server-tool 150", REPLY)
    await conn.quiet(QUIET)
    return session


@check(
    "§2.1",
    "MUST",
    "every text frame the server sends is one JSON object",
    id="framing-text-json-object",
)
async def check_framing_text_json_object(ctx: ServerContext) -> None:
    session = await _exercise(ctx)
    bad = [i for i in session.received if not i.binary and i.data is None]
    ctx.expect(not bad, "text frames that are not one JSON object:\n" + "\n".join(_vs(bad)))


@check(
    "§2.2",
    "MUST",
    "every server message matches its schema (Appendix A)",
    id="framing-messages-valid",
)
async def check_framing_messages_valid(ctx: ServerContext) -> None:
    session = await _exercise(ctx)
    bad = [i for i in session.received if not i.binary and i.type == "invalid"]
    ctx.expect(
        not bad,
        "invalid server messages:\n" + "\n".join(f"{i.invalid}: {i}" for i in bad),
    )


@check("§2.2", "MUST", "no member name twice in one object", id="framing-no-duplicate-members")
async def check_framing_no_duplicate_members(ctx: ServerContext) -> None:
    session = await _exercise(ctx)
    found: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        names = [k for k, _ in items]
        repeated = {k for k in names if names.count(k) > 1}
        if repeated:
            found.append(", ".join(sorted(repeated)))
        return dict(items)

    bad: list[str] = []
    for item in session.received:
        if item.binary:
            continue
        found.clear()
        try:
            json.loads(item.raw, object_pairs_hook=pairs)
        except ValueError:
            continue
        if found:
            bad.append(f"{found[0]} twice in {item}")
    ctx.expect(not bad, "\n".join(bad))


class _FloatText(str):
    """A JSON number written with a fraction or exponent."""


@check("§2.2", "MUST", "integers written without fraction or exponent", id="framing-integers-plain")
async def check_framing_integers_plain(ctx: ServerContext) -> None:
    session = await _exercise(ctx)
    bad: list[str] = []
    for item in session.received:
        if item.binary:
            continue
        try:
            value = json.loads(item.raw, parse_float=_FloatText)
        except ValueError:
            continue
        objects = [value] + [value.get(m) for m in ("input", "output")]
        for obj in objects:
            if isinstance(obj, dict):
                bad.extend(
                    f"{name} written {obj[name]} in {item}"
                    for name in INTEGER_MEMBERS & obj.keys()
                    if isinstance(obj[name], _FloatText)
                )
    ctx.expect(not bad, "\n".join(bad))


@check(
    "§2.2", "MUST", "unknown members are ignored at any depth", id="framing-unknown-members-ignored"
)
async def check_framing_unknown_members_ignored(ctx: ServerContext) -> None:
    conn = await ctx.connect()
    await conn.send(
        ctx.hello(
            tools=[{**LOOKUP, "x-ui": {"icon": "sun"}}],
            input={"encoding": "pcm16", "channels": 1},
            capabilities=[],
            conformance={"nested": [1, {"a": None}]},
        )
    )
    try:
        await conn.expect_ready()
    except Refused as refused:
        ctx.fail(f"a hello with unknown members was refused: {refused}")
    await conn.send({"v": 1, "seq": 0, "type": "ping", "sentAt": 17, "note": {"a": 1}})
    items = await conn.barrier()
    ctx.expect(not _errors(items), "a ping with unknown members got an error")
    if await ctx.has_agent():
        await conn.send(
            {"v": 1, "seq": 1, "type": "text", "text": "echo unknown-ok", "lang": "en", "x": {}}
        )
        await conn.until(
            lambda i: i.type == "text" and i.get("text") == "unknown-ok", REPLY, "the echo"
        )


@check(
    "§2.1",
    "MUST",
    "a text frame that is not UTF-8 fails the connection (1007); the session stays resumable",
    id="framing-invalid-utf8-closes-1007",
)
async def check_invalid_utf8(ctx: ServerContext) -> None:
    session = await ctx.session()
    await session.send("context", context={"before": "bad utf-8"})
    await session.current.barrier()
    conn = session.current
    conn.log.add(conn.label, ">", 0, 'text frame {"v":1,"seq":0,"type":"ping","x":"\\xff"}')
    await conn.ws.send(b'{"v":1,"seq":0,"type":"ping","x":"\xff"}', text=True)
    code, reason = await conn.wait_closed(5.0)
    ctx.expect(
        code == 1007,
        f"a text frame that is not UTF-8 closed the connection with {code} {reason!r}; "
        "RFC 6455 fails the connection with 1007 (messages.md)",
    )
    ready = await session.resume()
    ctx.expect(ready.get("resumedFrom") == 1, f"the resumed ready has {ready.data}")
    await _alive(ctx, session, "after the resume")


@check(
    "§2.1", "MUST", "deployments other than local development use TLS (wss:)", id="transport-tls"
)
async def check_tls(ctx: ServerContext) -> None:
    parts = urlsplit(ctx.options.url)
    if parts.scheme.lower() == "wss":
        return
    host = parts.hostname or ""
    try:
        loopback = host.lower() == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if loopback:
        raise Skipped(f"{host} is a loopback address: local development may use ws:")
    ctx.fail(f"{ctx.options.url} is not local and does not use TLS (wss:)")


# ======================================================================================
# §3 Versioning and capabilities
# ======================================================================================


@check(
    "§3.1",
    "MUST",
    "a hello whose v is not 1 gets UNSUPPORTED_VERSION",
    id="version-hello-unsupported",
)
async def check_version_hello_unsupported(ctx: ServerContext) -> None:
    conn = await ctx.connect()
    for v in (2, "1", None):
        hello = ctx.hello()
        if v is None:
            del hello["v"]
        else:
            hello["v"] = v
        await conn.send(hello)
        error = await _expect_error(ctx, conn, "UNSUPPORTED_VERSION", what=f"hello with v {v!r}")
        ctx.expect(error.seq == 0, f"the error has seq {error.seq}; no session is bound (§4.1)")
        ctx.expect(
            error.get("recoverable") is True,
            "an invalid message's error is recoverable: true (§9.1)",
        )
    await conn.send(ctx.hello())
    await conn.expect_ready()


@check(
    "§3.1",
    "MUST",
    "no session is opened for a hello with a bad v",
    id="version-no-session-for-bad-hello",
)
async def check_version_no_session(ctx: ServerContext) -> None:
    conn = await ctx.connect()
    await conn.send({**ctx.hello(), "v": 2})
    await _expect_error(ctx, conn, "UNSUPPORTED_VERSION")
    await conn.send({"v": 1, "seq": 1, "type": "context", "context": None})
    items = await conn.barrier()
    ctx.expect(not any(i.type == "ready" for i in conn.received), "ready after a v 2 hello")
    codes = [e.get("code") for e in _errors(items)]
    ctx.expect(
        codes == ["NO_SESSION"],
        f"a message after the rejected hello got {codes or 'no error'}, expected NO_SESSION: "
        "a session was opened for it",
    )


@check("§3.1", "MUST", "the UNSUPPORTED_VERSION error carries v 1", id="version-error-carries-v1")
async def check_version_error_v(ctx: ServerContext) -> None:
    conn = await ctx.connect()
    await conn.send({**ctx.hello(), "v": 7})
    error = await _expect_error(ctx, conn, "UNSUPPORTED_VERSION")
    ctx.expect(
        error.data is not None and type(error.data.get("v")) is int and error.data["v"] == 1,
        f"the error carries v {error.get('v')!r}; the server's own major version is 1",
    )


@check(
    "§3.3",
    "MUST",
    "capabilities in effect are a subset of those offered",
    id="capabilities-subset-of-offered",
)
async def check_capabilities_subset(ctx: ServerContext) -> None:
    offered = [TOOL_STREAM, GLOBAL_IDS, "x-conformance.probe"]
    session = await ctx.session(capabilities=offered)
    extra = [c for c in session.capabilities if c not in offered]
    ctx.expect(not extra, f"ready.capabilities has {extra}, never offered")
    bare = await ctx.session(capabilities=["x-conformance.probe"])
    extra = [c for c in bare.capabilities if c != "x-conformance.probe"]
    ctx.expect(not extra, f"offered only x-conformance.probe, ready.capabilities has {extra}")


@check("§3.3", "MUST", "each capability in effect appears once", id="capabilities-each-once")
async def check_capabilities_each_once(ctx: ServerContext) -> None:
    session = await ctx.session(capabilities=[TOOL_STREAM, GLOBAL_IDS, TOOL_STREAM, GLOBAL_IDS])
    caps = list(session.capabilities)
    ctx.expect(len(caps) == len(set(caps)), f"ready.capabilities repeats a token: {caps}")


@check("§3.3", "MUST", "unknown capability tokens are ignored", id="capabilities-unknown-ignored")
async def check_capabilities_unknown(ctx: ServerContext) -> None:
    unknown = ["future-feature.v9", "zz.conformance-unknown", "x-conformance.unknown"]
    try:
        session = await ctx.session(capabilities=[*unknown, TOOL_STREAM])
    except Refused as refused:
        ctx.fail(f"a hello offering unknown tokens was refused: {refused}")
    ctx.expect(
        not set(unknown) & set(session.capabilities),
        f"unknown tokens in effect: {session.capabilities}",
    )


@check(
    "§3.3", "MUST", "no capability in effect when none is offered", id="capabilities-none-offered"
)
async def check_capabilities_none(ctx: ServerContext) -> None:
    session = await ctx.session()
    ready = session.ready
    assert ready is not None
    caps = ready.get("capabilities")
    ctx.expect(caps in (None, []), f"no capability offered, ready.capabilities is {caps}")


@check(
    "§3.4",
    "MUST",
    "only registered or x- tokens are put in effect",
    id="capabilities-registered-only",
)
async def check_capabilities_registered(ctx: ServerContext) -> None:
    session = await ctx.session(capabilities=[*registry(), "future-feature.v9"])
    bad = [c for c in session.capabilities if c not in registry() and not c.startswith("x-")]
    ctx.expect(not bad, f"unregistered tokens in effect: {bad}")


@check(
    "§3.3", "MUST", "capabilities are fixed across a resume", id="capabilities-fixed-across-resume"
)
async def check_capabilities_fixed(ctx: ServerContext) -> None:
    session = await ctx.session(capabilities=[TOOL_STREAM])
    before = sorted(session.capabilities)
    session.drop()
    ready = await session.resume(hello={**ctx.auth(), "capabilities": [GLOBAL_IDS]})
    after = ready.get("capabilities")
    after = sorted(after) if isinstance(after, list) else []
    ctx.expect(
        after == before,
        f"the resumed ready has capabilities {after}, the session opened with {before}",
    )


@check(
    "§3.3",
    "MUST",
    "no tool.stream without tool-stream-v1",
    id="capabilities-no-tool-stream-without-capability",
    agent=True,
)
async def check_no_tool_stream(ctx: ServerContext) -> None:
    session = await ctx.session()
    ctx.expect(TOOL_STREAM not in session.capabilities, "tool-stream-v1 in effect, never offered")
    after = session.last_seq
    calls = await _call(ctx, session, 'call lookup {"q":"no stream please"}')
    await _result(session, calls[0], output=None)
    await session.turn(after, REPLY)
    await session.reply("server-tool 120", REPLY)
    streams = session.find("tool.stream")
    ctx.expect(
        not streams, f"tool.stream sent without tool-stream-v1: {streams[0] if streams else ''}"
    )


# ======================================================================================
# §4 Reliability
# ======================================================================================


@check("§4.1", "MUST", "transient messages carry seq 0", id="seq-transient-zero")
async def check_seq_transient_zero(ctx: ServerContext) -> None:
    session = await ctx.session()
    conn = session.current
    await conn.send({"v": 1, "seq": 0, "type": "ping"})
    await session.send("context", context={"probe": 1})
    await conn.barrier()
    await conn.quiet(0.5)
    if await ctx.has_agent():
        await session.reply("echo transient", REPLY)
    transient = [i for i in session.received if i.type in ("ready", "pong", "ack", "audio.start")]
    bad = [i for i in transient if i.seq != 0]
    ctx.expect(not bad, "transient messages with a seq other than 0:\n" + "\n".join(_vs(bad)))


@check("§4.1", "MUST", "the first sequenced server message has seq 1", id="seq-sequenced-from-one")
async def check_seq_from_one(ctx: ServerContext) -> None:
    session = await ctx.session()
    await session.current.send(INVALID_MESSAGE)
    await session.current.barrier()
    first = [i for i in session.received if i.sequenced or (i.type == "error")]
    ctx.expect(bool(first), "no sequenced message to observe (an invalid message got no error)")
    ctx.expect(first[0].seq == 1, f"the first sequenced message has seq {first[0].seq}: {first[0]}")


@check("§4.1", "MUST", "sequenced server messages are consecutive", id="seq-sequenced-consecutive")
async def check_seq_consecutive(ctx: ServerContext) -> None:
    session = await ctx.session()
    conn = session.current
    for _ in range(3):
        await conn.send(INVALID_MESSAGE)
    await conn.barrier()
    if await ctx.has_agent():
        await session.reply("burst 40", REPLY)
    seqs = [i.seq for i in session.received if i.sequenced]
    ctx.expect(len(seqs) >= 3, f"too few sequenced messages to judge: {seqs}")
    ctx.expect(
        seqs == list(range(1, len(seqs) + 1)),
        f"the server stream is not 1, 2, 3, ...: {seqs}",
    )


@check("§4.1", "MUST", "errors before a session have seq 0", id="seq-error-zero-before-session")
async def check_seq_error_zero(ctx: ServerContext) -> None:
    conn = await ctx.connect()
    await conn.send({"v": 1, "seq": 1, "type": "text", "text": "too early"})
    await conn.send({"v": 1, "seq": 0, "type": "no-such-type"})
    items = await conn.barrier()
    errors = _errors(items)
    ctx.expect(len(errors) == 2, f"expected two errors before hello, got {len(errors)}")
    bad = [e for e in errors if e.seq != 0]
    ctx.expect(not bad, "errors before a session with seq other than 0:\n" + "\n".join(_vs(bad)))


@check("§4.1", "MUST", "errors in a session are sequenced", id="seq-error-sequenced-in-session")
async def check_seq_error_sequenced(ctx: ServerContext) -> None:
    session = await ctx.session()
    conn = session.current
    for _ in range(2):
        before = session.last_seq
        await conn.send(INVALID_MESSAGE)
        error = await conn.expect("error", 3.0)
        ctx.expect(
            error.seq == before + 1,
            f"an error after ready has seq {error.seq}; the session's next seq is {before + 1}",
        )


@check(
    "§4.1", "MUST", "the server's seq continues across a resume", id="seq-continues-across-resume"
)
async def check_seq_continues(ctx: ServerContext) -> None:
    session = await ctx.session()
    for _ in range(2):
        await session.current.send(INVALID_MESSAGE)
    await session.current.barrier()
    last = session.last_seq
    ctx.expect(last >= 2, f"the server sent {last} sequenced messages; expected 2 errors")
    session.drop()
    await session.resume()
    await session.current.send(INVALID_MESSAGE)
    error = await session.current.expect("error", 3.0)
    ctx.expect(
        error.seq == last + 1,
        f"the first new message after the resume has seq {error.seq}, expected {last + 1}",
    )


@check(
    "§4.2", "SHOULD", "an ack follows within a bounded delay (1 s)", id="ack-within-bounded-delay"
)
async def check_ack_delay(ctx: ServerContext) -> None:
    session = await ctx.session()
    started = time.monotonic()
    seq = await session.send("context", context={"ack": "me"})
    try:
        ack = await session.current.expect(
            "ack", 2.0, where=lambda i: isinstance(i.get("upTo"), int) and i.get("upTo") >= seq
        )
    except NoFrame:
        ctx.fail(f"no ack with upTo >= {seq} within 2 s (RECOMMENDED: 250 ms)")
    delay = ack.at - started
    ctx.expect(delay <= 1.0, f"the ack came after {delay:.3f} s (RECOMMENDED: within 250 ms)")


@check(
    "§4.2",
    "MUST",
    "ack.upTo never exceeds the highest seq received",
    id="ack-up-to-not-beyond-sent",
)
async def check_ack_not_beyond(ctx: ServerContext) -> None:
    session = await ctx.session()
    for k in range(5):
        await session.send("context", context={"k": k})
        await asyncio.sleep(0.05)
    await session.current.barrier()
    await session.current.quiet(0.5)
    session.drop()
    await session.resume()
    await session.send("context", context={"k": "after resume"})
    await session.current.quiet(0.5)
    if not session.acks:
        raise Skipped("the server sent no ack (a SHOULD, §4.2), so upTo could not be observed")
    bad = [(up_to, sent) for up_to, sent in session.acks if up_to > sent]
    ctx.expect(not bad, f"acks beyond the highest seq sent (upTo, sent): {bad}")


@check("§4.3", "SHOULD", "a duplicate is acknowledged again", id="ack-duplicate-acknowledged-again")
async def check_ack_duplicate(ctx: ServerContext) -> None:
    session = await ctx.session()
    seq = await session.send("context", context={"dup": 1})
    conn = session.current

    def acked(item: Incoming) -> bool:
        up_to = item.get("upTo")
        return isinstance(up_to, int) and up_to >= seq

    try:
        await conn.expect("ack", 2.0, where=acked)
    except NoFrame:
        raise Skipped(
            "the server does not acknowledge within 2 s (ack-within-bounded-delay)"
        ) from None
    await session.resend(seq)
    try:
        await conn.expect("ack", 2.0, where=acked)
    except NoFrame:
        ctx.fail(f"the duplicate of seq {seq} was not acknowledged again within 2 s")


@check(
    "§4.3",
    "MUST",
    "a duplicate text is not handled twice",
    id="dedupe-duplicate-text-once",
    agent=True,
)
async def check_dedupe_text(ctx: ServerContext) -> None:
    session = await ctx.session()
    first = await session.reply("echo dup-one", REPLY, expect="dup-one")
    seq = session.out.last_seq
    await session.resend(seq)
    await session.current.barrier()
    await session.current.quiet(QUIET)
    await session.reply("echo dup-two", REPLY, expect="dup-two")
    chunks = session.find("text", lambda i: i.get("text") == "dup-one")
    turns = {i.get("turnId") for i in session.find("turn.state")}
    ctx.expect(
        len(chunks) == 1 and len(turns) == 2,
        f"seq {seq} ('echo dup-one') sent twice was handled {len(chunks)} times "
        f"({len(turns)} turns for two texts); first turn {first.turn_id}",
    )


@check(
    "§4.3",
    "MUST",
    "a duplicate context is not applied again",
    id="dedupe-duplicate-context-not-applied",
    agent=True,
)
async def check_dedupe_context(ctx: ServerContext) -> None:
    session = await ctx.session()
    first = await session.send("context", context={"v": "first"})
    await session.send("context", context={"v": "second"})
    await session.current.barrier()
    await session.resend(first)
    await session.current.barrier()
    turn = await session.reply("context?", REPLY)
    ctx.expect(
        turn.texts() == ['{"v":"second"}'],
        f"after a duplicate of the first context, 'context?' says {turn.texts()}; "
        'expected ["{\\"v\\":\\"second\\"}"]',
    )


@check(
    "§4.3",
    "MUST",
    "a gap in the client stream does not crash the server",
    id="dedupe-gap-tolerated",
)
async def check_dedupe_gap(ctx: ServerContext) -> None:
    session = await ctx.session()
    session.skip_seqs(4)
    await session.send("context", context={"after": "gap"})
    await session.current.barrier()
    await _alive(ctx, session, "after a gap of 4 seqs")


# §4.4 Heartbeat


@check(
    "§4.4",
    "MUST",
    "ping is answered with pong while awaiting hello",
    id="heartbeat-pong-awaiting-hello",
)
async def check_pong_awaiting(ctx: ServerContext) -> None:
    conn = await ctx.connect()
    await conn.send({"v": 1, "seq": 0, "type": "ping"})
    pong = await conn.expect("pong", 3.0, skip=())
    ctx.expect(pong.seq == 0, f"pong has seq {pong.seq}")
    await conn.send(ctx.hello())
    await conn.expect_ready()


@check("§4.4", "MUST", "ping is answered with pong while opening", id="heartbeat-pong-opening")
async def check_pong_opening(ctx: ServerContext) -> None:
    conn = await ctx.connect()
    await conn.send(ctx.hello())
    await conn.send({"v": 1, "seq": 0, "type": "ping"})
    items = await conn.until(lambda i: i.type == "pong", 5.0, "pong")
    ctx.expect(not _errors(items), "a ping right after hello got an error")
    if not any(i.type == "ready" for i in items):
        await conn.expect_ready()


@check("§4.4", "MUST", "every ping in an open session gets a pong", id="heartbeat-pong-open")
async def check_pong_open(ctx: ServerContext) -> None:
    session = await ctx.session()
    conn = session.current
    for _ in range(3):
        await conn.send({"v": 1, "seq": 0, "type": "ping"})
    pongs = 0
    while pongs < 3:
        item = await conn.expect("pong", 3.0)
        ctx.expect(item.seq == 0, f"pong with seq {item.seq}")
        pongs += 1


@check(
    "§4.4",
    "MUST",
    "a silent connection is closed with 4408 and stays resumable",
    id="heartbeat-timeout-close-4408",
)
async def check_heartbeat_timeout(ctx: ServerContext) -> None:
    timeout = ctx.options.heartbeat_timeout
    if timeout is None:
        raise Skipped(
            "the heartbeat timeout is server configuration, not on the wire (§4.4): pass "
            "--heartbeat-timeout SEC (the server's timeout) to run this check"
        )
    session = await ctx.session()
    started = time.monotonic()
    code, reason = await session.current.wait_closed(timeout * 1.5 + 5)
    waited = time.monotonic() - started
    ctx.expect(
        code == 4408,
        f"after {waited:.1f} s of silence the server closed with {code} {reason!r}, expected 4408",
    )
    ready = await session.resume()
    ctx.expect(ready.get("resumedFrom") is not None, "the resumed ready lacks resumedFrom")


_LONG.add("heartbeat-timeout-close-4408")


# ======================================================================================
# §5 Sessions
# ======================================================================================


NO_SESSION_MESSAGES: Final[list[dict[str, Any]]] = [
    {"v": 1, "seq": 1, "type": "text", "text": "echo early"},
    {"v": 1, "seq": 1, "type": "interrupt", "epoch": 0, "reason": "user"},
    {"v": 1, "seq": 1, "type": "playback", "itemId": "item_1", "playedMs": 10},
    {"v": 1, "seq": 1, "type": "tool.result", "callId": "c", "epoch": 0, "ok": True, "output": 1},
    {"v": 1, "seq": 1, "type": "context", "context": None},
    {"v": 1, "seq": 0, "type": "ack", "upTo": 0},
]


@check(
    "§5.1",
    "MUST",
    "a message before hello gets NO_SESSION (seq 0, not recoverable)",
    id="table-no-session",
)
async def check_no_session(ctx: ServerContext) -> None:
    conn = await ctx.connect()
    for message in NO_SESSION_MESSAGES:
        await conn.send(message)
        items = await conn.barrier()
        errors = _errors(items)
        ctx.expect(
            len(errors) == 1 and errors[0].get("code") == "NO_SESSION",
            f"{message['type']} before hello got {[e.get('code') for e in errors]}, "
            "expected [NO_SESSION]",
        )
        ctx.expect(errors[0].seq == 0, f"NO_SESSION has seq {errors[0].seq} (§4.1)")
        ctx.expect(
            errors[0].get("recoverable") is False, "NO_SESSION must be recoverable: false (§9.2)"
        )


@check(
    "§5.1",
    "MUST",
    "after NO_SESSION the connection still takes a hello",
    id="table-no-session-connection-usable",
)
async def check_no_session_usable(ctx: ServerContext) -> None:
    conn = await ctx.connect()
    await conn.send(NO_SESSION_MESSAGES[0])
    await _expect_error(ctx, conn, "NO_SESSION")
    await conn.send(ctx.hello())
    try:
        ready = await conn.expect_ready()
    except (Refused, Closed) as exc:
        ctx.fail(f"hello after NO_SESSION did not open a session: {exc}")
    ctx.expect(ready.get("resumedFrom") is None, "a new session's ready has resumedFrom")


@check(
    "§5.1",
    "MUST",
    "an invalid message before hello gets its code, recoverable, seq 0",
    id="table-invalid-before-hello",
)
async def check_invalid_before_hello(ctx: ServerContext) -> None:
    conn = await ctx.connect()
    cases = [("{", "MALFORMED"), ('{"v":3,"seq":0,"type":"hello"}', "UNSUPPORTED_VERSION")]
    cases += [(compact({"v": 1, "seq": 0, "type": "pong"}), "UNKNOWN_TYPE")]
    cases += [(compact({"v": 1, "seq": 0, "type": "ack"}), "INVALID_FIELD")]
    for text, code in cases:
        await conn.send(text)
        error = await _expect_error(ctx, conn, code, what=text)
        ctx.expect(error.seq == 0, f"{code} before a session has seq {error.seq}")
        ctx.expect(error.get("recoverable") is True, f"{code} must be recoverable: true")
    await conn.send(ctx.hello())
    await conn.expect_ready()


@check("§5.1", "MUST", "input audio before hello is ignored", id="table-audio-before-hello-ignored")
async def check_audio_before_hello(ctx: ServerContext) -> None:
    conn = await ctx.connect()
    for frame in _speech():
        await conn.send(frame)
    items = await conn.barrier()
    ctx.expect(not items, "input audio before hello was answered:\n" + "\n".join(_vs(items)))
    await conn.send(ctx.hello())
    await conn.expect_ready()
    if await ctx.has_agent():
        later = await conn.quiet(1.0)
        heard = [i for i in later if i.type in ("transcript", "turn.state")]
        ctx.expect(
            not heard, "audio sent before hello reached the session:\n" + "\n".join(_vs(heard))
        )


@check(
    "§5.1",
    "MUST",
    "messages sent while opening are kept and handled after ready",
    id="table-opening-keeps-messages",
    agent=True,
)
async def check_opening_keeps(ctx: ServerContext) -> None:
    conn = await ctx.connect()
    await conn.send(ctx.hello())
    await conn.send({"v": 1, "seq": 1, "type": "text", "text": "echo kept-while-opening"})
    items = await conn.until(
        lambda i: i.type == "text" and i.get("text") == "kept-while-opening", REPLY, "the reply"
    )
    errors = _errors(items)
    ctx.expect(not errors, f"a message sent while opening got {errors[0] if errors else ''}")
    ready = [i for i in items if i.type == "ready"]
    ctx.expect(len(ready) == 1 and items.index(ready[0]) == 0, "ready must come first")


@check(
    "§5.1",
    "MUST",
    "a second hello while opening gets DUPLICATE_HELLO",
    id="table-duplicate-hello-opening",
)
async def check_duplicate_hello_opening(ctx: ServerContext) -> None:
    conn = await ctx.connect()
    await conn.send(ctx.hello())
    await conn.send(ctx.hello())
    error = await _expect_error(ctx, conn, "DUPLICATE_HELLO")
    ctx.expect(error.get("recoverable") is True, "DUPLICATE_HELLO must be recoverable: true")
    await conn.barrier()
    await conn.quiet(QUIET)
    readies = [i for i in conn.received if i.type == "ready"]
    ctx.expect(len(readies) == 1, f"two hellos got {len(readies)} ready messages, expected 1")


@check(
    "§5.1",
    "MUST",
    "a hello in an open session gets DUPLICATE_HELLO (recoverable)",
    id="table-duplicate-hello-open",
)
async def check_duplicate_hello_open(ctx: ServerContext) -> None:
    session = await ctx.session()
    conn = session.current
    before = session.last_seq
    await conn.send(ctx.hello(capabilities=[TOOL_STREAM]))
    error = await _expect_error(ctx, conn, "DUPLICATE_HELLO")
    ctx.expect(error.get("recoverable") is True, "DUPLICATE_HELLO must be recoverable: true")
    ctx.expect(error.seq == before + 1, f"the error has seq {error.seq}: it is sequenced (§4.1)")
    await conn.barrier()
    ctx.expect(
        sum(i.type == "ready" for i in conn.received) == 1, "a second ready after a second hello"
    )
    await _alive(ctx, session, "after DUPLICATE_HELLO")


@check(
    "§5.1",
    "MUST",
    "input audio in an open session reaches the session",
    id="table-open-audio-passed",
    agent=True,
)
async def check_open_audio(ctx: ServerContext) -> None:
    session = await ctx.session(input={"encoding": "pcm16", "sampleRate": 24000})
    rate = _pcm16_rate(ctx, session.ready, "input")
    for frame in _speech(rate):
        await session.current.send(frame)
    transcript = await session.current.expect(
        "transcript", REPLY, where=lambda i: i.get("role") == "user"
    )
    ctx.expect(
        str(transcript.get("text")).startswith("(speech"),
        f"the user transcript is {transcript.get('text')!r}, expected '(speech N ms)'",
    )
    listening = session.find("turn.state", lambda i: i.get("state") == "listening")
    ctx.expect(bool(listening), "speech began no listening turn")


@check("§5.2", "MUST", "ready has sessionId, input, output and no resumedFrom", id="ready-members")
async def check_ready_members(ctx: ServerContext) -> None:
    session = await ctx.session()
    ready = session.ready
    assert ready is not None
    sid = ready.get("sessionId")
    ctx.expect(isinstance(sid, str) and sid != "", f"sessionId is {sid!r}")
    for member in ("input", "output"):
        ctx.expect(isinstance(ready.get(member), dict), f"ready.{member} is {ready.get(member)!r}")
    ctx.expect(
        ready.data is not None and "resumedFrom" not in ready.data,
        "a new session's ready has resumedFrom (present iff resuming, §5.2)",
    )


@check(
    "§5.2",
    "MUST",
    "session ids are unguessable: distinct, >= 16 varying characters",
    id="ready-session-id-unguessable",
)
async def check_session_ids(ctx: ServerContext) -> None:
    sessions = await asyncio.gather(*(ctx.session(tools=None) for _ in range(12)))
    ids = [s.session_id for s in sessions]
    ctx.expect(len(set(ids)) == len(ids), f"session ids repeat: {ids}")
    prefix = len(_common_prefix(ids))
    suffix = len(_common_prefix([i[::-1] for i in ids]))
    varying = [i[prefix : len(i) - suffix] for i in ids]
    short = [v for v in varying if len(v) < 16]
    ctx.expect(
        not short,
        f"session ids share all but {min(len(v) for v in varying)} characters "
        f"({ids[:3]} ...): at least 16 varying characters expected (122 random bits)",
    )
    alphabet = set("".join(varying))
    ctx.expect(
        len(alphabet) >= 16,
        f"the varying part of 12 session ids uses only {len(alphabet)} distinct characters",
    )


def _common_prefix(values: Sequence[str]) -> str:
    first, last = min(values), max(values)
    k = 0
    while k < min(len(first), len(last)) and first[k] == last[k]:
        k += 1
    return first[:k]


# §5.3 Authentication


@check(
    "§5.3",
    "MUST",
    "a wrong credential gets UNAUTHORIZED (seq 0) and close 4401",
    id="auth-wrong-credential",
    auth=True,
)
async def check_auth_wrong(ctx: ServerContext) -> None:
    conn = await ctx.connect()
    await conn.send(ctx.hello(auth=f"{ctx.options.auth}-wrong-{secrets.token_hex(4)}"))
    await _refusal(ctx, conn, "UNAUTHORIZED", 4401)


@check(
    "§5.3",
    "MUST",
    "an absent credential gets UNAUTHORIZED (seq 0) and close 4401",
    id="auth-absent-credential",
    auth=True,
)
async def check_auth_absent(ctx: ServerContext) -> None:
    conn = await ctx.connect()
    await conn.send({"v": 1, "seq": 0, "type": "hello", "tools": [LOOKUP]})
    await _refusal(ctx, conn, "UNAUTHORIZED", 4401)


@check(
    "§5.3",
    "MUST",
    "a resuming hello is authenticated too",
    id="auth-resume-needs-credential",
    auth=True,
)
async def check_auth_resume(ctx: ServerContext) -> None:
    session = await ctx.session()
    session.drop()
    conn = await ctx.connect()
    await conn.send({"v": 1, "seq": 0, "type": "hello", "sessionId": session.session_id})
    await _refusal(ctx, conn, "UNAUTHORIZED", 4401)
    conn = await ctx.connect()
    await conn.send(
        {
            "v": 1,
            "seq": 0,
            "type": "hello",
            "sessionId": session.session_id,
            "auth": f"{ctx.options.auth}-wrong",
        }
    )
    await _refusal(ctx, conn, "UNAUTHORIZED", 4401)


@check(
    "§5.3",
    "MUST",
    "a foreign resume is answered byte for byte like an unknown one",
    id="auth-foreign-resume-like-unknown",
    auth=True,
    auth_other=True,
)
async def check_auth_foreign(ctx: ServerContext) -> None:
    owner = await ctx.session()
    sid = owner.session_id
    other = ctx.options.auth_other
    answers: list[tuple[list[bytes], tuple[int | None, str]]] = []
    unknown = (secrets.token_urlsafe(len(sid)) + "x" * len(sid))[: len(sid)]
    for target in (sid, unknown):
        conn = await ctx.connect()
        await conn.send(
            {"v": 1, "seq": 0, "type": "hello", "sessionId": target, "resumeFrom": 0, "auth": other}
        )
        close = await conn.wait_closed(5.0)
        answers.append(([i.raw for i in conn.received], close))
    foreign, unknown_answer = answers
    ctx.expect(
        foreign == unknown_answer,
        "a foreign session's resume and an unknown session's resume are answered differently "
        f"(reveals that the session exists):\n  foreign: {foreign}\n  unknown: {unknown_answer}",
    )
    frames, close = foreign
    ctx.expect(
        len(frames) == 1 and b'"RESUME_FAILED"' in frames[0],
        f"a foreign resume got {frames}, expected one error RESUME_FAILED",
    )
    ctx.expect(close[0] == 4404, f"a foreign resume closed with {close}, expected 4404")
    ctx.expect(not owner.current.closed.is_set(), "the owner's connection was closed")
    await owner.current.barrier()


@check(
    "§5.3",
    "MUST",
    "a server without authentication ignores hello.auth",
    id="auth-ignored-without-authentication",
)
async def check_auth_ignored(ctx: ServerContext) -> None:
    if ctx.options.auth is not None:
        raise Skipped("--auth given: the server authenticates")
    for credential in ("conformance-any-credential", {"scheme": "conformance", "k": [1]}):
        conn = await ctx.connect()
        await conn.send({"v": 1, "seq": 0, "type": "hello", "auth": credential})
        try:
            await conn.expect_ready()
        except Refused as refused:
            ctx.fail(
                f"hello with auth {credential!r} was refused ({refused}); without --auth the "
                "suite assumes the server does not authenticate"
            )


# §5.4 Resuming


async def _produce(ctx: ServerContext, session: Session, count: int) -> None:
    """Make the server send ``count`` sequenced messages (invalid messages' errors)."""
    for _ in range(count):
        await session.current.send(INVALID_MESSAGE)
    await session.current.barrier()
    ctx.expect(
        session.last_seq >= count,
        f"{count} invalid messages gave only {session.last_seq} sequenced messages",
    )


@check(
    "§5.4",
    "MUST",
    "after a resume, messages after resumeFrom are resent once, in order",
    id="resume-resends-after-resume-from",
)
async def check_resume_resends(ctx: ServerContext) -> None:
    session = await ctx.session()
    await _produce(ctx, session, 4)
    originals = {i.seq: i.data for i in session.unique}
    last = session.last_seq
    session.drop()
    await session.resume(resume_from=1)
    conn = session.current
    await conn.barrier()
    await conn.quiet(QUIET)
    resent = [i for i in conn.received if i.sequenced]
    seqs = [i.seq for i in resent]
    ctx.expect(
        seqs == list(range(2, last + 1)),
        f"resumed from 1 with the server at {last}: resent seqs {seqs}, "
        f"expected {list(range(2, last + 1))}",
    )
    changed = [i for i in resent if originals.get(i.seq) != i.data]
    ctx.expect(
        not changed, "resent messages differ from the originals:\n" + "\n".join(_vs(changed))
    )


@check(
    "§5.4",
    "MUST",
    "ready.resumedFrom is the server's lastSeq of the client stream",
    id="resume-resumed-from-last-seq",
)
async def check_resumed_from(ctx: ServerContext) -> None:
    session = await ctx.session()
    for k in range(3):
        await session.send("context", context={"k": k})
    await session.current.barrier()
    session.drop()
    ready = await session.resume()
    resumed = ready.get("resumedFrom")
    ctx.expect(resumed == 3, f"the client sent seqs 1..3; ready.resumedFrom is {resumed!r}")


@check(
    "§5.4",
    "MUST",
    "resuming an unknown session: RESUME_FAILED (seq 0), close 4404",
    id="resume-unknown-session",
)
async def check_resume_unknown(ctx: ServerContext) -> None:
    conn = await ctx.connect()
    await conn.send(ctx.hello(sessionId=f"conformance-{secrets.token_hex(16)}", resumeFrom=0))
    await _refusal(ctx, conn, "RESUME_FAILED", 4404)


@check(
    "§5.4",
    "MUST",
    "resumeFrom beyond what the server sent: RESUME_FAILED, close 4404",
    id="resume-beyond-sent",
)
async def check_resume_beyond(ctx: ServerContext) -> None:
    session = await ctx.session()
    await _produce(ctx, session, 1)
    session.drop()
    conn = await ctx.connect()
    await conn.send(ctx.hello(sessionId=session.session_id, resumeFrom=session.last_seq + 5))
    await _refusal(ctx, conn, "RESUME_FAILED", 4404)


@check(
    "§5.4",
    "MUST",
    "a resume beyond what was sent closes the session",
    id="resume-beyond-sent-closes-session",
)
async def check_resume_beyond_closes(ctx: ServerContext) -> None:
    session = await ctx.session()
    await _produce(ctx, session, 1)
    session.drop()
    conn = await ctx.connect()
    await conn.send(ctx.hello(sessionId=session.session_id, resumeFrom=session.last_seq + 5))
    await conn.wait_closed(5.0)
    conn = await ctx.connect()
    await conn.send(ctx.hello(sessionId=session.session_id, resumeFrom=session.last_seq))
    await _refusal(ctx, conn, "RESUME_FAILED", 4404)


@check(
    "§5.4",
    "MUST",
    "a resume closes the older connection with 4000",
    id="resume-replaces-older-connection",
)
async def check_resume_replaces(ctx: ServerContext) -> None:
    session = await ctx.session()
    older = session.current
    await session.resume()
    code, reason = await older.wait_closed(5.0)
    ctx.expect(
        code == 4000, f"the replaced connection closed with {code} {reason!r}, expected 4000"
    )
    await _alive(ctx, session, "on the newer connection")


@check(
    "§5.4",
    "MUST",
    "client resends after a resume are handled exactly once",
    id="resume-client-resends-deduped",
    agent=True,
)
async def check_resume_dedupe(ctx: ServerContext) -> None:
    session = await ctx.session()
    await session.reply("echo r-one", REPLY, expect="r-one")
    await session.text("echo r-two")
    session.drop()
    await session.resume()  # resends what the server lacks, per ready.resumedFrom
    await session.resend(1)  # and a duplicate the server already handled
    await session.resend(2)
    await session.current.barrier()
    await session.current.quiet(0.5)
    await session.reply("echo r-three", REPLY, expect="r-three")
    for word in ("r-one", "r-two"):
        count = sum(i.type == "text" and i.get("text") == word for i in session.unique)
        ctx.expect(count == 1, f"'echo {word}' was handled {count} times, expected once")
    turns = {i.get("turnId") for i in session.find("turn.state")}
    ctx.expect(len(turns) <= 3, f"three texts began {len(turns)} turns")


@check(
    "§5.4",
    "MUST",
    "a pending tool call carries over a resume",
    id="resume-pending-tool-call",
    agent=True,
)
async def check_resume_tool_call(ctx: ServerContext) -> None:
    session = await ctx.session()
    after = session.last_seq
    calls = await _call(ctx, session, 'call lookup {"k":"resume"}')
    session.drop()
    await session.resume(resume_from=calls[0].seq - 1)
    resent = await session.current.expect("tool.call", 3.0)
    ctx.expect(
        resent.data == calls[0].data,
        f"the resent tool.call differs from the original:\n  {calls[0]}\n  {resent}",
    )
    await _result(session, calls[0], output={"carried": True})
    turn = await session.turn(after, REPLY)
    ctx.expect(
        'result ok {"carried":true}' in turn.texts(),
        f"the result after the resume was not used: chunks {turn.texts()}",
    )


@check(
    "§5.4",
    "MUST",
    "transient messages and audio are never resent",
    id="resume-transient-not-resent",
    agent=True,
)
async def check_resume_transient(ctx: ServerContext) -> None:
    session = await ctx.session()
    await session.reply("echo resend-transient", REPLY)
    await session.current.barrier()
    session.drop()
    await session.resume(resume_from=0)
    conn = session.current
    await conn.barrier()
    bad = [i for i in conn.received if i.type in ("audio", "audio.start", "ack")]
    ctx.expect(not bad, "resent after the resume:\n" + "\n".join(_vs(bad)))
    resent = [i for i in conn.received if i.sequenced]
    ctx.expect(bool(resent), "resuming from 0 resent nothing")


@check("§5.4", "MUST", "formats carry over a resume unchanged", id="resume-formats-fixed")
async def check_resume_formats(ctx: ServerContext) -> None:
    session = await ctx.session(output={"encoding": "pcmu", "sampleRate": 8000})
    ready = session.ready
    assert ready is not None
    before = (ready.get("input"), ready.get("output"))
    session.drop()
    resumed = await session.resume(
        hello={**ctx.auth(), "output": {"encoding": "pcm16", "sampleRate": 16000}}
    )
    after = (resumed.get("input"), resumed.get("output"))
    ctx.expect(
        _same_format(before[0], after[0]) and _same_format(before[1], after[1]),
        f"formats changed across the resume: {before} -> {after}",
    )


@check(
    "§6.3",
    "MUST",
    "a replayed tool.call keeps its ids byte for byte (global-tool-ids-v1)",
    id="resume-replay-same-ids",
    agent=True,
)
async def check_resume_replay_ids(ctx: ServerContext) -> None:
    session = await ctx.capable(GLOBAL_IDS)
    calls = await _call(ctx, session, "call lookup {}")
    session.drop()
    await session.resume(resume_from=calls[0].seq - 1)
    resent = await session.current.expect("tool.call", 3.0)
    ctx.expect(
        resent.raw == calls[0].raw,
        f"the replayed tool.call is not byte-identical:\n  {calls[0]}\n  {resent}",
    )
    await _result(session, calls[0])


# ======================================================================================
# §6 Turns, epochs and interruption
# ======================================================================================

_EPOCH_TYPES: Final = ("turn.state", "audio.start", "tool.call", "tool.call.delta", "tool.stream")


@check(
    "§6.1",
    "MUST",
    "epochs never decrease; each turn has a higher epoch",
    id="epoch-never-decreases",
    agent=True,
)
async def check_epochs(ctx: ServerContext) -> None:
    session = await ctx.session()
    await session.reply("echo one", REPLY)
    after = session.last_seq
    await session.text("speak 1000")
    speaking = await session.current.expect(
        "turn.state", REPLY, where=lambda i: i.seq > after and i.get("state") == "speaking"
    )
    await session.send("interrupt", epoch=speaking.get("epoch"), reason="user")
    await session.current.expect("interrupted", 3.0)
    await session.reply("echo two", REPLY)
    await session.reply("echo three", REPLY)
    ordered = sorted(
        (i for i in session.received if i.type in (*_EPOCH_TYPES, "interrupted")),
        key=lambda i: (i.conn, i.index),
    )
    problems: list[str] = []
    highest = -1
    for item in ordered:
        epoch = item.get("epoch")
        if not isinstance(epoch, int):
            continue
        if epoch < highest and item.type != "interrupted":
            problems.append(f"epoch {epoch} after {highest}: {item}")
        highest = max(highest, epoch)
    turns: dict[str, int] = {}
    for item in ordered:
        if item.type == "turn.state":
            turns.setdefault(str(item.get("turnId")), item.get("epoch"))
    epochs = list(turns.values())
    if epochs != sorted(set(epochs)) or len(epochs) != 4:
        problems.append(f"four turns have epochs {epochs}: each turn needs a higher epoch")
    ctx.expect(not problems, "\n".join(problems))


@check(
    "§6.1",
    "MUST",
    "a turn's messages carry its turnId and epoch",
    id="epoch-turn-messages-carry-epoch",
    agent=True,
)
async def check_turn_epochs(ctx: ServerContext) -> None:
    session = await ctx.session()
    await session.reply("echo carry epoch", REPLY)
    after = session.last_seq
    calls = await _call(ctx, session, 'call lookup {"arg":"a long enough argument"}')
    await _result(session, calls[0])
    await session.turn(after, REPLY)
    turns: dict[str, int] = {}
    for item in session.find("turn.state"):
        turns.setdefault(str(item.get("turnId")), item.get("epoch"))
    bad: list[str] = []
    for item in session.received:
        if item.type in _EPOCH_TYPES:
            turn_id = str(item.get("turnId"))
            if turn_id not in turns:
                bad.append(f"turnId of no turn.state: {item}")
            elif item.get("epoch") != turns[turn_id]:
                bad.append(f"epoch {item.get('epoch')} in a turn of epoch {turns[turn_id]}: {item}")
    ctx.expect(not bad, "\n".join(bad))


async def _speaking(session: Session, ms: int = 1500) -> Incoming:
    after = session.last_seq
    await session.text(f"speak {ms}")
    return await session.current.expect(
        "turn.state", REPLY, where=lambda i: i.seq > after and i.get("state") == "speaking"
    )


@check(
    "§6.2",
    "MUST",
    "interrupt with the observed epoch gets interrupted with that epoch",
    id="interrupt-observed-epoch",
    agent=True,
)
async def check_interrupt(ctx: ServerContext) -> None:
    session = await ctx.session()
    speaking = await _speaking(session)
    epoch, turn_id = speaking.get("epoch"), speaking.get("turnId")
    await session.send("interrupt", epoch=epoch, reason="user")
    interrupted = await session.current.expect("interrupted", 3.0)
    ctx.expect(
        interrupted.get("epoch") == epoch,
        f"interrupt of epoch {epoch} answered with interrupted epoch {interrupted.get('epoch')}",
    )
    later = await session.current.quiet(QUIET)
    leaked = [i for i in later if i.sequenced and i.get("turnId") == turn_id]
    ctx.expect(not leaked, "the interrupted turn went on:\n" + "\n".join(_vs(leaked)))


@check(
    "§6.2",
    "MUST",
    "an interrupt naming an older epoch has no effect",
    id="interrupt-stale-no-effect",
    agent=True,
)
async def check_interrupt_stale(ctx: ServerContext) -> None:
    session = await ctx.session()
    first = await session.reply("echo first", REPLY)
    after = session.last_seq
    speaking = await _speaking(session, 500)
    ctx.expect(speaking.get("epoch") > first.epoch, "the second turn's epoch is not higher")
    await session.send("interrupt", epoch=first.epoch, reason="user")
    turn = await session.turn(after, REPLY)
    ctx.expect(
        turn.ended == "idle" and not turn.of("interrupted"),
        f"an interrupt of the older epoch {first.epoch} interrupted the turn of epoch "
        f"{speaking.get('epoch')}",
    )


@check(
    "§6.2",
    "MUST",
    "an interrupt with no response in flight sends nothing",
    id="interrupt-nothing-in-flight",
    agent=True,
)
async def check_interrupt_idle(ctx: ServerContext) -> None:
    session = await ctx.session()
    turn = await session.reply("echo done", REPLY)
    await session.send("interrupt", epoch=turn.epoch, reason="keyboard")
    items = await session.current.barrier()
    items += await session.current.quiet(QUIET)
    sent = [i for i in items if i.sequenced]
    ctx.expect(not sent, "an interrupt with nothing in flight got:\n" + "\n".join(_vs(sent)))


@check(
    "§6.3",
    "MUST",
    "text interrupts the response in flight first",
    id="text-interrupts-response",
    agent=True,
)
async def check_text_interrupts(ctx: ServerContext) -> None:
    session = await ctx.session()
    speaking = await _speaking(session)
    after = session.last_seq
    await session.reply("echo next-one", REPLY, expect="next-one")
    later = [i for i in session.unique if i.seq > after]
    kinds = [
        (i.type, i.get("epoch"), i.get("turnId"))
        for i in later
        if i.type in ("interrupted", "turn.state")
    ]
    ctx.expect(
        bool(kinds) and kinds[0][0] == "interrupted" and kinds[0][1] == speaking.get("epoch"),
        f"after the text, the server sent {kinds[:3]}: expected interrupted with epoch "
        f"{speaking.get('epoch')} before the new turn",
    )


@check(
    "§6.2",
    "MUST",
    "the server interrupts when it detects the user speaking",
    id="speech-interrupts-response",
    agent=True,
)
async def check_speech_interrupts(ctx: ServerContext) -> None:
    session = await ctx.session(input={"encoding": "pcm16", "sampleRate": 24000})
    rate = _pcm16_rate(ctx, session.ready, "input")
    speaking = await _speaking(session, 3000)
    for frame in _speech(rate, 300, 0):
        await session.current.send(frame)
    interrupted = await session.current.expect("interrupted", REPLY)
    ctx.expect(
        interrupted.get("epoch") == speaking.get("epoch"),
        f"speech interrupted epoch {interrupted.get('epoch')}, the response had "
        f"{speaking.get('epoch')}",
    )


# ======================================================================================
# §7 Tools
# ======================================================================================


@check(
    "§7.1",
    "MUST",
    "tool.call for a declared tool, with the turn's epoch",
    id="tool-call-declared",
    agent=True,
)
async def check_tool_call(ctx: ServerContext) -> None:
    session = await ctx.session()
    after = session.last_seq
    calls = await _call(ctx, session, 'call lookup {"q":"conformance"}')
    call = calls[0]
    ctx.expect(call.get("name") == "lookup", f"tool.call names {call.get('name')!r}")
    ctx.expect(
        call.get("arguments") == {"q": "conformance"}, f"arguments {call.get('arguments')!r}"
    )
    await _result(session, call, output={"answer": 42})
    turn = await session.turn(after, REPLY)
    ctx.expect(
        call.get("turnId") == turn.turn_id and call.get("epoch") == turn.epoch,
        f"tool.call turnId/epoch {call.get('turnId')}/{call.get('epoch')}; the turn is "
        f"{turn.turn_id}/{turn.epoch}",
    )
    ctx.expect(
        'result ok {"answer":42}' in turn.texts(), f"the result was not used: {turn.texts()}"
    )


@check(
    "§7.1",
    "MUST",
    "no tool.call for a tool the client did not declare",
    id="tool-call-undeclared-never",
    agent=True,
)
async def check_tool_undeclared(ctx: ServerContext) -> None:
    session = await ctx.session()
    turn = await session.reply("call conformance_undeclared {}", REPLY)
    calls = turn.of("tool.call")
    ctx.expect(not calls, f"tool.call for an undeclared tool: {calls[0] if calls else ''}")


@check(
    "§7.1", "MUST", "callIds are never reused in a session", id="tool-call-ids-unique", agent=True
)
async def check_call_ids(ctx: ServerContext) -> None:
    session = await ctx.session()
    ids: list[Any] = []
    for command, count in (
        ("calls 4 lookup {}", 4),
        ("call lookup {}", 1),
        ("calls 2 lookup {}", 2),
    ):
        after = session.last_seq
        calls = await _call(ctx, session, command, count)
        ids += [c.get("callId") for c in calls]
        ctx.expect(len(set(ids)) == len(ids), f"callIds repeat within the session: {ids}")
        for call in calls:
            await _result(session, call, output=None)
        await session.turn(after, REPLY)


@check(
    "§7.2",
    "MUST",
    "a tool.result with an unknown callId is ignored",
    id="tool-result-unknown-ignored",
    agent=True,
)
async def check_result_unknown(ctx: ServerContext) -> None:
    session = await ctx.session()
    after = session.last_seq
    call = (await _call(ctx, session, "call lookup {}"))[0]
    await session.send(
        "tool.result",
        callId=f"conformance-unknown-{secrets.token_hex(4)}",
        epoch=call.get("epoch"),
        ok=True,
        output={"wrong": True},
    )
    items = await session.current.barrier()
    items += await session.current.quiet(QUIET)
    early = [i for i in items if i.type in ("text", "error")]
    ctx.expect(not early, "an unknown callId's result had an effect:\n" + "\n".join(_vs(early)))
    await _result(session, call, output={"right": True})
    turn = await session.turn(after, REPLY)
    ctx.expect(
        turn.texts() == ['result ok {"right":true}'],
        f"chunks {turn.texts()}, expected the real result only",
    )


@check(
    "§7.2",
    "MUST",
    "a second tool.result for a call is ignored",
    id="tool-result-duplicate-ignored",
    agent=True,
)
async def check_result_duplicate(ctx: ServerContext) -> None:
    session = await ctx.session()
    after = session.last_seq
    first, second = await _call(ctx, session, "calls 2 lookup {}", 2)
    await _result(session, first, output={"n": 1})
    await _result(session, first, output={"n": 99})
    await _result(session, second, output={"n": 2})
    turn = await session.turn(after, REPLY)
    ctx.expect(
        turn.texts() == ['result ok {"n":1}', 'result ok {"n":2}'],
        f"chunks {turn.texts()}: a second result for {first.get('callId')} had an effect",
    )


@check(
    "§7.2",
    "MUST",
    "a late result of an interrupted call is ignored, even for a later call",
    id="tool-result-late-ignored",
    agent=True,
)
async def check_result_late(ctx: ServerContext) -> None:
    session = await ctx.session()
    old = (await _call(ctx, session, "call lookup {}"))[0]
    await session.send("interrupt", epoch=old.get("epoch"), reason="user")
    await session.current.expect("interrupted", 3.0)
    after = session.last_seq
    new = (await _call(ctx, session, "call lookup {}"))[0]
    ctx.expect(new.get("callId") != old.get("callId"), "the later call reuses the callId")
    await _result(session, old, output={"late": True})
    items = await session.current.barrier()
    items += await session.current.quiet(QUIET)
    early = [i for i in items if i.type == "text"]
    ctx.expect(not early, "the late result settled something:\n" + "\n".join(_vs(early)))
    await _result(session, new, output={"fresh": True})
    turn = await session.turn(after, REPLY)
    ctx.expect(
        turn.texts() == ['result ok {"fresh":true}'],
        f"chunks {turn.texts()}: a previous call's late result was taken for a later call",
    )


@check(
    "§7.2",
    "MUST",
    "an interrupted call is settled: nothing more happens for it",
    id="tool-call-interrupted-settled",
    agent=True,
)
async def check_call_interrupted(ctx: ServerContext) -> None:
    session = await ctx.session()
    call = (await _call(ctx, session, "call lookup {}"))[0]
    await session.send("interrupt", epoch=call.get("epoch"), reason="user")
    interrupted = await session.current.expect("interrupted", 3.0)
    ctx.expect(
        interrupted.get("epoch") == call.get("epoch"),
        f"interrupted epoch {interrupted.get('epoch')}, the call's is {call.get('epoch')}",
    )
    await _result(session, call, ok=False, code="INTERRUPTED", message=None)
    items = await session.current.barrier()
    items += await session.current.quiet(QUIET)
    leaked = [
        i
        for i in items
        if i.sequenced and (i.get("turnId") == call.get("turnId") or i.type == "tool.call")
    ]
    ctx.expect(not leaked, "after the interruption:\n" + "\n".join(_vs(leaked)))
    await _alive(ctx, session, "after an interrupted tool call")


# §7.4 / §7.5 previews and tool streams


@check(
    "§7.4",
    "SHOULD",
    "previews name the call they preview (callId, turnId, epoch)",
    id="preview-identifiers-match-call",
    agent=True,
)
async def check_preview_ids(ctx: ServerContext) -> None:
    session = await ctx.session()
    after = session.last_seq
    call = (await _call(ctx, session, 'call lookup {"text":"a preview of several fragments"}'))[0]
    await _result(session, call)
    await session.turn(after, REPLY)
    previews = session.find("tool.call.delta", lambda i: i.seq > after)
    if not previews:
        raise Skipped("the server sent no tool.call.delta preview (previews are optional)")
    bad = [
        p
        for p in previews
        if (p.get("callId"), p.get("turnId"), p.get("epoch"))
        != (call.get("callId"), call.get("turnId"), call.get("epoch"))
    ]
    ctx.expect(not bad, "previews with other ids than the call:\n" + "\n".join(_vs(bad)))


@check(
    "§7.4",
    "MUST",
    "with tool-stream-v1 no tool.call.delta is sent",
    id="tool-stream-no-preview",
    agent=True,
)
async def check_stream_no_preview(ctx: ServerContext) -> None:
    session = await ctx.capable(TOOL_STREAM)
    after = session.last_seq
    call = (await _call(ctx, session, 'call lookup {"text":"several fragments of arguments"}'))[0]
    await _result(session, call)
    await session.turn(after, REPLY)
    await session.reply("server-tool 120", REPLY)
    previews = session.find("tool.call.delta")
    ctx.expect(
        not previews, f"tool.call.delta with tool-stream-v1: {previews[0] if previews else ''}"
    )


@check(
    "§7.5",
    "MUST",
    "a client call's tool.stream phases are in order, one terminal",
    id="tool-stream-client-call",
    agent=True,
)
async def check_stream_client(ctx: ServerContext) -> None:
    session = await ctx.capable(TOOL_STREAM)
    after = session.last_seq
    call = (await _call(ctx, session, 'call lookup {"query":"a fairly long argument text"}'))[0]
    await _result(session, call, output={"ok": 1})
    await session.turn(after, REPLY)
    await session.current.quiet(0.1)
    streams = _streams(session, call.get("callId"))
    problems = _lifecycle(streams)
    phases = [s.get("phase") for s in streams]
    if "arguments-complete" not in phases:
        problems.append("no arguments-complete for an issued call")
    complete = [s for s in streams if s.get("phase") == "arguments-complete"]
    if complete and complete[0].get("arguments") != call.get("arguments"):
        problems.append("arguments-complete differs from tool.call's arguments")
    settled = [s for s in streams if s.get("phase") == "settled"]
    if not settled or settled[0].get("ok") is not True:
        problems.append(f"a call answered ok must end settled ok: {phases}")
    for s in streams:
        if (s.get("turnId"), s.get("epoch"), s.get("name")) != (
            call.get("turnId"),
            call.get("epoch"),
            call.get("name"),
        ):
            problems.append(f"tool.stream differs from tool.call in turnId/epoch/name: {s}")
            break
    ctx.expect(not problems, f"phases {phases}:\n" + "\n".join(problems))


@check(
    "§7.5",
    "MUST",
    "a server tool's tool.stream phases are in order, settled without output",
    id="tool-stream-server-tool",
    agent=True,
)
async def check_stream_server(ctx: ServerContext) -> None:
    session = await ctx.capable(TOOL_STREAM)
    turn = await session.reply("server-tool 350", REPLY)
    streams = [i for i in turn.items if i.type == "tool.stream"]
    ids = {s.get("callId") for s in streams}
    ctx.expect(len(ids) == 1, f"expected one server call's tool.stream, got callIds {ids}")
    problems = _lifecycle(streams)
    phases = [s.get("phase") for s in streams]
    if phases[-1:] != ["settled"] or streams[-1].get("ok") is not True:
        problems.append("a server tool that finished must end settled ok")
    if any(
        s.data is not None and "output" in s.data for s in streams if s.get("phase") == "settled"
    ):
        problems.append("settled carries the server tool's output (never included, §7.5)")
    if turn.of("tool.call"):
        problems.append("tool.call sent for a server-side tool")
    ctx.expect(not problems, f"phases {phases}:\n" + "\n".join(problems))


@check(
    "§7.5",
    "MUST",
    "an interrupted client call ends cancelled, nothing after",
    id="tool-stream-cancelled-on-interrupt",
    agent=True,
)
async def check_stream_cancelled(ctx: ServerContext) -> None:
    session = await ctx.capable(TOOL_STREAM)
    call = (await _call(ctx, session, "call lookup {}"))[0]
    await session.send("interrupt", epoch=call.get("epoch"), reason="user")
    await session.current.expect("interrupted", 3.0)
    await _result(session, call, output={"late": True})
    await session.current.barrier()
    await session.current.quiet(QUIET)
    streams = _streams(session, call.get("callId"))
    phases = [s.get("phase") for s in streams]
    problems = _lifecycle(streams)
    if phases[-1:] != ["cancelled"]:
        problems.append("an interrupted call's terminal phase is cancelled (messages.md)")
    ctx.expect(not problems, f"phases {phases}:\n" + "\n".join(problems))


@check(
    "§7.5",
    "MUST",
    "an interrupted server tool ends cancelled, no progress after",
    id="tool-stream-server-tool-cancelled",
    agent=True,
)
async def check_stream_server_cancelled(ctx: ServerContext) -> None:
    session = await ctx.capable(TOOL_STREAM)
    after = session.last_seq
    await session.text("server-tool 3000")
    progress = await session.current.expect(
        "tool.stream", REPLY, where=lambda i: i.seq > after and i.get("phase") == "progress"
    )
    await session.send("interrupt", epoch=progress.get("epoch"), reason="user")
    await session.current.expect("interrupted", 3.0)
    await session.current.quiet(0.4)
    streams = _streams(session, progress.get("callId"))
    phases = [s.get("phase") for s in streams]
    problems = _lifecycle(streams)
    if phases[-1:] != ["cancelled"]:
        problems.append("an interrupted server call's terminal phase is cancelled")
    ctx.expect(not problems, f"phases {phases}:\n" + "\n".join(problems))


@check(
    "§7.5",
    "MUST",
    "settled carries ok false and the failure code",
    id="tool-stream-settled-failure",
    agent=True,
)
async def check_stream_failure(ctx: ServerContext) -> None:
    session = await ctx.capable(TOOL_STREAM)
    after = session.last_seq
    call = (await _call(ctx, session, "call lookup {}"))[0]
    await _result(session, call, ok=False, code="REJECTED", message="declined by the suite")
    turn = await session.turn(after, REPLY)
    settled = [s for s in _streams(session, call.get("callId")) if s.get("phase") == "settled"]
    ctx.expect(len(settled) == 1, f"{len(settled)} settled phases for the call")
    ctx.expect(
        settled[0].get("ok") is False and settled[0].get("code") == "REJECTED",
        f"settled is {settled[0]}, expected ok false, code REJECTED",
    )
    ctx.expect("result error REJECTED" in turn.texts(), f"chunks {turn.texts()}")


@check(
    "§6.3",
    "MUST",
    "every message for a call uses its callId and turnId (global-tool-ids-v1)",
    id="tool-ids-global-consistent",
    agent=True,
)
async def check_global_consistent(ctx: ServerContext) -> None:
    session = await ctx.capable(GLOBAL_IDS)
    after = session.last_seq
    call = (await _call(ctx, session, 'call lookup {"text":"fragments for previews"}'))[0]
    await _result(session, call)
    turn = await session.turn(after, REPLY)
    related = [i for i in turn.items if i.type in ("tool.call.delta", "tool.stream", "tool.call")]
    bad = [
        i
        for i in related
        if (i.get("callId"), i.get("turnId")) != (call.get("callId"), turn.turn_id)
    ]
    ctx.expect(not bad, "messages of the one call with other ids:\n" + "\n".join(_vs(bad)))


@check(
    "§6.3",
    "MUST",
    "turn and call ids are unique across sessions (global-tool-ids-v1)",
    id="tool-ids-global-unique",
    agent=True,
)
async def check_global_unique(ctx: ServerContext) -> None:
    ids: list[tuple[Any, Any]] = []
    for _ in range(2):
        session = await ctx.capable(GLOBAL_IDS)
        after = session.last_seq
        call = (await _call(ctx, session, "call lookup {}"))[0]
        await _result(session, call)
        turn = await session.turn(after, REPLY)
        ids.append((call.get("callId"), turn.turn_id))
    (call_a, turn_a), (call_b, turn_b) = ids
    ctx.expect(call_a != call_b, f"two sessions issued the same callId {call_a!r}")
    ctx.expect(turn_a != turn_b, f"two sessions used the same turnId {turn_a!r}")


# ======================================================================================
# §8 Audio
# ======================================================================================


async def _echo_audio(ctx: ServerContext, session: Session, turns: int = 1) -> list[Incoming]:
    for k in range(turns):
        await session.reply(f"echo audio-{k}", REPLY)
    await session.current.quiet(0.1)
    frames = [i for i in session.received if i.binary]
    if not frames:
        raise Skipped("the agent's echo reply carried no output audio")
    return frames


@check(
    "§8.3",
    "MUST",
    "audio.start comes before the first output frame",
    id="audio-start-before-frames",
    agent=True,
)
async def check_audio_start(ctx: ServerContext) -> None:
    session = await ctx.session()
    await _echo_audio(ctx, session, 2)
    announced = False
    for item in session.received:
        if item.type == "audio.start":
            announced = True
        elif item.binary and not announced:
            ctx.fail(f"an output frame before any audio.start: {item}")


@check(
    "§8.1",
    "MUST",
    "output frames are kind 2, at least 5 bytes",
    id="audio-output-kind-2",
    agent=True,
)
async def check_audio_kind(ctx: ServerContext) -> None:
    session = await ctx.session()
    frames = await _echo_audio(ctx, session)
    bad = [f for f in frames if f.type != "audio" or f.raw[0] != 2]
    ctx.expect(not bad, "binary frames that are not output audio:\n" + "\n".join(_vs(bad)))


@check(
    "§8.1",
    "MUST",
    "output audio seq starts at 0 and increases by one per frame",
    id="audio-seq-increments",
    agent=True,
)
async def check_audio_seq(ctx: ServerContext) -> None:
    session = await ctx.session()
    frames = [f for f in await _echo_audio(ctx, session, 2) if f.type == "audio"]
    seqs = [f.seq for f in frames]
    expected = [k % (1 << 32) for k in range(len(seqs))]
    ctx.expect(seqs == expected, f"output audio seqs {seqs}, expected {expected}")


@check(
    "§8.2",
    "SHOULD",
    "a preference the agent takes unchanged is accepted",
    id="audio-format-passthrough",
    agent=True,
)
async def check_format_passthrough(ctx: ServerContext) -> None:
    pcmu = {"encoding": "pcmu", "sampleRate": 8000}
    pcm16k = {"encoding": "pcm16", "sampleRate": 16000}
    session = await ctx.session(input=pcm16k, output=pcmu)
    ready = session.ready
    assert ready is not None
    ctx.expect(
        _same_format(ready.get("input"), pcm16k) and _same_format(ready.get("output"), pcmu),
        f"preferred input {pcm16k}, output {pcmu} (the scripted agent takes both "
        f"unchanged); ready has {ready.get('input')}, {ready.get('output')}",
    )
    frames = await _echo_audio(ctx, session)
    sizes = {len(f.raw) - 5 for f in frames}
    ctx.expect(sizes <= {160}, f"20 ms pcmu frames are 160 bytes; got payload sizes {sizes}")


@check(
    "§8.2",
    "SHOULD",
    "otherwise the server chooses pcm16 at 24000 Hz",
    id="audio-format-default",
    agent=True,
)
async def check_format_default(ctx: ServerContext) -> None:
    opus = {"encoding": "opus", "sampleRate": 48000}
    session = await ctx.session(input=opus, output=opus)
    ready = session.ready
    assert ready is not None
    want = {"encoding": "pcm16", "sampleRate": 24000}
    ctx.expect(
        _same_format(ready.get("input"), want) and _same_format(ready.get("output"), want),
        f"preferred opus (the scripted agent does not take it); ready has "
        f"{ready.get('input')}, {ready.get('output')}, expected pcm16 at 24000 Hz",
    )


@check(
    "§8.2",
    "SHOULD",
    "pcm16 payloads hold whole samples",
    id="audio-pcm16-whole-samples",
    agent=True,
)
async def check_whole_samples(ctx: ServerContext) -> None:
    session = await ctx.session(output={"encoding": "pcm16", "sampleRate": 24000})
    frames = await _echo_audio(ctx, session)
    odd = [f for f in frames if (len(f.raw) - 5) % 2]
    ctx.expect(not odd, "pcm16 frames with an odd payload:\n" + "\n".join(_vs(odd)))


@check(
    "§8.1",
    "MUST",
    "a malformed binary frame gets MALFORMED, recoverable",
    id="audio-malformed-recoverable",
)
async def check_audio_malformed(ctx: ServerContext) -> None:
    session = await ctx.session()
    conn = session.current
    bad = [b"", b"\x01\x00\x00", audio_frame(0, bytes(8), kind=2), audio_frame(0, b"\x00", kind=9)]
    for frame in bad:
        before = session.last_seq
        await conn.send(frame)
        error = await _expect_error(ctx, conn, "MALFORMED", what=f"binary {frame.hex()}")
        ctx.expect(error.get("recoverable") is True, "MALFORMED must be recoverable: true")
        ctx.expect(error.seq == before + 1, f"the error has seq {error.seq}, it is sequenced")
    await _alive(ctx, session, "after malformed binary frames")


@check(
    "§8.3",
    "MUST",
    "after a resume, output audio follows a new audio.start",
    id="audio-new-start-after-resume",
    agent=True,
)
async def check_audio_after_resume(ctx: ServerContext) -> None:
    session = await ctx.session()
    await _speaking(session, 1500)
    await session.current.expect("audio", REPLY)
    session.drop()
    await session.resume()
    conn = session.current
    try:
        await conn.expect("audio", 2.0)
    except NoFrame:
        raise Skipped(
            "no output audio arrived after the resume, so the rule cannot be seen"
        ) from None
    first = next(i for i in conn.received if i.binary)
    announced = [i for i in conn.received[: first.index] if i.type == "audio.start"]
    ctx.expect(bool(announced), f"the first frame after the resume had no audio.start: {first}")
    await session.send("interrupt", epoch=announced[0].get("epoch"), reason="user")


# ======================================================================================
# §9 Errors
# ======================================================================================


def _vector_files() -> list[Path]:
    root = artifact_root() / "examples"
    return [*sorted((root / "client").glob("*.json")), root / "binary" / "frames.json"]


_NUMBER: Final = re.compile(r'("seq"\s*:\s*)(-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)')


def _with_seq(case: dict[str, Any], text: str, seq: int) -> str | None:
    """The valid sequenced vector ``case`` with its seq rewritten to ``seq`` (keeping the
    spelling style of a text-form case); None when the seq cannot be found."""
    if "message" in case:
        return compact({**case["message"], "seq": seq})
    match = _NUMBER.search(text)
    if match is None:
        return None
    number = match.group(2)
    spelled = f"{seq}e0" if "e" in number.lower() else f"{seq}.0" if "." in number else str(seq)
    return text[: match.start(2)] + spelled + text[match.end(2) :]


async def _run_vectors(ctx: ServerContext, path: Path) -> None:
    document = json.loads(path.read_text(encoding="utf-8"))
    binary = "sender" not in document
    session = await ctx.session()
    conn = session.current
    problems: list[str] = []
    notes: list[str] = []
    evidence: list[str] = []
    for case in document["cases"]:
        if binary and case["receiver"] != "server":
            continue
        mark = len(ctx.log.lines)
        expected: str | None = None if case["valid"] else case["error"]
        kind: str | None = None
        try:
            if binary:
                await conn.send(bytes.fromhex(case["hex"]))
            else:
                text = case["text"] if "text" in case else compact(case["message"])
                try:
                    text.encode("utf-8")
                except UnicodeEncodeError:
                    notes.append(f"{case['id']}: not sent (its text is not UTF-8)")
                    continue
                kind = _vector_type(text)
                if case["valid"] and kind in SEQUENCED_CLIENT:
                    rewritten = _with_seq(case, text, session.next_seq)
                    if rewritten is None:
                        notes.append(f"{case['id']}: not sent (no seq to rewrite)")
                        continue
                    await session.send_counted(rewritten)
                else:
                    if case["valid"] and kind == "hello":
                        expected = "DUPLICATE_HELLO"
                    await conn.send(text)
            items = await conn.barrier(pongs=2 if case["valid"] and kind == "ping" else 1)
        except Closed as closed:
            ctx.fail(f"after case {case['id']} the server closed the connection: {closed}")
        except NoFrame as exc:
            ctx.fail(f"after case {case['id']} the server stalled: {exc}")
        problem = _judge_vector(case, expected, items)
        if problem:
            problems.append(problem)
            evidence += [str(line) for line in ctx.log.lines[mark : mark + 8]]
    try:
        await _alive(ctx, session, "after the vectors")
    except CheckFailed as failed:
        problems.append(str(failed))
    if problems:
        shown = problems[:40] + (
            [f"... and {len(problems) - 40} more"] if len(problems) > 40 else []
        )
        raise CheckFailed("\n".join(shown + notes), evidence[:120] or ctx.frames())


def _vector_type(text: str) -> str | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    kind = value.get("type") if isinstance(value, dict) else None
    return kind if isinstance(kind, str) else None


def _judge_vector(case: dict[str, Any], expected: str | None, items: list[Incoming]) -> str:
    errors = _errors(items)
    invalid = _invalid(items)
    if invalid:
        return f"{case['id']}: the server sent an invalid frame: {invalid[0]}"
    if expected is None:
        if errors:
            return f"{case['id']}: valid, but answered error {errors[0].get('code')}"
        return ""
    if len(errors) != 1:
        codes = [e.get("code") for e in errors]
        return f"{case['id']}: expected one error {expected}, got {codes or 'none'}"
    error = errors[0]
    if error.get("code") != expected:
        return f"{case['id']}: expected {expected}, got {error.get('code')}"
    if error.get("recoverable") is not True:
        return f"{case['id']}: {expected} must be recoverable: true"
    if error.seq == 0:
        return f"{case['id']}: {expected} has seq 0 in an open session (sequenced, §4.1)"
    return ""


def _register_vectors() -> None:
    for path in _vector_files():
        slug = path.stem.replace(".", "-")
        folder = path.parent.name
        section = "§8.1" if folder == "binary" else "§9.1"

        async def run(ctx: ServerContext, path: Path = path) -> None:
            await _run_vectors(ctx, path)

        check(
            section,
            "MUST",
            f"examples/{folder}/{path.name}: every case, exact code, in an open session",
            id=f"vectors-{folder}-{slug}",
        )(run)


_register_vectors()


@check(
    "§9.1",
    "MUST",
    "an invalid message is not acted on (not even its seq)",
    id="invalid-not-acted-on",
    agent=True,
)
async def check_invalid_not_acted(ctx: ServerContext) -> None:
    session = await ctx.session()
    seq = session.next_seq
    text = (
        f'{{"v":1,"seq":{seq},"type":"text","text":"echo invalid-one","text":"echo invalid-one"}}'
    )
    await session.current.send(text)
    await _expect_error(ctx, session.current, "INVALID_FIELD", what="a duplicate member")
    await session.reply("echo valid-one", REPLY, expect="valid-one")
    acted = session.find("text", lambda i: i.get("text") == "invalid-one")
    ctx.expect(not acted, "the server acted on an invalid message")


@check(
    "§9.2",
    "MUST",
    "AGENT_ERROR is sequenced, flagged, and the session goes on",
    id="agent-error-recoverable",
    agent=True,
)
async def check_agent_error(ctx: ServerContext) -> None:
    session = await ctx.session()
    before = session.last_seq
    await session.text("error")
    error = await session.current.expect("error", REPLY)
    ctx.expect(error.get("code") == "AGENT_ERROR", f"'error' gave {error.get('code')}")
    ctx.expect(error.get("recoverable") is True, "the scripted AGENT_ERROR is recoverable")
    ctx.expect(error.seq == before + 1, f"AGENT_ERROR has seq {error.seq}: it is sequenced")
    await _alive(ctx, session, "after a recoverable AGENT_ERROR")


# ======================================================================================
# §10 / §11 Limits
# ======================================================================================


async def _oversized(
    ctx: ServerContext, session: Session, text: str
) -> tuple[str, Incoming | None]:
    """Send an oversized control message; what happened: "error", "handled", "close",
    "dropped" or "silent"."""
    conn = session.current
    seq = session.next_seq
    try:
        await conn.send(text)
        items = await conn.until(
            lambda i: (
                i.type == "error"
                or (i.type == "ack" and isinstance(i.get("upTo"), int) and i.get("upTo") >= seq)
            ),
            5.0,
            "an answer",
        )
    except Closed:
        return ("close" if conn.close_frame is not None else "dropped"), None
    except NoFrame:
        return "silent", None
    last = items[-1]
    if last.type == "ack":
        session.skip_seqs(1)
        return "handled", last
    return "error", last


async def _survives(
    ctx: ServerContext, session: Session, outcome: str, error: Incoming | None
) -> None:
    if outcome in ("error", "handled") and not session.current.closed.is_set():
        await _alive(ctx, session, f"after an oversized message ({outcome})")
    elif error is not None and error.get("recoverable") is False:
        pass  # the session was closed with a non-recoverable error (§11 allows it)
    else:
        try:
            await session.resume()
        except WireError as exc:
            ctx.fail(f"the connection closed ({outcome}) and the session cannot be resumed: {exc}")
        await _alive(ctx, session, "after resuming")
    fresh = await ctx.session()
    await _alive(ctx, fresh, "in a new session")


def _huge_context(seq: int, size: int) -> str:
    return compact({"v": 1, "seq": seq, "type": "context", "context": "x" * size})


@check(
    "§11",
    "SHOULD",
    "a 2 MiB control message is answered (error or close), not ignored",
    id="limits-large-frame-answered",
)
async def check_large_answered(ctx: ServerContext) -> None:
    session = await ctx.session()
    outcome, error = await _oversized(ctx, session, _huge_context(session.next_seq, 2 << 20))
    ctx.expect(outcome not in ("silent", "dropped"), f"a 2 MiB message: {outcome}")
    if outcome == "error":
        assert error is not None
        ctx.expect(
            error.get("recoverable") is True or session.current.closed.is_set(),
            "a non-recoverable error must close the session",
        )


@check("§9.1", "MUST", "huge frames never crash the server", id="limits-huge-frames-survived")
async def check_huge_survived(ctx: ServerContext) -> None:
    session = await ctx.session()
    for size in (2 << 20, 6 << 20):
        outcome, error = await _oversized(ctx, session, _huge_context(session.next_seq, size))
        ctx.expect(outcome != "silent", f"a {size >> 20} MiB message was silently ignored")
        await _survives(ctx, session, outcome, error)


@check("§9.1", "MUST", "deep nesting never crashes the server", id="limits-deep-nesting-survived")
async def check_deep_nesting(ctx: ServerContext) -> None:
    session = await ctx.session()
    depth = 100_000
    text = (
        f'{{"v":1,"seq":{session.next_seq},"type":"context","context":'
        + "[" * depth
        + "]" * depth
        + "}"
    )
    outcome, error = await _oversized(ctx, session, text)
    ctx.expect(outcome != "silent", "a deeply nested message was silently ignored")
    await _survives(ctx, session, outcome, error)


# ======================================================================================
# Running
# ======================================================================================


async def run_checks(
    options: ServerSuiteOptions,
    *,
    select: Iterable[str] = (),
    timeout: float = 20.0,
    on_result: Callable[[Result], None] | None = None,
) -> list[Result]:
    """Run the selected checks (all when ``select`` is empty) against the server."""
    run = _Run(options)

    async def make() -> ServerContext:
        return ServerContext(run)

    async def close(ctx: ServerContext) -> None:
        await ctx.aclose()

    results: list[Result] = []
    for item in SUITE.select(select):
        budget = timeout
        if item.id in _LONG and options.heartbeat_timeout is not None:
            budget = max(timeout, options.heartbeat_timeout * 1.5 + 20)
        results += await SUITE.run(make, close, checks=[item], timeout=budget, on_result=on_result)
    return results


async def _reachable(url: str) -> str:
    """ "" when a WebSocket to ``url`` opens, else why not."""
    log = FrameLog()
    try:
        conn = await Connection.open(url, label=0, log=log)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    await conn.close()
    return ""


def run_server_suite(
    url: str,
    *,
    auth: str | None = None,
    auth_other: str | None = None,
    select: Sequence[str] = (),
    json_path: Path | None = None,
    junit_path: Path | None = None,
    timeout: float = 20.0,
    heartbeat_timeout: float | None = None,
) -> int:
    """Run the server suite against ``url``, print one line per check and the summary,
    write the reports asked for; 0 when no MUST failed, 1 otherwise, 2 when the server
    cannot be reached at all."""
    from rich.console import Console

    console = Console(highlight=False, soft_wrap=True)
    options = ServerSuiteOptions(url, auth, auth_other, heartbeat_timeout)

    async def main() -> list[Result] | None:
        problem = await _reachable(url)
        if problem:
            console.print(f"vrt: cannot reach {url}: {problem}", style="red", markup=False)
            return None
        return await run_checks(
            options, select=select, timeout=timeout, on_result=lambda r: print_result(console, r)
        )

    results = asyncio.run(main())
    if results is None:
        return 2
    console.print(summary_line(results), markup=False, style="bold")
    if json_path is not None:
        write_json(results, json_path, "server", url)
    if junit_path is not None:
        write_junit(results, junit_path, "server")
    return 1 if must_failed(results) else 0


def print_result(console: Any, result: Result, frames: int = 30) -> None:
    """One line per check (✔ passed, ✘ failed, - skipped), the detail indented."""
    from rich.text import Text

    mark, style = {"pass": ("✔", "green"), "fail": ("✘", "red"), "skip": ("-", "yellow")}[
        result.outcome
    ]
    line = Text()
    line.append(f"{mark} ", style=style)
    line.append(f"{result.check_id}  ", style="bold")
    line.append(f"{result.section} {result.level}  {result.title}")
    console.print(line)
    if result.detail:
        for text in result.detail.splitlines():
            console.print(Text(f"    {text}", style=style if result.outcome == "fail" else "dim"))
    if result.outcome == "fail" and result.frames:
        console.print(Text("    frames:", style="dim"))
        shown = result.frames[-frames:]
        if len(result.frames) > frames:
            console.print(Text(f"      ... {len(result.frames) - frames} earlier", style="dim"))
        for text in shown:
            console.print(Text(f"      {text}", style="dim"))
