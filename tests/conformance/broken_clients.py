"""Deliberately broken clients for the client suite's own tests.

    python tests/conformance/broken_clients.py VARIANT

Each variant is the reference client (:mod:`vrt.conformance.reference_client`) with one
rule of the protocol broken, by a subclass of the SDK's sans-I/O
:class:`~vrt.protocol.client.ClientSession` or of the reference client itself. The
suite must fail the checks that judge that rule.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable
from typing import Any

from vrt.client import VrtClient
from vrt.conformance.reference_client import Player, ReferenceClient, Settings
from vrt.protocol.client import ClientSession, RunTool
from vrt.protocol.messages import FailureCode, Playback, ToolCall, ToolResult, UserText
from vrt.protocol.streams import IncomingStream, OutgoingStream
from vrt.protocol.tables import ClientInput


class NoEpochGate(ClientSession):
    """Runs calls of closed epochs (and plays their audio): no epoch is ever closed."""

    def _is_closed(self, epoch: int) -> bool:
        return False


class AnswersTwice(ClientSession):
    """Sends every tool.result twice, as two sequenced messages."""

    def _answer(
        self,
        call: ToolCall,
        ok: bool,
        now: float,
        *,
        output: Any = None,
        code: FailureCode | None = None,
        message: str | None = None,
    ) -> bool:
        sent = super()._answer(call, ok, now, output=output, code=code, message=message)
        if sent:
            again = (
                ToolResult.success(call.call_id, call.epoch, output)
                if ok
                else ToolResult.failure(call.call_id, call.epoch, code or "FAILED", message)
            )
            self._input(ClientInput.SEND, again, now)
        return sent


class _EveryMessageIsNew(IncomingStream):
    def receive(self, seq: int, now: float) -> bool:
        super().receive(seq, now)
        return True


class NoDedupe(ClientSession):
    """Handles a resent message again: no seq check (§4.3) and no callId memory."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.incoming = _EveryMessageIsNew()

    def _on_tool_call(self, call: ToolCall, now: float) -> None:
        if self._is_closed(call.epoch):
            self._answer_interrupted(call, now)
            return
        self._calls.enqueue(call)
        self._next_call(now)

    def _answer(
        self,
        call: ToolCall,
        ok: bool,
        now: float,
        *,
        output: Any = None,
        code: FailureCode | None = None,
        message: str | None = None,
    ) -> bool:
        self._calls._answered.pop(call.call_id, None)
        return super()._answer(call, ok, now, output=output, code=code, message=message)


class Concurrent(ClientSession):
    """Starts every call at once instead of one at a time."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._many: dict[str, ToolCall] = {}

    def _next_call(self, now: float) -> None:
        while (call := self._calls.next()) is not None:
            if self._is_closed(call.epoch):
                self._answer_interrupted(call, now)
            elif call.name not in self.tools:
                self._answer(call, False, now, code="FAILED", message="no such tool")
            else:
                self._many[call.call_id] = call
                self._events.append(
                    RunTool(
                        call_id=call.call_id,
                        name=call.name,
                        arguments=call.arguments,
                        turn_id=call.turn_id,
                        epoch=call.epoch,
                    )
                )

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
        call = self._many.pop(call_id, None)
        if call is None:
            return False
        return self._answer(call, ok, now, output=output, code=code, message=message)


class _SendsEarly(ClientSession):
    """Writes sequenced messages whatever the state, and says its lines on connecting."""

    early: tuple[str, ...] = ()

    def connection_made(self, now: float) -> None:
        first = self.session_id is None and self.outgoing.last_seq == 0
        super().connection_made(now)
        if first:
            for line in self.early:
                self._write(self.outgoing.send(UserText(text=line)), now)


class _ForgetsUnacked(OutgoingStream):
    def resend_after(self, resume_from: int) -> list[bytes] | None:
        return [] if resume_from <= self.last_seq else None


class NoResend(ClientSession):
    """Resends nothing on a resume: what the server missed is lost."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.outgoing = _ForgetsUnacked(self.outgoing.max_kept)


class OverReports(ClientSession):
    """Reports playback as given, not capped at what was received."""

    def playback(self, item_id: str, played_ms: float, now: float) -> int:
        self._input(ClientInput.SEND, Playback(item_id=item_id, played_ms=int(played_ms)), now)
        return int(played_ms)


class _WallClockPlayer(Player):
    """Counts an item as playing from its first chunk until stopped, buffered or not."""

    def __init__(self) -> None:
        super().__init__()
        self._first: dict[str, float] = {}

    def add(self, item_id: str, seconds: float, now: float) -> None:
        self._first.setdefault(item_id, now)

    def stop(self, now: float) -> list[tuple[str, int]]:
        played = [(item, int((now - t) * 1000)) for item, t in self._first.items()]
        self._first.clear()
        return played


class Broken(ReferenceClient):
    """The reference client with another ClientSession class in its VrtClient."""

    session_class: type[ClientSession] = ClientSession

    def make_client(self) -> VrtClient:
        client = super().make_client()
        old = client.core
        client.core = self.session_class(
            tools=tuple(old.tools.values()),
            capabilities=old.offered_capabilities,
            auth=old.auth,
            ping_interval=old.ping_interval,
        )
        return client


class ReplaysAfterResumeFailed(ReferenceClient):
    """Opens a new session after RESUME_FAILED and sends its old messages into it."""

    async def open_session(self) -> VrtClient:
        self.said = False
        return await super().open_session()


class TextBeforeReady(Broken):
    def __init__(self, settings: Settings) -> None:
        class Early(_SendsEarly):
            early = settings.say

        self.session_class = Early
        super().__init__(Settings(**{**settings.__dict__, "say": ()}))


def _with(session_class: type[ClientSession]) -> Callable[[Settings], ReferenceClient]:
    def make(settings: Settings) -> ReferenceClient:
        client = Broken(settings)
        client.session_class = session_class
        return client

    return make


def _over_reporting(settings: Settings) -> ReferenceClient:
    client = Broken(settings)
    client.session_class = OverReports
    client.player = _WallClockPlayer()
    return client


VARIANTS: dict[str, Callable[[Settings], ReferenceClient]] = {
    "closed-epoch-runs": _with(NoEpochGate),
    "answers-twice": _with(AnswersTwice),
    "no-dedupe": _with(NoDedupe),
    "replays-after-resume-failed": ReplaysAfterResumeFailed,
    "text-before-ready": TextBeforeReady,
    "concurrent-calls": _with(Concurrent),
    "no-resend": _with(NoResend),
    "playback-overreports": _over_reporting,
}


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in VARIANTS:
        print(f"usage: broken_clients.py {{{','.join(VARIANTS)}}}", file=sys.stderr)
        return 2
    client = VARIANTS[argv[0]](Settings.from_env(os.environ))
    return asyncio.run(client.run())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
