"""Rules the server core keeps, each tested on the sans-I/O objects alone (no sockets,
no asyncio): a :class:`ServerConnection` bound to its :class:`ServerSession`, fed
encoded client frames, its outbox read back with the client's decoder.

Each test closes a gap mutation testing found (docs/testing.md#mutation-testing).
"""

from __future__ import annotations

from rules_core import LOOKUP, Server, input_frame, issued_client_call, open_server

from vrt.protocol.messages import Interrupt, Interrupted, ToolCall, ToolResult, ToolStream, UserText
from vrt.protocol.outputs import CloseCode
from vrt.protocol.server.events import ResponseInterrupted, ToolSettled

PAYLOAD = b"\x01\x00" * 240  # 10 ms of pcm16 at 24 kHz


def _speaking(server: Server) -> tuple[str, str]:
    """A turn speaking its first audio item; the frames so far are taken."""
    session = server.session
    turn_id = session.begin_turn("speaking")
    item_id = session.agent_output.start_audio(turn_id)
    assert item_id is not None
    assert session.agent_output.send_audio(item_id, PAYLOAD)
    assert len(server.written().frames) == 1
    return turn_id, item_id


# -- §6.2, §8.3: audio of a closed epoch --------------------------------------------


def test_audio_of_an_interrupted_epoch_is_never_sent() -> None:
    """§6.2, §8.3: once the response's epoch is closed, its audio is never sent."""
    server = open_server()
    _, item_id = _speaking(server)
    assert server.session.interrupt_response()
    assert server.session.agent_output.send_audio(item_id, PAYLOAD) is False
    written = server.written()
    assert written.of(Interrupted)
    assert written.frames == []


def test_audio_of_an_older_epoch_is_not_sent_in_a_new_turn() -> None:
    """§6.2, §8.3: an item of an interrupted turn stays closed when a new turn begins."""
    server = open_server()
    _, item_id = _speaking(server)
    server.session.interrupt_response()
    server.session.begin_turn("speaking")
    server.written()
    assert server.session.agent_output.send_audio(item_id, PAYLOAD) is False
    assert server.written().frames == []


# -- §4.4: every frame counts for the heartbeat --------------------------------------


def test_text_frames_keep_the_connection_alive() -> None:
    """§4.4: a text frame counts for the heartbeat (no WebSocket ping is involved)."""
    server = open_server(now=0.0)
    timeout = server.config.heartbeat_timeout
    server.send(UserText(text="still here"), timeout * 0.8)
    server.connection.on_timer(timeout * 1.2)
    assert server.written().closes == []
    server.connection.on_timer(timeout * 1.8)
    assert [c.code for c in server.written().closes] == [CloseCode.HEARTBEAT_TIMEOUT]


def test_audio_frames_keep_the_connection_alive() -> None:
    """§4.4: a binary (audio) frame counts for the heartbeat: an audio-only stream is alive."""
    server = open_server(now=0.0)
    timeout = server.config.heartbeat_timeout
    server.connection.receive_binary(input_frame(0), timeout * 0.8)
    assert server.connection.timer_deadline() == timeout * 1.8
    server.connection.on_timer(timeout * 1.2)
    assert server.written().closes == []
    server.connection.on_timer(timeout * 1.8)
    assert [c.code for c in server.written().closes] == [CloseCode.HEARTBEAT_TIMEOUT]


# -- §6.2, §7.2: a pending call of an interrupted turn -------------------------------


def test_interrupt_settles_a_pending_client_call_as_interrupted_for_the_agent() -> None:
    """§6.2, §7.2: when the client interrupts, the agent hears that its pending tool
    call settled as INTERRUPTED (it gets exactly one outcome per call)."""
    server = open_server()
    turn_id, call_id = issued_client_call(server)
    server.send(Interrupt(epoch=server.session.epoch, reason="user"), 1.0)
    events = server.session.take_events()
    settled = [e for e in events if isinstance(e, ToolSettled)]
    assert len(settled) == 1
    assert settled[0].call_id == call_id
    assert settled[0].ok is False
    assert settled[0].code == "INTERRUPTED"
    assert [e.turn_id for e in events if isinstance(e, ResponseInterrupted)] == [turn_id]


