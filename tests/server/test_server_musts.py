"""The server's MUSTs and SHOULDs of vRT v1.3 §§2-11 (the §5.1 table has its own
file), against a live server and the scripted agent, over a raw WebSocket.

One class per section. Every docstring quotes the requirement it tests.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Final, TypeVar

import pytest

from support import (
    Connect,
    GateAuthenticator,
    Item,
    OpenSession,
    RawClient,
    RunningServer,
    StartServer,
    audio,
    chunks,
    eventually,
    input_audio,
    is_idle,
    is_state,
    matches,
    messages,
    of_type,
    speech,
)
from vrt.agents.base import MAX_QUEUED_AUDIO, AgentSession, SessionInfo
from vrt.agents.scripted import SCRIPTED_FORMATS, ScriptedAgent
from vrt.audio import silence, tone
from vrt.protocol.codec import Decoded, Limits
from vrt.protocol.frames import AudioFrame, FrameKind
from vrt.protocol.messages import (
    PCM16_24K,
    Ack,
    AudioStart,
    Error,
    Format,
    Interrupted,
    Message,
    Pong,
    Ready,
    ToolCall,
    ToolCallDelta,
    ToolStream,
    Transcript,
    TurnState,
)
from vrt.protocol.server import AudioReceived, ServerConfig, UserTextReceived
from vrt.server.auth import TokenAuthenticator

M = TypeVar("M", bound=Message)

TOOLS: Final = [{"name": "add", "description": "adds numbers", "parameters": {"type": "object"}}]
STREAM: Final = ["tool-stream-v1"]
TERMINAL: Final = frozenset({"settled", "cancelled", "failed"})


# --- helpers --------------------------------------------------------------------------


async def reply(client: RawClient, text: str, timeout: float = 2.0) -> list[Item]:
    """Send user ``text`` and return everything up to its turn's ``idle``."""
    await client.text(text)
    return await client.until(is_idle, timeout)


async def expect_error(client: RawClient, code: str, timeout: float = 2.0) -> Decoded[Any]:
    found = await client.expect(Error, timeout)
    assert isinstance(found.message, Error)
    assert found.message.code == code, client.format_log()
    return found


async def answer(
    client: RawClient,
    call: ToolCall,
    output: Any = None,
    *,
    code: str | None = None,
    call_id: str | None = None,
) -> int:
    """``tool.result`` for ``call``: ok with ``output``, or failed with ``code``."""
    members: dict[str, Any] = {"callId": call_id or call.call_id, "epoch": call.epoch}
    if code is None:
        members.update(ok=True, output=output)
    else:
        members.update(ok=False, code=code, message=None)
    return await client.send_sequenced("tool.result", **members)


def seqs(items: list[Item]) -> list[int]:
    """The seqs of the sequenced messages among ``items``."""
    return [item.seq for item in items if isinstance(item, Decoded) and item.seq]


def turn_states(items: list[Item]) -> list[TurnState]:
    return of_type(items, TurnState)


def received(client: RawClient, cls: type[M]) -> list[M]:
    """Every sequenced message of class ``cls`` the client received, in order."""
    return [d.message for d in client.sequenced if isinstance(d.message, cls)]


async def frames(client: RawClient, count: int, timeout: float = 2.0) -> list[Item]:
    """Everything up to and including the ``count``-th next audio frame."""
    seen = 0

    def enough(item: Item) -> bool:
        nonlocal seen
        seen += isinstance(item, AudioFrame)
        return seen >= count

    return await client.until(enough, timeout)


def assert_announced(items: list[Item]) -> None:
    """§8.3: on a connection, output audio only follows an ``audio.start``."""
    announced = False
    for item in items:
        announced = announced or matches(item, AudioStart)
        assert announced or not isinstance(item, AudioFrame), "audio before audio.start"


async def pong(client: RawClient) -> None:
    """``ping`` is answered by ``pong`` with seq 0 (§4.4), before anything else."""
    await client.ping()
    item = await client.recv()
    assert isinstance(item, Decoded), client.format_log()
    assert isinstance(item.message, Pong), client.format_log()
    assert item.seq == 0


def check_phases(streams: list[ToolStream]) -> dict[str, list[str]]:
    """§7.5: for every call, ``start`` first; deltas before ``arguments-complete`` (at
    most once); ``progress`` after it and before the terminal phase; exactly one
    terminal phase, last; one name, turn and epoch per call. Returns the phases."""
    by_call: dict[str, list[ToolStream]] = {}
    for message in streams:
        by_call.setdefault(message.call_id, []).append(message)
    phases: dict[str, list[str]] = {}
    for call_id, stream in by_call.items():
        order: list[str] = [m.phase for m in stream]
        phases[call_id] = order
        assert order[0] == "start", order
        assert order.count("start") == 1, order
        assert [p for p in order if p in TERMINAL] == [order[-1]], order
        assert order.count("arguments-complete") <= 1, order
        if "arguments-complete" in order:
            complete = order.index("arguments-complete")
            assert "arguments-delta" not in order[complete:], order
            assert "progress" not in order[:complete], order
            assert order[-1] != "failed", order
        else:
            assert "progress" not in order, order
        assert len({(m.name, m.turn_id, m.epoch) for m in stream}) == 1, stream
    return phases


# --- §2 ---------------------------------------------------------------------------------


class TestSection2_2ControlMessages:
    async def test_unknown_members_ignored_at_any_depth(
        self, server: RunningServer, connect: Connect
    ) -> None:
        """§2.2: "Receivers MUST ignore members they do not recognise, at any depth"."""
        client = await connect(server.url)
        await client.send(
            {
                "v": 1,
                "seq": 0,
                "type": "hello",
                "tools": [{"name": "add", "x-color": "blue", "parameters": {"type": "object"}}],
                "output": {"encoding": "pcm16", "sampleRate": 24000, "x-hint": [1, {"a": None}]},
                "futureMember": {"deep": [{"deeper": True}]},
            }
        )
        await client.expect(Ready)
        await client.send(
            {"v": 1, "seq": 1, "type": "text", "text": "echo fine", "extra": {"x": [1]}}
        )
        assert chunks(await client.until(is_idle)) == ["fine"]

    async def test_integers_with_fraction_or_exponent_are_read_as_integers(
        self, server: RunningServer, open_session: OpenSession
    ) -> None:
        """messages.md on §2.2: "a receiver accepts any JSON number whose value is an
        integer in range (1, 1.0 and 1e0 are the same number)"."""
        client, _ = await open_session(server.url)
        await client.send('{"v":1.0,"seq":1e0,"type":"text","text":"echo number"}')
        assert chunks(await client.until(is_idle)) == ["number"]

    async def test_duplicate_member_names_are_invalid_field_and_not_acted_on(
        self, server: RunningServer, open_session: OpenSession
    ) -> None:
        """§2.2: "Senders MUST NOT emit two members with the same name in one object";
        messages.md: such a message is INVALID_FIELD, and (§9.1) "A receiver MUST NOT
        act on an invalid message"."""
        client, ready = await open_session(server.url)
        await client.send('{"v":1,"seq":1,"type":"text","text":"echo a","text":"echo b"}')
        error = await expect_error(client, "INVALID_FIELD")
        assert error.message.recoverable is True
        assert server.session(ready.session_id).incoming.last_seq == 0
        assert chunks(await reply(client, "echo c")) == ["c"]


# --- §3 ---------------------------------------------------------------------------------


class TestSection3_1Version:
    @pytest.mark.parametrize("version", [2, 0, "1", None, 1.5])
    async def test_hello_with_another_version_is_refused_without_a_session(
        self, server: RunningServer, connect: Connect, version: Any
    ) -> None:
        """§3.1: "A receiver MUST reject a control message whose v is absent or is not
        exactly the number 1 with UNSUPPORTED_VERSION. A server that rejects a hello this
        way MUST NOT open a session for it. The error itself carries the server's own v"."""
        client = await connect(server.url)
        hello: dict[str, Any] = {"seq": 0, "type": "hello"}
        if version is not None:
            hello["v"] = version
        await client.send(hello)
        error = await expect_error(client, "UNSUPPORTED_VERSION")
        assert error.seq == 0
        (raw,) = [f.data for f in client.log if f.direction == "<" and b"UNSUPPORTED" in f.data]
        assert json.loads(raw)["v"] == 1
        assert server.server.session_count == 0
        assert await client.barrier() == []
        await client.hello()  # still awaiting hello
        assert server.server.session_count == 1


