"""A load and soak generator for a vRT server, on loopback only.

    python -m load --text-sessions 1000 --audio-sessions 200 --minutes 2

It starts ``VrtServer`` (scripted agent, uvloop) in a process of its own on 127.0.0.1
(or loads one already running: ``--url ws://127.0.0.1:PORT``, with ``--server-pid`` to
sample its memory and CPU), then worker processes that hold the sessions over raw
WebSockets:

* a *text session* repeats a turn every 2-6 s (think time): ``burst 3``, ``context?``
  or ``call add {...}`` (it answers the tool call), and measures the time from sending
  the text to the first reply message and to ``turn.state idle``;
* an *audio session* sends 20 ms input frames of silence at 50 frames/s and keeps the
  agent speaking (``speak 10000``, real-time output at 50 frames/s), measures how late
  each output frame arrives against its item's 20 ms schedule, and pings once a second
  (the control round trip under audio load).

With ``--churn P``, a share P of the text turns drops its connection (no close
handshake) right after the first sequenced reply and resumes the session (§5.4): the
rest of the reply must come exactly once, in order, and the turn must finish.

With ``--pause-every S``, one of the server's processes (a worker of ``vrt serve
--workers N`` in turn) is stopped for ``--pause-for`` seconds every S seconds, as a
stalled host or a long pause would: what is paused must cost its clients time, never a
message or an error.

Every session acknowledges what it received (§4.2). An ``error`` from the server, a
connection that closes, a reply that does not come within 10 s, or a gap in the
sequence numbers counts as an error. The server's resident memory is sampled every 2 s;
the report gives it at the end of the warm-up (``--warmup``; by default the first quarter
of the run, at least 30 s) and at the end, and the growth per minute after the warm-up
(a least-squares fit).

Bounded in count and time: at most 5,000 sessions, 30 minutes and 8 workers; every
process stops by itself at the deadline, and the parent ends its own children if they
do not. Traffic goes to 127.0.0.1 only. The soft limit on open files is raised to the
hard limit in every process.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing as mp
import os
import random
import resource
import signal
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Final
from urllib.parse import urlsplit

import orjson

MAX_SESSIONS: Final = 5000
MAX_MINUTES: Final = 30.0
MAX_WORKERS: Final = 8
REPLY_TIMEOUT: Final = 10.0
FRAME_MS: Final = 20
HOST: Final = "127.0.0.1"


def raise_open_files() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def use_uvloop() -> None:
    with contextlib.suppress(ImportError):
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


# --- the server process ------------------------------------------------------------------


def serve(queue: Any, stop_at: float, server_loop: str) -> None:
    """Run the server until ``stop_at`` (time.time()); report its URL on ``queue``."""
    raise_open_files()
    if server_loop == "uvloop":
        use_uvloop()

    async def main() -> None:
        from vrt.agents.scripted import scripted_agent
        from vrt.server import VrtServer

        server = VrtServer(scripted_agent)
        url = await server.start(HOST, 0)
        queue.put(url)
        await asyncio.sleep(max(0.0, stop_at - time.time()))
        await server.close()

    asyncio.run(main())


def rss_mb(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def server_processes(pid: int) -> list[int]:
    """``pid`` and its children: the workers of ``vrt serve --workers N`` are its
    children, and they hold the sessions. Asked again at every sample, since a worker
    that dies is replaced."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as children:
            return [pid, *(int(child) for child in children.read().split())]
    except (OSError, ValueError):
        return [pid]


def pause(pids: list[int], seconds: float) -> None:
    """Stop ``pids`` (SIGSTOP) for ``seconds``, then let them go on, whatever happens."""
    stopped = []
    try:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
                stopped.append(pid)
        time.sleep(seconds)
    finally:
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


