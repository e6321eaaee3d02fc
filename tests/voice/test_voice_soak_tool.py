"""``python -m load --attack voice-soak`` (docs/runs/2026-12-05-voice-soak-2.md): the
server takes the ``--agent-option``\\ s given, and the soak gives the RSS growth per
session by a least-squares line after its first quarter."""

from __future__ import annotations

import importlib
import math
import re
import sys

import pytest

from support.processes import TESTS, run_repo_module

pytestmark = pytest.mark.timeout(120)


def _attacks() -> object:
    sys.path.insert(0, str(TESTS.parent))
    try:
        return importlib.import_module("load.attacks")
    finally:
        sys.path.remove(str(TESTS.parent))


def test_the_growth_per_session_is_the_slope_of_rss_over_sessions() -> None:
    growth = _attacks().per_session_growth  # type: ignore[attr-defined]
    # 1 MiB more every 1024 sessions: 1 KiB a session, whatever the noise around it.
    points = [
        (count, 500.0 + count / 1024 + (0.01 if count % 2 else -0.01))
        for count in range(0, 10_240, 1024)
    ]
    assert growth(points) == pytest.approx(1024, rel=0.01)
    assert math.isnan(growth(points[:2]))
    assert math.isnan(growth([(5, 500.0)] * 4))


def test_a_short_soak_runs_with_the_agent_options_given() -> None:
    done = run_repo_module(
        "load",
        "--attack",
        "voice-soak",
        "--seconds",
        "3",
        "--agent-option",
        "tts=espeak",
        timeout=100,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    fit = r" 0 failed; RSS growth after the first quarter \S+ B per session"
    assert re.search(fit, done.stdout), done.stdout
    refused = run_repo_module(
        "load",
        "--attack",
        "voice-soak",
        "--seconds",
        "3",
        "--agent-option",
        "tts=nope",
        timeout=100,
    )
    assert refused.returncode != 0
    assert "vrt serve did not start: " in refused.stderr
    assert "tts must be" in refused.stderr
