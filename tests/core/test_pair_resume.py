"""Precise interleavings of resumes (§5.4) over the in-memory pair: what the state
machines find only by chance, pinned down one by one."""

from __future__ import annotations

import pytest

from vrt.protocol import (
    ClientSession,
    Connected,
    Decoded,
    Error,
    ErrorReceived,
    Hello,
    LocalProtocolError,
    Ready,
    SessionFailed,
    TextReceived,
    TurnChanged,
    decode_server,
)
from vrt.protocol.outputs import Close, CloseCode, SendText
from vrt.protocol.server import ServerConfig, ServerSession, UserTextReceived
from vrt.protocol.streams import MAX_SEQ, OutgoingStream
from vrt.protocol.tables import ClientState, ServerState
from vrt.protocol.testing import Link, Pair


def server_messages(pair: Pair) -> list[object]:
    """What the client was handed, decoded, in order."""
    out: list[object] = []
    for _, direction, item in pair.trace:
        if direction == "to_client" and isinstance(item, SendText):
            decoded = decode_server(item.data)
            assert isinstance(decoded, Decoded)
            out.append(decoded.message)
    return out


def user_texts(pair: Pair) -> list[str]:
    return [e.text for e in pair.agent_events if isinstance(e, UserTextReceived)]


def agent_texts(pair: Pair) -> list[str]:
    return [e.text for e in pair.client_events if isinstance(e, TextReceived)]


def speaking(pair: Pair) -> str:
    return pair.session.begin_turn("speaking")


def test_resume_resends_what_the_client_missed() -> None:
    """§5.4: the server resends every message with seq > resumeFrom, the client every one
    with seq > resumedFrom, before any new one; each is handled once."""
    pair = Pair()
    pair.connect()
    turn = speaking(pair)
    pair.cut()
    pair.session.agent_output.send_text(turn, "while parked")
    pair.client.send_text("while away", pair.now)
    pair.connect()
    assert agent_texts(pair) == ["while parked"]
    assert user_texts(pair) == ["while away"]
    connected = [e for e in pair.client_events if isinstance(e, Connected)]
    assert [e.resumed for e in connected] == [False, True]
    ready = [m for m in server_messages(pair) if isinstance(m, Ready)][-1]
    assert ready.resumed_from == 0  # the server had handled nothing of the client's yet


def test_a_cut_between_a_write_and_its_ack_delivers_once() -> None:
    """§4.2, §4.3, §5.4: the message arrived but its ack was cut off; the resume's
    resumeFrom says it arrived, so it is not resent, and handled once."""
    pair = Pair()
    link = pair.connect()
    turn = speaking(pair)
    pair.session.agent_output.send_text(turn, "once")
    link.to_server.cut_after(0)  # the client's ack never gets through
    pair.client.send_text("also once", pair.now)  # crosses the cut: lost, kept, resent
    pair.advance(1.0)
    assert pair.client.state is ClientState.CONNECTING
    assert pair.session.outgoing.unacked == 2  # turn.state and the text, never acknowledged
    pair.connect()
    pair.advance(1.0)
    assert agent_texts(pair) == ["once"]
    assert user_texts(pair) == ["also once"]


def test_the_servers_ack_cut_off_the_client_does_not_resend_twice() -> None:
    """§5.4: ready.resumedFrom covers what the server handled though its ack was lost."""
    pair = Pair()
    link = pair.connect()
    pair.client.send_text("hello", pair.now)
    pair.settle()
    link.to_client.cut_after(0)  # the server's ack is cut off
    pair.advance(1.0)
    pair.connect()
    pair.advance(1.0)
    assert user_texts(pair) == ["hello"]
    sent = [i for _, d, i in pair.trace if d == "to_server" and isinstance(i, SendText)]
    assert sum(b'"type":"text"' in item.data for item in sent) == 1  # never resent
    assert pair.client.outgoing.unacked == 1  # kept until an ack says otherwise (§4.2)
    assert pair.client.outgoing.first_kept_seq == 1


def test_a_cut_inside_a_frame_loses_it_and_the_resume_brings_it() -> None:
    """§4.1, §5.4: half a frame is no frame; it is kept and resent."""
    pair = Pair()
    link = pair.connect()
    turn = speaking(pair)
    link.to_client.cut_after(10)
    pair.session.agent_output.send_text(turn, "a long text, cut in its middle")
    pair.settle()
    assert pair.client.state is ClientState.CONNECTING
    pair.connect()
    assert agent_texts(pair) == ["a long text, cut in its middle"]


def test_duplicated_frames_are_handled_once() -> None:
    """§4.3: a sequenced message seen again is not handled again, but acknowledged."""
    pair = Pair()
    link = pair.connect()
    link.to_server.duplicate_next(3)
    link.to_client.duplicate_next(3)
    pair.client.send_text("one", pair.now)
    turn = speaking(pair)
    pair.session.agent_output.send_text(turn, "two")
    pair.advance(1.0)
    assert user_texts(pair) == ["one"]
    assert agent_texts(pair) == ["two"]
    assert pair.session.outgoing.unacked == 0


