"""Opus through WebCodecs, both ways (§8.2): a page that prefers Opus, where Chromium has
it, sends its microphone as one Opus packet per 20 ms frame, and plays Opus output.

The agent here takes and produces Opus unchanged (the scripted agent has no Opus codec):
it keeps the packets the client sent and, on the text ``play``, sends them back as one
output item. What comes back out of the page's speaker is the tone the WAV held.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from support.browser import run_scenario, write_wav
from vrt.agents import AgentSession, AudioReceived, SessionInfo, UserTextReceived
from vrt.demo import demo_files, start_page_server
from vrt.protocol.messages import Format
from vrt.server import VrtServer

OPUS = Format(encoding="opus", sample_rate=48000)
TONE_MS = 1000


class OpusLoopback:
    input_formats: tuple[Format, ...] = (OPUS,)
    output_formats: tuple[Format, ...] = (OPUS,)

    def __init__(self) -> None:
        self.packets: list[bytes] = []

    async def run(self, session: AgentSession) -> None:
        async for event in session.events():
            if isinstance(event, AudioReceived):
                self.packets.append(event.payload)
            elif isinstance(event, UserTextReceived) and event.text == "play":
                turn = session.begin_turn("speaking")
                item = turn.audio()
                assert item is not None
                for packet in self.packets:
                    item.write(packet, 20.0)
                turn.end()


@pytest.fixture
def agents() -> list[OpusLoopback]:
    return []


@pytest.fixture
async def opus_page(agents: list[OpusLoopback]) -> AsyncIterator[str]:
    def factory(info: SessionInfo) -> OpusLoopback:
        del info
        agents.append(OpusLoopback())
        return agents[-1]

    server = VrtServer(factory)
    url = await server.start("127.0.0.1", 0)
    httpd, page = start_page_server(demo_files(), "127.0.0.1", 0, url)
    try:
        yield page
    finally:
        httpd.shutdown()
        httpd.server_close()
        await server.close()


async def test_opus_microphone_and_speaker_round_trip(
    opus_page: str, agents: list[OpusLoopback], tmp_path: Path
) -> None:
    wav = write_wav(tmp_path / "tone.wav", [(300, 0.0), (TONE_MS, 0.5), (3000, 0.0)])
    result = await run_scenario("opus", page=opus_page, wav=f"{wav}%noloop", captureMs=3000)
    if result["formats"] != "in opus 48000, out opus 48000":
        pytest.skip(f"this Chromium has no WebCodecs Opus ({result['formats']})")
    (agent,) = agents
    assert len(agent.packets) > 50
    # RFC 6716 §3.1: every packet's TOC byte says one mono frame of 20 ms (configs whose
    # frame size is 20 ms: 1, 5, 9, 13, 15, 19, 23, 27, 31), code 0.
    tocs = {packet[0] for packet in agent.packets}
    assert all(toc >> 3 in {1, 5, 9, 13, 15, 19, 23, 27, 31} for toc in tocs), tocs
    assert all(toc & 0b111 == 0 for toc in tocs), tocs
    # Played back through the AudioDecoder: the tone, its length kept (Opus smears an
    # edge by a few milliseconds).
    assert result["tap"]["rms"] > 0.2
    assert abs(result["renderedMs"] - TONE_MS) <= 40, result["renderedMs"]
