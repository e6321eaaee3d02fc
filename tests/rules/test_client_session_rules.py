"""The client session's own rules (§4.4, §5.3, §5.4, §8.3, §8.4, §9.1, §9.2), each on a
:class:`ClientSession` alone: fed encoded server frames, its outbox read back with the
server's decoder. Survivors of mutation testing on ``client/session.py``
(docs/testing.md#mutation-testing).

What the client writes counts as sent for the ping schedule (§4.4): the next ping is
due ``ping_interval`` after it, which these tests read from ``timer_deadline``.
"""

from __future__ import annotations

import pytest
from rules_core import Client, open_client, output_frame, read

from vrt.protocol.client.events import (
    AudioChunk,
    Connected,
    ConnectionLost,
    ErrorReceived,
    InterruptedEpoch,
    PlaybackStop,
    SessionFailed,
    TextReceived,
    TranscriptReceived,
    TurnChanged,
)
from vrt.protocol.client.session import ClientSession
from vrt.protocol.codec import Limits, encode
from vrt.protocol.errors import ErrorCode, LocalProtocolError
from vrt.protocol.messages import (
    PCM16_24K,
    Ack,
    AgentText,
    AudioStart,
    ContextUpdate,
    Error,
    Format,
    Hello,
    Interrupt,
    Ping,
    Playback,
    Pong,
    Ready,
    Tool,
    Transcript,
    TurnState,
    UserText,
)
from vrt.protocol.tables import ClientState

PCMU = Format(encoding="pcmu")
#: 10 ms of pcm16 at 24 kHz.
TEN_MS = b"\x00\x00" * 240


def _sent_at(client: Client, now: float) -> None:
    """The client last wrote at ``now``: its next ping is due a ping interval later."""
    session = client.session
    session.incoming.ack_now()  # the ack schedule aside (§4.2)
    assert session.timer_deadline() == now + session.ping_interval


def _resumed(client: Client, now: float) -> None:
    """The connection is lost and the session resumed on a new one at ``now`` (§5.4)."""
    session = client.session
    session.connection_lost(now)
    session.connection_made(now)
    ready = Ready(
        session_id="s_rules",
        input=PCM16_24K,
        output=PCM16_24K,
        resumed_from=session.outgoing.last_seq,
        capabilities=session.capabilities,
    )
    session.receive_text(encode(ready, 0), now)
    assert session.state is ClientState.OPEN
    client.written()
    session.take_events()


# -- §5.2: the hello of a new session --------------------------------------------------


def test_tool_names_must_be_unique() -> None:
    """§5.2: tool names are unique within the list; a session is refused two of a name."""
    with pytest.raises(LocalProtocolError) as refused:
        ClientSession(tools=(Tool(name="lookup"), Tool(name="lookup")))
    assert str(refused.value) == "tool names must be unique (§5.2)"


def test_a_new_session_offers_what_the_client_has() -> None:
    """§5.2, §5.3, §5.5: the ``hello`` of a new session carries the tools, the preferred
    formats, the capabilities offered, the initial context and the credential."""
    session = ClientSession(
        tools=(Tool(name="lookup"),),
        input=PCM16_24K,
        output=PCMU,
        capabilities=("tool-stream-v1",),
        context={"doc": "a"},
        auth="token",
    )
    session.connection_made(0.0)
    [hello] = read(session.take_outbox(), by="client").of(Hello)
    assert hello == Hello(
        tools=(Tool(name="lookup"),),
        input=PCM16_24K,
        output=PCMU,
        capabilities=("tool-stream-v1",),
        context={"doc": "a"},
        auth="token",
    )


def test_a_hello_leaves_out_what_the_client_does_not_have() -> None:
    """§5.2: no tools, no preferences, no capabilities, no credential: the ``hello``
    leaves those members out (absent means none, or no preference)."""
    session = ClientSession()
    session.connection_made(0.0)
    [hello] = read(session.take_outbox(), by="client").of(Hello)
    assert hello == Hello()


def test_before_ready_nothing_is_in_effect() -> None:
    """§5.2: until ``ready`` no session, formats or capabilities are in effect, no epoch
    has been observed, and no credential was refused; a local interrupt then closes
    epoch 0 (§6.2)."""
    session = ClientSession(capabilities=("tool-stream-v1",))
    assert (session.session_id, session.input, session.output) == (None, None, None)
    assert session.capabilities == ()
    assert session.observed_epoch == 0
    assert session.auth_refused is False
    session.connection_made(0.0)
    assert session.interrupt("user", 0.1) == 0
    assert session.take_events() == [
        PlaybackStop(epoch=0),
        InterruptedEpoch(epoch=0, local=True),
    ]


