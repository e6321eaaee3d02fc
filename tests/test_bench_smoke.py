"""The benchmark runner works end to end: ``python -m bench --smoke`` starts every server,
runs every scenario and prints a table with every scenario. No timing is asserted: the
machine is noisy (docs/performance.md)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from support.processes import run_repo_module

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.timeout(240)
def test_bench_smoke_prints_every_scenario(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    done = run_repo_module("bench", "--smoke", "--json", str(out), timeout=200)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from bench.scenarios import SCENARIOS

    table = [line for line in done.stdout.splitlines() if line.startswith("| ")]
    for scenario in SCENARIOS:
        assert any(line.startswith(f"| {scenario.title} |") for line in table), scenario.name
    doc = json.loads(out.read_text())
    assert doc["errors"] == []
    assert {row["scenario"] for row in doc["rows"]} == {s.name for s in SCENARIOS}
    for row in doc["rows"]:
        assert row["vrt"] is not None, row
        assert row["vrt"] >= 0, row