class TestSection3_3Capabilities:
    async def test_in_effect_is_offered_and_supported_each_once(
        self, server: RunningServer, open_session: OpenSession
    ) -> None:
        """§3.3: "A server opening a new session computes the capabilities in effect: the
        offered tokens it supports, each once"; "Receivers MUST ignore capability tokens
        they do not recognise"."""
        offered = [
            "x-acme.beta",
            "tool-stream-v1",
            "future-thing-v9",
            "global-tool-ids-v1",
            "tool-stream-v1",
        ]
        _, ready = await open_session(server.url, capabilities=offered)
        assert isinstance(ready.capabilities, tuple)
        assert sorted(ready.capabilities) == ["global-tool-ids-v1", "tool-stream-v1"]

    @pytest.mark.parametrize("offered", [None, [], ["x-acme"]])
    async def test_nothing_supported_offered_means_none(
        self, server: RunningServer, open_session: OpenSession, offered: list[str] | None
    ) -> None:
        """§3.3: "hello.capabilities. Absent means none"; "ready.capabilities; absent
        means none"."""
        hello: dict[str, Any] = {} if offered is None else {"capabilities": offered}
        _, ready = await open_session(server.url, **hello)
        assert not isinstance(ready.capabilities, tuple) or ready.capabilities == ()

    async def test_only_what_the_server_supports(
        self, start: StartServer, open_session: OpenSession
    ) -> None:
        """§3.3: the capabilities in effect are "the offered tokens it supports"."""
        server = await start(config=ServerConfig(capabilities=("global-tool-ids-v1",)))
        _, ready = await open_session(
            server.url, capabilities=["tool-stream-v1", "global-tool-ids-v1"]
        )
        assert ready.capabilities == ("global-tool-ids-v1",)

    @pytest.mark.parametrize(
        ("first", "then"), [([], ["tool-stream-v1"]), (["tool-stream-v1"], [])]
    )
    async def test_a_resuming_hellos_capabilities_are_ignored(
        self,
        server: RunningServer,
        open_session: OpenSession,
        first: list[str],
        then: list[str],
    ) -> None:
        """§3.3: "Capabilities are fixed for the session's lifetime. A resumed ready
        repeats the session's set; capabilities offered in a resuming hello are
        ignored"; §3.3: "A peer MUST NOT send any message [...] that a capability gates
        unless that capability is in effect"."""
        client, ready = await open_session(server.url, capabilities=first, tools=TOOLS)
        await client.close()
        again, resumed = await open_session(
            server.url, sessionId=ready.session_id, capabilities=then, tools=TOOLS
        )
        assert tuple(resumed.capabilities or ()) == tuple(ready.capabilities or ())
        await again.text('call add {"a":1}')
        call = await again.expect_message(ToolCall)
        streamed = of_type(again.skipped, ToolStream)
        if first:
            assert streamed
            assert not of_type(again.skipped, ToolCallDelta)
        else:
            assert not streamed
            assert of_type(again.skipped, ToolCallDelta)
        await answer(again, call, 2)
        await again.until(is_idle)


# --- §4 ---------------------------------------------------------------------------------


class TestSection4_1Sequence:
    async def test_sequenced_from_1_consecutive_across_resumes_transient_0(
        self, server: RunningServer, open_session: OpenSession
    ) -> None:
        """§4.1: "The first sequenced message a side sends in a session has seq 1; each
        later one has the previous value plus one. The counter belongs to the session,
        not the connection, and continues across resumes"; transient messages (ready,
        audio.start, ack, pong) have seq 0."""
        client, ready = await open_session(server.url)
        items = await reply(client, "echo one two")
        items += await reply(client, "burst 3")
        items += await client.barrier()
        assert seqs(items) == list(range(1, len(seqs(items)) + 1))
        transient = [
            item
            for item in items
            if isinstance(item, Decoded) and isinstance(item.message, (AudioStart, Ack, Pong))
        ]
        assert transient
        assert all(item.seq == 0 for item in transient)
        last = client.last_seq
        await client.close()
        again, _ = await open_session(server.url, sessionId=ready.session_id, resumeFrom=last)
        again.next_seq = client.next_seq
        assert seqs(await reply(again, "burst 1")) == [last + 1, last + 2, last + 3]


class TestSection4_2Acks:
    async def test_ack_up_to_the_last_handled(
        self, server: RunningServer, open_session: OpenSession
    ) -> None:
        """§4.2: "A receiver SHOULD send ack { upTo: lastSeq } within a bounded delay
        after handling sequenced messages"; "upTo MUST NOT exceed the highest seq
        received"."""
        client, _ = await open_session(server.url)
        for n in range(1, 6):
            await client.send_sequenced("context", context={"n": n})
        acks: list[int] = []
        while not acks or acks[-1] < 5:
            acks.append((await client.expect_message(Ack)).up_to)
        assert acks == sorted(acks)
        assert acks[-1] == 5

    async def test_ack_after_many_messages(
        self, server: RunningServer, open_session: OpenSession
    ) -> None:
        """§4.2: acknowledge "no later than 250 ms after the first unacknowledged
        message, or after every 32 messages"; upTo never exceeds what was received."""
        client, _ = await open_session(server.url)
        for n in range(1, 41):
            await client.send_sequenced("context", context=n)
        acks: list[int] = []
        while not acks or acks[-1] < 40:
            acks.append((await client.expect_message(Ack)).up_to)
        assert all(0 < up_to <= 40 for up_to in acks)

    async def test_an_ack_beyond_the_last_seq_acknowledges_everything(
        self, server: RunningServer, open_session: OpenSession
    ) -> None:
        """§4.2: "An ack with a value at or beyond the sender's last seq acknowledges
        everything sent" (messages.md: not an error)."""
        client, ready = await open_session(server.url)
        await reply(client, "burst 2")
        await client.ack(1000)
        assert not of_type(await client.barrier(), Error)
        assert server.session(ready.session_id).outgoing.unacked == 0
        assert chunks(await reply(client, "echo ok")) == ["ok"]


class TestSection4_3Dedupe:
    async def test_a_duplicate_is_not_handled_again_but_acknowledged_again(
        self, server: RunningServer, open_session: OpenSession
    ) -> None:
        """§4.3: "if seq <= lastSeq, it is a duplicate: the receiver MUST NOT handle it
        again and SHOULD acknowledge again"."""
        client, ready = await open_session(server.url)
        await client.send_sequenced("context", context={"n": 1})
        assert (await client.expect_message(Ack)).up_to == 1
        await client.send({"v": 1, "seq": 1, "type": "context", "context": {"n": "dup"}})
        assert (await client.expect_message(Ack)).up_to == 1
        assert chunks(await reply(client, "context?")) == ['{"n":1}']
        assert server.agents[0].contexts == [{"n": 1}]
        assert server.session(ready.session_id).incoming.last_seq == 2

    async def test_a_gap_does_not_crash(
        self, server: RunningServer, open_session: OpenSession
    ) -> None:
        """§4.3: "A receiver MUST NOT crash on a gap; this version defines no recovery"."""
        client, ready = await open_session(server.url)
        await reply(client, "echo one")
        client.next_seq = 5
        assert chunks(await reply(client, "echo five")) == ["five"]
        assert chunks(await reply(client, "echo six")) == ["six"]
        assert server.session(ready.session_id).incoming.last_seq == 6
        assert server.session(ready.session_id).incoming.gaps == 1

    async def test_seq_0_messages_are_never_deduplicated(
        self, server: RunningServer, open_session: OpenSession
    ) -> None:
        """§4.3: "If seq is 0, handle it. Messages with seq 0 are never deduplicated"."""
        client, _ = await open_session(server.url)
        for _ in range(3):
            await client.ping()
        for _ in range(3):
            assert (await client.expect(Pong)).seq == 0
        await client.ack(0)
        await client.ack(0)
        assert not of_type(await client.barrier(), Error)

    async def test_errors_seq_0_before_a_session_then_sequenced_with_the_rest(
        self, server: RunningServer, connect: Connect
    ) -> None:
        """§4.1: "A server sends an error with seq 0 when no session is bound to the
        connection [...] Once a session is bound, its errors are sequenced like any other
        server message"."""
        client = await connect(server.url)
        await client.send("nonsense")
        before = await expect_error(client, "MALFORMED")
        assert before.seq == 0
        await client.hello()
        items = await reply(client, "echo a")
        await client.send("nonsense")
        items.append(await expect_error(client, "MALFORMED"))
        await client.text("error")
        items.append(await expect_error(client, "AGENT_ERROR"))
        items += await reply(client, "echo b")
        assert seqs(items) == list(range(1, len(seqs(items)) + 1))


class TestSection4_4Heartbeat:
    async def test_pong_in_every_state(self, start: StartServer, connect: Connect) -> None:
        """§4.4: "A server MUST answer every ping with pong, in any state"."""
        gate = GateAuthenticator()
        server = await start(authenticator=gate)
        client = await connect(server.url)
        await pong(client)  # awaiting hello
        await client.send("{")
        await expect_error(client, "MALFORMED")
        await pong(client)  # still awaiting hello, after an error
        await client.send_hello()
        await gate.wait_called()
        await pong(client)  # opening
        gate.open()
        await client.expect(Ready)
        await pong(client)  # open
        await client.text("speak 200")
        await client.expect(AudioStart)
        await client.ping()  # open, while a response streams
        assert (await client.expect(Pong)).seq == 0

    async def test_any_frame_keeps_the_connection_open(
        self, start: StartServer, open_session: OpenSession
    ) -> None:
        """§4.4: "A server MUST close a connection on which it has received no frame of
        any kind for its heartbeat timeout": frames, pings and WebSocket pings keep it
        open."""
        server = await start(config=ServerConfig(heartbeat_timeout=0.4))
        client, _ = await open_session(server.url)
        for n in range(12):
            if n % 3 == 0:
                await client.ping()
            elif n % 3 == 1:
                await client.ws.ping()
            else:
                await client.send_sequenced("context", context=n)
            await asyncio.sleep(0.05)
        assert client.close_info is None
        assert chunks(await reply(client, "echo alive")) == ["alive"]


