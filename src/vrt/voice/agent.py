"""The voice agent: voice activity detection, streaming speech recognition, a text
brain and streaming speech synthesis, composed behind the agent seam.

Turn-taking (§6):

* **The user starts speaking** (the detector's start, :mod:`vrt.voice.turns`):
  ``session.user_started_speaking()``, which interrupts a reply in flight (§6.2, reason
  ``speech``) and begins a ``listening`` turn. The interrupted reply's speech stops at
  once and the brain is told (``ResponseInterrupted``, reason ``speech``); the
  conversation keeps only what was played of it (§8.4): estimated from the real time
  since its first frame, and corrected by the client's ``playback`` report.
* **While the user speaks**: partial user ``transcript``\\ s (``final: false``).
* **End of speech** (``hangover_ms`` of silence): the final user ``transcript``, then the
  brain gets it as ``UserTextReceived`` and its reply continues the listening turn.
  An utterance with no words (noise the detector let through) ends the turn quietly.
* **The brain's reply**: its text chunks go to the client as they stream and to the
  speaker, which synthesises them clause by clause (:mod:`vrt.voice.clauses`) into one
  audio item (``audio.start``, 20 ms frames in the session's output format, sent at
  most ``lead_ms`` ahead of real time). When the speech is out: an agent
  ``transcript`` of what was spoken, then ``idle``.
* **Typed text** is answered the same way, in text and speech (§6.3: the server has
  already interrupted the reply in flight).

A stage failing mid-session is ``AGENT_ERROR`` (recoverable, §9.2) and ends the turn;
the session goes on. The brain failing fails the session, as any agent's failure does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections import deque
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np

from ..agents.base import (
    Agent,
    AgentInput,
    AgentSession,
    AudioItem,
    AudioReceived,
    PlaybackReported,
    ResponseInterrupted,
    Turn,
    UserTextReceived,
)
from ..agents.usage import TokenUsage
from ..protocol.messages import PCM16_24K, Format
from .brain import BrainSession, HeardAware
from .clauses import ClauseSplitter, first_clause, speakable
from .codec import FRAME_MS, OPUS_AVAILABLE, InputDecoder, OutputEncoder
from .stages import (
    SAMPLE_RATE,
    Recognition,
    Samples,
    SpeechToText,
    StageError,
    TextToSpeech,
    Vad,
)
from .turns import TurnDetector, TurnEvent

__all__ = ["VOICE_FORMATS", "Timing", "VoiceAgent", "VoiceConfig", "VoiceStages"]

log = logging.getLogger(__name__)

#: What the voice agent takes and produces (§8.2): it converts every one itself.
VOICE_FORMATS: Final = (
    PCM16_24K,
    Format(encoding="pcm16", sample_rate=16000),
    Format(encoding="pcm16", sample_rate=48000),
    Format(encoding="pcmu", sample_rate=8000),
    *((Format(encoding="opus", sample_rate=48000),) if OPUS_AVAILABLE else ()),
)


@dataclass(frozen=True, slots=True)
class VoiceConfig:
    """Turn-taking and output settings (``vrt serve --agent-option KEY=VALUE``)."""

    #: Speech probability at which a detector window is speech.
    threshold: float = 0.5
    #: Speech needed to start a turn: shorter bursts (a cough) start nothing.
    min_speech_ms: float = 160.0
    #: Silence that ends the user's turn.
    hangover_ms: float = 300.0
    #: Audio before the confirmed start that the recogniser gets too.
    preroll_ms: float = 300.0
    #: The longest utterance; longer speech is cut into turns of this length.
    max_utterance_ms: float = 28_000.0
    #: How far output audio may run ahead of real time.
    lead_ms: float = 300.0
    #: The first clause of a reply ends after this many words at most (0: at the first
    #: sentence end or clause boundary): its synthesis is what the user waits for. Each
    #: clause after it ends at twice the words of the one before at most (clauses.py),
    #: so that it is synthesised while the one before plays.
    first_clause_words: float = 4
    #: Characters of one reply that are spoken (about two minutes of speech): the reply's
    #: text goes to the client whole, its speech stops there with a recoverable
    #: AGENT_ERROR saying so (docs/limits.md).
    max_reply_chars: float = 2000


@dataclass(frozen=True, slots=True)
class VoiceStages:
    """The stages, shared by every session of a server."""

    vad: Vad
    stt: SpeechToText
    tts: TextToSpeech


#: Synthesised chunks (a Piper clause each) the synthesiser may hold ahead of the writer.
_AHEAD: Final = 2

#: Input frames a session may have waiting for its detector (10 s of 20 ms frames): the
#: read budget (§11) holds a client to about real time, so only a detector starved of
#: a core gets here; newer frames are then dropped.
_MAX_INBOX: Final = 500
_POOL: list[ThreadPoolExecutor] = []


def _detection_pool() -> ThreadPoolExecutor:
    """The threads every session's input decoding and voice detection share: as many
    as the cores (the native calls release the GIL), at most four."""
    if not _POOL:
        _POOL.append(
            ThreadPoolExecutor(min(4, os.cpu_count() or 1), thread_name_prefix="vrt-voice-in")
        )
    return _POOL[0]


class _Input:
    """One session's input audio state: its decoder and turn detector (made on its first
    frame, so that opening a session costs neither). Used by one thread at a time."""

    def __init__(self, vad: Vad, config: VoiceConfig, fmt: Format, before: _Input | None) -> None:
        self.decoder = InputDecoder(fmt, SAMPLE_RATE)
        self.detector: TurnDetector = (
            before.detector
            if before is not None
            else TurnDetector(
                vad.stream(),
                threshold=config.threshold,
                min_speech_ms=config.min_speech_ms,
                hangover_ms=config.hangover_ms,
                preroll_ms=config.preroll_ms,
                max_utterance_ms=config.max_utterance_ms,
            )
        )

    def detect(self, payloads: list[bytes]) -> list[TurnEvent]:
        parts = [self.decoder.decode(payload) for payload in payloads]
        samples = [part for part in parts if part.size]
        if not samples:
            return []
        return self.detector.feed(np.concatenate(samples) if len(samples) > 1 else samples[0])


class _TurnOver(Exception):
    """The reply's turn ended while it was being spoken."""


