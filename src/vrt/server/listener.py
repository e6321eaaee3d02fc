"""The listening socket: TCP connections are accepted up to a cap, and refused cleanly
beyond it (an HTTP 503 and a close), so that the server never runs out of file handles
whatever clients do (docs/limits.md).

The WebSocket protocol is picows's, made here rather than by ``picows.ws_create_server``
for two reasons: to count connections from the moment they are accepted (one that never
sends its upgrade request holds a file handle too), and to use the event loop's own
accept path. picows otherwise accepts through ``aiofastnet``, whose accept loop calls a
method that does not exist when ``accept()`` fails with EMFILE, and so spins and logs
without end (docs/decisions.md).
"""

from __future__ import annotations

import asyncio
import logging
import resource
import ssl
import time
from typing import Any, Final

from picows import WSAutoPingStrategy
from picows.picows import WSProtocol  # type: ignore[attr-defined]  # not in its stubs

__all__ = ["ConnectionCap", "PicowsLog", "default_max_connections", "listen"]

log = logging.getLogger("vrt.server")

#: File handles kept free of connections: the listening sockets, logs, the session
#: store, the agents' connections to their models.
HEADROOM: Final = 64
#: How often a refusal at the cap is logged, at most.
WARN_INTERVAL: Final = 10.0
_REFUSAL: Final = (
    b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nRetry-After: 5\r\n"
    b"Content-Type: text/plain\r\nContent-Length: 35\r\n\r\n"
    b"the server is at its connection cap"
)


#: picows's lines about what a client did wrong, and the level they deserve: an
#: invalid frame is the client's fault, not the server's (it logs them at ERROR); a
#: connection crossing the write high-water mark is counted in the metrics.
_CLIENT_FAULTS: Final = (
    ("WS parser error", logging.INFO),
    ("on_ws_frame raised WSProtocolError", logging.INFO),
    ("Protocol writing pause requested", logging.DEBUG),
    ("Protocol writing resume requested", logging.DEBUG),
)


class PicowsLog(logging.LoggerAdapter[logging.Logger]):
    """picows's logger, with what a client does wrong at INFO or DEBUG, never ERROR.

    Being an adapter rather than a ``Logger``, it also keeps picows from making a
    logger per connection (named after its file handle)."""

    def log(self, level: int, msg: object, *args: object, **kwargs: Any) -> None:
        if level >= logging.WARNING and isinstance(msg, str):
            for start, demoted in _CLIENT_FAULTS:
                if msg.startswith(start):
                    level = demoted
                    kwargs.pop("exc_info", None)
                    break
        if self.logger.isEnabledFor(level):
            self.logger.log(level, msg, *args, **kwargs)


def default_max_connections() -> int:
    """What the process's file-handle limit allows, with :data:`HEADROOM` to spare
    (at least 16)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    return max(16, soft - max(HEADROOM, soft // 10))


class ConnectionCap:
    """Counts open TCP connections, upgraded or not, against ``limit``.

    :param evicts: at the cap, a new connection closes the oldest one instead of being
        refused: for a listener whose requests are answered at once (the operations
        listener's probes), where the oldest connection is the one that sends nothing,
        so that idle connections can never keep a probe out.
    """

    def __init__(self, limit: int, *, evicts: bool = False) -> None:
        if limit < 1:
            raise ValueError("the connection cap must be at least 1")
        self.limit = limit
        self.evicts = evicts
        self.open = 0
        self.refused = 0
        #: Connections closed to make room (``evicts``).
        self.evicted = 0
        #: With ``evicts``: the open connections, the oldest first.
        self._members: dict[_Counted, asyncio.BaseTransport] = {}
        self._unreported = 0
        self._reported_at = -WARN_INTERVAL

    @property
    def full(self) -> bool:
        return self.open - self._evicting >= self.limit

    @property
    def _evicting(self) -> int:
        """Connections aborted to make room whose close has not yet been seen."""
        return self.open - len(self._members) if self.evicts else 0

    def joined(self, member: _Counted, transport: asyncio.BaseTransport) -> None:
        self.open += 1
        if self.evicts:
            self._members[member] = transport

    def left(self, member: _Counted) -> None:
        self.open -= 1
        self._members.pop(member, None)

    def evict_oldest(self) -> bool:
        """Abort the oldest connection (``evicts``); False when there is none."""
        oldest = next(iter(self._members), None)
        if oldest is None:
            return False
        self.evicted += 1
        transport = self._members.pop(oldest)
        if isinstance(transport, asyncio.WriteTransport):
            transport.abort()
        else:
            transport.close()
        return True

    def refusal(self) -> None:
        self.refused += 1
        self._unreported += 1
        now = time.monotonic()
        if now - self._reported_at >= WARN_INTERVAL:
            log.warning(
                "at the cap of %d connections: refused %d connection(s)",
                self.limit,
                self._unreported,
            )
            self._reported_at, self._unreported = now, 0


class _Counted(WSProtocol):
    """picows's server protocol, counted from accept to close."""

    cap: ConnectionCap

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.cap.joined(self, transport)
        super().connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.cap.left(self)
        super().connection_lost(exc)


class _Refused(asyncio.Protocol):
    """A connection beyond the cap: 503 and close, without reading it."""

    def __init__(self, cap: ConnectionCap) -> None:
        self.cap = cap

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.cap.refusal()
        if isinstance(transport, asyncio.WriteTransport):
            transport.write(_REFUSAL)
        transport.close()


async def listen(
    listener_factory: Any,
    host: str,
    port: int,
    *,
    cap: ConnectionCap,
    ssl_context: ssl.SSLContext | None,
    max_frame_size: int,
    handshake_timeout: float,
    read_buffer_size: int,
    reuse_port: bool = False,
) -> asyncio.Server:
    """Listen on ``host``:``port``; every accepted connection speaks WebSocket through
    picows with ``listener_factory`` choosing its listener (as ``ws_create_server``)."""
    logger = PicowsLog(logging.getLogger("picows.server"))

    def protocol() -> asyncio.BaseProtocol:
        if cap.full and not (cap.evicts and cap.evict_oldest()):
            return _Refused(cap)
        made = _Counted(
            None,  # host and port: a server's protocol has none
            None,  # path
            False,  # client side
            listener_factory,
            logger,
            True,  # disconnect when a listener raises
            handshake_timeout,
            False,  # auto ping: the protocol's own heartbeat counts (§4.4)
            20.0,
            20.0,
            WSAutoPingStrategy.PING_WHEN_IDLE,
            False,  # auto pong: pings are answered by the edge, so they count
            max_frame_size,
            None,  # extra headers
            read_buffer_size,
        )
        made.cap = cap
        return made

    loop = asyncio.get_running_loop()
    return await loop.create_server(
        protocol,
        host,
        port,
        ssl=ssl_context,
        ssl_handshake_timeout=handshake_timeout if ssl_context is not None else None,
        reuse_port=reuse_port or None,
    )
