"""Clients that are not ours as it is, for the client suite's own tests.

    python tests/conformance/broken_clients.py VARIANT

Each variant is the reference client (:mod:`vrt.conformance.reference_client`) changed
by a subclass of the SDK's sans-I/O :class:`~vrt.protocol.client.ClientSession` or of
the reference client itself. A broken variant breaks one rule of the protocol: the suite
must fail the checks that judge it. A correct variant is a client unlike ours that still
conforms (it pings before ready, plays no audio, has no microphone): the suite must not
fail it.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Callable
from typing import Any

from vrt.audio import frame_bytes, tone
from vrt.client import VrtClient
from vrt.conformance.reference_client import (
    INPUT_PREFERENCE,
    Player,
    ReferenceClient,
    Settings,
)
from vrt.protocol.client import CancelTool, ClientEvent, ClientSession, RunTool
from vrt.protocol.codec import Decoded, Invalid, encode
from vrt.protocol.messages import (
    FailureCode,
    Interrupt,
    InterruptReason,
    Ping,
    Playback,
    ToolCall,
    ToolResult,
    UserText,
)
from vrt.protocol.streams import IncomingStream, OutgoingStream
from vrt.protocol.tables import ClientInput


class NoEpochGate(ClientSession):
    """Runs calls of closed epochs (and plays their audio): no epoch is ever closed."""

    def _is_closed(self, epoch: int) -> bool:
        return False


class AnswersTwice(ClientSession):
    """Sends every tool.result twice, as two sequenced messages."""

    def _answer(self, result: ToolResult, now: float) -> bool:
        sent = super()._answer(result, now)
        if sent:
            self._input(ClientInput.SEND, result, now)
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

    def _answer(self, result: ToolResult, now: float) -> bool:
        self._calls._answered.pop(result.call_id, None)
        return super()._answer(result, now)


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
                failed = ToolResult.failure(call.call_id, call.epoch, "FAILED", "no such tool")
                self._answer(failed, now)
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
        if ok:
            result = ToolResult.success(call.call_id, call.epoch, output)
        else:
            result = ToolResult.failure(call.call_id, call.epoch, code or "FAILED", message)
        return self._answer(result, now)


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
            input=old.preferred_input,
            output=old.preferred_output,
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


class _AnyVersion:
    """A decoder that reads every message as if its v were 1."""

    def __init__(self, decoder: Any) -> None:
        self._decoder = decoder

    def decode(self, data: bytes | str) -> Decoded | Invalid:
        try:
            value = json.loads(data)
        except ValueError:
            return self._decoder.decode(data)
        if isinstance(value, dict):
            value["v"] = 1
            data = json.dumps(value)
        return self._decoder.decode(data)


class AcceptsAnyVersion(ClientSession):
    """Acts on messages whose v is 2, or absent (§3.1)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._decoder = _AnyVersion(self._decoder)  # type: ignore[assignment]


class ForgetsClosedEpochs(ClientSession):
    """Forgets its closed epoch when it resumes: a call of an epoch closed before the
    drop, resent after the resume, runs (§6.2)."""

    def connection_made(self, now: float) -> None:
        if self.session_id is not None:
            self.closed_epoch = None
        super().connection_made(now)


class NoCancelSignal(ClientSession):
    """Answers a running call of a closed epoch INTERRUPTED but lets its tool run on:
    no cancellation signal (§6.2)."""

    def take_events(self) -> list[ClientEvent]:
        return [e for e in super().take_events() if not isinstance(e, CancelTool)]


class InterruptWithoutClosing(ClientSession):
    """Sends interrupt for the user's interruption but closes nothing locally: it waits
    for the server's interrupted (§6.2)."""

    def interrupt(self, reason: InterruptReason, now: float) -> int:
        self._input(ClientInput.SEND, Interrupt(epoch=self.observed_epoch, reason=reason), now)
        return self.observed_epoch


