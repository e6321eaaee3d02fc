#!/usr/bin/env python3
"""realtime_latency: what the openai-realtime adapter adds on the hot paths, measured
against the local stand-in of the OpenAI Realtime API (tests/agents/openai_realtime_standin.py).

  audio   the stand-in writes ``time.perf_counter_ns()`` into the first 8 bytes of each
          ``response.output_audio.delta`` payload just before sending it; a raw vRT
          client takes ``perf_counter_ns()`` as soon as the binary frame is read and
          subtracts the stamp (the payload passes through unchanged, so the stamp
          arrives intact). Path: stand-in -> provider socket -> adapter (JSON, base64)
          -> server core -> vRT socket -> raw client.
  cancel  the raw client takes ``perf_counter_ns()`` and sends ``interrupt`` while the
          stand-in streams audio; the stand-in stamps the arrival of ``response.cancel``.
          Path: client -> vRT socket -> server core -> adapter -> provider socket -> stand-in.

Both figures are END TO END ON LOOPBACK, with nothing subtracted: they include two
WebSocket hops, and the stand-in, the server (with the adapter) and the raw client
share one process and one event loop, so their scheduling is in the numbers too. They
are an upper bound on what the adapter and server add, not a model's latency.

Usage:   python bench/realtime_latency.py [--rounds 20] [--deltas 40] [--interval 0.01]
                                          [--interrupts 40] [--loop uvloop|asyncio]
Results: a table on stdout; JSON in bench/results/realtime_latency.json (keyed by loop).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from websockets.asyncio.client import ClientConnection, connect

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "agents"))
sys.path.insert(0, str(ROOT / "tests"))  # the stand-in imports support.sdk_types

if TYPE_CHECKING:  # the same file, found by mypy through mypy_path = "tests" (pyproject.toml)
    from agents.openai_realtime_standin import Reply, StandIn, stamp_of
else:
    from openai_realtime_standin import Reply, StandIn, stamp_of

from vrt.agents.openai_realtime import OpenAIRealtimeAgent, RealtimeConfig  # noqa: E402
from vrt.server import VrtServer  # noqa: E402

KEY = "sk-bench-not-a-real-key"
FRAME = 960  # 20 ms of pcm16 at 24 kHz: a typical provider delta is a few of these
RESULTS = ROOT / "bench" / "results" / "realtime_latency.json"


class Raw:
    """A minimal vRT client: hello, sequenced sends, acks; no schema checks on the hot path."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.seq = 0
        self.last_seq = 0
        self.epoch = 0

    async def send(self, type_: str, **members: Any) -> None:
        self.seq += 1
        await self.ws.send(json.dumps({"v": 1, "seq": self.seq, "type": type_, **members}))

    async def hello(self) -> None:
        await self.ws.send(json.dumps({"v": 1, "seq": 0, "type": "hello"}))
        while json.loads(await self.ws.recv()).get("type") != "ready":
            pass

    async def text_message(self, data: str) -> dict[str, Any]:
        message: dict[str, Any] = json.loads(data)
        if message.get("seq"):
            self.last_seq = message["seq"]
            await self.ws.send(json.dumps({"v": 1, "seq": 0, "type": "ack", "upTo": self.last_seq}))
        if isinstance(message.get("epoch"), int):
            self.epoch = max(self.epoch, message["epoch"])
        return message


def _idle(message: dict[str, Any]) -> bool:
    return message.get("type") == "turn.state" and message.get("state") == "idle"


async def audio_latencies(standin: StandIn, raw: Raw, deltas: int, interval: float) -> list[int]:
    """One response: ``deltas`` stamped deltas ``interval`` s apart; ns per frame."""
    standin.replies.append(Reply(audio=[bytes(FRAME)] * deltas, interval=interval, stamp=True))
    await raw.send("text", text="speak")
    found: list[int] = []
    while True:
        data = await raw.ws.recv()
        if isinstance(data, bytes):
            now = time.perf_counter_ns()
            found.append(now - stamp_of(data[5:]))  # 5 bytes of vRT frame header (§8.1)
        elif _idle(await raw.text_message(data)):
            return found


