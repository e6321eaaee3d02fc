"""Speech synthesis with Piper (a VITS voice in ONNX, run by onnxruntime), the
``en_US-joe-medium`` voice by default (22,050 Hz). Piper synthesises a sentence at a
time, so the voice agent hands it a clause at a time: the first audio of a reply waits
only for its first clause.

A reply's first clause (the one the user waits for) runs on ``threads`` cores; the rest
of a reply, made while the clause before it plays, on one.
Two cores cut a four-word clause from about 105 to 80 ms here, but cost 15-25 % more
CPU per clause, which a busy server cannot spare (``docs/voice.md``, "Measured").

The first clause of a reply (what its user waits for,
:data:`~vrt.voice.clauses.first_clause`) and the clauses made ahead of playback have a
thread each: a session speaking a long reply does not delay another session's answer
(they queued on one thread, an answer behind every clause asked before it)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from ..agents.base import AgentSetupError
from .clauses import first_clause
from .models import check_file, missing_engine, model_file
from .phonemes import mend as mend_phonemiser
from .stages import Samples, StageError

__all__ = ["PiperTts"]

log = logging.getLogger(__name__)


def _session(model: Path, threads: int) -> Any:
    """The voice's ONNX session: ``threads`` cores, threads that sleep rather than spin
    while waiting. onnxruntime's default (every core, spinning) took twice the wall time
    and CPU per clause here, on two cores shared with the recogniser and the server."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return onnxruntime.InferenceSession(
        str(model), sess_options=options, providers=["CPUExecutionProvider"]
    )


class PiperTts:
    """A Piper voice shared by every session; synthesis runs on a thread of its own."""

    def __init__(
        self,
        model: Path | None = None,
        *,
        sha256: str | None = None,
        config: Path | None = None,
        speed: float = 1.0,
        threads: int = 2,
    ) -> None:
        try:
            from piper import PiperVoice, SynthesisConfig
            from piper.config import PhonemeType
        except ImportError:
            raise missing_engine("the piper speech synthesiser", "piper-tts") from None
        model = model_file(model, sha256, bundled="piper-joe-medium", option="tts_model")
        config = config or Path(f"{model}.json")
        check_file(config, None, what="the Piper voice's config (tts_config)")
        try:
            loaded = PiperVoice.load(model, config_path=config)
            lean = _session(model, 1)
            fast = _session(model, threads) if threads > 1 else lean
        except Exception as exc:  # onnxruntime and json raise their own types
            raise AgentSetupError(f"the Piper voice {model} does not load: {exc}") from None
        # Two lanes, each a thread and a voice of its own over the shared model: a
        # reply's first clause on `threads` cores, the clauses made ahead of playback on
        # one. Phonemisation (espeak-ng, one global state) is one at a time.
        lock = threading.Lock()
        self._first = _Lane(_locked(dataclasses.replace(loaded, session=fast), lock), "first")
        self._ahead = _Lane(_locked(dataclasses.replace(loaded, session=lean), lock), "ahead")
        self._config = SynthesisConfig(length_scale=1.0 / speed)
        self.sample_rate: int = loaded.config.sample_rate
        for lane in (self._first, self._ahead):
            self._synthesize_now("Ready.", lane.voice)  # warm up at startup
        if loaded.config.phoneme_type == PhonemeType.ESPEAK:
            with lock:  # espeak-ng is initialised now (the warm-up phonemised)
                mend_phonemiser()

    def _synthesize_now(self, text: str, voice: Any) -> Samples:
        parts = [
            chunk.audio_float_array.astype(np.float32)
            for chunk in voice.synthesize(text, syn_config=self._config)
        ]
        return np.concatenate(parts) if parts else np.zeros(0, np.float32)

    async def synthesize(self, text: str) -> AsyncIterator[Samples]:
        lane = self._first if first_clause.get() else self._ahead
        loop = asyncio.get_running_loop()
        try:
            audio = await loop.run_in_executor(
                lane.executor, self._synthesize_now, text, lane.voice
            )
        except Exception as exc:
            log.exception("piper synthesis failed")
            raise StageError(f"speech synthesis failed: {type(exc).__name__}") from exc
        if audio.size:
            yield audio


@dataclasses.dataclass(frozen=True, slots=True)
class _Lane:
    voice: Any
    name: str
    executor: ThreadPoolExecutor = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        pool = ThreadPoolExecutor(1, thread_name_prefix=f"vrt-piper-{self.name}")
        object.__setattr__(self, "executor", pool)


def _locked(voice: Any, lock: threading.Lock) -> Any:
    """``voice`` with its phonemisation behind ``lock`` (espeak-ng is not thread-safe)."""
    phonemize = voice.phonemize

    def locked(text: str) -> Any:
        with lock:
            return phonemize(text)

    voice.phonemize = locked
    return voice
