"""The voice agent's word error rate, against faster-whisper's standard decoding of the
same audio with the same bundled model (``python -m bench.voice --wer``).

Speech is made at run time by two synthesisers unrelated to the recogniser: Debian's
``espeak-ng`` (voices ``en-us`` at 160 wpm, ``en-gb`` at 175, ``en+f3`` at 190) and
the bundled Piper voice, each at its own 22,050 Hz. Every text of :data:`TEXTS`
(scripted-agent commands and ordinary sentences) is spoken by one voice in turn, with
0, 0.3 or 0.6 s of silence before it (a WAV sent from its first sample has none; a
microphone has some) and 1 s after, and heard three ways: clean, and with white noise
at 20 and 10 dB SNR (speech RMS over noise RMS; the noise is seeded and covers the
whole clip).

* **The agent's pipeline**: the clip as a client sends it (pcm16 resampled to 24 kHz,
  20 ms frames) through the agent's own input decoder, turn detector and recogniser
  (:meth:`SpeechToText.start`: the speculative final decoded at the pause). Frames
  are handed over at once, except while the detector hears a pause: then they come
  in real time, so that the speculative final overlaps the hangover as it does in a
  session. *After the end*: from the end of the turn to the final transcript. Every
  final of the clip counts (speech the detector splits in two gives two).
* **Standard decoding**: ``WhisperModel.transcribe(audio)`` with its default options
  (30 s window, beam 5, timestamps, temperature fallback) on the clip resampled to
  16 kHz: what a user of faster-whisper gets. Its time is the whole decode.

Partial transcripts are off in both (they change no final; they only share the
decoding thread).
"""

from __future__ import annotations

import asyncio
import importlib
import io
import subprocess
import time
import wave
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from vrt.voice.whisper import WhisperStt

Audio = npt.NDArray[np.float32]

#: The texts: the scripted agent's commands as a user would say them, and sentences.
TEXTS: Final = (
    "echo good morning",
    "echo hello there",
    "echo how are you",
    "echo what time is it",
    "echo the weather is nice today",
    "echo I would like a cup of tea",
    "echo please call me back later",
    "echo see you tomorrow",
    "echo thank you very much",
    "echo the meeting starts at noon",
    "echo hello world",
    "echo turn left at the next corner",
    "echo my name is Alice",
    "echo the train is late again",
    "echo open the window",
    "echo good night and sleep well",
    "speak five hundred",
    "burst three",
    "history",
    "context",
    "what time is it",
    "please add milk and eggs to the shopping list",
    "turn on the lights in the kitchen",
    "how is the weather today",
    "set a timer for ten minutes",
    "play some music in the living room",
    "what is the capital of France",
    "remind me to call my mother tomorrow",
    "open the garage door",
    "how many days are left until Friday",
    "book a table for two at seven",
    "send a message to the team",
    "what is on my calendar this afternoon",
    "turn the volume down please",
    "tell me a short story about a dragon",
    "how far is the nearest train station",
    "stop the music",
    "good morning how are you",
    "find a recipe for pancakes",
    "close the window in the bedroom",
    "call a taxi to the airport",
    "read me the news headlines",
    "the quick brown fox jumps over the lazy dog",
    "I left my keys on the kitchen table",
    "can you help me with my homework",
    "the store closes at nine tonight",
    "we should leave before the rain starts",
    "my flight was cancelled this morning",
    "where is the closest pharmacy",
    "water the plants in the garden",
    "the children are playing outside",
    "please speak a little more slowly",
    "how much does this jacket cost",
    "lock the front door",
    "is it going to snow this weekend",
    "I need to buy a new phone",
    "the coffee is too hot to drink",
    "show me pictures of the beach",
    "add a meeting with John on Monday",
    "what is the score of the game",
)

#: (synthesiser, voice, words per minute)
VOICES: Final = (
    ("espeak", "en-us", 160),
    ("espeak", "en-gb", 175),
    ("espeak", "en+f3", 190),
    ("piper", "joe-medium", 0),
)
SNRS: Final = (None, 20.0, 10.0)
SOURCE_RATE: Final = 22050
CLIENT_RATE: Final = 24000
RATE: Final = 16000


@dataclass(frozen=True, slots=True)
class Clip:
    text: str
    voice: str
    snr: float | None
    audio: Audio  # at SOURCE_RATE, silence and noise included


