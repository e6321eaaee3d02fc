"""How many voice sessions one ``vrt serve`` serves at the 500 ms voice-to-voice aim, with
speakers who take turns as people do (``python -m bench.voice --capacity 1,2,4,6``).

Each session is one connection for the whole run, its microphone always on: pcm16 at
16 kHz in 20 ms frames in real time, silence between utterances. A speaker says an
utterance of the test corpus, waits for the spoken reply to end (the turn goes
``idle``), pauses as a person would (0.5 to 1.5 s, seeded), and speaks again; the
speakers start at different moments. Per session count: voice to voice (the last
frame holding speech was sent → the reply's first audio arrived), replies that never
came (none within 10 s of the end of speech), the errors the server sent (an
``AGENT_ERROR`` saying recognition is over capacity, say), the speakers refused at
their ``hello`` (``START_FAILED``: admission by load, docs/voice.md, "Capacity"), and
the server's CPU.
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any, Final

from .procs import cpu_s, machine_busy_s
from .voice_server import percentiles, serve_voice

_SILENCE: Final = bytes(640)  # 20 ms at 16 kHz
_REPLY_TIMEOUT_S: Final = 10.0


async def _speaker(
    url: str, utterances: list[bytes], until: float, seed: int, out: dict[str, Any]
) -> None:
    from vrt.client import ErrorReceived, TurnChanged, VrtClient, VrtError
    from vrt.protocol.messages import Format
    from vrt.voice.chat import Conversation, listen, speak

    rng = random.Random(seed)
    fmt = Format(encoding="pcm16", sample_rate=16000)
    loop = asyncio.get_running_loop()
    client = VrtClient(url, input=fmt)
    try:
        await client.connect()
    except VrtError as exc:
        if exc.code != "START_FAILED":
            raise
        out["refused"] += 1  # the server was saturated when this speaker arrived
        return
    try:
        await client.next_event(10.0)  # ready
        conversation = Conversation()
        listener = asyncio.create_task(listen(client, conversation))

        async def silence(seconds: float) -> None:
            start = loop.time()
            for k in range(int(seconds * 50)):
                await asyncio.sleep(max(0.0, start + k * 0.02 - loop.time()))
                client.send_audio(_SILENCE)

        try:
            await silence(rng.uniform(0.0, 2.0))
            k = seed
            while time.monotonic() < until:
                seen = len(conversation.events)
                await speak(client, conversation, utterances[k % len(utterances)], 16000, fmt)
                k += 1
                ended = loop.time() + _REPLY_TIMEOUT_S
                idle = False
                while not idle and loop.time() < ended:
                    await silence(0.1)
                    for _, event in conversation.events[seen:]:
                        if isinstance(event, ErrorReceived):
                            out["errors"].append(event.code)
                        idle = idle or (isinstance(event, TurnChanged) and event.state == "idle")
                    seen = len(conversation.events)
                if conversation.latency_ms is None:
                    out["lost"] += 1
                else:
                    out["latency_ms"].append(conversation.latency_ms)
                out["exchanges"] += 1
                conversation.speech_end = conversation.first_audio = None
                await silence(rng.uniform(0.5, 1.5))
        finally:
            listener.cancel()
    finally:
        await client.close()


def capacity(utterances: list[bytes], counts: list[int], seconds: float) -> list[dict[str, Any]]:
    process, url = serve_voice()
    results = []
    try:
        time.sleep(1.0)
        for count in counts:
            out: dict[str, Any] = {
                "latency_ms": [],
                "lost": 0,
                "errors": [],
                "exchanges": 0,
                "refused": 0,
            }
            cpu0, busy0, wall0 = cpu_s(process.pid), machine_busy_s(), time.monotonic()
            until = wall0 + seconds

            async def run(count: int = count, until: float = until, out: Any = out) -> None:
                await asyncio.gather(
                    *(_speaker(url, utterances, until, seed, out) for seed in range(count))
                )

            asyncio.run(run())
            wall = time.monotonic() - wall0
            result = {
                "sessions": count,
                "refused_at_start": out["refused"],
                "exchanges": out["exchanges"],
                "voice_to_voice_ms": percentiles(out["latency_ms"]),
                "lost_replies": out["lost"],
                "errors": sorted(set(out["errors"])),
                "error_count": len(out["errors"]),
                "server_cores": round((cpu_s(process.pid) - cpu0) / wall, 3),
                "machine_cores": round((machine_busy_s() - busy0) / wall, 2),
            }
            results.append(result)
            print(result, flush=True)
    finally:
        process.terminate()
        process.wait(10)
    return results
