"""``python -m bench.voice --smoke`` runs end to end and writes every figure it names.
No timing is asserted: the machine is noisy (docs/performance.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.processes import run_repo_module


@pytest.mark.timeout(300)
def test_the_voice_benchmark_runs(tmp_path: Path) -> None:
    out = tmp_path / "voice.json"
    done = run_repo_module(
        "bench.voice", "--smoke", "--only", "latency,rtf", "--json", str(out), timeout=280
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads(out.read_text())
    assert results["latency_ms"]["voice_to_voice"]["n"] >= 1
    assert set(results["latency_ms"]) >= {
        "end_of_turn_wait",
        "first_clause_synthesis",
        "pauses_per_reply",
        "longest_pause",
    }
    assert results["rtf"]["stt_cpu_rtf"] > 0


def test_pauses_are_what_a_client_playing_on_arrival_hears() -> None:
    """Three 100 ms chunks: the second arrives while the first plays (no pause), the
    third 300 ms after the second ends; a chunk before the reply's first is not its."""
    from bench.voice import _pauses

    from vrt.client import AudioChunk
    from vrt.protocol.messages import PCM16_24K
    from vrt.voice.chat import Conversation

    chunk = bytes(4800)  # 100 ms of pcm16 at 24 kHz
    conversation = Conversation(output=PCM16_24K, first_audio=10.0)
    for at in (9.0, 10.0, 10.05, 10.5):
        conversation.events.append((at, AudioChunk(item_id="i", payload=chunk)))
    assert _pauses(conversation) == (300.0, 300.0)


@pytest.mark.timeout(300)
def test_the_word_error_rate_benchmark_runs(tmp_path: Path) -> None:
    """``--wer --smoke``: four texts, each clean and at two noise levels, heard by the
    agent's pipeline and by standard decoding; every clip has both transcripts."""
    out = tmp_path / "wer.json"
    done = run_repo_module("bench.voice", "--wer", "--smoke", "--json", str(out), timeout=280)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads(out.read_text())
    assert results["summary"]["clips"] == 12
    assert set(results["summary"]["wer"]["all"]) == {"pipeline", "standard"}
    assert {clip["snr"] for clip in results["clips"]} == {None, 20.0, 10.0}
    assert all("standard" in clip and "pipeline" in clip for clip in results["clips"])
