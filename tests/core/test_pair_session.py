"""A session over the pair, one behaviour per test: turns and epochs (§6), tools and
tool streams (§7), audio (§8), context (§5.5), errors (§9)."""

from __future__ import annotations

from typing import Final

import pytest

from vrt.protocol import (
    AudioChunk,
    AudioStarted,
    CancelTool,
    ClientSession,
    ErrorReceived,
    Hello,
    InterruptedEpoch,
    LocalProtocolError,
    PlaybackStop,
    RunTool,
    TextReceived,
    Tool,
    ToolPreview,
    ToolStreamUpdate,
    TranscriptReceived,
    TurnChanged,
    encode,
)
from vrt.protocol.capabilities import TOOL_STREAM
from vrt.protocol.client.gate import REMEMBERED_STREAMS
from vrt.protocol.frames import FrameKind, build_frame
from vrt.protocol.messages import Message, ToolCall, ToolStream
from vrt.protocol.outputs import SendText
from vrt.protocol.server import (
    AgentInput,
    AudioReceived,
    ContextChanged,
    PlaybackReported,
    ResponseInterrupted,
    ServerConfig,
    ServerSession,
    ToolSettled,
    UserTextReceived,
)
from vrt.protocol.streams import IncomingStream, OutgoingStream
from vrt.protocol.tables import ClientState
from vrt.protocol.testing import Pair

LOOKUP: Final = Tool(name="lookup")
#: 20 ms of pcm16 at 24 kHz.
FRAME: Final = bytes(960)


def tool_pair(*capabilities: str, config: ServerConfig | None = None) -> Pair:
    pair = Pair(ClientSession(tools=(LOOKUP,), capabilities=capabilities), config)
    pair.connect()
    return pair


def issue(pair: Pair, turn: str, name: str = "lookup") -> str:
    call_id = pair.session.tool_calls.start(turn, name)
    assert call_id is not None
    assert pair.session.tool_calls.issue(call_id, {"q": name}, pair.now)
    pair.settle()
    return call_id


def settled(pair: Pair) -> list[tuple[str, bool, str | None]]:
    return [(e.call_id, e.ok, e.code) for e in pair.agent_events if isinstance(e, ToolSettled)]


def runs(pair: Pair) -> list[str]:
    return [e.call_id for e in pair.client_events if isinstance(e, RunTool)]


# -- turns and epochs (§6) --


def test_turn_states_reach_the_client_and_idle_ends_the_turn() -> None:
    """§6.1: turn.state carries the turn and its epoch; idle ends it."""
    pair = Pair()
    pair.connect()
    session = pair.session
    turn = session.begin_turn("thinking")
    assert session.set_state(turn, "speaking")
    assert session.set_state(turn, "speaking")  # unchanged: nothing sent
    assert session.set_state(turn, "idle")
    assert not session.set_state(turn, "speaking")  # the turn is over
    assert not session.end_turn(turn)
    assert not session.agent_output.send_text(turn, "late")
    pair.settle()
    states = [(e.state, e.epoch) for e in pair.client_events if isinstance(e, TurnChanged)]
    assert states == [("thinking", 1), ("speaking", 1), ("idle", 1)]
    with pytest.raises(LocalProtocolError):
        session.begin_turn("idle")


def test_a_new_turn_ends_the_one_in_progress() -> None:
    """§6.1: a turn in progress ends (idle) before the next begins, with a new epoch."""
    pair = Pair()
    pair.connect()
    first = pair.session.begin_turn("speaking")
    second = pair.session.begin_turn("thinking")
    pair.settle()
    states = [
        (e.turn_id, e.state, e.epoch) for e in pair.client_events if isinstance(e, TurnChanged)
    ]
    assert states == [(first, "speaking", 1), (first, "idle", 1), (second, "thinking", 2)]


