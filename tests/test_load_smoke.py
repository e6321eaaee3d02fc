"""The load generator works end to end at a tiny size: ``python -m load`` starts its
server and workers, holds text and audio sessions, and reports them with no error. No
timing is asserted (docs/reliability.md has the full-size figures, run by hand)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from support.processes import run_repo_module


def run_load(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return run_repo_module("load", *args, timeout=timeout)


@pytest.mark.timeout(180)
def test_a_small_load_run_reports_every_session_without_error(tmp_path: Path) -> None:
    out = tmp_path / "load.json"
    done = run_load(
        *("--text-sessions", "4", "--audio-sessions", "2", "--minutes", "0.15"),
        *("--ramp", "1", "--workers", "1", "--warmup", "2", "--churn", "1", "--json", str(out)),
        *("--pause-every", "3", "--pause-for", "0.5"),
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["opened"] == 6
    assert report["errors"] == 0, report["error_samples"]
    assert report["turns"] >= 1
    # Every turn dropped its connection mid-reply and resumed, with no gap or repeat.
    assert report["resumes"] >= report["turns"]
    assert report["audio_frames_sent"] > 100
    assert report["audio_frames_received"] > 100
    assert report["workers_reported"] == 1
    assert report["server_rss_mb"]["max"] > 0
    assert report["server_rss_mb"]["warmup_s"] == 2
    # The server was stopped now and then: its clients waited, and lost nothing.
    assert report["pauses"] >= 2
    assert report["audio_frame_lateness_ms"]["max"] >= 400  # a stopped server sends nothing
    assert report["server_processes_rss_mb"] == {}  # one process: the total is its own


def test_only_loopback_servers_are_loaded() -> None:
    done = run_load("--url", "ws://192.0.2.1:8765", "--text-sessions", "1", timeout=30)
    assert done.returncode == 2
    assert "--url must be a loopback address" in done.stderr
