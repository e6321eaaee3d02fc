"""The client suite's own tests.

The whole suite runs against the reference client (the Python SDK); selected checks
run against deliberately broken clients (``broken_clients.py``), and the checks that
judge the broken rule must fail while unrelated ones still pass.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from xml.etree import ElementTree

import pytest
from typer.testing import CliRunner

from vrt.cli import app
from vrt.conformance.client_suite import run_client_checks, run_client_suite, suite
from vrt.conformance.framework import Result

REFERENCE = [sys.executable, "-m", "vrt.conformance.reference_client"]
BROKEN = Path(__file__).with_name("broken_clients.py")
#: Checks at a time: each has its own server and client process.
JOBS = 2

#: Checks the Python SDK fails today, with the defect. Remove an entry once it is
#: fixed (``test_reference_client_known_sdk_failures`` then XPASSes and fails, strict).


def _broken(variant: str) -> list[str]:
    return [sys.executable, str(BROKEN), variant]


def _explain(results: list[Result]) -> str:
    lines = []
    for r in results:
        lines.append(f"{r.outcome.upper()} {r.check_id}: {r.detail}")
        if r.outcome == "fail":
            lines.extend(f"    | {frame}" for frame in r.frames[-25:])
    return "\n".join(lines)


def test_suite_has_enough_checks() -> None:
    ids = [c.id for c in suite.checks]
    assert len(ids) >= 20
    assert len(set(ids)) == len(ids)
    assert {c.level for c in suite.checks} == {"MUST", "SHOULD"}
    for check in suite.checks:
        assert check.section[0].isdigit(), check.id


async def test_reference_client_passes() -> None:
    results = await run_client_checks(REFERENCE, jobs=JOBS)
    assert len(results) == len(suite.checks)
    unexpected = [r for r in results if r.outcome == "fail"]
    skipped = [r for r in results if r.outcome == "skip"]
    assert not unexpected, _explain(unexpected)
    assert not skipped, _explain(skipped)


#: variant -> (checks that must fail, checks that must still pass)
BROKEN_VARIANTS: dict[str, tuple[set[str], set[str]]] = {
    "closed-epoch-runs": (
        {
            "closed-epoch-call-interrupted",
            "queued-calls-interrupted",
            "running-call-interrupted",
            "closed-epoch-audio-not-played",
        },
        {"hello-first"},
    ),
    "answers-twice": ({"exactly-one-result"}, {"tool-output"}),
    "no-dedupe": ({"dedupe-resent", "dedupe-after-resume"}, {"tool-output"}),
    "replays-after-resume-failed": (
        {"resume-failed-no-replay", "resumed-from-beyond-sent"},
        {"resume-resend"},
    ),
    "text-before-ready": ({"nothing-before-ready"}, {"tool-output"}),
    "concurrent-calls": ({"calls-one-at-a-time"}, {"tool-output"}),
    "no-resend": ({"resume-resend", "calls-survive-drops"}, {"resume-hello"}),
    "playback-overreports": (
        {"playback-not-beyond-sent", "audio-without-start-discarded"},
        {"tool-output"},
    ),
}


@pytest.mark.parametrize("variant", sorted(BROKEN_VARIANTS))
async def test_broken_client_is_caught(variant: str) -> None:
    must_fail, must_pass = BROKEN_VARIANTS[variant]
    results = await run_client_checks(
        _broken(variant), select=sorted(must_fail | must_pass), jobs=JOBS
    )
    outcomes = {r.check_id: r.outcome for r in results}
    assert must_fail | must_pass <= outcomes.keys()
    wrong = [
        r
        for r in results
        if (r.check_id in must_fail and r.outcome != "fail")
        or (r.check_id in must_pass and r.outcome != "pass")
    ]
    assert not wrong, _explain(results)
    for r in results:
        if r.outcome == "fail":
            assert r.frames, f"{r.check_id} failed without the frames that show it"


def test_reports_and_exit_status(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    json_path, junit_path = tmp_path / "client.json", tmp_path / "client.xml"
    status = run_client_suite(
        _broken("answers-twice"),
        select=["exactly-one-result", "unknown-tool-failed"],
        json_path=json_path,
        junit_path=junit_path,
        jobs=JOBS,
    )
    assert status == 1  # a MUST check failed
    out = capsys.readouterr().out
    assert out.rstrip().endswith("1 passed, 1 failed, 0 skipped")
    report = json.loads(json_path.read_text(encoding="utf-8"))
    assert report["suite"] == "client"
    assert report["summary"] == "1 passed, 1 failed, 0 skipped"
    failed = [r for r in report["results"] if r["outcome"] == "fail"]
    assert [r["check_id"] for r in failed] == ["exactly-one-result"]
    assert failed[0]["level"] == "MUST"
    assert failed[0]["section"] == "7.2"
    assert any('"type":"tool.result"' in line for line in failed[0]["frames"])
    root = ElementTree.parse(junit_path).getroot()
    assert root.get("tests") == "2"
    assert root.get("failures") == "1"
    assert root.find("testcase/failure") is not None


def test_command_line() -> None:
    runner = CliRunner()
    outcome = runner.invoke(app, ["conformance", "client", "-k", "hello-tools", "--", *REFERENCE])
    assert outcome.exit_code == 0, outcome.output
    assert "1 passed, 0 failed, 0 skipped" in outcome.output
    missing = runner.invoke(app, ["conformance", "client", "--", "/nonexistent/vrt-client"])
    assert missing.exit_code == 2