def test_user_text_interrupts_the_response_in_flight() -> None:
    """§6.3: text first interrupts the response in flight (reason user), as §6.2."""
    pair = Pair()
    pair.connect()
    turn = pair.session.begin_turn("speaking")
    pair.settle()
    pair.client.send_text("stop", pair.now)
    pair.settle()
    assert pair.agent_events == [
        ResponseInterrupted(turn_id=turn, epoch=1, reason="user"),
        UserTextReceived(text="stop"),
    ]
    assert InterruptedEpoch(epoch=1, local=False) in pair.client_events
    assert pair.session.epoch == 2  # §6.1: interrupting increases the epoch


def test_an_interrupt_without_a_response_in_flight_has_no_effect() -> None:
    """§6.2: when no response is in flight, the server sends nothing; a stale
    interrupt (an older epoch) has no effect either (messages.md)."""
    pair = Pair()
    pair.connect()
    pair.client.interrupt("keyboard", pair.now)
    pair.settle()
    assert pair.agent_events == []
    listening = pair.session.user_started_speaking()
    assert pair.session.user_started_speaking() == listening  # the listening turn goes on
    assert not pair.session.interrupt_response()  # listening: nothing in flight
    link = pair.link
    assert link is not None
    link.to_client.held = True  # the client does not see the new turn's epoch yet
    pair.session.begin_turn("speaking")
    pair.settle()
    assert pair.client.interrupt("user", pair.now) < pair.session.epoch  # stale
    pair.settle()
    assert not any(isinstance(e, ResponseInterrupted) for e in pair.agent_events)


def test_the_server_interrupts_on_its_own() -> None:
    """§6.2: the server closes the epoch and sends interrupted; the agent, which asked
    for it, is not told again."""
    pair = Pair()
    pair.connect()
    pair.session.begin_turn("speaking")
    assert pair.session.interrupt_response()
    pair.settle()
    assert pair.agent_events == []
    assert [e for e in pair.client_events if isinstance(e, InterruptedEpoch)] == [
        InterruptedEpoch(epoch=1, local=False)
    ]


def test_a_turn_cut_short_ends_with_idle_and_an_error() -> None:
    """docs/decisions.md: a turn that cannot go on is interrupted, ends idle, and a
    recoverable TURN_CUT_SHORT says why."""
    pair = tool_pair()
    assert not pair.session.cut_short("nothing to cut")
    turn = pair.session.begin_turn("acting")
    call = issue(pair, turn)
    assert pair.session.cut_short("moved")
    pair.settle()
    assert settled(pair) == [(call, False, "INTERRUPTED")]
    errors = [e for e in pair.client_events if isinstance(e, ErrorReceived)]
    assert [(e.code, e.recoverable) for e in errors] == [("TURN_CUT_SHORT", True)]
    assert [e.state for e in pair.client_events if isinstance(e, TurnChanged)][-1] == "idle"


def test_transcripts_of_both_roles() -> None:
    """messages.md transcript: an agent transcript of a turn that is over is dropped."""
    pair = Pair()
    pair.connect()
    session = pair.session
    assert session.agent_output.send_transcript("user", "hi", item_id="i1")
    turn = session.begin_turn("speaking")
    assert session.agent_output.send_transcript("agent", "hello", final=False, turn_id=turn)
    session.end_turn(turn)
    assert not session.agent_output.send_transcript("agent", "late", turn_id=turn)
    pair.settle()
    got = [
        (e.role, e.text, e.final) for e in pair.client_events if isinstance(e, TranscriptReceived)
    ]
    assert got == [("user", "hi", True), ("agent", "hello", False)]


# -- tools (§7) --


def test_calls_run_one_at_a_time_in_order() -> None:
    """§7.1: a call starts only after the previous one has its result."""
    pair = tool_pair()
    turn = pair.session.begin_turn("acting")
    first, second = issue(pair, turn), issue(pair, turn)
    assert runs(pair) == [first]
    assert not pair.client.tool_finished(second, True, pair.now)  # not running
    assert pair.client.tool_finished(first, True, pair.now, output=1)
    pair.settle()
    assert runs(pair) == [first, second]
    assert pair.client.tool_finished(
        second, False, pair.now, code="REJECTED", message="the user said no"
    )
    pair.settle()
    assert settled(pair) == [(first, True, None), (second, False, "REJECTED")]


