"""``--agent openai-chat`` against providers that attach members of their own to what
they stream and refuse a later request without them (issue 30, point 5): Gemini 3's
``tool_calls[].extra_content.google.thought_signature`` through Google's
OpenAI-compatible endpoint, DeepSeek's ``reasoning_content`` in thinking mode; and the
provider's own error message in the ``AGENT_ERROR`` the client sees. Each stand-in
behaviour names its source in ``openai_chat_standin.py``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from openai_chat_standin import (
    ChatStandIn,
    Event,
    Status,
    Stream,
    chunk,
    text_reply,
    tool_call_reply,
)
from test_openai_chat import KEY, add, conversation, next_turn, session

from vrt.client import RunTool


@pytest.fixture(autouse=True)
def environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("VRT_OPENAI_CHAT_MODEL", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)


@pytest.fixture
async def standin() -> AsyncIterator[ChatStandIn]:
    server = ChatStandIn()
    await server.start()
    yield server
    await server.close()


def assistant_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m for m in messages if m["role"] == "assistant"]


async def test_gemini_thought_signatures_go_back_with_their_calls(standin: ChatStandIn) -> None:
    """Two parallel calls, the first signed (as Gemini 3 signs only the first call of a
    step), then the answer, then a second user turn: every later request carries the
    signature back on its call and none is refused."""
    standin.thought_signatures = True
    standin.reply(
        tool_call_reply(
            ("call_g1", "add", ['{"a": 1, ', '"b": 2}']), ("call_g2", "add", ['{"a": 0, "b": 0}'])
        ),
        text_reply("Three."),
        text_reply("Bye."),
    )
    async with session(standin, tools=[add]) as client:
        await client.send_text("1 + 2?")
        turn = await next_turn(client)
        assert turn.texts == ["Three."]
        assert turn.errors == []
        assert [e.name for e in turn.events if isinstance(e, RunTool)] == ["add", "add"]
        await client.send_text("thanks")
        turn = await next_turn(client)
        assert turn.texts == ["Bye."]
        assert turn.errors == []
    signature = standin.signatures["call_g1"]
    for n in (1, 2):
        (call_message, *_) = assistant_messages(conversation(await standin.request(n)))
        first, second = call_message["tool_calls"]
        assert first == {
            "id": "call_g1",
            "type": "function",
            "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'},
            "extra_content": {"google": {"thought_signature": signature}},
        }
        assert "extra_content" not in second  # the provider gave it none
    assert len(standin.requests) == 3


async def test_deepseek_reasoning_is_accumulated_and_sent_back(standin: ChatStandIn) -> None:
    """``reasoning_content`` streamed in fragments (then null in every content chunk)
    comes back whole on its assistant message, with and without tool calls."""
    standin.reasoning = True
    standin.reply(
        tool_call_reply(("call_d1", "add", ['{"a": 2, "b": 2}'])),
        text_reply("Four", "."),
        text_reply("Sure."),
    )
    async with session(standin, tools=[add]) as client:
        await client.send_text("2 + 2?")
        turn = await next_turn(client)
        assert turn.texts == ["Four", "."]
        assert turn.errors == []
        await client.send_text("again?")
        turn = await next_turn(client)
        assert turn.texts == ["Sure."]
        assert turn.errors == []
    last = conversation(await standin.request(2))
    assert [m.get("reasoning_content") for m in assistant_messages(last)] == standin.reasonings[:2]
    calls, answer = assistant_messages(last)
    assert calls["content"] is None
    assert calls["tool_calls"][0]["id"] == "call_d1"
    assert answer == {
        "role": "assistant",
        "content": "Four.",
        "reasoning_content": standin.reasonings[1],
    }


async def test_unknown_members_are_kept_whatever_they_are(standin: ChatStandIn) -> None:
    """Members no rule here knows, on the message, the call and its function, keep their
    shape: strings joined across chunks, objects merged, lists extended."""
    standin.provider_members = {"vendor", "meta", "strict_mode"}  # beyond the SDK's types
    standin.reply(
        _stream(
            chunk({"role": "assistant", "content": None, "vendor": {"trace": ["a"]}}),
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_u1",
                            "type": "function",
                            "function": {"name": "add", "arguments": "", "strict_mode": True},
                            "meta": {"step": "1", "tags": ["x"]},
                        }
                    ]
                }
            ),
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "function": {"arguments": '{"a": 0, "b": 0}'},
                            "meta": {"step": "2", "tags": ["y"], "done": True},
                        }
                    ],
                    "vendor": {"trace": ["b"], "note": "n"},
                }
            ),
            chunk({}, "tool_calls"),
        ),
        text_reply("Zero."),
    )
    async with session(standin, tools=[add]) as client:
        await client.send_text("0 + 0?")
        assert (await next_turn(client)).texts == ["Zero."]
    (message,) = assistant_messages(conversation(await standin.request(1)))
    assert message["vendor"] == {"trace": ["a", "b"], "note": "n"}
    (call,) = message["tool_calls"]
    assert call["meta"] == {"step": "12", "tags": ["x", "y"], "done": True}
    assert call["function"] == {
        "name": "add",
        "arguments": '{"a": 0, "b": 0}',
        "strict_mode": True,
    }


def _stream(*events: Event) -> Stream:
    return Stream(tuple(events))


@pytest.mark.parametrize(
    ("body", "said"),
    [
        # Google's OpenAI-compatible endpoint: a list of one error (paws#103).
        (
            [{"error": {"code": 400, "message": "Corrupted thought signature.", "status": "X"}}],
            "Corrupted thought signature.",
        ),
        # DeepSeek / OpenAI: {"error": {message, type, ...}}.
        (
            {"error": {"message": "Missing `reasoning_content` field", "type": "invalid"}},
            "Missing `reasoning_content` field",
        ),
    ],
)
async def test_the_providers_own_message_reaches_the_client(
    standin: ChatStandIn, body: Any, said: str
) -> None:
    standin.reply(Status(400, body), text_reply("ok"))
    async with session(standin) as client:
        await client.send_text("hi")
        turn = await next_turn(client)
        (error,) = turn.errors
        assert error.recoverable
        assert error.message == f"the model provider answered HTTP 400: {said}"
        await client.send_text("again")
        assert (await next_turn(client)).texts == ["ok"]


async def test_a_providers_message_is_bounded_and_cleaned(standin: ChatStandIn) -> None:
    """A message with control characters, a bidirectional override, the key and 10 kB of
    text reaches the client as one short clean line without the key."""
    message = f"bad\r\n\x1b[31mrequest\u202e for {KEY} " + "x" * 10_000
    standin.reply(Status(400, {"error": {"message": message}}))
    standin.reply(_stream(chunk({"content": "par"}), _error_event(message)))
    async with session(standin) as client:
        shown: list[str] = []
        for text in ("one", "two"):
            await client.send_text(text)
            shown.extend(e.message for e in (await next_turn(client)).errors)
    assert len(shown) == 2
    for line in shown:
        assert KEY not in line
        assert "[redacted]" in line
        assert len(line) <= 400
        assert line.isprintable()
        assert "bad [31mrequest for" in line


def _error_event(message: str) -> Event:
    return Event({"error": {"message": message, "type": "server_error"}})


async def test_nothing_is_lost_across_a_failed_request(standin: ChatStandIn) -> None:
    """The request after a tool call fails (503): the call, its result and its signature
    stay in the history, and the next user message is answered with all of them."""
    standin.thought_signatures = True
    standin.reply(
        tool_call_reply(("call_f1", "add", ['{"a": 5, "b": 5}'])),
        Status(503, {"error": {"message": "The model is overloaded.", "type": "unavailable"}}),
        text_reply("Ten."),
    )
    async with session(standin, tools=[add]) as client:
        await client.send_text("5 + 5?")
        turn = await next_turn(client)
        assert [e.message for e in turn.errors] == [
            "the model provider answered HTTP 503: The model is overloaded."
        ]
        await client.send_text("well?")
        assert (await next_turn(client)).texts == ["Ten."]
    assert conversation(await standin.request(2)) == [
        {"role": "user", "content": "5 + 5?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_f1",
                    "type": "function",
                    "function": {"name": "add", "arguments": '{"a": 5, "b": 5}'},
                    "extra_content": {
                        "google": {"thought_signature": standin.signatures["call_f1"]}
                    },
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_f1", "content": "10"},
        {"role": "user", "content": "well?"},
    ]


async def test_a_member_the_provider_will_not_take_back_is_dropped(standin: ChatStandIn) -> None:
    """deepseek-reasoner as first released streamed ``reasoning_content`` and refused it
    back: the request is made again at once without it, and it is not sent again."""
    standin.reasoning_display_only = True
    standin.reply(text_reply("One."), text_reply("Two."), text_reply("Three."))
    async with session(standin) as client:
        for text in ("one", "two", "three"):
            await client.send_text(text)
            turn = await next_turn(client)
            assert turn.errors == []
    refused, retried, third = [await standin.request(n) for n in (1, 2, 3)]
    assert "reasoning_content" in assistant_messages(refused.messages)[0]
    assert retried.messages == [
        {k: v for k, v in m.items() if k != "reasoning_content"} for m in refused.messages
    ]
    assert not any("reasoning_content" in m for m in third.messages)
    assert len(standin.requests) == 4


async def test_a_member_the_provider_asks_for_is_never_dropped(standin: ChatStandIn) -> None:
    """DeepSeek V4's 400 names ``reasoning_content`` without refusing it ("must be
    passed back"): nothing is retried without it; the client hears the message."""
    message = "The `reasoning_content` in the thinking mode must be passed back to the API."
    standin.reasoning = True
    standin.reply(text_reply("One."), Status(400, {"error": {"message": message}}))
    async with session(standin) as client:
        await client.send_text("one")
        await next_turn(client)
        await client.send_text("two")
        turn = await next_turn(client)
    assert [e.message for e in turn.errors] == [f"the model provider answered HTTP 400: {message}"]
    assert len(standin.requests) == 2
