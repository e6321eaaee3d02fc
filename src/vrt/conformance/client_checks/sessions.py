"""§5 Sessions: hello and ready, authentication, resuming."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterable
from urllib.parse import unquote_plus

from ...protocol.codec import Invalid, decode_client
from ..client_harness import (
    CONTRACT_TOOLS,
    PROMPT,
    TOOL_RECORD,
    ClientHarness,
    Connection,
    WireFrame,
    check,
)
from ..framework import Skipped


@check("§5.2", "MUST")
async def check_hello_first(h: ClientHarness) -> None:
    """Every connection begins with hello (v 1, seq 0)"""
    await h.start()
    for attempt in (1, 2):
        conn = await h.accept()
        frame = await h.first_frame(conn)
        if isinstance(frame.data, bytes):
            raise h.fail(f"connection #{conn.number} began with a binary frame")
        message = frame.message
        if message is None or message.get("type") != "hello":
            raise h.fail(f"connection #{conn.number} began with {frame.describe()}, not hello")
        if type(message.get("v")) is not int or message["v"] != 1:
            raise h.fail(f"hello has v {message.get('v')!r}, not 1 (§3.1)")
        if type(message.get("seq")) is not int or message["seq"] != 0:
            raise h.fail(f"hello has seq {message.get('seq')!r}, not 0 (hello is transient, §4.1)")
        await h.handshake(conn, first=frame)
        if attempt == 1:
            await asyncio.sleep(0.2)
            await conn.drop()  # the resuming connection must begin with hello too


@check("§5.2", "MUST")
async def check_hello_tools(h: ClientHarness) -> None:
    """hello is valid and declares unique tools (and the contract's tools)"""
    await h.start()
    conn = await h.accept()
    frame = await h.first_frame(conn)
    hello = h.hello_of(conn, frame)
    assert isinstance(frame.data, str)
    decoded = decode_client(frame.data)
    if isinstance(decoded, Invalid):
        raise h.fail(f"hello is invalid: {decoded.code}: {decoded.reason}")
    names = [t.get("name") for t in hello.get("tools") or [] if isinstance(t, dict)]
    duplicates = sorted({str(n) for n in names if names.count(n) > 1})
    if duplicates:
        raise h.fail(f"hello.tools names a tool more than once: {duplicates} (§5.2)")
    missing = [name for name in CONTRACT_TOOLS if name not in names]
    if missing:
        raise h.fail(f"hello.tools lacks {missing}, which the suite's contract requires")
    if "sessionId" in hello or "resumeFrom" in hello:
        raise h.fail("the first hello of a new client asks to resume a session")
    await h.handshake(conn, first=frame)


@check("§5.1", "MUST")
async def check_nothing_before_ready(h: ClientHarness) -> None:
    """Nothing sequenced and no audio before ready"""
    say = [*h.say_lines(h.new_id("early"), 2), "/audio 100"]
    await h.start(say=say)
    conn = await h.accept()
    first = await h.first_frame(conn)
    h.hello_of(conn, first)
    await asyncio.sleep(0.3)  # a delayed ready: the client must wait for it
    early = [
        f
        for f in h.from_client(conn=conn)
        if f is not first and (isinstance(f.data, bytes) or f.sequenced or (f.seq or 0) != 0)
    ]
    if early:
        raise h.fail(
            f"the client sent {len(early)} sequenced or audio frame(s) before ready, "
            f"the first: {early[0].describe()}"
        )
    await h.handshake(conn, first=first)
    await h.until(lambda: len(h.from_client(conn=conn, types=("text",))) >= 2, PROMPT)


@check("§2.1, §5.3", "MUST")
async def check_auth_not_in_url(h: ClientHarness) -> None:
    """The credential goes in hello.auth, never in the URL"""
    credential = f"conformance-credential-{uuid.uuid4().hex}"
    await h.start(auth=credential)
    conn = await h.accept()
    hello = await h.handshake(conn)
    await asyncio.sleep(0.2)
    await conn.drop()  # the resuming connection is judged too
    await h.reconnect()
    for each in h.connections:
        target = unquote_plus(each.target)
        if credential in each.target or credential in target:
            raise h.fail(
                f"connection #{each.number} put the credential in the URL: {each.target} "
                "(§2.1, §5.3: proxies and logs record URLs)"
            )
    if hello.get("auth") != credential:
        raise h.fail(f"hello.auth is {hello.get('auth')!r}, not VRT_AUTH (the suite's contract)")


@check("§5.4", "MUST")
async def check_resume_hello(h: ClientHarness) -> None:
    """Resume: hello with sessionId and resumeFrom = its lastSeq"""
    conn = await h.open()
    await conn.send_seq("turn.state", turnId="turn-1", epoch=1, state="thinking")
    await conn.send_seq("text", text="before the drop", turnId="turn-1")
    last = await conn.send_seq("text", text="before the drop, again", turnId="turn-1")
    await asyncio.sleep(0.5)
    await conn.drop()
    conn2 = await h.accept()
    frame = await h.first_frame(conn2)
    hello = h.hello_of(conn2, frame)
    session = conn.session
    assert session is not None
    if hello.get("sessionId") != session.id:
        raise h.fail(
            f"after a lost connection the hello carries sessionId {hello.get('sessionId')!r}, "
            f"not the session's {session.id!r}"
        )
    if hello.get("resumeFrom", 0) != last:
        raise h.fail(
            f"resumeFrom is {hello.get('resumeFrom', 0)!r}; the client had received and "
            f"handled seq 1..{last}, so its lastSeq is {last}"
        )
    await h.handshake(conn2, first=frame)


async def _say_unacknowledged(
    h: ClientHarness, tag: str, count: int
) -> tuple[Connection, list[str]]:
    """Start the client with ``count`` VRT_SAY lines that the suite does not
    acknowledge; the connection and the lines."""
    say = h.say_lines(h.new_id(tag), count)
    h.auto_ack = False
    conn = await h.open(say=say)
    if not await h.until(lambda: len(h.from_client(conn=conn, types=("text",))) >= count, PROMPT):
        raise h.fail(f"the client did not send the {count} VRT_SAY lines (the suite's contract)")
    return conn, say


@check("§5.4", "MUST")
async def check_resume_resend(h: ClientHarness) -> None:
    """Resume: unacknowledged messages resent in order, before new ones"""
    conn, _ = await _say_unacknowledged(h, "resend", 3)
    originals = {f.seq: f.message for f in h.from_client(conn=conn) if f.sequenced}
    await conn.send({"v": 1, "seq": 0, "type": "ack", "upTo": 1})
    await asyncio.sleep(0.2)
    await conn.drop()
    conn2, hello = await h.reconnect(resumed_from=1)
    session = conn.session
    assert session is not None
    if hello.get("sessionId") != session.id:
        raise h.fail("the client did not resume its session after the lost connection")
    await h.require_result(await conn2.tool_call(TOOL_RECORD, {"after": "resume"}))
    await asyncio.sleep(0.2)
    last_old = max(s for s in originals if s is not None)
    expected = 2
    for frame in h.from_client(conn=conn2):
        if not frame.sequenced or frame.seq is None or frame.seq <= 1:
            continue
        if frame.seq != expected:
            raise h.fail(
                f"after ready with resumedFrom 1 the client sent seq {frame.seq}; expected seq "
                f"{expected} next (resend from 2, in order, then new)"
            )
        if frame.seq <= last_old and frame.message != originals.get(frame.seq):
            raise h.fail(
                f"the resent seq {frame.seq} differs from the original "
                f"{json.dumps(originals.get(frame.seq))}"
            )
        if frame.seq > last_old and frame.type != "tool.result":
            raise h.fail(f"unexpected new message {frame.describe()}")
        expected += 1
    if expected <= last_old:
        raise h.fail(
            f"the client resent up to seq {expected - 1}, not every message after resumedFrom "
            f"1 (it had sent 1..{last_old})"
        )


@check("§5.4", "MUST")
async def check_resumed_from_beyond_sent(h: ClientHarness) -> None:
    """resumedFrom beyond the last seq sent: resume fails, no replay"""
    conn, say = await _say_unacknowledged(h, "beyond", 2)
    await conn.drop()
    conn2, _ = await h.reconnect(resumed_from=9)
    if not await h.until(conn2.closed.is_set, PROMPT):
        raise h.fail(
            "ready with resumedFrom 9, beyond the client's last seq 2: the client kept the "
            f"connection open for {PROMPT:g} s instead of closing it (§5.4)"
        )
    late = [f for f in h.from_client(conn=conn2) if f.sequenced]
    if late:
        raise h.fail(f"after a failed resume the client sent {late[0].describe()}")
    await _judge_after_resume_failed(h, conn, say)


@check("§5.4", "MUST")
async def check_resume_failed_no_replay(h: ClientHarness) -> None:
    """RESUME_FAILED: no replay of old messages into a new session"""
    conn, say = await _say_unacknowledged(h, "replay", 2)
    await conn.drop()
    conn2 = await h.accept()
    hello = h.hello_of(conn2, await h.first_frame(conn2))
    if "sessionId" not in hello:
        raise Skipped("the client did not resume after the lost connection (see resume-hello)")
    await conn2.send(_refusal("RESUME_FAILED", "this session cannot be resumed"))
    await conn2.close(4404, "resume failed")
    late = [f for f in h.from_client(conn=conn2) if f.sequenced]
    if late:
        raise h.fail(
            "the client sent a sequenced message on a connection without ready: "
            + late[0].describe()
        )
    await _judge_after_resume_failed(h, conn, say)


def _refusal(code: str, message: str) -> dict[str, object]:
    """The error refusing a hello (seq 0, not recoverable, §5.1)."""
    return {
        "v": 1,
        "seq": 0,
        "type": "error",
        "code": code,
        "message": f"conformance suite: {message}",
        "recoverable": False,
    }


def _old_texts_in(frames: Iterable[WireFrame], old: Iterable[str]) -> list[WireFrame]:
    old_set = set(old)
    return [f for f in frames if f.type == "text" and (f.message or {}).get("text") in old_set]


async def _judge_after_resume_failed(h: ClientHarness, old: Connection, say: list[str]) -> None:
    """After a failed resume: the client may stop or open a new session, never resume the
    old one again nor replay its messages (§5.1, §5.4)."""
    conn = await h.maybe_accept(3.0)
    if conn is None:
        return  # the client stopped: allowed
    frame = await h.first_frame(conn)
    hello = h.hello_of(conn, frame)
    session = old.session
    assert session is not None
    if hello.get("sessionId") == session.id:
        raise h.fail("after RESUME_FAILED the client tried to resume the same session again")
    if "sessionId" in hello:
        raise h.fail(f"after RESUME_FAILED the client resumed session {hello['sessionId']!r}")
    await h.handshake(conn, first=frame)
    await h.result(await conn.tool_call(TOOL_RECORD, {"new": "session"}), PROMPT)
    await asyncio.sleep(0.7)
    frames = h.from_client(conn=conn)
    replayed = _old_texts_in(frames, say)
    if replayed:
        raise h.fail(
            f"the new session carries a message of the failed one: {replayed[0].describe()}"
        )
    first_seq = next((f for f in frames if f.sequenced), None)
    if first_seq is not None and first_seq.seq != 1:
        raise h.fail(
            f"the new session's first sequenced message has seq {first_seq.seq}, not 1: "
            f"{first_seq.describe()}"
        )


@check("§5.3", "SHOULD")
async def check_unauthorized_not_retried(h: ClientHarness) -> None:
    """UNAUTHORIZED: the same credential is not tried again"""
    await h.start(auth=f"conformance-credential-{uuid.uuid4().hex[:8]}")
    conn = await h.accept()
    hello = h.hello_of(conn, await h.first_frame(conn))
    await conn.send(_refusal("UNAUTHORIZED", "credential refused"))
    await conn.close(4401, "unauthorized")
    conn2 = await h.maybe_accept(2.5)
    if conn2 is None:
        return
    hello2 = h.hello_of(conn2, await h.first_frame(conn2))
    if hello2.get("auth") == hello.get("auth"):
        raise h.fail("after UNAUTHORIZED the client connected again with the same credential")
