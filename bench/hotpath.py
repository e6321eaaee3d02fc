"""The server's per-message work without sockets, for instruction counts.

Drives ``VrtServer`` with the bench agents through a ``ServerWebSocket`` whose picows
transport and frames are stand-ins (no system call, no client): what is left is the
work vrt adds above a bare picows server for each message. Run it under callgrind with
two sizes and take the difference over the difference in messages, so that start-up
cancels out::

    valgrind --tool=callgrind --callgrind-out-file=/dev/null \
        python -m bench.hotpath passthrough 2000   # and 4000

Scenarios: ``audio N`` (N input frames counted by the agent), ``passthrough N`` (N
input frames each echoed as an output frame), ``echo N`` (N ``echo hi`` turns of the
scripted agent, each a text in and a reply out), ``ping N``, ``open N`` (N new
connections, each a ``hello`` answered by ``ready`` and then dropped, in three loop
steps), ``none N`` (only the driver's N loop steps, to subtract). Each message arrives
in its own read (one loop step each), as at real-time rates. Prints the bytes written
and the writes made, and for ``echo`` the median time from the text fed in to the
write that holds the first agent ``text`` chunk (in-process, no socket).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
from time import perf_counter_ns
from typing import Any

from picows import WSMsgType

from vrt.protocol.codec import encode
from vrt.protocol.frames import FrameKind, build_frame
from vrt.protocol.messages import Hello, Ping, UserText

__all__ = ["main"]


class _Writer:
    def __init__(self) -> None:
        self.writes = 0
        self.bytes = 0
        #: perf_counter_ns() when the message being timed was fed in, or 0.
        self.fed_at = 0
        #: Feed → the first write holding an agent text chunk, ns (the echo scenario).
        self.first_chunk_ns: list[int] = []

    def write(self, data: bytes) -> None:
        self.writes += 1
        self.bytes += len(data)
        if self.fed_at and b'"type":"text"' in data[:512]:
            self.first_chunk_ns.append(perf_counter_ns() - self.fed_at)
            self.fed_at = 0

    def get_write_buffer_size(self) -> int:
        return 0

    def set_write_buffer_limits(self, high: int, low: int) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


class _Transport:
    is_close_frame_sent = False

    def __init__(self) -> None:
        self.underlying_transport = _Writer()

    def send_pong(self, payload: bytes) -> None:
        pass

    def send_close(self, *args: Any) -> None:
        pass

    def disconnect(self, graceful: bool = True) -> None:
        pass


class _Frame:
    rsv1 = rsv2 = rsv3 = False
    fin = True

    def __init__(self, kind: WSMsgType, payload: bytes) -> None:
        self.msg_type = kind
        self.payload_size = len(payload)
        self._payload = payload

    def get_payload_as_bytes(self) -> bytes:
        return self._payload

    def get_payload_as_memoryview(self) -> memoryview:
        return memoryview(self._payload)


async def _steps(n: int = 3) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def run(scenario: str, count: int) -> _Writer:
    from vrt.server import ServerConfig, VrtServer
    from vrt.server.websocket import EdgeLimits, ServerWebSocket

    from .agents import bench_agent_factory

    unlimited = float(1 << 40)
    config = ServerConfig(
        frame_rate=unlimited,
        frame_burst=unlimited,
        byte_rate=unlimited,
        byte_burst=unlimited,
        audio_rate=unlimited,
        audio_burst=unlimited,
    )
    server = VrtServer(
        bench_agent_factory(),
        config=config,
        edge=EdgeLimits(max_message_bytes=4 << 20, max_write_buffer=1 << 30),
    )
    connection = ServerWebSocket(server.config, server.edge, server._hooks)
    transport = _Transport()
    connection.on_ws_connected(transport)  # type: ignore[arg-type]
    context = None if scenario in ("echo", "ping", "none") else {"bench": "audio"}
    hello = encode(Hello(context=context) if context else Hello(), 0)
    connection.on_ws_frame(transport, _Frame(WSMsgType.TEXT, hello))  # type: ignore[arg-type]
    await _steps(10)
    assert connection.protocol.session is not None, "no session"
    seq = 0

    def text(message: Any) -> _Frame:
        nonlocal seq
        seq += 1
        return _Frame(WSMsgType.TEXT, encode(message, seq))

    if scenario == "passthrough":
        connection.on_ws_frame(transport, text(UserText(text="passthrough")))  # type: ignore[arg-type]
        await _steps()
    writer = transport.underlying_transport
    writer.writes = writer.bytes = 0
    if scenario in ("audio", "passthrough"):
        for k in range(count):
            frame = _Frame(WSMsgType.BINARY, build_frame(FrameKind.INPUT, k, bytes(960)))
            connection.on_ws_frame(transport, frame)  # type: ignore[arg-type]
            await asyncio.sleep(0)
    elif scenario == "echo":
        for _ in range(count):
            frame = text(UserText(text="echo hi"))
            writer.fed_at = perf_counter_ns()
            connection.on_ws_frame(transport, frame)  # type: ignore[arg-type]
            await asyncio.sleep(0)
    elif scenario == "open":
        for _ in range(count):
            opened = ServerWebSocket(server.config, server.edge, server._hooks)
            link = _Transport()
            opened.on_ws_connected(link)  # type: ignore[arg-type]
            opened.on_ws_frame(link, _Frame(WSMsgType.TEXT, hello))  # type: ignore[arg-type]
            await _steps(2)
            assert link.underlying_transport.writes, "no ready"
            opened.on_ws_disconnected(link)  # type: ignore[arg-type]
            await asyncio.sleep(0)
    elif scenario == "none":  # the driver's own loop steps, to subtract
        for _ in range(count):
            await asyncio.sleep(0)
    elif scenario == "ping":
        ping = _Frame(WSMsgType.TEXT, encode(Ping(), 0))
        for _ in range(count):
            connection.on_ws_frame(transport, ping)  # type: ignore[arg-type]
            await asyncio.sleep(0)
    else:
        raise SystemExit(f"unknown scenario {scenario!r}")
    await _steps()
    return writer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.hotpath")
    parser.add_argument(
        "scenario", choices=["audio", "passthrough", "echo", "ping", "open", "none"]
    )
    parser.add_argument("count", type=int)
    args = parser.parse_args(argv)
    import uvloop

    writer = uvloop.run(run(args.scenario, args.count))
    print(f"{args.scenario} {args.count}: {writer.writes} writes, {writer.bytes} bytes")
    if writer.first_chunk_ns:
        median = statistics.median(writer.first_chunk_ns) / 1000
        print(f"text in -> first write with the agent's first chunk, median: {median:.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
