"""What the Gemini Live tests share: the key in the environment, a real VrtServer
running the adapter against the stand-in, and waits on the stand-in; and the fixtures
``api_key``, ``standin`` and ``url``, which a test module imports (``*_fixture``)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import replace

import pytest
from gemini_live_standin import GeminiStandIn
from voice_session import Session, silence_frames, speech_frames

from vrt.agents.gemini_live import GeminiLiveAgent, config_from
from vrt.client import SessionFailed
from vrt.protocol.messages import PCM16_24K, Format
from vrt.server import ServerConfig, VrtServer

__all__ = [
    "API_KEY",
    "MODEL",
    "PCM16_16K",
    "PCMU",
    "api_key_fixture",
    "fatal",
    "ready",
    "serve",
    "serve_agent",
    "served",
    "speak",
    "standin_fixture",
    "url_fixture",
    "use_key",
]

API_KEY = "AIza-standin-0123456789SECRET"
MODEL = "gemini-standin"
PCM16_16K = Format(encoding="pcm16", sample_rate=16000)
PCMU = Format(encoding="pcmu", sample_rate=8000)


def use_key(monkeypatch: pytest.MonkeyPatch) -> str:
    """The stand-in's key in the environment, and no VRT_GEMINI_* setting."""
    monkeypatch.setenv("GEMINI_API_KEY", API_KEY)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    for name in ("MODEL", "VOICE", "INSTRUCTIONS", "BASE_URL", "TRANSCRIPTS"):
        monkeypatch.delenv(f"VRT_GEMINI_{name}", raising=False)
    return API_KEY


async def serve(standin: GeminiStandIn, **options: str) -> tuple[VrtServer, str]:
    """A VrtServer running the adapter (``--agent-option`` ``options``) against
    ``standin``, and its URL."""
    return await serve_agent(standin, GeminiLiveAgent, options)


async def serve_agent(
    standin: GeminiStandIn, agent: type[GeminiLiveAgent], options: Mapping[str, str]
) -> tuple[VrtServer, str]:
    """The same with an ``agent`` class of its own."""
    config = replace(
        config_from({"base_url": standin.url, "model": MODEL, **options}, {}),
        reconnect_initial=0.01,
        reconnect_max=0.05,
        connect_timeout=5.0,  # a loaded machine is slow to answer a handshake
    )
    # Some tests send seconds of audio at once: the server's audio budget (real time, 2 s
    # saved; tests/rules) is lifted so that the adapter's own bounds are what they test.
    server = VrtServer(lambda info: agent(config, API_KEY), config=ServerConfig(audio_burst=10.0))
    return server, await server.start("127.0.0.1", 0)


@contextlib.asynccontextmanager
async def served(standin: GeminiStandIn, **options: str) -> AsyncIterator[str]:
    """The URL of a VrtServer running the adapter against ``standin``."""
    server, url = await serve(standin, **options)
    try:
        yield url
    finally:
        await server.close()


def fatal(event: SessionFailed) -> bool:
    """The session ended on an AGENT_ERROR that is not recoverable (§9.2)."""
    return event.code == "AGENT_ERROR"


async def ready(standin: GeminiStandIn, connection: int = 1) -> None:
    """Until the stand-in confirmed the setup of ``connection``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5.0
    while not [m for n, m in standin.sent if n == connection and "setupComplete" in m]:
        if loop.time() > deadline:
            raise AssertionError(f"no setupComplete on connection {connection}: {standin.closes}")
        await asyncio.sleep(0.002)


async def speak(
    s: Session, standin: GeminiStandIn, fmt: Format = PCM16_24K, connection: int = 1
) -> list[bytes]:
    """Speech then silence, once ``connection`` is set up (audio before is dropped)."""
    await standin.wait_connections(connection)
    await ready(standin, connection)
    frames = speech_frames(fmt) + silence_frames(fmt)
    for frame in frames:
        assert s.client.send_audio(frame)
    return frames


@pytest.fixture(name="api_key")
def api_key_fixture(monkeypatch: pytest.MonkeyPatch) -> str:
    return use_key(monkeypatch)


@pytest.fixture(name="standin")
async def standin_fixture() -> AsyncIterator[GeminiStandIn]:
    async with GeminiStandIn(api_key=API_KEY, models=(MODEL,)) as running:
        yield running


@pytest.fixture(name="url")
async def url_fixture(standin: GeminiStandIn, api_key: str) -> AsyncIterator[str]:
    del api_key  # in the environment
    async with served(standin) as running:
        yield running
