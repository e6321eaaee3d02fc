"""A local stand-in for the OpenAI Realtime API, over a real WebSocket on loopback.

It speaks the GA event protocol the adapter (``vrt.agents.openai_realtime``) speaks,
with the shapes of the provider's documentation:

* API reference, client events:
  https://platform.openai.com/docs/api-reference/realtime-client-events
  (``session.update``, ``input_audio_buffer.append``, ``conversation.item.create``,
  ``conversation.item.delete``, ``conversation.item.truncate``, ``response.create``,
  ``response.cancel``);
* API reference, server events:
  https://platform.openai.com/docs/api-reference/realtime-server-events
  (``session.created/updated``, ``input_audio_buffer.speech_started/stopped/committed``,
  ``conversation.item.added/done/deleted/truncated``,
  ``conversation.item.input_audio_transcription.completed``, ``response.created/done``,
  ``response.output_item.added/done``, ``response.content_part.added/done``,
  ``response.output_audio.delta/done``, ``response.output_audio_transcript.delta/done``,
  ``response.function_call_arguments.delta/done``, ``error``);
* the WebSocket guide (``wss://api.openai.com/v1/realtime?model=...`` with an
  ``Authorization: Bearer`` header): https://developers.openai.com/api/docs/guides/realtime-websocket
* the typed shapes of the openai-python SDK, ``src/openai/types/realtime/``:
  ``realtime_audio_formats_param.py`` (``audio/pcm`` at 24000 Hz, ``audio/pcmu``,
  ``audio/pcma``), ``realtime_audio_input_turn_detection_param.py`` (``server_vad`` with
  ``create_response`` / ``interrupt_response``),
  ``realtime_conversation_item_function_call_output_param.py``.

It is small on purpose: a deterministic "model" whose replies tests script with
:class:`Reply`, an energy detector standing in for server VAD, and a record of every
event received (:attr:`StandIn.received`) and sent (:attr:`StandIn.sent`) for
assertions. It behaves like the service, not like the adapter, on every rule the
adapter must respect; each rule names its source where it is enforced:

* one response at a time (``conversation_already_has_active_response``), cancel only
  an active response (``response_cancel_not_active``);
* a ``session.update`` with a tool name outside ``^[a-zA-Z0-9_-]+$`` or a value the
  service does not know is rejected whole: an ``error`` naming the ``param`` and the
  client's ``event_id``, no ``session.updated``, the session stays on its defaults;
* a wrong API key is not refused at the upgrade: the socket opens, an ``error``
  ``invalid_api_key`` arrives and the service closes with 3000;
* truncation only of assistant audio (``Only model output audio messages can be
  truncated``), never past the audio the item holds (``Audio content of X ms is
  already shorter than Y ms``);
* input transcription that streams ``...input_audio_transcription.delta`` events and
  ends ``.completed`` or ``.failed``, asynchronously with the response;
* ``response.done`` with ``usage``, and ``failed`` / ``incomplete`` statuses with their
  ``status_details``;
* the session's maximum duration: an ``error`` ``session_expired``, then close 1001.

Every event either side sends is checked against the openai package's own types
(openai-python ``src/openai/types/realtime/``): each client event the adapter sends
against ``RealtimeClientEventParam`` (the TypedDicts the SDK's ``connection.send``
takes), every member known and of its type (:func:`client_event_problem`), and each
event the stand-in sends against the ``RealtimeServerEvent`` models, with no member the
model does not declare (:func:`server_event_problem`). A misspelt or misplaced member
is not a call that fails in production: it is recorded in :attr:`StandIn.invalid`,
and the stand-in's ``close`` fails the test.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import logging
import re
import struct
import time
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, get_args

from openai.types.realtime.realtime_client_event_param import RealtimeClientEventParam
from openai.types.realtime.realtime_server_event import RealtimeServerEvent
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from support.sdk_types import materialized, undeclared_members
from vrt.audio import EnergyVad
from vrt.protocol.messages import PCM16_24K, Format

__all__ = [
    "LOGGER",
    "PCMU_8K",
    "FunctionCall",
    "Reply",
    "StandIn",
    "client_event_problem",
    "server_event_problem",
    "stamp_of",
]

#: The stand-in's own logger (the provider's side of the wire).
LOGGER = "standin"
PCMU_8K = Format(encoding="pcmu", sample_rate=8000)
_STAMP = struct.Struct("<q")


# --- the SDK's types -------------------------------------------------------------------

#: The client events as the SDK types what ``connection.send`` takes: every member must
#: be one the TypedDict declares (extra="forbid") and of its exact type (strict).
_CLIENT_EVENT: TypeAdapter[Any] = TypeAdapter(
    RealtimeClientEventParam, config=ConfigDict(extra="forbid", strict=True)
)


def _server_models() -> dict[str, type[BaseModel]]:
    """The model of each server event ``type`` in the SDK's ``RealtimeServerEvent``."""
    union = get_args(RealtimeServerEvent)[0]  # Annotated[Union[...], discriminator]
    models: dict[str, type[BaseModel]] = {}
    for model in get_args(union):
        for name in get_args(model.model_fields["type"].annotation):
            models[name] = model
    return models


_SERVER_MODELS = _server_models()


