"""The voice agent's responses are measured at the seam like any agent's
(docs/operations.md#per-response-metrics): its brain's text and its speaker's audio are
one response, which for speech begins when the utterance's listening turn moves on."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from speech import corpus

from support import start_server
from vrt.agents import SessionInfo
from vrt.agents.scripted import ScriptedAgent
from vrt.client import AudioStarted, TurnChanged, VrtClient
from vrt.protocol.messages import Format
from vrt.server.metrics import ServerMetrics
from vrt.server.telemetry import Telemetry
from vrt.voice.agent import VoiceAgent, VoiceConfig
from vrt.voice.chat import Conversation, listen, speak

pytestmark = pytest.mark.timeout(120)

PCM16K = Format(encoding="pcm16", sample_rate=16000)


async def spoken_reply(conversation: Conversation, seen: int) -> int:
    """Until a turn that sent audio goes idle; the count of events seen then."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 20.0
    spoke = False
    while loop.time() < deadline:
        for index in range(seen, len(conversation.events)):
            event = conversation.events[index][1]
            spoke = spoke or isinstance(event, AudioStarted)
            if spoke and isinstance(event, TurnChanged) and event.state == "idle":
                return index + 1
        seen = len(conversation.events)
        await asyncio.sleep(0.02)
    raise AssertionError(f"no spoken reply: {conversation.events}")


async def test_typed_and_spoken_exchanges_are_measured(stages: Any) -> None:
    metrics = ServerMetrics("voice")

    def factory(info: SessionInfo) -> VoiceAgent:
        return VoiceAgent(stages, ScriptedAgent(), VoiceConfig())

    server = await start_server(agent_factory=factory, observer=Telemetry(metrics))
    try:
        async with VrtClient(server.url, input=PCM16K) as client:
            conversation = Conversation()
            await client.next_event(10.0)  # ready
            task = asyncio.create_task(listen(client, conversation))
            try:
                await client.send_text("echo good evening")
                seen = await spoken_reply(conversation, 0)
                utterance = corpus()[0]
                await speak(client, conversation, utterance.pcm16 + bytes(32000), 16000, PCM16K)
                await spoken_reply(conversation, seen)
            finally:
                task.cancel()
    finally:
        await server.close()
    completed = metrics.response_seconds["completed"]
    assert sum(completed.counts) == 2
    assert sum(metrics.response_seconds["interrupted"].counts) == 0
    assert sum(metrics.response_first_audio.counts) == 2  # the speaker's, both replies
    assert sum(metrics.response_first_text.counts) == 2  # the brain's chunks
    assert 0 <= metrics.response_first_text.sum <= metrics.response_first_audio.sum
    assert metrics.response_first_audio.sum <= completed.sum
    # The scripted brain counts no tokens: a voice agent around it reports none.
    assert all(sum(tokens.counts) == 0 for tokens in metrics.response_tokens.values())
    assert metrics.usage_ended == {}


async def test_a_model_brains_tokens_are_the_voice_agents(stages: Any) -> None:
    """A chat model as the brain (against the adapters' Chat Completions stand-in): the
    tokens it reports are counted per response and per session as any agent's are."""
    from agents.openai_chat_standin import ChatStandIn, text_reply
    from vrt.agents import load_agent
    from vrt.voice.options import voice_factory

    stand_in = ChatStandIn()
    base_url = await stand_in.start()
    stand_in.reply(text_reply("Good ", "evening."), text_reply("It is ", "ten."))
    brain = load_agent("openai-chat", {"model": "local", "base_url": base_url})
    metrics = ServerMetrics("voice")
    server = await start_server(
        agent_factory=voice_factory(stages, brain, VoiceConfig()), observer=Telemetry(metrics)
    )
    try:
        async with VrtClient(server.url, input=PCM16K) as client:
            conversation = Conversation()
            await client.next_event(10.0)  # ready
            task = asyncio.create_task(listen(client, conversation))
            try:
                await client.send_text("good evening")
                seen = await spoken_reply(conversation, 0)
                utterance = corpus()[0]  # "what time is it"
                await speak(client, conversation, utterance.pcm16 + bytes(32000), 16000, PCM16K)
                await spoken_reply(conversation, seen)
            finally:
                task.cancel()
        requests = [await stand_in.request(0), await stand_in.request(1)]
    finally:
        await server.close()
        await stand_in.close()
    # The stand-in reports 10 prompt tokens a message and 5 completion tokens a reply.
    assert sum(metrics.response_seconds["completed"].counts) == 2
    output = metrics.response_tokens["output", "text"]
    assert (sum(output.counts), output.sum) == (2, 10)
    prompt = metrics.response_tokens["input", "text"]
    assert (sum(prompt.counts), prompt.sum) == (2, sum(10 * len(r.messages) for r in requests))
    (total,) = metrics.usage_ended.values()
    assert (total.responses, total.output_tokens) == (2, 10)
