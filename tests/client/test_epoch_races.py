"""The epoch gate's races (§6.2, §7.2, §5.4), on :class:`VrtClient` over real sockets.

The gate: "A client MUST NOT start a tool call whose epoch is closed. It MUST answer it
with tool.result { ok: false, code: "INTERRUPTED" }. This applies to calls already
queued, calls that arrive later and calls resent after a resume." And §7.2: "exactly
one tool.result" per call, whichever side of the race it lands on.

Each case uses a fresh client; the proxy of ``conftest`` places a cut, a hold or an
interrupt at the exact frame where the race is.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from typing import TYPE_CHECKING, Any

import pytest

from vrt.client import (
    Connected,
    InterruptedEpoch,
    TextReceived,
    ToolContext,
    ToolStreamUpdate,
    TurnChanged,
    tool,
)

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
        ToolKit,
    )
    from vrt.client import Event, VrtClient

OP_TEXT = 1
TOOL_STREAM = "tool-stream-v1"


def is_idle(e: Event) -> bool:
    return isinstance(e, TurnChanged) and e.state == "idle"


def resumed(e: Event) -> bool:
    return isinstance(e, Connected) and e.resumed


def assert_one_result_each(proxy: Proxy, server: LiveServer, client: VrtClient) -> None:
    """§7.2 on the wire (one distinct tool.result per tool.call) and on the server (each
    call settled once)."""
    calls = proxy.tool_calls()
    results = proxy.tool_results()
    assert sorted(results) == sorted(calls)
    assert all(len(answers) == 1 for answers in results.values()), results
    settled = Counter(s.call_id for s in server.agent(client.session_id).settled)
    assert set(settled) == set(calls)
    assert set(settled.values()) == {1}


async def everything_handled(proxy: Proxy, client: VrtClient, until: Eventually) -> None:
    """Wait until the client handled every sequenced message the server sent so far,
    and the server holds nothing unacknowledged from the client."""
    last = max((f.seq or 0 for f in proxy.messages("s2c") if f.sequenced), default=0)
    await until(lambda: client.core.incoming.last_seq >= last, "the server's messages")
    await until(lambda: client.core.outgoing.unacked == 0, "the client's messages acked")


class TestInterruptWhileCallRuns:
    @pytest.mark.parametrize("finished_before", [0, 1, 2, 3])
    async def test_6_2_interrupt_after_k_calls(
        self,
        finished_before: int,
        vrt: LiveServer,
        make_proxy: ProxyFactory,
        make_client: ClientFactory,
        kit: ToolKit,
        until: Eventually,
    ) -> None:
        """§6.2: calls that finished keep their result; the running one is cancelled
        and answered INTERRUPTED; the queued ones are answered INTERRUPTED "without
        running it"."""
        proxy = await make_proxy(vrt.url)
        client, _recorder = make_client(proxy.url, tools=kit.tools)
        await client.connect()
        await client.send_text('calls 4 slow {"ms": 40}')
        await until(lambda: len(kit.finished) >= finished_before, "calls finished")
        await until(lambda: len(kit.started) > finished_before, "the next call running")
        await client.interrupt("user")
        await everything_handled(proxy, client, until)

        calls = proxy.tool_calls()
        results = proxy.tool_results()
        codes = [results[c][0].get("code") for c in calls]
        done = kit.finished[:]
        assert calls[: len(done)] == done
        assert codes == [None] * len(done) + ["INTERRUPTED"] * (4 - len(done))
        running = calls[len(done)]
        if running in kit.started and running not in kit.finished:
            assert kit.cancelled == {running: True}
        assert set(kit.started) <= set(calls[: len(done) + 1])
        assert max(kit.runs.values()) == 1
        assert_one_result_each(proxy, vrt, client)

    async def test_6_2_calls_arriving_after_the_interrupt(
        self,
        vrt: LiveServer,
        make_proxy: ProxyFactory,
        make_client: ClientFactory,
        kit: ToolKit,
        until: Eventually,
    ) -> None:
        """§6.2: calls of a closed epoch that "arrive later" are answered INTERRUPTED and
        never run; their tool.stream phases are not shown (§7.5)."""
        proxy = await make_proxy(vrt.url)

        def hold_after_acting(frame: Frame, link: Link) -> Action:
            message = frame.message or {}
            if message.get("type") == "turn.state" and message.get("state") == "acting":
                link.s2c_flowing.clear()  # the calls themselves wait in the proxy
            return "forward"

        proxy.hook = hold_after_acting
        client, recorder = make_client(proxy.url, tools=kit.tools, capabilities=[TOOL_STREAM])
        await client.connect()
        await client.send_text("calls 3 add {}")
        await recorder.next(lambda e: isinstance(e, TurnChanged) and e.state == "acting")
        closed = await client.interrupt("keyboard")
        assert closed == client.core.observed_epoch
        assert await recorder.next_of(InterruptedEpoch) == InterruptedEpoch(
            epoch=closed, local=True
        )
        mark = len(recorder.events)
        proxy.links[0].s2c_flowing.set()
        await until(lambda: len(proxy.tool_calls()) == 3, "the late calls")
        await everything_handled(proxy, client, until)

        assert kit.started == []
        for answers in proxy.tool_results().values():
            assert [(a["ok"], a["code"], a["epoch"]) for a in answers] == [
                (False, "INTERRUPTED", closed)
            ]
        assert_one_result_each(proxy, vrt, client)
        late = recorder.events[mark:]
        assert not [e for e in late if isinstance(e, ToolStreamUpdate)]
        assert not [e for e in late if isinstance(e, InterruptedEpoch)]


