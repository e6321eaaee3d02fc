"""Rules a server session keeps (§4.1, §5, §6.2, §7.2, §8.2, §11), on the sans-I/O
objects alone (rules_core.py): the formats it chooses, what it keeps and for how long,
how it ends, what it tells the agent of the client's interrupts, results and context,
and what the agent is not told. Each test closes survivors of a mutation run of
``protocol/server/session.py`` (docs/testing.md#mutation-testing)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from rules_core import LOOKUP, TOOL_STREAM, Server, Written, issued_client_call, open_server, read

from vrt.protocol.codec import Decoded, decode_server, encode
from vrt.protocol.errors import LocalProtocolError
from vrt.protocol.messages import (
    PCM16_24K,
    AgentText,
    ContextUpdate,
    Error,
    Format,
    Hello,
    Interrupt,
    Interrupted,
    Message,
    Ready,
    Tool,
    ToolResult,
    ToolStream,
    UserText,
)
from vrt.protocol.outputs import Close, CloseCode
from vrt.protocol.server import ServerConfig, ServerConnection, ServerSession
from vrt.protocol.server.events import (
    AgentInput,
    AudioReceived,
    ContextChanged,
    ResponseInterrupted,
    ToolSettled,
)
from vrt.protocol.streams import MAX_SEQ, IncomingStream, OutgoingStream

PCM16_16K = Format(encoding="pcm16", sample_rate=16000)


def _resume(server: Server, resume_from: int, now: float) -> Written:
    """A new connection resuming the server's session from ``resume_from`` (§5.4): what
    it writes (ready and the resent messages, or the refusal)."""
    connection = ServerConnection(server.config, now)
    hello = Hello(session_id=server.session.session_id, resume_from=resume_from)
    connection.receive_text(encode(hello, 0), now)
    assert len(connection.take_events()) == 1
    connection.open(server.session, now)
    return read(connection.take_outbox(), by="server")


def _settled(events: list[AgentInput]) -> list[ToolSettled]:
    return [event for event in events if isinstance(event, ToolSettled)]


def _interrupts(events: list[AgentInput]) -> list[ResponseInterrupted]:
    return [event for event in events if isinstance(event, ResponseInterrupted)]


# -- §8.2: formats --------------------------------------------------------------------


def test_the_clients_preferred_format_is_taken_when_the_agent_takes_it() -> None:
    """§8.2: a preference the agent takes unchanged is the session's format (no
    transcoding), for input as for output; any other gets pcm16 at 24000 Hz."""
    hello = Hello(input=PCM16_16K, output=PCM16_16K)
    both = (PCM16_24K, PCM16_16K)
    session = ServerSession(hello, ServerConfig(), input_formats=both, output_formats=both)
    assert (session.record.input, session.record.output) == (PCM16_16K, PCM16_16K)
    only_24k = ServerSession(hello, ServerConfig())
    assert (only_24k.record.input, only_24k.record.output) == (PCM16_24K, PCM16_24K)


# -- §4.1, §5.4, §11: what a session keeps for resends ---------------------------------


def test_the_kept_messages_are_bounded_in_bytes_and_a_resume_past_them_fails() -> None:
    """§4.1, §11: the unacknowledged messages a session keeps for resends are bounded by
    ``max_unacked_bytes`` (the oldest go first); §5.4: a resume that needs a message no
    longer kept fails with RESUME_FAILED, while one that needs only kept messages
    gets them."""
    config = replace(ServerConfig(), max_unacked_bytes=400)
    server = open_server(config=config)
    session = server.session
    turn_id = session.begin_turn("speaking")
    for n in range(6):
        assert session.agent_output.send_text(turn_id, f"{n}" * 100)  # about 150 bytes each
    last = session.outgoing.last_seq
    assert last == 7
    resumed = _resume(server, last - 1, 1.0)
    assert [(seq, type(m)) for seq, m in resumed.messages] == [(0, Ready), (last, AgentText)]
    assert resumed.of(AgentText)[0].text == "5" * 100
    refused = _resume(server, 0, 2.0)
    assert [(e.code, e.recoverable) for e in refused.of(Error)] == [("RESUME_FAILED", False)]
    assert [c.code for c in refused.closes] == [CloseCode.UNKNOWN_SESSION]
    assert session.status == "closed"


def test_a_restored_session_keeps_its_config() -> None:
    """§5.1: a session rebuilt from a store (another process) parks for its config's
    resume window and bounds its context by its config's ``max_state_bytes``."""
    config = replace(ServerConfig(), resume_window=7.0, max_state_bytes=64)
    server = open_server(config=config)
    old = server.session
    session = ServerSession.restore(
        old.record, config, outgoing=old.outgoing, incoming=IncomingStream()
    )
    session.attach(server.connection, 1.0)
    session.receive_sequenced(Decoded(1, ContextUpdate(context="x" * 64)), 1.0)
    assert session.context is None
    assert [e.code for e in read(session.take_outbox(), by="server").of(Error)] == [
        "LIMIT_EXCEEDED"
    ]
    session.park(10.0)
    assert session.timer_deadline() == 17.0


