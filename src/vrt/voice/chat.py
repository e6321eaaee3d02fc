"""``vrt chat --wav FILE`` and ``vrt chat --voice``: speak to a vRT server.

``--wav FILE`` streams a recording as a microphone would (20 ms frames in real time,
then silence) and prints what happens: the user transcripts (partial and final), the
agent's text, its spoken reply, and the voice-to-voice latency (from the end of the
recorded speech to the first frame of the reply's audio). ``--save-reply OUT.wav`` keeps
the reply's audio. It needs no audio hardware, so the whole voice path can be tried and
tested anywhere.

``--voice`` talks through the microphone and the speaker (``sounddevice``, the ``audio``
extra): always on by default (the server's voice detection takes turns; use headphones,
or the agent hears itself), or push-to-talk with ``--push-to-talk`` (Enter starts and
ends each utterance).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
import wave
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from ..audio import pcm16_to_pcmu, pcmu_to_pcm16, rms
from ..client import (
    AudioChunk,
    AudioStarted,
    Connected,
    ErrorReceived,
    Event,
    InterruptedEpoch,
    PlaybackStop,
    SessionClosed,
    SessionFailed,
    TextReceived,
    TranscriptReceived,
    TurnChanged,
    VrtClient,
)
from ..protocol.messages import Format
from ..terminal_text import printable

__all__ = ["Conversation", "read_wav", "run_voice_chat", "run_wav", "speak"]

FRAME_MS: Final = 20
#: A frame at least this loud (RMS, full scale 1) counts as speech for the latency.
_SPEECH_RMS: Final = 0.01
_RATES: Final = (8000, 16000, 24000, 48000)
#: What a recording of another rate, width or channel count is converted to: the rate
#: the voice agent's speech recognition runs at (docs/voice.md).
CONVERTED_RATE: Final = 16000
_CONVERSION_HINT: Final = "converting it needs the voice extra: pip install 'vrealtime[voice]'"


def read_wav(path: Path) -> tuple[bytes, int]:
    """A recording's samples as mono pcm16, and their rate. A mono 16-bit WAV at a rate
    a session takes is read as it is; any other WAV (22,050 or 44,100 Hz, stereo,
    8/24/32-bit or float samples) is decoded and resampled to 16 kHz (PyAV and soxr,
    of the voice extra). ValueError for what cannot be read, in one line."""
    try:
        with wave.open(str(path), "rb") as recording:
            if (
                recording.getnchannels() == 1
                and recording.getsampwidth() == 2
                and recording.getframerate() in _RATES
            ):
                return recording.readframes(recording.getnframes()), recording.getframerate()
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file") from None
    except (wave.Error, EOFError):
        pass  # not plain PCM (float samples, for one): decoded below
    return _converted(path), CONVERTED_RATE


def _converted(path: Path) -> bytes:
    """Any audio file PyAV (FFmpeg) decodes, as mono pcm16 at :data:`CONVERTED_RATE`:
    FFmpeg converts the samples to float, the channels are averaged, soxr resamples."""
    try:
        import av
        import numpy as np
        import soxr
    except ImportError as exc:
        raise ValueError(
            f"{path} is not a mono 16-bit WAV at 8, 16, 24 or 48 kHz; {_CONVERSION_HINT} "
            f"(missing: {exc.name})"
        ) from None
    chunks: list[Any] = []
    rate = 0
    try:
        with av.open(str(path)) as container:
            stream = container.streams.audio[0]
            rate = stream.rate
            # Planar float, the channels as they are: averaged below (FFmpeg's own
            # downmix adds them at -3 dB each, 3 dB louder for a mono-like stereo).
            planar = av.AudioResampler(format="fltp", layout=stream.layout.name, rate=rate)
            for frame in container.decode(stream):
                chunks.extend(out.to_ndarray().mean(axis=0) for out in planar.resample(frame))
            chunks.extend(out.to_ndarray().mean(axis=0) for out in planar.resample(None))
    except (av.FFmpegError, IndexError, OSError) as exc:
        raise ValueError(f"{path}: not a WAV file ({exc})") from None
    samples = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.float32)
    if rate != CONVERTED_RATE:
        samples = soxr.resample(samples, rate, CONVERTED_RATE, quality="HQ")
    pcm16: bytes = (np.clip(samples, -1.0, 1.0) * 32767).astype("<i2").tobytes()
    return pcm16


def _write_wav(path: Path, pcm16: bytes, rate: int) -> None:
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(pcm16)


@dataclass(slots=True)
class Conversation:
    """What one spoken exchange produced, with times on the client's monotonic clock."""

    events: list[tuple[float, Event]] = field(default_factory=list)
    #: When the last frame holding speech was sent.
    speech_end: float | None = None
    #: When the first output frame after that arrived.
    first_audio: float | None = None
    #: Output audio per item id, in the session's output format.
    audio: dict[str, bytearray] = field(default_factory=dict)
    output: Format | None = None

    @property
    def latency_ms(self) -> float | None:
        """Voice to voice: the end of the user's speech to the reply's first frame."""
        if self.speech_end is None or self.first_audio is None:
            return None
        return (self.first_audio - self.speech_end) * 1000

    def transcripts(self, role: str, *, final: bool = True) -> list[str]:
        return [
            event.text
            for _, event in self.events
            if isinstance(event, TranscriptReceived) and event.role == role and event.final == final
        ]

    def states(self) -> list[str]:
        return [event.state for _, event in self.events if isinstance(event, TurnChanged)]

    def reply_pcm16(self) -> tuple[bytes, int]:
        """The last audio item as pcm16, and its rate."""
        if not self.audio or self.output is None:
            return b"", 24000
        payload = bytes(list(self.audio.values())[-1])
        if self.output.encoding == "pcmu":
            return pcmu_to_pcm16(payload), 8000
        return payload, self.output.rate