# --- §5 ---------------------------------------------------------------------------------


class TestSection5_2Opening:
    async def test_session_ids_are_unique_and_new_sessions_have_no_resumed_from(
        self, server: RunningServer, open_session: OpenSession
    ) -> None:
        """§5.2: sessionId "MUST be unguessable"; "resumedFrom is present if and only if
        this ready resumes an existing session". (Ids are opaque: only uniqueness is
        checked.)"""
        ids = set()
        for _ in range(20):
            _, ready = await open_session(server.url)
            assert not isinstance(ready.resumed_from, int)
            ids.add(ready.session_id)
        assert len(ids) == 20

    async def test_tool_names_must_be_unique(self, server: RunningServer, connect: Connect) -> None:
        """§5.2: "Names MUST be unique within the list" (messages.md: INVALID_FIELD)."""
        client = await connect(server.url)
        await client.send_hello(tools=[{"name": "add"}, {"name": "add"}])
        error = await expect_error(client, "INVALID_FIELD")
        assert error.seq == 0
        assert server.server.session_count == 0

    async def test_only_declared_tools_are_called(
        self, server: RunningServer, open_session: OpenSession
    ) -> None:
        """§7.1: "A server sends tool.call to run a tool the client declared when the
        session opened"."""
        client, _ = await open_session(server.url, tools=TOOLS)
        items = await reply(client, "call nope {}")
        assert chunks(items) == ["result error FAILED"]
        assert not of_type(items, ToolCall)
        assert not of_type(items, ToolCallDelta)


class TestSection5_3Authentication:
    async def test_every_hello_is_authenticated_resumes_too(
        self, start: StartServer, connect: Connect, open_session: OpenSession
    ) -> None:
        """§5.3: "A server that requires authentication MUST authenticate every hello,
        new or resuming. If it refuses, it sends error UNAUTHORIZED (seq 0, not
        recoverable) and closes the connection with 4401"."""
        server = await start(authenticator=TokenAuthenticator([("alice", "a-token")]))
        client, ready = await open_session(server.url, auth="a-token")
        await client.close()
        thief = await connect(server.url)
        await thief.send_hello(sessionId=ready.session_id, auth="stolen")
        error = await expect_error(thief, "UNAUTHORIZED")
        assert error.seq == 0
        assert error.message.recoverable is False
        assert (await thief.closed())[0] == 4401
        _, resumed = await open_session(server.url, sessionId=ready.session_id, auth="a-token")
        assert resumed.resumed_from == 0

    async def test_a_server_without_authentication_ignores_auth(
        self, server: RunningServer, open_session: OpenSession
    ) -> None:
        """§5.3: "A server that does not use authentication ignores auth"."""
        _, ready = await open_session(server.url, auth={"anything": True})
        assert ready.session_id

    async def test_credentials_in_the_url_are_not_honoured(
        self, start: StartServer, connect: Connect
    ) -> None:
        """§5.3: "A client sends its credential [...] in hello.auth, never in the
        connection URL"; §2.1: "Credentials MUST NOT be placed in the URL"."""
        server = await start(authenticator=TokenAuthenticator([("alice", "a-token")]))
        client = await connect(server.url + "/?token=a-token")
        await client.send_hello()
        await expect_error(client, "UNAUTHORIZED")
        assert (await client.closed())[0] == 4401


class TestSection5_4Resume:
    async def test_resends_everything_after_resume_from_once_in_order(
        self, server: RunningServer, open_session: OpenSession
    ) -> None:
        """§5.4: the server "sends ready with resumedFrom set to its own lastSeq of the
        client stream; resends, in order, every server sequenced message with seq >
        resumeFrom"; (§6.3) byte for byte."""
        client, ready = await open_session(server.url)
        await client.send_sequenced("context", context=1)
        await reply(client, "burst 5")  # seqs 1..7
        await client.close()
        again, resumed = await open_session(server.url, sessionId=ready.session_id, resumeFrom=3)
        assert resumed.resumed_from == 2
        assert resumed.session_id == ready.session_id
        resent = await again.until(is_idle)
        assert seqs(resent) == [4, 5, 6, 7]
        assert all(again.raw[seq] == client.raw[seq] for seq in (4, 5, 6, 7))
        assert seqs(await again.barrier()) == []  # nothing more, nothing twice
        again.next_seq = 3
        assert seqs(await reply(again, "burst 1")) == [8, 9, 10]

    async def test_resume_from_absent_means_0(
        self, server: RunningServer, open_session: OpenSession
    ) -> None:
        """§5.4: "sends hello with sessionId and resumeFrom set to that lastSeq (absent
        means 0)"."""
        client, ready = await open_session(server.url)
        await reply(client, "burst 2")
        await client.close()
        again, resumed = await open_session(server.url, sessionId=ready.session_id)
        assert resumed.resumed_from == 1
        assert seqs(await again.until(is_idle)) == [1, 2, 3, 4]

    async def test_client_messages_resent_after_a_resume_are_deduplicated(
        self, server: RunningServer, open_session: OpenSession
    ) -> None:
        """§5.4: "Duplicates that both sides resend are discarded by §4.3, so each
        sequenced message is handled exactly once"."""
        client, ready = await open_session(server.url)
        await client.send_sequenced("context", context={"n": 1})
        await client.send_sequenced("context", context={"n": 2})
        await client.expect(Ack)
        client.abort()
        again, resumed = await open_session(server.url, sessionId=ready.session_id)
        assert resumed.resumed_from == 2
        # a careless client resends everything: only seq 3 is new
        await again.send({"v": 1, "seq": 1, "type": "context", "context": {"n": 1}})
        await again.send({"v": 1, "seq": 2, "type": "context", "context": {"n": 2}})
        await again.send({"v": 1, "seq": 3, "type": "context", "context": {"n": 3}})
        again.next_seq = 4
        assert chunks(await reply(again, "context?")) == ['{"n":3}']
        assert server.agents[0].contexts == [{"n": 1}, {"n": 2}, {"n": 3}]

    async def test_resume_from_beyond_the_last_seq_sent_fails_and_closes_the_session(
        self, server: RunningServer, connect: Connect, open_session: OpenSession
    ) -> None:
        """§5.4: "if resumeFrom is greater than the last seq it sent, it sends error
        RESUME_FAILED (not recoverable) and closes the session" (messages.md: seq 0,
        close 4404)."""
        client, ready = await open_session(server.url)
        await reply(client, "burst 1")  # seqs 1..3
        await client.close()
        bad = await connect(server.url)
        await bad.send_hello(sessionId=ready.session_id, resumeFrom=4)
        error = await expect_error(bad, "RESUME_FAILED")
        assert error.seq == 0
        assert error.message.recoverable is False
        assert (await bad.closed())[0] == 4404
        assert server.server.session(ready.session_id) is None
        late = await connect(server.url)
        await late.send_hello(sessionId=ready.session_id, resumeFrom=3)
        await expect_error(late, "RESUME_FAILED")

    async def test_a_needed_message_discarded_fails_the_resume(
        self, start: StartServer, connect: Connect, open_session: OpenSession
    ) -> None:
        """§4.1: a sender "MAY bound how many it keeps; a resume that would need a
        discarded message then fails (§5.4)": RESUME_FAILED, close 4404."""
        server = await start(config=ServerConfig(max_unacked=4))
        client, ready = await open_session(server.url)
        await reply(client, "burst 10")  # 12 messages, never acknowledged
        client.abort()
        again = await connect(server.url)
        await again.send_hello(sessionId=ready.session_id, resumeFrom=0)
        error = await expect_error(again, "RESUME_FAILED")
        assert error.seq == 0
        assert (await again.closed())[0] == 4404
        assert server.server.session(ready.session_id) is None

    async def test_a_newer_connection_replaces_the_older_with_4000(
        self, server: RunningServer, open_session: OpenSession
    ) -> None:
        """§5.4: the server "binds the session to the new connection, closing an older
        connection with 4000"."""
        older, ready = await open_session(server.url)
        await reply(older, "burst 1")
        newer, resumed = await open_session(
            server.url, sessionId=ready.session_id, resumeFrom=older.last_seq
        )
        assert resumed.resumed_from == 1
        assert (await older.closed())[0] == 4000
        newer.next_seq = 2
        assert chunks(await reply(newer, "echo newer")) == ["newer"]
        assert server.session(ready.session_id).status == "connected"

    async def test_pending_calls_and_epochs_carry_over(
        self, server: RunningServer, open_session: OpenSession
    ) -> None:
        """§5.4: "The epoch, pending tool calls, formats and capabilities carry over
        unchanged"."""
        client, ready = await open_session(server.url, tools=TOOLS, output={"encoding": "pcmu"})
        await client.text('call add {"a":1}')
        call = await client.expect_message(ToolCall)
        client.abort()
        again, resumed = await open_session(server.url, sessionId=ready.session_id)
        assert resumed.output == ready.output
        assert resumed.capabilities == ready.capabilities
        resent_call = await again.expect_message(ToolCall)
        assert resent_call == call
        again.next_seq = 2
        await answer(again, resent_call, {"sum": 1})
        items = await again.until(is_idle)
        assert chunks(items) == ['result ok {"sum":1}']
        later = turn_states(await reply(again, "echo later"))
        assert later[0].epoch > call.epoch

    async def test_transient_messages_and_audio_are_never_resent(
        self, server: RunningServer, open_session: OpenSession
    ) -> None:
        """§5.4: "Transient messages and audio are never resent"."""
        client, ready = await open_session(server.url)
        items = await reply(client, "echo sound")
        assert audio(items)
        await client.close()
        again, _ = await open_session(server.url, sessionId=ready.session_id)
        resent = await again.until(is_idle)
        assert not audio(resent)
        assert all(isinstance(item, Decoded) and item.seq for item in resent)
        assert seqs(resent) == seqs(items)

    async def test_a_reply_parked_mid_audio_still_ends_after_the_resume(
        self, server: RunningServer, open_session: OpenSession
    ) -> None:
        """§5.4: sequenced messages a session produces while parked are resent; only
        "Audio that was in flight is lost; any further output audio is announced by a
        new audio.start (§8.3)". A reply that was speaking when the connection dropped
        still ends with ``turn.state idle``."""
        client, ready = await open_session(server.url)
        await client.text("speak 300")
        start = await client.expect_message(AudioStart)
        client.abort()
        session = server.session(ready.session_id)
        await eventually(lambda: session.status == "parked")
        assert start.item_id in session.record.items
        await asyncio.sleep(0.1)  # frames of the item are lost while parked; the turn goes on
        again, _ = await open_session(
            server.url, sessionId=ready.session_id, resumeFrom=client.last_seq
        )
        items = await again.until(is_idle, timeout=1.5)
        assert_announced(items)

    async def test_a_resumed_connection_announces_further_audio_again(
        self, server: RunningServer, open_session: OpenSession
    ) -> None:
        """§8.3: "Because audio.start is transient, a resumed connection starts without
        a current item; further output audio follows a new audio.start"."""
        older, ready = await open_session(server.url)
        await older.text("speak 2000")
        start = await older.expect_message(AudioStart)
        await frames(older, 2)
        newer, _ = await open_session(
            server.url, sessionId=ready.session_id, resumeFrom=older.last_seq
        )
        items = await frames(newer, 2)
        assert_announced(items)
        (again,) = of_type(items, AudioStart)
        assert (again.item_id, again.epoch) == (start.item_id, start.epoch)
        newer.next_seq = 2
        await newer.send_sequenced("interrupt", epoch=start.epoch, reason="user")
        await newer.expect(Interrupted)