def cpu_seconds(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


# --- the sessions ------------------------------------------------------------------------


@dataclass
class Stats:
    """What one worker measured."""

    text_first_ms: list[float] = field(default_factory=list)
    resume_ms: list[float] = field(default_factory=list)
    text_idle_ms: list[float] = field(default_factory=list)
    ping_ms: list[float] = field(default_factory=list)
    audio_late_ms: list[float] = field(default_factory=list)
    turns: int = 0
    frames_sent: int = 0
    frames_received: int = 0
    sessions_opened: int = 0
    errors: int = 0
    error_samples: list[str] = field(default_factory=list)
    #: Replies cut short because the session moved to another process mid-reply
    #: (``TURN_CUT_SHORT``, a server with a shared store: docs/deploy.md); not errors.
    cut_short: int = 0

    def error(self, what: str) -> None:
        self.errors += 1
        if len(self.error_samples) < 20:
            self.error_samples.append(what)


class Session:
    """One raw vRT session: hello, sequenced input, acknowledgements."""

    def __init__(self, url: str, stats: Stats) -> None:
        self.url = url
        self.stats = stats
        self.ws: Any = None
        self.next_seq = 1
        self.last_seq = 0
        self.session_id = ""
        # Sent sequenced messages the server may not have handled yet, for a resume.
        self.unacked: dict[int, str] = {}

    async def open(self, **hello: Any) -> None:
        from websockets.asyncio.client import connect

        self.ws = await connect(
            self.url, compression=None, ping_interval=None, max_size=None, open_timeout=30
        )
        await self.ws.send(orjson.dumps({"v": 1, "seq": 0, "type": "hello", **hello}).decode())
        ready = orjson.loads(await asyncio.wait_for(self.ws.recv(), REPLY_TIMEOUT))
        if ready.get("type") != "ready":
            raise RuntimeError(f"expected ready, got {ready}")
        self.session_id = ready["sessionId"]
        self.stats.sessions_opened += 1

    async def send(self, type_: str, **members: Any) -> None:
        seq = self.next_seq
        self.next_seq += 1
        data = orjson.dumps({"v": 1, "seq": seq, "type": type_, **members}).decode()
        self.unacked[seq] = data
        await self.ws.send(data)

    async def cut_and_resume(self) -> None:
        """Drop the connection without a close handshake (as a network failure does)
        and resume (§5.4): ``hello`` with ``resumeFrom``, then resend what the server's
        ``resumedFrom`` says it lacks. The server resends what this side lacks; the
        sequence check of :meth:`sequenced` then proves nothing was lost or repeated."""
        from websockets.asyncio.client import connect

        self.ws.transport.abort()
        began = time.perf_counter()
        self.ws = await connect(
            self.url, compression=None, ping_interval=None, max_size=None, open_timeout=30
        )
        hello = {"v": 1, "seq": 0, "type": "hello", "sessionId": self.session_id}
        await self.ws.send(orjson.dumps({**hello, "resumeFrom": self.last_seq}).decode())
        ready = orjson.loads(await asyncio.wait_for(self.ws.recv(), REPLY_TIMEOUT))
        if ready.get("type") != "ready" or ready.get("sessionId") != self.session_id:
            raise RuntimeError(f"resume refused: {ready}")
        self.stats.resume_ms.append((time.perf_counter() - began) * 1000)
        handled = ready.get("resumedFrom", 0)
        for seq in sorted(self.unacked):
            if seq > handled:
                await self.ws.send(self.unacked[seq])

    async def ack(self) -> None:
        await self.ws.send(f'{{"v":1,"seq":0,"type":"ack","upTo":{self.last_seq}}}')

    def sequenced(self, message: dict[str, Any]) -> None:
        seq = message.get("seq", 0)
        if not seq:
            if message.get("type") == "ack":
                up_to = message["upTo"]
                for handled in [n for n in self.unacked if n <= up_to]:
                    del self.unacked[handled]
            return
        if seq != self.last_seq + 1:
            self.stats.error(f"seq {seq} after {self.last_seq}")
        self.last_seq = max(self.last_seq, seq)
        if message.get("type") == "error":
            if message.get("code") == "TURN_CUT_SHORT" and message.get("recoverable"):
                self.stats.cut_short += 1
            else:
                self.stats.error(f"error {message.get('code')}: {message.get('message')}")

    async def close(self) -> None:
        if self.ws is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.ws.close(), 5)


TEXT_COMMANDS: Final = ("burst 3", "context?", 'call add {"a": 2, "b": 3}')


async def text_session(
    url: str, stats: Stats, start_at: float, stop_at: float, churn: float
) -> None:
    await asyncio.sleep(max(0.0, start_at - time.time()))
    session = Session(url, stats)
    rng = random.Random()
    try:
        await session.open(tools=[{"name": "add"}], context={"load": True})
        while time.time() < stop_at:
            await asyncio.sleep(rng.uniform(2.0, 6.0))
            if time.time() >= stop_at:
                break
            await text_turn(session, rng.choice(TEXT_COMMANDS), cut=rng.random() < churn)
    except Exception as exc:
        if time.time() < stop_at:
            stats.error(f"text session: {type(exc).__name__}: {exc}")
    finally:
        await session.close()


