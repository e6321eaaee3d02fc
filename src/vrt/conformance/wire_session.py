"""One vRT session as the server suite drives it, across connections (§5): ``hello``
and ``ready``, the server stream's ``lastSeq`` (with duplicates and gaps noted), the
client's own :class:`~vrt.protocol.streams.OutgoingStream` for resends, resumes (§5.4),
and the agent's turns as the suite reads them (:class:`Turn`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..protocol.codec import Invalid, decode_client
from ..protocol.streams import OutgoingStream
from .wire import TRANSIENT, Connection, Incoming, WireError, compact

__all__ = ["Opener", "Session", "Turn"]


class Opener(Protocol):
    """What a :class:`Session` opens its connections with (the check's context)."""

    async def connect(self, *, auto_ack: bool = False) -> Connection: ...


@dataclass(slots=True)
class Turn:
    """A turn of the agent as the suite saw it: every sequenced message of ``turn_id``
    and every other sequenced message that arrived while it ran."""

    turn_id: str
    epoch: int
    items: list[Incoming] = field(default_factory=list)
    ended: str = ""  # "idle" or "interrupted"

    @property
    def text(self) -> str:
        """The turn's reply: its text chunks concatenated, as a model's streamed chunks
        are (a check never judges where one chunk ends)."""
        return "".join(
            str(i.get("text"))
            for i in self.items
            if i.type == "text" and i.get("turnId") == self.turn_id
        )

    def of(self, type_: str) -> list[Incoming]:
        return [i for i in self.items if i.type == type_]


class Session:
    """One vRT session as the suite drives it, across connections (§5)."""

    def __init__(self, opener: Opener, hello: dict[str, Any], *, auto_ack: bool = False) -> None:
        self.opener = opener
        self.hello = hello
        self.auto_ack = auto_ack
        self.conn: Connection | None = None
        self.connections: list[Connection] = []
        self.ready: Incoming | None = None
        #: The client's own resumable stream (§4.1): numbers, keeps and resends.
        self.out = OutgoingStream()
        #: The bytes of every sequenced message sent, by seq (kept even once acked).
        self.sent: dict[int, bytes] = {}
        #: The server stream: the highest seq handled (the client's lastSeq, §4.2).
        self.last_seq = 0
        #: First arrival of every server seq, in order.
        self.unique: list[Incoming] = []
        #: Server messages with seq <= lastSeq when they arrived (resends, duplicates).
        self.duplicates: list[Incoming] = []
        #: Where the server stream skipped ahead (a conforming server never does).
        self.gaps: list[str] = []
        #: Every server ack: ``(upTo, the client's last seq when it arrived)``.
        self.acks: list[tuple[int, int]] = []
        #: Every frame received on any of the session's connections.
        self.received: list[Incoming] = []

    # -- opening and resuming --

    @classmethod
    async def open(
        cls,
        opener: Opener,
        hello: dict[str, Any],
        *,
        auto_ack: bool = False,
        timeout: float = 5.0,
    ) -> Session:
        """Connect, send ``hello`` (members given in wire names) and wait for ``ready``."""
        session = cls(opener, hello, auto_ack=auto_ack)
        conn = await session._connect()
        await conn.send({"v": 1, "seq": 0, "type": "hello", **hello})
        session.ready = await conn.expect_ready(timeout)
        return session

    async def _connect(self) -> Connection:
        conn = await self.opener.connect(auto_ack=self.auto_ack)
        conn.listeners.append(self._on_item)
        self.conn = conn
        self.connections.append(conn)
        return conn

    async def resume(
        self,
        resume_from: int | None = None,
        *,
        hello: dict[str, Any] | None = None,
        resend: bool = True,
        timeout: float = 5.0,
    ) -> Incoming:
        """Open a new connection and resume: ``hello`` with ``sessionId`` and
        ``resumeFrom`` (default: lastSeq), then, on ``ready``, resend every kept
        message after its ``resumedFrom`` (§5.4). ``hello`` replaces the members other
        than ``sessionId`` and ``resumeFrom`` (default: the opening hello's ``auth``)."""
        members = dict(hello) if hello is not None else self.auth_members()
        members["sessionId"] = self.session_id
        members["resumeFrom"] = self.last_seq if resume_from is None else resume_from
        conn = await self._connect()
        await conn.send({"v": 1, "seq": 0, "type": "hello", **members})
        ready = await conn.expect_ready(timeout)
        self.ready = ready
        resumed_from = ready.get("resumedFrom")
        if resend and type(resumed_from) is int:
            kept = self.out.resend_after(resumed_from)
            if kept is None:
                raise WireError(
                    f"ready.resumedFrom is {resumed_from}, but the suite sent only up to seq "
                    f"{self.out.last_seq}: the server claims messages that were never sent"
                )
            for data in kept:
                await conn.send(data.decode())
        return ready

    def auth_members(self) -> dict[str, Any]:
        return {"auth": self.hello["auth"]} if "auth" in self.hello else {}

    @property
    def session_id(self) -> str:
        assert self.ready is not None
        return str(self.ready.get("sessionId"))

    @property
    def capabilities(self) -> tuple[str, ...]:
        assert self.ready is not None
        caps = self.ready.get("capabilities")
        return tuple(caps) if isinstance(caps, list) else ()

    def _on_item(self, item: Incoming) -> None:
        self.received.append(item)
        if item.type == "ack":
            up_to = item.get("upTo")
            if type(up_to) is int:
                self.acks.append((up_to, self.out.last_seq))
                self.out.ack(up_to)
        if not item.sequenced:
            return
        if item.seq <= self.last_seq:
            self.duplicates.append(item)
            return
        if item.seq != self.last_seq + 1:
            self.gaps.append(f"seq {item.seq} followed seq {self.last_seq}: {item}")
        self.last_seq = item.seq
        self.unique.append(item)

    # -- sending --

    @property
    def current(self) -> Connection:
        assert self.conn is not None, "the session has no connection"
        return self.conn

    @property
    def next_seq(self) -> int:
        """The seq the next sequenced message of the client takes."""
        return self.out.last_seq + 1

    async def send(self, type_: str, **members: Any) -> int:
        """A sequenced client message with the next seq (members in wire names), kept
        for resends; returns its seq."""
        text = compact({"v": 1, "seq": self.next_seq, "type": type_, **members})
        return await self.send_counted(text)

    async def send_counted(self, text: str) -> int:
        """Send ``text``, a valid sequenced client message that carries the next seq
        (in any spelling), as it is; it is kept for resends. Returns its seq."""
        decoded = decode_client(text)
        if isinstance(decoded, Invalid):
            raise ValueError(f"the suite built an invalid message: {decoded} ({text})")
        seq = self.next_seq
        if decoded.seq != seq:
            raise ValueError(f"the message carries seq {decoded.seq}, the next is {seq}")
        self.out.send(decoded.message)
        self.sent[seq] = text.encode("utf-8", "surrogatepass")
        await self.current.send(text)
        return seq

    def skip_seqs(self, count: int) -> None:
        """Leave a gap of ``count`` seqs in the client stream (§4.3 tests)."""
        self.out = OutgoingStream(self.out.max_kept, last_seq=self.out.last_seq + count)

    async def resend(self, seq: int) -> None:
        """Send again, byte for byte, the sequenced message sent as ``seq``."""
        await self.current.send(self.sent[seq].decode("utf-8", "surrogatepass"))

    async def text(self, text: str) -> int:
        return await self.send("text", text=text)

    async def ack(self) -> None:
        await self.current.send({"v": 1, "seq": 0, "type": "ack", "upTo": self.last_seq})

    def drop(self) -> None:
        """Lose the current connection without a close frame."""
        self.current.abort()

    # -- the agent's turns --

    async def turn(
        self,
        after: int,
        timeout: float = 5.0,
        *,
        ours: Callable[[Turn], bool] | None = None,
    ) -> Turn:
        """The first turn that begins after server seq ``after`` (and for which ``ours``
        holds, once it ended), read from the session's history and then the wire until
        it ends (``idle``) or is interrupted.

        A turn interrupted by the suite's own next text is not the one it asked for:
        with ``ours`` given, a turn it rejects is dropped and the next one is followed.
        """
        found: Turn | None = None
        items: list[Incoming] = []
        seen: set[int] = set()

        def done(item: Incoming) -> bool:
            nonlocal found
            if item.sequenced:
                if item.seq in seen:
                    return False
                seen.add(item.seq)
            if item.seq <= after and item.sequenced:
                return False
            items.append(item)
            ended = ""
            if item.type == "turn.state":
                if found is None:
                    found = Turn(str(item.get("turnId")), _int(item.get("epoch")))
                if item.get("turnId") == found.turn_id and item.get("state") == "idle":
                    ended = "idle"
            elif (
                item.type == "interrupted"
                and found is not None
                and _int(item.get("epoch")) >= found.epoch
            ):
                ended = "interrupted"
            if not ended or found is None:
                return False
            found.ended = ended
            found.items = list(items)
            if ours is None or ours(found):
                return True
            found = None
            items.clear()
            return False

        conn = self.current
        history = list(self.received)
        conn.cursor = len(conn.received)
        for item in history:
            if done(item):
                assert found is not None
                return found
        await conn.until(done, timeout, "end of the agent's turn")
        assert found is not None
        return found

    def find(self, type_: str, where: Callable[[Incoming], bool] | None = None) -> list[Incoming]:
        """Every distinct message of ``type_`` received in the session (first arrivals)."""
        pool = self.unique if type_ not in TRANSIENT and type_ != "audio" else self.received
        return [i for i in pool if i.type == type_ and (where is None or where(i))]

    async def reply(self, text: str, timeout: float = 5.0, *, expect: str | None = None) -> Turn:
        """Send user ``text`` and read the agent's turn answering it, to its end; with
        ``expect``, the turn whose reply text is ``expect``."""
        after = self.last_seq
        await self.text(text)
        if expect is None:
            return await self.turn(after, timeout, ours=lambda t: t.ended == "idle")
        return await self.turn(after, timeout, ours=lambda t: t.text == expect)

    def turns(self) -> dict[str, str]:
        """Every turn of the session so far: turnId -> its reply text."""
        texts: dict[str, str] = {}
        for item in self.unique:
            if item.type == "turn.state":
                texts.setdefault(str(item.get("turnId")), "")
            elif item.type == "text" and item.get("turnId") is not None:
                turn_id = str(item.get("turnId"))
                texts[turn_id] = texts.get(turn_id, "") + str(item.get("text"))
        return texts

    async def close(self) -> None:
        for conn in self.connections:
            await conn.close()


def _int(value: Any) -> int:
    return value if type(value) is int else -1
