#!/usr/bin/env python3
"""ws_floor: the floor cost of a bare WebSocket echo server, side by side.

Servers (each in its own subprocess, pinned to CPU 0):
  websockets-asyncio  websockets.asyncio.server, compression=None, ping_interval=None
  websockets-uvloop   the same on uvloop
  picows-asyncio      picows ws_create_server + WSListener
  picows-uvloop       the same on uvloop

Load client: ONE implementation for every server -- a picows client on uvloop, in this
(parent) process, pinned to CPU 1.

Scenarios (no protocol, just frames):
  rtt   one connection, 167-byte JSON text frame, wait for echo, repeat; p50/p99 in us
  push  client sends "PUSH n"; server sends n 186-byte text frames then "DONE"; k msgs/s
  bin   client sends n 965-byte binary frames then "END"; server replies "COUNT n"; k frames/s
  idle  open 1000 connections; server VmRSS delta / 1000 in KB; connect rate (conn/s)

Usage:  python bench/ws_floor.py --quick      (~60 s)
        python bench/ws_floor.py              (full, a few minutes)
Results: table on stdout, JSON in bench/results/ws_floor.json (keyed by mode).
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import contextlib
import json
import os
import platform
import resource
import select
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from picows import WSFrame, WSTransport
    from websockets.asyncio.server import ServerConnection

KINDS = ("websockets-asyncio", "websockets-uvloop", "picows-asyncio", "picows-uvloop")
HOST = "127.0.0.1"
SERVER_CPU = 0
CLIENT_CPU = 1


def _json_of_len(n: int, base: dict[str, Any]) -> bytes:
    """A compact JSON object of exactly n bytes (padded with a 'pad' string field)."""
    d = dict(base)
    d["pad"] = ""
    raw = json.dumps(d, separators=(",", ":")).encode()
    d["pad"] = "x" * (n - len(raw))
    raw = json.dumps(d, separators=(",", ":")).encode()
    assert len(raw) == n, (len(raw), n)
    return raw


RTT_MSG = _json_of_len(
    167,
    {
        "type": "input_text.append",
        "event_id": "evt_000001",
        "session": "sess_01",
        "seq": 1,
        "text": "hello there",
    },
)
PUSH_MSG = _json_of_len(
    186,
    {
        "type": "output_text.delta",
        "event_id": "evt_000002",
        "response_id": "resp_01",
        "seq": 2,
        "delta": "some words",
    },
)
PUSH_STR = PUSH_MSG.decode()
BIN_MSG = bytes(range(256)) * 3 + bytes(197)  # 965 bytes
assert len(BIN_MSG) == 965


# --------------------------------------------------------------------------- helpers
def pin(cpu: int) -> bool:
    try:
        os.sched_setaffinity(0, {cpu})
        return True
    except (AttributeError, OSError, ValueError):
        return False


def raise_nofile() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else 65536
    if soft < want:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def die_with_parent() -> None:
    """Linux: SIGKILL this process when the parent dies (belt and braces)."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


_TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """utime+stime of a process, seconds (resolution 1/CLK_TCK)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def machine_cpu_s() -> tuple[float, float]:
    """(busy, steal) CPU seconds of the whole machine, from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (v + [0] * 8)[:8]
    return (user + nice + system + irq + softirq) / _TICK, steal / _TICK


def wait_quiet(max_wait: float, threshold: float = 0.3) -> float:
    """Wait (bounded) until the machine is nearly idle; return the last busy-cores sample."""
    deadline = time.monotonic() + max_wait
    while True:
        b0, _ = machine_cpu_s()
        time.sleep(1.0)
        busy = machine_cpu_s()[0] - b0
        if busy < threshold or time.monotonic() >= deadline:
            return busy
        time.sleep(2.0)


def self_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def runner(loop_name: str) -> asyncio.Runner:
    if loop_name == "uvloop":
        import uvloop

        return asyncio.Runner(loop_factory=uvloop.new_event_loop)
    return asyncio.Runner(loop_factory=asyncio.SelectorEventLoop)


# --------------------------------------------------------------------------- servers
async def _wait_stop(max_life: float) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.call_later(max_life, stop.set)
    await stop.wait()


