"""VrtClient against a hostile server (docs/client.md, "Bounds"): a ``ready`` that never
comes, a flood of tool calls, and events sent faster than the application reads them.
Each server here is a bare WebSocket server that says what a test needs, valid or not.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from types import FrameType
from typing import Any

import pytest
from websockets.asyncio.server import ServerConnection, serve

from vrt.client import (
    AudioChunk,
    SessionClosed,
    SessionFailed,
    TextReceived,
    VrtClient,
    VrtError,
)
from vrt.protocol.client import ClientSession
from vrt.protocol.frames import FrameKind, build_frame

READY = {
    "v": 1,
    "seq": 0,
    "type": "ready",
    "sessionId": "s_" + "a" * 22,
    "input": {"encoding": "pcm16", "sampleRate": 24000},
    "output": {"encoding": "pcm16", "sampleRate": 24000},
    "capabilities": [],
}

Handler = Callable[[ServerConnection], Awaitable[None]]


@asynccontextmanager
async def hostile(handler: Handler) -> AsyncIterator[str]:
    async def run(ws: ServerConnection) -> None:
        await ws.recv()  # the hello
        await handler(ws)
        await ws.wait_closed()

    async with serve(run, "127.0.0.1", 0, max_size=None) as server:
        port = server.sockets[0].getsockname()[1]
        yield f"ws://127.0.0.1:{port}"


def _message(seq: int, type_: str, **members: Any) -> str:
    return json.dumps({"v": 1, "seq": seq, "type": type_, **members})


async def test_connect_fails_when_ready_never_comes() -> None:
    """A server that accepts the WebSocket and never answers the hello: connect()
    raises CONNECT_FAILED after open_timeout rather than wait for ever."""

    async def silent(ws: ServerConnection) -> None:
        await ws.wait_closed()  # never a ready

    async with hostile(silent) as url:
        client = VrtClient(url, open_timeout=0.3)
        with pytest.raises(VrtError) as raised:
            await asyncio.wait_for(client.connect(), 10.0)
        assert raised.value.code == "CONNECT_FAILED"
        assert "no ready" in raised.value.message
        await client.close()


def _profiled_calls(run: Callable[[], None]) -> int:
    """Python function calls (generator resumptions included) made by ``run``."""
    calls = 0

    def profile(frame: FrameType, event: str, arg: object) -> None:
        nonlocal calls
        if event == "call":
            calls += 1

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return calls


def _flood_of_calls(count: int) -> Callable[[], None]:
    """The client core given ``count`` tool calls at once, then answering each."""
    from vrt.protocol.messages import Tool

    core = ClientSession(tools=(Tool(name="add"),))
    core.connection_made(0.0)
    core.receive_text(json.dumps(READY), 0.0)
    frames = [
        _message(1, "turn.state", turnId="t_1", epoch=1, state="acting"),
        *(
            _message(
                n + 2, "tool.call", callId=f"c_{n}", name="add", arguments={}, turnId="t_1", epoch=1
            )
            for n in range(count)
        ),
    ]

    def run() -> None:
        for frame in frames:
            core.receive_text(frame, 0.0)
        for n in range(count):
            core.tool_finished(f"c_{n}", True, 0.0, output=n)
            core.take_outbox()
            core.take_events()

    return run


def test_a_flood_of_tool_calls_costs_linear_work() -> None:
    """4 times the calls cost about 4 times the work (counted, not timed): a queue
    whose every call scans the calls waiting costs 16 times (40,000 calls took 23 s
    of CPU with the event loop frozen)."""
    small = _profiled_calls(_flood_of_calls(1000))
    large = _profiled_calls(_flood_of_calls(4000))
    assert large / small < 6, (small, large)


async def test_unread_audio_is_dropped_oldest_first_and_counted() -> None:
    """Audio is lossy (§5.4): past the bound the oldest unread chunks go, counted;
    the sequenced events stay, and the session goes on."""

    async def audio_flood(ws: ServerConnection) -> None:
        await ws.send(json.dumps(READY))
        await ws.send(_message(1, "turn.state", turnId="t_1", epoch=1, state="speaking"))
        await ws.send(_message(0, "audio.start", itemId="i_1", turnId="t_1", epoch=1))
        for n in range(200):
            await ws.send(build_frame(FrameKind.OUTPUT, n, b"\0" * 480))
        await ws.send(_message(2, "text", text="after the audio", turnId="t_1"))

    async with hostile(audio_flood) as url:
        client = VrtClient(url, max_unread_events=50, reconnect=False)
        await client.connect()
        try:
            for _ in range(200):
                if client.dropped_events >= 150 and client._events.unread:
                    break
                await asyncio.sleep(0.01)
            assert client._events.unread <= 50
            assert client.dropped_events >= 150
            seen = []
            while True:
                event = await client.next_event(5.0)
                seen.append(event)
                if isinstance(event, TextReceived):
                    break
            assert any(type(e).__name__ == "TurnChanged" for e in seen)
            chunks = [e for e in seen if isinstance(e, AudioChunk)]
            assert chunks
            assert len(chunks) + client.dropped_events == 200
            assert client.connected
        finally:
            await client.close()


async def test_unread_sequenced_events_end_the_session_with_a_clear_error() -> None:
    """With nothing droppable, the bound ends the session: LIMIT_EXCEEDED, then
    SessionClosed, every event queued before them still readable in order, and the
    client closes the connection; nothing more is queued."""
    sent = 500

    async def text_flood(ws: ServerConnection) -> None:
        await ws.send(json.dumps(READY))
        for n in range(sent):
            await ws.send(_message(n + 1, "text", text=f"chunk {n}", turnId="t_1"))

    async with hostile(text_flood) as url:
        client = VrtClient(url, max_unread_events=40, reconnect=False)
        await client.connect()
        try:
            texts = []
            while True:
                event = await client.next_event(5.0)
                if isinstance(event, TextReceived):
                    texts.append(event.text)
                elif isinstance(event, SessionFailed):
                    assert event.code == "LIMIT_EXCEEDED"
                    assert "unread" in event.message
                    break
            assert texts == [f"chunk {n}" for n in range(len(texts))]  # in order, none missing
            assert len(texts) <= 41
            rest = [await client.next_event(5.0)]
            while not isinstance(rest[-1], SessionClosed):
                rest.append(await client.next_event(5.0))
            assert not any(isinstance(e, TextReceived) for e in rest)
            assert client._events.unread == 0
        finally:
            await client.close()
