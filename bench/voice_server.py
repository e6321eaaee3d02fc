"""The default ``vrt serve`` in a process of its own, as the voice benchmarks run it
(``bench/voice.py``, ``bench/voice_capacity.py``), and how they summarise latencies."""

from __future__ import annotations

import subprocess

__all__ = ["percentiles", "serve_voice"]


def percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    if not ordered:
        return {"n": 0}

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]

    return {
        "n": len(ordered),
        "p50": round(at(0.5), 1),
        "p90": round(at(0.9), 1),
        "p99": round(at(0.99), 1),
        "max": round(ordered[-1], 1),
    }


def serve_voice() -> tuple[subprocess.Popen[str], str]:
    from support.processes import free_port, vrt_command

    port = free_port()
    process = subprocess.Popen(
        [*vrt_command(), "serve", "--port", str(port), "--log-level", "warning"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    assert "listening on" in line, line
    return process, f"ws://127.0.0.1:{port}"
