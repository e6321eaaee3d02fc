"""What `vrt serve` logs at its default level: vrt's lines about sessions, not the
WebSocket library's line per connection (those come back with --log-level debug)."""

from __future__ import annotations

import subprocess

from websockets.sync.client import connect

from support.processes import free_port, stop, vrt_command


def serve_one_session(*options: str) -> str:
    port = free_port()
    process = subprocess.Popen(
        [*vrt_command(), "serve", "--port", str(port), *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert process.stdout is not None
        assert "listening on" in process.stdout.readline()
        with connect(f"ws://127.0.0.1:{port}") as ws:
            ws.send('{"v":1,"seq":0,"type":"hello"}')
            assert '"ready"' in str(ws.recv(timeout=10))
    finally:
        stop(process)
    assert process.stdout is not None
    return process.stdout.read()


def test_the_default_level_logs_sessions_not_connections() -> None:
    log = serve_one_session()
    assert "INFO vrt.server: session s_" in log
    assert "picows" not in log


def test_debug_shows_the_connections_too() -> None:
    log = serve_one_session("--log-level", "debug")
    assert "picows" in log
