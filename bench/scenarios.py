"""The seven scenarios. Each runs in the runner's process (the load client, pinned to
CPU 1) against one server process (pinned to CPU 0): ``vrt``, or a bare baseline
(``picows``; ``websockets`` for the round trip only). Each returns a flat dict of
figures; the runner takes medians over repetitions and pairs vrt with its baseline.

Every wait is bounded (``asyncio.wait_for``) and every loop has a fixed count.
"""

from __future__ import annotations

import asyncio
import statistics
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from vrt.protocol.codec import encode
from vrt.protocol.frames import FrameKind, build_frame
from vrt.protocol.messages import Hello

from .client import PING, Peer, connect, now_ns, open_session
from .procs import cpu_s, rss_kb, self_cpu_s

__all__ = ["SCENARIOS", "Scenario", "Target"]

INPUT_FRAME = build_frame(FrameKind.INPUT, 0, bytes(960))  # 965 bytes: 20 ms pcm16 24 kHz
assert len(INPUT_FRAME) == 965
AUDIO = {"bench": "audio"}
RESUME_MESSAGES = 1024


@dataclass(frozen=True)
class Target:
    kind: str  # "vrt", "picows" or "websockets"
    url: str
    pid: int

    @property
    def vrt(self) -> bool:
        return self.kind == "vrt"


Cfg = dict[str, Any]
Result = dict[str, Any]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    i = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[i]


def _latency(prefix: str, samples_ns: list[int], unit: float = 1e3) -> Result:
    values = [s / unit for s in samples_ns]
    return {
        f"{prefix}_p50": pct(values, 0.50),
        f"{prefix}_p99": pct(values, 0.99),
        f"{prefix}_mean": statistics.fmean(values),
        f"{prefix}_n": len(values),
    }


async def _wait(fut: Awaitable[Any], timeout: float) -> Any:
    return await asyncio.wait_for(fut, timeout)


