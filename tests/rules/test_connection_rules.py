"""Rules the server connection keeps (§4.1, §8.1, §11), on the sans-I/O objects alone
(rules_core.py); each test closes survivors of a mutation run of
``protocol/server/connection.py`` (docs/testing.md#mutation-testing)."""

from __future__ import annotations

from dataclasses import replace

from rules_core import open_server, read

from vrt.protocol.codec import Limits, encode
from vrt.protocol.frames import HEADER_SIZE, FrameKind, build_frame
from vrt.protocol.messages import Error, Hello, Ping, TurnState
from vrt.protocol.server import ServerConfig, ServerConnection
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
