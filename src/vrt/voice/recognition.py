"""Streaming recognition around a recogniser that decodes whole utterances (Whisper, an
HTTP transcription service): partials from a rolling window, and a speculative final.

* **Partials**: while the user speaks, every ``partial_every`` seconds of new audio the
  last ``partial_window`` seconds are decoded (``decode_partial``, a cheaper decode if
  the recogniser has one; when no partial decode is running) and handed to
  ``on_partial``. Off when ``partial_every`` is None.
* **Speculative final**: on :meth:`pause` (the detector heard silence) the utterance so
  far is decoded at once, overlapping the hangover during which the agent waits to be
  sure the user finished. :meth:`resume` drops the guess; otherwise :meth:`final` is
  often ready as soon as it is asked.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import numpy as np

from .stages import SAMPLE_RATE, Samples

__all__ = ["SpeculativeRecognition"]


class SpeculativeRecognition:
    def __init__(
        self,
        decode: Callable[[Samples], Awaitable[str]],
        on_partial: Callable[[str], None] | None = None,
        *,
        decode_partial: Callable[[Samples], Awaitable[str]] | None = None,
        partial_every: float | None = None,
        partial_window: float = 8.0,
    ) -> None:
        self._decode = decode
        self._decode_partial = decode_partial or decode
        self._on_partial = on_partial
        self._partial_every = partial_every
        self._partial_window = partial_window
        self._chunks: list[Samples] = []
        self._since_partial = 0
        self._partial: asyncio.Future[str] | None = None
        self._guess: asyncio.Future[str] | None = None
        self._paused = False
        self._done = False

    def _audio(self, seconds: float | None = None) -> Samples:
        if len(self._chunks) > 1:
            self._chunks = [np.concatenate(self._chunks)]
        audio = self._chunks[0] if self._chunks else np.zeros(0, np.float32)
        return audio if seconds is None else audio[-int(seconds * SAMPLE_RATE) :]

    def feed(self, audio: Samples) -> None:
        if self._done:
            return
        self._chunks.append(audio)
        every = self._partial_every
        if self._paused or every is None or self._on_partial is None:
            return
        self._since_partial += len(audio)
        busy = self._partial is not None and not self._partial.done()
        if self._since_partial >= every * SAMPLE_RATE and not busy:
            self._since_partial = 0
            partial = asyncio.ensure_future(self._decode_partial(self._audio(self._partial_window)))
            partial.add_done_callback(self._partial_done)
            self._partial = partial

    def _partial_done(self, partial: asyncio.Future[str]) -> None:
        if self._done or partial.cancelled() or partial.exception() is not None:
            return  # a failed partial is not worth an error: the final will say
        text = partial.result()
        if text and self._on_partial is not None:
            self._on_partial(text)

    def pause(self) -> None:
        if self._done or self._paused:
            return
        self._paused = True
        self._guess = asyncio.ensure_future(self._decode(self._audio()))
        self._guess.add_done_callback(_quiet)

    def resume(self) -> None:
        self._paused = False
        if self._guess is not None:
            self._guess.cancel()  # a decode already running finishes; its text is unused
            self._guess = None

    async def final(self) -> str:
        self._done = True
        guess, self._guess = self._guess, None
        if guess is None:
            return await self._decode(self._audio())
        return await guess

    def cancel(self) -> None:
        self._done = True
        for future in (self._partial, self._guess):
            if future is not None:
                future.cancel()
        self._chunks = []


def _quiet(future: asyncio.Future[str]) -> None:
    # A guess nobody awaits (dropped, or the session ended) must not log its failure
    # as "never retrieved": final() reports the one that matters.
    if not future.cancelled():
        future.exception()