def client_event_problem(event: Any) -> str | None:
    """Why the SDK's client event types refuse ``event``, or None."""
    try:
        validated = materialized(_CLIENT_EVENT.validate_python(event))
    except ValidationError as exc:
        return f"{event.get('type') if isinstance(event, dict) else event!r}: {exc}"
    if validated != event:
        return f"{event.get('type')}: the SDK's types read it as {validated!r}"
    return None


def server_event_problem(event: dict[str, Any]) -> str | None:
    """Why the SDK's ``RealtimeServerEvent`` models refuse ``event``, or None."""
    kind = event.get("type")
    model = _SERVER_MODELS.get(str(kind))
    if model is None:
        return f"{kind}: not a server event of the SDK"
    try:
        parsed = model.model_validate(event, strict=True)
    except ValidationError as exc:
        return f"{kind}: {exc}"
    extras = undeclared_members(parsed, str(kind))
    if extras:
        return f"{kind}: members the SDK does not know: {', '.join(extras)}"
    dumped = parsed.model_dump(mode="json", exclude_unset=True, warnings=False)
    if dumped != event:
        return f"{kind}: the SDK reads it as {dumped!r}"
    return None


def stamp_of(payload: bytes) -> int:
    """The ``perf_counter_ns`` a stamping reply wrote into the first 8 bytes of a delta."""
    return int(_STAMP.unpack_from(payload)[0])


@dataclass
class FunctionCall:
    """A function call the model makes (``response.output_item.added`` of type
    ``function_call``, then ``response.function_call_arguments.delta`` fragments of
    ``chunk`` characters, then ``.done``)."""

    name: str
    arguments: str
    call_id: str
    chunk: int = 8


@dataclass
class Reply:
    """What the model does in one response: an audio message (one
    ``response.output_audio.delta`` per element of ``audio``, ``interval`` seconds
    apart, with the ``transcript`` fragments interleaved), then ``calls``."""

    audio: list[bytes] = field(default_factory=list)
    transcript: list[str] = field(default_factory=list)
    calls: list[FunctionCall] = field(default_factory=list)
    interval: float = 0.0
    #: For the latency bench: write ``time.perf_counter_ns()`` into the first 8 bytes of
    #: each delta just before it is sent (the payload then travels unchanged).
    stamp: bool = False
    #: Send every transcript fragment before the first audio delta (the service often
    #: does: the text is ready before the speech), then wait for ``gate`` if set.
    transcript_first: bool = False
    gate: asyncio.Event | None = None
    #: Audio deltas the service still sends when a ``response.cancel`` arrives: audio it
    #: generated before the cancel took effect ("The server will produce audio faster
    #: than realtime", API reference, conversation.item.truncate).
    after_cancel: int = 0
    #: End the response ``failed`` with this ``status_details.error`` (e.g. ``{"type":
    #: "invalid_request_error", "code": "model_not_found", "message": ...}``), or
    #: ``incomplete`` with this ``status_details.reason`` (``max_output_tokens``,
    #: ``content_filter``), instead of ``completed``.
    failed: dict[str, Any] | None = None
    incomplete: str | None = None


def _format_of(audio_format: Any) -> Format:
    # realtime_audio_formats_param.py: {"type": "audio/pcm", "rate": 24000} | {"type": "audio/pcmu"}
    if isinstance(audio_format, dict) and audio_format.get("type") == "audio/pcmu":
        return PCMU_8K
    return PCM16_24K


#: The voices of ``audio.output.voice`` (openai-python types/realtime/realtime_response.py).
VOICES = ("alloy", "ash", "ballad", "coral", "echo", "sage", "shimmer", "verse", "marin", "cedar")
#: What the service accepts as a function name (see _invalid_session).
_FUNCTION_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def _invalid_session(update: dict[str, Any]) -> tuple[str, str] | None:
    """(param, message) of the first value of ``update`` the service refuses, if any."""
    for n, tool in enumerate(update.get("tools") or ()):
        name = tool.get("name") if isinstance(tool, dict) else None
        if not isinstance(name, str) or not _FUNCTION_NAME.match(name):
            # The service's message for a function name outside its pattern, as
            # reported for tools[].function.name (github.com/brekkylab/ailoy/pull/109,
            # github.com/mcp-use/mcp-use/issues/90), here for session.tools[].name.
            param = f"session.tools[{n}].name"
            return param, (
                f"Invalid '{param}': string does not match pattern. Expected a string "
                "that matches the pattern '^[a-zA-Z0-9_-]+$'."
            )
    audio = update.get("audio") if isinstance(update.get("audio"), dict) else {}
    assert isinstance(audio, dict)
    for side in ("input", "output"):
        fmt = (audio.get(side) or {}).get("format")
        if isinstance(fmt, dict):
            # realtime_audio_formats_param.py: audio/pcm with rate 24000 only,
            # audio/pcmu, audio/pcma.
            kind = fmt.get("type")
            if kind not in ("audio/pcm", "audio/pcmu", "audio/pcma") or (
                kind == "audio/pcm" and fmt.get("rate", 24000) != 24000
            ):
                return f"session.audio.{side}.format", f"Invalid value: {fmt!r}."
    voice = (audio.get("output") or {}).get("voice")
    if voice is not None and voice not in VOICES:
        return "session.audio.output.voice", (
            f"Invalid value: '{voice}'. Supported values are: "
            + ", ".join(f"'{v}'" for v in VOICES)
            + "."
        )
    return None


