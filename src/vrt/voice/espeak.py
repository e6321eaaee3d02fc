"""Speech synthesis with eSpeak NG (formant synthesis: robotic, but intelligible and
almost free), through the library and data that the ``espeakng-loader`` wheel carries.
Its audio streams as it is made: the first chunk comes within milliseconds, so it is the
stage for the lowest voice-to-voice latency (``tts=espeak``).

The library has one global state, so synthesis runs on one thread of its own, a clause
at a time; the C callback hands each chunk to the event loop as it is made.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import threading
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final

import numpy as np

from ..agents.base import AgentSetupError
from .models import missing_engine
from .stages import Samples, StageError

__all__ = ["EspeakTts"]

log = logging.getLogger(__name__)

_SYNCHRONOUS: Final = 2  # AUDIO_OUTPUT_SYNCHRONOUS: the callback gets the audio
_POS_CHARACTER: Final = 1
_CHARS_UTF8: Final = 1
_RATE: Final = 1  # espeakRATE, words per minute
_BUFFER_MS: Final = 60  # audio per callback
_CALLBACK = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.c_void_p
)


class EspeakTts:
    """eSpeak NG, shared by every session (see the module documentation)."""

    def __init__(self, voice: str = "en-us", words_per_minute: int = 175) -> None:
        try:
            import espeakng_loader
        except ImportError:
            raise missing_engine("tts=espeak", "espeakng-loader") from None
        try:
            library = ctypes.CDLL(espeakng_loader.get_library_path())
            data = espeakng_loader.get_data_path()
        except (OSError, RuntimeError) as exc:
            raise AgentSetupError(f"eSpeak NG does not load: {exc}") from None
        library.espeak_Initialize.restype = ctypes.c_int
        library.espeak_Initialize.argtypes = [
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_char_p,
            ctypes.c_int,
        ]
        library.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
        library.espeak_SetParameter.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
        library.espeak_SetSynthCallback.argtypes = [_CALLBACK]
        library.espeak_Synth.argtypes = [
            ctypes.c_char_p,
            ctypes.c_size_t,
            ctypes.c_uint,
            ctypes.c_int,
            ctypes.c_uint,
            ctypes.c_uint,
            ctypes.c_void_p,
            ctypes.c_void_p,
        ]
        rate = library.espeak_Initialize(_SYNCHRONOUS, _BUFFER_MS, data.encode(), 0)
        if rate <= 0:
            raise AgentSetupError(f"eSpeak NG did not start (data {data})")
        if library.espeak_SetVoiceByName(voice.encode()) != 0:
            raise AgentSetupError(f"eSpeak NG has no voice {voice!r} (tts_voice)")
        library.espeak_SetParameter(_RATE, words_per_minute, 0)
        self.sample_rate: int = rate
        self._library = library
        self._sink: Any = None  # (loop, queue) of the synthesis in progress
        self._callback = _CALLBACK(self._chunk)  # kept: the library holds the pointer
        library.espeak_SetSynthCallback(self._callback)
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="vrt-espeak")
        self._lock = threading.Lock()

    def _chunk(self, wav: Any, count: int, events: Any) -> int:
        del events
        if count > 0 and self._sink is not None:
            loop, queue = self._sink
            samples = np.ctypeslib.as_array(wav, shape=(count,)).astype(np.float32) / 32768.0
            loop.call_soon_threadsafe(queue.put_nowait, samples)
        return 0

    def _speak(self, text: str, loop: asyncio.AbstractEventLoop, queue: Any) -> None:
        with self._lock:
            self._sink = (loop, queue)
            try:
                data = text.encode()
                code = self._library.espeak_Synth(
                    data, len(data) + 1, 0, _POS_CHARACTER, 0, _CHARS_UTF8, None, None
                )
            finally:
                self._sink = None
        if code != 0:
            raise RuntimeError(f"espeak_Synth returned {code}")

    async def synthesize(self, text: str) -> AsyncIterator[Samples]:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Samples | None] = asyncio.Queue()
        job = loop.run_in_executor(self._executor, self._speak, text, loop, queue)
        job.add_done_callback(lambda _: loop.call_soon(queue.put_nowait, None))
        while (samples := await queue.get()) is not None:
            yield samples
        try:
            await job
        except Exception as exc:
            log.exception("espeak synthesis failed")
            raise StageError(f"speech synthesis failed: {type(exc).__name__}") from exc
