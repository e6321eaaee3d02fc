"""A WebSocket spoken byte by byte over a plain TCP socket, for tests of RFC 6455 edge
cases that no WebSocket library lets a client get wrong on purpose: reserved bits,
fragmentation, empty close frames, handshake versions.
"""

from __future__ import annotations

import asyncio
import base64
import os
import struct
from dataclasses import dataclass
from typing import cast
from urllib.parse import urlsplit

__all__ = ["RawFrame", "RawSocket", "handshake"]

TEXT, BINARY, CONTINUATION, CLOSE, PING, PONG = 0x1, 0x2, 0x0, 0x8, 0x9, 0xA


@dataclass(frozen=True, slots=True)
class RawFrame:
    fin: bool
    rsv: int
    opcode: int
    payload: bytes

    @property
    def close_code(self) -> int | None:
        return struct.unpack("!H", self.payload[:2])[0] if len(self.payload) >= 2 else None


async def handshake(
    url: str, *, version: str = "13", headers: dict[str, str] | None = None
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, int, dict[str, str]]:
    """Open a TCP connection and send an upgrade request; returns the HTTP status and
    headers of the answer (the stream is left right after them)."""
    parts = urlsplit(url)
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    key = base64.b64encode(os.urandom(16)).decode()
    lines = [
        f"GET {parts.path or '/'} HTTP/1.1",
        f"Host: {parts.hostname}:{parts.port}",
        "Upgrade: websocket",
        "Connection: Upgrade",
        f"Sec-WebSocket-Key: {key}",
        f"Sec-WebSocket-Version: {version}",
        *(f"{name}: {value}" for name, value in (headers or {}).items()),
    ]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5.0)
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    status = int(status_line.split()[1])
    answer = {}
    for line in header_lines:
        if ":" in line:
            name, _, value = line.partition(":")
            answer[name.strip().lower()] = value.strip()
    return reader, writer, status, answer


class RawSocket:
    """An upgraded connection on which the test writes frames exactly as it wants."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def connect(cls, url: str) -> RawSocket:
        reader, writer, status, _ = await handshake(url)
        assert status == 101, status
        return cls(reader, writer)

    def pause_reading(self) -> None:
        """Read nothing more: the server's writes pile up, as for a client that stopped."""
        cast(asyncio.Transport, self.writer.transport).pause_reading()

    def resume_reading(self) -> None:
        cast(asyncio.Transport, self.writer.transport).resume_reading()

    def send(self, opcode: int, payload: bytes = b"", *, fin: bool = True, rsv: int = 0) -> None:
        """One client frame (masked, as RFC 6455 §5.1 requires)."""
        first = (0x80 if fin else 0) | (rsv << 4) | opcode
        size = len(payload)
        if size < 126:
            header = struct.pack("!BB", first, 0x80 | size)
        elif size < 1 << 16:
            header = struct.pack("!BBH", first, 0x80 | 126, size)
        else:
            header = struct.pack("!BBQ", first, 0x80 | 127, size)
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.writer.write(header + mask + masked)

    async def recv(self, timeout: float = 5.0) -> RawFrame | None:
        """The next server frame, or None when the server closed the TCP connection."""
        try:
            first, second = await asyncio.wait_for(self.reader.readexactly(2), timeout)
            size = second & 0x7F
            if size == 126:
                (size,) = struct.unpack("!H", await self.reader.readexactly(2))
            elif size == 127:
                (size,) = struct.unpack("!Q", await self.reader.readexactly(8))
            payload = await self.reader.readexactly(size)
        except asyncio.IncompleteReadError:
            return None
        return RawFrame(bool(first & 0x80), (first >> 4) & 7, first & 0x0F, payload)

    async def until_close(self, timeout: float = 5.0) -> RawFrame:
        """Read frames until the server's close frame, and return it."""
        while True:
            frame = await self.recv(timeout)
            assert frame is not None, "the server dropped the connection without a close frame"
            if frame.opcode == CLOSE:
                return frame

    async def eof(self, timeout: float = 5.0) -> bool:
        """Whether the server ends the TCP connection within ``timeout``."""
        try:
            while await asyncio.wait_for(self.reader.read(65536), timeout):
                pass
        except TimeoutError:
            return False
        except ConnectionResetError:
            return True  # aborted: a reset, not a close
        return True

    def close(self) -> None:
        self.writer.close()
