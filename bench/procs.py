"""Processes, CPU pinning and /proc readings for the benchmark runner.

The techniques are those of ``bench/ws_floor.py`` (pinning, PR_SET_PDEATHSIG, a lifetime
cap on each server, /proc CPU and RSS readings), typed and gathered here for reuse.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import importlib.metadata as md
import os
import platform
import resource
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"
SERVER_CPU = 0
CLIENT_CPU = 1
_TICK = os.sysconf("SC_CLK_TCK")


def pin(cpu: int) -> bool:
    """Pin this process to ``cpu``; False when the machine has no such CPU."""
    if (os.cpu_count() or 1) <= cpu:
        return False
    try:
        os.sched_setaffinity(0, {cpu})
    except (AttributeError, OSError, ValueError):
        return False
    return True


def raise_nofile(want: int | None = None) -> tuple[int, int]:
    """Raise the soft open-file limit toward ``want`` (default: the hard limit).
    Returns (soft, hard) in force afterwards."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    cap = hard if hard != resource.RLIM_INFINITY else 1 << 20
    target = cap if want is None else min(want, cap)
    if soft < target:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def die_with_parent() -> None:
    """Linux: SIGKILL this process when its parent dies."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


def cpu_s(pid: int) -> float:
    """CPU seconds used by process ``pid``, all threads: the scheduler's nanosecond
    counters (/proc/PID/task/*/schedstat), else utime+stime in clock ticks."""
    total = 0
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICK
    return total / 1e9


def self_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def machine_busy_s() -> float:
    """Busy CPU seconds of the whole machine, from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq = (v + [0] * 7)[:7]
    return (user + nice + system + irq + softirq) / _TICK


def wait_quiet(max_wait: float, threshold: float = 0.3) -> float:
    """Wait, at most ``max_wait`` seconds, until the machine's other load drops under
    ``threshold`` cores; returns the last one-second sample (cores busy)."""
    deadline = time.monotonic() + max_wait
    while True:
        busy0 = machine_busy_s()
        time.sleep(1.0)
        busy = machine_busy_s() - busy0
        if busy < threshold or time.monotonic() >= deadline:
            return busy


def machine() -> dict[str, Any]:
    model = "?"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    mem_kb = 0
    with contextlib.suppress(OSError), open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
    versions: dict[str, str | None] = {}
    for pkg in ("vrt", "picows", "websockets", "uvloop", "orjson", "msgspec", "jsonschema-rs"):
        try:
            versions[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            versions[pkg] = None
    return {
        "nproc": os.cpu_count(),
        "cpu_model": model,
        "mem_gb": round(mem_kb / 1e6, 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "versions": versions,
        "nofile": list(resource.getrlimit(resource.RLIMIT_NOFILE)),
    }


# --------------------------------------------------------------------------- servers

_children: list[ServerProcess] = []


def kill_children() -> None:
    for child in _children[:]:  # stop() removes the child from the list
        child.stop()


def install_cleanup() -> None:
    """Kill every server subprocess at exit and on SIGTERM/SIGINT/SIGHUP."""
    atexit.register(kill_children)

    def on_signal(signum: int, _frame: Any) -> None:
        kill_children()
        raise SystemExit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)


class ServerProcess:
    """A bench server (``python -m bench.servers KIND``) in its own process, pinned to
    CPU 0. It prints ``READY PORT`` once it listens; it exits on SIGTERM or after
    ``max_life`` seconds, and with its parent."""

    def __init__(
        self,
        kind: str,
        *,
        max_life: float,
        extra: list[str] | None = None,
        module: str = "bench.servers",
    ) -> None:
        self.kind = kind
        self._log: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 (closed in stop)
        cmd = [
            sys.executable,
            "-m",
            module,
            kind,
            "--max-life",
            str(max_life),
            "--cpu",
            str(SERVER_CPU),
            *(extra or []),
        ]
        self.proc = subprocess.Popen(
            cmd, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self._log
        )
        _children.append(self)
        self.port = self._wait_ready(30.0)
        self.url = f"ws://{HOST}:{self.port}/"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _wait_ready(self, timeout: float) -> int:
        out = self.proc.stdout
        assert out is not None
        deadline = time.monotonic() + timeout
        line = b""
        while time.monotonic() < deadline:
            ready, _, _ = select.select([out], [], [], 0.5)
            if ready:
                line = out.readline()
                break
            if self.proc.poll() is not None:
                break
        if not line.startswith(b"READY "):
            log = self.log_tail()
            self.stop()
            raise RuntimeError(f"server {self.kind} did not start ({line!r}): {log}")
        return int(line.split()[1])

    def log_tail(self, limit: int = 2000) -> str:
        with contextlib.suppress(OSError, ValueError):
            self._log.seek(0)
            return self._log.read().decode(errors="replace")[-limit:]
        return ""

    def stop(self) -> None:
        proc = self.proc
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        if proc.stdout is not None:
            proc.stdout.close()
        with contextlib.suppress(OSError, ValueError):
            self._log.close()
        if self in _children:
            _children.remove(self)
