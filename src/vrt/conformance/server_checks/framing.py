"""§2 Transport and framing, §3 Versioning and capabilities."""

from __future__ import annotations

import ipaddress
import json
from typing import Any
from urllib.parse import urlsplit

from ...protocol.capabilities import registry
from ..framework import NotApplicable
from ..scripted_contract import answered_call
from ..server_context import (
    GLOBAL_IDS,
    INVALID_MESSAGE,
    LOOKUP,
    QUIET,
    REPLY,
    TOOL_STREAM,
    ServerContext,
    check,
)
from ..spec_tables import SERVER_INTEGER_MEMBERS
from ..wire import Refused
from ..wire_session import Session


async def _exercise(ctx: ServerContext) -> Session:
    """A session that makes the server send as many kinds of message as it can."""
    session = await ctx.session(capabilities=[TOOL_STREAM, GLOBAL_IDS])
    conn = session.current
    await conn.send({"v": 1, "seq": 0, "type": "ping"})
    await conn.send(INVALID_MESSAGE)
    await session.send("context", context={"n": [1, 2.5, {"deep": None}]})
    await conn.barrier()
    if await ctx.has_agent():
        await session.reply("echo framing check", REPLY)
        await answered_call(session, '{"n":1,"f":0.5}', output={"x": 1})
        await session.reply("server-tool 150", REPLY)
    await conn.quiet(QUIET)
    return session


@check("§2.1", "MUST")
async def check_framing_text_json_object(ctx: ServerContext) -> None:
    """every text frame the server sends is one JSON object"""
    session = await _exercise(ctx)
    bad = [i for i in session.received if not i.binary and i.data is None]
    ctx.expect_none(bad, "text frames that are not one JSON object")


@check("§2.2, App. A", "MUST")
async def check_framing_messages_valid(ctx: ServerContext) -> None:
    """every server message matches its schema (Appendix A)"""
    session = await _exercise(ctx)
    bad = [i for i in session.received if not i.binary and i.type == "invalid"]
    ctx.expect(not bad, "invalid server messages:\n" + "\n".join(f"{i.invalid}: {i}" for i in bad))


@check("§2.2", "MUST")
async def check_framing_no_duplicate_members(ctx: ServerContext) -> None:
    """no member name twice in one object"""
    session = await _exercise(ctx)
    found: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        names = [k for k, _ in items]
        found.extend(sorted({k for k in names if names.count(k) > 1}))
        return dict(items)

    bad: list[str] = []
    for item in session.received:
        if item.binary:
            continue
        found.clear()
        try:
            json.loads(item.raw, object_pairs_hook=pairs)
        except ValueError:
            continue
        if found:
            bad.append(f"{found[0]} twice in {item}")
    ctx.expect(not bad, "\n".join(bad))


class _FloatText(str):
    """A JSON number written with a fraction or exponent."""


@check("§2.2", "MUST")
async def check_framing_integers_plain(ctx: ServerContext) -> None:
    """integers written without fraction or exponent"""
    session = await _exercise(ctx)
    bad: list[str] = []
    for item in session.received:
        if item.binary:
            continue
        try:
            value = json.loads(item.raw, parse_float=_FloatText)
        except ValueError:
            continue
        for obj in (value, value.get("input"), value.get("output")):
            if isinstance(obj, dict):
                bad.extend(
                    f"{name} written {obj[name]} in {item}"
                    for name in SERVER_INTEGER_MEMBERS & obj.keys()
                    if isinstance(obj[name], _FloatText)
                )
    ctx.expect(not bad, "\n".join(bad))


