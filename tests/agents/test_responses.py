"""Per-response measurements at the agent seam (``vrt.agents.responses``): what the
``AgentSession`` methods every agent calls tell a ``ResponseWatch``, on a clock the test
moves, and the tokens of each response from the agent's ``usage``."""

from __future__ import annotations

import logging

import pytest

from vrt.agents.base import AgentSession
from vrt.agents.responses import Response, ResponseWatch
from vrt.agents.usage import TokenUsage
from vrt.audio import frame_bytes
from vrt.protocol.codec import encode
from vrt.protocol.messages import PCM16_24K, Hello
from vrt.protocol.server import ServerConfig, ServerConnection, ServerSession

log = logging.getLogger("test")
FRAME = bytes(frame_bytes(PCM16_24K, 20))


def open_session() -> ServerSession:
    """A session bound to a connection, as the server opens one (§5.2)."""
    config = ServerConfig()
    connection = ServerConnection(config, now=0.0)
    connection.receive_text(encode(Hello(), 0), 0.0)
    (event,) = connection.take_events()
    core = ServerSession(event.hello, config)
    connection.open(core, 0.0)
    return core


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class UsageAgent:
    """An agent that reports token usage, as the model adapters do (``usage.py``)."""

    def __init__(self) -> None:
        self.usage = TokenUsage()


def watched(agent: object = None) -> tuple[AgentSession, list[Response], Clock]:
    clock = Clock()
    session = AgentSession(open_session(), lambda: None, clock)
    ended: list[Response] = []
    session.watch = ResponseWatch(clock, ended.append, agent)
    return session, ended, clock


def test_a_text_and_audio_reply() -> None:
    session, ended, clock = watched()
    clock.now = 10.0
    turn = session.begin_turn("thinking")
    clock.now = 10.5
    assert turn.state("speaking")
    clock.now = 10.75
    assert turn.text("hello")
    clock.now = 11.0
    assert turn.text(" world")
    assert turn.transcript("hello world")
    clock.now = 11.5
    item = turn.audio()
    assert item is not None
    assert item.write(FRAME)
    clock.now = 12.0
    assert item.write(FRAME)
    assert ended == []
    clock.now = 14.0
    assert turn.end()
    (response,) = ended
    assert response.turn_id == turn.id
    assert response.outcome == "completed"
    assert response.time_to_first_text == 0.75
    assert response.time_to_first_audio == 1.5
    assert response.duration == 4.0
    assert response.usage is None  # the agent reports no usage
    assert response.output_tokens_per_second is None
    assert session.watch is not None
    assert session.watch.current is None


def test_idle_through_state_ends_the_response_as_end_does() -> None:
    session, ended, clock = watched()
    turn = session.begin_turn("speaking")  # a response may begin past thinking
    clock.now = 2.0
    assert turn.state("idle")
    assert [(r.outcome, r.duration, r.first_text) for r in ended] == [("completed", 2.0, None)]


def test_a_spoken_exchange_begins_when_the_turn_leaves_listening() -> None:
    """The user's speech is no part of the response (§6.1): it begins at thinking."""
    session, ended, clock = watched()
    clock.now = 1.0
    listening = session.user_started_speaking()
    assert session.watch is not None
    assert session.watch.current is None
    clock.now = 3.0
    assert listening.state("thinking")
    clock.now = 3.25
    item = listening.audio()
    assert item is not None
    assert item.write(FRAME)
    clock.now = 4.0
    session.user_started_speaking()  # barge-in (§6.2): the response is interrupted
    (response,) = ended
    assert (response.started, response.outcome) == (3.0, "interrupted")
    assert response.time_to_first_audio == 0.25
    assert response.duration == 1.0
    assert session.watch.current is None  # the new listening turn is no response


def test_the_agent_interrupting_and_a_new_turn() -> None:
    session, ended, clock = watched()
    first = session.begin_turn()
    clock.now = 1.0
    second = session.begin_turn()  # ends the first (§6.1): completed, not interrupted
    clock.now = 3.0
    assert session.interrupt()
    assert [(r.turn_id, r.outcome, r.duration) for r in ended] == [
        (first.id, "completed", 1.0),
        (second.id, "interrupted", 2.0),
    ]
    assert not session.interrupt()  # nothing in flight: nothing more
    assert len(ended) == 2


def test_what_a_turn_that_is_over_sends_is_not_measured() -> None:
    session, ended, clock = watched()
    turn = session.begin_turn()
    item = turn.audio()
    assert item is not None
    clock.now = 1.0
    assert session.interrupt()
    clock.now = 2.0
    assert not turn.text("late")
    assert not item.write(FRAME)
    assert not turn.end()
    (response,) = ended
    assert (response.first_text, response.first_audio, response.ended) == (None, None, 1.0)


def test_the_client_interrupting_names_the_turn() -> None:
    """``ResponseInterrupted`` (the server's telemetry calls ``interrupted`` with its
    turn id): an interruption of another turn than the open response's changes
    nothing."""
    session, ended, clock = watched()
    turn = session.begin_turn()
    watch = session.watch
    assert watch is not None
    watch.interrupted("t_other")
    assert ended == []
    clock.now = 0.5
    watch.interrupted(turn.id)
    assert [(r.outcome, r.ended) for r in ended] == [("interrupted", 0.5)]


