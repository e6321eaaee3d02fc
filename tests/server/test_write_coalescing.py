"""When what an agent sends is written (``vrt.server.coalescing``): the first reply to
an event at once, the rest of the delivery in one write; outside a delivery, the first
flush of a loop step at once and the rest of the step in one write."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import cast

import pytest

from support import OpenSession, RunningServer, is_idle
from vrt.agents.base import AgentSession
from vrt.protocol.codec import encode
from vrt.protocol.messages import PCM16_24K, Hello, UserText
from vrt.protocol.outputs import Output, SendText
from vrt.protocol.server import AgentInput, ServerConfig, ServerConnection, ServerSession
from vrt.server.coalescing import WriteCoalescer
from vrt.server.hosted import HostedSession
from vrt.server.websocket import ServerWebSocket


class _Connection:
    """Stands in for the session's connection: counts its writes."""

    def __init__(self) -> None:
        self.writes = 0

    def write_outbox(self) -> None:
        self.writes += 1


def _hosted() -> tuple[HostedSession, ServerConnection, _Connection]:
    config = ServerConfig()
    core = ServerConnection(config, now=0.0)
    core.receive_text(encode(Hello(), 0), 0.0)
    (event,) = core.take_events()
    session = ServerSession(
        event.hello, config, input_formats=(PCM16_24K,), output_formats=(PCM16_24K,)
    )
    core.open(session, 0.0)
    hosted = HostedSession(session, None)
    connection = _Connection()
    hosted.connection = cast(ServerWebSocket, connection)
    return hosted, core, connection


async def test_outside_a_delivery_the_first_flush_of_a_step_is_written_at_once() -> None:
    hosted, _, _ = _hosted()
    written: list[HostedSession] = []
    writes = WriteCoalescer(written.append, None)
    writes.flush(hosted)
    assert written == [hosted]  # at once: no added latency
    writes.replied(hosted)
    writes.flush(hosted)
    assert written == [hosted]  # the rest of the step waits for its end
    await asyncio.sleep(0)
    assert written == [hosted, hosted]  # ... and leaves in one write
    writes.flush(hosted)
    assert len(written) == 3  # a new step: at once again


async def test_during_a_delivery_only_the_agents_first_reply_is_written_at_once() -> None:
    hosted, core, connection = _hosted()
    written: list[HostedSession] = []
    writes = WriteCoalescer(written.append, None)
    agent_session = AgentSession(
        hosted.session,
        lambda: writes.flush(hosted),
        asyncio.get_running_loop().time,
        replied=lambda: writes.replied(hosted),
    )
    hosted.agent_session = agent_session
    at_each_step: list[int] = []

    def handle(event: AgentInput) -> None:
        turn = agent_session.begin_turn()
        at_each_step.append(connection.writes)  # a flush that is not a reply: held
        turn.text("one")
        at_each_step.append(connection.writes)  # the first reply: written at once
        turn.text(" two")
        turn.transcript("one two")
        turn.end()
        at_each_step.append(connection.writes)  # the rest: held for the delivery's write

    listening = asyncio.create_task(agent_session.listen(handle))
    await asyncio.sleep(0)
    try:
        for seq, text in enumerate(["first", "second"], start=1):
            core.receive_text(encode(UserText(text=text), seq), 0.0)
            at_each_step.clear()
            before = connection.writes
            writes.deliver(hosted)
            assert [n - before for n in at_each_step] == [0, 1, 1], text
            assert written == []  # no write of the step: the caller writes after delivering
    finally:
        listening.cancel()
        with pytest.raises(asyncio.CancelledError):
            await listening


@pytest.fixture
def written_texts() -> Iterator[list[list[str]]]:
    """What each write of the server's connections held: the text chunks, in order."""
    writes: list[list[str]] = []
    original = ServerWebSocket.write_items

    def write_items(connection: ServerWebSocket, outbox: list[Output]) -> None:
        chunks = []
        for item in outbox:
            if type(item) is SendText:
                message = json.loads(item.data)
                if message["type"] == "text":
                    chunks.append(message["text"])
        writes.append(chunks)
        original(connection, outbox)

    setattr(ServerWebSocket, "write_items", write_items)  # noqa: B010 - the probe
    try:
        yield writes
    finally:
        setattr(ServerWebSocket, "write_items", original)  # noqa: B010


async def test_a_reply_made_whole_leaves_in_two_writes_its_first_chunk_at_once(
    server: RunningServer, open_session: OpenSession, written_texts: list[list[str]]
) -> None:
    """``echo`` is answered while the server delivers the text (the scripted agent
    listens): its first chunk is written at once, the rest together after."""
    client, _ = await open_session(server.url)
    written_texts.clear()
    await client.text("echo one two three")
    await client.until(is_idle)
    with_text = [chunks for chunks in written_texts if chunks]
    assert with_text == [["one"], [" two", " three"]]