class TestSection5_5Context:
    async def test_context_is_delivered_in_client_stream_order(
        self, server: RunningServer, open_session: OpenSession
    ) -> None:
        """§5.5: "Each context message replaces the previous value; null clears it. The
        server delivers context to the application in the order of the client stream"."""
        client, _ = await open_session(server.url, context={"n": 0})
        assert chunks(await reply(client, "context?")) == ['{"n":0}']
        for value in ({"n": 1}, {"n": 2}, None, {"n": 3}):
            await client.send_sequenced("context", context=value)
        assert chunks(await reply(client, "context?")) == ['{"n":3}']
        await client.send_sequenced("context", context=None)
        assert chunks(await reply(client, "context?")) == ["null"]
        assert server.agents[0].contexts == [{"n": 1}, {"n": 2}, None, {"n": 3}, None]


# --- §6 ---------------------------------------------------------------------------------


class TestSection6_1Epochs:
    async def test_every_turn_has_a_new_epoch_and_turn_messages_carry_it(
        self, server: RunningServer, open_session: OpenSession
    ) -> None:
        """§6.1: "The server keeps a session epoch [...] that starts at 0 and never
        decreases. It increases when a turn starts and when a turn is interrupted. Every
        server message that belongs to a turn carries the epoch it belongs to"."""
        client, _ = await open_session(server.url, tools=TOOLS)
        epochs: list[int] = []
        for text in ("echo a", "echo b"):
            items = await reply(client, text)
            states = turn_states(items)
            assert len({(s.turn_id, s.epoch) for s in states}) == 1
            (start,) = of_type(items, AudioStart)
            assert (start.turn_id, start.epoch) == (states[0].turn_id, states[0].epoch)
            epochs.append(states[0].epoch)
        await client.text("call add {}")
        call = await client.expect_message(ToolCall)
        thinking = turn_states(client.skipped)[0]
        assert (call.turn_id, call.epoch) == (thinking.turn_id, thinking.epoch)
        await client.text("echo c")  # interrupts the call's turn
        interrupted = await client.expect_message(Interrupted)
        assert interrupted.epoch == call.epoch
        items = await client.until(is_idle)
        epochs += [call.epoch, turn_states(items)[0].epoch]
        assert epochs == sorted(set(epochs)), epochs
        assert epochs[-1] > interrupted.epoch
        assert len({s.turn_id for s in received(client, TurnState)}) == 4


class TestSection6_2Interrupt:
    @pytest.mark.parametrize("reason", ["user", "speech", "keyboard"])
    async def test_interrupt_closes_the_epoch_and_stops_audio(
        self, server: RunningServer, open_session: OpenSession, reason: str
    ) -> None:
        """§6.2: "On interrupt [...] the server interrupts the response in flight, if
        any: it stops the model, closes the response's epoch [...] and sends interrupted
        with the closed epoch"; §1: "Once an epoch is closed, nothing from it takes
        effect"."""
        client, _ = await open_session(server.url)
        await client.text("speak 2000")
        start = await client.expect_message(AudioStart)
        await client.until(lambda item: not isinstance(item, Decoded))  # audio flows
        await client.send_sequenced("interrupt", epoch=start.epoch, reason=reason)
        interrupted = await client.expect_message(Interrupted)
        assert interrupted.epoch == start.epoch
        await client.text("echo next")
        after = await client.until(is_idle)
        first_start = next(i for i, item in enumerate(after) if matches(item, AudioStart))
        assert not audio(after[:first_start]), "audio of the closed epoch after interrupted"
        states = turn_states(after)
        assert all(s.epoch > interrupted.epoch for s in states)
        assert chunks(after) == ["next"]

    async def test_a_stale_interrupt_has_no_effect(
        self, server: RunningServer, open_session: OpenSession
    ) -> None:
        """messages.md on §6.2: "The server interrupts the response in flight only if
        that response's epoch is at or below the named epoch: a stale interrupt [...]
        has no effect"."""
        client, _ = await open_session(server.url)
        first = turn_states(await reply(client, "echo a"))[0].epoch
        await client.text("speak 2000")
        start = await client.expect_message(AudioStart)
        assert start.epoch > first
        await client.send_sequenced("interrupt", epoch=first, reason="user")
        assert not of_type(await client.barrier(), Interrupted)
        more = await frames(client, 3)  # the reply goes on
        assert not of_type(more, Interrupted)
        await client.send_sequenced("interrupt", epoch=start.epoch, reason="user")
        assert (await client.expect_message(Interrupted)).epoch == start.epoch

    async def test_an_interrupt_naming_a_later_epoch_interrupts(
        self, server: RunningServer, open_session: OpenSession
    ) -> None:
        """messages.md on §6.2: the server interrupts "only if that response's epoch is
        at or below the named epoch"; interrupted carries the closed epoch."""
        client, _ = await open_session(server.url)
        await client.text("speak 2000")
        start = await client.expect_message(AudioStart)
        await client.send_sequenced("interrupt", epoch=start.epoch + 5, reason="user")
        assert (await client.expect_message(Interrupted)).epoch == start.epoch

    async def test_no_response_in_flight_nothing_is_sent(
        self, server: RunningServer, open_session: OpenSession
    ) -> None:
        """§6.2: "When no response is in flight, an interruption has no effect and the
        server sends nothing"."""
        client, _ = await open_session(server.url)
        epoch = turn_states(await reply(client, "echo a"))[0].epoch
        await client.send_sequenced("interrupt", epoch=epoch, reason="user")
        await client.send_sequenced("interrupt", epoch=0, reason="keyboard")
        items = await reply(client, "echo b")
        assert not of_type(items, Interrupted)
        assert turn_states(items)[0].epoch == epoch + 1  # the epoch did not move

    async def test_an_interrupted_calls_late_result_is_ignored(
        self, server: RunningServer, open_session: OpenSession
    ) -> None:
        """§6.2: the server "settles the epoch's pending client tool calls as
        INTERRUPTED"; §7.2: "A server MUST ignore a tool.result whose callId is unknown
        or already settled"."""
        client, _ = await open_session(server.url, tools=TOOLS)
        await client.text("call add {}")
        call = await client.expect_message(ToolCall)
        await client.send_sequenced("interrupt", epoch=call.epoch, reason="user")
        await client.expect(Interrupted)
        await answer(client, call, 1)
        items = await reply(client, "echo after")
        assert chunks(items) == ["after"]  # no "result ..." for the interrupted call
        assert [s.state for s in turn_states(items)] == ["thinking", "speaking", "idle"]


