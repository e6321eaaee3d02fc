"""The base of the core's state machines (:class:`~vrt.protocol.server.ServerConnection`,
:class:`~vrt.protocol.client.ClientSession`, a server session's
:class:`~vrt.protocol.server.channel.SessionChannel`): a state, the compiled rows of that
state (:meth:`.transitions.Transitions.compile`), and the step that performs the row for an
input.
Apart from the tables (:mod:`.tables`, data) so that this, which runs for every input,
can be compiled with mypyc while the tables' msgspec structs stay interpreted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from enum import StrEnum
from typing import Any, ClassVar, Generic, Protocol, TypeAlias, TypeVar

__all__ = ["Machine"]

S = TypeVar("S", bound=StrEnum)
In = TypeVar("In", bound=StrEnum)

#: What performs a row's action: ``(machine, argument, now)``.
Action: TypeAlias = Callable[[Any, Any, float], None]


class Table(Protocol):
    """A table as a machine compiles it (:class:`.transitions.Transitions`, which this
    module does not import: the tables stay interpreted)."""

    def compile(
        self, states: Iterable[Any], actions: Mapping[Any, Action]
    ) -> Mapping[Any, Mapping[Any, tuple[Action, Any]]]: ...


class Machine(Generic[S, In]):
    """A state machine driven by a table: its state, the compiled rows of that state,
    and :meth:`_input`, which performs the row for an input (its action, then its next
    state). A subclass names the method performing each action (:meth:`_actions`) and
    compiles its table once (:meth:`compile_table`)."""

    __slots__ = ("_rows", "state")

    compiled: ClassVar[Mapping[Any, Mapping[Any, tuple[Action, Any]]]]
    state: S
    _rows: Mapping[In, tuple[Action, S | None]]

    @classmethod
    def compile_table(cls, table: Table, states: Iterable[S]) -> None:
        """Compile ``table`` for this class, once: per state, input → (the method
        performing the row's action, next state)."""
        cls.compiled = table.compile(states, cls._actions())

    @classmethod
    def _actions(cls) -> Mapping[Any, Action]:
        """The method performing each action of the table."""
        raise NotImplementedError

    def _enter(self, state: S) -> None:
        self.state = state
        self._rows = self.compiled[state]

    def _input(self, input: In, argument: Any, now: float) -> None:
        """Perform the row of the table for ``input`` in the current state."""
        action, next_state = self._rows[input]
        action(self, argument, now)
        if next_state is not None and next_state is not self.state:
            # _enter, inline: this runs for every input.
            self.state = next_state
            self._rows = self.compiled[next_state]