def cut_at(direction: str, kind: str, action: Action) -> Any:
    """A hook doing ``action`` on the first ``kind`` message going ``direction``."""
    done: list[bool] = []

    def hook(frame: Frame, link: Link) -> Action:
        del link
        if not done and frame.direction == direction and frame.type == kind:
            done.append(True)
            return action
        return "forward"

    return hook


def duplicate_call(frame: Frame, link: Link) -> Action:
    """Send every tool.call to the client twice (as a confused network might)."""
    if frame.direction == "s2c" and frame.type == "tool.call":
        link.inject_after(OP_TEXT, frame.payload)
    return "forward"


class TestResentCalls:
    @pytest.mark.parametrize(
        ("name", "hook"),
        [
            ("call delivered, then cut", cut_at("s2c", "tool.call", "forward+cut")),
            ("call lost in the cut", cut_at("s2c", "tool.call", "drop+cut")),
            ("result lost in the cut", cut_at("c2s", "tool.result", "drop+cut")),
            ("result delivered, ack lost", cut_at("c2s", "tool.result", "forward+cut")),
            ("call delivered twice", duplicate_call),
        ],
    )
    async def test_5_4_call_never_runs_twice(
        self,
        name: str,
        hook: Any,
        vrt: LiveServer,
        make_proxy: ProxyFactory,
        make_client: ClientFactory,
        kit: ToolKit,
        until: Eventually,
    ) -> None:
        """§5.4: "Duplicates that both sides resend are discarded by §4.3, so each
        sequenced message is handled exactly once": a call interrupted by a lost
        connection runs once and has one result."""
        proxy = await make_proxy(vrt.url)
        proxy.hook = hook
        client, recorder = make_client(proxy.url, tools=kit.tools)
        await client.connect()
        await client.send_text('call slow {"ms": 30}')
        reply = await recorder.next_of(TextReceived)
        assert reply.text == "result ok 30", name
        await recorder.next(is_idle)
        await everything_handled(proxy, client, until)
        assert list(kit.runs.values()) == [1]
        assert_one_result_each(proxy, vrt, client)
        if "cut" in name:
            assert len(proxy.links) == 2


