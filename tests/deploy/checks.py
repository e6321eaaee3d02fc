"""What must hold of a conversation that moved between processes, judged from the two
things that outlive every process: the client (its recorded streams, events and tools,
``reliability_harness``) and the session store (``conftest.StoreView``).

1. Exactly once, both directions: the client handled server seqs 1..N with no gap and
   no repeat, and N is the last seq the store knows was sent, so every message any
   owner numbered reached the client once; the store's last handled client seq is the
   client's last, and its conversation log holds each user text once, in order.
2. No tool of a closed epoch ever starts (§6.2), at the client and on the wire.
3. Every ``tool.call`` has exactly one ``tool.result`` on the client's stream; call ids
   are unique (``global-tool-ids-v1``, across every process).
4. The only errors are ``TURN_CUT_SHORT`` (recoverable), each for a turn that was in
   flight when its session moved; nothing failed.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from reliability_harness import ClientRecord, Recorder, ToolKit

from conftest import StoreView
from vrt.agents.history import ToolCalled, ToolResulted, UserSaid
from vrt.client import ErrorReceived, InterruptedEpoch, RunTool, SessionFailed, VrtClient
from vrt.protocol.messages import Error, Interrupted, ToolCall, ToolResult

__all__ = ["check_conversation", "store_settled"]


def store_settled(client: VrtClient, view: StoreView) -> bool:
    """The store and the client agree, and nothing is in flight."""
    core = client.core
    session_id = core.session_id
    if session_id is None or not client.connected:
        return False
    try:
        state = view.state(session_id)
    except KeyError:
        return False
    return (
        (state.turn is None or state.turn.state == "listening")
        and not state.calls
        and state.out_last_seq == core.incoming.last_seq
        and state.in_last_seq == core.outgoing.last_seq
        and core._calls.running is None
        and not core._calls.queued
    )


def check_conversation(
    client: VrtClient,
    record: ClientRecord,
    recorder: Recorder,
    kit: ToolKit,
    view: StoreView,
    texts: list[str],
    all_call_ids: Counter[str] | None = None,
) -> Counter[str]:
    """Assert 1-4 of the module docstring; returns the number of each error code seen."""
    session_id = client.session_id
    assert session_id is not None
    state = view.state(session_id)
    core = client.core

    # 1. Exactly once, in order, both directions.
    handled = [seq for seq, _ in record.handled]
    assert handled == list(range(1, len(handled) + 1)), f"the client handled seqs {handled}"
    assert core.incoming.gaps == 0
    assert state.out_last_seq == len(handled), (
        f"the store says {state.out_last_seq} were sent; the client handled {len(handled)}"
    )
    sent = [seq for seq, _ in record.sent]
    assert sent == list(range(1, len(sent) + 1))
    assert state.in_last_seq == len(sent), (
        f"the store handled client seqs up to {state.in_last_seq}; the client sent {len(sent)}"
    )
    history = view.history(session_id)
    said = [entry.text for entry in history if isinstance(entry, UserSaid) and not entry.spoken]
    assert said == texts, f"the log has the user's texts {said}, the client sent {texts}"

    # 2. No tool of a closed epoch starts, at the client or on the wire.
    for start in kit.starts:
        assert start.closed_epoch is None or start.epoch > start.closed_epoch, start
    closed = -1
    for event in recorder.events:
        if isinstance(event, InterruptedEpoch):
            closed = max(closed, event.epoch)
        elif isinstance(event, RunTool):
            assert event.epoch > closed, f"RunTool {event} after epoch {closed} closed"
    interrupted = -1
    calls: list[ToolCall] = []
    for _, message in record.handled:
        if isinstance(message, Interrupted):
            interrupted = max(interrupted, message.epoch)
        elif isinstance(message, ToolCall):
            assert message.epoch > interrupted, f"{message} issued after its epoch closed"
            calls.append(message)

    # 3. One result per call; ids unique everywhere.
    call_ids = Counter(call.call_id for call in calls)
    assert max(call_ids.values(), default=1) == 1, "a callId was reused"
    results = Counter(m.call_id for _, m in record.sent if isinstance(m, ToolResult))
    assert results == call_ids, f"results {results} for calls {call_ids}"
    runs = Counter(start.call_id for start in kit.starts)
    assert max(runs.values(), default=1) == 1, f"a tool ran twice: {runs}"
    logged = Counter(e.call_id for e in history if isinstance(e, ToolCalled))
    settled = Counter(e.call_id for e in history if isinstance(e, ToolResulted))
    assert set(logged) <= set(call_ids)
    assert max(settled.values(), default=1) == 1, f"a call settled twice: {settled}"
    if all_call_ids is not None:
        repeated = set(call_ids) & set(all_call_ids)
        assert not repeated, f"call ids of another session: {repeated}"
        all_call_ids.update(call_ids)

    # 4. Only TURN_CUT_SHORT, recoverable; nothing failed.
    assert not recorder.of(SessionFailed), recorder.of(SessionFailed)
    errors = recorder.of(ErrorReceived)
    assert all(e.code == "TURN_CUT_SHORT" and e.recoverable for e in errors), errors
    wire: list[Any] = [m for _, m in record.handled if isinstance(m, Error)]
    return Counter(e.code for e in wire)
