"""A session's tool calls (§7, §7.5), as a part of it (``ServerSession.tool_calls``).

The agent starts a call, streams its arguments, issues it, reports a server tool's
progress and end, or fails it; the session settles client calls with the client's
result (§7.2), their timeout, or an interruption (§6.2). Every step is one of §7.5's
phase transitions (``ToolCalls.advance``), whether or not the client sees them.
"""

from __future__ import annotations

from typing import Any, TypedDict, Unpack

from ..capabilities import TOOL_STREAM, check_gated
from ..ids import new_id
from ..messages import (
    UNSET,
    FailureCode,
    ToolCall,
    ToolCallDelta,
    ToolResult,
    ToolStream,
    ToolStreamPhase,
)
from .channel import SessionChannel
from .config import ServerConfig
from .events import ToolSettled
from .record import SessionRecord
from .tools import Call

__all__ = ["AgentToolCalls"]


class _Outcome(TypedDict, total=False):
    """How a call ended, beside ``ok``: its output, or the failure's code and message
    (the members of :class:`ToolSettled` it carries to the agent)."""

    output: Any
    code: FailureCode | None
    message: str | None


class AgentToolCalls:
    """The tool calls of one session: what they send goes through its channel."""

    __slots__ = ("_channel", "_config", "_record", "_tool_stream")

    def __init__(self, channel: SessionChannel, record: SessionRecord, config: ServerConfig):
        self._channel = channel
        self._record = record
        self._config = config
        #: tool-stream-v1 is in effect: every phase is sent as ``tool.stream`` (§7.5).
        self._tool_stream = TOOL_STREAM in record.capabilities

    # -- the agent's side --

    def start(
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
        record = self._record
        turn = record.current_turn(turn_id)
        if turn is None or (not server_side and name not in record.tool_names):
            return None
        call = Call(new_id("c_"), provider_id, name, turn.id, turn.epoch, not server_side)
        record.calls.add(call)
        if self._tool_stream:
            self._channel.send(self._stream_message(call, "start"))
        return call.call_id

    def arguments_delta(self, call_id: str, delta: str) -> bool:
        """The next fragment of the arguments' JSON text: a preview (§7.4) or an
        ``arguments-delta`` (§7.5)."""
        call = self._record.calls.advance(call_id, "arguments-delta")
        if call is None:
            return False
        if self._tool_stream:
            self._channel.send(self._stream_message(call, "arguments-delta", delta=delta))
        else:
            self._channel.send(
                ToolCallDelta(
                    call_id=call.call_id,
                    turn_id=call.turn_id,
                    epoch=call.epoch,
                    preview={"argumentsDelta": delta},
                )
            )
        return True

    def issue(self, call_id: str, arguments: Any, now: float) -> bool:
        """The arguments are complete: a client call is sent as ``tool.call`` and awaits
        its result (timing out after ``tool_timeout``); a server call starts running."""
        calls = self._record.calls
        call = calls.get(call_id)
        if call is None or not call.may_become("arguments-complete"):
            return False
        config = self._config
        if call.client and calls.awaiting_result() >= config.max_pending_calls:
            self.fail(call_id, "too many tool calls await a result (§11)")
            return False
        calls.advance(call_id, "arguments-complete")
        channel = self._channel
        if self._tool_stream:
            channel.send(self._stream_message(call, "arguments-complete", arguments=arguments))
        if call.client:
            call.deadline = now + config.tool_timeout
            channel.send(
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
        call = self._record.calls.get(call_id)
        return call is not None and call.client

    def progress(self, call_id: str, progress: Any) -> bool:
        """Progress a running server tool reports; visible only with tool-stream-v1 (§7.5)."""
        calls = self._record.calls
        call = calls.get(call_id)
        if call is None or call.client or not call.may_become("progress"):
            return False
        calls.advance(call_id, "progress")
        if self._tool_stream:
            self._channel.send(self._stream_message(call, "progress", progress=progress))
        return True

    def settle_server_call(self, call_id: str, ok: bool, code: FailureCode | None = None) -> bool:
        """A server tool finished; its output is never sent to the client (§7.5)."""
        call = self._record.calls.get(call_id)
        if call is None or call.client or not call.may_become("settled"):
            return False
        self._settle(call, ok, code=None if ok else (code or "FAILED"))
        return True

    def fail(self, call_id: str, message: str) -> bool:
        """The model stopped before completing the arguments: the call is never issued."""
        call = self._record.calls.advance(call_id, "failed")
        if call is None:
            return False
        if self._tool_stream:
            self._channel.send(self._stream_message(call, "failed", message=message))
        return True

    # -- the session's side --

    def receive_result(self, result: ToolResult) -> None:
        """The client's ``tool.result`` (§7.2): it settles its call, once."""
        call = self._record.calls.get(result.call_id)
        if call is None or not call.client or not call.issued:
            return  # §7.2: unknown or already settled: ignored
        if result.ok:
            self._settle(call, True, output=result.output)
        else:
            code = result.code if result.code is not UNSET else "FAILED"
            message = result.message if isinstance(result.message, str) else None
            self._settle(call, False, code=code, message=message)

    def time_out(self, now: float) -> None:
        """Client calls past their ``tool_timeout`` settle as TIMEOUT (§7.2)."""
        for call in self._record.calls.due(now):
            self._settle(call, False, code="TIMEOUT", message="no result arrived in time")

    def end_turn(self, turn_id: str) -> None:
        """The turn ends: its calls not yet issued fail (their arguments can no longer
        complete)."""
        for call in self._record.calls.of_turn(turn_id):
            if not call.issued:
                self.fail(call.call_id, "the turn ended before the call was issued")

    def interrupt(self, closed: int) -> None:
        """§6.2: epoch ``closed`` closed; its calls are cancelled, and the client calls
        already issued settle as INTERRUPTED."""
        calls = self._record.calls
        for call in calls.of_closed_epoch(closed):
            was_issued = call.issued
            calls.advance(call.call_id, "cancelled")
            if self._tool_stream:
                self._channel.send(self._stream_message(call, "cancelled"))
            if call.client and was_issued:
                self._channel.report(
                    _settled(call, False, code="INTERRUPTED", message="the turn was interrupted")
                )

    # -- internals --

    def _settle(self, call: Call, ok: bool, **outcome: Unpack[_Outcome]) -> None:
        self._record.calls.advance(call.call_id, "settled")
        if self._tool_stream:
            # Every caller names the code of a failure (FAILED when the tool gave none).
            failure = {} if ok else {"code": outcome.get("code")}
            self._channel.send(self._stream_message(call, "settled", ok=ok, **failure))
        if call.client:
            self._channel.report(_settled(call, ok, **outcome))

    def _stream_message(self, call: Call, phase: ToolStreamPhase, **members: Any) -> ToolStream:
        check_gated(ToolStream.TYPE, self._record.capabilities)
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
