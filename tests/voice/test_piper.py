"""Piper's two lanes (``vrt.voice.piper``): a reply's first clause, the one its user
waits for, runs on ``tts_threads`` cores on a thread of its own; the clauses made ahead
of playback run on one core on another, so that a long reply of one session never
queues ahead of another session's answer, and a busy server does not pay the second
core's overhead on every clause."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import tracemalloc
from typing import Any

import pytest

from vrt.voice.clauses import first_clause
from vrt.voice.phonemes import leaks
from vrt.voice.piper import PiperTts


async def _synthesise(tts: PiperTts, text: str, *, first: bool) -> int:
    async def run() -> int:
        first_clause.set(first)
        samples = 0
        async for audio in tts.synthesize(text):
            samples += len(audio)
        return samples

    return await asyncio.create_task(run(), context=contextvars.copy_context())


def _record_sessions(tts: PiperTts, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    used: list[Any] = []
    real = tts._synthesize_now

    def recording(text: str, voice: Any) -> Any:
        used.append(voice.session)
        return real(text, voice)

    monkeypatch.setattr(tts, "_synthesize_now", recording)
    return used


async def test_a_first_clause_gets_the_cores_and_a_clause_made_ahead_gets_one(
    stages: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    tts = stages.tts
    assert isinstance(tts, PiperTts)
    fast, lean = tts._first.voice.session, tts._ahead.voice.session
    assert fast is not lean  # the default, tts_threads=2
    used = _record_sessions(tts, monkeypatch)
    first, second = await asyncio.gather(
        _synthesise(tts, "It is half past", first=True),
        _synthesise(tts, "ten in the morning.", first=False),
    )
    assert first > 0
    assert second > 0
    assert sorted(map(id, used)) == sorted(map(id, [fast, lean]))
    assert await _synthesise(tts, "Good morning.", first=True) > 0
    assert used[-1] is fast


def test_one_thread_asked_for_is_one_session() -> None:
    tts = PiperTts(threads=1)
    assert tts._first.voice.session is tts._ahead.voice.session


#: What piper-tts 1.8.0's own bridge returns for this text (espeak-ng, en-us): a clause
#: of each kind it names.
_CLAUSES = "Yes, it is: ten; or not. Really? Go! Fine"
_BRIDGE_SAID = [
    ("jˈɛs", ",", False),
    ("ɪɾ ˈɪz", ":", False),
    ("tˈɛn", ";", False),
    ("ɔːɹ nˈɑːt", ".", True),
    ("ɹˈiəli", "?", True),
    ("ɡˈoʊ", "!", True),
    ("fˈaɪn", "", True),
]


def test_phonemising_a_clause_keeps_nothing_and_says_what_the_bridge_said(
    stages: Any,
) -> None:
    """piper-tts's bridge kept each clause's tuple (vrt.voice.phonemes): a server lost
    about 150 bytes per clause spoken. The phonemes are the bridge's, to the letter."""
    from piper import espeakbridge

    assert isinstance(stages.tts, PiperTts)
    assert not leaks(espeakbridge.get_phonemes)
    assert espeakbridge.get_phonemes(_CLAUSES) == _BRIDGE_SAID
    voice = stages.tts._first.voice
    voice.phonemize("Hello there, how are you?")
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(2000):
            voice.phonemize("Hello there, how are you?")
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert kept < 20_000, f"{kept} bytes kept by 2000 phonemisations"
