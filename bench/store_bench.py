"""The cost of keeping sessions in Redis: vrt with the Redis session store against vrt
with the memory store, in one run, and a resume on another process.

    python -m bench.store_bench            # quick, about two minutes
    python -m bench.store_bench --full     # what docs/performance.md reports
    python -m bench.store_bench --smoke    # seconds (tests use it)
    python -m bench.store_bench --unix     # the servers reach Redis by a unix socket

Each vrt server runs in its own process pinned to CPU 0 (``bench.servers``); this
process, the load client, and the benchmark's own ``redis-server`` (started on a free
port, nothing kept on disk) share CPU 1, so that Redis never takes the server's core.
Per repetition, the memory-store server and the Redis-store server are measured one
after the other with the same scenarios (``bench.scenarios``): the text → first chunk
round trip, sequenced throughput with the server's CPU per message, and the memory of
idle sessions, in the server and in Redis. Ratios are Redis / memory, medians over the
repetitions.

Resume on another process: two Redis-store servers; a session on the first gets
``burst 1022`` unacknowledged (seqs 1-1024, the kept window), its connection drops, and
a new connection to the second resumes it from 0: the time from connecting to the
1,024th replayed message, p50 and p99 (the second process reads the session from
Redis, builds its agent and resends all 1,024).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from vrt.protocol.codec import encode
from vrt.protocol.messages import Hello

from .client import connect, open_session
from .procs import (
    CLIENT_CPU,
    ROOT,
    ServerProcess,
    cpu_s,
    install_cleanup,
    machine,
    pin,
    raise_nofile,
    wait_quiet,
)
from .scenarios import RESUME_MESSAGES, Target, control_rtt, pct, sequenced_push, sessions

MODES: dict[str, dict[str, Any]] = {
    "smoke": {
        "reps": 1,
        "timeout": 30.0,
        "rtt_warmup": 5,
        "rtt_n": 30,
        "ack_n": 0,
        "burst": 500,
        "bursts": 2,
        "connect_concurrency": 20,
        "idle": [100],
        "settle": 0.3,
        "resume_warmup": 1,
        "resume_n": 3,
    },
    "quick": {
        "reps": 3,
        "timeout": 60.0,
        "rtt_warmup": 200,
        "rtt_n": 1000,
        "ack_n": 0,
        "burst": 10_000,
        "bursts": 2,
        "connect_concurrency": 50,
        "idle": [1000],
        "settle": 1.5,
        "resume_warmup": 3,
        "resume_n": 30,
    },
    "full": {
        "reps": 5,
        "timeout": 120.0,
        "rtt_warmup": 500,
        "rtt_n": 5000,
        "ack_n": 0,
        "burst": 10_000,
        "bursts": 10,
        "connect_concurrency": 50,
        "idle": [1000, 5000],
        "settle": 2.0,
        "resume_warmup": 5,
        "resume_n": 100,
    },
}


class Redis:
    """The benchmark's own redis-server, on CPU 1 with the client, on a free TCP port and
    a unix socket; ``unix``: the vrt servers reach it by the socket."""

    def __init__(self, *, unix: bool = False) -> None:
        if shutil.which("redis-server") is None:
            raise SystemExit("redis-server is not installed (apt-get install redis-server)")
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self._dir = tempfile.TemporaryDirectory(prefix="vrt-bench-redis-")
        self.socket_path = os.path.join(self._dir.name, "redis.sock")
        self.unix = unix
        self.proc = subprocess.Popen(
            [
                "taskset",
                "-c",
                str(CLIENT_CPU),
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                self._dir.name,
                "--unixsocket",
                self.socket_path,
                "--unixsocketperm",
                "700",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(200):
            if self.cli("ping") == "PONG":
                return
            time.sleep(0.02)
        raise SystemExit("redis-server did not start")

    def url(self, prefix: str) -> str:
        if self.unix:
            return f"unix://{self.socket_path}?db=0&prefix={prefix}"
        return f"redis://127.0.0.1:{self.port}/0?prefix={prefix}"

    def cli(self, *args: str) -> str:
        done = subprocess.run(
            ["redis-cli", "-p", str(self.port), *args],
            capture_output=True,
            text=True,
            check=False,
        )
        return done.stdout.strip()

    def used_memory(self) -> int:
        for line in self.cli("info", "memory").splitlines():
            if line.startswith("used_memory:"):
                return int(line.split(":")[1])
        return 0

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(5)
        self._dir.cleanup()


async def _measure(store: str, cfg: dict[str, Any], redis: Redis) -> dict[str, Any]:
    extra = ["--store", store] if store else []
    out: dict[str, Any] = {}
    for name, scenario in (("rtt", control_rtt), ("push", sequenced_push)):
        server = ServerProcess("vrt", max_life=600, extra=extra)
        try:
            wait_quiet(3.0)
            redis_cpu0 = cpu_s(redis.proc.pid)
            result = await scenario(Target("vrt", server.url, server.pid), cfg)
            if name == "push" and result.get("messages"):
                spent = cpu_s(redis.proc.pid) - redis_cpu0
                result["redis_us_per_msg"] = spent / result["messages"] * 1e6
            out |= {f"{name}.{key}": value for key, value in result.items()}
        finally:
            server.stop()
    server = ServerProcess("vrt", max_life=600, extra=extra)
    try:
        wait_quiet(3.0)
        result = await sessions(Target("vrt", server.url, server.pid), cfg)
        out |= {f"sessions.{key}": value for key, value in result.items()}
    finally:
        server.stop()
    return out


async def _idle_redis_bytes(cfg: dict[str, Any], redis: Redis) -> float:
    """Redis memory per idle session: ``idle[0]`` sessions opened and kept open."""
    redis.cli("flushall")
    server = ServerProcess("vrt", max_life=600, extra=["--store", redis.url("idle")])
    peers = []
    try:
        await asyncio.sleep(0.5)
        before = redis.used_memory()
        count = cfg["idle"][0]
        peers = [
            await open_session(server.url, vrt=True, timeout=cfg["timeout"]) for _ in range(count)
        ]
        await asyncio.sleep(cfg["settle"])
        return (redis.used_memory() - before) / count
    finally:
        for peer in peers:
            peer.drop()
        server.stop()


async def _resume_elsewhere(cfg: dict[str, Any], redis: Redis) -> dict[str, Any]:
    first = ServerProcess("vrt", max_life=600, extra=["--store", redis.url("resume")])
    second = ServerProcess("vrt", max_life=600, extra=["--store", redis.url("resume")])
    times: list[float] = []
    try:
        for i in range(cfg["resume_warmup"] + cfg["resume_n"]):
            peer = await open_session(first.url, vrt=True, ack=False)
            fut = peer.expect_seq(RESUME_MESSAGES)
            peer.send_text(peer.user_text(f"burst {RESUME_MESSAGES - 2}"))
            await asyncio.wait_for(fut, cfg["timeout"])
            peer.drop()
            await asyncio.sleep(0.05)  # parked, and written to Redis
            hello = encode(Hello(session_id=peer.session_id, resume_from=0), 0)
            t0 = time.perf_counter_ns()
            resumed = await connect(second.url, ack=False)
            fut = resumed.expect_seq(RESUME_MESSAGES)
            resumed.send_text(hello)
            t1, _ = await asyncio.wait_for(fut, cfg["timeout"])
            if i >= cfg["resume_warmup"]:
                times.append((t1 - t0) / 1e6)
            await resumed.close()
    finally:
        first.stop()
        second.stop()
    return {
        "resume_elsewhere_ms_p50": pct(times, 0.5),
        "resume_elsewhere_ms_p99": pct(times, 0.99),
        "resume_elsewhere_ms_max": max(times),
    }


ROWS = (
    ("text → first chunk p50 (µs)", "rtt.chunk_us_p50", "≤1.3×"),
    ("text → first chunk p99 (µs)", "rtt.chunk_us_p99", ""),
    ("ping → pong p50 (µs)", "rtt.ping_us_p50", ""),
    ("sequenced throughput (msg/s)", "push.msgs_per_s", "≥0.7×"),
    ("server CPU per message (µs)", "push.server_us_per_msg", ""),
    ("Redis CPU per message (µs)", "push.redis_us_per_msg", ""),
    ("idle session, server RSS (KB)", "sessions.kb_per_session_{idle}", ""),
)
_NO_RATIO = frozenset({"push.redis_us_per_msg"})


async def main_async(mode: str, json_path: Path, *, unix: bool = False) -> dict[str, Any]:
    cfg = MODES[mode]
    redis = Redis(unix=unix)
    report: dict[str, Any] = {"mode": mode, "machine": machine(), "reps": [], "unix": unix}
    try:
        for _ in range(cfg["reps"]):
            memory = await _measure("", cfg, redis)
            shared = await _measure(redis.url(f"bench{len(report['reps'])}"), cfg, redis)
            report["reps"].append({"memory": memory, "redis": shared})
        report["redis_bytes_per_idle_session"] = await _idle_redis_bytes(cfg, redis)
        report |= await _resume_elsewhere(cfg, redis)
    finally:
        redis.stop()
    idle = cfg["idle"][0]
    lines = [f"{'':34} {'memory':>12} {'redis':>12} {'ratio':>7}  aim"]
    summary: dict[str, Any] = {}
    for label, template, aim in ROWS:
        key = template.format(idle=idle)
        mem = [rep["memory"].get(key) for rep in report["reps"]]
        red = [rep["redis"].get(key) for rep in report["reps"]]
        m = statistics.median([v for v in mem if v is not None] or [0.0])
        r = statistics.median([v for v in red if v is not None] or [0.0])
        # Redis's own CPU has no ratio: with the memory store, Redis idles (its figure
        # there is the noise of an idle process).
        ratio = r / m if m and key not in _NO_RATIO else float("nan")
        summary[key] = {"memory": m, "redis": r, "ratio": ratio}
        shown = f"{'—':>7}" if math.isnan(ratio) else f"{ratio:7.2f}"
        lines.append(f"{label:34} {m:12.1f} {r:12.1f} {shown}  {aim}")
    lines.append(
        f"Redis memory per idle session: {report['redis_bytes_per_idle_session']:.0f} bytes"
    )
    lines.append(
        "resume on another process (reconnect → 1,024th replayed message): "
        f"p50 {report['resume_elsewhere_ms_p50']:.2f} ms, "
        f"p99 {report['resume_elsewhere_ms_p99']:.2f} ms (aim ≤ 20 ms)"
    )
    report["summary"] = summary
    print("\n".join(lines))
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(report, indent=2))
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.store_bench")
    group = ap.add_mutually_exclusive_group()
    group.add_argument("--full", action="store_true")
    group.add_argument("--smoke", action="store_true")
    ap.add_argument("--json", type=Path)
    ap.add_argument(
        "--unix", action="store_true", help="the Redis store over a unix socket, not TCP"
    )
    args = ap.parse_args(argv)
    mode = "full" if args.full else "smoke" if args.smoke else "quick"
    install_cleanup()
    raise_nofile()
    pin(CLIENT_CPU)
    os.chdir(ROOT)
    import uvloop

    suffix = "-unix" if args.unix else ""
    json_path = args.json or ROOT / "bench" / "results" / f"store-{mode}{suffix}.json"
    uvloop.run(main_async(mode, json_path, unix=args.unix))
    return 0


if __name__ == "__main__":
    sys.exit(main())
