"""Timers on the pair's fake clock: heartbeat (§4.4), acknowledgement delay (§4.2), the
hello deadline, tool timeouts while parked (§7.2, §7.3) and the resume window (§5.1)."""

from __future__ import annotations

from vrt.protocol import (
    Ack,
    ClientSession,
    Decoded,
    Ping,
    Pong,
    RunTool,
    Tool,
    decode_client,
    decode_server,
)
from vrt.protocol.client.session import DEAD_AFTER_INTERVALS, PING_INTERVAL
from vrt.protocol.outputs import Close, CloseCode, SendText
from vrt.protocol.server import ServerConfig, ToolSettled
from vrt.protocol.streams import ACK_AFTER_MESSAGES, ACK_DELAY
from vrt.protocol.tables import ClientState, ServerState
from vrt.protocol.testing import Direction, Pair


def decoded(pair: Pair, direction: Direction) -> list[tuple[float, object]]:
    """Each text frame that arrived ``direction``, decoded, with its time."""
    decode = decode_client if direction == "to_server" else decode_server
    out: list[tuple[float, object]] = []
    for at, way, item in pair.trace:
        if way == direction and isinstance(item, SendText):
            result = decode(item.data)
            assert isinstance(result, Decoded)
            out.append((at, result.message))
    return out


def closes(pair: Pair, direction: Direction) -> list[int]:
    return [
        item.code for _, way, item in pair.trace if way == direction and isinstance(item, Close)
    ]


def test_the_client_pings_after_its_interval_and_the_server_pongs() -> None:
    """§4.4: a client pings whenever it sent nothing for its ping interval; a server
    answers every ping with pong."""
    pair = Pair()
    pair.connect()
    pair.advance(PING_INTERVAL * 2 + 1)
    pings = [at for at, m in decoded(pair, "to_server") if isinstance(m, Ping)]
    pongs = [at for at, m in decoded(pair, "to_client") if isinstance(m, Pong)]
    assert pings == [PING_INTERVAL, PING_INTERVAL * 2]
    assert pongs == pings
    assert pair.client.state is ClientState.OPEN


def test_a_silent_server_is_taken_for_dead_and_the_client_resumes() -> None:
    """§4.4: nothing received for 2.5 ping intervals: the client closes the connection
    (4000) and may resume."""
    pair = Pair()
    link = pair.connect()
    link.to_client.held = True  # the server's frames never come
    pair.advance(PING_INTERVAL * DEAD_AFTER_INTERVALS - 0.001)
    assert pair.client.state is ClientState.OPEN
    pair.advance(0.001)
    assert pair.client.state is ClientState.CONNECTING
    assert closes(pair, "to_server") == [CloseCode.REPLACED]
    assert link.server.state is ServerState.CLOSED  # the close reached it
    pair.connect()
    assert pair.client.state is ClientState.OPEN


def test_a_silent_client_is_closed_4408_and_its_session_stays_resumable() -> None:
    """§4.4: no frame of any kind for the heartbeat timeout: close 4408; the session is
    parked and resumable (§5.4) until its resume window ends (§5.1)."""
    config = ServerConfig(heartbeat_timeout=45.0, resume_window=30.0)
    pair = Pair(config=config)
    link = pair.connect()
    pair.cut(link, client_notices=False, server_notices_after=None)  # half-open
    session = pair.session
    pair.advance(45.0)
    assert link.server.state is ServerState.CLOSED
    assert session.status == "parked"
    pair.advance(29.0)
    assert session.status == "parked"
    pair.advance(1.0)
    assert session.status == "closed"
    assert session.ended == (CloseCode.NORMAL, "resume window expired")


def test_a_resume_within_the_window_keeps_the_session() -> None:
    """§5.1: a parked session waits resume_window for a resume."""
    pair = Pair(config=ServerConfig(resume_window=30.0))
    pair.connect()
    pair.cut()
    pair.advance(29.0)
    pair.connect()
    assert pair.session.status == "connected"
    pair.advance(60.0)
    assert pair.session.status == "connected"


