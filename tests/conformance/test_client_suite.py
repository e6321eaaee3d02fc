"""The client suite's own tests.

The whole suite runs against the reference client (the Python SDK); selected checks
run against clients that are not ours as it is (``broken_clients.py``): against a
broken one, the checks that judge the broken rule fail while unrelated ones still pass;
against a correct but unusual one (it pings before ready, has no speaker or no
microphone), nothing fails.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pytest
from rich.console import Console
from typer.testing import CliRunner

from vrt.cli import app
from vrt.conformance.client_suite import NEEDS, SUITE, run_client_checks, run_client_suite
from vrt.conformance.framework import Outcome, Result
from vrt.conformance.reports import EXIT_FAILED, EXIT_INCOMPLETE, EXIT_PASSED

REFERENCE = [sys.executable, "-m", "vrt.conformance.reference_client"]
BROKEN = Path(__file__).with_name("broken_clients.py")
#: Checks at a time: each has its own server and client process.
JOBS = 2
OUTPUT_CHECKS = (
    "audio-without-start-discarded",
    "closed-epoch-audio-not-played",
    "playback-not-beyond-sent",
    "playback-reported",
)
INPUT_CHECKS = ("audio-input-frames", "audio-input-pcm16-24k", "audio-input-preferred-format")


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
    ids = [c.id for c in SUITE.checks]
    assert len(ids) >= 45
    assert len(set(ids)) == len(ids)
    assert {c.level for c in SUITE.checks} == {"MUST", "SHOULD"}
    for check in SUITE.checks:
        assert check.section.startswith("§"), check.id
        assert set(check.needs) <= NEEDS.keys(), check.id


def test_readme_lists_every_check() -> None:
    readme = (Path(__file__).parents[2] / "conformance" / "README.md").read_text("utf-8")
    client_part = readme.split("## Client suite")[1]
    missing = [c.id for c in SUITE.checks if f"`{c.id}`" not in client_part]
    assert not missing, f"conformance/README.md does not describe {missing}"
    variants = re.findall(
        r"^\| `([a-z-]+)` \|", client_part.split("### The suite's own tests")[1], re.M
    )
    assert set(variants) == {*BROKEN_VARIANTS, *CORRECT_VARIANTS, "crashes-at-start"}


async def test_reference_client_passes() -> None:
    results = await run_client_checks(REFERENCE, jobs=JOBS)
    assert len(results) == len(SUITE.checks)
    assert not [r for r in results if r.outcome != "pass"], _explain(results)


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
    "accepts-any-version": ({"version-2-not-acted"}, {"malformed-frames-survive"}),
    "forgets-closed-epochs": (
        {"closed-epoch-call-after-resume"},
        {"closed-epoch-call-interrupted"},
    ),
    "no-cancel-signal": (
        {"running-call-cancelled", "client-interrupt-closes-epoch"},
        {"running-call-interrupted"},
    ),
    "interrupt-without-closing": (
        {"client-interrupt-message", "client-interrupt-closes-epoch"},
        {"closed-epoch-call-interrupted"},
    ),
    "interrupts-an-older-epoch": ({"client-interrupt-message"}, {"client-interrupt-closes-epoch"}),
    "credential-in-url": ({"auth-not-in-url"}, {"hello-first"}),
    "unregistered-capability": ({"hello-capabilities-registered"}, {"hello-tools"}),
    "ignores-input-format": (
        {"audio-input-pcm16-24k"},
        {"audio-input-frames", "audio-input-preferred-format"},
    ),
}


@pytest.mark.parametrize("variant", sorted(BROKEN_VARIANTS))
async def test_broken_client_is_caught(variant: str) -> None:
    must_fail, must_pass = BROKEN_VARIANTS[variant]
    results = await run_client_checks(
        _broken(variant), only=sorted(must_fail | must_pass), jobs=JOBS
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


#: variant -> (run options, check id -> its outcome)
CORRECT_VARIANTS: dict[str, tuple[dict[str, Any], dict[str, Outcome]]] = {
    # A client may ping before ready (§4.4): the dead connection is still judged on the
    # pings after ready, the same way every run.
    "pings-before-ready": (
        {},
        {
            "dead-connection-resumed": "pass",
            "ping-when-silent": "pass",
            "nothing-before-ready": "pass",
        },
    ),
    "no-speaker": ({"audio_output": False}, dict.fromkeys(OUTPUT_CHECKS, "n/a")),
    "no-microphone": ({"audio_input": False}, dict.fromkeys(INPUT_CHECKS, "n/a")),
}


@pytest.mark.parametrize("variant", sorted(CORRECT_VARIANTS))
async def test_correct_client_is_not_failed(variant: str) -> None:
    options, expected = CORRECT_VARIANTS[variant]
    runs = 2 if variant == "pings-before-ready" else 1  # the same verdict every run
    for _ in range(runs):
        results = await run_client_checks(
            _broken(variant), only=sorted(expected), jobs=JOBS, **options
        )
        assert {r.check_id: r.outcome for r in results} == expected, _explain(results)


async def test_undeclared_missing_audio_leaves_the_run_incomplete() -> None:
    """Without --no-audio-output, a client that reports no playback leaves the MUST
    checks that read reports unjudged (skipped, saying how to declare it), and fails the
    SHOULD that it reports."""
    results = await run_client_checks(_broken("no-speaker"), only=OUTPUT_CHECKS, jobs=JOBS)
    outcomes = {r.check_id: r.outcome for r in results}
    assert outcomes == {**dict.fromkeys(OUTPUT_CHECKS[:3], "skip"), "playback-reported": "fail"}
    assert all("--no-audio-output" in r.detail for r in results), _explain(results)


async def test_a_client_that_dies_at_start_fails_fast() -> None:
    """Every wait of a check ends when the client's process exits: with a connect
    timeout far beyond the check's, each check still fails on the exit, not on time."""
    results = await run_client_checks(
        _broken("crashes-at-start"),
        only=["hello-first", "tool-output", "resume-hello"],
        connect_timeout=600.0,
        timeout=60.0,
    )
    for r in results:
        assert r.outcome == "fail"
        assert "exited with code 3" in r.detail, r.detail
        assert "within" not in r.detail, r.detail