def test_the_session_ending_cuts_the_open_response_short() -> None:
    session, ended, clock = watched()
    session.begin_turn()
    clock.now = 7.0
    assert session.watch is not None
    session.watch.close()
    assert [(r.outcome, r.duration) for r in ended] == [("interrupted", 7.0)]


def test_an_inner_view_of_the_session_shares_the_watch() -> None:
    """A voice agent's brain acts through ``AgentSession.inside`` (vrt.voice.brain);
    its turns and the outer agent's audio are one response."""
    outer, ended, clock = watched()
    inner = AgentSession.inside(outer)
    assert inner.watch is outer.watch
    turn = inner.begin_turn()
    clock.now = 0.5
    assert turn.text("hi")
    clock.now = 1.5
    spoken = outer.turn
    assert spoken is not None
    assert spoken.id == turn.id
    item = spoken.audio()
    assert item is not None
    assert item.write(FRAME)
    clock.now = 2.0
    assert spoken.end()
    (response,) = ended
    assert (response.time_to_first_text, response.time_to_first_audio) == (0.5, 1.5)


def test_tokens_are_the_usage_reported_during_each_response() -> None:
    agent = UsageAgent()
    agent.usage.record(log, "s", input_tokens=999)  # before the watch: not counted
    session, ended, clock = watched(agent)
    turn = session.begin_turn()
    # OpenAI Realtime's response.done usage: input_tokens includes the audio tokens of
    # input_token_details, output_tokens those of output_token_details (openai-python
    # types/realtime/realtime_response_usage.py).
    agent.usage.record(
        log,
        "s",
        input_tokens=120,
        cached_input_tokens=20,
        input_audio_tokens=80,
        output_tokens=60,
        output_audio_tokens=45,
    )
    clock.now = 3.0
    turn.end()
    session.begin_turn()
    clock.now = 4.0
    session.interrupt()  # usage of the cancelled response arrives after it ended
    agent.usage.record(log, "s", input_tokens=200, output_tokens=5)
    third = session.begin_turn()
    clock.now = 5.0
    third.end()
    first, second, late = ended
    assert first.usage is not None
    assert (first.usage.input_text_tokens, first.usage.input_audio_tokens) == (40, 80)
    assert (first.usage.output_text_tokens, first.usage.output_audio_tokens) == (15, 45)
    assert (first.usage.cached_input_tokens, first.usage.responses) == (20, 1)
    assert first.output_tokens_per_second == 20.0  # 60 tokens over 3 s (LiveKit's)
    assert second.usage is None  # nothing reported while it ran
    assert late.usage is not None  # counted with the next response
    assert (late.usage.input_tokens, late.usage.output_tokens) == (200, 5)


def test_usage_counters_the_agent_replaces_count_from_zero() -> None:
    agent = UsageAgent()
    agent.usage.record(log, "s", input_tokens=500, output_tokens=50)
    session, ended, _ = watched(agent)
    turn = session.begin_turn()
    agent.usage = TokenUsage()  # e.g. made anew with a provider session
    agent.usage.record(log, "s", input_tokens=30, output_tokens=3)
    turn.end()
    nxt = session.begin_turn()
    agent.usage.record(log, "s", input_tokens=7)
    nxt.end()
    usages = [response.usage for response in ended]
    assert usages == [
        TokenUsage(responses=1, input_tokens=30, output_tokens=3),
        TokenUsage(responses=1, input_tokens=7),
    ]


def test_counters_that_go_down_give_no_negative_tokens() -> None:
    agent = UsageAgent()
    agent.usage.record(log, "s", input_tokens=500, output_tokens=50)
    session, ended, _ = watched(agent)
    turn = session.begin_turn()
    agent.usage.input_tokens = 100  # the same counters, set back
    agent.usage.record(log, "s", output_tokens=3)
    turn.end()
    (response,) = ended
    assert response.usage == TokenUsage(responses=1, output_tokens=3)


def test_a_failing_sink_does_not_fail_the_agent(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    session = AgentSession(open_session(), lambda: None, clock)

    def sink(response: Response) -> None:
        raise RuntimeError("exporter down")

    session.watch = ResponseWatch(clock, sink, None)
    turn = session.begin_turn()
    with caplog.at_level(logging.ERROR, "vrt.agents"):
        assert turn.end()
    assert "recording a response's measurements failed" in caplog.text


def test_text_tokens_are_what_is_not_audio() -> None:
    usage = TokenUsage(input_tokens=10, input_audio_tokens=4, output_tokens=3)
    assert (usage.input_text_tokens, usage.output_text_tokens) == (6, 3)
    odd = TokenUsage(input_tokens=1, input_audio_tokens=5)  # a provider's inconsistency
    assert odd.input_text_tokens == 0
    later = usage.copy()
    later.add(TokenUsage(responses=1, input_tokens=5))
    assert later.since(usage) == TokenUsage(responses=1, input_tokens=5)
    assert usage.since(later) == TokenUsage()
