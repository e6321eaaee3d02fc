"""§5 Sessions: the §5.1 table, ready, authentication, resuming."""

from __future__ import annotations

import secrets
from typing import Any, Final

from ..scripted_contract import ResultLine, answer, call, results
from ..server_context import (
    GLOBAL_IDS,
    LOOKUP,
    PCM16,
    QUIET,
    REPLY,
    TOOL_STREAM,
    ServerContext,
    check,
    speech_frames,
)
from ..session_ids import MUST_BITS, RECOMMENDED_BITS, SAMPLES, IdAnalysis, analyse
from ..spec_tables import row, same_format
from ..wire import Closed, Incoming, Refused
from ..wire_session import Session

# §5.1 State: the server table, row by row

#: One valid message of every client type but hello and ping (§5.1: "any other valid
#: control message" while awaiting hello).
OTHER_MESSAGES: Final[list[dict[str, Any]]] = [
    {"v": 1, "seq": 1, "type": "text", "text": "echo early"},
    {"v": 1, "seq": 1, "type": "interrupt", "epoch": 0, "reason": "user"},
    {"v": 1, "seq": 1, "type": "playback", "itemId": "item_1", "playedMs": 10},
    {"v": 1, "seq": 1, "type": "tool.result", "callId": "c", "epoch": 0, "ok": True, "output": 1},
    {"v": 1, "seq": 1, "type": "context", "context": None},
    {"v": 1, "seq": 0, "type": "ack", "upTo": 0},
]


@check("§5.1", "MUST")
async def check_table_no_session(ctx: ServerContext) -> None:
    """a message before hello gets NO_SESSION (seq 0, not recoverable)"""
    expected = row("awaiting hello", "sequenced message")
    conn = await ctx.connect()
    for message in OTHER_MESSAGES:
        await conn.send(message)
        errors = [i for i in await conn.barrier() if i.type == "error"]
        codes = [e.get("code") for e in errors]
        ctx.expect(
            codes == [expected.error],
            f"{message['type']} before hello got {codes}, expected [{expected.error}]",
        )
        ctx.expect(errors[0].seq == 0, f"{expected.error} has seq {errors[0].seq} (§4.1)")
        ctx.expect(
            errors[0].get("recoverable") is expected.recoverable,
            f"{expected.error} must be recoverable: false (§9.2)",
        )


@check("§5.1", "MUST")
async def check_table_no_session_connection_usable(ctx: ServerContext) -> None:
    """after NO_SESSION the connection still takes a hello"""
    conn = await ctx.connect()
    await conn.send(OTHER_MESSAGES[0])
    await ctx.expect_error(conn, "NO_SESSION")
    await conn.send(ctx.hello())
    try:
        ready = await conn.expect_ready()
    except (Refused, Closed) as exc:
        ctx.fail(f"hello after NO_SESSION did not open a session: {exc}")
    ctx.expect(ready.get("resumedFrom") is None, "a new session's ready has resumedFrom")


@check("§5.1", "MUST")
async def check_table_invalid_before_hello(ctx: ServerContext) -> None:
    """an invalid message before hello gets its code, recoverable, seq 0"""
    expected = row("any", "invalid control message")
    conn = await ctx.connect()
    cases = [
        ("{", "MALFORMED"),
        ('{"v":3,"seq":0,"type":"hello"}', "UNSUPPORTED_VERSION"),
        ('{"v":1,"seq":0,"type":"pong"}', "UNKNOWN_TYPE"),
        ('{"v":1,"seq":0,"type":"ack"}', "INVALID_FIELD"),
    ]
    for text, code in cases:
        await conn.send(text)
        error = await ctx.expect_error(conn, code, what=text)
        ctx.expect(error.seq == 0, f"{code} before a session has seq {error.seq}")
        ctx.expect(
            error.get("recoverable") is expected.recoverable, f"{code} must be recoverable: true"
        )
    await conn.send(ctx.hello())
    await conn.expect_ready()