class TestSection6_3TextInterrupts:
    async def test_text_during_a_response_interrupts_it_first(
        self, server: RunningServer, open_session: OpenSession
    ) -> None:
        """§6.3: "If a response is in flight, the server first interrupts it as in §6.2
        (reason user), then responds to the text"."""
        client, _ = await open_session(server.url)
        await client.text("speak 2000")
        start = await client.expect_message(AudioStart)
        await client.text("echo instead")
        items = await client.until(is_idle)
        kinds = [m.TYPE for m in messages(items)]
        first_interrupted = kinds.index("interrupted")
        assert "turn.state" not in kinds[:first_interrupted]
        assert of_type(items, Interrupted)[0].epoch == start.epoch
        assert chunks(items) == ["instead"]
        assert all(s.epoch > start.epoch for s in turn_states(items))

    async def test_text_without_a_response_does_not_interrupt(
        self, server: RunningServer, open_session: OpenSession
    ) -> None:
        """§6.2: "When no response is in flight, an interruption has no effect"."""
        client, _ = await open_session(server.url)
        await reply(client, "echo a")
        assert not of_type(await reply(client, "echo b"), Interrupted)

    async def test_text_during_a_pending_call_interrupts_and_settles_it(
        self, server: RunningServer, open_session: OpenSession
    ) -> None:
        """§6.3 with §6.2: the text interrupts the response; its pending call is settled
        and a later result for it is ignored (§7.2)."""
        client, _ = await open_session(server.url, tools=TOOLS)
        await client.text("call add {}")
        call = await client.expect_message(ToolCall)
        items = await reply(client, "echo b")
        assert of_type(items, Interrupted)[0].epoch == call.epoch
        await answer(client, call, 1)
        assert chunks(await reply(client, "echo c")) == ["c"]


class TestSection6_3GlobalIds:
    async def test_call_and_turn_ids_are_unique_across_calls_and_sessions(
        self, server: RunningServer, open_session: OpenSession
    ) -> None:
        """§6.3 (global-tool-ids-v1): "A server MUST assign each distinct tool call a
        callId that does not identify a different call in any session" and each turn a
        turnId likewise; §7.1: "A server MUST NOT reuse a callId within a session". Ids
        are opaque (§6.3): only uniqueness is checked."""
        call_ids: list[str] = []
        turn_ids: set[str] = set()
        for _ in range(3):
            client, ready = await open_session(
                server.url, tools=TOOLS, capabilities=["global-tool-ids-v1"]
            )
            assert ready.capabilities == ("global-tool-ids-v1",)
            for _ in range(2):
                await client.text("calls 10 add {}")
                calls = [await client.expect_message(ToolCall) for _ in range(10)]
                for call in calls:
                    await answer(client, call, 0)
                items = await client.until(is_idle)
                call_ids += [call.call_id for call in calls]
                turn_ids |= {s.turn_id for s in turn_states(client.skipped + items)}
                turn_ids |= {call.turn_id for call in calls}
        assert len(call_ids) == len(set(call_ids)) == 60
        assert len(turn_ids) == 6

    async def test_ids_are_byte_identical_when_resent(
        self, server: RunningServer, open_session: OpenSession
    ) -> None:
        """§6.3: "Resuming a session and replaying an existing message MUST preserve both
        identifiers byte for byte. A retransmission is the same call, not a new call"."""
        client, ready = await open_session(
            server.url, tools=TOOLS, capabilities=["global-tool-ids-v1", "tool-stream-v1"]
        )
        await client.text('call add {"a":[1,2,3]}')
        await client.expect(ToolCall)
        client.abort()
        again, _ = await open_session(server.url, sessionId=ready.session_id)
        call = await again.expect_message(ToolCall)
        for seq in range(1, client.last_seq + 1):
            assert again.raw[seq] == client.raw[seq]
        again.next_seq = 2
        await answer(again, call, 6)
        assert chunks(await again.until(is_idle)) == ["result ok 6"]


# --- §7 ---------------------------------------------------------------------------------


class TestSection7Tools:
    async def test_previews_then_the_call_then_the_result(
        self, server: RunningServer, open_session: OpenSession
    ) -> None:
        """§7.1/§7.4: previews ``{"argumentsDelta": ...}`` of the call's arguments, then
        tool.call with the call's callId, turnId and epoch; §7.2: the result settles it."""
        client, _ = await open_session(server.url, tools=TOOLS)
        arguments = {"a": 1, "text": "a somewhat longer argument"}
        await client.text("call add " + json.dumps(arguments))
        call = await client.expect_message(ToolCall)
        before = client.skipped
        state = turn_states(before)
        assert [s.state for s in state] == ["thinking", "acting"]
        deltas = of_type(before, ToolCallDelta)
        assert len(deltas) > 1
        assert "".join(d.preview["argumentsDelta"] for d in deltas) == json.dumps(
            arguments, separators=(",", ":")
        )
        assert {(d.call_id, d.turn_id, d.epoch) for d in deltas} == {
            (call.call_id, call.turn_id, call.epoch)
        }
        assert (call.name, call.arguments) == ("add", arguments)
        assert (call.turn_id, call.epoch) == (state[0].turn_id, state[0].epoch)
        await answer(client, call, {"sum": 1})
        assert chunks(await client.until(is_idle)) == ['result ok {"sum":1}']

    @pytest.mark.parametrize("code", ["REJECTED", "INVALID", "FAILED", "INTERRUPTED"])
    async def test_a_failed_result(
        self, server: RunningServer, open_session: OpenSession, code: str
    ) -> None:
        """§7.2: "A result is either { ok: true, output } [...] or { ok: false, code,
        message }"."""
        client, _ = await open_session(server.url, tools=TOOLS)
        await client.text("call add {}")
        call = await client.expect_message(ToolCall)
        await answer(client, call, code=code)
        assert chunks(await client.until(is_idle)) == [f"result error {code}"]

    async def test_duplicate_and_unknown_results_are_ignored(
        self, server: RunningServer, open_session: OpenSession
    ) -> None:
        """§7.2: "A server MUST ignore a tool.result whose callId is unknown or already
        settled [...] Duplicates and late results therefore have no effect"."""
        client, _ = await open_session(server.url, tools=TOOLS, capabilities=STREAM)
        await client.text("call add {}")
        call = await client.expect_message(ToolCall)
        await answer(client, call, 1, call_id="c_unknown")
        await answer(client, call, 1, call_id=call.call_id + "x")
        assert not of_type(await client.barrier(), ToolStream)  # nothing settled
        await answer(client, call, 2)
        await answer(client, call, 3)
        items = await client.until(is_idle)
        items += await client.barrier()
        assert chunks(items) == ["result ok 2"]
        assert [s.phase for s in of_type(items, ToolStream)] == ["settled"]
        assert chunks(await reply(client, "echo then")) == ["then"]

    async def test_a_previous_calls_late_result_does_not_settle_a_later_call(
        self, server: RunningServer, open_session: OpenSession
    ) -> None:
        """§6.3: "A server MUST NOT accept a previous call's late result as a result for
        a later call"."""
        client, _ = await open_session(server.url, tools=TOOLS)
        await client.text("call add {}")
        first = await client.expect_message(ToolCall)
        await answer(client, first, 1)
        await client.until(is_idle)
        await client.text("call add {}")
        second = await client.expect_message(ToolCall)
        assert second.call_id != first.call_id
        await answer(client, first, "late")
        await client.send_sequenced(
            "tool.result", callId=first.call_id, epoch=second.epoch, ok=True, output="late"
        )
        await answer(client, second, "right")
        assert chunks(await client.until(is_idle)) == ['result ok "right"']

    async def test_no_result_in_time_settles_timeout(
        self, start: StartServer, open_session: OpenSession
    ) -> None:
        """§7.2: "A server MAY settle a call that gets no result within its timeout as
        TIMEOUT"; the late result is then ignored."""
        server = await start(config=ServerConfig(tool_timeout=0.2))
        client, _ = await open_session(server.url, tools=TOOLS)
        await client.text("call add {}")
        call = await client.expect_message(ToolCall)
        assert chunks(await client.until(is_idle)) == ["result error TIMEOUT"]
        await answer(client, call, 1)
        assert chunks(await reply(client, "echo after")) == ["after"]

    async def test_several_calls_have_distinct_ids_and_settle_independently(
        self, server: RunningServer, open_session: OpenSession
    ) -> None:
        """§7.1: "A server MUST NOT reuse a callId within a session"; each call gets its
        own one result (§7.2)."""
        client, _ = await open_session(server.url, tools=TOOLS)
        await client.text('calls 3 add {"x":1}')
        calls = [await client.expect_message(ToolCall) for _ in range(3)]
        assert len({call.call_id for call in calls}) == 3
        for n, call in reversed(list(enumerate(calls))):
            await answer(client, call, n)
        assert chunks(await client.until(is_idle)) == [
            "result ok 0",
            "\nresult ok 1",
            "\nresult ok 2",
        ]


