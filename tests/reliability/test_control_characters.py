"""A text may hold any character JSON can carry (RFC 8259, §6.3), control characters
included: the default agent (voice, scripted brain) answers one in text and speech,
with no error for the client and no ERROR in the server's log (148 of 148 such texts
logged a traceback: Piper's espeak-ng bridge refuses a NUL)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from support import RawClient, is_idle, start_server
from vrt.agents import SessionInfo
from vrt.agents.scripted import ScriptedAgent
from vrt.protocol.codec import Decoded
from vrt.protocol.messages import AgentText, Error
from vrt.voice import missing_packages

pytestmark = pytest.mark.skipif(bool(missing_packages()), reason="the voice extra is not installed")


@pytest.fixture(scope="module")
def stages() -> Any:
    from vrt.voice.options import build_stages

    return build_stages({})


async def test_a_text_with_control_characters_is_answered_without_an_error(
    stages: Any, caplog: pytest.LogCaptureFixture
) -> None:
    from vrt.voice.agent import VoiceAgent, VoiceConfig

    def voice(info: SessionInfo) -> VoiceAgent:
        del info
        return VoiceAgent(stages, ScriptedAgent(), VoiceConfig())

    running = await start_server(agent_factory=voice)
    caplog.set_level(logging.INFO)
    client = await RawClient.connect(running.url, auto_ack=True)
    try:
        await client.hello()
        for text in ("echo hi\u0000there", "echo bell\u0007 and escape\u001b[2J done"):
            await client.text(text)
            items = await client.until(is_idle, 30.0)
            messages = [item.message for item in items if isinstance(item, Decoded)]
            assert not [m for m in messages if isinstance(m, Error)], messages
            assert any(isinstance(m, AgentText) for m in messages)
            assert any(not isinstance(item, Decoded) for item in items), "no audio"
        errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert errors == []
    finally:
        await client.close()
        await running.close()