def test_the_decoder_keeps_the_limits_given() -> None:
    """§11, §9.1: the session's decoder enforces the limits it was given: a frame beyond
    ``max_frame_bytes`` is reported LIMIT_EXCEEDED (a client reports and continues)."""
    client = open_client()
    session = ClientSession(limits=Limits(max_frame_bytes=64))
    session.connection_made(0.0)
    text = encode(AgentText(text="x" * 64, turn_id="t_1"), 1)
    for each in (client.session, session):
        each.receive_text(text, 1.0)
    assert [type(e) for e in client.session.take_events()] == [TextReceived]
    [reported] = session.take_events()
    assert isinstance(reported, ErrorReceived)
    assert (reported.code, reported.recoverable) == (ErrorCode.LIMIT_EXCEEDED, True)


# -- §4.4: what the client writes is a frame sent -------------------------------------


def test_a_context_update_counts_as_sent() -> None:
    """§4.4, §5.5: ``context`` is written at once, and the next ping is due a ping
    interval after it."""
    client = open_client()
    client.session.update_context({"doc": "a"}, 4.0)
    assert [m.context for m in client.written().of(ContextUpdate)] == [{"doc": "a"}]
    _sent_at(client, 4.0)


def test_an_interrupt_counts_as_sent() -> None:
    """§4.4, §6.2: ``interrupt`` is written at once, and the next ping is due a ping
    interval after it."""
    client = open_client()
    assert client.session.interrupt("user", 4.0) == 0
    assert [(m.epoch, m.reason) for m in client.written().of(Interrupt)] == [(0, "user")]
    _sent_at(client, 4.0)


def test_a_playback_report_counts_as_sent() -> None:
    """§4.4, §8.4: ``playback`` is written at once, and the next ping is due a ping
    interval after it."""
    client = open_client()
    assert client.session.playback("i_unknown", 50.0, 4.0) == 0
    assert [(m.item_id, m.played_ms) for m in client.written().of(Playback)] == [("i_unknown", 0)]
    _sent_at(client, 4.0)


def test_input_audio_counts_as_sent() -> None:
    """§4.4, §8.1: an input audio frame is a frame sent: the next ping is due a ping
    interval after it."""
    client = open_client()
    assert client.session.send_audio(TEN_MS, 4.0)
    assert len(client.written().frames) == 1
    _sent_at(client, 4.0)


def test_no_ping_before_the_ping_interval() -> None:
    """§4.4: a ping goes out when the client has sent nothing for its ping interval,
    not before."""
    client = open_client(now=0.0)
    interval = client.session.ping_interval
    client.session.receive_text(encode(Pong(), 0), interval - 1.0)  # a frame: not dead
    client.session.on_timer(interval - 1.0)
    assert client.written().messages == []
    assert client.session.take_events() == []  # a pong is nothing for the application
    client.session.on_timer(interval)
    assert [type(m) for _, m in client.written().messages] == [Ping]


def test_an_ack_releases_what_the_client_keeps_for_a_resume() -> None:
    """§4.2, §5.4: the server's ``ack`` releases the client's sequenced messages up to
    it; a resume then resends only the rest."""
    client = open_client()
    client.session.update_context({"doc": "a"}, 1.0)  # seq 1
    client.session.update_context({"doc": "b"}, 1.1)  # seq 2
    client.session.receive_text(encode(Ack(up_to=1), 0), 1.2)
    assert client.session.outgoing.unacked == 1
    assert client.session.take_events() == []
    client.session.connection_lost(2.0)
    client.session.connection_made(2.0)
    client.written()
    ready = Ready(session_id="s_rules", input=PCM16_24K, output=PCM16_24K, resumed_from=1)
    client.session.receive_text(encode(ready, 0), 2.1)
    assert [seq for seq, _ in client.written().messages] == [2]


# -- §5.2, §5.4: ready ------------------------------------------------------------------


def test_ready_is_reported_with_the_session_and_formats_in_effect() -> None:
    """§5.2: ``ready`` tells the application the session id, the formats and the
    capabilities in effect; no ``capabilities`` means none."""
    session = ClientSession(capabilities=("tool-stream-v1",))
    session.connection_made(0.0)
    ready = Ready(session_id="s_1", input=PCM16_24K, output=PCMU)
    session.receive_text(encode(ready, 0), 0.1)
    assert session.take_events() == [
        Connected(session_id="s_1", resumed=False, input=PCM16_24K, output=PCMU, capabilities=())
    ]
    assert session.capabilities == ()
    assert (session.input, session.output) == (PCM16_24K, PCMU)