@check("§5.1, §8.1", "MUST")
async def check_table_audio_before_hello_ignored(ctx: ServerContext) -> None:
    """input audio before hello is ignored"""
    conn = await ctx.connect()
    for frame in speech_frames(PCM16):
        await conn.send(frame)
    ctx.expect_none(await conn.barrier(), "input audio before hello was answered")
    await conn.send(ctx.hello(input=PCM16))
    await conn.expect_ready()
    heard = [i for i in await conn.quiet(1.0) if i.type in ("transcript", "turn.state")]
    ctx.expect_none(heard, "audio sent before hello reached the session")


@check("§5.1", "MUST", needs=("scripted",))
async def check_table_opening_keeps_messages(ctx: ServerContext) -> None:
    """messages sent while opening are kept and handled after ready"""
    conn = await ctx.connect()
    await conn.send(ctx.hello())
    await conn.send({"v": 1, "seq": 1, "type": "text", "text": "echo kept-while-opening"})
    items = await conn.until(
        lambda i: i.type == "turn.state" and i.get("state") == "idle", REPLY, "the reply"
    )
    ctx.expect_none(
        [i for i in items if i.type == "error"], "a message sent while opening got an error"
    )
    ctx.expect(items[0].type == "ready", f"ready must come first, not {items[0]}")
    reply = "".join(str(i.get("text")) for i in items if i.type == "text")
    ctx.expect(reply == "kept-while-opening", f"the kept 'echo kept-while-opening' got {reply!r}")


@check("§5.1", "MUST")
async def check_table_duplicate_hello_opening(ctx: ServerContext) -> None:
    """a second hello while opening gets DUPLICATE_HELLO"""
    expected = row("opening", "hello")
    conn = await ctx.connect()
    await conn.send(ctx.hello())
    await conn.send(ctx.hello())
    error = await ctx.expect_error(conn, str(expected.error))
    ctx.expect(
        error.get("recoverable") is expected.recoverable, "DUPLICATE_HELLO must be recoverable"
    )
    await conn.settle(QUIET)
    readies = [i for i in conn.received if i.type == "ready"]
    ctx.expect(len(readies) == 1, f"two hellos got {len(readies)} ready messages, expected 1")


@check("§5.1", "MUST")
async def check_table_duplicate_hello_open(ctx: ServerContext) -> None:
    """a hello in an open session gets DUPLICATE_HELLO (recoverable)"""
    expected = row("open", "hello")
    session = await ctx.session()
    conn = session.current
    await conn.send(ctx.hello(capabilities=[TOOL_STREAM]))
    error = await ctx.expect_error(conn, str(expected.error))
    ctx.expect(
        error.get("recoverable") is expected.recoverable, "DUPLICATE_HELLO must be recoverable"
    )
    ctx.expect_sequenced(session, error, "DUPLICATE_HELLO in an open session")
    await conn.barrier()
    ctx.expect(
        sum(i.type == "ready" for i in conn.received) == 1, "a second ready after a second hello"
    )
    await ctx.alive(session, "after DUPLICATE_HELLO")


@check("§5.1", "MUST", needs=("speech-detection",))
async def check_table_open_audio_passed(ctx: ServerContext) -> None:
    """input audio in an open session reaches the session (speech detection shows it)"""
    session = await ctx.session(input=PCM16)
    assert session.ready is not None
    for frame in speech_frames(session.ready.get("input")):
        await session.current.send(frame)
    heard = await session.current.until(
        lambda i: (
            (i.type == "turn.state" and i.get("state") == "listening")
            or (i.type == "transcript" and i.get("role") == "user")
        ),
        REPLY,
        "a listening turn or a user transcript",
    )
    ctx.expect(bool(heard), "speech in an open session was not passed to it")


# §5.2 Opening a session


@check("§5.2", "MUST")
async def check_ready_members(ctx: ServerContext) -> None:
    """ready has sessionId, input, output and no resumedFrom"""
    session = await ctx.session()
    ready = session.ready
    assert ready is not None
    assert ready.data is not None
    sid = ready.get("sessionId")
    ctx.expect(isinstance(sid, str) and sid != "", f"sessionId is {sid!r}")
    for member in ("input", "output"):
        ctx.expect(isinstance(ready.get(member), dict), f"ready.{member} is {ready.get(member)!r}")
    ctx.expect(
        "resumedFrom" not in ready.data,
        "a new session's ready has resumedFrom (present iff resuming, §5.2)",
    )


