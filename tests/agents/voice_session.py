"""A VrtClient as the speech-to-speech adapter tests use it: every event it produced, in
order, with waits for the next one of a kind; and deterministic audio to feed it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

from vrt.audio import frame_bytes, silence, tone
from vrt.client import AudioChunk, Event, TurnChanged, VrtClient
from vrt.protocol.messages import Format

__all__ = [
    "WAIT",
    "Session",
    "idle",
    "payloads",
    "session",
    "silence_frames",
    "speech_frames",
    "summary",
    "until",
]

WAIT = 5.0

E = TypeVar("E")


async def until(done: Callable[[], bool], what: str) -> None:
    """Until ``done()``, or fail saying ``what`` did not happen within ``WAIT``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT
    while not done():
        if loop.time() > deadline:
            raise AssertionError(f"not within {WAIT:g} s: {what}")
        await asyncio.sleep(0.002)


class Session:
    """A VrtClient and every event it produced, in order."""

    def __init__(self, client: VrtClient) -> None:
        self.client = client
        self.seen: list[Event] = []
        self._cursor = 0

    async def next(self, kind: type[E], where: Callable[[E], bool] | None = None) -> E:
        """The next event of ``kind`` (after the last one returned) matching ``where``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT
        while True:
            while self._cursor < len(self.seen):
                event = self.seen[self._cursor]
                self._cursor += 1
                if isinstance(event, kind) and (where is None or where(event)):
                    return event
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise AssertionError(f"no {kind.__name__}; events: {summary(self.seen[-30:])}")
            with contextlib.suppress(TimeoutError):
                self.seen.append(await self.client.next_event(remaining))

    async def find(self, kind: type[E], where: Callable[[E], bool] | None = None) -> E:
        """The first event of ``kind`` matching ``where`` seen so far or still to come,
        without moving the cursor of :meth:`next` (for events whose order relative to
        the others is not defined, such as a user transcript)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT
        while True:
            for event in self.seen:
                if isinstance(event, kind) and (where is None or where(event)):
                    return event
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise AssertionError(f"no {kind.__name__}; events: {summary(self.seen[-30:])}")
            with contextlib.suppress(TimeoutError):
                self.seen.append(await self.client.next_event(remaining))

    async def drain(self, seconds: float = 0.1) -> None:
        """Collect what arrives within ``seconds``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while (remaining := deadline - loop.time()) > 0:
            with contextlib.suppress(TimeoutError):
                self.seen.append(await self.client.next_event(remaining))

    def all(self, kind: type[E]) -> list[E]:
        return [event for event in self.seen if isinstance(event, kind)]


def summary(events: list[Event]) -> str:
    """Events for a failure message, audio payloads shown by their size."""
    shown = [
        f"AudioChunk({e.item_id}, {len(e.payload)} bytes)" if isinstance(e, AudioChunk) else repr(e)
        for e in events
    ]
    return "\n  ".join(["", *shown])


@contextlib.asynccontextmanager
async def session(url: str, **options: Any) -> AsyncIterator[Session]:
    client = VrtClient(url, backoff_initial=0.01, **options)
    await client.connect()
    try:
        yield Session(client)
    finally:
        await client.close()


def idle(event: TurnChanged) -> bool:
    return event.state == "idle"


def payloads(count: int, size: int, seed: int) -> list[bytes]:
    """Distinct, deterministic audio payloads (whole samples for pcm16)."""
    return [bytes((seed + n * 7 + i * 13) % 256 for i in range(size)) for n in range(count)]


def speech_frames(fmt: Format, loud_ms: int = 300) -> list[bytes]:
    size = frame_bytes(fmt, 20)
    audio = tone(loud_ms, fmt)
    return [audio[i : i + size] for i in range(0, len(audio), size)]


def silence_frames(fmt: Format, ms: int = 300) -> list[bytes]:
    size = frame_bytes(fmt, 20)
    audio = silence(ms, fmt)
    return [audio[i : i + size] for i in range(0, len(audio), size)]
