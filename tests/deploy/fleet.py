"""Several ``vrt serve`` processes sharing one Redis, and HAProxy in front of them
(round-robin, no stickiness), as docs/deploy.md describes a deployment.

Each process listens on its own port, so a test can also talk to one of them directly;
the proxy's URL spreads connections over all of them in turn, and names the process that
served each WebSocket in the response header ``X-Vrt-Server`` (``s0``, ``s1``...).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from support.processes import free_port, vrt_command

__all__ = ["Fleet", "Server", "haproxy_available", "start_fleet", "start_haproxy"]


@dataclass
class Server:
    """One ``vrt serve`` process of the fleet."""

    name: str
    port: int
    args: tuple[str, ...]
    process: subprocess.Popen[str] | None = None
    output: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self) -> None:
        log = tempfile.NamedTemporaryFile(  # noqa: SIM115 - kept open by the process
            "w+", prefix=f"vrt-{self.name}-", suffix=".log", delete=False
        )
        self.process = subprocess.Popen(
            [*vrt_command(), "serve", "--port", str(self.port), "--agent", "scripted", *self.args],
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self._log = Path(log.name)
        deadline = time.monotonic() + 20
        while "listening on" not in self.log():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"vrt serve {self.name} did not start:\n{self.log()}")
            time.sleep(0.02)

    @property
    def worker(self) -> str:
        """The worker id this process's leases carry (from its log)."""
        for line in self.log().splitlines():
            if ") is worker " in line:
                return line.rsplit(" ", 1)[1]
        raise LookupError(f"{self.name} has not logged its worker id")

    def log(self) -> str:
        return self._log.read_text(errors="replace") if hasattr(self, "_log") else ""

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def signal(self, signum: int) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signum)

    def kill(self) -> None:
        """kill -9: no drain, no goodbye."""
        if self.alive():
            self.signal(signal.SIGKILL)
            assert self.process is not None
            self.process.wait(5)

    def stop(self) -> None:
        process = self.process
        if process is None:
            return
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGCONT)  # a stopped one cannot drain
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.process = None
        if hasattr(self, "_log"):
            self._log.unlink(missing_ok=True)

    def restart(self) -> None:
        self.stop()
        self.start()


@dataclass
class Fleet:
    servers: list[Server]
    proxy_port: int | None = None
    proxy: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The proxy's URL (round-robin over the servers)."""
        assert self.proxy_port is not None, "the fleet has no proxy"
        return f"ws://127.0.0.1:{self.proxy_port}"

    def by_name(self, name: str) -> Server:
        return next(server for server in self.servers if server.name == name)

    def stop(self) -> None:
        if self.proxy is not None:
            self.proxy.terminate()
            try:
                self.proxy.wait(5)
            except subprocess.TimeoutExpired:
                self.proxy.kill()
                self.proxy.wait()
            self.proxy = None
        for server in self.servers:
            server.stop()


def haproxy_available() -> str | None:
    if shutil.which("haproxy") is None:
        return "haproxy is not installed (apt-get install haproxy)"
    return None


_HAPROXY_CONFIG = """\
global
    maxconn 8192
defaults
    mode http
    timeout connect 2s
    timeout client 120s
    timeout server 120s
    timeout tunnel 120s
    # A connection refused by a process that is gone is tried on the next one.
    retries 3
    option redispatch 1
frontend vrt
    bind 127.0.0.1:{port}
    default_backend workers
backend workers
    balance roundrobin
    http-response set-header X-Vrt-Server %[srv_name]
{servers}
"""


def start_haproxy(fleet: Fleet, directory: Path) -> None:
    """HAProxy round-robin in front of every server of ``fleet``."""
    reason = haproxy_available()
    if reason is not None:
        pytest.skip(reason)
    port = free_port()
    config = directory / "haproxy.cfg"
    config.write_text(
        _HAPROXY_CONFIG.format(
            port=port,
            servers="\n".join(f"    server {s.name} 127.0.0.1:{s.port}" for s in fleet.servers),
        )
    )
    fleet.proxy = subprocess.Popen(
        ["haproxy", "-db", "-f", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    fleet.proxy_port = port
    import socket

    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            if fleet.proxy.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("haproxy did not start") from None
            time.sleep(0.02)


@contextlib.contextmanager
def start_fleet(
    store_url: str, count: int = 3, *, args: Sequence[str] = (), proxy: bool = True
) -> Iterator[Fleet]:
    """``count`` ``vrt serve --store store_url`` processes (and HAProxy in front)."""
    servers = [
        Server(
            f"s{n}",
            free_port(),
            ("--store", store_url, "--log-level", "info", *args),
        )
        for n in range(count)
    ]
    fleet = Fleet(servers)
    with tempfile.TemporaryDirectory(prefix="vrt-fleet-") as directory:
        try:
            for server in servers:
                server.start()
            if proxy:
                start_haproxy(fleet, Path(directory))
            yield fleet
        finally:
            fleet.stop()