async def _session_ids(ctx: ServerContext) -> IdAnalysis:
    """The ids of sessions opened one after another (so that their order is known)."""
    ids: list[str] = []
    for _ in range(SAMPLES):
        session = await ctx.session(tools=None)
        ids.append(session.session_id)
        await session.close()
    return analyse(ids)


@check("§5.2, §10", "MUST")
async def check_ready_session_id_unguessable(ctx: ServerContext) -> None:
    """session ids are unguessable: no repeats, no counter or clock, no narrow randomness"""
    found = await _session_ids(ctx)
    ctx.expect(not found.duplicates, f"session ids repeat: {found.duplicates}")
    ctx.expect(
        found.bits >= MUST_BITS,
        f"session ids are guessable: {found.describe()}; at least {MUST_BITS} random bits "
        f"are needed (RECOMMENDED {RECOMMENDED_BITS})",
    )


@check("§5.2", "SHOULD")
async def check_ready_session_id_122_bits(ctx: ServerContext) -> None:
    """session ids carry at least 122 random bits (RECOMMENDED: as a version 4 UUID)"""
    found = await _session_ids(ctx)
    ctx.expect(
        found.bits >= RECOMMENDED_BITS,
        f"{found.describe()}; RECOMMENDED: at least {RECOMMENDED_BITS} random bits",
    )


# §5.3 Authentication


@check("§5.3", "MUST", needs=("auth",))
async def check_auth_wrong_credential(ctx: ServerContext) -> None:
    """a wrong credential gets UNAUTHORIZED (seq 0) and close 4401"""
    conn = await ctx.connect()
    await conn.send(ctx.hello(auth=f"{ctx.options.auth}-wrong-{secrets.token_hex(4)}"))
    await ctx.refusal(conn, row("opening", "authentication refused"))


@check("§5.3", "MUST", needs=("auth",))
async def check_auth_absent_credential(ctx: ServerContext) -> None:
    """an absent credential gets UNAUTHORIZED (seq 0) and close 4401"""
    conn = await ctx.connect()
    await conn.send({"v": 1, "seq": 0, "type": "hello", "tools": [LOOKUP]})
    await ctx.refusal(conn, row("opening", "authentication refused"))


@check("§5.3", "MUST", needs=("auth",))
async def check_auth_resume_needs_credential(ctx: ServerContext) -> None:
    """a resuming hello is authenticated too"""
    refused = row("opening", "authentication refused")
    session = await ctx.session()
    session.drop()
    for credential in ({}, {"auth": f"{ctx.options.auth}-wrong"}):
        conn = await ctx.connect()
        await conn.send(
            {"v": 1, "seq": 0, "type": "hello", "sessionId": session.session_id, **credential}
        )
        await ctx.refusal(conn, refused)


@check("§5.3, §10", "MUST", needs=("auth", "auth-other"))
async def check_auth_foreign_resume_like_unknown(ctx: ServerContext) -> None:
    """a foreign resume is answered like an unknown one"""
    owner = await ctx.session()
    sid = owner.session_id
    unknown = (secrets.token_urlsafe(len(sid)) + "x" * len(sid))[: len(sid)]
    answers: list[tuple[list[bytes], tuple[int | None, str]]] = []
    for target in (sid, unknown):
        conn = await ctx.connect()
        await conn.send(
            {
                "v": 1,
                "seq": 0,
                "type": "hello",
                "sessionId": target,
                "resumeFrom": 0,
                "auth": ctx.options.auth_other,
            }
        )
        close = await conn.wait_closed(5.0)
        # An answer may name the id it was asked about: that reveals nothing.
        frames = [i.raw.replace(target.encode(), b"<asked id>") for i in conn.received]
        answers.append((frames, close))
    foreign, unknown_answer = answers
    ctx.expect(
        foreign == unknown_answer,
        "a foreign session's resume and an unknown session's resume are answered differently "
        f"(reveals that the session exists):\n  foreign: {foreign}\n  unknown: {unknown_answer}",
    )
    refused = row("opening", "resume of an unknown")
    frames, close = foreign
    ctx.expect(
        len(frames) == 1 and f'"{refused.error}"'.encode() in frames[0],
        f"a foreign resume got {frames}, expected one error {refused.error}",
    )
    ctx.expect(
        close[0] == refused.close, f"a foreign resume closed with {close}, expected {refused.close}"
    )
    ctx.expect(not owner.current.closed.is_set(), "the owner's connection was closed")
    await owner.current.barrier()


