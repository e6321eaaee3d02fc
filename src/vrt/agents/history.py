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

An adapter whose provider session can end while the vRT session goes on (a time limit,
a dropped socket) keeps the same entries itself in a :class:`ConversationLog`, to replay
them into the next provider session (``replay.py``): its slots can be filled late (a
transcript that ends after the answer began) and cut or emptied (what the user heard,
§8.4), and it keeps the newest entries within a size bound.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any, Final, TypeAlias

import msgspec

from ..protocol.server import ToolSettled

__all__ = [
    "MAX_LOG_CHARS",
    "AgentSaid",
    "ConversationLog",
    "HistoryEntry",
    "LogSlot",
    "PlaybackStopped",
    "ToolCalled",
    "ToolResulted",
    "TurnInterrupted",
    "UserSaid",
    "coalesce",
    "settled",
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
    #: What the agent's model provider attached to the message (e.g. DeepSeek's
    #: ``reasoning_content``), for the agent to send back after a move; opaque to all
    #: else. Optional: a log written without it reads the same, and an older reader
    #: skips it.
    provider: Any = None


class ToolCalled(msgspec.Struct, frozen=True, kw_only=True, tag="tool.call"):
    """A client tool call the agent issued (``tool.call``, §7.1)."""

    call_id: str
    name: str
    arguments: Any
    turn_id: str
    #: The model's own id for the call, when the agent gave one.
    provider_id: str | None = None
    #: What the agent's model provider attached to the call (e.g. Gemini 3's thought
    #: signature): opaque, as :attr:`AgentSaid.provider`.
    provider: Any = None


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


def settled(event: ToolSettled) -> ToolResulted:
    """The entry of a client tool call's result as the agent seam delivers it."""
    return ToolResulted(
        call_id=event.call_id,
        ok=event.ok,
        output=event.output,
        code=event.code,
        message=event.message,
    )


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
                turn_id=entry.turn_id,
                text=last.text + entry.text,
                spoken=entry.spoken,
                provider=last.provider if entry.provider is None else entry.provider,
            )
        else:
            out.append(entry)
    return out


#: What a :class:`ConversationLog` keeps at most, in characters of text, arguments and
#: outputs: far more than a provider's context window takes, and a bound on what a
#: client that talks (or sends text) for hours makes the server hold.
MAX_LOG_CHARS: Final = 512 * 1024


def _size(entry: HistoryEntry | None) -> int:
    """About how much of the bound ``entry`` takes (its text, arguments and output)."""
    if entry is None:
        return 0
    if isinstance(entry, UserSaid | AgentSaid):
        return len(entry.text) + 16
    if isinstance(entry, ToolCalled):
        return len(msgspec.json.encode(entry.arguments)) + len(entry.name) + 64
    if isinstance(entry, ToolResulted):
        return len(msgspec.json.encode(entry.output)) + len(entry.message or "") + 64
    return 64


class LogSlot:
    """One place in a :class:`ConversationLog`: an entry, or nothing (yet, or any more)."""

    __slots__ = ("_entry", "_log")

    def __init__(self, log: ConversationLog, entry: HistoryEntry | None) -> None:
        self._log = log
        self._entry = entry

    @property
    def entry(self) -> HistoryEntry | None:
        return self._entry

    @entry.setter
    def entry(self, entry: HistoryEntry | None) -> None:
        old, self._entry = self._entry, entry
        self._log.resized(_size(entry) - _size(old))

    def detach(self) -> None:
        """Dropped from its log: its entry goes, and a late write to it changes nothing
        there."""
        self._entry = None
        self._log = _DETACHED


class ConversationLog:
    """The conversation so far, in order, as an adapter replays it into a new provider
    session (see the module docstring). The oldest slots go first once the entries
    take more than ``max_chars``."""

    def __init__(self, entries: Iterable[HistoryEntry] = (), max_chars: int = MAX_LOG_CHARS):
        self.max_chars = max_chars
        self._slots: deque[LogSlot] = deque()
        self._chars = 0
        #: Slots dropped (oldest first) to stay within the bound.
        self.dropped = 0
        for entry in entries:
            self.add(entry)

    def add(self, entry: HistoryEntry | None = None) -> LogSlot:
        """A new slot at the end, holding ``entry`` (None: to be filled later)."""
        slot = LogSlot(self, None)
        self._slots.append(slot)
        slot.entry = entry
        return slot

    def entries(self) -> list[HistoryEntry]:
        return [slot.entry for slot in self._slots if slot.entry is not None]

    def __len__(self) -> int:
        """The slots kept (an empty one included)."""
        return len(self._slots)

    @property
    def chars(self) -> int:
        return self._chars

    def resized(self, change: int) -> None:
        """A slot's entry grew by ``change`` characters (or shrank): the oldest slots go
        while the entries take more than ``max_chars``."""
        self._chars += change
        while self._chars > self.max_chars and len(self._slots) > 1:
            oldest = self._slots.popleft()
            self._chars -= _size(oldest.entry)
            self.dropped += 1
            oldest.detach()


class _Detached(ConversationLog):
    """Where slots dropped from their log point: writes to them count nowhere."""

    def resized(self, change: int) -> None:
        del change


_DETACHED: Final = _Detached()