class TestFinishedAsInterrupted:
    async def test_7_2_tool_interrupts_just_before_returning(
        self,
        vrt: LiveServer,
        make_proxy: ProxyFactory,
        make_client: ClientFactory,
        until: Eventually,
    ) -> None:
        """§7.2: the epoch closed while the call ran (its outcome is not yet reported):
        one result, INTERRUPTED; "a later outcome of that call is then discarded"."""
        holder: list[VrtClient] = []
        ran: list[str] = []

        @tool
        async def last_word(context: ToolContext) -> str:
            """Interrupt the turn, then return."""
            ran.append(context.call_id)
            await holder[0].interrupt("user")
            return "too late"

        proxy = await make_proxy(vrt.url)
        client, recorder = make_client(proxy.url, tools=[last_word])
        holder.append(client)
        await client.connect()
        await client.send_text("call last_word {}")
        await recorder.next_of(InterruptedEpoch)
        await until(proxy.tool_results, "the result")
        await everything_handled(proxy, client, until)
        ((answer,),) = proxy.tool_results().values()
        assert (answer["ok"], answer["code"]) == (False, "INTERRUPTED")
        assert len(ran) == 1
        assert_one_result_each(proxy, vrt, client)

    async def test_7_2_sync_tool_done_as_interrupt_arrives(
        self,
        vrt: LiveServer,
        make_proxy: ProxyFactory,
        make_client: ClientFactory,
        until: Eventually,
    ) -> None:
        """§7.2: a tool (in a thread) completes at the moment the user interrupts: the
        result is the tool's or INTERRUPTED, never both."""
        returning = threading.Event()

        @tool
        def quick() -> int:
            """Return at once."""
            returning.set()
            return 7

        async def once() -> str:
            returning.clear()
            proxy = await make_proxy(vrt.url)
            client, _ = make_client(proxy.url, tools=[quick])
            await client.connect()
            await client.send_text("call quick {}")
            await asyncio.get_running_loop().run_in_executor(None, returning.wait, 5)
            await client.interrupt("user")
            await until(proxy.tool_results, "the result")
            await everything_handled(proxy, client, until)
            ((answer,),) = proxy.tool_results().values()
            assert_one_result_each(proxy, vrt, client)
            await client.close()
            return "ok" if answer["ok"] else str(answer["code"])

        outcomes = {await once() for _ in range(8)}
        assert outcomes <= {"ok", "INTERRUPTED"}

    async def test_7_2_result_sent_then_interrupt(
        self,
        vrt: LiveServer,
        make_proxy: ProxyFactory,
        make_client: ClientFactory,
        kit: ToolKit,
        until: Eventually,
    ) -> None:
        """§7.2: the result left before the user interrupted: it stands, and the
        interrupt adds no second result."""
        proxy = await make_proxy(vrt.url)
        holder: list[VrtClient] = []
        interrupting: list[asyncio.Task[int]] = []

        def interrupt_on_result(frame: Frame, link: Link) -> Action:
            del link
            if frame.direction == "c2s" and frame.type == "tool.result" and not interrupting:
                interrupting.append(asyncio.create_task(holder[0].interrupt("user")))
            return "forward"

        proxy.hook = interrupt_on_result
        client, _recorder = make_client(proxy.url, tools=kit.tools)
        holder.append(client)
        await client.connect()
        await client.send_text('call add {"a": 2, "b": 2}')
        await until(lambda: interrupting, "the result on the wire")
        await interrupting[0]
        await everything_handled(proxy, client, until)
        ((answer,),) = proxy.tool_results().values()
        assert (answer["ok"], answer["output"]) == (True, 4.0)
        assert_one_result_each(proxy, vrt, client)

    async def test_6_3_result_crosses_server_interrupted(
        self,
        vrt: LiveServer,
        make_proxy: ProxyFactory,
        make_client: ClientFactory,
        until: Eventually,
    ) -> None:
        """§6.2/§7.2: the tool's result and the server's ``interrupted`` (caused by new
        text, §6.3) cross on the wire: the server ignores the late result ("A server
        MUST ignore a tool.result whose callId is ... already settled"), and the client
        sent exactly one."""
        holder: list[VrtClient] = []

        @tool
        async def barge(context: ToolContext) -> str:
            """Send new text while running, then finish."""
            await holder[0].send_text("echo new turn")
            return context.call_id

        proxy = await make_proxy(vrt.url)
        client, recorder = make_client(proxy.url, tools=[barge])
        holder.append(client)
        await client.connect()
        await client.send_text("call barge {}")
        await recorder.next(lambda e: isinstance(e, TextReceived) and e.text == " turn")
        await recorder.next(is_idle)
        await everything_handled(proxy, client, until)
        ((answer,),) = proxy.tool_results().values()
        assert answer["ok"] is True
        (settled,) = vrt.agent(client.session_id).settled
        assert settled.code == "INTERRUPTED"  # the server settled first
        assert_one_result_each(proxy, vrt, client)
