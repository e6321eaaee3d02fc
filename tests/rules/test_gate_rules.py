"""The client's epoch gate and tool queue (§4.4, §6.2, §7.1, §7.2, §7.5), event by
event. Survivors of mutation testing on ``client/gate.py`` (docs/testing.md#mutation-testing).

A result the client writes counts as sent for the ping schedule (§4.4): the next ping
is due ``ping_interval`` after it, which these tests read from ``timer_deadline``.
"""

from __future__ import annotations

from rules_core import LOOKUP, Client, open_client

from vrt.protocol.client.events import (
    InterruptedEpoch,
    PlaybackStop,
    RunTool,
    ToolPreview,
    ToolStreamUpdate,
)
from vrt.protocol.messages import (
    UNSET,
    Interrupted,
    ToolCall,
    ToolCallDelta,
    ToolResult,
    ToolStream,
    TurnState,
)


def _call(call_id: str, epoch: int, name: str = LOOKUP.name) -> ToolCall:
    return ToolCall(
        call_id=call_id, name=name, arguments={"q": call_id}, turn_id=f"t_{epoch}", epoch=epoch
    )


def _stream(call_id: str, epoch: int, phase: str, **members: object) -> ToolStream:
    return ToolStream(
        call_id=call_id,
        name="web_search",
        turn_id=f"t_{epoch}",
        epoch=epoch,
        phase=phase,  # type: ignore[arg-type]
        **members,  # type: ignore[arg-type]
    )


def _results(client: Client) -> list[tuple[str, bool, object, object]]:
    results: list[ToolResult] = client.written().of(ToolResult)
    return [(r.call_id, r.ok, _set(r.code), _set(r.message)) for r in results]


def _set(value: object) -> object:
    return None if value is UNSET else value


def _sent_at(client: Client, now: float) -> None:
    """The client last wrote at ``now``: its next ping is due a ping interval later."""
    session = client.session
    session.incoming.ack_now()  # the ack schedule aside (§4.2)
    assert session.timer_deadline() == now + session.ping_interval


def test_a_call_of_a_closed_epoch_is_answered_at_once() -> None:
    """§6.2, §7.2: a call of a closed epoch never runs: INTERRUPTED, written now."""
    client = open_client()
    client.deliver(Interrupted(epoch=1), 1.0)
    client.session.take_events()
    client.written()
    client.deliver(_call("c_1", 1), 5.0)
    assert client.session.take_events() == []
    assert _results(client) == [("c_1", False, "INTERRUPTED", "the turn was interrupted")]
    _sent_at(client, 5.0)


def test_a_call_for_an_undeclared_tool_is_answered_when_it_comes_up() -> None:
    """§7.2: an undeclared tool's call is answered FAILED, naming the tool, when the
    queue reaches it (here: when the running call finishes)."""
    client = open_client()
    client.deliver(_call("c_1", 1), 1.0)
    client.deliver(_call("c_2", 1, name="nope"), 1.0)
    client.written()
    assert client.session.tool_finished("c_1", True, 5.0, output={"a": 1})
    assert _results(client) == [
        ("c_1", True, None, None),
        ("c_2", False, "FAILED", "no tool named 'nope'"),
    ]
    _sent_at(client, 5.0)


def test_an_undeclared_tool_alone_is_answered_on_arrival() -> None:
    """§7.2: with nothing running, the undeclared call is answered as it arrives."""
    client = open_client()
    client.deliver(_call("c_1", 1, name="nope"), 5.0)
    assert _results(client) == [("c_1", False, "FAILED", "no tool named 'nope'")]
    _sent_at(client, 5.0)


def test_tool_finished_passes_the_outcome_on() -> None:
    """§7.2: the result carries the outcome the application gave, written now; the
    next call starts with its own name, arguments, turn and epoch."""
    client = open_client()
    client.deliver(_call("c_1", 1), 1.0)
    client.deliver(_call("c_2", 2), 1.0)
    client.session.take_events()
    client.written()
    assert client.session.tool_finished("c_1", False, 5.0, code="REJECTED", message="denied")
    assert _results(client) == [("c_1", False, "REJECTED", "denied")]
    _sent_at(client, 5.0)
    assert client.session.take_events() == [
        RunTool(call_id="c_2", name=LOOKUP.name, arguments={"q": "c_2"}, turn_id="t_2", epoch=2)
    ]


def test_an_interrupt_answers_running_and_queued_calls_now() -> None:
    """§6.2, §7.2: an interrupt answers the running and the queued calls of the closed
    epoch, then the queue moves on (an undeclared call is answered), all written now."""
    client = open_client()
    client.deliver(_call("c_1", 1), 1.0)
    client.deliver(_call("c_2", 1), 1.0)
    client.deliver(_call("c_3", 3, name="nope"), 1.0)
    client.written()
    client.deliver(Interrupted(epoch=1), 5.0)
    assert _results(client) == [
        ("c_1", False, "INTERRUPTED", "the turn was interrupted"),
        ("c_2", False, "INTERRUPTED", "the turn was interrupted"),
        ("c_3", False, "FAILED", "no tool named 'nope'"),
    ]
    _sent_at(client, 5.0)