class Meter:
    """Server CPU, client CPU and wall time over a measured section."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.t0 = now_ns()
        self.s0 = cpu_s(pid)
        self.c0 = self_cpu_s()

    def stop(self) -> tuple[float, float, float]:
        """(seconds, server CPU seconds, client CPU seconds)."""
        dt = (now_ns() - self.t0) / 1e9
        return dt, cpu_s(self.pid) - self.s0, self_cpu_s() - self.c0


# --------------------------------------------------------------------------- 1. round trip


async def control_rtt(t: Target, cfg: Cfg) -> Result:
    """text -> first text chunk (vrt: the scripted ``echo hi`` reply; baseline: the echo
    of the same bytes), text -> server ack, ping -> pong."""
    timeout = cfg["timeout"]
    peer = await open_session(t.url, vrt=t.vrt)
    out: Result = {}
    try:
        first: list[int] = []
        chunk: list[int] = []
        for i in range(cfg["rtt_warmup"] + cfg["rtt_n"]):
            peer.marks.clear()
            peer.marking = True
            fut = peer.expect(b"turn.state", b'"idle"') if t.vrt else peer.expect(b"text")
            data = peer.user_text("echo hi")
            t0 = now_ns()
            peer.send_text(data)
            await _wait(fut, timeout)
            peer.marking = False
            if i >= cfg["rtt_warmup"]:
                chunk.append(peer.marks[b"text"] - t0)
                first.append(min(peer.marks.values()) - t0)
        out |= _latency("chunk_us", chunk) | _latency("first_frame_us", first)

        pings: list[int] = []
        for i in range(cfg["rtt_warmup"] + cfg["rtt_n"]):
            fut = peer.expect(b"pong" if t.vrt else b"ping")
            t0 = now_ns()
            peer.send_text(PING)
            t1, _ = await _wait(fut, timeout)
            if i >= cfg["rtt_warmup"]:
                pings.append(t1 - t0)
        out |= _latency("ping_us", pings)

        if t.kind != "websockets" and cfg["ack_n"]:
            await asyncio.sleep(0.3)  # let an ack still due from the loops above go out
            acks: list[int] = []
            for _ in range(cfg["ack_n"]):
                fut = peer.expect(b"ack" if t.vrt else b"text")
                data = peer.user_text("echo hi")
                t0 = now_ns()
                peer.send_text(data)
                t1, _ = await _wait(fut, timeout)
                acks.append(t1 - t0)
                if t.vrt:  # the reply went out long before the ack; nothing is in flight
                    await asyncio.sleep(0.01)
            out |= _latency("ack_ms", acks, 1e6)
    finally:
        await peer.close()
    return out


# --------------------------------------------------------------------------- 2. throughput


async def sequenced_push(t: Target, cfg: Cfg) -> Result:
    """Server -> client sequenced text chunks, acked by the client as §4.2 recommends.
    vrt: the scripted agent's ``burst N`` (at most 10,000 per burst), repeated;
    baseline: the same bytes pushed by the bare server."""
    timeout = cfg["timeout"]
    burst, bursts = cfg["burst"], cfg["bursts"]
    peer = await open_session(t.url, vrt=t.vrt)

    async def run(n: int, times: int) -> None:
        for _ in range(times):
            fut = peer.expect_texts(peer.texts + n)
            peer.send_text(peer.user_text(f"burst {n}") if t.vrt else b"PUSH %d" % n)
            await _wait(fut, timeout)

    try:
        await run(min(burst, 2000), 1)  # warm-up
        received0, acks0 = peer.texts, peer.acks_sent
        meter = Meter(t.pid)
        await run(burst, bursts)
        dt, server, client = meter.stop()
        n = peer.texts - received0
        return {
            "messages": n,
            "msgs_per_s": n / dt,
            "server_us_per_msg": server / n * 1e6,
            "server_util": server / dt,
            "client_util": client / dt,
            "acks_sent": peer.acks_sent - acks0,
        }
    finally:
        await peer.close()


# --------------------------------------------------------------------------- 3. audio


async def _send_frames(peer: Peer, n: int) -> None:
    send, frame = peer.send_binary, INPUT_FRAME
    for k in range(n):
        send(frame)
        if peer.paused:
            await peer.writable()
        elif k % 256 == 255:
            await asyncio.sleep(0)


async def audio_frames(t: Target, cfg: Cfg) -> Result:
    """Input frames/s client -> server (the server counts them; timed to the count's
    reply) and output frames/s server -> client (vrt: the bench agent's ``flood N``,
    one audio item; baseline: bare binary frames), 965-byte frames."""
    timeout = cfg["timeout"]
    n_in, n_out = cfg["audio_in"], cfg["audio_out"]
    peer = await open_session(t.url, vrt=t.vrt, context=AUDIO)
    out: Result = {}

    async def count() -> int:
        idles = peer.idles
        fut = peer.expect(b"text", b'"count ')
        peer.send_text(peer.user_text("count?") if t.vrt else b"COUNT")
        _, data = await _wait(fut, timeout)
        # the turn's idle follows the chunk: wait for it, or the next flood would take it
        await _wait(peer.expect_idles(idles + 1), timeout)
        text: str = data.split(b'"count ', 1)[1].split(b'"', 1)[0].decode()
        return int(text)

    async def flood(n: int) -> int:
        before = peer.binary
        fut = peer.expect_idles(peer.idles + 1)
        peer.send_text(peer.user_text(f"flood {n}") if t.vrt else b"FLOOD %d" % n)
        await _wait(fut, timeout)
        return peer.binary - before

    try:
        await _send_frames(peer, min(n_in, 5000))  # warm-up
        base = await count()
        meter = Meter(t.pid)
        await _send_frames(peer, n_in)
        counted = await count() - base
        dt, server, client = meter.stop()
        out |= {
            "in_frames": counted,
            "in_sent": n_in,
            "in_frames_per_s": counted / dt,
            "in_server_us_per_frame": server / n_in * 1e6,
            "in_client_util": client / dt,
        }
        await flood(min(n_out, 5000))  # warm-up
        meter = Meter(t.pid)
        got = await flood(n_out)
        dt, server, client = meter.stop()
        out |= {
            "out_frames": got,
            "out_lost": n_out - got,
            "out_frames_per_s": got / dt,
            "out_server_us_per_frame": server / max(got, 1) * 1e6,
            "out_client_util": client / dt,
        }
    finally:
        await peer.close()
    return out


# --------------------------------------------------------------------------- 4. sessions


async def _open_many(
    t: Target, n: int, concurrency: int, timeout: float, peers: list[Peer]
) -> tuple[int, float]:
    """Open ``n`` sessions (connect, hello, ready) with ``concurrency`` in flight;
    returns (failures, seconds)."""
    sem = asyncio.Semaphore(concurrency)

    async def one() -> None:
        async with sem:
            peers.append(await open_session(t.url, vrt=t.vrt, timeout=timeout))

    t0 = now_ns()
    results = await asyncio.gather(*(one() for _ in range(n)), return_exceptions=True)
    dt = (now_ns() - t0) / 1e9
    return sum(isinstance(r, BaseException) for r in results), dt


async def sessions(t: Target, cfg: Cfg) -> Result:
    """connect + hello + ready per second (baseline: connect + hello echoed), the
    server's CPU per session opened, and the server's RSS per idle session at each of
    ``cfg["idle"]`` session counts."""
    peers: list[Peer] = []
    out: Result = {}
    concurrency, timeout = cfg["connect_concurrency"], cfg["timeout"]
    try:
        await _open_many(t, 50, concurrency, timeout, peers)  # warm-up, kept open
        await asyncio.sleep(cfg["settle"])
        rss0, warm = rss_kb(t.pid), len(peers)
        opened = 0
        for i, target in enumerate(cfg["idle"]):
            meter = Meter(t.pid)
            failures, dt = await _open_many(t, target - opened, concurrency, timeout, peers)
            if i == 0:
                out["sessions_per_s"] = (target - failures) / dt
                # The rate is the load client's as much as the server's (one Python
                # process opening 50 at once): the server's CPU per session opened is
                # the server's own cost.
                _, server, client = meter.stop()
                out["server_us_per_session"] = server / max(target - failures, 1) * 1e6
                out["sessions_client_util"] = client / dt
            out[f"failures_{target}"] = failures
            opened = len(peers) - warm
            await asyncio.sleep(cfg["settle"])
            rss = rss_kb(t.pid)
            out[f"kb_per_session_{target}"] = (rss - rss0) / max(opened, 1)
            out[f"rss_kb_{target}"] = rss
        out["rss0_kb"] = rss0
    finally:
        for peer in peers:
            peer.drop()
        await asyncio.sleep(0.2)
    return out


# --------------------------------------------------------------------------- 5. resume


async def resume(t: Target, cfg: Cfg) -> Result:
    """Reconnect to the last of 1,024 replayed messages. vrt: ``burst 1022`` unacked
    (turn.state thinking, 1,022 chunks, idle: seq 1 to 1024, what the server keeps),
    drop the connection, reconnect with hello{sessionId, resumeFrom 0}; baseline: connect
    and have the bare server send a ready frame and 1,024 chunks."""
    timeout = cfg["timeout"]
    times: list[int] = []
    for i in range(cfg["resume_warmup"] + cfg["resume_n"]):
        hello = b"REPLAY %d" % RESUME_MESSAGES
        if t.vrt:
            first = await open_session(t.url, vrt=True, ack=False)
            fut = first.expect_seq(RESUME_MESSAGES)
            first.send_text(first.user_text(f"burst {RESUME_MESSAGES - 2}"))
            await _wait(fut, timeout)
            first.drop()
            await asyncio.sleep(0.02)  # the server sees the drop: the session parks
            hello = encode(Hello(session_id=first.session_id, resume_from=0), 0)
        t0 = now_ns()
        peer = await connect(t.url, ack=False)
        fut = peer.expect_seq(RESUME_MESSAGES)
        peer.send_text(hello)
        t1, _ = await _wait(fut, timeout)
        if i >= cfg["resume_warmup"]:
            times.append(t1 - t0)
        await peer.close()
    return _latency("resume_ms", times, 1e6)


# --------------------------------------------------------------------------- 6. interrupt


async def interrupt(t: Target, cfg: Cfg) -> Result:
    """``interrupt`` -> ``interrupted`` while output audio streams in real time (vrt:
    the scripted ``speak 10000``; baseline: bare 20 ms frames, answered by the bare
    server). Sent after the third frame of the item, with the epoch observed."""
    timeout = cfg["timeout"]
    peer = await open_session(t.url, vrt=t.vrt)
    peer.track_epoch = True
    times: list[int] = []
    try:
        for i in range(cfg["interrupt_warmup"] + cfg["interrupt_n"]):
            fut = peer.expect_binary(peer.binary + 3)
            peer.send_text(peer.user_text("speak 10000") if t.vrt else b"SPEAK")
            await _wait(fut, timeout)
            fut = peer.expect(b"interrupted")
            data = peer.interrupt(peer.epoch)
            t0 = now_ns()
            peer.send_text(data)
            t1, _ = await _wait(fut, timeout)
            if i >= cfg["interrupt_warmup"]:
                times.append(t1 - t0)
            await asyncio.sleep(0.03)
    finally:
        await peer.close()
    return _latency("interrupt_us", times)


# --------------------------------------------------------------------------- 7. CPU / session


async def audio_cpu(t: Target, cfg: Cfg) -> Result:
    """N sessions, each sending 50 input frames/s and getting each back as an output
    frame (vrt: the bench agent's ``passthrough``; baseline: bare binary echo). Server
    CPU time over a window, per session-second."""
    n, window = cfg["cpu_sessions"], cfg["cpu_window"]
    peers: list[Peer] = []
    loop = asyncio.get_running_loop()
    try:
        sem = asyncio.Semaphore(cfg["connect_concurrency"])

        async def one() -> None:
            async with sem:
                peer = await open_session(t.url, vrt=t.vrt, context=AUDIO, timeout=cfg["timeout"])
                peers.append(peer)
                peer.send_text(peer.user_text("passthrough") if t.vrt else b"PASS")

        await asyncio.gather(*(one() for _ in range(n)))
        frame = INPUT_FRAME
        ticks = late = 0

        async def stream(seconds: float) -> None:
            nonlocal ticks, late
            deadline = loop.time()
            for _ in range(round(seconds / 0.02)):
                deadline += 0.02
                delay = deadline - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                elif delay < -0.02:
                    late += 1
                for peer in peers:
                    peer.send_binary(frame)
                ticks += 1

        await stream(cfg["cpu_warmup"])
        await asyncio.sleep(0.1)
        got0 = sum(p.binary for p in peers)
        ticks0 = ticks
        meter = Meter(t.pid)
        await stream(window)
        await asyncio.sleep(0.1)
        dt, server, client = meter.stop()
        got = sum(p.binary for p in peers) - got0
        sent = (ticks - ticks0) * n
        session_seconds = n * dt
        us = server / session_seconds * 1e6
        return {
            "sessions": n,
            "window_s": dt,
            "frames_sent": sent,
            "frames_back": got,
            "late_ticks": late,
            "server_util": server / dt,
            "client_util": client / dt,
            "us_per_session_s": us,
            "sessions_per_core": 1e6 / us if us else 0.0,
            "us_per_frame_in_out": server / max(sent, 1) * 1e6,
        }
    finally:
        for peer in peers:
            peer.drop()
        await asyncio.sleep(0.2)


# --------------------------------------------------------------------------- registry


@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    run: Callable[[Target, Cfg], Awaitable[Result]]
    kinds: tuple[str, ...] = ("vrt", "picows")


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("rtt", "1. control round trip", control_rtt, ("vrt", "picows", "websockets")),
    Scenario("push", "2. sequenced throughput", sequenced_push),
    Scenario("audio", "3. audio frames", audio_frames),
    Scenario("sessions", "4. sessions", sessions),
    Scenario("resume", "5. resume", resume),
    Scenario("interrupt", "6. interrupt", interrupt),
    Scenario("cpu", "7. CPU per audio session", audio_cpu),
)
