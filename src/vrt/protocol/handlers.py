"""Handlers of sequenced messages, looked up per session class.

A session calls a method per message type. A dict of bound methods per session would
cost some 860 bytes each and make every session a reference cycle (the session, its
dict, a method, the session), which only the cyclic garbage collector frees: a session
that ends or moves to another process would wait for it (``docs/reliability.md``,
"Memory, and a defect it found"). So the table holds functions, one table per class,
found by name so that a subclass's override is the one called.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeAlias

from .messages import Message

__all__ = ["Handler", "HandlerTables"]

#: A handler as a function: ``(session, message, now)``.
Handler: TypeAlias = Callable[[Any, Any, float], None]


class HandlerTables:
    """Per session class, the functions its handler names resolve to."""

    __slots__ = ("_names", "_tables")

    def __init__(self, names: Mapping[type[Message], str]) -> None:
        self._names = dict(names)
        self._tables: dict[type, dict[type[Message], Handler]] = {}

    def of(self, cls: type) -> dict[type[Message], Handler]:
        """The table of ``cls``, made on first use."""
        table = self._tables.get(cls)
        if table is None:
            table = {message: getattr(cls, name) for message, name in self._names.items()}
            self._tables[cls] = table
        return table