def _frames(pcm16: bytes, rate: int, fmt: Format) -> list[bytes]:
    size = rate * FRAME_MS // 1000 * 2
    frames = [pcm16[i : i + size] for i in range(0, len(pcm16), size)]
    if fmt.encoding == "pcmu":
        return [pcm16_to_pcmu(frame) for frame in frames]
    return frames


async def speak(
    client: VrtClient,
    conversation: Conversation,
    pcm16: bytes,
    rate: int,
    fmt: Format,
    *,
    realtime: bool = True,
) -> None:
    """Stream ``pcm16`` (at ``rate``, which must be the session's input rate) as 20 ms
    input frames, in real time unless ``realtime`` is False; record when the last frame
    holding speech was sent."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    pcm_format = Format(encoding="pcm16", sample_rate=rate)
    size = rate * FRAME_MS // 1000 * 2
    for k, frame in enumerate(_frames(pcm16, rate, fmt)):
        if realtime:
            delay = start + k * FRAME_MS / 1000 - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
        client.send_audio(frame)
        if rms(pcm16[k * size : (k + 1) * size], pcm_format) >= _SPEECH_RMS:
            conversation.speech_end = time.monotonic()
            conversation.first_audio = None


async def listen(client: VrtClient, conversation: Conversation, *, echo: bool = False) -> None:
    """Record every event until cancelled (printing them with ``echo``)."""
    shown = Transcript()
    async for event in client.events():
        now = time.monotonic()
        if isinstance(event, AudioChunk):
            conversation.audio.setdefault(event.item_id, bytearray()).extend(event.payload)
            if conversation.speech_end is not None and conversation.first_audio is None:
                conversation.first_audio = now
                if echo:
                    shown.line(f"  (voice to voice {conversation.latency_ms:.0f} ms)")
            continue
        conversation.events.append((now, event))
        if echo:
            shown.show(event)
        if isinstance(event, SessionClosed | SessionFailed):
            return


class Transcript:
    """What ``--wav`` and ``--voice`` print: the user's transcripts, the agent's reply
    once (its text chunks on one line; its transcript only when no text came), turn
    states; server text stripped of terminal controls (vrt.terminal_text)."""

    def __init__(self) -> None:
        self._open: str | None = None  # the turn whose text line is open
        self._texted: list[str] = []  # the latest turns whose text was shown

    def line(self, text: str) -> None:
        if self._open is not None:
            print(flush=True)
            self._open = None
        print(text, flush=True)

    def show(self, event: Event) -> None:
        if isinstance(event, TextReceived):
            turn = event.turn_id or ""
            if self._open != turn:
                if self._open is not None:
                    print()
                print("agent: ", end="")
                self._open = turn
                if event.turn_id and event.turn_id not in self._texted:
                    self._texted = [*self._texted[-15:], event.turn_id]
            print(printable(event.text), end="", flush=True)
            return
        self._other(event)

    def _other(self, event: Event) -> None:
        if isinstance(event, TranscriptReceived):
            if event.role == "agent" and (not event.final or event.turn_id in self._texted):
                return
            mark = "" if event.final else " …"
            self.line(f"{event.role}: {printable(event.text)}{mark}")
        elif isinstance(event, TurnChanged):
            self.line(f"  [{event.state}]")
        elif isinstance(event, AudioStarted):
            self.line("  (speaking)")
        elif isinstance(event, InterruptedEpoch):
            self.line("  (interrupted)")
        elif isinstance(event, ErrorReceived):
            self.line(f"error {printable(event.code)}: {printable(event.message)}")
        elif isinstance(event, SessionFailed):
            self.line(f"session failed: {printable(event.code)}: {printable(event.message)}")
        elif isinstance(event, SessionClosed):
            self.line(f"session ended: {printable(event.reason)}")


async def _idle_after_reply(conversation: Conversation, timeout: float) -> None:
    """Wait until a turn that spoke went idle (or ``timeout``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        spoke = False
        for _, event in conversation.events:
            if isinstance(event, AudioStarted):
                spoke = True
            elif spoke and isinstance(event, TurnChanged) and event.state == "idle":
                return
        await asyncio.sleep(0.05)


async def converse(
    url: str,
    pcm16: bytes,
    rate: int,
    *,
    auth: str | None = None,
    output: Format | None = None,
    encoding: str = "pcm16",
    tail_ms: int = 1000,
    reply_timeout: float = 20.0,
    echo: bool = False,
) -> Conversation:
    """One spoken exchange: connect, stream ``pcm16`` and ``tail_ms`` of silence in real
    time, wait for the spoken reply to end."""
    if encoding == "pcmu" and rate != 8000:
        raise ValueError("pcmu input is 8000 Hz")
    fmt = (
        Format(encoding="pcmu")
        if encoding == "pcmu"
        else Format(encoding="pcm16", sample_rate=rate)
    )
    conversation = Conversation()
    async with VrtClient(url, auth=auth, input=fmt, output=output) as client:
        ready = next(
            (event for event in [await client.next_event(10.0)] if isinstance(event, Connected)),
            None,
        )
        if ready is None:
            raise RuntimeError("the server did not open a session")
        if ready.input.encoding != fmt.encoding or ready.input.rate != fmt.rate:
            raise RuntimeError(f"the server takes {ready.input}, not {fmt}: convert the WAV")
        conversation.output = ready.output
        listener = asyncio.create_task(listen(client, conversation, echo=echo))
        try:
            silence = bytes(rate * tail_ms // 1000 * 2)
            await speak(client, conversation, pcm16 + silence, rate, fmt)
            await _idle_after_reply(conversation, reply_timeout)
        finally:
            listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await listener
    return conversation


def run_wav(url: str, path: Path, *, auth: str | None, save_reply: Path | None) -> int:
    """``vrt chat URL --wav FILE``: the exit code."""
    try:
        pcm16, rate = read_wav(path)
    except (OSError, ValueError) as exc:
        print(f"vrt: {exc}", file=sys.stderr)
        return 2
    encoding = "pcmu" if rate == 8000 else "pcm16"
    try:
        conversation = asyncio.run(
            converse(url, pcm16, rate, auth=auth, encoding=encoding, echo=True)
        )
    except (OSError, RuntimeError) as exc:
        print(f"vrt: {exc}", file=sys.stderr)
        return 1
    if save_reply is not None:
        reply, reply_rate = conversation.reply_pcm16()
        _write_wav(save_reply, reply, reply_rate)
        print(f"reply audio saved to {save_reply}")
    return 0 if conversation.first_audio is not None else 1


async def _voice_chat(url: str, auth: str | None, push_to_talk: bool) -> int:
    from ..client.audio import Microphone, Speaker

    conversation = Conversation()
    shown = Transcript()
    async with VrtClient(url, auth=auth) as client:
        event = await client.next_event(10.0)
        if not isinstance(event, Connected):
            print(f"vrt: no session: {event}", file=sys.stderr)
            return 1
        talking = asyncio.Event()
        if not push_to_talk:
            talking.set()

        def send(payload: bytes) -> None:
            if talking.is_set():
                client.send_audio(payload)

        speaker = Speaker(event.output)
        microphone = Microphone(event.input, send)
        how = "Enter starts and ends speaking" if push_to_talk else "speak"
        print(f"{how}; use headphones, or the agent hears itself (Ctrl-C quits)")
        loop = asyncio.get_running_loop()

        def toggle() -> None:
            sys.stdin.readline()
            if talking.is_set():
                talking.clear()
                # The server hears the end of the utterance in silence (its hangover).
                for _ in range(25):
                    client.send_audio(bytes(event.input.rate * FRAME_MS // 1000 * 2))
                print("  (sent)")
            else:
                talking.set()
                print("  (talking… Enter to send)")

        if push_to_talk:
            loop.add_reader(sys.stdin, toggle)
        try:
            async for item in client.events():
                if isinstance(item, AudioChunk):
                    speaker.play(item.item_id, item.payload, loop.time())
                    continue
                if isinstance(item, PlaybackStop | InterruptedEpoch):
                    speaker.stop()
                conversation.events.append((time.monotonic(), item))
                shown.show(item)
                if isinstance(item, SessionClosed | SessionFailed):
                    return 1
        finally:
            if push_to_talk:
                loop.remove_reader(sys.stdin)
            microphone.close()
            speaker.close()
    return 0


def run_voice_chat(url: str, *, auth: str | None, push_to_talk: bool) -> int:
    """``vrt chat URL --voice [--push-to-talk]``: the exit code."""
    import importlib.util

    if importlib.util.find_spec("sounddevice") is None:
        print("vrt: --voice needs sounddevice: pip install 'vrealtime[audio]'", file=sys.stderr)
        return 2
    with contextlib.suppress(KeyboardInterrupt):
        return asyncio.run(_voice_chat(url, auth, push_to_talk))
    return 0
