"""``--agent openai-realtime``: speech to speech through the OpenAI Realtime API.

One provider WebSocket per vRT session, speaking the GA (generally available) event
protocol: ``session.update`` with ``session.type = "realtime"`` and
``audio.input/output.format`` objects, and the GA server event names
(``response.output_audio.delta``, ``response.output_audio_transcript.delta``,
``response.output_text.delta``). The beta names of those three output events
(``response.audio.delta``, ``response.audio_transcript.delta``, ``response.text.delta``)
are accepted too, because some proxies still emit them; everything we *send* is GA.
See ``docs/agent-openai-realtime.md`` for the settings, the full mapping, the provider
events handled and ignored, and the failure behaviour.

What maps to what (the agent seam of ``docs/agents.md``; no special case in the server):

* the session starts with one ``session.update`` (with an ``event_id``) and is running
  only once ``session.updated`` confirms it: a refused update (an ``error`` naming our
  event, or a ``session.*`` param) or no confirmation within the connect timeout ends
  the vRT session. Running on the service's defaults instead (no tools, pcm16 for a
  pcmu client, no transcripts, the service's own interruptions) would be worse.
* tool names the service refuses (vRT allows ``.``) are sent under mapped names
  (``function_names.py``) and mapped back when the model calls them.
* formats: pcm16 at 24 kHz and pcmu (G.711 µ-law, 8 kHz) pass through unchanged in
  both directions; ``session.update`` names the session's formats to the provider.
* the provider's speech detection (``input_audio_buffer.speech_started``) is
  ``session.user_started_speaking()``: a ``listening`` turn, and the response in
  flight interrupted (§6.2) by us with ``response.cancel``. The provider's own
  ``interrupt_response`` is off so that every cancellation has one author and one
  path (no "no active response" race between us and the provider).
* user transcripts: ``conversation.item.input_audio_transcription.delta`` events are
  partials, ``.completed`` the final, each for the user item it names and in the turn
  of that item's speech, however late it ends; ``.failed`` is a recoverable
  ``AGENT_ERROR`` (and a final for any partial already shown).
* responses are turns: ``response.created`` thinking, first audio speaking, a function
  call acting, ``response.done`` idle (or the follow-up response after tool results).
  Audio deltas are written as they arrive, one output frame each. An ``incomplete``
  response (``max_output_tokens``, ``content_filter``) is a recoverable ``AGENT_ERROR``
  saying why the answer stopped.
* function calls: ``turn.tool_call(name, provider_id=call_id)``, argument deltas as
  ``delta``, ``arguments.done`` as ``issue``; the server gives the client a new public
  callId (§6.3). ``ToolSettled`` becomes ``function_call_output`` with the provider's
  ``call_id``, then one ``response.create`` once every call of the response settled.
* an INTERRUPTED call is never fed back as if current: it gets an explicit
  "interrupted" ``function_call_output`` (so the provider's conversation has no dangling
  call, and the model knows the call may or may not have run) and *no*
  ``response.create``: nobody asked for an answer any more. A call whose arguments
  never completed (response cancelled or cut off) is never issued and gets a
  "cancelled, not run" output, likewise without ``response.create``.
* ``ResponseInterrupted`` and text during a response cancel the provider response.
  The provider allows one response at a time: we track it from ``response.created`` /
  ``response.done``, cancel only responses we saw created, cancel a requested one as soon
  as it is created, and queue ``response.create`` until the previous one is done.
* what the user heard: ``PlaybackReported`` cuts the provider's item to the played ms
  (capped at the audio delivered for it) with ``conversation.item.truncate``, but only
  when something is left to cut (a truncate at or past the item's end is refused, and
  one that cuts nothing still changes the model's behaviour); an item of which nothing
  was heard is deleted instead (a truncate of an item with no audio is refused). Without
  a report, an interrupted response's items are cut to what was sent to the client
  (the provider generates faster than real time and holds audio nobody got).
* ``ContextChanged`` is a delimited *data* item (a user message ``<context>…</context>``
  with a note), replacing the previous one; never part of the instructions (§5.5, §10).
* failures: provider ``error`` events are ``AGENT_ERROR`` (recoverable). Permanent ones
  (a refused key, HTTP 401/403 or ``invalid_api_key`` then close 3000; an unknown model;
  no quota; a refused configuration) end the vRT session with a non-recoverable
  ``AGENT_ERROR``. The end of the provider's maximum session duration (60 minutes:
  ``session_expired``, close 1001) is one recoverable ``AGENT_ERROR`` and a new provider
  session. A lost connection is ``AGENT_ERROR`` (recoverable), the turn in flight is
  interrupted, and a new provider session is opened with exponential backoff; after
  ``max_failed_links`` provider sessions in a row that end within 10 s, or
  ``give_up_after`` seconds without reaching the provider, the vRT session ends.
* the conversation outlives the provider session: the agent keeps a conversation log
  (``history.ConversationLog``: what the user said or typed, the final transcript of
  what the model said cut to what the user heard, each tool call with its result) and
  replays it into every new provider session (``replay.realtime_items``) with the
  instructions, tools and context. A reconnect at a quiet moment is invisible to the
  client; a question whose answer had not begun is answered by the new session; an
  answer cut off, or speech the old session was still hearing, is one recoverable
  ``AGENT_ERROR`` saying so. With ``recycle_after`` set, a provider session that
  lived that long is replaced at the next quiet moment, before the service's limit
  (LiveKit's plugin recycles every 20 minutes).
* token usage from ``response.done`` is summed in ``agent.usage`` and logged at DEBUG.

The API key comes only from ``OPENAI_API_KEY``; it is never logged (the WebSocket
library logs handshake headers at DEBUG, so its logger gets a redacting filter).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import os
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final
from urllib.parse import urlencode

import orjson
import websockets
from websockets.asyncio.client import ClientConnection

from ..protocol.ids import new_id
from ..protocol.messages import PCM16_24K, UNSET, Format
from .base import (
    AgentFactory,
    AgentInput,
    AgentSession,
    AgentSetupError,
    AudioItem,
    ContextChanged,
    PlaybackReported,
    ResponseInterrupted,
    ToolCallHandle,
    ToolSettled,
    Turn,
    UserTextReceived,
)
from .context_data import CONTEXT_NOTE, CONTEXT_RULE, context_message, json_text
from .function_names import OPENAI, FunctionNames
from .history import (
    AgentSaid,
    ConversationLog,
    HistoryEntry,
    LogSlot,
    ToolCalled,
    UserSaid,
    settled,
)
from .provider_socket import (
    LinkSettings,
    ProviderAgent,
    ProviderSocket,
    keyed_factory,
    model_voice_url,
    option_reader,
    register_secret,
    shown,
)
from .replay import realtime_items
from .usage import TokenUsage, count

__all__ = [
    "CONTEXT_NOTE",
    "DEFAULT_BASE_URL",
    "FORMATS",
    "PERMANENT_CODES",
    "OpenAIRealtimeAgent",
    "RealtimeConfig",
    "config_from",
    "setup",
]

log = logging.getLogger(__name__)
#: The ``websockets`` library logs handshake headers (Authorization included) at DEBUG
#: on the logger it is given: it gets this one, which redacts the key.
_WIRE_LOG: Final = logging.getLogger(f"{__name__}.wire")

PCMU_8K: Final = Format(encoding="pcmu", sample_rate=8000)
#: What the provider takes and produces unchanged: pcm16 at 24 kHz ("audio/pcm", the
#: only PCM rate it supports) and G.711 µ-law ("audio/pcmu", 8 kHz) (§8.2).
FORMATS: Final = (PCM16_24K, PCMU_8K)

DEFAULT_BASE_URL: Final = "wss://api.openai.com/v1/realtime"
DEFAULT_MODEL: Final = "gpt-realtime"
DEFAULT_VOICE: Final = "marin"
DEFAULT_INSTRUCTIONS: Final = "You are a helpful voice assistant. Answer briefly and naturally."
DEFAULT_TRANSCRIPTION_MODEL: Final = "gpt-4o-mini-transcribe"
TURN_DETECTIONS: Final = ("server_vad", "semantic_vad")

#: (option name, environment variable) of every setting.
_SETTINGS: Final = {
    "model": "VRT_OPENAI_MODEL",
    "voice": "VRT_OPENAI_VOICE",
    "instructions": "VRT_OPENAI_INSTRUCTIONS",
    "base_url": "VRT_OPENAI_BASE_URL",
    "transcription_model": "VRT_OPENAI_TRANSCRIPTION_MODEL",
    "turn_detection": "VRT_OPENAI_TURN_DETECTION",
    "recycle_after": "VRT_OPENAI_RECYCLE_AFTER",
}
#: Audio items remembered per provider session for truncation (§8.4).
_REMEMBERED_ITEMS: Final = 64
#: Turns whose words (typed, or a final transcript) are in the conversation log.
_REMEMBERED_INPUTS: Final = 64
#: Event ids of best-effort deletes remembered per provider session.
_MAX_BEST_EFFORT: Final = 64
#: Error codes no retry can fix (in an ``error`` event or a failed ``response.done``):
#: the vRT session ends. ``invalid_api_key`` arrives before the close 3000 of a refused
#: key; the others are what an unknown model, an unusable model and an empty account
#: are reported as.
PERMANENT_CODES: Final = frozenset(
    {"invalid_api_key", "model_not_found", "invalid_model", "insufficient_quota"}
)
#: The provider's close code for a session it refuses ("received 3000 (registered)
#: invalid_request_error.invalid_api_key").
_CLOSE_REFUSED: Final = 3000


#: The output of a call whose arguments never completed: every function call item
#: the provider made gets an output, so its conversation holds no dangling call.
_NOT_RUN: Final = {
    "status": "cancelled",
    "note": "The response was stopped before this call was complete; it was not run.",
}

# --- configuration --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RealtimeConfig(LinkSettings):
    """Everything but the API key, which never leaves ``OPENAI_API_KEY`` and the
    ``Authorization`` header (it is not a field, so no repr can print it)."""

    model: str = DEFAULT_MODEL
    voice: str = DEFAULT_VOICE
    instructions: str = DEFAULT_INSTRUCTIONS
    base_url: str = DEFAULT_BASE_URL
    #: None turns input transcription (user transcripts) off.
    transcription_model: str | None = DEFAULT_TRANSCRIPTION_MODEL
    turn_detection: str = "server_vad"
    #: Replace a provider session that lived this many seconds at the next quiet moment
    #: (0: only when the service ends it, at 60 minutes).
    recycle_after: float = 0.0

    def url(self) -> str:
        separator = "&" if "?" in self.base_url else "?"
        return f"{self.base_url}{separator}{urlencode({'model': self.model})}"


def config_from(options: Mapping[str, str], environ: Mapping[str, str]) -> RealtimeConfig:
    """The configuration from ``--agent-option`` values, then ``VRT_OPENAI_*``
    environment variables, then the defaults. Raises AgentSetupError (one line)."""
    get = option_reader(options, environ, _SETTINGS, "OPENAI_API_KEY")
    model, voice, base_url = model_voice_url(
        get, (DEFAULT_MODEL, DEFAULT_VOICE, DEFAULT_BASE_URL), "OPENAI_API_KEY"
    )
    transcription = get("transcription_model", DEFAULT_TRANSCRIPTION_MODEL)
    turn_detection = get("turn_detection", "server_vad")
    if turn_detection not in TURN_DETECTIONS:
        raise AgentSetupError(
            f"turn_detection must be one of {', '.join(TURN_DETECTIONS)}, not {turn_detection!r}"
        )
    try:
        recycle_after = float(get("recycle_after", "0") or "0")
    except ValueError:
        recycle_after = -1.0
    if not 0 <= recycle_after < float("inf"):
        raise AgentSetupError("recycle_after must be a number of seconds (0: off)")
    return RealtimeConfig(
        recycle_after=recycle_after,
        model=model,
        voice=voice,
        instructions=get("instructions", DEFAULT_INSTRUCTIONS),
        base_url=base_url,
        transcription_model=None if transcription.lower() in ("", "none", "off") else transcription,
        turn_detection=turn_detection,
    )


def setup(options: dict[str, str]) -> AgentFactory:
    """``vrt serve --agent openai-realtime``: read the key and the settings, or say in one
    line what to set (AgentSetupError)."""
    api_key = os.environ.get("OPENAI_API_KEY", "").strip()
    if not api_key:
        raise AgentSetupError(
            "set OPENAI_API_KEY in the environment (the key is read only from there)"
        )
    config = config_from(options, os.environ)
    return keyed_factory(OpenAIRealtimeAgent, config, api_key, log, _WIRE_LOG)


# --- per provider session state ------------------------------------------------------


@dataclass(slots=True)
class _Request:
    """A ``response.create`` we want, for ``turn`` (None: begin a turn when created)."""

    number: int
    turn: Turn | None
    cancelled: bool = False

    @property
    def event_id(self) -> str:
        return f"vrt_create_{self.number}"


@dataclass(slots=True)
class _Audio:
    """One provider audio content part, and the vRT audio item it is written to."""

    provider_item: str
    content_index: int
    #: The vRT item id, chosen at the first delta (a transcript often comes before the
    #: audio); ``item`` is announced (``audio.start``) only with the first audio.
    vrt_id: str
    item: AudioItem | None = None
    #: Bytes the provider sent for it, and of those the bytes written to the client.
    received: int = 0
    delivered: int = 0
    transcript: str = ""
    #: What the client reported heard (ms), if it did.
    heard: int | None = None
    truncated_at: int | None = None
    deleted: bool = False
    #: ``received`` when the transcript last grew.
    transcript_at: int = 0
    #: The turn it spoke for, and its words in the conversation log, once logged.
    turn_id: str | None = None
    said: LogSlot | None = None


@dataclass(slots=True)
class _UserItem:
    """A user audio item of the provider, and where its transcript goes."""

    vrt_id: str
    turn: Turn | None
    #: Its place in the conversation log, filled by the final transcript.
    slot: LogSlot | None = None
    text: str = ""


@dataclass(slots=True)
class _Call:
    provider_id: str
    name: str
    response: _Response
    handle: ToolCallHandle | None
    finished: bool = False  # issued (or failed): later events for it are ignored


@dataclass(slots=True)
class _Response:
    id: str
    #: The vRT turn it speaks for; None for a response we cancel at once (it was asked
    #: for by a turn that is over): its output is dropped.
    turn: Turn | None
    cancel_sent: bool = False
    done: bool = False
    #: The model called functions: the turn goes on with a follow-up response once
    #: every call has its output.
    had_calls: bool = False
    open_calls: set[str] = field(default_factory=set)
    followed_up: bool = False
    status: str = ""
    audio: dict[tuple[str, int], _Audio] = field(default_factory=dict)
    #: Something of it reached the client (a transcript, audio, text, a tool call).
    delivered: bool = False


class _Link(ProviderSocket):
    """One provider WebSocket, i.e. one provider session, and all the state that dies
    with it: the response in flight, the queued request, items and calls."""

    def __init__(self, ws: ClientConnection, generation: int) -> None:
        super().__init__(ws)
        self.generation = generation
        self.requested: _Request | None = None  # response.create sent, no response.created yet
        self.queued: _Request | None = None  # to send once no response is active
        self.active: _Response | None = None  # response.created seen, response.done not yet
        self.responses: dict[str, _Response] = {}
        self.calls: dict[str, _Call] = {}  # by public callId, awaiting ToolSettled
        self.by_provider_call: dict[str, _Call] = {}
        #: vRT audio item id -> the provider content it carried, for truncation.
        self.items: OrderedDict[str, _Audio] = OrderedDict()
        #: provider user item id -> its transcript's vRT item and turn.
        self.user_items: OrderedDict[str, _UserItem] = OrderedDict()
        self.context_item: str | None = None
        #: The provider echoes response.create metadata in response.created (documented):
        #: from then on an untagged response is never taken for ours.
        self.echoes = False
        #: Event ids whose errors are expected, not news (bounded: oldest forgotten).
        self.best_effort: OrderedDict[str, None] = OrderedDict()
        #: The event_id of our session.update, until session.updated confirms it.
        self.session_event: str | None = None
        self.confirm_timer: asyncio.TimerHandle | None = None
        #: ``recycle_after`` passed: replaced at the next quiet moment.
        self.recycle_due = False
        self.recycle_timer: asyncio.TimerHandle | None = None
        self.closing: asyncio.Task[None] | None = None

    def forget_after(self, event_id: str) -> None:
        """Errors about ``event_id`` are expected (a best-effort delete or truncate)."""
        self.best_effort[event_id] = None
        while len(self.best_effort) > _MAX_BEST_EFFORT:
            self.best_effort.popitem(last=False)

    async def close(self) -> None:
        for timer in (self.confirm_timer, self.recycle_timer):
            if timer is not None:
                timer.cancel()
        await super().close()


def _provider_format(fmt: Format) -> dict[str, Any]:
    if fmt.encoding == "pcmu":
        return {"type": "audio/pcmu"}
    return {"type": "audio/pcm", "rate": 24000}


def _result(event: ToolSettled) -> dict[str, Any]:
    """What the model is told of a call's result (``function_call_output``)."""
    if event.code == "INTERRUPTED":
        return {
            "status": "interrupted",
            "note": "The user interrupted before this result arrived; the tool may or may "
            "not have taken effect. Do not assume it succeeded.",
        }
    if event.ok:
        return {"output": event.output}
    return {"error": {"code": event.code or "FAILED", "message": event.message or ""}}


