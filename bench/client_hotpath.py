"""The client SDK's per-message work without sockets, for instruction counts.

Drives :class:`vrt.client.VrtClient` over a stand-in WebSocket (no system call, no
framing, no server): the stand-in answers ``hello`` with ``ready`` and plays a server
from the client's writes, so what is left is the work the SDK adds above a bare
``websockets`` client for each message. Run it under callgrind with two sizes and take
the difference over the difference in messages, as for ``bench/hotpath.py``::

    valgrind --tool=callgrind --callgrind-out-file=/dev/null \
        python -m bench.client_hotpath message 2000   # and 4000

Scenarios, each as ``bench/client_sdk.py`` drives the real client:

* ``message N``: N sequenced agent ``text`` chunks, each fed as the application waits
  for its event (one loop step each, as at real-time rates); acks every 32.
* ``frame N``: N input audio frames sent in groups of 50, each echoed as an output
  frame, the application waiting for the 50 ``AudioChunk`` events of a group.
* ``echo N``: N ``echo hi`` turns: the text sent, then ``thinking``, a ``text`` chunk
  and ``idle`` fed back; the application waits for the chunk, then for ``idle``.
* ``none N``: N bare loop steps of the application, to subtract.

Prints the writes the client made and the events it delivered.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections import deque
from typing import Any

from websockets.exceptions import ConnectionClosed
from websockets.protocol import State

import vrt.client.client as client_module
from vrt.client import VrtClient
from vrt.protocol.client.events import AudioStarted, TextReceived, TurnChanged
from vrt.protocol.codec import encode
from vrt.protocol.frames import FrameKind, build_frame
from vrt.protocol.messages import AgentText, AudioStart, Format, Ready, TurnState

from .client_sdk import GROUP, PAYLOAD, audio_group

__all__ = ["main"]

_PCM = Format(encoding="pcm16", sample_rate=24000)


class _Transport:
    def abort(self) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return 0


class FakeWs:
    """The part of ``websockets``' ClientConnection the client uses. ``recv`` returns
    at once while something is buffered (as websockets does) and waits otherwise."""

    def __init__(self) -> None:
        self.transport = _Transport()
        self.inbox: deque[str | bytes] = deque()
        self.waiter: asyncio.Future[None] | None = None
        self.closed = False
        self.seq = 0
        self.out_seq = 0
        self.writes = 0

    def feed(self, data: str | bytes) -> None:
        self.inbox.append(data)
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    def feed_message(self, message: Any) -> None:
        self.seq += 1
        self.feed(encode(message, self.seq).decode())

    async def recv(self) -> str | bytes:
        while not self.inbox:
            if self.closed:
                raise ConnectionClosed(None, None)
            self.waiter = asyncio.get_running_loop().create_future()
            await self.waiter
        return self.inbox.popleft()

    async def send(self, data: str | bytes, text: bool | None = None) -> None:
        self.writes += 1
        if text:
            raw = data.encode() if isinstance(data, str) else data
            if b'"type":"hello"' in raw:
                self.feed(encode(Ready(session_id="s1", input=_PCM, output=_PCM), 0).decode())
            elif b'"echo hi"' in raw:
                self.feed_message(TurnState(turn_id="t", epoch=0, state="thinking"))
                self.feed_message(AgentText(text="hi", turn_id="t"))
                self.feed_message(TurnState(turn_id="t", epoch=0, state="idle"))
        else:
            assert isinstance(data, bytes)
            self.feed(build_frame(FrameKind.OUTPUT, self.out_seq, PAYLOAD))
            self.out_seq += 1

    @property
    def state(self) -> State:
        return State.CLOSED if self.closed else State.OPEN

    async def close(self, code: int = 1000, reason: str = "") -> None:
        self.closed = True
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)


async def run(scenario: str, count: int) -> tuple[int, int]:
    ws = FakeWs()

    async def connect(*args: Any, **kwargs: Any) -> FakeWs:
        return ws

    client_module.connect = connect  # type: ignore[assignment,misc]
    client = VrtClient("ws://bench.invalid")
    await client.connect()
    events = 0
    if scenario == "message":
        for _ in range(count):
            # The canonical encoding, formatted: encode() here would be counted too.
            ws.seq += 1
            ws.feed(f'{{"v":1,"seq":{ws.seq},"type":"text","text":"chunk","turnId":"t"}}')
            await client.next_event()
            events += 1
    elif scenario == "frame":
        ws.feed(encode(AudioStart(item_id="i", turn_id="t", epoch=0), 0).decode())
        while not isinstance(await client.next_event(), AudioStarted):
            pass
        for _ in range(count // GROUP):
            events += await audio_group(client)
    elif scenario == "echo":
        for _ in range(count):
            await client.send_text("echo hi")
            while not isinstance(await client.next_event(), TextReceived):
                pass
            while True:
                event = await client.next_event()
                if isinstance(event, TurnChanged) and event.state == "idle":
                    break
            events += 1
    elif scenario == "none":
        for _ in range(count):
            await asyncio.sleep(0)
    else:
        raise SystemExit(f"unknown scenario {scenario!r}")
    await client.close()
    return ws.writes, events


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.client_hotpath")
    parser.add_argument("scenario", choices=["message", "frame", "echo", "none"])
    parser.add_argument("count", type=int)
    args = parser.parse_args(argv)
    import uvloop

    writes, events = uvloop.run(run(args.scenario, args.count))
    print(f"{args.scenario} {args.count}: {writes} writes, {events} awaited events")
    return 0


if __name__ == "__main__":
    sys.exit(main())
