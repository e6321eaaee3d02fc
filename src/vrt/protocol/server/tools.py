"""A session's tool calls that have not ended (§7), each in its §7.5 phase.

Every call, client or server, walks the phases of :data:`~vrt.protocol.tables.TOOL_STREAM_NEXT`
whether or not ``tool-stream-v1`` is in effect (the capability only decides whether the
client sees them): a call is *started* while its arguments stream, *issued* from
``arguments-complete`` on, and leaves the book at its terminal phase. An advance the
table does not allow is refused, so a call cannot be issued twice, settled before it
was issued, or failed after it was.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from ..messages import ToolStreamPhase
from ..tables import TOOL_STREAM_NEXT

__all__ = ["Call", "ToolCalls"]

_ISSUED: frozenset[ToolStreamPhase] = frozenset({"arguments-complete", "progress"})


@dataclass(slots=True)
class Call:
    call_id: str
    provider_id: str | None
    name: str
    turn_id: str
    epoch: int
    #: A client tool (sent as ``tool.call``), or one the server runs itself.
    client: bool
    phase: ToolStreamPhase = "start"
    #: When a client call without a result settles as TIMEOUT (§7.2).
    deadline: float | None = None

    @property
    def issued(self) -> bool:
        """The arguments are complete: a client call awaits its result, a server call runs."""
        return self.phase in _ISSUED

    def may_become(self, phase: ToolStreamPhase) -> bool:
        return phase in TOOL_STREAM_NEXT[self.phase]


class ToolCalls:
    """The calls of one session that have not reached a terminal phase, by ``callId``."""

    __slots__ = ("_calls",)

    def __init__(self) -> None:
        self._calls: dict[str, Call] = {}

    def __iter__(self) -> Iterator[Call]:
        return iter(list(self._calls.values()))

    def __len__(self) -> int:
        return len(self._calls)

    def get(self, call_id: str) -> Call | None:
        return self._calls.get(call_id)

    def add(self, call: Call) -> None:
        self._calls[call.call_id] = call

    def advance(self, call_id: str, phase: ToolStreamPhase) -> Call | None:
        """Move the call to ``phase`` if §7.5 allows it from where it is; a terminal
        phase ends it. None when there is no such call or the step is not allowed."""
        call = self._calls.get(call_id)
        if call is None or not call.may_become(phase):
            return None
        if TOOL_STREAM_NEXT[phase]:
            call.phase = phase
        else:
            del self._calls[call_id]
        return call

    def awaiting_result(self) -> int:
        """Client calls issued and waiting for their result."""
        return sum(1 for call in self._calls.values() if call.client and call.issued)

    def of_closed_epoch(self, closed: int) -> list[Call]:
        return [call for call in self._calls.values() if call.epoch <= closed]

    def of_turn(self, turn_id: str) -> list[Call]:
        return [call for call in self._calls.values() if call.turn_id == turn_id]

    def next_deadline(self) -> float | None:
        if not self._calls:
            return None
        deadlines = [c.deadline for c in self._calls.values() if c.deadline is not None]
        return min(deadlines) if deadlines else None

    def due(self, now: float) -> list[Call]:
        """Client calls whose timeout has passed (§7.2)."""
        return [c for c in self._calls.values() if c.deadline is not None and now >= c.deadline]
