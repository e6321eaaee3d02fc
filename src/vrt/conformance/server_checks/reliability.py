"""§4 Reliability: sequence numbers, acknowledgements, duplicates, heartbeat."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from ..framework import NotApplicable, Skipped
from ..scripted_contract import context_reply
from ..server_context import INVALID_MESSAGE, QUIET, REPLY, ServerContext, check
from ..spec_tables import SERVER_TRANSIENT
from ..wire import Incoming, NoFrame

# §4.1 Sequence numbers


@check("§4.1", "MUST")
async def check_seq_transient_zero(ctx: ServerContext) -> None:
    """transient messages carry seq 0"""
    session = await ctx.session()
    conn = session.current
    await conn.send({"v": 1, "seq": 0, "type": "ping"})
    await session.send("context", context={"probe": 1})
    await conn.settle(0.5)
    if await ctx.has_agent():
        await session.reply("echo transient", REPLY)
    bad = [i for i in session.received if i.type in SERVER_TRANSIENT and i.seq != 0]
    ctx.expect_none(bad, "transient messages with a seq other than 0")


@check("§4.1", "MUST")
async def check_seq_sequenced_from_one(ctx: ServerContext) -> None:
    """the first sequenced server message has seq 1"""
    session = await ctx.session()
    await session.current.send(INVALID_MESSAGE)
    await session.current.barrier()
    first = [i for i in session.received if i.sequenced or i.type == "error"]
    ctx.expect(bool(first), "no sequenced message to observe (an invalid message got no error)")
    ctx.expect(first[0].seq == 1, f"the first sequenced message has seq {first[0].seq}: {first[0]}")


@check("§4.1, §4.3", "MUST")
async def check_seq_sequenced_consecutive(ctx: ServerContext) -> None:
    """sequenced server messages are consecutive"""
    session = await ctx.session()
    for _ in range(3):
        await session.current.send(INVALID_MESSAGE)
    await session.current.barrier()
    if await ctx.has_agent():
        await session.reply("burst 40", REPLY)
    seqs = [i.seq for i in session.received if i.sequenced]
    ctx.expect(len(seqs) >= 3, f"too few sequenced messages to judge: {seqs}")
    ctx.expect(
        seqs == list(range(1, len(seqs) + 1)), f"the server stream is not 1, 2, 3, ...: {seqs}"
    )


@check("§4.1", "MUST")
async def check_seq_error_zero_before_session(ctx: ServerContext) -> None:
    """errors before a session have seq 0"""
    conn = await ctx.connect()
    await conn.send({"v": 1, "seq": 1, "type": "text", "text": "too early"})
    await conn.send({"v": 1, "seq": 0, "type": "no-such-type"})
    errors = [i for i in await conn.barrier() if i.type == "error"]
    ctx.expect(len(errors) == 2, f"expected two errors before hello, got {len(errors)}")
    ctx.expect_none(
        [e for e in errors if e.seq != 0], "errors before a session with a seq other than 0"
    )


@check("§4.1", "MUST")
async def check_seq_error_sequenced_in_session(ctx: ServerContext) -> None:
    """errors in a session are sequenced"""
    session = await ctx.session()
    for _ in range(2):
        await session.current.send(INVALID_MESSAGE)
        error = await session.current.expect("error", 3.0)
        ctx.expect_sequenced(session, error, "an error after ready")


@check("§4.1", "MUST")
async def check_seq_continues_across_resume(ctx: ServerContext) -> None:
    """the server's seq continues across a resume"""
    session = await ctx.session()
    await ctx.produce(session, 2)
    last = session.last_seq
    session.drop()
    await session.resume()
    await session.current.send(INVALID_MESSAGE)
    error = await session.current.expect("error", 3.0)
    ctx.expect(
        error.seq == last + 1,
        f"the first new message after the resume has seq {error.seq}, expected {last + 1}",
    )


# §4.2 Acknowledgements


def _acked(seq: int) -> Callable[[Incoming], bool]:
    def covers(item: Incoming) -> bool:
        up_to = item.get("upTo")
        return type(up_to) is int and up_to >= seq

    return covers


@check("§4.2", "SHOULD")
async def check_ack_within_bounded_delay(ctx: ServerContext) -> None:
    """an ack follows within a bounded delay (1 s)"""
    session = await ctx.session()
    started = time.monotonic()
    seq = await session.send("context", context={"ack": "me"})
    try:
        ack = await session.current.expect("ack", 2.0, where=_acked(seq))
    except NoFrame:
        ctx.fail(f"no ack with upTo >= {seq} within 2 s (RECOMMENDED: 250 ms)")
    delay = ack.at - started
    ctx.expect(delay <= 1.0, f"the ack came after {delay:.3f} s (RECOMMENDED: within 250 ms)")


