"""What an agent does with tool calls (§7, §7.5), as methods of
:class:`~vrt.protocol.server.ServerSession`: start one, stream its arguments, issue it,
report a server tool's progress and end, or fail it. Every step is one of §7.5's phase
transitions (``ToolCalls.advance``), whether or not the client sees them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, TypedDict, Unpack

from mypy_extensions import trait

from ..capabilities import check_gated
from ..ids import new_id
from ..messages import FailureCode, Message, ToolCall, ToolCallDelta, ToolStream, ToolStreamPhase
from .config import ServerConfig
from .events import AgentInput, ToolSettled
from .record import SessionRecord, Turn
from .tools import Call

__all__ = ["AgentToolCalls"]


class _Outcome(TypedDict, total=False):
    """How a call ended, beside ``ok``: its output, or the failure's code and message
    (the members of :class:`ToolSettled` it carries to the agent)."""

    output: Any
    code: FailureCode | None
    message: str | None


@trait  # a mixin: mypyc compiles a class with one base class and any traits
class AgentToolCalls(ABC):
    """Tool calls, agent side: mixed into ServerSession, which provides what follows."""

    record: SessionRecord
    config: ServerConfig
    _tool_stream: bool

    @abstractmethod
    def _send(self, message: Message) -> None:
        """Send a sequenced message of the session."""

    @abstractmethod
    def _event(self, event: AgentInput) -> None:
        """Report an event to the agent."""

    @abstractmethod
    def _turn(self, turn_id: str) -> Turn | None:
        """The turn in progress if it is ``turn_id``."""

    def start_tool_call(
        self,
        turn_id: str,
        name: str,
        *,
        provider_id: str | None = None,
        server_side: bool = False,
    ) -> str | None:
        """A tool call begins (its arguments may stream). Returns its public ``callId``,
        a new one for every call even when the provider reuses its own id (§6.3), or None
        when the turn is over or the client does not host ``name``."""
        turn = self._turn(turn_id)
        if turn is None or (not server_side and name not in self.record.tool_names):
            return None
        call = Call(new_id("c_"), provider_id, name, turn.id, turn.epoch, not server_side)
        self.record.calls.add(call)
        if self._tool_stream:
            self._send(self._stream_message(call, "start"))
        return call.call_id

    def tool_arguments_delta(self, call_id: str, delta: str) -> bool:
        """The next fragment of the arguments' JSON text: a preview (§7.4) or an
        ``arguments-delta`` (§7.5)."""
        call = self.record.calls.advance(call_id, "arguments-delta")
        if call is None:
            return False
        if self._tool_stream:
            self._send(self._stream_message(call, "arguments-delta", delta=delta))
        else:
            self._send(
                ToolCallDelta(
                    call_id=call.call_id,
                    turn_id=call.turn_id,
                    epoch=call.epoch,
                    preview={"argumentsDelta": delta},
                )
            )
        return True

    def issue_tool_call(self, call_id: str, arguments: Any, now: float) -> bool:
        """The arguments are complete: a client call is sent as ``tool.call`` and awaits
        its result (timing out after ``tool_timeout``); a server call starts running."""
        calls = self.record.calls
        call = calls.get(call_id)
        if call is None or not call.may_become("arguments-complete"):
            return False
        if call.client and calls.awaiting_result() >= self.config.max_pending_calls:
            self.fail_tool_call(call_id, "too many tool calls await a result (§11)")
            return False
        calls.advance(call_id, "arguments-complete")
        if self._tool_stream:
            self._send(self._stream_message(call, "arguments-complete", arguments=arguments))
        if call.client:
            call.deadline = now + self.config.tool_timeout
            self._send(
                ToolCall(
                    call_id=call.call_id,
                    name=call.name,
                    arguments=arguments,
                    turn_id=call.turn_id,
                    epoch=call.epoch,
                )
            )
        return True

    def is_client_call(self, call_id: str) -> bool:
        """Whether ``call_id`` is a client tool call still awaiting its result."""
        call = self.record.calls.get(call_id)
        return call is not None and call.client

    def tool_progress(self, call_id: str, progress: Any) -> bool:
        """Progress a running server tool reports; visible only with tool-stream-v1 (§7.5)."""
        call = self.record.calls.get(call_id)
        if call is None or call.client or not call.may_become("progress"):
            return False
        self.record.calls.advance(call_id, "progress")
        if self._tool_stream:
            self._send(self._stream_message(call, "progress", progress=progress))
        return True

    def settle_server_call(self, call_id: str, ok: bool, code: FailureCode | None = None) -> bool:
        """A server tool finished; its output is never sent to the client (§7.5)."""
        call = self.record.calls.get(call_id)
        if call is None or call.client or not call.may_become("settled"):
            return False
        self._settle(call, ok, code=None if ok else (code or "FAILED"))
        return True

    def fail_tool_call(self, call_id: str, message: str) -> bool:
        """The model stopped before completing the arguments: the call is never issued."""
        call = self.record.calls.advance(call_id, "failed")
        if call is None:
            return False
        if self._tool_stream:
            self._send(self._stream_message(call, "failed", message=message))
        return True

    def _settle(self, call: Call, ok: bool, **outcome: Unpack[_Outcome]) -> None:
        self.record.calls.advance(call.call_id, "settled")
        if self._tool_stream:
            # Every caller names the code of a failure (FAILED when the tool gave none).
            failure = {} if ok else {"code": outcome.get("code")}
            self._send(self._stream_message(call, "settled", ok=ok, **failure))
        if call.client:
            self._event(_settled(call, ok, **outcome))

    def _stream_message(self, call: Call, phase: ToolStreamPhase, **members: Any) -> ToolStream:
        check_gated(ToolStream.TYPE, self.record.capabilities)
        return ToolStream(
            call_id=call.call_id,
            name=call.name,
            turn_id=call.turn_id,
            epoch=call.epoch,
            phase=phase,
            **members,
        )


def _settled(call: Call, ok: bool, **outcome: Unpack[_Outcome]) -> ToolSettled:
    return ToolSettled(
        call_id=call.call_id,
        provider_id=call.provider_id,
        name=call.name,
        turn_id=call.turn_id,
        ok=ok,
        **outcome,
    )
