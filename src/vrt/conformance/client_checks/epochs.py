"""§6.2 Interruption and the epoch gate: server-initiated (``interrupted``) and
client-initiated (the ``/interrupt`` line of VRT_SAY), across resumes."""

from __future__ import annotations

import asyncio

from ..client_harness import (
    PROMPT,
    TOOL_RECORD,
    TOOL_SLOW,
    ClientHarness,
    Connection,
    WireFrame,
    check,
    describe_result,
    failure_code,
)
from ..framework import Skipped


async def _started(h: ClientHarness, call: str) -> None:
    if not await h.until(lambda: h.started(call), PROMPT):
        raise h.fail(f"the client did not start call {call}")


async def _running_interrupted(h: ClientHarness, ms: int) -> tuple[Connection, str]:
    """A session with a ``conformance.slow`` of ``ms`` of epoch 1 running when the
    suite sends ``interrupted`` epoch 1; the connection and the callId."""
    conn = await h.open()
    call = await conn.tool_call(TOOL_SLOW, {"ms": ms}, epoch=1)
    await _started(h, call)
    await conn.send_seq("interrupted", epoch=1)
    return conn, call


@check("§6.2", "MUST")
async def check_closed_epoch_call_interrupted(h: ClientHarness) -> None:
    """tool.call of a closed epoch: INTERRUPTED, never run"""
    conn = await h.open()
    await conn.send_seq("turn.state", turnId="turn-1", epoch=1, state="thinking")
    await conn.send_seq("interrupted", epoch=1)
    at_closed = await conn.tool_call(TOOL_RECORD, {"probe": "epoch 1"}, epoch=1)
    below = await conn.tool_call(TOOL_RECORD, {"probe": "epoch 0"}, epoch=0)
    open_call = await conn.tool_call(TOOL_RECORD, {"probe": "epoch 2"}, epoch=2)
    await h.until(lambda: all(h.results(c) for c in (at_closed, below, open_call)), PROMPT)
    await asyncio.sleep(0.3)
    h.require_interrupted(at_closed, "epoch 1, closed")
    h.require_interrupted(below, "epoch 0, below the closed one")


@check("§6.2", "MUST")
async def check_queued_calls_interrupted(h: ClientHarness) -> None:
    """Queued calls of an interrupted epoch: INTERRUPTED, never run"""
    conn = await h.open()
    running = await conn.tool_call(TOOL_SLOW, {"ms": 1500}, epoch=1)
    queued = [
        await conn.tool_call(TOOL_RECORD, {"probe": "queued"}, epoch=1),
        await conn.tool_call(TOOL_SLOW, {"ms": 50}, epoch=1),
    ]
    await _started(h, running)
    await conn.send_seq("interrupted", epoch=1)
    await h.until(lambda: all(h.results(c) for c in queued), PROMPT)
    await h.until(lambda: h.results(running) or h.finished(running), 2.0)
    await asyncio.sleep(0.3)
    for call in queued:
        h.require_interrupted(call, "queued behind a running call when its epoch closed")


@check("§6.2, §7.2", "MUST")
async def check_running_call_interrupted(h: ClientHarness) -> None:
    """A running call whose epoch closes: one result, INTERRUPTED"""
    _, call = await _running_interrupted(h, 1000)
    await h.until(lambda: h.results(call), 3.0)
    await h.until(lambda: h.finished(call), 1.5)
    await asyncio.sleep(0.4)  # a later outcome must be discarded
    result = h.require_one_result(call)
    if failure_code(result) != "INTERRUPTED":
        raise h.fail(
            f"the running call's epoch closed, yet it was answered {describe_result(result)}, "
            "not INTERRUPTED"
        )


@check("§6.2", "MUST")
async def check_running_call_cancelled(h: ClientHarness) -> None:
    """A running call whose epoch closes is signalled to cancel"""
    _, call = await _running_interrupted(h, 5000)
    interrupted_at = h.now()
    if not await h.until(lambda: h.finished(call), 2.0):
        raise h.fail(
            "conformance.slow (5000 ms, stops when cancelled) was still running "
            f"{h.now() - interrupted_at:.1f} s after its epoch closed: the client did not "
            "signal cancellation to it (§6.2)"
        )


@check("§7.1", "MUST")
async def check_next_call_after_interrupt(h: ClientHarness) -> None:
    """After an interrupted running call, the next call runs and is answered"""
    conn, call = await _running_interrupted(h, 600)
    await h.result(call, 2.5)
    after = await conn.tool_call(TOOL_RECORD, {"probe": "next turn"}, epoch=2)
    result = await h.result(after, 3.0)
    if result is None:
        raise h.fail(
            f"call {after} (epoch 2, open) sent after the interrupted call {call} got no "
            "tool.result within 3 s: the client no longer runs calls (§7.1, §7.2)"
        )
    if h.started(after) != 1:
        raise h.fail(f"call {after} was answered {describe_result(result)} without running")