@check("§5.3", "MUST", needs=("no-auth",))
async def check_auth_ignored_without_authentication(ctx: ServerContext) -> None:
    """a server without authentication ignores hello.auth"""
    for credential in ("conformance-any-credential", {"scheme": "conformance", "k": [1]}):
        conn = await ctx.connect()
        await conn.send({"v": 1, "seq": 0, "type": "hello", "auth": credential})
        try:
            await conn.expect_ready()
        except Refused as refused:
            ctx.fail(
                f"hello with auth {credential!r} was refused ({refused}); without --auth the "
                "suite judges the server as one without authentication"
            )


# §5.4 Resuming a session


@check("§5.4", "MUST")
async def check_resume_resends_after_resume_from(ctx: ServerContext) -> None:
    """after a resume, messages after resumeFrom are resent once, in order"""
    session = await ctx.session()
    await ctx.produce(session, 4)
    originals = {i.seq: i.data for i in session.unique}
    last = session.last_seq
    session.drop()
    await session.resume(resume_from=1)
    conn = session.current
    await conn.settle(QUIET)
    resent = [i for i in conn.received if i.sequenced]
    seqs = [i.seq for i in resent]
    ctx.expect(
        seqs == list(range(2, last + 1)),
        f"resumed from 1 with the server at {last}: resent seqs {seqs}, "
        f"expected {list(range(2, last + 1))}",
    )
    ctx.expect_none(
        [i for i in resent if originals.get(i.seq) != i.data],
        "resent messages differ from the originals",
    )


@check("§5.4", "MUST")
async def check_resume_resumed_from_last_seq(ctx: ServerContext) -> None:
    """ready.resumedFrom is the server's lastSeq of the client stream"""
    session = await ctx.session()
    for k in range(3):
        await session.send("context", context={"k": k})
    await session.current.barrier()
    session.drop()
    ready = await session.resume()
    resumed = ready.get("resumedFrom")
    ctx.expect(resumed == 3, f"the client sent seqs 1..3; ready.resumedFrom is {resumed!r}")


@check("§5.4", "MUST")
async def check_resume_unknown_session(ctx: ServerContext) -> None:
    """resuming an unknown session: RESUME_FAILED (seq 0), close 4404"""
    conn = await ctx.connect()
    await conn.send(ctx.hello(sessionId=f"conformance-{secrets.token_hex(16)}", resumeFrom=0))
    await ctx.refusal(conn, row("opening", "resume of an unknown"))


async def _resume_beyond(ctx: ServerContext) -> tuple[str, int]:
    """Resume a session from beyond what its server sent; the session id and the
    server's last seq."""
    session = await ctx.session()
    await ctx.produce(session, 1)
    session.drop()
    conn = await ctx.connect()
    await conn.send(ctx.hello(sessionId=session.session_id, resumeFrom=session.last_seq + 5))
    await ctx.refusal(conn, row("opening", "resume of an unknown"))
    return session.session_id, session.last_seq


@check("§5.4", "MUST")
async def check_resume_beyond_sent(ctx: ServerContext) -> None:
    """resumeFrom beyond what the server sent: RESUME_FAILED, close 4404"""
    await _resume_beyond(ctx)


@check("§5.4", "MUST")
async def check_resume_beyond_sent_closes_session(ctx: ServerContext) -> None:
    """a resume beyond what was sent closes the session"""
    session_id, last = await _resume_beyond(ctx)
    conn = await ctx.connect()
    await conn.send(ctx.hello(sessionId=session_id, resumeFrom=last))
    await ctx.refusal(conn, row("opening", "resume of an unknown"))


