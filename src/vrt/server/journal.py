"""Write-ahead for one session on a shared store: nothing a client could have seen is
unknown to the next owner of its session (docs/deploy.md).

A :class:`SessionJournal` watches its session (``ServerSession.observer``): every
sequenced message the session numbers, and the events that make the conversation log
(``vrt.agents.history``). Its connection hands it each outbox before writing it
(``ServerWebSocket.gate``): when the session changed since the last write to the
store, the outbox waits while the journal writes the change (one store round trip for
everything that happened since, however many messages), and is written to the socket
once the store has it. That write starts at once, while the loop step that made the
outbox (an agent's step, say) is still running, so that the first reply of a turn waits
for one round trip, not for the rest of the step and then a round trip. Outboxes that
arrive meanwhile wait behind it, in order, and go with the next write (so a turn costs
two writes when its step flushes more than once). An outbox that changes nothing (audio
frames, a pong) is written at once when nothing waits.

Every write carries the session's lease (a fencing token): a write refused because
another process took the session means this process has lost it. What waits is dropped
unwritten and ``on_lost`` is called: the connection closes with 4000 (§5.4) and the
session is forgotten here, without another write.

When the store cannot be reached, nothing waits for it: outboxes are written at once
from memory, and the journal retries in the background, rewriting the whole session
(every kept message, the state, the client's data) once the store answers. Until
then a resume on another process cannot see what was sent meanwhile, and fails with
RESUME_FAILED rather than lose or repeat anything. What it keeps for that rewrite is
bounded as the store is: the kept messages are the session's own (``max_unacked_bytes``),
and the conversation log waiting to be written is held encoded, within the store's
``max_log_bytes``, the oldest entries going first and an entry larger than the whole
bound shortened (:func:`encode_entry`): an outage coalesces, it does not accumulate.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Literal, Protocol

import msgspec

from ..agents.history import (
    AgentSaid,
    HistoryEntry,
    PlaybackStopped,
    ToolCalled,
    ToolResulted,
    TurnInterrupted,
    UserSaid,
)
from ..errors import VrtException
from ..logs import Throttled
from ..protocol.messages import AgentText, Interrupted, Message, ToolCall, Transcript, TurnState
from ..protocol.outputs import Output
from ..protocol.server import (
    AgentInput,
    ContextChanged,
    PlaybackReported,
    ServerSession,
    ToolSettled,
    UserTextReceived,
)
from .snapshot import ItemsEncoder, client_data, session_state

__all__ = [
    "Batch",
    "JournalStore",
    "SessionJournal",
    "StoreUnavailable",
    "WriteOutcome",
    "encode_entry",
]

log = logging.getLogger("vrt.server")

WriteOutcome = Literal["ok", "fenced", "missing"]
#: Retries of a store that cannot be reached: the first after this, then doubling.
RETRY_FIRST: Final = 0.25
RETRY_MOST: Final = 4.0
#: Provider members given for calls not yet issued (a call that never is leaves its own).
MAX_PENDING_MEMBERS: Final = 64
#: Room left in ``max_log_bytes`` for the msgpack array header of a write's entries.
_LOG_HEADER: Final = 8
_ENCODE: Final = msgspec.msgpack.Encoder()


def encode_entry(entry: HistoryEntry, most: int) -> bytes | None:
    """``entry`` as msgpack, in at most ``most`` bytes: a longer one shortened (its text
    cut, with a note of how much; a tool call's arguments or a result's output
    replaced by that note), None when even that does not fit (``most`` is at least
    1 KiB, docs/limits.md, so only ids and names of hostile size)."""
    data = _ENCODE.encode(entry)
    if len(data) <= most:
        return data
    over = len(data) - most
    note = f"[{len(data)} bytes; not kept: the conversation log keeps at most {most}]"
    if isinstance(entry, UserSaid | AgentSaid):
        raw = entry.text.encode()
        keep = max(0, len(raw) - over - len(note) - 8)
        text = raw[:keep].decode("utf-8", "ignore") + note
        data = _ENCODE.encode(msgspec.structs.replace(entry, text=text))
    elif isinstance(entry, ToolCalled):
        data = _ENCODE.encode(msgspec.structs.replace(entry, arguments=note))
    elif isinstance(entry, ToolResulted):
        message = entry.message[:256] if entry.message is not None else None
        data = _ENCODE.encode(msgspec.structs.replace(entry, output=note, message=message))
    return data if len(data) <= most else None


#: What the journals of a process say when the store stops and starts answering: one
#: line per 10 s each, with the count, however many sessions (docs/operations.md#logs).
_FELL_BACK: Final = Throttled(log, logging.WARNING)
_RESYNCED: Final = Throttled(log, logging.INFO)


class StoreUnavailable(VrtException):
    """The shared store did not answer (down, restarting, unreachable, too slow)."""


@dataclass(slots=True)
class Batch:
    """One write of a session to the store: what changed since the last one."""

    session_id: str
    principal: str | None
    token: str
    state: bytes
    #: The client's tools and context, when they changed (or for a full write).
    client: bytes | None
    #: Messages numbered since the last write, ``(seq, bytes)``; all kept ones when full.
    kept: list[tuple[int, bytes]]
    #: The oldest seq still kept: older ones were acknowledged or dropped (§4.2, §11).
    first_kept: int
    #: Conversation log entries since the last write, each encoded (:func:`encode_entry`).
    log: list[bytes]
    #: How long the store keeps the session if nothing refreshes it (ms).
    ttl_ms: int
    #: Rewrite the whole session, kept messages included (after the store was lost).
    full: bool = False


class JournalStore(Protocol):
    """What a journal needs of the shared store."""

    @property
    def sends_at_once(self) -> bool:
        """True when :meth:`write` sends the batch before it returns (so a write made
        in the middle of a loop step is on its way while the step goes on)."""

    def write(self, batch: Batch) -> asyncio.Future[WriteOutcome]:
        """Send ``batch`` with the next pipeline; the future fails with
        :class:`StoreUnavailable` when the store cannot be reached."""

    def ttl_ms(self, session: ServerSession, now: float) -> int:
        """How long the store should keep ``session`` from ``now`` (ms)."""

    @property
    def max_log_bytes(self) -> int:
        """The conversation log the store keeps per session (bytes)."""


class _Writer(Protocol):
    """The connection side of the gate (``ServerWebSocket``)."""

    closed: bool

    def write_items(self, outbox: list[Output]) -> None: ...


#: A write on its way: the batch, its outcome to come, and the outboxes that wait for it.
_Flight = tuple[Batch, "asyncio.Future[WriteOutcome]", list[tuple[_Writer, list[Output]]]]


class SessionJournal:
    """The write-ahead journal of one session (see the module docstring)."""

    __slots__ = (
        "_call_members",
        "_client_dirty",
        "_held",
        "_items",
        "_kept",
        "_last_turn",
        "_log",
        "_log_bytes",
        "_max_log",
        "_persisted_in",
        "_retry_delay",
        "_state_dirty",
        "_task",
        "_text",
        "_text_chars",
        "_text_members",
        "_text_turn",
        "_unsynced",
        "loop",
        "lost",
        "on_lost",
        "session",
        "store",
        "token",
    )

    def __init__(
        self,
        session: ServerSession,
        store: JournalStore,
        token: str,
        on_lost: Callable[[str], None],
        *,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.session = session
        self.store = store
        #: The lease this process holds (``worker:n``): every write is conditional on it.
        self.token = token
        self.on_lost = on_lost
        self.loop = loop
        #: True once another process took the session: nothing more is written.
        self.lost = False
        self._persisted_in = session.incoming.last_seq
        self._kept: list[tuple[int, bytes]] = []
        self._items = ItemsEncoder()
        #: Conversation log entries not yet written, encoded, ``_log_bytes`` in all,
        #: within ``_max_log`` (the oldest go first).
        self._log: list[bytes] = []
        self._log_bytes = 0
        self._max_log = max(store.max_log_bytes - _LOG_HEADER, _LOG_HEADER)
        #: The agent's text of the turn so far, ``_text_chars`` characters in all.
        self._text: list[str] = []
        self._text_chars = 0
        self._text_turn: str | None = None
        #: The provider's members of the text in progress, and of calls to be issued.
        self._text_members: Any = None
        self._call_members: dict[str, Any] = {}
        self._client_dirty = False
        self._state_dirty = False
        #: Outboxes waiting for the write in progress, in order.
        self._held: list[tuple[_Writer, list[Output]]] = []
        self._task: asyncio.Task[None] | None = None
        #: The store could not be reached: writes go to the socket at once, and the
        #: whole session is rewritten once the store answers again.
        self._unsynced = False
        self._retry_delay = RETRY_FIRST
        self._last_turn: tuple[str, int] | None = None
        session.observer = self

    # -- the observer (ServerSession) --

    def sent(self, seq: int, message: Message, data: bytes) -> None:
        if not self._unsynced:
            self._kept.append((seq, data))
        kind = type(message)
        if kind is AgentText:
            assert isinstance(message, AgentText)
            turn_id = message.turn_id if isinstance(message.turn_id, str) else None
            if self._text and self._text_turn != turn_id:
                self._end_text()
            self._text_turn = turn_id
            self._text.append(message.text)
            self._text_chars += len(message.text)
            if self._text_chars > self._max_log:
                self._end_text()  # more than the log keeps: shortened now, not held
        elif kind is Transcript:
            assert isinstance(message, Transcript)
            if message.final:
                if message.role == "user":
                    self._add(UserSaid(text=message.text, spoken=True))
                else:
                    turn = message.turn_id if isinstance(message.turn_id, str) else None
                    self._add(AgentSaid(turn_id=turn, text=message.text, spoken=True))
        elif kind is ToolCall:
            assert isinstance(message, ToolCall)
            call = self.session.record.calls.get(message.call_id)
            self._add(
                ToolCalled(
                    call_id=message.call_id,
                    name=message.name,
                    arguments=message.arguments,
                    turn_id=message.turn_id,
                    provider_id=call.provider_id if call is not None else None,
                    provider=self._call_members.pop(message.call_id, None),
                )
            )
        elif kind is TurnState:
            assert isinstance(message, TurnState)
            self._last_turn = (message.turn_id, message.epoch)
        elif kind is Interrupted:
            assert isinstance(message, Interrupted)
            last = self._last_turn
            turn_id = last[0] if last is not None and last[1] == message.epoch else None
            self._add(TurnInterrupted(turn_id=turn_id, epoch=message.epoch))

    def event(self, event: AgentInput) -> None:
        kind = type(event)
        if kind is UserTextReceived:
            assert isinstance(event, UserTextReceived)
            self._add(UserSaid(text=event.text))
        elif kind is ToolSettled:
            assert isinstance(event, ToolSettled)
            self._add(
                ToolResulted(
                    call_id=event.call_id,
                    ok=event.ok,
                    output=event.output,
                    code=event.code,
                    message=event.message,
                )
            )
        elif kind is PlaybackReported:
            assert isinstance(event, PlaybackReported)
            self._add(
                PlaybackStopped(
                    item_id=event.item_id, played_ms=event.played_ms, turn_id=event.turn_id
                )
            )
        elif kind is ContextChanged:
            self._client_dirty = True

    def provider_members(self, turn_id: str | None, call_id: str | None, members: Any) -> None:
        """What the agent's model provider attached to its message (the text of
        ``turn_id`` not yet ended) or to a call about to be issued: kept, opaque, on
        that entry (``AgentSaid.provider``, ``ToolCalled.provider``)."""
        if call_id is not None:
            self._call_members[call_id] = members
            while len(self._call_members) > MAX_PENDING_MEMBERS:  # calls never issued
                del self._call_members[next(iter(self._call_members))]
        elif self._text and self._text_turn == turn_id:
            self._text_members = members

    def _add(self, entry: HistoryEntry) -> None:
        if self._text:
            self._end_text()
        self._append(entry)

    def _append(self, entry: HistoryEntry) -> None:
        data = encode_entry(entry, self._max_log)
        if data is not None:
            self._log.append(data)
            self._log_bytes += len(data)
            self._trim_log()

    def _trim_log(self) -> None:
        """The oldest entries go while those not yet written exceed the store's bound
        (only while the store is unreachable, or for one write's worth)."""
        if self._log_bytes <= self._max_log:
            return
        log, total, drop = self._log, self._log_bytes, 0
        while total > self._max_log:
            total -= len(log[drop])
            drop += 1
        del log[:drop]
        self._log_bytes = total

    def _end_text(self) -> None:
        text, self._text, self._text_chars = "".join(self._text), [], 0
        members, self._text_members = self._text_members, None
        self._append(AgentSaid(turn_id=self._text_turn, text=text, provider=members))

    def _put_back(self, entries: list[bytes]) -> None:
        """A write that did not reach the store: its entries go before the newer ones."""
        self._log[:0] = entries
        self._log_bytes += sum(len(data) for data in entries)
        self._trim_log()

    # -- the gate (ServerWebSocket.write_outbox) --

    def admit(self, writer: _Writer, outbox: list[Output]) -> bool:
        """True: write ``outbox`` now. False: it waits for the store (or is dropped,
        once the session is lost)."""
        if self.lost:
            return False
        if self._unsynced:
            self._resync_soon()
            return True  # the store is unreachable: the connection goes on from memory
        if self._task is None and self.store.sends_at_once:
            if not self._dirty():
                return True
            # Nothing in flight: the write goes to the store now, within this loop step
            # (the store sends it at once), covering this outbox and everything numbered
            # before it; what the step still makes waits for the next write.
            batch = self._batch()
            self._task = self.loop.create_task(
                self._run((batch, self.store.write(batch), [(writer, outbox)]))
            )
            return False
        if self._task is None and not self._dirty():
            return True
        self._held.append((writer, outbox))
        self._start()  # (a write in flight: no-op; otherwise it goes once the step is over)
        return False

    def changed(self) -> None:
        """The session changed in a way no message shows (it parked, its timers moved):
        write it with the next batch, now when nothing else is due."""
        self._state_dirty = True
        self.sync()

    def sync(self) -> None:
        """Write what changed, without a connection to write to (a parked session)."""
        if self.lost:
            return
        if self._unsynced:
            self._resync_soon()
        elif self._dirty():
            self._start()

    async def drained(self) -> None:
        """Until the writes in progress (and what waits for them) are done."""
        while self._task is not None:
            await asyncio.shield(self._task)

    # -- writing --

    def _dirty(self) -> bool:
        return bool(
            self._kept
            or self._log
            or self._text
            or self._client_dirty
            or self._state_dirty
            or self.session.incoming.last_seq != self._persisted_in
        )

    def _start(self) -> None:
        if self._task is None:
            self._task = self.loop.create_task(self._run())

    def _batch(self, *, full: bool = False) -> Batch:
        session = self.session
        now = self.loop.time()
        if self._text:
            self._end_text()
        kept = session.outgoing.kept() if full else self._kept
        self._kept = []
        entries, self._log, self._log_bytes = self._log, [], 0
        client = client_data(session) if (self._client_dirty or full) else None
        self._client_dirty = self._state_dirty = False
        self._persisted_in = session.incoming.last_seq
        return Batch(
            session_id=session.session_id,
            principal=session.principal,
            token=self.token,
            state=session_state(session, now, time.time(), self._items),
            client=client,
            kept=kept,
            first_kept=session.outgoing.first_kept_seq,
            log=entries,
            ttl_ms=self.store.ttl_ms(session, now),
            full=full,
        )

    async def _run(self, first: _Flight | None = None) -> None:
        """Write what changed and then the outboxes that waited for it, until nothing
        waits; ``first``: a write already sent, with the outboxes it holds."""
        try:
            while not self.lost:
                sent: asyncio.Future[WriteOutcome] | None = None
                if first is not None:
                    batch, sent, held = first
                    first = None
                else:
                    held, self._held = self._held, []
                    if self._dirty() and not self._unsynced:
                        batch = self._batch()
                        sent = self.store.write(batch)
                if sent is not None:
                    try:
                        outcome = await self._write(batch, sent)
                    except StoreUnavailable as exc:
                        self._fall_back(batch, exc)
                        outcome = "ok"
                    if outcome == "fenced":
                        self.lose()
                        return
                    if outcome == "missing":
                        self._fall_back(batch, StoreUnavailable("the store lost the session"))
                for writer, outbox in held:
                    if not writer.closed:
                        writer.write_items(outbox)
                if not self._held and (self._unsynced or not self._dirty()):
                    return
        finally:
            if first is not None:  # lost before its outcome was awaited: not wanted
                first[1].cancel()
            self._task = None
            if self._unsynced and not self.lost:
                self._resync_soon()

    async def _write(
        self, batch: Batch, sent: asyncio.Future[WriteOutcome] | None = None
    ) -> WriteOutcome:
        """Write ``batch`` (``sent``: its write, already on its way); written again with
        the current lease when this process took the session again (a resume here) while
        it was on its way with the old one."""
        while True:
            outcome = await (sent if sent is not None else self.store.write(batch))
            sent = None
            if outcome != "fenced" or batch.token == self.token or self.lost:
                return outcome
            batch.token = self.token

    def _fall_back(self, batch: Batch, exc: Exception) -> None:
        """The store did not answer: go on from memory, rewrite everything later."""
        if not self._unsynced:
            _FELL_BACK(
                "session %s: the session store did not answer (%s); going on from memory "
                "until it does",
                batch.session_id,
                exc,
            )
        self._unsynced = True
        # Log entries that did not reach the store go with the full rewrite.
        self._put_back(batch.log)
        self._client_dirty = self._state_dirty = True
        self._kept = []
        self._resync_soon()

    def _resync_soon(self) -> None:
        if self._task is None and not self.lost:
            self._task = self.loop.create_task(self._resync())

    async def _resync(self) -> None:
        """Rewrite the whole session once the store answers again (retrying, with a
        growing pause); outboxes do not wait for it meanwhile."""
        try:
            while not self.lost:
                # Spread out, so that the sessions of a process do not all retry at once.
                await asyncio.sleep(self._retry_delay * random.uniform(0.5, 1.5))
                if self.lost or self.session.status == "closed":
                    return
                batch = self._batch(full=True)
                try:
                    outcome = await self._write(batch)
                except StoreUnavailable:
                    self._retry_delay = min(max(self._retry_delay, RETRY_FIRST) * 2, RETRY_MOST)
                    self._put_back(batch.log)
                    self._client_dirty = self._state_dirty = True
                    continue
                if outcome != "ok":  # fenced: even a whole rewrite is refused
                    self.lose()
                    return
                _RESYNCED("session %s: written to the session store again", batch.session_id)
                self._unsynced = False
                self._retry_delay = RETRY_FIRST
                return
        finally:
            self._task = None
            if not self.lost and not self._unsynced and self._dirty():
                self._start()

    def missing(self) -> None:
        """The store no longer has the session although this process holds its lease
        (Redis restarted empty): write it whole again."""
        if not self.lost and not self._unsynced:
            log.warning(
                "session %s: the session store lost it; writing it again", self.session.session_id
            )
            self._unsynced = True
            self._retry_delay = 0.0
            self._client_dirty = self._state_dirty = True
            self._kept = []
            self._resync_soon()

    def detach(self) -> None:
        """Stop watching the session (it ended, moved or was handed off): the session and
        its journal no longer refer to each other, so that neither waits for the cyclic
        garbage collector once the server lets them go."""
        if self.session.observer is self:
            self.session.observer = None

    def lose(self) -> None:
        """Another process holds the session now: drop what waits, tell the server.

        Once only: a journal already given up (a late refusal of its old lease's write)
        tells nobody, since its session id may name a newer journal of this process by
        then (the session resumed here again), whose connection must stay open."""
        if self.lost:
            return
        self.lost = True
        self._held = []
        self._kept = []
        self._log, self._log_bytes = [], 0
        self._text, self._text_chars = [], 0
        self.detach()
        self.on_lost(self.session.session_id)