def test_no_hello_within_the_deadline_closes_1008() -> None:
    """The hello deadline (docs/limits.md): a connection without hello closes 1008."""
    pair = Pair(config=ServerConfig(hello_timeout=10.0))
    link = pair.connect(latency=1.0)  # the hello is in flight...
    pair.cut(link, lose_in_flight=True, client_notices=False, server_notices_after=None)
    pair.advance(9.9)
    assert link.server.state is ServerState.AWAITING_HELLO
    pair.advance(0.1)
    assert link.server.state is ServerState.CLOSED
    assert not link.server_open  # nobody answered the close: the socket ended


def test_acks_come_within_the_delay_or_after_32_messages() -> None:
    """§4.2 RECOMMENDED: ack no later than 250 ms after the first unacknowledged
    message, or after every 32 messages."""
    pair = Pair()
    pair.connect()
    pair.client.send_text("one", pair.now)
    pair.settle()
    pair.advance(ACK_DELAY)
    acks = [(at, m.up_to) for at, m in decoded(pair, "to_client") if isinstance(m, Ack)]
    assert acks == [(ACK_DELAY, 1)]
    turn = pair.session.begin_turn("speaking")
    for n in range(ACK_AFTER_MESSAGES - 1):
        pair.session.agent_output.send_text(turn, str(n))
    pair.advance(0.0)  # timers due now fire
    client_acks = [(at, m.up_to) for at, m in decoded(pair, "to_server") if isinstance(m, Ack)]
    assert client_acks == [(pair.now, ACK_AFTER_MESSAGES)]  # at once, not after 250 ms
    assert pair.session.outgoing.unacked == 0


def test_a_client_call_times_out_while_parked() -> None:
    """§7.2, §7.3: a server MAY settle a call without a result as TIMEOUT, parked or
    not; the late result after the resume is ignored (§7.2)."""
    pair = Pair(ClientSession(tools=(Tool(name="lookup"),)), ServerConfig(tool_timeout=5.0))
    pair.connect()
    session = pair.session
    turn = session.begin_turn("acting")
    call_id = session.tool_calls.start(turn, "lookup")
    assert call_id is not None
    assert session.tool_calls.issue(call_id, {"q": 1}, pair.now)
    pair.settle()
    assert [e.call_id for e in pair.client_events if isinstance(e, RunTool)] == [call_id]
    pair.cut()
    pair.advance(5.0)
    settled = [e for e in pair.agent_events if isinstance(e, ToolSettled)]
    assert [(e.call_id, e.ok, e.code) for e in settled] == [(call_id, False, "TIMEOUT")]
    pair.client.tool_finished(call_id, True, pair.now, output="late")
    pair.connect()
    pair.advance(1.0)
    assert len([e for e in pair.agent_events if isinstance(e, ToolSettled)]) == 1


def test_a_call_answered_in_time_settles_ok() -> None:
    """§7.2: exactly one tool.result per call, carrying its callId."""
    pair = Pair(
        ClientSession(tools=(Tool(name="lookup"),)),
        run_tool=lambda run: {"echo": run.arguments},
    )
    pair.connect()
    session = pair.session
    turn = session.begin_turn("acting")
    call_id = session.tool_calls.start(turn, "lookup", provider_id="p1")
    assert call_id is not None
    session.tool_calls.issue(call_id, 7, pair.now)
    pair.settle()
    settled = [e for e in pair.agent_events if isinstance(e, ToolSettled)]
    assert [(e.call_id, e.provider_id, e.ok, e.output) for e in settled] == [
        (call_id, "p1", True, {"echo": 7})
    ]


def test_a_server_that_notices_a_cut_late_parks_the_session_then() -> None:
    """§5.1: the resume window starts when the server learns the connection is gone."""
    pair = Pair(config=ServerConfig(resume_window=10.0))
    link = pair.connect(latency=0.1)
    pair.advance(1.0)
    turn = pair.session.begin_turn("speaking")
    pair.settle()  # turn.state in flight to the client
    pair.cut(link, lose_in_flight=False, server_notices_after=5.0)
    assert pair.session.status == "connected"
    pair.advance(5.0)
    assert pair.session.status == "parked"
    assert pair.session.record.expires_at == pair.now + 10.0
    # The frame in flight reached a client that had moved on: not handled.
    assert [e for e in pair.client_events if isinstance(e, RunTool)] == []
    pair.session.agent_output.send_text(turn, "resent")
    pair.connect()
    assert pair.client.incoming.last_seq == 2