def test_an_unknown_tool_is_answered_failed_without_running() -> None:
    """§7.2: a call the client cannot run (no tool of that name) is answered FAILED."""
    pair = Pair(ClientSession(tools=(LOOKUP,)))
    pair.connect()
    pair.session.record.tool_names = frozenset({"lookup", "other"})  # the server thinks so
    turn = pair.session.begin_turn("acting")
    call = issue(pair, turn, "other")
    assert runs(pair) == []
    assert settled(pair) == [(call, False, "FAILED")]


def test_a_call_for_a_tool_the_client_lacks_is_never_started() -> None:
    """§7.1: a server sends tool.call only for tools the client declared."""
    pair = tool_pair()
    turn = pair.session.begin_turn("acting")
    assert pair.session.tool_calls.start(turn, "missing") is None
    assert pair.session.tool_calls.start("t_over", "lookup") is None
    assert not pair.session.tool_calls.issue("c_none", {}, pair.now)


def test_interrupting_a_running_call_cancels_it_and_answers_interrupted() -> None:
    """§6.2, §7.2: the running call is signalled to cancel and answered INTERRUPTED at
    once; queued calls of the closed epoch are answered without running; the tool's
    later outcome is discarded."""
    pair = tool_pair()
    turn = pair.session.begin_turn("acting")
    running, queued = issue(pair, turn), issue(pair, turn)
    pair.client.interrupt("user", pair.now)
    pair.settle()
    assert CancelTool(call_id=running) in pair.client_events
    assert PlaybackStop(epoch=1) in pair.client_events
    assert runs(pair) == [running]
    assert not pair.client.tool_finished(running, True, pair.now)  # discarded
    assert settled(pair) == [(running, False, "INTERRUPTED"), (queued, False, "INTERRUPTED")]
    pair.client.interrupt("user", pair.now)  # the same epoch again: no further effect
    pair.settle()
    assert [e for e in pair.client_events if isinstance(e, InterruptedEpoch)] == [
        InterruptedEpoch(epoch=1, local=True)
    ]


def test_a_call_of_a_closed_epoch_resent_after_a_resume_never_starts() -> None:
    """§6.2: the gate applies to calls resent after a resume: answered INTERRUPTED."""
    pair = tool_pair()
    turn = pair.session.begin_turn("acting")
    pair.settle()
    pair.cut()
    call = pair.session.tool_calls.start(turn, "lookup")
    assert call is not None
    pair.session.tool_calls.issue(call, {}, pair.now)
    pair.client.interrupt("user", pair.now)  # closes epoch 1 locally, while away
    pair.connect()
    assert runs(pair) == []
    assert settled(pair) == [(call, False, "INTERRUPTED")]


def test_too_many_pending_calls_fail_the_next() -> None:
    """§11: at most max_pending_calls client calls await a result at once."""
    pair = tool_pair(config=ServerConfig(max_pending_calls=1))
    turn = pair.session.begin_turn("acting")
    issue(pair, turn)
    extra = pair.session.tool_calls.start(turn, "lookup")
    assert extra is not None
    assert not pair.session.tool_calls.issue(extra, {}, pair.now)
    assert pair.session.record.calls.get(extra) is None  # failed, gone


def test_previews_reach_the_client_unless_their_epoch_closed() -> None:
    """§7.4: tool.call.delta is display only; §6.2: discarded once its epoch closed."""
    pair = tool_pair()
    session = pair.session
    turn = session.begin_turn("acting")
    call = session.tool_calls.start(turn, "lookup")
    assert call is not None
    assert session.tool_calls.arguments_delta(call, '{"q":')
    pair.settle()
    link = pair.link
    assert link is not None
    link.to_client.held = True
    assert session.tool_calls.arguments_delta(call, "1")  # in flight when the client interrupts
    pair.settle()
    pair.client.interrupt("user", pair.now)
    link.to_client.held = False
    pair.settle()
    assert not session.tool_calls.arguments_delta(call, "}")  # cancelled with its epoch
    previews = [e.preview for e in pair.client_events if isinstance(e, ToolPreview)]
    assert previews == [{"argumentsDelta": '{"q":'}]


