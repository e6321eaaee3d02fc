"""The client suite: a scriptable fake server judges a client under test on the wire.

``vrt conformance client -- COMMAND...`` runs every check with a fresh test server on a
free port of 127.0.0.1 and a fresh client process started with the server's URL in
``VRT_URL``. The server is not :mod:`vrt.server`: each check scripts its side of the
conversation frame by frame, so it can misbehave on purpose (delay ``ready``, drop the
connection at a chosen point, resend messages, interrupt, call tools of closed epochs,
send audio with and without ``audio.start``, send garbage).

What the client must do so that its behaviour is observable (declare the tools
``conformance.record``, ``conformance.slow`` and ``conformance.fail``, log each tool
execution to ``VRT_CONFORMANCE_LOG``, send the lines of ``VRT_SAY``, ...) is the
contract in conformance/README.md, section "Client suite".
:mod:`vrt.conformance.reference_client` implements it with the Python SDK.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import shutil
import signal
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final

import websockets
from websockets.asyncio.server import Server, ServerConnection, serve

from ..protocol.codec import Invalid, decode_client
from ..protocol.frames import FrameKind, build_frame
from .framework import (
    CheckFailed,
    Result,
    Skipped,
    Suite,
    must_failed,
    summary_line,
    write_json,
    write_junit,
)

__all__ = [
    "TOOL_FAIL",
    "TOOL_RECORD",
    "TOOL_SLOW",
    "ClientHarness",
    "ClientSuiteOptions",
    "Connection",
    "run_client_checks",
    "run_client_suite",
    "suite",
]

TOOL_RECORD: Final = "conformance.record"
TOOL_SLOW: Final = "conformance.slow"
TOOL_FAIL: Final = "conformance.fail"
CONTRACT_TOOLS: Final = (TOOL_RECORD, TOOL_SLOW, TOOL_FAIL)

#: Client message types by class (§4.1, Appendix A).
CLIENT_SEQUENCED: Final = frozenset({"text", "interrupt", "playback", "tool.result", "context"})
CLIENT_TRANSIENT: Final = frozenset({"hello", "ack", "ping"})
#: Members that are integers in client messages (§2.2: no fraction, no exponent).
INTEGER_MEMBERS: Final = ("v", "seq", "epoch", "upTo", "playedMs", "resumeFrom")

PCM16: Final[dict[str, Any]] = {"encoding": "pcm16", "sampleRate": 24000}
#: pcm16 at 24000 Hz, mono: bytes per millisecond of output audio.
BYTES_PER_MS: Final = 48
#: How long a check waits for something a client does promptly.
PROMPT: Final = 3.0

suite: Suite[ClientHarness] = Suite("client")


@dataclass(frozen=True)
class ClientSuiteOptions:
    """How to start the client under test and how long to wait for it."""

    command: tuple[str, ...]
    #: How long to wait for a ping during silence (§4.4) before skipping.
    ping_wait: float = 3.0
    #: How long a client may take to open its first connection.
    connect_timeout: float = 10.0
    #: Extra environment for every client process.
    env: Mapping[str, str] = field(default_factory=dict)


# --- the wire as the suite saw it ---------------------------------------------------


@dataclass
class WireFrame:
    """One frame on one connection, in either direction."""

    t: float
    conn: int
    from_client: bool
    data: str | bytes
    message: dict[str, Any] | None

    @property
    def type(self) -> str | None:
        kind = self.message.get("type") if self.message is not None else None
        return kind if isinstance(kind, str) else None

    @property
    def seq(self) -> int | None:
        seq = self.message.get("seq") if self.message is not None else None
        return seq if type(seq) is int else None

    @property
    def sequenced(self) -> bool:
        """A client message of a sequenced type (§4.1)."""
        return self.type in CLIENT_SEQUENCED

    def describe(self) -> str:
        arrow = "C→S" if self.from_client else "S→C"
        if isinstance(self.data, bytes):
            body = _describe_binary(self.data)
        else:
            body = self.data if len(self.data) <= 400 else self.data[:400] + "…"
        return f"{self.t:7.3f} #{self.conn} {arrow} {body}"


def _describe_binary(data: bytes) -> str:
    if len(data) < 5:
        return f"binary {data.hex()} ({len(data)} bytes)"
    return (
        f"binary kind={data[0]} seq={int.from_bytes(data[1:5], 'big')} "
        f"payload={len(data) - 5} bytes"
    )


def _parse(data: str | bytes) -> dict[str, Any] | None:
    if isinstance(data, bytes):
        return None
    try:
        value = json.loads(data)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _text(message: Mapping[str, Any]) -> str:
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False)


@dataclass
class ServerSession:
    """The fake server's side of one session: its stream and what it saw of the client's."""

    id: str
    capabilities: list[str]
    #: Every sequenced message the suite sent, as (seq, text); never discarded.
    sent: list[tuple[int, str]] = field(default_factory=list)
    #: (time, seq) of each sequenced send, to judge acks against what was sent by then.
    sent_at: list[tuple[float, int]] = field(default_factory=list)
    #: The highest client seq received in this session (the server's lastSeq, §4.2).
    client_last: int = 0
    audio_seq: int = 0

    @property
    def last_seq(self) -> int:
        return self.sent[-1][0] if self.sent else 0


class Connection:
    """One WebSocket from the client under test, scripted by a check."""

    def __init__(self, harness: ClientHarness, number: int, ws: ServerConnection) -> None:
        self.h = harness
        self.number = number
        self.ws = ws
        self.session: ServerSession | None = None
        self.inbox: asyncio.Queue[WireFrame | None] = asyncio.Queue()
        self.closed = asyncio.Event()
        self.auto_ack = harness.auto_ack
        self.auto_pong = harness.auto_pong
        #: Who closed the connection and with which code, once closed.
        self.close_note = ""

    # -- receiving --

    async def next(self, timeout: float = PROMPT) -> WireFrame | None:
        """The next frame from the client; None when the connection closed or on timeout."""
        if self.inbox.empty() and self.closed.is_set():
            return None
        try:
            return await asyncio.wait_for(self.inbox.get(), timeout)
        except TimeoutError:
            return None

    async def _received(self, frame: WireFrame) -> None:
        kind = frame.type
        if kind == "ping" and self.auto_pong:
            await self.send({"v": 1, "seq": 0, "type": "pong"})
        session = self.session
        if session is not None and frame.sequenced and frame.seq is not None:
            session.client_last = max(session.client_last, frame.seq)
            if self.auto_ack:
                await self.send({"v": 1, "seq": 0, "type": "ack", "upTo": session.client_last})
        self.inbox.put_nowait(frame)

    # -- sending --

    async def send(self, message: Mapping[str, Any]) -> None:
        await self.send_raw(_text(message))

    async def send_raw(self, data: str | bytes, *, record: bool = True) -> None:
        if record:
            self.h.record(self, False, data)
        with contextlib.suppress(websockets.ConnectionClosed):
            await self.ws.send(data)

    async def send_seq(self, type: str, **members: Any) -> int:
        """A sequenced server message with the session's next seq; kept for resends."""
        session = self.session
        if session is None:
            raise RuntimeError("send_seq before ready")
        seq = session.last_seq + 1
        text = _text({"v": 1, "seq": seq, "type": type, **members})
        session.sent.append((seq, text))
        session.sent_at.append((self.h.now(), seq))
        await self.send_raw(text)
        return seq

    async def tool_call(
        self,
        name: str,
        arguments: Any,
        *,
        epoch: int = 1,
        call_id: str | None = None,
        turn_id: str | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> str:
        call_id = call_id or self.h.new_id("call")
        await self.send_seq(
            "tool.call",
            callId=call_id,
            name=name,
            arguments=arguments,
            turnId=turn_id or f"turn-{epoch}",
            epoch=epoch,
            **(extra or {}),
        )
        return call_id

    async def audio_start(self, item_id: str, epoch: int) -> None:
        await self.send(
            {
                "v": 1,
                "seq": 0,
                "type": "audio.start",
                "itemId": item_id,
                "turnId": f"turn-{epoch}",
                "epoch": epoch,
            }
        )

    async def audio(self, ms: int, *, frame_ms: int = 100) -> None:
        """``ms`` of output audio (pcm16 24 kHz silence) in frames of ``frame_ms``; the
        transcript shows one line for the burst."""
        session = self.session
        first = session.audio_seq if session is not None else 0
        count = 0
        for start in range(0, ms, frame_ms):
            length = min(frame_ms, ms - start)
            seq = first + count
            await self.send_raw(
                build_frame(FrameKind.OUTPUT, seq, bytes(length * BYTES_PER_MS)), record=False
            )
            count += 1
        if session is not None:
            session.audio_seq = first + count
        self.h.note(
            self, f"S→C {count} output audio frames, seq {first}..{first + count - 1}, {ms} ms"
        )

    async def drop(self) -> None:
        """Cut the connection without a closing handshake (a lost network)."""
        await asyncio.sleep(0.02)  # let frames already written leave the socket
        self.h.note(self, "suite drops the connection (no close frame)")
        self.ws.transport.abort()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.closed.wait(), 2.0)

    async def close(self, code: int = 1000, reason: str = "") -> None:
        self.h.note(self, f"suite closes the connection with {code} {reason!r}")
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.ws.close(code, reason), 2.0)


