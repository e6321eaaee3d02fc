"""§8 Audio: frames, formats, output items."""

from __future__ import annotations

from ..framework import Skipped
from ..scripted_contract import speaking
from ..server_context import REPLY, ServerContext, check
from ..spec_tables import DEFAULT_RATES, same_format
from ..wire import Incoming, NoFrame, audio_frame
from ..wire_session import Session


async def _echo_audio(session: Session, turns: int = 1) -> list[Incoming]:
    """The output frames of ``turns`` echo replies (the contract's audio item)."""
    for k in range(turns):
        await session.reply(f"echo audio-{k}", REPLY)
    await session.current.quiet(0.1)
    frames = [i for i in session.received if i.binary]
    if not frames:
        raise Skipped("the agent's echo reply carried no output audio (the contract says it does)")
    return frames


@check("§8.3", "MUST", needs=("scripted",))
async def check_audio_start_before_frames(ctx: ServerContext) -> None:
    """audio.start comes before the first output frame"""
    session = await ctx.session()
    await _echo_audio(session, 2)
    announced = False
    for item in session.received:
        if item.type == "audio.start":
            announced = True
        elif item.binary and not announced:
            ctx.fail(f"an output frame before any audio.start: {item}")


@check("§8.1", "MUST", needs=("scripted",))
async def check_audio_output_kind_2(ctx: ServerContext) -> None:
    """output frames are kind 2, at least 5 bytes"""
    session = await ctx.session()
    frames = await _echo_audio(session)
    ctx.expect_none(
        [f for f in frames if f.type != "audio" or f.raw[0] != 2],
        "binary frames that are not output audio",
    )


@check("§8.1", "MUST", needs=("scripted",))
async def check_audio_seq_increments(ctx: ServerContext) -> None:
    """output audio seq starts at 0 and increases by one per frame"""
    session = await ctx.session()
    seqs = [f.seq for f in await _echo_audio(session, 2) if f.type == "audio"]
    expected = [k % (1 << 32) for k in range(len(seqs))]
    ctx.expect(seqs == expected, f"output audio seqs {seqs}, expected {expected}")


@check("§8.2", "SHOULD", needs=("scripted",))
async def check_audio_format_passthrough(ctx: ServerContext) -> None:
    """a preference the agent takes unchanged is accepted"""
    pcmu = {"encoding": "pcmu", "sampleRate": 8000}
    pcm16k = {"encoding": "pcm16", "sampleRate": 16000}
    session = await ctx.session(input=pcm16k, output=pcmu)
    assert session.ready is not None
    chosen = (session.ready.get("input"), session.ready.get("output"))
    ctx.expect(
        same_format(chosen[0], pcm16k) and same_format(chosen[1], pcmu),
        f"preferred input {pcm16k} and output {pcmu}, which the scripted contract's agent "
        f"takes unchanged; ready has {chosen[0]}, {chosen[1]}",
    )


@check("§8.2", "SHOULD")
async def check_audio_format_default(ctx: ServerContext) -> None:
    """a preference not taken gets pcm16 at 24000 Hz"""
    odd = {"encoding": "pcm16", "sampleRate": 11025}
    session = await ctx.session(input=odd, output=odd)
    assert session.ready is not None
    fallback = {"encoding": "pcm16", "sampleRate": DEFAULT_RATES["pcm16"]}
    for member in ("input", "output"):
        chosen = session.ready.get(member)
        ctx.expect(
            same_format(chosen, odd) or same_format(chosen, fallback),
            f"preferred {odd} for {member}; ready has {chosen}: a preference the server does not "
            "take should get pcm16 at 24000 Hz",
        )


@check("§8.2", "SHOULD", needs=("scripted",))
async def check_audio_pcm16_whole_samples(ctx: ServerContext) -> None:
    """pcm16 payloads hold whole samples"""
    session = await ctx.session(output={"encoding": "pcm16", "sampleRate": 24000})
    assert session.ready is not None
    if (session.ready.get("output") or {}).get("encoding") != "pcm16":
        raise Skipped(f"the server chose output {session.ready.get('output')}, not pcm16")
    frames = await _echo_audio(session)
    ctx.expect_none([f for f in frames if (len(f.raw) - 5) % 2], "pcm16 frames with an odd payload")


@check("§8.1", "MUST")
async def check_audio_malformed_recoverable(ctx: ServerContext) -> None:
    """a malformed binary frame gets MALFORMED, recoverable"""
    session = await ctx.session()
    conn = session.current
    bad = [b"", b"\x01\x00\x00", audio_frame(0, bytes(8), kind=2), audio_frame(0, b"\x00", kind=9)]
    for frame in bad:
        await conn.send(frame)
        error = await ctx.expect_error(conn, "MALFORMED", what=f"binary {frame.hex() or '(empty)'}")
        ctx.expect(error.get("recoverable") is True, "MALFORMED must be recoverable: true")
        ctx.expect_sequenced(session, error, "MALFORMED")
    await ctx.alive(session, "after malformed binary frames")


@check("§8.3", "MUST", needs=("scripted",))
async def check_audio_new_start_after_resume(ctx: ServerContext) -> None:
    """after a resume, output audio follows a new audio.start"""
    session = await ctx.session()
    await speaking(session, 1500)
    await session.current.expect("audio", REPLY)
    session.drop()
    await session.resume()
    conn = session.current
    try:
        first = await conn.expect("audio", 2.0)
    except NoFrame:
        raise Skipped(
            "no output audio arrived after the resume, so the rule cannot be seen"
        ) from None
    announced = [i for i in conn.received[: first.index] if i.type == "audio.start"]
    ctx.expect(bool(announced), f"the first frame after the resume had no audio.start: {first}")
    await session.send("interrupt", epoch=announced[0].get("epoch"), reason="user")
