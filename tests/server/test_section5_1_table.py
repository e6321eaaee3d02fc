"""§5.1 "Server behaviour per connection": one test per row of the table, against a
live server over a raw WebSocket. Test names follow the rows: ``test_<state>__<input>``.
"""

from __future__ import annotations

from typing import Any, Final

import pytest

from support import (
    Connect,
    GateAuthenticator,
    OpenSession,
    RawClient,
    RunningServer,
    StartServer,
    chunks,
    eventually,
    is_idle,
    is_state,
    speech,
)
from vrt.agents.base import SessionInfo
from vrt.agents.scripted import ScriptedAgent
from vrt.protocol.codec import Decoded
from vrt.protocol.messages import Error, Pong, Ready, Transcript, TurnState
from vrt.protocol.server import ServerConfig
from vrt.server.auth import TokenAuthenticator


async def expect_error(client: RawClient, code: str, timeout: float = 2.0) -> Decoded[Any]:
    """The next ``error``; asserts its code."""
    found = await client.expect(Error, timeout)
    assert isinstance(found.message, Error)
    assert found.message.code == code, client.format_log()
    return found


async def burst(client: RawClient, n: int) -> list[int]:
    """``burst n``: returns the server seqs of its reply (thinking, n chunks, idle)."""
    await client.text(f"burst {n}")
    items = await client.until(is_idle)
    return [item.seq for item in items if isinstance(item, Decoded) and item.seq]


# --- awaiting hello -------------------------------------------------------------------


async def test_awaiting_hello__hello__authenticates_then_opening(
    start: StartServer, connect: Connect
) -> None:
    """| awaiting hello | hello | authenticate (§5.3) | opening |: the server asks the
    authenticator and answers only once it has decided."""
    gate = GateAuthenticator()
    server = await start(authenticator=gate)
    client = await connect(server.url)
    await client.send_hello(auth="token")
    await gate.wait_called()
    assert await client.barrier() == []  # opening: no ready before authentication ends
    gate.open()
    ready = await client.expect_message(Ready)
    assert not isinstance(ready.resumed_from, int)
    assert gate.calls == 1


async def test_awaiting_hello__ping__pong(server: RunningServer, connect: Connect) -> None:
    """| awaiting hello | ping | pong | awaiting hello |"""
    client = await connect(server.url)
    await client.ping()
    pong = await client.recv()
    assert isinstance(pong, Decoded)
    assert isinstance(pong.message, Pong)
    assert pong.seq == 0
    await client.hello()  # still awaiting hello


OTHER_VALID: Final[dict[str, dict[str, Any]]] = {
    "text": {"v": 1, "seq": 1, "type": "text", "text": "echo early"},
    "interrupt": {"v": 1, "seq": 1, "type": "interrupt", "epoch": 0, "reason": "user"},
    "playback": {"v": 1, "seq": 1, "type": "playback", "itemId": "i", "playedMs": 0},
    "tool.result": {
        "v": 1,
        "seq": 1,
        "type": "tool.result",
        "callId": "c",
        "epoch": 0,
        "ok": True,
        "output": None,
    },
    "context": {"v": 1, "seq": 1, "type": "context", "context": {"early": True}},
    "ack": {"v": 1, "seq": 0, "type": "ack", "upTo": 0},
}


@pytest.mark.parametrize("name", sorted(OTHER_VALID))
async def test_awaiting_hello__other_valid_message__no_session(
    server: RunningServer, connect: Connect, name: str
) -> None:
    """| awaiting hello | any other valid control message | error NO_SESSION (not
    recoverable, seq 0) | awaiting hello |: the connection stays open and a hello
    afterwards opens a session that never saw the early message."""
    client = await connect(server.url)
    await client.send(OTHER_VALID[name])
    error = await expect_error(client, "NO_SESSION")
    assert error.seq == 0
    assert error.message.recoverable is False
    ready = await client.hello(context=None)
    assert not isinstance(ready.resumed_from, int)
    session = server.session(ready.session_id)
    assert session.incoming.last_seq == 0  # the early message was not handled
    await client.send_sequenced("context", context={"n": 1})
    await client.text("context?")
    assert chunks(await client.until(is_idle)) == ['{"n":1}']


async def test_awaiting_hello__input_audio__ignored(
    server: RunningServer, connect: Connect
) -> None:
    """| awaiting hello | valid input audio frame | ignore | awaiting hello |"""
    client = await connect(server.url)
    for frame in speech(300):
        await client.send(frame)
    assert await client.barrier() == []  # no error, no reply
    await client.hello()
    await client.text("echo after")
    items = await client.until(is_idle)
    assert chunks(items) == ["after"]  # the early audio started no listening turn
    assert not any(is_state(item, "listening") for item in items)


# --- opening ----------------------------------------------------------------------------