async def serve_websockets(max_life: float, max_queue: int) -> None:
    from websockets.asyncio.server import serve
    from websockets.exceptions import ConnectionClosed

    async def handler(ws: ServerConnection) -> None:
        count = 0
        try:
            async for msg in ws:
                if isinstance(msg, bytes):
                    count += 1
                elif msg.startswith("PUSH "):
                    for _ in range(int(msg[5:])):
                        await ws.send(PUSH_STR)
                    await ws.send("DONE")
                elif msg == "END":
                    await ws.send(f"COUNT {count}")
                    count = 0
                else:
                    await ws.send(msg)  # echo
        except ConnectionClosed:
            pass

    async with serve(
        handler, HOST, 0, compression=None, ping_interval=None, max_queue=max_queue, max_size=2**20
    ) as server:
        port = server.sockets[0].getsockname()[1]
        print(f"READY {port}", flush=True)
        await _wait_stop(max_life)


async def serve_picows(max_life: float) -> None:
    from picows import WSListener, WSMsgType, ws_create_server

    TEXT, BINARY, CLOSE = WSMsgType.TEXT, WSMsgType.BINARY, WSMsgType.CLOSE

    class Echo(WSListener):
        def __init__(self) -> None:
            self.count = 0
            self.paused = False
            self.resume_fut: asyncio.Future[None] | None = None
            self.task: asyncio.Task[None] | None = None
            self.tr: WSTransport | None = None

        def on_ws_connected(self, transport: WSTransport) -> None:
            self.tr = transport

        def on_ws_frame(self, transport: WSTransport, frame: WSFrame) -> None:
            mt = frame.msg_type
            if mt == BINARY:
                self.count += 1
            elif mt == TEXT:
                data = frame.get_payload_as_bytes()
                if data.startswith(b"PUSH "):
                    self.task = asyncio.get_running_loop().create_task(self.push(int(data[5:])))
                elif data == b"END":
                    transport.send(TEXT, b"COUNT %d" % self.count)
                    self.count = 0
                else:
                    transport.send(TEXT, data)  # echo
            elif mt == CLOSE:
                transport.send_close(frame.get_close_code(), frame.get_close_message())
                transport.disconnect()

        def on_ws_disconnected(self, transport: WSTransport) -> None:
            if self.task is not None:
                self.task.cancel()

        # Back-pressure: asyncio's transport high-water mark, forwarded by picows.
        def pause_writing(self) -> None:
            self.paused = True

        def resume_writing(self) -> None:
            self.paused = False
            if self.resume_fut is not None and not self.resume_fut.done():
                self.resume_fut.set_result(None)

        async def push(self, n: int) -> None:
            tr = self.tr
            assert tr is not None  # set by on_ws_connected, before any frame
            send, msg = tr.send, PUSH_MSG
            loop = asyncio.get_running_loop()
            for _ in range(n):
                send(TEXT, msg)
                if self.paused:
                    self.resume_fut = loop.create_future()
                    await self.resume_fut
                    if tr.is_disconnected:
                        return
            send(TEXT, b"DONE")

    server = await ws_create_server(lambda request: Echo(), HOST, 0)
    port = server.sockets[0].getsockname()[1]
    print(f"READY {port}", flush=True)
    try:
        await _wait_stop(max_life)
    finally:
        server.close()


def server_main(args: argparse.Namespace) -> None:
    die_with_parent()
    pin(SERVER_CPU)
    raise_nofile()
    lib, loop_name = args.serve.split("-")
    with runner(loop_name) as r:
        if lib == "websockets":
            r.run(serve_websockets(args.max_life, args.ws_max_queue))
        else:
            r.run(serve_picows(args.max_life))


# --------------------------------------------------------------------------- client
_children: list[subprocess.Popen[bytes]] = []


def _kill_children() -> None:
    for p in _children:
        if p.poll() is None:
            try:
                p.kill()
                p.wait(timeout=5)
            except Exception:
                pass
    _children.clear()


def _on_signal(signum: int, frame: FrameType | None) -> NoReturn:
    _kill_children()
    raise SystemExit(128 + signum)


