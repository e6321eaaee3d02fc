"""Hypothesis state machines over the in-memory pair (``vrt.protocol.testing``), as h2
tests its transitions: random sends both ways, cuts at any byte, lost and delayed
frames, duplicates and resumes at any point, with the protocol's guarantees checked
after every step and once the network heals."""

from __future__ import annotations

from typing import Final

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from vrt.protocol import Ack, ClientSession, Decoded, Tool, decode_client, decode_server
from vrt.protocol.client import AudioChunk, InterruptedEpoch, RunTool, SessionFailed, TextReceived
from vrt.protocol.outputs import SendText
from vrt.protocol.server import ServerConfig, ToolSettled, UserTextReceived
from vrt.protocol.tables import ClientState
from vrt.protocol.testing import Direction, Pair

#: Long enough that no session expires and no call times out unless a rule says so.
PATIENT: Final = ServerConfig(resume_window=3600.0, tool_timeout=3600.0)
WINDOWED: Final = ServerConfig(resume_window=3600.0, max_unacked=4)
LOOKUP: Final = Tool(name="lookup")
SETTINGS: Final = settings(max_examples=60, stateful_step_count=40, deadline=None)

directions = st.sampled_from(["to_server", "to_client"])
latencies = st.sampled_from([0.0, 0.01, 0.3])


