"""One Gemini Live provider session as the adapter tracks it: the WebSocket and the
state that dies with it (the generation in flight, the user's words being transcribed,
the calls awaiting results, what a goAway waits for)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from websockets.asyncio.client import ClientConnection

from .base import AudioItem, Turn
from .provider_socket import ProviderSocket

__all__ = ["Generation", "Link", "PendingCall", "Speech"]


@dataclass(slots=True)
class Generation:
    """One model generation (``modelTurn`` content up to ``turnComplete``) and the vRT
    turn it speaks for."""

    turn: Turn
    vrt_id: str  # its audio item, announced with the first audio
    item: AudioItem | None = None
    transcript: str = ""


@dataclass(slots=True)
class Speech:
    """The user's words being transcribed (``inputTranscription``)."""

    vrt_id: str
    turn: Turn | None
    text: str = ""


@dataclass(slots=True)
class PendingCall:
    """A client tool call the model waits for."""

    provider_id: str
    function: str
    turn: Turn


class Link(ProviderSocket):
    """One provider WebSocket, i.e. one provider session, and the state that dies with
    it."""

    def __init__(self, ws: ClientConnection, resumed_with: str | None) -> None:
        super().__init__(ws)
        self.resumed_with = resumed_with
        self.ready = False  # setupComplete seen
        self.setup_timer: asyncio.TimerHandle | None = None
        self.generation: Generation | None = None
        #: Drop model output until the generation in flight ends (its turnComplete).
        self.drop = False
        #: ``interrupted`` events our own clientContent caused (not the user's voice).
        self.expect_interrupt = 0
        self.speech: Speech | None = None
        self.calls: dict[str, PendingCall] = {}  # by public callId, awaiting ToolSettled
        self.cancelled: set[str] = set()  # provider call ids the service cancelled
        self.context_dirty = False
        #: The turn of the user text sent last, until the next turnComplete.
        self.asked: Turn | None = None
        #: A goAway came: leave at the next turn boundary (``_quiet``).
        self.going_away = False
        #: Leaves the session before a goAway's timeLeft runs out (``_leave_by``).
        self.leave_timer: asyncio.TimerHandle | None = None
        #: The close of a link left that way.
        self.leaving: asyncio.Task[None] | None = None
        #: The latest handle has everything sent and said so far.
        self.handle_fresh = False
        #: The context's size (``promptTokenCount``) at the last turn: a drop means the
        #: sliding window cut the oldest turns.
        self.prompt_tokens = 0

    async def close(self) -> None:
        for timer in (self.setup_timer, self.leave_timer):
            if timer is not None:
                timer.cancel()
        await super().close()