async def cancel_latency(standin: StandIn, raw: Raw) -> int:
    """Interrupt a long response after its first frame; ns until the stand-in has the cancel."""
    standin.replies.append(Reply(audio=[bytes(FRAME)] * 500, interval=0.02))
    await raw.send("text", text="speak at length")
    while not isinstance(data := await raw.ws.recv(), bytes):
        await raw.text_message(data)
    before = len(standin.cancel_times)
    sent = time.perf_counter_ns()
    await raw.send("interrupt", epoch=raw.epoch, reason="user")
    while True:  # until the server's `interrupted` and the stand-in's cancel
        data = await raw.ws.recv()
        if isinstance(data, str) and (await raw.text_message(data)).get("type") == "interrupted":
            break
    while len(standin.cancel_times) == before:
        await asyncio.sleep(0.001)
    arrived = standin.cancel_times[before]
    await asyncio.sleep(0.05)  # let the cancelled response finish before the next round
    return arrived - sent


def summary(samples_ns: list[int]) -> dict[str, float]:
    ms = sorted(s / 1e6 for s in samples_ns)
    cuts = statistics.quantiles(ms, n=100, method="inclusive") if len(ms) > 1 else ms * 99
    return {
        "n": len(ms),
        "p50_ms": round(statistics.median(ms), 3),
        "p90_ms": round(cuts[89], 3),
        "p99_ms": round(cuts[98], 3),
        "max_ms": round(ms[-1], 3),
        "mean_ms": round(statistics.fmean(ms), 3),
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    standin = StandIn(api_key=KEY, check_types=False)  # the SDK-type check is not measured
    await standin.start()
    config = RealtimeConfig(base_url=standin.url, model="bench", transcription_model=None)
    server = VrtServer(lambda info: OpenAIRealtimeAgent(config, KEY))
    url = await server.start("127.0.0.1", 0)
    ws = await connect(url, compression=None, ping_interval=None, max_size=None)
    raw = Raw(ws)
    try:
        await raw.hello()
        await audio_latencies(standin, raw, 5, args.interval)  # warm-up, discarded
        audio: list[int] = []
        for _ in range(args.rounds):
            audio += await audio_latencies(standin, raw, args.deltas, args.interval)
        await cancel_latency(standin, raw)  # warm-up, discarded
        cancels = [await cancel_latency(standin, raw) for _ in range(args.interrupts)]
    finally:
        await ws.close()
        await server.close()
        await standin.close()
    return {
        "audio_delta_to_client_frame": summary(audio),
        "client_interrupt_to_provider_cancel": summary(cancels),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20, help="responses for the audio path")
    parser.add_argument("--deltas", type=int, default=40, help="audio deltas per response")
    parser.add_argument("--interval", type=float, default=0.01, help="seconds between deltas")
    parser.add_argument("--interrupts", type=int, default=40, help="interrupt rounds")
    parser.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop")
    args = parser.parse_args()
    started = time.time()
    loop_name = args.loop
    if loop_name == "uvloop":
        try:
            import uvloop
        except ImportError:
            loop_name = "asyncio"
        else:
            results = uvloop.run(run(args))
    if loop_name == "asyncio":
        results = asyncio.run(run(args))

    names = {
        "audio_delta_to_client_frame": "provider audio delta -> client frame",
        "client_interrupt_to_provider_cancel": "client interrupt -> provider cancel",
    }
    print(f"end to end on loopback, one process and event loop ({loop_name}); nothing subtracted")
    print(f"{'path':40} {'n':>6} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    for key, label in names.items():
        r = results[key]
        print(
            f"{label:40} {r['n']:>6} {r['p50_ms']:>8.3f} {r['p90_ms']:>8.3f} "
            f"{r['p99_ms']:>8.3f} {r['max_ms']:>8.3f}"
        )
    record = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "elapsed_s": round(time.time() - started, 1),
        "method": (
            "end to end on loopback, nothing subtracted: the stand-in, the vRT server with "
            "the openai-realtime adapter and a raw vRT client share one process and one "
            "event loop; audio: perf_counter_ns stamped into each provider delta payload "
            "by the stand-in, read by the raw client on frame arrival; cancel: raw client "
            "clock at sending interrupt to the stand-in's clock at response.cancel arrival"
        ),
        "config": {
            "rounds": args.rounds,
            "deltas": args.deltas,
            "interval_s": args.interval,
            "delta_bytes": FRAME,
            "interrupts": args.interrupts,
            "loop": loop_name,
        },
        "versions": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "websockets": version("websockets"),
        },
        "loadavg_end": list(os.getloadavg()),
        "results": results,
    }
    # One record per event loop, so that both can be kept side by side.
    runs: dict[str, Any] = {}
    if RESULTS.exists():
        runs = json.loads(RESULTS.read_text(encoding="utf-8")).get("runs", {})
    runs[loop_name] = record
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"runs": runs}, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
