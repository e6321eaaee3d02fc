"""Piper's cores per clause: the clause nobody else's waits behind (a reply's first, the
one the user waits for) runs on ``tts_threads`` cores; a clause queued behind another
runs on one, so that a busy server does not pay the second core's overhead on every
clause (``vrt.voice.piper``)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from vrt.voice.piper import PiperTts


async def _synthesise(tts: PiperTts, text: str) -> int:
    samples = 0
    async for audio in tts.synthesize(text):
        samples += len(audio)
    return samples


def _record_sessions(tts: PiperTts, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    used: list[Any] = []
    real = tts._synthesize_now

    def recording(text: str, session: Any) -> Any:
        used.append(session)
        return real(text, session)

    monkeypatch.setattr(tts, "_synthesize_now", recording)
    return used


async def test_a_clause_alone_gets_the_cores_and_one_queued_behind_it_gets_one(
    stages: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    tts = stages.tts
    assert isinstance(tts, PiperTts)
    assert tts._fast is not tts._lean  # the default, tts_threads=2
    used = _record_sessions(tts, monkeypatch)
    first, second = await asyncio.gather(
        _synthesise(tts, "It is half past"), _synthesise(tts, "ten in the morning.")
    )
    assert first > 0
    assert second > 0
    assert used == [tts._fast, tts._lean]
    # Nothing waits now: the next reply's first clause has the cores again.
    assert await _synthesise(tts, "Good morning.") > 0
    assert used[-1] is tts._fast


def test_one_thread_asked_for_is_one_session() -> None:
    tts = PiperTts(threads=1)
    assert tts._fast is tts._lean
