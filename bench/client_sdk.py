"""The Python client SDK (``vrt.client.VrtClient``) against a bare ``websockets`` client.

Both talk to the same vrt bench server (``python -m bench.servers vrt``, pinned to CPU 0;
this process, the client, to CPU 1), in the same run, and do the same on the wire; the
bare client builds its frames with ``vrt.protocol.codec.encode``, reads only the
envelope of what it receives and acknowledges every 32 sequenced messages, as
``bench/client.py`` does. What is measured is the client's side:

* round trip: ``echo hi`` sent → its first agent ``text`` chunk received, p50 and p99;
* CPU per message: the client process's CPU over ``burst 1000`` replies (sequenced
  ``text`` chunks received and acknowledged), per message;
* CPU per audio frame: 960-byte input frames sent in groups of 50, each echoed back by
  the bench agent's ``passthrough``, per frame sent and received;
* memory: RSS growth of this process per open, idle session (``VrtClient`` against a
  bare websockets connection that got its ``ready``).

    python -m bench.client_sdk            # quick: about 20 s
    python -m bench.client_sdk --full     # more samples and sessions
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import websockets
from websockets.asyncio.client import ClientConnection, connect

from vrt.client import VrtClient
from vrt.protocol.client.events import AudioChunk, TextReceived, TurnChanged
from vrt.protocol.codec import encode
from vrt.protocol.frames import FrameKind, build_frame
from vrt.protocol.messages import Ack, Hello, UserText

from .procs import ServerProcess, install_cleanup, pin, rss_kb, self_cpu_s

__all__ = ["main"]

AUDIO = {"bench": "audio"}
PAYLOAD = bytes(960)
GROUP = 50
_SEQ_AT = len(b'{"v":1,"seq":')


def _seq(data: bytes) -> int:
    """The seq of a canonical vRT message (bench/client.py reads it the same way)."""
    end = data.index(b",", _SEQ_AT)
    return int(data[_SEQ_AT:end])


class Bare:
    """A bare websockets client speaking raw vRT."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.seq = 0
        self.last_seq = 0
        self.unacked = 0

    @classmethod
    async def open(cls, url: str, context: Any = None) -> Bare:
        ws = await connect(url, compression=None, ping_interval=None, max_size=None)
        peer = cls(ws)
        await ws.send(encode(Hello(context=context) if context else Hello(), 0), text=True)
        while b'"type":"ready"' not in await peer.recv_bytes():
            pass
        return peer

    async def recv_bytes(self) -> bytes:
        data = await self.ws.recv(decode=False)
        assert isinstance(data, bytes)
        if data[:1] == b"{":
            seq = _seq(data)
            if seq:
                self.last_seq = seq
                self.unacked += 1
                if self.unacked >= 32:
                    self.unacked = 0
                    await self.ws.send(encode(Ack(up_to=seq), 0), text=True)
        return data

    async def text(self, text: str) -> None:
        self.seq += 1
        await self.ws.send(encode(UserText(text=text), self.seq), text=True)

    async def until(self, marker: bytes) -> None:
        while marker not in await self.recv_bytes():
            pass


async def audio_group(client: VrtClient) -> int:
    """Send ``GROUP`` input frames, then wait for as many output frames back."""
    for _ in range(GROUP):
        client.send_audio(PAYLOAD)
    got = 0
    while got < GROUP:
        if isinstance(await client.next_event(), AudioChunk):
            got += 1
    return got


async def _vrt_open(url: str, context: Any = None) -> VrtClient:
    client = VrtClient(url, context=context) if context else VrtClient(url)
    await client.connect()
    return client


async def _vrt_until(client: VrtClient, done: Callable[[Any], bool]) -> None:
    while not done(await client.next_event()):
        pass


def _idle(event: Any) -> bool:
    return isinstance(event, TurnChanged) and event.state == "idle"