async def text_turn(session: Session, command: str, *, cut: bool = False) -> None:
    """One turn; with ``cut``, the connection is dropped and resumed after the first
    sequenced reply, the worst moment: the rest of the reply may be in flight."""
    stats = session.stats
    began = time.perf_counter()
    await session.send("text", text=command)
    first: float | None = None
    deadline = time.time() + REPLY_TIMEOUT
    while True:
        data = await asyncio.wait_for(session.ws.recv(), max(0.01, deadline - time.time()))
        if isinstance(data, bytes):
            continue
        message = orjson.loads(data)
        session.sequenced(message)
        kind = message.get("type")
        if kind in ("text", "tool.call") and first is None:
            first = time.perf_counter()
        if kind == "tool.call":
            arguments = message["arguments"]
            await session.send(
                "tool.result",
                callId=message["callId"],
                epoch=message["epoch"],
                ok=True,
                output=arguments["a"] + arguments["b"],
            )
        elif kind == "turn.state" and message["state"] == "idle":
            break
        if cut and message.get("seq"):
            cut = False
            await session.cut_and_resume()
    done = time.perf_counter()
    stats.text_first_ms.append(((first or done) - began) * 1000)
    stats.text_idle_ms.append((done - began) * 1000)
    stats.turns += 1
    await session.ack()


async def audio_session(
    url: str, stats: Stats, start_at: float, stop_at: float, encoding: str
) -> None:
    await asyncio.sleep(max(0.0, start_at - time.time()))
    session = Session(url, stats)
    fmt = {"encoding": encoding, "sampleRate": 24000 if encoding == "pcm16" else 8000}
    frame = bytes(960 if encoding == "pcm16" else 160)
    if encoding == "pcmu":
        frame = b"\xff" * 160  # mu-law silence
    tasks: list[asyncio.Task[None]] = []
    try:
        await session.open(input=fmt, output=fmt)
        state = _AudioState(session)
        loop = asyncio.get_running_loop()
        tasks = [
            loop.create_task(_audio_sender(session, frame, stop_at)),
            loop.create_task(_audio_reader(session, state)),
            loop.create_task(_audio_pinger(session, state, stop_at)),
        ]
        await session.send("text", text="speak 10000")
        await asyncio.wait_for(asyncio.shield(tasks[0]), stop_at - time.time() + 5)
    except Exception as exc:
        if time.time() < stop_at:
            stats.error(f"audio session: {type(exc).__name__}: {exc}")
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await session.close()


@dataclass
class _AudioState:
    session: Session
    item_start: float | None = None
    item_frames: int = 0
    pings: list[float] = field(default_factory=list)
    pong: asyncio.Event = field(default_factory=asyncio.Event)


async def _audio_sender(session: Session, frame: bytes, stop_at: float) -> None:
    """Input audio at 50 frames/s on an absolute schedule."""
    began = time.perf_counter()
    seq = 0
    while time.time() < stop_at:
        header = bytes([1]) + seq.to_bytes(4, "big")
        await session.ws.send(header + frame)
        session.stats.frames_sent += 1
        seq = (seq + 1) % (1 << 32)
        delay = began + seq * FRAME_MS / 1000 - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)


async def _audio_reader(session: Session, state: _AudioState) -> None:
    stats = session.stats
    async for data in session.ws:
        now = time.perf_counter()
        if isinstance(data, bytes):
            stats.frames_received += 1
            if state.item_start is None:
                state.item_start = now
            else:
                expected = state.item_start + state.item_frames * FRAME_MS / 1000
                stats.audio_late_ms.append(max(0.0, (now - expected) * 1000))
            state.item_frames += 1
            continue
        message = orjson.loads(data)
        session.sequenced(message)
        kind = message.get("type")
        if kind == "audio.start":
            state.item_start, state.item_frames = None, 0
        elif kind == "pong":
            state.pong.set()
        elif kind == "turn.state" and message["state"] == "idle":
            await session.ack()
            await session.send("text", text="speak 10000")
        if session.last_seq % 16 == 0:
            await session.ack()


