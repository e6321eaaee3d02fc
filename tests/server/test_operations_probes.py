"""The operations listener cannot be denied by other clients (docs/operations.md): a
Kubernetes liveness probe that gets no answer restarts the pod."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest

from support import start_server
from vrt.server.health import MAX_CONNECTIONS, REQUEST_TIMEOUT, OperationsListener
from vrt.server.metrics import ServerMetrics


@pytest.fixture
async def operations() -> AsyncIterator[OperationsListener]:
    running = await start_server()
    listener = OperationsListener(running.server, ServerMetrics("scripted"))
    await listener.start("127.0.0.1", 0)
    try:
        yield listener
    finally:
        await listener.close()
        await running.close()


async def _idle(url: str, count: int) -> list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    """``count`` connections that send nothing (or half a request line)."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    opened = []
    for n in range(count):
        reader, writer = await asyncio.open_connection(host, int(port))
        if n % 2:
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # and never the end
        opened.append((reader, writer))
    await asyncio.sleep(0.05)  # all accepted before the probes
    return opened


async def test_idle_connections_cannot_keep_health_probes_out(
    operations: OperationsListener,
) -> None:
    """Twice the connection cap of connections that send nothing: every probe made
    among them is answered (the oldest connection makes room for the newest)."""
    idle = await _idle(operations.url, 2 * MAX_CONNECTIONS)
    try:
        async with httpx.AsyncClient(base_url=operations.url, timeout=10.0) as http:
            for _ in range(5):
                answer = await http.get("/healthz", headers={"Connection": "close"})
                assert (answer.status_code, answer.text) == (200, "ok\n")
                idle += await _idle(operations.url, MAX_CONNECTIONS // 2)
        assert operations.cap.refused == 0
        assert operations.cap.evicted >= MAX_CONNECTIONS
    finally:
        for _, writer in idle:
            writer.close()


async def test_a_connection_that_sends_no_whole_request_is_dropped(
    operations: OperationsListener,
) -> None:
    """A connection silent, or one that never ends its request, is closed after
    REQUEST_TIMEOUT (about a second), whatever else happens."""
    assert REQUEST_TIMEOUT <= 1.0
    idle = await _idle(operations.url, 2)
    try:
        for reader, _ in idle:
            assert await asyncio.wait_for(reader.read(), 10.0) == b""  # closed by the server
        assert operations.cap.open == 0
    finally:
        for _, writer in idle:
            writer.close()