def test_a_turn_ending_fails_its_calls_not_yet_issued() -> None:
    """§7.5: a call whose arguments can no longer complete is failed, never issued."""
    pair = tool_pair(TOOL_STREAM)
    session = pair.session
    turn = session.begin_turn("acting")
    call = session.tool_calls.start(turn, "lookup")
    assert call is not None
    session.end_turn(turn)
    pair.settle()
    phases = [e.phase for e in pair.client_events if isinstance(e, ToolStreamUpdate)]
    assert phases == ["start", "failed"]
    assert not session.tool_calls.fail(call, "again")


def test_tool_stream_phases_of_a_client_call() -> None:
    """§7.5: with tool-stream-v1, a call's phases reach the client in order."""
    pair = tool_pair(TOOL_STREAM)
    session = pair.session
    turn = session.begin_turn("acting")
    call = session.tool_calls.start(turn, "lookup", provider_id="p")
    assert call is not None
    assert session.tool_calls.arguments_delta(call, "{}")
    assert session.tool_calls.issue(call, {}, pair.now)
    assert session.tool_calls.is_client_call(call)
    assert not session.tool_calls.progress(call, 50)  # progress is a server tool's
    assert not session.tool_calls.settle_server_call(call, True)
    pair.settle()
    pair.client.tool_finished(call, True, pair.now, output="done")
    pair.settle()
    phases = [e.phase for e in pair.client_events if isinstance(e, ToolStreamUpdate)]
    assert phases == ["start", "arguments-delta", "arguments-complete", "settled"]
    assert not session.tool_calls.is_client_call(call)


def test_tool_stream_phases_of_a_server_call() -> None:
    """§7.5: a server tool's progress and end are visible with tool-stream-v1; its
    output is never sent; a failure carries its code."""
    pair = tool_pair(TOOL_STREAM)
    session = pair.session
    turn = session.begin_turn("acting")
    ok = session.tool_calls.start(turn, "search", server_side=True)
    bad = session.tool_calls.start(turn, "search", server_side=True)
    assert ok is not None
    assert bad is not None
    assert not session.tool_calls.progress(ok, 1)  # not issued yet
    session.tool_calls.issue(ok, {}, pair.now)
    session.tool_calls.issue(bad, {}, pair.now)
    assert not session.tool_calls.is_client_call(ok)
    assert session.tool_calls.progress(ok, {"pct": 50})
    assert session.tool_calls.settle_server_call(ok, True)
    assert session.tool_calls.settle_server_call(bad, False, "INVALID")
    assert not session.tool_calls.settle_server_call(ok, True)  # settled already
    pair.settle()
    updates = [(e.call_id, e.phase) for e in pair.client_events if isinstance(e, ToolStreamUpdate)]
    assert updates[-3:] == [(ok, "progress"), (ok, "settled"), (bad, "settled")]
    assert settled(pair) == []  # the agent's own calls: nothing to tell it
    assert runs(pair) == []


def test_a_local_interrupt_cancels_unterminated_tool_streams_at_once() -> None:
    """§7.5: calls of the closed epoch count as cancelled locally; the server's own
    cancelled, arriving later, is discarded, as is anything after a terminal phase."""
    pair = tool_pair(TOOL_STREAM)
    session = pair.session
    turn = session.begin_turn("acting")
    call = session.tool_calls.start(turn, "lookup")
    assert call is not None
    done = session.tool_calls.start(turn, "search", server_side=True)
    assert done is not None
    session.tool_calls.issue(done, {}, pair.now)
    session.tool_calls.settle_server_call(done, True)
    pair.settle()
    pair.client.interrupt("user", pair.now)
    pair.settle()
    updates = [
        (e.call_id, e.phase, e.message is None)
        for e in pair.client_events
        if isinstance(e, ToolStreamUpdate)
    ]
    assert updates[-1] == (call, "cancelled", True)
    assert (done, "cancelled", True) not in updates


