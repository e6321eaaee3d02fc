"""What a server supports and the bounds it keeps (§4.4, §5.1, §7.2, §11; docs/limits.md)."""

from __future__ import annotations

from dataclasses import dataclass

from ..capabilities import GLOBAL_TOOL_IDS, TOOL_STREAM
from ..codec import DEFAULT_LIMITS, Limits
from ..streams import DEFAULT_MAX_KEPT

__all__ = ["ServerConfig"]


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
    #: §4.1, §11: unacknowledged messages kept per session for resends.
    max_unacked: int = DEFAULT_MAX_KEPT
    limits: Limits = DEFAULT_LIMITS
    #: Control messages kept while the connection is opening (§5.1).
    max_kept_while_opening: int = 256
    #: Client tool calls awaiting a result at once.
    max_pending_calls: int = 64
    #: Invalid frames tolerated per ``invalid_window`` seconds before RATE_LIMITED.
    max_invalid: int = 100
    invalid_window: float = 10.0
    #: What one connection may make the server read (budget.py): frames of any kind
    #: per second and saved up, bytes per second and saved up. The bursts cover a
    #: resume's resend of a full kept window (1,024 messages, §5.4).
    frame_rate: float = 512.0
    frame_burst: float = 4096.0
    byte_rate: float = float(1 << 20)
    byte_burst: float = float(8 << 20)
    #: Audio items remembered for playback reports.
    remembered_items: int = 64

    def __post_init__(self) -> None:
        for name in ("heartbeat_timeout", "resume_window", "hello_timeout", "tool_timeout"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        if self.max_unacked < 1:
            raise ValueError("max_unacked must be at least 1")
        for name in ("frame_rate", "frame_burst", "byte_rate", "byte_burst"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
