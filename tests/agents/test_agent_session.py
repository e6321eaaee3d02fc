"""The agent seam's two ways of taking events: ``next_event``/``events`` (a task woken
per batch) and ``listen`` (a synchronous call per event), the bound on input audio
an agent leaves unread, and what it tells the driver after each action (``flush``, or
``replied`` when the action sent a reply)."""

from __future__ import annotations

import asyncio

import pytest

from vrt.agents.base import MAX_QUEUED_AUDIO, AgentSession
from vrt.protocol.codec import encode
from vrt.protocol.messages import PCM16_24K, Hello, Tool
from vrt.protocol.server import (
    AgentInput,
    AudioReceived,
    ContextChanged,
    ServerConfig,
    ServerConnection,
    ServerSession,
    UserTextReceived,
)


def open_session(hello: Hello | None = None) -> ServerSession:
    config = ServerConfig()
    connection = ServerConnection(config, now=0.0)
    connection.receive_text(encode(hello or Hello(), 0), 0.0)
    (event,) = connection.take_events()
    core = ServerSession(
        event.hello, config, input_formats=(PCM16_24K,), output_formats=(PCM16_24K,)
    )
    connection.open(core, 0.0)
    return core


def seam(failures: list[Exception] | None = None) -> AgentSession:
    loop = asyncio.get_running_loop()
    on_failure = failures.append if failures is not None else None
    return AgentSession(open_session(), lambda: None, loop.time, on_failure)


async def settle() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


async def test_listen_hands_over_what_was_queued_first_then_each_event_as_it_comes() -> None:
    session = seam()
    session.deliver([UserTextReceived(text="before"), ContextChanged(context=1)])
    seen: list[AgentInput] = []
    task = asyncio.create_task(session.listen(seen.append))
    await settle()
    assert seen == [UserTextReceived(text="before"), ContextChanged(context=1)]
    session.deliver([UserTextReceived(text="after")])
    assert seen[-1] == UserTextReceived(text="after")  # during deliver, no wake-up needed
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_listen_is_never_reentered() -> None:
    """What a handler's own action causes is handled after the handler returns."""
    session = seam()
    order: list[str] = []

    def handler(event: AgentInput) -> None:
        assert isinstance(event, UserTextReceived)
        order.append(f"begin {event.text}")
        if event.text == "first":
            session.deliver([UserTextReceived(text="caused")])
        order.append(f"end {event.text}")

    task = asyncio.create_task(session.listen(handler))
    await settle()
    session.deliver([UserTextReceived(text="first"), UserTextReceived(text="second")])
    assert order == [
        "begin first",
        "end first",
        "begin second",
        "end second",
        "begin caused",
        "end caused",
    ]
    task.cancel()


async def test_a_listener_that_raises_fails_the_session_through_on_failure() -> None:
    failures: list[Exception] = []
    session = seam(failures)

    def handler(event: AgentInput) -> None:
        raise ValueError("broken agent")

    task = asyncio.create_task(session.listen(handler))
    await settle()
    session.deliver([UserTextReceived(text="a"), UserTextReceived(text="b")])
    assert [str(e) for e in failures] == ["broken agent"]  # once: the rest is dropped
    task.cancel()


async def test_one_listener_per_session() -> None:
    session = seam()
    task = asyncio.create_task(session.listen(lambda event: None))
    await settle()
    with pytest.raises(RuntimeError, match="already has a listener"):
        await session.listen(lambda event: None)
    task.cancel()


async def test_unread_audio_is_bounded_and_control_events_are_not() -> None:
    session = seam()
    audio = [AudioReceived(payload=b"\x00\x00", seq=n) for n in range(MAX_QUEUED_AUDIO + 3)]
    texts = [UserTextReceived(text=str(n)) for n in range(2 * MAX_QUEUED_AUDIO)]
    session.deliver([*audio, *texts])
    assert session.dropped_audio == 3
    got = [await session.next_event() for _ in range(MAX_QUEUED_AUDIO + len(texts))]
    assert got == [*audio[:MAX_QUEUED_AUDIO], *texts]
    session.deliver([audio[0]])  # read: there is room again
    assert await session.next_event() == audio[0]
    assert session.dropped_audio == 3


async def test_the_driver_is_told_which_actions_sent_a_reply() -> None:
    """A text chunk, an agent transcript, an output audio frame and a client tool call
    are replies (the driver writes the first one to an event at once); every other
    action, and one that sent nothing, is a plain flush."""
    told: list[str] = []
    session = AgentSession(
        open_session(Hello(tools=(Tool(name="lookup"),))),
        lambda: told.append("flush"),
        asyncio.get_running_loop().time,
        replied=lambda: told.append("replied"),
    )

    def after(action: object) -> str:
        del action
        return told.pop()

    turn = session.begin_turn()
    assert told == ["flush"]
    told.clear()
    assert after(turn.state("speaking")) == "flush"
    session.user_transcript("hi")
    assert told.pop() == "flush"
    assert after(turn.text("one")) == "replied"
    assert after(turn.transcript("one")) == "replied"
    item = turn.audio()
    assert item is not None
    assert told.pop() == "flush"
    assert after(item.write(bytes(960))) == "replied"
    server_call = turn.tool_call("search", server_side=True)
    assert server_call is not None
    assert told.pop() == "flush"
    assert after(server_call.issue({})) == "flush"  # a server tool: nothing to the client
    client_call = turn.tool_call("lookup")
    assert client_call is not None
    assert told.pop() == "flush"
    assert after(client_call.issue({})) == "replied"
    assert after(turn.end()) == "flush"
    assert after(turn.text("late")) == "flush"  # the turn is over: nothing sent
    assert after(item.write(bytes(960))) == "flush"
    assert told == []


async def test_without_replied_every_action_is_a_flush_and_an_inner_view_tells_the_same() -> None:
    flushes: list[str] = []
    outer = AgentSession(
        open_session(), lambda: flushes.append("flush"), asyncio.get_running_loop().time
    )
    outer.begin_turn().text("one")
    assert flushes == ["flush", "flush"]
    replies: list[str] = []
    told = AgentSession(
        open_session(),
        lambda: None,
        asyncio.get_running_loop().time,
        replied=lambda: replies.append("replied"),
    )
    inner = AgentSession.inside(told)
    inner.begin_turn().text("one")
    assert replies == ["replied"]