def _ms(payload: bytes, fmt: Format) -> float:
    return len(payload) / 8.0 if fmt.encoding == "pcmu" else len(payload) / 48.0


@dataclass
class _Item:
    id: str
    role: str
    type: str
    audio_ms: float = 0.0
    truncated_ms: float | None = None
    #: What the model knows of it: a message's text or transcript, a call's name and
    #: arguments, an output (see :meth:`StandIn.conversation`).
    text: str = ""


def _canonical(text: Any) -> str:
    """JSON text in one spelling (arguments and outputs compare by value)."""
    try:
        return json.dumps(json.loads(str(text)), sort_keys=True, separators=(",", ":"))
    except ValueError:
        return str(text)


def _item_text(item: dict[str, Any]) -> str:
    kind = item.get("type")
    if kind == "function_call":
        return f"{item.get('name')}({_canonical(item.get('arguments'))})"
    if kind == "function_call_output":
        return _canonical(item.get("output"))
    content = item.get("content") or [{}]
    return str(content[0].get("text") or content[0].get("transcript") or "")


@dataclass
class _Active:
    id: str
    task: asyncio.Task[None] | None
    metadata: Any
    #: output items in progress: (item id, output index, kind, call or None, text so far)
    open_items: dict[str, tuple[int, str, FunctionCall | None, str]] = field(default_factory=dict)
    output: list[dict[str, Any]] = field(default_factory=list)
    reply: Reply | None = None
    #: The audio message in progress: its item and the ids every delta carries.
    audio_item: _Item | None = None
    audio_base: dict[str, Any] | None = None
    audio_ms: float = 0.0
    words: int = 0


