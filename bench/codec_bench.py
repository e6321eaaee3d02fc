#!/usr/bin/env python3
"""codec_bench: what the vRT text codec costs per message, beside bare JSON parsing.

For five representative frames, measured in the same run, in the same process:

  json.loads     stdlib json.loads of the frame bytes (the baseline)
  orjson.loads   orjson.loads of the same bytes (the parser the codec uses)
  decode         the full path: Decoder(sender).decode(bytes) -> Decoded (parse, §9.1
                 classification, duplicate check, schema validation, typed struct)
  encode         vrt.protocol.encode(message, seq) -> bytes
  json.dumps     stdlib json.dumps of the frame as a dict (encode baseline)

Each figure is microseconds per message from timeit: a short calibration sets the loop
count so that one run lasts about ``min_time``, then ``repeat`` runs; the table shows
best-of and median, and the ratio of the full decode path to json.loads (best against
best).

Usage:  python bench/codec_bench.py --quick    (about 5 s)
        python bench/codec_bench.py            (about 30 s)
Results: table on stdout, JSON in bench/results/codec.json (keyed by mode).
No test asserts on these timings: the machine is noisy (docs/performance-floor.md).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
import timeit
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import orjson

from vrt.protocol import Decoded, Decoder, encode
from vrt.protocol.schemas import Sender

RESULTS = Path(__file__).resolve().parent / "results" / "codec.json"


@dataclass(frozen=True)
class Frame:
    name: str
    sender: Sender
    value: dict[str, Any]

    @property
    def data(self) -> bytes:
        return json.dumps(self.value, separators=(",", ":"), ensure_ascii=False).encode()


FRAMES: tuple[Frame, ...] = (
    Frame(
        "client text",
        "client",
        {"v": 1, "seq": 12, "type": "text", "text": "What is the weather in Oslo tomorrow?"},
    ),
    Frame(
        "client tool.result",
        "client",
        {
            "v": 1,
            "seq": 13,
            "type": "tool.result",
            "callId": "call_7Qx3mZ",
            "epoch": 4,
            "ok": True,
            "output": {"city": "Oslo", "tempC": 21.5, "sky": "clear", "wind": [3, "NW"]},
        },
    ),
    Frame(
        "client hello 2 tools",
        "client",
        {
            "v": 1,
            "seq": 0,
            "type": "hello",
            "tools": [
                {
                    "name": "get_weather",
                    "description": "Current weather for a city",
                    "parameters": {
                        "type": "object",
                        "properties": {"city": {"type": "string"}},
                        "required": ["city"],
                    },
                },
                {
                    "name": "set_timer",
                    "description": "Start a timer",
                    "parameters": {
                        "type": "object",
                        "properties": {"seconds": {"type": "integer", "minimum": 1}},
                    },
                },
            ],
            "input": {"encoding": "pcm16", "sampleRate": 24000},
            "output": {"encoding": "pcm16", "sampleRate": 24000},
            "capabilities": ["tool-stream-v1"],
        },
    ),
    Frame(
        "server tool.call",
        "server",
        {
            "v": 1,
            "seq": 42,
            "type": "tool.call",
            "callId": "call_7Qx3mZ",
            "name": "get_weather",
            "arguments": {"city": "Oslo", "unit": "celsius"},
            "turnId": "turn_Ab12",
            "epoch": 4,
        },
    ),
    Frame("client ack", "client", {"v": 1, "seq": 0, "type": "ack", "upTo": 41}),
)

OPERATIONS = ("json.loads", "orjson.loads", "decode", "encode", "json.dumps")


def measure(func: Callable[[], object], repeat: int, min_time: float) -> list[float]:
    """Microseconds per call for each of ``repeat`` runs."""
    timer = timeit.Timer(func)
    calibration = 200
    per_call = timer.timeit(number=calibration) / calibration
    number = max(1, int(min_time / max(per_call, 1e-9)))
    runs = timer.repeat(repeat=repeat, number=number)
    return [t / number * 1e6 for t in runs]


def bench_frame(frame: Frame, repeat: int, min_time: float) -> dict[str, dict[str, float]]:
    data = frame.data
    decoder = Decoder(frame.sender)
    result = decoder.decode(data)
    if not isinstance(result, Decoded):
        raise SystemExit(f"{frame.name}: the benchmark frame is invalid: {result}")
    message, seq = result.message, result.seq
    if encode(message, seq) != data:
        raise SystemExit(f"{frame.name}: encode does not reproduce the frame")
    value = frame.value
    funcs: dict[str, Callable[[], object]] = {
        "json.loads": lambda: json.loads(data),
        "orjson.loads": lambda: orjson.loads(data),
        "decode": lambda: decoder.decode(data),
        "encode": lambda: encode(message, seq),
        "json.dumps": lambda: json.dumps(value, separators=(",", ":")),
    }
    out: dict[str, dict[str, float]] = {}
    for op in OPERATIONS:
        runs = measure(funcs[op], repeat, min_time)
        out[op] = {"best_us": min(runs), "median_us": statistics.median(runs)}
    return out


def table(results: dict[str, dict[str, dict[str, float]]]) -> str:
    head = f"{'frame':<22}{'bytes':>6}"
    for op in OPERATIONS:
        head += f"{op + ' best/med':>24}"
    head += f"{'decode/json.loads':>19}"
    lines = [head, "-" * len(head)]
    for frame in FRAMES:
        row = results[frame.name]
        line = f"{frame.name:<22}{len(frame.data):>6}"
        for op in OPERATIONS:
            line += f"{row[op]['best_us']:>14.2f} /{row[op]['median_us']:>7.2f}"
        ratio = row["decode"]["best_us"] / row["json.loads"]["best_us"]
        line += f"{ratio:>18.2f}x"
        lines.append(line)
    lines.append("(µs per message; best of repeats / median of repeats)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer repeats, shorter runs")
    parser.add_argument("--no-write", action="store_true", help="do not write the JSON results")
    args = parser.parse_args(argv)
    mode = "quick" if args.quick else "full"
    repeat, min_time = (5, 0.02) if args.quick else (9, 0.1)

    started = time.perf_counter()
    results = {frame.name: bench_frame(frame, repeat, min_time) for frame in FRAMES}
    elapsed = time.perf_counter() - started
    print(table(results))
    print(f"{mode} run, {elapsed:.1f} s, Python {platform.python_version()}")

    if not args.no_write:
        document: dict[str, Any] = {"runs": {}}
        if RESULTS.is_file():
            try:
                document = json.loads(RESULTS.read_text(encoding="utf-8"))
                document.setdefault("runs", {})
            except ValueError:
                document = {"runs": {}}
        document["runs"][mode] = {
            "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "elapsed_s": round(elapsed, 2),
            "config": {"repeat": repeat, "min_time_s": min_time},
            "versions": {
                "python": platform.python_version(),
                "platform": platform.platform(),
                "orjson": orjson.__version__,
                "msgspec": msgspec.__version__,
            },
            "cpus": os.cpu_count(),
            "loadavg_end": list(os.getloadavg()),
            "frames": {
                frame.name: {
                    "sender": frame.sender,
                    "bytes": len(frame.data),
                    **results[frame.name],
                    "decode_over_json_loads": results[frame.name]["decode"]["best_us"]
                    / results[frame.name]["json.loads"]["best_us"],
                }
                for frame in FRAMES
            },
        }
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
        print(f"results: {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
