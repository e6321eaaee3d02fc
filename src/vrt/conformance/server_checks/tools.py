"""§7 Tools: calls, results, previews, tool streams; §6.3 global tool ids."""

from __future__ import annotations

import secrets
from typing import Any

from ..framework import NotApplicable
from ..scripted_contract import (
    ResultLine,
    answer,
    answered_call,
    call,
    interrupt,
    interrupted_call,
    results,
)
from ..server_context import GLOBAL_IDS, QUIET, REPLY, TOOL_STREAM, ServerContext, check
from ..spec_tables import tool_stream_problems
from ..wire import Incoming, NoFrame
from ..wire_session import Session, Turn


def _streams(session: Session, call_id: Any) -> list[Incoming]:
    return session.find("tool.stream", lambda i: i.get("callId") == call_id)


def _phases(ctx: ServerContext, streams: list[Incoming], *also: str) -> None:
    """Fail unless one call's tool.stream messages follow §7.5 and ``also``'s rules."""
    problems = tool_stream_problems([s.data or {} for s in streams]) + [p for p in also if p]
    phases = [s.get("phase") for s in streams]
    ctx.expect(not problems, f"phases {phases}:\n" + "\n".join(problems))


def _expect_results(
    ctx: ServerContext, turn: Turn, expected: list[ResultLine], blame: dict[str, str]
) -> None:
    """The turn's reply names ``expected`` (parsed JSON); else fail with the ``blame``
    whose reply line (as ``str(ResultLine)``) is in the reply, or the reply itself."""
    got = results(ctx, turn)
    if got == expected:
        return
    shown = [str(line) for line in got]
    why = next((why for line, why in blame.items() if line in shown), "")
    ctx.fail(
        f"the reply names {shown}, expected {[str(e) for e in expected]}{': ' + why if why else ''}"
    )


@check("§7.1", "MUST", needs=("scripted",))
async def check_tool_call_declared(ctx: ServerContext) -> None:
    """tool.call for a declared tool, with the turn's epoch"""
    session = await ctx.session()
    issued, turn = await answered_call(session, '{"q":"conformance"}', output={"answer": 42})
    ctx.expect(issued.get("name") == "lookup", f"tool.call names {issued.get('name')!r}")
    ctx.expect(
        issued.get("arguments") == {"q": "conformance"}, f"arguments {issued.get('arguments')!r}"
    )
    ctx.expect(
        (issued.get("turnId"), issued.get("epoch")) == (turn.turn_id, turn.epoch),
        f"tool.call turnId/epoch {issued.get('turnId')}/{issued.get('epoch')}; the turn is "
        f"{turn.turn_id}/{turn.epoch}",
    )
    _expect_results(ctx, turn, [ResultLine(True, {"answer": 42})], {})


@check("§7.1", "MUST", needs=("scripted",))
async def check_tool_call_undeclared_never(ctx: ServerContext) -> None:
    """no tool.call for a tool the client did not declare"""
    session = await ctx.session()
    turn = await session.reply("call conformance_undeclared {}", REPLY)
    ctx.expect_none(turn.of("tool.call"), "tool.call for an undeclared tool")


@check("§7.1", "MUST", needs=("scripted",))
async def check_tool_call_ids_unique(ctx: ServerContext) -> None:
    """callIds are never reused in a session"""
    session = await ctx.session()
    ids: list[Any] = []
    for command, count in (
        ("calls 4 lookup {}", 4),
        ("call lookup {}", 1),
        ("calls 2 lookup {}", 2),
    ):
        after = session.last_seq
        calls = await call(session, command, count)
        ids += [c.get("callId") for c in calls]
        ctx.expect(len(set(ids)) == len(ids), f"callIds repeat within the session: {ids}")
        for issued in calls:
            await answer(session, issued, output=None)
        await session.turn(after, REPLY)


