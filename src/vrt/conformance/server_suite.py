"""The server conformance suite: a black-box judge of any vRT server, clause by clause.

``vrt conformance server ws://HOST:PORT`` runs it. It speaks raw WebSocket frames
(:mod:`vrt.conformance.wire`), never the client SDK. Each check names the section of
the protocol text it judges, its level (MUST or SHOULD) and what it needs; it passes,
fails with the frames that show it, is skipped with the reason, or does not apply.
Checks that need a driven agent use the scripted agent contract (conformance/README.md);
the suite probes for it once per run and skips them, saying why, when the server does
not implement it.

The checks live in :mod:`vrt.conformance.server_checks`, one module per chapter; see
``conformance/README.md`` for how to run the suite and for the map from every MUST of
the protocol to its checks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from rich.console import Console

from . import server_checks
from .framework import Check, Result
from .reports import EXIT_UNREACHABLE, finish_run, print_result
from .server_context import (
    AGENT_SKIP,
    GLOBAL_IDS,
    NEEDS,
    SUITE,
    TOOL_STREAM,
    ServerContext,
    ServerSuiteOptions,
    SpeechDetection,
    SuiteRun,
)
from .wire import Connection, FrameLog

__all__ = [
    "AGENT_SKIP",
    "CHAPTERS",
    "GLOBAL_IDS",
    "NEEDS",
    "SUITE",
    "TOOL_STREAM",
    "ServerContext",
    "ServerSuiteOptions",
    "run_checks",
    "run_server_suite",
]

#: The modules of checks, in the order of the protocol text.
CHAPTERS = server_checks.CHAPTERS


def _budget(check: Check[ServerContext], options: ServerSuiteOptions, timeout: float) -> float:
    """Seconds allowed to ``check``: more for those that wait for a server timeout."""
    budget = timeout
    if "heartbeat-timeout" in check.needs and options.heartbeat_timeout is not None:
        budget = max(budget, options.heartbeat_timeout * 1.5 + 20)
    if "tool-timeout" in check.needs and options.tool_timeout is not None:
        budget = max(budget, options.tool_timeout + 20)
    return budget


async def run_checks(
    options: ServerSuiteOptions,
    *,
    only: Iterable[str] = (),
    skip: Iterable[str] = (),
    timeout: float = 20.0,
    on_result: Callable[[Result], None] | None = None,
) -> list[Result]:
    """Run the selected checks (all when ``only`` is empty, less ``skip``), one at a
    time, against the server."""
    run = SuiteRun(options)

    async def make() -> ServerContext:
        return ServerContext(run)

    async def close(ctx: ServerContext) -> None:
        await ctx.aclose()

    results: list[Result] = []
    for item in SUITE.select(only, skip):
        result = await SUITE.run(make, close, item, timeout=_budget(item, options, timeout))
        results.append(result)
        if on_result is not None:
            on_result(result)
    return results


async def _reachable(url: str) -> str:
    """ "" when a WebSocket to ``url`` opens, else why not."""
    try:
        conn = await Connection.open(url, label=0, log=FrameLog())
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    await conn.close()
    return ""


def run_server_suite(
    url: str,
    *,
    auth: str | None = None,
    auth_other: str | None = None,
    only: Sequence[str] = (),
    skip: Sequence[str] = (),
    json_path: Path | None = None,
    junit_path: Path | None = None,
    timeout: float = 20.0,
    heartbeat_timeout: float | None = None,
    tool_timeout: float | None = None,
    speech_detection: SpeechDetection = "probe",
    allow_skips: bool = False,
    console: Console | None = None,
) -> int:
    """Run the server suite against ``url``, print one line per check and the verdict,
    write the reports asked for. The exit status: 0 passed, 1 a MUST check failed, 3
    incomplete (a MUST check skipped; 0 with ``allow_skips``), 2 the server cannot be
    reached at all."""
    out = console or Console(highlight=False, soft_wrap=True)
    options = ServerSuiteOptions(
        url,
        auth=auth,
        auth_other=auth_other,
        heartbeat_timeout=heartbeat_timeout,
        tool_timeout=tool_timeout,
        speech_detection=speech_detection,
    )

    async def main() -> list[Result] | None:
        problem = await _reachable(url)
        if problem:
            out.print(f"vrt: cannot reach {url}: {problem}", style="red", markup=False)
            return None
        return await run_checks(
            options, only=only, skip=skip, timeout=timeout, on_result=lambda r: print_result(out, r)
        )

    results = asyncio.run(main())
    if results is None:
        return EXIT_UNREACHABLE
    return finish_run(
        out,
        results,
        suite="server",
        target=url,
        json_path=json_path,
        junit_path=junit_path,
        allow_skips=allow_skips,
    )
