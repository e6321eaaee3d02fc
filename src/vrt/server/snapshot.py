"""A session as a shared store keeps it: everything a resume on another process needs,
apart from the kept messages themselves (stored one by one, ``redis_store.py``) and the
conversation log (``vrt.agents.history``).

Two blobs, both msgpack (msgspec): :class:`SessionState`, rewritten with every write (the
epoch, the turn, pending tool calls and their deadlines, audio items, both streams'
counters), and :class:`ClientData`, the client's tools and context, rewritten only when
the context changes. The audio items are most of a state's bytes and change only while
audio is sent: :class:`ItemsEncoder` encodes them again only when they changed.
Deadlines are kept as wall-clock times, since the event loop's clock of one process
means nothing to another.
"""

from __future__ import annotations

from typing import Final

import msgspec

from ..protocol.messages import UNSET, Encoding, Format, ToolStreamPhase, TurnStateName
from ..protocol.server import ServerConfig, ServerSession, SessionRecord
from ..protocol.server.record import Item, Turn
from ..protocol.server.tools import Call, ToolCalls
from ..protocol.streams import IncomingStream, OutgoingStream

__all__ = [
    "ClientData",
    "ItemsEncoder",
    "SessionState",
    "client_data",
    "restore_session",
    "session_state",
]


class _Call(msgspec.Struct, array_like=True, frozen=True):
    call_id: str
    provider_id: str | None
    name: str
    turn_id: str
    epoch: int
    client: bool
    phase: ToolStreamPhase
    deadline: float | None  # wall clock


class _Item(msgspec.Struct, array_like=True, frozen=True):
    id: str
    turn_id: str
    epoch: int
    sent_ms: float


class _Turn(msgspec.Struct, array_like=True, frozen=True):
    id: str
    epoch: int
    state: TurnStateName


class SessionState(msgspec.Struct, frozen=True, kw_only=True):
    """A session's state apart from the client's data and the kept messages."""

    session_id: str
    principal: str | None
    capabilities: tuple[str, ...]
    input: tuple[Encoding, int | None]
    output: tuple[Encoding, int | None]
    epoch: int
    turn: _Turn | None
    calls: tuple[_Call, ...]
    #: The remembered audio items (§8.3), ``tuple[_Item, ...]`` encoded as they were
    #: kept between writes (:class:`ItemsEncoder`).
    items: msgspec.Raw
    audio_out_seq: int
    #: When a parked session closes (wall clock); None while connected.
    expires_at: float | None
    out_last_seq: int
    out_lost_through: int
    #: The oldest kept message (older ones were acknowledged or dropped).
    out_first_kept: int
    in_last_seq: int


class ClientData(msgspec.Struct, frozen=True, kw_only=True):
    """The client's tools (§5.2) and context (§5.5), as the session keeps them: JSON."""

    tools_json: bytes
    tool_names: tuple[str, ...]
    context_json: bytes


_ENCODER: Final = msgspec.msgpack.Encoder()
_STATE: Final = msgspec.msgpack.Decoder(SessionState)
_CLIENT: Final = msgspec.msgpack.Decoder(ClientData)
_ITEMS: Final = msgspec.msgpack.Decoder(tuple[_Item, ...])


class ItemsEncoder:
    """A session's remembered audio items, encoded again only when they changed.

    Up to ``remembered_items`` of them (64 by default, about 4 KB encoded), in a state
    written twice a turn, where encoding them cost 30-35 µs of the first reply's path.
    They change only in ``AgentOutput``: an item is added (and the oldest dropped), so
    the newest id changes, or a frame's ``sent_ms`` is added, which moves
    ``audio_out_seq`` with it; the key is those two and the count
    (``tests/test_session_snapshot.py`` checks it against a fresh encoding).
    """

    __slots__ = ("_items", "_key", "_raw")

    def __init__(self) -> None:
        self._items: dict[str, Item] | None = None
        self._key: tuple[int, int, str | None] = (0, 0, None)
        self._raw = msgspec.Raw(b"")

    def __call__(self, record: SessionRecord) -> msgspec.Raw:
        items = record.items
        key = (record.audio_out_seq, len(items), next(reversed(items), None))
        if items is not self._items or key != self._key:
            self._items, self._key = items, key
            self._raw = _encode_items(items)
        return self._raw


