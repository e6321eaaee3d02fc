"""§2 framing, §3 versions and capabilities, §4 reliability: what a client sends, and
how it numbers, acknowledges, deduplicates and keeps its connection alive."""

from __future__ import annotations

import asyncio

from ...protocol.capabilities import registry
from ...protocol.codec import Invalid, decode_client
from ...protocol.frames import FrameKind
from ..client_harness import (
    PROMPT,
    TOOL_FAIL,
    TOOL_RECORD,
    TOOL_SLOW,
    ClientHarness,
    WireFrame,
    check,
    text_of,
)
from ..framework import NotApplicable, Skipped
from ..spec_tables import CLIENT_INTEGER_MEMBERS, CLIENT_SEQUENCED, CLIENT_TRANSIENT


def _integer_problems(frame: WireFrame) -> list[str]:
    message = frame.message or {}
    objects = [message, message.get("input"), message.get("output")]
    return [
        f"{member} written as {obj[member]!r}, not an integer: {frame.describe()}"
        for obj in objects
        if isinstance(obj, dict)
        for member in CLIENT_INTEGER_MEMBERS & obj.keys()
        if obj[member] is not None and type(obj[member]) is not int
    ]


@check("§2.2", "MUST")
async def check_client_frames_valid(h: ClientHarness) -> None:
    """Every control message the client sends is valid"""
    conn = await h.open(say=h.say_lines(h.new_id("valid"), 2))
    calls = [
        await conn.tool_call(TOOL_RECORD, {"a": [1, 2.5, None]}),
        await conn.tool_call(TOOL_FAIL, {}),
        await conn.tool_call("conformance.absent", {}),
        await conn.tool_call(TOOL_SLOW, {"ms": "soon"}),
    ]
    await conn.interrupted_item("item-valid", 1, 300, after=0.15)
    await h.until(lambda: all(h.results(c) for c in calls), PROMPT)
    await asyncio.sleep(0.4)
    problems = []
    for frame in h.from_client():
        if isinstance(frame.data, bytes):
            if len(frame.data) < 5 or frame.data[0] != FrameKind.INPUT:
                problems.append(f"malformed audio frame (§8.1): {frame.describe()}")
            continue
        decoded = decode_client(frame.data)
        if isinstance(decoded, Invalid):
            problems.append(f"{decoded.code}: {decoded.reason}: {frame.describe()}")
        else:
            problems += _integer_problems(frame)
    if problems:
        raise h.fail(f"{len(problems)} invalid frame(s); first: {problems[0]}")


@check("§3.1, §9.1", "MUST")
async def check_version_2_not_acted(h: ClientHarness) -> None:
    """A message whose v is not 1 is not acted on"""
    conn = await h.open()
    session = conn.session
    assert session is not None
    versions: dict[str, dict[str, object]] = {"v 2": {"v": 2}, "no v": {}}
    lost: dict[str, str] = {}
    for label, v in versions.items():
        members = conn.call_message(TOOL_RECORD, {"probe": label})
        seq = session.last_seq + 1
        text = text_of({**v, "seq": seq, "type": "tool.call", **members})
        session.sent.append((seq, text))  # the valid call after them takes the next seq
        await conn.send_raw(text)
        lost[label] = str(members["callId"])
    good = await conn.tool_call(TOOL_RECORD, {"probe": "v 1"})
    await h.require_result(good)
    await asyncio.sleep(0.3)
    for label, call_id in lost.items():
        h.require_never_run(call_id, f"a tool.call with {label}: UNSUPPORTED_VERSION, §3.1")
        if h.results(call_id):
            raise h.fail(f"the client answered the tool.call with {label}: it acted on it (§3.1)")


@check("§3.4", "MUST")
async def check_hello_capabilities_registered(h: ClientHarness) -> None:
    """Only registered or x- capability tokens are offered"""
    await h.start(capabilities=["tool-stream-v1"])
    conn = await h.accept()
    await h.handshake(conn)
    await asyncio.sleep(0.2)
    await conn.drop()  # the resuming hello is judged too
    await h.reconnect()
    for frame in h.from_client(types=("hello",)):
        offered = (frame.message or {}).get("capabilities") or []
        bad = [
            c
            for c in offered
            if not isinstance(c, str) or (c not in registry() and not c.startswith("x-"))
        ]
        if bad:
            raise h.fail(
                f"hello offers {bad}: neither registered (capabilities.json) nor x- (§3.4)"
            )


