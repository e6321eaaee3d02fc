"""Capability negotiation (§3.3) against the registry in ``capabilities.json`` (§3.4)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from typing import Final, Literal

from .artifacts import load_json
from .errors import LocalProtocolError

__all__ = [
    "GLOBAL_TOOL_IDS",
    "TOOL_STREAM",
    "Capability",
    "check_gated",
    "gating_capability",
    "is_token",
    "negotiate",
    "registry",
    "validate_supported",
]

TOOL_STREAM: Final = "tool-stream-v1"
GLOBAL_TOOL_IDS: Final = "global-tool-ids-v1"

_TOKEN: Final = re.compile(r"[a-z0-9]+(?:[.-][a-z0-9]+)*")


@dataclass(frozen=True, slots=True)
class Capability:
    """One entry of the registry (§3.4)."""

    token: str
    status: Literal["draft", "stable", "deprecated"]
    since: str
    section: str
    messages: tuple[str, ...]


@cache
def registry() -> dict[str, Capability]:
    """The standard capabilities of ``capabilities.json``, by token."""
    document = load_json("capabilities.json")
    return {
        entry["token"]: Capability(
            token=entry["token"],
            status=entry["status"],
            since=entry["since"],
            section=entry["section"],
            messages=tuple(entry["messages"]),
        )
        for entry in document["capabilities"]
    }


@cache
def _gates() -> dict[str, str]:
    return {message: c.token for c in registry().values() for message in c.messages}


def is_token(token: str) -> bool:
    """Whether ``token`` is a well-formed capability token (§3.3)."""
    return len(token) <= 64 and _TOKEN.fullmatch(token) is not None


def negotiate(offered: Iterable[str], supported: Iterable[str]) -> tuple[str, ...]:
    """The capabilities in effect: the offered tokens this side supports, each once, in
    the order offered (§3.3). Tokens this side does not recognise are ignored.
    """
    if offered == ():  # most clients offer none: every session opening asks
        return ()
    supported_set = frozenset(supported)
    return tuple(dict.fromkeys(t for t in offered if t in supported_set))


def validate_supported(supported: Iterable[str]) -> tuple[str, ...]:
    """Check a list of tokens an implementation offers or accepts: registered, or a
    private ``x-`` token (§3.4). Raises :class:`LocalProtocolError` otherwise.
    """
    tokens = tuple(dict.fromkeys(supported))
    for token in tokens:
        if not is_token(token):
            raise LocalProtocolError(f"{token!r} is not a capability token (§3.3)")
        if token not in registry() and not token.startswith("x-"):
            raise LocalProtocolError(
                f"{token!r} is not a registered capability; only private x- tokens may be "
                "offered unregistered (§3.4)"
            )
    return tokens


def gating_capability(message_type: str) -> str | None:
    """The capability a message type exists under, or None for a baseline type (§3.4)."""
    return _gates().get(message_type)


def check_gated(message_type: str, in_effect: Iterable[str]) -> None:
    """Raise :class:`LocalProtocolError` when sending ``message_type`` needs a capability
    that is not in effect (§3.3, §3.4).
    """
    token = _gates().get(message_type)
    if token is not None and token not in in_effect:
        raise LocalProtocolError(
            f"{message_type} may only be sent while {token} is in effect (§3.4)"
        )
