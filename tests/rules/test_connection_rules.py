"""Rules the server connection keeps (§4.1, §5.4, §8.1, §11), on the sans-I/O objects alone
(rules_core.py); each test closes survivors of a mutation run of
``protocol/server/connection.py`` (docs/testing.md#mutation-testing)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from rules_core import Server, open_server, read

from vrt.protocol.codec import Limits, encode
from vrt.protocol.errors import LocalProtocolError
from vrt.protocol.frames import HEADER_SIZE, FrameKind, build_frame
from vrt.protocol.messages import Ack, AgentText, Error, Hello, Ping, Ready, TurnState
from vrt.protocol.outputs import CloseCode
from vrt.protocol.server import ServerConfig, ServerConnection, ServerSession
from vrt.protocol.server.events import AudioReceived


def test_an_input_frame_with_an_empty_payload_is_audio() -> None:
    """§8.1: a frame of exactly the 5-byte header is input audio with nothing in it;
    its seq is read from bytes 1 to 4, whatever they hold."""
    server = open_server()
    for seq in (0, 7, 0x01020304, 0xFFFFFFFF):
        server.connection.receive_binary(build_frame(FrameKind.INPUT, seq, b""), 1.0)
    server.connection.receive_binary(build_frame(FrameKind.INPUT, 8, b"\x01\x02"), 1.0)
    audio = [e for e in server.session.take_events() if isinstance(e, AudioReceived)]
    assert [(e.seq, e.payload) for e in audio] == [
        (0, b""),
        (7, b""),
        (0x01020304, b""),
        (0xFFFFFFFF, b""),
        (8, b"\x01\x02"),
    ]
    assert server.written().of(Error) == []


def test_other_binary_frames_are_malformed() -> None:
    """§8.1: shorter than the header, or not of the input kind: MALFORMED, recoverable."""
    server = open_server()
    for data in (b"", bytes(HEADER_SIZE - 1), build_frame(FrameKind.OUTPUT, 1, b"x")):
        server.connection.receive_binary(data, 1.0)
    errors: list[Error] = server.written().of(Error)
    assert [(e.code, e.recoverable) for e in errors] == [("MALFORMED", True)] * 3
    assert not [e for e in server.session.take_events() if isinstance(e, AudioReceived)]


def test_an_audio_frame_at_the_limit_is_taken_and_one_byte_more_is_not() -> None:
    """§11: a binary frame of ``max_audio_frame_bytes`` is audio; one byte more is
    LIMIT_EXCEEDED, recoverable."""
    limit = 64
    config = replace(ServerConfig(), limits=replace(Limits(), max_audio_frame_bytes=limit))
    server = open_server(config=config)
    server.connection.receive_binary(build_frame(FrameKind.INPUT, 1, bytes(limit - 5)), 1.0)
    server.connection.receive_binary(build_frame(FrameKind.INPUT, 2, bytes(limit - 4)), 1.0)
    audio = [e for e in server.session.take_events() if isinstance(e, AudioReceived)]
    assert [e.seq for e in audio] == [1]
    errors: list[Error] = server.written().of(Error)
    assert [(e.code, e.recoverable) for e in errors] == [("LIMIT_EXCEEDED", True)]


def test_errors_are_sequenced_once_a_session_is_bound() -> None:
    """§4.1: an ``error`` before ``hello`` has seq 0; once the session is open, errors
    are sequenced like every other server message."""
    fresh = ServerConnection(ServerConfig(), 0.0)
    fresh.receive_text(b"not json", 0.0)
    before = read(fresh.take_outbox(), by="server")
    assert [(seq, type(m)) for seq, m in before.messages] == [(0, Error)]
    server = open_server()
    server.session.begin_turn("thinking")  # a turn.state, sequenced
    server.connection.receive_text(b"not json", 1.0)
    after = server.written()
    assert [(seq, type(m)) for seq, m in after.messages] == [(1, TurnState), (2, Error)]


def test_has_output_sees_the_connections_frames_and_the_sessions() -> None:
    """The driver writes only when ``has_output()`` is true (server/app.py): it must see
    the connection's own frames (a pong) and the bound session's."""
    server = open_server()
    assert not server.connection.has_output()
    server.connection.receive_text(encode(Ping(), 0), 1.0)
    assert server.connection.has_output()
    server.written()
    assert not server.connection.has_output()
    server.session.begin_turn("thinking")  # a turn.state, sequenced
    assert server.connection.has_output()


def test_exactly_one_burst_beyond_the_read_budget_is_not_yet_a_flood() -> None:
    """§11: reading stops past the budget; RATE_LIMITED only beyond a whole burst more."""
    config = replace(ServerConfig(), frame_rate=1.0, frame_burst=2.0)
    connection = ServerConnection(config, 0.0)
    connection.receive_text(encode(Hello(), 0), 0.0)
    spent = [connection.frame_received(0.0, 0) for _ in range(4)]
    assert spent == [False, False, True, True]  # the 3rd and 4th frames are in debt
    assert read(connection.take_outbox(), by="server").of(Error) == []
    assert connection.frame_received(0.0, 0)  # the 5th: beyond a whole burst
    errors = read(connection.take_outbox(), by="server").of(Error)
    assert [(e.code, e.recoverable) for e in errors] == [("RATE_LIMITED", False)]
    assert errors[0].message == (
        "more than 1 frames or 262144 bytes per second, long after reading was slowed (§11)"
    )


def _closes(connection: ServerConnection) -> list[tuple[int, str]]:
    return [(c.code, c.reason) for c in read(connection.take_outbox(), by="server").closes]


def test_a_websocket_control_frame_keeps_the_connection_alive() -> None:
    """§4.4: a frame of any kind counts for the heartbeat, a WebSocket ping or pong
    included (the driver reports those through frame_received alone)."""
    server = open_server(now=0.0)
    timeout = server.config.heartbeat_timeout
    server.connection.frame_received(timeout * 0.8, 0)
    server.connection.on_timer(timeout * 1.2)
    assert server.written().closes == []
    server.connection.on_timer(timeout * 1.8)
    assert [(c.code, c.reason) for c in server.written().closes] == [
        (CloseCode.HEARTBEAT_TIMEOUT, "heartbeat timeout")
    ]


def test_no_hello_in_time_closes_with_policy() -> None:
    """§5.1: a connection that sends no hello within hello_timeout is closed, 1008."""
    config = replace(ServerConfig(), hello_timeout=2.0)
    connection = ServerConnection(config, 0.0)
    connection.on_timer(1.9)
    assert _closes(connection) == []
    connection.on_timer(2.0)
    assert _closes(connection) == [(CloseCode.POLICY, "no hello within 2 s")]


def test_refusals_say_why() -> None:
    """§5.3, §5.4, §5.1: a refused hello gets its error (seq 0, not recoverable) and
    its close; the default reasons are what a client shows."""
    cases = (
        (ServerConnection.refuse_unauthorized, "UNAUTHORIZED", "authentication failed", 4401),
        (ServerConnection.refuse_start, "START_FAILED", "the session could not start", 1011),
        (ServerConnection.refuse_resume, "RESUME_FAILED", "the session cannot be resumed", None),
    )
    for refuse, code, reason, close in cases:
        connection = ServerConnection(ServerConfig(), 0.0)
        connection.receive_text(encode(Hello(), 0), 0.0)
        refuse(connection)
        written = read(connection.take_outbox(), by="server")
        errors: list[Error] = written.of(Error)
        assert [(e.code, e.message, e.recoverable) for e in errors] == [(code, reason, False)]
        if close is not None:
            assert [c.code for c in written.closes] == [close]


def test_a_second_hello_is_refused_and_says_why() -> None:
    """§5.1: one session per connection: DUPLICATE_HELLO, recoverable."""
    server = open_server()
    server.connection.receive_text(encode(Hello(), 0), 1.0)
    errors: list[Error] = server.written().of(Error)
    assert [(e.code, e.message, e.recoverable) for e in errors] == [
        ("DUPLICATE_HELLO", "this connection already has a session (§5.1)", True)
    ]


def test_the_decoder_takes_the_configured_limits() -> None:
    """§11: the server's text frames are bounded by its own ``Limits``, not the
    defaults: a 200-byte frame is refused under a 128-byte limit."""
    config = replace(ServerConfig(), limits=replace(Limits(), max_frame_bytes=128))
    server = open_server(config=config)
    server.connection.receive_text(b'{"v":1,"seq":0,"type":"ping","x":"' + b"a" * 170 + b'"}', 1.0)
    errors: list[Error] = server.written().of(Error)
    assert [(e.code, e.recoverable) for e in errors] == [("LIMIT_EXCEEDED", True)]


def _resuming(server: Server, resume_from: int, now: float) -> ServerConnection:
    """A new connection whose ``hello`` asks to resume the server's session from
    ``resume_from`` (§5.4), not yet opened."""
    connection = ServerConnection(server.config, now)
    hello = Hello(session_id=server.session.session_id, resume_from=resume_from)
    connection.receive_text(encode(hello, 0), now)
    assert len(connection.take_events()) == 1
    return connection


def test_a_newer_connection_closes_the_older_one_with_4000() -> None:
    """§5.4, §9.3: a resume of a connected session binds it to the new connection and
    closes the older one with 4000, "replaced by a newer connection"; the older one's
    end then leaves the session with the newer."""
    server = open_server()
    newer = _resuming(server, 0, 1.0)
    assert newer.open(server.session, 1.0) is server.connection
    assert _closes(server.connection) == [(CloseCode.REPLACED, "replaced by a newer connection")]
    server.connection.connection_lost(1.5)
    assert server.session.connection is newer
    assert server.session.status == "connected"


def test_a_resume_from_beyond_the_last_seq_sent_closes_the_session() -> None:
    """§5.4: ``resumeFrom`` beyond the last seq the server sent is RESUME_FAILED (seq 0,
    not recoverable), close 4404, and the session is closed: its connection, still
    bound, closes with 1000 and the reason "resume failed" (§5.6)."""
    server = open_server()
    server.session.begin_turn("thinking")  # seq 1
    refused_connection = _resuming(server, 2, 1.0)
    assert refused_connection.open(server.session, 1.0) is None
    refused = read(refused_connection.take_outbox(), by="server")
    assert [
        (seq, e.code, e.recoverable) for seq, e in refused.messages if isinstance(e, Error)
    ] == [(0, "RESUME_FAILED", False)]
    assert len(refused.messages) == 1
    assert [c.code for c in refused.closes] == [CloseCode.UNKNOWN_SESSION]
    assert server.session.ended == (CloseCode.NORMAL, "resume failed")
    assert _closes(server.connection)[-1:] == [(CloseCode.NORMAL, "resume failed")]


def test_an_ack_sent_while_opening_is_applied_after_ready() -> None:
    """§5.1, §4.2: an ``ack`` the client sends before ``ready`` is kept and handled after
    it, as an ``ack``: the session discards what it acknowledges, and a ``text`` kept
    with it is handled as the sequenced message it is (here it interrupts the turn)."""
    server = open_server()
    turn_id = server.session.begin_turn("speaking")  # seq 1
    for n in range(3):
        server.session.agent_output.send_text(turn_id, f"{n}")  # seq 2, 3, 4
    server.connection.connection_lost(1.0)
    assert server.session.status == "parked"
    connection = _resuming(server, 2, 2.0)
    connection.receive_text(encode(Ack(up_to=3), 0), 2.0)
    connection.receive_text(b'{"v":1,"seq":1,"type":"text","text":"hi"}', 2.0)
    assert connection.open(server.session, 2.0) is None
    opened = read(connection.take_outbox(), by="server")
    assert [(seq, type(m)) for seq, m in opened.messages[:3]] == [
        (0, Ready),
        (3, AgentText),
        (4, AgentText),
    ]
    # seq 4 still waits for an ack, and the interrupted (§6.2) the text caused
    assert [seq for seq, _ in server.session.outgoing.kept()] == [4, 5]
    assert server.session.incoming.last_seq == 1


def test_opening_a_connection_that_is_not_opening_is_a_local_error() -> None:
    """§5.1: a session is opened on a connection in the "opening" state alone. A driver
    that opens one before its ``hello``, or a second time, gets LocalProtocolError
    naming the rule, and the connection writes nothing."""
    early = ServerConnection(ServerConfig(), 0.0)
    with pytest.raises(LocalProtocolError, match=r"awaiting hello.*§5\.1"):
        early.open(ServerSession(Hello(), ServerConfig()), 0.0)
    assert early.take_outbox() == []
    server = open_server()
    with pytest.raises(LocalProtocolError, match=r"open.*§5\.1"):
        server.connection.open(server.session, 1.0)
    assert server.written().messages == []


def test_a_lost_connection_parks_its_session_and_has_nothing_more_to_write() -> None:
    """§5.1: open × connection closed parks the session; the connection is then closed
    and no longer the session's: it has nothing to write and no deadline, whatever
    the session does next (its messages are kept for a resume, §5.4)."""
    server = open_server()
    server.connection.connection_lost(1.0)
    assert server.session.status == "parked"
    assert server.session.connection is None
    server.session.begin_turn("thinking")
    assert not server.connection.has_output()
    assert server.connection.take_outbox() == []
    assert server.connection.timer_deadline() is None
    assert server.session.outgoing.unacked == 1


def test_a_resume_without_resume_from_resends_from_the_start() -> None:
    """§5.4: ``resumeFrom`` absent means 0 (messages.md): a resume that names only the
    session gets every message the server still keeps, from seq 1."""
    server = open_server()
    turn_id = server.session.begin_turn("speaking")  # seq 1
    server.session.agent_output.send_text(turn_id, "hello")  # seq 2
    server.connection.connection_lost(1.0)
    connection = ServerConnection(server.config, 2.0)
    connection.receive_text(encode(Hello(session_id=server.session.session_id), 0), 2.0)
    assert len(connection.take_events()) == 1
    assert connection.open(server.session, 2.0) is None
    resumed = read(connection.take_outbox(), by="server")
    assert [(seq, type(m)) for seq, m in resumed.messages] == [
        (0, Ready),
        (1, TurnState),
        (2, AgentText),
    ]
