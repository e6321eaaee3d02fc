"""Acceptance: a raw client holds a whole conversation with the server (§§4-8).

It acknowledges as it goes (§4.2), runs every scripted command, interrupts one reply
(§6.2), loses its connection in the middle of ``burst 50`` and resumes (§5.4), then
checks the two resumable streams end to end: it got every server seq exactly once, in
order, without gaps, and the server handled every client seq exactly once.
"""

from __future__ import annotations

from typing import Any, Final

from support import (
    Item,
    OpenSession,
    RawClient,
    RunningServer,
    audio,
    chunks,
    is_idle,
    matches,
    of_type,
)
from vrt.protocol.codec import Decoded
from vrt.protocol.messages import (
    AudioStart,
    Error,
    Interrupted,
    ToolCall,
    ToolStream,
    TurnState,
)

TOOLS: Final = [{"name": "add", "parameters": {"type": "object"}}]


class Conversation:
    """The client side of one session across connections."""

    def __init__(self, client: RawClient) -> None:
        self.client = client
        self.connections = [client]
        self.commands = 0  # text commands that start a turn

    async def say(self, text: str, *, turn: bool = True) -> list[Item]:
        """User text; everything up to the ``idle`` of its reply."""
        await self.client.text(text)
        self.commands += turn
        return await self.client.until(is_idle)

    async def answer_calls(self, count: int, output: Any) -> list[ToolCall]:
        calls = [await self.client.expect_message(ToolCall) for _ in range(count)]
        for call in calls:
            await self.client.send_sequenced(
                "tool.result", callId=call.call_id, epoch=call.epoch, ok=True, output=output
            )
        return calls

    def all_sequenced(self) -> list[Decoded[Any]]:
        return [d for connection in self.connections for d in connection.sequenced]


async def test_a_raw_client_converses_interrupts_drops_and_resumes(
    server: RunningServer, open_session: OpenSession
) -> None:
    """§5.4: "Duplicates that both sides resend are discarded by §4.3, so each sequenced
    message is handled exactly once"; §4.3: "Senders MUST NOT skip sequence numbers";
    every scripted command along the way behaves as its contract says."""
    client, ready = await open_session(
        server.url, auto_ack=True, tools=TOOLS, capabilities=["tool-stream-v1"]
    )
    talk = Conversation(client)

    # echo: one chunk per word (the space leads the chunk), a transcript, 10 frames of audio
    items = await talk.say("echo hello world")
    assert chunks(items) == ["hello", " world"]
    assert len(audio(items)) == 10

    # call: tool.stream lifecycle, tool.call, the result
    await client.text('call add {"a":1,"b":2}')
    talk.commands += 1
    (call,) = await talk.answer_calls(1, {"sum": 3})
    assert call.arguments == {"a": 1, "b": 2}
    items = await client.until(is_idle)
    assert chunks(items) == ['result ok {"sum":3}']

    # calls 3: three calls, three results in call order
    await client.text('calls 3 add {"n":1}')
    talk.commands += 1
    calls = await talk.answer_calls(3, "done")
    assert len({c.call_id for c in calls}) == 3
    assert "".join(chunks(await client.until(is_idle))) == "\n".join(['result ok "done"'] * 3)

    # speak 200: one audio item of 200 ms (10 frames of 20 ms)
    items = await talk.say("speak 200")
    assert len(of_type(items, AudioStart)) == 1
    assert len(audio(items)) == 10

    # burst 5
    assert chunks(await talk.say("burst 5")) == ["chunk 1", *(f" chunk {k}" for k in range(2, 6))]

    # server-tool 300: start .. progress .. settled, then "server-tool done"
    items = await talk.say("server-tool 300")
    phases = [s.phase for s in of_type(items, ToolStream)]
    assert phases[0] == "start"
    assert phases[-1] == "settled"
    assert phases.count("progress") == 2
    assert chunks(items) == ["server-tool done"]

    # error: AGENT_ERROR, recoverable, sequenced, no turn
    await client.text("error")
    error = await client.expect_message(Error)
    assert (error.code, error.recoverable) == ("AGENT_ERROR", True)

    # context, then context?
    await client.send_sequenced("context", context={"doc": "notes.md", "line": 3})
    assert chunks(await talk.say("context?")) == ['{"doc":"notes.md","line":3}']

    # plain text: echoed word by word
    assert chunks(await talk.say("just some words")) == ["just", " some", " words"]

    # interrupt a reply that is speaking
    await client.text("speak 2000")
    talk.commands += 1
    start = await client.expect_message(AudioStart)
    await client.until(lambda item: not isinstance(item, Decoded))  # audio is flowing
    await client.send_sequenced("interrupt", epoch=start.epoch, reason="user")
    interrupted = await client.expect_message(Interrupted)
    assert interrupted.epoch == start.epoch

    # burst 50, cut after chunk 20, resume from the last seq received
    first_of_burst = client.last_seq + 1  # turn.state thinking
    client.cut_after(first_of_burst + 20)
    await client.text("burst 50")
    talk.commands += 1
    await client.closed()
    assert client.last_seq == first_of_burst + 20
    received = chunks(client.sequenced)
    assert received[-20:] == ["chunk 1", *(f" chunk {k}" for k in range(2, 21))]

    again, resumed = await open_session(
        server.url,
        auto_ack=True,
        sessionId=ready.session_id,
        resumeFrom=client.last_seq,
        capabilities=[],  # ignored on a resume (§3.3)
    )
    assert resumed.resumed_from == client.next_seq - 1
    assert resumed.capabilities == ready.capabilities
    again.next_seq = client.next_seq
    talk.client = again
    talk.connections.append(again)
    items = await again.until(is_idle)
    resent = [item.seq for item in items if isinstance(item, Decoded) and item.seq]
    assert resent == list(range(client.last_seq + 1, client.last_seq + 32))  # 30 chunks, idle
    assert chunks(items) == [f" chunk {k}" for k in range(21, 51)]
    assert chunks(await talk.say("echo still here")) == ["still", " here"]

    # the server stream: every seq once, in order, no gaps, and nothing it did not send
    session = server.session(ready.session_id)
    server_seqs = [d.seq for d in talk.all_sequenced()]
    assert server_seqs == list(range(1, session.outgoing.last_seq + 1)), server_seqs
    # the client stream: every client seq handled once, in order
    assert session.incoming.last_seq == again.next_seq - 1
    assert session.incoming.gaps == 0
    assert server.agents[0].contexts == [{"doc": "notes.md", "line": 3}]
    thinking = [
        d.message
        for d in talk.all_sequenced()
        if isinstance(d.message, TurnState) and d.message.state == "thinking"
    ]
    assert len(thinking) == talk.commands
    assert len({t.turn_id for t in thinking}) == talk.commands
    every_chunk = chunks(talk.all_sequenced())
    for k in range(1, 51):
        chunk = f"chunk {k}" if k == 1 else f" chunk {k}"
        assert every_chunk.count(chunk) == (2 if k <= 5 else 1)
    assert not any(matches(item, "error") for item in items)