async def test_opening__control_message__kept_and_handled_after_ready(
    server: RunningServer, connect: Connect
) -> None:
    """| opening | control message other than hello or ping | keep it, in order; handle it
    after ready | opening |: hello and text sent back to back get ready, then the reply."""
    client = await connect(server.url)
    await client.send_hello()
    await client.text("echo right away")
    first = await client.recv()
    assert isinstance(first, Decoded)
    assert isinstance(first.message, Ready), client.format_log()
    assert chunks(await client.until(is_idle)) == ["right", " away"]


async def test_opening__control_messages__kept_in_order_while_held(
    start: StartServer, connect: Connect
) -> None:
    """| opening | control message other than hello or ping | keep it, in order; handle it
    after ready |: messages sent while authentication is pending are handled after
    ``ready``, in order; a ping is answered at once (§4.4)."""
    gate = GateAuthenticator()
    server = await start(authenticator=gate)
    client = await connect(server.url)
    await client.send_hello()
    await gate.wait_called()
    await client.send_sequenced("context", context={"n": 1})
    await client.send_sequenced("context", context={"n": 2})
    await client.text("context?")
    assert await client.barrier() == []  # pong, nothing else: still opening
    gate.open()
    ready = await client.expect_message(Ready)
    assert client.skipped == []
    assert chunks(await client.until(is_idle)) == ['{"n":2}']
    assert server.session(ready.session_id).incoming.last_seq == 3
    assert server.agents[0].contexts == [{"n": 1}, {"n": 2}]


async def test_opening__hello__duplicate_hello(start: StartServer, connect: Connect) -> None:
    """| opening | hello | error DUPLICATE_HELLO (recoverable) | opening |: seq 0, since no
    session is bound yet (§4.1); the first hello still opens its session."""
    gate = GateAuthenticator()
    server = await start(authenticator=gate)
    client = await connect(server.url)
    await client.send_hello()
    await gate.wait_called()
    await client.send_hello()
    error = await expect_error(client, "DUPLICATE_HELLO")
    assert error.seq == 0
    assert error.message.recoverable is True
    gate.open()
    await client.expect_message(Ready)
    assert gate.calls == 1
    assert server.server.session_count == 1


@pytest.mark.parametrize("auth", [None, "wrong", {"token": "secret"}])
async def test_opening__authentication_refused__unauthorized_4401(
    start: StartServer, connect: Connect, auth: Any
) -> None:
    """| opening | authentication refused | error UNAUTHORIZED (seq 0), close 4401 | closed |"""
    server = await start(authenticator=TokenAuthenticator([("alice", "secret")]))
    client = await connect(server.url)
    await client.send_hello(**({} if auth is None else {"auth": auth}))
    error = await expect_error(client, "UNAUTHORIZED")
    assert error.seq == 0
    assert error.message.recoverable is False
    code, _ = await client.closed()
    assert code == 4401
    assert server.server.session_count == 0


async def test_opening__resume_of_unknown_expired_or_foreign_session__resume_failed_4404(
    start: StartServer, connect: Connect, open_session: OpenSession
) -> None:
    """| opening | resume of an unknown, expired or foreign session | error RESUME_FAILED
    (seq 0), close 4404 | closed |; §5.3: a foreign resume "MUST fail exactly like a
    resume of an unknown session": the three error frames are byte-identical."""
    server = await start(
        authenticator=TokenAuthenticator([("alice", "a-token"), ("bob", "b-token")]),
        resume_window=0.05,
    )
    frames: dict[str, bytes] = {}

    async def refused(case: str, **hello: Any) -> None:
        client = await connect(server.url)
        await client.send_hello(auth="b-token", **hello)
        error = await expect_error(client, "RESUME_FAILED")
        assert error.seq == 0
        assert error.message.recoverable is False
        code, _ = await client.closed()
        assert code == 4404
        frames[case] = next(
            f.data for f in client.log if f.direction == "<" and b"RESUME_FAILED" in f.data
        )

    # unknown
    await refused("unknown", sessionId="s_does-not-exist")
    # foreign: alice's session, connected, resumed by bob
    alice, ready = await open_session(server.url, auth="a-token")
    await refused("foreign", sessionId=ready.session_id)
    assert server.session(ready.session_id).status == "connected"
    # expired: bob's own session, past its resume window
    bob, bob_ready = await open_session(server.url, auth="b-token")
    await bob.close()
    await eventually(lambda: server.server.session(bob_ready.session_id) is None, what="expiry")
    await refused("expired", sessionId=bob_ready.session_id)
    assert frames["unknown"] == frames["foreign"] == frames["expired"], frames
    del alice


