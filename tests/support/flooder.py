"""A peer that floods a server with one malformed frame, from a process of its own.

    python -m support.flooder URL --connections 3 --frames 101 --size 900000

Each connection says ``hello``, sends the same frame ``--frames`` times (a JSON array
of ones that ends in a stray ``x``: not JSON, so the whole frame is read before it
fails), then reads until the server closes. Prints one line per connection:
``closed CODE errors N`` with the close code and how many ``error`` messages came.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib

import orjson
import websockets
from websockets.asyncio.client import connect


async def flood(url: str, frame: str, frames: int) -> str:
    ws = await connect(url, max_size=None, compression=None, ping_interval=None)
    await ws.send('{"v":1,"seq":0,"type":"hello"}')
    await ws.recv()
    with contextlib.suppress(websockets.ConnectionClosed):
        for _ in range(frames):
            await ws.send(frame)
    errors = 0
    with contextlib.suppress(websockets.ConnectionClosed, TimeoutError):
        while True:
            message = orjson.loads(await asyncio.wait_for(ws.recv(), 10))
            errors += message.get("type") == "error"
    return f"closed {ws.close_code} errors {errors}"


async def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m support.flooder")
    parser.add_argument("url")
    parser.add_argument("--connections", type=int, default=3)
    parser.add_argument("--frames", type=int, default=101)
    parser.add_argument("--size", type=int, default=900_000, help="bytes per frame (about)")
    args = parser.parse_args()
    frame = "[" + "1," * (args.size // 2) + "x]"
    for line in await asyncio.gather(
        *(flood(args.url, frame, args.frames) for _ in range(args.connections))
    ):
        print(line, flush=True)


if __name__ == "__main__":
    asyncio.run(main())
