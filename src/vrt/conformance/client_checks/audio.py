"""§8 Audio: output audio the client plays (judged by its playback reports) and input
audio it sends (the ``/audio MS`` line of VRT_SAY), in the format ``ready`` chose."""

from __future__ import annotations

import asyncio
import json
from typing import Any, Final

from ...protocol.frames import FrameKind
from ..client_harness import PCM16, PROMPT, ClientHarness, WireFrame, check
from ..framework import NotApplicable, Skipped
from ..spec_tables import audio_ms, same_format

#: How much input audio the checks ask for, and how far from it the total may be.
INPUT_MS: Final = 400
INPUT_TOLERANCE_MS: Final = 20

# Output audio and playback (§6.2, §8.3, §8.4)


@check("§8.3", "MUST", needs=("audio-output",))
async def check_audio_without_start_discarded(h: ClientHarness) -> None:
    """Output audio without a current audio.start is discarded"""
    conn = await h.open()
    await conn.audio(500)  # before any audio.start
    await conn.audio_start("item-a", 1)
    await conn.audio(100)
    await conn.drop()
    conn2, _ = await h.reconnect()
    await conn2.audio(1000)  # a resumed connection has no current item (§8.3)
    await asyncio.sleep(0.5)
    await conn2.send_seq("interrupted", epoch=1)
    await h.until(lambda: h.playbacks("item-a"), 1.5)
    h.require_playbacks("item-a")
    h.require_played_at_most(
        "item-a", 100, "which had 100 ms after its audio.start: audio without one was played"
    )


@check("§6.2", "MUST", needs=("audio-output",))
async def check_closed_epoch_audio_not_played(h: ClientHarness) -> None:
    """Output audio of a closed epoch is never played"""
    conn = await h.open()
    await conn.interrupted_item("item-a", 1, 100, after=0.3)
    await conn.audio_start("item-b", 1)  # an item of the closed epoch
    await conn.audio(1000)
    await asyncio.sleep(0.5)
    await conn.interrupted_item("item-c", 2, 100, after=0.3)
    await h.until(lambda: h.playbacks("item-c"), 1.5)
    await asyncio.sleep(0.2)
    h.require_playbacks()
    h.require_played_at_most("item-b", 0, "an item of the closed epoch 1")
    h.require_played_at_most("item-a", 100, "of which 100 ms were sent before its epoch closed")


@check("§8.4", "MUST", needs=("audio-output",))
async def check_playback_not_beyond_sent(h: ClientHarness) -> None:
    """playback never reports more than was sent"""
    conn = await h.open()
    await conn.send_seq("turn.state", turnId="turn-1", epoch=1, state="speaking")
    await conn.interrupted_item("item-a", 1, 200, after=0.7)
    await h.until(h.playbacks, 1.5)
    await asyncio.sleep(0.2)
    strangers = [r for r in h.require_playbacks() if r.get("itemId") != "item-a"]
    if strangers:
        raise h.fail(f"playback of an item the suite never sent: {json.dumps(strangers[0])}")
    h.require_played_at_most("item-a", 200, "of which only 200 ms were sent")


@check("§8.4", "SHOULD", needs=("audio-output",))
async def check_playback_reported(h: ClientHarness) -> None:
    """An interrupted item's playback is reported"""
    conn = await h.open()
    await conn.interrupted_item("item-long", 1, 3000, after=0.5)
    if not await h.until(lambda: h.playbacks("item-long"), 1.5):
        raise h.fail(
            "an item of 3000 ms was interrupted 0.5 s in, and no playback report came "
            "(a client without audio output: --no-audio-output)"
        )
    played = h.playbacks("item-long")[0].get("playedMs")
    if not isinstance(played, int) or not 0 <= played < 3000:
        raise h.fail(f"playback reports {played!r} ms of an item stopped 0.5 s into 3000 ms")


# Input audio (§5.2, §8.1, §8.2): the '/audio MS' line of VRT_SAY


def _measurable(fmt: Any) -> bool:
    return isinstance(fmt, dict) and fmt.get("encoding") in ("pcm16", "pcmu")


async def _input_audio(
    h: ClientHarness, *, preferred: bool = False
) -> tuple[list[WireFrame], dict[str, Any]]:
    """Start the client with VRT_SAY ``/audio 400`` and answer ``ready.input`` with pcm16
    at 24000 Hz, or with the client's own preference (``preferred``); the binary frames
    it sent, and the format chosen."""
    await h.start(say=[f"/audio {INPUT_MS}"])
    conn = await h.accept()
    first = await h.first_frame(conn)
    wanted = h.hello_of(conn, first).get("input")
    fmt: dict[str, Any] = PCM16
    if preferred:
        if not _measurable(wanted) or same_format(wanted, PCM16):
            raise NotApplicable(
                f"the client prefers input {wanted}: no other format than pcm16 at 24000 Hz "
                "that the suite measures (pcm16 at any rate, pcmu)"
            )
        assert isinstance(wanted, dict)
        fmt = wanted
    await h.handshake(conn, first=first, ready_extra={"input": fmt})

    def sent_ms() -> float:
        payload = sum(max(0, len(f.data) - 5) for f in h.audio_from_client(conn))
        return audio_ms(payload, fmt) or 0.0

    await h.until(lambda: sent_ms() >= INPUT_MS - INPUT_TOLERANCE_MS, INPUT_MS / 1000 + PROMPT)
    await asyncio.sleep(0.3)  # anything beyond it
    frames = h.audio_from_client(conn)
    if not frames:
        raise Skipped(
            f"the client sent no input audio for '/audio {INPUT_MS}' (a client without audio "
            "input: run the suite with --no-audio-input)"
        )
    return frames, fmt


def _judge_length(h: ClientHarness, frames: list[WireFrame], fmt: dict[str, Any]) -> None:
    payload = sum(max(0, len(f.data) - 5) for f in frames)
    sent = audio_ms(payload, fmt)
    assert sent is not None
    if abs(sent - INPUT_MS) > INPUT_TOLERANCE_MS:
        raise h.fail(
            f"'/audio {INPUT_MS}' with ready.input {fmt}: the client sent {payload} bytes, "
            f"{sent:.0f} ms in that format; not audio in ready.input (§5.2)"
        )


@check("§8.1", "MUST", needs=("audio-input",))
async def check_audio_input_frames(h: ClientHarness) -> None:
    """Input audio frames: kind 1, seq from 0 up by one"""
    frames, _ = await _input_audio(h)
    for k, frame in enumerate(frames):
        data = frame.data
        assert isinstance(data, bytes)
        if len(data) < 5 or data[0] != FrameKind.INPUT:
            raise h.fail(
                f"an input audio frame that is not kind 1 with a 5-byte header: {frame.describe()}"
            )
        seq = int.from_bytes(data[1:5], "big")
        if seq != k % (1 << 32):
            raise h.fail(
                f"input audio frame {k} has seq {seq}; audio seq starts at 0, up by one (§8.1)"
            )


@check("§8.2, §5.2", "MUST", needs=("audio-input",))
async def check_audio_input_pcm16_24k(h: ClientHarness) -> None:
    """Input audio in pcm16 at 24000 Hz when ready chooses it"""
    frames, fmt = await _input_audio(h)
    _judge_length(h, frames, fmt)


@check("§5.2", "MUST", needs=("audio-input",))
async def check_audio_input_preferred_format(h: ClientHarness) -> None:
    """Input audio in the client's preferred format when ready chooses it"""
    frames, fmt = await _input_audio(h, preferred=True)
    _judge_length(h, frames, fmt)