async def test_opening__session_cannot_start__start_failed_1011(
    start: StartServer, connect: Connect
) -> None:
    """| opening | the session cannot start | error START_FAILED, close 1011 | closed |:
    the agent factory raises (§9.2: START_FAILED is not recoverable; no session is
    bound, so seq 0)."""

    def broken(info: SessionInfo) -> ScriptedAgent:
        raise RuntimeError("no model today")

    server = await start(agent_factory=broken)
    client = await connect(server.url)
    await client.send_hello()
    error = await expect_error(client, "START_FAILED")
    assert error.seq == 0
    assert error.message.recoverable is False
    code, _ = await client.closed()
    assert code == 1011
    assert server.server.session_count == 0


async def test_opening__session_cannot_start_async_factory__start_failed_1011(
    start: StartServer, connect: Connect
) -> None:
    """| opening | the session cannot start | error START_FAILED, close 1011 |, with an
    asynchronous agent factory."""

    async def broken(info: SessionInfo) -> ScriptedAgent:
        raise RuntimeError("no model today")

    server = await start(agent_factory=broken)
    client = await connect(server.url)
    await client.send_hello()
    await expect_error(client, "START_FAILED")
    code, _ = await client.closed()
    assert code == 1011


async def test_opening__session_resumed__ready_resend_then_kept_messages(
    start: StartServer, connect: Connect, open_session: OpenSession
) -> None:
    """| opening | session opened or resumed | ready, resend (§5.4), handle kept messages
    | open |: in that order."""
    gate = GateAuthenticator()
    gate.open()
    server = await start(authenticator=gate)
    first, ready = await open_session(server.url)
    seqs = await burst(first, 3)  # thinking, 3 chunks, idle
    assert seqs == [1, 2, 3, 4, 5]
    first.abort()
    await eventually(lambda: server.session(ready.session_id).status == "parked")

    gate.hold()
    second = await connect(server.url)
    second.next_seq = 2
    await second.send_hello(sessionId=ready.session_id, resumeFrom=2)
    await gate.wait_called()
    await second.text("echo kept")
    gate.open()
    resumed = await second.expect_message(Ready)
    assert second.skipped == []
    assert resumed.resumed_from == 1
    items = await second.until(lambda item: is_idle(item) and item.seq > 5)
    resent = [item.seq for item in items[:3] if isinstance(item, Decoded)]
    assert resent == [3, 4, 5]
    assert second.raw[3] == first.raw[3]
    assert chunks(items[3:]) == ["kept"], second.format_log()


# --- open -----------------------------------------------------------------------------


async def test_open__hello__duplicate_hello_sequenced(
    server: RunningServer, open_session: OpenSession
) -> None:
    """| open | hello | error DUPLICATE_HELLO (recoverable) | open |; §4.1: once a session
    is bound its errors are sequenced (seq != 0, the next server seq)."""
    client, _ = await open_session(server.url)
    seqs = await burst(client, 1)
    await client.send_hello()
    error = await expect_error(client, "DUPLICATE_HELLO")
    assert error.message.recoverable is True
    assert error.seq == seqs[-1] + 1
    await client.text("echo on")
    assert chunks(await client.until(is_idle)) == ["on"]
    assert server.server.session_count == 1


async def test_open__sequenced_message__deduplicated_handled_acknowledged(
    server: RunningServer, open_session: OpenSession
) -> None:
    """| open | sequenced message | deduplicate (§4.3), handle, acknowledge | open |"""
    client, ready = await open_session(server.url)
    await client.text("echo one")
    assert chunks(await client.until(is_idle)) == ["one"]
    ack = await client.expect("ack")
    assert ack.message.up_to == 1  # type: ignore[union-attr]
    await client.send({"v": 1, "seq": 1, "type": "text", "text": "echo again"})
    again = await client.expect("ack")  # §4.3: a duplicate SHOULD be acknowledged again
    assert again.message.up_to == 1  # type: ignore[union-attr]
    client.next_seq = 2
    await client.text("echo two")
    items = await client.until(is_idle)
    assert chunks(items) == ["two"]  # "echo again" was never handled
    assert [m.message.state for m in client.sequenced if isinstance(m.message, TurnState)].count(
        "thinking"
    ) == 2
    assert server.session(ready.session_id).incoming.last_seq == 2


async def test_open__input_audio__passed_to_the_session(
    server: RunningServer, open_session: OpenSession
) -> None:
    """| open | input audio frame | pass to the session | open |: the scripted agent's VAD
    hears 300 ms of tone and answers with a user transcript."""
    client, _ = await open_session(server.url)
    for frame in speech(300):
        await client.send(frame)
    transcript = await client.expect_message(Transcript)
    assert transcript.role == "user"
    assert transcript.text == "(speech 300 ms)"
    assert any(is_state(item, "listening") for item in client.skipped)
    await client.until(is_idle)


# --- any --------------------------------------------------------------------------------

