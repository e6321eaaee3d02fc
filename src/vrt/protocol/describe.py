"""How the decoder names what it found in a frame, in its error messages (§9.1): a
value's JSON kind, a value shown briefly, and where a schema error is (a JSON pointer,
RFC 6901)."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["json_pointer", "kind_of", "shown"]


def kind_of(value: Any) -> str:
    """``value``'s JSON kind, with its article: "null", "a number", "an array", ..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"


def shown(value: Any) -> str:
    """``value`` as JSON, cut to 40 characters."""
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def json_pointer(path: list[str | int]) -> str:
    """The JSON pointer of ``path`` (``~`` and ``/`` escaped)."""
    return "/" + "/".join(str(p).replace("~", "~0").replace("/", "~1") for p in path)
