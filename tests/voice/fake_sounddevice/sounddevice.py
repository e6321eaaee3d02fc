"""A stand-in for the ``sounddevice`` package, for ``vrt chat --voice`` without audio
hardware: the "microphone" plays the WAV named by ``FAKE_MIC`` (at the stream's rate),
then silence; the "speaker" appends what it plays to the file named by
``FAKE_SPEAKER``. Both run in real time on threads of their own, as PortAudio's do."""

from __future__ import annotations

import os
import threading
import time
import wave
from collections.abc import Callable
from typing import Any


class _Stream:
    def __init__(self, samplerate: int, blocksize: int, callback: Callable[..., None]) -> None:
        self.rate = samplerate
        self.block = blocksize or samplerate // 50
        self.callback = callback
        self.running = False
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self.running = True
        self.thread.start()

    def stop(self) -> None:
        self.running = False

    def close(self) -> None:
        self.running = False

    def _run(self) -> None:
        start = time.monotonic()
        k = 0
        while self.running:
            self._tick()
            k += 1
            time.sleep(max(0.0, start + k * self.block / self.rate - time.monotonic()))

    def _tick(self) -> None:
        raise NotImplementedError


class RawInputStream(_Stream):
    def __init__(
        self, samplerate: int, channels: int, dtype: str, blocksize: int, callback: Any
    ) -> None:
        super().__init__(samplerate, blocksize, callback)
        with wave.open(os.environ["FAKE_MIC"], "rb") as recording:
            assert recording.getframerate() == samplerate, "resample the WAV to the input rate"
            self.pcm = recording.readframes(recording.getnframes())
        self.offset = 0

    def _tick(self) -> None:
        size = self.block * 2
        chunk = self.pcm[self.offset : self.offset + size]
        self.offset += size
        self.callback(chunk + bytes(size - len(chunk)), self.block, None, None)


class RawOutputStream(_Stream):
    def __init__(
        self, samplerate: int, channels: int, dtype: str, blocksize: int = 0, callback: Any = None
    ) -> None:
        super().__init__(samplerate, blocksize, callback)

    def _tick(self) -> None:
        out = bytearray(self.block * 2)
        self.callback(out, self.block, None, None)
        if any(out):
            with open(os.environ["FAKE_SPEAKER"], "ab") as played:
                played.write(out)
