"""What the agent's output becomes on the wire (§6, §8): text and transcripts carry
their turn and item, output audio frames are numbered one after another (§8.1). Which of
them are replies (written at once) is the agent seam's to say
(tests/agents/test_agent_session.py). Sans-I/O,
like the other rules (rules_core.py); each test closes survivors of a mutation run of
``protocol/server/agent_output.py`` (docs/testing.md#mutation-testing)."""

from __future__ import annotations

from rules_core import open_server

from vrt.protocol.messages import AgentText, AudioStart, Playback, Transcript
from vrt.protocol.server.config import ServerConfig
from vrt.protocol.server.events import PlaybackReported

PAYLOAD = b"\x01\x00" * 480  # 20 ms of pcm16 at 24 kHz


def test_text_carries_its_turn() -> None:
    server = open_server()
    session = server.session
    turn_id = session.begin_turn("speaking")
    assert session.agent_output.send_text(turn_id, "Hello")
    assert session.agent_output.send_text(turn_id, " there")
    texts: list[AgentText] = server.written().of(AgentText)
    assert [(t.text, t.turn_id) for t in texts] == [("Hello", turn_id), (" there", turn_id)]


def test_transcripts_carry_their_item_and_turn() -> None:
    """§8.4: a transcript names the audio item and the turn it belongs to; the user's
    own transcript has no turn."""
    server = open_server()
    session = server.session
    turn_id = session.begin_turn("speaking")
    item_id = session.agent_output.start_audio(turn_id)
    assert item_id is not None
    assert session.agent_output.send_transcript("user", "what time is it", item_id="i_user")
    assert session.agent_output.send_transcript("agent", "It is", item_id=item_id, turn_id=turn_id)
    assert session.agent_output.send_transcript(
        "agent", "It is ten.", item_id=item_id, turn_id=turn_id
    )
    said: list[Transcript] = server.written().of(Transcript)
    assert [(t.role, t.text, t.item_id, t.turn_id) for t in said] == [
        ("user", "what time is it", "i_user", None),
        ("agent", "It is", item_id, turn_id),
        ("agent", "It is ten.", item_id, turn_id),
    ]


def test_output_audio_frames_are_numbered_one_after_another() -> None:
    """§8.1: the server's audio seq starts at 0 and goes up by one per frame, across
    items."""
    server = open_server()
    session = server.session
    turn_id = session.begin_turn("speaking")
    first = session.agent_output.start_audio(turn_id)
    assert first is not None
    for _ in range(3):
        assert session.agent_output.send_audio(first, PAYLOAD)
    second = session.agent_output.start_audio(turn_id)
    assert second is not None
    assert session.agent_output.send_audio(second, PAYLOAD)
    assert [f.seq for f in server.written().frames] == [0, 1, 2, 3]


def test_an_item_is_announced_once_however_many_frames_it_has() -> None:
    """§8.3: ``audio.start`` opens an item once; its frames follow without another."""
    server = open_server()
    session = server.session
    turn_id = session.begin_turn("speaking")
    item_id = session.agent_output.start_audio(turn_id)
    assert item_id is not None
    for _ in range(3):
        assert session.agent_output.send_audio(item_id, PAYLOAD)
    written = server.written()
    assert [start.item_id for start in written.of(AudioStart)] == [item_id]
    assert len(written.frames) == 3


def test_a_frame_counts_what_the_agent_says_was_played() -> None:
    """§8.4: what the user heard of an item is capped at what was sent of it, counted in
    the durations the agent gives when it knows them better than the frame's size."""
    server = open_server()
    session = server.session
    turn_id = session.begin_turn("speaking")
    item_id = session.agent_output.start_audio(turn_id)
    assert item_id is not None
    assert session.agent_output.send_audio(item_id, PAYLOAD, played_ms=7.0)  # 20 ms of bytes
    assert session.agent_output.send_audio(item_id, PAYLOAD, played_ms=5.0)
    session.take_events()
    server.send(Playback(item_id=item_id, played_ms=40), 0.0)
    reports = [e for e in session.take_events() if isinstance(e, PlaybackReported)]
    assert [(r.item_id, r.played_ms, r.turn_id) for r in reports] == [(item_id, 12, turn_id)]


def test_the_configured_number_of_items_is_remembered() -> None:
    """§8.4: playback reports are answered for the last ``remembered_items`` audio items:
    exactly that many are kept, the oldest forgotten first."""
    server = open_server(config=ServerConfig(remembered_items=3))
    session = server.session
    turn_id = session.begin_turn("speaking")
    items = [session.agent_output.start_audio(turn_id) for _ in range(3)]
    assert None not in items
    assert list(session.record.items) == items
    fourth = session.agent_output.start_audio(turn_id)
    assert list(session.record.items) == [*items[1:], fourth]
    assert session.agent_output.send_audio(items[0] or "", PAYLOAD) is False  # forgotten
    assert session.agent_output.send_audio(items[1] or "", PAYLOAD)
