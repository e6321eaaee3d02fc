"""Every client MUST of the vRT protocol, checked on :class:`VrtClient` over real sockets
against :class:`VrtServer` with the scripted agent.

A recording proxy (``conftest.Proxy``) sits between the two: it shows the frames each
side sent on each connection, and lets a test drop, hold, inject or cut at an exact
moment. Each test is named after the section it checks and quotes the MUST.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import re
import struct
import sys
import types
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import pytest

from vrt.audio import pcm16_to_pcmu, pcmu_to_pcm16, tone
from vrt.client import (
    AudioChunk,
    AudioStarted,
    Connected,
    Disconnected,
    ErrorReceived,
    InterruptedEpoch,
    PlaybackStop,
    SessionClosed,
    SessionFailed,
    TextReceived,
    ToolError,
    ToolStreamUpdate,
    TurnChanged,
    VrtClient,
    VrtError,
    tool,
)
from vrt.client.audio import Microphone, PlaybackClock, Speaker
from vrt.protocol.errors import LocalProtocolError
from vrt.protocol.frames import FrameKind, build_frame
from vrt.protocol.messages import PCM16_24K, Format
from vrt.protocol.server import ServerConfig
from vrt.server import TokenAuthenticator

if TYPE_CHECKING:
    from conftest import (
        Action,
        ClientFactory,
        Eventually,
        Frame,
        Link,
        LiveServer,
        Proxy,
        ProxyFactory,
        Recorder,
        ServerFactory,
        ToolKit,
    )
    from vrt.client import Event

OP_TEXT = 1
OP_BINARY = 2
OP_CLOSE = 8
TOOL_STREAM = "tool-stream-v1"
MARK = b"\x7f\x00" * 8  # an output payload no server sent
PCMU = Format(encoding="pcmu", sample_rate=8000)


def is_text(text: str) -> Any:
    return lambda e: isinstance(e, TextReceived) and e.text == text


def is_idle(e: Event) -> bool:
    return isinstance(e, TurnChanged) and e.state == "idle"


def resumed(e: Event) -> bool:
    return isinstance(e, Connected) and e.resumed


async def connected(
    make_client: ClientFactory, url: str, **options: Any
) -> tuple[VrtClient, Recorder]:
    client, recorder = make_client(url, **options)
    await client.connect()
    return client, recorder


def index_of(proxy: Proxy, frame: Frame) -> int:
    return next(i for i, f in enumerate(proxy.frames) if f is frame)


# --- §5.1 / §5.2 opening ----------------------------------------------------------------


class TestSection5_1:
    async def test_5_2_first_message_is_hello(
        self, vrt: LiveServer, make_proxy: ProxyFactory, make_client: ClientFactory
    ) -> None:
        """§5.2: "The first message on a connection MUST be hello." (also after a resume)"""
        proxy = await make_proxy(vrt.url)
        client, recorder = await connected(make_client, proxy.url)
        await client.send_text("echo one")
        await recorder.next(is_idle)
        proxy.cut()
        await recorder.next(resumed)
        await client.send_text("echo two")
        await recorder.next(is_idle)
        assert len(proxy.links) == 2
        for link in (0, 1):
            first = next(f for f in proxy.frames if f.link == link and f.direction == "c2s")
            assert first.type == "hello"
            assert first.seq == 0
        resume = proxy.messages("c2s", link=1, type="hello")[0].message
        assert resume is not None
        assert resume["sessionId"] == client.session_id
        assert resume["resumeFrom"] == max(f.seq or 0 for f in proxy.messages("s2c", link=0))

    async def test_5_1_nothing_sequenced_and_no_audio_before_ready(
        self,
        vrt: LiveServer,
        make_proxy: ProxyFactory,
        make_client: ClientFactory,
        until: Eventually,
    ) -> None:
        """§5.1: "Until it has received ready on a connection, a client MUST NOT send
        sequenced messages or audio frames on it." Input given early is sent after ready."""
        proxy = await make_proxy(vrt.url)
        proxy.hold_new_links = True  # the server's ready waits in the proxy
        client, recorder = make_client(proxy.url)
        opening = asyncio.create_task(client.connect())
        await until(lambda: proxy.messages("c2s", type="hello"), "hello")
        await client.update_context({"early": True})
        await client.send_text("echo early bird")
        assert client.send_audio(bytes(960)) is False
        await asyncio.sleep(0.05)
        assert [f.type for f in proxy.frames if f.direction == "c2s"] == ["hello"]
        proxy.links[0].s2c_flowing.set()
        await opening
        await recorder.next(is_text(" bird"))

        # And again on a resumed connection, with input given while disconnected.
        proxy.cut()
        await until(lambda: len(proxy.links) == 2, "the reconnection")
        await client.send_text("echo late owl")
        assert client.send_audio(bytes(960)) is False
        await asyncio.sleep(0.05)
        assert [f.type for f in proxy.frames if f.link == 1 and f.direction == "c2s"] == ["hello"]
        proxy.links[1].s2c_flowing.set()
        await recorder.next(is_text(" owl"))
        assert client.send_audio(bytes(960)) is True

        for link in (0, 1):
            ready = proxy.messages("s2c", link=link, type="ready")[0]
            early = [
                f
                for f in proxy.frames
                if f.link == link
                and f.direction == "c2s"
                and (f.sequenced or f.opcode == OP_BINARY)
                and index_of(proxy, f) < index_of(proxy, ready)
            ]
            assert early == []
        assert vrt.agent(client.session_id).texts == ["echo early bird", "echo late owl"]


