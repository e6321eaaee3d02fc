"""The server conformance suite against our own server, in process.

Our :class:`~vrt.server.app.VrtServer` with the scripted agent, started on port 0, must
pass every check (skips only where the configuration leaves a check nothing to
observe), with and without authentication, with and without each capability. And the
suite must catch deliberately broken servers (:mod:`broken_servers`): against each
variant, the checks that name its rule fail and its control checks still pass.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from broken_servers import VARIANTS, Variant

from vrt.agents.scripted import SCRIPTED_FORMATS, scripted_agent
from vrt.conformance.framework import Result
from vrt.conformance.server_suite import (
    AGENT_SKIP,
    GLOBAL_IDS,
    SUITE,
    TOOL_STREAM,
    ServerSuiteOptions,
    run_checks,
    run_server_suite,
)
from vrt.protocol.server import ServerConfig
from vrt.server.app import VrtServer
from vrt.server.auth import TokenAuthenticator

TOKENS = (("alice", "conformance-token-alice"), ("bob", "conformance-token-bob"))

#: Skips that a configuration explains: (id pattern, reason pattern).
NEEDS_HEARTBEAT = ("heartbeat-timeout-close-4408", "--heartbeat-timeout")
NEEDS_AUTH = (r"auth-(wrong|absent|resume|foreign).*", "needs --auth")
HAS_AUTH = ("auth-ignored-without-authentication", "--auth given")
NOT_IN_EFFECT = (r".*", "did not put .* in effect")
LOOPBACK = ("transport-tls", "loopback address")


@asynccontextmanager
async def serving(
    *,
    auth: bool = False,
    capabilities: tuple[str, ...] = (TOOL_STREAM, GLOBAL_IDS),
    heartbeat_timeout: float = 45.0,
    server_class: type[VrtServer] = VrtServer,
    agent: Any = scripted_agent,
) -> AsyncIterator[str]:
    server = server_class(
        agent,
        authenticator=TokenAuthenticator(TOKENS) if auth else None,
        config=ServerConfig(capabilities=capabilities, heartbeat_timeout=heartbeat_timeout),
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


def assert_conforms(results: list[Result], *allowed_skips: tuple[str, str]) -> None:
    failed = [r for r in results if r.outcome == "fail"]
    assert not failed, report(results)
    for r in results:
        if r.outcome == "skip":
            assert any(
                re.fullmatch(ids, r.check_id) and re.search(why, r.detail)
                for ids, why in allowed_skips
            ), f"unexpected skip of {r.check_id}: {r.detail}"


async def test_suite_has_the_checks_it_promises() -> None:
    ids = [c.id for c in SUITE.checks]
    assert len(ids) >= 60
    assert all(re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", i) for i in ids)
    assert {c.level for c in SUITE.checks} == {"MUST", "SHOULD"}
    vector_files = {p.stem for p in (Path(__file__).parents[2] / "examples/client").glob("*")}
    for stem in vector_files:
        assert f"vectors-client-{stem.replace('.', '-')}" in ids
    assert "vectors-binary-frames" in ids


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
    known = {c.id for c in SUITE.checks} | {v.name for v in VARIANTS} | {TOOL_STREAM}
    unknown = {m for m in mentioned if m.split("-")[0] in {"seq", "ack", "resume", "tool", "table"}}
    assert unknown <= known, f"README names checks that do not exist: {unknown - known}"


async def run_against(label: str, **config: Any) -> tuple[str, list[Result]]:
    """The whole suite (or ``select``) against our server in one configuration."""
    select = config.pop("select", ())
    auth = bool(config.get("auth"))
    async with serving(**config) as url:
        return label, await run_checks(options(url, auth=auth), select=select)


async def test_our_server_passes_with_and_without_authentication() -> None:
    """Without authentication, and with two principals (--auth and --auth-other); the
    two runs go side by side, each against its own server."""
    runs = dict(await asyncio.gather(run_against("plain"), run_against("auth", auth=True)))
    plain, auth = runs["plain"], runs["auth"]
    assert len(plain) == len(SUITE.checks)
    assert_conforms(plain, NEEDS_HEARTBEAT, NEEDS_AUTH, LOOPBACK)
    assert_conforms(auth, NEEDS_HEARTBEAT, HAS_AUTH, LOOPBACK)
    passed = {r.check_id for r in auth if r.outcome == "pass"}
    assert "auth-foreign-resume-like-unknown" in passed
    assert "auth-resume-needs-credential" in passed


#: The checks a capability changes: run against servers supporting fewer of them.
CAPABILITY_CHECKS = ("capabilities", "tool", "preview", "resume-replay", "framing", "epoch")
FEWER: dict[str, tuple[str, ...]] = {
    "none": (),
    "tool-stream": (TOOL_STREAM,),
    "global-ids": (GLOBAL_IDS,),
}


async def test_our_server_passes_with_fewer_capabilities() -> None:
    runs = await asyncio.gather(
        *(
            run_against(label, capabilities=caps, select=CAPABILITY_CHECKS)
            for label, caps in FEWER.items()
        )
    )
    for label, results in runs:
        assert_conforms(results, NOT_IN_EFFECT)
        for r in results:
            if r.outcome == "skip":
                assert not any(token in r.detail for token in FEWER[label]), (label, r.detail)
        skipped = {r.check_id for r in results if r.outcome == "skip"}
        assert ("tool-stream-client-call" in skipped) == (TOOL_STREAM not in FEWER[label])


async def test_heartbeat_timeout_when_known() -> None:
    async with serving(heartbeat_timeout=1.0) as url:
        results = await run_checks(options(url, heartbeat_timeout=1.0), select=["heartbeat"])
    assert_conforms(results)
    assert {r.check_id for r in results} >= {"heartbeat-timeout-close-4408"}


async def test_agent_checks_skip_without_the_scripted_agent() -> None:
    class Silent:
        input_formats = SCRIPTED_FORMATS
        output_formats = SCRIPTED_FORMATS

        async def run(self, session: Any) -> None:
            async for _ in session.events():
                pass

    async with serving(agent=lambda info: Silent()) as url:
        results = await run_checks(options(url), select=["dedupe", "tool-call", "table"])
    skipped = [r for r in results if r.outcome == "skip"]
    assert skipped, report(results)
    assert all(AGENT_SKIP in r.detail for r in skipped), report(results)
    assert not [r for r in results if r.outcome == "fail"], report(results)
    assert "dedupe-gap-tolerated" in {r.check_id for r in results if r.outcome == "pass"}


@pytest.mark.parametrize("variant", VARIANTS, ids=[v.name for v in VARIANTS])
async def test_broken_server_is_caught(variant: Variant) -> None:
    with variant.patched():
        async with serving(auth=variant.auth, server_class=variant.server_class) as url:
            results = await run_checks(
                options(url, auth=variant.auth),
                select=variant.caught_by + variant.controls,
                timeout=8.0,
            )
    outcome = {r.check_id: r.outcome for r in results}
    missed = [c for c in variant.caught_by if outcome.get(c) != "fail"]
    assert not missed, f"{variant.name} ({variant.breaks}) was not caught by {missed}\n" + report(
        results
    )
    broken_controls = [c for c in variant.controls if outcome.get(c) != "pass"]
    assert not broken_controls, report(results)


def test_unreachable_server_exits_2() -> None:
    # Nothing listens on this port: the suite cannot reach the server at all.
    assert run_server_suite("ws://127.0.0.1:9", select=("ready",)) == 2


async def test_reports_and_exit_code(tmp_path: Path) -> None:
    async with serving() as url:
        json_path, junit_path = tmp_path / "r.json", tmp_path / "r.xml"
        code = await asyncio.to_thread(
            run_server_suite,
            url,
            select=("ready-members", "heartbeat-timeout"),
            json_path=json_path,
            junit_path=junit_path,
        )
    assert code == 0
    assert '"summary": "1 passed, 0 failed, 1 skipped"' in json_path.read_text()
    assert "testsuite" in junit_path.read_text()
