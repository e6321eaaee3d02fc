"""What a run of a conformance suite reports: a line per check, the verdict, the exit
status, and the JSON and JUnit XML reports. Both suites share it.

The verdict of a run:

- **failed** (exit 1): a MUST check failed;
- **incomplete** (exit 3): no MUST check failed, but some were skipped: their rules
  apply to the implementation and were not judged (``--allow-skips`` accepts this and
  exits 0);
- **passed** (exit 0): every MUST check passed or does not apply.

SHOULD checks are reported and never change the verdict. Exit 2 (the implementation
cannot be reached or started) is the suites' own.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Final, Literal, TypeAlias
from xml.etree import ElementTree

from rich.console import Console
from rich.text import Text

from .framework import Result

__all__ = [
    "EXIT_FAILED",
    "EXIT_INCOMPLETE",
    "EXIT_PASSED",
    "EXIT_UNREACHABLE",
    "Verdict",
    "exit_status",
    "finish_run",
    "print_result",
    "print_verdict",
    "summary_line",
    "verdict",
    "write_json",
    "write_junit",
]

EXIT_PASSED: Final = 0
EXIT_FAILED: Final = 1
EXIT_UNREACHABLE: Final = 2
EXIT_INCOMPLETE: Final = 3

Verdict: TypeAlias = Literal["passed", "failed", "incomplete"]

_MARKS: Final = {
    "pass": ("✔", "green"),
    "fail": ("✘", "red"),
    "skip": ("-", "yellow"),
    "n/a": ("∅", "dim"),
}


def _count(results: Sequence[Result], outcome: str, level: str | None = None) -> int:
    return sum(r.outcome == outcome and (level is None or r.level == level) for r in results)


def summary_line(results: Sequence[Result]) -> str:
    """``N passed, N failed, N skipped, N not applicable``."""
    return (
        f"{_count(results, 'pass')} passed, {_count(results, 'fail')} failed, "
        f"{_count(results, 'skip')} skipped, {_count(results, 'n/a')} not applicable"
    )


def verdict(results: Sequence[Result]) -> Verdict:
    if _count(results, "fail", "MUST"):
        return "failed"
    if _count(results, "skip", "MUST"):
        return "incomplete"
    return "passed"


def exit_status(results: Sequence[Result], *, allow_skips: bool = False) -> int:
    outcome = verdict(results)
    if outcome == "failed":
        return EXIT_FAILED
    if outcome == "incomplete" and not allow_skips:
        return EXIT_INCOMPLETE
    return EXIT_PASSED


def verdict_line(results: Sequence[Result], *, allow_skips: bool = False) -> str:
    """The last line of a run: the verdict, and what made it."""
    outcome = verdict(results)
    if outcome == "failed":
        return f"FAILED: {_count(results, 'fail', 'MUST')} MUST checks failed"
    if outcome == "incomplete":
        skipped = _count(results, "skip", "MUST")
        accepted = " (accepted: --allow-skips)" if allow_skips else " (--allow-skips accepts it)"
        return f"INCOMPLETE: {skipped} MUST checks skipped, their rules not judged{accepted}"
    return "PASSED: every MUST check passed or does not apply"


def print_result(console: Console, result: Result, frames: int = 40) -> None:
    """One line per check (✔ passed, ✘ failed, - skipped, ∅ not applicable), the detail
    indented below, and a failure's frames."""
    mark, style = _MARKS[result.outcome]
    line = Text()
    line.append(f"{mark} ", style=style)
    line.append(f"{result.check_id}  ", style="bold")
    line.append(f"{result.section} {result.level}  {result.title}  ({result.seconds:.1f} s)")
    console.print(line)
    for text in result.detail.splitlines():
        console.print(Text(f"    {text}", style=style if result.outcome == "fail" else "dim"))
    if result.outcome == "fail" and result.frames:
        console.print(Text("    frames:", style="dim"))
        if len(result.frames) > frames:
            console.print(Text(f"      ... {len(result.frames) - frames} earlier", style="dim"))
        for text in result.frames[-frames:]:
            console.print(Text(f"      {text}", style="dim"))


def print_verdict(console: Console, results: Sequence[Result], *, allow_skips: bool) -> None:
    console.print(summary_line(results), markup=False, style="bold")
    style = {"passed": "green", "failed": "red", "incomplete": "yellow"}[verdict(results)]
    console.print(verdict_line(results, allow_skips=allow_skips), markup=False, style=style)
    skipped = [r.check_id for r in results if r.outcome == "skip" and r.level == "MUST"]
    if skipped:
        console.print(f"skipped MUST checks: {', '.join(skipped)}", markup=False, style="dim")


def write_json(
    results: Sequence[Result], path: Path, suite: str, target: str, *, allow_skips: bool = False
) -> None:
    document = {
        "suite": suite,
        "target": target,
        "verdict": verdict(results),
        "exitStatus": exit_status(results, allow_skips=allow_skips),
        "summary": summary_line(results),
        "counts": {o: _count(results, o) for o in ("pass", "fail", "skip", "n/a")},
        "mustSkipped": [r.check_id for r in results if r.outcome == "skip" and r.level == "MUST"],
        "results": [r.__dict__ for r in results],
    }
    path.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def finish_run(
    console: Console,
    results: Sequence[Result],
    *,
    suite: str,
    target: str,
    json_path: Path | None,
    junit_path: Path | None,
    allow_skips: bool,
) -> int:
    """The end of either suite's run: the verdict printed, the reports asked for
    written; the exit status."""
    print_verdict(console, results, allow_skips=allow_skips)
    if json_path is not None:
        write_json(results, json_path, suite, target, allow_skips=allow_skips)
    if junit_path is not None:
        write_junit(results, junit_path, suite)
    return exit_status(results, allow_skips=allow_skips)


def write_junit(results: Sequence[Result], path: Path, suite: str) -> None:
    """JUnit XML: ``classname`` ``SUITE.SECTION``, name ``[LEVEL] id``; skipped and not
    applicable checks are ``skipped`` (the message says which)."""
    root = ElementTree.Element(
        "testsuite",
        name=f"vrt conformance {suite}",
        tests=str(len(results)),
        failures=str(_count(results, "fail")),
        skipped=str(_count(results, "skip") + _count(results, "n/a")),
        time=f"{sum(r.seconds for r in results):.3f}",
    )
    for r in results:
        case = ElementTree.SubElement(
            root,
            "testcase",
            classname=f"{suite}.{r.section}",
            name=f"[{r.level}] {r.check_id}",
            time=f"{r.seconds:.3f}",
        )
        if r.outcome == "fail":
            failure = ElementTree.SubElement(
                case, "failure", message=r.detail.splitlines()[0] if r.detail else ""
            )
            failure.text = r.detail + ("\n\nframes:\n" + "\n".join(r.frames) if r.frames else "")
        elif r.outcome == "skip":
            ElementTree.SubElement(case, "skipped", message=r.detail)
        elif r.outcome == "n/a":
            ElementTree.SubElement(case, "skipped", message=f"not applicable: {r.detail}")
    ElementTree.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)
