"""What the server core says of a tool call (§7.2, §7.5): the members of each
``tool.stream`` phase, the code of a failure, what the agent hears, the bound on calls
awaiting a result (§11). Sans-I/O, like the other rules (rules_core.py); each test
closes survivors of a mutation run (docs/testing.md#mutation-testing)."""

from __future__ import annotations

from dataclasses import replace

from rules_core import LOOKUP, Server, issued_client_call, open_server

from vrt.protocol.messages import UNSET, FailureCode, ToolCall, ToolResult, ToolStream
from vrt.protocol.server import ServerConfig
from vrt.protocol.server.events import ToolSettled


def _server_call(server: Server) -> str:
    """A server-side call of a new ``acting`` turn, issued; what was written is taken."""
    session = server.session
    turn_id = session.begin_turn("acting")
    call_id = session.tool_calls.start(turn_id, "web_search", server_side=True)
    assert call_id is not None
    assert session.tool_calls.issue(call_id, {"q": "weather"}, 0.0)
    server.written()
    return call_id


def test_arguments_complete_carries_the_arguments() -> None:
    """§7.5: the ``arguments-complete`` phase holds the call's complete arguments, as
    the ``tool.call`` does."""
    server = open_server()
    session = server.session
    turn_id = session.begin_turn("acting")
    call_id = session.tool_calls.start(turn_id, LOOKUP.name)
    assert call_id is not None
    assert session.agent_output.send_text(turn_id, "Let me look.")
    assert session.tool_calls.issue(call_id, {"q": "x"}, 0.0)
    written = server.written()
    streams: list[ToolStream] = written.of(ToolStream)
    assert [(s.phase, s.arguments) for s in streams] == [
        ("start", UNSET),
        ("arguments-complete", {"q": "x"}),
    ]
    calls: list[ToolCall] = written.of(ToolCall)
    assert [(c.call_id, c.name, c.arguments, c.turn_id) for c in calls] == [
        (call_id, LOOKUP.name, {"q": "x"}, turn_id)
    ]


def test_progress_carries_what_the_tool_reported() -> None:
    """§7.5: a ``progress`` phase holds the tool's progress, as reported."""
    server = open_server()
    call_id = _server_call(server)
    assert server.session.tool_calls.progress(call_id, {"done": 0.5})
    assert server.session.tool_calls.progress(call_id, {"done": 0.75})
    streams: list[ToolStream] = server.written().of(ToolStream)
    assert [(s.phase, s.progress) for s in streams] == [
        ("progress", {"done": 0.5}),
        ("progress", {"done": 0.75}),
    ]


def test_a_failed_server_call_settles_with_its_code_or_failed() -> None:
    """§7.5: ``settled`` with ok false names a failure code: the tool's own, FAILED
    when it gave none; ok true names none."""
    cases: tuple[tuple[FailureCode | None, str], ...] = ((None, "FAILED"), ("TIMEOUT", "TIMEOUT"))
    for code, expected in cases:
        server = open_server()
        call_id = _server_call(server)
        assert server.session.tool_calls.settle_server_call(call_id, False, code=code)
        streams: list[ToolStream] = server.written().of(ToolStream)
        assert [(s.phase, s.ok, s.code) for s in streams] == [("settled", False, expected)]
    server = open_server()
    call_id = _server_call(server)
    assert server.session.tool_calls.settle_server_call(call_id, True)
    streams = server.written().of(ToolStream)
    assert [(s.phase, s.ok, s.code) for s in streams] == [("settled", True, UNSET)]


def test_a_client_result_settles_the_call_for_the_agent_by_name_and_turn() -> None:
    """§7.2: the agent hears the result of its call with the call's name and turn; a
    failed result without a code stream ``settled`` with FAILED."""
    server = open_server()
    session = server.session
    turn_id, call_id = issued_client_call(server)
    server.send(ToolResult.failure(call_id, session.epoch, "FAILED", "no such thing"), 1.0)
    settled = [e for e in session.take_events() if isinstance(e, ToolSettled)]
    assert [(e.call_id, e.name, e.turn_id, e.ok, e.code) for e in settled] == [
        (call_id, LOOKUP.name, turn_id, False, "FAILED")
    ]
    streams: list[ToolStream] = server.written().of(ToolStream)
    assert [(s.phase, s.ok, s.code) for s in streams] == [("settled", False, "FAILED")]


def test_a_call_past_the_pending_bound_fails_with_its_reason() -> None:
    """§11: past ``max_pending_calls`` client calls awaiting a result, the next call
    fails before it is issued (``tool.stream`` ``failed``) and says why."""
    server = open_server(config=replace(ServerConfig(), max_pending_calls=1))
    session = server.session
    turn_id = session.begin_turn("acting")
    first = session.tool_calls.start(turn_id, LOOKUP.name)
    second = session.tool_calls.start(turn_id, LOOKUP.name)
    assert first is not None
    assert second is not None
    assert session.tool_calls.issue(first, {}, 0.0)
    server.written()
    assert session.tool_calls.issue(second, {}, 0.0) is False
    streams: list[ToolStream] = server.written().of(ToolStream)
    assert [(s.call_id, s.phase, s.message) for s in streams] == [
        (second, "failed", "too many tool calls await a result (§11)")
    ]