# --- the harness: one test server and one client process per check ------------------


class ClientHarness:
    """The context of one check: a test server, the client process and what was seen."""

    def __init__(self, options: ClientSuiteOptions) -> None:
        self.options = options
        self.wire: list[WireFrame] = []
        self.lines: list[str] = []
        self.connections: list[Connection] = []
        self.sessions: dict[str, ServerSession] = {}
        self.session: ServerSession | None = None
        self.auto_ack = True
        self.auto_pong = True
        self.url = ""
        self.process: asyncio.subprocess.Process | None = None
        self._server: Server | None = None
        self._accepted: asyncio.Queue[Connection] = asyncio.Queue()
        self._tmp = Path(tempfile.mkdtemp(prefix="vrt-client-suite-"))
        self.log_path = self._tmp / "tools.jsonl"
        self._output_path = self._tmp / "client-output.txt"
        self._output: IO[bytes] | None = None
        self._t0 = asyncio.get_running_loop().time()
        self._ids = 0
        self.hello_env: dict[str, str] = {}

    # -- time, ids, transcript --

    def now(self) -> float:
        return asyncio.get_running_loop().time() - self._t0

    def new_id(self, prefix: str) -> str:
        self._ids += 1
        return f"{prefix}-{self._ids}-{uuid.uuid4().hex[:6]}"

    def record(self, conn: Connection, from_client: bool, data: str | bytes) -> WireFrame:
        frame = WireFrame(self.now(), conn.number, from_client, data, _parse(data))
        self.wire.append(frame)
        self.lines.append(frame.describe())
        return frame

    def note(self, conn: Connection | None, text: str) -> None:
        where = f"#{conn.number}" if conn is not None else "  "
        self.lines.append(f"{self.now():7.3f} {where} -- {text}")

    def frames(self) -> list[str]:
        """The evidence: the transcript, the client's tool log and its recent output."""
        lines = list(self.lines)
        if len(lines) > 240:
            lines = [f"... {len(lines) - 240} earlier lines", *lines[-240:]]
        log = self._log_lines()
        if log:
            lines.append("tool log (VRT_CONFORMANCE_LOG):")
            lines.extend(f"  {line}" for line in log[-60:])
        output = self.client_output()
        if output:
            lines.append("client output (last lines):")
            lines.extend(f"  {line}" for line in output[-20:])
        return lines

    def fail(self, message: str) -> CheckFailed:
        return CheckFailed(message, self.frames())

    def client_output(self) -> list[str]:
        if self._output is not None:
            with contextlib.suppress(ValueError):
                self._output.flush()
        try:
            text = self._output_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return []
        return text.splitlines()

    def exit_note(self) -> str:
        process = self.process
        if process is None or process.returncode is None:
            return ""
        return f" (the client process exited with code {process.returncode})"

    # -- starting --

    async def start(
        self,
        *,
        say: Sequence[str] = (),
        capabilities: Sequence[str] = (),
        auth: str | None = None,
        ping_interval: float | None = None,
    ) -> None:
        """Start the test server and the client under test."""
        self._server = await serve(
            self._handler,
            "127.0.0.1",
            0,
            ping_interval=None,
            compression=None,
            max_size=None,
        )
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"ws://127.0.0.1:{port}"
        env = dict(os.environ)
        for name in ("VRT_SAY", "VRT_CAPABILITIES", "VRT_AUTH", "VRT_PING_INTERVAL"):
            env.pop(name, None)
        env.update(self.options.env)
        env["VRT_URL"] = self.url
        env["VRT_CONFORMANCE_LOG"] = str(self.log_path)
        if say:
            env["VRT_SAY"] = "\n".join(say)
        if capabilities:
            env["VRT_CAPABILITIES"] = ",".join(capabilities)
        if auth is not None:
            env["VRT_AUTH"] = auth
        if ping_interval is not None:
            env["VRT_PING_INTERVAL"] = f"{ping_interval:g}"
        self.hello_env = {k: v for k, v in env.items() if k.startswith("VRT_")}
        self.note(
            None,
            "client started with "
            + " ".join(f"{k}={v!r}" for k, v in sorted(self.hello_env.items())),
        )
        self._output = self._output_path.open("wb")
        self.process = await asyncio.create_subprocess_exec(
            *self.options.command,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=self._output,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )

    async def _handler(self, ws: ServerConnection) -> None:
        conn = Connection(self, len(self.connections) + 1, ws)
        self.connections.append(conn)
        self.note(conn, "client connected")
        self._accepted.put_nowait(conn)
        try:
            async for data in ws:
                await conn._received(self.record(conn, True, data))
        except websockets.ConnectionClosed:
            pass
        finally:
            protocol = ws.protocol
            if protocol.close_rcvd is not None and protocol.close_rcvd_then_sent is not False:
                conn.close_note = f"client closed it with {protocol.close_rcvd.code}"
            elif protocol.close_sent is not None:
                conn.close_note = f"suite closed it with {protocol.close_sent.code}"
            else:
                conn.close_note = "lost without a close frame"
            self.note(conn, f"connection closed ({conn.close_note})")
            conn.closed.set()
            conn.inbox.put_nowait(None)

    async def accept(self, timeout: float | None = None) -> Connection:
        """The client's next connection; fails the check if none comes."""
        first = not self.connections
        wait = timeout if timeout is not None else (self.options.connect_timeout if first else 6.0)
        conn = await self.maybe_accept(wait)
        if conn is None:
            what = "open a connection" if first else "connect again"
            raise self.fail(f"the client did not {what} within {wait:g} s{self.exit_note()}")
        return conn

    async def maybe_accept(self, timeout: float) -> Connection | None:
        try:
            return await asyncio.wait_for(self._accepted.get(), timeout)
        except TimeoutError:
            return None

    async def first_frame(self, conn: Connection) -> WireFrame:
        frame = await conn.next(PROMPT)
        if frame is None:
            raise self.fail(
                f"connection #{conn.number}: the client sent nothing within {PROMPT:g} s"
                f"{self.exit_note()}"
            )
        return frame

    def hello_of(self, conn: Connection, frame: WireFrame) -> dict[str, Any]:
        if frame.message is None or frame.type != "hello":
            raise self.fail(
                f"connection #{conn.number}: the first frame is not hello: {frame.describe()}"
            )
        return frame.message

    async def handshake(
        self,
        conn: Connection,
        *,
        first: WireFrame | None = None,
        ready_delay: float = 0.0,
        resumed_from: int | None = None,
        capabilities: Sequence[str] = (),
        ready_extra: Mapping[str, Any] | None = None,
        resend: bool = True,
    ) -> dict[str, Any]:
        """Read the hello and answer ready: a new session, or a resume of one the suite
        opened (then resending its messages after ``resumeFrom``, §5.4). Returns the hello."""
        frame = first if first is not None else await self.first_frame(conn)
        hello = self.hello_of(conn, frame)
        if ready_delay:
            await asyncio.sleep(ready_delay)
        session_id = hello.get("sessionId")
        resume_from = 0
        if session_id is not None:
            session = self.sessions.get(session_id) if isinstance(session_id, str) else None
            if session is None:
                raise self.fail(f"the client resumed session {session_id!r}, which does not exist")
            raw = hello.get("resumeFrom", 0)
            resume_from = raw if type(raw) is int else 0
        else:
            session = ServerSession(str(uuid.uuid4()), list(capabilities))
            self.sessions[session.id] = session
        self.session = session
        ready: dict[str, Any] = {
            "v": 1,
            "seq": 0,
            "type": "ready",
            "sessionId": session.id,
            "input": PCM16,
            "output": PCM16,
        }
        if session_id is not None:
            ready["resumedFrom"] = session.client_last if resumed_from is None else resumed_from
        if session.capabilities:
            ready["capabilities"] = session.capabilities
        ready.update(ready_extra or {})
        await conn.send(ready)
        conn.session = session
        if session_id is not None and resend:
            for seq, text in session.sent:
                if seq > resume_from:
                    await conn.send_raw(text)
        return hello

    async def open(self, **start: Any) -> Connection:
        """Start the client and open a new session with it."""
        await self.start(**start)
        conn = await self.accept()
        await self.handshake(conn)
        return conn

    async def reconnect(self, **handshake: Any) -> tuple[Connection, dict[str, Any]]:
        """Accept the client's next connection and answer its (resuming) hello."""
        conn = await self.accept()
        hello = await self.handshake(conn, **handshake)
        return conn, hello

    # -- observing --

    async def until(self, condition: Callable[[], object], timeout: float = PROMPT) -> bool:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not condition():
            if loop.time() >= deadline:
                return False
            await asyncio.sleep(0.02)
        return True

    def from_client(
        self, *, conn: Connection | None = None, types: Iterable[str] | None = None
    ) -> list[WireFrame]:
        wanted = set(types) if types is not None else None
        return [
            f
            for f in self.wire
            if f.from_client
            and (conn is None or f.conn == conn.number)
            and (wanted is None or f.type in wanted)
        ]

    def _session_of(self, frame: WireFrame) -> str:
        conn = self.connections[frame.conn - 1]
        return conn.session.id if conn.session is not None else f"#{frame.conn}"

    def results(self, call_id: str | None = None) -> list[dict[str, Any]]:
        """Distinct tool.result messages (a resend of the same seq counts once)."""
        seen: set[tuple[str, int | None]] = set()
        out: list[dict[str, Any]] = []
        for frame in self.from_client(types=("tool.result",)):
            message = frame.message
            assert message is not None
            if call_id is not None and message.get("callId") != call_id:
                continue
            key = (self._session_of(frame), frame.seq)
            if key in seen:
                continue
            seen.add(key)
            out.append(message)
        return out

    async def result(self, call_id: str, timeout: float = PROMPT) -> dict[str, Any] | None:
        await self.until(lambda: self.results(call_id), timeout)
        found = self.results(call_id)
        return found[0] if found else None

    async def require_result(self, call_id: str, timeout: float = PROMPT) -> dict[str, Any]:
        result = await self.result(call_id, timeout)
        if result is None:
            raise self.fail(
                f"no tool.result for call {call_id} within {timeout:g} s{self.exit_note()}"
            )
        return result

    def _log_lines(self) -> list[str]:
        try:
            return self.log_path.read_text(encoding="utf-8").splitlines()
        except OSError:
            return []

    def log(self) -> list[dict[str, Any]]:
        entries = []
        for line in self._log_lines():
            with contextlib.suppress(ValueError):
                value = json.loads(line)
                if isinstance(value, dict):
                    entries.append(value)
        return entries

    def started(self, call_id: str) -> int:
        """How many times the tool of ``call_id`` started running (tool log)."""
        return sum(
            1
            for e in self.log()
            if e.get("callId") == call_id and e.get("event", "started") == "started"
        )

    def finished(self, call_id: str) -> int:
        return sum(
            1 for e in self.log() if e.get("callId") == call_id and e.get("event") == "finished"
        )

    def playbacks(self, item_id: str | None = None) -> list[dict[str, Any]]:
        out = []
        seen: set[tuple[str, int | None]] = set()
        for frame in self.from_client(types=("playback",)):
            message = frame.message
            assert message is not None
            key = (self._session_of(frame), frame.seq)
            if key in seen or (item_id is not None and message.get("itemId") != item_id):
                continue
            seen.add(key)
            out.append(message)
        return out

    def say_lines(self, tag: str, count: int) -> list[str]:
        return [f"conformance say {i} {tag}" for i in range(1, count + 1)]

    # -- stopping --

    async def close(self) -> None:
        for conn in self.connections:
            if not conn.closed.is_set():
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(conn.ws.close(1000, "check over"), 1.0)
        process = self.process
        if process is not None:
            try:
                await asyncio.wait_for(process.wait(), 0.5)
            except TimeoutError:
                _signal(process, signal.SIGTERM)
                try:
                    await asyncio.wait_for(process.wait(), 2.0)
                except TimeoutError:
                    _signal(process, signal.SIGKILL)
                    await process.wait()
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)
        if self._output is not None:
            self._output.close()
        shutil.rmtree(self._tmp, ignore_errors=True)


