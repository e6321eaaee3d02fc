"""``--agent gemini-live``: speech to speech through Google's Gemini Live API.

One provider WebSocket (``BidiGenerateContent``) per vRT session, speaking the protocol
of "Live API - WebSockets API reference" (https://ai.google.dev/api/live). See
``docs/agent-gemini-live.md`` for the settings, the full mapping, the provider messages
handled and ignored, and the failure behaviour; its "Sources" table lists the reports
cited here as F1-F9 (what the service does in long sessions) and GENAI, LK-G, PC-G.

What maps to what (the agent seam of ``docs/agents.md``; no special case in the server):

* the session starts with ``setup`` (model, audio output with a voice, the
  instructions with the context rule, the client's tools as ``functionDeclarations``
  with their JSON Schemas, input and output transcription, session resumption, a
  sliding context window) and runs once ``setupComplete`` arrives; nothing else is sent
  before ("Clients should wait for a BidiGenerateContentSetupComplete message").
* formats: output is pcm16 at 24 kHz, the service's only output. Input is pcm16 at
  16 kHz (its native rate), 24, 8 or 48 kHz, sent unchanged with the rate in the MIME
  type (``audio/pcm;rate=24000``: "the Live API will resample if needed so any sample
  rate can be sent"), or G.711 µ-law, decoded to pcm16 at 8 kHz (``vrt.audio``) and
  sent as ``rate=8000``. No resampling here.
* tool names are mapped to names the service takes (a letter or ``_`` first,
  ``function_names.py``) and back; ``toolCall.functionCalls`` are issued to the client
  (``turn.tool_call``, ``issue``) and each result goes back as a ``toolResponse`` with
  the call's id (``{"output": ...}`` or ``{"error": {...}}``).
* the service's own activity detection hears the user; speech over the model is
  ``serverContent.interrupted``, which is ``session.user_started_speaking()`` (a
  ``listening`` turn, the response in flight interrupted, §6.2). Calls the service
  cancels with it (``toolCallCancellation``) get no response. ``interrupted`` after a
  generation's ``turnComplete`` (the client still plays it, F5) is the same listening
  turn, and drops nothing.
* model output: ``modelTurn`` audio parts are output frames, written as they arrive,
  ``outputTranscription`` chunks are agent transcript partials (final at
  ``turnComplete``), ``inputTranscription`` chunks user transcript partials (final at
  the model's next ``turnComplete``); ``turnComplete`` ends the turn unless it waits
  for tool results.
* user text is a ``clientContent`` turn with ``turnComplete`` (it interrupts the
  model's generation, which the service then confirms with ``interrupted``), or for a
  ``gemini-3*`` model ``realtimeInput.text`` (F6, PC-G); the application context is a
  ``clientContent`` data turn without ``turnComplete``, sent only between generations
  (a message would interrupt one), never in the instructions, and sent again when the
  sliding window cut it (``promptTokenCount`` dropped).
* ``turnCompleteReason`` (e.g. ``MALFORMED_FUNCTION_CALL``) is a recoverable
  ``AGENT_ERROR``.
* an ``interrupt`` from the client: the Live API has no cancel message, so the rest of
  the generation in flight is dropped here until its ``turnComplete``; the provider's
  context keeps what it generated. A ``playback`` report has nothing to cut: the
  service has no truncate message (it assumes real-time playback and cuts its context
  itself when its activity detection interrupts the model).
* failures come as close codes. Before ``setupComplete`` 1007 (an invalid argument, a
  wrong key) and 1008 (a model it does not serve) end the vRT session with a
  non-recoverable ``AGENT_ERROR``; after it every close is a failed link (the service
  aborts established sessions with 1008, F3, F4). A ``goAway`` is answered at the next
  turn boundary within its ``timeLeft``: the socket is closed first (the service
  refuses a resume while it is open, F9), then a new one resumes with the latest
  handle; any close after a ``goAway`` is expected (1008, 1011: F1, F2). Without a
  boundary the adapter leaves ``LEAVE_MARGIN`` (2 s) before ``timeLeft`` runs out, the
  turn still running cut as by a dropped connection. A dropped or
  failed connection reconnects the same way, bounded as in the Realtime adapter
  (``max_failed_links``, ``give_up_after``), with one recoverable ``AGENT_ERROR`` when
  a turn was cut. Without a usable handle the new provider session is given the
  conversation so far (``history.ConversationLog``, ``replay.gemini_turns``).
* ``usageMetadata`` is summed in ``agent.usage`` and logged at DEBUG.

The API key comes only from ``GOOGLE_API_KEY`` or ``GEMINI_API_KEY`` (in that order,
as Google's SDK reads them) and goes in the ``x-goog-api-key`` header, never in the URL;
it is never logged.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import os
import re
from collections.abc import Sequence
from typing import Any, ClassVar, Final

import orjson
import websockets
from websockets.asyncio.client import ClientConnection

from ..audio import pcmu_to_pcm16
from ..protocol.ids import new_id
from ..protocol.messages import UNSET, Format
from .base import (
    AgentFactory,
    AgentInput,
    AgentSession,
    AgentSetupError,
    ContextChanged,
    ResponseInterrupted,
    ToolSettled,
    Turn,
    UserTextReceived,
)
from .context_data import CONTEXT_RULE, context_message
from .function_names import GEMINI, FunctionNames
from .gemini_config import (
    DEFAULT_BASE_URL,
    DEFAULT_MODEL,
    INPUT_FORMATS,
    OUTPUT_FORMATS,
    GeminiConfig,
    api_key_from,
    config_from,
)
from .gemini_link import Generation, Link, PendingCall, Speech
from .history import AgentSaid, ConversationLog, HistoryEntry, ToolCalled, UserSaid, settled
from .provider_socket import ProviderAgent, keyed_factory, register_secret
from .replay import gemini_turns
from .usage import TokenUsage, count

__all__ = [
    "DEFAULT_BASE_URL",
    "DEFAULT_MODEL",
    "INPUT_FORMATS",
    "OUTPUT_FORMATS",
    "GeminiConfig",
    "GeminiLiveAgent",
    "api_key_from",
    "config_from",
    "setup",
]

log = logging.getLogger(__name__)
#: The ``websockets`` library logs handshake headers (the key's included) at DEBUG on
#: the logger it is given: it gets this one, which redacts the key.
_WIRE_LOG: Final = logging.getLogger(f"{__name__}.wire")

#: Close codes of a request the service refuses, before ``setupComplete`` (a wrong key,
#: a model it does not serve): no retry can help. After it they are failed links.
_REFUSED: Final = (1007, 1008)
#: ``turnCompleteReason`` values that are no failure (GENAI TurnCompleteReason).
_NORMAL_END: Final = frozenset({"TURN_COMPLETE_REASON_UNSPECIFIED", "NEED_MORE_INPUT"})
#: How long before a goAway's ``timeLeft`` runs out the adapter leaves the service's
#: session when no turn boundary came (the service cuts it at ``timeLeft``: F1, F2).
LEAVE_MARGIN: Final = 2.0
_DURATION: Final = re.compile(r"^\s*(\d+(?:\.\d*)?)s\s*$")
_AUDIO_MIME: Final = re.compile(r"^audio/pcm(?:;\s*rate=(\d+))?", re.IGNORECASE)
_INTERRUPTED_NOTE: Final = (
    "The user interrupted before this result arrived; the tool may or may not have "
    "taken effect. Do not assume it succeeded."
)


def setup(options: dict[str, str]) -> AgentFactory:
    """``vrt serve --agent gemini-live``: read the key and the settings, or say in one
    line what to set (AgentSetupError)."""
    api_key = api_key_from(os.environ)
    if api_key is None:
        raise AgentSetupError(
            "set GEMINI_API_KEY (or GOOGLE_API_KEY) in the environment "
            "(the key is read only from there)"
        )
    config = config_from(options, os.environ)
    return keyed_factory(GeminiLiveAgent, config, api_key, log, _WIRE_LOG)


# --- the agent ------------------------------------------------------------------------


class GeminiLiveAgent(ProviderAgent[Link]):
    """One vRT session's agent: one provider session at a time, resumed after a
    reconnect when the service gave a handle."""

    key_hint: ClassVar[str] = "check GEMINI_API_KEY (or GOOGLE_API_KEY)"
    config: GeminiConfig
    _log = log
    _wire_log = _WIRE_LOG

    input_formats: tuple[Format, ...] = INPUT_FORMATS
    output_formats: tuple[Format, ...] = OUTPUT_FORMATS

    def __init__(self, config: GeminiConfig, api_key: str) -> None:
        super().__init__()
        self.config = config
        self._api_key = api_key
        register_secret(api_key, log, _WIRE_LOG)
        self._context: Any = None
        self._context_sent = False  # the current context is in the provider's history
        #: It went after the latest handle: a session resumed with that handle lacks it.
        self._context_after_handle = False
        self._names = FunctionNames((), GEMINI)
        #: The latest handle that resumes the provider's conversation.
        self._resume: str | None = None
        self._warned_rate = False
        #: Tokens the model used in this session (see ``usage.py``).
        self.usage = TokenUsage()
        #: The conversation so far, replayed to a provider session that starts
        #: without a handle (``restore`` gives its beginning).
        self._conversation = ConversationLog()
        #: Gemini 3.x takes user text as realtimeInput.text and runs no inference on a
        #: clientContent turn alone (PC-G ``_send_user_text``, l.1671; F6).
        self._realtime_text = "gemini-3" in config.model

    def __repr__(self) -> str:
        return f"GeminiLiveAgent(model={self.config.model!r}, url={self.config.base_url!r})"

    # -- lifecycle --

    def restore(self, history: Sequence[HistoryEntry]) -> None:
        """The conversation so far (a session moved to this process): sent as text
        turns that ask for no answer once the first provider session is set up, before
        the context (``replay.gemini_turns``; the Live API takes no other history)."""
        self._conversation = ConversationLog(history)

    def _prepare(self, session: AgentSession) -> None:
        self._context = session.context
        self._names = FunctionNames(session.tools, GEMINI)

    def _headers(self) -> dict[str, str]:
        # The key in a header, not in the URL (?key=): URLs end up in logs. Google's SDK
        # sends it the same way (x-goog-api-key).
        return {"x-goog-api-key": self._api_key}

    def _start(self, ws: ClientConnection) -> Link:
        link = Link(ws, self._resume)
        link.send({"setup": self._setup_message(self._resume)})
        link.setup_timer = asyncio.get_running_loop().call_later(
            self.config.connect_timeout, self._no_setup_complete, link
        )
        log.info(
            "model session open (%s%s)",
            self.config.model,
            ", resuming" if self._resume is not None else "",
        )
        return link

    def _no_setup_complete(self, link: Link) -> None:
        if not link.ready and link.fatal is None:
            link.fatal = (
                "the model service did not confirm the session (no setupComplete within "
                f"{self.config.connect_timeout:g} s)"
            )
            link.abort()

    def _setup_message(self, handle: str | None) -> dict[str, Any]:
        """``BidiGenerateContentSetup`` (ai.google.dev/api/live)."""
        session = self.session
        declarations = []
        for tool in session.tools.values():
            declaration: dict[str, Any] = {"name": self._names.provider(tool.name)}
            if tool.description is not UNSET:
                declaration["description"] = tool.description
            if isinstance(tool.parameters, dict):
                # JSON Schema as it is ("mutually exclusive with parameters", which takes
                # an OpenAPI subset that would refuse some JSON Schema keywords).
                declaration["parametersJsonSchema"] = tool.parameters
            declarations.append(declaration)
        instructions = f"{self.config.instructions}\n\n{CONTEXT_RULE}".strip()
        message: dict[str, Any] = {
            "model": self.config.model_name,
            "generationConfig": {
                "responseModalities": ["AUDIO"],
                "speechConfig": {
                    "voiceConfig": {"prebuiltVoiceConfig": {"voiceName": self.config.voice}}
                },
            },
            "systemInstruction": {"parts": [{"text": instructions}]},
            # Resumable from the start: a reconnect keeps the conversation.
            "sessionResumption": {"handle": handle} if handle is not None else {},
            # Audio sessions are otherwise ended when the context fills up.
            "contextWindowCompression": {"slidingWindow": {}},
        }
        if declarations:
            message["tools"] = [{"functionDeclarations": declarations}]
        if self.config.transcripts:
            message["inputAudioTranscription"] = {}
            message["outputAudioTranscription"] = {}
        return message

    def _classify_close(self, link: Link) -> None:
        code, reason = link.ws.close_code, link.ws.close_reason or ""
        if link.fatal is not None or link.expected or code not in _REFUSED:
            return  # after a goAway any close is expected (1008: F1, 1011: F2)
        if link.ready:
            # An established session the service aborted ("The operation was aborted.",
            # during tool calls or at a fixed age: F3, F4; LK-G and PC-G retry it): a
            # failed link, retried within max_failed_links.
            log.warning("the model service ended the session (close %s: %s)", code, reason)
            return
        if link.resumed_with is not None:
            # The handle no longer resumes anything: a new conversation, at once.
            link.retry_now = True
            self._resume = None
            return
        hint = ""
        if "API key" in reason:
            hint = ": check GEMINI_API_KEY (or GOOGLE_API_KEY)"
        elif "not found" in reason or "not supported" in reason:
            hint = ": check the model option"
        link.fatal = f"the model service refused the session (close {code}: {reason}){hint}"

    def _lost(self, link: Link) -> None:
        """The provider connection ended: close the turn in flight (its generation is
        lost), say so when the client lost something, reconnect (the caller's loop)
        with the latest handle, else with the conversation replayed."""
        session = self.session
        turn = session.turn
        cut = session.interrupt()
        if not cut and turn is not None:
            turn.end()  # a listening turn: nothing was said yet, but it is over
        if cut:
            session.error("the connection to the model ended; reconnecting", recoverable=True)
        else:
            log.info(
                "the model connection ended between turns; %s",
                "resuming the conversation"
                if self._resume is not None
                else "replaying the conversation",
            )

    # -- the provider's messages --

    async def _read(self, link: Link) -> None:
        with contextlib.suppress(websockets.ConnectionClosed):
            async for raw in link.ws:
                try:
                    message = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    log.warning("the model sent a frame that is not JSON; ignored")
                    continue
                if not isinstance(message, dict):
                    continue
                try:
                    self._on_message(link, message)
                except (KeyError, TypeError, ValueError, AttributeError):
                    log.exception("cannot handle a model message (%s)", ", ".join(message))
                if link.fatal is not None:
                    return
                if self._quiet(link):
                    # The goAway's turn boundary: this socket is closed before the next
                    # one resumes (the service refuses a resume while it is open, F9).
                    log.info("leaving the model session as it asked; resuming")
                    return

    def _quiet(self, link: Link) -> bool:
        """After a goAway, a turn boundary: nothing generating, said or awaited, and a
        handle that has all of it (GENAI: not resumable "executing function calls or
        just generating")."""
        return (
            link.going_away
            and link.handle_fresh
            and link.generation is None
            and not link.drop
            and not link.calls
            and link.speech is None
            and self.session.turn is None
        )

    def _on_message(self, link: Link, message: dict[str, Any]) -> None:
        # "Server messages may have a usageMetadata field but will otherwise include
        # exactly one of the other fields."
        usage = message.get("usageMetadata")
        content = message.get("serverContent")
        if isinstance(usage, dict):
            self._count_usage(usage)
            if isinstance(content, dict) and content.get("turnComplete"):
                # The turn's figures ride on its turnComplete (PC-G warns when they do
                # not): one context size per turn to compare.
                self._check_window(link, usage)
        if "setupComplete" in message:
            self._on_setup_complete(link)
        elif isinstance(content, dict):
            self._on_server_content(link, content)
        elif isinstance(tool_call := message.get("toolCall"), dict):
            self._on_tool_call(link, tool_call)
        elif isinstance(cancellation := message.get("toolCallCancellation"), dict):
            link.cancelled.update(str(i) for i in cancellation.get("ids") or ())
        elif isinstance(go_away := message.get("goAway"), dict):
            # The service will end the connection ("terminated as ABORTED" after
            # timeLeft, GENAI): we leave first, at the next turn boundary (LK-G and
            # F9 reconnect on goAway), and whatever close comes is no failure.
            link.expected = True
            link.going_away = True
            time_left = go_away.get("timeLeft")
            log.info("the model service will disconnect (timeLeft %s)", time_left)
            self._leave_by(link, _seconds(time_left))
        elif isinstance(update := message.get("sessionResumptionUpdate"), dict):
            handle = update.get("newHandle")
            if update.get("resumable") and isinstance(handle, str) and handle:
                self._resume = handle
                link.handle_fresh = True
                self._context_after_handle = False

    def _leave_by(self, link: Link, time_left: float | None) -> None:
        """Leave before the service cuts the connection (F1, F2), even without a turn
        boundary: ``LEAVE_MARGIN`` before ``timeLeft`` runs out (at half of a shorter
        one). A turn still running then is cut as by a dropped link; the next provider
        session resumes with the latest handle (or replays the conversation)."""
        if time_left is None or link.leave_timer is not None:
            return
        delay = max(time_left - LEAVE_MARGIN, time_left / 2)
        link.leave_timer = asyncio.get_running_loop().call_later(delay, self._leave_now, link)

    def _leave_now(self, link: Link) -> None:
        if link.leaving is not None or link.fatal is not None:
            return
        log.warning("no turn boundary came within the model's goAway; leaving its session now")
        self._link = None  # the client's events wait for the next session (audio held)
        # The socket is closed (not just dropped) before the next one resumes: the
        # service refuses a resume while it is open (F9). The reader then ends.
        link.leaving = asyncio.get_running_loop().create_task(link.close())

    def _on_setup_complete(self, link: Link) -> None:
        link.ready = True
        if link.setup_timer is not None:
            link.setup_timer.cancel()
            link.setup_timer = None
        if link.resumed_with is None:
            # A new conversation: it gets the conversation so far (restored, or of
            # the provider sessions before), which asks for no answer, then the context.
            self._context_sent = False
            turns = gemini_turns(self._conversation.entries())
            if turns:
                link.send({"clientContent": {"turns": turns, "turnComplete": False}})
        if self._context is not None and (not self._context_sent or self._context_after_handle):
            # (A handle resumes the conversation as it was when the service gave it:
            # a context sent later is sent again, as LK-G sends what came after it.)
            self._send_context(link)
        # Nothing but the setup goes before setupComplete ("Clients should wait for a
        # BidiGenerateContentSetupComplete message before sending any additional
        # messages"): from now on the client's events go to this link.
        self._link = link
        self._drain_pending(link)

    def _on_server_content(self, link: Link, content: dict[str, Any]) -> None:
        if content.get("interrupted"):
            self._on_interrupted(link)
        model_turn = content.get("modelTurn")
        for part in (model_turn.get("parts") or ()) if isinstance(model_turn, dict) else ():
            if not isinstance(part, dict):
                continue
            inline = part.get("inlineData")
            if isinstance(inline, dict):
                self._on_audio(link, inline)
            text = part.get("text")
            if isinstance(text, str) and text and not part.get("thought"):
                generation = self._generation(link)
                if generation is not None and generation.turn.text(text):
                    self._conversation.add(AgentSaid(turn_id=generation.turn.id, text=text))
        output = content.get("outputTranscription")
        if isinstance(output, dict) and isinstance(output.get("text"), str):
            self._on_output_transcript(link, output["text"])
        heard = content.get("inputTranscription")
        if isinstance(heard, dict) and isinstance(heard.get("text"), str):
            self._on_input_transcript(link, heard["text"])
        if content.get("turnComplete"):
            reason = content.get("turnCompleteReason")
            if isinstance(reason, str) and reason not in _NORMAL_END:
                # The turn ended for a reason (GENAI TurnCompleteReason): the user
                # should know the answer is missing; the session goes on.
                self.session.error(f"the model ended its turn early ({reason})")
            self._on_turn_complete(link)

    def _generation(self, link: Link) -> Generation | None:
        """The generation model output belongs to: the one in flight, or a new one for
        the turn in progress (or a new turn); None while output is dropped."""
        if link.drop:
            return None
        generation = link.generation
        if generation is None:
            session = self.session
            turn = session.turn or session.begin_turn("thinking")
            generation = link.generation = Generation(turn, new_id("i_"))
            speech = link.speech
            if speech is not None and speech.turn is None:
                speech.turn = turn
        return generation if generation.turn.active else None

    def _on_audio(self, link: Link, inline: dict[str, Any]) -> None:
        match = _AUDIO_MIME.match(str(inline.get("mimeType") or ""))
        if match is None:
            return
        if int(match.group(1) or 24000) != 24000:
            if not self._warned_rate:
                self._warned_rate = True
                log.warning("the model sent audio that is not 24 kHz (%s); dropped", inline)
            return
        generation = self._generation(link)
        if generation is None:
            return
        if generation.item is None:
            generation.turn.state("speaking")
            generation.item = generation.turn.audio(generation.vrt_id)
        if generation.item is not None:
            generation.item.write(base64.b64decode(inline.get("data") or ""))

    def _on_output_transcript(self, link: Link, text: str) -> None:
        generation = self._generation(link)
        if generation is not None and text:
            generation.transcript += text
            generation.turn.state("speaking")
            generation.turn.transcript(
                generation.transcript, final=False, item_id=generation.vrt_id
            )

    def _on_input_transcript(self, link: Link, text: str) -> None:
        if not text:
            return
        speech = link.speech
        if speech is None:
            speech = link.speech = Speech(new_id("i_"), self.session.turn)
        speech.text += text
        self.session.user_transcript(
            speech.text, final=False, item_id=speech.vrt_id, turn=speech.turn
        )

    def _on_interrupted(self, link: Link) -> None:
        """Our own clientContent (user text) cut the generation in flight, or the user
        spoke (§6.2): over a generation, or after its turnComplete while the client
        still plays it (F5; LK-G l.1127-1136 takes both as speech). The user speaking
        is a listening turn, so the client stops playback (§8.4). Only the rest of a
        generation still running is dropped, until its turnComplete.

        Before any content of the answer to the user's last text, ``interrupted`` is
        that text cutting the generation before it (GENAI: "interrupted >
        turn_complete"), or speech while the answer is pending, which LK-G does not
        take for speech either: the turnComplete that follows ends no turn."""
        awaiting_answer = link.asked is not None and link.generation is None and not link.drop
        running = link.generation is not None or link.drop or awaiting_answer
        if link.expect_interrupt:
            link.expect_interrupt -= 1
        elif not awaiting_answer:
            self.session.user_started_speaking()
        link.drop = running
        link.generation = None
        self._cancelled_by_service(link)

    def _cancelled_by_service(self, link: Link) -> None:
        """The service interrupted the generation: it cancels the calls it was waiting
        for (``toolCallCancellation`` follows) and wants no response to them."""
        link.cancelled.update(call.provider_id for call in link.calls.values())

    def _on_turn_complete(self, link: Link) -> None:
        generation, dropped = link.generation, link.drop
        link.generation, link.drop, link.expect_interrupt = None, False, 0
        link.handle_fresh = False  # the next handle has this turn
        if not dropped:
            speech = link.speech
            if speech is not None:
                link.speech = None
                self.session.user_transcript(
                    speech.text, final=True, item_id=speech.vrt_id, turn=speech.turn
                )
                self._conversation.add(UserSaid(text=speech.text, spoken=True))
            if generation is not None and generation.turn.active:
                turn = generation.turn
                if generation.transcript and turn.transcript(
                    generation.transcript, final=True, item_id=generation.vrt_id
                ):
                    self._conversation.add(
                        AgentSaid(turn_id=turn.id, text=generation.transcript, spoken=True)
                    )
                self._end_unless_waiting(link, turn)
            elif generation is None and link.asked is not None and link.asked.active:
                # A generation without content (a turn that ended for a reason, e.g.
                # MALFORMED_FUNCTION_CALL): the user's question still gets its end.
                self._end_unless_waiting(link, link.asked)
            link.asked = None
        if link.context_dirty:
            self._send_context(link)

    def _end_unless_waiting(self, link: Link, turn: Turn) -> None:
        if not self._waiting(link, turn):
            turn.end()

    def _waiting(self, link: Link, turn: Turn) -> bool:
        return any(call.turn == turn for call in link.calls.values())

    def _on_tool_call(self, link: Link, tool_call: dict[str, Any]) -> None:
        generation = self._generation(link)
        for function_call in tool_call.get("functionCalls") or ():
            if not isinstance(function_call, dict):
                continue
            provider_id = str(function_call.get("id"))
            function = str(function_call.get("name") or "")
            arguments = function_call.get("args", {})
            name = self._names.vrt(function)
            if generation is None:
                # A generation nobody hears any more: the model must not wait for ever.
                self._respond(link, provider_id, function, _error("INTERRUPTED", _INTERRUPTED_NOTE))
                continue
            if name is None:
                self._respond(
                    link, provider_id, function, _error("FAILED", f"no tool named {function!r}")
                )
                continue
            if not isinstance(arguments, dict):
                self._respond(
                    link,
                    provider_id,
                    function,
                    _error("INVALID", "the arguments were not an object"),
                )
                continue
            turn = generation.turn
            turn.state("acting")
            # The server gives the client a new public callId and keeps ours (§6.3).
            handle = turn.tool_call(name, provider_id=provider_id)
            if handle is None:
                self._respond(
                    link, provider_id, function, _error("FAILED", "the call could not be made")
                )
                continue
            future = handle.issue(arguments)
            if future.done():  # not issued (the server's bound on pending calls, §11)
                message = future.result().message or "the call was not made"
                self._respond(link, provider_id, function, _error("FAILED", message))
                continue
            link.calls[handle.call_id] = PendingCall(provider_id, function, turn)
            self._conversation.add(
                ToolCalled(
                    call_id=handle.call_id,
                    name=name,
                    arguments=arguments,
                    turn_id=turn.id,
                    provider_id=provider_id,
                )
            )

    def _respond(self, link: Link, provider_id: str, function: str, response: Any) -> None:
        # BidiGenerateContentToolResponse: FunctionResponse {id, name, response}, the
        # response a JSON object ("output" or "error").
        link.handle_fresh = False
        link.send(
            {
                "toolResponse": {
                    "functionResponses": [
                        {"id": provider_id, "name": function, "response": response}
                    ]
                }
            }
        )

    def _on_tool_settled(self, link: Link, event: ToolSettled) -> None:
        call = link.calls.pop(event.call_id, None)
        if call is None:
            return  # a call of an earlier provider session
        if call.provider_id in link.cancelled:
            return  # the service cancelled it: it wants no response
        if event.code == "INTERRUPTED":
            response = _error("INTERRUPTED", _INTERRUPTED_NOTE)
            if not call.turn.active:
                link.drop = True  # what the model says about it, nobody asked for
        elif event.ok:
            response = {"output": event.output}
        else:
            response = _error(event.code or "FAILED", event.message or "")
        self._respond(link, call.provider_id, call.function, response)
        if call.turn.active and not self._waiting(link, call.turn):
            call.turn.state("thinking")  # the model goes on with the results

    def _count_usage(self, usage: dict[str, Any]) -> None:
        def audio(details: Any) -> int:
            return sum(
                count(entry.get("tokenCount"))
                for entry in details or ()
                if isinstance(entry, dict) and entry.get("modality") == "AUDIO"
            )

        self.usage.record(
            log,
            self.session.session_id,
            input_tokens=count(usage.get("promptTokenCount")),
            output_tokens=count(usage.get("responseTokenCount", usage.get("candidatesTokenCount"))),
            cached_input_tokens=count(usage.get("cachedContentTokenCount")),
            input_audio_tokens=audio(usage.get("promptTokensDetails")),
            output_audio_tokens=audio(usage.get("responseTokensDetails")),
        )

    # -- context --

    def _check_window(self, link: Link, usage: dict[str, Any]) -> None:
        """The sliding window cuts the oldest turns, "always at start of USER role
        turn" (GENAI SlidingWindow), which is how the context went in: when the
        context (``promptTokenCount``) shrank, the context is sent again."""
        tokens = count(usage.get("promptTokenCount"))
        if tokens < link.prompt_tokens and self._context is not None:
            log.info("the model's context window slid; sending the application context again")
            self._context_sent = False
            self._send_context(link)
        if tokens:
            link.prompt_tokens = tokens

    def _send_context(self, link: Link) -> None:
        """The context as a data turn (no turnComplete: it asks for no answer), sent
        only between generations: any clientContent interrupts one."""
        if link.generation is not None or link.drop:
            link.context_dirty = True
            return
        link.context_dirty = False
        if self._context is None:
            return  # nothing to add (a turn already in the history cannot be removed)
        link.handle_fresh = False
        self._context_after_handle = True
        link.send(
            {
                "clientContent": {
                    "turns": [
                        {"role": "user", "parts": [{"text": context_message(self._context)}]}
                    ],
                    "turnComplete": False,
                }
            }
        )
        self._context_sent = True

    # -- the client's events --

    def _send_audio(self, link: Link, payload: bytes) -> None:
        fmt = self.session.input_format
        if fmt.encoding == "pcmu":
            payload = pcmu_to_pcm16(payload)
        link.send(
            {
                "realtimeInput": {
                    "audio": {
                        "data": base64.b64encode(payload).decode("ascii"),
                        "mimeType": f"audio/pcm;rate={fmt.rate}",
                    }
                }
            }
        )

    def _handle(self, link: Link, event: AgentInput) -> None:
        if isinstance(event, UserTextReceived):
            # The server interrupted the response in flight already (§6.3); the
            # service's generation stops at this clientContent and says so.
            if link.generation is not None or link.drop:  # the service still generates
                link.expect_interrupt += 1
                link.drop = True
                link.generation = None
            self._cancelled_by_service(link)
            link.asked = self.session.begin_turn("thinking")
            self._conversation.add(UserSaid(text=event.text))
            link.handle_fresh = False
            if self._realtime_text:
                link.send({"realtimeInput": {"text": event.text}})
            else:
                link.send(
                    {
                        "clientContent": {
                            "turns": [{"role": "user", "parts": [{"text": event.text}]}],
                            "turnComplete": True,
                        }
                    }
                )
        elif isinstance(event, ResponseInterrupted):
            generation = link.generation
            if generation is not None and generation.turn.id == event.turn_id:
                link.drop = True  # the Live API has no cancel: the rest is dropped here
                link.generation = None
        elif isinstance(event, ToolSettled):
            self._conversation.add(settled(event))
            self._on_tool_settled(link, event)
        elif isinstance(event, ContextChanged):
            self._context = event.context
            self._context_sent = False
            self._send_context(link)
        # PlaybackReported: the Live API has no truncate message; the service assumes
        # real-time playback and cuts its context itself when it is interrupted.


def _seconds(duration: Any) -> float | None:
    """A protobuf ``Duration`` in its JSON form (``"50s"``, ``"1.5s"``), in seconds."""
    match = _DURATION.match(duration) if isinstance(duration, str) else None
    return float(match.group(1)) if match is not None else None


def _error(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}
