"""A session resumes on any process that shares its store (§5.4 across processes):
nothing lost, nothing repeated, the conversation kept, the old owner closed with 4000.

Each test talks to the ``vrt serve`` processes of the fleet directly (``fleet.servers``).
"""

from __future__ import annotations

import asyncio
import json

from fleet import Fleet

from conftest import StoreView
from support import RawClient, chunks, eventually, is_idle, messages
from vrt.agents.history import ToolCalled, ToolResulted, UserSaid
from vrt.protocol.messages import Error, Interrupted, ToolCall, TurnState

TOOLS = [{"name": "add", "parameters": {"type": "object"}}]


async def resume(url: str, old: RawClient, session_id: str, resume_from: int) -> RawClient:
    """A new raw connection to ``url`` resuming the session of ``old``; it sends on from
    the old one's seq (§4.1: the counter belongs to the session)."""
    client = await RawClient.connect(url)
    client.next_seq = old.next_seq
    await client.hello(sessionId=session_id, resumeFrom=resume_from)
    return client


async def reply(client: RawClient, text: str, timeout: float = 3.0) -> str:
    await client.text(text)
    return "".join(chunks(await client.until(is_idle, timeout)))


async def test_a_session_resumes_on_another_process_with_nothing_lost_or_repeated(
    fleet: Fleet, store_view: StoreView
) -> None:
    first, second = fleet.servers[0], fleet.servers[1]
    client = await RawClient.connect(first.url)
    ready = await client.hello(tools=TOOLS)
    assert await reply(client, "echo one") == "one"
    assert await reply(client, "echo two") == "two"
    sent = dict(client.raw)  # seq -> the bytes the first process sent
    last = client.last_seq
    client.abort()

    resumed = await RawClient.connect(second.url)
    resumed.next_seq = client.next_seq
    try:
        again = await resumed.hello(sessionId=ready.session_id, resumeFrom=last - 4)
        assert again.session_id == ready.session_id
        assert again.resumed_from == 2  # both texts were handled by the first process
        await resumed.barrier()
        # §5.4: every message after resumeFrom, once, in order, byte for byte.
        assert sorted(resumed.raw) == list(range(last - 3, last + 1))
        assert all(resumed.raw[seq] == sent[seq] for seq in resumed.raw)
        # The new agent knows the conversation (the scripted agent's history?).
        assert json.loads(await reply(resumed, "history?")) == ["echo one", "echo two"]
        assert store_view.owner(ready.session_id).startswith(second.worker + ":")
    finally:
        await resumed.close()


async def test_the_old_owner_closes_its_connection_with_4000(
    fleet: Fleet, store_view: StoreView
) -> None:
    first, second = fleet.servers[1], fleet.servers[2]
    old = await RawClient.connect(first.url)
    ready = await old.hello()
    assert await reply(old, "echo still here") == "still here"
    new = await resume(second.url, old, ready.session_id, old.last_seq)
    try:
        # §5.4: the older connection is closed with 4000, although on another process.
        code, _ = await old.closed(timeout=3.0)
        assert code == 4000
        assert await reply(new, "echo moved") == "moved"
        owner = store_view.owner(ready.session_id)
        assert owner.startswith(second.worker + ":")
    finally:
        await old.close()
        await new.close()