async def test_5_1_unusable_url_reported_by_connect() -> None:
    """§5.1: an error that is not recoverable is reported to the application and the
    client stops (here: a URL that cannot be connected to at all)."""
    client = VrtClient("ws://127.0.0.1:99999")
    with pytest.raises(VrtError) as failed:
        await client.connect()
    try:
        assert "99999" in str(failed.value) or "port" in str(failed.value).lower()
    finally:
        await client.close()  # must not raise


# --- §4 reliability ---------------------------------------------------------------------


class TestSection4:
    async def test_4_2_acks_sent(
        self,
        vrt: LiveServer,
        make_proxy: ProxyFactory,
        make_client: ClientFactory,
        until: Eventually,
    ) -> None:
        """§4.2: the client acknowledges what it handled, so the server can discard its
        kept messages; "upTo MUST NOT exceed the highest seq received"."""
        proxy = await make_proxy(vrt.url)
        client, recorder = await connected(make_client, proxy.url)
        await client.send_text("burst 100")
        await recorder.next(is_idle)
        session = vrt.server.session(client.session_id or "")
        assert session is not None
        await until(lambda: session.outgoing.unacked == 0, "the server's kept messages acked")
        highest = 0
        for frame in proxy.frames:
            if frame.direction == "s2c" and frame.sequenced:
                highest = max(highest, frame.seq or 0)
            elif frame.direction == "c2s" and frame.type == "ack":
                assert frame.message is not None
                assert frame.message["upTo"] <= highest
        assert proxy.messages("c2s", type="ack")

    async def test_4_3_duplicates_not_handled_again(
        self,
        vrt: LiveServer,
        make_proxy: ProxyFactory,
        make_client: ClientFactory,
    ) -> None:
        """§4.3: "if seq <= lastSeq, it is a duplicate: the receiver MUST NOT handle it
        again"."""
        proxy = await make_proxy(vrt.url)

        def duplicate(frame: Frame, link: Link) -> Action:
            if frame.direction == "s2c" and frame.type == "text":
                link.inject_after(OP_TEXT, frame.payload)
            return "forward"

        proxy.hook = duplicate
        client, recorder = await connected(make_client, proxy.url)
        await client.send_text("echo twice said")
        await recorder.next(is_idle)
        texts = [e.text for e in recorder.of(TextReceived)]
        assert texts == ["twice", " said"]

    async def test_4_4_ping_after_silence(
        self, vrt: LiveServer, make_proxy: ProxyFactory, make_client: ClientFactory
    ) -> None:
        """§4.4: "A client SHOULD send ping whenever it has sent nothing for its ping
        interval"; the pongs keep the connection alive."""
        proxy = await make_proxy(vrt.url)
        _client, recorder = await connected(make_client, proxy.url, ping_interval=0.05)
        await asyncio.sleep(0.4)
        pings = proxy.messages("c2s", type="ping")
        assert len(pings) >= 3
        assert all(f.seq == 0 for f in pings)
        assert len(proxy.messages("s2c", type="pong")) >= 2
        assert recorder.of(Disconnected) == []
        assert len(proxy.links) == 1

    async def test_4_4_dead_connection_closed(
        self,
        vrt: LiveServer,
        make_proxy: ProxyFactory,
        make_client: ClientFactory,
        until: Eventually,
    ) -> None:
        """§4.4: "A client SHOULD treat a connection on which it has received nothing for
        2.5 ping intervals as dead, close it" (close code 4000, §9.3)."""
        proxy = await make_proxy(vrt.url)
        await connected(make_client, proxy.url, ping_interval=0.1)
        proxy.links[0].frozen = True  # the server's frames vanish; no end is seen either

        def closes() -> list[Frame]:
            return [f for f in proxy.frames if f.direction == "c2s" and f.opcode == OP_CLOSE]

        try:
            await until(closes, "the client closing the dead connection")
        finally:
            proxy.cut()  # do not leave the client waiting for a close frame
        (code,) = struct.unpack("!H", closes()[0].payload[:2])
        assert code == 4000

    async def test_4_4_dead_connection_resumed(
        self, vrt: LiveServer, make_proxy: ProxyFactory, make_client: ClientFactory
    ) -> None:
        """§4.4: a dead connection is closed "and resume[d]" (§5.4)."""
        proxy = await make_proxy(vrt.url)
        client, recorder = await connected(make_client, proxy.url, ping_interval=0.1)
        proxy.links[0].frozen = True
        try:
            await recorder.next(resumed, timeout=3.0, what="a resume within 30 ping intervals")
        finally:
            proxy.cut()  # do not leave the client waiting for a close frame
        await client.send_text("echo alive")
        await recorder.next(is_text("alive"))


# --- §5.3 / §5.4 authentication and resume -------------------------------------------------


def drop_sequenced_while(flag: list[bool]) -> Any:
    """A hook dropping client sequenced messages while ``flag[0]`` is true (lost in the
    network before the server read them)."""

    def hook(frame: Frame, link: Link) -> Action:
        del link
        if flag[0] and frame.direction == "c2s" and frame.sequenced:
            return "drop"
        return "forward"

    return hook