@check("§4.1", "MUST")
async def check_seq_numbering(h: ClientHarness) -> None:
    """Transient messages have seq 0; sequenced ones count 1, 2, 3, ..."""
    say = h.say_lines(h.new_id("seq"), 3)
    conn = await h.open(say=say)
    calls = [await conn.tool_call(TOOL_RECORD, {"n": n}) for n in range(3)]
    await h.until(lambda: all(h.results(c) for c in calls), PROMPT)
    await asyncio.sleep(0.3)
    expected = 1
    for frame in h.from_client(conn=conn):
        kind = frame.type
        if kind in CLIENT_TRANSIENT and frame.seq != 0:
            raise h.fail(f"transient {kind} has seq {frame.seq}, not 0: {frame.describe()}")
        if kind in CLIENT_SEQUENCED:
            if frame.seq != expected:
                raise h.fail(
                    f"sequenced {kind} has seq {frame.seq}; the next seq of the session is "
                    f"{expected}: {frame.describe()}"
                )
            expected += 1
        elif kind is not None and kind not in CLIENT_TRANSIENT:
            raise h.fail(
                f"the client sent {kind!r}, which is not a client type (§2.3): {frame.describe()}"
            )
    if expected - 1 < len(say) + len(calls):
        raise h.fail(
            f"expected at least {len(say) + len(calls)} sequenced messages (the VRT_SAY lines "
            f"and the tool results), saw {expected - 1}"
        )


@check("§4.2", "SHOULD")
async def check_ack_bounded_delay(h: ClientHarness) -> None:
    """ack of everything handled within a bounded delay (1 s)"""
    conn = await h.open()
    sent_at = h.now()
    await conn.send_seq("turn.state", turnId="turn-1", epoch=1, state="thinking")
    await conn.send_seq("text", text="ack me", turnId="turn-1")
    last = await conn.send_seq("text", text="ack me too", turnId="turn-1")

    def acked() -> list[WireFrame]:
        return [
            f
            for f in h.from_client(conn=conn, types=("ack",))
            if (f.message or {}).get("upTo") == last
        ]

    if not await h.until(acked, 2.0):
        raise h.fail(
            f"no ack with upTo {last} (the last seq handled) within 2 s (RECOMMENDED 250 ms)"
        )
    delay = acked()[0].t - sent_at
    if delay > 1.0:
        raise h.fail(
            f"the ack with upTo {last} came {delay:.3f} s after the first unacknowledged "
            "message (bound: 1 s; RECOMMENDED 250 ms)"
        )


@check("§4.2", "MUST")
async def check_ack_not_beyond_received(h: ClientHarness) -> None:
    """ack.upTo never exceeds the highest seq received"""
    conn = await h.open()
    await conn.send_seq("turn.state", turnId="turn-1", epoch=1, state="thinking")
    await conn.send_seq("text", text="one", turnId="turn-1")
    session = conn.session
    assert session is not None
    await conn.send_raw(session.sent[0][1])  # a duplicate of seq 1
    await h.require_result(await conn.tool_call(TOOL_RECORD, {"n": 1}))
    await asyncio.sleep(0.5)
    acks = h.from_client(types=("ack",))
    if not acks:
        raise NotApplicable("the client sent no ack (a SHOULD, §4.2): no upTo to judge")
    for frame in acks:
        up_to = (frame.message or {}).get("upTo")
        highest = max((seq for t, seq in session.sent_at if t <= frame.t), default=0)
        if type(up_to) is not int or up_to > highest:
            raise h.fail(
                f"ack upTo {up_to!r} when the highest seq sent was {highest}: {frame.describe()}"
            )


@check("§4.3", "SHOULD")
async def check_duplicate_acked_again(h: ClientHarness) -> None:
    """A duplicate is acknowledged again"""
    conn = await h.open()
    await h.require_result(await conn.tool_call(TOOL_RECORD, {"dup": "ack"}))
    if not await h.until(lambda: h.from_client(conn=conn, types=("ack",)), 2.0):
        raise Skipped("the client sent no ack at all (judged by ack-bounded-delay)")
    await asyncio.sleep(0.3)
    before = len(h.from_client(conn=conn, types=("ack",)))
    session = conn.session
    assert session is not None
    await conn.send_raw(session.sent[0][1])
    if not await h.until(lambda: len(h.from_client(conn=conn, types=("ack",))) > before, 1.5):
        raise h.fail(
            "no ack within 1.5 s after a duplicate of seq 1 (§4.3: SHOULD acknowledge again)"
        )


