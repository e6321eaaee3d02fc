"""What a server session is, apart from its streams: the data a session store keeps."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..messages import Format, TurnStateName
from .tools import ToolCalls

__all__ = ["Item", "SessionRecord", "Turn"]


@dataclass(slots=True)
class Turn:
    id: str
    epoch: int
    state: TurnStateName


@dataclass(slots=True)
class Item:
    """An output audio item (§8.3) and how much of it was sent."""

    id: str
    turn_id: str
    epoch: int
    sent_ms: float = 0.0


@dataclass(slots=True)
class SessionRecord:
    """Everything a session is apart from its streams: what a session store keeps."""

    session_id: str
    principal: str | None
    capabilities: tuple[str, ...]
    input: Format
    output: Format
    #: The client's tools (§5.2) as the JSON of their list, and their names: a session
    #: keeps the client's data as bytes (docs/limits.md), decoded when asked for.
    tools_json: bytes
    tool_names: frozenset[str]
    #: The application context (§5.5) as JSON; ``null`` when there is none.
    context_json: bytes = b"null"
    epoch: int = 0
    turn: Turn | None = None
    calls: ToolCalls = field(default_factory=ToolCalls)
    items: dict[str, Item] = field(default_factory=dict)
    audio_out_seq: int = 0
    #: When a parked session closes, unless a connection resumes it first (§5.1).
    expires_at: float | None = None
    #: Set once the session ended: the close code and reason for its connection.
    ended: tuple[int, str] | None = None

    def current_turn(self, turn_id: str) -> Turn | None:
        """The turn in progress if it is ``turn_id``: what the agent sends for a turn
        that is over is dropped (§6.2)."""
        turn = self.turn
        return turn if turn is not None and turn.id == turn_id else None
