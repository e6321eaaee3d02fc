"""A local stand-in for Google's Gemini Live API (``BidiGenerateContent``) over a real
WebSocket on loopback.

Built from the published reference, "Live API - WebSockets API reference"
(https://ai.google.dev/api/live; each message below names its section there), the
Live API guides (ai.google.dev/gemini-api/docs/live-api: "Audio formats",
"get-started-websocket") and what integrators report of the service's close codes:

* the first client message is ``setup`` and only the first ("Message to be sent in the
  first (and only in the first) BidiGenerateContentClientMessage"); the answer is
  ``setupComplete`` (a message with no fields); every client message holds exactly one
  of ``setup``, ``clientContent``, ``realtimeInput``, ``toolResponse``;
* a request the service refuses closes the socket with a code and a reason, never an
  ``error`` message: 1007 "Request contains an invalid argument." for a malformed
  request (github.com/google-gemini/cookbook/issues/781; also a malformed tool result,
  github.com/vercel/ai/pull/20698), 1007 "API key not valid. Please pass a valid API
  key." for a wrong key (the API's INVALID_ARGUMENT / API_KEY_INVALID, e.g.
  github.com/babaohuang/GeminiProChat/issues/142), 1008 "models/X is not found for API
  version v1beta, or is not supported for bidiGenerateContent" for a model it does not
  serve (hexdocs.pm/gemini_ex/0.11.0/live_api.md, "Model Availability and Rollout
  Variability"), and a function name outside its rule with 1007 and "Invalid function
  name. Must start with a letter or an underscore..." (the message of
  github.com/google-gemini/gemini-cli/issues/9535);
* ``realtimeInput.audio`` is raw little-endian pcm16 whose rate the MIME type names
  (``audio/pcm;rate=16000``); "Input audio is natively 16kHz, but the Live API will
  resample if needed so any sample rate can be sent" ("Audio formats"); output audio
  is pcm16 at 24 kHz in ``serverContent.modelTurn.parts[].inlineData``;
* automatic activity detection (an energy detector here) ends the user's turn; its
  words come as ``serverContent.inputTranscription`` chunks, the model's as
  ``outputTranscription`` chunks ("BidiGenerateContentTranscription"); activity during
  a generation interrupts it: ``serverContent.interrupted`` then ``turnComplete``
  ("When model is interrupted while generating there will be no 'generation_complete'
  message in interrupted turn, it will go through 'interrupted > turn_complete'"), and
  its unanswered tool calls get ``toolCallCancellation`` ("This message occurs only in
  cases where the clients interrupt server turns");
* ``clientContent`` is "unconditionally appended to the conversation history"; "A
  message here will interrupt any current model generation"; with ``turnComplete``
  false "the server awaits additional messages before starting generation";
* ``toolCall.functionCalls[]`` ({id, name, args}); the model waits for the
  ``toolResponse.functionResponses[]`` matched "by the id field", whose ``response`` is
  a JSON object ("Use 'output' key to specify function output and 'error' key to specify
  error details", FunctionResponse);
* ``usageMetadata`` may ride on any server message ("Server messages may have a
  usageMetadata field"); ``goAway.timeLeft`` warns of a disconnect;
  ``sessionResumptionUpdate`` {newHandle, resumable} is sent when ``setup`` asked for
  resumption, and a ``setup`` with a handle resumes that conversation (an unknown
  handle is refused with 1008 "Requested entity was not found.").
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import logging
import re
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from vrt.audio import EnergyVad
from vrt.protocol.messages import Format

__all__ = ["LOGGER", "Call", "GeminiStandIn", "Reply"]

LOGGER = "gemini_standin"
_KEY_HEADER = "x-goog-api-key"
#: A function name the service takes (gemini-cli#9535's message; ai.google.dev
#: FunctionDeclaration.name).
_FUNCTION_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:-]{0,63}$")
_RATE = re.compile(r"^audio/pcm(?:;\s*rate=(\d+))?$")
INVALID_ARGUMENT = "Request contains an invalid argument."


@dataclass
class Call:
    """A function call of the model (``toolCall.functionCalls[]``)."""

    id: str
    name: str
    args: Any


@dataclass
class Reply:
    """What the model does in one generation: ``audio`` chunks (pcm16 at 24 kHz) with
    the ``transcript`` chunks interleaved, ``interval`` seconds apart; then ``calls``,
    after whose responses the next scripted reply continues the same turn."""

    audio: list[bytes] = field(default_factory=list)
    transcript: list[str] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    interval: float = 0.0


class _Closing(Exception):
    """The service closes the socket with (code, reason). A close reason holds at most
    123 bytes (RFC 6455 §5.5: 125 for the payload, 2 of them the code); the service
    cuts longer ones (integrators quote "...not supported for bidiGenerateContent. Call
    ModelService." where its text goes on)."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason.encode()[:123].decode(errors="ignore")


class _Connection:
    def __init__(self, standin: GeminiStandIn, ws: ServerConnection, number: int) -> None:
        self.standin = standin
        self.ws = ws
        self.number = number
        self.setup: dict[str, Any] | None = None
        self.history: list[dict[str, Any]] = []
        self.vad: EnergyVad | None = None
        self.generating: asyncio.Task[None] | None = None
        #: Calls of the generation in progress still waiting for a response.
        self.waiting: dict[str, Call] = {}
        self.answered: asyncio.Event = asyncio.Event()
        self.user_words: list[str] = []

    async def emit(self, message: dict[str, Any]) -> None:
        self.standin.sent.append((self.number, message))
        with contextlib.suppress(ConnectionClosed):
            await self.ws.send(json.dumps(message))

    # -- client messages --

    async def handle(self, message: Any) -> None:
        # "The JSON object must have exactly one of the fields" (Send messages).
        if not isinstance(message, dict) or len(message) != 1:
            raise _Closing(1007, INVALID_ARGUMENT)
        ((kind, body),) = message.items()
        if kind == "setup":
            if self.setup is not None:
                raise _Closing(1007, INVALID_ARGUMENT)  # only in the first message
            await self._setup(body)
        elif self.setup is None:
            raise _Closing(1007, INVALID_ARGUMENT)  # setup must come first
        elif kind == "realtimeInput":
            await self._realtime_input(body)
        elif kind == "clientContent":
            await self._client_content(body)
        elif kind == "toolResponse":
            await self._tool_response(body)
        else:
            raise _Closing(1007, INVALID_ARGUMENT)

    async def _setup(self, setup: Any) -> None:
        standin = self.standin
        if not isinstance(setup, dict):
            raise _Closing(1007, INVALID_ARGUMENT)
        model = str(setup.get("model") or "")
        if model.removeprefix("models/") not in standin.models:
            raise _Closing(
                1008,
                f"{model} is not found for API version v1beta, or is not supported for "
                "bidiGenerateContent. Call ModelService.ListModels to see the list of "
                "available models and their supported methods.",
            )
        for tool in setup.get("tools") or ():
            for n, declaration in enumerate(tool.get("functionDeclarations") or ()):
                name = declaration.get("name")
                if not isinstance(name, str) or not _FUNCTION_NAME.match(name):
                    raise _Closing(
                        1007,
                        f"* BidiGenerateContentRequest.setup.tools[0].function_declarations[{n}]"
                        ".name: Invalid function name. Must start with a letter or an "
                        "underscore. Must be alphameric (a-z, A-Z, 0-9), underscores (_), "
                        "dots (.), colons (:), or dashes (-), with a maximum length of 64.",
                    )
                schema = declaration.get("parametersJsonSchema")
                if schema is not None and not isinstance(schema, dict):
                    raise _Closing(1007, INVALID_ARGUMENT)
        resumption = setup.get("sessionResumption")
        if isinstance(resumption, dict) and resumption.get("handle"):
            saved = standin.handles.get(str(resumption["handle"]))
            if saved is None:
                raise _Closing(1008, "Requested entity was not found.")
            self.history = list(saved)
        self.setup = setup
        await self.emit({"setupComplete": {}})
        await self._resumption_update()

    async def _resumption_update(self) -> None:
        if not isinstance((self.setup or {}).get("sessionResumption"), dict):
            return
        handle = f"handle_{self.number}_{next(self.standin._ids)}"
        self.standin.handles[handle] = list(self.history)
        # SessionResumptionUpdate {newHandle, resumable}
        await self.emit({"sessionResumptionUpdate": {"newHandle": handle, "resumable": True}})

    async def _realtime_input(self, body: Any) -> None:
        audio = body.get("audio") if isinstance(body, dict) else None
        if not isinstance(audio, dict):
            raise _Closing(1007, INVALID_ARGUMENT)
        match = _RATE.match(str(audio.get("mimeType") or ""))
        if match is None:
            raise _Closing(1007, INVALID_ARGUMENT)
        rate = int(match.group(1) or 16000)
        payload = base64.b64decode(audio.get("data") or "")
        self.standin.audio_in.append((rate, payload))
        if self.vad is None:
            self.vad = EnergyVad(
                threshold=self.standin.threshold, hangover_ms=self.standin.silence_ms
            )
        fmt = Format(encoding="pcm16", sample_rate=rate)
        for event in self.vad.feed(payload, fmt):
            if event.kind == "speech-start":
                await self._interrupt()
            else:
                await self._user_turn()

    async def _user_turn(self) -> None:
        """The end of the user's activity: its transcription, then the answer."""
        words = self.standin.user_transcript.split(" ")
        self.history.append({"role": "user", "parts": [{"text": self.standin.user_transcript}]})
        if (self.setup or {}).get("inputAudioTranscription") is not None:
            for word in words:
                await self.emit({"serverContent": {"inputTranscription": {"text": f"{word} "}}})
        self._generate()

    async def _client_content(self, body: Any) -> None:
        if not isinstance(body, dict):
            raise _Closing(1007, INVALID_ARGUMENT)
        turns = body.get("turns") or []
        if not isinstance(turns, list):
            raise _Closing(1007, INVALID_ARGUMENT)
        await self._interrupt()  # "A message here will interrupt any current model generation"
        self.history.extend(turns)
        if body.get("turnComplete"):
            self._generate()

    async def _tool_response(self, body: Any) -> None:
        responses = body.get("functionResponses") if isinstance(body, dict) else None
        if not isinstance(responses, list) or not responses:
            raise _Closing(1007, INVALID_ARGUMENT)
        for response in responses:
            call_id = response.get("id") if isinstance(response, dict) else None
            known = call_id in self.waiting or call_id in self.standin.cancelled
            if not known or not isinstance(response.get("response"), dict):
                # A response to no call, or one that is not a JSON object (Struct).
                raise _Closing(1007, INVALID_ARGUMENT)
            self.standin.tool_responses.append(response)
            self.waiting.pop(str(call_id), None)
        if not self.waiting:
            self.answered.set()

    # -- the model --

    def _generate(self) -> None:
        standin = self.standin
        reply = standin.replies.popleft() if standin.replies else standin.default_reply
        self.generating = asyncio.get_running_loop().create_task(self._run(reply))
        standin._tasks.add(self.generating)
        self.generating.add_done_callback(standin._tasks.discard)

    async def _run(self, reply: Reply) -> None:
        transcripts = (self.setup or {}).get("outputAudioTranscription") is not None
        audio_bytes = 0
        for n, chunk in enumerate(reply.audio):
            if n and reply.interval:
                await asyncio.sleep(reply.interval)
            audio_bytes += len(chunk)
            self.standin.deltas.append(chunk)
            part = {
                "inlineData": {
                    "mimeType": "audio/pcm;rate=24000",
                    "data": base64.b64encode(chunk).decode(),
                }
            }
            await self.emit({"serverContent": {"modelTurn": {"parts": [part]}}})
            if transcripts and n < len(reply.transcript):
                text = reply.transcript[n]
                await self.emit({"serverContent": {"outputTranscription": {"text": text}}})
        if transcripts:
            for text in reply.transcript[len(reply.audio) :]:
                await self.emit({"serverContent": {"outputTranscription": {"text": text}}})
        self.history.append({"role": "model", "parts": [{"text": "".join(reply.transcript)}]})
        if reply.calls:
            self.waiting = {call.id: call for call in reply.calls}
            self.answered = asyncio.Event()
            calls = [{"id": c.id, "name": c.name, "args": c.args} for c in reply.calls]
            await self.emit({"toolCall": {"functionCalls": calls}})
            await self.answered.wait()  # the model waits for the responses (blocking)
            standin = self.standin
            follow = standin.replies.popleft() if standin.replies else standin.default_reply
            await self._run(follow)
            return
        self.generating = None
        # UsageMetadata rides on the turn's last message.
        usage = {
            "promptTokenCount": 50 + 10 * len(self.history),
            "responseTokenCount": audio_bytes // 1920,
            "totalTokenCount": 50 + 10 * len(self.history) + audio_bytes // 1920,
            "cachedContentTokenCount": 16 if len(self.history) > 2 else 0,
            "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 50}],
            "responseTokensDetails": [{"modality": "AUDIO", "tokenCount": audio_bytes // 1920}],
        }
        await self.emit({"serverContent": {"generationComplete": True}})
        await self.emit({"serverContent": {"turnComplete": True}, "usageMetadata": usage})
        await self._resumption_update()

    async def _interrupt(self) -> None:
        """Activity (or client content) during a generation stops it: interrupted, its
        waiting calls cancelled, then turnComplete."""
        task = self.generating
        if task is None:
            return
        self.generating = None
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await self.emit({"serverContent": {"interrupted": True}})
        if self.waiting:
            ids = list(self.waiting)
            self.standin.cancelled.update(ids)
            self.waiting = {}
            await self.emit({"toolCallCancellation": {"ids": ids}})
        await self.emit({"serverContent": {"turnComplete": True}})


class GeminiStandIn:
    """The stand-in server. ``await start()`` returns its ``ws://`` base URL (the
    ``BidiGenerateContent`` path included).

    :param api_key: the key the ``x-goog-api-key`` header must carry; anything else is
        closed with 1007 "API key not valid..." once the ``setup`` arrives.
    """

    def __init__(
        self,
        *,
        api_key: str,
        models: tuple[str, ...] = ("gemini-standin",),
        user_transcript: str = "what is the weather",
        threshold: float = 0.02,
        silence_ms: float = 200.0,
    ) -> None:
        self.api_key = api_key
        self.models = models
        self.user_transcript = user_transcript
        self.threshold = threshold
        self.silence_ms = silence_ms
        self.replies: deque[Reply] = deque()
        self.default_reply = Reply(audio=[bytes(960)], transcript=["ok"])
        #: Every client message: (connection number, message).
        self.received: list[tuple[int, dict[str, Any]]] = []
        #: Every server message: (connection number, message).
        self.sent: list[tuple[int, dict[str, Any]]] = []
        #: (rate, payload) of every realtimeInput audio chunk; every audio chunk sent.
        self.audio_in: list[tuple[int, bytes]] = []
        self.deltas: list[bytes] = []
        self.tool_responses: list[dict[str, Any]] = []
        self.cancelled: set[str] = set()
        #: Resumption handles -> the conversation they resume.
        self.handles: dict[str, list[dict[str, Any]]] = {}
        #: (path, headers) of every handshake.
        self.handshakes: list[tuple[str, dict[str, str]]] = []
        #: (code, reason) of every close the service made.
        self.closes: list[tuple[int, str]] = []
        self.connections: list[_Connection] = []
        self._ids = itertools.count(1)
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: Server | None = None
        self.url = ""

    async def start(self) -> str:
        self._server = await serve(
            self._serve,
            "127.0.0.1",
            0,
            compression=None,
            max_size=None,
            logger=logging.getLogger(LOGGER),
        )
        port = next(iter(self._server.sockets)).getsockname()[1]
        self.url = (
            f"ws://127.0.0.1:{port}/ws/google.ai.generativelanguage.v1beta."
            "GenerativeService.BidiGenerateContent"
        )
        return self.url

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)

    async def __aenter__(self) -> GeminiStandIn:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _serve(self, ws: ServerConnection) -> None:
        connection = _Connection(self, ws, len(self.connections) + 1)
        self.connections.append(connection)
        request = ws.request
        headers = {k.lower(): v for k, v in request.headers.raw_items()} if request else {}
        self.handshakes.append((request.path if request else "", headers))
        try:
            async for raw in ws:
                try:
                    message = json.loads(raw)
                except ValueError:
                    raise _Closing(1007, INVALID_ARGUMENT) from None
                self.received.append((connection.number, message))
                if headers.get(_KEY_HEADER) != self.api_key:
                    raise _Closing(1007, "API key not valid. Please pass a valid API key.")
                await connection.handle(message)
        except _Closing as closing:
            self.closes.append((closing.code, closing.reason))
            await ws.close(closing.code, closing.reason)
        except ConnectionClosed:
            pass
        finally:
            if connection.generating is not None:
                connection.generating.cancel()

    # -- for tests --

    def messages(self, kind: str, *, connection: int | None = None) -> list[Any]:
        """The bodies of the client messages of ``kind`` (``setup``, ``realtimeInput``...)."""
        return [
            message[kind]
            for number, message in self.received
            if kind in message and (connection is None or number == connection)
        ]

    async def wait_for(
        self,
        kind: str,
        count: int = 1,
        *,
        where: Callable[[Any], bool] | None = None,
        timeout: float = 5.0,
    ) -> list[Any]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            found = [m for m in self.messages(kind) if where is None or where(m)]
            if len(found) >= count:
                return found
            if loop.time() > deadline:
                kinds = [next(iter(m)) for _, m in self.received][-40:]
                raise AssertionError(f"{len(found)} {kind} message(s), expected {count}: {kinds}")
            await asyncio.sleep(0.002)

    async def wait_connections(self, count: int, timeout: float = 5.0) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while len(self.connections) < count:
            if loop.time() > deadline:
                raise AssertionError(f"{len(self.connections)} connection(s), expected {count}")
            await asyncio.sleep(0.002)

    async def go_away(self, close_code: int = 1000) -> None:
        """GoAway {timeLeft}, then the disconnect it announced."""
        connection = self.connections[-1]
        await connection.emit({"goAway": {"timeLeft": "0.05s"}})
        await asyncio.sleep(0.05)
        await connection.ws.close(close_code, "session time limit reached")

    def drop(self) -> None:
        """Cut the latest connection at once, without a close frame."""
        self.connections[-1].ws.transport.abort()