@check("§7.2", "MUST", needs=("scripted",))
async def check_tool_result_unknown_ignored(ctx: ServerContext) -> None:
    """a tool.result with an unknown callId is ignored"""
    session = await ctx.session()
    after = session.last_seq
    (issued,) = await call(session, "call lookup {}")
    unknown = f"conformance-unknown-{secrets.token_hex(4)}"
    await session.send(
        "tool.result", callId=unknown, epoch=issued.get("epoch"), ok=True, output={"wrong": True}
    )
    effects = [i for i in await session.current.settle(QUIET) if i.type in ("text", "error")]
    ctx.expect_none(effects, f"a result for the unknown callId {unknown} had an effect")
    await answer(session, issued, output={"right": True})
    turn = await session.turn(after, REPLY)
    _expect_results(
        ctx,
        turn,
        [ResultLine(True, {"right": True})],
        {
            str(ResultLine(True, {"wrong": True})): f"the result for the unknown callId {unknown} "
            f"was taken for the pending call {issued.get('callId')}"
        },
    )


@check("§7.2", "MUST", needs=("scripted",))
async def check_tool_result_duplicate_ignored(ctx: ServerContext) -> None:
    """a second tool.result for a call is ignored"""
    session = await ctx.session()
    after = session.last_seq
    first, second = await call(session, "calls 2 lookup {}", 2)
    await answer(session, first, output={"n": 1})
    await answer(session, first, output={"n": 99})
    await answer(session, second, output={"n": 2})
    turn = await session.turn(after, REPLY)
    got = [str(line) for line in results(ctx, turn)]
    again = str(ResultLine(True, {"n": 99}))
    blame = (
        f"the second result for {first.get('callId')} replaced the first"
        if got[:1] == [again]
        else f"the second result for {first.get('callId')} was taken for the other pending "
        f"call {second.get('callId')}"
    )
    _expect_results(
        ctx, turn, [ResultLine(True, {"n": 1}), ResultLine(True, {"n": 2})], {again: blame}
    )


@check("§7.2, §6.3", "MUST", needs=("scripted",))
async def check_tool_result_late_ignored(ctx: ServerContext) -> None:
    """a late result of an interrupted call is ignored, even for a later call"""
    session = await ctx.session()
    old, _ = await interrupted_call(session)
    after = session.last_seq
    (new,) = await call(session, "call lookup {}")
    ctx.expect(new.get("callId") != old.get("callId"), "the later call reuses the callId")
    await answer(session, old, output={"late": True})
    early = [i for i in await session.current.settle(QUIET) if i.type == "text"]
    ctx.expect_none(early, "the interrupted call's late result settled something")
    await answer(session, new, output={"fresh": True})
    _expect_results(
        ctx,
        await session.turn(after, REPLY),
        [ResultLine(True, {"fresh": True})],
        {
            str(ResultLine(True, {"late": True})): "the interrupted call's late result was taken "
            "for the later call"
        },
    )


@check("§7.2", "MUST", needs=("scripted", "tool-timeout"))
async def check_tool_result_after_timeout_ignored(ctx: ServerContext) -> None:
    """a result that arrives after the server timed the call out is ignored"""
    timeout = ctx.options.tool_timeout
    assert timeout is not None
    session = await ctx.session(capabilities=[TOOL_STREAM])
    after = session.last_seq
    (issued,) = await call(session, "call lookup {}")
    try:
        async with session.current.kept_alive():
            turn = await session.turn(after, timeout + REPLY)
    except NoFrame:
        ctx.fail(f"the call was not settled within --tool-timeout {timeout:g} s (+{REPLY:g} s)")
    settled = results(ctx, turn)
    ctx.expect(
        len(settled) == 1 and not settled[0].ok,
        f"unanswered for --tool-timeout {timeout:g} s, the call's reply is {turn.text!r}; "
        "expected 'result error CODE' (TIMEOUT, §7.2)",
    )
    await answer(session, issued, output={"late": True})
    effects = [i for i in await session.current.settle(QUIET) if i.sequenced]
    ctx.expect_none(
        effects, f"the result after the timeout of {issued.get('callId')} had an effect"
    )
    if TOOL_STREAM in session.capabilities:
        _phases(ctx, _streams(session, issued.get("callId")))
    await ctx.alive(session, "after a late result")