def _signal(process: asyncio.subprocess.Process, sig: signal.Signals) -> None:
    """Signal the client's process group (it was started in its own session)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if hasattr(os, "killpg"):
            os.killpg(process.pid, sig)
        else:  # pragma: no cover - Windows
            process.send_signal(sig)


# --- small judgements shared by checks ------------------------------------------------


def _failure_code(result: Mapping[str, Any]) -> str | None:
    if result.get("ok") is False:
        code = result.get("code")
        return code if isinstance(code, str) else "(no code)"
    return None


def _describe_result(result: Mapping[str, Any]) -> str:
    if result.get("ok") is True:
        return f"ok, output {json.dumps(result.get('output'))}"
    return f"ok: false, code {result.get('code')}"


def _require_interrupted(h: ClientHarness, call_id: str, result: Mapping[str, Any]) -> None:
    if _failure_code(result) != "INTERRUPTED":
        raise h.fail(
            f"call {call_id} of a closed epoch was answered {_describe_result(result)}, "
            "not INTERRUPTED"
        )


def _require_never_run(h: ClientHarness, call_id: str, why: str) -> None:
    if h.started(call_id):
        raise h.fail(f"call {call_id} ({why}) was run: the tool log shows it started")


def _require_one_result(h: ClientHarness, call_id: str) -> dict[str, Any]:
    results = h.results(call_id)
    if len(results) != 1:
        shown = "; ".join(_describe_result(r) for r in results) or "none"
        raise h.fail(
            f"call {call_id} got {len(results)} tool.result messages "
            f"(distinct seqs), not exactly one: {shown}"
        )
    return results[0]


def _old_texts_in(frames: Iterable[WireFrame], old: Iterable[str]) -> list[WireFrame]:
    old_set = set(old)
    return [
        f for f in frames if f.type == "text" and f.message and f.message.get("text") in old_set
    ]


# === checks ============================================================================
# Each check names its section and level. Sections are the numbers of
# vrt-protocol-v1.3; the README lists every check.

# --- §5.2 / §5.1: hello, ready ---------------------------------------------------------


@suite.check("5.2", "MUST", "Every connection begins with hello (v 1, seq 0)")
async def check_hello_first(h: ClientHarness) -> None:
    await h.start()
    for attempt in (1, 2):
        conn = await h.accept()
        frame = await h.first_frame(conn)
        if isinstance(frame.data, bytes):
            raise h.fail(f"connection #{conn.number} began with a binary frame")
        message = frame.message
        if message is None or message.get("type") != "hello":
            raise h.fail(f"connection #{conn.number} began with {frame.describe()}, not hello")
        if type(message.get("v")) is not int or message["v"] != 1:
            raise h.fail(f"hello has v {message.get('v')!r}, not 1 (§3.1)")
        if type(message.get("seq")) is not int or message["seq"] != 0:
            raise h.fail(f"hello has seq {message.get('seq')!r}, not 0 (hello is transient, §4.1)")
        await h.handshake(conn, first=frame)
        if attempt == 1:
            await asyncio.sleep(0.2)
            await conn.drop()  # the resuming connection must begin with hello too


@suite.check("5.2", "MUST", "hello is valid and declares unique tools (and the contract's tools)")
async def check_hello_tools(h: ClientHarness) -> None:
    await h.start()
    conn = await h.accept()
    frame = await h.first_frame(conn)
    hello = h.hello_of(conn, frame)
    assert isinstance(frame.data, str)
    decoded = decode_client(frame.data)
    if isinstance(decoded, Invalid):
        raise h.fail(f"hello is invalid: {decoded.code}: {decoded.reason}")
    tools = hello.get("tools") or []
    names = [t.get("name") for t in tools if isinstance(t, dict)]
    duplicates = sorted({str(n) for n in names if names.count(n) > 1})
    if duplicates:
        raise h.fail(f"hello.tools names a tool more than once: {duplicates} (§5.2)")
    missing = [name for name in CONTRACT_TOOLS if name not in names]
    if missing:
        raise h.fail(
            f"hello.tools lacks {missing}, which the suite's contract requires "
            "(conformance/README.md, Client suite)"
        )
    if "sessionId" in hello or "resumeFrom" in hello:
        raise h.fail("the first hello of a new client asks to resume a session")
    await h.handshake(conn, first=frame)


@suite.check("5.1", "MUST", "Nothing sequenced and no audio before ready")
async def check_nothing_before_ready(h: ClientHarness) -> None:
    say = h.say_lines(h.new_id("early"), 2)
    await h.start(say=say)
    conn = await h.accept()
    first = await h.first_frame(conn)
    h.hello_of(conn, first)
    await asyncio.sleep(0.3)  # a delayed ready: the client must wait for it
    early = [
        f
        for f in h.from_client(conn=conn)
        if f is not first and (isinstance(f.data, bytes) or f.sequenced or (f.seq or 0) != 0)
    ]
    if early:
        raise h.fail(
            f"the client sent {len(early)} sequenced or audio frame(s) before ready, "
            f"the first: {early[0].describe()}"
        )
    await h.handshake(conn, first=first)
    await h.until(lambda: len(h.from_client(conn=conn, types=("text",))) >= len(say), PROMPT)


@suite.check("2.2", "MUST", "Every control message the client sends is valid")
async def check_client_frames_valid(h: ClientHarness) -> None:
    say = h.say_lines(h.new_id("valid"), 2)
    conn = await h.open(say=say)
    calls = [
        await conn.tool_call(TOOL_RECORD, {"a": [1, 2.5, None]}),
        await conn.tool_call(TOOL_FAIL, {}),
        await conn.tool_call("conformance.absent", {}),
        await conn.tool_call(TOOL_SLOW, {"ms": "soon"}),
    ]
    await conn.audio_start("item-valid", 1)
    await conn.audio(300)
    await asyncio.sleep(0.15)
    await conn.send_seq("interrupted", epoch=1)
    await h.until(lambda: all(h.results(c) for c in calls), PROMPT)
    await asyncio.sleep(0.4)
    problems = []
    for frame in h.from_client():
        if isinstance(frame.data, bytes):
            if len(frame.data) < 5 or frame.data[0] != FrameKind.INPUT:
                problems.append(f"malformed audio frame (§8.1): {frame.describe()}")
            continue
        decoded = decode_client(frame.data)
        if isinstance(decoded, Invalid):
            problems.append(f"{decoded.code}: {decoded.reason}: {frame.describe()}")
            continue
        message = frame.message or {}
        for member in INTEGER_MEMBERS:
            value = message.get(member)
            if value is not None and type(value) is not int:
                problems.append(
                    f"{member} written as {value!r}, not an integer: {frame.describe()}"
                )
    if problems:
        raise h.fail(f"{len(problems)} invalid frame(s); first: {problems[0]}")


@suite.check("4.1", "MUST", "Transient messages have seq 0; sequenced ones count 1, 2, 3, ...")
async def check_seq_numbering(h: ClientHarness) -> None:
    say = h.say_lines(h.new_id("seq"), 3)
    conn = await h.open(say=say)
    calls = [await conn.tool_call(TOOL_RECORD, {"n": n}) for n in range(3)]
    await h.until(lambda: all(h.results(c) for c in calls), PROMPT)
    await asyncio.sleep(0.3)
    expected = 1
    sequenced = 0
    for frame in h.from_client(conn=conn):
        kind = frame.type
        if kind in CLIENT_TRANSIENT:
            if frame.seq != 0:
                raise h.fail(f"transient {kind} has seq {frame.seq}, not 0: {frame.describe()}")
        elif kind in CLIENT_SEQUENCED:
            sequenced += 1
            if frame.seq != expected:
                raise h.fail(
                    f"sequenced {kind} has seq {frame.seq}; the next seq of the "
                    f"session is {expected}: {frame.describe()}"
                )
            expected += 1
        elif kind is not None:
            raise h.fail(
                f"the client sent a message of type {kind!r}, which is not a client "
                f"type (§2.3): {frame.describe()}"
            )
    if sequenced < len(say) + len(calls):
        raise h.fail(
            f"expected at least {len(say) + len(calls)} sequenced messages (the VRT_SAY "
            f"lines and the tool results), saw {sequenced}"
        )


# --- §4.2 / §4.3 / §4.4: acks, duplicates, heartbeat ---------------------------------


@suite.check("4.2", "SHOULD", "ack of everything handled within a bounded delay (1 s)")
async def check_ack_bounded_delay(h: ClientHarness) -> None:
    conn = await h.open()
    sent_at = h.now()
    await conn.send_seq("turn.state", turnId="turn-1", epoch=1, state="thinking")
    await conn.send_seq("text", text="ack me", turnId="turn-1")
    last = await conn.send_seq("text", text="ack me too", turnId="turn-1")

    def acked() -> list[WireFrame]:
        return [
            f
            for f in h.from_client(conn=conn, types=("ack",))
            if f.message is not None and f.message.get("upTo") == last
        ]

    await h.until(acked, 2.0)
    found = acked()
    if not found:
        raise h.fail(
            f"no ack with upTo {last} (the last seq handled) within 2 s (§4.2: "
            "RECOMMENDED within 250 ms)"
        )
    delay = found[0].t - sent_at
    if delay > 1.0:
        raise h.fail(
            f"the ack with upTo {last} came {delay:.3f} s after the first "
            "unacknowledged message (bound: 1 s; RECOMMENDED 250 ms)"
        )


@suite.check("4.2", "MUST", "ack.upTo never exceeds the highest seq received")
async def check_ack_not_beyond_received(h: ClientHarness) -> None:
    conn = await h.open()
    await conn.send_seq("turn.state", turnId="turn-1", epoch=1, state="thinking")
    await conn.send_seq("text", text="one", turnId="turn-1")
    session = conn.session
    assert session is not None
    await conn.send_raw(session.sent[0][1])  # a duplicate of seq 1
    call = await conn.tool_call(TOOL_RECORD, {"n": 1})
    await h.require_result(call)
    await asyncio.sleep(0.5)
    acks = h.from_client(types=("ack",))
    if not acks:
        raise Skipped("the client sent no ack at all (judged by ack-bounded-delay)")
    for frame in acks:
        up_to = frame.message.get("upTo") if frame.message else None
        highest = max((seq for t, seq in session.sent_at if t <= frame.t), default=0)
        if type(up_to) is not int or up_to > highest:
            raise h.fail(
                f"ack upTo {up_to!r} when the highest seq sent was {highest}: {frame.describe()}"
            )


@suite.check("4.3", "SHOULD", "A duplicate is acknowledged again")
async def check_duplicate_acked_again(h: ClientHarness) -> None:
    conn = await h.open()
    call = await conn.tool_call(TOOL_RECORD, {"dup": "ack"})
    await h.require_result(call)
    has_ack = await h.until(lambda: h.from_client(conn=conn, types=("ack",)), 2.0)
    if not has_ack:
        raise Skipped("the client sent no ack at all (judged by ack-bounded-delay)")
    await asyncio.sleep(0.3)
    before = len(h.from_client(conn=conn, types=("ack",)))
    session = conn.session
    assert session is not None
    await conn.send_raw(session.sent[0][1])
    again = await h.until(lambda: len(h.from_client(conn=conn, types=("ack",))) > before, 1.5)
    if not again:
        raise h.fail(
            "no ack within 1.5 s after a duplicate of seq 1 (§4.3: SHOULD acknowledge again)"
        )


@suite.check("4.4", "SHOULD", "ping after a silence (within --ping-wait; VRT_PING_INTERVAL=1)")
async def check_ping_when_silent(h: ClientHarness) -> None:
    await h.start(ping_interval=1.0)
    conn = await h.accept()
    await h.handshake(conn)
    wait = h.options.ping_wait
    if not await h.until(lambda: h.from_client(conn=conn, types=("ping",)), wait):
        raise Skipped(
            f"no ping within {wait:g} s of silence; the client may ignore "
            "VRT_PING_INTERVAL and use a longer interval (RECOMMENDED 15 s): "
            "rerun with a larger --ping-wait to judge it"
        )
    ping = h.from_client(conn=conn, types=("ping",))[0]
    if ping.seq != 0:
        raise h.fail(f"ping has seq {ping.seq}, not 0 (ping is transient, §4.1)")


@suite.check("4.4", "SHOULD", "A silent connection is treated as dead, closed and resumed")
async def check_dead_connection_resumed(h: ClientHarness) -> None:
    h.auto_pong = False
    await h.start(ping_interval=1.0)
    conn = await h.accept()
    await h.handshake(conn)
    ready_at = h.now()
    wait = h.options.ping_wait
    if not await h.until(lambda: h.from_client(conn=conn, types=("ping",)), wait):
        raise Skipped(
            f"no ping within {wait:g} s, so the client's ping interval is unknown "
            "(see ping-when-silent)"
        )
    interval = max(0.2, h.from_client(conn=conn, types=("ping",))[0].t - ready_at)
    limit = 2.5 * interval + 2.0
    closed = await h.until(conn.closed.is_set, limit)
    if not closed:
        raise h.fail(
            f"the suite answered no ping for {limit:.1f} s (2.5 ping intervals of "
            f"~{interval:.2f} s plus 2 s) and the client kept the connection"
        )
    conn2 = await h.maybe_accept(4.0)
    if conn2 is None:
        raise h.fail("the client closed the silent connection but did not resume")
    hello = await h.handshake(conn2)
    session = conn.session
    assert session is not None
    if hello.get("sessionId") != session.id:
        raise h.fail("after closing the silent connection the client did not resume its session")


# --- §5.4: resume ----------------------------------------------------------------------


@suite.check("5.4", "MUST", "Resume: hello with sessionId and resumeFrom = its lastSeq")
async def check_resume_hello(h: ClientHarness) -> None:
    conn = await h.open()
    await conn.send_seq("turn.state", turnId="turn-1", epoch=1, state="thinking")
    await conn.send_seq("text", text="before the drop", turnId="turn-1")
    last = await conn.send_seq("text", text="before the drop, again", turnId="turn-1")
    await asyncio.sleep(0.5)
    await conn.drop()
    conn2 = await h.accept()
    frame = await h.first_frame(conn2)
    hello = h.hello_of(conn2, frame)
    session = conn.session
    assert session is not None
    if hello.get("sessionId") != session.id:
        raise h.fail(
            f"after a lost connection the hello carries sessionId "
            f"{hello.get('sessionId')!r}, not the session's {session.id!r}"
        )
    resume_from = hello.get("resumeFrom", 0)
    if resume_from != last:
        raise h.fail(
            f"resumeFrom is {resume_from!r}; the client had received and handled "
            f"seq 1..{last}, so its lastSeq is {last}"
        )
    await h.handshake(conn2, first=frame)


@suite.check("5.4", "MUST", "Resume: unacknowledged messages resent in order, before new ones")
async def check_resume_resend(h: ClientHarness) -> None:
    say = h.say_lines(h.new_id("resend"), 3)
    h.auto_ack = False
    conn = await h.open(say=say)
    if not await h.until(lambda: len(h.from_client(conn=conn, types=("text",))) >= 3, PROMPT):
        raise h.fail("the client did not send the three VRT_SAY lines (suite contract)")
    originals = {f.seq: f.message for f in h.from_client(conn=conn) if f.sequenced}
    await conn.send({"v": 1, "seq": 0, "type": "ack", "upTo": 1})
    await asyncio.sleep(0.2)
    await conn.drop()
    conn2, hello = await h.reconnect(resumed_from=1)
    session = conn.session
    assert session is not None
    if hello.get("sessionId") != session.id:
        raise h.fail("the client did not resume its session after the lost connection")
    call = await conn2.tool_call(TOOL_RECORD, {"after": "resume"})
    await h.require_result(call)
    await asyncio.sleep(0.2)
    last_old = max(s for s in originals if s is not None)
    expected = 2
    for frame in h.from_client(conn=conn2):
        if not frame.sequenced or frame.seq is None or frame.seq <= 1:
            continue
        if frame.seq != expected:
            raise h.fail(
                f"after ready with resumedFrom 1 the client sent seq {frame.seq}; "
                f"expected seq {expected} next (resend from 2, in order, then new)"
            )
        if frame.seq <= last_old and frame.message != originals.get(frame.seq):
            raise h.fail(
                f"the resent seq {frame.seq} differs from the original "
                f"{json.dumps(originals.get(frame.seq))}"
            )
        if frame.seq > last_old and frame.type != "tool.result":
            raise h.fail(f"unexpected new message {frame.describe()}")
        expected += 1
    if expected <= last_old:
        raise h.fail(
            f"the client resent up to seq {expected - 1}, not every message after "
            f"resumedFrom 1 (it had sent 1..{last_old})"
        )


@suite.check("5.4", "MUST", "resumedFrom beyond the last seq sent: resume fails, no replay")
async def check_resumed_from_beyond_sent(h: ClientHarness) -> None:
    say = h.say_lines(h.new_id("beyond"), 2)
    h.auto_ack = False
    conn = await h.open(say=say)
    if not await h.until(lambda: len(h.from_client(conn=conn, types=("text",))) >= 2, PROMPT):
        raise h.fail("the client did not send the VRT_SAY lines (suite contract)")
    await conn.drop()
    conn2, _ = await h.reconnect(resumed_from=9)
    if not await h.until(conn2.closed.is_set, PROMPT):
        raise h.fail(
            "ready with resumedFrom 9, beyond the client's last seq 2: the client "
            f"kept the connection open for {PROMPT:g} s instead of closing it (§5.4)"
        )
    late = [f for f in h.from_client(conn=conn2) if f.sequenced]
    if late:
        raise h.fail(f"after a failed resume the client sent {late[0].describe()}")
    await _judge_after_resume_failed(h, conn, say)


@suite.check("5.4", "MUST", "RESUME_FAILED: no replay of old messages into a new session")
async def check_resume_failed_no_replay(h: ClientHarness) -> None:
    say = h.say_lines(h.new_id("replay"), 2)
    h.auto_ack = False
    conn = await h.open(say=say)
    if not await h.until(lambda: len(h.from_client(conn=conn, types=("text",))) >= 2, PROMPT):
        raise h.fail("the client did not send the VRT_SAY lines (suite contract)")
    await conn.drop()
    conn2 = await h.accept()
    hello = h.hello_of(conn2, await h.first_frame(conn2))
    if "sessionId" not in hello:
        raise Skipped("the client did not resume after the lost connection (see resume-hello)")
    await conn2.send(
        {
            "v": 1,
            "seq": 0,
            "type": "error",
            "code": "RESUME_FAILED",
            "message": "conformance suite: this session cannot be resumed",
            "recoverable": False,
        }
    )
    await conn2.close(4404, "resume failed")
    late = [f for f in h.from_client(conn=conn2) if f.sequenced]
    if late:
        raise h.fail(
            f"the client sent a sequenced message on a connection without ready: "
            f"{late[0].describe()}"
        )
    await _judge_after_resume_failed(h, conn, say)


async def _judge_after_resume_failed(h: ClientHarness, old: Connection, say: list[str]) -> None:
    """After a failed resume: the client may stop or open a new session, never resume the
    old one again nor replay its messages (§5.1, §5.4)."""
    conn = await h.maybe_accept(3.0)
    if conn is None:
        return  # the client stopped: allowed
    frame = await h.first_frame(conn)
    hello = h.hello_of(conn, frame)
    session = old.session
    assert session is not None
    if hello.get("sessionId") == session.id:
        raise h.fail("after RESUME_FAILED the client tried to resume the same session again")
    if "sessionId" in hello:
        raise h.fail(f"after RESUME_FAILED the client resumed session {hello['sessionId']!r}")
    await h.handshake(conn, first=frame)
    call = await conn.tool_call(TOOL_RECORD, {"new": "session"})
    await h.result(call, PROMPT)
    await asyncio.sleep(0.7)
    frames = h.from_client(conn=conn)
    replayed = _old_texts_in(frames, say)
    if replayed:
        raise h.fail(
            f"the new session carries a message of the failed one: {replayed[0].describe()}"
        )
    first_seq = next((f for f in frames if f.sequenced), None)
    if first_seq is not None and first_seq.seq != 1:
        raise h.fail(
            f"the new session's first sequenced message has seq {first_seq.seq}, not 1: "
            f"{first_seq.describe()}"
        )


# --- §5.3: authentication --------------------------------------------------------------


@suite.check("5.3", "SHOULD", "UNAUTHORIZED: the same credential is not tried again")
async def check_unauthorized_not_retried(h: ClientHarness) -> None:
    await h.start(auth=f"conformance-credential-{uuid.uuid4().hex[:8]}")
    conn = await h.accept()
    hello = h.hello_of(conn, await h.first_frame(conn))
    await conn.send(
        {
            "v": 1,
            "seq": 0,
            "type": "error",
            "code": "UNAUTHORIZED",
            "message": "conformance suite: credential refused",
            "recoverable": False,
        }
    )
    await conn.close(4401, "unauthorized")
    conn2 = await h.maybe_accept(2.5)
    if conn2 is None:
        return
    hello2 = h.hello_of(conn2, await h.first_frame(conn2))
    if hello2.get("auth") == hello.get("auth"):
        raise h.fail("after UNAUTHORIZED the client connected again with the same credential")


# --- §4.3 / §5.4 / §7.2: duplicates and drops ------------------------------------------


@suite.check("4.3", "MUST", "A resent tool.call (same seq) is handled once")
async def check_dedupe_resent(h: ClientHarness) -> None:
    conn = await h.open()
    call = await conn.tool_call(TOOL_RECORD, {"probe": "duplicate"})
    session = conn.session
    assert session is not None
    original = session.sent[-1][1]
    await conn.send_raw(original)  # while it may still run
    await h.require_result(call)
    await conn.send_raw(original)  # after it was answered
    follow = await conn.tool_call(TOOL_RECORD, {"probe": "after"})
    await h.require_result(follow)
    await asyncio.sleep(0.3)
    if h.started(call) != 1:
        raise h.fail(
            f"the tool of call {call}, sent three times with the same seq, started "
            f"{h.started(call)} times, not once"
        )
    _require_one_result(h, call)


@suite.check("4.3", "MUST", "A message resent after a resume (seq <= resumeFrom): not handled")
async def check_dedupe_after_resume(h: ClientHarness) -> None:
    conn = await h.open()
    call = await conn.tool_call(TOOL_RECORD, {"probe": "before drop"})
    await h.require_result(call)
    await asyncio.sleep(0.3)
    await conn.drop()
    conn2, _ = await h.reconnect(resend=False)
    session = conn.session
    assert session is not None
    await conn2.send_raw(session.sent[0][1])  # seq 1 again, although the client has it
    follow = await conn2.tool_call(TOOL_RECORD, {"probe": "after resume"})
    await h.require_result(follow)
    await asyncio.sleep(0.3)
    if h.started(call) != 1:
        raise h.fail(
            f"call {call} (seq 1), resent after the resume, started {h.started(call)} times"
        )
    _require_one_result(h, call)


@suite.check("7.2", "MUST", "Calls across dropped connections: each run once, one result each")
async def check_calls_survive_drops(h: ClientHarness) -> None:
    conn = await h.open()
    slow = await conn.tool_call(TOOL_SLOW, {"ms": 400})
    if not await h.until(lambda: h.started(slow), PROMPT):
        raise h.fail(f"the client did not start call {slow} (conformance.slow)")
    await conn.drop()  # while the call runs
    conn2 = await h.accept()
    first = await h.first_frame(conn2)
    await h.until(lambda: h.finished(slow), 2.0)  # its result is produced offline...
    await h.handshake(conn2, first=first)  # ... and must be resent after ready
    during = await conn2.tool_call(TOOL_RECORD, {"probe": "second connection"})
    right = await conn2.tool_call(TOOL_RECORD, {"probe": "dropped right after"})
    await conn2.drop()  # right after a tool.call
    await h.reconnect()
    calls = [slow, during, right]
    await h.until(lambda: all(h.results(c) for c in calls), 4.0)
    await asyncio.sleep(0.5)
    for call in calls:
        if h.started(call) != 1:
            raise h.fail(f"call {call} started {h.started(call)} times across the drops")
        _require_one_result(h, call)


# --- §6.2: the epoch gate ---------------------------------------------------------------


@suite.check("6.2", "MUST", "tool.call of a closed epoch: INTERRUPTED, never run")
async def check_closed_epoch_call_interrupted(h: ClientHarness) -> None:
    conn = await h.open()
    await conn.send_seq("turn.state", turnId="turn-1", epoch=1, state="thinking")
    await conn.send_seq("interrupted", epoch=1)
    at_closed = await conn.tool_call(TOOL_RECORD, {"probe": "epoch 1"}, epoch=1)
    below = await conn.tool_call(TOOL_RECORD, {"probe": "epoch 0"}, epoch=0)
    open_call = await conn.tool_call(TOOL_RECORD, {"probe": "epoch 2"}, epoch=2)
    await h.until(lambda: all(h.results(c) for c in (at_closed, below, open_call)), PROMPT)
    await asyncio.sleep(0.3)
    for call, what in ((at_closed, "epoch 1, closed"), (below, "epoch 0, below the closed one")):
        _require_never_run(h, call, what)
        result = h.results(call)
        if not result:
            raise h.fail(
                f"call {call} ({what}) got no tool.result (§7.2: calls not run are answered too)"
            )
        _require_interrupted(h, call, result[0])


@suite.check("6.2", "MUST", "Queued calls of an interrupted epoch: INTERRUPTED, never run")
async def check_queued_calls_interrupted(h: ClientHarness) -> None:
    conn = await h.open()
    running = await conn.tool_call(TOOL_SLOW, {"ms": 1500}, epoch=1)
    queued = [
        await conn.tool_call(TOOL_RECORD, {"probe": "queued"}, epoch=1),
        await conn.tool_call(TOOL_SLOW, {"ms": 50}, epoch=1),
    ]
    if not await h.until(lambda: h.started(running), PROMPT):
        raise h.fail(f"the client did not start call {running}")
    await conn.send_seq("interrupted", epoch=1)
    await h.until(lambda: all(h.results(c) for c in queued), PROMPT)
    await h.until(lambda: h.results(running) or h.finished(running), 2.0)
    await asyncio.sleep(0.3)
    for call in queued:
        _require_never_run(h, call, "queued behind a running call when its epoch closed")
        result = h.results(call)
        if not result:
            raise h.fail(f"queued call {call} got no tool.result after its epoch closed")
        _require_interrupted(h, call, result[0])


@suite.check("7.2", "MUST", "A running call whose epoch closes: one result, INTERRUPTED")
async def check_running_call_interrupted(h: ClientHarness) -> None:
    conn = await h.open()
    call = await conn.tool_call(TOOL_SLOW, {"ms": 1000}, epoch=1)
    if not await h.until(lambda: h.started(call), PROMPT):
        raise h.fail(f"the client did not start call {call}")
    await conn.send_seq("interrupted", epoch=1)
    await h.until(lambda: h.results(call), 3.0)
    await h.until(lambda: h.finished(call), 1.5)
    await asyncio.sleep(0.4)  # a later outcome must be discarded
    result = _require_one_result(h, call)
    if _failure_code(result) != "INTERRUPTED":
        raise h.fail(
            f"the running call's epoch closed, yet it was answered "
            f"{_describe_result(result)}, not INTERRUPTED"
        )


@suite.check("7.1", "MUST", "After an interrupted running call, the next call runs and is answered")
async def check_next_call_after_interrupt(h: ClientHarness) -> None:
    conn = await h.open()
    call = await conn.tool_call(TOOL_SLOW, {"ms": 600}, epoch=1)
    if not await h.until(lambda: h.started(call), PROMPT):
        raise h.fail(f"the client did not start call {call}")
    await conn.send_seq("interrupted", epoch=1)
    await h.result(call, 2.5)
    after = await conn.tool_call(TOOL_RECORD, {"probe": "next turn"}, epoch=2)
    result = await h.result(after, 3.0)
    if result is None:
        raise h.fail(
            f"call {after} (epoch 2, open) sent after the interrupted call {call} got "
            "no tool.result within 3 s: the client no longer runs calls (§7.1, §7.2: "
            "every call is answered)"
        )
    if h.started(after) != 1:
        raise h.fail(f"call {after} was answered {_describe_result(result)} without running")


@suite.check("7.2", "SHOULD", "A running call whose epoch closes is signalled to cancel")
async def check_running_call_cancelled(h: ClientHarness) -> None:
    conn = await h.open()
    call = await conn.tool_call(TOOL_SLOW, {"ms": 5000}, epoch=1)
    if not await h.until(lambda: h.started(call), PROMPT):
        raise h.fail(f"the client did not start call {call}")
    interrupted_at = h.now()
    await conn.send_seq("interrupted", epoch=1)
    if not await h.until(lambda: h.finished(call), 2.0):
        raise h.fail(
            "conformance.slow (5000 ms, cooperatively cancellable) was still running "
            f"{h.now() - interrupted_at:.1f} s after its epoch closed: no cancellation "
            "signal reached it"
        )


# --- §7: tools ---------------------------------------------------------------------------


@suite.check("7.1", "MUST", "Calls run one at a time, in the order received")
async def check_calls_one_at_a_time(h: ClientHarness) -> None:
    conn = await h.open()
    calls = [
        await conn.tool_call(TOOL_SLOW, {"ms": 300}),
        await conn.tool_call(TOOL_SLOW, {"ms": 300}),
        await conn.tool_call(TOOL_RECORD, {"probe": "third"}),
    ]
    await h.until(lambda: all(h.results(c) for c in calls), 4.0)
    await asyncio.sleep(0.2)
    events = [
        (e.get("callId"), e.get("event", "started")) for e in h.log() if e.get("callId") in calls
    ]
    for previous, call in itertools.pairwise(calls):
        if (call, "started") not in events:
            raise h.fail(f"call {call} never started")
        start = events.index((call, "started"))
        if (previous, "finished") not in events[:start]:
            raise h.fail(
                f"call {call} started before call {previous} finished (tool log): "
                "calls must run one at a time (§7.1)"
            )
    order = [
        f.message.get("callId")
        for f in h.from_client(types=("tool.result",))
        if f.message is not None and f.message.get("callId") in calls
    ]
    firsts = list(dict.fromkeys(order))
    if firsts != calls:
        raise h.fail(
            f"results arrived in the order {firsts}, not the order the calls were received {calls}"
        )


@suite.check("7.2", "MUST", "Exactly one tool.result per call, with its callId and epoch")
async def check_exactly_one_result(h: ClientHarness) -> None:
    conn = await h.open()
    calls = [
        await conn.tool_call(TOOL_RECORD, {"probe": 1}, epoch=3),
        await conn.tool_call(TOOL_FAIL, {}, epoch=3),
        await conn.tool_call("conformance.absent", {}, epoch=3),
        await conn.tool_call(TOOL_SLOW, {"ms": 100}, epoch=3),
        await conn.tool_call(TOOL_SLOW, {"ms": "soon"}, epoch=3),
        await conn.tool_call(TOOL_RECORD, {"probe": 2}, epoch=4),
    ]
    await h.until(lambda: all(h.results(c) for c in calls), 4.0)
    await asyncio.sleep(0.6)
    epochs = {c: (4 if i == len(calls) - 1 else 3) for i, c in enumerate(calls)}
    for call in calls:
        result = _require_one_result(h, call)
        if result.get("epoch") != epochs[call]:
            raise h.fail(
                f"the result of call {call} carries epoch {result.get('epoch')!r}, "
                f"not the call's epoch {epochs[call]}"
            )
        if result.get("ok") is True and "output" not in result:
            raise h.fail(f"the successful result of {call} has no output member")
        if result.get("ok") is False and ("code" not in result or "message" not in result):
            raise h.fail(f"the failed result of {call} lacks code or message")
    strangers = [r for r in h.results() if r.get("callId") not in calls]
    if strangers:
        raise h.fail(f"a tool.result for a call never made: {json.dumps(strangers[0])}")


@suite.check("7.2", "MUST", "conformance.record: ok with its arguments as output")
async def check_tool_output(h: ClientHarness) -> None:
    conn = await h.open()
    arguments = {"text": "héllo ✓", "n": 3, "nested": {"x-future": [1, {"deep": None}]}}
    call = await conn.tool_call(TOOL_RECORD, arguments, epoch=2)
    result = await h.require_result(call)
    if result.get("ok") is not True or result.get("output") != arguments:
        raise h.fail(
            f"conformance.record answered {_describe_result(result)}, not ok with "
            f"output {json.dumps(arguments, ensure_ascii=False)}"
        )
    logged = [e for e in h.log() if e.get("callId") == call and "arguments" in e]
    if not logged:
        raise h.fail("the tool log has no entry for the call (suite contract)")
    if logged[0].get("arguments") != arguments or logged[0].get("name") != TOOL_RECORD:
        raise h.fail(
            f"the tool log entry {json.dumps(logged[0])} does not name the call's tool "
            "and arguments (suite contract)"
        )


@suite.check("7.3", "MUST", "A call of a tool the client does not host: FAILED")
async def check_unknown_tool_failed(h: ClientHarness) -> None:
    conn = await h.open()
    call = await conn.tool_call("conformance.absent", {"probe": 1})
    result = await h.require_result(call)
    if _failure_code(result) != "FAILED":
        raise h.fail(
            f"a call of an undeclared tool was answered {_describe_result(result)}, not FAILED"
        )


@suite.check("7.2", "MUST", "A tool that fails: ok false with code FAILED and a message")
async def check_tool_failure_result(h: ClientHarness) -> None:
    conn = await h.open()
    call = await conn.tool_call(TOOL_FAIL, {"probe": 1})
    result = await h.require_result(call)
    if _failure_code(result) != "FAILED":
        raise h.fail(f"conformance.fail was answered {_describe_result(result)}, not FAILED")
    if "message" not in result or not isinstance(result["message"], str | None):
        raise h.fail("the failed result has no message member (a string or null)")


@suite.check("7.1", "SHOULD", "Arguments that do not match the declared parameters: INVALID")
async def check_invalid_arguments(h: ClientHarness) -> None:
    conn = await h.open()
    call = await conn.tool_call(TOOL_SLOW, {"ms": "soon"})
    result = await h.require_result(call)
    if _failure_code(result) != "INVALID":
        raise h.fail(
            f'conformance.slow with ms "soon" (the declared parameters require an '
            f"integer) was answered {_describe_result(result)}, not INVALID"
        )


@suite.check("7.4", "MUST", "tool.call.delta previews never run anything")
async def check_preview_not_run(h: ClientHarness) -> None:
    conn = await h.open()
    preview = h.new_id("preview")
    for fragment in ('{"probe":', '"preview"}'):
        await conn.send_seq(
            "tool.call.delta",
            callId=preview,
            turnId="turn-1",
            epoch=1,
            preview={"argumentsDelta": fragment, "name": TOOL_RECORD},
        )
    other = await conn.tool_call(TOOL_RECORD, {"probe": "real"})
    await h.require_result(other)
    await asyncio.sleep(0.3)
    _require_never_run(h, preview, "only previewed, never called")
    if h.results(preview):
        raise h.fail(f"the client answered the preview {preview} with a tool.result")


@suite.check("7.5", "MUST", "tool.stream (tool-stream-v1) never runs anything")
async def check_tool_stream_not_run(h: ClientHarness) -> None:
    await h.start(capabilities=["tool-stream-v1"])
    conn = await h.accept()
    frame = await h.first_frame(conn)
    hello = h.hello_of(conn, frame)
    if "tool-stream-v1" not in (hello.get("capabilities") or []):
        raise Skipped("the client does not offer tool-stream-v1 (VRT_CAPABILITIES)")
    await h.handshake(conn, first=frame, capabilities=["tool-stream-v1"])
    streamed = h.new_id("streamed")
    common = {"callId": streamed, "name": TOOL_RECORD, "turnId": "turn-1", "epoch": 1}
    await conn.send_seq("tool.stream", phase="start", **common)
    await conn.send_seq("tool.stream", phase="arguments-delta", delta='{"probe":1}', **common)
    await conn.send_seq("tool.stream", phase="arguments-complete", arguments={"probe": 1}, **common)
    other = await conn.tool_call(TOOL_RECORD, {"probe": "real"})
    await h.require_result(other)
    await asyncio.sleep(0.3)
    _require_never_run(h, streamed, "only streamed, never called")
    if h.results(streamed):
        raise h.fail(f"the client answered the streamed call {streamed}, never sent as tool.call")


# --- §8: audio and playback ----------------------------------------------------------------


@suite.check("8.3", "MUST", "Output audio without a current audio.start is discarded")
async def check_audio_without_start_discarded(h: ClientHarness) -> None:
    conn = await h.open()
    await conn.audio(500)  # before any audio.start
    await conn.audio_start("item-a", 1)
    await conn.audio(100)
    await conn.drop()
    conn2, _ = await h.reconnect()
    await conn2.audio(1000)  # a resumed connection has no current item (§8.3)
    await asyncio.sleep(0.5)
    await conn2.send_seq("interrupted", epoch=1)
    await h.until(lambda: h.playbacks("item-a"), 1.5)
    reports = h.playbacks("item-a")
    if not reports:
        raise Skipped(
            "the client sent no playback report for the item (it may not play audio; "
            "see playback-reported)"
        )
    for report in reports:
        played = report.get("playedMs")
        if not isinstance(played, int) or played > 100:
            raise h.fail(
                f"playback reports {played!r} ms of item-a, which had 100 ms after its "
                "audio.start: audio without a current audio.start was played"
            )


@suite.check("6.2", "MUST", "Output audio of a closed epoch is never played")
async def check_closed_epoch_audio_not_played(h: ClientHarness) -> None:
    conn = await h.open()
    await conn.audio_start("item-a", 1)
    await conn.audio(100)
    await asyncio.sleep(0.3)
    await conn.send_seq("interrupted", epoch=1)
    await conn.audio_start("item-b", 1)  # an item of the closed epoch
    await conn.audio(1000)
    await asyncio.sleep(0.5)
    await conn.audio_start("item-c", 2)
    await conn.audio(100)
    await asyncio.sleep(0.3)
    await conn.send_seq("interrupted", epoch=2)
    await h.until(lambda: h.playbacks("item-c"), 1.5)
    await asyncio.sleep(0.2)
    if not h.playbacks():
        raise Skipped("the client sent no playback report (it may not play audio)")
    for report in h.playbacks("item-b"):
        if report.get("playedMs") != 0:
            raise h.fail(
                f"playback reports {report.get('playedMs')!r} ms of item-b, an item of "
                "the closed epoch 1"
            )
    for report in h.playbacks("item-a"):
        played = report.get("playedMs")
        if not isinstance(played, int) or played > 100:
            raise h.fail(
                f"playback reports {played!r} ms of item-a, of which 100 ms were sent "
                "before its epoch closed"
            )


@suite.check("8.4", "MUST", "playback never reports more than was sent")
async def check_playback_not_beyond_sent(h: ClientHarness) -> None:
    conn = await h.open()
    await conn.send_seq("turn.state", turnId="turn-1", epoch=1, state="speaking")
    await conn.audio_start("item-a", 1)
    await conn.audio(200)
    await asyncio.sleep(0.7)
    await conn.send_seq("interrupted", epoch=1)
    await h.until(h.playbacks, 1.5)
    await asyncio.sleep(0.2)
    reports = h.playbacks()
    if not reports:
        raise Skipped(
            "the client sent no playback report (it may not play audio; see playback-reported)"
        )
    for report in reports:
        played = report.get("playedMs")
        if report.get("itemId") != "item-a":
            raise h.fail(f"playback of an item the suite never sent: {json.dumps(report)}")
        if not isinstance(played, int) or played > 200:
            raise h.fail(
                f"playback reports {played!r} ms of item-a, of which only 200 ms were sent"
            )


@suite.check("8.4", "SHOULD", "An interrupted item's playback is reported")
async def check_playback_reported(h: ClientHarness) -> None:
    conn = await h.open()
    await conn.audio_start("item-long", 1)
    await conn.audio(3000)
    await asyncio.sleep(0.5)
    await conn.send_seq("interrupted", epoch=1)
    if not await h.until(lambda: h.playbacks("item-long"), 1.5):
        raise h.fail("an item of 3000 ms was interrupted 0.5 s in, and no playback report came")
    played = h.playbacks("item-long")[0].get("playedMs")
    if not isinstance(played, int) or not 0 <= played < 3000:
        raise h.fail(f"playback reports {played!r} ms of an item stopped 0.5 s into 3000 ms")


# --- §9 and §2.2: robustness -----------------------------------------------------------------


@suite.check("9.1", "MUST", "Malformed frames do not crash or stall the client")
async def check_malformed_frames_survive(h: ClientHarness) -> None:
    conn = await h.open()
    garbage: list[str | bytes] = [
        "this is not JSON",
        "[1, 2, 3]",
        '"a string"',
        '{"v":2,"seq":0,"type":"text","text":"v2","turnId":null}',
        '{"seq":0,"type":"text","text":"no v","turnId":null}',
        '{"v":1,"seq":0,"type":"toString"}',
        '{"v":1,"seq":0,"type":"ping"}',
        '{"v":1,"seq":"one","type":"text","text":"x","turnId":null}',
        '{"v":1,"seq":0,"type":"tool.call","callId":"x"',
        b"\x02\x00\x00",
        b"\x07\x00\x00\x00\x00\x01\x02",
        b"\x01\x00\x00\x00\x00\x01\x02",
    ]
    for frame in garbage:
        await conn.send_raw(frame)
    call = await conn.tool_call(TOOL_RECORD, {"probe": "after garbage"})
    result = await h.result(call, PROMPT)
    if result is None:
        raise h.fail(
            f"after malformed frames a valid tool.call got no result within {PROMPT:g} s"
            f"{h.exit_note()}"
        )
    process = h.process
    if process is not None and process.returncode is not None:
        raise h.fail(f"the client process exited with code {process.returncode}")


@suite.check("9.1", "MUST", "An invalid tool.call is not acted on")
async def check_invalid_message_not_acted(h: ClientHarness) -> None:
    conn = await h.open()
    bad = h.new_id("invalid")
    invalid = _text(
        {
            "v": 1,
            "seq": 1,
            "type": "tool.call",
            "callId": bad,
            "name": TOOL_RECORD,
            "arguments": {"probe": "invalid"},
            "turnId": "turn-1",
            "epoch": -1,
        }
    )
    await conn.send_raw(invalid)
    session = conn.session
    assert session is not None
    session.sent.append((1, invalid))  # the valid call that follows is seq 2
    good = await conn.tool_call(TOOL_RECORD, {"probe": "valid"})
    await h.require_result(good)
    await asyncio.sleep(0.3)
    _require_never_run(h, bad, "invalid: epoch -1")
    if h.results(bad):
        raise h.fail(f"the client answered the invalid call {bad}: it acted on an invalid message")


@suite.check("2.2", "MUST", "Unknown members are ignored, at any depth")
async def check_unknown_members_ignored(h: ClientHarness) -> None:
    await h.start()
    conn = await h.accept()
    await h.handshake(
        conn,
        ready_extra={
            "x-conformance": {"nested": [1, {"deep": True}]},
            "output": {**PCM16, "x-future": {"a": 1}},
        },
    )
    await conn.send_seq(
        "turn.state", turnId="turn-1", epoch=1, state="acting", **{"x-future": True}
    )
    arguments = {"probe": "unknown members"}
    call = await conn.tool_call(TOOL_RECORD, arguments, extra={"x-future": {"b": [2]}})
    result = await h.require_result(call)
    if result.get("ok") is not True or result.get("output") != arguments:
        raise h.fail(f"a tool.call with an unknown member was answered {_describe_result(result)}")


@suite.check("9.2", "MUST", "An error with an unknown code is handled by its recoverable flag")
async def check_unknown_error_code(h: ClientHarness) -> None:
    conn = await h.open()
    await conn.send_seq(
        "error",
        code="CONFORMANCE_FUTURE_CODE",
        message="a code this client cannot know",
        recoverable=True,
    )
    call = await conn.tool_call(TOOL_RECORD, {"probe": "after error"})
    result = await h.result(call, PROMPT)
    if result is None:
        raise h.fail(
            "after a recoverable error with an unknown code the client answered no "
            f"tool.call{h.exit_note()}"
        )
    if conn.closed.is_set():
        raise h.fail(
            f"the client gave up the connection after a recoverable error ({conn.close_note})"
        )


# --- running ------------------------------------------------------------------------------


async def run_client_checks(
    command: Sequence[str],
    *,
    select: Iterable[str] = (),
    timeout: float = 20.0,
    ping_wait: float = 3.0,
    jobs: int = 1,
    env: Mapping[str, str] | None = None,
    on_result: Callable[[Result], None] | None = None,
) -> list[Result]:
    """Run the selected checks against ``command``; ``jobs`` checks at a time (each has
    its own server and client process)."""
    options = ClientSuiteOptions(tuple(command), ping_wait=ping_wait, env=dict(env or {}))
    checks = suite.select(select)
    limit = asyncio.Semaphore(max(1, jobs))

    async def make() -> ClientHarness:
        return ClientHarness(options)

    async def close(harness: ClientHarness) -> None:
        await harness.close()

    async def one(check: Any) -> Result:
        async with limit:
            results = await suite.run(
                make, close, checks=[check], timeout=timeout, on_result=on_result
            )
            return results[0]

    return list(await asyncio.gather(*(one(c) for c in checks)))


def _print_result(result: Result) -> None:
    mark = {"pass": "PASS", "fail": "FAIL", "skip": "SKIP"}[result.outcome]
    print(
        f"{mark} [{result.level}] §{result.section} {result.check_id}: {result.title}"
        f" ({result.seconds:.1f} s)"
    )
    if result.outcome != "pass" and result.detail:
        for line in result.detail.splitlines():
            print(f"     {line}")
    if result.outcome == "fail" and result.frames:
        for line in result.frames[-40:]:
            print(f"       | {line}")
    sys.stdout.flush()


def run_client_suite(
    command: list[str],
    *,
    select: Sequence[str] = (),
    json_path: Path | None = None,
    junit_path: Path | None = None,
    timeout: float = 20.0,
    ping_wait: float = 3.0,
    jobs: int = 1,
) -> int:
    """Run the client suite against ``command``; print each verdict and the summary line.
    Returns the exit status: 1 if any MUST check failed, else 0 (2 if the command cannot run)."""
    if not command or (shutil.which(command[0]) is None and not Path(command[0]).exists()):
        print(f"vrt: cannot run the client command {command!r}", file=sys.stderr)
        return 2
    results = asyncio.run(
        run_client_checks(
            command,
            select=select,
            timeout=timeout,
            ping_wait=ping_wait,
            jobs=jobs,
            on_result=_print_result,
        )
    )
    print(summary_line(results))
    target = " ".join(command)
    if json_path is not None:
        write_json(results, json_path, "client", target)
    if junit_path is not None:
        write_junit(results, junit_path, "client")
    return 1 if must_failed(results) else 0
