"""A state table as the core holds it: :class:`Row` per line of the spec's tables, the
rows as :class:`Transitions` (looked up per state and input, compiled per state for a
:class:`~vrt.protocol.machine.Machine`) and their :func:`markdown`. The tables
themselves, as data, are :mod:`vrt.protocol.tables`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import Generic, TypeVar

import msgspec

from .errors import LocalProtocolError

__all__ = ["CompiledRows", "Row", "Transitions", "markdown"]

S = TypeVar("S", bound=StrEnum)
In = TypeVar("In", bound=StrEnum)
A = TypeVar("A", bound=StrEnum)
F = TypeVar("F")


class Row(msgspec.Struct, Generic[S, In, A], frozen=True, kw_only=True):
    """One line of a table: in ``state``, on ``input``, do ``action`` and go to ``next``
    (``None``: the state is unchanged). ``state`` None means every live state (the
    spec's "any")."""

    state: S | None
    input: In
    action: A
    next: S | None
    section: str


class Transitions(Generic[S, In, A]):
    """A table compiled for lookups: per state, input → row."""

    __slots__ = ("_by_state", "rows")

    def __init__(self, rows: Iterable[Row[S, In, A]], live: Iterable[S]) -> None:
        self.rows = tuple(rows)
        live = tuple(live)
        by_state: dict[S, dict[In, Row[S, In, A]]] = {}
        for row in self.rows:  # specific rows first: "any" never overrides one
            if row.state is not None:
                inputs = by_state.setdefault(row.state, {})
                if row.input in inputs:
                    raise ValueError(f"two rows for ({row.state}, {row.input})")
                inputs[row.input] = row
        for row in self.rows:
            if row.state is None:
                for state in live:
                    by_state.setdefault(state, {}).setdefault(row.input, row)
        self._by_state = by_state

    def for_state(self, state: S) -> Mapping[In, Row[S, In, A]]:
        """Every row of ``state``, by input."""
        return self._by_state.get(state, {})

    def row(self, state: S, input: In) -> Row[S, In, A]:
        """The row for ``input`` in ``state``; LocalProtocolError when there is none."""
        try:
            return self._by_state[state][input]
        except KeyError:
            raise LocalProtocolError(f"{input} is not possible in state {state} (§5.1)") from None

    def compile(
        self, states: Iterable[S], actions: Mapping[A, F]
    ) -> dict[S, CompiledRows[In, F, S]]:
        """Per state, input → (what performs the row's action, next state): what a
        state machine looks up for every input. A missing row raises LocalProtocolError."""
        return {
            state: CompiledRows(
                state,
                {
                    input: (actions[row.action], row.next)
                    for input, row in self.for_state(state).items()
                },
            )
            for state in states
        }


class CompiledRows(dict[In, tuple[F, S | None]]):
    """One state's rows, compiled: input → (action, next state)."""

    def __init__(self, state: S, rows: Mapping[In, tuple[F, S | None]]) -> None:
        super().__init__(rows)
        self.state = state

    def __missing__(self, input: In) -> tuple[F, S | None]:
        raise LocalProtocolError(f"{input} is not possible in state {self.state} (§5.1)")


def markdown(table: Transitions[S, In, A], state_title: str) -> str:
    """``table`` as a Markdown table, rows in their order (docs/architecture.md)."""
    lines = [
        f"| {state_title} | Input | Action | Next state | § |",
        "|---|---|---|---|---|",
    ]
    for row in table.rows:
        if row.section == "—":
            continue  # a closed state's "nothing" rows are summarised below the table
        state = row.state.value if row.state is not None else "any"
        next_state = row.next.value if row.next is not None else "unchanged"
        lines.append(
            f"| {state} | {row.input.value} | {row.action.value} | {next_state} | {row.section} |"
        )
    return "\n".join(lines)
