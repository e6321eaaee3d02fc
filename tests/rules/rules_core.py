"""Drive the sans-I/O core by hand for the tests of tests/rules: no asyncio, no sockets.

A server side is a :class:`ServerConnection` bound to a :class:`ServerSession`, fed
encoded client frames; a client side is a :class:`ClientSession` fed encoded server
frames. What either writes is read back with the very decoders a peer would use.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vrt.protocol.client.session import ClientSession
from vrt.protocol.codec import Invalid, decode_client, decode_server, encode
from vrt.protocol.frames import AudioFrame, FrameKind, build_frame, parse_frame
from vrt.protocol.messages import PCM16_24K, UNSET, Hello, Message, Ready, Tool
from vrt.protocol.outputs import Close, Output, SendBinary, SendText
from vrt.protocol.server.config import ServerConfig
from vrt.protocol.server.connection import ServerConnection
from vrt.protocol.server.events import HelloReceived
from vrt.protocol.server.session import ServerSession

TOOL_STREAM = "tool-stream-v1"
LOOKUP = Tool(name="lookup")


@dataclass
class Written:
    """What one side wrote, decoded: text messages with their seq, audio frames, closes."""

    messages: list[tuple[int, Message]] = field(default_factory=list)
    frames: list[AudioFrame] = field(default_factory=list)
    closes: list[Close] = field(default_factory=list)

    def of(self, kind: type[Message]) -> list[Any]:
        return [message for _, message in self.messages if isinstance(message, kind)]


def read(outputs: list[Output], *, by: str) -> Written:
    """Decode ``outputs`` as the peer of ``by`` ("server" or "client") would."""
    written = Written()
    decode = decode_server if by == "server" else decode_client
    receiver = "client" if by == "server" else "server"
    for output in outputs:
        if isinstance(output, SendText):
            decoded = decode(output.data)
            assert not isinstance(decoded, Invalid), decoded
            written.messages.append((decoded.seq, decoded.message))
        elif isinstance(output, SendBinary):
            frame = parse_frame(output.data, receiver)  # type: ignore[arg-type]
            assert not isinstance(frame, Invalid), frame
            written.frames.append(frame)
        else:
            assert isinstance(output, Close)
            written.closes.append(output)
    return written


# -- the server side ------------------------------------------------------------------


@dataclass
class Server:
    """A server connection with its session open, at time ``now``."""

    connection: ServerConnection
    session: ServerSession
    config: ServerConfig
    seq: int = 0  # the last seq the client used

    def send(self, message: Message, now: float) -> None:
        """A sequenced client message, as a text frame (the driver reports no other frame)."""
        self.seq += 1
        self.connection.receive_text(encode(message, self.seq), now)

    def written(self) -> Written:
        return read(self.connection.take_outbox(), by="server")


def open_server(
    *,
    tools: tuple[Tool, ...] = (LOOKUP,),
    capabilities: tuple[str, ...] = (TOOL_STREAM,),
    config: ServerConfig | None = None,
    now: float = 0.0,
) -> Server:
    """A connection that received ``hello`` and opened a new session; ``ready`` is taken."""
    config = config or ServerConfig()
    connection = ServerConnection(config, now)
    hello = Hello(tools=tools or UNSET, capabilities=capabilities or UNSET)
    connection.receive_text(encode(hello, 0), now)
    events = connection.take_events()
    assert len(events) == 1
    assert isinstance(events[0], HelloReceived)
    session = ServerSession(events[0].hello, config)
    assert connection.open(session, now) is None
    server = Server(connection, session, config)
    opened = server.written()
    assert opened.of(Ready), opened
    return server


def issued_client_call(server: Server, now: float = 0.0) -> tuple[str, str]:
    """A client call of a new ``acting`` turn, issued; what was written is taken."""
    session = server.session
    turn_id = session.begin_turn("acting")
    call_id = session.tool_calls.start(turn_id, LOOKUP.name)
    assert call_id is not None
    assert session.tool_calls.issue(call_id, {"q": "x"}, now)
    server.written()
    session.take_events()
    return turn_id, call_id


# -- the client side ------------------------------------------------------------------


@dataclass
class Client:
    """A client session opened on its first connection."""

    session: ClientSession
    seq: int = 0  # the last seq the server used

    def deliver(self, message: Message, now: float) -> None:
        """The server's next sequenced message."""
        self.seq += 1
        self.session.receive_text(encode(message, self.seq), now)

    def written(self) -> Written:
        return read(self.session.take_outbox(), by="client")


def open_client(
    *,
    tools: tuple[Tool, ...] = (LOOKUP,),
    capabilities: tuple[str, ...] = (TOOL_STREAM,),
    now: float = 0.0,
) -> Client:
    """A client session that sent ``hello`` and received ``ready``; both are taken."""
    session = ClientSession(tools=tools, capabilities=capabilities)
    session.connection_made(now)
    ready = Ready(
        session_id="s_rules",
        input=PCM16_24K,
        output=PCM16_24K,
        capabilities=capabilities or UNSET,
    )
    session.receive_text(encode(ready, 0), now)
    client = Client(session)
    client.written()
    session.take_events()
    return client


def output_frame(seq: int, payload: bytes = b"\x00\x00" * 240) -> bytes:
    """An output audio frame (§8.1) as the server writes it."""
    return build_frame(FrameKind.OUTPUT, seq, payload)


def input_frame(seq: int, payload: bytes = b"\x00\x00" * 240) -> bytes:
    """An input audio frame (§8.1) as the client writes it."""
    return build_frame(FrameKind.INPUT, seq, payload)