def _encode_items(items: dict[str, Item]) -> msgspec.Raw:
    return msgspec.Raw(
        _ENCODER.encode(tuple(_Item(i.id, i.turn_id, i.epoch, i.sent_ms) for i in items.values()))
    )


def _wall(deadline: float | None, now: float, wall: float) -> float | None:
    return None if deadline is None else deadline - now + wall


def _loop(deadline: float | None, now: float, wall: float) -> float | None:
    return None if deadline is None else deadline - wall + now


def _format(fmt: Format) -> tuple[Encoding, int | None]:
    return fmt.encoding, fmt.sample_rate if isinstance(fmt.sample_rate, int) else None


def _unformat(value: tuple[Encoding, int | None]) -> Format:
    encoding, rate = value
    return Format(encoding=encoding, sample_rate=UNSET if rate is None else rate)


def session_state(
    session: ServerSession, now: float, wall: float, items: ItemsEncoder | None = None
) -> bytes:
    """The state of ``session`` at loop time ``now`` (wall-clock ``wall``), encoded;
    ``items``: the session's encoder of its audio items, kept between writes."""
    record = session.record
    turn = record.turn
    state = SessionState(
        session_id=record.session_id,
        principal=record.principal,
        capabilities=record.capabilities,
        input=_format(record.input),
        output=_format(record.output),
        epoch=record.epoch,
        turn=_Turn(turn.id, turn.epoch, turn.state) if turn is not None else None,
        calls=tuple(
            _Call(
                c.call_id,
                c.provider_id,
                c.name,
                c.turn_id,
                c.epoch,
                c.client,
                c.phase,
                _wall(c.deadline, now, wall),
            )
            for c in record.calls
        ),
        items=items(record) if items is not None else _encode_items(record.items),
        audio_out_seq=record.audio_out_seq,
        expires_at=_wall(record.expires_at, now, wall),
        out_last_seq=session.outgoing.last_seq,
        out_lost_through=session.outgoing.lost_through,
        out_first_kept=session.outgoing.first_kept_seq,
        in_last_seq=session.incoming.last_seq,
    )
    return _ENCODER.encode(state)


def client_data(session: ServerSession) -> bytes:
    record = session.record
    return _ENCODER.encode(
        ClientData(
            tools_json=record.tools_json,
            tool_names=tuple(sorted(record.tool_names)),
            context_json=record.context_json,
        )
    )


def restore_session(
    config: ServerConfig,
    state_blob: bytes,
    client_blob: bytes,
    kept: list[tuple[int, bytes]],
    now: float,
    wall: float,
) -> ServerSession:
    """The session that :func:`session_state`, :func:`client_data` and the kept
    messages describe, parked, on this process's clock ``now`` (wall-clock ``wall``).
    Messages older than the state's first kept one (acknowledged since they were
    stored) are left out."""
    state = _STATE.decode(state_blob)
    kept = [(seq, data) for seq, data in kept if seq >= state.out_first_kept]
    client = _CLIENT.decode(client_blob)
    calls = ToolCalls()
    for c in state.calls:
        calls.add(
            Call(
                c.call_id,
                c.provider_id,
                c.name,
                c.turn_id,
                c.epoch,
                c.client,
                c.phase,
                _loop(c.deadline, now, wall),
            )
        )
    turn = state.turn
    record = SessionRecord(
        session_id=state.session_id,
        principal=state.principal,
        capabilities=state.capabilities,
        input=_unformat(state.input),
        output=_unformat(state.output),
        tools_json=client.tools_json,
        tool_names=frozenset(client.tool_names),
        context_json=client.context_json,
        epoch=state.epoch,
        turn=Turn(turn.id, turn.epoch, turn.state) if turn is not None else None,
        calls=calls,
        items={i.id: Item(i.id, i.turn_id, i.epoch, i.sent_ms) for i in _ITEMS.decode(state.items)},
        audio_out_seq=state.audio_out_seq,
        expires_at=_loop(state.expires_at, now, wall),
    )
    outgoing = OutgoingStream(
        config.max_unacked, last_seq=state.out_last_seq, max_kept_bytes=config.max_unacked_bytes
    )
    outgoing.restore(kept, state.out_lost_through)
    incoming = IncomingStream(last_seq=state.in_last_seq)
    return ServerSession.restore(record, config, outgoing=outgoing, incoming=incoming)
