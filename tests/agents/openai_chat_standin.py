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

The requests are checked as the servers check them; a request they would refuse gets
the same refusal here, before any scripted reply (see :func:`refusal`, each rule with its
source): a function name outside OpenAI's pattern, tool-call arguments in the history
that are not a JSON object (Ollama answers 400), a tool message that answers no call or
a call no tool message answers (OpenAI answers 400), and, with ``refuse_stream_options``,
a ``stream_options`` member (servers that predate it answer 400). A request with
``stream_options.include_usage`` gets a last chunk with ``usage`` before ``[DONE]``.

Two modes make the stand-in a provider that attaches members of its own to what it
streams and refuses a history that does not bring them back (:meth:`ChatStandIn.refusal`):

* ``thought_signatures`` (Gemini 3 through Google's OpenAI-compatible endpoint): the
  first tool call of each streamed reply carries ``extra_content.google.thought_signature``
  ("Gemini 3 … must pass back thought signatures during function calling", for parallel
  calls only the first has one: ai.google.dev/gemini-api/docs/thought-signatures; the
  OpenAI-compatible form in crmne/ruby_llm#588). A call of the history that had one and
  comes back without it is refused with Google's 400, whose body is a JSON *list*
  (quoted in github.com/manthanabc/paws/issues/103); one whose signature is not one the
  stand-in gave, with "Corrupted thought signature."
  (github.com/charmbracelet/crush/issues/1698).
* ``reasoning`` (DeepSeek's thinking mode): every streamed reply begins with
  ``delta.reasoning_content`` fragments, then ``content`` chunks carry
  ``"reasoning_content": null``; an assistant message of the history without
  ``reasoning_content`` is refused with DeepSeek's 400 "Missing `reasoning_content` field
  in the assistant message at message index N"
  (api-docs.deepseek.com/guides/thinking_mode#tool-calls, quoted in
  github.com/continuedev/continue/issues/10193; DeepSeek V4 wants it on every assistant
  message: github.com/openclaw/openclaw/issues/73417).
* ``reasoning_display_only`` (DeepSeek's ``deepseek-reasoner`` as first released):
  streams ``reasoning_content`` the same way but refuses an assistant message that
  brings it back, with 400 "The reasoning_content is an intermediate result for display
  purposes only ... Please remove the reasoning_content from your message"
  (api-docs.deepseek.com/guides/reasoning_model, quoted in
  github.com/OpenHands/software-agent-sdk/pull/1464; the message in
  github.com/Euyug/Mirai-Gpt-Plugin/issues/4).

Every request is checked against the openai package's own types (openai-python
``src/openai/types/chat/completion_create_params.py``, ``CompletionCreateParamsStreaming``:
every member declared and of its type), and every chunk the stand-in streams against
its ``ChatCompletionChunk`` model, with no member the model does not declare; the
provider members of the modes above (and any a test names in
:attr:`ChatStandIn.provider_members`) are the only exceptions. What the SDK's types
refuse is recorded in :attr:`ChatStandIn.invalid`, and ``close`` fails the test.

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
import re
from collections import deque
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from openai.types.chat.chat_completion_chunk import ChatCompletionChunk
from openai.types.chat.completion_create_params import CompletionCreateParamsStreaming
from pydantic import ConfigDict, TypeAdapter, ValidationError

from support.sdk_types import materialized, undeclared_members

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
    "refusal",
    "request_problem",
    "text_reply",
    "tool_call_reply",
    "usage_chunk",
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


def tool_call_reply(
    *calls: tuple[str, str, list[str]],
    text: str | None = None,
    id_per_chunk: bool = False,
    same_index: bool = False,
    finish: str = "tool_calls",
) -> Stream:
    """Streamed tool calls ``(provider id, function name, argument fragments)``, as
    OpenAI sends them: the id, type and name with an empty first fragment, then the
    arguments in fragments, all keyed by ``index``; finish ``tool_calls``.

    ``id_per_chunk``: every fragment comes with a new id and the name again, as vLLM's
    streaming of gpt-oss tool calls did (``make_tool_call_id()`` per chunk,
    github.com/vllm-project/vllm/pull/23522; also vllm.rs,
    github.com/guoqingbao/xinfer/pull/232). ``same_index``: every call at index 0, told
    apart by its id, as vLLM and SGLang streamed parallel calls
    (github.com/InternLM/lmdeploy/issues/3412)."""
    events: list[Part] = [chunk({"role": "assistant", "content": text})]
    for number, (call_id, name, fragments) in enumerate(calls):
        index = 0 if same_index else number
        first = {
            "index": index,
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": ""},
        }
        events.append(chunk({"tool_calls": [first]}))
        for n, fragment in enumerate(fragments):
            entry: dict[str, Any] = {"index": index, "function": {"arguments": fragment}}
            if id_per_chunk:
                entry = {
                    **first,
                    "id": f"{call_id}_{n}",
                    "function": {"name": name, "arguments": fragment},
                }
            events.append(chunk({"tool_calls": [entry]}))
    events.append(chunk({}, finish))
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
    no reply left gets a 500 saying so. A request the real servers refuse is refused
    (:func:`refusal`) without using a reply."""

    def __init__(self) -> None:
        #: Refuse ``stream_options`` as a server that does not know it does.
        self.refuse_stream_options = False
        #: Gemini 3's thought signatures and DeepSeek's reasoning (module docstring).
        self.thought_signatures = False
        self.reasoning = False
        self.reasoning_display_only = False
        #: The signature given to each call id, and the reasoning of each reply, in order.
        self.signatures: dict[str, str] = {}
        self.reasonings: list[str] = []
        #: Members of assistant messages, tool calls and their functions (and of the
        #: deltas that carry them) that the SDK's types do not declare but a provider
        #: sends and wants back; the modes add their own.
        self.provider_members: set[str] = set()
        #: Requests and chunks the SDK's types refuse (module docstring).
        self.invalid: list[str] = []
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
        if self.invalid:
            problems = "\n  ".join(self.invalid[:10])
            raise AssertionError(f"what the openai SDK's types refuse:\n  {problems}")

    def _allowed(self) -> frozenset[str]:
        allowed = set(self.provider_members)
        if self.thought_signatures:
            allowed.add("extra_content")
        if self.reasoning or self.reasoning_display_only:
            allowed.add("reasoning_content")
        return frozenset(allowed)

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
            problem = request_problem(recorded.body, self._allowed())
            if problem is not None:
                self.invalid.append(f"the adapter sent {problem}")
            async with self._arrived:
                self.requests.append(recorded)
                self._arrived.notify_all()
            refused = refusal(
                recorded.body, refuse_stream_options=self.refuse_stream_options
            ) or self._provider_refusal(recorded.body)
            if refused is not None:
                reply: Reply = refused
            else:
                reply = self._replies.popleft() if self._replies else _NOTHING_SCRIPTED
                if isinstance(reply, Stream):
                    reply = self._attach(reply)
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

    # -- the provider's own members --

    def _attach(self, reply: Stream) -> Stream:
        """``reply`` with the members the mode's provider attaches (module docstring)."""
        parts: list[Part] = list(reply.parts)
        if self.thought_signatures:
            for n, part in enumerate(parts):
                delta = _delta_of(part)
                calls = delta.get("tool_calls") if delta is not None else None
                if delta is not None and calls and calls[0].get("id"):
                    signature = f"sig-{len(self.signatures) + 1}-" + "A" * 40
                    self.signatures[calls[0]["id"]] = signature
                    first = {
                        **calls[0],
                        "extra_content": {"google": {"thought_signature": signature}},
                    }
                    parts[n] = chunk({**delta, "tool_calls": [first, *calls[1:]]})
                    break  # only the first call of a step is signed
        if self.reasoning or self.reasoning_display_only:
            number = len(self.reasonings) + 1
            fragments = [f"The user wants {number}; ", "let me think ", "step by step."]
            self.reasonings.append("".join(fragments))
            for n, part in enumerate(parts):
                delta = _delta_of(part)
                if delta and delta.get("content"):
                    parts[n] = chunk({**delta, "reasoning_content": None})
            thinking = [
                chunk({"role": "assistant", "content": None, "reasoning_content": f})
                for f in fragments
            ]
            parts[1:1] = thinking
        return Stream(tuple(parts), reply.done)

    def _provider_refusal(self, body: dict[str, Any]) -> Status | None:
        for n, message in enumerate(body.get("messages") or ()):
            if message.get("role") != "assistant":
                continue
            if self.reasoning_display_only and "reasoning_content" in message:
                return _bad_request(
                    "The reasoning_content is an intermediate result for display purposes "
                    "only and will not be included in the context for inference. Please "
                    "remove the reasoning_content from your message to reduce network traffic."
                )
            if self.reasoning and not isinstance(message.get("reasoning_content"), str):
                return _bad_request(
                    "Missing `reasoning_content` field in the assistant message at message "
                    f"index {n}. For more information, please refer to "
                    "https://api-docs.deepseek.com/guides/thinking_mode#tool-calls"
                )
            for call in message.get("tool_calls") or ():
                given = self.signatures.get(call.get("id"))
                if given is None:
                    continue
                extra = call.get("extra_content")
                google = extra.get("google") if isinstance(extra, dict) else None
                sent = google.get("thought_signature") if isinstance(google, dict) else None
                name = (call.get("function") or {}).get("name")
                if sent is None:
                    return _google_error(
                        "Function call is missing a thought_signature in functionCall parts. "
                        "This is required for tools to work correctly, and missing "
                        "thought_signature may lead to degraded model performance. "
                        f"Additional data, function call `default_api:{name}` , position "
                        f"{n + 1}. Please refer to "
                        "https://ai.google.dev/gemini-api/docs/thought-signatures for more "
                        "details."
                    )
                if sent != given:
                    return _google_error("Corrupted thought signature.")
        return None

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
            options = (
                recorded.body.get("stream_options") if isinstance(recorded.body, dict) else None
            )
            if reply.done and isinstance(options, dict) and options.get("include_usage"):
                parts.append(usage_chunk(recorded.body))
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
                problem = chunk_problem(part, self._allowed())
                if problem is not None:
                    self.invalid.append(f"the stand-in sent {problem}")
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

#: OpenAI's function names (see vrt/agents/function_names.py for the sources).
_FUNCTION_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def _bad_request(message: str, param: str | None = None) -> Status:
    # OpenAI's error body: {"error": {message, type, param, code}}.
    error = {"message": message, "type": "invalid_request_error", "param": param, "code": None}
    return Status(400, {"error": error})


# --- the SDK's types -------------------------------------------------------------------

#: The request as the SDK types ``chat.completions.create(stream=True, ...)``: every
#: member declared (extra="forbid") and of its exact type (strict). A list of one,
#: because pydantic takes a config only around a TypedDict, not on it.
_REQUEST: TypeAdapter[Any] = TypeAdapter(
    list[CompletionCreateParamsStreaming], config=ConfigDict(extra="forbid", strict=True)
)


def _without(message: dict[str, Any], allowed: frozenset[str]) -> dict[str, Any]:
    """An assistant message or delta without the provider members ``allowed``, in it,
    in its tool calls and in their functions."""
    out = {k: v for k, v in message.items() if k not in allowed}
    calls = out.get("tool_calls")
    if isinstance(calls, list):
        out["tool_calls"] = [
            {
                k: ({n: x for n, x in v.items() if n not in allowed} if k == "function" else v)
                for k, v in call.items()
                if k not in allowed
            }
            if isinstance(call, dict) and isinstance(call.get("function", {}), dict)
            else call
            for call in calls
        ]
    return out


def request_problem(body: Any, allowed: frozenset[str] = frozenset()) -> str | None:
    """Why the SDK's request types refuse ``body``, or None."""
    if not isinstance(body, dict):
        return f"a body that is not an object: {body!r}"
    messages = body.get("messages")
    if isinstance(messages, list):
        body = {
            **body,
            "messages": [
                _without(m, allowed) if isinstance(m, dict) and m.get("role") == "assistant" else m
                for m in messages
            ],
        }
    try:
        (validated,) = materialized(_REQUEST.validate_python([body]))
    except ValidationError as exc:
        return f"a request: {exc}"
    if validated != body:
        return f"a request the SDK's types read as {validated!r}"
    return None


def chunk_problem(part: Part, allowed: frozenset[str] = frozenset()) -> str | None:
    """Why the SDK's ``ChatCompletionChunk`` refuses a chunk event, or None (other events
    — ``[DONE]``, an error object — are not chunks)."""
    if not isinstance(part, Event) or not isinstance(part.data, dict):
        return None
    data = part.data
    if data.get("object") != "chat.completion.chunk":
        return None
    choices = [
        {**c, "delta": _without(c["delta"], allowed)}
        if isinstance(c, dict) and isinstance(c.get("delta"), dict)
        else c
        for c in data.get("choices") or ()
    ]
    data = {**data, "choices": choices}
    try:
        parsed = ChatCompletionChunk.model_validate(data, strict=True)
    except ValidationError as exc:
        return f"a chunk: {exc}"
    extras = undeclared_members(parsed, "chunk")
    if extras:
        return f"a chunk with members the SDK does not know: {', '.join(extras)}"
    dumped = parsed.model_dump(mode="json", exclude_unset=True, warnings=False)
    if dumped != data:
        return f"a chunk the SDK reads as {dumped!r}"
    return None


def _google_error(message: str) -> Status:
    # Google's OpenAI-compatible endpoint: a list of one {"error": {code, message, status}}.
    return Status(400, [{"error": {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}}])


def _delta_of(part: Part) -> dict[str, Any] | None:
    if isinstance(part, Event) and isinstance(part.data, dict):
        choices = part.data.get("choices") or ()
        if choices:
            delta = choices[0].get("delta")
            return delta if isinstance(delta, dict) else None
    return None


def refusal(body: Any, *, refuse_stream_options: bool = False) -> Status | None:
    """The 400 a real server gives ``body``, if it refuses it."""
    if not isinstance(body, dict):
        return _bad_request("the request body is not a JSON object")
    for n, tool in enumerate(body.get("tools") or ()):
        name = (tool.get("function") or {}).get("name")
        if not isinstance(name, str) or not _FUNCTION_NAME.match(name):
            # OpenAI (github.com/brekkylab/ailoy/pull/109).
            param = f"tools[{n}].function.name"
            return _bad_request(
                f"Invalid '{param}': string does not match pattern. Expected a string "
                "that matches the pattern '^[a-zA-Z0-9_-]+$'.",
                param,
            )
    if refuse_stream_options and "stream_options" in body:
        # A server that predates the member (Azure OpenAI's older API versions refuse
        # it: github.com/langgenius/dify-plugin-sdks/pull/50).
        return _bad_request("Unrecognized request argument supplied: stream_options")
    unanswered: set[str] = set()
    for n, message in enumerate(body.get("messages") or ()):
        role = message.get("role")
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id not in unanswered:
                # OpenAI (github.com/FoundationAgents/OpenManus/issues/744).
                return _bad_request(
                    "Messages with role 'tool' must be a response to a preceding message "
                    "with 'tool_calls'"
                )
            unanswered.discard(call_id)
            continue
        if unanswered:
            # OpenAI (github.com/microsoft/promptflow/pull/3130).
            return _bad_request(
                "An assistant message with 'tool_calls' must be followed by tool messages "
                "responding to each 'tool_call_id'."
            )
        for m, call in enumerate(message.get("tool_calls") or ()):
            unanswered.add(call.get("id"))
            name = (call.get("function") or {}).get("name")
            if not isinstance(name, str) or not _FUNCTION_NAME.match(name):
                # OpenAI checks the names in the history too
                # (github.com/mcp-use/mcp-use/issues/90: 'messages[9].tool_calls[0].function.name').
                return _bad_request(
                    f"Invalid 'messages[{n}].tool_calls[{m}].function.name': string does not "
                    "match pattern. Expected a string that matches the pattern "
                    "'^[a-zA-Z0-9_-]+$'."
                )
            text = (call.get("function") or {}).get("arguments")
            try:
                arguments = json.loads(text) if isinstance(text, str) else None
            except ValueError:
                arguments = None
            if not isinstance(arguments, dict):
                # Ollama's OpenAI layer unmarshals the arguments into a map and answers
                # 400 "invalid tool call arguments" (ollama/ollama openai/openai.go,
                # FromChatRequest); llama.cpp's server fails such a history with a 500
                # (github.com/lemonade-sdk/lemonade/pull/1481).
                return _bad_request("invalid tool call arguments")
    return None


def usage_chunk(body: Any) -> Event:
    """The last chunk of a stream whose request asked for ``include_usage``: "an
    additional chunk ... before the data: [DONE] message ... the choices field will
    always be an empty array" (OpenAI API reference, ``stream_options``, quoted in
    github.com/janhq/cortex.llamacpp/issues/265). Made-up but deterministic figures:
    ten prompt tokens a message, a cached prefix once the history is long."""
    messages = len(body.get("messages") or ())
    prompt = 10 * messages
    cached = 8 if messages > 3 else 0
    usage = {
        "prompt_tokens": prompt,
        "completion_tokens": 5,
        "total_tokens": prompt + 5,
        "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
    }
    return Event(
        {
            "id": "chatcmpl-standin",
            "object": "chat.completion.chunk",
            "created": 1_700_000_000,
            "model": "standin",
            "choices": [],
            "usage": usage,
        }
    )


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
