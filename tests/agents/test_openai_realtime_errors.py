"""A provider's message reaches the client bounded, without control characters and
without the key (issue 30: "bounded in length and stripped of control characters";
the realtime service's ``error`` events are the provider's words as well)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace

import pytest
from openai_realtime_standin import StandIn
from voice_session import session

from vrt.agents.openai_realtime import OpenAIRealtimeAgent, config_from
from vrt.client import ErrorReceived
from vrt.server import VrtServer

API_KEY = "sk-standin-0123456789abcdefSECRET"


@pytest.fixture
async def url(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[StandIn, str]]:
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    async with StandIn(api_key=API_KEY) as standin:
        config = replace(config_from({"base_url": standin.url}, {}), connect_timeout=1.0)
        server = VrtServer(lambda info: OpenAIRealtimeAgent(config, API_KEY))
        yield standin, await server.start("127.0.0.1", 0)
        await server.close()


async def test_a_provider_message_is_bounded_and_cleaned(url: tuple[StandIn, str]) -> None:
    standin, served = url
    message = f"bad\r\n\x1b[31mthing\u202e with {API_KEY} " + "x" * 10_000
    async with session(served) as s:
        await standin.wait_for("session.update")
        await standin.inject(
            {
                "type": "error",
                "error": {"type": "server_error\x07", "code": None, "message": message},
            }
        )
        error = await s.next(ErrorReceived)
    assert error.recoverable
    assert API_KEY not in error.message
    assert "[redacted]" in error.message
    assert error.message.isprintable()
    assert len(error.message) <= 400
    assert error.message.startswith("model error (server_error): bad [31mthing with [redacted]")
