"""Fixtures for the server tests: a live :class:`~vrt.server.app.VrtServer` running the
scripted agent on 127.0.0.1 (port 0) inside the test's event loop, and raw clients
that are closed before the server is.

Every test runs once per session store (``[memory]``, ``[redis]``: a
:class:`~vrt.server.redis_store.RedisSessionStore` on the run's own ``redis-server``,
keys of its own per server); ``VRT_TEST_STORES=memory`` runs one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from support import (
    Connect,
    OpenSession,
    RawClient,
    RunningServer,
    StartServer,
    start_server,
)
from support.redis_servers import store_kinds
from vrt.protocol.messages import Ready


@pytest.fixture(params=store_kinds())
def store_kind(request: pytest.FixtureRequest) -> str:
    """The session store of the servers the test starts."""
    kind: str = request.param
    return kind


@pytest.fixture
async def start(store_kind: str, request: pytest.FixtureRequest) -> AsyncIterator[StartServer]:
    """Start servers with options of :func:`support.start_server`; all closed after."""
    running: list[RunningServer] = []

    async def starter(**options: Any) -> RunningServer:
        if store_kind == "redis" and "store" not in options:
            from vrt.server.redis_store import RedisSessionStore

            redis = request.getfixturevalue("redis_server")
            options["store"] = RedisSessionStore(redis.store_url())
        server = await start_server(**options)
        running.append(server)
        return server

    yield starter
    for server in running:
        await server.close()


@pytest.fixture
async def server(start: StartServer) -> RunningServer:
    """A server with the default configuration; ``server.url`` is its URL."""
    return await start()


@pytest.fixture
async def connect(start: StartServer) -> AsyncIterator[Connect]:
    """Open raw clients; every one is closed after the test, before the servers."""
    clients: list[RawClient] = []

    async def connector(url: str, *, auto_ack: bool = False) -> RawClient:
        client = await RawClient.connect(url, auto_ack=auto_ack)
        clients.append(client)
        return client

    yield connector
    for client in clients:
        await client.close()


@pytest.fixture
def open_session(connect: Connect) -> OpenSession:
    """Connect, send ``hello`` with the given members and return the client and ``ready``."""

    async def opener(url: str, *, auto_ack: bool = False, **hello: Any) -> tuple[RawClient, Ready]:
        client = await connect(url, auto_ack=auto_ack)
        ready = await client.hello(**hello)
        return client, ready

    return opener
