"""The server conformance suite against our own server, in process, and against servers
that are not ours as it is.

Our :class:`~vrt.server.VrtServer` with the scripted agent, started on port 0, must pass
every check (skips and non-applicable checks only where the configuration explains
them), with and without authentication, with and without each capability. And the suite
must judge other servers (:mod:`broken_servers`) exactly: against each broken variant,
the checks that name its rule fail and its control checks still pass; against each
correct but unusual variant, the checks pass (or skip, or do not apply, as it says).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from broken_servers import VARIANTS, Variant
from rich.console import Console

from vrt.agents.scripted import SCRIPTED_FORMATS, scripted_agent
from vrt.conformance.client_suite import SUITE as CLIENT_SUITE
from vrt.conformance.framework import Result
from vrt.conformance.reports import EXIT_INCOMPLETE, EXIT_PASSED
from vrt.conformance.server_suite import (
    AGENT_SKIP,
    GLOBAL_IDS,
    NEEDS,
    SUITE,
    TOOL_STREAM,
    ServerSuiteOptions,
    run_checks,
    run_server_suite,
)
from vrt.server import ServerConfig, TokenAuthenticator, VrtServer

TOKENS = (("alice", "conformance-token-alice"), ("bob", "conformance-token-bob"))
#: The server's tool timeout in the runs (§7.2 late results are judged with it).
TOOL_TIMEOUT = 2.0

#: Outcomes other than a pass that a configuration explains: (outcome, id, reason).
NEEDS_HEARTBEAT = ("skip", "heartbeat-timeout-close-4408", "--heartbeat-timeout")
WITHOUT_AUTH = ("n/a", r"auth-(wrong|absent|resume|foreign).*", "no --auth")
WITH_AUTH = ("n/a", "auth-ignored-without-authentication", "--auth given")
NOT_IN_EFFECT = ("n/a", r".*", "did not put .* in effect")
LOOPBACK = ("n/a", "transport-tls", "loopback address")


@asynccontextmanager
async def serving(
    *,
    auth: bool = False,
    capabilities: tuple[str, ...] = (TOOL_STREAM, GLOBAL_IDS),
    heartbeat_timeout: float = 45.0,
    agent: Any = scripted_agent,
    **config: Any,
) -> AsyncIterator[str]:
    server = VrtServer(
        agent,
        authenticator=TokenAuthenticator(TOKENS) if auth else None,
        config=ServerConfig(
            capabilities=capabilities, heartbeat_timeout=heartbeat_timeout, **config
        ),
    )
    url = await server.start("127.0.0.1", 0)
    try:
        yield url
    finally:
        await server.close()


def options(url: str, *, auth: bool = False, **more: Any) -> ServerSuiteOptions:
    if auth:
        return ServerSuiteOptions(url, auth=TOKENS[0][1], auth_other=TOKENS[1][1], **more)
    return ServerSuiteOptions(url, **more)


def report(results: list[Result]) -> str:
    lines = []
    for r in results:
        if r.outcome != "pass":
            lines.append(f"{r.outcome} {r.check_id}: {r.detail}")
            lines += [f"    {f}" for f in r.frames[-25:]] if r.outcome == "fail" else []
    return "\n".join(lines)


def assert_conforms(results: list[Result], *explained: tuple[str, str, str]) -> None:
    """No check failed; every other outcome but a pass is one that ``explained`` names."""
    assert not [r for r in results if r.outcome == "fail"], report(results)
    for r in results:
        if r.outcome in ("skip", "n/a"):
            assert any(
                r.outcome == outcome and re.fullmatch(ids, r.check_id) and re.search(why, r.detail)
                for outcome, ids, why in explained
            ), f"unexpected {r.outcome} of {r.check_id}: {r.detail}"


def test_suite_has_the_checks_it_promises() -> None:
    ids = [c.id for c in SUITE.checks]
    assert len(ids) >= 100
    assert len(set(ids)) == len(ids)
    assert all(re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", i) for i in ids)
    assert {c.level for c in SUITE.checks} == {"MUST", "SHOULD"}
    assert all(c.sections for c in SUITE.checks)
    vector_files = {p.stem for p in (Path(__file__).parents[2] / "examples/client").glob("*")}
    for stem in vector_files:
        assert f"vectors-client-{stem.replace('.', '-')}" in ids
    assert "vectors-binary-frames" in ids
    # Every check that drives the agent says so: --list tells an implementer what it needs.
    for check in SUITE.checks:
        assert set(check.needs) <= NEEDS.keys()


def test_readme_maps_every_check() -> None:
    readme = (Path(__file__).parents[2] / "conformance" / "README.md").read_text("utf-8")
    server_part = readme.split("## Client suite")[0]
    missing = [
        c.id
        for c in SUITE.checks
        if f"`{c.id}`" not in server_part and not c.id.startswith("vectors-client-")
    ]
    assert not missing, f"conformance/README.md does not describe {missing}"
    mentioned = set(re.findall(r"`([a-z0-9]+(?:-[a-z0-9]+)+)`", server_part))
    clients = {c.id for c in CLIENT_SUITE.checks}  # the server map names client checks too
    known = {c.id for c in SUITE.checks} | clients | {v.name for v in VARIANTS} | set(NEEDS)
    prefixes = {"seq", "ack", "resume", "tool", "table", "ready", "auth", "speech"}
    unknown = {m for m in mentioned if m.split("-")[0] in prefixes}
    assert unknown <= known, f"README names checks that do not exist: {unknown - known}"
    for variant in VARIANTS:
        assert f"`{variant.name}`" in server_part, f"README does not list {variant.name}"


async def run_against(label: str, **config: Any) -> tuple[str, list[Result]]:
    """The whole suite (or ``only``) against our server in one configuration."""
    only = config.pop("only", ())
    auth = bool(config.get("auth"))
    async with serving(tool_timeout=TOOL_TIMEOUT, **config) as url:
        return label, await run_checks(
            options(url, auth=auth, tool_timeout=TOOL_TIMEOUT, speech_detection="yes"), only=only
        )


async def test_our_server_passes_with_and_without_authentication() -> None:
    """Without authentication, and with two principals (--auth and --auth-other); the
    two runs go side by side, each against its own server."""
    runs = dict(await asyncio.gather(run_against("plain"), run_against("auth", auth=True)))
    plain, auth = runs["plain"], runs["auth"]
    assert len(plain) == len(SUITE.checks)
    assert_conforms(plain, NEEDS_HEARTBEAT, WITHOUT_AUTH, LOOPBACK)
    assert_conforms(auth, NEEDS_HEARTBEAT, WITH_AUTH, LOOPBACK)
    passed = {r.check_id for r in auth if r.outcome == "pass"}
    assert {"auth-foreign-resume-like-unknown", "auth-resume-needs-credential"} <= passed
    assert "tool-result-after-timeout-ignored" in {r.check_id for r in plain if r.outcome == "pass"}


#: The checks a capability changes: run against servers supporting fewer of them.
CAPABILITY_CHECKS = (
    "capabilities-*",
    "tool-*",
    "preview-*",
    "resume-replay-*",
    "framing-*",
    "epoch-*",
)
FEWER: dict[str, tuple[str, ...]] = {
    "none": (),
    "tool-stream": (TOOL_STREAM,),
    "global-ids": (GLOBAL_IDS,),
}


async def test_our_server_passes_with_fewer_capabilities() -> None:
    runs = await asyncio.gather(
        *(
            run_against(label, capabilities=caps, only=CAPABILITY_CHECKS)
            for label, caps in FEWER.items()
        )
    )
    for label, results in runs:
        assert_conforms(results, NOT_IN_EFFECT)
        for r in results:
            if r.outcome == "n/a":
                assert not any(token in r.detail for token in FEWER[label]), (label, r.detail)
        not_applicable = {r.check_id for r in results if r.outcome == "n/a"}
        assert ("tool-stream-client-call" in not_applicable) == (TOOL_STREAM not in FEWER[label])


async def test_heartbeat_timeout_when_known() -> None:
    async with serving(heartbeat_timeout=1.0) as url:
        results = await run_checks(options(url, heartbeat_timeout=1.0), only=["§4.4"])
    assert_conforms(results)
    assert "heartbeat-timeout-close-4408" in {r.check_id for r in results}


class _Silent:
    """An agent that answers nothing: a server without the scripted agent contract."""

    input_formats = SCRIPTED_FORMATS
    output_formats = SCRIPTED_FORMATS

    async def run(self, session: Any) -> None:
        async for _ in session.events():
            pass


async def test_agent_checks_skip_without_the_scripted_agent() -> None:
    async with serving(agent=lambda info: _Silent()) as url:
        results = await run_checks(options(url), only=["dedupe-*", "tool-call-*", "table-*"])
    skipped = [r for r in results if r.outcome == "skip"]
    assert skipped, report(results)
    assert all(AGENT_SKIP in r.detail or "speech detection" in r.detail for r in skipped), report(
        results
    )
    assert not [r for r in results if r.outcome == "fail"], report(results)
    assert "dedupe-gap-tolerated" in {r.check_id for r in results if r.outcome == "pass"}


@pytest.mark.parametrize("variant", VARIANTS, ids=[v.name for v in VARIANTS])
async def test_other_servers_are_judged_exactly(variant: Variant) -> None:
    with variant.patched():
        async with serving(
            auth=variant.auth,
            agent=variant.agent,
            **variant.config,
        ) as url:
            results = await run_checks(
                options(url, auth=variant.auth, **variant.options),
                only=list(variant.outcomes),
                timeout=8.0,
            )
    outcome = {r.check_id: r.outcome for r in results}
    wrong = {
        c: (outcome.get(c), want) for c, want in variant.outcomes.items() if outcome.get(c) != want
    }
    assert not wrong, f"{variant.name} ({variant.breaks}): (got, wanted) {wrong}\n" + report(
        results
    )
    for r in results:
        if r.outcome == "fail":
            assert r.frames, f"{r.check_id} failed without the frames that show it"
        if r.check_id in variant.says:
            assert re.search(variant.says[r.check_id], r.detail), (r.check_id, r.detail)


def test_unreachable_server_exits_2() -> None:
    # Nothing listens on this port: the suite cannot reach the server at all.
    assert run_server_suite("ws://127.0.0.1:9", only=("ready-*",)) == 2


async def test_verdict_exit_status_and_reports(tmp_path: Path) -> None:
    console = Console(file=open(tmp_path / "out.txt", "w"), width=200)  # noqa: SIM115
    async with serving() as url:
        json_path, junit_path = tmp_path / "r.json", tmp_path / "r.xml"
        selection = ("ready-members", "heartbeat-timeout-close-4408", "transport-tls")
        code = await asyncio.to_thread(
            run_server_suite,
            url,
            only=selection,
            json_path=json_path,
            junit_path=junit_path,
            console=console,
        )
        accepted = await asyncio.to_thread(
            run_server_suite, url, only=selection, allow_skips=True, console=console
        )
    console.file.close()
    # A MUST check skipped (no --heartbeat-timeout): incomplete, not a pass.
    assert code == EXIT_INCOMPLETE
    assert accepted == EXIT_PASSED
    document = json.loads(json_path.read_text())
    assert document["summary"] == "1 passed, 0 failed, 1 skipped, 1 not applicable"
    assert document["verdict"] == "incomplete"
    assert document["mustSkipped"] == ["heartbeat-timeout-close-4408"]
    assert "testsuite" in junit_path.read_text()
    printed = (tmp_path / "out.txt").read_text()
    assert "INCOMPLETE: 1 MUST checks skipped" in printed
    assert "accepted: --allow-skips" in printed
