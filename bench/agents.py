"""The bench-only agent of the vrt bench server (``--agent``-less: chosen by the context).

A session whose ``hello.context`` is ``{"bench": "audio"}`` gets :class:`BenchAudioAgent`;
every other session gets the stock scripted agent (``vrt.agents.scripted``).

BenchAudioAgent (input and output pcm16 at 24 kHz), by user text:

``flood N``
    One turn, ``speaking``; one audio item of N frames of 960 zero bytes (20 ms), written
    as fast as the connection takes them: it yields to the loop every 64 frames and
    waits while the connection's write buffer is above its high-water mark (the server
    drops output audio then, §5.4 "late is worse than lost"); ``idle``.
``count?``
    One turn with one text chunk ``count K``: K the input frames received so far; ``idle``.
``passthrough``
    One ``speaking`` turn with one audio item; from then on every input frame is written
    back as an output frame unchanged (pcm16 passthrough).

Input audio is otherwise only counted (no VAD).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from vrt.agents import AgentInput, AudioReceived, ResponseInterrupted, UserTextReceived
from vrt.agents.base import Agent, AgentSession, AudioItem, SessionInfo, Turn
from vrt.agents.scripted import ScriptedAgent
from vrt.protocol.messages import PCM16_24K, Format

__all__ = ["BenchAudioAgent", "WaitWritable", "bench_agent_factory"]

FRAME = bytes(960)  # 20 ms of pcm16 at 24 kHz; 965 bytes on the wire with the header
YIELD_EVERY = 64
MAX_FLOOD = 10_000_000

#: Given a session id, an awaitable to wait on while its connection cannot take more
#: output, or None when it can.
WaitWritable = Callable[[str], Awaitable[None] | None]


class BenchAudioAgent:
    input_formats: tuple[Format, ...] = (PCM16_24K,)
    output_formats: tuple[Format, ...] = (PCM16_24K,)

    def __init__(self, wait_writable: WaitWritable | None = None) -> None:
        self.received = 0
        self._wait_writable = wait_writable
        self._echo: AudioItem | None = None
        self._task: asyncio.Task[None] | None = None

    async def run(self, session: AgentSession) -> None:
        try:
            await session.listen(lambda event: self._handle(session, event))
        finally:
            self._cancel()

    def _handle(self, session: AgentSession, event: AgentInput) -> None:
        if isinstance(event, AudioReceived):
            self.received += 1
            echo = self._echo
            if echo is not None and not echo.write(event.payload):
                self._echo = None
        elif isinstance(event, UserTextReceived):
            self._on_text(session, event.text)
        elif isinstance(event, ResponseInterrupted):
            self._cancel()

    def _cancel(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
        self._task = None

    def _on_text(self, session: AgentSession, text: str) -> None:
        self._cancel()
        self._echo = None
        words = text.split()
        command = words[0] if words else ""
        turn = session.begin_turn("thinking")
        if command == "flood" and len(words) == 2 and words[1].isdigit():
            count = min(int(words[1]), MAX_FLOOD)
            self._task = asyncio.create_task(self._flood(session, turn, count))
        elif command == "passthrough":
            if turn.state("speaking"):
                self._echo = turn.audio()
        elif turn.text(f"count {self.received}"):
            turn.end()

    async def _flood(self, session: AgentSession, turn: Turn, count: int) -> None:
        if not turn.state("speaking"):
            return
        item = turn.audio()
        if item is None:
            return
        write, wait, sid = item.write, self._wait_writable, session.session_id
        for k in range(1, count + 1):
            if not write(FRAME):
                return
            if k % YIELD_EVERY == 0:
                await asyncio.sleep(0)
            if wait is not None:
                blocked = wait(sid)
                while blocked is not None:
                    await blocked
                    blocked = wait(sid)
        turn.end()


def bench_agent_factory(
    wait_writable: WaitWritable | None = None,
) -> Callable[[SessionInfo], Agent]:
    """The bench server's agent factory: BenchAudioAgent for ``{"bench": "audio"}``,
    the scripted agent otherwise."""

    def factory(info: SessionInfo) -> Agent:
        context: Any = info.context
        if isinstance(context, dict) and context.get("bench") == "audio":
            return BenchAudioAgent(wait_writable)
        return ScriptedAgent()

    return factory
