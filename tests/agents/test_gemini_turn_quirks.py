"""What the Gemini Live service does within a connection that the adapter must follow,
each reproduced by the stand-in from its source (``gemini_live_standin.py``): a real
VrtServer with the adapter, a real VrtClient.

* ``interrupted`` after ``turnComplete`` while the client still plays the answer (F5);
* the sliding window that cuts the oldest turns, the context's among them (GENAI
  SlidingWindow);
* ``turnCompleteReason`` (GENAI TurnCompleteReason);
* ``gemini-3*`` models, which run no inference on a ``clientContent`` turn alone (F6,
  PC-G)."""

from __future__ import annotations

import json
from collections.abc import Sequence

import gemini_session
from gemini_live_standin import GeminiStandIn, Reply
from gemini_session import (
    API_KEY,
    MODEL,
    ready,
    served,
)
from voice_session import idle, payloads, session, silence_frames, speech_frames

from vrt.client import (
    AudioChunk,
    ErrorReceived,
    PlaybackStop,
    SessionFailed,
    TranscriptReceived,
    TurnChanged,
)
from vrt.protocol.messages import PCM16_24K

# The shared fixtures (gemini_session.py): pytest finds them here.
api_key_fixture = gemini_session.api_key_fixture
standin_fixture = gemini_session.standin_fixture
url_fixture = gemini_session.url_fixture

GEMINI_3 = "gemini-3.1-flash-live-preview"


def agent_final(event: TranscriptReceived) -> bool:
    return event.role == "agent" and event.final


def finals(events: Sequence[object]) -> list[str]:
    return [e.text for e in events if isinstance(e, TranscriptReceived) and agent_final(e)]


# --- interrupted after turnComplete (F5) ----------------------------------------------


async def test_speech_after_an_answer_stops_playback_and_the_next_answer_is_heard(
    url: str, standin: GeminiStandIn
) -> None:
    """The service finished the answer but the client still plays it when the user
    speaks: ``interrupted`` with no generation in flight (F5). It is the user starting
    to speak (a listening turn: the client stops playback, §8.4), and the answer to
    what the user then says is delivered, not dropped."""
    standin.playout_lag = 5.0  # the client plays long after the answer: no race
    second = payloads(3, 960, seed=101)
    standin.replies.append(Reply(audio=payloads(3, 960, seed=41), transcript=["First."]))
    standin.replies.append(Reply(audio=second, transcript=["Second."]))
    async with session(url) as s:
        await ready(standin)
        await s.client.send_text("first")
        first = await s.next(TurnChanged, idle)
        for frame in speech_frames(PCM16_24K):
            assert s.client.send_audio(frame)
        listening = await s.next(TurnChanged, lambda e: e.state == "listening")
        assert listening.epoch > first.epoch
        await s.find(PlaybackStop, lambda e: e.epoch == listening.epoch)
        for frame in silence_frames(PCM16_24K):
            assert s.client.send_audio(frame)
        final = await s.next(TranscriptReceived, agent_final)
        done = await s.next(TurnChanged, idle)
        await s.drain(0.05)
    assert standin.late_interruptions == 1
    assert final.text == "Second."
    assert done.turn_id == listening.turn_id
    assert [c.payload for c in s.all(AudioChunk) if c.payload in second] == second
    assert not s.all(ErrorReceived)


# --- the context and the sliding window -------------------------------------------


async def test_the_context_is_sent_again_after_the_window_cut_it(api_key: str) -> None:
    def has_context(turns: list[dict[str, object]]) -> bool:
        return any("[application context]" in json.dumps(turn) for turn in turns)

    async with GeminiStandIn(api_key=API_KEY, models=(MODEL,), trigger_tokens=300) as standin:
        async with served(standin) as url, session(url, context={"doc": "a.txt"}) as s:
            await ready(standin)
            for n in range(8):
                await s.client.send_text(f"question {n}: " + "words " * 40)
                await s.next(TurnChanged, idle)
            await s.drain(0.05)
            assert not s.all(ErrorReceived)
        assert standin.slid, "the window never slid"
        assert any(has_context(cut) for cut in standin.slid)  # the window cut the context
        assert has_context(standin.connections[0].history)  # and it is there again
        sent = [c for c in standin.messages("clientContent") if has_context(c["turns"])]
        assert len(sent) >= 2
        assert all(c["turnComplete"] is False for c in sent)  # data, never a question