@check("§6.2, §7.2", "MUST", needs=("scripted",))
async def check_tool_call_interrupted_settled(ctx: ServerContext) -> None:
    """an interrupted call is settled: nothing more happens for it"""
    session = await ctx.session()
    issued, interrupted = await interrupted_call(session)
    ctx.expect(
        interrupted.get("epoch") == issued.get("epoch"),
        f"interrupted epoch {interrupted.get('epoch')}, the call's is {issued.get('epoch')}",
    )
    await answer(session, issued, ok=False, code="INTERRUPTED", message=None)
    items = await session.current.settle(QUIET)
    leaked = [
        i
        for i in items
        if i.sequenced and (i.get("turnId") == issued.get("turnId") or i.type == "tool.call")
    ]
    ctx.expect_none(leaked, "after the interruption")
    await ctx.alive(session, "after an interrupted tool call")


# §7.4 / §7.5 previews and tool streams


@check("§7.4", "SHOULD", needs=("scripted",))
async def check_preview_identifiers_match_call(ctx: ServerContext) -> None:
    """previews name the call they preview (callId, turnId, epoch)"""
    session = await ctx.session()
    issued, _ = await answered_call(session, '{"text":"a preview of several fragments"}')
    previews = session.find("tool.call.delta")
    if not previews:
        raise NotApplicable("the server sent no tool.call.delta preview (previews are optional)")
    ids = (issued.get("callId"), issued.get("turnId"), issued.get("epoch"))
    bad = [p for p in previews if (p.get("callId"), p.get("turnId"), p.get("epoch")) != ids]
    ctx.expect_none(bad, "previews with other ids than the call")


@check("§7.4", "MUST", needs=("scripted", TOOL_STREAM))
async def check_tool_stream_no_preview(ctx: ServerContext) -> None:
    """with tool-stream-v1 no tool.call.delta is sent"""
    session = await ctx.capable(TOOL_STREAM)
    await answered_call(session, '{"text":"several fragments of arguments"}')
    await session.reply("server-tool 120", REPLY)
    ctx.expect_none(session.find("tool.call.delta")[:1], "tool.call.delta with tool-stream-v1")


@check("§7.5", "MUST", needs=("scripted", TOOL_STREAM))
async def check_tool_stream_client_call(ctx: ServerContext) -> None:
    """a client call's tool.stream phases are in order, one terminal"""
    session = await ctx.capable(TOOL_STREAM)
    issued, _ = await answered_call(session, '{"query":"a fairly long argument text"}', output=1)
    await session.current.quiet(0.1)
    streams = _streams(session, issued.get("callId"))
    complete = [s for s in streams if s.get("phase") == "arguments-complete"]
    settled = [s for s in streams if s.get("phase") == "settled"]
    same = all(
        (s.get("turnId"), s.get("epoch"), s.get("name"))
        == (issued.get("turnId"), issued.get("epoch"), issued.get("name"))
        for s in streams
    )
    _phases(
        ctx,
        streams,
        "" if complete else "no arguments-complete for an issued call",
        ""
        if not complete or complete[0].get("arguments") == issued.get("arguments")
        else "arguments-complete differs from tool.call's arguments",
        ""
        if settled and settled[0].get("ok") is True
        else "a call answered ok must end settled ok",
        "" if same else "tool.stream differs from tool.call in turnId, epoch or name",
    )


@check("§7.5", "MUST", needs=("scripted", TOOL_STREAM))
async def check_tool_stream_server_tool(ctx: ServerContext) -> None:
    """a server tool's tool.stream phases are in order, settled without output"""
    session = await ctx.capable(TOOL_STREAM)
    turn = await session.reply("server-tool 350", REPLY)
    streams = turn.of("tool.stream")
    ids = {s.get("callId") for s in streams}
    ctx.expect(len(ids) == 1, f"expected one server call's tool.stream, got callIds {ids}")
    settled = [s for s in streams if s.get("phase") == "settled"]
    _phases(
        ctx,
        streams,
        ""
        if streams[-1].get("phase") == "settled" and streams[-1].get("ok") is True
        else "a server tool that finished must end settled ok",
        ""
        if not any("output" in (s.data or {}) for s in settled)
        else "settled carries the server tool's output (never included, §7.5)",
        "tool.call sent for a server-side tool" if turn.of("tool.call") else "",
    )


