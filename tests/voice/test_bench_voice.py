"""``python -m bench.voice --smoke`` runs end to end and writes every figure it names.
No timing is asserted: the machine is noisy (docs/performance.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(300)
def test_the_voice_benchmark_runs(tmp_path: Path) -> None:
    out = tmp_path / "voice.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.voice",
            "--smoke",
            "--only",
            "latency,rtf",
            "--json",
            str(out),
        ],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads(out.read_text())
    assert results["latency_ms"]["voice_to_voice"]["n"] >= 1
    assert set(results["latency_ms"]) >= {"end_of_turn_wait", "first_clause_synthesis"}
    assert results["rtf"]["stt_cpu_rtf"] > 0
