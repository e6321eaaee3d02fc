"""The recogniser's queue (issue 31.4, ``vrt.voice.decode_queue``): finals ahead of
partials, one queued job per session, a bounded queue with a clear error past it, and a
session's jobs gone when it ends. Checked by counts and order on a stand-in decode that
holds the one decoding thread until the test lets it go: no clock is involved."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest

from vrt.voice.decode_queue import DecodeQueue
from vrt.voice.recognition import SpeculativeRecognition
from vrt.voice.stages import Samples, StageError


class Gate:
    """A decode that records what it ran (the audio's first sample names the job) and
    waits for the test before each one."""

    def __init__(self) -> None:
        self.ran: list[int] = []
        self.go = threading.Semaphore(0)

    def __call__(self, audio: Samples, final: bool) -> str:
        self.go.acquire()
        self.ran.append(int(audio[0]))
        return f"{'final' if final else 'partial'} {int(audio[0])}"


def _audio(n: int) -> Samples:
    return np.full(4, n, np.float32)


async def _settle(*futures: asyncio.Future[str]) -> None:
    await asyncio.wait(futures)


@pytest.fixture
def gate() -> Gate:
    return Gate()


@pytest.fixture
def queue(gate: Gate) -> DecodeQueue:
    return DecodeQueue(gate, ThreadPoolExecutor(1), limit=3)


async def test_finals_go_ahead_of_partials(gate: Gate, queue: DecodeQueue) -> None:
    running = queue.submit("a", _audio(0), final=False)  # holds the thread
    p1 = queue.submit("b", _audio(1), final=False)
    p2 = queue.submit("c", _audio(2), final=False)
    f3 = queue.submit("d", _audio(3), final=True)
    for _ in range(4):
        gate.go.release()
    await _settle(running, p1, p2, f3)
    assert gate.ran == [0, 3, 1, 2]
    assert f3.result() == "final 3"


async def test_one_queued_job_per_session(gate: Gate, queue: DecodeQueue) -> None:
    running = queue.submit("other", _audio(0), final=False)
    older = queue.submit("s", _audio(1), final=False)
    newer = queue.submit("s", _audio(2), final=False)
    assert older.cancelled()  # a newer partial replaces an older one
    final = queue.submit("s", _audio(3), final=True)
    assert newer.cancelled()  # a final replaces a partial
    late = queue.submit("s", _audio(4), final=False)
    assert late.cancelled()  # a partial is not queued behind its session's final
    assert queue.waiting == 1
    gate.go.release()
    gate.go.release()
    await _settle(running, final)
    assert gate.ran == [0, 3]


async def test_past_the_bound_a_final_fails_clearly_and_partials_make_room(
    gate: Gate, queue: DecodeQueue
) -> None:
    running = queue.submit("r", _audio(0), final=True)
    f1 = queue.submit("a", _audio(1), final=True)
    f2 = queue.submit("b", _audio(2), final=True)
    p3 = queue.submit("c", _audio(3), final=False)
    assert queue.waiting == 3  # the bound
    dropped = queue.submit("d", _audio(4), final=False)
    assert dropped.cancelled()  # a partial past the bound is dropped
    f5 = queue.submit("e", _audio(5), final=True)
    assert p3.cancelled()  # a final takes the newest partial's place
    refused = queue.submit("f", _audio(6), final=True)
    assert refused.done()
    with pytest.raises(StageError, match="over capacity"):
        refused.result()
    for _ in range(4):
        gate.go.release()
    await _settle(running, f1, f2, f5)
    assert gate.ran == [0, 1, 2, 5]


async def test_a_cancelled_job_leaves_the_queue_and_never_runs(
    gate: Gate, queue: DecodeQueue
) -> None:
    running = queue.submit("r", _audio(0), final=False)
    gone = queue.submit("s", _audio(1), final=True)
    kept = queue.submit("t", _audio(2), final=True)
    gone.cancel()
    await asyncio.sleep(0)  # the future's callbacks run on the next step
    assert queue.waiting == 1
    gate.go.release()
    gate.go.release()
    await _settle(running, kept)
    assert gate.ran == [0, 2]
    assert queue.started == 2


async def test_an_ended_sessions_recognition_leaves_nothing_queued(
    gate: Gate, queue: DecodeQueue
) -> None:
    """What the voice agent does when a session ends (``recognition.cancel()``, and its
    task awaiting the final cancelled): its guess and partial leave the queue."""
    running = queue.submit("other", _audio(0), final=True)

    async def final(audio: Samples) -> str:
        return await queue.submit("s", audio, final=True)

    async def partial(audio: Samples) -> str:
        return await queue.submit("s", audio, final=False)

    recognition = SpeculativeRecognition(
        final, lambda text: None, decode_partial=partial, partial_every=0.0001
    )
    recognition.feed(_audio(7))  # a partial
    await asyncio.sleep(0)
    recognition.pause()  # the guess replaces it
    await asyncio.sleep(0)
    assert queue.waiting == 1
    recognition.cancel()
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert queue.waiting == 0
    gate.go.release()
    await _settle(running)
    assert gate.ran == [0]
    assert queue.started == 1


async def test_a_sessions_utterances_share_one_queued_job(
    stages: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the Whisper recogniser, as the voice agent uses it (``start(...,
    session=)``): while session A's final waits, its next utterance's partial is not
    queued; another session's is."""
    stt = stages.stt
    gate = Gate()
    monkeypatch.setattr(stt, "transcribe", lambda audio, partial=False: gate(audio, not partial))
    a, b = object(), object()
    busy = stt.start(lambda text: None, session=b)
    busy.feed(_audio(0))
    busy.pause()  # b's guess: runs, and holds the thread
    await asyncio.sleep(0)
    first = stt.start(lambda text: None, session=a)
    first.feed(_audio(1))
    first.pause()  # a's guess: queued
    await asyncio.sleep(0)
    assert stt.queue.waiting == 1
    partials: list[str] = []
    second = stt.start(partials.append, session=a)  # a speaks on
    second.feed(np.full(int(stt.partial_every * 16000), 2, np.float32))  # asks a partial
    other = stt.start(partials.append, session=b)
    other.feed(np.full(int(stt.partial_every * 16000), 3, np.float32))
    await asyncio.sleep(0)
    assert stt.queue.waiting == 2  # a's final and b's partial; a's partial was not queued
    for _ in range(3):
        gate.go.release()
    guesses = await asyncio.gather(busy.final(), first.final())
    assert guesses == ["final 0", "final 1"]
    async with asyncio.timeout(30):  # a bound on a hang, not a timing check
        while not partials:
            await asyncio.sleep(0)
    assert partials == ["partial 3"]
    assert gate.ran == [0, 1, 3]


# -- saturation, for admission (issue 31.4) --


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_finals_waiting_behind_finals_saturate_it_for_a_while(gate: Gate) -> None:
    clock = Clock()
    queue = DecodeQueue(gate, ThreadPoolExecutor(1), limit=10, busy_finals=2, hold=5.0, clock=clock)
    running = queue.submit("a", _audio(0), final=True)  # holds the thread
    waiting = [queue.submit(owner, _audio(n), final=True) for n, owner in enumerate("bc", 1)]
    assert not queue.saturated  # one final running, two waiting: within the aim
    third = queue.submit("d", _audio(3), final=True)  # behind two waiting finals
    assert queue.saturated
    for _ in range(4):
        gate.go.release()
    await _settle(running, *waiting, third)
    clock.now += 4.9
    assert queue.saturated  # held for a while after the last sign
    clock.now += 0.2
    assert not queue.saturated  # the load fell: admitted again


async def test_a_final_that_waited_past_the_lag_saturates_it(gate: Gate) -> None:
    clock = Clock()
    queue = DecodeQueue(gate, ThreadPoolExecutor(1), busy_finals=5, max_lag=0.3, clock=clock)
    running = queue.submit("a", _audio(0), final=False)
    final = queue.submit("b", _audio(1), final=True)
    assert not queue.saturated
    clock.now += 0.5  # the running decode holds the final back past the lag
    gate.go.release()
    gate.go.release()
    await _settle(running, final)
    assert queue.saturated


async def test_a_final_refused_over_capacity_saturates_it(gate: Gate) -> None:
    queue = DecodeQueue(gate, ThreadPoolExecutor(1), limit=1, busy_finals=5, clock=Clock())
    running = queue.submit("a", _audio(0), final=True)
    queued = queue.submit("b", _audio(1), final=True)
    assert not queue.saturated
    refused = queue.submit("c", _audio(2), final=True)
    assert isinstance(refused.exception(), StageError)
    assert queue.saturated
    gate.go.release()
    gate.go.release()
    await _settle(running, queued)