async def _audio_pinger(session: Session, state: _AudioState, stop_at: float) -> None:
    while time.time() < stop_at:
        await asyncio.sleep(1.0)
        state.pong.clear()
        began = time.perf_counter()
        await session.ws.send('{"v":1,"seq":0,"type":"ping"}')
        await asyncio.wait_for(state.pong.wait(), REPLY_TIMEOUT)
        session.stats.ping_ms.append((time.perf_counter() - began) * 1000)


def work(
    queue: Any,
    url: str,
    texts: int,
    audios: int,
    start_at: float,
    ramp: float,
    stop_at: float,
    encoding: str,
    churn: float,
) -> None:
    """One worker process: its share of the sessions, until ``stop_at``."""
    raise_open_files()
    use_uvloop()
    stats = Stats()

    async def main() -> None:
        total = max(1, texts + audios)
        jobs = []
        for n in range(texts + audios):
            opens = start_at + ramp * n / total
            if n < audios:
                jobs.append(audio_session(url, stats, opens, stop_at, encoding))
            else:
                jobs.append(text_session(url, stats, opens, stop_at, churn))
        await asyncio.gather(*jobs)

    try:
        asyncio.run(main())
    finally:
        queue.put(asdict(stats))


# --- the run -----------------------------------------------------------------------------


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p / 100))]


def summary(values: list[float]) -> dict[str, float]:
    return {
        "count": len(values),
        "p50": round(percentile(values, 50), 2),
        "p99": round(percentile(values, 99), 2),
        "max": round(max(values), 2) if values else float("nan"),
    }


def slope_mb_per_minute(samples: list[tuple[float, float]]) -> float:
    if len(samples) < 3:
        return float("nan")
    xs = [t / 60 for t, _ in samples]
    ys = [m for _, m in samples]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    var = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var if var else 0.0