class TestSection7_5ToolStream:
    async def test_client_call_lifecycle(
        self, server: RunningServer, open_session: OpenSession
    ) -> None:
        """§7.5: start first; arguments-delta before arguments-complete; exactly one
        terminal phase; "When tool-stream-v1 is in effect [...] the server [...] MUST NOT
        send tool.call.delta"."""
        client, _ = await open_session(server.url, tools=TOOLS, capabilities=STREAM)
        arguments = {"a": 1, "b": "two words"}
        await client.text("call add " + json.dumps(arguments))
        call = await client.expect_message(ToolCall)
        before = of_type(client.skipped, ToolStream)
        await answer(client, call, 3)
        items = await client.until(is_idle)
        streams = before + of_type(items, ToolStream)
        phases = check_phases(streams)
        assert list(phases) == [call.call_id]
        assert phases[call.call_id][-1] == "settled"
        assert "arguments-complete" in phases[call.call_id]
        deltas = "".join(s.delta for s in streams if isinstance(s.delta, str))
        assert deltas == json.dumps(arguments, separators=(",", ":"))
        (complete,) = [s for s in streams if s.phase == "arguments-complete"]
        assert complete.arguments == arguments
        assert streams[-1].ok is True
        assert not received(client, ToolCallDelta)
        assert chunks(items) == ["result ok 3"]

    async def test_server_tool_lifecycle(
        self, server: RunningServer, open_session: OpenSession
    ) -> None:
        """§7.5: "progress only after arguments-complete and before the terminal phase";
        "settled reports only whether the call succeeded [...] The output of a server tool
        is never included"."""
        client, _ = await open_session(server.url, capabilities=STREAM)
        items = await reply(client, "server-tool 300")
        streams = of_type(items, ToolStream)
        phases = check_phases(streams)
        ((call_id, order),) = phases.items()
        assert order == [
            "start",
            "arguments-delta",
            "arguments-complete",
            "progress",
            "progress",
            "settled",
        ]
        assert [s.progress for s in streams if s.phase == "progress"] == [
            {"elapsedMs": 100},
            {"elapsedMs": 200},
        ]
        assert streams[-1].ok is True
        settled_raw = [
            f.data for f in client.log if b'"settled"' in f.data and call_id.encode() in f.data
        ]
        assert len(settled_raw) == 1
        assert "output" not in json.loads(settled_raw[0])
        assert not of_type(items, ToolCall)
        assert not of_type(items, ToolCallDelta)
        assert chunks(items) == ["server-tool done"]

    async def test_without_the_capability_there_is_no_tool_stream(
        self, server: RunningServer, open_session: OpenSession
    ) -> None:
        """§3.4: "A message type listed under a capability MUST NOT be sent unless that
        capability is in effect"; a baseline client sees previews of a server tool and
        no tool.call."""
        client, _ = await open_session(server.url)
        items = await reply(client, "server-tool 100")
        assert not of_type(items, ToolStream)
        assert not of_type(items, ToolCall)
        deltas = of_type(items, ToolCallDelta)
        assert "".join(d.preview["argumentsDelta"] for d in deltas) == '{"ms":100}'
        assert chunks(items) == ["server-tool done"]

    async def test_an_interrupted_call_is_cancelled_and_nothing_follows(
        self, server: RunningServer, open_session: OpenSession
    ) -> None:
        """§7.5 / messages.md: "a call that ends because its turn was interrupted gets
        the terminal phase cancelled"; "exactly one terminal phase, after which nothing
        about the call is sent"."""
        client, _ = await open_session(server.url, tools=TOOLS, capabilities=STREAM)
        await client.text("calls 2 add {}")
        calls = [await client.expect_message(ToolCall) for _ in range(2)]
        await client.send_sequenced("interrupt", epoch=calls[0].epoch, reason="user")
        await client.expect(Interrupted)
        for call in calls:
            await answer(client, call, 1)
        items = await reply(client, "echo after")
        streams = received(client, ToolStream)
        phases = check_phases(streams)
        assert {order[-1] for order in phases.values()} == {"cancelled"}
        assert not of_type(items, ToolStream)

    async def test_a_running_server_tool_is_cancelled_on_interrupt(
        self, server: RunningServer, open_session: OpenSession
    ) -> None:
        """§7.5: cancelled: "The call ended because its turn was interrupted, before or
        after its arguments completed"."""
        client, _ = await open_session(server.url, capabilities=STREAM)
        await client.text("server-tool 2000")
        await client.until(
            lambda item: (
                isinstance(item, Decoded)
                and isinstance(item.message, ToolStream)
                and item.message.phase == "progress"
            )
        )
        epoch = of_type(client.skipped, ToolStream)[0].epoch
        await client.send_sequenced("interrupt", epoch=epoch, reason="user")
        await client.expect(Interrupted)
        items = await reply(client, "echo after")
        streams = received(client, ToolStream)
        (order,) = check_phases(streams).values()
        assert order[-1] == "cancelled"
        assert not of_type(items, ToolStream)

    async def test_a_timeout_is_settled_with_timeout(
        self, start: StartServer, open_session: OpenSession
    ) -> None:
        """messages.md on §7.5: "a call settled by a result [...] or by TIMEOUT gets
        settled"."""
        server = await start(config=ServerConfig(tool_timeout=0.2))
        client, _ = await open_session(server.url, tools=TOOLS, capabilities=STREAM)
        items = await reply(client, "call add {}")
        streams = of_type(items, ToolStream)
        check_phases(streams)
        assert (streams[-1].phase, streams[-1].ok, streams[-1].code) == (
            "settled",
            False,
            "TIMEOUT",
        )

    async def test_every_call_of_many_has_a_valid_lifecycle(
        self, server: RunningServer, open_session: OpenSession
    ) -> None:
        """§7.5: "For every call, the server MUST send" the phases in order."""
        client, _ = await open_session(server.url, tools=TOOLS, capabilities=STREAM)
        await client.text('calls 4 add {"k":"v"}')
        calls = [await client.expect_message(ToolCall) for _ in range(4)]
        await answer(client, calls[0], code="REJECTED")
        for call in calls[1:]:
            await answer(client, call, None)
        await client.until(is_idle)
        streams = received(client, ToolStream)
        phases = check_phases(streams)
        assert list(phases) == [call.call_id for call in calls]
        settled = [s for s in streams if s.phase == "settled"]
        assert [(s.ok, s.code if s.ok is False else None) for s in settled] == [
            (False, "REJECTED"),
            (True, None),
            (True, None),
            (True, None),
        ]


# --- §8 ---------------------------------------------------------------------------------

FORMATS: Final[list[tuple[dict[str, Any] | None, tuple[str, int]]]] = [
    (None, ("pcm16", 24000)),
    ({"encoding": "pcmu", "sampleRate": 8000}, ("pcmu", 8000)),
    ({"encoding": "pcmu"}, ("pcmu", 8000)),
    ({"encoding": "pcm16", "sampleRate": 16000}, ("pcm16", 16000)),
    ({"encoding": "opus"}, ("pcm16", 24000)),
    ({"encoding": "pcm16", "sampleRate": 44100}, ("pcm16", 24000)),
]


