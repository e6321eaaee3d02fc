"""``ServerConfig`` refuses settings no server can run with, and takes every other: the
timers of §4.4, §5.4 and §7.2, the kept window of §4.1 and the read budget of §11."""

from __future__ import annotations

import re
from dataclasses import fields, replace
from typing import Any

import pytest

from vrt.protocol.server import ServerConfig
from vrt.protocol.server.budget import ReadBudget
from vrt.protocol.server.config import MUST_BE_POSITIVE

TIMERS_AND_RATES = (
    "heartbeat_timeout",
    "resume_window",
    "hello_timeout",
    "tool_timeout",
    "frame_rate",
    "frame_burst",
    "byte_rate",
    "byte_burst",
)
BOUNDS = ("max_unacked", "max_unacked_bytes", "max_state_bytes")


def made(name: str, value: Any) -> ServerConfig:
    """The default configuration with one setting changed (and checked again)."""
    changes: dict[str, Any] = {name: value}
    return replace(ServerConfig(), **changes)


@pytest.mark.parametrize("name", TIMERS_AND_RATES)
def test_a_timer_or_rate_must_be_positive_and_may_be_small(name: str) -> None:
    assert getattr(made(name, 0.5), name) == 0.5
    for bad in (0, -1):
        with pytest.raises(ValueError, match=f"^{name} must be positive$"):
            made(name, bad)


@pytest.mark.parametrize("name", BOUNDS)
def test_a_bound_on_what_is_kept_is_at_least_one(name: str) -> None:
    assert getattr(made(name, 1), name) == 1
    message = "max_unacked, max_unacked_bytes and max_state_bytes must be positive"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        made(name, 0)


def test_must_be_positive_names_every_setting_refused_at_zero() -> None:
    """``MUST_BE_POSITIVE`` is what ``vrt serve`` takes its ranges from (vrt.settings):
    exactly the settings ``ServerConfig`` refuses at zero."""
    # Annotations are strings when interpreted and types when compiled (mypyc).
    numbers = [f.name for f in fields(ServerConfig) if f.type in ("int", "float", int, float)]
    refused = {name for name in numbers if _refuses_zero(name)}
    assert refused == MUST_BE_POSITIVE


def _refuses_zero(name: str) -> bool:
    try:
        made(name, 0)
    except ValueError:
        return True
    return False


def test_the_read_budget_defaults_to_the_configured_audio_budget() -> None:
    """One default for the audio budget: a budget made without one is the config's."""
    config = ServerConfig()
    budget = ReadBudget(1.0, 1.0, 1.0, 1.0, now=0.0)
    assert (budget.audio_rate, budget.audio_burst) == (config.audio_rate, config.audio_burst)
