"""Attacks on a vRT server, each with a bystander: what one hostile or broken client can
make the server keep or compute, measured (docs/reliability.md, "Attacks").

    python -m load --attack all            # every attack, one after the other
    python -m load --attack non-reading    # one of: see ATTACKS

Each attack starts ``vrt serve`` in a process of its own on a free port of 127.0.0.1,
opens a bystander session that sends a vRT ``ping`` every 20 ms and times the ``pong``,
runs the attack for ``--seconds``, and prints the bystander's round trips (p50, p99,
max, and how many pings went unanswered) and the server's resident memory before,
at its peak and after, with the bound the attack hits. Loopback only; every process
ends with the attack.

The voice attacks (``tiny-opus``, ``unspaced-text``, ``session-churn``,
``fast-speech`` (the speech corpus as pcmu at 30 times real time), ``many-speakers``
(ten sessions speaking in real time, taking turns), and ``voice-sessions``, a
thousand short honest sessions for the server's memory; ``voice-soak``, honest
sessions opening and ending for ``--seconds``, with the server's memory and open
files sampled every minute) run
against the default ``vrt serve`` (the voice agent) with a voice bystander instead: it
streams its microphone (silence, in real time) and types a line every second or so,
timing each spoken reply from the text sent to the reply's first audio frame. It runs
alone first (the baseline) and then during the attack, in the same run.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import multiprocessing
import os
import random
import resource
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import wave
from array import array
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import websockets
from websockets.asyncio.client import ClientConnection, connect

from vrt.audio import pcm16_to_pcmu

HOST: Final = "127.0.0.1"
PING_EVERY: Final = 0.02


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        port: int = probe.getsockname()[1]
        return port


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    url: str
    log: list[bytes] = field(default_factory=list)
    #: What the server logged, in bytes, read as it is written: a pipe left unread
    #: fills (64 KiB) and then blocks the server on its next log line.
    logged: list[int] = field(default_factory=lambda: [0])

    def __post_init__(self) -> None:
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        stream = self.process.stderr
        assert stream is not None
        while block := os.read(stream.fileno(), 1 << 16):
            self.logged[0] += len(block)

    @classmethod
    async def start(cls, *options: str, open_files: int | None = None) -> Server:
        port = free_port()

        def limit() -> None:
            if open_files is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (open_files, open_files))

        process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from vrt.cli import app; app()",
                "serve",
                "--port",
                str(port),
                *options,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            preexec_fn=limit,  # noqa: PLW1509 - no threads run in this process yet
        )
        for _ in range(200):
            with contextlib.suppress(OSError), socket.create_connection((HOST, port), 0.1):
                return cls(process, f"ws://{HOST}:{port}")
            if process.poll() is not None:  # it refused its options: say what it said
                assert process.stderr is not None
                said = process.stderr.read().decode(errors="replace").strip()
                raise RuntimeError(f"vrt serve did not start: {said}")
            await asyncio.sleep(0.05)
        process.kill()
        raise RuntimeError("vrt serve did not start")

    def stop(self) -> int:
        """Stop the server; the size of what it logged, in bytes."""
        self.process.send_signal(signal.SIGINT)
        self.process.send_signal(signal.SIGINT)  # a second signal: at once
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        time.sleep(0.2)  # the drain reads the last lines
        return self.logged[0]


async def hello(ws: ClientConnection, **members: Any) -> dict[str, Any]:
    await ws.send(json.dumps({"v": 1, "seq": 0, "type": "hello", **members}))
    while True:
        message = json.loads(await ws.recv())
        if message["type"] in ("ready", "error"):
            return dict(message)


class Bystander:
    """A session that pings every 20 ms and times each pong (§4.4), in a process of its
    own, so that the attackers' own work does not slow it."""

    def __init__(self, url: str) -> None:
        self._results: multiprocessing.Queue[dict[str, float]] = multiprocessing.Queue()
        self._stop = multiprocessing.Event()
        self._process = multiprocessing.Process(
            target=_bystander, args=(url, self._stop, self._results), daemon=True
        )

    def start(self) -> None:
        self._process.start()

    def stop(self) -> dict[str, float]:
        self._stop.set()
        try:
            return self._results.get(timeout=15)
        finally:
            self._process.join(5)


