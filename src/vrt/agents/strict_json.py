"""JSON that agents parse from a model or a user and then put on the wire (tool call
arguments): only what RFC 8259 allows, so that it can go in a message."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["parse_json"]


def _reject_constant(name: str) -> Any:
    # json.loads takes NaN and Infinity, which are not JSON and could not go on the wire.
    raise ValueError(f"{name} is not JSON")


def parse_json(text: str) -> tuple[bool, Any]:
    """``(True, value)``, or ``(False, None)`` when ``text`` is not JSON."""
    try:
        return True, json.loads(text, parse_constant=_reject_constant)
    except ValueError:
        return False, None
