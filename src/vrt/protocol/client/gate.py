"""The epoch gate (§6.2) and the tool queue (§7) of a client session, as methods of
:class:`~vrt.protocol.client.ClientSession`: a call of a closed epoch never starts and
is answered INTERRUPTED; calls run one at a time, in order; each gets one result.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Final

from mypy_extensions import trait

from ..capabilities import TOOL_STREAM
from ..messages import FailureCode, Tool, ToolCall, ToolCallDelta, ToolResult, ToolStream
from ..tables import TOOL_STREAM_TERMINAL, ClientInput, ClientState
from .calls import ToolQueue
from .events import (
    CancelTool,
    ClientEvent,
    InterruptedEpoch,
    PlaybackStop,
    RunTool,
    ToolPreview,
    ToolStreamUpdate,
)

__all__ = ["EpochGate"]

#: tool-stream-v1 calls whose last phase is remembered (§7.5).
REMEMBERED_STREAMS: Final = 256


@trait  # a mixin: mypyc compiles a class with one base class and any traits
class EpochGate(ABC):
    """Mixed into ClientSession, which provides what follows."""

    state: ClientState
    tools: dict[str, Tool]
    capabilities: tuple[str, ...]
    observed_epoch: int
    closed_epoch: int | None
    _calls: ToolQueue
    _events: list[ClientEvent]
    _streams: dict[str, tuple[str, ToolStream]]

    @abstractmethod
    def _input(self, input: ClientInput, argument: Any, now: float) -> None:
        """Perform the row of the client table for ``input``."""

    def tool_finished(
        self,
        call_id: str,
        ok: bool,
        now: float,
        *,
        output: Any = None,
        code: FailureCode | None = None,
        message: str | None = None,
    ) -> bool:
        """The running call ended. Sends its result unless it was already answered
        (interrupted), then starts the next call. False when the outcome is discarded."""
        call = self._calls.finish(call_id)
        if call is None:
            return False
        if ok:
            result = ToolResult.success(call.call_id, call.epoch, output)
        else:
            result = ToolResult.failure(call.call_id, call.epoch, code or "FAILED", message)
        sent = self._answer(result, now)
        self._next_call(now)
        return sent

    def _answer(self, result: ToolResult, now: float) -> bool:
        """§7.2: exactly one tool.result per call. False when its call has one already,
        or when the session is over: then nothing is sent (§5.4)."""
        if not self._calls.first_answer(result.call_id) or self.state is ClientState.CLOSED:
            return False
        self._input(ClientInput.SEND, result, now)
        return True

    def _answer_interrupted(self, call: ToolCall, now: float) -> bool:
        interrupted = "the turn was interrupted"
        return self._answer(
            ToolResult.failure(call.call_id, call.epoch, "INTERRUPTED", interrupted), now
        )

    def _on_tool_call(self, call: ToolCall, now: float) -> None:
        self._observe(call.epoch)
        if self._calls.known(call.call_id):
            return
        if self._is_closed(call.epoch):
            # §6.2: never start a call of a closed epoch; answer INTERRUPTED.
            self._answer_interrupted(call, now)
            return
        self._calls.enqueue(call)
        self._next_call(now)

    def _on_preview(self, message: ToolCallDelta, now: float) -> None:
        if not self._is_closed(message.epoch):  # §6.2: SHOULD discard closed previews
            self._events.append(
                ToolPreview(
                    call_id=message.call_id,
                    turn_id=message.turn_id,
                    epoch=message.epoch,
                    preview=message.preview,
                )
            )

    def _on_tool_stream(self, message: ToolStream, now: float) -> None:
        previous = self._streams.get(message.call_id)
        if previous is not None and previous[0] in TOOL_STREAM_TERMINAL:
            return  # after a terminal phase nothing more about the call counts (§7.5)
        if self._is_closed(message.epoch):
            return  # §7.5: SHOULD discard tool.stream of closed epochs
        self._streams[message.call_id] = (message.phase, message)
        if len(self._streams) > REMEMBERED_STREAMS:
            del self._streams[next(iter(self._streams))]
        self._events.append(
            ToolStreamUpdate(
                call_id=message.call_id,
                name=message.name,
                turn_id=message.turn_id,
                epoch=message.epoch,
                phase=message.phase,
                message=message,
            )
        )

    def _observe(self, epoch: int) -> None:
        self.observed_epoch = max(self.observed_epoch, epoch)

    def _is_closed(self, epoch: int) -> bool:
        return self.closed_epoch is not None and epoch <= self.closed_epoch

    def _close_epoch(self, epoch: int, *, local: bool, now: float) -> None:
        if self.closed_epoch is not None and epoch <= self.closed_epoch:
            return  # §6.2: an epoch already closed has no further effect
        self.closed_epoch = epoch
        self._events.append(PlaybackStop(epoch=epoch))
        running = self._calls.running
        if running is not None and self._is_closed(running.epoch):
            # §7.2: answer at once; the tool's later outcome is discarded, and the next
            # call need not wait for it.
            self._calls.finish(running.call_id)
            self._events.append(CancelTool(call_id=running.call_id))
            self._answer_interrupted(running, now)
        for call in self._calls.take_queued(self._is_closed):
            self._answer_interrupted(call, now)
        self._next_call(now)
        if local and TOOL_STREAM in self.capabilities:
            # §7.5: unterminated calls of the closed epoch count as cancelled at once.
            for call_id, (phase, message) in list(self._streams.items()):
                if phase not in TOOL_STREAM_TERMINAL and self._is_closed(message.epoch):
                    self._streams[call_id] = ("cancelled", message)
                    self._events.append(
                        ToolStreamUpdate(
                            call_id=call_id,
                            name=message.name,
                            turn_id=message.turn_id,
                            epoch=message.epoch,
                            phase="cancelled",
                            message=None,
                        )
                    )
        self._events.append(InterruptedEpoch(epoch=epoch, local=local))

    def _next_call(self, now: float) -> None:
        """§7.1: start the next queued call once the previous one has its result."""
        while (call := self._calls.next()) is not None:
            if self._is_closed(call.epoch):
                self._answer_interrupted(call, now)
            elif call.name not in self.tools:
                missing = f"no tool named {call.name!r}"
                self._answer(ToolResult.failure(call.call_id, call.epoch, "FAILED", missing), now)
            else:
                self._calls.start(call)
                self._events.append(
                    RunTool(
                        call_id=call.call_id,
                        name=call.name,
                        arguments=call.arguments,
                        turn_id=call.turn_id,
                        epoch=call.epoch,
                    )
                )
                return
