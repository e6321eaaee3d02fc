"""Agents: what talks to the model behind a vRT session (see ``docs/agents.md``).

``AGENTS`` maps the names ``vrt serve --agent NAME`` takes to a setup function
``setup(options: dict[str, str]) -> AgentFactory``, which reads its configuration
(``--agent-option KEY=VALUE`` and the environment) and raises :class:`AgentSetupError`
with one line for the user when something is missing. An agent's module is imported
only when it is chosen, so optional dependencies stay optional.
"""

from __future__ import annotations

import importlib
import typing

from .base import OPTION_PREFIX as _OPTION_PREFIX
from .base import (
    Agent,
    AgentFactory,
    AgentInput,
    AgentSession,
    AgentSetupError,
    AudioItem,
    AudioReceived,
    ContextChanged,
    PlaybackReported,
    ResponseInterrupted,
    SessionInfo,
    ToolCallHandle,
    ToolSettled,
    Turn,
    UserTextReceived,
)
from .history import (
    AgentSaid,
    HistoryEntry,
    PlaybackStopped,
    ToolCalled,
    ToolResulted,
    TurnInterrupted,
    UserSaid,
    coalesce,
)

# Names for the type checker only: every public name of this package is in __all__
# (tests/test_exports.py), as websockets' package does.
if typing.TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Final

__all__ = [
    "AGENTS",
    "DEFAULT_AGENT",
    "FALLBACK_AGENT",
    "Agent",
    "AgentFactory",
    "AgentInput",
    "AgentSaid",
    "AgentSession",
    "AgentSetupError",
    "AudioItem",
    "AudioReceived",
    "ContextChanged",
    "HistoryEntry",
    "PlaybackReported",
    "PlaybackStopped",
    "ResponseInterrupted",
    "SessionInfo",
    "ToolCallHandle",
    "ToolCalled",
    "ToolResulted",
    "ToolSettled",
    "Turn",
    "TurnInterrupted",
    "UserSaid",
    "UserTextReceived",
    "coalesce",
    "load_agent",
    "load_default_agent",
]

#: name -> "module:setup"
AGENTS: Final = {
    "scripted": "vrt.agents.scripted:setup",
    "openai-realtime": "vrt.agents.openai_realtime:setup",
    "openai-chat": "vrt.agents.openai_chat:setup",
    "gemini-live": "vrt.agents.gemini_live:setup",
    "voice": "vrt.voice.options:setup",
}
#: The embedded default of ``vrt serve``: the offline voice agent with the scripted
#: agent as its brain (``docs/voice.md``). Without the ``voice`` extra installed,
#: :func:`load_default_agent` falls back to :data:`FALLBACK_AGENT`.
DEFAULT_AGENT: Final = "voice"
FALLBACK_AGENT: Final = "scripted"


def load_agent(
    name: str, options: dict[str, str] | None = None, *, option_prefix: str = ""
) -> AgentFactory:
    """The factory registered as ``name``, set up with ``options``. Raises KeyError
    with the known names, or AgentSetupError saying what to configure, naming each
    option as the user typed it: with ``option_prefix`` (``brain.``, the voice agent's
    brain) before its name (``base.option_name``)."""
    try:
        target = AGENTS[name]
    except KeyError:
        raise KeyError(
            f"unknown agent {name!r}; choose one of: {', '.join(sorted(AGENTS))}"
        ) from None
    module, _, attribute = target.partition(":")
    setup: Callable[[dict[str, str]], AgentFactory] = getattr(
        importlib.import_module(module), attribute
    )
    token = _OPTION_PREFIX.set(option_prefix)
    try:
        return setup(dict(options or {}))
    finally:
        _OPTION_PREFIX.reset(token)


def load_default_agent(options: dict[str, str] | None = None) -> tuple[str, AgentFactory, str]:
    """The default agent set up: ``(name, factory, notice)``. Without the voice extra
    it is the scripted agent, and ``notice`` is one line saying how to get voice
    (empty otherwise)."""
    from ..voice import EXTRA_HINT, missing_packages

    missing = missing_packages()
    if not missing:
        return DEFAULT_AGENT, load_agent(DEFAULT_AGENT, options), ""
    notice = (
        f"the offline voice agent is not installed ({', '.join(missing)} missing); "
        f"using the {FALLBACK_AGENT} agent. For voice: {EXTRA_HINT}"
    )
    return FALLBACK_AGENT, load_agent(FALLBACK_AGENT, options), notice