def test_frames_of_the_old_connection_arrive_after_the_resume() -> None:
    """§4.3, §5.4: the old connection's frames, overtaken by the resume on a faster new
    one, are duplicates by then: handled once."""
    pair = Pair()
    old = pair.connect(latency=0.5)
    pair.advance(1.0)
    pair.client.send_text("slow", pair.now)  # in flight on the old connection
    pair.cut(old, lose_in_flight=False, server_notices_after=None)
    pair.connect(latency=0.0)  # resends "slow" at once
    assert user_texts(pair) == ["slow"]
    pair.advance(1.0)  # the old frame arrives at the old connection, since replaced
    assert user_texts(pair) == ["slow"]
    assert old.server.state is ServerState.CLOSED


def test_a_stale_hello_overtaking_the_resume_replaces_it() -> None:
    """§5.4: the latest hello to arrive binds the session and closes the older
    connection with 4000; the client resumes again and nothing is lost."""
    pair = Pair()
    pair.connect()
    turn = speaking(pair)
    pair.cut()
    stale = pair.connect(latency=0.1)  # its hello is slow
    pair.cut(stale, lose_in_flight=False, server_notices_after=None)
    fresh = pair.connect()
    pair.advance(0.2)  # the stale hello arrives (before any ack) and takes the session
    assert pair.client.state is ClientState.CONNECTING  # the fresh one was closed
    closes = [item for _, d, item in pair.trace if isinstance(item, Close)]
    assert closes[-1].code == CloseCode.REPLACED
    assert fresh.server.state is ServerState.CLOSED
    pair.session.agent_output.send_text(turn, "after all that")
    pair.connect()
    assert agent_texts(pair) == ["after all that"]
    assert [e.state for e in pair.client_events if isinstance(e, TurnChanged)] == ["speaking"]


def test_a_stale_hello_after_an_ack_fails_the_resume() -> None:
    """§5.4, literally: a hello whose resumeFrom asks for messages the server discarded
    on an ack gets RESUME_FAILED and closes the session, even when it is only a stale
    hello of an abandoned connection that arrived late."""
    pair = Pair()
    pair.connect()
    speaking(pair)
    pair.settle()
    pair.cut()
    stale = pair.connect(latency=0.5)  # resumeFrom 1
    pair.cut(stale, lose_in_flight=False, server_notices_after=None)
    pair.session.begin_turn("thinking")
    pair.connect()
    pair.advance(1.0)  # seq 2 is acknowledged at 0.25; the stale hello arrives at 0.5
    assert pair.session.status == "closed"
    pair.connect()
    assert pair.client.state is ClientState.CLOSED
    assert [e.code for e in pair.client_events if isinstance(e, SessionFailed)] == ["RESUME_FAILED"]


def test_a_ready_for_another_session_fails_the_resume() -> None:
    """§5.4: a ready that does not match the session resumed (no resumedFrom, another
    sessionId): the client closes and reports RESUME_FAILED, and never resends."""

    class Forgetful(Pair):
        def decide(self, link: Link, hello: Hello) -> None:
            session = ServerSession(Hello(), self.config)  # a new session, whatever was asked
            self.sessions[session.session_id] = session
            link.server.open(session, self.now)

    pair = Forgetful()
    pair.connect()
    pair.cut()
    pair.client.send_text("kept", pair.now)
    pair.connect()
    assert pair.client.state is ClientState.CLOSED
    failed = [e for e in pair.client_events if isinstance(e, SessionFailed)]
    assert [e.code for e in failed] == ["RESUME_FAILED"]
    assert user_texts(pair) == []  # nothing old went into the new session
    with pytest.raises(LocalProtocolError):
        pair.client.send_text("more", pair.now)  # the session is closed (§5.4)


def test_a_client_that_cannot_resend_fails_the_resume() -> None:
    """§5.4: a client whose kept window lost what the server lacks closes the
    connection and reports RESUME_FAILED."""
    pair = Pair(ClientSession(max_kept=2))
    pair.connect()
    pair.cut()
    for text in ("a", "b", "c"):  # the first is dropped from the window of 2
        pair.client.send_text(text, pair.now)
    pair.connect()
    assert pair.client.state is ClientState.CLOSED
    assert [e.code for e in pair.client_events if isinstance(e, SessionFailed)] == ["RESUME_FAILED"]
    assert user_texts(pair) == []


def test_a_server_that_cannot_resend_fails_the_resume() -> None:
    """§5.4, §11: the server's kept window no longer holds what the client lacks:
    RESUME_FAILED, not recoverable; the session closes; nothing is resent."""
    pair = Pair(config=ServerConfig(max_unacked=2))
    pair.connect()
    turn = speaking(pair)
    pair.advance(1.0)
    pair.cut()
    for text in ("a", "b", "c"):
        pair.session.agent_output.send_text(turn, text)
    pair.connect()
    assert pair.session.status == "closed"
    assert pair.client.state is ClientState.CLOSED
    errors = [m for m in server_messages(pair) if isinstance(m, Error)]
    assert [(e.code, e.recoverable) for e in errors] == [("RESUME_FAILED", False)]
    assert agent_texts(pair) == []
    assert pair.client.resumable is False


