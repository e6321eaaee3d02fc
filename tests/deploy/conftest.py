"""Fixtures for the deployment tests: ``vrt serve`` processes that share a Redis of the
run's own (``tests/conftest.py``), HAProxy in front of them (``fleet.py``), and a way to
read what the store holds of a session (:class:`StoreView`)."""

from __future__ import annotations

import os
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

from support.redis_servers import RedisServer, start_cluster
from vrt.agents.history import HistoryEntry
from vrt.server.redis_store import decode_kept, decode_log
from vrt.server.snapshot import SessionState

#: Fast heartbeats, so that a dead process is noticed in well under a second (§4.4).
SERVE_ARGS = ("--heartbeat-timeout", "5", "--resume-window", "15", "--tool-timeout", "10")


@dataclass
class StoreView:
    """What the shared store holds of sessions (read with the redis package)."""

    url: str
    prefix: str
    cluster: bool = False

    def _client(self) -> Any:
        import redis

        if self.cluster:
            return redis.RedisCluster.from_url(self.url)
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
            blobs = client.lrange(f"{self.prefix}:{{{session_id}}}:log", 0, -1)
        return [entry for blob in blobs for entry in decode_log(blob)]

    def kept(self, session_id: str) -> list[int]:
        """The seqs of the kept messages the store holds (acknowledged ones left out)."""
        with self._client() as client:
            entries = client.xrange(f"{self.prefix}:{{{session_id}}}:out")
        first = self.state(session_id).out_first_kept
        seqs = [seq for _, fields in entries for seq, _ in decode_kept(fields[b"m"])]
        return [seq for seq in seqs if seq >= first]


#: True when the full-size runs were asked for (as in tests/reliability).
LONG = os.environ.get("VRT_LONG") == "1"


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip the full-size runs (marked ``slow``) unless VRT_LONG=1."""
    if item.get_closest_marker("slow") is not None and not LONG:
        pytest.skip("a full-size run: set VRT_LONG=1 to run it")


@pytest.fixture(scope="module", params=["redis", "cluster"])
def fleet_store(request: pytest.FixtureRequest) -> Iterator[StoreView]:
    """The store of the fleet: the run's Redis, or a 3-master Redis Cluster."""
    if request.param == "redis":
        redis: RedisServer = request.getfixturevalue("redis_server")
        yield StoreView(redis.url, "fleet")
        return
    with start_cluster() as cluster:
        yield StoreView(cluster.url, "fleet", cluster=True)


@pytest.fixture(scope="module")
def fleet(fleet_store: StoreView) -> Iterator[Fleet]:
    """Three ``vrt serve`` processes sharing the store, behind HAProxy."""
    url = f"{fleet_store.url}?prefix={fleet_store.prefix}"
    with start_fleet(url, 3, args=SERVE_ARGS) as running:
        yield running


@pytest.fixture
def store_view(fleet_store: StoreView) -> StoreView:
    return fleet_store