# -- audio (§8) --


def test_output_audio_is_announced_played_and_reported() -> None:
    """§8.3: audio.start announces an item; §8.4: playback is capped at what was received
    (client) and sent (server)."""
    pair = Pair()
    pair.connect()
    session = pair.session
    turn = session.begin_turn("speaking")
    item = session.agent_output.start_audio(turn)
    assert item is not None
    assert session.agent_output.send_audio(item, FRAME)
    assert session.agent_output.send_audio(item, FRAME, played_ms=20.0)
    pair.settle()
    assert AudioStarted(item_id=item, turn_id=turn, epoch=1) in pair.client_events
    chunks = [e for e in pair.client_events if isinstance(e, AudioChunk)]
    assert [c.payload for c in chunks] == [FRAME, FRAME]
    assert pair.client.playback(item, 1000.0, pair.now) == 40
    assert pair.client.playback("i_unknown", 10.0, pair.now) == 0
    pair.settle()
    reports = [e for e in pair.agent_events if isinstance(e, PlaybackReported)]
    assert reports == [
        PlaybackReported(item_id=item, played_ms=40, turn_id=turn),
        PlaybackReported(item_id="i_unknown", played_ms=0, turn_id=None),
    ]


def test_output_audio_of_a_closed_epoch_is_never_played() -> None:
    """§6.2: a client must not play output audio of a closed epoch; the server sends
    none for a turn that is over."""
    pair = Pair()
    pair.connect()
    session = pair.session
    turn = session.begin_turn("speaking")
    item = session.agent_output.start_audio(turn, "i_1")
    assert item == "i_1"
    pair.settle()
    pair.client.interrupt("user", pair.now)
    link = pair.link
    assert link is not None
    link.to_client.held = True
    pair.settle()
    assert not session.agent_output.send_audio(item, FRAME)  # the epoch closed on the server too
    assert session.agent_output.start_audio(turn) is None
    assert not session.agent_output.send_audio("i_unknown", FRAME)
    link.to_client.held = False
    pair.settle()
    assert [e for e in pair.client_events if isinstance(e, AudioChunk)] == []


def test_audio_in_flight_when_the_client_interrupts_is_discarded() -> None:
    """§6.2: frames and audio.start of the closed epoch still arriving are not played."""
    pair = Pair()
    link = pair.connect()
    session = pair.session
    turn = session.begin_turn("speaking")
    pair.settle()  # the client observed epoch 1
    link.to_client.held = True
    item = session.agent_output.start_audio(turn)
    assert item is not None
    session.agent_output.send_audio(item, FRAME)
    pair.settle()
    pair.client.interrupt("user", pair.now)  # before the audio arrives
    link.to_client.held = False
    pair.settle()
    assert [e for e in pair.client_events if isinstance(e, (AudioStarted, AudioChunk))] == []


def test_audio_while_parked_is_lost_and_a_resume_announces_the_item_again() -> None:
    """§5.4: audio is never resent; further output audio gets a new audio.start."""
    pair = Pair()
    pair.connect()
    session = pair.session
    turn = session.begin_turn("speaking")
    item = session.agent_output.start_audio(turn)
    assert item is not None
    pair.cut()
    assert session.agent_output.send_audio(item, FRAME)  # lost, but the turn goes on
    pair.connect()
    session.agent_output.send_audio(item, FRAME)
    pair.settle()
    starts = [e for e in pair.client_events if isinstance(e, AudioStarted)]
    assert len(starts) == 1  # the first was lost with the cut: announced again
    assert len([e for e in pair.client_events if isinstance(e, AudioChunk)]) == 1


def test_output_frames_before_any_audio_start_are_dropped() -> None:
    """§8.3: a frame before any audio.start is discarded; §8.1: a malformed one too."""
    pair = Pair()
    pair.connect()
    pair.client.receive_binary(b"\x02", pair.now)
    pair.client.receive_binary(build_frame(FrameKind.OUTPUT, 0, FRAME), pair.now)
    assert [e for e in pair.client.take_events() if isinstance(e, AudioChunk)] == []