def test_an_epoch_closes_once() -> None:
    """§6.2: closing an epoch already closed has no further effect; the events say
    which epoch closed and whether it was local."""
    client = open_client()
    client.deliver(Interrupted(epoch=1), 1.0)
    assert client.session.take_events() == [
        PlaybackStop(epoch=1),
        InterruptedEpoch(epoch=1, local=False),
    ]
    client.deliver(Interrupted(epoch=1), 1.1)
    assert client.session.take_events() == []


def test_a_server_interrupt_leaves_the_streams_to_the_server() -> None:
    """§7.5: only a local interrupt counts unterminated calls as cancelled at once;
    after the server's ``interrupted`` the server sends their ``cancelled`` itself."""
    client = open_client()
    client.deliver(_stream("c_1", 1, "start"), 1.0)
    client.session.take_events()
    client.deliver(Interrupted(epoch=1), 1.1)
    assert [type(e) for e in client.session.take_events()] == [PlaybackStop, InterruptedEpoch]


def test_a_local_interrupt_reports_the_cancelled_call() -> None:
    """§7.5: the call a local interrupt cancels is reported with its own name, turn
    and epoch."""
    client = open_client()
    client.deliver(TurnState(turn_id="t_1", epoch=1, state="acting"), 1.0)
    client.deliver(_stream("c_1", 1, "start"), 1.0)
    client.session.take_events()
    client.session.interrupt("user", 2.0)
    updates = [e for e in client.session.take_events() if isinstance(e, ToolStreamUpdate)]
    assert updates == [
        ToolStreamUpdate(
            call_id="c_1",
            name="web_search",
            turn_id="t_1",
            epoch=1,
            phase="cancelled",
            message=None,
        )
    ]


def test_tool_stream_updates_carry_the_message() -> None:
    """§7.5: each ``tool.stream`` is reported with its call, name, turn, epoch and
    phase; after a terminal phase nothing more about the call counts."""
    client = open_client()
    start = _stream("c_1", 1, "start")
    client.deliver(start, 1.0)
    assert client.session.take_events() == [
        ToolStreamUpdate(
            call_id="c_1", name="web_search", turn_id="t_1", epoch=1, phase="start", message=start
        )
    ]
    client.deliver(_stream("c_1", 1, "failed", message="stopped"), 1.1)
    client.session.take_events()
    client.deliver(_stream("c_1", 1, "arguments-delta", delta="x"), 1.2)
    assert client.session.take_events() == []


def test_a_preview_is_reported_with_its_call_turn_and_epoch() -> None:
    """§7.4, §6.2: ``tool.call.delta`` reaches the application as a preview naming its
    call, turn and epoch (display only); a preview of a closed epoch is discarded."""
    client = open_client()
    client.deliver(ToolCallDelta(call_id="c_1", turn_id="t_2", epoch=2, preview={"q": "a"}), 1.0)
    assert client.session.take_events() == [
        ToolPreview(call_id="c_1", turn_id="t_2", epoch=2, preview={"q": "a"})
    ]
    client.deliver(Interrupted(epoch=2), 1.1)
    client.session.take_events()
    client.deliver(ToolCallDelta(call_id="c_1", turn_id="t_2", epoch=2, preview={"q": "b"}), 1.2)
    assert client.session.take_events() == []


def test_the_last_256_streams_are_remembered() -> None:
    """§7.5: the phases of the last 256 calls are remembered (a later message about a
    call that ended is ignored); older ones are forgotten, without failing."""
    client = open_client()
    client.deliver(_stream("c_0", 1, "start"), 1.0)
    client.deliver(_stream("c_0", 1, "failed", message="stopped"), 1.0)
    for n in range(1, 256):
        client.deliver(_stream(f"c_{n}", 1, "start"), 1.0)
    client.session.take_events()
    client.deliver(_stream("c_0", 1, "arguments-delta", delta="x"), 1.1)
    assert client.session.take_events() == []  # c_0 is the oldest of 256: remembered
    client.deliver(_stream("c_256", 1, "start"), 1.2)  # the 257th: c_0 is forgotten
    client.deliver(_stream("c_0", 1, "arguments-delta", delta="x"), 1.3)
    updates = [e for e in client.session.take_events() if isinstance(e, ToolStreamUpdate)]
    assert [e.call_id for e in updates] == ["c_256", "c_0"]


def test_an_interrupt_answers_the_running_call_now() -> None:
    """§6.2, §7.2: the running call of a closed epoch is answered INTERRUPTED at once,
    written now (the tool's later outcome is discarded)."""
    client = open_client()
    client.deliver(_call("c_1", 1), 1.0)
    client.written()
    client.deliver(Interrupted(epoch=1), 5.0)
    assert _results(client) == [("c_1", False, "INTERRUPTED", "the turn was interrupted")]
    _sent_at(client, 5.0)


def test_an_interrupt_answers_the_queued_calls_now() -> None:
    """§6.2, §7.2: the queued calls of a closed epoch are answered at once, written now."""
    client = open_client()
    client.deliver(_call("c_1", 1), 1.0)
    client.deliver(_call("c_2", 1), 1.0)  # queued behind c_1
    client.written()
    client.deliver(Interrupted(epoch=1), 5.0)
    assert _results(client) == [
        ("c_1", False, "INTERRUPTED", "the turn was interrupted"),
        ("c_2", False, "INTERRUPTED", "the turn was interrupted"),
    ]
    _sent_at(client, 5.0)
