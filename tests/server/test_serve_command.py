"""`vrt serve` as a command: what it logs at its default level (vrt's lines about
sessions, not the WebSocket library's line per connection, which come back with
--log-level debug), and options that reach the server."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from support.processes import free_port, stop, vrt_command


@contextmanager
def serving(*options: str) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    port = free_port()
    process = subprocess.Popen(
        # The scripted agent: these are the server's logs and options, and the default
        # (voice) agent's model loading would only slow them down.
        [*vrt_command(), "serve", "--port", str(port), "--agent", "scripted", *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert process.stdout is not None
        assert "listening on" in process.stdout.readline()
        yield f"ws://127.0.0.1:{port}", process
    finally:
        stop(process)


def hello(ws: ClientConnection) -> dict[str, Any]:
    ws.send('{"v":1,"seq":0,"type":"hello"}')
    answer: dict[str, Any] = json.loads(ws.recv(timeout=10))
    return answer


def serve_one_session(*options: str) -> str:
    with serving(*options) as (url, process), connect(url) as ws:
        assert hello(ws)["type"] == "ready"
    assert process.stdout is not None
    return process.stdout.read()


def test_the_default_level_logs_sessions_not_connections() -> None:
    log = serve_one_session()
    assert "INFO vrt.server: session s_" in log
    assert "picows" not in log


def test_debug_shows_the_connections_too() -> None:
    log = serve_one_session("--log-level", "debug")
    assert "picows" in log


def test_max_sessions_refuses_a_new_session_beyond_it() -> None:
    with serving("--max-sessions", "1") as (url, _), connect(url) as first:
        assert hello(first)["type"] == "ready"
        with connect(url) as second:
            refused = hello(second)
            assert (refused["type"], refused["code"]) == ("error", "START_FAILED")
            with pytest.raises(ConnectionClosed) as closed:
                second.recv(timeout=10)
            assert closed.value.rcvd is not None
            assert closed.value.rcvd.code == 1011


def test_a_max_sessions_below_one_is_refused_with_a_clear_message() -> None:
    done = subprocess.run(
        [*vrt_command(), "serve", "--max-sessions", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "vrt serve: Invalid value for '--max-sessions' (env var: 'VRT_MAX_SESSIONS'): "
        "0: expected a whole number, 1 or more"
    ]