# -- §5.6, §4.1: how a session ends ---------------------------------------------------


def test_a_closed_session_closes_its_connection_normally_and_waits_for_nothing() -> None:
    """§5.6, §9.3: a session the server ends closes its connection with 1000; a closed
    session has no resume deadline left (a session store reads it for its lease)."""
    server = open_server()
    server.session.close()
    assert server.written().closes == [Close(code=CloseCode.NORMAL, reason="session closed")]
    server.session.park(1.0)
    assert server.session.record.expires_at is None
    parked = open_server().session
    parked.park(1.0)
    assert parked.record.expires_at is not None
    parked.close()
    assert parked.record.expires_at is None
    assert parked.status == "closed"


def test_after_the_last_seq_the_session_ends() -> None:
    """§4.1: nothing may follow sequenced message 4294967295: the session sends it,
    then ends, and its connection closes saying why (the client opens a new session)."""
    server = open_server()
    session = server.session
    session.outgoing = OutgoingStream(last_seq=MAX_SEQ - 1)
    session.begin_turn("thinking")
    written = server.written()
    assert [seq for seq, _ in written.messages] == [MAX_SEQ]
    assert written.closes == [
        Close(code=CloseCode.NORMAL, reason="sequence numbers exhausted; open a new session")
    ]


def test_the_observer_sees_each_message_as_it_is_sent() -> None:
    """What a session store journals: each sequenced message with its seq and its
    encoding, in order."""
    server = open_server()
    session = server.session
    seen: list[tuple[int, Message, bytes]] = []

    class Observer:
        def sent(self, seq: int, message: Message, data: bytes) -> None:
            seen.append((seq, message, data))

        def event(self, event: AgentInput) -> None:
            pass

    session.observer = Observer()
    turn_id = session.begin_turn("speaking")
    session.agent_output.send_text(turn_id, "hi")
    assert [seq for seq, _, _ in seen] == [1, 2]
    for seq, message, data in seen:
        decoded = decode_server(data)
        assert isinstance(decoded, Decoded)
        assert (decoded.seq, decoded.message) == (seq, message)


# -- §8.1: input audio ----------------------------------------------------------------


def test_input_audio_given_to_the_session_is_the_agents_event() -> None:
    """§8.1: an input frame's payload and audio seq reach the agent unchanged."""
    session = open_server().session
    session.audio_received(AudioReceived(payload=b"\x01\x02", seq=7))
    assert session.take_events() == [AudioReceived(payload=b"\x01\x02", seq=7)]


# -- §6.2, §6.3: interruptions and the agent ------------------------------------------


