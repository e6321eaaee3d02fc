"""Tool calls on both sides (§7.1, §7.2, §11): one result per call, the queue, the
timeout and the bound on calls awaiting a result. Survivors of mutation testing on
``client/calls.py`` and ``server/tools.py`` (docs/testing.md#mutation-testing).
"""

from __future__ import annotations

from rules_core import LOOKUP, Client, open_client, open_server

from vrt.protocol.client.calls import REMEMBERED_ANSWERS, ToolQueue
from vrt.protocol.client.events import ClientEvent, RunTool
from vrt.protocol.messages import UNSET, Interrupted, ToolCall, ToolResult
from vrt.protocol.server.config import ServerConfig
from vrt.protocol.server.events import ToolSettled


def _call(call_id: str, epoch: int) -> ToolCall:
    return ToolCall(call_id=call_id, name=LOOKUP.name, arguments={}, turn_id="t", epoch=epoch)


def _runs(events: list[ClientEvent]) -> list[str]:
    return [e.call_id for e in events if isinstance(e, RunTool)]


def _results(client: Client) -> list[ToolResult]:
    results: list[ToolResult] = client.written().of(ToolResult)
    return results


# -- client ---------------------------------------------------------------------------


def test_a_call_id_seen_again_is_ignored() -> None:
    """§7.1, §7.2: a ``tool.call`` whose callId is running, queued or answered already
    (a server resending it under a new seq) neither runs again nor is answered again."""
    client = open_client()
    client.deliver(_call("c_1", 1), 1.0)
    client.deliver(_call("c_2", 1), 1.0)
    client.deliver(_call("c_1", 1), 1.0)  # running
    client.deliver(_call("c_2", 1), 1.0)  # queued
    assert _runs(client.session.take_events()) == ["c_1"]
    assert client.session.tool_finished("c_1", True, 1.1)
    assert _runs(client.session.take_events()) == ["c_2"]
    client.deliver(_call("c_1", 1), 1.2)  # answered
    assert client.session.tool_finished("c_2", True, 1.3)
    assert [r.call_id for r in _results(client)] == ["c_1", "c_2"]
    assert _runs(client.session.take_events()) == []


def test_an_interrupt_keeps_the_queued_calls_of_open_epochs() -> None:
    """§6.2, §7.1: an interrupt answers the queued calls of the closed epoch and keeps
    the others, in order."""
    client = open_client()
    client.deliver(_call("c_1", 1), 1.0)
    client.deliver(_call("c_2", 1), 1.0)
    client.deliver(_call("c_3", 3), 1.0)
    client.deliver(_call("c_4", 3), 1.0)
    client.session.take_events()
    client.deliver(Interrupted(epoch=1), 1.1)
    assert _runs(client.session.take_events()) == ["c_3"]
    assert [(r.call_id, r.code) for r in _results(client)] == [
        ("c_1", "INTERRUPTED"),
        ("c_2", "INTERRUPTED"),
    ]
    assert client.session.tool_finished("c_3", True, 1.2)
    assert _runs(client.session.take_events()) == ["c_4"]


def test_a_failure_carries_its_code_and_message() -> None:
    """§7.2: a failed tool's result carries the code given (FAILED by default) and the
    message."""
    client = open_client()
    client.deliver(_call("c_1", 1), 1.0)
    client.deliver(_call("c_2", 1), 1.0)
    assert client.session.tool_finished("c_1", False, 1.1, code="REJECTED", message="no")
    assert client.session.tool_finished("c_2", False, 1.2)
    results = _results(client)
    assert [(r.call_id, r.ok, r.code, r.message) for r in results] == [
        ("c_1", False, "REJECTED", "no"),
        ("c_2", False, "FAILED", None),
    ]
    assert results[1].output is UNSET


def test_the_client_refuses_a_second_answer_to_any_of_its_last_4096_calls() -> None:
    """§7.2: exactly one ``tool.result`` per call: a second answer to any of the last
    ``REMEMBERED_ANSWERS`` (4,096) calls answered is refused; only older ids are
    forgotten, a memory bound (a server never reuses a callId, §7.1)."""
    queue = ToolQueue()
    for n in range(REMEMBERED_ANSWERS):
        assert queue.first_answer(f"c_{n}")
    assert not queue.first_answer("c_0")  # the oldest of 4,096: remembered
    assert queue.first_answer(f"c_{REMEMBERED_ANSWERS}")  # the 4,097th: c_0 is forgotten
    assert not queue.first_answer("c_1")
    assert queue.first_answer("c_0")


# -- server ---------------------------------------------------------------------------


def test_a_client_call_without_a_result_times_out() -> None:
    """§7.2: a client call without a result settles as TIMEOUT at ``tool_timeout``,
    not before; a server call (which has no timeout) is left alone."""
    server = open_server(config=ServerConfig(tool_timeout=30.0))
    session = server.session
    turn_id = session.begin_turn("acting")
    own = session.tool_calls.start(turn_id, "web_search", server_side=True)
    call_id = session.tool_calls.start(turn_id, LOOKUP.name)
    assert own is not None
    assert call_id is not None
    assert session.tool_calls.issue(own, {}, 0.0)
    assert session.tool_calls.issue(call_id, {}, 0.0)
    session.take_events()
    assert session.timer_deadline() == 30.0
    server.connection.on_timer(29.9)
    assert session.take_events() == []
    server.connection.on_timer(30.0)
    settled = [e for e in session.take_events() if isinstance(e, ToolSettled)]
    assert [(e.call_id, e.ok, e.code) for e in settled] == [(call_id, False, "TIMEOUT")]
    assert session.timer_deadline() is None


def test_the_bound_on_calls_awaiting_a_result_counts_client_calls_only() -> None:
    """§11: at most ``max_pending_calls`` client calls await a result; server calls do
    not count, and the call over the bound fails without being sent."""
    server = open_server(config=ServerConfig(max_pending_calls=2))
    session = server.session
    turn_id = session.begin_turn("acting")
    own = session.tool_calls.start(turn_id, "web_search", server_side=True)
    assert own is not None
    assert session.tool_calls.issue(own, {}, 0.0)
    ids = [session.tool_calls.start(turn_id, LOOKUP.name) for _ in range(3)]
    assert [session.tool_calls.issue(i, {}, 0.0) for i in ids if i is not None] == [
        True,
        True,
        False,
    ]
    sent: list[ToolCall] = server.written().of(ToolCall)
    assert [c.call_id for c in sent] == ids[:2]
