"""The Python vRT client SDK: :class:`VrtClient`, client tools and events."""

from ..protocol.client import (
    AudioChunk,
    AudioStarted,
    CancelTool,
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
from .client import Disconnected, Event, SessionClosed, VrtClient, VrtError
from .tools import CancelToken, ClientTool, ToolContext, ToolError, declared_tool, tool

__all__ = [
    "AudioChunk",
    "AudioStarted",
    "CancelToken",
    "CancelTool",
    "ClientTool",
    "Connected",
    "Disconnected",
    "ErrorReceived",
    "Event",
    "InterruptedEpoch",
    "PlaybackStop",
    "RunTool",
    "SessionClosed",
    "SessionFailed",
    "TextReceived",
    "ToolContext",
    "ToolError",
    "ToolPreview",
    "ToolStreamUpdate",
    "TranscriptReceived",
    "TurnChanged",
    "VrtClient",
    "VrtError",
    "declared_tool",
    "tool",
]