class InterruptsAnOlderEpoch(ClientSession):
    """Names the epoch before the observed one in its interrupt (§6.2)."""

    def interrupt(self, reason: InterruptReason, now: float) -> int:
        epoch = max(0, self.observed_epoch - 1)
        self._close_epoch(self.observed_epoch, local=True, now=now)
        self._input(ClientInput.SEND, Interrupt(epoch=epoch, reason=reason), now)
        return epoch


class PingsBeforeReady(ClientSession):
    """Pings right behind its hello, before ready (§4.4 allows it): correct."""

    def connection_made(self, now: float) -> None:
        super().connection_made(now)
        self._write(encode(Ping(), 0), now)


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


class CredentialInUrl(ReferenceClient):
    """Puts VRT_AUTH in the URL's query as well as in hello.auth (§2.1, §5.3)."""

    def make_client(self) -> VrtClient:
        client = super().make_client()
        if self.settings.auth:
            client.url = f"{client.url}/?token={self.settings.auth}"
        return client


class UnregisteredCapability(ReferenceClient):
    """Offers acme-turbo, neither registered nor x- (§3.4)."""

    def make_client(self) -> VrtClient:
        client = super().make_client()
        offered = client.core.offered_capabilities
        client.core.offered_capabilities = (*offered, "acme-turbo")
        return client


class IgnoresInputFormat(ReferenceClient):
    """Sends input audio in its preferred format, whatever ready chose (§5.2)."""

    @staticmethod
    def send_audio(client: VrtClient, ms: int) -> None:
        payload = tone(ms, INPUT_PREFERENCE)
        size = frame_bytes(INPUT_PREFERENCE, 20)
        for offset in range(0, len(payload), size):
            client.send_audio(payload[offset : offset + size])


class Mute(ReferenceClient):
    """No microphone: ignores '/audio MS' lines (correct, declared --no-audio-input)."""

    @staticmethod
    def send_audio(client: VrtClient, ms: int) -> None:
        del client, ms


class _Silent(Player):
    """Plays nothing and so reports nothing."""

    def add(self, item_id: str, seconds: float, now: float) -> None:
        del item_id, seconds, now

    def stop(self, now: float) -> list[tuple[str, int]]:
        return []


class NoSpeaker(ReferenceClient):
    """No audio output: never reports playback (correct, declared --no-audio-output)."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.player = _Silent()


def _crashes(settings: Settings) -> ReferenceClient:
    """Dies at once, before connecting (exit 3): the suite must fail fast."""
    del settings
    sys.exit(3)


VARIANTS: dict[str, Callable[[Settings], ReferenceClient]] = {
    "closed-epoch-runs": _with(NoEpochGate),
    "answers-twice": _with(AnswersTwice),
    "no-dedupe": _with(NoDedupe),
    "replays-after-resume-failed": ReplaysAfterResumeFailed,
    "text-before-ready": TextBeforeReady,
    "concurrent-calls": _with(Concurrent),
    "no-resend": _with(NoResend),
    "playback-overreports": _over_reporting,
    "accepts-any-version": _with(AcceptsAnyVersion),
    "forgets-closed-epochs": _with(ForgetsClosedEpochs),
    "no-cancel-signal": _with(NoCancelSignal),
    "interrupt-without-closing": _with(InterruptWithoutClosing),
    "interrupts-an-older-epoch": _with(InterruptsAnOlderEpoch),
    "credential-in-url": CredentialInUrl,
    "unregistered-capability": UnregisteredCapability,
    "ignores-input-format": IgnoresInputFormat,
    "crashes-at-start": _crashes,
    "pings-before-ready": _with(PingsBeforeReady),
    "no-speaker": NoSpeaker,
    "no-microphone": Mute,
}


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in VARIANTS:
        print(f"usage: broken_clients.py {{{','.join(VARIANTS)}}}", file=sys.stderr)
        return 2
    client = VARIANTS[argv[0]](Settings.from_env(os.environ))
    return asyncio.run(client.run())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
