"""Servers and peers in processes of their own.

A measurement of one session's round trip while another peer misbehaves means
something only if the server, the misbehaving peer and the measuring client do not
share an event loop: in one process the flooder's own sending would stall the
measurement as much as the server could.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent.parent


def vrt_command() -> list[str]:
    """The installed ``vrt`` command (skips the test when there is none)."""
    script = Path(sys.executable).with_name("vrt")
    if script.exists():
        return [str(script)]
    found = shutil.which("vrt")
    if found is None:
        pytest.skip("the vrt command is not installed")
    return [found]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def vrt_serve(*options: str, default_agent: bool = False) -> Iterator[str]:
    """``vrt serve`` (the scripted agent, or with ``default_agent`` the default one;
    uvloop where installed) on a free port; yields its URL once it listens, and stops it
    afterwards."""
    port = free_port()
    agent = () if default_agent else ("--agent", "scripted")
    process = subprocess.Popen(
        [*vrt_command(), "serve", "--port", str(port), "--log-level", "warning", *agent, *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert "listening on" in line, line
        yield f"ws://127.0.0.1:{port}"
    finally:
        stop(process)


def start_python(module: str, *args: str) -> subprocess.Popen[str]:
    """``python -m module args`` with the test support importable, output captured."""
    path = os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, PYTHONPATH=path)
    return subprocess.Popen(
        [sys.executable, "-m", module, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )


def run_repo_module(module: str, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """``python -m module args`` from the repository's root (``bench``, ``load``), no
    standard input, output captured; its exit code is the caller's to check."""
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=TESTS.parent,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def stop(process: subprocess.Popen[str]) -> None:
    process.terminate()
    try:
        process.wait(5)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