async def rtt(url: str, sdk: bool, n: int) -> dict[str, float]:
    samples: list[float] = []
    if sdk:
        client = await _vrt_open(url)
        for _ in range(n):
            t0 = time.perf_counter_ns()
            await client.send_text("echo hi")
            await _vrt_until(client, lambda e: isinstance(e, TextReceived))
            samples.append((time.perf_counter_ns() - t0) / 1e3)
            await _vrt_until(client, _idle)
        await client.close()
    else:
        peer = await Bare.open(url)
        for _ in range(n):
            t0 = time.perf_counter_ns()
            await peer.text("echo hi")
            await peer.until(b'"type":"text"')
            samples.append((time.perf_counter_ns() - t0) / 1e3)
            await peer.until(b'"state":"idle"')
        await peer.ws.close()
    samples.sort()
    return {
        "rtt_us_p50": samples[len(samples) // 2],
        "rtt_us_p99": samples[int(len(samples) * 0.99)],
    }


async def per_message(url: str, sdk: bool, bursts: int) -> dict[str, float]:
    """CPU per received message over ``burst 1000`` replies (each 1,000 text chunks
    and their turn's states, all sequenced)."""
    received = 0
    if sdk:
        client = await _vrt_open(url)
        started = self_cpu_s()
        for _ in range(bursts):
            await client.send_text("burst 1000")
            while True:
                event = await client.next_event()
                received += 1
                if _idle(event):
                    break
        used = self_cpu_s() - started
        await client.close()
    else:
        peer = await Bare.open(url)
        started = self_cpu_s()
        for _ in range(bursts):
            await peer.text("burst 1000")
            while True:
                data = await peer.recv_bytes()
                received += 1
                if b'"state":"idle"' in data:
                    break
        used = self_cpu_s() - started
        await peer.ws.close()
    return {"cpu_us_per_msg": used * 1e6 / received}


async def per_frame(url: str, sdk: bool, groups: int) -> dict[str, float]:
    """CPU per input frame sent and its echo received (the bench agent's passthrough)."""
    if sdk:
        client = await _vrt_open(url, AUDIO)
        await client.send_text("passthrough")
        await _vrt_until(client, lambda e: isinstance(e, TurnChanged) and e.state == "speaking")
        started = self_cpu_s()
        for _ in range(groups):
            await audio_group(client)
        used = self_cpu_s() - started
        await client.close()
    else:
        peer = await Bare.open(url, AUDIO)
        await peer.text("passthrough")
        await peer.until(b'"state":"speaking"')
        started = self_cpu_s()
        seq = 0
        for _ in range(groups):
            for _ in range(GROUP):
                await peer.ws.send(build_frame(FrameKind.INPUT, seq, PAYLOAD))
                seq += 1
            got = 0
            while got < GROUP:
                if (await peer.recv_bytes())[:1] != b"{":
                    got += 1
        used = self_cpu_s() - started
        await peer.ws.close()
    return {"cpu_us_per_frame": used * 1e6 / (groups * GROUP)}


async def memory(url: str, sdk: bool, count: int) -> dict[str, float]:
    gc.collect()
    before = rss_kb_self()
    opened: list[Any] = [await (_vrt_open(url) if sdk else Bare.open(url)) for _ in range(count)]
    await asyncio.sleep(0.2)
    gc.collect()
    after = rss_kb_self()
    for item in opened:
        await (item.close() if sdk else item.ws.close())
    return {"kb_per_idle_session": (after - before) / count}


def rss_kb_self() -> int:
    import os

    return rss_kb(os.getpid())


Measure = Callable[[str, bool, int], Awaitable[dict[str, float]]]


async def run(quick: bool) -> list[dict[str, Any]]:
    plan: list[tuple[str, Measure, int]] = [
        ("rtt", rtt, 300 if quick else 2000),
        ("message", per_message, 5 if quick else 30),
        ("frame", per_frame, 40 if quick else 300),
        ("memory", memory, 100 if quick else 500),
    ]
    rows: list[dict[str, Any]] = []
    for name, measure, size in plan:
        server = ServerProcess("vrt", max_life=300.0)
        try:
            figures: dict[str, dict[str, float]] = {}
            # The bare client first, always: what the process's heap grows by once (for
            # memory, whichever comes first pays it) falls on the baseline.
            for sdk in (False, True):
                # One bound for the whole measure: next_event() without a timeout, as
                # an application waits (a timeout costs the SDK a task per event).
                figures["sdk" if sdk else "bare"] = await asyncio.wait_for(
                    measure(server.url, sdk, size), 240.0
                )
        finally:
            server.stop()
        for metric, bare in figures["bare"].items():
            sdk_value = figures["sdk"][metric]
            rows.append(
                {
                    "scenario": name,
                    "metric": metric,
                    "sdk": sdk_value,
                    "bare": bare,
                    "ratio": sdk_value / bare if bare else float("nan"),
                }
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.client_sdk")
    parser.add_argument("--full", action="store_true", help="more samples and sessions")
    parser.add_argument("--json", help="write the rows to this file")
    args = parser.parse_args(argv)
    install_cleanup()
    pinned = pin(1)
    import uvloop

    print(f"client SDK vs bare websockets {websockets.__version__}; client pinned: {pinned}")
    rows = uvloop.run(run(not args.full))
    print("| scenario | metric | VrtClient | bare websockets | ratio |")
    print("|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['scenario']} | {row['metric']} | {row['sdk']:.1f} | {row['bare']:.1f} "
            f"| {row['ratio']:.2f}× |"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
