"""Speech synthesis with Piper (a VITS voice in ONNX, run by onnxruntime), the
``en_US-joe-medium`` voice by default (22,050 Hz). Piper synthesises a sentence at a
time, so the voice agent hands it a clause at a time: the first audio of a reply waits
only for its first clause.

A clause asked for while no other waits (a reply's first, usually: the one the user
waits for) runs on ``threads`` cores; a clause queued behind another (the rest of a
reply, made while the clause before it plays; other sessions' clauses) runs on one.
Two cores cut a four-word clause from about 105 to 80 ms here, but cost 15-25 % more
CPU per clause, which a busy server cannot spare (``docs/voice.md``, "Measured").

Clauses are made one at a time, the first clause of a reply (what its user waits for,
:data:`~vrt.voice.clauses.first_clause`) before the clauses made ahead of playback,
then in the order asked: a session speaking a long reply delays another session's
answer by one clause at most, not by its whole backlog."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from ..agents.base import AgentSetupError
from .clauses import first_clause
from .models import check_file, missing_engine, model_file
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
        except ImportError:
            raise missing_engine("the piper speech synthesiser", "piper-tts") from None
        model = model_file(model, sha256, bundled="piper-joe-medium", option="tts_model")
        config = config or Path(f"{model}.json")
        check_file(config, None, what="the Piper voice's config (tts_config)")
        try:
            self._voice = PiperVoice.load(model, config_path=config)
            self._lean = _session(model, 1)
            self._fast = _session(model, threads) if threads > 1 else self._lean
        except Exception as exc:  # onnxruntime and json raise their own types
            raise AgentSetupError(f"the Piper voice {model} does not load: {exc}") from None
        self._config = SynthesisConfig(length_scale=1.0 / speed)
        self.sample_rate: int = self._voice.config.sample_rate
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="vrt-piper")
        #: Clauses waiting for the synthesiser: (not a first clause, order, its turn).
        self._queue: list[tuple[bool, int, asyncio.Future[None]]] = []
        self._order = itertools.count()
        self._busy = False
        for session in {id(s): s for s in (self._lean, self._fast)}.values():
            self._synthesize_now("Ready.", session)  # warm up at startup

    def _synthesize_now(self, text: str, session: Any) -> Samples:
        # Runs on the one executor thread, so the voice's session is set for this clause
        # alone.
        self._voice.session = session
        parts = [
            chunk.audio_float_array.astype(np.float32)
            for chunk in self._voice.synthesize(text, syn_config=self._config)
        ]
        return np.concatenate(parts) if parts else np.zeros(0, np.float32)

    async def _turn(self) -> None:
        """Wait until this clause is the one to make (see the module documentation)."""
        if not self._busy:
            self._busy = True
            return
        turn = asyncio.get_running_loop().create_future()
        heapq.heappush(self._queue, (not first_clause.get(), next(self._order), turn))
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self._pass_turn()  # given the turn as it was cancelled: hand it on
            raise

    def _pass_turn(self) -> None:
        while self._queue:
            turn = heapq.heappop(self._queue)[2]
            if not turn.done():
                turn.set_result(None)
                return
        self._busy = False

    async def synthesize(self, text: str) -> AsyncIterator[Samples]:
        loop = asyncio.get_running_loop()
        await self._turn()
        try:
            session = self._lean if self._queue else self._fast
            audio = await loop.run_in_executor(self._executor, self._synthesize_now, text, session)
        except Exception as exc:
            log.exception("piper synthesis failed")
            raise StageError(f"speech synthesis failed: {type(exc).__name__}") from exc
        finally:
            self._pass_turn()
        if audio.size:
            yield audio