def espeak(text: str, voice: str, wpm: int) -> Audio:
    """espeak-ng's speech of ``text`` at its own 22,050 Hz."""
    done = subprocess.run(
        ["espeak-ng", "-v", voice, "-s", str(wpm), "--stdout", text],
        capture_output=True,
        check=True,
    )
    with wave.open(io.BytesIO(done.stdout)) as recording:
        assert recording.getframerate() == SOURCE_RATE
        pcm = recording.readframes(recording.getnframes())
    return (np.frombuffer(pcm, "<i2").astype(np.float32) / 32768.0).astype(np.float32)


def piper(text: str) -> Audio:
    """The bundled Piper voice's speech of ``text`` (22,050 Hz)."""
    from vrt.voice.piper import PiperTts

    tts = _piper_voice()
    assert isinstance(tts, PiperTts)
    assert tts.sample_rate == SOURCE_RATE

    async def run() -> Audio:
        return np.concatenate([chunk async for chunk in tts.synthesize(text)])

    return asyncio.run(run())


_PIPER: list[Any] = []


def _piper_voice() -> Any:
    from vrt.voice.piper import PiperTts

    if not _PIPER:
        _PIPER.append(PiperTts(threads=1))
    return _PIPER[0]


def with_noise(speech: Audio, lead_s: float, snr: float | None, seed: int) -> Audio:
    """``speech`` with ``lead_s`` of silence before it and 1 s after, and white noise at
    ``snr`` dB below the speech's RMS over the whole clip (none when ``snr`` is None)."""
    lead = np.zeros(int(lead_s * SOURCE_RATE), np.float32)
    clip = np.concatenate((lead, speech, np.zeros(SOURCE_RATE, np.float32)))
    if snr is None:
        return clip
    active = speech[np.abs(speech) > 0.01 * np.max(np.abs(speech))]
    level = float(np.sqrt(np.mean(active**2))) / 10 ** (snr / 20)
    noise = np.random.default_rng(seed).standard_normal(len(clip)) * level
    return np.clip(clip + noise, -1.0, 1.0).astype(np.float32)


def clips(count: int | None = None) -> list[Clip]:
    """Every text in one voice (in turn), clean and at each SNR."""
    out: list[Clip] = []
    for index, text in enumerate(TEXTS[:count]):
        engine, voice, wpm = VOICES[index % len(VOICES)]
        speech = piper(text) if engine == "piper" else espeak(text, voice, wpm)
        lead = 0.3 * (index % 3)
        for snr in SNRS:
            audio = with_noise(speech, lead, snr, seed=index)
            out.append(Clip(text, f"{engine}:{voice}", snr, audio))
    return out


def client_frames(audio: Audio) -> list[bytes]:
    """The clip as a client sends it: pcm16 at 24 kHz (resampled as ``vrt chat --wav``
    does), in 20 ms frames."""
    import soxr

    wide = soxr.resample(audio, SOURCE_RATE, CLIENT_RATE)
    pcm = (np.clip(wide, -1, 1) * 32767).round().astype("<i2").tobytes()
    step = CLIENT_RATE // 50 * 2
    return [pcm[i : i + step] for i in range(0, len(pcm), step)]


async def pipeline(stt: WhisperStt, vad: Any, frames: list[bytes]) -> tuple[str, list[float]]:
    """The agent's recognition of the frames: its finals joined, and the wait from each
    end of turn to its final (ms)."""
    from vrt.protocol.messages import Format
    from vrt.voice.codec import InputDecoder
    from vrt.voice.stages import Recognition
    from vrt.voice.turns import TurnDetector

    decoder = InputDecoder(Format(encoding="pcm16", sample_rate=CLIENT_RATE), RATE)
    detector = TurnDetector(vad.stream())
    recognition: Recognition | None = None
    paused = False
    texts: list[str] = []
    waits: list[float] = []
    loop = asyncio.get_running_loop()
    for frame in frames:
        if paused:
            await asyncio.sleep(0.02)  # a pause lasts in real time: the guess overlaps it
        for event in detector.feed(decoder.decode(frame)):
            if event.kind == "start":
                assert event.audio is not None
                recognition = stt.start(lambda text: None)
                recognition.feed(event.audio)
            elif recognition is None:
                continue
            elif event.kind == "audio":
                assert event.audio is not None
                recognition.feed(event.audio)
            elif event.kind == "pause":
                paused = True
                recognition.pause()
            elif event.kind == "resume":
                paused = False
                recognition.resume()
            else:
                paused = False
                start = loop.time()
                text = await recognition.final()
                waits.append((loop.time() - start) * 1000)
                recognition = None
                if text:
                    texts.append(text)
    return " ".join(texts), waits