def test_input_audio_reaches_the_agent_only_once_open() -> None:
    """§5.1: audio is never sent before ready; §8.1: frames carry their audio seq."""
    pair = Pair()
    assert not pair.client.send_audio(FRAME, pair.now)  # connecting: dropped
    pair.connect()
    assert pair.client.send_audio(FRAME, pair.now)
    assert pair.client.send_audio(FRAME, pair.now)
    pair.settle()
    received = [e for e in pair.agent_events if isinstance(e, AudioReceived)]
    assert [(e.seq, len(e.payload)) for e in received] == [(0, 960), (1, 960)]


# -- context (§5.5) --


def test_context_updates_replace_the_context() -> None:
    """§5.5: the context is replaced in client-stream order; None clears it."""
    pair = Pair(ClientSession(context={"user": "ann"}, tools=(LOOKUP,)))
    pair.connect()
    assert pair.session.context == {"user": "ann"}
    assert pair.session.tools == {"lookup": LOOKUP}
    pair.client.update_context({"user": "bob"}, pair.now)
    pair.client.update_context(None, pair.now)
    pair.settle()
    assert pair.agent_events == [
        ContextChanged(context={"user": "bob"}),
        ContextChanged(context=None),
    ]
    assert pair.session.context is None


def test_a_context_too_large_is_refused_and_the_previous_stays() -> None:
    """§11: beyond max_state_bytes a context gets LIMIT_EXCEEDED, recoverable."""
    pair = Pair(config=ServerConfig(max_state_bytes=64))
    pair.connect()
    pair.client.update_context({"big": "x" * 100}, pair.now)
    pair.settle()
    assert pair.agent_events == []
    errors = [e for e in pair.client_events if isinstance(e, ErrorReceived)]
    assert [(e.code, e.recoverable) for e in errors] == [("LIMIT_EXCEEDED", True)]
    assert ServerSession.state_size(Hello(context={"big": "x" * 100})) > 64


# -- the session store's view --


def test_a_restored_session_resumes_as_if_it_never_left() -> None:
    """docs/deploy.md: a session rebuilt from its record and both streams resumes."""
    pair = Pair()
    pair.connect()
    turn = pair.session.begin_turn("speaking")
    pair.settle()
    pair.cut()
    pair.session.agent_output.send_text(turn, "kept")
    old = pair.session
    outgoing = OutgoingStream(last_seq=old.outgoing.last_seq)
    outgoing.restore(old.outgoing.kept(), old.outgoing.lost_through)
    incoming = IncomingStream(last_seq=old.incoming.last_seq)
    restored = ServerSession.restore(old.record, pair.config, outgoing=outgoing, incoming=incoming)
    assert restored.status == "parked"
    pair.sessions[restored.session_id] = restored
    pair.connect()
    assert [e.text for e in pair.client_events if isinstance(e, TextReceived)] == ["kept"]
    assert restored.principal is None
    assert restored.status == "connected"


# -- a server that breaks the rules: the client holds its own --


def inject(pair: Pair, message: Message) -> None:
    """A sequenced message of the server's, numbered next, sent behind its back."""
    link = pair.link
    assert link is not None
    seq = pair.session.outgoing.last_seq + 1
    pair.session.outgoing = OutgoingStream(last_seq=seq)  # the session's numbering goes on
    link.to_client.write(SendText(data=encode(message, seq)), pair.now)
    pair.settle()


def test_a_reused_call_id_never_runs_twice() -> None:
    """§7.1: a server must not reuse a callId; a client that sees it again does not
    run the call again (§7.2: one result per call)."""
    pair = tool_pair()
    turn = pair.session.begin_turn("acting")
    call = issue(pair, turn)
    pair.client.tool_finished(call, True, pair.now)
    pair.settle()
    inject(pair, ToolCall(call_id=call, name="lookup", arguments={}, turn_id=turn, epoch=1))
    assert runs(pair) == [call]