# -- §7.2, §7.5: the phases of a call ----------------------------------------------


def test_a_call_is_issued_once() -> None:
    """§7.2, §7.5: ``arguments-complete`` comes at most once: a second issue is refused
    and sends no second ``tool.call``."""
    server = open_server()
    _, call_id = issued_client_call(server)
    assert server.session.tool_calls.issue(call_id, {"q": "y"}, 1.0) is False
    written = server.written()
    assert written.of(ToolCall) == []
    assert written.of(ToolStream) == []


def test_an_issued_call_cannot_fail_silently() -> None:
    """§7.2, §7.5: ``failed`` is for a call never issued; an issued client call still
    awaits its result, which settles it."""
    server = open_server()
    _, call_id = issued_client_call(server)
    assert server.session.tool_calls.fail(call_id, "too late") is False
    assert server.written().of(ToolStream) == []
    assert server.session.tool_calls.is_client_call(call_id)
    server.send(ToolResult.success(call_id, server.session.epoch, {"a": 1}), 1.0)
    settled = [e for e in server.session.take_events() if isinstance(e, ToolSettled)]
    assert [(e.call_id, e.ok, e.output) for e in settled] == [(call_id, True, {"a": 1})]


def test_a_call_that_fails_before_it_is_issued_streams_failed() -> None:
    """§7.5: with tool-stream-v1, a call whose arguments never completed ends with a
    ``tool.stream`` of phase ``failed`` carrying the message."""
    server = open_server()
    session = server.session
    turn_id = session.begin_turn("acting")
    call_id = session.tool_calls.start(turn_id, LOOKUP.name)
    assert call_id is not None
    assert session.tool_calls.arguments_delta(call_id, '{"q":')
    server.written()
    assert session.tool_calls.fail(call_id, "the model stopped")
    streams: list[ToolStream] = server.written().of(ToolStream)
    assert [(m.call_id, m.phase, m.message) for m in streams] == [
        (call_id, "failed", "the model stopped")
    ]
    assert session.tool_calls.fail(call_id, "again") is False  # terminal: nothing follows


def test_progress_and_settling_are_for_server_calls_only() -> None:
    """§7.5: ``progress`` and a server-side settle are for calls the server runs; a
    client call (or an unknown one) is refused and keeps awaiting the client's result."""
    server = open_server()
    _, call_id = issued_client_call(server)
    session = server.session
    assert session.tool_calls.progress(call_id, {"done": 0.5}) is False
    assert session.tool_calls.settle_server_call(call_id, True) is False
    assert session.tool_calls.progress("c_unknown", {"done": 0.5}) is False
    assert session.tool_calls.settle_server_call("c_unknown", True) is False
    assert server.written().of(ToolStream) == []
    assert session.take_events() == []
    assert session.tool_calls.is_client_call(call_id)


def test_a_server_call_reports_progress_and_settles() -> None:
    """§7.5: a server call, once issued, streams progress and settles (the other half
    of the rule above: the guards refuse only what is not a running server call)."""
    server = open_server()
    session = server.session
    turn_id = session.begin_turn("acting")
    call_id = session.tool_calls.start(turn_id, "web_search", server_side=True)
    assert call_id is not None
    assert session.tool_calls.issue(call_id, {}, 0.0)
    server.written()
    assert session.tool_calls.progress(call_id, {"done": 0.5})
    assert session.tool_calls.settle_server_call(call_id, True)
    phases = [m.phase for m in server.written().of(ToolStream)]
    assert phases == ["progress", "settled"]
    assert session.take_events() == []  # a server call's outcome is the agent's own
