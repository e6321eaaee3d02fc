"""The client's tool calls (§7.1, §7.2): the queue, the one running, and the calls
already answered, so that each call gets exactly one ``tool.result``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from ..messages import ToolCall

__all__ = ["ToolQueue"]

#: Answered call ids remembered to refuse a second answer. A server never reuses a
#: callId (§7.1) and a resent call is a duplicate by seq (§4.3), so this only guards
#: against a second answer; it is bounded so a long session does not grow.
REMEMBERED_ANSWERS: Final = 4096


class ToolQueue:
    """Calls run one at a time, in the order received (§7.1).

    Every operation costs the same however many calls wait: a server that sends tens
    of thousands of calls at once must not make the client's loop quadratic."""

    __slots__ = ("_answered", "_head", "_ids", "_queue", "running")

    def __init__(self) -> None:
        # A list and a head index, not a deque: it holds a few calls at most, and an
        # empty deque costs every session 760 bytes (one block) against 56.
        self._queue: list[ToolCall] = []
        #: ``_queue[:_head]`` are taken; the list is compacted as the head moves on.
        self._head = 0
        #: The ids of the queued calls, for :meth:`known`.
        self._ids: dict[str, None] = {}
        self.running: ToolCall | None = None
        self._answered: dict[str, None] = {}

    @property
    def queued(self) -> int:
        """Calls waiting for the running one to end."""
        return len(self._queue) - self._head

    def known(self, call_id: str) -> bool:
        """Whether the call is queued, running or answered already."""
        running = self.running
        return (
            call_id in self._answered
            or call_id in self._ids
            or (running is not None and running.call_id == call_id)
        )

    def enqueue(self, call: ToolCall) -> None:
        self._queue.append(call)
        self._ids[call.call_id] = None

    def next(self) -> ToolCall | None:
        """The next queued call, taken off the queue, when none is running."""
        queue, head = self._queue, self._head
        if self.running is not None or head == len(queue):
            return None
        call = queue[head]
        head += 1
        if head == len(queue):
            queue.clear()
            head = 0
        elif head >= 64 and head * 2 >= len(queue):
            del queue[:head]  # amortised: each call is moved at most once per halving
            head = 0
        self._head = head
        self._ids.pop(call.call_id, None)
        return call

    def start(self, call: ToolCall) -> None:
        self.running = call

    def finish(self, call_id: str) -> ToolCall | None:
        """The running call, if it is ``call_id``: it is no longer running."""
        running = self.running
        if running is None or running.call_id != call_id:
            return None
        self.running = None
        return running

    def take_queued(self, which: Callable[[int], bool]) -> list[ToolCall]:
        """Remove and return the queued calls whose epoch ``which`` selects, in order."""
        waiting = self._queue[self._head :]
        taken = [call for call in waiting if which(call.epoch)]
        if taken:
            self._queue = [call for call in waiting if not which(call.epoch)]
            self._head = 0
            for call in taken:
                self._ids.pop(call.call_id, None)
        return taken

    def clear(self) -> None:
        self._queue.clear()
        self._head = 0
        self._ids.clear()

    def first_answer(self, call_id: str) -> bool:
        """Whether ``call_id`` may be answered now: only once (§7.2)."""
        if call_id in self._answered:
            return False
        self._answered[call_id] = None
        if len(self._answered) > REMEMBERED_ANSWERS:
            del self._answered[next(iter(self._answered))]
        return True
