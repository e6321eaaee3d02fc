"""Audio through the browser SDK in real Chromium, judged by the server (§8).

* The microphone, fed from a WAV by Chromium's fake capture device, reaches the server
  as 20 ms pcm16 frames at 24 kHz (resampled from the device rate, §8.1, §8.2), and the
  scripted agent's voice activity detector hears the speech duration the file holds.
* Push-to-talk sends nothing until the button is held.
* Output audio plays through the playback worklet; after an interrupt the reported
  ``playedMs`` matches what a tap after the player measured reaching the output (§8.4).
"""

from __future__ import annotations

import re
from pathlib import Path

from reliability_harness import LiveServer

from support.browser import Driver, run_scenario, write_wav
from vrt.agents import AudioReceived, PlaybackReported

SPEECH_MS = 1000
#: The scripted agent measures speech in whole 20 ms frames; the resampler's filter
#: spreads an edge over less than a millisecond.
TOLERANCE_MS = 40


def _speech_ms(transcript: list[dict[str, str]]) -> list[int]:
    found = [re.search(r"\(speech (\d+) ms\)", item["text"]) for item in transcript]
    return [int(m.group(1)) for m in found if m and item_is_user(m.string)]


def item_is_user(text: str) -> bool:
    return text.startswith("🎤")


async def test_microphone_reaches_the_server_with_its_speech_duration(
    live: LiveServer, page: str, tmp_path: Path
) -> None:
    wav = write_wav(tmp_path / "speech.wav", [(500, 0.0), (SPEECH_MS, 0.5), (2500, 0.0)])
    result = await run_scenario("microphone", page=page, wav=f"{wav}%noloop")
    heard = _speech_ms(result["transcript"])
    assert len(heard) == 1, result["transcript"]
    assert abs(heard[0] - SPEECH_MS) <= TOLERANCE_MS, heard

    frames = [e for e in live.agent(result["sessionId"]).inputs if isinstance(e, AudioReceived)]
    assert frames, "the server received no audio"
    # §8.1: 20 ms frames of the session's input format (pcm16, 24 kHz), numbered from 0.
    assert {len(f.payload) for f in frames} == {960}
    assert [f.seq for f in frames] == list(range(len(frames)))


async def test_push_to_talk_sends_only_while_held(
    live: LiveServer, page: str, tmp_path: Path
) -> None:
    wav = write_wav(tmp_path / "loop.wav", [(SPEECH_MS, 0.5), (1000, 0.0)])
    driver = await Driver.start("push-to-talk", page=page, wav=str(wav), idleMs=2500)
    try:
        idle = await driver.line()
        agent = live.agent(idle["sessionId"])
        assert not [e for e in agent.inputs if isinstance(e, AudioReceived)]
        assert not _speech_ms(idle["transcript"])
        driver.tell("hold")
        result = await driver.result()
    finally:
        await driver.close()
    assert _speech_ms(result["transcript"]), result["transcript"]
    assert [e for e in agent.inputs if isinstance(e, AudioReceived)]


async def test_played_ms_after_an_interrupt_matches_the_audio_rendered(
    live: LiveServer, page: str
) -> None:
    # A 250 ms jitter buffer: audio received but still queued is far from audio played,
    # so a report counted from frames received could not pass.
    result = await run_scenario(
        "playback", page=page, speakMs=3000, interruptAfterMs=1000, jitterMs=250
    )
    (report,) = result["played"]
    (item,) = report
    rendered = result["renderedMs"]
    assert result["tap"]["rms"] > 0.1, "the tone did not reach the output"
    assert 0 < rendered < 3000
    assert abs(item["playedMs"] - rendered) <= TOLERANCE_MS, (item, rendered)

    # The server got that report, as an integer, for that item (§8.4).
    agent = live.agent(result["sessionId"])
    reports = [e for e in agent.inputs if isinstance(e, PlaybackReported)]
    assert [(r.item_id, r.played_ms) for r in reports] == [(item["itemId"], int(item["playedMs"]))]


async def test_opus_is_offered_only_where_webcodecs_has_it(page: str) -> None:
    result = await run_scenario("formats", page=page)
    pcm16 = {"encoding": "pcm16", "sampleRate": 24000}
    opus = {"encoding": "opus", "sampleRate": 48000}
    assert result["plain"] == {"input": pcm16, "output": pcm16}
    assert result["asked"] == (
        {"input": opus, "output": opus} if result["supported"] else result["plain"]
    )
    assert result["without"] == {"input": pcm16, "output": pcm16}
