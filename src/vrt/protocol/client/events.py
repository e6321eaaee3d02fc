"""What the client core reports to the application, as keyword-only frozen structs."""

from __future__ import annotations

from typing import Any, TypeAlias

import msgspec

from ..messages import Format, ToolStream

__all__ = [
    "AudioChunk",
    "AudioStarted",
    "CancelTool",
    "ClientEvent",
    "Connected",
    "ConnectionLost",
    "ErrorReceived",
    "InterruptedEpoch",
    "PlaybackStop",
    "RunTool",
    "SessionFailed",
    "TextReceived",
    "ToolPreview",
    "ToolStreamUpdate",
    "TranscriptReceived",
    "TurnChanged",
]


class _Event(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    pass


class Connected(_Event, frozen=True, kw_only=True, gc=False):
    """``ready`` arrived: the session is open (new) or resumed. On a resume,
    ``resumed_from`` is the server's ``resumedFrom``: it handled every message of the
    client's up to it, acknowledged or not (§5.4)."""

    session_id: str
    resumed: bool
    input: Format
    output: Format
    capabilities: tuple[str, ...]
    resumed_from: int | None = None


class ConnectionLost(_Event, frozen=True, kw_only=True, gc=False):
    """The connection is gone (``ClientSession.connection_lost``), with the close code
    the server sent, if any. ``reconnect`` says whether the session goes on over a new
    connection: a resume (§5.4), or a new ``hello`` when a first connection ended before
    its ``ready`` without being refused. False once the session is closed, and for a
    first connection the server ended on purpose (1000), by policy (1008) or refusing
    the credential (4401, §5.3)."""

    code: int | None
    reconnect: bool


class SessionFailed(_Event, frozen=True, kw_only=True, gc=False):
    """The session cannot go on: RESUME_FAILED, START_FAILED, ... (§5.4), or the server
    refused the credential (UNAUTHORIZED, §5.3), which only a fresh credential can fix."""

    code: str
    message: str


class ErrorReceived(_Event, frozen=True, kw_only=True, gc=False):
    """An ``error`` from the server, or an invalid frame from it (§9.1)."""

    code: str
    message: str
    recoverable: bool


class TurnChanged(_Event, frozen=True, kw_only=True, gc=False):
    turn_id: str
    epoch: int
    state: str


class TextReceived(_Event, frozen=True, kw_only=True, gc=False):
    """One chunk of the agent's text; a turn's chunks concatenate to its reply."""

    text: str
    turn_id: str | None


class TranscriptReceived(_Event, frozen=True, kw_only=True, gc=False):
    role: str
    text: str
    final: bool
    item_id: str | None
    turn_id: str | None


class AudioStarted(_Event, frozen=True, kw_only=True, gc=False):
    item_id: str
    turn_id: str
    epoch: int


class AudioChunk(_Event, frozen=True, kw_only=True, gc=False):
    """Output audio of an item whose epoch is open, in the session's output format."""

    item_id: str
    payload: bytes


class PlaybackStop(_Event, frozen=True, kw_only=True, gc=False):
    """Stop playback now and discard buffered output audio (§8.4, §6.2)."""

    epoch: int


class InterruptedEpoch(_Event, frozen=True, kw_only=True, gc=False):
    """The epoch closed, by the server (``interrupted``) or locally (``interrupt()``)."""

    epoch: int
    local: bool


class ToolPreview(_Event, frozen=True, kw_only=True, gc=False):
    """``tool.call.delta``: display only; never run anything because of it (§7.4)."""

    call_id: str
    turn_id: str
    epoch: int
    preview: Any


class ToolStreamUpdate(_Event, frozen=True, kw_only=True, gc=False):
    """A ``tool.stream`` phase (§7.5), or ``cancelled`` decided locally when the
    client closed the call's epoch (``message`` None then)."""

    call_id: str
    name: str
    turn_id: str
    epoch: int
    phase: str
    message: ToolStream | None


class RunTool(_Event, frozen=True, kw_only=True, gc=False):
    """Run this call now; answer with ``ClientSession.tool_finished``."""

    call_id: str
    name: str
    arguments: Any
    turn_id: str
    epoch: int


class CancelTool(_Event, frozen=True, kw_only=True, gc=False):
    """The running call's epoch closed: cancel it cooperatively; its result is already
    sent (INTERRUPTED) and a later outcome is discarded (§7.2)."""

    call_id: str


ClientEvent: TypeAlias = (
    Connected
    | ConnectionLost
    | SessionFailed
    | ErrorReceived
    | TurnChanged
    | TextReceived
    | TranscriptReceived
    | AudioStarted
    | AudioChunk
    | PlaybackStop
    | InterruptedEpoch
    | ToolPreview
    | ToolStreamUpdate
    | RunTool
    | CancelTool
)