class TestSection8Audio:
    @pytest.mark.parametrize(("preferred", "chosen"), FORMATS)
    async def test_the_server_chooses_the_formats(
        self,
        server: RunningServer,
        open_session: OpenSession,
        preferred: dict[str, Any] | None,
        chosen: tuple[str, int],
    ) -> None:
        """§8.2: "A server SHOULD accept a preference that the model can take unchanged
        [...] and SHOULD otherwise choose pcm16 at 24000 Hz"; ready states the formats
        in effect (§5.2)."""
        hello: dict[str, Any] = {}
        if preferred is not None:
            hello.update(output=preferred, input=preferred)
        _, ready = await open_session(server.url, **hello)
        assert (ready.output.encoding, ready.output.rate) == chosen
        assert (ready.input.encoding, ready.input.rate) == chosen

    @pytest.mark.parametrize(
        ("output", "size"), [(None, 960), ({"encoding": "pcmu", "sampleRate": 8000}, 160)]
    )
    async def test_output_audio_items_and_frames(
        self,
        server: RunningServer,
        open_session: OpenSession,
        output: dict[str, Any] | None,
        size: int,
    ) -> None:
        """§8.3: "The server sends audio.start before the first output frame of each
        audio item"; §8.1: kind 2; "Audio seq counts frames per direction, starting at 0
        and increasing by one per frame"."""
        hello: dict[str, Any] = {} if output is None else {"output": output}
        client, _ = await open_session(server.url, **hello)
        expected_seq = 0
        for _ in range(2):
            items = await reply(client, "echo hi")
            start_at = next(i for i, item in enumerate(items) if matches(item, AudioStart))
            assert not audio(items[:start_at])
            frames = audio(items[start_at:])
            assert len(frames) == 10
            assert {frame.kind for frame in frames} == {FrameKind.OUTPUT}
            assert [frame.seq for frame in frames] == list(range(expected_seq, expected_seq + 10))
            assert {len(frame.payload) for frame in frames} == {size}
            start = items[start_at]
            assert isinstance(start, Decoded)
            assert isinstance(start.message, AudioStart)
            state = turn_states(items)[0]
            assert (start.message.turn_id, start.message.epoch) == (state.turn_id, state.epoch)
            expected_seq += 10

    @pytest.mark.parametrize(
        "frame",
        [b"", b"\x01", b"\x01\x00\x00\x00", b"\x02\x00\x00\x00\x00ab", b"\x07\x00\x00\x00\x00ab"],
        ids=["empty", "1 byte", "4 bytes", "kind 2", "kind 7"],
    )
    async def test_a_malformed_frame_is_malformed_recoverable(
        self, server: RunningServer, open_session: OpenSession, frame: bytes
    ) -> None:
        """§8.1: "A frame shorter than 5 bytes or with any other kind is malformed. A
        frame of a kind the receiver does not accept (a server receiving kind 2) is
        malformed too. A server answers a malformed frame with error MALFORMED
        (recoverable) and drops it"."""
        client, _ = await open_session(server.url)
        await client.send(frame)
        error = await expect_error(client, "MALFORMED")
        assert error.message.recoverable is True
        assert error.seq == 1
        assert chunks(await reply(client, "echo fine")) == ["fine"]

    async def test_an_empty_payload_is_valid(
        self, server: RunningServer, open_session: OpenSession
    ) -> None:
        """§8.1: "A frame with an empty payload is valid and MAY be ignored"."""
        client, _ = await open_session(server.url)
        await client.send(b"\x01\x00\x00\x00\x00")
        await client.send(b"\x01\xff\xff\xff\xff")
        assert not of_type(await client.barrier(), Error)

    async def test_input_audio_before_ready_is_ignored(
        self, start: StartServer, connect: Connect
    ) -> None:
        """§8.1: "A server ignores input audio before ready"."""
        gate = GateAuthenticator()
        server = await start(authenticator=gate)
        client = await connect(server.url)
        await client.send_hello()
        await gate.wait_called()
        for frame in speech(300):
            await client.send(frame)
        await client.barrier()  # the server has read the audio, still opening
        gate.open()
        await client.expect(Ready)
        items = await reply(client, "echo after")
        assert not any(is_state(item, "listening") for item in items)
        assert [t.role for t in of_type(items, Transcript)] == ["agent"]  # no user speech

    async def test_input_audio_in_the_input_format_reaches_the_agent(
        self, server: RunningServer, open_session: OpenSession
    ) -> None:
        """§5.1: "open | input audio frame | pass to the session"; §8.1 audio seq
        wraps modulo 2^32 and is informational."""
        client, _ = await open_session(server.url, input={"encoding": "pcmu"})
        pcmu = Format(encoding="pcmu", sample_rate=8000)
        for frame in input_audio(
            tone(300, pcmu) + silence(400, pcmu), fmt=pcmu, first_seq=2**32 - 3
        ):
            await client.send(frame)
        transcript = await client.expect_message(Transcript)
        assert transcript.text == "(speech 300 ms)"
        await client.until(is_idle)

    async def test_an_agent_that_leaves_audio_unread_holds_a_bounded_backlog(
        self, start: StartServer, connect: Connect
    ) -> None:
        """Audio is lossy (§5.4) but control messages never are: while an agent is busy
        elsewhere, input audio beyond MAX_QUEUED_AUDIO frames is dropped, and a text
        sent after it still reaches the agent, after the audio it kept."""
        busy = asyncio.Event()
        sessions: list[AgentSession] = []

        class Busy:
            input_formats = SCRIPTED_FORMATS
            output_formats = SCRIPTED_FORMATS

            async def run(self, session: AgentSession) -> None:
                sessions.append(session)
                await busy.wait()

        # 12 s of audio at once: an audio budget that lets all of it in, so that the
        # agent's backlog is the bound met (the read budget's own: test_audio_budget_rules).
        server = await start(
            agent_factory=lambda info: Busy(), config=ServerConfig(audio_burst=60.0)
        )
        client = await connect(server.url)
        await client.send_hello()
        await client.expect(Ready)
        frames = input_audio(silence(20 * (MAX_QUEUED_AUDIO + 100), PCM16_24K))
        for frame in frames:
            await client.send(frame)
        await client.send_sequenced("text", text="still here")
        await client.barrier()
        (session,) = sessions
        assert session.dropped_audio == 100
        got = [await session.next_event() for _ in range(MAX_QUEUED_AUDIO + 1)]
        audio = [e for e in got if isinstance(e, AudioReceived)]
        assert len(audio) == MAX_QUEUED_AUDIO
        assert [e.seq for e in audio[:3]] == [0, 1, 2]  # the oldest are kept, in order
        assert got[-1] == UserTextReceived(text="still here")
        await client.send(frames[0])  # read: room again
        await client.barrier()
        assert isinstance(await session.next_event(), AudioReceived)
        busy.set()


class TestSection8_4Playback:
    async def test_playback_is_accepted_and_reaches_the_agent(
        self, server: RunningServer, open_session: OpenSession
    ) -> None:
        """§8.4: "the client SHOULD send playback with the item's itemId and playedMs
        [...] The server uses it to truncate the conversation to what the user heard"."""
        client, _ = await open_session(server.url)
        items = await reply(client, "echo heard")
        (start,) = of_type(items, AudioStart)
        await client.send_sequenced("playback", itemId=start.item_id, playedMs=120)
        await client.send_sequenced("playback", itemId="i_never_sent", playedMs=0)
        assert not of_type(await client.barrier(), Error)
        assert chunks(await reply(client, "echo more")) == ["more"]
        agent = server.agents[0]
        assert agent.playback[start.item_id].played_ms == 120
        assert "i_never_sent" in agent.playback


# --- §9 ---------------------------------------------------------------------------------


class TestSection9Errors:
    async def test_agent_error_is_recoverable_and_sequenced(
        self, server: RunningServer, open_session: OpenSession
    ) -> None:
        """§9.2: AGENT_ERROR "as flagged" (the scripted ``error`` is recoverable); §4.1:
        errors are sequenced once a session is bound."""
        client, _ = await open_session(server.url)
        items = await reply(client, "echo a")
        await client.text("error")
        error = await expect_error(client, "AGENT_ERROR")
        assert error.message.recoverable is True
        assert error.seq == seqs(items)[-1] + 1
        after = await reply(client, "echo b")
        assert seqs(after)[0] == error.seq + 1

    @pytest.mark.parametrize("way", ["run", "listener"])
    async def test_an_agent_that_fails_ends_the_session(
        self, start: StartServer, connect: Connect, open_session: OpenSession, way: str
    ) -> None:
        """§9.2: "recoverable: false means the session or connection cannot continue";
        §5.6: "A session ends when the server closes it (after an unrecoverable
        error...)": AGENT_ERROR not recoverable, sequenced, then the session is gone;
        whether ``run`` raises or a listener (AgentSession.listen) does."""

        def broke(event: object) -> None:
            raise RuntimeError("the model connection broke")

        class FailingAgent:
            input_formats = SCRIPTED_FORMATS
            output_formats = SCRIPTED_FORMATS

            async def run(self, session: AgentSession) -> None:
                if way == "listener":
                    await session.listen(broke)
                broke(await session.next_event())

        server = await start(agent_factory=lambda info: FailingAgent())
        client, ready = await open_session(server.url)
        await client.text("hi")
        error = await expect_error(client, "AGENT_ERROR")
        assert error.seq == 1
        assert error.message.recoverable is False
        await client.closed()
        assert server.server.session(ready.session_id) is None
        late = await connect(server.url)
        await late.send_hello(sessionId=ready.session_id, resumeFrom=1)
        await expect_error(late, "RESUME_FAILED")

    async def test_an_invalid_message_is_not_acted_on(
        self, server: RunningServer, open_session: OpenSession
    ) -> None:
        """§9.1: "A receiver MUST NOT act on an invalid message": its seq is not
        consumed either."""
        client, ready = await open_session(server.url)
        await client.send({"v": 1, "seq": 1, "type": "text"})
        await expect_error(client, "INVALID_FIELD")
        await client.send({"v": 1, "seq": 1, "type": "interrupt", "epoch": -1, "reason": "x"})
        await expect_error(client, "INVALID_FIELD")
        assert server.session(ready.session_id).incoming.last_seq == 0
        assert chunks(await reply(client, "echo one")) == ["one"]

    @pytest.mark.parametrize(
        "type_", ["Hello", " hello", "toString", "__proto__", "__class__", "constructor", 7]
    )
    async def test_type_is_matched_exactly(
        self, server: RunningServer, open_session: OpenSession, type_: Any
    ) -> None:
        """§9.1: "type is compared as an exact string; implementations MUST NOT resolve
        it through inherited object properties"."""
        client, _ = await open_session(server.url)
        await client.send({"v": 1, "seq": 1, "type": type_})
        error = await expect_error(client, "UNKNOWN_TYPE")
        assert error.message.recoverable is True

    @pytest.mark.parametrize("type_", ["error", "pong", "ready", "turn.state", "interrupted"])
    async def test_server_types_from_a_client_are_unknown(
        self, server: RunningServer, open_session: OpenSession, type_: str
    ) -> None:
        """§2.3: "A message type defined for one direction is an unknown type when the
        other direction sends it"."""
        client, _ = await open_session(server.url)
        await client.send({"v": 1, "seq": 0, "type": type_})
        await expect_error(client, "UNKNOWN_TYPE")

    async def test_text_that_is_not_utf8_fails_the_connection_1007(
        self, server: RunningServer, open_session: OpenSession
    ) -> None:
        """messages.md: "A text frame that is not valid UTF-8 fails the WebSocket
        connection with close code 1007 [...]; the session is parked and stays
        resumable"."""
        client, ready = await open_session(server.url)
        await reply(client, "burst 1")
        await client.ws.send(b'{"v":1,"seq":1,"type":"text","text":"\xff"}', text=True)
        assert (await client.closed())[0] == 1007
        session = server.session(ready.session_id)
        await eventually(lambda: session.status == "parked")
        _, resumed = await open_session(server.url, sessionId=ready.session_id, resumeFrom=3)
        assert resumed.resumed_from == 1


