"""The benchmark runner: every scenario for vrt and for its bare baseline, side by side.

    python -m bench                 # quick mode, about a minute
    python -m bench --full          # the full run of docs/performance.md, a few minutes
    python -m bench --smoke         # seconds; checks the runner works (tests use it)
    python -m bench --only rtt,push --json out.json

Each server (vrt, bare picows, bare websockets) runs in its own process pinned to CPU 0
and is started fresh for every scenario and repetition; this process is the load client,
pinned to CPU 1. Prints a table of vrt, baseline and ratio (vrt / baseline), and writes
JSON (default ``bench/results/bench-MODE.json``). Method: ``docs/performance.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .experiments import EXPERIMENTS
from .procs import (
    CLIENT_CPU,
    ROOT,
    ServerProcess,
    install_cleanup,
    machine,
    machine_busy_s,
    pin,
    raise_nofile,
    self_cpu_s,
    wait_quiet,
)
from .scenarios import SCENARIOS, Scenario, Target

MODES: dict[str, dict[str, Any]] = {
    "smoke": {
        "reps": 1,
        "timeout": 20.0,
        "rtt_warmup": 5,
        "rtt_n": 30,
        "ack_n": 2,
        "burst": 500,
        "bursts": 2,
        "audio_in": 2000,
        "audio_out": 2000,
        "connect_concurrency": 20,
        "idle": [100],
        "settle": 0.2,
        "resume_warmup": 1,
        "resume_n": 2,
        "interrupt_warmup": 1,
        "interrupt_n": 3,
        "cpu_sessions": 5,
        "cpu_warmup": 0.2,
        "cpu_window": 0.5,
    },
    "quick": {
        "reps": 1,
        "timeout": 60.0,
        "rtt_warmup": 200,
        "rtt_n": 1000,
        "ack_n": 8,
        "burst": 10_000,
        "bursts": 2,
        "audio_in": 50_000,
        "audio_out": 50_000,
        "connect_concurrency": 50,
        "idle": [1000],
        "settle": 1.5,
        "resume_warmup": 2,
        "resume_n": 10,
        "interrupt_warmup": 3,
        "interrupt_n": 20,
        "cpu_sessions": 100,
        "cpu_warmup": 1.0,
        "cpu_window": 3.0,
    },
    "full": {
        "reps": 3,
        "reps_sessions": 1,
        "timeout": 120.0,
        "rtt_warmup": 500,
        "rtt_n": 5000,
        "ack_n": 20,
        "burst": 10_000,
        "bursts": 10,
        "audio_in": 200_000,
        "audio_out": 200_000,
        "connect_concurrency": 50,
        "idle": [1000, 10_000],
        "settle": 2.0,
        "resume_warmup": 3,
        "resume_n": 30,
        "interrupt_warmup": 5,
        "interrupt_n": 60,
        "cpu_sessions": 300,
        "cpu_warmup": 2.0,
        "cpu_window": 10.0,
    },
}


@dataclass(frozen=True)
class Row:
    scenario: str
    label: str
    key: str  # the figure, in vrt's and in the baseline's results
    baseline: str | None = "picows"  # None: no baseline (vrt only)
    fmt: str = "{:.0f}"
    aim: str = ""
    #: ("ratio<=", x), ("ratio>=", x), ("vrt<", x) or None
    check: tuple[str, float] | None = None


ROWS: tuple[Row, ...] = (
    Row(
        "rtt",
        "text → first text chunk p50 (µs)",
        "chunk_us_p50",
        aim="≤1.2×",
        check=("ratio<=", 1.2),
    ),
    Row("rtt", "text → first text chunk p99 (µs)", "chunk_us_p99"),
    Row(
        "rtt",
        "text → first text chunk p50 (µs), vs websockets echo",
        "chunk_us_p50",
        "websockets",
        aim="<1×",
        check=("ratio<", 1.0),
    ),
    Row(
        "rtt", "text → first text chunk p99 (µs), vs websockets echo", "chunk_us_p99", "websockets"
    ),
    Row("rtt", "text → first frame back p50 (µs)", "first_frame_us_p50"),
    Row("rtt", "ping → pong p50 (µs)", "ping_us_p50"),
    Row("rtt", "ping → pong p99 (µs)", "ping_us_p99"),
    Row("rtt", "text → ack p50 (ms)", "ack_ms_p50", fmt="{:.1f}"),
    Row("rtt", "text → ack p99 (ms)", "ack_ms_p99", fmt="{:.1f}"),
    Row(
        "push",
        "sequenced text msgs/s (client acks)",
        "msgs_per_s",
        aim="≥0.8×",
        check=("ratio>=", 0.8),
    ),
    Row("push", "server CPU µs/msg", "server_us_per_msg", fmt="{:.2f}"),
    Row("audio", "input frames/s (965 B)", "in_frames_per_s", aim="≥0.8×", check=("ratio>=", 0.8)),
    Row("audio", "server CPU µs/input frame", "in_server_us_per_frame", fmt="{:.2f}"),
    Row(
        "audio", "output frames/s (965 B)", "out_frames_per_s", aim="≥0.8×", check=("ratio>=", 0.8)
    ),
    Row("audio", "server CPU µs/output frame", "out_server_us_per_frame", fmt="{:.2f}"),
    Row("sessions", "sessions/s (connect+hello+ready)", "sessions_per_s"),
    Row("sessions", "server CPU µs/session opened", "server_us_per_session", fmt="{:.1f}"),
    Row(
        "sessions",
        "KB RSS per idle session @1,000",
        "kb_per_session_1000",
        fmt="{:.1f}",
        aim="<20 KB",
        check=("vrt<", 20.0),
    ),
    Row(
        "sessions",
        "KB RSS per idle session @10,000",
        "kb_per_session_10000",
        fmt="{:.1f}",
        aim="<20 KB",
        check=("vrt<", 20.0),
    ),
    Row("resume", "reconnect → 1,024th replayed msg p50 (ms)", "resume_ms_p50", fmt="{:.1f}"),
    Row("resume", "reconnect → 1,024th replayed msg p99 (ms)", "resume_ms_p99", fmt="{:.1f}"),
    Row("interrupt", "interrupt → interrupted p50 (µs)", "interrupt_us_p50"),
    Row("interrupt", "interrupt → interrupted p99 (µs)", "interrupt_us_p99"),
    Row(
        "cpu", "server CPU µs per session-second (50+50 frames/s)", "us_per_session_s", fmt="{:.0f}"
    ),
    Row("cpu", "sessions per core", "sessions_per_core"),
    Row("cpu", "server CPU µs per frame in + frame out", "us_per_frame_in_out", fmt="{:.1f}"),
)


def run_once(
    scenario: Scenario, kind: str, cfg: dict[str, Any], args: argparse.Namespace
) -> dict[str, Any]:
    extra = ["--experiment", args.experiment] if kind == "vrt" and args.experiment else []
    budget = cfg["timeout"] * 4 + 60
    if args.wait_quiet > 0:
        busy = wait_quiet(args.wait_quiet)
        if busy >= 0.3:
            print(f"  (the machine is still busy: {busy:.2f} cores; measuring anyway)", flush=True)
    server = ServerProcess(kind, max_life=budget, extra=extra)
    try:
        target = Target(kind, server.url, server.pid)
        from .procs import cpu_s

        busy0, own0, t0 = machine_busy_s(), self_cpu_s() + cpu_s(server.pid), time.monotonic()
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            result = runner.run(asyncio.wait_for(scenario.run(target, cfg), budget))
        wall = time.monotonic() - t0
        own = self_cpu_s() + cpu_s(server.pid) - own0
        result["foreign_cores"] = max(0.0, (machine_busy_s() - busy0 - own) / wall)
        return result
    except Exception as exc:
        raise RuntimeError(f"{type(exc).__name__}: {exc}\n{server.log_tail()}") from exc
    finally:
        server.stop()


def median_summary(runs: list[dict[str, Any]]) -> dict[str, float]:
    keys = {k for r in runs for k, v in r.items() if isinstance(v, (int, float))}
    return {k: statistics.median(r[k] for r in runs if k in r) for k in sorted(keys)}


def build_rows(results: dict[str, dict[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    rows = []
    for row in ROWS:
        kinds = results.get(row.scenario)
        if not kinds:
            continue
        vrt = kinds.get("vrt", {}).get("summary", {}).get(row.key)
        if vrt is None:
            continue
        base = None
        if row.baseline is not None:
            base = kinds.get(row.baseline, {}).get("summary", {}).get(row.key)
        ratio = vrt / base if base else None
        met: bool | None = None
        if row.check is not None:
            op, x = row.check
            value = vrt if op == "vrt<" else ratio
            if value is not None:
                met = {"ratio<=": value <= x, "ratio>=": value >= x}.get(op, value < x)
        rows.append(
            {
                "scenario": row.scenario,
                "metric": row.label,
                "key": row.key,
                "vrt": vrt,
                "baseline_kind": row.baseline,
                "baseline": base,
                "ratio": ratio,
                "aim": row.aim,
                "met": met,
                "fmt": row.fmt,
            }
        )
    return rows


def render(rows: list[dict[str, Any]]) -> str:
    titles = {s.name: s.title for s in SCENARIOS}
    head = ["scenario", "metric", "vrt", "baseline", "ratio", "aim"]
    table = [head]
    for r in rows:
        fmt = r["fmt"]
        base = (
            "–" if r["baseline"] is None else f"{fmt.format(r['baseline'])} ({r['baseline_kind']})"
        )
        ratio = "–" if r["ratio"] is None else f"{r['ratio']:.2f}×"
        aim = r["aim"] + ("" if r["met"] is None else (" ✓" if r["met"] else " ✗"))
        table.append([titles[r["scenario"]], r["metric"], fmt.format(r["vrt"]), base, ratio, aim])
    lines = ["| " + " | ".join(cells) + " |" for cells in table]
    lines.insert(1, "|" + "|".join("---" for _ in head) + "|")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--smoke", action="store_const", dest="mode", const="smoke")
    mode.add_argument("--quick", action="store_const", dest="mode", const="quick")
    mode.add_argument("--full", action="store_const", dest="mode", const="full")
    ap.add_argument(
        "--only",
        default="",
        help="comma-separated scenarios: " + ",".join(s.name for s in SCENARIOS),
    )
    ap.add_argument("--json", type=Path, default=None, help="where to write the results")
    ap.add_argument(
        "--wait-quiet",
        type=float,
        default=0.0,
        metavar="S",
        help="before each server run, wait up to S seconds for other load to stop",
    )
    ap.add_argument("--reps", type=int, default=None, help="repetitions (median reported)")
    ap.add_argument(
        "--experiment",
        default="",
        help="measure prototypes of proposed src changes in the vrt server: "
        + ",".join(EXPERIMENTS)
        + " (see bench/experiments.py)",
    )
    args = ap.parse_args(argv)
    unknown = [e for e in args.experiment.split(",") if e and e not in EXPERIMENTS]
    if unknown:
        ap.error(f"unknown experiment {unknown}")
    mode_name = args.mode or "quick"
    cfg = dict(MODES[mode_name])
    if args.reps:
        cfg["reps"] = max(1, min(args.reps, 20))
    chosen = [s for s in SCENARIOS if not args.only or s.name in args.only.split(",")]
    if args.only and len(chosen) != len(set(args.only.split(","))):
        ap.error(f"unknown scenario in {args.only!r}")

    install_cleanup()
    pinned = pin(CLIENT_CPU)
    need = max(cfg["idle"]) + 1000
    soft, hard = raise_nofile(need)
    if soft < need:
        fit = max(100, (soft - 1000) // 1000 * 1000)
        print(
            f"open-file limit {soft} (hard {hard}) is under {need}: idle sessions "
            f"measured up to {fit} instead",
            flush=True,
        )
        cfg["idle"] = sorted({min(n, fit) for n in cfg["idle"]})
    info = machine()
    print(
        f"vrt bench {mode_name}: scenarios {','.join(s.name for s in chosen)}; "
        f"client pinned to CPU {CLIENT_CPU}: {pinned}; {info['nproc']} CPUs "
        f"({info['cpu_model']}); loadavg {os.getloadavg()[0]:.2f}",
        flush=True,
    )

    started = time.monotonic()
    results: dict[str, dict[str, dict[str, Any]]] = {}
    errors: list[str] = []
    for scenario in chosen:
        reps = cfg.get(f"reps_{scenario.name}", cfg["reps"])
        raw: dict[str, list[dict[str, Any]]] = {k: [] for k in scenario.kinds}
        for rep in range(reps):
            shift = rep % len(scenario.kinds)
            for kind in scenario.kinds[shift:] + scenario.kinds[:shift]:
                try:
                    res = run_once(scenario, kind, cfg, args)
                except Exception as exc:
                    errors.append(f"{scenario.name} {kind} rep {rep}: {exc}")
                    print(f"  {scenario.name:9s} {kind:10s} ERROR {exc}", flush=True)
                    continue
                raw[kind].append(res)
                shown = ", ".join(
                    f"{k} {v:.4g}"
                    for k, v in res.items()
                    if isinstance(v, float) and not k.endswith("_mean")
                )
                print(f"  {scenario.name:9s} {kind:10s} rep {rep}: {shown}", flush=True)
        results[scenario.name] = {
            k: {"summary": median_summary(v), "raw": v} for k, v in raw.items() if v
        }

    rows = build_rows(results)
    print()
    print(render(rows))
    foreign = [
        r.get("foreign_cores", 0.0) for s in results.values() for k in s.values() for r in k["raw"]
    ]
    worst = max(foreign, default=0.0)
    print(
        f"\nmode {mode_name}, {time.monotonic() - started:.0f} s; other load on the "
        f"machine up to {worst:.2f} cores during a run"
        + (" (noisy: compare ratios, not absolute figures)" if worst > 0.25 else "")
    )
    if errors:
        print("errors:", *errors, sep="\n  ")

    tag = "+" + args.experiment.replace(",", "+") if args.experiment else ""
    out = args.json or ROOT / "bench" / "results" / f"bench-{mode_name}{tag}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "mode": mode_name,
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "elapsed_s": round(time.monotonic() - started, 1),
        "machine": info,
        "client": f"picows ws_connect on uvloop, pinned to CPU {CLIENT_CPU}: {pinned}",
        "config": cfg,
        "experiments": [e for e in args.experiment.split(",") if e],
        "wait_quiet": args.wait_quiet,
        "rows": [{k: v for k, v in r.items() if k != "fmt"} for r in rows],
        "scenarios": results,
        "max_foreign_cores": worst,
        "errors": errors,
    }
    out.write_text(json.dumps(doc, indent=1, default=_jsonable))
    print(f"wrote {out}")
    return 1 if errors else 0


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return str(value)


if __name__ == "__main__":
    sys.exit(main())
