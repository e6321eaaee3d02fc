"""Audio for clients: what a real-time player has played (§8.4), and thin
microphone and speaker wrappers over ``sounddevice``.

:class:`PlaybackClock` is pure bookkeeping, usable with any player. :class:`Speaker`
and :class:`Microphone` need the optional ``sounddevice`` package
(``pip install 'vrealtime[audio]'``); it is imported only when one of them is created. They
handle ``pcm16`` (at any sample rate) and ``pcmu`` (converted to and from pcm16 at
8000 Hz with :mod:`vrt.audio`); ``opus`` needs a codec and is refused.
"""

from __future__ import annotations

import asyncio
import importlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from ..audio import duration_ms, frame_bytes, pcm16_to_pcmu, pcmu_to_pcm16
from ..protocol.messages import Format

__all__ = ["Microphone", "PlaybackClock", "Speaker"]

#: Input frames are 20 ms long (the frame size the scripted agent and most models use).
FRAME_MS = 20


@dataclass(slots=True)
class _Played:
    received_ms: float = 0.0
    started_at: float | None = None


class PlaybackClock:
    """Tracks output audio items for a player that plays in real time.

    Times are in seconds on any monotonic clock (the event loop's, for example);
    durations are in milliseconds. An item plays from the moment it :meth:`started`
    at real-time speed, but never beyond the audio received for it, so what it has
    played is ``min(received, elapsed since start)``.
    """

    def __init__(self) -> None:
        self._items: dict[str, _Played] = {}

    def received(self, item_id: str, payload_ms: float) -> None:
        """``payload_ms`` more milliseconds of ``item_id`` arrived for playback."""
        self._items.setdefault(item_id, _Played()).received_ms += payload_ms

    def started(self, item_id: str, now: float) -> None:
        """``item_id`` started playing at ``now`` (later calls change nothing)."""
        item = self._items.setdefault(item_id, _Played())
        if item.started_at is None:
            item.started_at = now

    def played_ms(self, item_id: str, now: float) -> int:
        """Milliseconds of ``item_id`` played by ``now``: 0 when unknown or not started."""
        item = self._items.get(item_id)
        if item is None or item.started_at is None:
            return 0
        elapsed = max(0.0, (now - item.started_at) * 1000.0)
        return int(min(item.received_ms, elapsed))

    def stop(self, now: float) -> list[tuple[str, int]]:
        """Playback stops at ``now`` (interruption, §8.4): returns ``(item_id,
        played_ms)`` for every item that started but did not play to its end, which is
        what to send as ``playback`` reports; then forgets every item."""
        cut = [
            (item_id, self.played_ms(item_id, now))
            for item_id, item in self._items.items()
            if item.started_at is not None and self.played_ms(item_id, now) < item.received_ms
        ]
        self._items.clear()
        return cut


def _sounddevice() -> ModuleType:
    try:
        return importlib.import_module("sounddevice")
    except ImportError as exc:
        raise RuntimeError(
            "audio needs the sounddevice package: pip install 'vrealtime[audio]'"
        ) from exc
    except OSError as exc:  # sounddevice is there, the PortAudio library is not
        raise RuntimeError(f"sounddevice cannot load PortAudio: {exc}") from exc


def _pcm16_rate(fmt: Format) -> int:
    if fmt.encoding not in ("pcm16", "pcmu"):
        raise ValueError(f"{fmt.encoding} audio is not supported: use pcm16 or pcmu")
    return fmt.rate


class Speaker:
    """Plays output audio in the session's output format (pcm16, or pcmu converted).

    :meth:`play` queues a chunk and returns at once; the sound card pulls from the
    queue in its own thread. With a :class:`PlaybackClock`, each item is marked as
    started when it is queued behind what is already buffered, so
    ``clock.played_ms`` follows what was heard.
    """

    def __init__(self, fmt: Format, clock: PlaybackClock | None = None) -> None:
        self.format = fmt
        self.clock = clock
        self._rate = _pcm16_rate(fmt)
        self._buffer = bytearray()
        self._lock = threading.Lock()
        sd = _sounddevice()
        self._stream: Any = sd.RawOutputStream(
            samplerate=self._rate, channels=1, dtype="int16", callback=self._callback
        )
        self._stream.start()

    def _callback(self, out: Any, frames: int, time: Any, status: Any) -> None:
        del time, status
        wanted = frames * 2
        with self._lock:
            chunk = bytes(self._buffer[:wanted])
            del self._buffer[:wanted]
        out[: len(chunk)] = chunk
        out[len(chunk) :] = bytes(wanted - len(chunk))

    def buffered_ms(self) -> float:
        with self._lock:
            return len(self._buffer) * 500.0 / self._rate

    def play(self, item_id: str, payload: bytes, now: float) -> None:
        """Queue ``payload`` of ``item_id`` (``now``: the clock's current time)."""
        pcm = pcmu_to_pcm16(payload) if self.format.encoding == "pcmu" else payload
        if self.clock is not None:
            self.clock.started(item_id, now + self.buffered_ms() / 1000.0)
            self.clock.received(item_id, duration_ms(payload, self.format))
        with self._lock:
            self._buffer += pcm

    def stop(self) -> None:
        """Discard everything buffered (§8.4: stop playback at once)."""
        with self._lock:
            self._buffer.clear()

    def close(self) -> None:
        self.stop()
        self._stream.stop()
        self._stream.close()


class Microphone:
    """Captures 20 ms input frames in the session's input format and hands each to
    ``on_frame`` on the event loop's thread (pcm16, or pcm16 at 8000 Hz encoded to
    pcmu)."""

    def __init__(
        self,
        fmt: Format,
        on_frame: Callable[[bytes], object],
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self.format = fmt
        self._on_frame = on_frame
        self._loop = loop or asyncio.get_running_loop()
        rate = _pcm16_rate(fmt)
        pcm16 = Format(encoding="pcm16", sample_rate=rate)
        sd = _sounddevice()
        self._stream: Any = sd.RawInputStream(
            samplerate=rate,
            channels=1,
            dtype="int16",
            blocksize=frame_bytes(pcm16, FRAME_MS) // 2,
            callback=self._callback,
        )
        self._stream.start()

    def _callback(self, data: Any, frames: int, time: Any, status: Any) -> None:
        del frames, time, status
        payload = bytes(data)
        if self.format.encoding == "pcmu":
            payload = pcm16_to_pcmu(payload)
        self._loop.call_soon_threadsafe(self._on_frame, payload)

    def close(self) -> None:
        self._stream.stop()
        self._stream.close()
