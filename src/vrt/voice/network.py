"""Stages that call a server: OpenAI-compatible ``POST {base_url}/audio/transcriptions``
and ``POST {base_url}/audio/speech``, which OpenAI serves and so do many local servers
(speaches, LocalAI, openedai-speech, Kokoro-FastAPI, ...).

* Speech to text: the utterance goes up as a 16 kHz WAV file in a multipart form
  (``file``, ``model``, ``response_format=json``) and the answer's ``text`` is the final
  transcript (OpenAI API reference, "Audio / Create transcription"). The request is made
  speculatively when the user pauses, as for Whisper, and dropped if speech resumes.
  There are no partials (each would be a request).
* Text to speech: each clause is a JSON request ``{model, input, voice,
  response_format: "pcm"}``; the answer streams raw 16-bit little-endian mono PCM at
  24 kHz ("Audio / Create speech", ``response_format`` ``pcm``), synthesised while it
  arrives.

The key comes from ``OPENAI_API_KEY`` only and is never logged. A refused or failed
call is a :class:`~vrt.voice.stages.StageError`: ``AGENT_ERROR`` (recoverable) for the
session, which goes on.
"""

from __future__ import annotations

import io
import logging
import wave
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from .codec import to_pcm16
from .recognition import SpeculativeRecognition
from .stages import SAMPLE_RATE, Samples, StageError

__all__ = ["OpenAISpeechToText", "OpenAITextToSpeech", "ServiceConfig"]

log = logging.getLogger(__name__)

#: The rate of ``response_format: "pcm"`` speech.
OPENAI_PCM_RATE: Final = 24000
#: The most of an error body that is read into the log.
_MAX_ERROR_BYTES: Final = 4096


@dataclass(frozen=True, slots=True)
class ServiceConfig:
    base_url: str
    model: str
    api_key: str | None
    timeout: float = 30.0

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}


def _client(config: ServiceConfig) -> Any:
    import httpx

    timeout = httpx.Timeout(config.timeout, connect=min(config.timeout, 10.0))
    return httpx.AsyncClient(headers=config.headers(), timeout=timeout, follow_redirects=False)


async def _refused(what: str, response: Any) -> StageError:
    body = b""
    async for block in response.aiter_bytes():
        body += block
        if len(body) >= _MAX_ERROR_BYTES:
            break
    log.warning("%s: HTTP %d %s", what, response.status_code, body[:_MAX_ERROR_BYTES])
    return StageError(f"{what} refused: HTTP {response.status_code}")


def _wav(audio: Samples) -> bytes:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(SAMPLE_RATE)
        out.writeframes(to_pcm16(audio))
    return buffer.getvalue()


class OpenAISpeechToText:
    """``/audio/transcriptions`` (see the module documentation)."""

    def __init__(self, config: ServiceConfig) -> None:
        self.config = config
        self._http: Any = None

    async def transcribe(self, audio: Samples) -> str:
        import httpx

        if self._http is None:
            self._http = _client(self.config)
        what = "the speech recognition service"
        try:
            response = await self._http.post(
                f"{self.config.base_url}/audio/transcriptions",
                files={"file": ("speech.wav", _wav(audio), "audio/wav")},
                data={"model": self.config.model, "response_format": "json"},
            )
            if response.status_code != 200:
                raise StageError(f"{what} refused: HTTP {response.status_code}")
            text = response.json().get("text", "")
        except httpx.HTTPError as exc:
            raise StageError(f"{what} failed: {type(exc).__name__}") from exc
        except (ValueError, AttributeError) as exc:
            raise StageError(f"{what} answered with no JSON text") from exc
        return text.strip() if isinstance(text, str) else ""

    def start(
        self, on_partial: Callable[[str], None], *, session: object | None = None
    ) -> SpeculativeRecognition:
        # No partials: each would be a request (each session's, concurrently).
        return SpeculativeRecognition(self.transcribe)


class OpenAITextToSpeech:
    """``/audio/speech`` (see the module documentation)."""

    sample_rate: int = OPENAI_PCM_RATE

    def __init__(self, config: ServiceConfig, voice: str, speed: float = 1.0) -> None:
        self.config = config
        self.voice = voice
        self.speed = speed
        self._http: Any = None

    async def synthesize(self, text: str) -> AsyncIterator[Samples]:
        import httpx

        if self._http is None:
            self._http = _client(self.config)
        what = "the speech synthesis service"
        body = {
            "model": self.config.model,
            "input": text,
            "voice": self.voice,
            "response_format": "pcm",
            "speed": self.speed,
        }
        try:
            async with self._http.stream(
                "POST", f"{self.config.base_url}/audio/speech", json=body
            ) as response:
                if response.status_code != 200:
                    raise await _refused(what, response)
                odd = b""
                async for block in response.aiter_bytes():
                    data = odd + block
                    odd = data[len(data) & ~1 :]
                    whole = data[: len(data) & ~1]
                    if whole:
                        yield np.frombuffer(whole, dtype="<i2").astype(np.float32) / 32768.0
        except httpx.HTTPError as exc:
            raise StageError(f"{what} failed: {type(exc).__name__}") from exc