@check("§2.2", "MUST")
async def check_framing_unknown_members_ignored(ctx: ServerContext) -> None:
    """unknown members are ignored at any depth"""
    conn = await ctx.connect()
    await conn.send(
        ctx.hello(
            tools=[{**LOOKUP, "x-ui": {"icon": "sun"}}],
            input={"encoding": "pcm16", "channels": 1},
            capabilities=[],
            conformance={"nested": [1, {"a": None}]},
        )
    )
    try:
        await conn.expect_ready()
    except Refused as refused:
        ctx.fail(f"a hello with unknown members was refused: {refused}")
    await conn.send({"v": 1, "seq": 0, "type": "ping", "sentAt": 17, "note": {"a": 1}})
    errors = [i for i in await conn.barrier() if i.type == "error"]
    ctx.expect_none(errors, "a ping with unknown members got an error")
    if await ctx.has_agent():
        await conn.send(
            {"v": 1, "seq": 1, "type": "text", "text": "echo unknown-ok", "lang": "en", "x": {}}
        )
        await conn.until(lambda i: i.type == "turn.state" and i.get("state") == "idle", REPLY)
        replies = "".join(str(i.get("text")) for i in conn.received if i.type == "text")
        ctx.expect(
            replies == "unknown-ok", f"'echo unknown-ok' with unknown members got {replies!r}"
        )


@check("§2.1", "MUST")
async def check_framing_invalid_utf8_closes_1007(ctx: ServerContext) -> None:
    """a text frame that is not UTF-8 fails the connection (1007); the session stays resumable"""
    session = await ctx.session()
    await session.send("context", context={"before": "bad utf-8"})
    await session.current.barrier()
    conn = session.current
    conn.log.add(conn.label, ">", 0, 'text frame {"v":1,"seq":0,"type":"ping","x":"\\xff"}')
    await conn.ws.send(b'{"v":1,"seq":0,"type":"ping","x":"\xff"}', text=True)
    code, reason = await conn.wait_closed(5.0)
    ctx.expect(
        code == 1007,
        f"a text frame that is not UTF-8 closed the connection with {code} {reason!r}; "
        "RFC 6455 fails the connection with 1007 (messages.md)",
    )
    ready = await session.resume()
    ctx.expect(ready.get("resumedFrom") == 1, f"the resumed ready has {ready.data}")
    await ctx.alive(session, "after the resume")


@check("§2.1", "MUST")
async def check_transport_tls(ctx: ServerContext) -> None:
    """deployments other than local development use TLS (wss:)"""
    parts = urlsplit(ctx.options.url)
    if parts.scheme.lower() == "wss":
        return
    host = parts.hostname or ""
    try:
        loopback = host.lower() == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if loopback:
        raise NotApplicable(f"{host} is a loopback address: local development may use ws:")
    ctx.fail(f"{ctx.options.url} is not local and does not use TLS (wss:)")


# §3 Versioning and capabilities


@check("§3.1", "MUST")
async def check_version_hello_unsupported(ctx: ServerContext) -> None:
    """a hello whose v is not 1 gets UNSUPPORTED_VERSION"""
    conn = await ctx.connect()
    for v in (2, "1", None):
        hello = ctx.hello()
        if v is None:
            del hello["v"]
        else:
            hello["v"] = v
        await conn.send(hello)
        error = await ctx.expect_error(conn, "UNSUPPORTED_VERSION", what=f"hello with v {v!r}")
        ctx.expect(error.seq == 0, f"the error has seq {error.seq}; no session is bound (§4.1)")
        ctx.expect(
            error.get("recoverable") is True,
            "an invalid message's error is recoverable: true (§9.1)",
        )
    await conn.send(ctx.hello())
    await conn.expect_ready()


@check("§3.1", "MUST")
async def check_version_no_session_for_bad_hello(ctx: ServerContext) -> None:
    """no session is opened for a hello with a bad v"""
    conn = await ctx.connect()
    await conn.send({**ctx.hello(), "v": 2})
    await ctx.expect_error(conn, "UNSUPPORTED_VERSION")
    await conn.send({"v": 1, "seq": 1, "type": "context", "context": None})
    items = await conn.barrier()
    ctx.expect(not any(i.type == "ready" for i in conn.received), "ready after a v 2 hello")
    codes = [e.get("code") for e in items if e.type == "error"]
    ctx.expect(
        codes == ["NO_SESSION"],
        f"a message after the rejected hello got {codes or 'no error'}, expected NO_SESSION: "
        "a session was opened for it",
    )


