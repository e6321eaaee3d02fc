"""The operations listener: ``/metrics``, ``/healthz`` and ``/readyz`` on their own
address (``vrt serve --metrics HOST:PORT``), apart from the clients' port so that it
can stay private (docs/operations.md).

* ``GET /metrics``: every metric of :mod:`vrt.server.metrics`, in the Prometheus text
  format (or OpenMetrics when the scraper asks for it).
* ``GET /healthz``: 200 while the process's event loop answers (liveness): a loop
  stuck in a callback cannot answer, and the probe times out.
* ``GET /readyz``: 200 while the server takes new sessions (readiness): it listens, is
  not draining (a SIGTERM turns it to 503 at once, so the load balancer stops sending
  clients before the server closes), and its session store answers.

Requests are answered by the event loop through picows's HTTP parser, one per
connection, which closes once answered. No client can keep a probe out: a connection
that has not sent its whole request within :data:`REQUEST_TIMEOUT` is closed, and at
:data:`MAX_CONNECTIONS` open connections a new one closes the oldest rather than being
refused (``ConnectionCap(evicts=True)``; docs/operations.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final

from picows import WSUpgradeRequest, WSUpgradeResponse, WSUpgradeResponseWithListener

from ..settings import MAX_PORT
from .listener import ConnectionCap, listen
from .metrics import LoopLagProbe, ServerMetrics, make_registry

if TYPE_CHECKING:
    from .app import VrtServer

__all__ = [
    "MAX_CONNECTIONS",
    "REQUEST_TIMEOUT",
    "STORE_PING_INTERVAL",
    "OperationsListener",
    "parse_address",
]

log = logging.getLogger("vrt.server")

#: Connections the operations listener takes at once (scrapers and probes).
MAX_CONNECTIONS: Final = 64
#: How long a connection may take to send its request (a probe sends it at once).
REQUEST_TIMEOUT: Final = 1.0
#: How often a session store that can be pinged is (the Redis store); readiness
#: turns false when the last ping failed or is older than two intervals.
STORE_PING_INTERVAL: Final = 2.0
_TEXT: Final = {"Content-Type": "text/plain; charset=utf-8", "Cache-Control": "no-store"}
_INDEX: Final = b"vrt operations endpoints: /metrics /healthz /readyz\n"


def parse_address(value: str) -> tuple[str, int]:
    """``HOST:PORT``, ``[IPv6]:PORT`` or ``:PORT`` (loopback) as (host, port)."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or int(port) > MAX_PORT:
        raise ValueError(f"{value!r} is not HOST:PORT")
    host = host.strip("[]") or "127.0.0.1"
    return host, int(port)


class OperationsListener:
    """Serves the operations endpoints of ``server``, with ``metrics`` on ``/metrics``."""

    def __init__(self, server: VrtServer, metrics: ServerMetrics) -> None:
        self.server = server
        self.metrics = metrics
        self.registry = make_registry(metrics)
        self.url = ""
        self.lag = LoopLagProbe(metrics.loop_lag)
        metrics.bind(server)
        metrics.ready = lambda: self.ready()[0]
        self.cap = ConnectionCap(MAX_CONNECTIONS, evicts=True)
        self._listener: asyncio.Server | None = None
        self._store_ok = True
        self._store_checked = 0.0
        self._pinger: asyncio.Task[None] | None = None

    async def start(self, host: str, port: int) -> str:
        """Listen; returns the base URL (``http://HOST:PORT``)."""
        self._listener = await listen(
            self._respond,
            host,
            port,
            cap=self.cap,
            ssl_context=None,
            max_frame_size=1024,
            handshake_timeout=REQUEST_TIMEOUT,
            read_buffer_size=2048,
        )
        self.lag.start()
        ping = getattr(self.server.store, "ping", None)
        if callable(ping):
            self._pinger = asyncio.get_running_loop().create_task(self._ping_store(ping))
        bound = self._listener.sockets[0].getsockname()[1]
        shown = f"[{host}]" if ":" in host else host
        self.url = f"http://{shown}:{bound}"
        return self.url

    async def close(self) -> None:
        self.lag.stop()
        if self._pinger is not None:
            self._pinger.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._pinger
        if self._listener is not None:
            self._listener.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._listener.wait_closed(), 2.0)

    async def _ping_store(self, ping: Callable[[], Awaitable[Any]]) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                answer = await asyncio.wait_for(ping(), STORE_PING_INTERVAL)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if self._store_ok:
                    log.warning("the session store does not answer: %s", exc)
                self._store_ok = False
            else:
                if not self._store_ok and answer is not False:
                    log.info("the session store answers again")
                self._store_ok = answer is not False
            self._store_checked = loop.time()
            await asyncio.sleep(STORE_PING_INTERVAL)

    def ready(self) -> tuple[bool, str]:
        """Whether the server takes new sessions, and why not."""
        server = self.server
        if server.draining:
            return False, "draining: the server is shutting down"
        if not server.url:
            return False, "not listening yet"
        if self._pinger is not None:
            stale = asyncio.get_running_loop().time() - self._store_checked
            if not self._store_ok or stale > 2 * STORE_PING_INTERVAL + 1:
                return False, "the session store does not answer"
        return True, "ready"

    def _respond(self, request: WSUpgradeRequest) -> WSUpgradeResponseWithListener:
        # picows answers anything but an HTTP/1.1 GET with 400 before this is called.
        path = request.path.split(b"?", 1)[0]
        if path == b"/metrics":
            from prometheus_client.exposition import choose_encoder

            encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
            return _answer(
                WSUpgradeResponse.create_ok_response(
                    encoder(self.registry), {"Content-Type": content_type}
                )
            )
        if path == b"/healthz":
            return _answer(WSUpgradeResponse.create_ok_response(b"ok\n", _TEXT))
        if path == b"/readyz":
            ready, why = self.ready()
            body = f"{why}\n".encode()
            if ready:
                return _answer(WSUpgradeResponse.create_ok_response(body, _TEXT))
            return _answer(WSUpgradeResponse.create_error_response(503, body, _TEXT))
        if path == b"/":
            return _answer(WSUpgradeResponse.create_ok_response(_INDEX, _TEXT))
        return _answer(WSUpgradeResponse.create_error_response(404, b"not found\n", _TEXT))


def _answer(response: WSUpgradeResponse) -> WSUpgradeResponseWithListener:
    return WSUpgradeResponseWithListener(response, None)