class _Network(RuleBasedStateMachine):
    """Faults of the network, common to the machines below."""

    def __init__(self, client: ClientSession, config: ServerConfig = PATIENT) -> None:
        super().__init__()
        self.pair = Pair(client, config)
        self.pair.connect()
        self.counter = 0
        self.checked = 0  # frames of the trace already checked

    def _next(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    @rule(seconds=st.sampled_from([0.0, 0.05, 0.25, 1.0, 20.0]))
    def time_passes(self, seconds: float) -> None:
        self.pair.advance(seconds)

    @rule(direction=directions, nbytes=st.integers(0, 400))
    def cut_later(self, direction: Direction, nbytes: int) -> None:
        """A cut at any byte of either outgoing stream."""
        link = self.pair.link
        assert link is not None
        link.wire(direction).cut_after(nbytes)

    @rule(lose=st.booleans(), client_notices=st.booleans(), server_notices=st.booleans())
    def cut_now(self, lose: bool, client_notices: bool, server_notices: bool) -> None:
        link = self.pair.link
        assert link is not None
        self.pair.cut(
            link,
            lose_in_flight=lose,
            client_notices=client_notices,
            server_notices_after=0.0 if server_notices else None,
        )

    @rule(direction=directions)
    def duplicate(self, direction: Direction) -> None:
        link = self.pair.link
        assert link is not None
        link.wire(direction).duplicate_next()

    @precondition(lambda self: self.pair.client.state is ClientState.CONNECTING)
    @rule(latency=latencies)
    def resume(self, latency: float) -> None:
        """§5.4: a new connection resumes the session, from wherever the streams are.

        Its hello is let arrive before anything else happens: a hello stranded in
        flight on a connection the client abandoned, arriving after a later resume
        was acknowledged, ends the session by §5.4's letter (RESUME_FAILED: the
        messages it asks for are gone); test_pair_resume.py pins that down, and here
        it would only hide the guarantees checked."""
        self.pair.connect(latency)
        self.pair.advance(latency)

    @invariant()
    def acks_stay_in_bounds(self) -> None:
        """§4.2: ``upTo`` never exceeds the highest seq received, so never the peer's
        last seq sent."""
        pair = self.pair
        trace = pair.trace
        for _, direction, item in trace[self.checked :]:
            if not isinstance(item, SendText):
                continue
            if direction == "to_server":
                decoded = decode_client(item.data)
                if isinstance(decoded, Decoded) and isinstance(decoded.message, Ack):
                    assert decoded.message.up_to <= pair.session.outgoing.last_seq
            else:
                decoded_s = decode_server(item.data)
                if isinstance(decoded_s, Decoded) and isinstance(decoded_s.message, Ack):
                    assert decoded_s.message.up_to <= pair.client.outgoing.last_seq
        self.checked = len(trace)

    @invariant()
    def the_session_goes_on(self) -> None:
        """No fault of the network alone ends a session (§5.4)."""
        assert self.pair.client.state is not ClientState.CLOSED

    def heal(self) -> None:
        """A last, clean connection; then time for acks and resends."""
        pair = self.pair
        pair.advance(1.0)  # what is still in flight on older connections arrives
        if pair.client.state is not ClientState.CONNECTING:
            pair.cut()
        pair.connect()
        pair.advance(1.0)


class ExactlyOnce(_Network):
    """§4.1, §4.3, §5.4: each sequenced message is handled exactly once and in order,
    both ways, whatever is lost, duplicated or delayed and wherever a resume happens."""

    def __init__(self, client: ClientSession | None = None, config: ServerConfig = PATIENT) -> None:
        super().__init__(client or ClientSession(), config)
        self.user_sent: list[str] = []
        self.agent_sent: list[str] = []

    @rule()
    def user_says(self) -> None:
        text = self._next("u")
        self.pair.client.send_text(text, self.pair.now)
        self.user_sent.append(text)
        self.pair.settle()

    @rule()
    def agent_says(self) -> None:
        session = self.pair.session
        turn = session.turn_id if session.response_in_flight else None
        turn = turn or session.begin_turn("speaking")
        text = self._next("a")
        assert session.agent_output.send_text(turn, text)
        self.agent_sent.append(text)
        self.pair.settle()

    def _received(self) -> tuple[list[str], list[str]]:
        pair = self.pair
        by_agent = [e.text for e in pair.agent_events if isinstance(e, UserTextReceived)]
        by_client = [e.text for e in pair.client_events if isinstance(e, TextReceived)]
        return by_agent, by_client

    @invariant()
    def never_twice_never_out_of_order(self) -> None:
        by_agent, by_client = self._received()
        assert by_agent == self.user_sent[: len(by_agent)]
        assert by_client == self.agent_sent[: len(by_client)]

    def teardown(self) -> None:
        self.heal()
        self.all_delivered()

    def all_delivered(self) -> None:
        assert self._received() == (self.user_sent, self.agent_sent)
        # §5.4: after the resume each side has all the other sent.
        pair = self.pair
        assert pair.session.outgoing.last_seq == pair.client.incoming.last_seq
        assert pair.client.outgoing.last_seq == pair.session.incoming.last_seq


class EpochGate(_Network):
    """§6.2, §7.2: a tool call of a closed epoch never starts and is answered
    INTERRUPTED, and output audio of a closed epoch is never played; every call the
    agent issues settles exactly once, across cuts and resumes."""

    def __init__(self) -> None:
        super().__init__(ClientSession(tools=(LOOKUP,)))
        self.issued: list[str] = []
        self.answered: set[str] = set()
        self.item_epochs: dict[str, int] = {}

    @rule(frames=st.integers(1, 3))
    def agent_speaks(self, frames: int) -> None:
        pair = self.pair
        session = pair.session
        turn = session.turn_id if session.response_in_flight else None
        turn = turn or session.begin_turn("speaking")
        item = session.agent_output.start_audio(turn)
        assert item is not None
        self.item_epochs[item] = session.epoch
        for _ in range(frames):
            session.agent_output.send_audio(item, bytes(480))
            pair.settle()

    @rule()
    def agent_calls_a_tool(self) -> None:
        pair = self.pair
        session = pair.session
        turn = session.turn_id if session.response_in_flight else None
        turn = turn or session.begin_turn("acting")
        call_id = session.tool_calls.start(turn, "lookup")
        assert call_id is not None
        assert session.tool_calls.issue(call_id, {"n": self.counter}, pair.now)
        self.issued.append(call_id)
        pair.settle()

    @rule(reason=st.sampled_from(["user", "speech"]))
    def user_interrupts(self, reason: str) -> None:
        pair = self.pair
        if reason == "user":
            pair.client.interrupt("user", pair.now)
        else:
            pair.session.user_started_speaking()
        pair.settle()

    @rule()
    def user_says(self) -> None:
        """§6.3: text interrupts the response in flight."""
        self.pair.client.send_text(self._next("u"), self.pair.now)
        self.pair.settle()

    @rule(ok=st.booleans())
    def running_tool_ends(self, ok: bool) -> None:
        pair = self.pair
        for event in pair.client_events:
            if isinstance(event, RunTool) and event.call_id not in self.answered:
                self.answered.add(event.call_id)
                pair.client.tool_finished(event.call_id, ok, pair.now, output=event.arguments)
                pair.settle()
                return

    @invariant()
    def no_call_of_a_closed_epoch_starts(self) -> None:
        closed = -1
        for event in self.pair.client_events:
            if isinstance(event, InterruptedEpoch):
                closed = max(closed, event.epoch)
            elif isinstance(event, RunTool):
                assert event.epoch > closed, "§6.2: a call of a closed epoch started"
            elif isinstance(event, AudioChunk):
                assert self.item_epochs[event.item_id] > closed, "§6.2: closed audio played"

    @invariant()
    def settled_at_most_once(self) -> None:
        settled = [e.call_id for e in self.pair.agent_events if isinstance(e, ToolSettled)]
        assert len(settled) == len(set(settled))
        assert set(settled) <= set(self.issued)

    def teardown(self) -> None:
        self.heal()
        pair = self.pair
        while True:  # answer every call that runs, one at a time (§7.1)
            runs = [
                e
                for e in pair.client_events
                if isinstance(e, RunTool) and e.call_id not in self.answered
            ]
            if not runs:
                break
            self.answered.add(runs[0].call_id)
            pair.client.tool_finished(runs[0].call_id, True, pair.now)
            pair.advance(1.0)
        settled = [e for e in pair.agent_events if isinstance(e, ToolSettled)]
        assert sorted(e.call_id for e in settled) == sorted(self.issued)
        # §6.2: a call never started is answered INTERRUPTED, never run.
        started = {e.call_id for e in pair.client_events if isinstance(e, RunTool)}
        for event in settled:
            if event.call_id not in started:
                assert event.code == "INTERRUPTED"
        assert pair.session.record.calls.awaiting_result() == 0


class BoundedWindows(ExactlyOnce):
    """§4.1, §5.4, §11: both sides keep at most 4 unacknowledged messages. A resume
    fails (RESUME_FAILED on both sides, nothing replayed) exactly when a side no longer
    holds what the other lacks; otherwise every message is handled exactly once.
    Every cut loses what is in flight, and each side notices it at once."""

    def __init__(self) -> None:
        super().__init__(ClientSession(max_kept=4), WINDOWED)

    def _open(self) -> bool:
        return self.pair.client.state is not ClientState.CLOSED

    @precondition(_open)
    @rule()
    def user_says(self) -> None:
        super().user_says()

    @precondition(_open)
    @rule()
    def agent_says(self) -> None:
        super().agent_says()

    @rule(lose=st.just(True), client_notices=st.just(True), server_notices=st.just(True))
    def cut_now(self, lose: bool, client_notices: bool, server_notices: bool) -> None:
        super().cut_now(lose, client_notices, server_notices)

    @precondition(lambda self: self.pair.client.state is ClientState.CONNECTING)
    @rule(latency=st.just(0.0))
    def resume(self, latency: float) -> None:
        super().resume(latency)

    @invariant()
    def the_session_goes_on(self) -> None:
        """It ends only by a resume that could not resend, reported as RESUME_FAILED."""
        pair = self.pair
        if pair.client.state is ClientState.CLOSED:
            failed = [e.code for e in pair.client_events if isinstance(e, SessionFailed)]
            assert failed == ["RESUME_FAILED"]
            server, client = pair.session, pair.client
            if server.outgoing.lost_through > client.incoming.last_seq:
                assert server.status == "closed"  # the server refused the resume
            else:  # the client could not resend: it closed the connection (§5.4)
                assert client.outgoing.lost_through > server.incoming.last_seq
                assert server.status == "parked"

    def teardown(self) -> None:
        if self._open():
            self.heal()
        self.the_session_goes_on()
        if self._open():
            self.all_delivered()


TestExactlyOnce = ExactlyOnce.TestCase
TestExactlyOnce.settings = SETTINGS
TestEpochGate = EpochGate.TestCase
TestEpochGate.settings = SETTINGS
TestBoundedWindows = BoundedWindows.TestCase
TestBoundedWindows.settings = SETTINGS