INVALID: Final[dict[str, tuple[dict[str, Any] | str | bytes, str]]] = {
    "not JSON": ("{", "MALFORMED"),
    "not an object": ("[]", "MALFORMED"),
    "v 2": ({"v": 2, "seq": 0, "type": "ping"}, "UNSUPPORTED_VERSION"),
    "v absent": ({"seq": 0, "type": "ping"}, "UNSUPPORTED_VERSION"),
    "pong from a client": ({"v": 1, "seq": 0, "type": "pong"}, "UNKNOWN_TYPE"),
    "type __proto__": ({"v": 1, "seq": 0, "type": "__proto__"}, "UNKNOWN_TYPE"),
    "text with seq 0": ({"v": 1, "seq": 0, "type": "text", "text": "x"}, "INVALID_FIELD"),
    "ping with seq 5": ({"v": 1, "seq": 5, "type": "ping"}, "INVALID_FIELD"),
    "hello with a bad resumeFrom": (
        {"v": 1, "seq": 0, "type": "hello", "sessionId": "s", "resumeFrom": -1},
        "INVALID_FIELD",
    ),
    "audio shorter than 5 bytes": (b"\x01\x00\x00", "MALFORMED"),
    "output audio from a client": (b"\x02\x00\x00\x00\x00\x00\x00", "MALFORMED"),
    "audio kind 7": (b"\x07\x00\x00\x00\x00\x00\x00", "MALFORMED"),
}


@pytest.mark.parametrize("state", ["awaiting hello", "opening", "open"])
@pytest.mark.parametrize("case", list(INVALID))
async def test_any__invalid_message_or_frame__its_code_recoverable(
    start: StartServer, connect: Connect, state: str, case: str
) -> None:
    """| any | invalid control message or audio frame | error with its code (§9.1),
    recoverable | unchanged |: seq 0 before a session is bound, sequenced after (§4.1),
    and the connection goes on in the same state."""
    gate = GateAuthenticator()
    if state != "opening":
        gate.open()
    server = await start(authenticator=gate)
    client = await connect(server.url)
    last = 0
    if state == "opening":
        await client.send_hello()
        await gate.wait_called()
    elif state == "open":
        await client.hello()
        last = (await burst(client, 1))[-1]
    message, code = INVALID[case]
    await client.send(message)
    error = await expect_error(client, code)
    assert error.message.recoverable is True
    assert error.seq == (last + 1 if state == "open" else 0)
    # unchanged: the connection is open and in the same state
    assert await client.barrier() == []
    if state == "awaiting hello":
        await client.hello()
    elif state == "opening":
        gate.open()
        await client.expect_message(Ready)
    await client.text("echo still")
    assert chunks(await client.until(is_idle)) == ["still"]


@pytest.mark.parametrize("state", ["awaiting hello", "opening", "open"])
async def test_any__heartbeat_timeout__close_4408(
    start: StartServer, connect: Connect, open_session: OpenSession, state: str
) -> None:
    """| any | heartbeat timeout (§4.4) | close 4408 | closed |; §4.4: "The session stays
    resumable"."""
    gate = GateAuthenticator()
    if state != "opening":
        gate.open()
    server = await start(authenticator=gate, config=ServerConfig(heartbeat_timeout=0.3))
    client = await connect(server.url)
    if state == "opening":
        await client.send_hello()
        await gate.wait_called()
    elif state == "open":
        ready = await client.hello()
        await burst(client, 2)
    code, _ = await client.closed(timeout=3.0)
    assert code == 4408
    if state == "open":
        session = server.session(ready.session_id)
        await eventually(lambda: session.status == "parked")
        again, resumed = await open_session(
            server.url, sessionId=ready.session_id, resumeFrom=client.last_seq
        )
        assert resumed.resumed_from == 1
        again.next_seq = 2
        await again.text("echo back")
        assert chunks(await again.until(is_idle)) == ["back"]
    else:
        gate.open()
        assert server.server.session_count == 0


@pytest.mark.parametrize("how", ["close frame", "abort"])
async def test_open__connection_closed__session_parked(
    server: RunningServer, open_session: OpenSession, how: str
) -> None:
    """| open | connection closed | park the session | closed |: the session survives
    the connection and a resume gets what the client missed (§5.4)."""
    client, ready = await open_session(server.url)
    seqs = await burst(client, 2)
    session = server.session(ready.session_id)
    if how == "abort":
        client.abort()
    else:
        await client.close()
    await eventually(lambda: session.status == "parked", what="parked")
    again, resumed = await open_session(server.url, sessionId=ready.session_id, resumeFrom=1)
    assert resumed.resumed_from == 1
    assert resumed.session_id == ready.session_id
    items = await again.until(is_idle)
    assert [item.seq for item in items if isinstance(item, Decoded)] == seqs[1:]
    assert session.status == "connected"