@check("§3.1", "MUST")
async def check_version_error_carries_v1(ctx: ServerContext) -> None:
    """the UNSUPPORTED_VERSION error carries v 1"""
    conn = await ctx.connect()
    await conn.send({**ctx.hello(), "v": 7})
    error = await ctx.expect_error(conn, "UNSUPPORTED_VERSION")
    v = error.get("v")
    ctx.expect(
        type(v) is int and v == 1, f"the error carries v {v!r}; the server's own major version is 1"
    )


@check("§3.3", "MUST")
async def check_capabilities_subset_of_offered(ctx: ServerContext) -> None:
    """capabilities in effect are a subset of those offered"""
    offered = [TOOL_STREAM, GLOBAL_IDS, "x-conformance.probe"]
    session = await ctx.session(capabilities=offered)
    extra = [c for c in session.capabilities if c not in offered]
    ctx.expect(not extra, f"ready.capabilities has {extra}, never offered")
    bare = await ctx.session(capabilities=["x-conformance.probe"])
    extra = [c for c in bare.capabilities if c != "x-conformance.probe"]
    ctx.expect(not extra, f"offered only x-conformance.probe, ready.capabilities has {extra}")


@check("§3.3", "MUST")
async def check_capabilities_each_once(ctx: ServerContext) -> None:
    """each capability in effect appears once"""
    session = await ctx.session(capabilities=[TOOL_STREAM, GLOBAL_IDS, TOOL_STREAM, GLOBAL_IDS])
    caps = list(session.capabilities)
    ctx.expect(len(caps) == len(set(caps)), f"ready.capabilities repeats a token: {caps}")


@check("§3.3", "MUST")
async def check_capabilities_unknown_ignored(ctx: ServerContext) -> None:
    """unknown capability tokens are ignored"""
    unknown = ["future-feature.v9", "zz.conformance-unknown", "x-conformance.unknown"]
    try:
        session = await ctx.session(capabilities=[*unknown, TOOL_STREAM])
    except Refused as refused:
        ctx.fail(f"a hello offering unknown tokens was refused: {refused}")
    in_effect = set(unknown) & set(session.capabilities)
    ctx.expect(not in_effect, f"unknown tokens in effect: {sorted(in_effect)}")


@check("§3.3", "MUST")
async def check_capabilities_none_offered(ctx: ServerContext) -> None:
    """no capability in effect when none is offered"""
    session = await ctx.session()
    assert session.ready is not None
    caps = session.ready.get("capabilities")
    ctx.expect(caps in (None, []), f"no capability offered, ready.capabilities is {caps}")


@check("§3.4", "MUST")
async def check_capabilities_registered_only(ctx: ServerContext) -> None:
    """only registered or x- tokens are put in effect"""
    session = await ctx.session(capabilities=[*registry(), "future-feature.v9"])
    bad = [c for c in session.capabilities if c not in registry() and not c.startswith("x-")]
    ctx.expect(not bad, f"unregistered tokens in effect: {bad}")


@check("§3.3", "MUST")
async def check_capabilities_fixed_across_resume(ctx: ServerContext) -> None:
    """capabilities are fixed across a resume"""
    session = await ctx.session(capabilities=[TOOL_STREAM])
    before = sorted(session.capabilities)
    session.drop()
    ready = await session.resume(hello={**ctx.auth(), "capabilities": [GLOBAL_IDS]})
    after = ready.get("capabilities")
    after = sorted(after) if isinstance(after, list) else []
    ctx.expect(
        after == before,
        f"the resumed ready has capabilities {after}, the session opened with {before}",
    )


@check("§3.3, §3.4", "MUST", needs=("scripted",))
async def check_capabilities_no_tool_stream_without_capability(ctx: ServerContext) -> None:
    """no tool.stream without tool-stream-v1"""
    session = await ctx.session()
    ctx.expect(TOOL_STREAM not in session.capabilities, "tool-stream-v1 in effect, never offered")
    await answered_call(session, '{"q":"no stream please"}')
    await session.reply("server-tool 120", REPLY)
    ctx.expect_none(session.find("tool.stream")[:1], "tool.stream sent without tool-stream-v1")
