#!/usr/bin/env python3
"""browser_latency: the browser SDK's latencies in Debian's Chromium, against loopback servers.

* text -> first agent chunk: ``VrtClient.sendText("echo ping")`` to the first ``text``
  event, against ``vrt serve`` (scripted agent, its own process), next to the floor: a
  bare browser WebSocket sending the same bytes to a bare echo server (picows on uvloop,
  ``bench/ws_floor.py``, its own process). The ratio is what vRT costs over the wire.
* microphone -> server: from the moment a 20 ms frame's last sample was captured (the
  capture worklet's context time, mapped to wall time) to its arrival in the server's
  agent (wall time), for Chromium's fake microphone fed from a WAV; in-process server.
* playback start: from the first output frame of an item reaching the page to its
  first sample written by the playback worklet (jitter buffer 60 ms), plus the context's
  reported output latency (the device's share, not measured here).

Usage: ``python bench/browser_latency.py [--iterations N]``; needs ``clients/web`` built
(``npm ci && npm run build``) and ``/usr/bin/chromium``. Prints a table; JSON in
``bench/results/browser_latency.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from support.browser import run_scenario, write_wav  # noqa: E402
from vrt.agents import AgentInput, AudioReceived  # noqa: E402
from vrt.agents.base import AgentSession, SessionInfo  # noqa: E402
from vrt.agents.scripted import ScriptedAgent  # noqa: E402
from vrt.demo import demo_files, start_page_server  # noqa: E402
from vrt.server import VrtServer  # noqa: E402


class _Timestamped(ScriptedAgent):
    """The scripted agent, noting the wall time each input audio frame arrived."""

    arrivals: dict[int, float]

    def __init__(self) -> None:
        super().__init__()
        self.arrivals = {}

    def handle(self, session: AgentSession, event: AgentInput) -> None:
        if isinstance(event, AudioReceived):
            self.arrivals[event.seq] = time.time() * 1000
        super().handle(session, event)


def _stats(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "n": len(ordered),
        "p50": statistics.median(ordered),
        "p90": ordered[int(0.9 * (len(ordered) - 1))],
        "min": ordered[0],
    }


def _process(command: list[str], ready: str) -> tuple[subprocess.Popen[bytes], str]:
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    assert process.stdout is not None
    line = process.stdout.readline().decode()
    if ready not in line:
        process.kill()
        raise RuntimeError(f"{command[0]} did not start: {line!r}")
    return process, line


async def main(iterations: int) -> dict[str, Any]:
    echo, line = _process(
        [sys.executable, str(ROOT / "bench" / "ws_floor.py"), "--serve", "picows-uvloop"], "READY"
    )
    echo_url = f"ws://127.0.0.1:{line.split()[1]}"
    vrt = Path(sys.executable).with_name("vrt")
    serve, line = _process(
        [str(vrt), "serve", "--port", "0", "--log-level", "warning"], "listening on"
    )
    vrt_url = line.split("listening on ")[1].split()[0]
    agents: list[_Timestamped] = []

    def factory(info: SessionInfo) -> _Timestamped:
        del info
        agents.append(_Timestamped())
        return agents[-1]

    local = VrtServer(factory)
    local_url = await local.start("127.0.0.1", 0)
    httpd, page = start_page_server(demo_files(), "127.0.0.1", 0, vrt_url)
    try:
        rtt = await run_scenario(
            "latency", timeout=600, page=page, echoUrl=echo_url, vrtUrl=vrt_url,
            iterations=iterations,
        )  # fmt: skip
        with tempfile.TemporaryDirectory() as tmp:
            wav = write_wav(Path(tmp) / "tone.wav", [(1000, 0.3), (1000, 0.0)])
            mic = await run_scenario(
                "mic-latency", timeout=120, page=page, vrtUrl=local_url, wav=str(wav), seconds=6
            )
    finally:
        httpd.shutdown()
        await local.close()
        for process in (echo, serve):
            process.terminate()
            process.wait(5)
    arrivals = agents[0].arrivals
    mic_ms = [arrivals[seq] - at for seq, at in enumerate(mic["captured"]) if seq in arrivals]
    text, floor = _stats(rtt["text"]), _stats(rtt["echo"])
    return {
        "text_first_chunk_ms": text,
        "bare_echo_ms": floor,
        "first_frame_back_ms": _stats(rtt["frame"]),
        "ratio_p50": text["p50"] / floor["p50"],
        "mic_to_server_ms": _stats(mic_ms),
        "playback_start_ms": _stats(rtt["playbackStart"]),
        "output_latency_ms": rtt["outputLatencyMs"],
        "base_latency_ms": rtt["baseLatencyMs"],
        "context_rate": rtt["sampleRate"],
    }


def _report(results: dict[str, Any]) -> None:
    rows = [
        ("text -> first chunk (vrt serve)", results["text_first_chunk_ms"]),
        ("text -> first message back", results["first_frame_back_ms"]),
        ("bare WebSocket echo, same bytes", results["bare_echo_ms"]),
        ("mic frame captured -> server", results["mic_to_server_ms"]),
        ("first output frame -> first sample", results["playback_start_ms"]),
    ]
    print(f"{'measure':40} {'n':>5} {'p50 ms':>8} {'p90 ms':>8} {'min ms':>8}")
    for name, s in rows:
        print(f"{name:40} {s['n']:5d} {s['p50']:8.2f} {s['p90']:8.2f} {s['min']:8.2f}")
    print(f"ratio (p50) text / echo: {results['ratio_p50']:.2f}")
    print(
        f"context: {results['context_rate']} Hz, outputLatency {results['output_latency_ms']:.1f}"
        f" ms, baseLatency {results['base_latency_ms']:.1f} ms"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=200, help="round trips per measure")
    arguments = parser.parse_args()
    found = asyncio.run(main(arguments.iterations))
    _report(found)
    out = ROOT / "bench" / "results" / "browser_latency.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(found, indent=2))
