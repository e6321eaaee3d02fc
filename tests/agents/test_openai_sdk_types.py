"""The stand-ins check every event against the openai package's own types (issue 30,
"How to test"): a misspelt or misplaced member fails a test, not a call. These tests
show that the checks refuse what they must, and that they are wired into every test
that runs the stand-ins (a broken adapter fails the test at the stand-in's close)."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import pytest
from openai_chat_standin import ChatStandIn, Event, chunk, request_problem, text_reply
from openai_chat_standin import chunk_problem as chat_chunk_problem
from openai_realtime_standin import StandIn, client_event_problem, server_event_problem
from voice_session import idle, session

from vrt.agents import load_agent
from vrt.agents.openai_chat import OpenAIChatAgent
from vrt.agents.openai_realtime import OpenAIRealtimeAgent, config_from
from vrt.client import TurnChanged, VrtClient
from vrt.server import VrtServer

API_KEY = "sk-standin-0123456789abcdefSECRET"

SESSION_UPDATE: dict[str, Any] = {
    "type": "session.update",
    "event_id": "vrt_session_1",
    "session": {
        "type": "realtime",
        "output_modalities": ["audio"],
        "instructions": "Be brief.",
        "audio": {
            "input": {
                "format": {"type": "audio/pcm", "rate": 24000},
                "turn_detection": {
                    "type": "server_vad",
                    "create_response": True,
                    "interrupt_response": False,
                },
                "transcription": {"model": "gpt-4o-mini-transcribe"},
            },
            "output": {"format": {"type": "audio/pcmu"}, "voice": "marin"},
        },
        "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
        "tool_choice": "auto",
    },
}


def changed(event: dict[str, Any], path: str, value: Any = None, *, remove: bool = False) -> Any:
    """A deep copy of ``event`` with the member at ``a.b.0.c`` set (or removed)."""
    copied = copy.deepcopy(event)
    *parents, last = path.split(".")
    node: Any = copied
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if remove:
        del node[last]
    elif isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return copied


# --- realtime client events ----------------------------------------------------------


def test_a_valid_session_update_passes() -> None:
    assert client_event_problem(SESSION_UPDATE) is None


@pytest.mark.parametrize(
    "broken",
    [
        # misspelt
        changed(SESSION_UPDATE, "session.audio.output.fromat", {"type": "audio/pcmu"}),
        changed(SESSION_UPDATE, "session.tool_choise", "auto"),
        # misplaced: the beta API's places of the same settings
        changed(SESSION_UPDATE, "session.voice", "marin"),
        changed(SESSION_UPDATE, "session.input_audio_format", "pcm16"),
        changed(SESSION_UPDATE, "session.audio.input.turn_detection.voice", "marin"),
        # wrong types and values
        changed(SESSION_UPDATE, "session.audio.input.format.rate", "24000"),
        changed(SESSION_UPDATE, "session.audio.output.format", {"type": "audio/pcm16"}),
        changed(SESSION_UPDATE, "type", "session.updat"),
    ],
)
def test_a_misspelt_or_misplaced_member_of_a_client_event_fails(broken: Any) -> None:
    assert client_event_problem(broken) is not None


@pytest.mark.parametrize(
    ("item", "valid"),
    [
        ({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}, 1),
        (
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "x"}],
            },
            1,
        ),
        ({"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}, 1),
        ({"type": "function_call_output", "call_id": "c", "output": "{}"}, 1),
        # inside a list the SDK types as Iterable (validated only as it is iterated)
        ({"type": "message", "role": "user", "content": [{"type": "input_text", "txt": "hi"}]}, 0),
        ({"type": "message", "role": "user", "content": [{"type": "output_text", "text": "x"}]}, 0),
        ({"type": "function_call_output", "call_id": "c", "output": {"a": 1}}, 0),
        ({"type": "function_call", "callId": "c", "name": "f", "arguments": "{}"}, 0),
    ],
)
def test_conversation_items_are_checked_to_the_leaves(item: dict[str, Any], valid: int) -> None:
    problem = client_event_problem({"type": "conversation.item.create", "item": item})
    assert (problem is None) == bool(valid), problem


# --- realtime server events ------------------------------------------------------------

AUDIO_DELTA: dict[str, Any] = {
    "type": "response.output_audio.delta",
    "event_id": "event_1",
    "response_id": "resp_1",
    "item_id": "item_1",
    "output_index": 0,
    "content_index": 0,
    "delta": "AAAA",
}


@pytest.mark.parametrize(
    ("event", "valid"),
    [
        (AUDIO_DELTA, True),
        (changed(AUDIO_DELTA, "dleta", "AAAA"), False),  # misspelt: an unknown member
        (changed(AUDIO_DELTA, "delta", remove=True), False),  # and a missing one
        (changed(AUDIO_DELTA, "type", "response.audio.delta"), False),  # a beta name
        (changed(AUDIO_DELTA, "output_index", "0"), False),  # a wrong type
        (
            {
                "type": "response.done",
                "event_id": "e",
                "response": {"id": "r", "status": "completed", "usage": {"total_tokens": 1}},
            },
            True,
        ),
        (
            {
                "type": "response.done",
                "event_id": "e",
                "response": {"id": "r", "status": "completed", "usage": {"totl_tokens": 1}},
            },
            False,  # misspelt, one level down
        ),
    ],
)
def test_server_events_are_checked_against_the_sdk_models(
    event: dict[str, Any], valid: bool
) -> None:
    problem = server_event_problem(event)
    assert (problem is None) == valid, problem


# --- chat ---------------------------------------------------------------------------------

REQUEST: dict[str, Any] = {
    "model": "m",
    "stream": True,
    "stream_options": {"include_usage": True},
    "messages": [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c", "content": "5"},
    ],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
}


@pytest.mark.parametrize(
    ("body", "valid"),
    [
        (REQUEST, True),
        (changed(REQUEST, "messages.1.contnet", "hi"), False),
        (changed(REQUEST, "messages.2.tool_call_id", "c"), False),  # misplaced
        (changed(REQUEST, "messages.2.tool_calls.0.function.args", "{}"), False),
        (changed(REQUEST, "stream_options.include_usage", "yes"), False),
        (changed(REQUEST, "messages.2.reasoning_content", "thought"), False),
        (changed(REQUEST, "messages.2.tool_calls.0.extra_content", {"google": {}}), False),
    ],
)
def test_chat_requests_are_checked_against_the_sdk_params(body: Any, valid: bool) -> None:
    problem = request_problem(body)
    assert (problem is None) == valid, problem


def test_provider_members_pass_only_where_allowed() -> None:
    body = changed(REQUEST, "messages.2.reasoning_content", "thought")
    assert request_problem(body, frozenset({"reasoning_content"})) is None
    elsewhere = changed(REQUEST, "messages.1.reasoning_content", "thought")  # a user message
    assert request_problem(elsewhere, frozenset({"reasoning_content"})) is not None
    thinking = chunk({"content": None, "reasoning_content": "hm"})
    assert chat_chunk_problem(thinking) is not None
    assert chat_chunk_problem(thinking, frozenset({"reasoning_content"})) is None
    assert chat_chunk_problem(chunk({"contnet": "x"})) is not None
    assert chat_chunk_problem(Event({"error": {"message": "boom"}})) is None  # not a chunk


# --- wired into every test ------------------------------------------------------------


async def test_an_adapter_event_the_sdk_refuses_fails_the_test(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The adapter's ``session.update`` with a misplaced member: the session runs (the
    stand-in, like the service, ignores what it does not know), and the stand-in's
    close fails the test."""
    original = OpenAIRealtimeAgent._session_config

    def misplaced(self: OpenAIRealtimeAgent) -> dict[str, Any]:
        return {**original(self), "voice": "marin"}  # the beta place of audio.output.voice

    monkeypatch.setattr(OpenAIRealtimeAgent, "_session_config", misplaced)
    standin = StandIn(api_key=API_KEY)
    await standin.start()
    config = replace(config_from({"base_url": standin.url}, {}), connect_timeout=1.0)
    server = VrtServer(lambda info: OpenAIRealtimeAgent(config, API_KEY))
    try:
        async with session(await server.start("127.0.0.1", 0)) as s:
            await s.client.send_text("hi")
            await s.next(TurnChanged, idle)
    finally:
        await server.close()
        with pytest.raises(AssertionError, match=r"session.update.*voice"):
            await standin.close()


async def test_a_chat_request_the_sdk_refuses_fails_the_test(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    original = OpenAIChatAgent._messages

    def misspelt(self: OpenAIChatAgent) -> list[dict[str, Any]]:
        return [*original(self)[:-1], {"role": "user", "contnet": "hi"}]

    monkeypatch.setattr(OpenAIChatAgent, "_messages", misspelt)
    standin = ChatStandIn()
    await standin.start()
    standin.reply(text_reply("ok"))
    server = VrtServer(load_agent("openai-chat", {"model": "m", "base_url": standin.url}))
    try:
        async with VrtClient(await server.start("127.0.0.1", 0)) as client:
            await client.send_text("hi")
            while not standin.requests:
                await client.next_event(5.0)
    finally:
        await server.close()
        with pytest.raises(AssertionError, match="contnet"):
            await standin.close()