def start_server(kind: str, args: argparse.Namespace) -> tuple[subprocess.Popen[bytes], int]:
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--serve",
        kind,
        "--max-life",
        str(args.server_max_life),
        "--ws-max-queue",
        str(args.ws_max_queue),
    ]
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
    _children.append(p)
    stdout = p.stdout
    assert stdout is not None  # stdout=PIPE
    deadline = time.monotonic() + 20
    line = b""
    while time.monotonic() < deadline:
        r, _, _ = select.select([stdout], [], [], 0.5)
        if r:
            line = stdout.readline()
            break
        if p.poll() is not None:
            break
    if not line.startswith(b"READY "):
        stop_server(p)
        raise RuntimeError(f"server {kind} did not start (got {line!r}, rc={p.poll()})")
    return p, int(line.split()[1])


def stop_server(p: subprocess.Popen[bytes]) -> None:
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=5)
    if p.stdout:
        p.stdout.close()
    if p in _children:
        _children.remove(p)


def pct(sorted_vals: list[int], q: float) -> float:
    i = min(len(sorted_vals) - 1, max(0, round(q * (len(sorted_vals) - 1))))
    return sorted_vals[i]


async def run_client(port: int, pid: int, cfg: dict[str, Any]) -> dict[str, Any]:
    from picows import WSCloseCode, WSListener, WSMsgType, ws_connect

    TEXT, BINARY = WSMsgType.TEXT, WSMsgType.BINARY
    url = f"ws://{HOST}:{port}/"
    loop = asyncio.get_running_loop()
    T = cfg["timeout"]
    out: dict[str, Any] = {}

    class Load(WSListener):
        def __init__(self) -> None:
            self.fut: asyncio.Future[Any] | None = None
            self.count = 0
            self.paused = False
            self.resume_fut: asyncio.Future[None] | None = None
            self.bad = 0

        def on_ws_frame(self, transport: WSTransport, frame: WSFrame) -> None:
            if frame.msg_type != TEXT:
                return
            n = frame.payload_size
            if n == 186:  # a pushed message
                self.count += 1
            elif n == 167:  # an echo
                assert self.fut is not None  # set before each request
                self.fut.set_result(None)
            else:
                data = frame.get_payload_as_bytes()
                if data == b"DONE":
                    assert self.fut is not None
                    self.fut.set_result(self.count)
                elif data.startswith(b"COUNT "):
                    assert self.fut is not None
                    self.fut.set_result(int(data[6:]))
                else:
                    self.bad += 1

        def pause_writing(self) -> None:
            self.paused = True

        def resume_writing(self) -> None:
            self.paused = False
            if self.resume_fut is not None and not self.resume_fut.done():
                self.resume_fut.set_result(None)

    class Idle(WSListener):
        pass

    async def close(tr: WSTransport) -> None:
        tr.send_close(WSCloseCode.OK)
        tr.disconnect()
        await tr.wait_disconnected()

    # ---- idle connections (first, on a fresh server process) --------------------------
    async def idle() -> dict[str, Any]:
        warm = [(await ws_connect(Idle, url))[0] for _ in range(20)]
        await asyncio.gather(*(close(t) for t in warm))
        await asyncio.sleep(0.5)
        rss0 = rss_kb(pid)
        sem = asyncio.Semaphore(cfg["connect_concurrency"])
        conns: list[WSTransport] = []

        async def one() -> None:
            async with sem:
                tr, _ = await ws_connect(Idle, url)
                conns.append(tr)

        n = cfg["idle_conns"]
        t0 = time.perf_counter()
        res = await asyncio.gather(*(one() for _ in range(n)), return_exceptions=True)
        t1 = time.perf_counter()
        errors = sum(isinstance(r, BaseException) for r in res)
        await asyncio.sleep(1.0)
        rss1 = rss_kb(pid)
        await asyncio.gather(*(close(t) for t in conns), return_exceptions=True)
        await asyncio.sleep(0.5)
        return {
            "conns": len(conns),
            "errors": errors,
            "rss_kb_per_conn": (rss1 - rss0) / max(1, len(conns)),
            "rss_before_kb": rss0,
            "rss_after_kb": rss1,
            "connect_per_s": len(conns) / (t1 - t0),
        }

    out["idle"] = await asyncio.wait_for(idle(), T)

    tr, cl = await ws_connect(Load, url)
    assert isinstance(cl, Load)
    try:
        # ---- round trip ------------------------------------------------------------
        async def rtt() -> dict[str, Any]:
            send, ns = tr.send, time.perf_counter_ns
            lat: list[int] = []
            warm, n = cfg["rtt_warmup"], cfg["rtt_n"]
            for i in range(warm + n):
                cl.fut = fut = loop.create_future()
                t0 = ns()
                send(TEXT, RTT_MSG)
                await fut
                if i >= warm:
                    lat.append(ns() - t0)
            lat.sort()
            return {
                "n": n,
                "p50_us": pct(lat, 0.50) / 1e3,
                "p99_us": pct(lat, 0.99) / 1e3,
                "mean_us": statistics.fmean(lat) / 1e3,
            }

        out["rtt"] = await asyncio.wait_for(rtt(), T)

        # ---- server push -------------------------------------------------------------
        async def push(n: int) -> dict[str, Any]:
            cl.count = 0
            cl.fut = fut = loop.create_future()
            c0, s0 = cpu_s(pid), self_cpu_s()
            t0 = time.perf_counter()
            tr.send(TEXT, b"PUSH %d" % n)
            got = await fut
            dt = time.perf_counter() - t0
            c1, s1 = cpu_s(pid), self_cpu_s()
            return {
                "n": n,
                "received": got,
                "k_per_s": got / dt / 1e3,
                "server_cpu_us_per_msg": (c1 - c0) / n * 1e6,
                "server_cpu_util": (c1 - c0) / dt,
                "client_cpu_util": (s1 - s0) / dt,
            }

        await asyncio.wait_for(push(cfg["tput_warmup"]), T)
        out["push"] = await asyncio.wait_for(push(cfg["push_n"]), T)

        # ---- client -> server binary -------------------------------------------------
        async def binary(n: int) -> dict[str, Any]:
            send, msg = tr.send, BIN_MSG
            c0, s0 = cpu_s(pid), self_cpu_s()
            t0 = time.perf_counter()
            for _ in range(n):
                send(BINARY, msg)
                if cl.paused:
                    cl.resume_fut = loop.create_future()
                    await cl.resume_fut
            cl.fut = fut = loop.create_future()
            send(TEXT, b"END")
            got = await fut
            dt = time.perf_counter() - t0
            c1, s1 = cpu_s(pid), self_cpu_s()
            return {
                "n": n,
                "server_counted": got,
                "k_per_s": got / dt / 1e3,
                "server_cpu_us_per_frame": (c1 - c0) / n * 1e6,
                "server_cpu_util": (c1 - c0) / dt,
                "client_cpu_util": (s1 - s0) / dt,
            }

        await asyncio.wait_for(binary(cfg["tput_warmup"]), T)
        out["bin"] = await asyncio.wait_for(binary(cfg["bin_n"]), T)

        # ---- the same, but frames pre-encoded (masked) and written 64 per write() -------
        # A near-zero-cost client: measures the server's parsing capacity when reads are
        # large, instead of the one-frame-per-syscall pace of a real sender.
        async def binary_batched(n: int) -> dict[str, Any]:
            key = os.urandom(4)
            masked = bytes(
                a ^ b for a, b in zip(BIN_MSG, key * (len(BIN_MSG) // 4 + 1), strict=False)
            )
            frame = bytes([0x82, 0x80 | 126]) + len(BIN_MSG).to_bytes(2, "big") + key + masked
            per = 64
            chunk = frame * per
            write = tr.underlying_transport.write
            c0, s0 = cpu_s(pid), self_cpu_s()
            t0 = time.perf_counter()
            for _ in range(n // per):
                write(chunk)
                if cl.paused:
                    cl.resume_fut = loop.create_future()
                    await cl.resume_fut
            cl.fut = fut = loop.create_future()
            tr.send(TEXT, b"END")
            got = await fut
            dt = time.perf_counter() - t0
            c1, s1 = cpu_s(pid), self_cpu_s()
            sent = n // per * per
            return {
                "n": sent,
                "server_counted": got,
                "k_per_s": got / dt / 1e3,
                "server_cpu_us_per_frame": (c1 - c0) / sent * 1e6,
                "server_cpu_util": (c1 - c0) / dt,
                "client_cpu_util": (s1 - s0) / dt,
            }

        await asyncio.wait_for(binary_batched(cfg["tput_warmup"]), T)
        out["bin_batched"] = await asyncio.wait_for(binary_batched(cfg["bin_n"]), T)
        out["unexpected_frames"] = cl.bad
    finally:
        tr.disconnect(graceful=False)
    return out


def client_run(port: int, pid: int, cfg: dict[str, Any]) -> dict[str, Any]:
    with runner("uvloop") as r:
        return r.run(run_client(port, pid, cfg))


# --------------------------------------------------------------------------- report
METRICS: list[tuple[tuple[str, str], str, str]] = [  # (key path, label, format)
    (("rtt", "p50_us"), "rtt p50 us", "{:.0f}"),
    (("rtt", "p99_us"), "rtt p99 us", "{:.0f}"),
    (("push", "k_per_s"), "push k/s", "{:.0f}"),
    (("push", "server_cpu_us_per_msg"), "push srv us/msg", "{:.1f}"),
    (("bin", "k_per_s"), "bin k/s", "{:.0f}"),
    (("bin", "server_cpu_us_per_frame"), "bin srv us/fr", "{:.2f}"),
    (("bin_batched", "k_per_s"), "bin64 k/s", "{:.0f}"),
    (("bin_batched", "server_cpu_us_per_frame"), "bin64 srv us/fr", "{:.2f}"),
    (("idle", "rss_kb_per_conn"), "idle KB/conn", "{:.1f}"),
    (("idle", "connect_per_s"), "conn/s", "{:.0f}"),
]


def summarize(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    s: dict[str, dict[str, Any]] = {}
    for (a, b), _label, _ in METRICS:
        vals = [r[a][b] for r in runs if a in r]
        if vals:
            s[f"{a}.{b}"] = {
                "median": statistics.median(vals),
                "min": min(vals),
                "max": max(vals),
                "n": len(vals),
            }
    return s


def table(summary: dict[str, dict[str, dict[str, Any]]]) -> str:
    head = ["server"] + [m[1] for m in METRICS]
    rows = [head]
    for kind, s in summary.items():
        row = [kind]
        for (a, b), _, fmt in METRICS:
            v = s.get(f"{a}.{b}")
            row.append(fmt.format(v["median"]) if v else "-")
        rows.append(row)
    w = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = [
        " | ".join(c.rjust(w[i]) if i else c.ljust(w[i]) for i, c in enumerate(r)) for r in rows
    ]
    lines.insert(1, "-+-".join("-" * x for x in w))
    return "\n".join(lines)


def versions() -> dict[str, str | None]:
    import importlib.metadata as md

    v: dict[str, str | None] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    for pkg in ("websockets", "picows", "uvloop"):
        try:
            v[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            v[pkg] = None
    return v


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="~60 s run")
    ap.add_argument("--reps", type=int, help="repetitions per server (median reported)")
    ap.add_argument(
        "--servers", default=",".join(KINDS), help="comma-separated subset of " + ",".join(KINDS)
    )
    ap.add_argument("--ws-max-queue", type=int, default=64, help="websockets max_queue (frames)")
    ap.add_argument(
        "--wait-quiet",
        type=float,
        default=0.0,
        metavar="S",
        help="before each server run, wait up to S seconds for other load to stop",
    )
    ap.add_argument(
        "--out", default=str(Path(__file__).resolve().parent / "results" / "ws_floor.json")
    )
    # internal: server subprocess
    ap.add_argument("--serve", choices=KINDS, help=argparse.SUPPRESS)
    ap.add_argument("--max-life", type=float, default=300.0, help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.serve:
        server_main(args)
        return 0

    cfg: dict[str, Any]
    if args.quick:
        cfg = {
            "reps": 2,
            "rtt_warmup": 500,
            "rtt_n": 3000,
            "tput_warmup": 10_000,
            "push_n": 100_000,
            "bin_n": 100_000,
            "idle_conns": 1000,
            "connect_concurrency": 50,
            "timeout": 60.0,
            "budget_s": 180.0,
        }
    else:
        cfg = {
            "reps": 3,
            "rtt_warmup": 1000,
            "rtt_n": 20_000,
            "tput_warmup": 20_000,
            "push_n": 400_000,
            "bin_n": 400_000,
            "idle_conns": 1000,
            "connect_concurrency": 50,
            "timeout": 120.0,
            "budget_s": 900.0,
        }
    if args.reps:
        cfg["reps"] = max(1, min(args.reps, 20))
    args.server_max_life = 4 * cfg["timeout"] + 60  # hard cap on each server's lifetime
    kinds = [k for k in args.servers.split(",") if k]
    for k in kinds:
        if k not in KINDS:
            ap.error(f"unknown server {k}")
    cfg["budget_s"] += args.wait_quiet * cfg["reps"] * len(kinds)

    atexit.register(_kill_children)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _on_signal)
    pinned = pin(CLIENT_CPU)
    nofile = raise_nofile()
    mode = "quick" if args.quick else "full"
    print(
        f"ws_floor {mode}: reps={cfg['reps']} servers={kinds} client pinned={pinned} "
        f"nofile={nofile} loadavg={os.getloadavg()[0]:.2f}",
        flush=True,
    )

    started = time.monotonic()
    raw: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
    errors: list[str] = []
    try:
        for rep in range(cfg["reps"]):
            order = kinds[rep % len(kinds) :] + kinds[: rep % len(kinds)]  # rotate to spread drift
            for kind in order:
                if time.monotonic() - started > cfg["budget_s"]:
                    errors.append(f"time budget exhausted before rep {rep} {kind}")
                    break
                if args.wait_quiet > 0:
                    busy = wait_quiet(args.wait_quiet)
                    if busy >= 0.3:
                        print(
                            f"  (machine still busy: {busy:.2f} cores; measuring anyway)",
                            flush=True,
                        )
                p, port = start_server(kind, args)
                try:
                    (m0, st0), me0 = machine_cpu_s(), self_cpu_s() + cpu_s(p.pid)
                    t0 = time.monotonic()
                    res = client_run(port, p.pid, cfg)
                    (m1, st1), me1 = machine_cpu_s(), self_cpu_s() + cpu_s(p.pid)
                    t1 = time.monotonic()
                    # CPU used by anything but this benchmark (other jobs on the VM) and steal
                    res["foreign_cores"] = max(0.0, ((m1 - m0) - (me1 - me0)) / (t1 - t0))
                    res["steal_cores"] = (st1 - st0) / (t1 - t0)
                    res["rep"] = rep
                    raw[kind].append(res)
                    print(
                        f"  rep {rep} {kind:20s} rtt p50 {res['rtt']['p50_us']:6.0f} us  "
                        f"push {res['push']['k_per_s']:4.0f} k/s  "
                        f"bin {res['bin']['k_per_s']:4.0f} k/s  "
                        f"bin64 {res['bin_batched']['k_per_s']:4.0f} k/s  "
                        f"idle {res['idle']['rss_kb_per_conn']:5.1f} KB/conn "
                        f"{res['idle']['connect_per_s']:5.0f} conn/s  "
                        f"foreign load {res['foreign_cores']:.2f} cores",
                        flush=True,
                    )
                except Exception as e:  # keep going with the other servers
                    errors.append(f"rep {rep} {kind}: {type(e).__name__}: {e}")
                    print(f"  rep {rep} {kind}: ERROR {type(e).__name__}: {e}", flush=True)
                finally:
                    stop_server(p)
    finally:
        _kill_children()

    summary = {k: summarize(v) for k, v in raw.items()}
    print()
    print(
        f"medians of {cfg['reps']} rep(s); server pinned to CPU {SERVER_CPU}, "
        f"picows/uvloop client pinned to CPU {CLIENT_CPU}"
    )
    print(table(summary))
    foreign = [r["foreign_cores"] for v in raw.values() for r in v]
    if foreign and max(foreign) > 0.25:
        print(
            f"WARNING: other processes used up to {max(foreign):.2f} of {os.cpu_count()} cores "
            f"during this run; treat the figures as noisy."
        )
    if errors:
        print("errors:", *errors, sep="\n  ")

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    doc: dict[str, Any] = {}
    if out.exists():
        try:
            doc = json.loads(out.read_text())
        except ValueError:
            doc = {}
    doc.setdefault("runs", {})[mode] = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "elapsed_s": round(time.monotonic() - started, 1),
        "config": cfg,
        "versions": versions(),
        "cpus": os.cpu_count(),
        "loadavg_end": os.getloadavg(),
        "client": "picows ws_connect on uvloop, CPU 1",
        "ws_max_queue": args.ws_max_queue,
        "wait_quiet": args.wait_quiet,
        "summary": summary,
        "raw": raw,
        "errors": errors,
    }
    out.write_text(json.dumps(doc, indent=1))
    print(f"wrote {out}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
