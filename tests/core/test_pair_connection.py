"""The server connection's rows of §5.1 over the pair: opening, refusals, input before
ready, invalid input and floods (§9.1, §11), shutdown (§5.6)."""

from __future__ import annotations

import pytest

from vrt.protocol import (
    ClientSession,
    Decoded,
    Error,
    ErrorReceived,
    Hello,
    LocalProtocolError,
    Ping,
    SessionFailed,
    Tool,
    UserText,
    decode_server,
    encode,
)
from vrt.protocol.frames import FrameKind, build_frame
from vrt.protocol.outputs import Close, CloseCode, SendBinary, SendText
from vrt.protocol.server import ServerConfig, ServerConnection, ServerSession, UserTextReceived
from vrt.protocol.tables import ClientState, ServerState
from vrt.protocol.testing import Link, Pair


def errors(pair: Pair) -> list[tuple[str, bool]]:
    out: list[tuple[str, bool]] = []
    for _, direction, item in pair.trace:
        if direction == "to_client" and isinstance(item, SendText):
            decoded = decode_server(item.data)
            if isinstance(decoded, Decoded) and isinstance(decoded.message, Error):
                out.append((decoded.message.code, decoded.message.recoverable))
    return out


def close_codes(pair: Pair) -> list[int]:
    return [i.code for _, d, i in pair.trace if d == "to_client" and isinstance(i, Close)]


class Deferring(Pair):
    """A server that decides on each hello only when the test says so."""

    def __init__(self, client: ClientSession | None = None, config: ServerConfig | None = None):
        super().__init__(client, config)
        self.pending: list[tuple[Link, Hello]] = []

    def decide(self, link: Link, hello: Hello) -> None:
        self.pending.append((link, hello))

    def go_on(self) -> None:
        for link, hello in self.pending:
            super().decide(link, hello)
        self.pending.clear()
        self.settle()


def test_messages_before_ready_are_kept_and_handled_after_it() -> None:
    """§5.1 opening × sequenced message and ack: kept, in order, handled after ready;
    ping is answered meanwhile (§4.4); input audio is ignored (§8.1)."""
    pair = Deferring()
    link = pair.connect()
    for n, text in enumerate(("one", "two"), 1):
        link.to_server.write(SendText(data=encode(UserText(text=text), n)), pair.now)
    link.to_server.write(SendText(data=encode(Ping(), 0)), pair.now)
    link.to_server.write(SendBinary(data=build_frame(FrameKind.INPUT, 0, b"\0\0")), pair.now)
    link.to_server.write(SendText(data=encode(Hello(), 0)), pair.now)  # a second hello
    pair.settle()
    assert link.server.state is ServerState.OPENING
    assert errors(pair) == [("DUPLICATE_HELLO", True)]
    pair.go_on()
    assert pair.agent_events == [UserTextReceived(text="one"), UserTextReceived(text="two")]


def test_too_many_messages_before_ready_are_refused() -> None:
    """§11: at most max_kept_while_opening messages are kept before ready."""
    pair = Deferring(config=ServerConfig(max_kept_while_opening=1))
    link = pair.connect()
    for n in (1, 2):
        link.to_server.write(SendText(data=encode(UserText(text=str(n)), n)), pair.now)
    pair.settle()
    assert errors(pair) == [("LIMIT_EXCEEDED", True)]


def test_a_connection_gone_before_the_decision_binds_nothing() -> None:
    """§5.1: a connection closed while its hello is decided opens nothing."""
    pair = Deferring()
    link = pair.connect()
    pair.cut()
    session = ServerSession(Hello(), pair.config)
    assert link.server.open(session, pair.now) is None
    assert session.connection is None