# --- turnCompleteReason ---------------------------------------------------------------


async def test_a_turn_that_ends_for_a_reason_is_a_recoverable_error(
    url: str, standin: GeminiStandIn
) -> None:
    standin.replies.append(Reply(reason="MALFORMED_FUNCTION_CALL"))
    standin.replies.append(Reply(audio=payloads(1, 960, seed=5), transcript=["Fine."]))
    async with session(url) as s:
        await ready(standin)
        await s.client.send_text("call something")
        error = await s.next(ErrorReceived)
        assert error.recoverable
        assert "MALFORMED_FUNCTION_CALL" in error.message
        await s.next(TurnChanged, idle)
        await s.client.send_text("again")
        final = await s.next(TranscriptReceived, agent_final)
        assert final.text == "Fine."
        assert not s.all(SessionFailed)


async def test_need_more_input_is_no_error(url: str, standin: GeminiStandIn) -> None:
    standin.replies.append(Reply(audio=payloads(1, 960, seed=6), reason="NEED_MORE_INPUT"))
    async with session(url) as s:
        await ready(standin)
        await s.client.send_text("book a table")
        await s.next(TurnChanged, idle)
        await s.drain(0.05)
        assert not s.all(ErrorReceived)


# --- gemini-3 models ------------------------------------------------------------------


async def test_gemini_3_gets_user_text_as_realtime_input(api_key: str) -> None:
    async with GeminiStandIn(api_key=API_KEY, models=(GEMINI_3,)) as standin:
        async with served(standin, model=GEMINI_3) as url, session(url) as s:
            await ready(standin)
            await s.client.send_text("hello")
            final = await s.next(TranscriptReceived, agent_final)
            assert final.text == "ok"
            await s.next(TurnChanged, idle)
        assert {"text": "hello"} in standin.messages("realtimeInput")
        assert not [c for c in standin.messages("clientContent") if c.get("turnComplete")]


async def test_gemini_2_5_gets_user_text_as_client_content(
    url: str, standin: GeminiStandIn
) -> None:
    async with session(url) as s:
        await ready(standin)
        await s.client.send_text("hello")
        await s.next(TurnChanged, idle)
    (content,) = standin.messages("clientContent")
    assert content == {
        "turns": [{"role": "user", "parts": [{"text": "hello"}]}],
        "turnComplete": True,
    }
    assert not [m for m in standin.messages("realtimeInput") if "text" in m]


# --- interrupted before any content of an answer to the user's text -------------------


async def test_a_second_text_before_the_first_answer_starts_is_no_barge_in(
    url: str, standin: GeminiStandIn
) -> None:
    """Two texts back to back: the service interrupts the first generation before any
    of its content came (``interrupted`` then ``turnComplete``, GENAI: "interrupted >
    turn_complete"). That is the second text's doing, not the user's voice (LK-G: no
    speech while a generation the client asked for is pending): no listening turn, and
    the second answer arrives in the second text's turn."""
    standin.replies.append(Reply(audio=payloads(2, 960, seed=31), transcript=["One."]))
    standin.replies.append(Reply(audio=payloads(2, 960, seed=62), transcript=["Two."]))
    async with session(url) as s:
        await ready(standin)
        await s.client.send_text("one")
        await s.client.send_text("two")
        final = await s.next(TranscriptReceived, agent_final)
        done = await s.next(TurnChanged, idle)
        await s.drain(0.1)
    assert final.text == "Two."
    assert done.turn_id == final.turn_id
    assert not [e for e in s.all(TurnChanged) if e.state == "listening"]
    assert finals(s.seen) == ["Two."]
    assert not s.all(ErrorReceived)
