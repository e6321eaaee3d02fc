"""The check every Gemini Live test runs on every message, both ways: Google's own
``google-genai`` types (``LiveClientMessage``, ``LiveServerMessage``) through
``gemini_wire.py``. A check that cannot fail proves nothing: these show that a
misspelt, snake_case, misplaced or mistyped member fails it, and that the stand-in
turns a client message that fails into the service's close 1007."""

from __future__ import annotations

from typing import Any

import gemini_session
import pytest
from gemini_live_standin import GeminiStandIn
from gemini_session import (
    ready,
    serve_agent,
    served,
)
from gemini_wire import WireError, check_client, check_server
from voice_session import idle, session

from vrt.agents.gemini_live import GeminiLiveAgent
from vrt.client import SessionFailed, TurnChanged

# The shared fixtures (gemini_session.py): pytest finds them here.
api_key_fixture = gemini_session.api_key_fixture
standin_fixture = gemini_session.standin_fixture

AUDIO = "AAECAwQ+/w=="  # standard base64, with the characters URL-safe base64 changes


VALID_CLIENT: list[dict[str, Any]] = [
    {"realtimeInput": {"audio": {"data": AUDIO, "mimeType": "audio/pcm;rate=16000"}}},
    {"realtimeInput": {"text": "hello"}},
    {
        "clientContent": {
            "turns": [{"role": "user", "parts": [{"text": "hi"}]}],
            "turnComplete": True,
        }
    },
    {"toolResponse": {"functionResponses": [{"id": "a", "name": "f", "response": {"x_y": 1}}]}},
    {
        "setup": {
            "model": "models/m",
            "sessionResumption": {"handle": "h"},
            "contextWindowCompression": {"slidingWindow": {}},
            "tools": [
                {
                    "functionDeclarations": [
                        {"name": "f", "parametersJsonSchema": {"properties": {"snake_case": {}}}}
                    ]
                }
            ],
        }
    },
]

INVALID_CLIENT: list[dict[str, Any]] = [
    {"realtimeInput": {"audoi": {"data": AUDIO}}},  # misspelt
    {"client_content": {"turns": [], "turnComplete": True}},  # the Python name
    {"clientContent": {"turns": [], "turn_complete": True}},
    {"setup": {"model": "m", "generationConfig": {"responseModalites": ["AUDIO"]}}},
    {"setup": {"model": "m", "voiceConfig": {}}},  # misplaced (inside speechConfig)
    {"clientContent": {"turns": [], "turnComplete": "yes"}},  # mistyped
    {"setup": {"model": "m", "generationConfig": {"responseModalities": ["AUIDO"]}}},
    {"toolResponse": {"functionResponses": [{"id": "a", "response": [1]}]}},  # not a Struct
    {"realtimeInput": {"audio": {"data": "not base64!", "mimeType": "audio/pcm"}}},
]

VALID_SERVER: list[dict[str, Any]] = [
    {"setupComplete": {}},
    {"serverContent": {"modelTurn": {"parts": [{"inlineData": {"data": AUDIO}}]}}},
    {"serverContent": {"interrupted": True}},
    {
        "serverContent": {"turnComplete": True, "turnCompleteReason": "MALFORMED_FUNCTION_CALL"},
        "usageMetadata": {"promptTokenCount": 5, "responseTokenCount": 2},
    },
    {"toolCall": {"functionCalls": [{"id": "c", "name": "f", "args": {"a_b": 1}}]}},
    {"toolCallCancellation": {"ids": ["c"]}},
    {"goAway": {"timeLeft": "50s"}},
    {"sessionResumptionUpdate": {"newHandle": "h", "resumable": True}},
]

INVALID_SERVER: list[dict[str, Any]] = [
    {"serverContent": {"turnCompleted": True}},
    {"go_away": {"timeLeft": "50s"}},
    {"goAway": {"time_left": "50s"}},
    {"serverContent": {"interrupted": "yes"}},  # a bool the lax type would take
    {"serverContent": {"turnComplete": True, "turnCompleteReason": "MALFORMED_CALL"}},
    {"toolCall": {"functionCalls": [{"id": "c", "name": "f", "args": [1, 2]}]}},
    {"sessionResumptionUpdate": {"newHandle": "h", "resumable": True, "handle": "h"}},
]


@pytest.mark.parametrize("message", VALID_CLIENT)
def test_what_the_adapter_sends_passes(message: dict[str, Any]) -> None:
    check_client(message)


@pytest.mark.parametrize("message", INVALID_CLIENT)
def test_a_client_message_google_genai_would_not_send_fails(message: dict[str, Any]) -> None:
    with pytest.raises(WireError):
        check_client(message)


@pytest.mark.parametrize("message", VALID_SERVER)
def test_what_the_service_sends_passes(message: dict[str, Any]) -> None:
    check_server(message)


@pytest.mark.parametrize("message", INVALID_SERVER)
def test_a_server_message_google_genai_does_not_know_fails(message: dict[str, Any]) -> None:
    with pytest.raises(WireError):
        check_server(message)


class _Misspelt(GeminiLiveAgent):
    """An adapter that asks for transcription under a wrong name."""

    def _setup_message(self, handle: str | None) -> dict[str, Any]:
        message = super()._setup_message(handle)
        message["inputAudioTranscripton"] = message.pop("inputAudioTranscription")
        return message


async def test_the_stand_in_closes_a_misspelt_message_as_the_service_does(
    api_key: str, standin: GeminiStandIn
) -> None:
    server, url = await serve_agent(standin, _Misspelt, {})
    try:
        async with session(url, reconnect=False) as s:
            failed = await s.next(SessionFailed)
            assert "inputAudioTranscripton" in failed.message
    finally:
        await server.close()
    assert standin.closes[0][0] == 1007
    (problem,) = standin.invalid
    assert "inputAudioTranscripton" in problem
    standin.invalid.clear()  # seen: the stand-in's exit would fail the test otherwise


async def test_the_stand_in_refuses_to_send_what_the_service_would_not(
    api_key: str, standin: GeminiStandIn
) -> None:
    async with served(standin) as url, session(url) as s:
        await ready(standin)
        with pytest.raises(AssertionError, match="turnCompleted"):
            await standin.connections[0].emit({"serverContent": {"turnCompleted": True}})
        await s.client.send_text("still fine")
        await s.next(TurnChanged, idle)
    assert len(standin.invalid) == 1
    standin.invalid.clear()