# --- §11 --------------------------------------------------------------------------------


class TestSection11Limits:
    async def test_a_session_beyond_max_sessions_cannot_start_and_resumes_still_work(
        self, start: StartServer, connect: Connect, open_session: OpenSession
    ) -> None:
        """§5.1 "opening | the session cannot start | error START_FAILED, close 1011":
        with ``max_sessions``, a new session beyond the limit is refused that way; a
        parked session still counts and still resumes; once a session ends, a new one
        opens."""
        server = await start(max_sessions=2, resume_window=1.0)
        first, first_ready = await open_session(server.url)
        second, _ = await open_session(server.url)
        third = await connect(server.url)
        await third.send_hello()
        error = await expect_error(third, "START_FAILED")
        assert error.seq == 0
        assert error.message.recoverable is False
        assert "limit of 2 sessions" in error.message.message
        assert (await third.closed())[0] == 1011
        await first.close()  # parked: it still holds its place, and resumes
        session = server.server.session(first_ready.session_id)
        assert session is not None
        await eventually(lambda: session.status == "parked", what="parked")
        again = await connect(server.url)
        await again.send_hello(sessionId=first_ready.session_id, resumeFrom=0)
        resumed = (await again.expect(Ready)).message
        assert isinstance(resumed, Ready)
        assert resumed.session_id == first_ready.session_id
        assert chunks(await reply(again, "echo back")) == ["back"]
        assert server.server.session_count == 2
        await second.close()  # §5.6: the session ends when its resume window expires
        await eventually(lambda: server.server.session_count == 1, 5.0, "the expiry")
        fourth, _ = await open_session(server.url)  # room again
        assert chunks(await reply(fourth, "echo in")) == ["in"]

    async def test_an_agent_that_refuses_admission_refuses_new_sessions_only(
        self, start: StartServer, connect: Connect, open_session: OpenSession
    ) -> None:
        """§5.1 "opening | the session cannot start | error START_FAILED, close 1011":
        an agent factory's ``admit`` (the voice agent's, when its recogniser is
        saturated: issue 31.4) refuses a new session that way with its reason; the open
        session goes on, a resume is served, and once it admits again a new one opens."""
        refusal: list[str] = ["the voice agent is at capacity; try again later"]
        asked: list[int] = []

        def admit() -> str | None:
            asked.append(1)
            return refusal[0] if refusal else None

        def factory(info: SessionInfo) -> ScriptedAgent:
            return ScriptedAgent()

        factory.admit = admit  # type: ignore[attr-defined]
        server = await start(agent_factory=factory, resume_window=5.0)
        refusal.clear()
        first, first_ready = await open_session(server.url)
        refusal.append("the voice agent is at capacity; try again later")
        refused = await connect(server.url)
        await refused.send_hello()
        error = await expect_error(refused, "START_FAILED")
        assert error.message.recoverable is False
        assert "the voice agent is at capacity" in error.message.message
        assert (await refused.closed())[0] == 1011
        assert server.server.session_count == 1
        await first.close()  # the open one goes on: parked, then resumed
        session = server.server.session(first_ready.session_id)
        assert session is not None
        await eventually(lambda: session.status == "parked", what="parked")
        before = len(asked)
        again = await connect(server.url)
        await again.send_hello(sessionId=first_ready.session_id, resumeFrom=0)
        resumed = (await again.expect(Ready)).message
        assert isinstance(resumed, Ready)
        assert len(asked) == before  # a resume is never asked
        assert chunks(await reply(again, "echo back")) == ["back"]
        refusal.clear()  # the load fell
        second, _ = await open_session(server.url)
        assert chunks(await reply(second, "echo in")) == ["in"]
        assert server.server.session_count == 2

    async def test_too_deep_is_limit_exceeded_and_dropped(
        self, start: StartServer, open_session: OpenSession
    ) -> None:
        """§11: "A receiver that exceeds a limit SHOULD answer with a recoverable error"
        (messages.md: LIMIT_EXCEEDED, the message is dropped)."""
        server = await start(config=ServerConfig(limits=Limits(max_depth=8)))
        client, ready = await open_session(server.url)
        deep: Any = 0
        for _ in range(20):
            deep = [deep]
        await client.send({"v": 1, "seq": 1, "type": "context", "context": deep})
        error = await expect_error(client, "LIMIT_EXCEEDED")
        assert error.message.recoverable is True
        assert server.session(ready.session_id).incoming.last_seq == 0

    async def test_too_many_tools_is_limit_exceeded(
        self, start: StartServer, connect: Connect
    ) -> None:
        """§11: implementations bound "the number of tools in hello"."""
        server = await start(config=ServerConfig(limits=Limits(max_tools=2)))
        client = await connect(server.url)
        await client.send_hello(tools=[{"name": f"t{n}"} for n in range(3)])
        error = await expect_error(client, "LIMIT_EXCEEDED")
        assert error.seq == 0
        assert error.message.recoverable is True
        assert server.server.session_count == 0

    async def test_too_big_is_limit_exceeded(
        self, start: StartServer, open_session: OpenSession
    ) -> None:
        """§11: a bound on "the size of a control message"."""
        server = await start(
            config=ServerConfig(limits=Limits(max_frame_bytes=1024)), max_message_bytes=1 << 16
        )
        client, _ = await open_session(server.url)
        await client.send_sequenced("context", context="x" * 2000)
        await expect_error(client, "LIMIT_EXCEEDED")
        client.next_seq = 1
        assert chunks(await reply(client, "echo small")) == ["small"]

    async def test_far_beyond_the_limit_closes_1009_and_parks(
        self, start: StartServer, open_session: OpenSession
    ) -> None:
        """messages.md: "Far beyond any limit (a frame larger than the WebSocket layer
        accepts), the WebSocket closes with 1009 and the session is parked"."""
        server = await start(max_message_bytes=4096)
        client, ready = await open_session(server.url)
        await client.send_sequenced("context", context="x" * 10_000)
        assert (await client.closed())[0] == 1009
        session = server.session(ready.session_id)
        await eventually(lambda: session.status == "parked")
        _, resumed = await open_session(server.url, sessionId=ready.session_id)
        assert resumed.session_id == ready.session_id

    async def test_a_frame_refused_with_1009_is_not_acted_on(
        self, start: StartServer, open_session: OpenSession
    ) -> None:
        """§9.1 / messages.md: a frame beyond what the WebSocket layer accepts closes the
        WebSocket with 1009; like any refused input it "MUST NOT" be acted on: the
        resumed session has not handled it (resumedFrom 0) and the agent never saw it."""
        server = await start(max_message_bytes=4096)
        client, ready = await open_session(server.url)
        await client.send_sequenced("context", context="x" * 10_000)
        assert (await client.closed())[0] == 1009
        session = server.session(ready.session_id)
        await eventually(lambda: session.status == "parked")
        _, resumed = await open_session(server.url, sessionId=ready.session_id)
        assert server.agents[0].contexts == []
        assert resumed.resumed_from == 0

    async def test_messages_kept_while_opening_are_bounded(
        self, start: StartServer, connect: Connect
    ) -> None:
        """§11: bound queues; messages.md: one message beyond a limit is answered with
        LIMIT_EXCEEDED, recoverable, and dropped."""
        gate = GateAuthenticator()
        server = await start(authenticator=gate, config=ServerConfig(max_kept_while_opening=2))
        client = await connect(server.url)
        await client.send_hello()
        await gate.wait_called()
        await client.send_sequenced("context", context=1)
        await client.send_sequenced("context", context=2)
        await client.send_sequenced("context", context=3)
        error = await expect_error(client, "LIMIT_EXCEEDED")
        assert error.seq == 0
        gate.open()
        ready = await client.expect_message(Ready)
        await eventually(lambda: server.agents[0].contexts == [1, 2])
        assert server.session(ready.session_id).incoming.last_seq == 2

    async def test_pending_calls_are_bounded(
        self, start: StartServer, open_session: OpenSession
    ) -> None:
        """§11: bound "the number of queued tool calls"; a call beyond it settles FAILED
        (scripted agent contract)."""
        server = await start(config=ServerConfig(max_pending_calls=2))
        client, _ = await open_session(server.url, tools=TOOLS)
        await client.text("calls 3 add {}")
        calls = [await client.expect_message(ToolCall) for _ in range(2)]
        for call in calls:
            await answer(client, call, 1)
        items = await client.until(is_idle)
        assert not of_type(items, ToolCall)
        assert chunks(items) == ["result ok 1", "\nresult ok 1", "\nresult error FAILED"]

    async def test_a_flood_of_invalid_frames_is_rate_limited(
        self, start: StartServer, open_session: OpenSession
    ) -> None:
        """messages.md on §11: "a peer that keeps exceeding limits or floods invalid
        messages gets RATE_LIMITED and may be closed"."""
        server = await start(config=ServerConfig(max_invalid=5))
        client, _ = await open_session(server.url)
        for _ in range(6):
            await client.send("{")
        items = await client.until(lambda item: matches(item, Error) and item.seq == 6)
        errors = of_type(items, Error)
        assert [e.code for e in errors] == ["MALFORMED"] * 5 + ["RATE_LIMITED"]
        assert errors[-1].recoverable is False
        await client.closed()