def test_a_resume_of_an_ended_session_is_refused() -> None:
    """§5.4: a closed session: error RESUME_FAILED (seq 0), close 4404."""
    pair = Pair()
    pair.connect()
    pair.cut()
    pair.session.close("gone")
    pair.connect()
    closes = [item for _, d, item in pair.trace if isinstance(item, Close)]
    assert closes[-1].code == CloseCode.UNKNOWN_SESSION
    assert pair.client.state is ClientState.CLOSED


def test_server_sequence_exhaustion_ends_the_session() -> None:
    """§4.1: nothing follows seq 4294967295; the server closes the session and the
    client, unable to resume, is told RESUME_FAILED."""
    pair = Pair()
    pair.connect()
    session = pair.session
    session.outgoing = OutgoingStream(last_seq=MAX_SEQ - 2)
    turn = speaking(pair)  # MAX_SEQ - 1
    assert session.agent_output.send_text(turn, "the last")  # MAX_SEQ
    assert session.ended is not None
    session.agent_output.send_text(turn, "never")  # the session is over: nothing is sent
    assert session.outgoing.last_seq == MAX_SEQ
    pair.settle()
    assert agent_texts(pair) == ["the last"]
    assert pair.client.incoming.gaps == 1  # the jump this test made, tolerated (§4.3)
    assert pair.client.state is ClientState.CONNECTING
    pair.connect()
    assert pair.client.state is ClientState.CLOSED


def test_client_sequence_exhaustion_refuses_to_send() -> None:
    """§4.1: a side that sent seq 4294967295 must not send another."""
    pair = Pair()
    pair.connect()
    pair.client.outgoing = OutgoingStream(last_seq=MAX_SEQ - 1)
    pair.client.send_text("the last", pair.now)
    assert pair.client.outgoing.exhausted
    with pytest.raises(LocalProtocolError):
        pair.client.send_text("one more", pair.now)


def test_an_error_ending_the_session_stops_the_resumes() -> None:
    """§9.2: AGENT_ERROR not recoverable ends the session: the client stops resuming."""
    pair = Pair()
    pair.connect()
    pair.session.agent_output.error("the model is gone", recoverable=False)
    pair.settle()
    assert pair.client.state is ClientState.CLOSED
    assert [e.code for e in pair.client_events if isinstance(e, SessionFailed)] == ["AGENT_ERROR"]


def test_a_recoverable_error_is_reported_and_the_session_goes_on() -> None:
    """§9.2: a recoverable error is reported; nothing else changes."""
    pair = Pair()
    pair.connect()
    pair.session.agent_output.error("a hiccup")
    pair.settle()
    assert pair.client.state is ClientState.OPEN
    reported = [e for e in pair.client_events if isinstance(e, ErrorReceived)]
    assert [(e.code, e.recoverable) for e in reported] == [("AGENT_ERROR", True)]


def test_a_gap_is_tolerated_and_counted() -> None:
    """§4.3: senders must not skip sequence numbers, but a receiver must not crash on a
    gap; this version defines no recovery, so the skipped message is simply missing."""
    pair = Pair()
    link = pair.connect()
    turn = speaking(pair)
    pair.settle()
    link.to_client.lose_next()
    pair.session.agent_output.send_text(turn, "lost")
    pair.session.agent_output.send_text(turn, "after the gap")
    link.to_server.lose_next()
    pair.client.send_text("lost too", pair.now)
    pair.client.send_text("after that gap", pair.now)
    pair.advance(1.0)
    assert agent_texts(pair) == ["after the gap"]
    assert user_texts(pair) == ["after that gap"]
    assert pair.client.incoming.gaps == 1
    assert pair.session.incoming.gaps == 1
    assert pair.client.state is ClientState.OPEN


def test_what_the_server_never_handled_is_told_by_the_client() -> None:
    """§5.4: after a failed resume the client tells what the server never handled: a
    message the server handled (up to the resumed ready's resumedFrom) is not among
    them, acknowledged or not; each says whether it left the client."""
    pair = Pair()
    pair.connect()
    pair.client.send_text("handled", pair.now)
    link = pair.link
    assert link is not None
    link.to_client.lose_next()  # its ack never arrives
    pair.advance(1.0)
    pair.cut()
    pair.connect()  # resumedFrom 1: handled
    pair.cut(lose_in_flight=True)
    pair.client.send_text("lost with the connection", pair.now)
    connected = [e for e in pair.client_events if isinstance(e, Connected)]
    assert [(e.resumed, e.resumed_from) for e in connected] == [(False, None), (True, 1)]
    assert [(seq, m.TYPE, sent) for seq, m, sent in pair.client.unacknowledged()] == [
        (2, "text", False)
    ]
