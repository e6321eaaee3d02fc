"""Rules the client core keeps, each tested on a :class:`ClientSession` alone (no
sockets, no asyncio): it is fed encoded server frames and its outbox is read back with
the server's decoder.

Each test closes a gap mutation testing found (docs/testing.md#mutation-testing).
"""

from __future__ import annotations

import pytest
from rules_core import LOOKUP, Client, open_client, output_frame

from vrt.protocol.client.events import (
    CancelTool,
    ClientEvent,
    RunTool,
    SessionFailed,
    ToolStreamUpdate,
)
from vrt.protocol.client.session import DEAD_AFTER_INTERVALS
from vrt.protocol.codec import encode
from vrt.protocol.errors import ErrorCode, LocalProtocolError
from vrt.protocol.frames import FrameKind
from vrt.protocol.messages import (
    UNSET,
    Error,
    Hello,
    Interrupted,
    ToolCall,
    ToolResult,
    ToolStream,
    TurnState,
)
from vrt.protocol.tables import ClientState

PAYLOAD = b"\x02\x00" * 240


def _call(call_id: str, epoch: int, name: str = LOOKUP.name) -> ToolCall:
    return ToolCall(call_id=call_id, name=name, arguments={}, turn_id=f"t_{epoch}", epoch=epoch)


def _runs(events: list[ClientEvent]) -> list[str]:
    return [e.call_id for e in events if isinstance(e, RunTool)]


def _results(client: Client) -> list[tuple[str, bool, object]]:
    results: list[ToolResult] = client.written().of(ToolResult)
    return [(r.call_id, r.ok, r.code) for r in results]


# -- §8.1: input audio --------------------------------------------------------------


def test_input_audio_is_sent_from_seq_0() -> None:
    """§8.1: input audio goes out as binary frames of kind 1, the first with seq 0,
    then 1, 2, ... (the client's own audio counter)."""
    client = open_client()
    assert client.session.send_audio(PAYLOAD, 1.0)
    assert client.session.send_audio(PAYLOAD[:10], 1.02)
    frames = client.written().frames
    assert [(f.kind, f.seq, f.payload) for f in frames] == [
        (FrameKind.INPUT, 0, PAYLOAD),
        (FrameKind.INPUT, 1, PAYLOAD[:10]),
    ]


# -- §4.4: an audio-only stream is alive --------------------------------------------


def test_output_audio_keeps_the_connection_alive() -> None:
    """§4.4: a binary frame counts as a frame received: a connection that only carries
    audio is not taken for dead (no close, no reconnect)."""
    client = open_client(now=0.0)
    dead_after = DEAD_AFTER_INTERVALS * client.session.ping_interval
    for step in range(1, 5):
        client.session.receive_binary(output_frame(step), step * dead_after * 0.5)
        client.session.on_timer(step * dead_after * 0.5 + 1.0)
    assert client.written().closes == []
    assert client.session.state is ClientState.OPEN
    client.session.on_timer(4 * dead_after * 0.5 + dead_after)  # then silence: dead
    assert [c.code for c in client.written().closes] == [4000]


# -- §7.1, §7.2: the tool queue -----------------------------------------------------


def test_the_queue_moves_on_when_an_interrupt_cancels_the_running_call() -> None:
    """§7.1, §7.2: an interrupt answers the running call of the closed epoch at once, and
    the next call waiting (of an epoch still open) starts then, not never."""
    client = open_client()
    client.deliver(_call("c_1", 1), 1.0)
    client.deliver(_call("c_2", 3), 1.1)  # waits: c_1 runs
    assert _runs(client.session.take_events()) == ["c_1"]
    client.deliver(Interrupted(epoch=1), 1.2)
    events = client.session.take_events()
    assert [e.call_id for e in events if isinstance(e, CancelTool)] == ["c_1"]
    assert _runs(events) == ["c_2"]
    assert _results(client) == [("c_1", False, "INTERRUPTED")]
    assert client.session.tool_finished("c_1", True, 1.3) is False  # discarded
    assert client.session.tool_finished("c_2", True, 1.4)
    assert _results(client) == [("c_2", True, UNSET)]


def test_a_call_for_an_undeclared_tool_fails_and_never_runs() -> None:
    """§7.2: a call naming a tool the client did not declare is answered FAILED and is
    not run; the next call runs."""
    client = open_client()
    client.deliver(_call("c_1", 1, name="not_declared"), 1.0)
    client.deliver(_call("c_2", 1), 1.1)
    assert _runs(client.session.take_events()) == ["c_2"]
    assert _results(client) == [("c_1", False, "FAILED")]


