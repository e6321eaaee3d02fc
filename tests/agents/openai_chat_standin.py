"""A stand-in for an OpenAI-compatible Chat Completions server, on a real local socket.

It speaks HTTP/1.1 over asyncio streams (one request per connection,
``Connection: close``) and answers each ``POST .../chat/completions`` with the next
scripted reply, recording every request (method, path, headers, JSON body) and whether
the client closed the connection before the reply was over.

The streamed format is the documented one:

* ``Content-Type: text/event-stream``; each event is ``data: <json>`` and a blank line,
  the stream ends with ``data: [DONE]`` (OpenAI API reference, "Chat Completions /
  streaming"; openai-python ``src/openai/_streaming.py``, which stops at ``[DONE]`` and
  raises on a ``data`` object with an ``error`` member);
* each event is a ``chat.completion.chunk``: ``{id, object, created, model, choices:
  [{index, delta, logprobs, finish_reason}]}``; ``delta`` has ``role`` (first chunk),
  ``content`` fragments, or ``tool_calls`` entries ``{index, id, type: "function",
  function: {name, arguments}}`` whose ``id`` and ``name`` come with the first fragment
  and whose ``arguments`` JSON text follows in fragments; the last chunk has an empty
  ``delta`` and ``finish_reason`` ``"stop"`` or ``"tool_calls"`` (openai-python
  ``src/openai/types/chat/chat_completion_chunk.py``: ``ChatCompletionChunk``,
  ``Choice``, ``ChoiceDelta``, ``ChoiceDeltaToolCall``).

Usage::

    standin = ChatStandIn()
    url = await standin.start()          # http://127.0.0.1:PORT/v1
    standin.reply(text_reply("Hel", "lo"))
    ...
    request = await standin.request(0)   # waits for it
    request.body["messages"]
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import deque
from dataclasses import dataclass, field
from typing import Any, TypeAlias

__all__ = [
    "ChatStandIn",
    "Cut",
    "Event",
    "Gate",
    "Pause",
    "Recorded",
    "Reply",
    "Status",
    "Stream",
    "chunk",
    "text_reply",
    "tool_call_reply",
]


# --- what a reply is made of ------------------------------------------------------------


@dataclass(frozen=True)
class Event:
    """One server-sent event ``data: <data>`` (a dict is sent as JSON)."""

    data: dict[str, Any] | str
    name: str | None = None  # an ``event:`` field


@dataclass(frozen=True)
class Pause:
    seconds: float


@dataclass(frozen=True)
class Gate:
    """Hold the stream until ``event`` is set (or the client goes away)."""

    event: asyncio.Event


@dataclass(frozen=True)
class Cut:
    """Close the connection here, without ending the HTTP body: a provider disconnect."""


Part: TypeAlias = Event | Pause | Gate | Cut


@dataclass(frozen=True)
class Stream:
    """A ``200 text/event-stream`` reply; ``done`` appends ``data: [DONE]``."""

    parts: tuple[Part, ...]
    done: bool = True


@dataclass(frozen=True)
class Status:
    """A non-streamed JSON reply, e.g. ``Status(500, {"error": {...}})``."""

    code: int
    body: Any


Reply: TypeAlias = Stream | Status


def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> Event:
    """One ``chat.completion.chunk`` event with ``choices[0].delta = delta``."""
    return Event(
        {
            "id": "chatcmpl-standin",
            "object": "chat.completion.chunk",
            "created": 1_700_000_000,
            "model": "standin",
            "system_fingerprint": None,
            "choices": [
                {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
            ],
        }
    )


def text_reply(*parts: str | Pause | Gate | Cut, finish: str | None = "stop") -> Stream:
    """A streamed assistant message: the role, one chunk per string, the finish chunk
    (none when ``finish`` is None), ``[DONE]`` unless the stream is cut."""
    events: list[Part] = [chunk({"role": "assistant", "content": ""})]
    events.extend(chunk({"content": p}) if isinstance(p, str) else p for p in parts)
    cut = any(isinstance(p, Cut) for p in parts)
    if finish is not None and not cut:
        events.append(chunk({}, finish))
    return Stream(tuple(events), done=not cut)


def tool_call_reply(*calls: tuple[str, str, list[str]], text: str | None = None) -> Stream:
    """Streamed tool calls ``(provider id, function name, argument fragments)``, as
    OpenAI sends them: the id, type and name with an empty first fragment, then the
    arguments in fragments, all keyed by ``index``; finish ``tool_calls``."""
    events: list[Part] = [chunk({"role": "assistant", "content": text})]
    for index, (call_id, name, fragments) in enumerate(calls):
        first = {
            "index": index,
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": ""},
        }
        events.append(chunk({"tool_calls": [first]}))
        events.extend(
            chunk({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]})
            for fragment in fragments
        )
    events.append(chunk({}, "tool_calls"))
    return Stream(tuple(events))


# --- the server -------------------------------------------------------------------------


@dataclass
class Recorded:
    """One request the stand-in received."""

    method: str
    path: str
    headers: dict[str, str]  # names lower-cased
    body: Any
    #: The whole reply was written.
    finished: asyncio.Event = field(default_factory=asyncio.Event)
    #: The client closed the connection before the reply was over.
    client_closed: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def messages(self) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = self.body["messages"]
        return messages


class ChatStandIn:
    """The stand-in server. Replies are used in order, one per request; a request with
    no reply left gets a 500 saying so."""

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self._replies: deque[Reply] = deque()
        self._server: asyncio.Server | None = None
        self._arrived = asyncio.Condition()
        self._handlers: set[asyncio.Task[None]] = set()
        self.url = ""

    def reply(self, *replies: Reply) -> None:
        """Script the replies to the next requests."""
        self._replies.extend(replies)

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}/v1"
        return self.url

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._handlers):
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)

    async def request(self, index: int, timeout: float = 5.0) -> Recorded:
        """The ``index``-th request (from 0), once it arrived."""
        async with self._arrived:
            await asyncio.wait_for(
                self._arrived.wait_for(lambda: len(self.requests) > index), timeout
            )
        return self.requests[index]

    # -- connections --

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.get_running_loop().create_task(self._serve(reader, writer))
        self._handlers.add(task)
        task.add_done_callback(self._handlers.discard)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            recorded = await self._read_request(reader)
            if recorded is None:
                return
            async with self._arrived:
                self.requests.append(recorded)
                self._arrived.notify_all()
            reply = self._replies.popleft() if self._replies else _NOTHING_SCRIPTED
            if isinstance(reply, Status):
                await _write_status(writer, reply)
                recorded.finished.set()
            else:
                await self._stream(recorded, reply, reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    @staticmethod
    async def _read_request(reader: asyncio.StreamReader) -> Recorded | None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            return None
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        raw = await reader.readexactly(length) if length else b""
        body = json.loads(raw) if raw else None
        return Recorded(method, path, headers, body)

    async def _stream(
        self,
        recorded: Recorded,
        reply: Stream,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        writer.write(
            b"HTTP/1.1 200 OK\r\n"
            b"Content-Type: text/event-stream\r\n"
            b"Cache-Control: no-cache\r\n"
            b"Transfer-Encoding: chunked\r\n"
            b"Connection: close\r\n\r\n"
        )
        await writer.drain()
        # The client sends nothing more on this connection: EOF means it hung up.
        gone = asyncio.get_running_loop().create_task(reader.read(1))
        try:
            parts: list[Part] = list(reply.parts)
            if reply.done:
                parts.append(Event("[DONE]"))
            for part in parts:
                if gone.done():
                    break
                if isinstance(part, Cut):
                    return  # the connection closes without the last chunk
                if isinstance(part, Pause | Gate):
                    waiter = (
                        asyncio.ensure_future(asyncio.sleep(part.seconds))
                        if isinstance(part, Pause)
                        else asyncio.ensure_future(part.event.wait())
                    )
                    await asyncio.wait({waiter, gone}, return_when=asyncio.FIRST_COMPLETED)
                    waiter.cancel()
                    continue
                writer.write(_chunked(_sse(part)))
                await writer.drain()
            if not gone.done():
                writer.write(b"0\r\n\r\n")
                await writer.drain()
                recorded.finished.set()
        except ConnectionError:
            pass
        finally:
            if gone.done() and not recorded.finished.is_set():
                recorded.client_closed.set()
            gone.cancel()


_NOTHING_SCRIPTED = Status(500, {"error": {"message": "the stand-in has no scripted reply"}})

_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found"}


def _sse(event: Event) -> bytes:
    data = event.data if isinstance(event.data, str) else json.dumps(event.data)
    lines = [f"event: {event.name}"] if event.name else []
    lines.extend(f"data: {line}" for line in data.split("\n"))
    return ("\n".join(lines) + "\n\n").encode()


def _chunked(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


async def _write_status(writer: asyncio.StreamWriter, reply: Status) -> None:
    body = json.dumps(reply.body).encode()
    reason = _REASONS.get(reply.code, "Internal Server Error" if reply.code >= 500 else "Error")
    writer.write(
        f"HTTP/1.1 {reply.code} {reason}\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n".encode()
        + body
    )
    await writer.drain()