def test_tool_stream_after_a_terminal_phase_or_of_a_closed_epoch_is_discarded() -> None:
    """§7.5: nothing about a call counts after its terminal phase; tool.stream of a
    closed epoch is discarded."""
    pair = tool_pair(TOOL_STREAM)
    session = pair.session
    turn = session.begin_turn("acting")
    call = session.tool_calls.start(turn, "search", server_side=True)
    assert call is not None
    session.tool_calls.fail(call, "no arguments")
    pair.settle()
    late = ToolStream(call_id=call, name="search", turn_id=turn, epoch=1, phase="start")
    inject(pair, late)
    pair.client.interrupt("user", pair.now)  # closes epoch 1
    pair.settle()
    inject(pair, ToolStream(call_id="c_new", name="search", turn_id=turn, epoch=1, phase="start"))
    phases = [(e.call_id, e.phase) for e in pair.client_events if isinstance(e, ToolStreamUpdate)]
    assert phases == [(call, "start"), (call, "failed")]


def test_a_call_still_running_when_the_session_fails_sends_nothing() -> None:
    """§5.4: after RESUME_FAILED nothing is sent into this or any other session; the
    running tool's outcome is discarded, and tool_finished says so."""
    pair = tool_pair(config=ServerConfig(max_unacked=1))
    turn = pair.session.begin_turn("acting")
    call = issue(pair, turn)
    pair.advance(1.0)
    pair.cut()
    for text in ("a", "b"):  # the window of 1 loses the first
        pair.session.agent_output.send_text(turn, text)
    pair.connect()
    assert pair.client.state is ClientState.CLOSED
    written = len(pair.trace)
    # False: the outcome is discarded (so VrtClient reports no ToolFinished, whose
    # promise is that the tool.result was sent).
    assert not pair.client.tool_finished(call, True, pair.now)
    pair.settle()
    assert len(pair.trace) == written
    assert pair.client.take_outbox() == []


class Journal:
    """A session observer as a session store's journal is one (SessionObserver)."""

    def __init__(self) -> None:
        self.seqs: list[int] = []
        self.events: list[AgentInput] = []

    def sent(self, seq: int, message: Message, data: bytes) -> None:
        self.seqs.append(seq)

    def event(self, event: AgentInput) -> None:
        self.events.append(event)


def test_an_observer_sees_each_sequenced_message_once_parked_or_not() -> None:
    """§4.1 (docs/deploy.md): a store journals every sequenced message once, in seq
    order, connected or parked, and every event for the agent but input audio."""
    pair = Pair()
    pair.connect()
    journal = Journal()
    pair.session.observer = journal
    assert pair.session.observer is journal
    turn = pair.session.begin_turn("speaking")
    pair.cut()
    pair.session.agent_output.send_text(turn, "parked")
    pair.connect()
    pair.client.send_text("hi", pair.now)
    pair.client.send_audio(FRAME, pair.now)
    pair.settle()
    assert journal.seqs == [1, 2, 3]  # turn.state, text, interrupted
    assert [type(e) for e in journal.events] == [ResponseInterrupted, UserTextReceived]


def test_an_ended_session_has_no_timers() -> None:
    """§5.6: nothing resumes an ended session, and nothing is due for it."""
    pair = Pair()
    pair.connect()
    session = pair.session
    session.close("done")
    assert session.timer_deadline() is None
    session.on_timer(pair.now + 1000.0)
    assert session.status == "closed"


def test_the_client_remembers_a_bounded_number_of_tool_streams() -> None:
    """§7.5: the last phase of each call is remembered, within a bound (gate.py)."""
    pair = tool_pair(TOOL_STREAM)
    turn = pair.session.begin_turn("acting")
    for _ in range(REMEMBERED_STREAMS + 1):
        pair.session.tool_calls.start(turn, "search", server_side=True)
    pair.settle()
    assert len(pair.client._streams) == REMEMBERED_STREAMS
