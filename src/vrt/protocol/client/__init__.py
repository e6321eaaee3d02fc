"""The client role, sans I/O: :class:`ClientSession` (the §5.1 client table, the epoch
gate of §6.2, the tool queue of §7) and the events it reports to the application."""

from ..tables import ClientState
from .events import (
    AudioChunk,
    AudioStarted,
    CancelTool,
    ClientEvent,
    Connected,
    ErrorReceived,
    InterruptedEpoch,
    PlaybackStop,
    RunTool,
    SessionFailed,
    TextReceived,
    ToolPreview,
    ToolStreamUpdate,
    TranscriptReceived,
    TurnChanged,
)
from .session import DEAD_AFTER_INTERVALS, PING_INTERVAL, ClientSession

__all__ = [
    "DEAD_AFTER_INTERVALS",
    "PING_INTERVAL",
    "AudioChunk",
    "AudioStarted",
    "CancelTool",
    "ClientEvent",
    "ClientSession",
    "ClientState",
    "Connected",
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
