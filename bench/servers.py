"""Servers under test, one per process: ``python -m bench.servers KIND``.

``vrt``
    ``VrtServer`` on uvloop with the bench agent factory (``bench.agents``): the stock
    scripted agent, or the bench audio agent for ``{"bench": "audio"}`` contexts.
``picows``
    The bare floor on the same WebSocket library as vrt's server (picows, uvloop). A
    text frame that starts with ``{`` is echoed (vRT ``ack`` frames are dropped; an
    ``interrupt`` while audio streams stops it and is answered with an ``interrupted``
    frame); ASCII commands drive the other baselines with frames of the same sizes
    and shapes that vrt sends (see :class:`BarePicows`).
``websockets``
    A bare ``websockets`` echo (``compression=None``, no pings), on uvloop.

Each prints ``READY PORT`` when it listens, exits on SIGTERM/SIGINT or after
``--max-life`` seconds, dies with its parent and pins itself to ``--cpu``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from typing import Any

from picows import WSFrame, WSListener, WSMsgType, WSTransport, ws_create_server

from vrt.protocol.codec import encode
from vrt.protocol.ids import new_id
from vrt.protocol.messages import (
    PCM16_24K,
    AgentText,
    AudioStart,
    Interrupted,
    Ready,
    TurnState,
)

from .procs import HOST, die_with_parent, pin, raise_nofile

TEXT, BINARY, CLOSE = WSMsgType.TEXT, WSMsgType.BINARY, WSMsgType.CLOSE

TURN_ID = new_id("t_")
ITEM_ID = new_id("i_")
SESSION_ID = new_id("s_")
#: An output audio frame as vrt sends it: kind 2, seq, 960 bytes of pcm16.
AUDIO_FRAME = b"\x02\x00\x00\x00\x00" + bytes(960)
YIELD_EVERY = 64


def chunk_bytes(seq: int, k: int) -> bytes:
    """The bytes vrt sends for scripted chunk ``k`` at ``seq`` (the same encoder)."""
    return encode(AgentText(text=f"chunk {k}", turn_id=TURN_ID), seq)


_CHUNK_TEMPLATE = (
    b'{"v":1,"seq":%d,"type":"text","text":"chunk %d","turnId":"' + TURN_ID.encode() + b'"}'
)
assert chunk_bytes(7, 3) == _CHUNK_TEMPLATE % (7, 3)


def idle_bytes(seq: int) -> bytes:
    return encode(TurnState(turn_id=TURN_ID, epoch=1, state="idle"), seq)


def ready_bytes() -> bytes:
    return encode(Ready(session_id=SESSION_ID, input=PCM16_24K, output=PCM16_24K), 0)


def count_bytes(seq: int, count: int) -> bytes:
    return encode(AgentText(text=f"count {count}", turn_id=TURN_ID), seq)


READY = ready_bytes()
REPLAY = [chunk_bytes(k, k) for k in range(1, 1025)]

# --------------------------------------------------------------------------- bare picows


class BarePicows(WSListener):
    """The bare floor. Text frames starting with ``{`` are echoed (acks dropped).
    ASCII commands:

    ``PUSH N``      N vRT chunk frames written without yielding, then an idle frame
    ``FLOOD N``     N 965-byte binary frames, yielding every 64 and honouring
                    back-pressure, then an idle frame
    ``COUNT``       a chunk frame ``count K``, K the binary frames received, and idle
    ``REPLAY N``    a ready frame and N chunk frames (what a resume sends)
    ``SPEAK``       binary frames every 20 ms until an ``interrupt`` frame arrives,
                    which is answered with ``interrupted``
    ``PASS``        from now on echo binary frames (audio passthrough)
    """

    def __init__(self) -> None:
        super().__init__()
        self.tr: WSTransport | None = None
        self.count = 0
        self.seq = 0
        self.passthrough = False
        self.paused = False
        self._resume: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None

    def on_ws_connected(self, transport: WSTransport) -> None:
        self.tr = transport

    def on_ws_disconnected(self, transport: WSTransport) -> None:
        self._stop()

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        if self._resume is not None and not self._resume.done():
            self._resume.set_result(None)

    def _stop(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
        self._task = None

    def _next_seq(self) -> int:
        self.seq += 1
        return self.seq

    def on_ws_frame(self, transport: WSTransport, frame: WSFrame) -> None:
        kind = frame.msg_type
        if kind == BINARY:
            self.count += 1
            if self.passthrough:
                transport.send(BINARY, frame.get_payload_as_bytes())
            return
        if kind == CLOSE:
            transport.send_close(frame.get_close_code(), frame.get_close_message())
            transport.disconnect()
            return
        if kind != TEXT:
            return
        data = frame.get_payload_as_bytes()
        if data[:1] == b"{":
            if data.startswith(b'{"v":1,"seq":0,"type":"ack"'):
                return
            if self._task is not None and b'"type":"interrupt"' in data:
                self._stop()
                transport.send(TEXT, encode(Interrupted(epoch=1), self._next_seq()))
                return
            transport.send(TEXT, data)
            return
        command, _, argument = data.partition(b" ")
        loop = asyncio.get_running_loop()
        if command == b"PUSH":
            send, template, seq = transport.send, _CHUNK_TEMPLATE, self.seq
            for k in range(1, int(argument) + 1):
                send(TEXT, template % (seq + k, k))
            self.seq = seq + int(argument)
            send(TEXT, idle_bytes(self._next_seq()))
        elif command == b"FLOOD":
            self._stop()
            self._task = loop.create_task(self._flood(int(argument)))
        elif command == b"COUNT":  # a chunk and the turn's idle, as vrt answers count?
            transport.send(TEXT, count_bytes(self._next_seq(), self.count))
            transport.send(TEXT, idle_bytes(self._next_seq()))
        elif command == b"REPLAY":  # kept bytes, as a vrt session resends them
            transport.send(TEXT, READY)
            send = transport.send
            for data in REPLAY[: int(argument)]:
                send(TEXT, data)
        elif command == b"SPEAK":
            self._stop()
            self._task = loop.create_task(self._speak())
        elif command == b"PASS":
            self.passthrough = True

    async def _flood(self, count: int) -> None:
        tr = self.tr
        assert tr is not None
        send = tr.send
        loop = asyncio.get_running_loop()
        send(TEXT, encode(AudioStart(item_id=ITEM_ID, turn_id=TURN_ID, epoch=1), 0))
        for k in range(1, count + 1):
            send(BINARY, AUDIO_FRAME)
            if k % YIELD_EVERY == 0:
                await asyncio.sleep(0)
            while self.paused:
                self._resume = loop.create_future()
                await self._resume
                if tr.is_disconnected:
                    return
        send(TEXT, idle_bytes(self._next_seq()))

    async def _speak(self) -> None:
        tr = self.tr
        assert tr is not None
        loop = asyncio.get_running_loop()
        start = loop.time()
        for k in range(500):  # at most 10 s, as `speak 10000`
            delay = start + k * 0.02 - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            tr.send(BINARY, AUDIO_FRAME)


async def serve_picows(stop: asyncio.Event) -> None:
    server = await ws_create_server(
        lambda _request: BarePicows(), HOST, 0, enable_auto_ping=False, read_buffer_init_size=4096
    )
    print(f"READY {server.sockets[0].getsockname()[1]}", flush=True)
    try:
        await stop.wait()
    finally:
        server.close()


# --------------------------------------------------------------------------- websockets


async def serve_websockets(stop: asyncio.Event) -> None:
    from websockets.asyncio.server import ServerConnection, serve
    from websockets.exceptions import ConnectionClosed

    async def handler(ws: ServerConnection) -> None:
        try:
            async for message in ws:
                await ws.send(message)
        except ConnectionClosed:
            pass

    async with serve(
        handler, HOST, 0, compression=None, ping_interval=None, max_queue=64
    ) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        print(f"READY {port}", flush=True)
        await stop.wait()


# --------------------------------------------------------------------------- vrt


async def serve_vrt(stop: asyncio.Event, experiments: list[str], store: str = "") -> None:
    from vrt.server import ServerConfig, VrtServer, app
    from vrt.server.gc_tuning import tune_for_serving
    from vrt.server.websocket import EdgeLimits, ServerWebSocket

    from . import experiments as bench_experiments
    from .agents import bench_agent_factory

    bench_experiments.apply(experiments)  # prototypes of proposed src changes; none by default

    class BenchConnection(ServerWebSocket):
        """vrt's connection plus a future the flood agent awaits while paused."""

        resumed: asyncio.Future[None] | None = None

        def resume_writing(self) -> None:
            super().resume_writing()
            if self.resumed is not None and not self.resumed.done():
                self.resumed.set_result(None)

    # The server builds its connections through this module global; the bench server
    # swaps in the subclass (this process only) so the flood agent can await resume.
    app.ServerWebSocket = BenchConnection  # type: ignore[misc]
    server: VrtServer

    def wait_writable(session_id: str) -> asyncio.Future[None] | None:
        hosted = server.sessions.get(session_id)
        connection = hosted.connection if hosted is not None else None
        if not isinstance(connection, BenchConnection) or not connection._paused:
            return None
        if connection.closed:
            return None
        if connection.resumed is None or connection.resumed.done():
            connection.resumed = connection.loop.create_future()
        return connection.resumed

    # The throughput scenarios push far beyond real time on purpose: lift the per-
    # connection read budget and the unread-output bound that defend against hostile
    # clients (docs/limits.md); their checks still run on every frame and write.
    unlimited = float(1 << 40)
    config = ServerConfig(
        frame_rate=unlimited,
        frame_burst=unlimited,
        byte_rate=unlimited,
        byte_burst=unlimited,
        audio_rate=unlimited,  # audio by its duration: real time for an honest client
        audio_burst=unlimited,
    )
    edge = EdgeLimits(max_message_bytes=4 << 20, max_write_buffer=1 << 30)
    session_store = None
    if store:  # sessions in Redis (bench/store_bench.py)
        from vrt.server.redis_store import RedisSessionStore

        session_store = RedisSessionStore(store)
    operations = None
    observer = None
    if "metrics" in experiments:  # as vrt serve --metrics runs
        from vrt.server.health import OperationsListener
        from vrt.server.metrics import ServerMetrics
        from vrt.server.telemetry import Telemetry

        metrics = ServerMetrics("bench")
        observer = Telemetry(metrics)
    server = VrtServer(
        bench_agent_factory(wait_writable),
        config=config,
        edge=edge,
        store=session_store,
        observer=observer,
    )
    if observer is not None:
        operations = OperationsListener(server, metrics)
    url = await server.start(HOST, 0)
    if operations is not None:
        await operations.start(HOST, 0)
    if "python-gc" not in experiments:
        tune_for_serving()  # as vrt serve does
    print(f"READY {url.rsplit(':', 1)[1]}", flush=True)
    try:
        await stop.wait()
    finally:
        if operations is not None:
            await operations.close()
        await server.close()


# --------------------------------------------------------------------------- main


async def _main(args: argparse.Namespace) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.call_later(args.max_life, stop.set)
    if args.kind == "vrt":
        await serve_vrt(stop, [e for e in args.experiment.split(",") if e], args.store)
    elif args.kind == "picows":
        await serve_picows(stop)
    else:
        await serve_websockets(stop)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.servers")
    ap.add_argument("kind", choices=("vrt", "picows", "websockets"))
    ap.add_argument("--max-life", type=float, default=600.0)
    ap.add_argument("--cpu", type=int, default=-1)
    ap.add_argument("--experiment", default="", help="comma-separated, see bench.experiments")
    ap.add_argument("--store", default="", help="vrt only: a redis:// session store URL")
    args = ap.parse_args(argv)
    die_with_parent()
    if args.cpu >= 0:
        pin(args.cpu)
    raise_nofile()
    import uvloop

    kwargs: dict[str, Any] = {"loop_factory": uvloop.new_event_loop}
    profile = os.environ.get("BENCH_PROFILE")  # a path: cProfile the server into it
    profiler = None
    if profile and args.kind == "vrt":
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    try:
        with asyncio.Runner(**kwargs) as runner:
            runner.run(_main(args))
    finally:
        if profiler is not None and profile:
            profiler.disable()
            profiler.dump_stats(profile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
