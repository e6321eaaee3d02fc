"""§9 Errors, and §2.2 unknown members: what a client does with what it cannot use."""

from __future__ import annotations

import asyncio

from ..client_harness import (
    PCM16,
    PROMPT,
    TOOL_RECORD,
    ClientHarness,
    check,
    describe_result,
    text_of,
)


@check("§9.1", "MUST")
async def check_malformed_frames_survive(h: ClientHarness) -> None:
    """Malformed frames do not crash or stall the client"""
    conn = await h.open()
    garbage: list[str | bytes] = [
        "this is not JSON",
        "[1, 2, 3]",
        '"a string"',
        '{"v":2,"seq":0,"type":"text","text":"v2","turnId":null}',
        '{"seq":0,"type":"text","text":"no v","turnId":null}',
        '{"v":1,"seq":0,"type":"toString"}',
        '{"v":1,"seq":0,"type":"ping"}',
        '{"v":1,"seq":"one","type":"text","text":"x","turnId":null}',
        '{"v":1,"seq":0,"type":"tool.call","callId":"x"',
        b"\x02\x00\x00",
        b"\x07\x00\x00\x00\x00\x01\x02",
        b"\x01\x00\x00\x00\x00\x01\x02",
    ]
    for frame in garbage:
        await conn.send_raw(frame)
    call = await conn.tool_call(TOOL_RECORD, {"probe": "after garbage"})
    if await h.result(call, PROMPT) is None:
        raise h.fail(f"after malformed frames a valid tool.call got no result within {PROMPT:g} s")
    if h.exited.is_set():
        raise h.fail("the client process exited after malformed frames")


@check("§9.1", "MUST")
async def check_invalid_message_not_acted(h: ClientHarness) -> None:
    """An invalid tool.call is not acted on"""
    conn = await h.open()
    session = conn.session
    assert session is not None
    members = conn.call_message(TOOL_RECORD, {"probe": "invalid"}, epoch=1)
    invalid = text_of({"v": 1, "seq": 1, "type": "tool.call", **members, "epoch": -1})
    session.sent.append((1, invalid))  # the valid call that follows is seq 2
    await conn.send_raw(invalid)
    await h.require_result(await conn.tool_call(TOOL_RECORD, {"probe": "valid"}))
    await asyncio.sleep(0.3)
    bad = str(members["callId"])
    h.require_never_run(bad, "invalid: epoch -1")
    if h.results(bad):
        raise h.fail(f"the client answered the invalid call {bad}: it acted on an invalid message")


@check("§2.2", "MUST")
async def check_unknown_members_ignored(h: ClientHarness) -> None:
    """Unknown members are ignored, at any depth"""
    await h.start()
    conn = await h.accept()
    await h.handshake(
        conn,
        ready_extra={
            "x-conformance": {"nested": [1, {"deep": True}]},
            "output": {**PCM16, "x-future": {"a": 1}},
        },
    )
    await conn.send_seq(
        "turn.state", turnId="turn-1", epoch=1, state="acting", **{"x-future": True}
    )
    arguments = {"probe": "unknown members"}
    call = await conn.tool_call(TOOL_RECORD, arguments, extra={"x-future": {"b": [2]}})
    result = await h.require_result(call)
    if result.get("ok") is not True or result.get("output") != arguments:
        raise h.fail(f"a tool.call with an unknown member was answered {describe_result(result)}")


@check("§9.2", "MUST")
async def check_unknown_error_code(h: ClientHarness) -> None:
    """An error with an unknown code is handled by its recoverable flag"""
    conn = await h.open()
    await conn.send_seq(
        "error",
        code="CONFORMANCE_FUTURE_CODE",
        message="a code this client cannot know",
        recoverable=True,
    )
    call = await conn.tool_call(TOOL_RECORD, {"probe": "after error"})
    if await h.result(call, PROMPT) is None:
        raise h.fail(
            "after a recoverable error with an unknown code the client answered no tool.call"
        )
    if conn.closed.is_set():
        raise h.fail(
            f"the client gave up the connection after a recoverable error ({conn.close_note})"
        )
