"""The offline voice agent's benchmark: voice-to-voice latency with the part each stage
takes, each stage's real-time factor, CPU per concurrent voice session, and barge-in.

    python -m bench.voice                 # everything, about 4 minutes
    python -m bench.voice --only latency,rtf --json out.json
    python -m bench.voice --smoke         # seconds: the runner works
    python -m bench.voice --wer           # word error rate against standard decoding
    python -m bench.voice --capacity 1,2,4,6 --seconds 60   # sessions taking turns

Speech is the test corpus (``tests/voice/speech``: 24 utterances made by espeak-ng),
streamed as 20 ms frames in real time. Method and results: ``docs/voice.md``.

* ``latency``: one session at a time, in this process (server and client share the
  event loop and the monotonic clock, so the server's per-stage timestamps and the
  client's line up). Voice to voice is the client's: the last input frame holding
  speech was sent → the reply's first output frame arrived. Its parts come from the
  agent's :class:`~vrt.voice.agent.Timing`.
* ``rtf``: each stage alone on the corpus: compute time over audio time.
* ``sessions``: ``vrt serve`` in its own process, N sessions speaking at once (each its
  share of the corpus, over and over) for a fixed time; the server's CPU (from
  ``/proc``) per session, the latency at each N, and so how many sessions a core holds
  in real time.
* ``barge-in``: while the agent speaks a long reply, an utterance starts: its first
  frame → ``interrupted`` at the client (the client stops playback then, §6.2).
* ``--wer``: the word error rate of the agent's recognition against faster-whisper's
  standard decoding, on speech made at run time (``bench/voice_wer.py``).
* ``--capacity``: sessions that take turns as people do (``bench/voice_capacity.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import wave
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .procs import ROOT, cpu_s, machine, machine_busy_s
from .voice_server import percentiles, serve_voice

if TYPE_CHECKING:
    from vrt.voice.chat import Conversation

SPEECH = ROOT / "tests" / "voice" / "speech"


def _corpus() -> list[tuple[str, bytes]]:
    manifest: dict[str, str] = json.loads((SPEECH / "manifest.json").read_text())
    out = []
    for name, words in manifest.items():
        with wave.open(str(SPEECH / name), "rb") as recording:
            out.append((words, recording.readframes(recording.getnframes())))
    return out


# -- latency --


async def _latency(
    utterances: list[tuple[str, bytes]], options: dict[str, str], first_clause_words: float | None
) -> dict[str, Any]:
    from vrt.agents import SessionInfo
    from vrt.agents.scripted import ScriptedAgent
    from vrt.server import VrtServer
    from vrt.voice.agent import VoiceAgent, VoiceConfig
    from vrt.voice.chat import converse
    from vrt.voice.options import build_stages

    stages = build_stages(options)
    agents: list[VoiceAgent] = []
    config = VoiceConfig()
    if first_clause_words is not None:
        config = VoiceConfig(first_clause_words=first_clause_words)

    def factory(info: SessionInfo) -> VoiceAgent:
        del info
        agent = VoiceAgent(stages, ScriptedAgent(), config)
        agents.append(agent)
        return agent

    server = VrtServer(factory)
    url = await server.start("127.0.0.1", 0)
    parts: dict[str, list[float]] = {
        "voice_to_voice": [],
        "input_to_agent": [],
        "end_of_turn_wait": [],
        "final_transcript_after_end": [],
        "brain": [],
        "first_clause_synthesis": [],
        "frame_out": [],
        "to_client": [],
        "pauses_per_reply": [],
        "longest_pause": [],
    }
    try:
        await converse(url, utterances[0][1], 16000, tail_ms=600)  # warm every path
        for _, pcm in utterances:
            conversation = await converse(url, pcm, 16000, tail_ms=600)
            timing = agents[-1].timings[-1] if agents[-1].timings else None
            latency = conversation.latency_ms
            if (
                latency is None
                or timing is None
                or None
                in (
                    timing.final,
                    timing.reply,
                    timing.synthesized,
                    timing.first_frame,
                )
            ):
                continue
            assert conversation.speech_end is not None
            assert conversation.first_audio is not None
            assert timing.final is not None
            assert timing.reply is not None
            assert timing.synthesized is not None
            assert timing.first_frame is not None
            ms = 1000.0
            parts["voice_to_voice"].append(latency)
            parts["input_to_agent"].append((timing.last_voice - conversation.speech_end) * ms)
            parts["end_of_turn_wait"].append((timing.end - timing.last_voice) * ms)
            parts["final_transcript_after_end"].append((timing.final - timing.end) * ms)
            parts["brain"].append((timing.reply - timing.final) * ms)
            parts["first_clause_synthesis"].append((timing.synthesized - timing.reply) * ms)
            parts["frame_out"].append((timing.first_frame - timing.synthesized) * ms)
            parts["to_client"].append((conversation.first_audio - timing.first_frame) * ms)
            total, longest = _pauses(conversation)
            parts["pauses_per_reply"].append(total)
            parts["longest_pause"].append(longest)
    finally:
        await server.close()
    return {"first_clause_words": config.first_clause_words} | {
        name: percentiles(values) for name, values in parts.items()
    }


def _pauses(conversation: Conversation) -> tuple[float, float]:
    """Silences inside the reply, in ms, as a client playing each chunk as soon as it
    arrives would hear them: a chunk arriving after the audio before it has finished
    playing leaves a pause (the total per reply, and the longest)."""
    from vrt.audio import frame_bytes
    from vrt.client import AudioChunk

    assert conversation.output is not None
    assert conversation.first_audio is not None
    bytes_per_ms = frame_bytes(conversation.output) / 20
    played_until: float | None = None
    total = longest = 0.0
    for at, event in conversation.events:
        if not isinstance(event, AudioChunk) or at < conversation.first_audio:
            continue
        if played_until is not None and at > played_until:
            gap = (at - played_until) * 1000
            total += gap
            longest = max(longest, gap)
            played_until = at
        start = at if played_until is None else played_until
        played_until = start + len(event.payload) / bytes_per_ms / 1000
    return round(total, 1), round(longest, 1)


# -- real-time factors --


def _rtf(utterances: list[tuple[str, bytes]]) -> dict[str, Any]:
    from vrt.voice.options import build_stages
    from vrt.voice.turns import TurnDetector

    stages = build_stages({})
    audio = [(np.frombuffer(pcm, dtype="<i2") / 32768).astype(np.float32) for _, pcm in utterances]
    seconds = sum(len(a) for a in audio) / 16000
    detector = TurnDetector(stages.vad.stream())
    start = time.process_time()
    for samples in audio:
        for offset in range(0, len(samples), 320):
            detector.feed(samples[offset : offset + 320])
    vad = time.process_time() - start
    from vrt.voice.whisper import WhisperStt

    stt = stages.stt
    assert isinstance(stt, WhisperStt)
    start, cpu = time.perf_counter(), time.process_time()
    texts = [stt.transcribe(samples) for samples in audio]
    stt_wall, stt_cpu = time.perf_counter() - start, time.process_time() - cpu
    tts = stages.tts
    spoken = 0.0

    async def synthesise_all() -> float:
        total = 0
        for text in texts:
            async for chunk in tts.synthesize(text):
                total += len(chunk)
        return total / tts.sample_rate

    start, cpu = time.perf_counter(), time.process_time()
    spoken = asyncio.run(synthesise_all())
    tts_wall, tts_cpu = time.perf_counter() - start, time.process_time() - cpu
    return {
        "audio_s": round(seconds, 1),
        "vad_cpu_rtf": round(vad / seconds, 4),
        "stt_wall_rtf": round(stt_wall / seconds, 3),
        "stt_cpu_rtf": round(stt_cpu / seconds, 3),
        "stt_ms_per_utterance": round(stt_wall / len(audio) * 1000, 1),
        "tts_audio_s": round(spoken, 1),
        "tts_wall_rtf": round(tts_wall / spoken, 3),
        "tts_cpu_rtf": round(tts_cpu / spoken, 3),
        "tts_ms_per_reply": round(tts_wall / len(texts) * 1000, 1),
    }


# -- concurrent sessions --


async def _speaker(
    url: str, utterances: list[tuple[str, bytes]], until: float, out: list[float]
) -> None:
    from vrt.voice.chat import converse

    k = 0
    while time.monotonic() < until:
        _, pcm = utterances[k % len(utterances)]
        conversation = await converse(url, pcm, 16000, tail_ms=600)
        if conversation.latency_ms is not None:
            out.append(conversation.latency_ms)
        k += 1


def _sessions(utterances: list[tuple[str, bytes]], counts: list[int], seconds: float) -> Any:
    sys.path.insert(0, str(ROOT / "tests"))
    process, url = serve_voice()
    results = []
    try:
        time.sleep(1.0)
        for count in counts:
            latencies: list[float] = []
            cpu0, busy0, wall0 = cpu_s(process.pid), machine_busy_s(), time.monotonic()
            until = wall0 + seconds

            async def run(
                count: int = count, until: float = until, out: list[float] = latencies
            ) -> None:
                shares = [utterances[k::count] for k in range(count)]
                await asyncio.gather(*(_speaker(url, s, until, out) for s in shares))

            asyncio.run(run())
            wall = time.monotonic() - wall0
            server_cores = (cpu_s(process.pid) - cpu0) / wall
            machine_cores = (machine_busy_s() - busy0) / wall
            results.append(
                {
                    "sessions": count,
                    "server_cores": round(server_cores, 3),
                    "server_cores_per_session": round(server_cores / count, 3),
                    "machine_cores": round(machine_cores, 2),
                    "exchanges": len(latencies),
                    "voice_to_voice_ms": percentiles(latencies),
                }
            )
            print(json.dumps(results[-1]), flush=True)
    finally:
        process.terminate()
        process.wait(10)
    return results


# -- barge-in --


async def _barge_in(
    utterances: list[tuple[str, bytes]], trials: int, options: dict[str, str]
) -> dict[str, Any]:
    from vrt.client import AudioStarted, InterruptedEpoch, VrtClient
    from vrt.protocol.messages import Format
    from vrt.server import VrtServer
    from vrt.voice.options import setup

    server = VrtServer(setup(options))
    url = await server.start("127.0.0.1", 0)
    fmt = Format(encoding="pcm16", sample_rate=16000)
    delays: list[float] = []
    reply = "echo " + " ".join(["this is a long answer that the user will cut short"] * 4)
    try:
        for k in range(trials):
            _, pcm = utterances[k % len(utterances)]
            async with VrtClient(url, input=fmt) as client:
                await client.next_event(10.0)
                await client.send_text(reply)
                while not isinstance(await client.next_event(20.0), AudioStarted):
                    pass
                await asyncio.sleep(0.8)
                onset = time.monotonic()
                loop = asyncio.get_running_loop()
                start = loop.time()
                interrupted: float | None = None
                frames = [pcm[i : i + 640] for i in range(0, len(pcm), 640)]

                async def feed(
                    frames: list[bytes] = frames,
                    start: float = start,
                    loop: asyncio.AbstractEventLoop = loop,
                ) -> None:
                    for j, frame in enumerate(frames):
                        await asyncio.sleep(max(0.0, start + j * 0.02 - loop.time()))
                        client.send_audio(frame)

                feeding = asyncio.create_task(feed())
                try:
                    async with asyncio.timeout(10):
                        while interrupted is None:
                            if isinstance(await client.next_event(), InterruptedEpoch):
                                interrupted = time.monotonic()
                finally:
                    feeding.cancel()
                delays.append((interrupted - onset) * 1000)
    finally:
        await server.close()
    return percentiles(delays)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.voice", description=__doc__)
    parser.add_argument("--only", default="latency,rtf,sessions,barge-in")
    parser.add_argument(
        "--wer",
        action="store_true",
        help="the word error rate against standard decoding (bench/voice_wer.py)",
    )
    parser.add_argument("--wer-texts", type=int, default=None, help="the first N texts only")
    parser.add_argument("--wer-beams", type=int, default=5, help="beams of a final decode")
    parser.add_argument(
        "--capacity",
        default=None,
        metavar="N,N,...",
        help="sessions taking turns as people do, at each count (bench/voice_capacity.py)",
    )
    parser.add_argument("--smoke", action="store_true", help="a few utterances, seconds")
    parser.add_argument("--sessions", default="1,2,3,4", help="concurrent session counts")
    parser.add_argument("--seconds", type=float, default=30.0, help="per session count")
    parser.add_argument("--tts", default="piper", help="the synthesiser: piper or espeak")
    parser.add_argument(
        "--first-clause-words",
        type=float,
        default=None,
        help="words of a reply's first clause at most (default: VoiceConfig's)",
    )
    parser.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a stage option, as vrt serve's --agent-option (tts_threads=1); repeatable",
    )
    parser.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "voice.json")
    args = parser.parse_args(argv)
    if args.capacity:
        from .voice_capacity import capacity

        sys.path.insert(0, str(ROOT / "tests"))
        counts = [int(c) for c in args.capacity.split(",")]
        found = {
            "machine": machine(),
            "load_before": os.getloadavg(),
            "seconds": args.seconds,
            "capacity": capacity([pcm for _, pcm in _corpus()], counts, args.seconds),
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(found, indent=1) + "\n")
        print(f"written {args.json}")
        return 0
    if args.wer:
        from . import voice_wer

        texts = 4 if args.smoke else args.wer_texts
        wer = voice_wer.run(texts, beams=args.wer_beams) | {
            "machine": machine(),
            "load_before": os.getloadavg(),
        }
        print(json.dumps(wer["summary"], indent=1), flush=True)
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(wer, indent=1) + "\n")
        print(f"written {args.json}")
        return 0
    options = {"tts": args.tts} | dict(option.split("=", 1) for option in args.option)
    only = set(args.only.split(","))
    utterances = _corpus()
    if args.smoke:
        utterances = utterances[:2]
        args.sessions, args.seconds = "1", 5.0
    results: dict[str, Any] = {
        "machine": machine(),
        "tts": args.tts,
        "options": options,
        "load_before": os.getloadavg(),
    }
    busy0, wall0 = machine_busy_s(), time.monotonic()
    if "latency" in only:
        results["latency_ms"] = asyncio.run(_latency(utterances, options, args.first_clause_words))
        print(json.dumps({"latency_ms": results["latency_ms"]}, indent=1), flush=True)
    if "rtf" in only:
        results["rtf"] = _rtf(utterances)
        print(json.dumps({"rtf": results["rtf"]}, indent=1), flush=True)
    if "barge-in" in only:
        trials = 4 if args.smoke else 20
        results["barge_in_ms"] = asyncio.run(_barge_in(utterances, trials, options))
        print(json.dumps({"barge_in_ms": results["barge_in_ms"]}), flush=True)
    if "sessions" in only:
        counts = [int(c) for c in args.sessions.split(",")]
        results["sessions"] = _sessions(utterances, counts, args.seconds)
    results["load_after"] = os.getloadavg()
    results["machine_cores_busy"] = round(
        (machine_busy_s() - busy0) / (time.monotonic() - wall0), 2
    )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=1) + "\n")
    print(f"written {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