class _Connection:
    """One client WebSocket: one provider session with its own conversation."""

    def __init__(self, standin: StandIn, ws: ServerConnection, number: int) -> None:
        self.standin = standin
        self.ws = ws
        self.number = number
        self.session: dict[str, Any] = {
            # As the SDK types the session of session.created/updated
            # (session_created_event.py: a RealtimeSessionCreateRequest, which declares
            # no ``id`` or ``object``; the adapter reads neither).
            "type": "realtime",
            "model": "stand-in",
            "output_modalities": ["audio"],
            "audio": {
                "input": {
                    "format": {"type": "audio/pcm", "rate": 24000},
                    "turn_detection": {
                        "type": "server_vad",
                        "create_response": True,
                        "interrupt_response": True,
                    },
                },
                "output": {"format": {"type": "audio/pcm", "rate": 24000}, "voice": "alloy"},
            },
            "instructions": "",
            "tools": [],
        }
        self.vad = EnergyVad(threshold=standin.threshold, hangover_ms=standin.silence_ms)
        self.items: dict[str, _Item] = {}
        self.active: _Active | None = None
        self.speech_item: str | None = None
        self.closed = False

    # -- helpers --

    def _id(self, prefix: str) -> str:
        return f"{prefix}_{self.number}_{next(self.standin._ids)}"

    async def emit(self, event: dict[str, Any], *, check: bool = True) -> None:
        event = {"event_id": self._id("event"), **event}
        if event["type"] == "response.output_audio_transcript.delta":
            item = self.items.get(event["item_id"])
            if item is not None:
                item.text += event["delta"]
        elif event["type"] == "conversation.item.input_audio_transcription.completed":
            item = self.items.get(event["item_id"])
            if item is not None:
                item.text = event["transcript"]
        problem = server_event_problem(event) if check and self.standin.check_types else None
        if problem is not None:
            self.standin.invalid.append(f"stand-in sent {problem}")
        self.standin.sent.append((self.number, event))
        with contextlib.suppress(ConnectionClosed):
            await self.ws.send(json.dumps(event))

    async def error(
        self,
        code: str,
        message: str,
        about: Any,
        kind: str = "invalid_request_error",
        param: str | None = None,
    ) -> None:
        # realtime-server-events/error: {type, code, message, param, event_id}
        # (openai-python types/realtime/realtime_error.py)
        event_id = about if self.standin.echo_error_event_ids else None
        await self.emit(
            {
                "type": "error",
                "error": {
                    "type": kind,
                    "code": code,
                    "message": message,
                    "param": param,
                    "event_id": event_id,
                },
            }
        )

    @property
    def input_format(self) -> Format:
        return _format_of(self.session["audio"]["input"].get("format"))

    @property
    def output_format(self) -> Format:
        return _format_of(self.session["audio"]["output"].get("format"))

    @property
    def turn_detection(self) -> dict[str, Any]:
        detection = self.session["audio"]["input"].get("turn_detection")
        return detection if isinstance(detection, dict) else {}

    # -- client events --

    async def handle(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        about = event.get("event_id")
        if kind == "session.update":
            update = event.get("session") or {}
            problem = _invalid_session(update)
            if problem is not None:
                # The whole update is refused: nothing of it applies, and the answer is
                # an error naming the param instead of session.updated ("Returned when a
                # session is updated with a session.update event, unless there is an
                # error", API reference, server events, session.updated).
                param, message = problem
                await self.error("invalid_value", message, about, param=param)
                return
            self._merge(self.session, update)
            if self.standin.confirm_session_update:
                await self.emit({"type": "session.updated", "session": self.session})
        elif kind == "input_audio_buffer.append":
            await self._append(base64.b64decode(event["audio"]))
        elif kind == "conversation.item.create":
            await self._create_item(event["item"], about)
        elif kind == "conversation.item.delete":
            item_id = event.get("item_id")
            if item_id not in self.items:
                await self.error("item_not_found", f"no item {item_id}", about)
            else:
                del self.items[item_id]
                await self.emit({"type": "conversation.item.deleted", "item_id": item_id})
        elif kind == "conversation.item.truncate":
            await self._truncate(event, about)
        elif kind == "response.create":
            if self.active is not None:
                # Only one response at a time per conversation.
                await self.error(
                    "conversation_already_has_active_response",
                    f"Conversation already has an active response in progress: "
                    f"{self.active.id}. Wait until the response is finished before "
                    "creating a new one.",
                    about,
                )
            else:
                params = event.get("response") or {}
                self._start(params.get("metadata"))
        elif kind == "response.cancel":
            self.standin.cancel_times.append(time.perf_counter_ns())
            wanted = event.get("response_id")
            active = self.active
            if active is None or (wanted is not None and wanted != active.id):
                # response.cancel: "If there is no response to cancel, the server will
                # respond with an error."
                await self.error(
                    "response_cancel_not_active", "Cancellation failed: no active response", about
                )
            else:
                await self._cancel("client_cancelled")

    def _merge(self, into: dict[str, Any], update: dict[str, Any]) -> None:
        # session.update: "Only the fields that are present in the session.update are updated."
        for key, value in update.items():
            # An audio format is one of a tagged union (realtime_audio_formats.py:
            # audio/pcm with ``rate``, audio/pcmu, audio/pcma): a new one replaces it.
            if key != "format" and isinstance(value, dict) and isinstance(into.get(key), dict):
                self._merge(into[key], value)
            else:
                into[key] = value

    async def _create_item(self, item: dict[str, Any], about: Any) -> None:
        item_id = item.get("id") or self._id("item")
        if item_id in self.items:
            await self.error("item_already_exists", f"item {item_id} already exists", about)
            return
        self.items[item_id] = _Item(
            item_id, str(item.get("role", "")), str(item.get("type")), text=_item_text(item)
        )
        full = {**item, "id": item_id, "object": "realtime.item", "status": "completed"}
        await self.emit({"type": "conversation.item.added", "previous_item_id": None, "item": full})
        await self.emit({"type": "conversation.item.done", "previous_item_id": None, "item": full})

    async def _truncate(self, event: dict[str, Any], about: Any) -> None:
        item = self.items.get(str(event.get("item_id")))
        end = event.get("audio_end_ms")
        if item is None:
            await self.error("item_not_found", f"Item {event.get('item_id')} not found", about)
        elif item.role != "assistant" or item.audio_ms <= 0:
            # An item with no audio (a function call, a user message, or an assistant
            # message whose audio has not started) is refused whatever audio_end_ms is:
            # "Only model output audio messages can be truncated" (code
            # unsupported_content_type, reported in github.com/livekit/agents/pull/6158).
            await self.error(
                "unsupported_content_type",
                "Only model output audio messages can be truncated",
                about,
            )
        elif not isinstance(end, int) or end < 0 or end > item.audio_ms:
            # "If the audio_end_ms is greater than the actual audio duration, the server
            # will respond with an error" (API reference, conversation.item.truncate); the
            # message the service sends, as reported in
            # github.com/openclaw/openclaw/pull/125502 and
            # github.com/twilio-samples/speech-assistant-openai-realtime-api-python/issues/45.
            await self.error(
                "invalid_value",
                f"Audio content of {item.audio_ms:.0f}ms is already shorter than {end}ms",
                about,
            )
        else:
            item.truncated_ms = end
            item.audio_ms = float(end)  # the audio after it is gone from the item
            await self.emit(
                {
                    "type": "conversation.item.truncated",
                    "item_id": item.id,
                    "content_index": event.get("content_index", 0),
                    "audio_end_ms": end,
                }
            )

    async def _append(self, payload: bytes) -> None:
        detection = self.turn_detection
        for vad in self.vad.feed(payload, self.input_format):
            if vad.kind == "speech-start":
                self.speech_item = self._id("item")
                # input_audio_buffer.speech_started: {audio_start_ms, item_id}
                await self.emit(
                    {
                        "type": "input_audio_buffer.speech_started",
                        "audio_start_ms": int(vad.at_ms),
                        "item_id": self.speech_item,
                    }
                )
                if detection.get("interrupt_response", True) and self.active is not None:
                    await self._cancel("turn_detected")
            else:
                item_id = self.speech_item or self._id("item")
                self.speech_item = None
                await self.emit(
                    {
                        "type": "input_audio_buffer.speech_stopped",
                        "audio_end_ms": int(vad.at_ms),
                        "item_id": item_id,
                    }
                )
                await self.emit(
                    {
                        "type": "input_audio_buffer.committed",
                        "previous_item_id": None,
                        "item_id": item_id,
                    }
                )
                self.items[item_id] = _Item(item_id, "user", "message")
                user = {
                    "id": item_id,
                    "object": "realtime.item",
                    "type": "message",
                    "status": "completed",
                    "role": "user",
                    "content": [{"type": "input_audio", "transcript": None}],
                }
                await self.emit(
                    {"type": "conversation.item.added", "previous_item_id": None, "item": user}
                )
                if detection.get("create_response", True) and self.active is None:
                    self._start(None)
                if self.session["audio"]["input"].get("transcription"):
                    # Transcription "runs asynchronously with Response creation" (API
                    # reference, conversation.item.input_audio_transcription.completed).
                    self.standin._spawn(self._transcribe(item_id, vad.duration_ms))

    async def _transcribe(self, item_id: str, duration_ms: float) -> None:
        """The user's words as ``.delta`` events (openai-python
        ``conversation_item_input_audio_transcription_delta_event.py``: item_id,
        content_index, delta), then ``.completed`` (transcript, usage) or ``.failed``
        (error {type, code, message, param}, ``..._failed_event.py``)."""
        standin = self.standin
        for word in standin.user_transcript.split(" "):
            await self.emit(
                {
                    "type": "conversation.item.input_audio_transcription.delta",
                    "item_id": item_id,
                    "content_index": 0,
                    "delta": f"{word} ",
                }
            )
        gate = standin.transcript_gate
        if gate is not None:
            await gate.wait()
        if standin.transcription_fails:
            await self.emit(
                {
                    "type": "conversation.item.input_audio_transcription.failed",
                    "item_id": item_id,
                    "content_index": 0,
                    "error": {
                        "type": "transcription_error",
                        "code": "audio_unintelligible",
                        "message": "The audio could not be transcribed.",
                        "param": None,
                    },
                }
            )
            return
        await self.emit(
            {
                "type": "conversation.item.input_audio_transcription.completed",
                "item_id": item_id,
                "content_index": 0,
                "transcript": standin.user_transcript,
                "usage": {"type": "duration", "seconds": duration_ms / 1000},
            }
        )

    async def expire(self) -> None:
        """The session's maximum duration is over: an ``error`` ``session_expired``
        ("Your session hit the maximum duration of 60 minutes.", the event reported in
        community.openai.com/t/realtime-api-session-expired/975036), then close 1001
        with the same reason (reported in
        github.com/pollen-robotics/reachy_mini_conversation_app/issues/134)."""
        message = "Your session hit the maximum duration of 60 minutes."
        await self.error("session_expired", message, None)
        await self.ws.close(1001, message)

    # -- responses --

    def _start(self, metadata: Any) -> None:
        standin = self.standin
        reply = standin.replies.popleft() if standin.replies else standin.default_reply
        active = _Active(self._id("resp"), None, metadata, reply=reply)
        self.active = active
        # Started here, so that a response.create right behind this one is refused.
        active.task = asyncio.get_running_loop().create_task(self._respond(active, reply))
        standin._tasks.add(active.task)
        active.task.add_done_callback(standin._tasks.discard)

    async def start_unrequested(self) -> None:
        """Start a response nobody asked for (as server VAD or an idle timeout does),
        untagged; an error if one is active."""
        if self.active is not None:
            raise AssertionError("a response is active")
        self._start(None)

    def _response(
        self,
        active: _Active,
        status: str,
        reason: str | None,
        error: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        # status_details {type, reason, error} (openai-python realtime_response_status.py)
        details: dict[str, Any] | None = None
        if reason is not None:
            details = {"type": status, "reason": reason}
        elif error is not None:
            details = {"type": status, "error": error}
        return {
            "object": "realtime.response",
            "id": active.id,
            "status": status,
            "status_details": details,
            "output": active.output,
            "metadata": active.metadata,
            "output_modalities": ["audio"],
            "conversation_id": f"conv_{self.number}",
            "usage": None if status == "in_progress" else self._usage(active),
        }

    def _usage(self, active: _Active) -> dict[str, Any]:
        # The shape of openai-python realtime_response_usage.py; the figures are made up
        # but deterministic: an audio token per 20 ms, a text token per transcript fragment.
        audio_out = int(active.audio_ms // 20)
        text_in = 100 + 10 * len(self.items)
        cached = 64 if len(self.items) > 2 else 0
        return {
            "total_tokens": text_in + audio_out + active.words,
            "input_tokens": text_in,
            "output_tokens": audio_out + active.words,
            "input_token_details": {
                "cached_tokens": cached,
                "text_tokens": text_in,
                "audio_tokens": 0,
            },
            "output_token_details": {"text_tokens": active.words, "audio_tokens": audio_out},
        }

    async def _respond(self, active: _Active, reply: Reply) -> None:
        response_id = active.id
        # response.created: "The first event of response creation, where the response
        # is in an initial state of in_progress." The metadata of response.create is echoed.
        await self.emit(
            {"type": "response.created", "response": self._response(active, "in_progress", None)}
        )
        index = 0
        if reply.audio or reply.transcript:
            item_id = self._id("item")
            item = _Item(item_id, "assistant", "message")
            self.items[item_id] = item
            active.open_items[item_id] = (index, "message", None, "")
            message = {
                "id": item_id,
                "object": "realtime.item",
                "type": "message",
                "status": "in_progress",
                "role": "assistant",
                "content": [],
            }
            base = {"response_id": response_id, "item_id": item_id, "output_index": index}
            await self.emit(
                {
                    "type": "response.output_item.added",
                    "response_id": response_id,
                    "output_index": index,
                    "item": message,
                }
            )
            await self.emit(
                {"type": "conversation.item.added", "previous_item_id": None, "item": message}
            )
            await self.emit(
                {
                    "type": "response.content_part.added",
                    **base,
                    "content_index": 0,
                    "part": {"type": "audio", "transcript": ""},
                }
            )
            transcript = ""
            active.audio_item, active.audio_base = item, base
            if reply.transcript_first:
                for fragment in reply.transcript:
                    transcript += fragment
                    active.words += 1
                    await self.emit(
                        {
                            "type": "response.output_audio_transcript.delta",
                            **base,
                            "content_index": 0,
                            "delta": fragment,
                        }
                    )
            if reply.gate is not None:
                await reply.gate.wait()
            for n, chunk in enumerate(reply.audio):
                if n and reply.interval:
                    await asyncio.sleep(reply.interval)
                payload = chunk
                if reply.stamp:
                    payload = _STAMP.pack(time.perf_counter_ns()) + chunk[_STAMP.size :]
                await self._audio_delta(active, payload)
                if reply.transcript_first:
                    continue
                if n < len(reply.transcript):
                    transcript += reply.transcript[n]
                    active.words += 1
                    await self.emit(
                        {
                            "type": "response.output_audio_transcript.delta",
                            **base,
                            "content_index": 0,
                            "delta": reply.transcript[n],
                        }
                    )
            for fragment in [] if reply.transcript_first else reply.transcript[len(reply.audio) :]:
                transcript += fragment
                active.words += 1
                await self.emit(
                    {
                        "type": "response.output_audio_transcript.delta",
                        **base,
                        "content_index": 0,
                        "delta": fragment,
                    }
                )
            await self.emit({"type": "response.output_audio.done", **base, "content_index": 0})
            await self.emit(
                {
                    "type": "response.output_audio_transcript.done",
                    **base,
                    "content_index": 0,
                    "transcript": transcript,
                }
            )
            part = {"type": "audio", "transcript": transcript}
            await self.emit(
                {"type": "response.content_part.done", **base, "content_index": 0, "part": part}
            )
            done = {
                **message,
                "status": "completed",
                "content": [{"type": "output_audio", "transcript": transcript}],
            }
            del active.open_items[item_id]
            active.output.append(done)
            await self.emit(
                {
                    "type": "response.output_item.done",
                    "response_id": response_id,
                    "output_index": index,
                    "item": done,
                }
            )
            await self.emit(
                {"type": "conversation.item.done", "previous_item_id": None, "item": done}
            )
            index += 1
        for call in reply.calls:
            item_id = self._id("item")
            self.items[item_id] = _Item(
                item_id, "", "function_call", text=f"{call.name}({_canonical(call.arguments)})"
            )
            item_json = {
                "id": item_id,
                "object": "realtime.item",
                "type": "function_call",
                "status": "in_progress",
                "call_id": call.call_id,
                "name": call.name,
                "arguments": "",
            }
            active.open_items[item_id] = (index, "function_call", call, "")
            await self.emit(
                {
                    "type": "response.output_item.added",
                    "response_id": response_id,
                    "output_index": index,
                    "item": item_json,
                }
            )
            sent = ""
            for start in range(0, len(call.arguments), call.chunk):
                if start and reply.interval:
                    await asyncio.sleep(reply.interval)
                fragment = call.arguments[start : start + call.chunk]
                sent += fragment
                active.open_items[item_id] = (index, "function_call", call, sent)
                await self.emit(
                    {
                        "type": "response.function_call_arguments.delta",
                        "response_id": response_id,
                        "item_id": item_id,
                        "output_index": index,
                        "call_id": call.call_id,
                        "delta": fragment,
                    }
                )
            await self.emit(
                {
                    "type": "response.function_call_arguments.done",
                    "response_id": response_id,
                    "item_id": item_id,
                    "output_index": index,
                    "call_id": call.call_id,
                    "arguments": call.arguments,
                    # response_function_call_arguments_done_event.py: ``name`` is required.
                    "name": call.name,
                }
            )
            done = {**item_json, "status": "completed", "arguments": call.arguments}
            del active.open_items[item_id]
            active.output.append(done)
            await self.emit(
                {
                    "type": "response.output_item.done",
                    "response_id": response_id,
                    "output_index": index,
                    "item": done,
                }
            )
            index += 1
        self.active = None
        # response.done: "Always emitted, no matter the final state." A failed response
        # carries status_details.error, an incomplete one status_details.reason
        # (max_output_tokens or content_filter; realtime_response_status.py).
        if reply.failed is not None:
            done = self._response(active, "failed", None, reply.failed)
        elif reply.incomplete is not None:
            done = self._response(active, "incomplete", reply.incomplete)
        else:
            done = self._response(active, "completed", None)
        await self.emit({"type": "response.done", "response": done})

    async def _audio_delta(self, active: _Active, payload: bytes) -> None:
        item, base = active.audio_item, active.audio_base
        assert item is not None
        assert base is not None
        ms = _ms(payload, self.output_format)
        item.audio_ms += ms
        active.audio_ms += ms
        # response.output_audio.delta: response_id, item_id, output_index,
        # content_index, delta (base64)
        self.standin.deltas.append(payload)
        await self.emit(
            {
                "type": "response.output_audio.delta",
                **base,
                "content_index": 0,
                "delta": base64.b64encode(payload).decode(),
            }
        )

    async def _cancel(self, reason: str) -> None:
        active = self.active
        assert active is not None
        reply = active.reply
        if reply is not None and reply.after_cancel and active.audio_base is not None:
            # Generated before the cancel took effect: the client gets it, late.
            size = len(reply.audio[0]) if reply.audio else 960
            for n in range(reply.after_cancel):
                await self._audio_delta(active, bytes([(n * 31) % 256]) * size)
        self.active = None
        if active.task is not None:
            active.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await active.task
        # function_call_arguments.done and output_item.done are "also emitted when a
        # Response is interrupted, incomplete, or cancelled".
        for item_id, (index, kind, call, sent) in active.open_items.items():
            item: dict[str, Any]
            if call is not None:
                await self.emit(
                    {
                        "type": "response.function_call_arguments.done",
                        "response_id": active.id,
                        "item_id": item_id,
                        "output_index": index,
                        "call_id": call.call_id,
                        "arguments": sent,
                        "name": call.name,
                    }
                )
                item = {
                    "id": item_id,
                    "object": "realtime.item",
                    "type": kind,
                    "status": "incomplete",
                    "call_id": call.call_id,
                    "name": call.name,
                    "arguments": sent,
                }
            else:
                item = {
                    "id": item_id,
                    "object": "realtime.item",
                    "type": kind,
                    "status": "incomplete",
                    "role": "assistant",
                    "content": [],
                }
            active.output.append(item)
            await self.emit(
                {
                    "type": "response.output_item.done",
                    "response_id": active.id,
                    "output_index": index,
                    "item": item,
                }
            )
        await self.emit(
            {"type": "response.done", "response": self._response(active, "cancelled", reason)}
        )


class StandIn:
    """The stand-in server. ``await start()`` returns its ``ws://`` base URL.

    :param api_key: when set, a connection without ``Authorization: Bearer <api_key>``
        is turned away. The service accepts the upgrade, sends an ``error``
        ``invalid_api_key`` and closes with 3000 ``invalid_request_error.invalid_api_key``
        (as reported in
        github.com/twilio-samples/speech-assistant-openai-realtime-api-python/issues/4:
        "received 3000 (registered) invalid_request_error.invalid_api_key", and in
        github.com/openai/openai-realtime-api-beta/issues/2: a random key "gets a
        successful connection and a different error message as a websocket message");
        with ``refuse_status`` set it answers the upgrade with that HTTP status instead
        (403 is what a key without access to the model gets, same issue #2).
    :param echo_error_event_ids: put the client's ``event_id`` in ``error.event_id``
        (documented; the real service sometimes sends null, so tests run both ways).
    :param check_types: check every event against the openai SDK's types (module
        docstring); off only where the check's cost would be measured.
    """

    def __init__(
        self,
        *,
        api_key: str | None = None,
        refuse_status: int | None = None,
        user_transcript: str = "what is the weather",
        threshold: float = 0.02,
        silence_ms: float = 200.0,
        echo_error_event_ids: bool = True,
        check_types: bool = True,
    ) -> None:
        self.api_key = api_key
        self.refuse_status = refuse_status
        #: End the input transcription of each user item with ``.failed``.
        self.transcription_fails = False
        #: Hold each ``.completed`` / ``.failed`` transcription event until this is set.
        self.transcript_gate: asyncio.Event | None = None
        #: Answer a valid ``session.update`` with ``session.updated`` (a proxy that drops
        #: the event is the only reason to turn this off).
        self.confirm_session_update = True
        #: Cut this many coming connections right after their ``session.update`` (a
        #: network path that keeps failing; not a behaviour of the service itself).
        self.drop_on_open = 0
        self.user_transcript = user_transcript
        self.threshold = threshold
        self.silence_ms = silence_ms
        self.echo_error_event_ids = echo_error_event_ids
        #: Replies for the next responses, in order; then :attr:`default_reply`.
        self.replies: deque[Reply] = deque()
        self.default_reply = Reply(audio=[bytes(960)], transcript=["ok"])
        #: Every client event: (connection number, event), in arrival order.
        self.received: list[tuple[int, dict[str, Any]]] = []
        #: Every server event sent: (connection number, event).
        self.sent: list[tuple[int, dict[str, Any]]] = []
        #: The payload of every audio delta sent, in order (after stamping).
        self.deltas: list[bytes] = []
        #: perf_counter_ns at the arrival of each response.cancel.
        self.cancel_times: list[int] = []
        #: The handshake of each connection: (path with query, Authorization header).
        self.handshakes: list[tuple[str, str | None]] = []
        self.connections: list[_Connection] = []
        #: Refuse this many coming handshakes with HTTP 503 (an outage).
        self.refuse = 0
        #: Events either side sent that the SDK's types refuse (module docstring); off
        #: only for the latency bench, where checking would be measured too.
        self.check_types = check_types
        self.invalid: list[str] = []
        self._ids = itertools.count(1)
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: Server | None = None
        self.url = ""

    async def start(self) -> str:
        self._server = await serve(
            self._serve,
            "127.0.0.1",
            0,
            process_request=self._check,
            compression=None,
            max_size=None,
            # Its own logger: the "provider" logs the headers it received, key included;
            # tests about our logs leave this one out.
            logger=logging.getLogger(LOGGER),
        )
        port = next(iter(self._server.sockets)).getsockname()[1]
        self.url = f"ws://127.0.0.1:{port}/v1/realtime"
        return self.url

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)
        if self.invalid:
            problems = "\n  ".join(self.invalid[:10])
            raise AssertionError(f"events the openai SDK's types refuse:\n  {problems}")

    async def __aenter__(self) -> StandIn:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _check(self, connection: ServerConnection, request: Request) -> Response | None:
        authorization = request.headers.get("Authorization")
        self.handshakes.append((request.path, authorization))
        if (
            self.refuse_status is not None
            and self.api_key is not None
            and authorization != f"Bearer {self.api_key}"
        ):
            status = HTTPStatus(self.refuse_status)
            return connection.respond(status, "Incorrect API key provided\n")
        if self.refuse > 0:  # an outage: the service answers, but not with a WebSocket
            self.refuse -= 1
            return connection.respond(HTTPStatus.SERVICE_UNAVAILABLE, "overloaded\n")
        return None

    async def _serve(self, ws: ServerConnection) -> None:
        connection = _Connection(self, ws, len(self.connections) + 1)
        self.connections.append(connection)
        request = ws.request
        if (
            self.api_key is not None
            and request is not None
            and request.headers.get("Authorization") != f"Bearer {self.api_key}"
        ):
            await connection.error(
                "invalid_api_key",
                "Incorrect API key provided: sk-...0000. You can find your API key at "
                "https://platform.openai.com/account/api-keys.",
                None,
            )
            await ws.close(3000, "invalid_request_error.invalid_api_key")
            return
        await connection.emit({"type": "session.created", "session": connection.session})
        try:
            async for raw in ws:
                event = json.loads(raw)
                problem = client_event_problem(event) if self.check_types else None
                if problem is not None:
                    self.invalid.append(f"the adapter sent {problem}")
                self.received.append((connection.number, event))
                await connection.handle(event)
                if event.get("type") == "session.update" and self.drop_on_open > 0:
                    self.drop_on_open -= 1
                    connection.ws.transport.abort()
        except ConnectionClosed:
            pass
        finally:
            connection.closed = True
            if connection.active is not None and connection.active.task is not None:
                connection.active.task.cancel()

    # -- for tests --

    def events(
        self, kind: str | None = None, *, connection: int | None = None
    ) -> list[dict[str, Any]]:
        """Client events received, of ``kind`` (all when None), on ``connection``."""
        return [
            event
            for number, event in self.received
            if (kind is None or event.get("type") == kind)
            and (connection is None or number == connection)
        ]

    def conversation(self, connection: int) -> list[tuple[str, str, str, bool]]:
        """The conversation the model of ``connection`` holds, in order: (type, role,
        text, truncated) of each item left in it (deleted ones are gone). A truncated
        assistant item keeps its full text here; the service drops its transcript
        ("this will also truncate the transcript", API reference,
        conversation.item.truncate)."""
        items = self.connections[connection - 1].items.values()
        return [(i.type, i.role, i.text, i.truncated_ms is not None) for i in items]

    def sent_events(self, kind: str) -> list[dict[str, Any]]:
        return [event for _, event in self.sent if event.get("type") == kind]

    async def wait_for(
        self,
        kind: str,
        count: int = 1,
        *,
        where: Callable[[dict[str, Any]], bool] | None = None,
        connection: int | None = None,
        timeout: float = 5.0,
    ) -> list[dict[str, Any]]:
        """Until ``count`` client events of ``kind`` (matching ``where``) arrived."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            found = [
                e for e in self.events(kind, connection=connection) if where is None or where(e)
            ]
            if len(found) >= count:
                return found
            if loop.time() > deadline:
                raise AssertionError(
                    f"the stand-in got {len(found)} {kind} event(s), expected {count}; "
                    f"received: {[e.get('type') for _, e in self.received][-40:]}"
                )
            await asyncio.sleep(0.002)

    async def wait_connections(self, count: int, timeout: float = 5.0) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while len(self.connections) < count:
            if loop.time() > deadline:
                raise AssertionError(f"{len(self.connections)} connection(s), expected {count}")
            await asyncio.sleep(0.002)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def inject(self, event: dict[str, Any], *, check: bool = True) -> None:
        """Send ``event`` on the latest connection (e.g. an ``error``); ``check=False``
        for an event the SDK's GA types do not have (a beta name a proxy sends)."""
        await self.connections[-1].emit(event, check=check)

    def drop(self) -> None:
        """Cut the latest connection at once, without a close frame."""
        transport = self.connections[-1].ws.transport
        transport.abort()
