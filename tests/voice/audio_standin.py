"""A stand-in for an OpenAI-compatible audio server, on a real local socket: ``POST
.../audio/transcriptions`` (a multipart form with ``file``, ``model``,
``response_format``; answers ``{"text": ...}``) and ``POST .../audio/speech`` (JSON
``{model, input, voice, response_format: "pcm"}``; answers raw 16-bit mono PCM at 24 kHz,
in two parts), as the OpenAI API reference ("Audio") documents them. Each request is
recorded; ``status`` makes every answer an error of that HTTP status."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field


@dataclass(slots=True)
class Request:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass(slots=True)
class AudioStandIn:
    transcript: str = "hello world"
    speech: bytes = b""  # pcm16 at 24 kHz
    status: int = 200
    #: Answer nothing (the connection stays open): a server that hangs.
    stall: bool = False
    requests: list[Request] = field(default_factory=list)
    _server: asyncio.Server | None = None
    _closing: asyncio.Event = field(default_factory=asyncio.Event)

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/v1"

    async def close(self) -> None:
        self._closing.set()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = (await reader.readline()).decode()
            _, path, _ = line.split(" ", 2)
            headers: dict[str, str] = {}
            while (header := (await reader.readline()).decode().strip()) != "":
                name, _, value = header.partition(":")
                headers[name.strip().lower()] = value.strip()
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            self.requests.append(Request(path, headers, body))
            if self.stall:
                await self._closing.wait()
                return
            if self.status != 200:
                error = json.dumps({"error": {"message": "refused"}}).encode()
                await self._answer(writer, self.status, "application/json", [error])
            elif path.endswith("/audio/transcriptions"):
                answer = json.dumps({"text": self.transcript}).encode()
                await self._answer(writer, 200, "application/json", [answer])
            elif path.endswith("/audio/speech"):
                half = len(self.speech) // 4 * 2
                await self._answer(
                    writer, 200, "audio/pcm", [self.speech[:half], self.speech[half:]]
                )
            else:
                await self._answer(writer, 404, "text/plain", [b"no such path"])
        finally:
            writer.close()

    @staticmethod
    async def _answer(
        writer: asyncio.StreamWriter, status: int, kind: str, parts: list[bytes]
    ) -> None:
        size = sum(len(part) for part in parts)
        writer.write(
            f"HTTP/1.1 {status} X\r\nContent-Type: {kind}\r\nContent-Length: {size}\r\n"
            "Connection: close\r\n\r\n".encode()
        )
        for part in parts:
            writer.write(part)
            await writer.drain()
            await asyncio.sleep(0.01)