@dataclass(slots=True)
class Timing:
    """When each step of one spoken exchange happened, on the event loop's clock
    (seconds), for the latency figures (``bench/voice.py``, ``docs/voice.md``)."""

    #: Where the detector confirmed the start, in the session's input audio time (ms).
    start_ms: float
    #: The last input frame the detector judged speech was handled.
    last_voice: float = 0.0
    #: The hangover passed: the user's turn ended.
    end: float = 0.0
    #: The final transcript was ready.
    final: float | None = None
    #: The brain's first text chunk of the reply.
    reply: float | None = None
    #: The first audio of the reply was synthesised.
    synthesized: float | None = None
    #: The reply's first output frame was written.
    first_frame: float | None = None


@dataclass(slots=True)
class _Clause:
    text: str
    start_ms: float
    end_ms: float


class _Speaker:
    """Speaks one reply: text in, clauses synthesised in order, frames out."""

    def __init__(self, agent: VoiceAgent, session: AgentSession, turn_id: str) -> None:
        self.agent = agent
        self.session = session
        self.turn = Turn(session, turn_id)
        self.splitter = ClauseSplitter(int(agent.config.first_clause_words))
        self.received = ""  # every chunk, joined as sent
        self.taken = ""  # the text handed to the synthesiser so far
        self.fed = 0  # characters handed to the splitter
        self.limit = int(agent.config.max_reply_chars)
        self.capped = False  # the reply is longer than the speech of it
        self.clauses: list[_Clause] = []
        self.queue: asyncio.Queue[str | None] = asyncio.Queue()
        self.item: AudioItem | None = None
        self.started = 0.0
        self.sent_ms = 0.0
        self.done = False  # spoken to the end, or stopped
        self.history_index: int | None = None
        self.timing: Timing | None = None
        self.encoder = OutputEncoder(session.output_format, agent.stages.tts.sample_rate)
        self.task = asyncio.create_task(self._run(), name=f"voice speaker {turn_id}")

    # -- text in --

    def add(self, chunk: str) -> None:
        if self.timing is not None and self.timing.reply is None:
            self.timing.reply = asyncio.get_running_loop().time()
        self.received += chunk
        self._feed(chunk)

    def transcript(self, text: str) -> None:
        """The brain's final transcript says exactly what the reply is: a brain that
        streams one word per chunk (the scripted agent) has no spaces in its chunks."""
        if not self.taken:
            self.splitter.replace("")
            self.fed = 0
            self._feed(text)
        elif text.startswith(self.received) and len(text) > len(self.received):
            self._feed(text[len(self.received) :])
        self.received = text

    def _feed(self, text: str) -> None:
        """Hand ``text`` to the splitter, up to the reply's speech limit: past it, one
        recoverable error says the speech stops there (the text went to the client)."""
        room = self.limit - self.fed
        if len(text) > room:
            text = text[: max(0, room)]
            if not self.capped:
                self.capped = True
                self.session.error(
                    f"this reply is spoken up to {self.limit} characters; its text is complete",
                    recoverable=True,
                )
        if not text:
            return
        self.fed += len(text)
        for clause in self.splitter.add(text):
            self._take(clause)

    def finish(self) -> None:
        for clause in self.splitter.finish():
            self._take(clause)
        self.queue.put_nowait(None)

    def _take(self, clause: str) -> None:
        clause = speakable(clause)
        if not clause:
            return
        self.taken = f"{self.taken} {clause}".strip()
        self.queue.put_nowait(clause)

    # -- audio out --

    async def _run(self) -> None:
        # The synthesiser works ahead while frames go out in real time, so that the next
        # clause is ready when this one ends; it stays at most _AHEAD chunks ahead, which
        # bounds what a long reply holds.
        ready: asyncio.Queue[tuple[int, str, Samples] | None] = asyncio.Queue(_AHEAD)
        synthesiser = asyncio.create_task(self._synthesise(ready))
        try:
            clause: _Clause | None = None
            current = 0
            while (piece := await ready.get()) is not None:
                index, text, samples = piece
                if clause is None or index != current:
                    current = index
                    # The clause's span grows as its audio is encoded, before it is sent:
                    # an interruption mid-clause knows how much of it was played.
                    clause = _Clause(text, self.sent_ms, self.sent_ms)
                    self.clauses.append(clause)
                frames = self.encoder.encode(samples)
                clause.end_ms += len(frames) * FRAME_MS
                for frame in frames:
                    await self._write(frame)
            await synthesiser  # raises what stopped it
            for frame in self.encoder.flush():
                await self._write(frame)
        except _TurnOver:
            return
        except StageError as exc:
            self.done = True
            self.session.error(str(exc), recoverable=True)
            self.turn.end()
            return
        finally:
            synthesiser.cancel()
        self.done = True
        spoken = " ".join(clause.text for clause in self.clauses if clause.end_ms > clause.start_ms)
        self.agent.replied(self, spoken)
        if spoken:
            self.turn.transcript(spoken)
        self.turn.end()

    async def _synthesise(self, ready: asyncio.Queue[tuple[int, str, Samples] | None]) -> None:
        index = 0
        try:
            while (text := await self.queue.get()) is not None:
                index += 1
                first_clause.set(index == 1)  # this task's context: its own clauses
                async for samples in self.agent.stages.tts.synthesize(text):
                    if self.timing is not None and self.timing.synthesized is None:
                        self.timing.synthesized = asyncio.get_running_loop().time()
                    await ready.put((index, text, samples))
        except asyncio.CancelledError:
            raise
        except BaseException:
            await ready.put(None)  # the writer stops here, then awaits this outcome
            raise
        await ready.put(None)

    async def _write(self, frame: bytes) -> None:
        loop = asyncio.get_running_loop()
        if self.item is None:
            self.item = self.turn.audio()
            if self.item is None:
                raise _TurnOver
            self.started = loop.time()
            if self.timing is not None:
                self.timing.first_frame = self.started
            self.agent.first_audio(self)
        ahead = self.sent_ms - (loop.time() - self.started) * 1000
        lead = self.agent.config.lead_ms
        if ahead > lead:
            # Sleep a little past the lead so frames leave in bursts, not one timer each.
            await asyncio.sleep((ahead - lead + 100) / 1000)
        if not self.item.write(frame, FRAME_MS):
            raise _TurnOver
        self.sent_ms += FRAME_MS

    # -- interruption --

    def played_ms(self) -> float:
        """What the user can have heard by now: real time since the first frame."""
        if self.item is None:
            return 0.0
        elapsed = (asyncio.get_running_loop().time() - self.started) * 1000
        return max(0.0, min(self.sent_ms, elapsed))

    def heard(self, played_ms: float) -> str:
        """The words of the first ``played_ms`` of the item (a clause played in part:
        its words in proportion)."""
        words: list[str] = []
        for clause in self.clauses:
            if played_ms >= clause.end_ms:
                words.extend(clause.text.split())
                continue
            span = clause.end_ms - clause.start_ms
            if played_ms > clause.start_ms and span > 0:
                part = clause.text.split()
                words.extend(part[: int(len(part) * (played_ms - clause.start_ms) / span)])
            break
        return " ".join(words)

    def stop(self) -> None:
        self.done = True
        self.task.cancel()


