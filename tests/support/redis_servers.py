"""Redis servers the tests start for themselves: one ``redis-server`` on a free port, or a
3-master Redis Cluster (``redis-server --cluster-enabled yes`` ×3 and ``redis-cli
--cluster create``). Never the machine's own Redis at 6379. Nothing is kept on disk.

Tests that need one skip with a reason when ``redis-server`` or the ``redis`` package is
missing (``.ci/run`` installs both).
"""

from __future__ import annotations

import contextlib
import os
import random
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

__all__ = [
    "RedisCluster",
    "RedisServer",
    "redis_available",
    "start_cluster",
    "start_redis",
    "store_kinds",
]


def store_kinds() -> list[str]:
    """The session stores the server tests run with: ``VRT_TEST_STORES`` (comma
    separated: memory, redis), by default both."""
    return os.environ.get("VRT_TEST_STORES", "memory,redis").split(",")


def redis_available() -> str | None:
    """Why Redis tests cannot run here, or None when they can."""
    if shutil.which("redis-server") is None:
        return "redis-server is not installed (apt-get install redis-server)"
    try:
        import redis  # noqa: F401
    except ImportError:
        return "the redis package is not installed (pip install 'vrealtime[redis]')"
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _cluster_port() -> int:
    """A free port whose cluster bus port (port + 10000) is free too."""
    for _ in range(200):
        port = random.randint(20000, 45000)
        try:
            for candidate in (port, port + 10000):
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", candidate))
        except OSError:
            continue
        return port
    raise RuntimeError("no free port pair for a cluster node")


def _ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


@dataclass
class RedisServer:
    """A ``redis-server`` of the test's own."""

    port: int
    directory: Path
    extra: tuple[str, ...] = ()
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def store_url(self, prefix: str | None = None) -> str:
        """The URL for a store with keys of its own (``prefix``, random by default)."""
        return f"{self.url}?prefix={prefix or 't' + secrets.token_hex(4)}"

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
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
                str(self.directory),
                *self.extra,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while not _ping(self.port):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server on port {self.port} did not start")
            time.sleep(0.02)

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        process.terminate()
        try:
            process.wait(5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def restart(self) -> None:
        """Stop and start again on the same port: everything it held is gone."""
        self.stop()
        self.start()

    def command(self, *args: str) -> str:
        """One ``redis-cli`` command against this server; its output."""
        done = subprocess.run(
            ["redis-cli", "-p", str(self.port), *args],
            capture_output=True,
            check=True,
            timeout=10,
        )
        return done.stdout.decode("utf-8", "replace").strip()


@contextlib.contextmanager
def start_redis(*extra: str) -> Iterator[RedisServer]:
    reason = redis_available()
    if reason is not None:
        pytest.skip(reason)
    with tempfile.TemporaryDirectory(prefix="vrt-redis-") as directory:
        server = RedisServer(_free_port(), Path(directory), extra)
        server.start()
        try:
            yield server
        finally:
            server.stop()


@dataclass
class RedisCluster:
    """A 3-master Redis Cluster of the test's own."""

    nodes: list[RedisServer] = field(default_factory=list)

    @property
    def url(self) -> str:
        return self.nodes[0].url

    def store_url(self, prefix: str | None = None) -> str:
        return self.nodes[0].store_url(prefix)


@contextlib.contextmanager
def start_cluster() -> Iterator[RedisCluster]:
    reason = redis_available()
    if reason is not None:
        pytest.skip(reason)
    if shutil.which("redis-cli") is None:
        pytest.skip("redis-cli is not installed")
    with tempfile.TemporaryDirectory(prefix="vrt-cluster-") as directory:
        cluster = RedisCluster()
        try:
            for n in range(3):
                node_dir = Path(directory) / str(n)
                node_dir.mkdir()
                node = RedisServer(
                    _cluster_port(),
                    node_dir,
                    ("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"),
                )
                node.start()
                cluster.nodes.append(node)
            subprocess.run(
                [
                    "redis-cli",
                    "--cluster",
                    "create",
                    *(f"127.0.0.1:{node.port}" for node in cluster.nodes),
                    "--cluster-replicas",
                    "0",
                    "--cluster-yes",
                ],
                capture_output=True,
                check=True,
                timeout=30,
            )
            deadline = time.monotonic() + 20
            while "cluster_state:ok" not in cluster.nodes[0].command("cluster", "info"):
                if time.monotonic() > deadline:
                    raise RuntimeError("the Redis Cluster did not become ready")
                time.sleep(0.1)
            yield cluster
        finally:
            for node in cluster.nodes:
                node.stop()
