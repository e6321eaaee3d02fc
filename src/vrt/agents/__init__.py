"""Agents: what talks to the model behind a vRT session (see ``docs/agents.md``).

``AGENTS`` maps the names ``vrt serve --agent NAME`` takes to their factories; an
agent's module is imported only when it is chosen, so optional dependencies stay
optional.
"""

from __future__ import annotations

import importlib
from typing import Final

from .base import Agent, AgentFactory, AgentSession, AudioItem, SessionInfo, ToolCallHandle, Turn

__all__ = [
    "AGENTS",
    "DEFAULT_AGENT",
    "Agent",
    "AgentFactory",
    "AgentSession",
    "AudioItem",
    "SessionInfo",
    "ToolCallHandle",
    "Turn",
    "load_agent",
]

#: name -> "module:factory"
AGENTS: Final = {
    "scripted": "vrt.agents.scripted:scripted_agent",
}
#: The embedded default of ``vrt serve``, until an offline voice pipeline exists.
DEFAULT_AGENT: Final = "scripted"


def load_agent(name: str) -> AgentFactory:
    """The factory registered as ``name``; raises KeyError with the known names."""
    try:
        target = AGENTS[name]
    except KeyError:
        raise KeyError(
            f"unknown agent {name!r}; choose one of: {', '.join(sorted(AGENTS))}"
        ) from None
    module, _, attribute = target.partition(":")
    factory: AgentFactory = getattr(importlib.import_module(module), attribute)
    return factory
