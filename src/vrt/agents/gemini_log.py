"""The conversation as the Gemini Live adapter heard and said it, for a provider session
that starts without a resumable handle: it is replayed there as text turns
(``replay.gemini_turns``), so the assistant keeps the conversation across a reconnect
(docs/agent-gemini-live.md, "Reconnects").

The entries are the conversation log's own (``history.py``), the ones a shared store
keeps for a moved session: what the user said (text, or the final transcript of
speech), what the agent said (its final transcript, or its text), each client tool call
the agent issued and its result. The log starts with what ``restore`` gave. It keeps the
newest entries within :data:`MAX_LOG_BYTES` (their JSON size), as the store keeps the
newest within its ``max_log_bytes`` (docs/limits.md): a long session costs a bounded
replay, never unbounded memory.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Final

import msgspec

from .history import HistoryEntry

__all__ = ["MAX_LOG_BYTES", "ConversationLog"]

#: The default bound of the kept log: the shared store's default (docs/limits.md).
MAX_LOG_BYTES: Final = 256 * 1024

_encode = msgspec.json.Encoder().encode


class ConversationLog:
    """The newest entries of one session's conversation, within ``max_bytes``."""

    def __init__(self, max_bytes: int = MAX_LOG_BYTES) -> None:
        self.max_bytes = max_bytes
        self._entries: deque[tuple[HistoryEntry, int]] = deque()
        self.size = 0  # the kept entries' JSON bytes
        #: Entries dropped (oldest first) to stay within the bound.
        self.dropped = 0

    def add(self, entry: HistoryEntry) -> None:
        size = len(_encode(entry))
        self._entries.append((entry, size))
        self.size += size
        while self.size > self.max_bytes and self._entries:
            _, gone = self._entries.popleft()
            self.size -= gone
            self.dropped += 1

    def extend(self, entries: Iterable[HistoryEntry]) -> None:
        for entry in entries:
            self.add(entry)

    @property
    def entries(self) -> list[HistoryEntry]:
        return [entry for entry, _ in self._entries]

    def __len__(self) -> int:
        return len(self._entries)
