"""Every Gemini Live message, checked against Google's own published types: the
``google-genai`` package's ``LiveClientMessage`` (what a client may send) and
``LiveServerMessage`` (what the service sends), ``google/genai/types.py``.

The types forbid unknown members (``extra='forbid'``) but also take the Python names
(``populate_by_name``): ``client_content`` would validate although the service's JSON
names it ``clientContent``. So a message is parsed from its JSON text, dumped back by
alias, and the two must be the same: a misspelt, snake_case or misplaced member, or a
value of the wrong type, fails. Their enums take any value with a warning ("X is not a
valid Modality"), for values the SDK does not know yet: here that warning fails too.
Free-form members (``parametersJsonSchema``, ``functionCall.args``,
``functionResponse.response``) are JSON values in the types as on the wire, so
whatever they hold comes back unchanged. Bytes (``inlineData.data``) are
compared decoded: the dump writes URL-safe base64, the wire the standard alphabet.
"""

from __future__ import annotations

import base64
import binascii
import json
import warnings
from typing import Any

import pydantic
from google.genai import types

__all__ = ["WireError", "check_client", "check_server"]


class WireError(ValueError):
    """A message that is not what Google's types describe; ``path`` names the member
    at fault (its parents first), ``unknown`` when the types have no such member."""

    def __init__(self, message: str, path: tuple[str, ...], *, unknown: bool) -> None:
        super().__init__(message)
        self.path = path
        self.unknown = unknown


def check_client(message: Any) -> None:
    """Raise WireError unless ``message`` is a valid ``LiveClientMessage``."""
    _check(types.LiveClientMessage, message)


def check_server(message: Any) -> None:
    """Raise WireError unless ``message`` is a valid ``LiveServerMessage``."""
    _check(types.LiveServerMessage, message)


def _check(
    model: type[types.LiveClientMessage] | type[types.LiveServerMessage], message: Any
) -> None:
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            parsed = model.model_validate_json(json.dumps(message))
    except pydantic.ValidationError as exc:
        error = exc.errors()[0]
        path = tuple(str(part) for part in error["loc"])
        raise WireError(
            f"not a {model.__name__}: {'.'.join(path)}: {error['msg']}",
            path,
            unknown=error["type"] == "extra_forbidden",
        ) from None
    for warning in caught:
        if "is not a valid" in str(warning.message):
            raise WireError(f"not a {model.__name__}: {warning.message}", (), unknown=False)
    dumped = parsed.model_dump(mode="json", by_alias=True, exclude_none=True)
    problem = _difference(message, dumped, ())
    if problem is not None:
        path, what = problem
        raise WireError(f"not a {model.__name__}: {'.'.join(path)}: {what}", path, unknown=False)


def _difference(sent: Any, typed: Any, path: tuple[str, ...]) -> tuple[tuple[str, ...], str] | None:
    """Where ``sent`` and its typed round trip differ, and how; or None."""
    if isinstance(sent, dict) and isinstance(typed, dict):
        for key in sent:
            if key not in typed:  # a member the type knows by another name
                return (*path, key), "spelt another way in the type"
        for key in typed:
            if key not in sent:
                return (*path, key), "added by the type"
        for key, value in sent.items():
            found = _difference(value, typed[key], (*path, key))
            if found is not None:
                return found
        return None
    if isinstance(sent, list) and isinstance(typed, list):
        if len(sent) != len(typed):
            return path, f"{len(sent)} items became {len(typed)}"
        for n, (a, b) in enumerate(zip(sent, typed, strict=True)):
            found = _difference(a, b, (*path, str(n)))
            if found is not None:
                return found
        return None
    if sent == typed and type(sent) is type(typed):
        return None
    if path and path[-1] == "data" and _same_bytes(sent, typed):
        return None
    return path, f"{sent!r} became {typed!r}"


def _same_bytes(a: Any, b: Any) -> bool:
    if not isinstance(a, str) or not isinstance(b, str):
        return False
    try:
        return base64.b64decode(a, validate=True) == base64.urlsafe_b64decode(b)
    except (binascii.Error, ValueError):
        return False
