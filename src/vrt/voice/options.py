"""``vrt serve --agent voice``: the voice agent's options, and building its stages once
per server (``vrt serve`` prints a one-line :class:`AgentSetupError` and exits when a
stage cannot be set up: a missing package, a model file missing or not the pinned one,
a bad option).

Every option is ``--agent-option KEY=VALUE``:

=====================  ===========================================================
``brain``              The text agent that answers: ``scripted`` (default),
                       ``openai-chat``, or any registered agent. Its own options are
                       given with a ``brain.`` prefix: ``brain.model=llama3.2``.
``stt``                ``whisper`` (default, offline) or ``openai``
                       (``/audio/transcriptions``).
``stt_model``          Whisper: a CTranslate2 model folder of your own (or its
                       ``model.bin``); openai: the model name (``whisper-1``).
``stt_sha256``         The SHA-256 ``stt_model``'s ``model.bin`` must have.
``stt_threads``        Cores one Whisper decode uses (default 2).
``stt_partials``       Seconds of new speech between partial transcripts (default 1;
                       0 turns partials off).
``stt_url``            The openai recogniser's base URL (default ``OPENAI_BASE_URL``,
                       else https://api.openai.com/v1).
``tts``                ``piper`` (default, offline), ``espeak`` (offline, robotic,
                       first audio within milliseconds) or ``openai``
                       (``/audio/speech``).
``tts_model``          Piper: an ``.onnx`` voice of your own (its ``.onnx.json`` beside
                       it, or ``tts_config``); openai: the model name (``tts-1``).
``tts_config``         The Piper voice's JSON config.
``tts_sha256``         The SHA-256 ``tts_model`` must have.
``tts_voice``          The openai voice (default ``alloy``), or the eSpeak NG one
                       (default ``en-us``).
``tts_speed``          Speaking rate (default 1.0).
``tts_threads``        Cores a reply's first Piper clause uses (default 2); the
                       clauses made ahead of playback use one, on a thread of their
                       own.
``tts_url``            The openai synthesiser's base URL (as ``stt_url``).
``stt_timeout``,       Seconds an openai stage's request may take (default 30): past
``tts_timeout``        it, AGENT_ERROR (recoverable) and the session goes on.
``vad_model``          A Silero VAD ``.onnx`` of your own; ``vad_sha256`` its digest.
``threshold``          Speech probability of a detector window (default 0.5).
``min_speech_ms``      Speech that starts a turn (default 160).
``hangover_ms``        Silence that ends it (default 300).
``preroll_ms``         Audio before the start that is recognised too (default 300).
``max_utterance_ms``   The longest utterance (default 28000).
``lead_ms``            How far output audio runs ahead of real time (default 300).
``first_clause_words`` The first clause of a reply ends after this many words at
                       most, each later one at twice the words of the one before
                       (default 4; 0: at its first boundary).
``max_reply_chars``    Characters of one reply that are spoken (default 2000): the
                       rest is sent as text, not spoken (``docs/limits.md``).
``max_sessions``       Voice sessions one process serves at once, connected or
                       parked (default: :func:`default_session_limit`, from the
                       machine's cores and memory; ``--max-sessions`` overrides it).
=====================  ===========================================================

The key of the openai stages comes from ``OPENAI_API_KEY`` only.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

from ..agents.base import Agent, AgentFactory, AgentSetupError, SessionInfo
from ..agents.scripted import scripted_agent, spoken_scripted_agent
from .agent import VoiceAgent, VoiceConfig, VoiceStages
from .stages import SpeechToText, TextToSpeech, Vad

__all__ = ["build_stages", "default_session_limit", "setup", "voice_factory"]

_CONFIG_FIELDS: Final = {field.name for field in dataclasses.fields(VoiceConfig)}
_OPTIONS: Final = {
    "brain",
    "stt",
    "stt_model",
    "stt_sha256",
    "stt_threads",
    "stt_partials",
    "stt_url",
    "stt_timeout",
    "tts",
    "tts_model",
    "tts_config",
    "tts_sha256",
    "tts_voice",
    "tts_speed",
    "tts_threads",
    "tts_url",
    "tts_timeout",
    "vad_model",
    "vad_sha256",
    "max_sessions",
    *_CONFIG_FIELDS,
}
_DEFAULT_URL: Final = "https://api.openai.com/v1"
#: Open voice sessions per core: their detectors and decoders cost about 1 % of a core
#: each while the user speaks; the recogniser and the synthesiser, shared, are what a
#: core can do for a few speakers at once (docs/voice.md, "Measured"), and most open
#: sessions are silent at any moment.
_SESSIONS_PER_CORE: Final = 32
#: Memory one voice session may come to hold: two utterances of input audio at most
#: (~3.6 MB), its connection's bounds (4 MiB, docs/limits.md) and synthesised speech
#: held ahead of playback, with room to spare.
_SESSION_MEMORY: Final = 32 << 20


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


def _memory() -> int | None:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        return None


def default_session_limit(cores: int | None = None, memory: int | None = None) -> int:
    """The voice sessions one process serves at once by default: 32 per core, and no
    more than one per 32 MiB of the machine's memory (64 on 2 cores and 24 GiB)."""
    cores = cores if cores is not None else _cores()
    memory = memory if memory is not None else _memory()
    limit = max(1, cores) * _SESSIONS_PER_CORE
    if memory is not None:
        limit = min(limit, max(1, memory // _SESSION_MEMORY))
    return limit


def _number(options: dict[str, str], key: str, default: float, *, low: float = 0.0) -> float:
    text = options.get(key)
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not low <= value < float("inf"):
        raise AgentSetupError(f"voice option {key} must be a number of at least {low}")
    return value


def _path(options: dict[str, str], key: str) -> Path | None:
    text = options.get(key)
    return Path(text).expanduser() if text else None


def _service(options: dict[str, str], prefix: str, default_model: str) -> Any:
    from .network import ServiceConfig

    try:
        import httpx  # noqa: F401
    except ImportError:
        raise AgentSetupError(
            f"{prefix}=openai needs httpx: pip install 'vrealtime[voice,openai]'"
        ) from None
    url = (
        options.get(f"{prefix}_url") or os.environ.get("OPENAI_BASE_URL") or _DEFAULT_URL
    ).rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise AgentSetupError(f"voice option {prefix}_url must be an http:// or https:// URL")
    key = os.environ.get("OPENAI_API_KEY", "").strip() or None
    if key is None and parts.hostname == "api.openai.com":
        raise AgentSetupError(
            f"{prefix}=openai needs OPENAI_API_KEY for api.openai.com "
            f"(or --agent-option {prefix}_url=... for a local server)"
        )
    timeout = _number(options, f"{prefix}_timeout", 30.0, low=0.1)
    return ServiceConfig(url, options.get(f"{prefix}_model") or default_model, key, timeout)


def _vad(options: dict[str, str]) -> Vad:
    from .silero import SileroVad

    return SileroVad(_path(options, "vad_model"), options.get("vad_sha256"))


def _stt(options: dict[str, str]) -> SpeechToText:
    kind = options.get("stt", "whisper")
    if kind == "openai":
        from .network import OpenAISpeechToText

        return OpenAISpeechToText(_service(options, "stt", "whisper-1"))
    if kind != "whisper":
        raise AgentSetupError(f"voice option stt must be whisper or openai (got {kind!r})")
    from .whisper import WhisperStt

    partials = _number(options, "stt_partials", 1.0)
    return WhisperStt(
        _path(options, "stt_model"),
        sha256=options.get("stt_sha256"),
        threads=int(_number(options, "stt_threads", 2, low=1)),
        partial_every=partials or None,
    )


def _tts(options: dict[str, str]) -> TextToSpeech:
    kind = options.get("tts", "piper")
    speed = _number(options, "tts_speed", 1.0, low=0.25)
    if kind == "openai":
        from .network import OpenAITextToSpeech

        service = _service(options, "tts", "tts-1")
        return OpenAITextToSpeech(service, options.get("tts_voice", "alloy"), speed)
    if kind == "espeak":
        from .espeak import EspeakTts

        return EspeakTts(options.get("tts_voice", "en-us"), round(175 * speed))
    if kind != "piper":
        raise AgentSetupError(f"voice option tts must be piper, espeak or openai (got {kind!r})")
    from .piper import PiperTts

    return PiperTts(
        _path(options, "tts_model"),
        sha256=options.get("tts_sha256"),
        config=_path(options, "tts_config"),
        speed=speed,
        threads=int(_number(options, "tts_threads", 2, low=1)),
    )


def build_stages(options: dict[str, str]) -> VoiceStages:
    """The stages the options name, set up (models loaded and checked)."""
    return VoiceStages(vad=_vad(options), stt=_stt(options), tts=_tts(options))


def _config(options: dict[str, str]) -> VoiceConfig:
    defaults = VoiceConfig()
    values = {
        name: _number(options, name, getattr(defaults, name))
        for name in _CONFIG_FIELDS
        if name in options
    }
    if not 0 < values.get("threshold", defaults.threshold) < 1:
        raise AgentSetupError("voice option threshold must be between 0 and 1")
    return dataclasses.replace(defaults, **values)


def setup(options: dict[str, str]) -> AgentFactory:
    """``vrt serve --agent voice [--agent-option KEY=VALUE ...]`` (see the module
    documentation)."""
    from ..agents import load_agent

    own = {key: value for key, value in options.items() if not key.startswith("brain.")}
    unknown = sorted(set(own) - _OPTIONS)
    if unknown:
        raise AgentSetupError(
            f"the voice agent has no option {', '.join(unknown)} (see docs/voice.md; "
            "the brain's options take a brain. prefix)"
        )
    brain_name = own.get("brain", "scripted")
    if brain_name == "voice":
        raise AgentSetupError("the voice agent's brain must be a text agent, not voice")
    brain_options = {
        key.removeprefix("brain."): value
        for key, value in options.items()
        if key.startswith("brain.")
    }
    config = _config(own)
    limit = own.get("max_sessions")
    max_sessions = (
        default_session_limit() if limit is None else int(_number(own, "max_sessions", 0, low=1))
    )
    try:
        brain_factory = load_agent(brain_name, brain_options, option_prefix="brain.")
    except KeyError as exc:
        raise AgentSetupError(f"brain: {exc.args[0]}") from None
    except AgentSetupError as exc:
        raise AgentSetupError(f"brain {brain_name}: {exc}") from None
    if brain_factory is scripted_agent:
        # It hears transcripts, capitalised and punctuated: "Echo, good morning."
        brain_factory = spoken_scripted_agent
    stages = build_stages(own)
    return voice_factory(stages, brain_factory, config, max_sessions=max_sessions)


def voice_factory(
    stages: VoiceStages,
    brain_factory: AgentFactory,
    config: VoiceConfig,
    *,
    max_sessions: int | None = None,
) -> Callable[[SessionInfo], Any]:
    """The agent factory: a voice agent around a new brain for each session, sharing
    ``stages`` (for a ``VrtServer`` of your own: ``VrtServer(voice_factory(...))``).
    ``max_sessions`` travels with it as its ``max_sessions`` attribute, which a
    ``VrtServer`` given no ``max_sessions`` of its own takes as its limit. Its ``admit``
    attribute refuses new sessions while the recogniser's queue is saturated (issue 31.4,
    :attr:`~vrt.voice.decode_queue.DecodeQueue.saturated`); the open ones go on."""

    async def voice_agent(info: SessionInfo) -> VoiceAgent:
        made = brain_factory(info)
        brain: Agent = await made if inspect.isawaitable(made) else made
        return VoiceAgent(stages, brain, config)

    voice_agent.max_sessions = max_sessions  # type: ignore[attr-defined]
    queue = getattr(stages.stt, "queue", None)  # a recogniser shared by every session

    def admit() -> str | None:
        if queue is not None and queue.saturated:
            return "the voice agent is at capacity; try again later"
        return None

    voice_agent.admit = admit  # type: ignore[attr-defined]
    return voice_agent