def test_reports_and_exit_status(tmp_path: Path) -> None:
    json_path, junit_path = tmp_path / "client.json", tmp_path / "client.xml"
    output = tmp_path / "out.txt"
    with output.open("w") as stream:
        status = run_client_suite(
            _broken("answers-twice"),
            only=["exactly-one-result", "unknown-tool-failed"],
            json_path=json_path,
            junit_path=junit_path,
            jobs=JOBS,
            console=Console(file=stream, width=200),
        )
    assert status == EXIT_FAILED
    assert "1 passed, 1 failed, 0 skipped, 0 not applicable" in output.read_text()
    report = json.loads(json_path.read_text(encoding="utf-8"))
    assert report["suite"] == "client"
    assert report["verdict"] == "failed"
    failed = [r for r in report["results"] if r["outcome"] == "fail"]
    assert [r["check_id"] for r in failed] == ["exactly-one-result"]
    assert failed[0]["level"] == "MUST"
    assert failed[0]["section"] == "§7.2"
    assert any('"type":"tool.result"' in line for line in failed[0]["frames"])
    root = ElementTree.parse(junit_path).getroot()
    assert root.get("tests") == "2"
    assert root.get("failures") == "1"
    assert root.find("testcase/failure") is not None


def test_command_line() -> None:
    runner = CliRunner()
    outcome = runner.invoke(
        app, ["conformance", "client", "--only", "hello-tools", "--", *REFERENCE]
    )
    assert outcome.exit_code == EXIT_PASSED, outcome.output
    assert "1 passed, 0 failed, 0 skipped, 0 not applicable" in outcome.output
    incomplete = runner.invoke(
        app,
        [
            "conformance",
            "client",
            "--only",
            "playback-reported",
            "--only",
            "playback-not-*",
            "--",
            *_broken("no-speaker"),
        ],
    )
    assert incomplete.exit_code == EXIT_INCOMPLETE, incomplete.output
    declared = runner.invoke(
        app,
        [
            "conformance",
            "client",
            "--no-audio-output",
            "--only",
            "playback-*",
            "--",
            *_broken("no-speaker"),
        ],
    )
    assert declared.exit_code == EXIT_PASSED, declared.output
    listing = runner.invoke(app, ["conformance", "client", "--list", "--skip", "§8"])
    assert listing.exit_code == 0, listing.output
    assert "client-interrupt-message" in listing.output
    assert "playback-reported" not in listing.output
    missing = runner.invoke(app, ["conformance", "client", "--", "/nonexistent/vrt-client"])
    assert missing.exit_code == 2