class TestSection5_4:
    async def test_5_4_resume_resends_client_messages_after_resumed_from(
        self,
        vrt: LiveServer,
        make_proxy: ProxyFactory,
        make_client: ClientFactory,
        until: Eventually,
    ) -> None:
        """§5.4: "On a ready with resumedFrom, the client resends, in order and before any
        new sequenced message, every client sequenced message with seq > resumedFrom";
        each is handled exactly once."""
        proxy = await make_proxy(vrt.url)
        dropping = [False]
        proxy.hook = drop_sequenced_while(dropping)
        client, recorder = await connected(make_client, proxy.url)
        await client.send_text("echo before")
        await recorder.next(is_idle)
        dropping[0] = True
        await client.update_context({"v": 1})
        await client.send_text("context?")
        await until(lambda: sum(f.dropped for f in proxy.frames) == 2, "two messages lost")
        dropping[0] = False
        proxy.cut()
        await recorder.next(resumed)
        await client.send_text("echo after")
        await recorder.next(is_text('{"v":1}'))
        await recorder.next(is_text("after"))

        ready = proxy.messages("s2c", link=1, type="ready")[0].message
        assert ready is not None
        resumed_from = ready["resumedFrom"]
        sent = [f.seq for f in proxy.messages("c2s", link=1) if f.sequenced]
        assert sent == list(range(resumed_from + 1, resumed_from + 1 + len(sent)))
        dropped = [f.seq for f in proxy.frames if f.dropped]
        assert sent[: len(dropped)] == dropped
        agent = vrt.agent(client.session_id)
        assert agent.contexts == [{"v": 1}]
        assert agent.texts == ["echo before", "context?", "echo after"]

    async def test_5_4_never_replay_after_resume_failed(
        self,
        make_server: ServerFactory,
        make_proxy: ProxyFactory,
        make_client: ClientFactory,
        until: Eventually,
    ) -> None:
        """§5.4: "After RESUME_FAILED a client MUST NOT resend old sequenced messages,
        into this or any other session." §5.1: on RESUME_FAILED "stop resuming"."""
        server = await make_server(resume_window=0.1)
        proxy = await make_proxy(server.url)
        dropping = [False]
        proxy.hook = drop_sequenced_while(dropping)
        client, recorder = await connected(make_client, proxy.url)
        session_id = client.session_id
        dropping[0] = True
        await client.send_text("echo never heard")
        await until(lambda: any(f.dropped for f in proxy.frames), "the text lost")
        proxy.accepting = False  # the network is down ...
        proxy.cut()
        await until(lambda: server.server.session(session_id or "") is None, "expiry")
        await until(lambda: proxy.refused > 0, "a reconnection attempt")
        dropping[0] = False
        proxy.accepting = True  # ... and back, after the session expired
        failed = await recorder.next_of(SessionFailed)
        assert failed.code == "RESUME_FAILED"
        await recorder.next_of(SessionClosed)
        await asyncio.sleep(0.1)

        last = len(proxy.links) - 1
        assert [f.type for f in proxy.messages("c2s", link=last)] == ["hello"]
        assert proxy.audio("c2s", link=last) == []
        assert len(server.agents) == 1
        assert server.agents[0].texts == []
        assert server.server.session_count == 0
        with pytest.raises(LocalProtocolError):
            await client.send_text("echo again")  # never queued for some later session

    async def test_5_3_unauthorized_not_retried(
        self, make_server: ServerFactory, make_proxy: ProxyFactory, make_client: ClientFactory
    ) -> None:
        """§5.3: "A client whose credential cannot change SHOULD NOT reconnect after
        UNAUTHORIZED"; §5.1: a non-recoverable error is reported and the client stops."""
        server = await make_server(authenticator=TokenAuthenticator([("alice", "good")]))
        proxy = await make_proxy(server.url)
        client, recorder = make_client(proxy.url, auth="bad")
        with pytest.raises(VrtError) as refused:
            await client.connect()
        assert refused.value.code == "UNAUTHORIZED"
        assert (await recorder.next_of(SessionFailed)).code == "UNAUTHORIZED"
        await recorder.next_of(SessionClosed)
        await asyncio.sleep(0.2)
        assert len(proxy.links) == 1

    async def test_5_3_fresh_credential_retry(
        self, make_server: ServerFactory, make_proxy: ProxyFactory, make_client: ClientFactory
    ) -> None:
        """§5.3: "A client that can obtain a fresh credential MAY retry with it.\""""
        server = await make_server(authenticator=TokenAuthenticator([("alice", "good")]))
        proxy = await make_proxy(server.url)
        asked: list[int] = []

        async def fresh() -> str:
            asked.append(1)
            return "good"

        client, recorder = make_client(proxy.url, auth="bad", fresh_credential=fresh)
        ready = await client.connect()
        assert not ready.resumed
        assert asked == [1]
        hellos = [f.message for f in proxy.messages("c2s", type="hello")]
        assert [h["auth"] for h in hellos if h] == ["bad", "good"]
        await client.send_text("echo in")
        await recorder.next(is_text("in"))

    async def test_5_5_context_only_when_opening(
        self, vrt: LiveServer, make_proxy: ProxyFactory, make_client: ClientFactory
    ) -> None:
        """§5.5: "A client SHOULD send hello.context only when opening a new session";
        context messages replace it, in order."""
        proxy = await make_proxy(vrt.url)
        client, recorder = await connected(make_client, proxy.url, context={"doc": "a"})
        await client.send_text("context?")
        await recorder.next(is_text('{"doc":"a"}'))
        await client.update_context({"doc": "b"})
        proxy.cut()
        await recorder.next(resumed)
        await client.send_text("context?")
        await recorder.next(is_text('{"doc":"b"}'))
        hellos = [f.message for f in proxy.messages("c2s", type="hello")]
        assert hellos[0] is not None
        assert hellos[1] is not None
        assert hellos[0]["context"] == {"doc": "a"}
        assert "context" not in hellos[1]


