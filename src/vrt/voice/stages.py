"""The stages of a voice agent, as small protocols: voice activity detection, streaming
speech recognition and streaming speech synthesis (the brain is any text agent, see
:mod:`vrt.voice.brain`).

Audio between the stages is mono float32 in [-1, 1] (``Samples``): at
:data:`SAMPLE_RATE` (16 kHz) into the detector and the recogniser, at the synthesiser's
own ``sample_rate`` out of it. The voice agent converts from and to the session's wire
formats (:mod:`vrt.voice.codec`), so a stage never sees pcmu or Opus.

A stage is shared by every session of a server (a model is loaded once), so each one
hands out per-session state: :meth:`Vad.stream`, :meth:`SpeechToText.start`. Work that
takes milliseconds or more (a model run) must not block the event loop: the offline
stages run it in a thread, the network stages await their HTTP calls.

Failures: a stage that cannot be set up raises :class:`~vrt.agents.AgentSetupError` (one
line, at ``vrt serve`` startup); one that fails while a session runs raises
:class:`StageError`, which the voice agent reports as a recoverable ``AGENT_ERROR``
(§9.2) and the session goes on.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Final, Protocol, TypeAlias

import numpy as np
import numpy.typing as npt

from ..errors import VrtException

__all__ = [
    "SAMPLE_RATE",
    "Recognition",
    "Samples",
    "SpeechToText",
    "StageError",
    "TextToSpeech",
    "Vad",
    "VadStream",
]

#: The rate of the audio the detector and the recogniser take.
SAMPLE_RATE: Final = 16000

Samples: TypeAlias = npt.NDArray[np.float32]


class StageError(VrtException):
    """A stage failed while a session runs (a network stage refused, a model raised).
    Its message is one line for the user; the session goes on."""


class VadStream(Protocol):
    """One session's voice activity detector: it keeps the state between windows."""

    #: Samples per window at :data:`SAMPLE_RATE` (Silero: 512, 32 ms).
    window: int

    def probability(self, window: Samples) -> float:
        """The probability that ``window`` (exactly ``window`` samples) is speech."""
        ...


class Vad(Protocol):
    def stream(self) -> VadStream:
        """A detector for a new session."""
        ...


class Recognition(Protocol):
    """The recognition of one utterance, from the first speech to the final text.

    The voice agent feeds every input window from a little before the detected start of
    speech; it calls :meth:`pause` when the detector hears silence (the user may have
    finished: a recogniser can prepare its final hypothesis now, speculatively),
    :meth:`resume` if speech comes back, and :meth:`final` once the silence lasted the
    hangover. Partial hypotheses go to the ``on_partial`` callback given to
    :meth:`SpeechToText.start`, each replacing the one before.
    """

    def feed(self, audio: Samples) -> None: ...

    def pause(self) -> None: ...

    def resume(self) -> None: ...

    async def final(self) -> str:
        """The final transcript of everything fed ("" when no words were heard)."""
        ...

    def cancel(self) -> None:
        """Stop: no more partials, no final. Idempotent."""
        ...


class SpeechToText(Protocol):
    def start(
        self, on_partial: Callable[[str], None], *, session: object | None = None
    ) -> Recognition:
        """Begin recognising a new utterance of ``session`` (any object standing for
        one session: a recogniser shared by sessions may order and bound their work by
        it)."""
        ...


class TextToSpeech(Protocol):
    #: The rate of the audio :meth:`synthesize` yields.
    sample_rate: int

    def synthesize(self, text: str) -> AsyncIterator[Samples]:
        """Speak ``text`` (a clause or a sentence) as audio chunks, the first as early
        as the engine can. Cancelling the iteration stops the work."""
        ...