def _ms(nbytes: int, fmt: Format) -> int:
    """Whole milliseconds of ``nbytes`` of output audio (floored: never more than sent)."""
    if fmt.encoding == "pcmu":
        return nbytes // 8
    return nbytes * 1000 // (2 * fmt.rate)


# --- the agent ------------------------------------------------------------------------


class OpenAIRealtimeAgent(ProviderAgent[_Link]):
    """One vRT session's agent: one provider session at a time (a new one after a lost
    connection)."""

    key_hint: ClassVar[str] = "check OPENAI_API_KEY"
    config: RealtimeConfig
    _log = log
    _wire_log = _WIRE_LOG

    input_formats: tuple[Format, ...] = FORMATS
    output_formats: tuple[Format, ...] = FORMATS

    def __init__(self, config: RealtimeConfig, api_key: str) -> None:
        super().__init__()
        self.config = config
        self._api_key = api_key
        register_secret(api_key, log, _WIRE_LOG)  # redacted from every log record here
        self._generation = 0
        self._numbers = 0
        self._context: Any = None
        self._names = FunctionNames((), OPENAI)
        self._listening: Turn | None = None  # the turn of the user's current speech
        #: Tokens the model used in this session (see ``usage.py``).
        self.usage = TokenUsage()
        #: The conversation so far, replayed into every new provider session.
        self._conversation = ConversationLog()
        #: Turns whose question is in the log (it can be answered by a new session).
        self._inputs: OrderedDict[str, None] = OrderedDict()
        #: A turn whose answer had not begun when its provider session ended: the next
        #: provider session answers it.
        self._resume: Turn | None = None
        #: Tool calls that were running when their provider session ended (public call
        #: id -> the provider's call id), and their turn: the results go to the next
        #: provider session, which then answers.
        self._carried: dict[str, str] = {}
        self._carried_turn: Turn | None = None
        self._handlers: dict[str, Callable[[_Link, dict[str, Any]], None]] = {
            "error": self._on_error,
            "session.updated": self._on_session_updated,
            "input_audio_buffer.speech_started": self._on_speech_started,
            "input_audio_buffer.speech_stopped": self._on_speech_stopped,
            "input_audio_buffer.committed": self._on_committed,
            "conversation.item.input_audio_transcription.delta": self._on_user_delta,
            "conversation.item.input_audio_transcription.completed": self._on_user_transcript,
            "conversation.item.input_audio_transcription.failed": self._on_user_failed,
            "response.created": self._on_response_created,
            "response.done": self._on_response_done,
            "response.output_item.added": self._on_item_added,
            "response.output_item.done": self._on_item_done,
            "response.function_call_arguments.delta": self._on_arguments_delta,
            "response.function_call_arguments.done": self._on_arguments_done,
            "response.output_audio.delta": self._on_audio_delta,
            "response.output_audio_transcript.delta": self._on_transcript_delta,
            "response.output_audio_transcript.done": self._on_transcript_done,
            "response.output_text.delta": self._on_text_delta,
            # Beta names of the same events (GA renamed them); we only send GA events.
            "response.audio.delta": self._on_audio_delta,
            "response.audio_transcript.delta": self._on_transcript_delta,
            "response.audio_transcript.done": self._on_transcript_done,
            "response.text.delta": self._on_text_delta,
        }

    def __repr__(self) -> str:
        return f"OpenAIRealtimeAgent(model={self.config.model!r}, url={self.config.base_url!r})"

    # -- lifecycle --

    def restore(self, history: Sequence[HistoryEntry]) -> None:
        """The conversation so far (a session moved to this process): the start of the
        conversation log, whose items are created in every provider session before the
        context (``replay.realtime_items``)."""
        self._conversation = ConversationLog(history)

    def _prepare(self, session: AgentSession) -> None:
        self._context = session.context
        self._names = FunctionNames(session.tools, OPENAI)

    def _url(self) -> str:
        return self.config.url()

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._api_key}"}

    def _start(self, ws: ClientConnection) -> _Link:
        return self._configure(ws)

    def _configure(self, ws: ClientConnection) -> _Link:
        self._generation += 1
        link = _Link(ws, self._generation)
        self._numbers += 1
        link.session_event = f"vrt_session_{self._numbers}"
        link.send(
            {
                "type": "session.update",
                "event_id": link.session_event,
                "session": self._session_config(),
            }
        )
        # Running on the service's defaults is not running: no confirmation, no session.
        link.confirm_timer = asyncio.get_running_loop().call_later(
            self.config.connect_timeout, self._unconfirmed, link
        )
        # The conversation so far, then the context, then what waited for a model. A
        # call still running gets its output when its result comes, not now.
        carried = set(self._carried.values())
        for item in realtime_items(self._conversation.entries(), self._names):
            if item["type"] == "function_call_output" and item["call_id"] in carried:
                continue
            link.send({"type": "conversation.item.create", "item": item})
        if self._context is not None:
            self._send_context(link)
        self._link = link
        log.info("model session %d open (%s)", link.generation, self.config.model)
        resume, self._resume = self._resume, None
        if resume is not None and resume.active:
            self._request(link, resume)
        self._drain_pending(link)
        if self.config.recycle_after > 0:
            link.recycle_timer = asyncio.get_running_loop().call_later(
                self.config.recycle_after, self._recycle_due, link
            )
        return link

    def _unconfirmed(self, link: _Link) -> None:
        if link.session_event is not None and link.fatal is None:
            link.fatal = (
                "the model service did not confirm the session configuration (no "
                f"session.updated within {self.config.connect_timeout:g} s)"
            )
            link.abort()  # ends _read at once

    def _session_config(self) -> dict[str, Any]:
        session = self.session
        audio_input: dict[str, Any] = {
            "format": _provider_format(session.input_format),
            # The provider detects speech and answers when it ends, but never cancels
            # on its own: we cancel, so each cancellation has exactly one author.
            "turn_detection": {
                "type": self.config.turn_detection,
                "create_response": True,
                "interrupt_response": False,
            },
        }
        if self.config.transcription_model is not None:
            audio_input["transcription"] = {"model": self.config.transcription_model}
        tools = [
            {
                "type": "function",
                "name": self._names.provider(tool.name),
                **({"description": tool.description} if tool.description is not UNSET else {}),
                "parameters": tool.parameters
                if isinstance(tool.parameters, dict)
                else {"type": "object", "properties": {}},
            }
            for tool in session.tools.values()
        ]
        instructions = f"{self.config.instructions}\n\n{CONTEXT_RULE}".strip()
        return {
            "type": "realtime",
            "output_modalities": ["audio"],
            "instructions": instructions,
            "audio": {
                "input": audio_input,
                "output": {
                    "format": _provider_format(session.output_format),
                    "voice": self.config.voice,
                },
            },
            "tools": tools,
            "tool_choice": "auto",
        }

    def _classify_close(self, link: _Link) -> None:
        """Why the provider closed: a refusal (3000) ends the vRT session, the end of the
        maximum duration (1001) is expected."""
        code, reason = link.ws.close_code, link.ws.close_reason or ""
        if code == _CLOSE_REFUSED and link.fatal is None:
            hint = ": check OPENAI_API_KEY" if "invalid_api_key" in reason else ""
            link.fatal = f"the model service refused the session ({reason or code}){hint}"
        elif code == 1001 and "maximum duration" in reason:
            link.expected = True

    def _lost(self, link: _Link) -> None:
        """The provider session ended: the log keeps what the user got of the answers in
        flight; a turn whose answer had not begun is answered by the next session; an
        answer cut off, or speech the old session was hearing, is said to be lost. At a
        quiet moment the client hears nothing of it."""
        session = self.session
        fmt = session.output_format
        for record in link.responses.values():
            for audio in record.audio.values():
                # Only what was sent was heard: the rest died with the provider session.
                end = _ms(audio.delivered, fmt)
                if end <= 0:
                    audio.deleted = True
                elif end < _ms(audio.received, fmt):
                    audio.truncated_at = min(end, audio.truncated_at or end)
                self._log_audio(audio)
        listening, self._listening = self._listening, None
        why = "ended as announced" if link.expected else "was lost"
        turn = session.turn
        if turn is None or not turn.active:
            log.info(
                "model session %d %s; the next one gets the conversation", link.generation, why
            )
            return
        if self._carried and turn == self._carried_turn:
            log.info("model session %d %s; the turn's tool calls still run", link.generation, why)
            return
        records = [r for r in link.responses.values() if r.turn == turn]
        running = [c for c in link.calls.values() if c.response.turn == turn and c.handle]
        if running and all(r.done and r.status == "completed" for r in records):
            # The answer so far is complete and its calls run on the client: their
            # results go to the next provider session, which answers with them.
            log.info(
                "model session %d %s; the next one gets the tool results", link.generation, why
            )
            self._carried = {c.handle.call_id: c.provider_id for c in running if c.handle}
            self._carried_turn = turn
            return
        began = any(r.delivered for r in records)
        if not began and turn != listening and turn.id in self._inputs:
            log.info("model session %d %s; the next one answers the turn", link.generation, why)
            self._resume = turn
            return
        log.warning("model session %d %s during a turn", link.generation, why)
        if began:
            message = (
                "the connection to the model was renewed during an answer; the rest of it is lost"
            )
        else:
            message = (
                "the connection to the model was renewed while the user spoke; that speech "
                "was not heard"
            )
        session.error(message, recoverable=True)
        if not session.interrupt():
            turn.end()  # a listening turn: no response to interrupt, but it is over

    # -- recycling (``recycle_after``) --

    def _recycle_due(self, link: _Link) -> None:
        link.recycle_timer = None
        link.recycle_due = True
        self._maybe_recycle(link)

    def _maybe_recycle(self, link: _Link) -> None:
        """Replace ``link`` if it is due and nothing is going on: no turn, no response,
        no call awaiting its result, no speech being heard."""
        turn = self.session.turn
        if (
            not link.recycle_due
            or link.closing is not None
            or (turn is not None and turn.active)
            or link.active is not None
            or link.requested is not None
            or link.queued is not None
            or link.calls
            or self._listening is not None
        ):
            return
        log.info("model session %d recycled at a quiet moment", link.generation)
        link.expected = True
        self._link = None  # the client's events wait for the next session (audio held)
        link.closing = asyncio.get_running_loop().create_task(
            link.ws.close(1000, "recycled before the session limit")
        )

    # -- the conversation log --

    def _log_audio(self, audio: _Audio) -> None:
        """The words of ``audio`` in the log: its transcript, cut to what the user heard
        (in proportion to the audio kept, at a word boundary: the transcript has no
        timings), none when nothing was heard."""
        text = audio.transcript
        if audio.deleted:
            text = ""
        elif audio.truncated_at is not None:
            # The words kept are those of the audio received when they came (the
            # transcript streams with its audio; all of it may come first).
            fmt = self.session.output_format
            total = _ms(audio.transcript_at, fmt) or _ms(audio.received, fmt)
            if 0 < audio.truncated_at < total:
                kept = text[: len(text) * audio.truncated_at // total]
                text = kept.rsplit(" ", 1)[0] if " " in kept.strip() else kept
        text = text.strip()
        entry = AgentSaid(turn_id=audio.turn_id, text=text, spoken=True) if text else None
        if audio.said is not None:
            audio.said.entry = entry
        elif entry is not None:
            audio.said = self._conversation.add(entry)

    def _input_logged(self, turn: Turn | None) -> None:
        if turn is not None:
            self._inputs[turn.id] = None
            while len(self._inputs) > _REMEMBERED_INPUTS:
                self._inputs.popitem(last=False)

    # -- the provider's events --

    async def _read(self, link: _Link) -> None:
        with contextlib.suppress(websockets.ConnectionClosed):
            async for raw in link.ws:
                try:
                    event = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    log.warning("the model sent a frame that is not JSON; ignored")
                    continue
                if not isinstance(event, dict):
                    continue
                handler = self._handlers.get(str(event.get("type")))
                if handler is None:
                    continue
                try:
                    handler(link, event)
                except (KeyError, TypeError, ValueError, AttributeError):
                    # A provider event of an unexpected shape must not end the session.
                    log.exception("cannot handle the model event %s", event.get("type"))
                if link.fatal is not None:
                    return

    def _on_error(self, link: _Link, event: dict[str, Any]) -> None:
        error = event.get("error") or {}
        code = error.get("code")
        about = error.get("event_id")
        kind = error.get("type") or "error"
        message = shown(str(error.get("message") or "no message"))
        detail = shown(f"{kind}/{code}" if code else str(kind), 80)
        if code == "response_cancel_not_active":
            return  # our cancel crossed the response's end: nothing was left to cancel
        if code == "session_expired":
            link.expected = True  # the close follows; _lost says it once
            return
        param = str(error.get("param") or "")
        if link.session_event is not None and (
            about == link.session_event or (about is None and param.startswith("session."))
        ):
            at = f" at {param}" if param else ""
            link.fatal = (
                f"the model service rejected the session configuration ({detail}{at}): {message}"
            )
            return
        if code in PERMANENT_CODES:
            hint = ": check OPENAI_API_KEY" if code == "invalid_api_key" else ""
            link.fatal = f"the model service refused the session ({detail}): {message}{hint}"
            return
        requested = link.requested
        if requested is not None and (about == requested.event_id or about is None):
            if code == "conversation_already_has_active_response":
                # A response we did not ask for (server VAD) got there first: ask again
                # once it is done. (The error's event_id is often null; only one
                # response.create of ours is ever outstanding, so it is that one.)
                link.requested = None
                if not requested.cancelled and link.queued is None:
                    link.queued = requested
                return
            if about == requested.event_id:  # our response.create failed otherwise
                link.requested = None
                if requested.turn is not None:
                    requested.turn.end()
                self._flush_queue(link)
        if about is not None and about in link.best_effort:
            del link.best_effort[about]
            log.debug("model refused a best-effort event (%s): %s", detail, message)
            return
        log.warning("model error (%s): %s", detail, message)
        self.session.error(f"model error ({detail}): {message}", recoverable=True)

    def _on_session_updated(self, link: _Link, event: dict[str, Any]) -> None:
        if link.session_event is not None:
            link.session_event = None  # confirmed: the session runs as configured
            if link.confirm_timer is not None:
                link.confirm_timer.cancel()
                link.confirm_timer = None

    def _on_speech_started(self, link: _Link, event: dict[str, Any]) -> None:
        # §6.2 server side: the seam interrupts the response in flight and begins (or
        # continues) a listening turn; we stop the provider's response ourselves.
        self._listening = self.session.user_started_speaking()
        self._user_item(link, event.get("item_id"))
        self._cancel_stale(link)

    def _on_speech_stopped(self, link: _Link, event: dict[str, Any]) -> None:
        # The provider commits the speech and answers it (create_response): thinking.
        listening = self._listening
        if listening is not None:
            listening.state("thinking")

    def _on_committed(self, link: _Link, event: dict[str, Any]) -> None:
        self._user_item(link, event.get("item_id"))

    def _user_item(self, link: _Link, provider_id: Any) -> _UserItem | None:
        """The user item ``provider_id`` names, registered with the turn of its speech
        the first time it is named."""
        if not isinstance(provider_id, str):
            return None
        item = link.user_items.get(provider_id)
        if item is None:
            turn = self._listening if self._listening is not None else self.session.turn
            # Its place in the log is here, before the answer (the transcript ends later).
            item = link.user_items[provider_id] = _UserItem(
                new_id("i_"), turn, self._conversation.add()
            )
            while len(link.user_items) > _REMEMBERED_ITEMS:
                link.user_items.popitem(last=False)
        return item

    def _on_user_delta(self, link: _Link, event: dict[str, Any]) -> None:
        item = self._user_item(link, event.get("item_id"))
        delta = event.get("delta")
        if item is not None and isinstance(delta, str) and delta:
            # A partial is replaced by the next transcript of the same item: send the
            # text so far.
            item.text += delta
            self.session.user_transcript(
                item.text, final=False, item_id=item.vrt_id, turn=item.turn
            )

    def _on_user_transcript(self, link: _Link, event: dict[str, Any]) -> None:
        transcript = event.get("transcript")
        if not isinstance(transcript, str):
            return
        item = self._user_item(link, event.get("item_id"))
        if item is None:
            self._conversation.add(UserSaid(text=transcript, spoken=True))
            self.session.user_transcript(transcript, final=True)
            return
        if item.slot is not None and transcript:
            item.slot.entry = UserSaid(text=transcript, spoken=True)
            self._input_logged(item.turn)
        item.text = transcript
        self.session.user_transcript(transcript, final=True, item_id=item.vrt_id, turn=item.turn)

    def _on_user_failed(self, link: _Link, event: dict[str, Any]) -> None:
        error = event.get("error") or {}
        code = error.get("code") or error.get("type") or "unknown"
        code = shown(str(code), 80)
        message = shown(str(error.get("message") or "no message"))
        log.warning("the user's speech could not be transcribed (%s): %s", code, message)
        item = self._user_item(link, event.get("item_id"))
        if item is not None and item.text:
            # Close the partials already shown: the client holds no dangling partial.
            self.session.user_transcript(item.text, final=True, item_id=item.vrt_id, turn=item.turn)
        self.session.error(
            f"the user's speech could not be transcribed ({code}): {message}", recoverable=True
        )

    def _on_response_created(self, link: _Link, event: dict[str, Any]) -> None:
        response = event["response"]
        response_id = str(response["id"])
        metadata = response.get("metadata") or {}
        tag = metadata.get("vrt_request") if isinstance(metadata, dict) else None
        requested = link.requested
        ours = requested is not None and tag == str(requested.number)
        if ours:
            link.echoes = True
        elif requested is not None and tag is None and not link.echoes:
            # A provider that does not echo metadata: ours, unless it is about to
            # answer speech on its own (server VAD), which it does untagged.
            ours = self._listening is None
        turn: Turn | None
        if requested is not None and ours:
            link.requested = None
            turn = requested.turn
            if requested.cancelled or (turn is not None and not turn.active):
                turn = None  # asked for by a turn that is over: stop it at once
            elif turn is None:
                turn = self.session.begin_turn("thinking")
        else:
            # Created by the provider itself: server VAD at the end of speech answers
            # for the listening turn; otherwise it speaks for a turn of ours still
            # waiting for its own response (which follows), or for a new turn.
            listening = self._listening
            turn = listening if listening is not None and listening.active else None
            if turn is None:
                turn = self._waiting_turn(link)
            if turn is None:
                turn = self.session.begin_turn("thinking")
        self._listening = None
        record = _Response(response_id, turn)
        link.active = record
        link.responses[response_id] = record
        if turn is None:
            self._cancel(link, record)
        else:
            turn.state("thinking")

    def _on_response_done(self, link: _Link, event: dict[str, Any]) -> None:
        response = event["response"]
        response_id = str(response["id"])
        self._count_usage(response.get("usage"))
        if link.active is not None and link.active.id == response_id:
            link.active = None
        record = link.responses.get(response_id)
        if record is not None:
            record.done = True
            # Argument events end with the response; issued calls live on in link.calls.
            for call_id in [k for k, c in link.by_provider_call.items() if c.response is record]:
                del link.by_provider_call[call_id]
            record.status = str(response.get("status") or "")
            details = response.get("status_details")
            details = details if isinstance(details, dict) else {}
            turn = record.turn
            live = turn is not None and turn.active
            if record.status == "failed":
                error = details.get("error")
                error = error if isinstance(error, dict) else {}
                code = error.get("code")
                reason = code or error.get("type") or "unknown"
                if code in PERMANENT_CODES:
                    message = shown(str(error.get("message") or ""))
                    link.fatal = f"the model response failed ({reason}): {message}".rstrip(": ")
                    return
                if live:
                    self.session.error(f"the model response failed ({reason})", recoverable=True)
            elif record.status == "incomplete" and live:
                reason = details.get("reason") or "unknown"
                self.session.error(f"the model's answer was cut short ({reason})", recoverable=True)
            if record.status == "cancelled" or not live:
                # Nobody hears the rest: the provider's items keep only what was sent,
                # unless the client says (or said) how much was heard.
                for audio in record.audio.values():
                    self._cut(link, audio, audio.heard)
            if record.had_calls and record.status != "cancelled":
                self._follow_up(link, record)
            else:
                if turn is not None and self._waiting_turn(link) != turn:
                    turn.end()
                if not record.open_calls:
                    link.responses.pop(response_id, None)
        self._flush_queue(link)
        self._maybe_recycle(link)

    def _count_usage(self, usage: Any) -> None:
        if not isinstance(usage, dict):
            return
        inputs = usage.get("input_token_details")
        inputs = inputs if isinstance(inputs, dict) else {}
        outputs = usage.get("output_token_details")
        outputs = outputs if isinstance(outputs, dict) else {}
        self.usage.record(
            log,
            self.session.session_id,
            input_tokens=count(usage.get("input_tokens")),
            output_tokens=count(usage.get("output_tokens")),
            cached_input_tokens=count(inputs.get("cached_tokens")),
            input_audio_tokens=count(inputs.get("audio_tokens")),
            output_audio_tokens=count(outputs.get("audio_tokens")),
        )

    def _waiting_turn(self, link: _Link) -> Turn | None:
        """The active turn whose own response is requested or queued, if any."""
        for request in (link.requested, link.queued):
            if request is not None and not request.cancelled:
                turn = request.turn
                if turn is not None and turn.active:
                    return turn
        return None

    def _response(self, link: _Link, event: dict[str, Any]) -> _Response | None:
        record = link.responses.get(str(event.get("response_id")))
        if record is None or record.turn is None or not record.turn.active:
            return None  # a response we cancel, or one whose turn is over: dropped
        return record

    def _on_item_added(self, link: _Link, event: dict[str, Any]) -> None:
        item = event["item"]
        if item.get("type") != "function_call":
            return
        record = link.responses.get(str(event.get("response_id")))
        if record is None:
            return
        record.had_calls = True
        call_id = str(item.get("call_id") or item.get("id"))
        function = str(item.get("name") or "")
        name = self._names.vrt(function)
        handle = None
        turn = record.turn
        if turn is not None and turn.active and name is not None:
            turn.state("acting")
            record.delivered = True
            # The server gives the client a new public callId and keeps ours (§6.3).
            handle = turn.tool_call(name, provider_id=call_id)
        link.by_provider_call[call_id] = _Call(call_id, name or function, record, handle)

    def _on_arguments_delta(self, link: _Link, event: dict[str, Any]) -> None:
        call = link.by_provider_call.get(str(event.get("call_id")))
        if call is not None and call.handle is not None and not call.finished:
            call.handle.delta(str(event.get("delta") or ""))

    def _on_arguments_done(self, link: _Link, event: dict[str, Any]) -> None:
        call = link.by_provider_call.get(str(event.get("call_id")))
        if call is None or call.finished:
            return
        call.finished = True
        record = call.response
        if record.cancel_sent or record.turn is None or not record.turn.active:
            # The docs: done is "also emitted when a Response is interrupted, incomplete,
            # or cancelled". Arguments of a cancelled response are never issued.
            if call.handle is not None:
                call.handle.fail("the response was cancelled")
            self._call_output(link, call, _NOT_RUN)
            return
        try:
            arguments = json.loads(str(event.get("arguments") or "{}"))
        except ValueError:
            if call.handle is not None:
                call.handle.fail("the model produced arguments that are not JSON")
            self._call_output(link, call, {"error": "the arguments were not valid JSON"})
            return
        if call.handle is None:
            # The client does not host this tool: the model hears why, and goes on.
            self._call_output(link, call, {"error": f"no tool named {call.name!r} is available"})
            return
        future = call.handle.issue(arguments)
        if future.done():  # not issued (the server's bound on pending calls, §11)
            settled = future.result()
            self._call_output(link, call, {"error": settled.message or "the call was not made"})
            return
        link.calls[call.handle.call_id] = call
        record.open_calls.add(call.handle.call_id)
        self._conversation.add(
            ToolCalled(
                call_id=call.handle.call_id,
                name=call.name,
                arguments=arguments,
                turn_id=record.turn.id,
                provider_id=call.provider_id,
            )
        )

    def _on_item_done(self, link: _Link, event: dict[str, Any]) -> None:
        item = event["item"]
        if item.get("type") != "function_call" or item.get("status") != "incomplete":
            return
        call = link.by_provider_call.get(str(item.get("call_id")))
        if call is not None and not call.finished:
            call.finished = True
            if call.handle is not None:
                call.handle.fail("the model stopped before completing the arguments")
            self._call_output(link, call, _NOT_RUN)

    def _audio(self, link: _Link, record: _Response, event: dict[str, Any]) -> _Audio:
        """The content part ``event`` is about, tracked whether or not its turn is live
        (what the provider generated for a turn that is over is cut from its items)."""
        key = (str(event.get("item_id")), int(event.get("content_index") or 0))
        audio = record.audio.get(key)
        if audio is None:
            audio = record.audio[key] = _Audio(key[0], key[1], new_id("i_"))
            if record.turn is not None and record.turn.active:
                # Its words' place in the log is here, before speech that interrupts it.
                audio.turn_id = record.turn.id
                audio.said = self._conversation.add()
        return audio

    def _announce(self, link: _Link, turn: Turn, audio: _Audio) -> AudioItem | None:
        """The vRT audio item of ``audio``, announced with its first audio."""
        if audio.item is None:
            turn.state("speaking")
            audio.item = turn.audio(audio.vrt_id)
            if audio.item is not None:
                link.items[audio.vrt_id] = audio
                while len(link.items) > _REMEMBERED_ITEMS:
                    link.items.popitem(last=False)
        return audio.item

    def _on_audio_delta(self, link: _Link, event: dict[str, Any]) -> None:
        record = link.responses.get(str(event.get("response_id")))
        if record is None:
            return
        audio = self._audio(link, record, event)
        payload = base64.b64decode(event["delta"])
        audio.received += len(payload)
        turn = record.turn
        if turn is None or not turn.active:
            return  # a response we cancel, or one whose turn is over: dropped
        item = self._announce(link, turn, audio)
        record.delivered = True
        # Written as it arrives: one output frame per delta, no added buffering. Only
        # what was actually sent counts towards the truncation cap (§8.4).
        if item is not None and item.write(payload):
            audio.delivered += len(payload)

    def _on_transcript_delta(self, link: _Link, event: dict[str, Any]) -> None:
        record = self._response(link, event)
        if record is None:
            return
        audio = self._audio(link, record, event)
        audio.transcript += str(event.get("delta") or "")
        audio.transcript_at = audio.received
        record.delivered = True
        # A partial transcript is replaced by the next one of the same item (schema).
        # Its item is the one its audio will be announced as (often the text comes
        # first): no audio.start before there is audio to play.
        assert record.turn is not None
        record.turn.state("speaking")
        record.turn.transcript(audio.transcript, final=False, item_id=audio.vrt_id)

    def _on_transcript_done(self, link: _Link, event: dict[str, Any]) -> None:
        record = self._response(link, event)
        if record is None:
            return
        audio = self._audio(link, record, event)
        transcript = event.get("transcript")
        audio.transcript = transcript if isinstance(transcript, str) else audio.transcript
        assert record.turn is not None
        record.delivered = True
        record.turn.transcript(audio.transcript, final=True, item_id=audio.vrt_id)
        self._log_audio(audio)

    def _on_text_delta(self, link: _Link, event: dict[str, Any]) -> None:
        record = self._response(link, event)
        if record is not None and record.turn is not None:
            record.delivered = True
            record.turn.text(str(event.get("delta") or ""))

    # -- responses: one at a time --

    def _request(self, link: _Link, turn: Turn | None) -> None:
        """Ask for a response for ``turn``: now if none is active or requested, else once
        the current one is done (a newer request replaces an older queued one: one
        response answers everything added meanwhile)."""
        self._numbers += 1
        request = _Request(self._numbers, turn)
        if link.active is None and link.requested is None:
            self._send_create(link, request)
        else:
            link.queued = request

    def _send_create(self, link: _Link, request: _Request) -> None:
        link.requested = request
        link.send(
            {
                "type": "response.create",
                "event_id": request.event_id,
                # Echoed in response.created: tells our response from one the provider
                # created itself (server VAD) at the same moment.
                "response": {"metadata": {"vrt_request": str(request.number)}},
            }
        )

    def _flush_queue(self, link: _Link) -> None:
        queued = link.queued
        if queued is None or link.active is not None or link.requested is not None:
            return
        link.queued = None
        if queued.turn is not None and not queued.turn.active:
            return
        self._send_create(link, queued)

    def _cancel(self, link: _Link, record: _Response) -> None:
        if not record.cancel_sent and not record.done:
            record.cancel_sent = True
            self._numbers += 1
            link.send(
                {
                    "type": "response.cancel",
                    "event_id": f"vrt_cancel_{self._numbers}",
                    "response_id": record.id,
                }
            )

    def _cancel_stale(self, link: _Link) -> None:
        """Stop whatever the provider does for a turn that is over (interrupted by the
        client, by text, by speech, §6.2, §6.3). The seam's turns are the truth."""
        active = link.active
        if active is not None and (active.turn is None or not active.turn.active):
            self._cancel(link, active)
        requested = link.requested
        if requested is not None and requested.turn is not None and not requested.turn.active:
            requested.cancelled = True  # cancelled as soon as response.created names it
        queued = link.queued
        if queued is not None and queued.turn is not None and not queued.turn.active:
            link.queued = None

    # -- tool calls --

    def _call_output(self, link: _Link, call: _Call, output: Any) -> None:
        self._output(link, call.provider_id, output)

    def _output(self, link: _Link, provider_id: str, output: Any) -> None:
        link.send(
            {
                "type": "conversation.item.create",
                "item": {
                    "type": "function_call_output",
                    "call_id": provider_id,  # the provider's id, never the public one
                    "output": output if isinstance(output, str) else json_text(output),
                },
            }
        )

    def _follow_up(self, link: _Link, record: _Response) -> None:
        """Once the response is done and every call has its output: one response.create
        so that the model answers with the results, in the same turn. A response that
        did not complete (failed, cut off) gets no follow-up: its turn ends."""
        if not record.done or record.open_calls or record.followed_up:
            return
        record.followed_up = True
        link.responses.pop(record.id, None)
        turn = record.turn
        if turn is None or not turn.active:
            return
        if record.status == "completed":
            turn.state("thinking")
            self._request(link, turn)
        elif self._waiting_turn(link) != turn:
            turn.end()

    def _on_tool_settled(self, link: _Link, event: ToolSettled) -> None:
        call = link.calls.pop(event.call_id, None)
        if call is None:
            return  # a call of an earlier provider session that was not carried over
        record = call.response
        record.open_calls.discard(event.call_id)
        self._call_output(link, call, _result(event))
        if event.code == "INTERRUPTED":
            # Never fed back as if current: an explicit record that it was cut off (the
            # tool may have run, §7.2) and no response.create.
            if record.done and not record.open_calls:
                link.responses.pop(record.id, None)
            return
        self._follow_up(link, record)

    def _settle_carried(self, link: _Link, event: ToolSettled, provider_id: str) -> None:
        """The result of a call an earlier provider session made: its output goes to
        this one, which answers once every carried call has its result."""
        self._output(link, provider_id, _result(event))
        turn = self._carried_turn
        if self._carried or turn is None:
            return
        self._carried_turn = None
        if turn.active and event.code != "INTERRUPTED":
            turn.state("thinking")
            self._request(link, turn)

    # -- context --

    def _send_context(self, link: _Link) -> None:
        """The context as a delimited data item replacing the previous one (§5.5, §10)."""
        self._numbers += 1
        if link.context_item is not None:
            event_id = f"vrt_delete_{self._numbers}"
            link.forget_after(event_id)  # the provider may have truncated it away
            link.send(
                {
                    "type": "conversation.item.delete",
                    "event_id": event_id,
                    "item_id": link.context_item,
                }
            )
            link.context_item = None
        if self._context is None:
            return  # cleared: the old item is gone, no new one
        item_id = f"vrt_ctx_{self._numbers}"
        text = context_message(self._context)
        link.send(
            {
                "type": "conversation.item.create",
                "item": {
                    "id": item_id,
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": text}],
                },
            }
        )
        link.context_item = item_id

    # -- the client's events --

    def _send_audio(self, link: _Link, payload: bytes) -> None:
        link.send(
            {
                "type": "input_audio_buffer.append",
                "audio": base64.b64encode(payload).decode("ascii"),
            }
        )

    def _handle(self, link: _Link, event: AgentInput) -> None:
        session = self.session
        if isinstance(event, UserTextReceived):
            # A response in flight was interrupted by the server already (§6.3).
            self._cancel_stale(link)
            turn = session.begin_turn("thinking")
            self._conversation.add(UserSaid(text=event.text))
            self._input_logged(turn)
            link.send(
                {
                    "type": "conversation.item.create",
                    "item": {
                        "type": "message",
                        "role": "user",
                        "content": [{"type": "input_text", "text": event.text}],
                    },
                }
            )
            self._request(link, turn)
        elif isinstance(event, ResponseInterrupted):
            self._cancel_stale(link)
        elif isinstance(event, ToolSettled):
            self._conversation.add(settled(event))
            provider_id = self._carried.pop(event.call_id, None)
            if provider_id is None:
                self._on_tool_settled(link, event)
            else:
                self._settle_carried(link, event, provider_id)
        elif isinstance(event, ContextChanged):
            self._context = event.context
            self._send_context(link)
        elif isinstance(event, PlaybackReported):
            self._truncate(link, event)
        self._maybe_recycle(link)

    def _truncate(self, link: _Link, event: PlaybackReported) -> None:
        audio = link.items.get(event.item_id)
        if audio is None:
            return  # unknown, or an item of an earlier provider session
        delivered = _ms(audio.delivered, self.session.output_format)
        heard = max(0, min(int(event.played_ms), delivered))  # capped at what was sent
        audio.heard = heard if audio.heard is None else min(audio.heard, heard)
        self._cut(link, audio, audio.heard)

    def _cut(self, link: _Link, audio: _Audio, heard: int | None) -> None:
        """Cut the provider's item to ``heard`` ms (None: what was sent), and its words
        in the conversation log likewise."""
        self._cut_item(link, audio, heard)
        self._log_audio(audio)

    def _cut_item(self, link: _Link, audio: _Audio, heard: int | None) -> None:
        """Cut the provider's item to ``heard`` ms (None: what was sent): truncate it
        if anything is left after that point, delete it if nothing of it was heard."""
        if audio.deleted:
            return
        fmt = self.session.output_format
        end = _ms(audio.delivered, fmt) if heard is None else heard
        self._numbers += 1
        if end <= 0:
            # Nothing of it was heard. A truncate of an item with no audio yet is
            # refused ("Only model output audio messages can be truncated"), and one
            # at 0 would keep nothing anyway: the item leaves the conversation.
            audio.deleted = True
            event_id = f"vrt_delete_{self._numbers}"
            link.forget_after(event_id)  # the item may be gone already
            link.send(
                {
                    "type": "conversation.item.delete",
                    "event_id": event_id,
                    "item_id": audio.provider_item,
                }
            )
            return
        if end >= _ms(audio.received, fmt):
            return  # heard in full: a truncate at its end is refused ("already shorter")
        if audio.truncated_at is not None and end >= audio.truncated_at:
            return  # already cut at or before this point
        audio.truncated_at = end
        event_id = f"vrt_truncate_{self._numbers}"
        link.forget_after(event_id)  # the provider may have cut it itself meanwhile
        link.send(
            {
                "type": "conversation.item.truncate",
                "event_id": event_id,
                "item_id": audio.provider_item,
                "content_index": audio.content_index,
                "audio_end_ms": end,
            }
        )
