"""§6 Turns, epochs and interruption."""

from __future__ import annotations

from typing import Final

from ..scripted_contract import answered_call, interrupt, speaking
from ..server_context import PCM16, QUIET, REPLY, ServerContext, check, speech_frames

#: Server messages that belong to a turn and carry its epoch (§6.1), and tool.stream.
EPOCH_TYPES: Final = ("turn.state", "audio.start", "tool.call", "tool.call.delta", "tool.stream")


@check("§6.1", "MUST", needs=("scripted",))
async def check_epoch_never_decreases(ctx: ServerContext) -> None:
    """epochs never decrease; each turn has a higher epoch"""
    session = await ctx.session()
    await session.reply("echo one", REPLY)
    in_flight = await speaking(session, 1000)
    await interrupt(session, in_flight.get("epoch"))
    await session.reply("echo two", REPLY)
    await session.reply("echo three", REPLY)
    ordered = sorted(
        (i for i in session.received if i.type in (*EPOCH_TYPES, "interrupted")),
        key=lambda i: (i.conn, i.index),
    )
    problems: list[str] = []
    highest = -1
    for item in ordered:
        epoch = item.get("epoch")
        if not isinstance(epoch, int):
            continue
        if epoch < highest and item.type != "interrupted":
            problems.append(f"epoch {epoch} after {highest}: {item}")
        highest = max(highest, epoch)
    turns: dict[str, int] = {}
    for item in ordered:
        if item.type == "turn.state":
            turns.setdefault(str(item.get("turnId")), item.get("epoch"))
    epochs = list(turns.values())
    if epochs != sorted(set(epochs)) or len(epochs) != 4:
        problems.append(f"four turns have epochs {epochs}: each turn needs a higher epoch")
    ctx.expect(not problems, "\n".join(problems))


@check("§6.1", "MUST", needs=("scripted",))
async def check_epoch_turn_messages_carry_epoch(ctx: ServerContext) -> None:
    """a turn's messages carry its turnId and epoch"""
    session = await ctx.session()
    await session.reply("echo carry epoch", REPLY)
    await answered_call(session, '{"arg":"a long enough argument"}')
    turns: dict[str, int] = {}
    for item in session.find("turn.state"):
        turns.setdefault(str(item.get("turnId")), item.get("epoch"))
    bad: list[str] = []
    for item in session.received:
        if item.type in EPOCH_TYPES:
            turn_id = str(item.get("turnId"))
            if turn_id not in turns:
                bad.append(f"turnId of no turn.state: {item}")
            elif item.get("epoch") != turns[turn_id]:
                bad.append(f"epoch {item.get('epoch')} in a turn of epoch {turns[turn_id]}: {item}")
    ctx.expect(not bad, "\n".join(bad))


@check("§6.2", "MUST", needs=("scripted",))
async def check_interrupt_observed_epoch(ctx: ServerContext) -> None:
    """interrupt with the observed epoch gets interrupted with that epoch"""
    session = await ctx.session()
    in_flight = await speaking(session)
    epoch, turn_id = in_flight.get("epoch"), in_flight.get("turnId")
    interrupted = await interrupt(session, epoch)
    ctx.expect(
        interrupted.get("epoch") == epoch,
        f"interrupt of epoch {epoch} answered with interrupted epoch {interrupted.get('epoch')}",
    )
    later = await session.current.quiet(QUIET)
    ctx.expect_none(
        [i for i in later if i.sequenced and i.get("turnId") == turn_id],
        "the interrupted turn went on",
    )


@check("§6.2 (messages.md)", "MUST", needs=("scripted",))
async def check_interrupt_stale_no_effect(ctx: ServerContext) -> None:
    """an interrupt naming an older epoch has no effect"""
    session = await ctx.session()
    first = await session.reply("echo first", REPLY)
    after = session.last_seq
    in_flight = await speaking(session, 500)
    ctx.expect(in_flight.get("epoch") > first.epoch, "the second turn's epoch is not higher")
    await session.send("interrupt", epoch=first.epoch, reason="user")
    turn = await session.turn(after, REPLY)
    ctx.expect(
        turn.ended == "idle" and not turn.of("interrupted"),
        f"an interrupt of the older epoch {first.epoch} interrupted the turn of epoch "
        f"{in_flight.get('epoch')}",
    )


@check("§6.2", "MUST", needs=("scripted",))
async def check_interrupt_nothing_in_flight(ctx: ServerContext) -> None:
    """an interrupt with no response in flight sends nothing"""
    session = await ctx.session()
    turn = await session.reply("echo done", REPLY)
    await session.send("interrupt", epoch=turn.epoch, reason="keyboard")
    items = await session.current.settle(QUIET)
    ctx.expect_none([i for i in items if i.sequenced], "an interrupt with nothing in flight got")


@check("§6.3", "MUST", needs=("scripted",))
async def check_text_interrupts_response(ctx: ServerContext) -> None:
    """text interrupts the response in flight first"""
    session = await ctx.session()
    in_flight = await speaking(session)
    after = session.last_seq
    await session.reply("echo next-one", REPLY, expect="next-one")
    kinds = [
        (i.type, i.get("epoch"), i.get("turnId"))
        for i in session.unique
        if i.seq > after and i.type in ("interrupted", "turn.state")
    ]
    ctx.expect(
        bool(kinds) and kinds[0][0] == "interrupted" and kinds[0][1] == in_flight.get("epoch"),
        f"after the text, the server sent {kinds[:3]}: expected interrupted with epoch "
        f"{in_flight.get('epoch')} before the new turn",
    )


@check("§6.2", "MUST", needs=("scripted", "speech-detection"))
async def check_speech_interrupts_response(ctx: ServerContext) -> None:
    """the server interrupts when it detects the user speaking"""
    session = await ctx.session(input=PCM16)
    assert session.ready is not None
    frames = speech_frames(session.ready.get("input"), 300, 0)
    in_flight = await speaking(session, 3000)
    for frame in frames:
        await session.current.send(frame)
    interrupted = await session.current.expect("interrupted", REPLY)
    ctx.expect(
        interrupted.get("epoch") == in_flight.get("epoch"),
        f"speech interrupted epoch {interrupted.get('epoch')}, the response had "
        f"{in_flight.get('epoch')}",
    )
