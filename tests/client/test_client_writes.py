"""How :class:`VrtClient` writes and hands out events, over a stand-in WebSocket.

The actions write directly when the writer task is idle; these check that the frames
still leave in the core's order whoever writes them, that a connection closing under a
write is as quiet as before (the message kept by the core for resume), and that the
event queue loses nothing to a consumer that gives up waiting.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.protocol import State

import vrt.client.client as client_module
from vrt.client import VrtClient
from vrt.protocol.client.events import Connected, TextReceived
from vrt.protocol.codec import Invalid, encode
from vrt.protocol.frames import parse_frame
from vrt.protocol.messages import AgentText, Format, Ready

_PCM = Format(encoding="pcm16", sample_rate=24000)


class _Transport:
    def __init__(self) -> None:
        self.buffered = 0

    def abort(self) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return self.buffered


class FakeWs:
    """The part of websockets' ClientConnection the client uses. ``send`` writes at
    once, then waits for the drain while ``drained`` is clear, as websockets does."""

    def __init__(self) -> None:
        self.transport = _Transport()
        self.inbox: asyncio.Queue[str | bytes | None] = asyncio.Queue()
        self.written: list[str | bytes] = []
        self.drained = asyncio.Event()
        self.drained.set()
        self.state = State.OPEN
        self.lost_on_send = False

    async def recv(self) -> str | bytes:
        data = await self.inbox.get()
        if data is None:
            raise ConnectionClosed(None, None)
        return data

    async def send(self, data: str | bytes, text: bool | None = None) -> None:
        if self.state is not State.OPEN:
            raise ConnectionClosed(None, None)
        if self.lost_on_send:
            self.state = State.CLOSED
            self.inbox.put_nowait(None)
            raise ConnectionClosed(None, None)
        self.written.append(data)
        if text and b'"type":"hello"' in (data if isinstance(data, bytes) else data.encode()):
            ready = Ready(session_id="s1", input=_PCM, output=_PCM)
            self.inbox.put_nowait(encode(ready, 0).decode())
        await self.drained.wait()

    async def close(self, code: int = 1000, reason: str = "") -> None:
        self.state = State.CLOSED
        self.inbox.put_nowait(None)


@pytest.fixture
async def opened(monkeypatch: pytest.MonkeyPatch) -> Any:
    ws = FakeWs()

    async def connect(*args: Any, **kwargs: Any) -> FakeWs:
        return ws

    monkeypatch.setattr(client_module, "connect", connect)
    client = VrtClient("ws://test.invalid", reconnect=False)
    await client.connect()
    yield client, ws
    await client.close()


def _written(ws: FakeWs) -> list[str]:
    """Each frame after hello: the user text, or ``audio N`` for input frame N."""
    out = []
    for data in ws.written[1:]:
        if isinstance(data, bytes) and data[:1] != b"{":
            frame = parse_frame(data, "server")
            assert not isinstance(frame, Invalid)
            out.append(f"audio {frame.seq}")
        else:
            raw = data if isinstance(data, str) else data.decode()
            out.append(raw.split('"text":"')[1].split('"')[0])
    return out


async def test_an_action_writes_at_once_when_the_writer_is_idle(
    opened: tuple[VrtClient, FakeWs],
) -> None:
    client, ws = opened
    await client.send_text("one")
    assert _written(ws) == ["one"]  # no loop step in between


async def test_under_backpressure_actions_return_at_once_and_frames_keep_their_order(
    opened: tuple[VrtClient, FakeWs],
) -> None:
    client, ws = opened
    ws.transport.buffered = 1 << 20  # above the high-water mark: sends wait for the drain
    ws.drained.clear()
    await client.send_text("one")  # returns at once: the writer task waits, as before
    assert _written(ws) == []
    await asyncio.sleep(0)
    assert _written(ws) == ["one"]
    client.send_audio(bytes(960))
    await client.send_text("two")
    ws.transport.buffered = 0  # the writer still holds frames: they go first
    client.send_audio(bytes(960))
    await client.send_text("three")
    for _ in range(3):
        await asyncio.sleep(0)
    ws.drained.set()
    for _ in range(5):
        await asyncio.sleep(0)
    assert _written(ws) == ["one", "audio 0", "two", "audio 1", "three"]
    await client.send_text("four")
    assert _written(ws)[-1] == "four"  # idle again: written by the action itself


async def test_a_connection_lost_under_a_write_keeps_the_message_quietly(
    opened: tuple[VrtClient, FakeWs],
) -> None:
    client, ws = opened
    ws.lost_on_send = True
    await client.send_text("kept")  # no exception, as before
    assert [seq for seq, _ in client.core.outgoing.kept()] == [1]


async def test_a_consumer_that_stops_waiting_loses_no_event(
    opened: tuple[VrtClient, FakeWs],
) -> None:
    client, ws = opened
    assert isinstance(await client.next_event(), Connected)
    with pytest.raises(TimeoutError):
        await client.next_event(timeout=0.01)
    waiting = [asyncio.create_task(client.next_event()) for _ in range(2)]
    await asyncio.sleep(0)
    for k in (1, 2):
        ws.inbox.put_nowait(encode(AgentText(text=f"t{k}", turn_id="t"), k).decode())
    got = await asyncio.gather(*waiting)
    assert [e.text for e in got if isinstance(e, TextReceived)] == ["t1", "t2"]
