"""The base of the core's state machines (:class:`~vrt.protocol.server.ServerConnection`,
:class:`~vrt.protocol.client.ClientSession`): a state, the compiled rows of that state
(:meth:`.tables.Transitions.compile`), and the step that performs the row for an input.
Apart from the tables (:mod:`.tables`, data) so that this, which runs for every input,
can be compiled with mypyc while the tables' msgspec structs stay interpreted.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from enum import StrEnum
from typing import Any, ClassVar, Generic, TypeVar

__all__ = ["Machine"]

S = TypeVar("S", bound=StrEnum)
In = TypeVar("In", bound=StrEnum)


class Machine(Generic[S, In]):
    """A state machine driven by a table: its state, the compiled rows of that state,
    and :meth:`_input`, which performs the row for an input (its action, then its next
    state). A subclass sets ``compiled`` once, from its table and its actions."""

    compiled: ClassVar[Mapping[Any, Mapping[Any, tuple[Callable[[Any, Any, float], None], Any]]]]
    state: S
    _rows: Mapping[In, tuple[Callable[[Any, Any, float], None], S | None]]

    def _enter(self, state: S) -> None:
        self.state = state
        self._rows = self.compiled[state]

    def _input(self, input: In, argument: Any, now: float) -> None:
        """Perform the row of the table for ``input`` in the current state."""
        action, next_state = self._rows[input]
        action(self, argument, now)
        if next_state is not None and next_state is not self.state:
            self._enter(next_state)
