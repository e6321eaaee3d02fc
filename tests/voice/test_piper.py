"""Piper's two lanes (``vrt.voice.piper``): a reply's first clause, the one its user
waits for, runs on ``tts_threads`` cores on a thread of its own; the clauses made ahead
of playback run on one core on another, so that a long reply of one session never
queues ahead of another session's answer, and a busy server does not pay the second
core's overhead on every clause."""

from __future__ import annotations

import asyncio
import contextvars
import ctypes
import gc
import platform
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


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


#: "tomato." in American English (the voice's en-us); British English says it otherwise.
_TOMATO_US = [("təmˈeɪɾoʊ", ".", True)]


def _allocated() -> int:
    """Bytes in use in glibc's malloc, every arena (what C code keeps)."""
    mallinfo2 = ctypes.CDLL(None).mallinfo2
    mallinfo2.restype = _MallInfo2
    return int(mallinfo2().uordblks)


def test_phonemising_a_clause_keeps_nothing_and_says_what_the_bridge_said(
    stages: Any,
) -> None:
    """piper-tts's bridge kept about 1.5 KB per clause spoken (vrt.voice.phonemes): a
    copy of the voice in espeak-ng for each voice set, and each clause's tuple. The
    phonemes are the bridge's, to the letter."""
    from piper import espeakbridge

    assert isinstance(stages.tts, PiperTts)
    assert not leaks(espeakbridge.get_phonemes)
    assert espeakbridge.get_phonemes(_CLAUSES) == _BRIDGE_SAID
    voice = stages.tts._first.voice
    text = "Hello there, how are you?"
    voice.phonemize(text)
    gc.collect()
    if platform.libc_ver()[0] == "glibc":
        before = _allocated()
        for _ in range(2000):
            voice.phonemize(text)
        gc.collect()
        kept = _allocated() - before
        assert kept < 200_000, f"{kept} bytes kept in C by 2000 phonemisations"
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(2000):
            voice.phonemize(text)
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert kept < 20_000, f"{kept} bytes of Python objects kept by 2000 phonemisations"


def test_the_bridge_sets_a_voice_only_when_it_changes(
    stages: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from piper import espeakbridge

    assert isinstance(stages.tts, PiperTts)
    once = espeakbridge.set_voice
    asked: list[str] = []
    bridge = once.set_voice  # type: ignore[attr-defined]

    def set_voice(name: str) -> None:
        asked.append(name)
        bridge(name)

    monkeypatch.setattr(once, "set_voice", set_voice)
    voice = stages.tts._first.voice
    for _ in range(3):
        voice.phonemize("Good morning.")
    assert asked in ([], ["en-us"])  # at most once, if another voice was set before
    asked.clear()
    try:
        espeakbridge.set_voice("en")
        assert espeakbridge.get_phonemes("tomato.") != _TOMATO_US
    finally:
        voice.phonemize("tomato.")  # sets en-us again
    assert asked == ["en", "en-us"]
    assert espeakbridge.get_phonemes("tomato.") == _TOMATO_US
