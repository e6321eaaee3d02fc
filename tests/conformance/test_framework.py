"""The suites' frame: choosing checks by id, glob or section; verdicts and exit codes."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from vrt.cli import app
from vrt.conformance.framework import Result, Suite
from vrt.conformance.reports import exit_status, summary_line, verdict
from vrt.conformance.server_suite import SUITE


async def _nothing(context: object) -> None:
    """a check that judges nothing"""


def _suite() -> Suite[object]:
    suite: Suite[object] = Suite("test", {"scripted": "the contract"})
    for check_id, section in (
        ("resume-hello", "§5.4"),
        ("resume-resend", "§5.4, §4.3"),
        ("seq-numbering", "§4.1"),
        ("tool-output", "§7.2"),
        ("tool-stream", "§7.5 (messages.md)"),
    ):
        suite.check(section, "MUST", "title", id=check_id)(_nothing)
    return suite


@pytest.mark.parametrize(
    ("only", "skip", "chosen"),
    [
        ((), (), ["resume-hello", "resume-resend", "seq-numbering", "tool-output", "tool-stream"]),
        (("§5.4",), (), ["resume-hello", "resume-resend"]),
        (("4.3",), (), ["resume-resend"]),
        (("4",), (), ["resume-resend", "seq-numbering"]),
        (("7",), ("tool-stream",), ["tool-output"]),
        (("resume-*",), ("§4",), ["resume-hello"]),
        (("tool",), (), ["tool-output", "tool-stream"]),
        (("tool-*t",), (), ["tool-output"]),
    ],
)
def test_selection_by_id_glob_part_or_section(
    only: tuple[str, ...], skip: tuple[str, ...], chosen: list[str]
) -> None:
    assert [c.id for c in _suite().select(only, skip)] == chosen


def test_a_check_needs_only_what_its_suite_knows() -> None:
    with pytest.raises(ValueError, match="needs"):
        _suite().check("§1", "MUST", "t", id="odd-need", needs=("a-microphone",))(_nothing)


def _result(level: str, outcome: str) -> Result:
    return Result("id", "§1", level, "t", outcome)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("outcomes", "expected", "status", "accepted"),
    [
        ([("MUST", "pass"), ("SHOULD", "fail"), ("MUST", "n/a")], "passed", 0, 0),
        ([("MUST", "pass"), ("MUST", "skip"), ("SHOULD", "skip")], "incomplete", 3, 0),
        ([("MUST", "fail"), ("MUST", "skip")], "failed", 1, 1),
    ],
)
def test_verdicts(
    outcomes: list[tuple[str, str]], expected: str, status: int, accepted: int
) -> None:
    results = [_result(level, outcome) for level, outcome in outcomes]
    assert verdict(results) == expected
    assert exit_status(results) == status
    assert exit_status(results, allow_skips=True) == accepted


def test_summary_counts_every_outcome() -> None:
    results = [_result("MUST", o) for o in ("pass", "pass", "fail", "skip", "n/a")]
    assert summary_line(results) == "2 passed, 1 failed, 1 skipped, 1 not applicable"


def test_server_list_needs_no_server() -> None:
    listing = CliRunner().invoke(app, ["conformance", "server", "--list", "--only", "§7.2"])
    assert listing.exit_code == 0, listing.output
    lines = listing.output.splitlines()
    assert lines[0].split() == ["id", "section", "level", "needs"]
    row = next(line for line in lines if line.startswith("tool-result-after-timeout-ignored"))
    assert row.split()[-2:] == ["scripted,", "tool-timeout"]
    chosen = {c.id for c in SUITE.select(["§7.2"])}
    assert {line.split()[0] for line in lines[1 : len(chosen) + 1]} == chosen
    assert "tool-timeout: --tool-timeout SEC" in listing.output


def test_server_needs_a_url_unless_listing() -> None:
    outcome = CliRunner().invoke(app, ["conformance", "server"])
    assert outcome.exit_code == 2