@check("§6.2, §5.4", "MUST")
async def check_closed_epoch_call_after_resume(h: ClientHarness) -> None:
    """A call of an epoch closed before a drop, resent after the resume: never run"""
    conn = await h.open()
    await conn.send_seq("turn.state", turnId="turn-1", epoch=1, state="thinking")
    closing = await conn.send_seq("interrupted", epoch=1)
    await h.until(
        lambda: any(
            (f.message or {}).get("upTo", 0) >= closing for f in h.from_client(types=("ack",))
        ),
        1.0,
    )
    lost = conn.call_message(TOOL_RECORD, {"probe": "epoch 1, lost with the connection"}, epoch=1)
    conn.lose_seq("tool.call", **lost)
    await conn.drop()
    conn2, hello = await h.reconnect()  # the resume resends the lost call
    if hello.get("resumeFrom", 0) < closing:
        raise Skipped(
            f"the client resumed from {hello.get('resumeFrom', 0)}: it had not handled the "
            f"interrupted (seq {closing}) before the drop, so its memory of closed epochs "
            "across a resume cannot be judged"
        )
    after = await conn2.tool_call(TOOL_RECORD, {"probe": "epoch 2"}, epoch=2)
    await h.until(lambda: h.results(str(lost["callId"])) and h.results(after), PROMPT)
    await asyncio.sleep(0.3)
    h.require_interrupted(
        str(lost["callId"]), "epoch 1, closed before the drop, resent after the resume"
    )


# Client-initiated interrupts: the '/interrupt' line of VRT_SAY


async def _client_interrupt(h: ClientHarness) -> tuple[Connection, WireFrame, str, str, float]:
    """Start the client with VRT_SAY ``/sleep 800`` and ``/interrupt``, and put a
    response of epoch 2 in flight at once: ``turn.state speaking``, an audio item of
    2000 ms, a running ``conformance.slow`` of 5000 ms and a ``conformance.record``
    queued behind it. The connection, the client's ``interrupt``, the two callIds, and
    when the audio began."""
    await h.start(say=["/sleep 800", "/interrupt"])
    conn = await h.accept()
    await h.handshake(conn)
    await conn.send_seq("turn.state", turnId="turn-2", epoch=2, state="speaking")
    await conn.audio_start("item-said", 2)
    audio_at = h.now()
    await conn.audio(2000)
    running = await conn.tool_call(TOOL_SLOW, {"ms": 5000}, epoch=2)
    queued = await conn.tool_call(TOOL_RECORD, {"probe": "queued"}, epoch=2)
    if not await h.until(lambda: h.from_client(conn=conn, types=("interrupt",)), 0.8 + PROMPT):
        raise h.fail(
            "the client sent no interrupt for the VRT_SAY line '/interrupt' (the suite's contract)"
        )
    if not h.started(running):
        raise h.fail(f"the client had not started call {running} 0.8 s after it came")
    return conn, h.from_client(conn=conn, types=("interrupt",))[0], running, queued, audio_at


@check("§6.2", "MUST")
async def check_client_interrupt_message(h: ClientHarness) -> None:
    """A client interrupt names the observed epoch, after answering queued calls"""
    _, interrupt, _, queued, _ = await _client_interrupt(h)
    message = interrupt.message or {}
    if message.get("epoch") != 2:
        raise h.fail(
            f"the client interrupted with epoch {message.get('epoch')!r}; the observed epoch "
            "(the highest in turn.state, audio.start and tool.call) was 2"
        )
    if message.get("reason") != "user":
        raise h.fail(
            f"'/interrupt' is an interface control: reason 'user', not {message.get('reason')!r}"
        )
    if not await h.until(lambda: h.results(queued), PROMPT):
        raise h.fail(
            f"the call {queued}, queued when the client interrupted its epoch, got no result: "
            "the client answers queued calls of the epoch it closes INTERRUPTED, then sends "
            "interrupt (§6.2)"
        )
    h.require_interrupted(queued, "queued when the client interrupted its epoch")
    answered = next(
        f
        for f in h.from_client(types=("tool.result",))
        if (f.message or {}).get("callId") == queued
    )
    if answered.t > interrupt.t or h.wire.index(answered) > h.wire.index(interrupt):
        raise h.fail(
            f"the queued call {queued} was answered after the interrupt: the client answers "
            "queued calls of the closed epoch first, then sends interrupt (§6.2)"
        )


@check("§6.2", "MUST")
async def check_client_interrupt_closes_epoch(h: ClientHarness) -> None:
    """A client interrupt closes the epoch at once: its calls never start"""
    conn, interrupt, running, _, audio_at = await _client_interrupt(h)
    if not await h.until(lambda: h.finished(running), 2.0):
        raise h.fail(
            f"the running call {running} (conformance.slow, 5000 ms) was still running 2 s after "
            "the client interrupted its epoch: no cancellation signal reached it"
        )
    late = await conn.tool_call(TOOL_RECORD, {"probe": "epoch 2, after the interrupt"}, epoch=2)
    later = await conn.tool_call(TOOL_RECORD, {"probe": "epoch 3"}, epoch=3)
    await h.until(lambda: h.results(late) and h.results(later), PROMPT)
    await asyncio.sleep(0.3)
    result = h.require_one_result(running)
    if failure_code(result) != "INTERRUPTED":
        raise h.fail(
            f"the running call of the interrupted epoch was answered {describe_result(result)}"
        )
    h.require_interrupted(late, "epoch 2, which the client closed")
    if h.started(later) != 1:
        raise h.fail(f"call {later} of epoch 3 (open) did not run")
    h.require_played_at_most(
        "item-said",
        (interrupt.t - audio_at) * 1000 + 300,
        f"interrupted {interrupt.t - audio_at:.2f} s in: playback did not stop (§6.2, §8.4)",
    )
