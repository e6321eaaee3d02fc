"""Where the first chunk's time goes with the Redis session store: timestamps taken in
the server process, on one ``echo hi`` turn after another.

    python -m bench.store_trace                # 200 warm-up turns, then 1,000 traced
    python -m bench.store_trace --turns 300
    python -m bench.store_trace --paths        # the cost of one write, by call path
    python -m bench.store_trace --unix         # the server reaches Redis by a unix socket

The bench's vrt server (``bench.servers``, CPU 0) runs with some of its methods and
redis-py's wrapped, each wrapper noting the time since the turn's text frame was read
(``perf_counter_ns``): the journal's gate (``admit``, first and last of the turn), the
batch, the store's write, and whichever of the write's paths the code has (redis-py's
pipeline: ``execute``, ``pack_commands``, ``send_packed_command``, ``read_response``;
the store's own connection: ``_link_send``, ``_command``), the first bytes of Redis's
reply (hiredis ``read_from_socket``), the write's outcome, and the frames' write to the
socket (``write_items``). Each row is the median over the traced turns of the first time
the point was reached (``admit_last`` and ``read_end``: the last). The wrappers add some
time of their own, a few microseconds each. Redis (the bench's own, CPU 1) reports its
``EVALSHA`` time (``INFO commandstats``) at the end.

``--paths``: one write of the turn's size (the write script, a 4 KB state, five kept
messages, a log), sent one after another in a loop with the client on CPU 0, Redis on
CPU 1: redis-py's pipeline, ``Redis.evalsha``, a redis-py ``Connection`` with
``send_packed_command`` / ``read_response``, the same connection's stream written at
once (what the store does), a bare uvloop protocol (over TCP and over a unix socket),
and ``PING`` each way; medians.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .procs import CLIENT_CPU, ROOT, ServerProcess, install_cleanup, pin

_now = time.perf_counter_ns
_turns: list[dict[str, int]] = []
_state: dict[str, Any] = {"t0": 0, "turn": None}


def _mark(name: str, first: bool = True) -> None:
    turn = _state["turn"]
    if turn is None or (first and name in turn):
        return
    turn[name] = _now() - _state["t0"]


def _wrap(owner: Any, name: str, before: str, after: str = "", *, last: bool = False) -> None:
    """Wrap ``owner.name`` (when it exists) to mark ``before`` and ``after`` it."""
    original = getattr(owner, name, None)
    if original is None:
        return
    if asyncio.iscoroutinefunction(original):

        async def wrapped_async(*args: Any, **kwargs: Any) -> Any:
            _mark(before)
            result = await original(*args, **kwargs)
            if after:
                _mark(after, first=not last)
            return result

        setattr(owner, name, wrapped_async)
    else:

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            _mark(before, first=not last)
            result = original(*args, **kwargs)
            if after:
                _mark(after)
            return result

        setattr(owner, name, wrapped)


def _install() -> None:
    import redis.asyncio.client as rclient
    import redis.asyncio.connection as rconn
    from redis._parsers import hiredis

    from vrt.server import journal, redis_store, websocket

    connection = websocket.ServerWebSocket
    on_frame = connection.on_ws_frame

    def on_ws_frame(self: Any, transport: Any, frame: Any) -> None:
        if frame.msg_type is websocket._TEXT and b"echo hi" in frame.get_payload_as_bytes():
            _state["t0"] = _now()
            _state["turn"] = {}
            _turns.append(_state["turn"])
            on_frame(self, transport, frame)
            _mark("step_end")
            return
        on_frame(self, transport, frame)

    connection.on_ws_frame = on_ws_frame  # type: ignore[method-assign]
    _wrap(connection, "write_items", "write_items")
    _wrap(journal.SessionJournal, "admit", "admit_first")
    _wrap(journal.SessionJournal, "admit", "admit_last", last=True)
    _wrap(journal.SessionJournal, "_batch", "batch_start", "batch_end")
    store = redis_store.RedisSessionStore
    write = store.write

    def store_write(self: Any, batch: Any) -> Any:
        _mark("store_write")
        future = write(self, batch)
        future.add_done_callback(lambda _: _mark("outcome"))
        return future

    store.write = store_write  # type: ignore[method-assign]
    _wrap(store, "_link_send", "link_send", "link_sent")
    _wrap(rconn.AbstractConnection, "pack_command", "pack_start", "pack_end")
    _wrap(rclient.Pipeline, "execute", "execute_start", "execute_end")
    _wrap(rconn.AbstractConnection, "pack_commands", "pack_start", "pack_end")
    _wrap(rconn.AbstractConnection, "send_packed_command", "send_start", "send_end")
    _wrap(rconn.AbstractConnection, "read_response", "read_start", "read_end", last=True)
    _wrap(hiredis._AsyncHiredisParser, "read_from_socket", "reply_bytes_start", "reply_bytes")


def _serve(argv: list[str]) -> int:
    """The traced server: ``bench.servers`` with the wrappers (its arguments); the turns
    go to ``BENCH_TRACE_OUT`` when it stops."""
    from .servers import main

    _install()
    try:
        return main(argv)
    finally:
        Path(os.environ["BENCH_TRACE_OUT"]).write_text(json.dumps(_turns))


async def _drive(url: str, pid: int, warmup: int, turns: int) -> dict[str, Any]:
    from .scenarios import Target, control_rtt

    cfg = {"timeout": 30.0, "rtt_warmup": warmup, "rtt_n": turns, "ack_n": 0}
    return await control_rtt(Target("vrt", url, pid), cfg)


def _trace(warmup: int, turns: int, *, unix: bool = False) -> None:
    import uvloop

    from .store_bench import Redis

    redis = Redis(unix=unix)
    out = Path(tempfile.mkdtemp(prefix="vrt-store-trace-")) / "turns.json"
    os.environ["BENCH_TRACE_OUT"] = str(out)
    os.environ["BENCH_TRACE_SERVE"] = "1"  # for the server process only: main() ran
    server = ServerProcess(
        "vrt", max_life=600, extra=["--store", redis.url("trace")], module="bench.store_trace"
    )
    try:
        redis.cli("config", "resetstat")
        client = uvloop.run(_drive(server.url, server.pid, warmup, turns))
    finally:
        server.stop()
        stats = redis.cli("info", "commandstats")
        redis.stop()
    traced = json.loads(out.read_text())[warmup:]
    names = {name for turn in traced for name in turn}
    rows = sorted(
        (statistics.median([t[n] for t in traced if n in t]), n, sum(n in t for t in traced))
        for n in names
    )
    print(f"text → first chunk p50 at the client: {client['chunk_us_p50']:.1f} µs")
    print(f"{'point (µs from the frame read)':34} {'p50':>8} {'turns':>6}")
    for value, name, count in rows:
        print(f"{name:34} {value / 1000:8.1f} {count:6}")
    for line in stats.splitlines():
        if line.startswith("cmdstat_evalsha"):
            print("Redis:", line)


async def _paths(port: int, socket_path: str, n: int) -> None:
    import redis.asyncio as aredis

    from vrt.server import redis_store

    client = aredis.Redis(host="127.0.0.1", port=port)
    keys = ("vrt:{s}", "vrt:{s}:out", "vrt:{s}:log")
    token = "w:1"
    await client.hset(keys[0], mapping={"owner": token, "fence": 1, "outlast": 0})
    loaded: Any = await client.script_load(redis_store._WRITE)
    sha = loaded.decode() if isinstance(loaded, bytes) else str(loaded)
    state, message = os.urandom(2048).hex().encode(), b"x" * 100
    seq = [0]

    def args() -> list[Any]:
        seq[0] += 5
        kept = [(seq[0] - 4 + i, message) for i in range(5)]
        log = [{"kind": "user", "text": "echo hi"}, {"kind": "agent", "text": "hi"}]
        return [
            token, 60_000, state, b"", max(1, seq[0] - 6), "0", 256 << 10, "", seq[0],
            redis_store._MSGPACK.encode(kept), redis_store._MSGPACK.encode(log),
        ]  # fmt: skip

    async def pipeline() -> Any:
        pipe = client.pipeline(transaction=False)
        pipe.evalsha(sha, 3, *keys, *args())
        return await pipe.execute(raise_on_error=False)

    async def evalsha() -> Any:
        return await client.evalsha(sha, 3, *keys, *args())

    conn = client.connection_pool.make_connection()
    await conn.connect()

    async def connection() -> Any:
        command = conn.pack_command("EVALSHA", sha, 3, *keys, *args())
        await conn.send_packed_command(command, check_health=False)
        return await conn.read_response()

    async def link() -> Any:
        conn._writer.writelines(conn.pack_command("EVALSHA", sha, 3, *keys, *args()))
        return await conn.read_response()

    async def connection_ping() -> Any:
        await conn.send_packed_command(b"*1\r\n$4\r\nPING\r\n", check_health=False)
        return await conn.read_response()

    loop = asyncio.get_running_loop()

    class Bare(asyncio.Protocol):
        reply: asyncio.Future[bytes] | None = None

        def data_received(self, data: bytes) -> None:
            if self.reply is not None and not self.reply.done():
                self.reply.set_result(data)

    transport, bare = await loop.create_connection(Bare, "127.0.0.1", port)
    transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    unix_transport, unix_bare = await loop.create_unix_connection(Bare, socket_path)

    def bare_call(data: bytes, over: Any = bare, on: Any = transport) -> asyncio.Future[bytes]:
        over.reply = loop.create_future()
        on.write(data)
        return over.reply

    async def bare_evalsha() -> Any:
        return await bare_call(b"".join(conn.pack_command("EVALSHA", sha, 3, *keys, *args())))

    async def bare_ping() -> Any:
        return await bare_call(b"*1\r\n$4\r\nPING\r\n")

    async def unix_evalsha() -> Any:
        data = b"".join(conn.pack_command("EVALSHA", sha, 3, *keys, *args()))
        return await bare_call(data, unix_bare, unix_transport)

    async def unix_ping() -> Any:
        return await bare_call(b"*1\r\n$4\r\nPING\r\n", unix_bare, unix_transport)

    async def ping() -> Any:
        return await client.ping()

    paths = {
        "redis-py pipeline, EVALSHA": pipeline,
        "Redis.evalsha": evalsha,
        "Connection send/read, EVALSHA": connection,
        "its stream written at once (link)": link,
        "bare uvloop protocol, EVALSHA": bare_evalsha,
        "Redis.ping": ping,
        "Connection send/read, PING": connection_ping,
        "bare uvloop protocol, PING": bare_ping,
        "bare uvloop, unix socket, EVALSHA": unix_evalsha,
        "bare uvloop, unix socket, PING": unix_ping,
    }
    times: dict[str, list[int]] = {name: [] for name in paths}
    for call in paths.values():
        for _ in range(200):
            await call()
    for _ in range(n // 100):  # interleaved, so that load changes hit every path alike
        for name, call in paths.items():
            for _ in range(100):
                t0 = _now()
                await call()
                times[name].append(_now() - t0)
    print(f"{'one write, by call path':36} {'p50 µs':>8} {'p10':>8} {'p90':>8}")
    for name, values in times.items():
        values.sort()
        p10, p50, p90 = (values[len(values) * k // 10] / 1000 for k in (1, 5, 9))
        print(f"{name:36} {p50:8.1f} {p10:8.1f} {p90:8.1f}")
    transport.close()
    unix_transport.close()
    await conn.disconnect()
    await client.aclose()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if os.environ.get("BENCH_TRACE_SERVE"):  # the server process of a trace
        return _serve(args)
    ap = argparse.ArgumentParser(prog="python -m bench.store_trace")
    ap.add_argument("--turns", type=int, default=1000)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--paths", action="store_true")
    ap.add_argument("--unix", action="store_true", help="the store over a unix socket")
    parsed = ap.parse_args(args)
    install_cleanup()
    os.chdir(ROOT)
    if parsed.paths:
        import uvloop

        from .store_bench import Redis

        pin(0)  # the server's CPU; Redis is on CPU 1
        redis = Redis()
        try:
            uvloop.run(_paths(redis.port, redis.socket_path, max(parsed.turns, 100)))
            for line in redis.cli("info", "commandstats").splitlines():
                if line.startswith("cmdstat_evalsha"):
                    print("Redis:", line)
        finally:
            redis.stop()
        return 0
    pin(CLIENT_CPU)
    _trace(parsed.warmup, parsed.turns, unix=parsed.unix)
    return 0


if __name__ == "__main__":
    sys.exit(main())