def test_what_a_resume_resends_counts_as_sent() -> None:
    """§5.4, §4.4: on a resuming ``ready`` the client resends what the server lacks at
    once, in order; the next ping is due a ping interval after it."""
    client = open_client()
    client.session.update_context({"doc": "a"}, 1.0)  # seq 1, never acknowledged
    client.session.connection_lost(2.0)
    client.session.connection_made(3.0)
    client.written()
    ready = Ready(session_id="s_rules", input=PCM16_24K, output=PCM16_24K, resumed_from=0)
    client.session.receive_text(encode(ready, 0), 4.0)
    resent = client.written().messages
    assert [(seq, type(m)) for seq, m in resent] == [(1, ContextUpdate)]
    _sent_at(client, 4.0)


def test_a_ready_that_does_not_match_the_resume_fails_it() -> None:
    """§5.4: a ``ready`` without ``resumedFrom`` answering a resume (or naming another
    session) is a failed resume: the client closes and reports RESUME_FAILED, saying why."""
    client = open_client()
    client.session.connection_lost(1.0)
    assert client.session.take_events() == [ConnectionLost(code=None, reconnect=True)]
    client.session.connection_made(1.0)
    client.written()
    fresh = Ready(session_id="s_other", input=PCM16_24K, output=PCM16_24K)
    client.session.receive_text(encode(fresh, 0), 1.1)
    assert [(c.code, c.reason) for c in client.written().closes] == [(1000, "resume failed")]
    assert client.session.take_events() == [
        SessionFailed(
            code=ErrorCode.RESUME_FAILED, message="ready does not match the session resumed"
        )
    ]
    assert client.session.state is ClientState.CLOSED


# -- §9.1, §9.2: what the application is told ----------------------------------------


def test_an_invalid_message_is_reported_as_recoverable_with_its_reason() -> None:
    """§9.1: a client reports an invalid message to the application, with the code of the
    first rule it breaks and why, and continues: it is recoverable."""
    client = open_client()
    client.session.receive_text(b'{"v": 1, "type": "nope"}', 1.0)
    events = client.session.take_events()
    assert events == [
        ErrorReceived(
            code=ErrorCode.UNKNOWN_TYPE,
            message="'nope' is not a server message type of vRT v1 (§9.1)",
            recoverable=True,
        )
    ]
    assert client.session.state is ClientState.OPEN


def test_an_error_is_reported_with_its_message_and_flag() -> None:
    """§9.2: an ``error`` reaches the application with its code, message and flag."""
    client = open_client()
    client.deliver(Error(code="SOMETHING_NEW", message="one", recoverable=True), 1.0)
    client.deliver(Error(code="RATE_LIMITED", message="two", recoverable=False), 1.1)
    assert client.session.take_events() == [
        ErrorReceived(code="SOMETHING_NEW", message="one", recoverable=True),
        ErrorReceived(code="RATE_LIMITED", message="two", recoverable=False),
    ]


def test_a_session_ending_error_is_reported_with_its_message() -> None:
    """§9.2, §5.4: an error that ends the session reaches the application as
    ``SessionFailed`` with the server's code and message."""
    client = open_client()
    client.deliver(Error(code=ErrorCode.AGENT_ERROR, message="model gone", recoverable=False), 1.0)
    assert client.session.take_events() == [
        SessionFailed(code=ErrorCode.AGENT_ERROR, message="model gone")
    ]
    assert client.session.state is ClientState.CLOSED


def test_a_refused_credential_is_reported_with_its_message() -> None:
    """§5.3: UNAUTHORIZED before ``ready`` reaches the application with the server's
    message, and the session waits for a fresh credential."""
    client = open_client()
    client.session.connection_lost(1.0)
    assert client.session.take_events() == [ConnectionLost(code=None, reconnect=True)]
    client.session.connection_made(1.0)
    client.written()
    refused = Error(code=ErrorCode.UNAUTHORIZED, message="token expired", recoverable=False)
    client.session.receive_text(encode(refused, 0), 1.1)
    assert client.session.take_events() == [
        SessionFailed(code=ErrorCode.UNAUTHORIZED, message="token expired")
    ]
    assert client.session.auth_refused is True
    client.session.auth = "fresh token"
    client.session.connection_made(2.0)
    assert client.session.auth_refused is False
    hellos: list[Hello] = client.written().of(Hello)
    assert [(h.session_id, h.auth) for h in hellos] == [("s_rules", "fresh token")]