def _bystander(url: str, stop: Any, results: Any) -> None:
    async def run() -> dict[str, float]:
        rtts: list[float] = []
        lost = 0
        async with connect(url, compression=None, max_size=None) as ws:
            ready = await hello(ws)
            assert ready["type"] == "ready", ready
            ping = json.dumps({"v": 1, "seq": 0, "type": "ping"})
            while not stop.is_set():
                began = time.perf_counter()
                await ws.send(ping)
                try:
                    while True:
                        message = json.loads(await asyncio.wait_for(ws.recv(), 5.0))
                        if message["type"] == "pong":
                            break
                except TimeoutError:
                    lost += 1
                    continue
                rtts.append(time.perf_counter() - began)
                await asyncio.sleep(PING_EVERY)
        ms = sorted(1000 * rtt for rtt in rtts) or [float("nan")]
        return {
            "pings": len(rtts),
            "lost": lost,
            "p50_ms": round(statistics.median(ms), 2),
            "p99_ms": round(ms[min(len(ms) - 1, int(0.99 * len(ms)))], 2),
            "max_ms": round(ms[-1], 2),
        }

    results.put(asyncio.run(run()))


# --- the attacks -------------------------------------------------------------------------


async def non_reading(url: str, until: float) -> str:
    """20 clients ask for ~6 MB of replies each and never read them (issue 12, item 1)."""
    big = "x" * 60_000

    async def one() -> None:
        async with connect(url, compression=None, max_size=None) as ws:
            await hello(ws)
            ws.transport.pause_reading()  # never read another byte
            seq = 0
            with contextlib.suppress(Exception):  # the server aborts it: the point
                while time.monotonic() < until and seq < 100:
                    seq += 1
                    message = {"v": 1, "seq": seq, "type": "text", "text": f"echo {big}"}
                    await asyncio.wait_for(ws.send(json.dumps(message)), 2.0)
        await asyncio.sleep(max(0.0, until - time.monotonic()))

    await asyncio.gather(*(one() for _ in range(20)), return_exceptions=True)
    return "each connection: 1 MiB of buffered output, then aborted; its session parks"