@check("§7.5 (messages.md)", "MUST", needs=("scripted", TOOL_STREAM))
async def check_tool_stream_cancelled_on_interrupt(ctx: ServerContext) -> None:
    """an interrupted client call ends cancelled, nothing after"""
    session = await ctx.capable(TOOL_STREAM)
    issued, _ = await interrupted_call(session)
    await answer(session, issued, output={"late": True})
    await session.current.settle(QUIET)
    streams = _streams(session, issued.get("callId"))
    last = streams[-1].get("phase") if streams else None
    _phases(
        ctx,
        streams,
        ""
        if last == "cancelled"
        else "an interrupted call's terminal phase is cancelled (messages.md)",
    )


@check("§7.5", "MUST", needs=("scripted", TOOL_STREAM))
async def check_tool_stream_server_tool_cancelled(ctx: ServerContext) -> None:
    """an interrupted server tool ends cancelled, no progress after"""
    session = await ctx.capable(TOOL_STREAM)
    after = session.last_seq
    await session.text("server-tool 3000")
    progress = await session.current.expect(
        "tool.stream", REPLY, where=lambda i: i.seq > after and i.get("phase") == "progress"
    )
    await interrupt(session, progress.get("epoch"))
    await session.current.quiet(0.4)
    streams = _streams(session, progress.get("callId"))
    last = streams[-1].get("phase") if streams else None
    _phases(
        ctx,
        streams,
        "" if last == "cancelled" else "an interrupted server call's terminal phase is cancelled",
    )


@check("§7.5", "MUST", needs=("scripted", TOOL_STREAM))
async def check_tool_stream_settled_failure(ctx: ServerContext) -> None:
    """settled carries ok false and the failure code"""
    session = await ctx.capable(TOOL_STREAM)
    issued, turn = await answered_call(
        session, ok=False, code="REJECTED", message="declined by the suite"
    )
    settled = [s for s in _streams(session, issued.get("callId")) if s.get("phase") == "settled"]
    ctx.expect(len(settled) == 1, f"{len(settled)} settled phases for the call")
    ctx.expect(
        settled[0].get("ok") is False and settled[0].get("code") == "REJECTED",
        f"settled is {settled[0]}, expected ok false, code REJECTED",
    )
    _expect_results(ctx, turn, [ResultLine(False, "REJECTED")], {})


@check("§6.3", "MUST", needs=("scripted", GLOBAL_IDS))
async def check_tool_ids_global_consistent(ctx: ServerContext) -> None:
    """every message for a call uses its callId and turnId (global-tool-ids-v1)"""
    session = await ctx.capable(GLOBAL_IDS)
    issued, turn = await answered_call(session, '{"text":"fragments for previews"}')
    related = [i for i in turn.items if i.type in ("tool.call.delta", "tool.stream", "tool.call")]
    ids = (issued.get("callId"), turn.turn_id)
    ctx.expect_none(
        [i for i in related if (i.get("callId"), i.get("turnId")) != ids],
        "messages of the one call with other ids",
    )


@check("§6.3", "MUST", needs=("scripted", GLOBAL_IDS))
async def check_tool_ids_global_unique(ctx: ServerContext) -> None:
    """turn and call ids are unique across sessions (global-tool-ids-v1)"""
    ids: list[tuple[Any, Any]] = []
    for _ in range(2):
        session = await ctx.capable(GLOBAL_IDS)
        issued, turn = await answered_call(session)
        ids.append((issued.get("callId"), turn.turn_id))
    (call_a, turn_a), (call_b, turn_b) = ids
    ctx.expect(call_a != call_b, f"two sessions issued the same callId {call_a!r}")
    ctx.expect(turn_a != turn_b, f"two sessions used the same turnId {turn_a!r}")