def test_a_resume_the_client_cannot_serve_closes_normally_and_says_why() -> None:
    """§5.4: when the client no longer holds what the server lacks, the resume has
    failed: it closes the connection (1000, "resume failed") and reports
    RESUME_FAILED with the reason."""
    client = open_client()
    client.session.update_context({"doc": "a"}, 1.0)  # seq 1, never acknowledged
    client.session.outgoing.ack(1)
    client.session.connection_lost(2.0)
    assert client.session.take_events() == [ConnectionLost(code=None, reconnect=True)]
    client.session.connection_made(2.0)
    client.written()
    ready = Ready(session_id="s_rules", input=PCM16_24K, output=PCM16_24K, resumed_from=5)
    client.session.receive_text(encode(ready, 0), 2.1)
    closes = client.written().closes
    assert [(c.code, c.reason) for c in closes] == [(1000, "resume failed")]
    assert client.session.take_events() == [
        SessionFailed(
            code=ErrorCode.RESUME_FAILED, message="cannot resend what the server missed (§5.4)"
        )
    ]


def test_a_dead_connection_is_closed_with_4000_and_says_why() -> None:
    """§4.4, §9.3: a connection silent for 2.5 ping intervals is closed with 4000,
    naming the reason."""
    client = open_client(now=0.0)
    client.session.on_timer(2.5 * client.session.ping_interval)
    closes = client.written().closes
    assert [(c.code, c.reason) for c in closes] == [(4000, "no frame from the server")]
    assert [c.wait for c in closes] == [False]  # nothing answers a dead connection's close


def test_a_closed_session_refuses_to_send_and_says_what_to_do() -> None:
    """§5.4: once the session is over, sending is refused locally, naming what to do."""
    client = open_client()
    client.deliver(Error(code=ErrorCode.SERVER_SHUTDOWN, message="bye", recoverable=False), 1.0)
    with pytest.raises(LocalProtocolError) as refused:
        client.session.send_text("hello?", 2.0)
    assert str(refused.value) == "the session is closed (§5.4); start a new ClientSession"


# -- §8.4: the user speaks -------------------------------------------------------------


def test_listening_stops_playback_and_other_states_do_not() -> None:
    """§8.4, §6.1: ``turn.state`` listening means the user speaks: the application is
    told the turn changed and to stop playback of that epoch; other states only change
    the turn."""
    client = open_client()
    client.deliver(TurnState(turn_id="t_1", epoch=1, state="speaking"), 1.0)
    client.deliver(TurnState(turn_id="t_2", epoch=2, state="listening"), 1.1)
    assert client.session.take_events() == [
        TurnChanged(turn_id="t_1", epoch=1, state="speaking"),
        TurnChanged(turn_id="t_2", epoch=2, state="listening"),
        PlaybackStop(epoch=2),
    ]


# -- §6.3: text and transcripts --------------------------------------------------------


def test_text_and_transcripts_carry_their_turn_and_item() -> None:
    """The agent's text and the transcripts reach the application with the turn and
    item they belong to, as the server sent them."""
    client = open_client()
    client.deliver(AgentText(text="Hi", turn_id="t_1"), 1.0)
    client.deliver(
        Transcript(role="agent", text="Hi", final=True, item_id="i_1", turn_id="t_1"), 1.1
    )
    assert client.session.take_events() == [
        TextReceived(text="Hi", turn_id="t_1"),
        TranscriptReceived(role="agent", text="Hi", final=True, item_id="i_1", turn_id="t_1"),
    ]


# -- §8.3, §8.4: audio items across a resume --------------------------------------------


def test_an_item_announced_again_after_a_resume_keeps_what_was_received() -> None:
    """§8.3, §8.4: after a resume the server announces the current item again; what the
    client received of it before still counts, so a playback report may cover all of it."""
    client = open_client()
    start = encode(AudioStart(item_id="i_1", turn_id="t_1", epoch=0), 0)  # transient
    client.session.receive_text(start, 1.0)
    client.session.receive_binary(output_frame(0, TEN_MS * 3), 1.0)  # 30 ms
    _resumed(client, 2.0)
    client.session.receive_text(start, 2.1)
    client.session.receive_binary(output_frame(1, TEN_MS * 2), 2.1)  # 20 ms
    chunks = [e for e in client.session.take_events() if isinstance(e, AudioChunk)]
    assert [e.item_id for e in chunks] == ["i_1"]
    assert client.session.playback("i_1", 1000.0, 3.0) == 50