def run(args: argparse.Namespace) -> dict[str, Any]:
    raise_open_files()
    context = mp.get_context("spawn")
    duration = args.minutes * 60
    ramp = args.ramp
    began = time.time()
    stop_at = began + 5 + ramp + duration
    server: Any = None
    if args.url:
        url, server_pid = args.url, args.server_pid or 0
    else:
        server_queue = context.Queue()
        server = context.Process(
            target=serve, args=(server_queue, stop_at + 5, args.server_loop), daemon=True
        )
        server.start()
        url, server_pid = server_queue.get(timeout=60), server.pid or 0
    workers = max(1, min(MAX_WORKERS, args.workers))
    results = context.Queue()
    procs = []
    for w in range(workers):
        texts = args.text_sessions // workers + (1 if w < args.text_sessions % workers else 0)
        audios = args.audio_sessions // workers + (1 if w < args.audio_sessions % workers else 0)
        proc = context.Process(
            target=work,
            args=(
                results,
                url,
                texts,
                audios,
                began + 5,
                ramp,
                stop_at,
                args.audio_format,
                args.churn,
            ),
            daemon=True,
        )
        proc.start()
        procs.append(proc)
    warmup = args.warmup if args.warmup is not None else max(30.0, duration / 4)
    memory: list[tuple[float, float]] = []
    each: dict[int, list[tuple[float, float]]] = {}  # per process, when there are several
    cpu: list[tuple[float, float]] = []
    pauses = 0
    next_pause = began + 5 + ramp + (args.pause_every or 0.0)
    print(f"server {url} (pid {server_pid or '?'}); {workers} workers; ramp {ramp:g} s; "
          f"measuring {duration:g} s", flush=True)  # fmt: skip
    while time.time() < stop_at:
        time.sleep(min(2.0, max(0.0, next_pause - time.time())) if args.pause_every else 2.0)
        now = time.time() - began
        pids = server_processes(server_pid) if server_pid else []
        if args.pause_every and time.time() >= next_pause:
            serving = pids[1:] or pids  # the workers, in turn; or the one process
            pause([serving[pauses % len(serving)]], args.pause_for)
            pauses += 1
            next_pause += args.pause_every
            continue
        sizes = {pid: rss_mb(pid) for pid in pids}
        used_each = [cpu_seconds(pid) for pid in pids]
        if pids and all(mb is not None for mb in sizes.values()):
            memory.append((now, sum(mb for mb in sizes.values() if mb is not None)))
            for pid, mb in sizes.items():
                if mb is not None and len(pids) > 1:
                    each.setdefault(pid, []).append((now, mb))
        if pids and all(used is not None for used in used_each):
            cpu.append((now, sum(used for used in used_each if used is not None)))
        if args.verbose and memory:
            print(f"  t={now:6.1f} s  server RSS {memory[-1][1]:7.1f} MB", flush=True)
    stats: list[dict[str, Any]] = []
    deadline = time.time() + 60
    while len(stats) < workers and time.time() < deadline:
        with contextlib.suppress(Exception):
            stats.append(results.get(timeout=max(0.1, deadline - time.time())))
    for proc in [*procs, *([server] if server is not None else [])]:
        proc.join(timeout=10)
        if proc.is_alive():
            proc.terminate()  # our own child, past its deadline
            proc.join(timeout=5)
    merged: dict[str, Any] = {}
    for part in stats:
        for key, value in part.items():
            if isinstance(value, list):
                merged.setdefault(key, []).extend(value)
            else:
                merged[key] = merged.get(key, 0) + value
    measured_from = began + 5 + ramp

    def after(samples: list[tuple[float, float]]) -> list[tuple[float, float]]:
        return [(t, m) for t, m in samples if t >= (measured_from - began) + warmup]

    after_warmup = after(memory)
    cpu_share = (
        (cpu[-1][1] - cpu[0][1]) / (cpu[-1][0] - cpu[0][0]) if len(cpu) > 1 else float("nan")
    )
    return {
        "sessions": {"text": args.text_sessions, "audio": args.audio_sessions},
        "opened": merged.get("sessions_opened", 0),
        "minutes": args.minutes,
        "audio_format": args.audio_format,
        "server_loop": args.server_loop,
        "turns": merged.get("turns", 0),
        "text_first_reply_ms": summary(merged.get("text_first_ms", [])),
        "text_turn_ms": summary(merged.get("text_idle_ms", [])),
        "audio_ping_ms": summary(merged.get("ping_ms", [])),
        "churn": args.churn,
        "resumes": len(merged.get("resume_ms", [])),
        "resume_ms": summary(merged.get("resume_ms", [])),
        "audio_frame_lateness_ms": summary(merged.get("audio_late_ms", [])),
        "audio_frames_sent": merged.get("frames_sent", 0),
        "audio_frames_received": merged.get("frames_received", 0),
        "errors": merged.get("errors", 0),
        "cut_short": merged.get("cut_short", 0),
        "error_samples": merged.get("error_samples", [])[:10],
        "server_cpu_share": round(cpu_share, 3),
        "server_rss_mb": {
            "warmup_s": warmup,
            "after_warmup": round(after_warmup[0][1], 1) if after_warmup else None,
            "end": round(memory[-1][1], 1) if memory else None,
            "max": round(max(m for _, m in memory), 1) if memory else None,
            "growth_mb_per_min_after_warmup": round(slope_mb_per_minute(after_warmup), 2),
            "samples": [(round(t), round(m, 1)) for t, m in memory[:: max(1, len(memory) // 20)]],
        },
        # A server of several processes (``vrt serve --workers N``): each one's memory,
        # the supervisor first, since each worker must be flat on its own.
        "server_processes_rss_mb": {
            str(pid): {
                "after_warmup": round(after(samples)[0][1], 1) if after(samples) else None,
                "end": round(samples[-1][1], 1),
                "growth_mb_per_min_after_warmup": round(slope_mb_per_minute(after(samples)), 2),
            }
            for pid, samples in each.items()
        },
        "pauses": pauses,
        "workers_reported": len(stats),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m load", description=__doc__.split("\n\n")[0])
    parser.add_argument("--text-sessions", type=int, default=1000)
    parser.add_argument("--audio-sessions", type=int, default=200)
    parser.add_argument("--minutes", type=float, default=2.0)
    parser.add_argument("--workers", type=int, default=2, help="client processes (1-8)")
    parser.add_argument("--ramp", type=float, default=20.0, help="seconds to open all sessions")
    parser.add_argument(
        "--warmup",
        type=float,
        help="seconds after the ramp before memory growth is measured (default: a quarter "
        "of the run, at least 30 s; per-session bounds such as the 64 remembered audio "
        "items take ~11 minutes to fill at one item per 10 s)",
    )
    parser.add_argument("--audio-format", choices=["pcm16", "pcmu"], default="pcm16")
    parser.add_argument(
        "--churn",
        type=float,
        default=0.0,
        help="the share of text turns (0-1) whose connection is dropped after the first "
        "sequenced reply and resumed (§5.4); the sequence checks then prove nothing was "
        "lost or repeated",
    )
    parser.add_argument(
        "--server-loop",
        choices=["asyncio", "uvloop"],
        default="uvloop",
        help="the server's event loop (default: uvloop, what `vrt serve` uses where installed)",
    )
    parser.add_argument(
        "--url",
        help="load a server that is already running (ws://127.0.0.1:PORT or ws://localhost:PORT) "
        "instead of starting one",
    )
    parser.add_argument(
        "--server-pid",
        type=int,
        help="with --url: the server's pid, to sample its memory and CPU (with `vrt serve "
        "--workers N`, the supervisor's: its workers are sampled too, each on its own)",
    )
    parser.add_argument(
        "--pause-every",
        type=float,
        metavar="SECONDS",
        help="stop one of the server's processes (SIGSTOP) every SECONDS, its workers in "
        "turn, for --pause-for seconds: its clients wait, its store replies time out, its "
        "ownership notices come late (a stalled host or a GC pause of a worker)",
    )
    parser.add_argument(
        "--pause-for", type=float, default=1.5, metavar="SECONDS", help="default: 1.5"
    )
    parser.add_argument("--json", help="also write the report to this file")
    parser.add_argument("--verbose", action="store_true", help="print RSS every 2 s")
    parser.add_argument(
        "--attack",
        metavar="NAME",
        help="instead of a load, run an attack with a bystander session (load/attacks.py): "
        "all, non-reading, connect-flood, json-shapes, frame-flood, context-bloat, no-hello; "
        "voice (every voice attack but the soak), tiny-opus, unspaced-text, session-churn, "
        "fast-speech, many-speakers, "
        "voice-sessions, voice-soak (by hand: --seconds 1800)",
    )
    parser.add_argument(
        "--seconds", type=float, default=15.0, help="with --attack: how long each attack runs"
    )
    parser.add_argument(
        "--agent-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="with --attack: an --agent-option for the server's agent (repeatable), e.g. "
        "tts=espeak for the voice attacks; the server inherits this process's environment "
        "(MALLOC_ARENA_MAX and the like)",
    )
    args = parser.parse_args(argv)
    if args.attack:
        from .attacks import main as attack

        return attack(args.attack, args.seconds, args.agent_option)
    total = args.text_sessions + args.audio_sessions
    if not 0 < total <= MAX_SESSIONS or args.text_sessions < 0 or args.audio_sessions < 0:
        parser.error(f"between 1 and {MAX_SESSIONS} sessions")
    if args.warmup is not None and not 0 <= args.warmup < args.minutes * 60:
        parser.error("--warmup must be at least 0 and shorter than the run")
    if not 0 <= args.churn <= 1:
        parser.error("--churn must be between 0 and 1")
    if not 0 < args.minutes <= MAX_MINUTES:
        parser.error(f"--minutes must be in (0, {MAX_MINUTES:g}]")
    if args.pause_every is not None and not 0 < args.pause_for < args.pause_every:
        parser.error("--pause-for must be above 0 and below --pause-every")
    if args.pause_every is not None and args.url and not args.server_pid:
        parser.error("--pause-every with --url needs --server-pid")
    if args.url and urlsplit(args.url).hostname not in ("127.0.0.1", "localhost", "::1"):
        parser.error("--url must be a loopback address: this generator never loads other hosts")
    limit = raise_open_files()
    if limit < total + 64:
        parser.error(f"the open-file limit is {limit}; {total} sessions need more")
    report = run(args)
    samples = report["server_rss_mb"].pop("samples")
    text = json.dumps(report, indent=2)
    print(text)
    print("server RSS (s, MB): " + " ".join(f"{t}:{m}" for t, m in samples))
    report["server_rss_mb"]["samples"] = samples
    text = json.dumps(report, indent=2)
    if args.json:
        with open(args.json, "w") as out:
            out.write(text + "\n")
    return 1 if report["errors"] or report["opened"] < total else 0


if __name__ == "__main__":
    sys.exit(main())
