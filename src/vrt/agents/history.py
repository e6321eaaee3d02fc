"""A session's conversation as a shared session store keeps it, so that an agent can be
rebuilt on another process (``Agent.restore``, docs/agents.md, docs/deploy.md).

The server writes one entry for each thing the conversation is made of, in the order it
happened: what the user said (text, or the final transcript of speech), what the agent
said (its text chunks of one turn joined, or the final transcript of its speech), each
client tool call the agent issued and each call's one result (the client's, TIMEOUT or
INTERRUPTED), how much of an audio item the user heard when playback stopped (§8.4),
and each interruption. Entries are keyword-only frozen structs, tagged by ``type``; the
store keeps them as msgpack, the newest within ``max_log_bytes`` (docs/limits.md).

Audio is never kept (§8.1), and neither are server tools' arguments and outputs (they
stay with the agent that ran them, §7.5). The application context is not an entry: a
restored agent reads the current one from ``AgentSession.context`` (§5.5).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeAlias

import msgspec

__all__ = [
    "AgentSaid",
    "HistoryEntry",
    "PlaybackStopped",
    "ToolCalled",
    "ToolResulted",
    "TurnInterrupted",
    "UserSaid",
    "coalesce",
]


class UserSaid(msgspec.Struct, frozen=True, kw_only=True, tag="user"):
    """User input: a ``text`` message (§6.3), or with ``spoken`` the final transcript
    of the user's speech."""

    text: str
    spoken: bool = False


class AgentSaid(msgspec.Struct, frozen=True, kw_only=True, tag="agent"):
    """What the agent said in a turn: its text chunks as they reached the client, or
    with ``spoken`` the final transcript of its speech. A long reply may be several
    entries of the same turn; :func:`coalesce` joins them."""

    turn_id: str | None
    text: str
    spoken: bool = False


class ToolCalled(msgspec.Struct, frozen=True, kw_only=True, tag="tool.call"):
    """A client tool call the agent issued (``tool.call``, §7.1)."""

    call_id: str
    name: str
    arguments: Any
    turn_id: str
    #: The model's own id for the call, when the agent gave one.
    provider_id: str | None = None


class ToolResulted(msgspec.Struct, frozen=True, kw_only=True, tag="tool.result"):
    """A client tool call's one result (§7.2): the client's, TIMEOUT or INTERRUPTED."""

    call_id: str
    ok: bool
    output: Any = None
    code: str | None = None
    message: str | None = None


class PlaybackStopped(msgspec.Struct, frozen=True, kw_only=True, tag="playback"):
    """The user heard ``played_ms`` of an output audio item (§8.4)."""

    item_id: str
    played_ms: int
    turn_id: str | None


class TurnInterrupted(msgspec.Struct, frozen=True, kw_only=True, tag="interrupted"):
    """The response of ``turn_id`` was interrupted and its epoch closed (§6.2)."""

    turn_id: str | None
    epoch: int


HistoryEntry: TypeAlias = (
    UserSaid | AgentSaid | ToolCalled | ToolResulted | PlaybackStopped | TurnInterrupted
)


def coalesce(entries: Iterable[HistoryEntry]) -> list[HistoryEntry]:
    """``entries`` with consecutive :class:`AgentSaid` of the same turn and kind joined
    into one: what the agent said in each turn, once."""
    out: list[HistoryEntry] = []
    for entry in entries:
        last = out[-1] if out else None
        if (
            isinstance(entry, AgentSaid)
            and isinstance(last, AgentSaid)
            and last.turn_id == entry.turn_id
            and last.spoken == entry.spoken
        ):
            out[-1] = AgentSaid(
                turn_id=entry.turn_id, text=last.text + entry.text, spoken=entry.spoken
            )
        else:
            out.append(entry)
    return out