# -- what the driver is told: a resume's resumedFrom, whether to connect again ---------


def test_a_resumed_ready_tells_the_driver_its_resumed_from() -> None:
    """§5.4: ``Connected`` carries ``resumedFrom`` on a resume (the driver need not read
    the ``ready`` itself), and nothing on a new session."""
    session = ClientSession()
    session.connection_made(0.0)
    new = Ready(session_id="s_1", input=PCM16_24K, output=PCM16_24K)
    session.receive_text(encode(new, 0), 0.1)
    [opened] = session.take_events()
    assert isinstance(opened, Connected)
    assert (opened.resumed, opened.resumed_from) == (False, None)
    session.connection_lost(1.0)
    session.connection_made(1.0)
    resumed = Ready(session_id="s_1", input=PCM16_24K, output=PCM16_24K, resumed_from=0)
    session.receive_text(encode(resumed, 0), 1.1)
    events = session.take_events()
    assert [(e.resumed, e.resumed_from) for e in events if isinstance(e, Connected)] == [(True, 0)]


@pytest.mark.parametrize(
    ("code", "reconnect"),
    [(None, True), (1000, False), (1001, True), (1008, False), (1011, True), (4000, True)],
)
def test_a_first_connection_ended_before_ready_is_retried_unless_refused(
    code: int | None, reconnect: bool
) -> None:
    """docs/client.md: a first connection that ends before its ``ready`` is tried again
    with a new ``hello``, unless the server closed it on purpose (1000) or by policy
    (1008); a lost socket, going away (1001) or an overloaded server (1011) is tried
    again."""
    session = ClientSession()
    session.connection_made(0.0)
    session.take_outbox()
    session.connection_lost(1.0, code)
    assert session.take_events() == [ConnectionLost(code=code, reconnect=reconnect)]


def test_an_open_session_reconnects_whatever_the_close_code_and_a_closed_one_never() -> None:
    """§5.4: a session that was opened is resumed after any close, even 1000 or 4401
    (only an error ends it); once it is closed, nothing reconnects it."""
    client = open_client()
    for code in (1000, 1008, 4401, 4408, None):
        client.session.connection_lost(1.0, code)
        assert client.session.take_events() == [ConnectionLost(code=code, reconnect=True)]
        client.session.connection_made(1.0)
    refused = Error(code=ErrorCode.RESUME_FAILED, message="gone", recoverable=False)
    client.session.receive_text(encode(refused, 0), 1.1)
    assert client.session.state is ClientState.CLOSED
    client.session.take_events()
    client.session.connection_lost(1.2, 4404)
    assert client.session.take_events() == [ConnectionLost(code=4404, reconnect=False)]


def test_a_refused_credential_does_not_reconnect_by_itself() -> None:
    """§5.3: a first connection refused with 4401 is not tried again as it is (the
    driver may try a fresh credential: ``auth_refused``)."""
    session = ClientSession()
    session.connection_made(0.0)
    refused = Error(code=ErrorCode.UNAUTHORIZED, message="no", recoverable=False)
    session.receive_text(encode(refused, 0), 0.1)
    session.take_events()
    session.connection_lost(0.2, 4401)
    assert session.take_events() == [ConnectionLost(code=4401, reconnect=False)]
    assert session.auth_refused


def test_what_the_server_never_handled_is_told_with_whether_it_was_written() -> None:
    """§5.4: the messages the server has not handled are those after the last
    ``resumedFrom`` that it never acknowledged; each says whether it left the client
    (written to a connection) or was sent while none was open."""
    client = open_client()
    session = client.session
    session.send_text("handled, never acknowledged", 1.0)  # seq 1
    session.send_text("written, lost", 1.0)  # seq 2
    session.connection_lost(2.0)
    session.send_text("kept while away", 2.0)  # seq 3
    assert session.unacknowledged() == [
        (1, UserText(text="handled, never acknowledged"), True),
        (2, UserText(text="written, lost"), True),
        (3, UserText(text="kept while away"), False),
    ]
    session.connection_made(3.0)
    resumed = Ready(session_id="s_rules", input=PCM16_24K, output=PCM16_24K, resumed_from=1)
    session.receive_text(encode(resumed, 0), 3.1)
    assert [(seq, sent) for seq, _, sent in session.unacknowledged()] == [(2, True), (3, True)]
    session.outgoing.ack(2)
    assert [seq for seq, _, _ in session.unacknowledged()] == [3]
