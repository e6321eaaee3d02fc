"""Fixtures for the deployment tests: ``vrt serve`` processes that share a Redis of the
run's own (``tests/conftest.py``), HAProxy in front of them (``fleet.py``), and a way to
read what the store holds of a session (:class:`StoreView`)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest
from fleet import Fleet, start_fleet

# The reliability tests' client recording and tool kit (reliability_harness.py).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "reliability"))

from support.redis_servers import RedisServer
from vrt.agents.history import HistoryEntry, decode_entry
from vrt.server.snapshot import SessionState

#: Fast heartbeats, so that a dead process is noticed in well under a second (§4.4).
SERVE_ARGS = ("--heartbeat-timeout", "5", "--resume-window", "15", "--tool-timeout", "10")


@dataclass
class StoreView:
    """What the shared store holds of sessions (read with the redis package)."""

    url: str
    prefix: str

    def _client(self) -> Any:
        import redis

        return redis.Redis.from_url(self.url)

    def meta(self, session_id: str) -> dict[str, bytes]:
        with self._client() as client:
            raw: dict[bytes, bytes] = client.hgetall(f"{self.prefix}:{{{session_id}}}")
        return {key.decode(): value for key, value in raw.items()}

    def state(self, session_id: str) -> SessionState:
        return msgspec.msgpack.decode(self.meta(session_id)["state"], type=SessionState)

    def owner(self, session_id: str) -> str:
        return self.meta(session_id)["owner"].decode()

    def history(self, session_id: str) -> list[HistoryEntry]:
        with self._client() as client:
            entries = client.lrange(f"{self.prefix}:{{{session_id}}}:log", 0, -1)
        return [decode_entry(entry) for entry in entries]

    def kept(self, session_id: str) -> list[int]:
        with self._client() as client:
            entries = client.xrange(f"{self.prefix}:{{{session_id}}}:out")
        return [int(entry_id.decode().split("-")[0]) for entry_id, _ in entries]


@pytest.fixture(scope="module")
def fleet(redis_server: RedisServer) -> Iterator[Fleet]:
    """Three ``vrt serve`` processes sharing the run's Redis, behind HAProxy."""
    with start_fleet(redis_server.store_url("fleet"), 3, args=SERVE_ARGS) as running:
        yield running


@pytest.fixture
def store_view(redis_server: RedisServer) -> StoreView:
    return StoreView(redis_server.url, "fleet")
