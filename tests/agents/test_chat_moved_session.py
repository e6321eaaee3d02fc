"""``--agent openai-chat`` on a session that moves to another process (a shared store,
docs/deploy.md): the members its provider attached to the assistant's messages and
calls (Gemini 3's thought signatures, DeepSeek's ``reasoning_content``; issue 30,
point 5) are kept in the store's conversation log with their entries, so the agent the
other process rebuilds (``restore``) sends them back and its provider, which refuses a
history without them (``openai_chat_standin.py``), answers."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from openai_chat_standin import ChatStandIn, text_reply, tool_call_reply
from test_openai_chat import KEY, conversation

from vrt.agents import load_agent
from vrt.agents.history import AgentSaid, HistoryEntry, ToolCalled
from vrt.protocol.codec import Decoded
from vrt.protocol.messages import Error, ToolCall
from vrt.server.redis_store import RedisSessionStore, decode_log

_TESTS = str(Path(__file__).resolve().parents[1])
if _TESTS not in sys.path:  # tests/ has no __init__.py: make ``support`` importable
    sys.path.insert(0, _TESTS)

from support import RawClient, chunks, is_idle, of_type, start_server  # noqa: E402
from support.redis_servers import start_redis  # noqa: E402

ADD = {
    "name": "add",
    "description": "Add two integers.",
    "parameters": {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    },
}


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


def is_call(item: Any) -> bool:
    return isinstance(item, Decoded) and isinstance(item.message, ToolCall)


async def test_provider_members_survive_a_move_to_another_process(standin: ChatStandIn) -> None:
    standin.thought_signatures = True
    standin.reasoning = True
    standin.reply(
        tool_call_reply(("call_m1", "add", ['{"a": 1, "b": 2}'])),
        text_reply("Three."),
        text_reply("Bye."),
    )
    factory = load_agent("openai-chat", {"model": "test-model", "base_url": standin.url})
    with start_redis() as redis:
        url = redis.store_url("chat")
        a = await start_server(agent_factory=factory, store=RedisSessionStore(url))
        b = await start_server(agent_factory=factory, store=RedisSessionStore(url))
        client = await RawClient.connect(a.url)
        resumed: RawClient | None = None
        try:
            ready = await client.hello(tools=[ADD])
            await client.text("1 + 2?")
            call = (await client.until(is_call, 5.0))[-1]
            assert isinstance(call, Decoded)
            assert isinstance(call.message, ToolCall)
            await client.send_sequenced(
                "tool.result",
                callId=call.message.call_id,
                epoch=call.message.epoch,
                ok=True,
                output=3,
            )
            assert chunks(await client.until(is_idle, 5.0)) == ["Three."]
            await client.close()
            # The session moves: the other process rebuilds its agent from the store.
            resumed = await RawClient.connect(b.url)
            resumed.next_seq = client.next_seq
            await resumed.hello(sessionId=ready.session_id, resumeFrom=client.last_seq)
            await resumed.text("thanks")
            items = await resumed.until(is_idle, 5.0)
            assert chunks(items) == ["Bye."]
            assert of_type(items, Error) == []
        finally:
            for c in (client, resumed):
                if c is not None:
                    await c.close()
            await a.close()
            await b.close()
    assert len(standin.requests) == 3  # none refused
    calls, answer = [m for m in conversation(await standin.request(2)) if m["role"] == "assistant"]
    assert calls["tool_calls"][0]["extra_content"] == {
        "google": {"thought_signature": standin.signatures["call_m1"]}
    }
    assert calls["reasoning_content"] == standin.reasonings[0]
    assert answer == {
        "role": "assistant",
        "content": "Three.",
        "reasoning_content": standin.reasonings[1],
    }


# --- the log's format: entries with and without provider members ---------------------


class _OldAgentSaid(msgspec.Struct, frozen=True, kw_only=True, tag="agent"):
    """``AgentSaid`` as code before provider members wrote and read it."""

    turn_id: str | None
    text: str
    spoken: bool = False


def test_logs_of_older_code_read_the_same_and_older_code_reads_new_ones() -> None:
    """The members are an optional member of the entries: a log written before them
    reads with none, and a reader that does not know them skips them (a rolling
    upgrade shares one store)."""
    old = msgspec.msgpack.encode([_OldAgentSaid(turn_id="t_1", text="Hi.")])
    (entry,) = decode_log(old)
    assert entry == AgentSaid(turn_id="t_1", text="Hi.")
    assert entry.provider is None
    new: list[HistoryEntry] = [
        AgentSaid(turn_id="t_1", text="Hi.", provider={"reasoning_content": "r"}),
        ToolCalled(
            call_id="c_1",
            name="add",
            arguments={"a": 1},
            turn_id="t_1",
            provider={"call": {"extra_content": {"google": {"thought_signature": "s"}}}},
        ),
    ]
    blob = msgspec.msgpack.encode(new)
    assert decode_log(blob) == new
    (read,) = msgspec.msgpack.decode(msgspec.msgpack.encode(new[:1]), type=list[_OldAgentSaid])
    assert read == _OldAgentSaid(turn_id="t_1", text="Hi.")