async def test_a_turn_in_flight_is_cut_short_on_the_new_owner(
    fleet: Fleet, store_view: StoreView
) -> None:
    """The turn's epoch closes (no tool of it ever runs), turn.state idle, and a
    recoverable error says the turn was cut short; its issued call settles
    INTERRUPTED in the conversation log (§7.2)."""
    first, second = fleet.servers[2], fleet.servers[0]
    client = await RawClient.connect(first.url)
    ready = await client.hello(tools=TOOLS)
    await client.text('call add {"a": 1, "b": 2}')
    items = await client.until(lambda item: isinstance(getattr(item, "message", None), ToolCall))
    call = next(m for m in messages(items) if isinstance(m, ToolCall))
    client.abort()  # the tool call is never answered on this process

    resumed = await resume(second.url, client, ready.session_id, client.last_seq)
    try:
        items = await resumed.until(lambda item: isinstance(getattr(item, "message", None), Error))
        shown = messages(items)
        interrupted = [m for m in shown if isinstance(m, Interrupted)]
        idle = [m for m in shown if isinstance(m, TurnState) and m.state == "idle"]
        error = shown[-1]
        assert isinstance(error, Error)
        assert [i.epoch for i in interrupted] == [call.epoch]
        assert [(t.turn_id, t.epoch) for t in idle] == [(call.turn_id, call.epoch)]
        assert error.code == "TURN_CUT_SHORT"
        assert error.recoverable
        # A late result of the cut call is ignored (§7.2); the session goes on.
        await resumed.send_sequenced(
            "tool.result", callId=call.call_id, epoch=call.epoch, ok=True, output=3
        )
        assert await reply(resumed, "echo after") == "after"
        history = store_view.history(ready.session_id)
        results = [e for e in history if isinstance(e, ToolResulted)]
        assert [(r.call_id, r.code) for r in results] == [(call.call_id, "INTERRUPTED")]
        assert [e.call_id for e in history if isinstance(e, ToolCalled)] == [call.call_id]
        assert [e.text for e in history if isinstance(e, UserSaid)] == [
            'call add {"a": 1, "b": 2}',
            "echo after",
        ]
    finally:
        await resumed.close()


async def test_a_foreign_or_unknown_resume_changes_nothing(
    fleet: Fleet, store_view: StoreView
) -> None:
    first, second = fleet.servers[0], fleet.servers[1]
    client = await RawClient.connect(first.url)
    ready = await client.hello()
    owner = store_view.owner(ready.session_id)
    stranger = await RawClient.connect(second.url)
    try:
        await stranger.send_hello(sessionId="s_" + "x" * 22, resumeFrom=0)
        code, _ = await stranger.closed()
        assert code == 4404
        assert store_view.owner(ready.session_id) == owner
        assert await reply(client, "echo mine") == "mine"
    finally:
        await stranger.close()
        await client.close()


async def test_a_session_that_ended_cannot_be_resumed_anywhere(
    fleet: Fleet, store_view: StoreView
) -> None:
    first, second = fleet.servers[1], fleet.servers[2]
    client = await RawClient.connect(first.url)
    ready = await client.hello()
    # A resume that needs more than was sent ends the session (§5.4)...
    other = await RawClient.connect(first.url)
    await other.send_hello(sessionId=ready.session_id, resumeFrom=99)
    assert (await other.closed())[0] == 4404
    await eventually(lambda: store_view.owner(ready.session_id) == "ended", 3.0)
    # ... everywhere.
    late = await RawClient.connect(second.url)
    try:
        await late.send_hello(sessionId=ready.session_id, resumeFrom=0)
        assert (await late.closed())[0] == 4404
    finally:
        await late.close()
        await other.close()
        await client.close()


async def test_resumes_go_round_the_fleet_many_times(fleet: Fleet, store_view: StoreView) -> None:
    """Ten resumes, each on the next process: every reply arrives exactly once."""
    client = await RawClient.connect(fleet.servers[0].url)
    ready = await client.hello()
    texts = []
    for n in range(10):
        text = f"echo round {n}"
        texts.append(text)
        assert await reply(client, text) == f"round {n}"
        last = client.last_seq
        client.abort()
        old = client
        client = await RawClient.connect(fleet.servers[(n + 1) % 3].url)
        client.next_seq = old.next_seq
        again = await client.hello(sessionId=ready.session_id, resumeFrom=last)
        assert again.resumed_from == n + 1
        await client.barrier()
        assert not client.raw, "nothing was missed, so nothing is resent"
    try:
        assert json.loads(await reply(client, "history?")) == texts
        await asyncio.sleep(0)
    finally:
        await client.close()
