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

What integrators report the service does in long or tool-using sessions (sources F1-F9
and GENAI, LK-G, PC-G: docs/agent-gemini-live.md, "Sources"), each at the code that
does it:

* a connection lives a limited time: ``goAway {timeLeft}``, then, when the client has
  not left, a close 1008 "Connection aborted because the client failed to close the
  connection after receiving a GoAway signal once the session duration expired" (F1)
  or 1011 "Deadline expired before operation could complete." (F2);
* a resume while the connection that gave the handle is still open is refused with
  1011 (F9: the client must close the old socket first);
* a mid-session 1008 "The operation was aborted." while a tool call is pending (F3,
  F4);
* ``interrupted`` with no generation in flight, after ``turnComplete``, when the user
  speaks while the client still plays the answer (F5);
* the sliding window cuts the oldest turns, at the start of a USER turn, once the
  context passes a number of tokens (GENAI ``SlidingWindow``); ``promptTokenCount``
  is the context's size;
* ``turnCompleteReason`` on a turn that ended for a reason (GENAI
  ``TurnCompleteReason``, e.g. ``MALFORMED_FUNCTION_CALL``);
* ``gemini-3*`` models take user text as ``realtimeInput.text`` and run no inference on
  a ``clientContent`` turn alone (F6, PC-G).

Every message either side sends is checked against ``google-genai``'s own
``LiveClientMessage`` / ``LiveServerMessage`` (``gemini_wire.py``): a client message
that is not one is closed with 1007 as the service closes a payload it cannot parse,
and recorded in ``invalid``; leaving the stand-in with anything there fails the test.
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