def standard(model: Any, audio: Audio) -> tuple[str, float]:
    """faster-whisper's standard decoding of the clip, and its time (ms)."""
    import soxr

    narrow = soxr.resample(audio, SOURCE_RATE, RATE).astype(np.float32)
    start = time.perf_counter()
    segments, _ = model.transcribe(narrow)
    text = " ".join(segment.text.strip() for segment in segments)
    return text, (time.perf_counter() - start) * 1000


def run(count: int | None = None, *, reference: bool = True, beams: int = 5) -> dict[str, Any]:
    """The word error rate of the agent's pipeline and of standard decoding, overall, by
    noise and by voice, with latencies; and every clip's transcripts."""
    import sys

    from .procs import ROOT

    sys.path.insert(0, str(ROOT / "tests" / "voice"))
    from faster_whisper import WhisperModel

    # The tests' normalisation and word edit distance (tests/voice/speech.py).
    errors = importlib.import_module("speech").errors

    from vrt.voice.silero import SileroVad
    from vrt.voice.whisper import WhisperStt

    stt = WhisperStt(partial_every=None, beams=beams)
    vad = SileroVad()
    # The same bundled model files, loaded as a user of faster-whisper would.
    model = WhisperModel(str(stt.folder), device="cpu", compute_type="int8", cpu_threads=2)
    made = clips(count)
    decodes: list[float] = []
    transcribe = stt.transcribe

    def timed(audio: Audio, **options: Any) -> str:
        start = time.perf_counter()
        try:
            return transcribe(audio, **options)
        finally:
            decodes.append((time.perf_counter() - start) * 1000)

    setattr(stt, "transcribe", timed)  # noqa: B010 (each decode of the pipeline, timed)
    rows: list[dict[str, Any]] = []
    for number, clip in enumerate(made, 1):
        decodes.clear()
        heard, waits = asyncio.run(pipeline(stt, vad, client_frames(clip.audio)))
        row: dict[str, Any] = {
            "text": clip.text,
            "voice": clip.voice,
            "snr": clip.snr,
            "pipeline": heard,
            "pipeline_errors": errors(clip.text, heard)[0],
            "words": errors(clip.text, "")[1],
            "after_end_ms": waits,
            "decode_ms": decodes[-1] if decodes else 0.0,
        }
        if reference:
            text, ms = standard(model, clip.audio)
            row |= {"standard": text, "standard_errors": errors(clip.text, text)[0]}
            row["standard_ms"] = ms
        rows.append(row)
        print(f"{number}/{len(made)} {clip.voice} {clip.snr} {clip.text!r}: {row}", flush=True)
    return {"summary": {"beams": beams} | summarise(rows, reference), "clips": rows}


def _wer(rows: list[dict[str, Any]], key: str) -> float:
    return round(sum(r[f"{key}_errors"] for r in rows) / max(1, sum(r["words"] for r in rows)), 3)


def _ms(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    if not ordered:
        return {}
    return {
        "p50": round(ordered[len(ordered) // 2], 1),
        "p90": round(ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))], 1),
    }


def summarise(rows: list[dict[str, Any]], reference: bool) -> dict[str, Any]:
    systems = ["pipeline", "standard"] if reference else ["pipeline"]
    groups: dict[str, list[dict[str, Any]]] = {"all": rows}
    for snr in SNRS:
        groups[f"snr {snr}" if snr is not None else "clean"] = [r for r in rows if r["snr"] == snr]
    for _, voice, _ in VOICES:
        groups[voice] = [r for r in rows if r["voice"].endswith(voice)]
    out: dict[str, Any] = {
        "clips": len(rows),
        "words": sum(r["words"] for r in rows),
        "wer": {name: {s: _wer(group, s) for s in systems} for name, group in groups.items()},
        "empty_pipeline": sum(1 for r in rows if not r["pipeline"]),
        "pipeline_after_end_ms": _ms([w for r in rows for w in r["after_end_ms"]]),
        "pipeline_decode_ms": _ms([r["decode_ms"] for r in rows]),
    }
    if reference:
        out["standard_ms"] = _ms([r["standard_ms"] for r in rows])
        out["empty_standard"] = sum(1 for r in rows if not r["standard"])
    return out