@check("§4.3", "MUST")
async def check_dedupe_resent(h: ClientHarness) -> None:
    """A resent tool.call (same seq) is handled once"""
    conn = await h.open()
    call = await conn.tool_call(TOOL_RECORD, {"probe": "duplicate"})
    session = conn.session
    assert session is not None
    original = session.sent[-1][1]
    await conn.send_raw(original)  # while it may still run
    await h.require_result(call)
    await conn.send_raw(original)  # after it was answered
    await h.require_result(await conn.tool_call(TOOL_RECORD, {"probe": "after"}))
    await asyncio.sleep(0.3)
    if h.started(call) != 1:
        raise h.fail(
            f"the tool of call {call}, sent three times with the same seq, started "
            f"{h.started(call)} times, not once"
        )
    h.require_one_result(call)


@check("§4.3", "MUST")
async def check_dedupe_after_resume(h: ClientHarness) -> None:
    """A message resent after a resume (seq <= resumeFrom): not handled"""
    conn = await h.open()
    call = await conn.tool_call(TOOL_RECORD, {"probe": "before drop"})
    await h.require_result(call)
    await asyncio.sleep(0.3)
    await conn.drop()
    conn2, _ = await h.reconnect(resend=False)
    session = conn.session
    assert session is not None
    await conn2.send_raw(session.sent[0][1])  # seq 1 again, although the client has it
    await h.require_result(await conn2.tool_call(TOOL_RECORD, {"probe": "after resume"}))
    await asyncio.sleep(0.3)
    if h.started(call) != 1:
        raise h.fail(
            f"call {call} (seq 1), resent after the resume, started {h.started(call)} times"
        )
    h.require_one_result(call)


async def _pings_after_ready(h: ClientHarness, count: int) -> tuple[list[WireFrame], float]:
    """Start a client with VRT_PING_INTERVAL=1 and open a session; the pings it sends
    after ready (``count`` of them, if they come within ``ping_wait`` each), and when
    ready was sent. Skipped when none comes."""
    await h.start(ping_interval=1.0)
    conn = await h.accept()
    await h.handshake(conn)
    ready_at = h.now()

    def pings() -> list[WireFrame]:
        return [f for f in h.from_client(conn=conn, types=("ping",)) if f.t > ready_at]

    wait = h.options.ping_wait
    if not await h.until(pings, wait):
        raise Skipped(
            f"no ping within {wait:g} s of silence; the client may ignore VRT_PING_INTERVAL "
            "and use a longer interval (RECOMMENDED 15 s): rerun with a larger --ping-wait"
        )
    await h.until(lambda: len(pings()) >= count or conn.closed.is_set(), wait)
    return pings(), ready_at


@check("§4.4", "SHOULD", needs=("pings",))
async def check_ping_when_silent(h: ClientHarness) -> None:
    """ping after a silence (within --ping-wait; VRT_PING_INTERVAL=1)"""
    pings, _ = await _pings_after_ready(h, 1)
    if pings[0].seq != 0:
        raise h.fail(f"ping has seq {pings[0].seq}, not 0 (ping is transient, §4.1)")


@check("§4.4", "SHOULD", needs=("pings",))
async def check_dead_connection_resumed(h: ClientHarness) -> None:
    """A silent connection is treated as dead, closed and resumed"""
    h.auto_pong = False
    pings, ready_at = await _pings_after_ready(h, 2)
    conn = h.connections[0]
    # The interval: between two pings after ready when there are two; a client may
    # ping before ready (§4.4), so the time from ready to its first ping can be short.
    interval = pings[1].t - pings[0].t if len(pings) > 1 else pings[0].t - ready_at
    silent_since = max(f.t for f in h.wire if not f.from_client and f.conn == conn.number)
    limit = silent_since + 2.5 * max(interval, 0.2) + 2.0
    if not await h.until(conn.closed.is_set, max(0.0, limit - h.now())):
        raise h.fail(
            f"the suite sent nothing from {silent_since:.2f} s on (2.5 ping intervals of "
            f"~{interval:.2f} s, plus 2 s, passed) and the client kept the connection"
        )
    conn2 = await h.maybe_accept(4.0)
    if conn2 is None:
        raise h.fail("the client closed the silent connection but did not resume")
    hello = await h.handshake(conn2)
    session = conn.session
    assert session is not None
    if hello.get("sessionId") != session.id:
        raise h.fail("after closing the silent connection the client did not resume its session")
