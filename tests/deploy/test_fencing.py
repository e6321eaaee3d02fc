"""Fencing: a stalled owner (SIGSTOP) whose session was taken by another process cannot
write after SIGCONT, neither to the store nor to its old connection; it closes that
connection with 4000 (§5.4) and lets the session go."""

from __future__ import annotations

import asyncio
import signal

from fleet import Fleet

from conftest import StoreView
from support import Item, RawClient, chunks, eventually, is_idle, messages
from vrt.protocol.messages import Error, ToolStream


async def test_a_stalled_owner_cannot_write_after_losing_its_lease(
    fleet: Fleet, store_view: StoreView
) -> None:
    stalled, taker = fleet.servers[0], fleet.servers[1]
    old = await RawClient.connect(stalled.url)
    ready = await old.hello(capabilities=["tool-stream-v1"])
    session_id = ready.session_id
    # A server tool that reports progress every 100 ms for 2 s: the owner keeps writing.
    await old.text("server-tool 2000")
    await old.until(_progress, 3.0)
    stalled.signal(signal.SIGSTOP)
    try:
        await asyncio.sleep(0.3)  # what it wrote before the stop has arrived
        seen_before = old.last_seq
        new = await RawClient.connect(taker.url)
        new.next_seq = old.next_seq
        await new.hello(sessionId=session_id, resumeFrom=seen_before)
        items = await new.until(lambda item: isinstance(getattr(item, "message", None), Error))
        assert any(isinstance(m, Error) and m.code == "TURN_CUT_SHORT" for m in messages(items))
        taken = store_view.owner(session_id)
        assert taken.startswith(taker.worker + ":")
        state = store_view.state(session_id)
        kept = store_view.kept(session_id)
        history = store_view.history(session_id)
    finally:
        stalled.signal(signal.SIGCONT)
    # The old owner wakes up with a reply in progress and timers due: it must not write.
    await asyncio.sleep(1.5)
    assert store_view.owner(session_id) == taken
    assert store_view.state(session_id).out_last_seq == state.out_last_seq
    assert store_view.kept(session_id) == kept
    assert store_view.history(session_id) == history
    code, _ = await old.closed(3.0)
    assert code == 4000
    after = [seq for seq in old.raw if seq > seen_before]
    assert not after, f"the stalled owner sent seqs {after} after losing the session"
    assert "".join(chunks(await _reply(new, "echo alive"))) == "alive"
    await old.close()
    await new.close()
    assert stalled.alive()


def _progress(item: Item) -> bool:
    message = getattr(item, "message", None)
    return isinstance(message, ToolStream) and message.phase == "progress"


async def _reply(client: RawClient, text: str) -> list[Item]:
    await client.text(text)
    return list(await client.until(is_idle, 3.0))


async def test_drain_parks_sessions_for_another_process(
    fleet: Fleet, store_view: StoreView
) -> None:
    """SIGTERM with a shared store: no SERVER_SHUTDOWN (that says "do not resume");
    the connection closes with 1001 and the session resumes on another process with
    its conversation (issue 12's drain)."""
    draining, other = fleet.servers[2], fleet.servers[0]
    client = await RawClient.connect(draining.url)
    ready = await client.hello()
    await client.text("echo before the drain")
    await client.until(is_idle)
    draining.signal(signal.SIGTERM)
    try:
        code, _ = await client.closed(15.0)
        assert code == 1001
        errors = [m for m in messages(client.skipped) if isinstance(m, Error)]
        assert not errors, errors
        await eventually(lambda: not draining.alive(), 10.0, "the drained process to exit")
        assert store_view.state(ready.session_id).expires_at is not None  # parked
        resumed = await RawClient.connect(other.url)
        resumed.next_seq = client.next_seq
        again = await resumed.hello(sessionId=ready.session_id, resumeFrom=client.last_seq)
        assert again.resumed_from == 1
        reply = "".join(chunks(await _reply(resumed, "history?")))
        assert reply == '["echo before the drain"]'
        await resumed.close()
    finally:
        await client.close()
        draining.restart()
