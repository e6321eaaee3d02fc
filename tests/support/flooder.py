"""A peer that floods a server with one malformed frame, from a process of its own.

    python -m support.flooder URL --connections 3 --frames 101 --size 900000 --seconds 60

Each connection says ``hello``, sends the same frame ``--frames`` times (a JSON array
of ones that ends in a stray ``x``: not JSON, so the whole frame is read before it
fails), then reads until the server closes. Prints one line per connection:
``closed CODE errors N`` with the close code and how many ``error`` messages came.

A server may slow a flooder to its read budget instead of closing it (its reads wait,
the data waits in TCP): with ``--seconds``, a connection still open when they have
passed stops sending, reads what came for two seconds, closes, and prints
``throttled errors N``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib

import orjson
import websockets
from websockets.asyncio.client import connect


async def flood(url: str, frame: str, frames: int, seconds: float | None) -> str:
    ws = await connect(url, max_size=None, compression=None, ping_interval=None)
    await ws.send('{"v":1,"seq":0,"type":"hello"}')
    await ws.recv()

    async def send_all() -> None:
        for _ in range(frames):
            await ws.send(frame)

    throttled = False
    with contextlib.suppress(websockets.ConnectionClosed):
        try:
            await asyncio.wait_for(send_all(), seconds)
        except TimeoutError:
            throttled = True
    errors = 0
    with contextlib.suppress(websockets.ConnectionClosed, TimeoutError):
        while True:
            message = orjson.loads(await asyncio.wait_for(ws.recv(), 2 if throttled else 10))
            errors += message.get("type") == "error"
    if throttled and ws.close_code is None:
        await ws.close()
        return f"throttled errors {errors}"
    return f"closed {ws.close_code} errors {errors}"


async def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m support.flooder")
    parser.add_argument("url")
    parser.add_argument("--connections", type=int, default=3)
    parser.add_argument("--frames", type=int, default=101)
    parser.add_argument("--size", type=int, default=900_000, help="bytes per frame (about)")
    parser.add_argument("--seconds", type=float, default=None, help="stop sending after")
    args = parser.parse_args()
    frame = "[" + "1," * (args.size // 2) + "x]"
    for line in await asyncio.gather(
        *(flood(args.url, frame, args.frames, args.seconds) for _ in range(args.connections))
    ):
        print(line, flush=True)


if __name__ == "__main__":
    asyncio.run(main())
