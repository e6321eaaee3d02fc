"""Speech recognition with Whisper through faster-whisper (CTranslate2, int8 on CPU).

Whisper is not a streaming model, so streaming is built around it
(:mod:`vrt.voice.recognition`): partials from a rolling window while the user speaks,
and the final decoded speculatively as soon as the user pauses. And:

* **A short encoder window**: Whisper's encoder is trained on 30 s windows; an
  utterance of up to 10 s is encoded as a 10 s window instead (3x less work), with the
  decoded length bounded by the audio's duration and no word triple repeated (a short
  window otherwise invites repetition).
* **Finals by beam search** (``beams``, 5 as faster-whisper's standard decoding):
  greedy finals misheard spoken commands ("echo how are you" as "and go high like
  you") and lost about a tenth more words on the benchmark (``docs/voice.md``), for
  about a quarter less decoding time; the speculative final hides that time in the
  hangover. Partials, previews only, are greedy.
* **Silence around the words**: 200 ms before them (speech from a clip's first sample
  has no pre-roll to give) and 250 ms after.
* **"No speech" is decided on the full window**: the short window's no-speech
  probability runs high on clear speech (0.60 against 0.35 for the same words), so a
  short-window verdict of "no speech" is checked on the 30 s window before the
  utterance is dropped; otherwise clearly spoken words came back as nothing.

Decodes run one at a time on a thread of their own shared by all sessions (a model
run uses ``threads`` cores), in the order and within the bounds of
:mod:`vrt.voice.decode_queue`: finals ahead of partials, one queued job per session,
at most ``queue_limit`` waiting; the voice agent names the session of each utterance
(``start(..., session=)``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Final

import numpy as np

from ..agents.base import AgentSetupError
from .decode_queue import DEFAULT_LIMIT, DecodeQueue
from .models import BUNDLED, check_file, missing_engine
from .recognition import SpeculativeRecognition
from .stages import SAMPLE_RATE, Samples, StageError

__all__ = ["WhisperStt"]

log = logging.getLogger(__name__)

_SHORT_FRAMES: Final = 1000  # a 10 s encoder window
_FULL_FRAMES: Final = 3000  # Whisper's 30 s window
#: The longest audio one decode takes (longer utterances are cut by the voice agent).
MAX_SECONDS: Final = 30.0
_TAIL: Final = np.zeros(SAMPLE_RATE // 4, np.float32)  # 250 ms of silence ends the words
#: 200 ms of silence before the words: speech from the first sample of a clip (a WAV
#: sent whole, no pre-roll to give) is misheard more often without it (docs/voice.md).
_HEAD: Final = np.zeros(SAMPLE_RATE // 5, np.float32)
#: Whisper's own rule for "no speech" (noise, a breath): a no-speech probability above
#: 0.6 and an average token log-probability under -1 (faster-whisper's defaults), on
#: the window it was calibrated on (30 s).
_NO_SPEECH: Final = 0.6
_LOW_CONFIDENCE: Final = -1.0


class WhisperStt:
    """A Whisper model shared by every session (see the module documentation)."""

    def __init__(
        self,
        model: Path | None = None,
        *,
        sha256: str | None = None,
        threads: int = 2,
        partial_every: float | None = 1.0,
        partial_window: float = 8.0,
        queue_limit: int = DEFAULT_LIMIT,
        beams: int = 5,
    ) -> None:
        try:
            from faster_whisper import WhisperModel
        except ImportError:
            raise missing_engine("the whisper speech recogniser", "faster-whisper") from None
        if model is None:
            folder = BUNDLED["whisper-tiny.en"].locate().parent
        else:
            folder = model.parent if model.name == "model.bin" else model
            check_file(folder / "model.bin", sha256, what="stt_model")
        try:
            self._model = WhisperModel(
                str(folder), device="cpu", compute_type="int8", cpu_threads=threads
            )
        except Exception as exc:  # CTranslate2 and tokenizers raise their own types
            raise AgentSetupError(f"the Whisper model in {folder} does not load: {exc}") from None
        self.folder = folder
        self.beams = beams
        self.partial_every = partial_every
        self.partial_window = partial_window
        tokenizer = self._model.hf_tokenizer
        prompt = ["<|startoftranscript|>"]
        if self._model.model.is_multilingual:
            prompt += ["<|en|>", "<|transcribe|>"]
        self._prompt = [tokenizer.token_to_id(token) for token in prompt]
        self._notimestamps = tokenizer.token_to_id("<|notimestamps|>")
        #: The first timestamp token (<|0.00|>); each next one is 20 ms later.
        self._timestamp_begin = self._notimestamps + 1
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="vrt-whisper")
        self.queue = DecodeQueue(self._decode, self._executor, limit=queue_limit)
        self.transcribe(np.zeros(SAMPLE_RATE // 2, np.float32))  # warm up at startup

    def transcribe(self, audio: Samples, *, partial: bool = False) -> str:
        """Decode ``audio`` (16 kHz, at most :data:`MAX_SECONDS`) to text: a final, or a
        ``partial`` (greedy, and a short-window "no speech" is not checked again).
        Blocking."""
        beams = 1 if partial else self.beams
        audio = np.concatenate((_HEAD, audio[: int(MAX_SECONDS * SAMPLE_RATE)], _TAIL))
        features = self._model.feature_extractor(audio)
        frames = min(features.shape[1], _FULL_FRAMES)
        seconds = len(audio) / SAMPLE_RATE
        window = _SHORT_FRAMES if frames <= _SHORT_FRAMES else _FULL_FRAMES
        result = self._generate(features, frames, window, beams, seconds)
        if _no_speech(result) and window != _FULL_FRAMES and not partial:
            result = self._generate(features, frames, _FULL_FRAMES, beams, seconds)
        if _no_speech(result):
            return ""
        words = self._words(result.sequences_ids[0], seconds - len(_TAIL) / SAMPLE_RATE)
        text: str = self._model.hf_tokenizer.decode(words)
        return text.strip()

    def _words(self, tokens: list[int], end_s: float) -> list[int]:
        """The text tokens of the segments that start before ``end_s``: a segment the
        model places after the audio's end is a repetition, not speech."""
        begin = self._timestamp_begin
        kept: list[int] = []
        start: float | None = None
        for token in tokens:
            if token >= begin:
                # A segment's first timestamp is its start; its second, its end.
                start = (token - begin) * 0.02 if start is None else None
            elif start is None or start < end_s:
                kept.append(token)
        return kept

    def _generate(self, features: Any, frames: int, window: int, beams: int, seconds: float) -> Any:
        import ctranslate2

        padded = np.zeros((features.shape[0], window), np.float32)
        padded[:, :frames] = features[:, :frames]
        return self._model.model.generate(
            ctranslate2.StorageView.from_array(padded[None]),
            [self._prompt],
            beam_size=beams,
            max_length=min(448, math.ceil(seconds * 6) + 10),
            suppress_blank=True,
            # A short window makes tiny models loop ("Good evening. How was your day? Good
            # evening."): no word triple twice. Same corpus word error rate (docs/voice.md).
            no_repeat_ngram_size=3,
            suppress_tokens=[-1],
            return_no_speech_prob=True,
            return_scores=True,
        )[0]

    def _decode(self, audio: Samples, final: bool) -> str:
        return self.transcribe(audio, partial=not final)

    async def _queued(self, owner: object, audio: Samples, *, final: bool) -> str:
        try:
            return await self.queue.submit(owner, audio, final=final)
        except StageError:
            raise
        except Exception as exc:
            log.exception("whisper decode failed")
            raise StageError(f"speech recognition failed: {type(exc).__name__}") from exc

    def start(
        self, on_partial: Callable[[str], None], *, session: object | None = None
    ) -> SpeculativeRecognition:
        # The queue's unit is the session: its utterances share one queued job.
        owner = session if session is not None else object()

        async def final(audio: Samples) -> str:
            return await self._queued(owner, audio, final=True)

        async def partial(audio: Samples) -> str:
            return await self._queued(owner, audio, final=False)

        return SpeculativeRecognition(
            final,
            on_partial,
            decode_partial=partial,
            partial_every=self.partial_every,
            partial_window=self.partial_window,
        )


def _no_speech(result: Any) -> bool:
    # With the default length penalty the score is the mean log-probability per token.
    return bool(result.no_speech_prob > _NO_SPEECH and result.scores[0] < _LOW_CONFIDENCE)