@check("§5.4, §9.3", "MUST")
async def check_resume_replaces_older_connection(ctx: ServerContext) -> None:
    """a resume closes the older connection with 4000"""
    session = await ctx.session()
    older = session.current
    await session.resume()
    code, reason = await older.wait_closed(5.0)
    ctx.expect(
        code == 4000, f"the replaced connection closed with {code} {reason!r}, expected 4000"
    )
    await ctx.alive(session, "on the newer connection")


@check("§5.4, §4.3", "MUST", needs=("scripted",))
async def check_resume_client_resends_deduped(ctx: ServerContext) -> None:
    """client resends after a resume are handled exactly once"""
    session = await ctx.session()
    await session.reply("echo r-one", REPLY, expect="r-one")
    await session.text("echo r-two")
    session.drop()
    await session.resume()  # resends what the server lacks, per ready.resumedFrom
    await session.resend(1)  # and duplicates of what it already handled
    await session.resend(2)
    await session.current.settle(0.5)
    await session.reply("echo r-three", REPLY, expect="r-three")
    replies = list(session.turns().values())
    ctx.expect(
        replies == ["r-one", "r-two", "r-three"],
        f"three texts, two of them resent after a resume, got the replies {replies}: "
        "each must be handled exactly once",
    )


async def _call_across_resume(session: Session) -> tuple[Incoming, Incoming]:
    """``call lookup {"k":"resume"}`` left unanswered, the connection lost, the session
    resumed from before the call: the original ``tool.call`` and the one resent."""
    (original,) = await call(session, 'call lookup {"k":"resume"}')
    session.drop()
    await session.resume(resume_from=original.seq - 1)
    return original, await session.current.expect("tool.call", 3.0)


@check("§5.4", "MUST", needs=("scripted",))
async def check_resume_pending_tool_call(ctx: ServerContext) -> None:
    """a pending tool call carries over a resume"""
    session = await ctx.session()
    after = session.last_seq
    original, resent = await _call_across_resume(session)
    ctx.expect(
        resent.data == original.data,
        f"the resent tool.call differs from the original:\n  {original}\n  {resent}",
    )
    await answer(session, original, output={"carried": True})
    turn = await session.turn(after, REPLY)
    ctx.expect(
        results(ctx, turn) == [ResultLine(True, {"carried": True})],
        f"the result sent after the resume was not used: the reply is {turn.text!r}",
    )


@check("§5.4, §4.1", "MUST", needs=("scripted",))
async def check_resume_transient_not_resent(ctx: ServerContext) -> None:
    """transient messages and audio are never resent"""
    session = await ctx.session()
    await session.reply("echo resend-transient", REPLY)
    await session.current.barrier()
    session.drop()
    await session.resume(resume_from=0)
    conn = session.current
    await conn.barrier()
    # A fresh ack on the new connection is allowed; the finished echo's audio is not.
    ctx.expect_none(
        [i for i in conn.received if i.type in ("audio", "audio.start")], "resent after the resume"
    )
    ctx.expect(any(i.sequenced for i in conn.received), "resuming from 0 resent nothing")


@check("§5.4", "MUST")
async def check_resume_formats_fixed(ctx: ServerContext) -> None:
    """formats carry over a resume unchanged"""
    session = await ctx.session(output={"encoding": "pcmu", "sampleRate": 8000})
    assert session.ready is not None
    before = (session.ready.get("input"), session.ready.get("output"))
    session.drop()
    resumed = await session.resume(
        hello={**ctx.auth(), "output": {"encoding": "pcm16", "sampleRate": 16000}}
    )
    after = (resumed.get("input"), resumed.get("output"))
    ctx.expect(
        same_format(before[0], after[0]) and same_format(before[1], after[1]),
        f"formats changed across the resume: {before} -> {after}",
    )


@check("§6.3", "MUST", needs=("scripted", GLOBAL_IDS))
async def check_resume_replay_same_ids(ctx: ServerContext) -> None:
    """a replayed tool.call keeps its ids byte for byte (global-tool-ids-v1)"""
    session = await ctx.capable(GLOBAL_IDS)
    original, resent = await _call_across_resume(session)
    ctx.expect(
        resent.raw == original.raw,
        f"the replayed tool.call is not byte-identical:\n  {original}\n  {resent}",
    )
    await answer(session, original)