class TestSection5_1Connections:
    async def test_5_1_backoff_restarts_after_a_successful_resume(
        self,
        vrt: LiveServer,
        make_proxy: ProxyFactory,
        make_client: ClientFactory,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """§5.1: on "connection lost", "reconnect with backoff, then resume": the backoff
        belongs to one outage; each lost connection after a resume starts it again."""
        delays: list[float] = []
        real_sleep = asyncio.sleep

        async def sleep(delay: float, result: Any = None) -> Any:
            caller = sys._getframe(1)
            if caller.f_globals.get("__name__") == "vrt.client.client":
                delays.append(delay)
            return await real_sleep(delay, result)

        monkeypatch.setattr(asyncio, "sleep", sleep)
        monkeypatch.setattr(random, "uniform", lambda low, high: high)
        proxy = await make_proxy(vrt.url)
        client, recorder = await connected(
            make_client, proxy.url, backoff_initial=0.01, backoff_max=10.0
        )
        for round in range(5):
            proxy.cut()
            await recorder.next(resumed)
            await client.send_text(f"echo round{round}")
            await recorder.next(is_text(f"round{round}"))
        assert delays == [0.01] * 5

    async def test_5_6_close_is_a_normal_closure(
        self, vrt: LiveServer, make_proxy: ProxyFactory, make_client: ClientFactory
    ) -> None:
        """§5.6: "A client that is done simply closes its connection (code 1000)"."""
        proxy = await make_proxy(vrt.url)
        client, _recorder = await connected(make_client, proxy.url)
        await client.close()
        await asyncio.sleep(0.05)
        closes = [f for f in proxy.frames if f.direction == "c2s" and f.opcode == OP_CLOSE]
        assert [struct.unpack("!H", f.payload[:2])[0] for f in closes] == [1000]
        assert len(proxy.links) == 1  # and it does not come back

    async def test_5_6_close_ends_the_event_stream(
        self, vrt: LiveServer, make_client: ClientFactory
    ) -> None:
        """After close(), the events end with SessionClosed."""
        client = VrtClient(vrt.url)
        await client.connect()
        await client.close()
        seen = [event async for event in _events_until_quiet(client)]
        assert isinstance(seen[-1], SessionClosed)


async def _events_until_quiet(client: VrtClient) -> AsyncIterator[Event]:
    with contextlib.suppress(TimeoutError):
        while True:
            event = await client.next_event(0.5)
            yield event
            if isinstance(event, SessionClosed):
                return


# --- §6.2 interruption and the epoch gate ---------------------------------------------------


async def three_calls_one_running(
    client: VrtClient, recorder: Recorder, kit: ToolKit, proxy: Proxy, until: Eventually
) -> list[str]:
    """``calls 3 block {}``: the first call runs, two wait behind it. Returns the ids."""
    await client.send_text("calls 3 block {}")
    await asyncio.wait_for(kit.blocking.wait(), 5)
    await until(lambda: len(proxy.tool_calls()) == 3, "three tool.call")
    last = max(f.seq or 0 for f in proxy.messages("s2c", type="tool.call"))
    await until(lambda: client.core.incoming.last_seq >= last, "the calls handled")
    return proxy.tool_calls()


class TestSection6_2:
    async def test_6_2_local_interrupt(
        self,
        vrt: LiveServer,
        make_proxy: ProxyFactory,
        make_client: ClientFactory,
        kit: ToolKit,
        until: Eventually,
    ) -> None:
        """§6.2: "the client MUST, before it sends anything and without waiting for the
        server: raise its closed epoch to its observed epoch; stop playback ...; signal
        cancellation to a running tool call whose epoch is now closed; answer every queued
        tool call of a closed epoch with INTERRUPTED, without running it; and then send
        interrupt"."""
        proxy = await make_proxy(vrt.url)
        client, recorder = await connected(make_client, proxy.url, tools=kit.tools)
        seen_at_interrupt: list[int | None] = []

        def watch(frame: Frame, link: Link) -> Action:
            del link
            if frame.direction == "c2s" and frame.type == "interrupt":
                seen_at_interrupt.append(client.core.closed_epoch)
            return "forward"

        proxy.hook = watch
        calls = await three_calls_one_running(client, recorder, kit, proxy, until)
        observed = client.core.observed_epoch
        closed = await client.interrupt("keyboard")
        assert closed == observed
        assert client.core.closed_epoch == observed  # at once, before any answer
        stop = await recorder.next_of(PlaybackStop)
        interrupted = await recorder.next_of(InterruptedEpoch)
        assert stop.epoch == closed
        assert interrupted == InterruptedEpoch(epoch=closed, local=True)

        await until(lambda: len(proxy.messages("c2s", type="interrupt")) == 1, "interrupt")
        assert seen_at_interrupt == [closed]
        message = proxy.messages("c2s", type="interrupt")[0].message
        assert message is not None
        assert (message["epoch"], message["reason"]) == (closed, "keyboard")
        results = proxy.tool_results()
        assert sorted(results) == sorted(calls)
        for call_id in calls:
            (result,) = results[call_id]
            assert (result["ok"], result["code"]) == (False, "INTERRUPTED")
            assert result["seq"] < message["seq"]  # answered before interrupt was sent
        await until(lambda: calls[0] in kit.cancelled, "the running tool cancelled")
        assert kit.cancelled == {calls[0]: True}  # asyncio cancellation and the token
        assert kit.started == [calls[0]]  # the queued calls never ran

    async def test_6_2_server_interrupted_handled_the_same(
        self,
        vrt: LiveServer,
        make_proxy: ProxyFactory,
        make_client: ClientFactory,
        kit: ToolKit,
        until: Eventually,
    ) -> None:
        """§6.2: "On interrupted, a client raises its closed epoch to the message's epoch,
        with the same local effects as above" (here caused by new text, §6.3)."""
        proxy = await make_proxy(vrt.url)
        client, recorder = await connected(make_client, proxy.url, tools=kit.tools)
        calls = await three_calls_one_running(client, recorder, kit, proxy, until)
        epoch = client.core.observed_epoch
        await client.send_text("echo barge in")
        interrupted = await recorder.next_of(InterruptedEpoch)
        assert interrupted == InterruptedEpoch(epoch=epoch, local=False)
        assert any(isinstance(e, PlaybackStop) and e.epoch == epoch for e in recorder.events)
        await recorder.next(is_text(" in"))
        assert client.core.closed_epoch == epoch
        await until(lambda: len(proxy.tool_results()) == 3, "three results")
        for results in proxy.tool_results().values():
            assert [(r["ok"], r["code"]) for r in results] == [(False, "INTERRUPTED")]
        await until(lambda: calls[0] in kit.cancelled, "the running tool cancelled")
        assert kit.cancelled == {calls[0]: True}
        assert kit.started == [calls[0]]

    async def test_6_2_gate_audio_of_closed_epoch_never_delivered(
        self,
        vrt: LiveServer,
        make_proxy: ProxyFactory,
        make_client: ClientFactory,
        until: Eventually,
    ) -> None:
        """§6.2: "A client MUST NOT play output audio of a closed epoch"; §8.3 it
        discards frames whose item's epoch is closed. Frames already on their way (held
        in the proxy while the client interrupts) never become AudioChunk."""
        proxy = await make_proxy(vrt.url)
        client, recorder = await connected(make_client, proxy.url)
        await client.send_text("speak 2000")
        await recorder.next_of(AudioChunk)
        link = proxy.links[0]
        link.s2c_flowing.clear()
        await asyncio.sleep(0.1)  # ~5 more frames wait in the proxy
        held_from = len(proxy.frames)
        await client.interrupt("user")
        link.s2c_flowing.set()
        await until(lambda: proxy.messages("s2c", type="interrupted"), "the server's interrupted")
        done = proxy.messages("s2c", type="interrupted")[0].seq or 0
        await until(lambda: client.core.incoming.last_seq >= done, "everything handled")
        late = [f for f in proxy.frames[held_from:] if f.direction == "s2c"]
        assert any(f.opcode == OP_BINARY for f in late)  # the gate was exercised
        position = next(i for i, e in enumerate(recorder.events) if isinstance(e, InterruptedEpoch))
        assert not [e for e in recorder.events[position:] if isinstance(e, AudioChunk)]


# --- §7 tools ------------------------------------------------------------------------------


class TestSection7:
    async def test_7_1_one_at_a_time_in_order(
        self,
        vrt: LiveServer,
        make_proxy: ProxyFactory,
        make_client: ClientFactory,
        kit: ToolKit,
    ) -> None:
        """§7.1: "A client MUST run calls one at a time, in the order received: a call
        starts only after the previous call has its result.\""""
        proxy = await make_proxy(vrt.url)
        client, recorder = await connected(make_client, proxy.url, tools=kit.tools)
        await client.send_text('calls 4 slow {"ms": 15}')
        await recorder.next(is_idle)
        texts = [e.text for e in recorder.of(TextReceived)]
        assert "".join(texts) == "\n".join(["result ok 15"] * 4)
        assert kit.max_active == 1
        assert kit.started == proxy.tool_calls()
        assert kit.finished == kit.started
        # Each result was on the wire before the next call started: the results'
        # seqs follow the calls' order.
        results = proxy.tool_results()
        seqs = [results[c][0]["seq"] for c in proxy.tool_calls()]
        assert seqs == sorted(seqs)

    async def test_7_2_exactly_one_result_per_call(
        self,
        vrt: LiveServer,
        make_proxy: ProxyFactory,
        make_client: ClientFactory,
        kit: ToolKit,
    ) -> None:
        """§7.2: "A client MUST answer every tool.call with exactly one tool.result
        carrying the same callId and epoch\""""
        proxy = await make_proxy(vrt.url)
        client, recorder = await connected(make_client, proxy.url, tools=kit.tools)
        await client.send_text('calls 5 add {"a": 1, "b": 2}')
        await recorder.next(is_idle)
        reply = "".join(e.text for e in recorder.of(TextReceived))
        assert reply == "\n".join(["result ok 3.0"] * 5)
        calls = {
            f.message["callId"]: f.message
            for f in proxy.messages("s2c", type="tool.call")
            if f.message
        }
        results = proxy.tool_results()
        assert set(results) == set(calls)
        for call_id, answers in results.items():
            (answer,) = answers
            assert answer["epoch"] == calls[call_id]["epoch"]
            assert (answer["ok"], answer["output"]) == (True, 3.0)
        settled = vrt.agent(client.session_id).settled
        assert sorted(s.call_id for s in settled) == sorted(calls)

    async def test_7_1_invalid_arguments(
        self,
        vrt: LiveServer,
        make_proxy: ProxyFactory,
        make_client: ClientFactory,
        kit: ToolKit,
    ) -> None:
        """§7.1: "A client SHOULD validate [arguments] against the tool's declared
        parameters and answer INVALID when it does not match." The tool does not run."""
        proxy = await make_proxy(vrt.url)
        client, recorder = await connected(make_client, proxy.url, tools=kit.tools)
        await client.send_text('call add {"a": "x"}')
        await recorder.next(is_text("result error INVALID"))
        assert kit.started == []
        ((result,),) = proxy.tool_results().values()
        assert (result["ok"], result["code"]) == (False, "INVALID")
        assert isinstance(result["message"], str)

    async def test_7_2_unknown_tool_failed(
        self,
        vrt: LiveServer,
        make_proxy: ProxyFactory,
        make_client: ClientFactory,
        kit: ToolKit,
    ) -> None:
        """§7.2: exactly one result "including calls it did not run (... unknown tool)";
        §7.3: FAILED when "the client does not host a tool of that name"."""
        proxy = await make_proxy(vrt.url)
        client, recorder = await connected(make_client, proxy.url, tools=kit.tools)
        session = vrt.server.session(client.session_id or "")
        assert session is not None
        session.record.tool_names |= {"ghost"}  # the server believes in it
        await client.send_text("call ghost {}")
        await recorder.next(is_text("result error FAILED"))
        assert len(proxy.tool_calls()) == 1  # the server did call it
        ((result,),) = proxy.tool_results().values()
        assert (result["ok"], result["code"]) == (False, "FAILED")
        assert kit.started == []

    async def test_7_2_result_shapes(
        self, vrt: LiveServer, make_proxy: ProxyFactory, make_client: ClientFactory
    ) -> None:
        """§7.2: "{ ok: true, output }, where a tool that returned nothing has output
        null, or { ok: false, code, message }" (ToolError picks the code, §7.3)."""

        @tool
        def nothing() -> None:
            """Return nothing."""

        @tool
        def refuse() -> None:
            """Decline."""
            raise ToolError("REJECTED", "the user said no")

        @tool
        def crash() -> None:
            """Fail."""
            raise ValueError("boom")

        proxy = await make_proxy(vrt.url)
        client, recorder = await connected(make_client, proxy.url, tools=[nothing, refuse, crash])
        for name, reply in [
            ("nothing", "result ok null"),
            ("refuse", "result error REJECTED"),
            ("crash", "result error FAILED"),
        ]:
            await client.send_text(f"call {name} {{}}")
            await recorder.next(is_text(reply))
        answers = [r[0] for r in proxy.tool_results().values()]
        assert [(a["ok"], a.get("output"), a.get("code")) for a in answers] == [
            (True, None, None),
            (False, None, "REJECTED"),
            (False, None, "FAILED"),
        ]
        assert "output" in answers[0]
        assert answers[1]["message"] == "the user said no"

    async def test_7_1_calls_after_an_interrupted_call_still_run(
        self,
        make_server: ServerFactory,
        make_proxy: ProxyFactory,
        make_client: ClientFactory,
        kit: ToolKit,
        until: Eventually,
    ) -> None:
        """§7.1 and §7.2: after an interrupted call has its (INTERRUPTED) result, the next
        call starts; "A client MUST answer every tool.call with exactly one tool.result"."""
        server = await make_server(config=ServerConfig(tool_timeout=0.5))
        proxy = await make_proxy(server.url)
        client, recorder = await connected(make_client, proxy.url, tools=kit.tools)
        await client.send_text("call block {}")
        await asyncio.wait_for(kit.blocking.wait(), 5)
        await client.interrupt("keyboard")
        await client.send_text('call add {"a": 1, "b": 2}')
        reply = await recorder.next_of(TextReceived)
        assert reply.text == "result ok 3.0"

    async def test_7_5_local_close_cancels_unterminated_calls(
        self,
        vrt: LiveServer,
        make_proxy: ProxyFactory,
        make_client: ClientFactory,
        kit: ToolKit,
        until: Eventually,
    ) -> None:
        """§7.5: "A client SHOULD discard tool.stream messages of closed epochs. When it
        closes an epoch locally (§6.2), it SHOULD treat every call of that epoch that has
        not reached a terminal phase as cancelled at once, and ignore the server's later
        terminal message for it.\""""
        proxy = await make_proxy(vrt.url)
        client, recorder = await connected(
            make_client, proxy.url, tools=kit.tools, capabilities=[TOOL_STREAM]
        )
        calls = await three_calls_one_running(client, recorder, kit, proxy, until)
        start = len(recorder.events)
        await client.interrupt("keyboard")
        await recorder.next_of(InterruptedEpoch)
        local = [e for e in recorder.events[start:] if isinstance(e, ToolStreamUpdate)]
        assert sorted(e.call_id for e in local) == sorted(calls)
        assert {(e.phase, e.message) for e in local} == {("cancelled", None)}

        def server_terminal() -> list[Frame]:
            # The client's INTERRUPTED results reach the server before its interrupt,
            # so the server settles these calls (messages.md), then closes the epoch.
            return [
                f
                for f in proxy.messages("s2c", type="tool.stream")
                if f.message and f.message["phase"] in ("settled", "cancelled", "failed")
            ]

        await until(lambda: len(server_terminal()) == 3, "the server's terminal phases")
        last = max(f.seq or 0 for f in server_terminal())
        await until(lambda: client.core.incoming.last_seq >= last, "them handled")
        updates = [e for e in recorder.events[start:] if isinstance(e, ToolStreamUpdate)]
        assert updates == local  # nothing after the local terminal phase

    async def test_7_5_closed_epoch_streams_discarded(
        self,
        vrt: LiveServer,
        make_proxy: ProxyFactory,
        make_client: ClientFactory,
        until: Eventually,
    ) -> None:
        """§7.5: "A client SHOULD discard tool.stream messages of closed epochs": progress
        of a server tool still in flight after the interrupt is not shown."""
        proxy = await make_proxy(vrt.url)
        client, recorder = await connected(make_client, proxy.url, capabilities=[TOOL_STREAM])
        await client.send_text("server-tool 3000")
        first = await recorder.next(
            lambda e: isinstance(e, ToolStreamUpdate) and e.phase == "progress"
        )
        assert isinstance(first, ToolStreamUpdate)
        link = proxy.links[0]
        link.s2c_flowing.clear()
        await asyncio.sleep(0.25)  # more progress waits in the proxy
        mark = len(recorder.events)
        await client.interrupt("user")
        link.s2c_flowing.set()
        await until(lambda: proxy.messages("s2c", type="interrupted"), "interrupted")
        done = proxy.messages("s2c", type="interrupted")[0].seq or 0
        await until(lambda: client.core.incoming.last_seq >= done, "everything handled")
        updates = [e for e in recorder.events[mark:] if isinstance(e, ToolStreamUpdate)]
        assert [(e.call_id, e.phase) for e in updates] == [(first.call_id, "cancelled")]
        progress_after = [
            f
            for f in proxy.messages("s2c", type="tool.stream")
            if f.message and f.message["phase"] == "progress"
        ]
        assert len(progress_after) > 1  # more progress did arrive, and was discarded


# --- §8 audio ------------------------------------------------------------------------------


class TestSection8:
    async def test_8_3_frames_before_audio_start_discarded(
        self, vrt: LiveServer, make_proxy: ProxyFactory, make_client: ClientFactory
    ) -> None:
        """§8.3: "A client discards output frames that arrive before any audio.start"."""
        proxy = await make_proxy(vrt.url)

        def inject(frame: Frame, link: Link) -> Action:
            if frame.type == "ready":
                link.inject_after(OP_BINARY, build_frame(FrameKind.OUTPUT, 0, MARK))
            return "forward"

        proxy.hook = inject
        client, recorder = await connected(make_client, proxy.url)
        await client.send_text("echo tone")
        await recorder.next(is_idle)
        chunks = recorder.of(AudioChunk)
        (started,) = recorder.of(AudioStarted)
        assert len(chunks) == 10
        assert {c.item_id for c in chunks} == {started.item_id}
        assert MARK not in [c.payload for c in chunks]

    async def test_8_3_resumed_connection_has_no_current_item(
        self, vrt: LiveServer, make_proxy: ProxyFactory, make_client: ClientFactory
    ) -> None:
        """§8.3: "a resumed connection starts without a current item; further output audio
        follows a new audio.start": frames before it are discarded."""
        proxy = await make_proxy(vrt.url)
        client, recorder = await connected(make_client, proxy.url)
        await client.send_text("speak 400")
        await recorder.next_of(AudioChunk)

        def inject(frame: Frame, link: Link) -> Action:
            if frame.type == "ready":
                link.inject_after(OP_BINARY, build_frame(FrameKind.OUTPUT, 0, MARK))
            return "forward"

        proxy.hook = inject
        proxy.cut()
        await recorder.next(resumed)
        await recorder.next(is_idle)
        assert MARK not in [c.payload for c in recorder.of(AudioChunk)]
        announced = proxy.messages("s2c", link=1, type="audio.start")
        assert announced  # the server went on with the item after a new audio.start

    async def test_8_4_playback_capped_at_received_audio(
        self, vrt: LiveServer, make_proxy: ProxyFactory, make_client: ClientFactory
    ) -> None:
        """§8.4: playback reports "the milliseconds of that item actually played": never
        more than the client received of it."""
        proxy = await make_proxy(vrt.url)
        client, recorder = await connected(make_client, proxy.url)
        await client.send_text("echo hi")
        await recorder.next(is_idle)
        (item,) = recorder.of(AudioStarted)
        assert await client.playback(item.item_id, 10_000) == 200
        assert await client.playback(item.item_id, 120.7) == 120
        assert await client.playback("i_unknown", 50) == 0
        await client.send_text("echo sync")
        await recorder.next(is_text("sync"))
        reports = [f.message for f in proxy.messages("c2s", type="playback") if f.message]
        assert [(r["itemId"], r["playedMs"]) for r in reports] == [
            (item.item_id, 200),
            (item.item_id, 120),
            ("i_unknown", 0),
        ]
        assert vrt.agent(client.session_id).playback[item.item_id].played_ms == 120


class TestPlaybackClock:
    """§8.4 with a real-time player: what :class:`PlaybackClock` reports."""

    def test_played_is_capped_by_received_and_time(self) -> None:
        clock = PlaybackClock()
        clock.received("a", 100)
        assert clock.played_ms("a", 5.0) == 0  # not started
        clock.started("a", 10.0)
        assert clock.played_ms("a", 10.05) == 50
        assert clock.played_ms("a", 11.0) == 100  # never beyond what was received
        clock.received("a", 60)
        assert clock.played_ms("a", 11.0) == 160
        assert clock.played_ms("unknown", 11.0) == 0

    def test_stop_reports_items_cut_short(self) -> None:
        clock = PlaybackClock()
        clock.received("done", 40)
        clock.started("done", 0.0)
        clock.received("cut", 200)
        clock.started("cut", 0.04)
        clock.received("queued", 200)
        assert clock.stop(0.1) == [("cut", 60)]  # "done" played whole, "queued" never
        assert clock.stop(0.2) == []  # stopped: nothing plays any more
        assert clock.played_ms("cut", 1.0) == 0


class FakeStream:
    """A stand-in for sounddevice's raw streams: keeps its arguments."""

    def __init__(self, **options: Any) -> None:
        self.options = options
        self.running = False

    def start(self) -> None:
        self.running = True

    def stop(self) -> None:
        self.running = False

    def close(self) -> None:
        self.running = False


class TestAudioDevices:
    """The sounddevice wrappers, with a fake sounddevice (no sound card in CI)."""

    @pytest.fixture
    def fake_sounddevice(self, monkeypatch: pytest.MonkeyPatch) -> None:
        module = types.ModuleType("sounddevice")
        module.RawOutputStream = FakeStream  # type: ignore[attr-defined]
        module.RawInputStream = FakeStream  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, "sounddevice", module)

    async def test_missing_sounddevice_names_the_extra(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setitem(sys.modules, "sounddevice", None)  # import fails
        with pytest.raises(RuntimeError, match=re.escape("pip install 'vrealtime[audio]'")):
            Speaker(PCM16_24K)
        with pytest.raises(RuntimeError, match=re.escape("pip install 'vrealtime[audio]'")):
            Microphone(PCM16_24K, print)

    @pytest.mark.usefixtures("fake_sounddevice")
    def test_speaker_plays_pcmu_as_pcm16_and_keeps_the_clock(self) -> None:
        clock = PlaybackClock()
        speaker = Speaker(PCMU, clock)
        stream = speaker._stream
        assert stream.options["samplerate"] == 8000
        payload = tone(20, PCMU)
        speaker.play("i1", payload, now=5.0)
        speaker.play("i1", payload, now=5.0)
        out = bytearray(320 * 2)  # 40 ms of pcm16 at 8 kHz
        stream.options["callback"](out, 320, None, None)
        assert bytes(out) == pcmu_to_pcm16(payload) * 2
        assert clock.played_ms("i1", 5.03) == 30
        speaker.play("i2", payload, now=6.0)
        speaker.stop()  # §8.4: buffered audio is dropped
        stream.options["callback"](out, 320, None, None)
        assert bytes(out) == bytes(640)
        speaker.close()
        assert not stream.running

    @pytest.mark.usefixtures("fake_sounddevice")
    async def test_microphone_sends_20_ms_frames_in_the_input_format(self) -> None:
        frames: list[bytes] = []
        microphone = Microphone(PCMU, frames.append)
        stream = microphone._stream
        assert stream.options["blocksize"] == 160  # 20 ms at 8 kHz
        pcm16 = pcmu_to_pcm16(tone(20, PCMU))
        stream.options["callback"](pcm16, 160, None, None)
        await asyncio.sleep(0)
        assert frames == [pcm16_to_pcmu(pcm16)]
        microphone.close()


# --- §9.1 ----------------------------------------------------------------------------------


async def test_9_1_invalid_server_message_reported_and_ignored(
    vrt: LiveServer, make_proxy: ProxyFactory, make_client: ClientFactory
) -> None:
    """§9.1: "A receiver MUST NOT act on an invalid message and MUST NOT crash or stall
    because of one ... A client reports it to the application and continues.\""""
    proxy = await make_proxy(vrt.url)

    def inject(frame: Frame, link: Link) -> Action:
        if frame.type == "ready":
            bogus = {"v": 1, "seq": 0, "type": "toString"}
            link.inject_after(OP_TEXT, json.dumps(bogus).encode())
            link.inject_after(OP_TEXT, b"not json")
        return "forward"

    proxy.hook = inject
    client, recorder = await connected(make_client, proxy.url)
    first = await recorder.next_of(ErrorReceived)
    second = await recorder.next_of(ErrorReceived)
    assert (first.code, first.recoverable) == ("UNKNOWN_TYPE", True)
    assert (second.code, second.recoverable) == ("MALFORMED", True)
    await client.send_text("echo still here")
    await recorder.next(is_text(" here"))
