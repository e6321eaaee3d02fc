"""The C example against the Redis-backed deployment (docs/deploy.md): two ``vrt serve``
processes sharing one Redis behind HAProxy. The process that owns the session is killed
(``kill -9``, no goodbye) while a reply streams, after a tool call and a dropped
connection; the C client resumes on the other process, and every sequenced message
reaches it exactly once, in order (§4.3, §5.4).

The fleet comes from tests/deploy/fleet.py, the C build from conftest.py; it skips as
the deployment tests do without redis-server or haproxy.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from support.redis_servers import RedisServer

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "deploy"))
#: Loaded by name: tests/deploy is a folder of its own for the type checker.
fleet_module: Any = importlib.import_module("fleet")

SERVE_ARGS = ("--heartbeat-timeout", "5", "--resume-window", "15")


def owner_worker(redis_url: str, prefix: str, session_id: str) -> str:
    """The worker that owns the session, as the store says (its lease)."""
    import redis

    with redis.Redis.from_url(redis_url) as client:
        owner: bytes = client.hget(f"{prefix}:{{{session_id}}}", "owner")
    return owner.decode().partition(":")[0]


def test_kill_the_owner_mid_reply(build: Path, redis_server: RedisServer) -> None:
    reason = fleet_module.haproxy_available()
    if reason is not None:
        pytest.skip(reason)
    store = f"{redis_server.url}?prefix=cfleet"
    with fleet_module.start_fleet(store, 2, args=SERVE_ARGS) as fleet:
        chat = subprocess.Popen(
            [
                str(build / "vrt-c-chat"),
                fleet.url,
                "echo before",
                'call device.status {"n":1}',
                "/sync",
                "/drop",
                "echo mid",
                "burst 3000",
                "echo after",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert chat.stdout is not None
        assert chat.stderr is not None
        opened = chat.stderr.readline()
        assert opened.startswith("opened session "), opened
        session_id = opened.split()[-1]
        head = [chat.stdout.readline() for _ in range(4)]
        assert head == [
            "agent: before\n",
            'tool: device.status {"n":1}\n',
            'agent: result ok {"battery":87,"asked":{"n":1}}\n',
            "agent: mid\n",
        ]
        # The burst is requested once "mid" is answered (after the dropped connection's
        # resume): kill its owner now.
        time.sleep(0.05)
        owner = owner_worker(redis_server.url, "cfleet", session_id)
        victim = next(server for server in fleet.servers if server.worker == owner)
        victim.kill()
        out, err = chat.communicate(timeout=60)
    assert chat.returncode == 0, err
    lines = out.splitlines()
    burst = " ".join(f"chunk {n}" for n in range(1, 3001))
    # The burst's turn was cut short by the kill (TURN_CUT_SHORT) or had finished: either
    # way what arrived is a prefix of it, each chunk once and in order; then the next reply.
    assert len(lines) == 2, lines
    assert lines[1] == "agent: after"
    reply = lines[0].removeprefix("agent: ")
    assert burst.startswith(reply)
    assert reply == "" or reply.endswith(f"chunk {reply.count('chunk')}")
    assert err.count("resumed session " + session_id) >= 2  # the drop, then the kill
