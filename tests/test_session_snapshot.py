"""A server session written to a shared store and rebuilt from it (the core's
``ServerSession.restore``, ``observer`` and ``cut_short``; ``vrt.server.snapshot``;
``vrt.server.journal``'s conversation log), without a Redis: what another process would
rebuild is exactly what this one had."""

from __future__ import annotations

import itertools
from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from vrt.agents.function_names import OPENAI, FunctionNames
from vrt.agents.history import (
    AgentSaid,
    HistoryEntry,
    PlaybackStopped,
    ToolCalled,
    ToolResulted,
    TurnInterrupted,
    UserSaid,
    coalesce,
)
from vrt.agents.replay import INTERRUPTED_RESULT, chat_messages, gemini_turns, realtime_items
from vrt.protocol.codec import Decoded, decode_server
from vrt.protocol.messages import (
    Error,
    Hello,
    Interrupted,
    Message,
    Tool,
    ToolResult,
    TurnState,
    UserText,
)
from vrt.protocol.server import AgentInput, AudioReceived, ServerConfig, ServerSession
from vrt.protocol.streams import OutgoingStream
from vrt.server.redis_store import decode_log
from vrt.server.snapshot import ItemsEncoder, client_data, restore_session, session_state

CONFIG = ServerConfig()


def new_session() -> ServerSession:
    hello = Hello(tools=(Tool(name="add"),), context={"doc": 1}, capabilities=("tool-stream-v1",))
    session = ServerSession(hello, CONFIG, principal="alice")
    session.attach(_Connection(), 0.0)
    return session


class _Connection:
    def replaced(self, now: float) -> None:
        pass


def sent(session: ServerSession) -> list[Message]:
    return [
        decoded.message
        for _, data in session.outgoing.kept()
        if isinstance(decoded := decode_server(data), Decoded)
    ]


def test_a_session_rebuilt_from_its_snapshot_is_the_same_session() -> None:
    session = new_session()
    session.receive_sequenced(Decoded(1, UserText(text="hi")), 100.0)
    turn = session.begin_turn("thinking")
    session.agent_output.send_text(turn, "hello")
    call = session.tool_calls.start(turn, "add")
    assert call is not None
    session.tool_calls.issue(call, {"a": 1}, now=100.0)
    item = session.agent_output.start_audio(turn)
    assert item is not None
    # Another process: another clock (loop time 5000 there is wall time 1e9 + 1 here).
    now, wall = 100.0, 1e9
    state = session_state(session, now, wall)
    client = client_data(session)
    again = restore_session(CONFIG, state, client, session.outgoing.kept(), 5000.0, wall + 1)
    record, copy = session.record, again.record
    assert copy.session_id == record.session_id
    assert copy.principal == "alice"
    assert copy.capabilities == record.capabilities
    assert (copy.input, copy.output) == (record.input, record.output)
    assert copy.tools_json == record.tools_json
    assert copy.tool_names == record.tool_names
    assert again.context == {"doc": 1}
    assert copy.epoch == record.epoch
    assert copy.turn == record.turn
    assert list(copy.items) == list(record.items)
    restored_call = copy.calls.get(call)
    assert restored_call is not None
    assert restored_call.phase == "arguments-complete"
    # The §7.2 deadline is the same moment, on the other process's clock.
    original = record.calls.get(call)
    assert original is not None
    assert original.deadline is not None
    assert restored_call.deadline == original.deadline - now + 5000.0 - 1
    assert again.outgoing.last_seq == session.outgoing.last_seq
    assert again.outgoing.kept() == session.outgoing.kept()
    assert again.incoming.last_seq == 1
    assert again.status == "parked"
    # §5.4: a resume from any kept seq resends the same bytes.
    assert again.outgoing.resend_after(2) == session.outgoing.resend_after(2)


def test_cut_short_closes_the_epoch_ends_the_turn_and_says_why() -> None:
    session = new_session()
    turn = session.begin_turn("thinking")
    call = session.tool_calls.start(turn, "add")
    assert call is not None
    session.tool_calls.issue(call, {}, now=0.0)
    epoch = session.epoch
    before = session.outgoing.last_seq
    session.take_events()
    assert session.cut_short("moved")
    after = sent(session)[before:]
    interrupted = [m for m in after if isinstance(m, Interrupted)]
    idle = [m for m in after if isinstance(m, TurnState) and m.state == "idle"]
    errors = [m for m in after if isinstance(m, Error)]
    assert [m.epoch for m in interrupted] == [epoch]
    assert [(m.turn_id, m.epoch) for m in idle] == [(turn, epoch)]
    assert [(e.code, e.recoverable) for e in errors] == [("TURN_CUT_SHORT", True)]
    assert session.turn_id is None
    assert not session.record.calls  # its call settled (INTERRUPTED, §7.2)
    assert session.epoch > epoch  # nothing of the closed epoch can start
    assert not session.agent_output.send_text(turn, "late")
    assert not session.cut_short("again")


def test_the_observer_sees_every_sequenced_message_and_event_but_audio() -> None:
    session = new_session()
    seen: list[tuple[int, bytes]] = []
    events: list[AgentInput] = []

    class Observer:
        def sent(self, seq: int, message: Message, data: bytes) -> None:
            seen.append((seq, data))

        def event(self, event: AgentInput) -> None:
            events.append(event)

    session.observer = Observer()
    turn = session.begin_turn()
    session.agent_output.send_text(turn, "x")
    session.receive_sequenced(Decoded(1, UserText(text="again")), 0.0)  # interrupts (§6.3)
    session.audio_received(AudioReceived(payload=b"\x00\x00", seq=0))
    assert seen == session.outgoing.kept()
    assert [type(e).__name__ for e in events] == ["ResponseInterrupted", "UserTextReceived"]
    assert [type(e).__name__ for e in session.take_events()] == [
        "ResponseInterrupted",
        "UserTextReceived",
        "AudioReceived",
    ]


