"""What the OpenAI stand-ins (``tests/agents/openai_*_standin.py``) need to check an
event against the openai package's own types: pydantic validates an ``Iterable[...]``
member only as it is iterated (:func:`materialized` iterates it), and the SDK's models
accept and keep members they do not declare (:func:`undeclared_members` finds them)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

__all__ = ["materialized", "undeclared_members"]


def materialized(value: Any) -> Any:
    """``value`` with every lazily validated iterable (pydantic validates an
    ``Iterable[...]`` member as it is iterated) iterated into a list."""
    if isinstance(value, dict):
        return {key: materialized(part) for key, part in value.items()}
    if isinstance(value, str | bytes | int | float | bool) or value is None:
        return value
    return [materialized(part) for part in value]


def undeclared_members(value: Any, path: str) -> list[str]:
    """Members of ``value`` no SDK model declares (the models allow and keep them)."""
    found: list[str] = []
    if isinstance(value, BaseModel):
        found.extend(f"{path}.{key}" for key in value.model_extra or {})
        for key in type(value).model_fields:
            found.extend(undeclared_members(getattr(value, key), f"{path}.{key}"))
    elif isinstance(value, list | tuple):
        for n, part in enumerate(value):
            found.extend(undeclared_members(part, f"{path}[{n}]"))
    elif isinstance(value, dict):
        for key, part in value.items():
            found.extend(undeclared_members(part, f"{path}.{key}"))
    return found
