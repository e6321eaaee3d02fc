"""§7 Tools: one call at a time, one result per call, previews and tool streams that
never run anything."""

from __future__ import annotations

import asyncio
import itertools
import json

from ..client_harness import (
    PROMPT,
    TOOL_FAIL,
    TOOL_RECORD,
    TOOL_SLOW,
    ClientHarness,
    check,
    describe_result,
    failure_code,
)
from ..framework import NotApplicable


async def _answered(h: ClientHarness, call: str, code: str, what: str) -> None:
    """The call's result is a failure with ``code``."""
    result = await h.require_result(call)
    if failure_code(result) != code:
        raise h.fail(f"{what} was answered {describe_result(result)}, not {code}")


@check("§7.1", "MUST")
async def check_calls_one_at_a_time(h: ClientHarness) -> None:
    """Calls run one at a time, in the order received"""
    conn = await h.open()
    calls = [
        await conn.tool_call(TOOL_SLOW, {"ms": 300}),
        await conn.tool_call(TOOL_SLOW, {"ms": 300}),
        await conn.tool_call(TOOL_RECORD, {"probe": "third"}),
    ]
    await h.until(lambda: all(h.results(c) for c in calls), 4.0)
    await asyncio.sleep(0.2)
    events = [
        (e.get("callId"), e.get("event", "started")) for e in h.log() if e.get("callId") in calls
    ]
    for previous, call in itertools.pairwise(calls):
        if (call, "started") not in events:
            raise h.fail(f"call {call} never started")
        if (previous, "finished") not in events[: events.index((call, "started"))]:
            raise h.fail(
                f"call {call} started before call {previous} finished (tool log): calls must run "
                "one at a time (§7.1)"
            )
    order = [r.get("callId") for r in h.results() if r.get("callId") in calls]
    if list(dict.fromkeys(order)) != calls:
        raise h.fail(
            f"results arrived in the order {order}, not the order the calls were received {calls}"
        )


@check("§7.2", "MUST")
async def check_exactly_one_result(h: ClientHarness) -> None:
    """Exactly one tool.result per call, with its callId and epoch"""
    conn = await h.open()
    epochs = {
        await conn.tool_call(TOOL_RECORD, {"probe": 1}, epoch=3): 3,
        await conn.tool_call(TOOL_FAIL, {}, epoch=3): 3,
        await conn.tool_call("conformance.absent", {}, epoch=3): 3,
        await conn.tool_call(TOOL_SLOW, {"ms": 100}, epoch=3): 3,
        await conn.tool_call(TOOL_SLOW, {"ms": "soon"}, epoch=3): 3,
        await conn.tool_call(TOOL_RECORD, {"probe": 2}, epoch=4): 4,
    }
    await h.until(lambda: all(h.results(c) for c in epochs), 4.0)
    await asyncio.sleep(0.6)
    for call, epoch in epochs.items():
        result = h.require_one_result(call)
        if result.get("epoch") != epoch:
            raise h.fail(
                f"the result of call {call} carries epoch {result.get('epoch')!r}, not the "
                f"call's epoch {epoch}"
            )
        if result.get("ok") is True and "output" not in result:
            raise h.fail(f"the successful result of {call} has no output member")
        if result.get("ok") is False and ("code" not in result or "message" not in result):
            raise h.fail(f"the failed result of {call} lacks code or message")
    strangers = [r for r in h.results() if r.get("callId") not in epochs]
    if strangers:
        raise h.fail(f"a tool.result for a call never made: {json.dumps(strangers[0])}")


@check("§7.2", "MUST")
async def check_tool_output(h: ClientHarness) -> None:
    """conformance.record: ok with its arguments as output"""
    conn = await h.open()
    arguments = {"text": "héllo ✓", "n": 3, "nested": {"x-future": [1, {"deep": None}]}}
    call = await conn.tool_call(TOOL_RECORD, arguments, epoch=2)
    result = await h.require_result(call)
    if result.get("ok") is not True or result.get("output") != arguments:
        raise h.fail(
            f"conformance.record answered {describe_result(result)}, not ok with output "
            f"{json.dumps(arguments, ensure_ascii=False)}"
        )
    logged = [e for e in h.log() if e.get("callId") == call and "arguments" in e]
    if not logged:
        raise h.fail("the tool log has no entry for the call (the suite's contract)")
    if logged[0].get("arguments") != arguments or logged[0].get("name") != TOOL_RECORD:
        raise h.fail(
            f"the tool log entry {json.dumps(logged[0])} does not name the call's tool and "
            "arguments (the suite's contract)"
        )


