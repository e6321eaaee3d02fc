"""What the agent's output becomes on the wire (§6, §8): text and transcripts carry
their turn and item, output audio frames are numbered one after another (§8.1), and
the session counts the agent's replies (the driver writes the first at once). Sans-I/O,
like the other rules (rules_core.py); each test closes survivors of a mutation run of
``protocol/server/agent_output.py`` (docs/testing.md#mutation-testing)."""

from __future__ import annotations

from rules_core import open_server

from vrt.protocol.messages import AgentText, Transcript

PAYLOAD = b"\x01\x00" * 480  # 20 ms of pcm16 at 24 kHz


def test_text_carries_its_turn_and_each_chunk_is_one_reply() -> None:
    server = open_server()
    session = server.session
    turn_id = session.begin_turn("speaking")
    assert session.replies == 0
    assert session.send_text(turn_id, "Hello")
    assert session.send_text(turn_id, " there")
    assert session.replies == 2
    texts: list[AgentText] = server.written().of(AgentText)
    assert [(t.text, t.turn_id) for t in texts] == [("Hello", turn_id), (" there", turn_id)]


def test_transcripts_carry_their_item_and_turn_and_only_the_agents_are_replies() -> None:
    """§8.4: a transcript names the audio item and the turn it belongs to; the user's
    own transcript is no reply of the agent's."""
    server = open_server()
    session = server.session
    turn_id = session.begin_turn("speaking")
    item_id = session.start_audio(turn_id)
    assert item_id is not None
    assert session.send_transcript("user", "what time is it", item_id="i_user")
    assert session.replies == 0
    assert session.send_transcript("agent", "It is", item_id=item_id, turn_id=turn_id)
    assert session.send_transcript("agent", "It is ten.", item_id=item_id, turn_id=turn_id)
    assert session.replies == 2
    said: list[Transcript] = server.written().of(Transcript)
    assert [(t.role, t.text, t.item_id, t.turn_id) for t in said] == [
        ("user", "what time is it", "i_user", None),
        ("agent", "It is", item_id, turn_id),
        ("agent", "It is ten.", item_id, turn_id),
    ]


def test_output_audio_frames_are_numbered_one_after_another() -> None:
    """§8.1: the server's audio seq starts at 0 and goes up by one per frame, across
    items; each frame is one reply."""
    server = open_server()
    session = server.session
    turn_id = session.begin_turn("speaking")
    first = session.start_audio(turn_id)
    assert first is not None
    for _ in range(3):
        assert session.send_audio(first, PAYLOAD)
    second = session.start_audio(turn_id)
    assert second is not None
    assert session.send_audio(second, PAYLOAD)
    assert session.replies == 4
    assert [f.seq for f in server.written().frames] == [0, 1, 2, 3]
