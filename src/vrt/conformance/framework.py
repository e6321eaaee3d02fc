"""The conformance suites' frame of checks: registration, selection and running.

A check is an async function registered on a :class:`Suite` with the spec section it
judges, its level (MUST or SHOULD) and what it needs from the implementation or the
run (``needs``: a credential, the scripted agent contract, audio output, ...). It
passes by returning, fails by raising :class:`CheckFailed` (with the frames that show
it), is skipped by raising :class:`Skipped` (its rule applies, but the run could not
judge it) and is not applicable when it raises :class:`NotApplicable` (the rule only
binds a feature the implementation does not have: a capability it does not support, a
loopback URL for the TLS rule, a client without a speaker).

A MUST check that was skipped leaves the run *incomplete* (:mod:`.reports`); one that
is not applicable does not.
"""

from __future__ import annotations

import asyncio
import fnmatch
import inspect
import re
import time
import traceback
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeAlias, TypeVar

__all__ = [
    "Check",
    "CheckFailed",
    "Level",
    "NotApplicable",
    "Outcome",
    "Result",
    "Skipped",
    "Suite",
    "matches",
    "title_of",
]

Level: TypeAlias = Literal["MUST", "SHOULD"]
Outcome: TypeAlias = Literal["pass", "fail", "skip", "n/a"]
C = TypeVar("C")

_KEBAB = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
_SECTION = re.compile(r"§?(\d+(?:\.\d+)*)")


class CheckFailed(AssertionError):
    """The implementation under test broke the rule; ``frames`` show it."""

    def __init__(self, message: str, frames: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.frames = list(frames)


class Skipped(Exception):
    """The rule applies, but this run cannot judge it; the message says why and what
    would let it run."""


class NotApplicable(Exception):
    """The rule does not bind this implementation (an optional feature it lacks); the
    message says which."""


@dataclass(frozen=True)
class Check(Generic[C]):
    id: str
    section: str
    level: Level
    title: str
    run: Callable[[C], Awaitable[None]]
    #: What the check needs to judge anything (see each suite's ``NEEDS``).
    needs: tuple[str, ...] = ()

    @property
    def sections(self) -> tuple[str, ...]:
        """The section numbers it names, without ``§`` (``"§5.4, §4.3"`` -> 5.4, 4.3)."""
        return tuple(
            m.group(1) for part in self.section.split(",") if (m := _SECTION.match(part.strip()))
        )


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


def title_of(function: Callable[..., Any]) -> str:
    """A check's title: the first paragraph of its docstring, on one line."""
    doc = inspect.getdoc(function)
    if not doc:
        raise ValueError(f"{function.__name__} has no docstring to title it")
    return " ".join(doc.split("\n\n")[0].split())


def matches(check: Check[Any], pattern: str) -> bool:
    """Whether ``pattern`` selects ``check``.

    A section (``§5.4``, ``5.4``, or ``5`` for all of chapter 5) selects the checks that
    name it; a pattern with ``*``, ``?`` or ``[`` is a glob on the id
    (``resume-*``); anything else selects the ids that contain it (``resume``).
    """
    section = _SECTION.fullmatch(pattern)
    if section is not None:
        number = section.group(1)
        return any(s == number or s.startswith(f"{number}.") for s in check.sections)
    if any(c in pattern for c in "*?["):
        return fnmatch.fnmatchcase(check.id, pattern)
    return pattern in check.id


class Suite(Generic[C]):
    """An ordered collection of checks run against one context type ``C``."""

    def __init__(self, name: str, needs: dict[str, str]) -> None:
        self.name = name
        #: Every need a check may name, with what it means (for ``--list``).
        self.needs = needs
        self.checks: list[Check[C]] = []

    def check(
        self,
        section: str,
        level: Level,
        title: str,
        *,
        id: str | None = None,
        needs: Iterable[str] = (),
    ) -> Callable[[Callable[[C], Awaitable[None]]], Callable[[C], Awaitable[None]]]:
        """Register an async check ``(context) -> None``; its id defaults to the
        function's name without ``check_``, in kebab case."""

        def register(function: Callable[[C], Awaitable[None]]) -> Callable[[C], Awaitable[None]]:
            check_id = id or function.__name__.removeprefix("check_").replace("_", "-")
            if not _KEBAB.fullmatch(check_id):
                raise ValueError(f"check id {check_id!r} is not kebab-case")
            if any(c.id == check_id for c in self.checks):
                raise ValueError(f"two checks named {check_id}")
            unknown = set(needs) - self.needs.keys()
            if unknown:
                raise ValueError(f"{check_id} needs {sorted(unknown)}, which {self.name} lacks")
            self.checks.append(Check(check_id, section, level, title, function, tuple(needs)))
            return function

        return register

    def select(self, only: Iterable[str] = (), skip: Iterable[str] = ()) -> list[Check[C]]:
        """The checks ``only`` selects (all when empty), less those ``skip`` selects."""
        wanted, unwanted = list(only), list(skip)
        return [
            c
            for c in self.checks
            if (not wanted or any(matches(c, p) for p in wanted))
            and not any(matches(c, p) for p in unwanted)
        ]

    def listing(self, checks: Iterable[Check[C]] | None = None) -> list[str]:
        """One line per check: id, section, level, needs (``--list``), then the needs."""
        rows = [
            (c.id, c.section, c.level, ", ".join(c.needs) or "-")
            for c in (self.checks if checks is None else checks)
        ]
        widths = [
            max(len(r[k]) for r in [*rows, ("id", "section", "level", "needs")]) for k in range(3)
        ]
        lines = [
            "  ".join(cell.ljust(widths[k]) if k < 3 else cell for k, cell in enumerate(row))
            for row in [("id", "section", "level", "needs"), *rows]
        ]
        lines.append("")
        lines.append("needs:")
        lines.extend(f"  {name}: {meaning}" for name, meaning in self.needs.items())
        return lines

    async def run(
        self,
        make_context: Callable[[], Awaitable[C]],
        close_context: Callable[[C], Awaitable[None]],
        check: Check[C],
        *,
        timeout: float = 20.0,
    ) -> Result:
        """Run one check with a fresh context, within ``timeout`` seconds."""
        started = time.perf_counter()
        context = await make_context()
        try:
            await asyncio.wait_for(check.run(context), timeout)
            result = _result(check, "pass")
        except NotApplicable as reason:
            result = _result(check, "n/a", str(reason))
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
        return result


def _result(
    check: Check[Any], outcome: Outcome, detail: str = "", frames: Sequence[str] = ()
) -> Result:
    return Result(check.id, check.section, check.level, check.title, outcome, detail, list(frames))