@check("§7.3", "MUST")
async def check_unknown_tool_failed(h: ClientHarness) -> None:
    """A call of a tool the client does not host: FAILED"""
    conn = await h.open()
    call = await conn.tool_call("conformance.absent", {"probe": 1})
    await _answered(h, call, "FAILED", "a call of an undeclared tool")


@check("§7.2", "MUST")
async def check_tool_failure_result(h: ClientHarness) -> None:
    """A tool that fails: ok false with code FAILED and a message"""
    conn = await h.open()
    call = await conn.tool_call(TOOL_FAIL, {"probe": 1})
    await _answered(h, call, "FAILED", "conformance.fail")
    result = h.results(call)[0]
    if "message" not in result or not isinstance(result["message"], str | None):
        raise h.fail("the failed result has no message member (a string or null)")


@check("§7.1", "SHOULD")
async def check_invalid_arguments(h: ClientHarness) -> None:
    """Arguments that do not match the declared parameters: INVALID"""
    conn = await h.open()
    call = await conn.tool_call(TOOL_SLOW, {"ms": "soon"})
    await _answered(
        h, call, "INVALID", 'conformance.slow with ms "soon" (its parameters require an integer)'
    )


@check("§7.2", "MUST")
async def check_calls_survive_drops(h: ClientHarness) -> None:
    """Calls across dropped connections: each run once, one result each"""
    conn = await h.open()
    slow = await conn.tool_call(TOOL_SLOW, {"ms": 400})
    if not await h.until(lambda: h.started(slow), PROMPT):
        raise h.fail(f"the client did not start call {slow} (conformance.slow)")
    await conn.drop()  # while the call runs
    conn2 = await h.accept()
    first = await h.first_frame(conn2)
    await h.until(lambda: h.finished(slow), 2.0)  # its result is produced offline...
    await h.handshake(conn2, first=first)  # ... and must be resent after ready
    during = await conn2.tool_call(TOOL_RECORD, {"probe": "second connection"})
    right = await conn2.tool_call(TOOL_RECORD, {"probe": "dropped right after"})
    await conn2.drop()  # right after a tool.call
    await h.reconnect()
    calls = [slow, during, right]
    await h.until(lambda: all(h.results(c) for c in calls), 4.0)
    await asyncio.sleep(0.5)
    for call in calls:
        if h.started(call) != 1:
            raise h.fail(f"call {call} started {h.started(call)} times across the drops")
        h.require_one_result(call)


@check("§7.4", "MUST")
async def check_preview_not_run(h: ClientHarness) -> None:
    """tool.call.delta previews never run anything"""
    conn = await h.open()
    preview = h.new_id("preview")
    for fragment in ('{"probe":', '"preview"}'):
        await conn.send_seq(
            "tool.call.delta",
            callId=preview,
            turnId="turn-1",
            epoch=1,
            preview={"argumentsDelta": fragment, "name": TOOL_RECORD},
        )
    await h.require_result(await conn.tool_call(TOOL_RECORD, {"probe": "real"}))
    await asyncio.sleep(0.3)
    h.require_never_run(preview, "only previewed, never called")
    if h.results(preview):
        raise h.fail(f"the client answered the preview {preview} with a tool.result")


@check("§7.5", "MUST", needs=("tool-stream-v1",))
async def check_tool_stream_not_run(h: ClientHarness) -> None:
    """tool.stream (tool-stream-v1) never runs anything"""
    await h.start(capabilities=["tool-stream-v1"])
    conn = await h.accept()
    frame = await h.first_frame(conn)
    hello = h.hello_of(conn, frame)
    if "tool-stream-v1" not in (hello.get("capabilities") or []):
        raise NotApplicable("the client does not offer tool-stream-v1 (VRT_CAPABILITIES)")
    await h.handshake(conn, first=frame, capabilities=["tool-stream-v1"])
    streamed = h.new_id("streamed")
    common = {"callId": streamed, "name": TOOL_RECORD, "turnId": "turn-1", "epoch": 1}
    await conn.send_seq("tool.stream", phase="start", **common)
    await conn.send_seq("tool.stream", phase="arguments-delta", delta='{"probe":1}', **common)
    await conn.send_seq("tool.stream", phase="arguments-complete", arguments={"probe": 1}, **common)
    await h.require_result(await conn.tool_call(TOOL_RECORD, {"probe": "real"}))
    await asyncio.sleep(0.3)
    h.require_never_run(streamed, "only streamed, never called")
    if h.results(streamed):
        raise h.fail(f"the client answered the streamed call {streamed}, never sent as tool.call")