@dataclass(slots=True)
class _Utterance:
    recognition: Recognition
    turn: Turn
    timing: Timing
    serial: int
    #: Everything fed, so that speech resuming before the final joins this utterance.
    audio: list[Samples] = field(default_factory=list)
    samples: int = 0
    #: The final transcript went to the brain (or the utterance was dropped).
    settled: bool = False

    def feed(self, audio: Samples) -> None:
        self.audio.append(audio)
        self.samples += len(audio)
        self.recognition.feed(audio)


class VoiceAgent:
    """One session's voice agent around one brain (see the module documentation)."""

    input_formats: tuple[Format, ...] = VOICE_FORMATS
    output_formats: tuple[Format, ...] = VOICE_FORMATS

    def __init__(self, stages: VoiceStages, brain: Agent, config: VoiceConfig) -> None:
        self.stages = stages
        self.brain = brain
        self.config = config
        #: The conversation as the user heard it: ("user" | "agent", text), in order.
        self.history: list[tuple[str, str]] = []
        #: The latest spoken exchanges' timings, oldest first.
        self.timings: deque[Timing] = deque(maxlen=64)
        self._timing: Timing | None = None  # of the utterance the brain answers next
        self._session: AgentSession | None = None
        self._brain_session: BrainSession | None = None
        self._input: _Input | None = None  # made on the first input frame
        self._inbox: deque[bytes] = deque()  # input frames not yet decoded
        self._listening: asyncio.Task[None] | None = None  # decodes the inbox
        #: Input frames dropped: the detection threads fell this far behind.
        self.dropped_audio = 0
        self._utterance: _Utterance | None = None
        self._finishing: _Utterance | None = None  # ended, its final not yet delivered
        self._speaker: _Speaker | None = None
        self._speakers: dict[str, _Speaker] = {}  # by item id, for playback reports
        self._tasks: set[asyncio.Task[None]] = set()
        self._utterances = 0  # utterances begun, numbering each
        #: This session's name at the recogniser's queue (see _listen_for).
        self._recognition_owner = object()

    @property
    def usage(self) -> TokenUsage | None:
        """The tokens the brain's model used, when the brain counts them (a model
        adapter's ``usage``, docs/agents.md#token-usage; the scripted brain has none):
        the server reads any agent's usage here, for its per-response and per-session
        token metrics (docs/operations.md#per-response-metrics)."""
        usage = getattr(self.brain, "usage", None)
        return usage if isinstance(usage, TokenUsage) else None

    # -- the session --

    async def run(self, session: AgentSession) -> None:
        self._session = session
        brain_session = BrainSession.for_brain(session, self)
        self._brain_session = brain_session
        brain = asyncio.create_task(self.brain.run(brain_session), name="voice brain")
        listen = asyncio.create_task(session.listen(self.handle), name="voice listener")
        try:
            done, _ = await asyncio.wait({brain, listen}, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                task.result()  # a failure of either fails the session
            await listen  # a brain that returned leaves the voice agent listening
        finally:
            for task in (brain, listen, *self._tasks):
                task.cancel()
            if self._utterance is not None:
                self._utterance.recognition.cancel()
            for speaker in list(self._speakers.values()):
                speaker.stop()
            if self._speaker is not None:
                self._speaker.stop()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await brain
            self._release()

    def _release(self) -> None:
        """Drop every reference from this agent to its session's parts. The brain's
        session names this agent as its listener and each speaker names it too: left in
        place, these cycles would keep an ended session's megabytes (decoder, detector,
        speech) until a full collection, which the server's collector tuning makes rare
        (``vrt.server.gc_tuning``). Freed by reference counting alone, they go at once."""
        brain_session, self._brain_session = self._brain_session, None
        if brain_session is not None:
            del brain_session.listener
        self._speakers.clear()
        self._speaker = None
        self._utterance = self._finishing = None
        self._input = None
        self._inbox.clear()
        self._listening = None
        self._tasks.clear()
        self._session = None

    def handle(self, event: AgentInput) -> None:
        if isinstance(event, AudioReceived):
            self._on_audio(event.payload)
        elif isinstance(event, UserTextReceived):
            self._barge_in(tell_brain=False)  # §6.3: the server interrupted the reply
            self.history.append(("user", event.text))
            self._brain().deliver([event])
        elif isinstance(event, ResponseInterrupted):
            speaker = self._speaker
            if speaker is not None and speaker.turn.id == event.turn_id:
                self._barge_in(tell_brain=False)
            self._brain().deliver([event])
        elif isinstance(event, PlaybackReported):
            self._played(event)
        else:  # ContextChanged, ToolSettled: the brain's business
            self._brain().deliver([event])

    def _brain(self) -> BrainSession:
        assert self._brain_session is not None
        return self._brain_session

    def _spawn(self, coroutine: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.create_task(coroutine, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- input audio --

    def _on_audio(self, payload: bytes) -> None:
        # Decoding and voice detection run on a thread (_Input.detect), one batch per
        # session at a time: a session flooding audio (within its read budget, §11)
        # delays its own speech, not the event loop the other sessions share.
        inbox = self._inbox
        if len(inbox) >= _MAX_INBOX:
            self.dropped_audio += 1
            if self.dropped_audio == 1:
                log.warning("a voice session's input audio outran its detector: dropping")
            return
        inbox.append(payload)
        if self._listening is None:
            self._listening = asyncio.create_task(self._detect(), name="voice input")
            self._tasks.add(self._listening)

    async def _detect(self) -> None:
        session = self._session
        assert session is not None
        loop = asyncio.get_running_loop()
        try:
            while self._inbox:
                batch = list(self._inbox)
                self._inbox.clear()
                fmt = session.input_format
                state = self._input
                if state is None or state.decoder.format != fmt:
                    state = self._input = _Input(self.stages.vad, self.config, fmt, state)
                events = await loop.run_in_executor(_detection_pool(), state.detect, batch)
                if self._input is state:
                    self._on_turn_events(session, events)
        finally:
            if self._listening is asyncio.current_task():
                self._tasks.discard(self._listening)
                self._listening = None

    def _on_turn_events(self, session: AgentSession, events: list[TurnEvent]) -> None:
        now = asyncio.get_running_loop().time()
        for event in events:
            utterance = self._utterance
            if event.kind == "start":
                assert event.audio is not None
                self._speech_started(session, event.audio, Timing(event.at_ms, now))
            elif utterance is None:
                continue
            elif event.kind == "audio":
                assert event.audio is not None
                utterance.feed(event.audio)
                if event.speech:
                    utterance.timing.last_voice = now
            elif event.kind == "pause":
                utterance.recognition.pause()
            elif event.kind == "resume":
                utterance.recognition.resume()
            else:
                utterance.timing.end = now
                self._utterance, self._finishing = None, utterance
                self._spawn(self._finish(session, utterance), "voice utterance")

    def _speech_started(self, session: AgentSession, audio: Samples, timing: Timing) -> None:
        self._barge_in(tell_brain=True)
        self._brain().adopt = None
        turn = session.user_started_speaking()
        carried: list[Samples] = []
        prior = self._finishing
        limit = self.config.max_utterance_ms * SAMPLE_RATE / 1000
        if (
            prior is not None
            and not prior.settled
            and prior.turn.id == turn.id
            and prior.samples + len(audio) < limit
        ):
            # The user went on before the last words were answered: one utterance.
            prior.settled = True
            prior.recognition.cancel()
            carried = prior.audio

        self._utterances += 1
        serial = self._utterances

        def partial(text: str) -> None:
            # By number, not by the utterance itself: the utterance holds its recogniser,
            # which holds this function (a cycle that would keep its audio).
            current = self._utterance
            if current is not None and current.serial == serial and turn.active:
                session.user_transcript(text, final=False)

        # The recogniser orders and bounds its work per session (decode_queue.py) by this
        # token, not by the agent: a recognition that held the agent would close a cycle.
        recognition = self.stages.stt.start(partial, session=self._recognition_owner)
        utterance = _Utterance(recognition, turn, timing, serial)
        self._utterance = utterance
        for piece in (*carried, audio):
            utterance.feed(piece)

    async def _finish(self, session: AgentSession, utterance: _Utterance) -> None:
        try:
            text = await utterance.recognition.final()
            utterance.timing.final = asyncio.get_running_loop().time()
        except StageError as exc:
            if not utterance.settled:
                utterance.settled = True
                session.error(str(exc), recoverable=True)
                self._end_listening(utterance.turn)
            return
        if utterance.settled:
            return  # joined to the utterance that followed it
        utterance.settled = True
        turn = utterance.turn
        if not text:
            self._end_listening(turn)  # noise the detector let through: no words, no reply
            return
        if not turn.active:
            turn = session.user_started_speaking()  # typed text replaced the turn
        session.user_transcript(text)
        self.history.append(("user", text))
        brain = self._brain()
        brain.adopt = turn
        self.timings.append(utterance.timing)
        self._timing = utterance.timing
        brain.deliver([UserTextReceived(text=text)])
        # A brain reading session.events() takes the event on its next step.
        await asyncio.sleep(0)
        self._timing = None
        if brain.adopt is turn:
            brain.adopt = None
            turn.end()  # the brain began no reply (the scripted "error", say)

    def _end_listening(self, turn: Turn) -> None:
        """End an utterance's listening turn, unless a newer utterance goes on in it."""
        current = self._utterance
        if current is None or current.turn.id != turn.id:
            turn.end()

    # -- replies (the brain's Listener) --

    def reply_started(self, turn_id: str) -> None:
        previous = self._speaker
        if previous is not None and not previous.done:
            self._barge_in(tell_brain=False)
        assert self._session is not None
        self._speaker = _Speaker(self, self._session, turn_id)
        self._speaker.timing, self._timing = self._timing, None

    def _speaker_of(self, turn_id: str) -> _Speaker | None:
        speaker = self._speaker
        return speaker if speaker is not None and speaker.turn.id == turn_id else None

    def reply_text(self, turn_id: str, chunk: str) -> None:
        speaker = self._speaker_of(turn_id)
        if speaker is not None:
            speaker.add(chunk)

    def reply_transcript(self, turn_id: str, text: str) -> None:
        speaker = self._speaker_of(turn_id)
        if speaker is not None:
            speaker.transcript(text)

    def reply_done(self, turn_id: str) -> None:
        speaker = self._speaker_of(turn_id)
        if speaker is not None:
            speaker.finish()

    def speaks(self, turn_id: str) -> bool:
        speaker = self._speaker_of(turn_id)
        return speaker is not None and bool(speaker.received)

    def first_audio(self, speaker: _Speaker) -> None:
        if speaker.item is not None:
            self._speakers[speaker.item.id] = speaker
            while len(self._speakers) > 8:  # playback reports come for recent items
                self._speakers.pop(next(iter(self._speakers)))

    def replied(self, speaker: _Speaker, spoken: str) -> None:
        """A reply was spoken to its end."""
        if spoken:
            speaker.history_index = len(self.history)
            self.history.append(("agent", spoken))

    # -- interruption and playback (§6.2, §8.4) --

    def _barge_in(self, *, tell_brain: bool) -> None:
        """Stop the reply being spoken; keep what was played of it."""
        speaker, self._speaker = self._speaker, None
        if speaker is None or speaker.done:
            return
        speaker.stop()
        self._truncate(speaker, speaker.played_ms())
        if tell_brain:
            # Interruptions the agent asks for reach no agent through the server; the
            # brain must stop its reply all the same. It never sees epochs: 0 stands in.
            self._brain().deliver(
                [ResponseInterrupted(turn_id=speaker.turn.id, epoch=0, reason="speech")]
            )

    def _truncate(self, speaker: _Speaker, played_ms: float) -> None:
        heard = speaker.heard(played_ms)
        if speaker.history_index is not None:
            self.history[speaker.history_index] = ("agent", heard)
        elif heard:  # a reply cut before any of it was heard leaves no entry
            speaker.history_index = len(self.history)
            self.history.append(("agent", heard))
        if isinstance(self.brain, HeardAware):
            self.brain.heard(speaker.turn.id, heard)

    def _played(self, event: PlaybackReported) -> None:
        speaker = self._speakers.get(event.item_id)
        if speaker is not None and speaker.done:
            self._truncate(speaker, float(event.played_ms))
