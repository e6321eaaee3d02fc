"""The client suite: a scriptable fake server judges a client under test on the wire.

``vrt conformance client -- COMMAND...`` runs every check with a fresh test server on a
free port of 127.0.0.1 and a fresh client process started with the server's URL in
``VRT_URL``. What the client must do so that its behaviour is observable (declare the
tools ``conformance.record``, ``conformance.slow`` and ``conformance.fail``, log each
tool execution to ``VRT_CONFORMANCE_LOG``, perform the lines of ``VRT_SAY``, ...) is the
contract in conformance/README.md, section "Client suite";
:mod:`vrt.conformance.reference_client` implements it with the Python SDK.

The checks live in :mod:`vrt.conformance.client_checks`, one module per chapter, over
the harness of :mod:`vrt.conformance.client_harness`.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from rich.console import Console

from . import client_checks
from .client_harness import (
    NEEDS,
    SUITE,
    TOOL_FAIL,
    TOOL_RECORD,
    TOOL_SLOW,
    ClientHarness,
    ClientSuiteOptions,
)
from .framework import Check, Result
from .reports import EXIT_UNREACHABLE, finish_run, print_result

__all__ = [
    "CHAPTERS",
    "NEEDS",
    "SUITE",
    "TOOL_FAIL",
    "TOOL_RECORD",
    "TOOL_SLOW",
    "ClientHarness",
    "ClientSuiteOptions",
    "run_client_checks",
    "run_client_suite",
]

#: The modules of checks, in the order of the protocol text.
CHAPTERS = client_checks.CHAPTERS


async def run_client_checks(
    command: Sequence[str],
    *,
    only: Iterable[str] = (),
    skip: Iterable[str] = (),
    timeout: float = 20.0,
    ping_wait: float = 3.0,
    connect_timeout: float = 10.0,
    jobs: int = 1,
    env: Mapping[str, str] | None = None,
    audio_output: bool = True,
    audio_input: bool = True,
    on_result: Callable[[Result], None] | None = None,
) -> list[Result]:
    """Run the selected checks against ``command``; ``jobs`` checks at a time (each has
    its own server and client process). Results come in the suite's order."""
    options = ClientSuiteOptions(
        tuple(command),
        ping_wait=ping_wait,
        connect_timeout=connect_timeout,
        env=dict(env or {}),
        audio_output=audio_output,
        audio_input=audio_input,
    )
    limit = asyncio.Semaphore(max(1, jobs))

    async def make() -> ClientHarness:
        return ClientHarness(options)

    async def close(harness: ClientHarness) -> None:
        await harness.close()

    async def one(check: Check[ClientHarness]) -> Result:
        async with limit:
            result = await SUITE.run(make, close, check, timeout=timeout)
        if on_result is not None:
            on_result(result)
        return result

    return list(await asyncio.gather(*(one(c) for c in SUITE.select(only, skip))))


def run_client_suite(
    command: list[str],
    *,
    only: Sequence[str] = (),
    skip: Sequence[str] = (),
    json_path: Path | None = None,
    junit_path: Path | None = None,
    timeout: float = 20.0,
    ping_wait: float = 3.0,
    jobs: int = 1,
    audio_output: bool = True,
    audio_input: bool = True,
    allow_skips: bool = False,
    console: Console | None = None,
) -> int:
    """Run the client suite against ``command``; print each verdict and the summary. The
    exit status: 0 passed, 1 a MUST check failed, 3 incomplete (a MUST check skipped; 0
    with ``allow_skips``), 2 the command cannot be started."""
    out = console or Console(highlight=False, soft_wrap=True)
    if not command or (shutil.which(command[0]) is None and not Path(command[0]).exists()):
        out.print(f"vrt: cannot run the client command {command!r}", style="red", markup=False)
        return EXIT_UNREACHABLE
    results = asyncio.run(
        run_client_checks(
            command,
            only=only,
            skip=skip,
            timeout=timeout,
            ping_wait=ping_wait,
            jobs=jobs,
            audio_output=audio_output,
            audio_input=audio_input,
            on_result=lambda r: print_result(out, r),
        )
    )
    return finish_run(
        out,
        results,
        suite="client",
        target=" ".join(command),
        json_path=json_path,
        junit_path=junit_path,
        allow_skips=allow_skips,
    )
