"""What a server supports and the bounds it keeps (§4.4, §5.1, §7.2, §11; docs/limits.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from ..capabilities import GLOBAL_TOOL_IDS, TOOL_STREAM
from ..codec import DEFAULT_LIMITS, Limits
from ..streams import DEFAULT_MAX_KEPT
from .budget import DEFAULT_AUDIO_BURST, DEFAULT_AUDIO_RATE

__all__ = ["MUST_BE_POSITIVE", "ServerConfig"]

#: The settings no server can run with at zero or below, each refused by its name: the
#: deadlines (§4.4, §5.1, §7.2) and the read budget's rates and bursts (§11).
_TIMERS: Final = ("heartbeat_timeout", "resume_window", "hello_timeout", "tool_timeout")
_RATES: Final = (
    "frame_rate",
    "frame_burst",
    "byte_rate",
    "byte_burst",
    "audio_rate",
    "audio_burst",
)
#: The bounds on what a session keeps (§4.1, §11), refused together.
_BOUNDS: Final = ("max_unacked", "max_unacked_bytes", "max_state_bytes")
#: Every setting that must be positive (``vrt serve``'s options take these ranges from
#: here: vrt.settings).
MUST_BE_POSITIVE: Final = frozenset(_TIMERS + _RATES + _BOUNDS)


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """The server role's settings. Every deadline here is kept by the core's timers
    (``timer_deadline()`` / ``on_timer(now)``), parked sessions included."""

    capabilities: tuple[str, ...] = (TOOL_STREAM, GLOBAL_TOOL_IDS)
    #: §4.4: close a connection that sent no frame of any kind for this long (4408).
    heartbeat_timeout: float = 45.0
    #: §5.1: how long a parked session waits for a resume before it closes.
    resume_window: float = 30.0
    #: How long an upgraded connection may take to send its ``hello`` (close 1008).
    hello_timeout: float = 10.0
    #: §7.2: a client tool call without a result for this long settles as TIMEOUT.
    tool_timeout: float = 30.0
    #: §4.1, §11: unacknowledged messages kept per session for resends, and their
    #: size in all (the oldest go first; a resume that needs one then fails).
    max_unacked: int = DEFAULT_MAX_KEPT
    max_unacked_bytes: int = 2 << 20
    #: §5.5, §11: what a session keeps of the client's data, as JSON: ``hello.context``
    #: plus ``hello.tools``, and then each ``context`` with the tools. Beyond it a new
    #: session gets START_FAILED and a context LIMIT_EXCEEDED.
    max_state_bytes: int = 1 << 20
    limits: Limits = DEFAULT_LIMITS
    #: Control messages kept while the connection is opening (§5.1).
    max_kept_while_opening: int = 256
    #: Client tool calls awaiting a result at once.
    max_pending_calls: int = 64
    #: Invalid frames tolerated per ``invalid_window`` seconds before RATE_LIMITED.
    max_invalid: int = 100
    invalid_window: float = 10.0
    #: What one connection may make the server read (budget.py): frames of any kind
    #: per second and saved up, bytes per second and saved up. The rates are many times
    #: what a conversation needs (50 audio frames/s, 48 KB/s of pcm16); the bursts cover
    #: a resume's resend of a full kept window (1,024 messages, §5.4) and a hello as
    #: large as a session may keep (max_state_bytes).
    frame_rate: float = 512.0
    frame_burst: float = 4096.0
    byte_rate: float = float(256 << 10)
    byte_burst: float = float(2 << 20)
    #: Input audio one connection may send, by its duration: seconds of audio per second
    #: and seconds saved up (budget.py says why these).
    audio_rate: float = DEFAULT_AUDIO_RATE
    audio_burst: float = DEFAULT_AUDIO_BURST
    #: Audio items remembered for playback reports.
    remembered_items: int = 64

    def __post_init__(self) -> None:
        for name in _TIMERS:
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        if any(getattr(self, name) < 1 for name in _BOUNDS):
            raise ValueError("max_unacked, max_unacked_bytes and max_state_bytes must be positive")
        for name in _RATES:
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
