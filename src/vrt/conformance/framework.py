"""The conformance suites' frame of checks: registration, running, reports.

A check is an async function registered on a :class:`Suite` with the spec section it
judges and its level (MUST or SHOULD). It passes by returning, fails by raising
:class:`CheckFailed` (with the frames that show it), and is skipped by raising
:class:`Skipped` (with why). The run ends with the line ``N passed, N failed, N skipped``
and, when asked, a JSON and a JUnit XML report.
"""

from __future__ import annotations

import asyncio
import json
import time
import traceback
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Literal, TypeAlias, TypeVar
from xml.etree import ElementTree

__all__ = [
    "Check",
    "CheckFailed",
    "Level",
    "Outcome",
    "Result",
    "Skipped",
    "Suite",
    "summary_line",
    "write_json",
    "write_junit",
]

Level: TypeAlias = Literal["MUST", "SHOULD"]
Outcome: TypeAlias = Literal["pass", "fail", "skip"]
C = TypeVar("C")


class CheckFailed(AssertionError):
    """The implementation under test broke the rule; ``frames`` show it."""

    def __init__(self, message: str, frames: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.frames = list(frames)


class Skipped(Exception):
    """The check cannot run against this implementation; the message says why."""


@dataclass(frozen=True)
class Check(Generic[C]):
    id: str
    section: str
    level: Level
    title: str
    run: Callable[[C], Awaitable[None]]


@dataclass
class Result:
    check_id: str
    section: str
    level: Level
    title: str
    outcome: Outcome
    detail: str = ""
    frames: list[str] = field(default_factory=list)
    seconds: float = 0.0


class Suite(Generic[C]):
    """An ordered collection of checks run against one context type ``C``."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.checks: list[Check[C]] = []

    def check(
        self, section: str, level: Level, title: str, *, id: str | None = None
    ) -> Callable[[Callable[[C], Awaitable[None]]], Callable[[C], Awaitable[None]]]:
        """Register an async check ``(context) -> None``."""

        def register(function: Callable[[C], Awaitable[None]]) -> Callable[[C], Awaitable[None]]:
            check_id = id or function.__name__.removeprefix("check_").replace("_", "-")
            if any(c.id == check_id for c in self.checks):
                raise ValueError(f"two checks named {check_id}")
            self.checks.append(Check(check_id, section, level, title, function))
            return function

        return register

    def select(self, patterns: Iterable[str] = ()) -> list[Check[C]]:
        """Checks whose id or section contains any of ``patterns`` (all when none)."""
        wanted = list(patterns)
        if not wanted:
            return list(self.checks)
        return [c for c in self.checks if any(p in c.id or p == c.section for p in wanted)]

    async def run(
        self,
        make_context: Callable[[], Awaitable[C]],
        close_context: Callable[[C], Awaitable[None]],
        *,
        checks: Iterable[Check[C]] | None = None,
        timeout: float = 20.0,
        on_result: Callable[[Result], None] | None = None,
    ) -> list[Result]:
        """Run every check with a fresh context, one at a time, each within ``timeout``."""
        results: list[Result] = []
        for check in self.checks if checks is None else checks:
            started = time.perf_counter()
            context = await make_context()
            try:
                await asyncio.wait_for(check.run(context), timeout)
                result = _result(check, "pass")
            except Skipped as skip:
                result = _result(check, "skip", str(skip))
            except CheckFailed as failure:
                result = _result(check, "fail", str(failure), failure.frames)
            except TimeoutError:
                frames: list[str] = getattr(context, "frames", lambda: [])()
                result = _result(check, "fail", f"no verdict within {timeout:g} s", frames)
            except Exception as exc:
                frames = getattr(context, "frames", lambda: [])()
                detail = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}"
                result = _result(check, "fail", detail, frames)
            finally:
                await close_context(context)
            result.seconds = round(time.perf_counter() - started, 4)
            results.append(result)
            if on_result is not None:
                on_result(result)
        return results


def _result(
    check: Check[Any], outcome: Outcome, detail: str = "", frames: Sequence[str] = ()
) -> Result:
    return Result(check.id, check.section, check.level, check.title, outcome, detail, list(frames))


def summary_line(results: Sequence[Result]) -> str:
    counts = {
        outcome: sum(r.outcome == outcome for r in results) for outcome in ("pass", "fail", "skip")
    }
    return f"{counts['pass']} passed, {counts['fail']} failed, {counts['skip']} skipped"


def must_failed(results: Sequence[Result]) -> bool:
    return any(r.outcome == "fail" and r.level == "MUST" for r in results)


def write_json(results: Sequence[Result], path: Path, suite: str, target: str) -> None:
    document = {
        "suite": suite,
        "target": target,
        "summary": summary_line(results),
        "results": [r.__dict__ for r in results],
    }
    path.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def write_junit(results: Sequence[Result], path: Path, suite: str) -> None:
    failures = sum(r.outcome == "fail" for r in results)
    skipped = sum(r.outcome == "skip" for r in results)
    root = ElementTree.Element(
        "testsuite",
        name=f"vrt conformance {suite}",
        tests=str(len(results)),
        failures=str(failures),
        skipped=str(skipped),
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
    ElementTree.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)