@pytest.mark.parametrize("reason", ["speech", "user", "keyboard"])
def test_the_agent_hears_the_reason_of_the_clients_interrupt(reason: str) -> None:
    """§6.2: the client's interrupt names a reason; the agent is told it with the turn
    and the closed epoch."""
    server = open_server()
    turn_id = server.session.begin_turn("speaking")
    epoch = server.session.epoch
    server.send(Interrupt(epoch=epoch, reason=reason), 1.0)  # type: ignore[arg-type]
    interrupts = _interrupts(server.session.take_events())
    assert [(e.turn_id, e.epoch, e.reason) for e in interrupts] == [(turn_id, epoch, reason)]


def test_user_text_interrupts_with_reason_user() -> None:
    """§6.3: text while a response is in flight interrupts it as in §6.2, reason user."""
    server = open_server()
    server.session.begin_turn("speaking")
    server.send(UserText(text="stop"), 1.0)
    assert [e.reason for e in _interrupts(server.session.take_events())] == ["user"]


def test_the_agent_is_not_told_of_interruptions_it_made() -> None:
    """§6.2: the server interrupting on its own (speech detected, the agent's
    ``interrupt_response``, a turn cut short) sends ``interrupted`` to the client, but
    reports no ResponseInterrupted to the agent, which asked for it."""
    for interrupt in (
        ServerSession.user_started_speaking,
        ServerSession.interrupt_response,
        lambda session: session.cut_short("moved"),
    ):
        server = open_server()
        session = server.session
        session.begin_turn("speaking")
        session.take_events()
        server.written()
        interrupt(session)
        assert server.written().of(Interrupted)
        assert _interrupts(session.take_events()) == []


def test_an_interrupt_settles_only_the_issued_client_calls_for_the_agent() -> None:
    """§6.2, §7.2: interrupting settles the epoch's pending *client* calls as
    INTERRUPTED, each once, for the agent; every call of the epoch is cancelled (§7.5),
    but a call never issued, or one the server runs, has no result to report."""
    server = open_server()
    session = server.session
    turn_id = session.begin_turn("acting")
    issued = session.tool_calls.start(turn_id, LOOKUP.name)
    unissued = session.tool_calls.start(turn_id, LOOKUP.name)
    server_call = session.tool_calls.start(turn_id, "web_search", server_side=True)
    assert issued is not None
    assert unissued is not None
    assert server_call is not None
    assert session.tool_calls.issue(issued, {"q": "x"}, 0.0)
    assert session.tool_calls.issue(server_call, {}, 0.0)
    server.written()
    session.take_events()
    server.send(Interrupt(epoch=session.epoch, reason="user"), 1.0)
    settled = _settled(session.take_events())
    assert [(e.call_id, e.ok, e.code, e.message) for e in settled] == [
        (issued, False, "INTERRUPTED", "the turn was interrupted")
    ]
    cancelled = [m.call_id for m in server.written().of(ToolStream) if m.phase == "cancelled"]
    assert sorted(cancelled) == sorted([issued, unissued, server_call])


# -- §7.2: results and timeouts -------------------------------------------------------


def test_a_result_for_a_server_call_is_ignored() -> None:
    """§7.2, §7.5: the client answers only the calls it was sent; a ``tool.result``
    naming a call the server runs is ignored, and the server still settles it."""
    server = open_server()
    session = server.session
    turn_id = session.begin_turn("acting")
    call_id = session.tool_calls.start(turn_id, "web_search", server_side=True)
    assert call_id is not None
    assert session.tool_calls.issue(call_id, {}, 0.0)
    server.written()
    server.send(ToolResult.success(call_id, session.epoch, {"forged": True}), 1.0)
    assert session.take_events() == []
    assert server.written().of(ToolStream) == []
    assert session.tool_calls.settle_server_call(call_id, True)


