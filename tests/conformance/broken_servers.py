"""Deliberately broken vRT servers: our server with one rule of the protocol broken.

Each :class:`Variant` patches the server core (:mod:`vrt.protocol.server`) or the
server (:mod:`vrt.server.app`) for as long as its :meth:`Variant.patched` context is
open, and names the checks of the server conformance suite that must catch it. The
suite's own tests run those checks against each variant and assert that they fail.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import vrt.protocol.server.session as core
from vrt.protocol import ids
from vrt.protocol.errors import ErrorCode
from vrt.protocol.messages import Error, Interrupt, ToolCallDelta, ToolResult
from vrt.protocol.server import ServerSession
from vrt.protocol.server.tools import ToolCalls
from vrt.protocol.streams import IncomingStream, OutgoingStream
from vrt.server import app
from vrt.server.app import VrtServer
from vrt.server.websocket import ClientConnection

__all__ = ["VARIANTS", "Variant"]


@dataclass(frozen=True)
class Variant:
    """One broken server: what it breaks, the checks that catch it, how to build it."""

    name: str
    breaks: str
    caught_by: tuple[str, ...]
    #: Patches applied while the variant runs (each a context manager factory).
    patches: tuple[Callable[[], contextlib.AbstractContextManager[Any]], ...] = ()
    server_class: type[VrtServer] = VrtServer
    #: Run with two principals (for the checks that need --auth and --auth-other).
    auth: bool = False
    #: Checks run as controls: they must still pass against the variant.
    controls: tuple[str, ...] = field(default=())

    @contextlib.contextmanager
    def patched(self) -> Iterator[None]:
        with contextlib.ExitStack() as stack:
            for patch in self.patches:
                stack.enter_context(patch())
            yield


def _session_class(
    cls: type[ServerSession],
) -> Callable[[], contextlib.AbstractContextManager[Any]]:
    """Make the server build sessions of ``cls``."""
    return lambda: mock.patch.object(app, "ServerSession", cls)


# --- 1. no deduplication (§4.3) -------------------------------------------------------


class _NoDedupeStream(IncomingStream):
    """Reports every sequenced message as new: duplicates are handled again."""

    def receive(self, seq: int, now: float) -> bool:
        super().receive(seq, now)
        return True


# --- 2. callIds reused (§7.1) ---------------------------------------------------------


def _reused_ids() -> contextlib.AbstractContextManager[Any]:
    original = ids.new_id
    cycle = itertools.cycle(["c_reused-one", "c_reused-two"])

    def new_id(prefix: str) -> str:
        return next(cycle) if prefix == "c_" else original(prefix)

    return mock.patch("vrt.protocol.server.agent_tools.new_id", new_id)


# --- 3. previews even with tool-stream-v1 (§7.4) --------------------------------------


class _PreviewAlways(ServerSession):
    """Sends tool.call.delta previews even when tool-stream-v1 is in effect."""

    def tool_arguments_delta(self, call_id: str, delta: str) -> bool:
        call = self.record.calls.get(call_id)
        sent = super().tool_arguments_delta(call_id, delta)
        if sent and call is not None and self._tool_stream:
            self._send(
                ToolCallDelta(
                    call_id=call.call_id,
                    turn_id=call.turn_id,
                    epoch=call.epoch,
                    preview={"argumentsDelta": delta},
                )
            )
        return sent


# --- 4. a foreign resume answered unlike an unknown one (§5.3) ------------------------


class _RevealingServer(VrtServer):
    """Tells a foreign principal that the session exists."""

    async def _resume(
        self, connection: ClientConnection, session_id: str, principal: str | None
    ) -> None:
        session = await self.store.get(session_id)
        if session is not None and session.principal != principal:
            connection.protocol._refuse(
                ErrorCode.RESUME_FAILED, "the session belongs to another principal", 4404
            )
            self._pump(connection)
            return
        await super()._resume(connection, session_id, principal)


# --- 5. nothing resent after a resume (§5.4) ------------------------------------------


class _NoResendStream(OutgoingStream):
    """Agrees to every possible resume but resends nothing."""

    def resend_after(self, resume_from: int) -> list[bytes] | None:
        return [] if super().resend_after(resume_from) is not None else None


# --- 6. errors with seq 0 after ready (§4.1) ------------------------------------------


class _UnsequencedErrors(ServerSession):
    """Sends its errors with seq 0 even once the session is bound."""

    def send_error(self, code: str, message: str, recoverable: bool) -> None:
        self.send_transient(Error(code=code, message=message, recoverable=recoverable))


# --- 7. a result taken for another call (§7.2) ----------------------------------------


class _ResultByName(ServerSession):
    """Takes a result with an unknown or settled callId for the oldest pending call."""

    def _on_tool_result(self, result: ToolResult, now: float) -> None:
        if self.record.calls.get(result.call_id) is None:
            pending = [c for c in self.record.calls if c.client]
            if pending:
                result = ToolResult(
                    call_id=pending[0].call_id,
                    epoch=pending[0].epoch,
                    ok=result.ok,
                    output=result.output,
                    code=result.code,
                    message=result.message,
                )
        super()._on_tool_result(result, now)


# --- 8. an interrupted epoch's calls kept open (§6.2, §7.5) ---------------------------


class _KeepsInterruptedCalls(ServerSession):
    """Closes the epoch on interruption, but its tool calls stay pending: a late result
    still settles them (the closed epoch's call plays on)."""

    def _interrupt_in_flight(self, reason: str, *, tell_agent: bool = True) -> bool:
        calls, self.record.calls = self.record.calls, ToolCalls()
        try:
            return super()._interrupt_in_flight(reason, tell_agent=tell_agent)
        finally:
            self.record.calls = calls


# --- 9. stale interrupts honoured (messages.md, §6.2) ---------------------------------


class _StaleInterrupts(ServerSession):
    """Interrupts the response in flight whatever epoch the interrupt names."""

    def _on_interrupt(self, message: Interrupt, now: float) -> None:
        self._interrupt_in_flight(message.reason)


VARIANTS: tuple[Variant, ...] = (
    Variant(
        "no-dedupe",
        "handles a duplicate sequenced message again (§4.3)",
        (
            "dedupe-duplicate-text-once",
            "dedupe-duplicate-context-not-applied",
            "resume-client-resends-deduped",
        ),
        patches=(lambda: mock.patch.object(core, "IncomingStream", _NoDedupeStream),),
        controls=("seq-sequenced-consecutive",),
    ),
    Variant(
        "reused-call-id",
        "reuses a callId within a session (§7.1)",
        ("tool-call-ids-unique",),
        patches=(_reused_ids,),
        controls=("tool-call-declared",),
    ),
    Variant(
        "preview-with-tool-stream",
        "sends tool.call.delta although tool-stream-v1 is in effect (§7.4)",
        ("tool-stream-no-preview",),
        patches=(_session_class(_PreviewAlways),),
        controls=("tool-stream-client-call",),
    ),
    Variant(
        "revealing-foreign-resume",
        "answers a foreign resume unlike an unknown one (§5.3)",
        ("auth-foreign-resume-like-unknown",),
        server_class=_RevealingServer,
        auth=True,
        controls=("resume-unknown-session",),
    ),
    Variant(
        "no-resend",
        "resends nothing after a resume (§5.4)",
        ("resume-resends-after-resume-from", "resume-pending-tool-call", "resume-replay-same-ids"),
        patches=(lambda: mock.patch.object(core, "OutgoingStream", _NoResendStream),),
        controls=("resume-resumed-from-last-seq",),
    ),
    Variant(
        "unsequenced-errors",
        "sends errors with seq 0 after ready (§4.1)",
        (
            "seq-error-sequenced-in-session",
            "table-duplicate-hello-open",
            "audio-malformed-recoverable",
            "vectors-client-type",
            "agent-error-recoverable",
        ),
        patches=(_session_class(_UnsequencedErrors),),
        controls=("seq-error-zero-before-session",),
    ),
    Variant(
        "result-by-name",
        "takes an unknown or late tool.result for another pending call (§7.2)",
        (
            "tool-result-unknown-ignored",
            "tool-result-late-ignored",
            "tool-result-duplicate-ignored",
        ),
        patches=(_session_class(_ResultByName),),
        controls=("tool-call-declared",),
    ),
    Variant(
        "keeps-interrupted-calls",
        "keeps an interrupted epoch's tool calls pending: a late result settles them (§6.2, §7.5)",
        ("tool-stream-cancelled-on-interrupt",),
        patches=(_session_class(_KeepsInterruptedCalls),),
        controls=("interrupt-observed-epoch",),
    ),
    Variant(
        "stale-interrupt",
        "interrupts the response in flight on an interrupt naming an older epoch",
        ("interrupt-stale-no-effect",),
        patches=(_session_class(_StaleInterrupts),),
        controls=("interrupt-observed-epoch",),
    ),
)
