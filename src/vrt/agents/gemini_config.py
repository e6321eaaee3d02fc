"""The Gemini Live adapter's settings (docs/agent-gemini-live.md, "Settings"): the
``--agent-option`` values, then the ``VRT_GEMINI_*`` environment variables, then the
defaults; the API key only from ``GOOGLE_API_KEY`` or ``GEMINI_API_KEY``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from ..protocol.messages import PCM16_24K, Format
from .base import AgentSetupError
from .provider_socket import LinkSettings, model_voice_url, option_reader

__all__ = [
    "DEFAULT_BASE_URL",
    "DEFAULT_INSTRUCTIONS",
    "DEFAULT_MODEL",
    "DEFAULT_VOICE",
    "INPUT_FORMATS",
    "KEY_VARIABLES",
    "OUTPUT_FORMATS",
    "PCMU_8K",
    "GeminiConfig",
    "api_key_from",
    "config_from",
]

PCMU_8K: Final = Format(encoding="pcmu", sample_rate=8000)
#: pcm16 at these rates goes unchanged (the rate named in the MIME type), pcmu decoded.
INPUT_FORMATS: Final = (
    *(Format(encoding="pcm16", sample_rate=rate) for rate in (16000, 24000, 8000, 48000)),
    PCMU_8K,
)
#: "Audio output always uses a sample rate of 24kHz" (Live API, "Audio formats").
OUTPUT_FORMATS: Final = (PCM16_24K,)

DEFAULT_BASE_URL: Final = (
    "wss://generativelanguage.googleapis.com/ws/"
    "google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent"
)
#: The model of Google's "Get started with Gemini Live API using WebSockets" guide.
DEFAULT_MODEL: Final = "gemini-2.5-flash-native-audio-preview-12-2025"
DEFAULT_VOICE: Final = "Puck"
DEFAULT_INSTRUCTIONS: Final = "You are a helpful voice assistant. Answer briefly and naturally."
KEY_VARIABLES: Final = ("GOOGLE_API_KEY", "GEMINI_API_KEY")

_SETTINGS: Final = {
    "model": "VRT_GEMINI_MODEL",
    "voice": "VRT_GEMINI_VOICE",
    "instructions": "VRT_GEMINI_INSTRUCTIONS",
    "base_url": "VRT_GEMINI_BASE_URL",
    "transcripts": "VRT_GEMINI_TRANSCRIPTS",
}


# --- configuration --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GeminiConfig(LinkSettings):
    """Everything but the API key (not a field, so no repr can print it)."""

    model: str = DEFAULT_MODEL
    voice: str = DEFAULT_VOICE
    instructions: str = DEFAULT_INSTRUCTIONS
    base_url: str = DEFAULT_BASE_URL
    #: Input and output audio transcription (user and agent transcripts).
    transcripts: bool = True

    @property
    def model_name(self) -> str:
        """The model's resource name, as ``setup.model`` takes it."""
        return self.model if self.model.startswith("models/") else f"models/{self.model}"


def config_from(options: Mapping[str, str], environ: Mapping[str, str]) -> GeminiConfig:
    """The configuration from ``--agent-option`` values, then ``VRT_GEMINI_*``
    environment variables, then the defaults. Raises AgentSetupError (one line)."""
    get = option_reader(options, environ, _SETTINGS, "GEMINI_API_KEY (or GOOGLE_API_KEY)")
    model, voice, base_url = model_voice_url(
        get, (DEFAULT_MODEL, DEFAULT_VOICE, DEFAULT_BASE_URL), "GEMINI_API_KEY"
    )
    transcripts = get("transcripts", "on").lower()
    if transcripts not in ("on", "off"):
        raise AgentSetupError(f"transcripts must be on or off, not {transcripts!r}")
    return GeminiConfig(
        model=model,
        voice=voice,
        instructions=get("instructions", DEFAULT_INSTRUCTIONS),
        base_url=base_url,
        transcripts=transcripts == "on",
    )


def api_key_from(environ: Mapping[str, str]) -> str | None:
    """``GOOGLE_API_KEY``, else ``GEMINI_API_KEY`` (the order of Google's SDK)."""
    for name in KEY_VARIABLES:
        value = environ.get(name, "").strip()
        if value:
            return value
    return None
