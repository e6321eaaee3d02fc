"""A deterministic agent driven by the user's text, for tests, the conformance suite
and demos. It calls no model: what it sends follows from this contract alone.

Formats (§8.2): it takes and produces pcm16 at 24000 Hz, pcm16 at 16000 Hz and pcmu
(8000 Hz), so a client preferring one of them gets it unchanged.

Text commands
-------------
The user's text is split on whitespace; the command is the first word, matched
exactly (case-sensitive). Every reply below is one turn that begins with
``turn.state thinking`` (a new epoch, §6.1) and ends with ``turn.state idle``, unless
it is interrupted first; then nothing more of it is sent. "Chunk" means one agent
``text`` message. The chunks of a turn concatenate to its reply text, as a model's
streamed chunks do: a separator (a space, a newline) belongs to the chunk that follows
it. "Compact JSON" means ``json.dumps(value, separators=(",", ":"))``.

``echo WORDS``
    ``turn.state speaking``; one chunk per word, in order, every chunk but the first
    beginning with a space (``echo hello world``: ``hello``, `` world``), so the reply
    text is the words joined by single spaces; a final agent ``transcript`` of that
    text; one audio item
    (``audio.start``) of 200 ms of a 440 Hz tone at 0.2 of full scale in the session's
    output format, written at once as 20 ms frames (10 frames); ``idle``.
``call TOOL JSON``
    JSON is the rest of the text after TOOL. If it is not valid JSON (NaN and
    Infinity included): chunk ``error invalid JSON`` and ``idle``, still thinking.
    Otherwise ``turn.state acting`` and the call starts (``tool.stream start`` with
    tool-stream-v1). If the client does not host TOOL: chunk ``result error FAILED``,
    ``idle``. Else the arguments' compact JSON is streamed in fragments of 8
    characters (``tool.call.delta`` previews ``{"argumentsDelta": ...}``, or
    ``tool.stream arguments-delta``), the call is issued (``tool.call``, and
    ``arguments-complete``), and once it settles: chunk ``result ok OUTPUT`` (OUTPUT
    is the compact JSON of the result's output) or ``result error CODE`` (the
    client's code, ``TIMEOUT`` or ``FAILED``); ``idle``.
``calls N TOOL JSON``
    As ``call``, but N calls (N a decimal integer, 0 to 1000) in one acting turn:
    each started, streamed and issued back to back without waiting, then all awaited,
    then one chunk per call in call order (``result ok ...`` / ``result error CODE``),
    every chunk but the first beginning with a newline: the reply text has one line per
    call.
    Calls beyond the server's bound on pending calls settle ``FAILED``.
``speak MS``
    ``turn.state speaking``; one audio item of MS ms (0 to 600000) of the tone,
    streamed in real time: 20 ms frames, frame k written at start + k * 20 ms on the
    event loop clock (the last frame may be shorter); ``idle``. MS = 0 sends no audio
    item.
``burst N``
    N chunks ``chunk 1``, `` chunk 2`` ... `` chunk N`` (N from 0 to 10000; the reply
    text is ``chunk 1 chunk 2 ... chunk N``) written without yielding to the event
    loop; ``idle``.
``server-tool MS``
    ``turn.state acting``; a server-side call of ``server.sleep`` (MS from 0 to
    600000): start, its arguments ``{"ms":MS}`` as one delta, issued with
    ``{"ms": MS}``; progress ``{"elapsedMs": k*100}`` at each k * 100 ms < MS after
    the issue; settled ok at MS ms; chunk ``server-tool done``; ``idle``. Start,
    deltas, progress and settlement are visible only with tool-stream-v1 (§7.5); a
    baseline client sees ``tool.call.delta`` previews for the arguments and no
    ``tool.call``.
``error``
    ``error AGENT_ERROR`` "scripted error", recoverable; no turn (a reply still
    running is cancelled, as for any text).
``history?``
    Chunk with the compact JSON list of the user's texts before this one, oldest
    first, at most the last 16, including those a restored agent learned from the
    conversation log (``restore``, below), still thinking; ``idle``. Not part of the
    conformance suite's contract: it shows that a session kept its conversation
    when it moved to another process (docs/deploy.md).
``context?``
    Chunk with the current application context as
    ``json.dumps(context, separators=(",", ":"), sort_keys=True)`` (``null`` when
    there is none), still thinking; ``idle``.
anything else
    As ``echo`` with all the words, the first included. Empty text: one turn with
    no chunks, transcript ``""``, the 200 ms audio item, ``idle``.

A command with a missing or out-of-range number (``speak``, ``burst``,
``server-tool``, ``calls``) or ``call``/``calls`` without TOOL replies with the chunk
``error usage: <command> <arguments>`` (for example ``error usage: speak MS``) and
``idle``, still thinking.

Input audio
-----------
Input audio (in the session's input format; ignored if it is Opus) goes through an
:class:`~vrt.audio.EnergyVad` (RMS threshold 0.02 on 20 ms frames, 300 ms hangover):

* speech start: ``user_started_speaking()``, which interrupts a response in flight
  (``interrupted``, §6.2) and begins a ``listening`` turn;
* speech end (300 ms below the threshold after the last loud frame): a final user
  ``transcript`` ``(speech N ms)``, N the speech duration in audio time (first loud
  frame to the end of the last one, rounded to whole ms), then, continuing the
  listening turn, ``turn.state thinking`` and the ``echo (speech N ms)`` reply
  (speaking, 3 chunks, transcript, audio, idle). If that listening turn is over by
  then (user text replaced it), ``user_started_speaking()`` first interrupts the
  response in flight and begins a new listening turn.

Speech that never ends (the input stops while loud) produces no reply.

Interruptions and other events
------------------------------
* New user text while a reply runs: the server has already interrupted that reply
  (§6.3); the agent cancels it and starts the new one.
* ``ResponseInterrupted``: the reply of the interrupted turn is cancelled. A reply of
  a newer turn is left running.
* ``ContextChanged``: recorded in :attr:`ScriptedAgent.contexts` (the last 64).
* ``PlaybackReported``: the last report per item is kept in
  :attr:`ScriptedAgent.playback` (for the last 64 items reported).
* ``ToolSettled``: nothing (the futures of issued calls resolve in the seam).

Spoken commands
---------------
As the voice agent's brain (``vrt serve``'s default) the agent hears transcripts, which
a recogniser capitalises and punctuates: "Echo, good morning." or "Speak 500.". There
(:func:`spoken_scripted_agent`) a transcript whose first word, lowercased and without
the punctuation around it, names a command is read as that command, and the
punctuation that ends a number argument is dropped: ``echo good morning.``,
``speak 500``. Anything else is echoed as it was heard. Typed text is always read
exactly as above.

Restoring
---------
``restore(history)`` (the agent seam's way to rebuild an agent on another process,
docs/agents.md) takes the user's texts for ``history?`` and the playback reports from
the conversation log; the replies themselves never depended on the past.

Events are taken with ``AgentSession.listen``. Replies that never wait (``echo``,
``burst``, ``context?``, a usage error, the reply to speech) are sent while the event
is handled, so they leave in the same write as the server's answer to it; the others
(``call``, ``calls``, ``speak``, ``server-tool``) run as a task, so events are handled
(and interruptions seen) while one streams. Cancelling :meth:`ScriptedAgent.run`
cancels the reply in progress.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections import deque
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Final

from ..audio import EnergyVad, frame_bytes, tone
from ..protocol.messages import PCM16_24K, Format, TurnStateName
from .base import (
    AgentFactory,
    AgentInput,
    AgentSession,
    AgentSetupError,
    AudioItem,
    AudioReceived,
    ContextChanged,
    PlaybackReported,
    ResponseInterrupted,
    SessionInfo,
    ToolSettled,
    Turn,
    UserTextReceived,
)
from .history import HistoryEntry, PlaybackStopped, UserSaid
from .strict_json import parse_json

#: Contexts and playback reports the agent remembers: its state stays bounded however
#: many a client sends (docs/limits.md).
REMEMBERED: Final = 64

__all__ = [
    "SCRIPTED_FORMATS",
    "ScriptedAgent",
    "echo",
    "scripted_agent",
    "spoken_command",
    "spoken_scripted_agent",
]

log = logging.getLogger(__name__)

#: What the scripted agent takes and produces unchanged (§8.2).
SCRIPTED_FORMATS: Final = (
    PCM16_24K,
    Format(encoding="pcm16", sample_rate=16000),
    Format(encoding="pcmu", sample_rate=8000),
)

ECHO_AUDIO_MS: Final = 200
FRAME_MS: Final = 20
PROGRESS_MS: Final = 100
ARGUMENT_FRAGMENT: Final = 8
MAX_CALLS: Final = 1000
MAX_BURST: Final = 10_000
MAX_MS: Final = 600_000
#: User texts ``history?`` remembers.
HISTORY_TEXTS: Final = 16
#: Commands whose reply waits (a tool result, real time); the others are sent at once.
_WAITING_COMMANDS: Final = frozenset({"call", "calls", "speak", "server-tool"})
#: Every command word, for reading a transcript as one (``spoken_command``).
_COMMANDS: Final = _WAITING_COMMANDS | {"echo", "burst", "error", "history?", "context?"}
#: Commands whose argument is a number a recogniser may end with a full stop.
_NUMBER_COMMANDS: Final = frozenset({"speak", "burst", "server-tool", "calls"})
_PUNCTUATION: Final = ".,;:!?\"'()"


def spoken_command(text: str) -> str:
    """A transcript read as a command where its first word names one (see "Spoken
    commands" above); any other text unchanged."""
    words = text.split()
    if not words:
        return text
    head = words[0].strip(_PUNCTUATION).lower()
    if words[0].rstrip(_PUNCTUATION.replace("?", "")).lower() in {"history?", "context?"}:
        head += "?"
    if head not in _COMMANDS:
        return text
    if head in _NUMBER_COMMANDS and len(words) > 1:
        words[1] = words[1].strip(_PUNCTUATION)
    return " ".join((head, *words[1:]))


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def _sorted_keys(value: Any) -> Any:
    """``value`` with every object's keys in sorted order (``context?`` prints it so)."""
    if isinstance(value, dict):
        return {key: _sorted_keys(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [_sorted_keys(item) for item in value]
    return value


def _parse_count(word: str | None, maximum: int) -> int | None:
    """A plain decimal integer from 0 to ``maximum``; None otherwise."""
    if word is None or not (word.isascii() and word.isdigit()):
        return None
    value = int(word)
    return value if value <= maximum else None


def _result_text(settled: ToolSettled | None, json_text: Callable[[Any], str]) -> str:
    if settled is None:
        return "result error FAILED"
    if settled.ok:
        return f"result ok {json_text(settled.output)}"
    return f"result error {settled.code or 'FAILED'}"


async def _sleep_until(deadline: float) -> None:
    # Sleeping until an absolute time on the loop clock keeps lateness from accumulating.
    delay = deadline - asyncio.get_running_loop().time()
    if delay > 0:
        await asyncio.sleep(delay)


def _frames(payload: bytes, size: int) -> list[bytes]:
    return [payload[i : i + size] for i in range(0, len(payload), size)]


def _audio_format(turn: Turn) -> Format | None:
    fmt = turn.session.output_format
    return fmt if fmt.encoding in ("pcm16", "pcmu") else None  # no Opus encoder here


def echo(turn: Turn, words: list[str]) -> None:
    """The ``echo`` reply on an existing turn: speaking, one chunk per word, the agent
    transcript, 200 ms of tone as 20 ms frames, idle. Stops once the turn is over."""
    if not turn.state("speaking"):
        return
    for k, word in enumerate(words):
        if not turn.text(word if k == 0 else f" {word}"):
            return
    if not turn.transcript(" ".join(words)):
        return
    fmt = _audio_format(turn)
    if fmt is not None:
        item = turn.audio()
        if item is None:
            return
        for frame in _frames(_echo_tone(fmt), frame_bytes(fmt, FRAME_MS)):
            if not item.write(frame):
                return
    turn.end()


class ScriptedAgent:
    """The agent of this module's contract. One instance per session."""

    input_formats: tuple[Format, ...] = SCRIPTED_FORMATS
    output_formats: tuple[Format, ...] = SCRIPTED_FORMATS

    @staticmethod
    def json_text(value: Any) -> str:
        """How the replies print JSON (tool outputs, the context): compact. The contract
        lets an agent print it in any spacing; clients compare it parsed."""
        return _compact(value)

    def __init__(
        self, *, vad_threshold: float = 0.02, hangover_ms: float = 300.0, spoken: bool = False
    ) -> None:
        #: Texts are transcripts: read as commands as "Spoken commands" says.
        self.spoken = spoken
        #: The last playback report per item id (§8.4), for the last REMEMBERED items.
        self.playback: dict[str, PlaybackReported] = {}
        #: The contexts the client sent, in order (§5.5): the last REMEMBERED of them.
        self.contexts: list[Any] = []
        #: The user's last texts, for ``history?`` (restored ones included).
        self.recent_texts: deque[str] = deque(maxlen=HISTORY_TEXTS)
        self._vad = EnergyVad(threshold=vad_threshold, hangover_ms=hangover_ms)
        self._reply: asyncio.Task[None] | None = None
        self._reply_turn: Turn | None = None

    def restore(self, history: Sequence[HistoryEntry]) -> None:
        """The conversation so far, when the session was rebuilt on this process."""
        for entry in history:
            if isinstance(entry, UserSaid) and not entry.spoken:
                self.recent_texts.append(entry.text)
            elif isinstance(entry, PlaybackStopped):
                self.playback[entry.item_id] = PlaybackReported(
                    item_id=entry.item_id, played_ms=entry.played_ms, turn_id=entry.turn_id
                )

    async def run(self, session: AgentSession) -> None:
        try:
            await session.listen(lambda event: self.handle(session, event))
        finally:
            self._cancel_reply()

    def handle(self, session: AgentSession, event: AgentInput) -> None:
        """One event, as it arrives (``AgentSession.listen``): replies that never wait
        are sent at once; the others run as a task."""
        if isinstance(event, AudioReceived):
            self._on_audio(session, event.payload)
        elif isinstance(event, UserTextReceived):
            self._on_text(session, event.text)
        elif isinstance(event, ResponseInterrupted):
            self._cancel_reply(event.turn_id)
        elif isinstance(event, ContextChanged):
            self.contexts.append(event.context)
            if len(self.contexts) > REMEMBERED:
                del self.contexts[0]
        elif isinstance(event, PlaybackReported):
            playback = self.playback
            playback.pop(event.item_id, None)
            playback[event.item_id] = event
            if len(playback) > REMEMBERED:
                del playback[next(iter(playback))]
        # ToolSettled: the issued call's future already resolved in the seam.

    # -- replies --

    def _start(self, session: AgentSession, turn: Turn, reply: Coroutine[Any, Any, None]) -> None:
        self._cancel_reply()  # one reply at a time
        task = asyncio.create_task(reply, name=f"scripted reply {turn.id}")
        task.add_done_callback(lambda done: _report_failure(session, done))
        self._reply, self._reply_turn = task, turn

    def _cancel_reply(self, turn_id: str | None = None) -> None:
        """Cancel the running reply: any (``turn_id`` None), or only the one of
        ``turn_id`` or of a turn that is already over."""
        task, turn = self._reply, self._reply_turn
        if task is None or task.done():
            return
        if turn_id is None or turn is None or turn.id == turn_id or not turn.active:
            task.cancel()

    def _on_text(self, session: AgentSession, text: str) -> None:
        # §6.3: the server interrupted the reply in flight before delivering the text.
        self._cancel_reply()
        if self.spoken:
            text = spoken_command(text)
        words = text.split()
        command = words[0] if words else ""
        earlier = list(self.recent_texts)
        self.recent_texts.append(text)
        if command == "error":
            session.error("scripted error", recoverable=True)
            return
        # The turn begins here, not in the task, so that its id is known at once:
        # an interruption of an older turn must not cancel this reply.
        turn = session.begin_turn("thinking")
        if command in _WAITING_COMMANDS:
            self._start(session, turn, self._command(turn, text, words))
            return
        if command == "history?":
            if turn.text(_compact(earlier)):
                turn.end()
            return
        try:
            self._reply_now(session, turn, words)
        except Exception as exc:
            _report(session, exc)

    async def _command(self, turn: Turn, text: str, words: list[str]) -> None:
        command = words[0]
        argument = words[1] if len(words) > 1 else None
        if command == "call":
            await self._call(turn, text)
        elif command == "calls":
            await self._calls(turn, text)
        elif command == "speak":
            ms = self._count(turn, argument, MAX_MS, "speak MS", "speaking")
            if ms is not None:
                await self._speak(turn, ms)
        elif command == "server-tool":
            ms = self._count(turn, argument, MAX_MS, "server-tool MS", "acting")
            if ms is not None:
                await self._server_tool(turn, ms)

    def _reply_now(self, session: AgentSession, turn: Turn, words: list[str]) -> None:
        command = words[0] if words else ""
        if command == "burst":
            self._burst(turn, words[1] if len(words) > 1 else None)
        elif command == "context?":
            if turn.text(self.json_text(_sorted_keys(session.context))):
                turn.end()
        else:
            echo(turn, words[1:] if command == "echo" else words)

    @staticmethod
    def _usage(turn: Turn, usage: str) -> None:
        if turn.text(f"error usage: {usage}"):
            turn.end()

    @classmethod
    def _count(
        cls,
        turn: Turn,
        argument: str | None,
        maximum: int,
        usage: str,
        state: TurnStateName | None = None,
    ) -> int | None:
        """The command's count, with the turn moved to ``state`` when given; None when
        the count is not one (the reply says the usage) or the turn is gone."""
        count = _parse_count(argument, maximum)
        if count is None:
            cls._usage(turn, usage)
            return None
        return count if state is None or turn.state(state) else None

    @staticmethod
    def _start_acting(turn: Turn, text: str) -> tuple[bool, Any]:
        """``(True, arguments)`` with the turn acting; ``(False, None)`` when ``text`` is
        not JSON (the reply says so) or the turn is gone."""
        valid, arguments = parse_json(text)
        if not valid:
            if turn.text("error invalid JSON"):
                turn.end()
            return False, None
        return turn.state("acting"), arguments

    async def _call(self, turn: Turn, text: str) -> None:
        parts = text.split(maxsplit=2)
        if len(parts) < 2:
            self._usage(turn, "call TOOL JSON")
            return
        acting, arguments = self._start_acting(turn, parts[2] if len(parts) > 2 else "")
        if not acting:
            return
        pending = _issue(turn, parts[1], arguments)
        settled = await pending if pending is not None else None
        if turn.text(_result_text(settled, self.json_text)):
            turn.end()

    async def _calls(self, turn: Turn, text: str) -> None:
        parts = text.split(maxsplit=3)
        count = _parse_count(parts[1] if len(parts) > 1 else None, MAX_CALLS)
        if count is None or len(parts) < 3:
            self._usage(turn, "calls N TOOL JSON")
            return
        acting, arguments = self._start_acting(turn, parts[3] if len(parts) > 3 else "")
        if not acting:
            return
        pending = [_issue(turn, parts[2], arguments) for _ in range(count)]
        issued = [future for future in pending if future is not None]
        results = iter(await asyncio.gather(*issued))
        for k, future in enumerate(pending):
            line = _result_text(next(results) if future is not None else None, self.json_text)
            if not turn.text(line if k == 0 else f"\n{line}"):
                return
        turn.end()

    async def _speak(self, turn: Turn, ms: int) -> None:
        fmt = _audio_format(turn)
        size = frame_bytes(fmt, ms) if fmt is not None else 0
        item: AudioItem | None = turn.audio() if size else None
        if item is not None and fmt is not None:
            cycle = _tone_cycle(fmt)
            step = len(cycle[0])
            start = asyncio.get_running_loop().time()
            for k, offset in enumerate(range(0, size, step)):
                await _sleep_until(start + k * FRAME_MS / 1000)
                frame = cycle[k % len(cycle)]
                if not item.write(frame if offset + step <= size else frame[: size - offset]):
                    return
        turn.end()

    def _burst(self, turn: Turn, argument: str | None) -> None:
        count = self._count(turn, argument, MAX_BURST, "burst N")
        if count is None:
            return
        for k in range(1, count + 1):
            if not turn.text(f"chunk {k}" if k == 1 else f" chunk {k}"):
                return
        turn.end()

    async def _server_tool(self, turn: Turn, ms: int) -> None:
        handle = turn.tool_call("server.sleep", server_side=True)
        if handle is None:
            return
        arguments = {"ms": ms}
        handle.delta(_compact(arguments))
        await handle.issue(arguments)  # a server call resolves at once: it is running
        start = asyncio.get_running_loop().time()
        for elapsed in range(PROGRESS_MS, ms, PROGRESS_MS):
            await _sleep_until(start + elapsed / 1000)
            if not handle.progress({"elapsedMs": elapsed}):
                return
        await _sleep_until(start + ms / 1000)
        if handle.settle(True) and turn.text("server-tool done"):
            turn.end()

    # -- input audio --

    def _on_audio(self, session: AgentSession, payload: bytes) -> None:
        fmt = session.input_format
        if fmt.encoding not in ("pcm16", "pcmu"):
            return
        for event in self._vad.feed(payload, fmt):
            if event.kind == "speech-start":
                # The server interrupts the response in flight; whatever reply was
                # running or about to start is moot now that the user speaks again.
                session.user_started_speaking()
                self._cancel_reply()
                continue
            # The listening turn in progress, or a new one if something replaced it.
            turn = session.user_started_speaking()
            heard = f"(speech {round(event.duration_ms)} ms)"
            session.user_transcript(heard)
            self._cancel_reply()
            if turn.state("thinking"):
                echo(turn, heard.split())


def _issue(turn: Turn, tool: str, arguments: Any) -> asyncio.Future[ToolSettled] | None:
    """Start a client call, stream its arguments in 8-character fragments and issue
    it; None when the client does not host ``tool`` (or the turn is over)."""
    handle = turn.tool_call(tool)
    if handle is None:
        return None
    text = _compact(arguments)
    for i in range(0, len(text), ARGUMENT_FRAGMENT):
        handle.delta(text[i : i + ARGUMENT_FRAGMENT])
    return handle.issue(arguments)


def _report_failure(session: AgentSession, task: asyncio.Task[None]) -> None:
    exc = None if task.cancelled() else task.exception()
    if isinstance(exc, Exception):
        _report(session, exc)


def _report(session: AgentSession, exc: Exception) -> None:
    # A bug in a reply must be visible to the client, not only in the server's log.
    log.error("scripted reply failed", exc_info=exc)
    session.error(f"scripted agent failed: {exc!r}", recoverable=True)


def scripted_agent(info: SessionInfo) -> ScriptedAgent:
    """The agent factory (:data:`~vrt.agents.base.AgentFactory`): one agent per session."""
    del info  # the contract does not depend on the session's parameters
    return ScriptedAgent()


@functools.lru_cache(maxsize=8)
def _tone_cycle(fmt: Format) -> tuple[bytes, ...]:
    """One second of the tone in frames. The tone's period divides a second, so frame
    ``k`` of any ``speak`` is ``cycle[k % len(cycle)]``: the same bytes as slicing
    ``tone(ms)``, without building and holding the whole item per session."""
    return tuple(_frames(tone(1000, fmt), frame_bytes(fmt, FRAME_MS)))


@functools.lru_cache(maxsize=8)
def _echo_tone(fmt: Format) -> bytes:
    """The echo reply's tone: the same bytes every time, computed once per format
    (generating it costs milliseconds of the event loop)."""
    return tone(ECHO_AUDIO_MS, fmt)


def spoken_scripted_agent(info: SessionInfo) -> ScriptedAgent:
    """The agent factory of the voice agent's scripted brain: transcripts are read as
    commands ("Spoken commands" above)."""
    del info
    return ScriptedAgent(spoken=True)


def setup(options: dict[str, str]) -> AgentFactory:
    """``vrt serve --agent scripted``: no configuration."""
    if options:
        raise AgentSetupError(f"the scripted agent takes no options (got {', '.join(options)})")
    return scripted_agent