from gemini_wire import WireError, check_client, check_server
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.protocol import State

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
#: F1: the close of a client that did not leave after goAway.
GO_AWAY_1008 = (
    "Connection aborted because the client failed to close the connection after "
    "receiving a GoAway signal once the session duration expired"
)
#: F2: the other close reported at a connection's end.
GO_AWAY_1011 = "Deadline expired before operation could complete."
#: F3, F4: the mid-session abort, during pending tool calls.
ABORTED = "The operation was aborted."


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
    #: Close 1008 "The operation was aborted." once the calls are sent (F3, F4).
    abort_after_calls: bool = False
    #: ``turnCompleteReason`` of its ``turnComplete`` (GENAI TurnCompleteReason).
    reason: str | None = None


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
        #: Until when (loop time) the service assumes the client still plays the last
        #: answer: speech then is ``interrupted`` with no generation in flight (F5).
        self.playing_until = 0.0
        self.turns_completed = 0
        self.going_away: asyncio.Task[None] | None = None

    @property
    def gemini_3(self) -> bool:
        return "gemini-3" in str((self.setup or {}).get("model") or "")

    async def emit(self, message: dict[str, Any]) -> None:
        try:
            check_server(message)
        except WireError as exc:
            self.standin.invalid.append(f"the stand-in sent {message}: {exc}")
            raise AssertionError(str(exc)) from None
        self.standin.sent.append((self.number, message))
        with contextlib.suppress(ConnectionClosed):
            await self.ws.send(json.dumps(message))

    async def close(self, code: int, reason: str) -> None:
        closing = _Closing(code, reason)
        self.standin.closes.append((code, closing.reason))
        await self.ws.close(code, closing.reason)

    # -- client messages --

    async def handle(self, message: Any) -> None:
        # "The JSON object must have exactly one of the fields" (Send messages).
        if not isinstance(message, dict) or len(message) != 1:
            raise _Closing(1007, INVALID_ARGUMENT)
        try:
            check_client(message)
        except WireError as exc:
            # The service parses the JSON into its proto types and closes what does not
            # fit with 1007 (INVALID_ARGUMENT, e.g. 'Invalid JSON payload received.
            # Unknown name ...').
            self.standin.invalid.append(f"the client sent {message}: {exc}")
            if not exc.unknown:
                raise _Closing(1007, INVALID_ARGUMENT) from None
            *parent, name = exc.path
            raise _Closing(
                1007,
                f'Invalid JSON payload received. Unknown name "{name}" at '
                f"'{'.'.join(parent)}': Cannot find field.",
            ) from None
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
            origin = standin.handle_origin[str(resumption["handle"])]
            if origin.ws.state is State.OPEN:
                # F9: a resume is refused while the old connection is open.
                standin.resumed_while_open += 1
                raise _Closing(1011, "Internal error encountered.")
            self.history = list(saved)
        self.setup = setup
        if standin.setup_gate is not None:
            await standin.setup_gate.wait()
        await self.emit({"setupComplete": {}})
        await self._resumption_update()

    async def _resumption_update(self) -> None:
        if not isinstance((self.setup or {}).get("sessionResumption"), dict):
            return
        handle = f"handle_{self.number}_{next(self.standin._ids)}"
        self.standin.handles[handle] = list(self.history)
        self.standin.handle_origin[handle] = self
        # SessionResumptionUpdate {newHandle, resumable}
        await self.emit({"sessionResumptionUpdate": {"newHandle": handle, "resumable": True}})

    async def _realtime_input(self, body: Any) -> None:
        text = body.get("text") if isinstance(body, dict) else None
        if isinstance(text, str):
            # realtimeInput.text: user input whose turn ends by itself (PC-G
            # _send_user_text: "turn completion is automatically inferred"). Taken
            # here as user activity, which interrupts a generation as speech does (the
            # reference does not say; the adapter expects either).
            await self._interrupt()
            self.history.append({"role": "user", "parts": [{"text": text}]})
            self._generate()
            return
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
                if self.generating is None and asyncio.get_running_loop().time() < (
                    self.playing_until
                ):
                    # F5 (LK-G l.1127-1136): "the generation is done but playout is not
                    # finished (turn_complete -> interrupted)".
                    self.playing_until = 0.0
                    self.standin.late_interruptions += 1
                    await self.emit({"serverContent": {"interrupted": True}})
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
        self._slide()
        # Gemini 3.x "won't run inference without a realtime input" (PC-G l.1671, F6).
        if body.get("turnComplete") and not self.gemini_3:
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
            if reply.abort_after_calls:
                self.generating = None
                await self.close(1008, ABORTED)  # F3, F4: during pending tool calls
                return
            await self.answered.wait()  # the model waits for the responses (blocking)
            standin = self.standin
            follow = standin.replies.popleft() if standin.replies else standin.default_reply
            await self._run(follow)
            return
        self.generating = None
        self._slide()
        # UsageMetadata rides on the turn's last message; the prompt is the context.
        prompt = 50 + sum(_tokens(turn) for turn in self.history)
        usage = {
            "promptTokenCount": prompt,
            "responseTokenCount": audio_bytes // 1920,
            "totalTokenCount": prompt + audio_bytes // 1920,
            "cachedContentTokenCount": 16 if len(self.history) > 2 else 0,
            "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 50}],
            "responseTokensDetails": [{"modality": "AUDIO", "tokenCount": audio_bytes // 1920}],
        }
        complete: dict[str, Any] = {"turnComplete": True}
        if reply.reason is not None:
            complete["turnCompleteReason"] = reply.reason
        await self.emit({"serverContent": {"generationComplete": True}})
        await self.emit({"serverContent": complete, "usageMetadata": usage})
        # The service assumes real-time playback of what it sent (GENAI
        # generationComplete); the stand-in's clients may lag by ``playout_lag``.
        self.playing_until = asyncio.get_running_loop().time() + self.standin.playout_lag
        await self._resumption_update()
        self.turns_completed += 1
        lifetime = self.standin.lifetime_turns
        if lifetime is not None and self.turns_completed == lifetime:
            await self.go_away(self.standin.lifetime_time_left)

    def _slide(self) -> None:
        """SlidingWindow (GENAI): past ``trigger_tokens`` the oldest turns go, "always
        cut at start of USER role turn", down to half the trigger."""
        trigger = self.standin.trigger_tokens
        if trigger is None or sum(_tokens(t) for t in self.history) <= trigger:
            return
        for start, turn in enumerate(self.history):
            rest = self.history[start:]
            if turn.get("role") == "user" and sum(_tokens(t) for t in rest) <= trigger // 2:
                self.standin.slid.append(self.history[:start])
                self.history = rest
                return
        self.standin.slid.append(self.history)
        self.history = []

    async def go_away(self, time_left: float) -> None:
        """GoAway {timeLeft}; a client still here when it runs out is cut (F1, F2)."""
        await self.emit({"goAway": {"timeLeft": f"{time_left:g}s"}})
        self.going_away = asyncio.get_running_loop().create_task(self._expire(time_left))
        self.standin._tasks.add(self.going_away)
        self.going_away.add_done_callback(self.standin._tasks.discard)

    async def _expire(self, time_left: float) -> None:
        await asyncio.sleep(time_left)
        if self.ws.state is State.OPEN:
            self.standin.expired += 1
            code = self.standin.go_away_close
            await self.close(code, GO_AWAY_1008 if code == 1008 else GO_AWAY_1011)

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
        playout_lag: float = 0.5,
        lifetime_turns: int | None = None,
        lifetime_time_left: float = 1.0,
        go_away_close: int = 1008,
        trigger_tokens: int | None = None,
    ) -> None:
        self.api_key = api_key
        #: Seconds the service takes the client to be playing after a turnComplete (F5).
        self.playout_lag = playout_lag
        #: goAway after this many turns of a connection (compressed connection lifetime,
        #: F1, F2), with this ``timeLeft``, then the close ``go_away_close``.
        self.lifetime_turns = lifetime_turns
        self.lifetime_time_left = lifetime_time_left
        self.go_away_close = go_away_close
        #: The sliding window's trigger (tokens of context), None: never slides.
        self.trigger_tokens = trigger_tokens
        #: What the window cut, each time it slid.
        self.slid: list[list[dict[str, Any]]] = []
        #: Messages that are not what google-genai's types describe (both ways).
        self.invalid: list[str] = []
        #: Connections cut after a goAway because the client stayed; resumes refused
        #: because the old connection was still open (F9).
        self.expired = 0
        self.resumed_while_open = 0
        #: When set, each setupComplete waits for it (a service slow to set up).
        self.setup_gate: asyncio.Event | None = None
        #: ``interrupted`` sent after a turnComplete, with no generation in flight (F5).
        self.late_interruptions = 0
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
        self.handle_origin: dict[str, _Connection] = {}
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

    async def __aexit__(self, kind: object, *exc: object) -> None:
        await self.close()
        if kind is None:
            assert not self.invalid, "\n".join(self.invalid)

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
            await connection.close(closing.code, closing.reason)
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

    async def go_away(self, time_left: float = 1.0) -> None:
        """GoAway {timeLeft} on the latest connection; closed with ``go_away_close`` if
        the client is still there when it runs out (F1, F2)."""
        await self.connections[-1].go_away(time_left)

    async def abort(self, code: int = 1008, reason: str = ABORTED) -> None:
        """Close the latest connection as the service does mid-session (F3, F4)."""
        await self.connections[-1].close(code, reason)

    def drop(self) -> None:
        """Cut the latest connection at once, without a close frame."""
        self.connections[-1].ws.transport.abort()


def _tokens(turn: dict[str, Any]) -> int:
    """A turn's size in tokens, roughly (four characters a token)."""
    return len(json.dumps(turn)) // 4
