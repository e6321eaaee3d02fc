"""The client suite's fake server, as one check scripts it: the frames both sides sent
(:class:`WireFrame`), the fake server's side of a session (:class:`ServerSession`) and
one WebSocket from the client under test (:class:`Connection`): send sequenced messages
(kept for resends, or lost on purpose), tool calls, audio, drop or close.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

import websockets
from websockets.asyncio.server import ServerConnection

from ..protocol.frames import FrameKind, build_frame
from .spec_tables import CLIENT_SEQUENCED

__all__ = [
    "BYTES_PER_MS",
    "PCM16",
    "PROMPT",
    "Connection",
    "Recorder",
    "ServerSession",
    "WireFrame",
    "text_of",
]

PCM16: Final[dict[str, Any]] = {"encoding": "pcm16", "sampleRate": 24000}
#: pcm16 at 24000 Hz, mono: bytes per millisecond of output audio.
BYTES_PER_MS: Final = 48
#: How long a check waits for something a client does promptly.
PROMPT: Final = 3.0


class Recorder(Protocol):
    """What a connection tells about itself (the check's harness keeps the transcript)."""

    auto_ack: bool
    auto_pong: bool

    def now(self) -> float: ...

    def new_id(self, prefix: str) -> str: ...

    def record(self, conn: Connection, from_client: bool, data: str | bytes) -> WireFrame: ...

    def note(self, conn: Connection | None, text: str) -> None: ...


# --- the wire as the suite saw it ---------------------------------------------------


@dataclass
class WireFrame:
    """One frame on one connection, in either direction."""

    t: float
    conn: int
    from_client: bool
    data: str | bytes
    message: dict[str, Any] | None

    @classmethod
    def of(cls, t: float, conn: int, from_client: bool, data: str | bytes) -> WireFrame:
        """A frame as sent, with its JSON object parsed when it is one."""
        return cls(t, conn, from_client, data, _parse(data))

    @property
    def type(self) -> str | None:
        kind = self.message.get("type") if self.message is not None else None
        return kind if isinstance(kind, str) else None

    @property
    def seq(self) -> int | None:
        seq = self.message.get("seq") if self.message is not None else None
        return seq if type(seq) is int else None

    @property
    def sequenced(self) -> bool:
        """A client message of a sequenced type (§4.1)."""
        return self.type in CLIENT_SEQUENCED

    def describe(self) -> str:
        arrow = "C→S" if self.from_client else "S→C"
        if isinstance(self.data, bytes):
            body = _describe_binary(self.data)
        else:
            body = self.data if len(self.data) <= 400 else self.data[:400] + "…"
        return f"{self.t:7.3f} #{self.conn} {arrow} {body}"


def _describe_binary(data: bytes) -> str:
    if len(data) < 5:
        return f"binary {data.hex()} ({len(data)} bytes)"
    return (
        f"binary kind={data[0]} seq={int.from_bytes(data[1:5], 'big')} "
        f"payload={len(data) - 5} bytes"
    )


def _parse(data: str | bytes) -> dict[str, Any] | None:
    if isinstance(data, bytes):
        return None
    try:
        value = json.loads(data)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def text_of(message: Mapping[str, Any]) -> str:
    """A message as the fake server writes it: compact JSON."""
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False)


@dataclass
class ServerSession:
    """The fake server's side of one session: its stream and what it saw of the client's."""

    id: str
    capabilities: list[str]
    #: Every sequenced message the suite sent (or lost on purpose), as (seq, text).
    sent: list[tuple[int, str]] = field(default_factory=list)
    #: (time, seq) of each sequenced send, to judge acks against what was sent by then.
    sent_at: list[tuple[float, int]] = field(default_factory=list)
    #: The highest client seq received in this session (the server's lastSeq, §4.2).
    client_last: int = 0
    audio_seq: int = 0

    @property
    def last_seq(self) -> int:
        return self.sent[-1][0] if self.sent else 0