def test_before_hello_sequenced_messages_and_acks_get_no_session() -> None:
    """§5.1 awaiting hello: a sequenced message or an ack gets NO_SESSION (seq 0); a
    ping gets pong; input audio is ignored."""
    server = ServerConnection(ServerConfig(), 0.0)  # no client core: raw frames
    server.receive_text(encode(UserText(text="x"), 1), 0.0)
    server.receive_text(b'{"v":1,"seq":0,"type":"ack","upTo":1}', 0.0)
    server.receive_text(encode(Ping(), 0), 0.0)
    server.receive_binary(build_frame(FrameKind.INPUT, 0, b""), 0.0)
    sent = [decode_server(item.data) for item in server.take_outbox() if isinstance(item, SendText)]
    kinds = [
        (d.message.code if isinstance(d.message, Error) else d.message.TYPE)
        for d in sent
        if isinstance(d, Decoded)
    ]
    assert kinds == ["NO_SESSION", "NO_SESSION", "pong"]
    assert server.state is ServerState.AWAITING_HELLO


def test_an_unauthorized_hello_is_refused_4401_and_a_fresh_credential_opens() -> None:
    """§5.3: error UNAUTHORIZED (seq 0), close 4401; the client waits for a fresh
    credential and does not retry the same one."""

    class Guarded(Pair):
        def decide(self, link: Link, hello: Hello) -> None:
            if hello.auth != "good":
                link.server.refuse_unauthorized()
            else:
                super().decide(link, hello)

    pair = Guarded(ClientSession(auth="bad"))
    pair.connect()
    assert close_codes(pair) == [CloseCode.UNAUTHORIZED]
    assert pair.client.auth_refused
    assert [e.code for e in pair.client_events if isinstance(e, SessionFailed)] == ["UNAUTHORIZED"]
    pair.client.auth = "good"
    pair.connect()
    assert pair.client.state is ClientState.OPEN
    assert not pair.client.auth_refused


def test_a_session_that_cannot_start_is_refused_1011() -> None:
    """§5.1 opening × the session cannot start: error START_FAILED, close 1011; the
    client reports it and stops."""

    class Failing(Pair):
        def decide(self, link: Link, hello: Hello) -> None:
            link.server.refuse_start()

    pair = Failing()
    pair.connect()
    assert errors(pair) == [("START_FAILED", False)]
    assert close_codes(pair) == [CloseCode.START_FAILED]
    assert pair.client.state is ClientState.CLOSED


def test_shutdown_ends_the_connection_with_a_final_error() -> None:
    """§5.6: error SERVER_SHUTDOWN, not recoverable, close 1001: the client does not
    resume here."""
    pair = Pair()
    link = pair.connect()
    link.server.shut_down("maintenance")
    pair.settle()
    assert errors(pair) == [("SERVER_SHUTDOWN", False)]
    assert close_codes(pair) == [CloseCode.GOING_AWAY]
    assert pair.client.state is ClientState.CLOSED
    assert link.server.timer_deadline() is None
    link.server.on_timer(pair.now + 100)  # a closed connection ignores its timer


def test_a_flood_of_invalid_frames_is_rate_limited() -> None:
    """§11: more than max_invalid invalid frames in the window: RATE_LIMITED, not
    recoverable, close 1008. Below it each gets its recoverable error."""
    pair = Pair(config=ServerConfig(max_invalid=2, invalid_window=10.0))
    link = pair.connect()
    for _ in range(3):
        link.to_server.write(SendText(data=b"not json"), pair.now)
    pair.settle()
    assert errors(pair) == [("MALFORMED", True), ("MALFORMED", True), ("RATE_LIMITED", False)]
    assert close_codes(pair) == [CloseCode.POLICY]


def test_invalid_frames_spread_out_are_not_a_flood() -> None:
    """§11: the invalid-frame count is per window."""
    pair = Pair(config=ServerConfig(max_invalid=1, invalid_window=1.0))
    link = pair.connect()
    for _ in range(3):
        link.to_server.write(SendText(data=b"not json"), pair.now)
        pair.advance(1.0)
    assert errors(pair) == [("MALFORMED", True)] * 3