async def connect_flood(url: str, until: float) -> str:
    """Plain TCP connections that send nothing, as many as the server takes, against a
    server whose open-file limit is 256 (issue 12, item 2)."""
    port = int(url.rsplit(":", 1)[1])
    held: list[socket.socket] = []
    refused = 0
    while time.monotonic() < until:
        for _ in range(50):
            raw = socket.socket()
            raw.setblocking(False)
            with contextlib.suppress(BlockingIOError, OSError):
                raw.connect((HOST, port))
            held.append(raw)
        await asyncio.sleep(0.05)
        alive = []
        for raw in held:
            try:
                if raw.recv(1024, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b"":
                    raise ConnectionResetError
            except BlockingIOError:
                alive.append(raw)
                continue
            except OSError:
                pass
            refused += 1
            raw.close()
        held = alive[-400:]
        for raw in alive[:-400]:
            raw.close()
    for raw in held:
        raw.close()
    return f"the connection cap (open files less headroom); {refused} connections refused or ended"


async def json_shapes(url: str, until: float) -> str:
    """Valid messages made expensive, as fast as one client can send them (issue 12,
    item 3): 1 MB of empty arrays and 150,000 duplicate keys (both past the bound on
    JSON values, refused before they are parsed), then the costliest shapes within the
    bound: 99,990 empty arrays, and 1,600 arrays nested 60 deep."""
    bodies = [
        "[" + ",".join(["[]"] * 300_000) + "]",
        "{" + ",".join(['"a":1'] * 150_000) + "}",
        "[" + ",".join(["[]"] * 99_990) + "]",
        "[" + ",".join(["[" * 60 + "]" * 60] * 1_600) + "]",
    ]
    sent = 0
    async with connect(url, compression=None, max_size=None) as ws:
        await hello(ws)
        seq = 0
        reader = asyncio.create_task(_drain(ws))
        with contextlib.suppress(websockets.ConnectionClosed):
            while time.monotonic() < until:
                seq += 1
                body = bodies[seq % len(bodies)]
                await ws.send(f'{{"v":1,"seq":{seq},"type":"context","context":{body}}}')
                sent += 1
        reader.cancel()
    return f"{sent} messages sent; the bound on JSON values, the read budget"


async def frame_flood(url: str, until: float) -> str:
    """Tiny ping frames, as fast as one client can write them (issue 12, item 3)."""
    sent = 0
    async with connect(url, compression=None, max_size=None) as ws:
        await hello(ws)
        reader = asyncio.create_task(_drain(ws))
        ping = '{"v":1,"seq":0,"type":"ping"}'
        with contextlib.suppress(websockets.ConnectionClosed):
            while time.monotonic() < until:
                for _ in range(100):
                    await ws.send(ping)
                sent += 100
        reader.cancel()
    return f"{sent} pings written; reading slowed to 512 frames/s, RATE_LIMITED beyond"


async def context_bloat(url: str, until: float) -> str:
    """30 sessions, each with the largest hello.context the server takes, made of empty
    arrays (issue 12, item 4)."""
    context: list[list[int]] = [[]] * 330_000  # ~1 MB of JSON, under max_state_bytes
    kept: list[ClientConnection] = []
    for _ in range(30):
        ws = await connect(url, compression=None, max_size=None)
        await hello(ws, context=context)
        kept.append(ws)
    await asyncio.sleep(max(0.0, until - time.monotonic()))
    for ws in kept:
        await ws.close()
    return "kept as JSON: about its size per session (max_state_bytes)"


async def no_hello(url: str, until: float) -> str:
    """500 WebSockets that never send hello and keep the socket busy with WebSocket
    pings (issue 12, item 5)."""
    conns: list[ClientConnection] = []
    for _ in range(500):
        with contextlib.suppress(Exception):
            conns.append(await connect(url, compression=None, ping_interval=0.5))
    await asyncio.sleep(max(0.0, until - time.monotonic()))
    open_now = sum(1 for ws in conns if ws.state.name == "OPEN")
    for ws in conns:
        with contextlib.suppress(Exception):
            await ws.close()
    return f"the hello deadline (10 s): {open_now} of {len(conns)} still open at the end"


async def _drain(ws: ClientConnection) -> None:
    with contextlib.suppress(Exception):
        async for _ in ws:
            pass


# --- the voice attacks (the default agent) ----------------------------------------------

#: What the voice bystander types: a short reply, one clause.
_BYSTANDER_LINE: Final = "echo good morning to you"
#: 20 ms of silence at 16 kHz, the bystander's microphone.
_SILENCE: Final = bytes(640)
#: A 14-byte Opus packet claiming 120 ms (TOC code 3, six 20 ms CELT frames, RFC 6716
#: §3.1): decoded, it is 120 ms of audio for the server to resample and judge.
_TINY_OPUS: Final = bytes([0xFB, 0x06]) + bytes(12)


def _audio_frame(seq: int, payload: bytes) -> bytes:
    return bytes([1]) + (seq & 0xFFFFFFFF).to_bytes(4, "big") + payload  # §8.1


class VoiceBystander(Bystander):
    """A voice session in a process of its own: microphone open (silence in real time),
    a typed line after each reply, the time from the line to its reply's first audio."""

    def __init__(self, url: str) -> None:
        self._results = multiprocessing.Queue()
        self._stop = multiprocessing.Event()
        self._process = multiprocessing.Process(
            target=_voice_bystander, args=(url, self._stop, self._results), daemon=True
        )


def _voice_bystander(url: str, stop: Any, results: Any) -> None:
    async def microphone(ws: ClientConnection) -> None:
        began = time.perf_counter()
        seq = 0
        with contextlib.suppress(websockets.ConnectionClosed):
            while not stop.is_set():
                await ws.send(_audio_frame(seq, _SILENCE))
                seq += 1
                await asyncio.sleep(max(0.0, began + seq * 0.02 - time.perf_counter()))

    async def session(replies: list[float]) -> int:
        """One connection's exchanges until stopped; how many replies were lost."""
        lost = 0
        async with connect(url, compression=None, max_size=None) as ws:
            ready = await hello(ws, input={"encoding": "pcm16", "sampleRate": 16000})
            assert ready["type"] == "ready", ready
            mic = asyncio.create_task(microphone(ws))
            seq = last = 0
            while not stop.is_set():
                seq += 1
                text = {"v": 1, "seq": seq, "type": "text", "text": _BYSTANDER_LINE}
                began = time.perf_counter()
                await ws.send(json.dumps(text))
                heard: float | None = None
                try:
                    async with asyncio.timeout(15.0):
                        while True:
                            data = await ws.recv()
                            if isinstance(data, bytes):
                                if heard is None and data[:1] == b"\x02":
                                    heard = time.perf_counter() - began
                                continue
                            message = json.loads(data)
                            last = max(last, message.get("seq", 0))
                            if message["type"] == "turn.state" and message["state"] == "idle":
                                break
                except TimeoutError:
                    lost += 1
                    continue
                if heard is None:
                    lost += 1
                else:
                    replies.append(heard)
                await ws.send(json.dumps({"v": 1, "seq": 0, "type": "ack", "upTo": last}))
                await asyncio.sleep(0.5)
            mic.cancel()
        return lost

    async def run() -> dict[str, float]:
        replies: list[float] = []
        lost = 0
        while not stop.is_set():
            try:
                lost += await session(replies)
            except (OSError, websockets.WebSocketException):
                lost += 1  # the connection was cut or refused: the reply is lost
                await asyncio.sleep(0.5)
        ms = sorted(1000 * reply for reply in replies) or [float("nan")]
        return {
            "pings": len(replies),
            "lost": lost,
            "p50_ms": round(statistics.median(ms), 1),
            "p99_ms": round(ms[min(len(ms) - 1, int(0.99 * len(ms)))], 1),
            "max_ms": round(ms[-1], 1),
        }

    results.put(asyncio.run(run()))


async def tiny_opus(url: str, until: float) -> str:
    """One client sending Opus packets of 14 bytes claiming 120 ms each, as fast as it
    can write, and reconnecting whenever it is cut (issue 31, item 1)."""
    sent = sessions = 0
    while time.monotonic() < until:
        sessions += 1
        with contextlib.suppress(Exception):
            async with connect(url, compression=None, max_size=None) as ws:
                ready = await hello(ws, input={"encoding": "opus", "sampleRate": 48000})
                if ready["type"] != "ready":
                    await asyncio.sleep(0.1)
                    continue
                reader = asyncio.create_task(_drain(ws))
                seq = 0
                with contextlib.suppress(TimeoutError):  # the server stopped reading it
                    async with asyncio.timeout(max(0.0, until - time.monotonic())):
                        while True:
                            for _ in range(100):
                                await ws.send(_audio_frame(seq, _TINY_OPUS))
                                seq += 1
                            sent += 100
                reader.cancel()
    return (
        f"{sent} packets ({sent * 0.12:.0f} s of audio claimed) over {sessions} connection(s); "
        "charged by duration: about real time, 2 s saved, the rest dropped"
    )


async def unspaced_text(url: str, until: float) -> str:
    """Three clients each typing 2 KB with no whitespace (`hello.hello.…`), again after
    each reply (issue 31, item 2)."""
    text = "echo " + "hello." * 340
    replies = 0

    async def one() -> None:
        nonlocal replies
        async with connect(url, compression=None, max_size=None) as ws:
            await hello(ws)
            seq = 0
            while time.monotonic() < until:
                seq += 1
                await ws.send(json.dumps({"v": 1, "seq": seq, "type": "text", "text": text}))
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(max(0.1, until - time.monotonic())):
                        while True:
                            data = await ws.recv()
                            if isinstance(data, str) and '"idle"' in data:
                                replies += 1
                                break

    await asyncio.gather(*(one() for _ in range(3)), return_exceptions=True)
    return (
        f"{replies} replies; clauses of at most 100 characters, 2,000 characters spoken "
        "per reply (then a recoverable AGENT_ERROR)"
    )


async def session_churn(url: str, until: float) -> str:
    """One client opening voice sessions and dropping each at once, as fast as it can
    (issue 31, item 3)."""
    opened = refused = 0
    while time.monotonic() < until:
        with contextlib.suppress(Exception):
            async with connect(url, compression=None, max_size=None) as ws:
                ready = await hello(ws, input={"encoding": "pcm16", "sampleRate": 16000})
                if ready["type"] == "ready":
                    opened += 1
                    await ws.send(_audio_frame(0, _SILENCE))
                else:
                    refused += 1
    return (
        f"{opened} sessions opened and dropped, {refused} refused; each parks, the "
        "voice session limit evicts the parked longest"
    )


#: The test corpus: utterances spoken by espeak-ng, 16 kHz pcm16 (tests/voice/make_speech.py).
_SPEECH: Final = Path(__file__).resolve().parent.parent / "tests" / "voice" / "speech"


def _speech_pcm16() -> list[bytes]:
    """Each corpus utterance (16 kHz pcm16) followed by a second of silence: the
    detector ends each turn, and a final decode is queued for it."""
    out = []
    for name in sorted(json.loads((_SPEECH / "manifest.json").read_text())):
        with wave.open(str(_SPEECH / name), "rb") as recording:
            out.append(recording.readframes(recording.getnframes()) + bytes(32000))
    return out


def _to_pcmu(pcm16_16k: bytes) -> bytes:
    """16 kHz pcm16 as 8 kHz G.711 µ-law (pairs of samples averaged)."""
    samples = array("h", pcm16_16k[: len(pcm16_16k) // 4 * 4])
    halved = array("h", ((a + b) // 2 for a, b in zip(samples[::2], samples[1::2], strict=True)))
    return pcm16_to_pcmu(halved.tobytes())


async def _newcomer(url: str, until: float, probes: dict[str, int]) -> None:
    """A new voice session asked for every second once an attack has begun: admitted or
    refused at capacity (it leaves at once), counted in ``probes``."""
    await asyncio.sleep(3.0)
    while time.monotonic() < until:
        with contextlib.suppress(OSError, websockets.WebSocketException):
            async with connect(url, compression=None, max_size=None) as ws:
                ready = await hello(ws, input={"encoding": "pcm16", "sampleRate": 16000})
                probes["ready" if ready["type"] == "ready" else "refused"] += 1
        await asyncio.sleep(1.0)


async def fast_speech(url: str, until: float) -> str:
    """One client speaking the corpus as pcmu at 30 times real time, within every read
    budget, reconnecting after each cut (issue 31, item 4): as much recognition as one
    connection can ask for."""
    speech = b"".join(_to_pcmu(pcm) for pcm in _speech_pcm16())
    frame = 160  # 20 ms of 8 kHz µ-law
    sent = sessions = refused = 0
    probes = {"ready": 0, "refused": 0}
    newcomer = asyncio.create_task(_newcomer(url, until, probes))
    while time.monotonic() < until:
        with contextlib.suppress(Exception):
            async with connect(url, compression=None, max_size=None) as ws:
                ready = await hello(ws, input={"encoding": "pcmu", "sampleRate": 8000})
                if ready["type"] != "ready":
                    refused += 1
                    await asyncio.sleep(0.5)
                    continue
                sessions += 1
                reader = asyncio.create_task(_drain(ws))
                seq = offset = 0
                began = time.perf_counter()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(max(0.0, until - time.monotonic())):
                        while True:
                            for _ in range(30):  # 30 frames per 20 ms: 30x real time
                                if offset + frame > len(speech):
                                    offset = 0
                                await ws.send(_audio_frame(seq, speech[offset : offset + frame]))
                                offset += frame
                                seq += 1
                            sent += 30
                            wait = began + (sent / 30) * 0.02 - time.perf_counter()
                            await asyncio.sleep(max(0.0, wait))
                reader.cancel()
    await newcomer
    return (
        f"{sent * 0.02:.0f} s of speech sent in {sessions} session(s), {refused} refused "
        f"at capacity; charged by duration: about real time, the rest dropped; a newcomer "
        f"each second: {probes['ready']} admitted, {probes['refused']} refused at capacity"
    )


async def many_speakers(url: str, until: float) -> str:
    """Ten sessions speaking the corpus in real time, taking turns as people do: an
    utterance, its spoken reply heard to the end, a pause of 0.5-1.5 s, the next
    (issue 31, item 4); a session refused at capacity tries again a second later."""
    utterances = _speech_pcm16()
    exchanges = refused = errors = 0

    async def speaker(index: int) -> None:
        nonlocal exchanges, refused, errors
        rng = random.Random(index)
        while time.monotonic() < until:
            try:
                async with connect(url, compression=None, max_size=None) as ws:
                    ready = await hello(ws, input={"encoding": "pcm16", "sampleRate": 16000})
                    if ready["type"] != "ready":
                        refused += 1
                        await asyncio.sleep(1.0)
                        continue
                    seq = 0
                    while time.monotonic() < until:
                        pcm = utterances[rng.randrange(len(utterances))]
                        began = time.perf_counter()
                        for n, start in enumerate(range(0, len(pcm), 640)):
                            await ws.send(_audio_frame(seq, pcm[start : start + 640]))
                            seq += 1
                            await asyncio.sleep(max(0.0, began + n * 0.02 - time.perf_counter()))
                        async with asyncio.timeout(max(0.1, until - time.monotonic())):
                            while True:
                                data = await ws.recv()
                                if isinstance(data, str):
                                    message = json.loads(data)
                                    if message["type"] == "error":
                                        errors += 1
                                    if message.get("state") == "idle":
                                        exchanges += 1
                                        break
                        await asyncio.sleep(rng.uniform(0.5, 1.5))
            except (OSError, TimeoutError, websockets.WebSocketException):
                await asyncio.sleep(0.5)

    probes = {"ready": 0, "refused": 0}
    await asyncio.gather(
        _newcomer(url, until, probes), *(speaker(n) for n in range(10)), return_exceptions=True
    )
    return (
        f"{exchanges} exchanges over 10 speakers, {errors} error(s), {refused} speaker "
        f"session(s) refused at capacity; a newcomer each second: {probes['ready']} "
        f"admitted, {probes['refused']} refused at capacity"
    )


async def _voice_session(url: str, *, speak_frames: int = 1, drop: bool = False) -> None:
    """One short honest voice session: a second of microphone (``speak_frames`` 20 ms
    frames of silence), a typed line, its spoken reply heard to the end; then a close,
    or with ``drop`` the socket cut without one (the session parks, then expires)."""
    async with connect(url, compression=None, max_size=None) as ws:
        await hello(ws, input={"encoding": "pcm16", "sampleRate": 16000})
        for seq in range(speak_frames):
            await ws.send(_audio_frame(seq, _SILENCE))
        await ws.send(json.dumps({"v": 1, "seq": 1, "type": "text", "text": "echo hi"}))
        async with asyncio.timeout(30.0):
            while True:
                data = await ws.recv()
                if isinstance(data, str) and '"idle"' in data:
                    break
        if drop:
            ws.transport.abort()


async def voice_sessions(url: str, until: float) -> str:
    """A thousand short honest voice sessions (issue 34, item 1): each types a line,
    hears its spoken reply to the end and closes, four at a time; the server's RSS is
    sampled every hundred sessions. `until` is not used: the thousand run to the end."""
    del until
    pid = _served_pid(url)
    done = 0
    samples: list[float] = [rss_mb(pid)]

    async def worker(count: int) -> None:
        nonlocal done
        for _ in range(count):
            await _voice_session(url)
            done += 1
            if done % 100 == 0:
                samples.append(rss_mb(pid))

    await asyncio.gather(*(worker(250) for _ in range(4)))
    return f"{done} sessions; RSS every 100 sessions (MB): " + ", ".join(
        f"{sample:.0f}" for sample in samples
    )


def open_files(pid: int) -> int:
    """The process's open file descriptors (sockets, pipes, files)."""
    return len(os.listdir(f"/proc/{pid}/fd"))


#: How often the soak samples the server's memory and open files, in seconds.
_SOAK_SAMPLE: Final = 30.0


async def voice_soak(url: str, until: float) -> str:
    """The default server for ``--seconds`` (by hand: 1800) of voice sessions opening and
    ending (issue 34's soak): four at a time, each a second of microphone and a spoken
    reply, every third one cut without a close (it parks, then expires). The server's
    RSS and open files are sampled every 30 s: both must settle and stay flat. The
    growth is given per session, by a least-squares line through the samples after the
    first quarter of the run (the warm-up: caches, arenas and pools filling)."""
    pid = _served_pid(url)
    done = failed = 0
    #: (seconds, RSS MB, open files, sessions done)
    samples: list[tuple[float, float, int, int]] = [(0.0, rss_mb(pid), open_files(pid), 0)]
    start = time.monotonic()

    async def worker() -> None:
        nonlocal done, failed
        while time.monotonic() < until:
            try:
                await _voice_session(url, speak_frames=50, drop=done % 3 == 2)
                done += 1
            except (OSError, TimeoutError, websockets.WebSocketException):
                failed += 1

    async def sampler() -> None:
        while time.monotonic() < until:
            await asyncio.sleep(min(_SOAK_SAMPLE, max(0.0, until - time.monotonic())))
            samples.append((time.monotonic() - start, rss_mb(pid), open_files(pid), done))

    await asyncio.gather(sampler(), *(worker() for _ in range(4)))
    await asyncio.sleep(2.0)  # the last dropped sessions park, then expire
    samples.append((time.monotonic() - start, rss_mb(pid), open_files(pid), done))
    warm = [sample for sample in samples if sample[0] >= samples[-1][0] / 4]
    per_session = per_session_growth([(count, rss) for _, rss, _, count in warm])
    return (
        f"{done} sessions, {failed} failed; RSS growth after the first quarter "
        f"{per_session:.0f} B per session (least squares, {len(warm)} samples); "
        "(minute, RSS MB, open files, sessions): "
        + ", ".join(
            f"({at / 60:.1f}, {rss:.1f}, {fds}, {count})" for at, rss, fds, count in samples
        )
    )


def per_session_growth(points: list[tuple[int, float]]) -> float:
    """Bytes of RSS per session: the slope of a least-squares line through (sessions
    done, RSS MB) points; NaN with fewer than three."""
    if len(points) < 3 or len({count for count, _ in points}) < 2:
        return float("nan")
    fit = statistics.linear_regression([count for count, _ in points], [rss for _, rss in points])
    return fit.slope * (1 << 20)


#: The server's process, by its URL (voice_sessions samples its memory).
_PIDS: dict[str, int] = {}


def _served_pid(url: str) -> int:
    return _PIDS[url]


Attack = Callable[[str, float], Coroutine[Any, Any, str]]
#: name -> (attack, vrt serve options, open-file limit)
ATTACKS: Final[dict[str, tuple[Attack, tuple[str, ...], int | None]]] = {
    "non-reading": (non_reading, (), None),
    "connect-flood": (connect_flood, (), 256),
    "json-shapes": (json_shapes, (), None),
    "frame-flood": (frame_flood, (), None),
    "context-bloat": (context_bloat, (), None),
    "no-hello": (no_hello, (), None),
}
#: The voice attacks: against the default agent, with a voice bystander.
VOICE_ATTACKS: Final[dict[str, Attack]] = {
    "tiny-opus": tiny_opus,
    "unspaced-text": unspaced_text,
    "session-churn": session_churn,
    "fast-speech": fast_speech,
    "many-speakers": many_speakers,
    "voice-sessions": voice_sessions,
    "voice-soak": voice_soak,
}
#: Seconds the voice bystander runs alone before a voice attack: its baseline.
_BASELINE: Final = 10.0


async def run_attack(
    name: str, seconds: float, agent_options: Sequence[str] = ()
) -> dict[str, Any]:
    voice = name in VOICE_ATTACKS
    options: tuple[str, ...]
    if voice:
        attack, options, open_files = VOICE_ATTACKS[name], ("--agent", "voice"), None
    else:
        attack, extra, open_files = ATTACKS[name]
        options = ("--agent", "scripted", *extra)
    for option in agent_options:
        options += ("--agent-option", option)
    server = await Server.start("--log-level", "info", *options, open_files=open_files)
    pid = server.process.pid
    _PIDS[server.url] = pid
    baseline: dict[str, float] | None = None
    try:
        await asyncio.sleep(3.0 if voice else 0.5)  # the voice agent loads its models
        if voice:
            alone = VoiceBystander(server.url)
            alone.start()
            await asyncio.sleep(_BASELINE)
            baseline = alone.stop()
        before = rss_mb(pid)
        cpu_before = cpu_seconds(pid)
        bystander = VoiceBystander(server.url) if voice else Bystander(server.url)
        bystander.start()
        await asyncio.sleep(1.0)
        peak = before
        until = time.monotonic() + seconds
        attacking = asyncio.create_task(attack(server.url, until))
        while not attacking.done():
            peak = max(peak, rss_mb(pid))
            await asyncio.sleep(0.2)
        bound = attacking.result()
        await asyncio.sleep(1.0)
        after = rss_mb(pid)
        cpu = cpu_seconds(pid) - cpu_before
        rtt = bystander.stop()
    finally:
        log_bytes = server.stop()
    return {
        "attack": name,
        "seconds": seconds,
        "baseline": baseline,
        "bystander": rtt,
        "rss_mb": {"before": round(before, 1), "peak": round(peak, 1), "after": round(after, 1)},
        "server_cpu_s": round(cpu, 2),
        "server_log_bytes": log_bytes,
        "load_average": os.getloadavg()[0],
        "bound": bound,
    }


def main(name: str, seconds: float, agent_options: Sequence[str] = ()) -> int:
    known = [*ATTACKS, *VOICE_ATTACKS]
    if name == "all":
        names = list(ATTACKS)
    elif name == "voice":  # the soak runs alone, by hand
        names = [each for each in VOICE_ATTACKS if each != "voice-soak"]
    else:
        names = [name]
    for each in names:
        if each not in known:
            print(
                f"unknown attack {each!r}; choose all (the protocol's), voice (the voice "
                f"agent's) or one of: {', '.join(known)}"
            )
            return 2
    random.seed(0)
    for each in names:
        report = asyncio.run(run_attack(each, seconds, agent_options))
        rtt, rss, base = report["bystander"], report["rss_mb"], report["baseline"]
        what = "replies" if base is not None else "pings"
        alone = (
            f"alone p50 {base['p50_ms']} ms ({base['pings']} replies, {base['lost']} lost), "
            f"under attack "
            if base is not None
            else ""
        )
        print(
            f"{each:14} bystander {alone}p50 {rtt['p50_ms']} ms, p99 {rtt['p99_ms']} ms, "
            f"max {rtt['max_ms']} ms, {rtt['pings']} {what} ({rtt['lost']} lost); "
            f"server RSS {rss['before']} -> peak {rss['peak']} -> {rss['after']} MB, "
            f"CPU {report['server_cpu_s']} s, log {report['server_log_bytes']} B, "
            f"load average {report['load_average']:.1f}; "
            f"bound: {report['bound']}",
            flush=True,
        )
    return 0