@check("§4.2", "MUST")
async def check_ack_up_to_not_beyond_sent(ctx: ServerContext) -> None:
    """ack.upTo never exceeds the highest seq received"""
    session = await ctx.session()
    for k in range(5):
        await session.send("context", context={"k": k})
        await asyncio.sleep(0.05)
    await session.current.settle(0.5)
    session.drop()
    await session.resume()
    await session.send("context", context={"k": "after resume"})
    await session.current.quiet(0.5)
    if not session.acks:
        raise NotApplicable("the server sent no ack (a SHOULD, §4.2): no upTo to judge")
    bad = [(up_to, sent) for up_to, sent in session.acks if up_to > sent]
    ctx.expect(not bad, f"acks beyond the highest seq sent (upTo, sent): {bad}")


# §4.3 Duplicates and order


@check("§4.3", "SHOULD")
async def check_ack_duplicate_acknowledged_again(ctx: ServerContext) -> None:
    """a duplicate is acknowledged again"""
    session = await ctx.session()
    seq = await session.send("context", context={"dup": 1})
    conn = session.current
    try:
        await conn.expect("ack", 2.0, where=_acked(seq))
    except NoFrame:
        raise Skipped(
            "the server does not acknowledge within 2 s (ack-within-bounded-delay)"
        ) from None
    await session.resend(seq)
    try:
        await conn.expect("ack", 2.0, where=_acked(seq))
    except NoFrame:
        ctx.fail(f"the duplicate of seq {seq} was not acknowledged again within 2 s")


@check("§4.3", "MUST", needs=("scripted",))
async def check_dedupe_duplicate_text_once(ctx: ServerContext) -> None:
    """a duplicate text is not handled twice"""
    session = await ctx.session()
    await session.reply("echo dup-one", REPLY, expect="dup-one")
    seq = session.out.last_seq
    await session.resend(seq)
    await session.current.settle(QUIET)
    await session.reply("echo dup-two", REPLY, expect="dup-two")
    replies = list(session.turns().values())
    ctx.expect(
        replies == ["dup-one", "dup-two"],
        f"seq {seq} ('echo dup-one') sent twice, then 'echo dup-two': the turns replied "
        f"{replies}; a duplicate is not handled again",
    )


@check("§4.3", "MUST", needs=("scripted",))
async def check_dedupe_duplicate_context_not_applied(ctx: ServerContext) -> None:
    """a duplicate context is not applied again"""
    session = await ctx.session()
    first = await session.send("context", context={"v": "first"})
    await session.send("context", context={"v": "second"})
    await session.current.barrier()
    await session.resend(first)
    await session.current.barrier()
    context = context_reply(ctx, await session.reply("context?", REPLY))
    ctx.expect(
        context == {"v": "second"},
        f"after a duplicate of the first context, 'context?' names {context!r}; "
        "expected the second, {'v': 'second'}",
    )


@check("§4.3", "MUST")
async def check_dedupe_gap_tolerated(ctx: ServerContext) -> None:
    """a gap in the client stream does not crash the server"""
    session = await ctx.session()
    session.skip_seqs(4)
    await session.send("context", context={"after": "gap"})
    await session.current.barrier()
    await ctx.alive(session, "after a gap of 4 seqs")


# §4.4 Heartbeat


@check("§4.4", "MUST")
async def check_heartbeat_pong_awaiting_hello(ctx: ServerContext) -> None:
    """ping is answered with pong while awaiting hello"""
    conn = await ctx.connect()
    await conn.send({"v": 1, "seq": 0, "type": "ping"})
    pong = await conn.expect("pong", 3.0, skip=())
    ctx.expect(pong.seq == 0, f"pong has seq {pong.seq}")
    await conn.send(ctx.hello())
    await conn.expect_ready()


@check("§4.4", "MUST")
async def check_heartbeat_pong_opening(ctx: ServerContext) -> None:
    """ping is answered with pong while opening"""
    conn = await ctx.connect()
    await conn.send(ctx.hello())
    await conn.send({"v": 1, "seq": 0, "type": "ping"})
    items = await conn.until(lambda i: i.type == "pong", 5.0, "pong")
    ctx.expect_none(
        [i for i in items if i.type == "error"], "a ping right after hello got an error"
    )
    if not any(i.type == "ready" for i in items):
        await conn.expect_ready()


@check("§4.4", "MUST")
async def check_heartbeat_pong_open(ctx: ServerContext) -> None:
    """every ping in an open session gets a pong"""
    session = await ctx.session()
    conn = session.current
    for _ in range(3):
        await conn.send({"v": 1, "seq": 0, "type": "ping"})
    for _ in range(3):
        pong = await conn.expect("pong", 3.0)
        ctx.expect(pong.seq == 0, f"pong with seq {pong.seq}")


@check("§4.4", "MUST", needs=("heartbeat-timeout",))
async def check_heartbeat_timeout_close_4408(ctx: ServerContext) -> None:
    """a silent connection is closed with 4408 and stays resumable"""
    timeout = ctx.options.heartbeat_timeout
    assert timeout is not None
    session = await ctx.session()
    started = time.monotonic()
    code, reason = await session.current.wait_closed(timeout * 1.5 + 5)
    waited = time.monotonic() - started
    ctx.expect(
        code == 4408,
        f"after {waited:.1f} s of silence the server closed with {code} {reason!r}, expected 4408",
    )
    ready = await session.resume()
    ctx.expect(ready.get("resumedFrom") is not None, "the resumed ready lacks resumedFrom")