def test_only_the_running_call_can_be_finished() -> None:
    """§7.2: a result for a callId that is not the running call (stale, or unknown) is
    discarded: it never answers the running call."""
    client = open_client()
    client.deliver(_call("c_1", 1), 1.0)
    client.deliver(_call("c_2", 1), 1.1)
    client.session.take_events()
    client.written()
    assert client.session.tool_finished("c_2", True, 1.2, output="wrong") is False
    assert client.session.tool_finished("c_stale", True, 1.2, output="wrong") is False
    assert client.written().of(ToolResult) == []
    assert client.session.tool_finished("c_1", True, 1.3, output="right")
    results: list[ToolResult] = client.written().of(ToolResult)
    assert [(r.call_id, r.output) for r in results] == [("c_1", "right")]
    assert _runs(client.session.take_events()) == ["c_2"]


# -- §7.5, §6.2: a local interrupt and tool-stream-v1 -------------------------------


def _stream(call_id: str, epoch: int, phase: str, **members: object) -> ToolStream:
    return ToolStream(
        call_id=call_id,
        name="web_search",
        turn_id=f"t_{epoch}",
        epoch=epoch,
        phase=phase,  # type: ignore[arg-type]
        **members,  # type: ignore[arg-type]
    )


def test_a_local_interrupt_cancels_only_unterminated_calls_of_the_closed_epoch() -> None:
    """§7.5, §6.2: on a local interrupt the calls of the closed epoch that have not
    ended count as cancelled at once; a call already settled stays settled."""
    client = open_client()
    client.deliver(TurnState(turn_id="t_1", epoch=1, state="acting"), 1.0)
    client.deliver(_stream("c_done", 1, "start"), 1.0)
    client.deliver(_stream("c_done", 1, "arguments-complete", arguments={}), 1.0)
    client.deliver(_stream("c_done", 1, "settled", ok=True), 1.0)
    client.deliver(_stream("c_open", 1, "start"), 1.0)
    client.session.take_events()
    assert client.session.interrupt("user", 2.0) == 1
    cancelled = [
        e.call_id
        for e in client.session.take_events()
        if isinstance(e, ToolStreamUpdate) and e.phase == "cancelled"
    ]
    assert cancelled == ["c_open"]


def test_a_local_interrupt_leaves_calls_of_a_later_epoch_alone() -> None:
    """§7.5, §6.2: only the closed epoch's calls are cancelled by a local interrupt; a
    call streaming in a later epoch goes on."""
    client = open_client()
    client.deliver(TurnState(turn_id="t_1", epoch=1, state="acting"), 1.0)
    client.deliver(_stream("c_old", 1, "start"), 1.0)
    client.session.take_events()
    epoch = client.session.interrupt("user", 2.0)
    client.deliver(Interrupted(epoch=epoch), 2.1)
    client.deliver(TurnState(turn_id="t_3", epoch=3, state="acting"), 2.2)
    client.deliver(_stream("c_new", 3, "start"), 2.3)
    client.deliver(TurnState(turn_id="t_3", epoch=3, state="listening"), 2.4)
    client.session.take_events()
    client.session.interrupt("keyboard", 3.0)  # closes epoch 3
    cancelled = [
        e.call_id
        for e in client.session.take_events()
        if isinstance(e, ToolStreamUpdate) and e.phase == "cancelled"
    ]
    assert cancelled == ["c_new"]


# -- §5.4: no resume after RESUME_FAILED --------------------------------------------


def test_no_resume_after_resume_failed() -> None:
    """§5.4: after RESUME_FAILED the session is over: a new connection must not send a
    resuming ``hello`` (it is refused locally: start a new ClientSession)."""
    client = open_client()
    client.session.connection_lost(1.0)
    client.session.connection_made(2.0)
    hellos: list[Hello] = client.written().of(Hello)
    assert [h.session_id for h in hellos] == ["s_rules"]
    failed = Error(code=ErrorCode.RESUME_FAILED, message="gone", recoverable=False)
    client.session.receive_text(encode(failed, 0), 2.1)
    events = client.session.take_events()
    assert [e.code for e in events if isinstance(e, SessionFailed)] == ["RESUME_FAILED"]
    assert client.session.resumable is False
    client.session.connection_lost(2.2)
    with pytest.raises(LocalProtocolError):
        client.session.connection_made(3.0)
    assert client.written().of(Hello) == []