@pytest.mark.parametrize("message", ["the user said no", None])
def test_a_failed_result_reaches_the_agent_with_its_code_and_message(
    message: str | None,
) -> None:
    """§7.2, §7.3: ``{ ok: false, code, message }``: the agent gets the client's code
    and message (null stays null); ``settled`` carries the code (§7.5)."""
    server = open_server()
    session = server.session
    _, call_id = issued_client_call(server)
    server.send(ToolResult.failure(call_id, session.epoch, "REJECTED", message), 1.0)
    settled = _settled(session.take_events())
    assert [(e.call_id, e.ok, e.code, e.message) for e in settled] == [
        (call_id, False, "REJECTED", message)
    ]
    streams: list[ToolStream] = server.written().of(ToolStream)
    assert [(m.phase, m.ok, m.code) for m in streams] == [("settled", False, "REJECTED")]


def test_a_call_without_a_result_times_out_and_the_agent_hears_why() -> None:
    """§7.2: a client call with no result within ``tool_timeout`` settles as TIMEOUT;
    the agent is told no result arrived in time."""
    server = open_server()
    session = server.session
    _, call_id = issued_client_call(server)
    session.on_timer(server.config.tool_timeout)
    settled = _settled(session.take_events())
    assert [(e.call_id, e.ok, e.code, e.message) for e in settled] == [
        (call_id, False, "TIMEOUT", "no result arrived in time")
    ]


def test_a_call_never_issued_fails_when_its_turn_ends() -> None:
    """§7.5: a call whose arguments never completed ends ``failed`` with its turn,
    the message saying so."""
    server = open_server()
    session = server.session
    turn_id = session.begin_turn("acting")
    call_id = session.tool_calls.start(turn_id, LOOKUP.name)
    assert call_id is not None
    server.written()
    assert session.end_turn(turn_id)
    streams: list[ToolStream] = server.written().of(ToolStream)
    assert [(m.call_id, m.phase, m.message) for m in streams] == [
        (call_id, "failed", "the turn ended before the call was issued")
    ]


# -- §5.5, §11: the context -----------------------------------------------------------


def test_a_context_is_bounded_together_with_the_tools() -> None:
    """§5.5, §11: what a session keeps of the client's data (the tools' JSON and the
    context's) is at most ``max_state_bytes``: a context that fits exactly is taken,
    one byte more is LIMIT_EXCEEDED (recoverable) and the previous context stays."""
    tools = (Tool(name="lookup", description="d" * 200),)
    probe = open_server(tools=tools, capabilities=(TOOL_STREAM,)).session
    tools_bytes = len(probe.record.tools_json)
    assert tools_bytes > 200
    limit = tools_bytes + 12
    server = open_server(
        tools=tools, config=replace(ServerConfig(), max_state_bytes=limit), capabilities=()
    )
    session = server.session
    server.send(ContextUpdate(context="x" * 10), 1.0)  # 12 bytes of JSON: exactly the limit
    assert session.take_events() == [ContextChanged(context="x" * 10)]
    assert session.context == "x" * 10
    server.send(ContextUpdate(context="y" * 11), 2.0)
    assert session.take_events() == []
    assert session.context == "x" * 10
    errors: list[Error] = server.written().of(Error)
    assert [(e.code, e.recoverable, e.message) for e in errors] == [
        (
            "LIMIT_EXCEEDED",
            True,
            f"a context of 13 bytes: with the tools this session would keep "
            f"{tools_bytes + 13} bytes of client data, and keeps at most {limit} (§11); "
            "the previous context stays",
        )
    ]


# -- §6.1: turns ----------------------------------------------------------------------


def test_no_turn_begins_idle() -> None:
    """§6.1: ``idle`` is how a turn ends; the agent cannot begin one in it."""
    session = open_server().session
    with pytest.raises(
        LocalProtocolError, match=r"^a turn begins in listening, thinking, speaking or acting$"
    ):
        session.begin_turn("idle")
    assert session.turn_id is None
    assert session.epoch == 0