class Connection:
    """One WebSocket from the client under test, scripted by a check."""

    def __init__(self, harness: Recorder, number: int, ws: ServerConnection) -> None:
        self.h = harness
        self.number = number
        self.ws = ws
        #: The request target the client connected to (path and query).
        self.target = ws.request.path if ws.request is not None else ""
        self.session: ServerSession | None = None
        self.inbox: asyncio.Queue[WireFrame | None] = asyncio.Queue()
        self.closed = asyncio.Event()
        self.auto_ack = harness.auto_ack
        self.auto_pong = harness.auto_pong
        #: Who closed the connection and with which code, once closed.
        self.close_note = ""

    # -- receiving --

    async def next(self, timeout: float = PROMPT) -> WireFrame | None:
        """The next frame from the client; None when the connection closed or on timeout."""
        if self.inbox.empty() and self.closed.is_set():
            return None
        try:
            return await asyncio.wait_for(self.inbox.get(), timeout)
        except TimeoutError:
            return None

    async def received(self, frame: WireFrame) -> None:
        """A frame from the client: a ping answered, a sequenced message acknowledged
        (as the harness is set to), then into the inbox."""
        if frame.type == "ping" and self.auto_pong:
            await self.send({"v": 1, "seq": 0, "type": "pong"})
        session = self.session
        if session is not None and frame.sequenced and frame.seq is not None:
            session.client_last = max(session.client_last, frame.seq)
            if self.auto_ack:
                await self.send({"v": 1, "seq": 0, "type": "ack", "upTo": session.client_last})
        self.inbox.put_nowait(frame)

    # -- sending --

    async def send(self, message: Mapping[str, Any]) -> None:
        await self.send_raw(text_of(message))

    async def send_raw(self, data: str | bytes, *, record: bool = True) -> None:
        if record:
            self.h.record(self, False, data)
        with contextlib.suppress(websockets.ConnectionClosed):
            await self.ws.send(data)

    def _next_sequenced(self, type: str, members: Mapping[str, Any]) -> tuple[int, str]:
        session = self.session
        if session is None:
            raise RuntimeError("a sequenced message before ready")
        seq = session.last_seq + 1
        text = text_of({"v": 1, "seq": seq, "type": type, **members})
        session.sent.append((seq, text))
        session.sent_at.append((self.h.now(), seq))
        return seq, text

    async def send_seq(self, type: str, **members: Any) -> int:
        """A sequenced server message with the session's next seq; kept for resends."""
        seq, text = self._next_sequenced(type, members)
        await self.send_raw(text)
        return seq

    def lose_seq(self, type: str, **members: Any) -> int:
        """A sequenced message the suite counts as sent but that never reached the
        client (lost with the connection): only a resume delivers it."""
        seq, text = self._next_sequenced(type, members)
        self.h.note(self, f"suite counts as sent, and loses, {text}")
        return seq

    def call_message(
        self, name: str, arguments: Any, *, epoch: int = 1, call_id: str | None = None
    ) -> dict[str, Any]:
        """The members of a ``tool.call`` of ``epoch`` (a new callId unless given)."""
        return {
            "callId": call_id or self.h.new_id("call"),
            "name": name,
            "arguments": arguments,
            "turnId": f"turn-{epoch}",
            "epoch": epoch,
        }

    async def tool_call(
        self,
        name: str,
        arguments: Any,
        *,
        epoch: int = 1,
        call_id: str | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> str:
        """Send a ``tool.call``; its callId."""
        members = {
            **self.call_message(name, arguments, epoch=epoch, call_id=call_id),
            **(extra or {}),
        }
        await self.send_seq("tool.call", **members)
        return str(members["callId"])

    async def audio_start(self, item_id: str, epoch: int) -> None:
        await self.send(
            {
                "v": 1,
                "seq": 0,
                "type": "audio.start",
                "itemId": item_id,
                "turnId": f"turn-{epoch}",
                "epoch": epoch,
            }
        )

    async def audio(self, ms: int, *, frame_ms: int = 100) -> None:
        """``ms`` of output audio (pcm16 24 kHz silence) in frames of ``frame_ms``; the
        transcript shows one line for the burst."""
        session = self.session
        first = session.audio_seq if session is not None else 0
        count = 0
        for start in range(0, ms, frame_ms):
            length = min(frame_ms, ms - start)
            frame = build_frame(FrameKind.OUTPUT, first + count, bytes(length * BYTES_PER_MS))
            await self.send_raw(frame, record=False)
            count += 1
        if session is not None:
            session.audio_seq = first + count
        self.h.note(
            self, f"S→C {count} output audio frames, seq {first}..{first + count - 1}, {ms} ms"
        )

    async def interrupted_item(self, item_id: str, epoch: int, ms: int, *, after: float) -> None:
        """An output audio item of ``ms`` in ``epoch``, whose epoch the suite closes
        (``interrupted``) ``after`` seconds later, while the client plays it."""
        await self.audio_start(item_id, epoch)
        await self.audio(ms)
        await asyncio.sleep(after)
        await self.send_seq("interrupted", epoch=epoch)

    async def drop(self) -> None:
        """Cut the connection without a closing handshake (a lost network)."""
        await asyncio.sleep(0.02)  # let frames already written leave the socket
        self.h.note(self, "suite drops the connection (no close frame)")
        self.ws.transport.abort()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.closed.wait(), 2.0)

    async def close(self, code: int = 1000, reason: str = "") -> None:
        self.h.note(self, f"suite closes the connection with {code} {reason!r}")
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.ws.close(code, reason), 2.0)