def test_an_oversized_audio_frame_is_refused() -> None:
    """§11: an audio frame beyond max_audio_frame_bytes gets LIMIT_EXCEEDED."""
    pair = Pair()
    link = pair.connect()
    limit = pair.config.limits.max_audio_frame_bytes
    link.to_server.write(SendBinary(data=build_frame(FrameKind.INPUT, 0, bytes(limit))), pair.now)
    pair.settle()
    assert errors(pair) == [("LIMIT_EXCEEDED", True)]


def test_the_read_budget_slows_reading_and_closes_a_flood() -> None:
    """§11 (budget.py): past the budget the driver stops reading until readable_at;
    a connection a whole burst beyond it is closed RATE_LIMITED."""
    config = ServerConfig(frame_rate=1.0, frame_burst=2.0)
    pair = Pair(config=config)
    link = pair.connect()  # the hello took one frame
    server = link.server
    assert not server.frame_received(pair.now, 10)  # the second
    assert server.readable_at() == pair.now  # within the budget: readable now
    assert server.frame_received(pair.now, 10)  # in debt: stop reading
    assert server.readable_at() == pytest.approx(pair.now + 1.0)
    for _ in range(3):
        server.frame_received(pair.now, 10)
    pair.settle()
    assert errors(pair) == [("RATE_LIMITED", False)]


def test_the_pair_pauses_reading_while_the_budget_is_spent() -> None:
    """§11: frames wait (in TCP) while reading is paused; none is lost."""
    pair = Pair(config=ServerConfig(frame_rate=10.0, frame_burst=2.0))
    pair.connect()
    for n in range(4):
        pair.client.send_text(str(n), pair.now)
    pair.settle()
    assert len(pair.agent_events) < 4
    pair.advance(1.0)
    assert [e for e in pair.agent_events if isinstance(e, UserTextReceived)] == [
        UserTextReceived(text=str(n)) for n in range(4)
    ]


def test_a_client_ignores_a_ready_when_it_waits_for_none() -> None:
    """§5.1 open × ready: ignore; connecting × ready: ignore."""
    pair = Pair()
    link = pair.connect()
    ready = next(i for _, d, i in pair.trace if d == "to_client" and isinstance(i, SendText))
    link.to_client.write(ready, pair.now)
    pair.settle()
    assert pair.client.state is ClientState.OPEN
    pair.cut()
    pair.client.receive_text(ready.data, pair.now)
    assert pair.client.state is ClientState.CONNECTING
    assert pair.client.timer_deadline() is None
    pair.client.on_timer(pair.now)  # nothing to do while connecting


def test_an_error_that_is_not_recoverable_is_reported_and_resumed_from() -> None:
    """§9.2: RATE_LIMITED ends the connection, not the session: the client reports it
    and resumes (§5.1 open × error that is not recoverable)."""
    pair = Pair(config=ServerConfig(max_invalid=0))
    link = pair.connect()
    link.to_server.write(SendText(data=b"not json"), pair.now)
    pair.settle()
    reported = [e for e in pair.client_events if isinstance(e, ErrorReceived)]
    assert [(e.code, e.recoverable) for e in reported] == [("RATE_LIMITED", False)]
    assert pair.client.state is ClientState.CONNECTING
    pair.connect()
    assert pair.client.state is ClientState.OPEN


def test_tool_names_must_be_unique() -> None:
    """§5.2: tool names are unique."""
    with pytest.raises(LocalProtocolError):
        ClientSession(tools=(Tool(name="a"), Tool(name="a")))


def test_an_ended_session_owes_its_connection_a_close() -> None:
    """§5.6: a session the agent ends closes its connection. The driver writes only
    when ``has_output()`` is true, so a session that ended with nothing left to send
    must still count: the close is the output."""
    pair = Pair()
    link = pair.connect()
    pair.settle()
    assert not link.server.has_output()
    pair.session.close("the agent is done")
    assert link.server.has_output()
    assert link.server.take_outbox() == [Close(code=CloseCode.NORMAL, reason="the agent is done")]
