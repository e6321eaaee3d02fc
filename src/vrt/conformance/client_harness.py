"""What every client check works with: a scriptable fake server on a free port, the
client under test in its own process, what was seen of both, and the judgements many
checks share, so that a check states only what it judges.

The fake server is not :mod:`vrt.server`: each check scripts its side of the
conversation frame by frame, so it can misbehave on purpose (delay ``ready``, drop the
connection at a chosen point, resend messages, interrupt, call tools of closed epochs,
send audio with and without ``audio.start``, send garbage). What the client must do so
that its behaviour is observable is the contract in conformance/README.md, section
"Client suite".
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import tempfile
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final

import websockets
from websockets.asyncio.server import Server, ServerConnection, serve

from .fake_server import (
    BYTES_PER_MS,
    PCM16,
    PROMPT,
    Connection,
    ServerSession,
    WireFrame,
    text_of,
)
from .framework import CheckFailed, Level, NotApplicable, Skipped, Suite, title_of

__all__ = [
    "BYTES_PER_MS",
    "CONTRACT_TOOLS",
    "NEEDS",
    "PCM16",
    "PROMPT",
    "SUITE",
    "TOOL_FAIL",
    "TOOL_RECORD",
    "TOOL_SLOW",
    "ClientHarness",
    "ClientSuiteOptions",
    "Connection",
    "WireFrame",
    "check",
    "describe_result",
    "failure_code",
    "text_of",
]

TOOL_RECORD: Final = "conformance.record"
TOOL_SLOW: Final = "conformance.slow"
TOOL_FAIL: Final = "conformance.fail"
CONTRACT_TOOLS: Final = (TOOL_RECORD, TOOL_SLOW, TOOL_FAIL)


NEEDS: Final = {
    "audio-output": "the client plays output audio and reports playback (contract item 5); "
    "--no-audio-output: not applicable",
    "audio-input": "the client sends input audio for a '/audio MS' line of VRT_SAY; "
    "--no-audio-input: not applicable",
    "tool-stream-v1": "the client offers tool-stream-v1 when VRT_CAPABILITIES names it; "
    "not applicable when it does not",
    "pings": "the client pings when it has sent nothing for a while (a SHOULD, §4.4); "
    "skipped when no ping comes within --ping-wait",
}


@dataclass(frozen=True)
class ClientSuiteOptions:
    """How to start the client under test, what it declares, how long to wait."""

    command: tuple[str, ...]
    #: How long to wait for a ping during silence (§4.4) before skipping.
    ping_wait: float = 3.0
    #: How long a client may take to open its first connection.
    connect_timeout: float = 10.0
    #: Extra environment for every client process.
    env: Mapping[str, str] = field(default_factory=dict)
    #: The client plays audio (False: ``--no-audio-output``).
    audio_output: bool = True
    #: The client sends audio (False: ``--no-audio-input``).
    audio_input: bool = True


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
        #: Set once the client's process has exited: every wait then ends at once.
        self.exited = asyncio.Event()
        self._server: Server | None = None
        self._accepted: asyncio.Queue[Connection] = asyncio.Queue()
        self._tmp = Path(tempfile.mkdtemp(prefix="vrt-client-suite-"))
        self.log_path = self._tmp / "tools.jsonl"
        self._output_path = self._tmp / "client-output.txt"
        self._output: IO[bytes] | None = None
        self._watcher: asyncio.Task[None] | None = None
        self._t0 = asyncio.get_running_loop().time()
        self._ids = 0

    # -- time, ids, transcript --

    def now(self) -> float:
        return asyncio.get_running_loop().time() - self._t0

    def new_id(self, prefix: str) -> str:
        self._ids += 1
        return f"{prefix}-{self._ids}-{uuid.uuid4().hex[:6]}"

    def record(self, conn: Connection, from_client: bool, data: str | bytes) -> WireFrame:
        frame = WireFrame.of(self.now(), conn.number, from_client, data)
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
        """The failure of the check, with the evidence (raise it)."""
        return CheckFailed(message + self.exit_note(), self.frames())

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
            self._handler, "127.0.0.1", 0, ping_interval=None, compression=None, max_size=None
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
        shown = {k: v for k, v in env.items() if k.startswith("VRT_")}
        self.note(
            None, "client started with " + " ".join(f"{k}={v!r}" for k, v in sorted(shown.items()))
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
        self._watcher = asyncio.get_running_loop().create_task(self._watch(self.process))

    async def _watch(self, process: asyncio.subprocess.Process) -> None:
        code = await process.wait()
        self.note(None, f"the client process exited with code {code}")
        self.exited.set()

    async def _handler(self, ws: ServerConnection) -> None:
        conn = Connection(self, len(self.connections) + 1, ws)
        self.connections.append(conn)
        self.note(conn, f"client connected to {conn.target}")
        self._accepted.put_nowait(conn)
        try:
            async for data in ws:
                await conn.received(self.record(conn, True, data))
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

    def _over(self) -> bool:
        """The client's process has exited and its connections are closed: nothing more
        can come from it."""
        return self.exited.is_set() and all(c.closed.is_set() for c in self.connections)

    async def _first(self, wanted: Awaitable[Any], timeout: float) -> Any:
        """``wanted``'s value, or None after ``timeout`` or once the process exited."""
        task = asyncio.ensure_future(wanted)
        ended = asyncio.ensure_future(self.exited.wait())
        try:
            await asyncio.wait({task, ended}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            return task.result() if task.done() and not task.cancelled() else None
        finally:
            for pending in (task, ended):
                pending.cancel()

    async def accept(self, timeout: float | None = None) -> Connection:
        """The client's next connection; fails the check if none comes."""
        first = not self.connections
        wait = timeout if timeout is not None else (self.options.connect_timeout if first else 6.0)
        conn = await self.maybe_accept(wait)
        if conn is None:
            what = "open a connection" if first else "connect again"
            raise self.fail(
                f"the client did not {what}"
                if self.exited.is_set()
                else f"the client did not {what} within {wait:g} s"
            )
        return conn

    async def maybe_accept(self, timeout: float) -> Connection | None:
        if not self._accepted.empty():
            return self._accepted.get_nowait()
        conn: Connection | None = await self._first(self._accepted.get(), timeout)
        return conn

    async def first_frame(self, conn: Connection) -> WireFrame:
        frame = await conn.next(PROMPT)
        if frame is None:
            raise self.fail(
                f"connection #{conn.number}: the client sent nothing within {PROMPT:g} s"
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
        """Whether ``condition`` holds within ``timeout``; False at once when the client's
        process has exited and nothing more can come from it."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not condition():
            if loop.time() >= deadline or self._over():
                return bool(condition())
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

    def audio_from_client(self, conn: Connection | None = None) -> list[WireFrame]:
        """The binary frames the client sent (on ``conn``, or any connection)."""
        return [
            f
            for f in self.wire
            if f.from_client
            and isinstance(f.data, bytes)
            and (conn is None or f.conn == conn.number)
        ]

    def _session_of(self, frame: WireFrame) -> str:
        conn = self.connections[frame.conn - 1]
        return conn.session.id if conn.session is not None else f"#{frame.conn}"

    def _distinct(
        self, type_: str, where: Callable[[dict[str, Any]], bool]
    ) -> list[dict[str, Any]]:
        """Distinct client messages of ``type_`` (a resend of the same seq counts once)."""
        seen: set[tuple[str, int | None]] = set()
        out: list[dict[str, Any]] = []
        for frame in self.from_client(types=(type_,)):
            message = frame.message
            assert message is not None
            key = (self._session_of(frame), frame.seq)
            if key in seen or not where(message):
                continue
            seen.add(key)
            out.append(message)
        return out

    def results(self, call_id: str | None = None) -> list[dict[str, Any]]:
        """Distinct tool.result messages (of ``call_id``, or all)."""
        return self._distinct(
            "tool.result", lambda m: call_id is None or m.get("callId") == call_id
        )

    def playbacks(self, item_id: str | None = None) -> list[dict[str, Any]]:
        """Distinct playback reports (of ``item_id``, or all)."""
        return self._distinct("playback", lambda m: item_id is None or m.get("itemId") == item_id)

    async def result(self, call_id: str, timeout: float = PROMPT) -> dict[str, Any] | None:
        await self.until(lambda: self.results(call_id), timeout)
        found = self.results(call_id)
        return found[0] if found else None

    async def require_result(self, call_id: str, timeout: float = PROMPT) -> dict[str, Any]:
        result = await self.result(call_id, timeout)
        if result is None:
            raise self.fail(f"no tool.result for call {call_id} within {timeout:g} s")
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

    def say_lines(self, tag: str, count: int) -> list[str]:
        return [f"conformance say {i} {tag}" for i in range(1, count + 1)]

    # -- shared judgements --

    def require_never_run(self, call_id: str, why: str) -> None:
        if self.started(call_id):
            raise self.fail(f"call {call_id} ({why}) was run: the tool log shows it started")

    def require_one_result(self, call_id: str) -> dict[str, Any]:
        results = self.results(call_id)
        if len(results) != 1:
            shown = "; ".join(describe_result(r) for r in results) or "none"
            raise self.fail(
                f"call {call_id} got {len(results)} tool.result messages (distinct seqs), "
                f"not exactly one: {shown}"
            )
        return results[0]

    def require_interrupted(self, call_id: str, why: str) -> None:
        """``call_id`` got one result, INTERRUPTED, and never ran (§6.2, §7.2)."""
        self.require_never_run(call_id, why)
        result = self.require_one_result(call_id)
        if failure_code(result) != "INTERRUPTED":
            raise self.fail(
                f"call {call_id} ({why}) was answered {describe_result(result)}, not INTERRUPTED"
            )

    def require_played_at_most(self, item_id: str, limit: float, why: str) -> None:
        """Every playback report of ``item_id`` says at most ``limit`` ms (``why``)."""
        for report in self.playbacks(item_id):
            played = report.get("playedMs")
            if not isinstance(played, int) or played > limit:
                raise self.fail(f"playback reports {played!r} ms of {item_id}, {why}")

    def require_playbacks(self, item_id: str | None = None) -> list[dict[str, Any]]:
        """The playback reports (of ``item_id``); skipped when there are none: the client
        may report nothing (a SHOULD), so a rule judged on reports cannot be judged."""
        reports = self.playbacks(item_id)
        if not reports:
            raise Skipped(
                "the client sent no playback report, so what it played cannot be judged; "
                "a client without audio output: run the suite with --no-audio-output"
            )
        return reports

    # -- stopping --

    async def close(self) -> None:
        for conn in self.connections:
            if not conn.closed.is_set():
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(conn.ws.close(1000, "check over"), 1.0)
        process = self.process
        if process is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self.exited.wait()), 0.5)
            except TimeoutError:
                _signal(process, signal.SIGTERM)
                try:
                    await asyncio.wait_for(asyncio.shield(self.exited.wait()), 2.0)
                except TimeoutError:
                    _signal(process, signal.SIGKILL)
                    await self.exited.wait()
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


def failure_code(result: Mapping[str, Any]) -> str | None:
    """The failure code of a result; None when it is ok."""
    if result.get("ok") is False:
        code = result.get("code")
        return code if isinstance(code, str) else "(no code)"
    return None


def describe_result(result: Mapping[str, Any]) -> str:
    if result.get("ok") is True:
        return f"ok, output {json.dumps(result.get('output'))}"
    return f"ok: false, code {result.get('code')}"


# --- registration ---------------------------------------------------------------------

SUITE: Final[Suite[ClientHarness]] = Suite("client", NEEDS)

CheckFunction = Callable[[ClientHarness], Awaitable[None]]


def check(
    section: str, level: Level, *, needs: Iterable[str] = ()
) -> Callable[[CheckFunction], CheckFunction]:
    """Register a client check: its id is the function's name without ``check_``, its
    title the first paragraph of its docstring. A check whose need the client declares
    it lacks does not apply."""
    wanted = tuple(needs)

    def register(function: CheckFunction) -> CheckFunction:
        async def run(h: ClientHarness) -> None:
            if "audio-output" in wanted and not h.options.audio_output:
                raise NotApplicable("the client has no audio output (--no-audio-output)")
            if "audio-input" in wanted and not h.options.audio_input:
                raise NotApplicable("the client has no audio input (--no-audio-input)")
            await function(h)

        run.__name__ = function.__name__
        SUITE.check(section, level, title_of(function), needs=wanted)(run)
        return function

    return register