def test_first_kept_seq() -> None:
    stream = OutgoingStream(4)
    assert stream.first_kept_seq == 1
    for _ in range(6):
        stream.send(TurnState(turn_id="t", epoch=1, state="thinking"))
    assert stream.first_kept_seq == 3
    stream.ack(6)
    assert stream.first_kept_seq == 7


# -- the conversation log and what each provider is given of it --

HISTORY: list[HistoryEntry] = [
    UserSaid(text="what is 1 + 2?"),
    AgentSaid(turn_id="t1", text="Let me "),
    AgentSaid(turn_id="t1", text="add."),
    ToolCalled(
        call_id="c1", name="add", arguments={"a": 1, "b": 2}, turn_id="t1", provider_id="p1"
    ),
    ToolResulted(call_id="c1", ok=True, output=3),
    AgentSaid(turn_id="t1", text="It is 3."),
    AgentSaid(turn_id="t1", text="It is three.", spoken=True),
    UserSaid(text="(speech)", spoken=True),
    ToolCalled(call_id="c2", name="add", arguments={}, turn_id="t2"),
    TurnInterrupted(turn_id="t2", epoch=4),
    PlaybackStopped(item_id="i1", played_ms=120, turn_id="t1"),
]


def test_entries_round_trip_as_the_store_keeps_them() -> None:
    for entry in HISTORY:
        assert decode_log(msgspec.msgpack.encode([entry])) == [entry]
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(HISTORY[0]))["type"] == "user"


def test_coalesce_joins_an_agents_chunks_per_turn_and_kind() -> None:
    joined = coalesce(HISTORY)
    agent = [e for e in joined if isinstance(e, AgentSaid)]
    assert [(e.text, e.spoken) for e in agent] == [
        ("Let me add.", False),
        ("It is 3.", False),
        ("It is three.", True),
    ]


def test_chat_messages_pair_every_call_with_one_tool_message() -> None:
    messages = chat_messages(HISTORY, FunctionNames(["add"], OPENAI))
    roles = [m["role"] for m in messages]
    assert roles == ["user", "assistant", "tool", "assistant", "user", "assistant", "tool"]
    assert messages[1]["content"] == "Let me add."
    assert messages[1]["tool_calls"][0]["id"] == "p1"
    assert msgspec.json.decode(messages[2]["content"]) == {"output": 3}
    assert messages[3]["content"] == "It is 3."  # the text, not the spoken form
    assert messages[6]["tool_call_id"] == "c2"
    assert msgspec.json.decode(messages[6]["content"]) == INTERRUPTED_RESULT


def test_realtime_items_prefer_what_was_spoken() -> None:
    items = realtime_items(HISTORY, FunctionNames(["add"], OPENAI))
    kinds = [(i["type"], i.get("role")) for i in items]
    assert kinds == [
        ("message", "user"),
        ("message", "assistant"),
        ("function_call", None),
        ("function_call_output", None),
        ("message", "assistant"),
        ("message", "user"),
        ("function_call", None),
        ("function_call_output", None),
    ]
    assert items[4]["content"][0]["text"] == "It is three."


def test_gemini_turns_alternate() -> None:
    turns = gemini_turns(HISTORY)
    roles = [t["role"] for t in turns]
    assert all(a != b for a, b in itertools.pairwise(roles))
    assert roles[0] == "user"
    texts: list[Any] = [p["text"] for t in turns for p in t["parts"]]
    assert "what is 1 + 2?" in texts


def test_a_tool_result_message_reaches_the_observer_as_a_settlement() -> None:
    session = new_session()
    events: list[AgentInput] = []

    class Observer:
        def sent(self, seq: int, message: Message, data: bytes) -> None:
            pass

        def event(self, event: AgentInput) -> None:
            events.append(event)

    session.observer = Observer()
    turn = session.begin_turn()
    call = session.tool_calls.start(turn, "add")
    assert call is not None
    session.tool_calls.issue(call, {}, now=0.0)
    result = ToolResult(call_id=call, epoch=session.epoch, ok=True, output=2)
    session.receive_sequenced(Decoded(1, result), 0.0)
    assert [type(e).__name__ for e in events] == ["ToolSettled"]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.just(("start",)),
            st.tuples(st.just("frame"), st.integers(0, 5), st.integers(1, 3)),
            st.just(("turn",)),
            st.just(("write",)),
        ),
        max_size=40,
    )
)
def test_the_kept_items_encoding_is_always_a_fresh_one(ops: list[tuple[Any, ...]]) -> None:
    """The journal's ``ItemsEncoder`` encodes the audio items again only when its key
    (count, newest id, ``audio_out_seq``) moved: whatever the agent does to the items
    (§8.3: start, frames, a new turn, the oldest forgotten beyond ``remembered_items``),
    the state it writes is the one a fresh encoding gives."""
    session = ServerSession(Hello(), ServerConfig(remembered_items=3), principal=None)
    session.attach(_Connection(), 0.0)
    encoder = ItemsEncoder()
    turn = session.begin_turn("speaking")
    started: list[str] = []
    for op in ops:
        if op[0] == "start":
            item = session.agent_output.start_audio(turn)
            assert item is not None
            started.append(item)
        elif op[0] == "frame" and started:
            session.agent_output.send_audio(started[op[1] % len(started)], b"\0\0" * 160 * op[2])
        elif op[0] == "turn":
            session.end_turn(turn)
            turn = session.begin_turn("speaking")
        assert session_state(session, 1.0, 2.0, encoder) == session_state(session, 1.0, 2.0)
