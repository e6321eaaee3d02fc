"""The scripted agent (vrt.agents.scripted), driven through the real server core.

Each test opens a session on a :class:`ServerConnection`, runs the agent on an
:class:`AgentSession` whose flush drains the outbox and delivers the core's events,
feeds client messages as wire text and decodes every frame the server sent.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from vrt.agents.base import Agent, AgentSession, SessionInfo
from vrt.agents.scripted import (
    REMEMBERED,
    SCRIPTED_FORMATS,
    ScriptedAgent,
    scripted_agent,
    spoken_command,
    spoken_scripted_agent,
)
from vrt.audio import frame_bytes, silence, tone
from vrt.protocol.codec import Invalid, decode_server, encode
from vrt.protocol.frames import AudioFrame, FrameKind, build_frame, parse_frame
from vrt.protocol.messages import (
    PCM16_24K,
    UNSET,
    AgentText,
    AudioStart,
    ContextUpdate,
    Error,
    Format,
    Hello,
    Interrupt,
    Interrupted,
    Message,
    Playback,
    Ready,
    Tool,
    ToolCall,
    ToolCallDelta,
    ToolResult,
    ToolStream,
    Transcript,
    TurnState,
    UserText,
)
from vrt.protocol.outputs import Close, SendBinary, SendText
from vrt.protocol.server import ServerConfig, ServerConnection, ServerSession

TOOL_STREAM = "tool-stream-v1"
PCMU = Format(encoding="pcmu", sample_rate=8000)
PCM16_16K = Format(encoding="pcm16", sample_rate=16000)
TIMEOUT = 5.0

Sent = Message | AudioFrame | Close


class Harness:
    """One server connection and session, with the scripted agent running on it."""

    def __init__(self, hello: Hello) -> None:
        self.loop = asyncio.get_running_loop()
        self.config = ServerConfig()
        self.conn = ServerConnection(self.config, now=0.0)
        self.conn.receive_text(encode(hello, 0), 0.0)
        (event,) = self.conn.take_events()
        self.core = ServerSession(
            event.hello,
            self.config,
            input_formats=SCRIPTED_FORMATS,
            output_formats=SCRIPTED_FORMATS,
        )
        self.conn.open(self.core, 0.0)
        self.sent: list[Sent] = []
        self.times: list[float] = []  # loop time at which each of ``sent`` left
        self.ticks: list[int] = []  # the value of ``tick`` when each of ``sent`` left
        self.tick = 0
        self.session = AgentSession(self.core, self.flush, self.loop.time)
        self.agent = ScriptedAgent()
        self.seq = 0
        self.audio_seq = 0
        self.flush()
        self.task = asyncio.create_task(self.agent.run(self.session))

    def flush(self) -> None:
        now = self.loop.time()
        for out in self.conn.take_outbox():
            if isinstance(out, SendText):
                decoded = decode_server(out.data)
                assert not isinstance(decoded, Invalid), decoded
                self.sent.append(decoded.message)
            elif isinstance(out, SendBinary):
                frame = parse_frame(out.data, "client")
                assert not isinstance(frame, Invalid), frame
                self.sent.append(frame)
            else:
                self.sent.append(out)
            self.times.append(now)
            self.ticks.append(self.tick)
        self.session.deliver(self.core.take_events())

    def send(self, message: Message) -> None:
        self.seq += 1
        self.conn.receive_text(encode(message, self.seq), self.loop.time())
        self.flush()

    def text(self, text: str) -> None:
        self.send(UserText(text=text))

    def audio(self, *payloads: bytes) -> None:
        """Input audio frames, all delivered in one flush."""
        for payload in payloads:
            frame = build_frame(FrameKind.INPUT, self.audio_seq, payload)
            self.audio_seq += 1
            self.conn.receive_binary(frame, self.loop.time())
        self.flush()

    def of(self, kind: type[Any]) -> list[Any]:
        return [m for m in self.sent if isinstance(m, kind)]

    def idles(self) -> int:
        return sum(1 for m in self.of(TurnState) if m.state == "idle")

    async def until(self, condition: Callable[[], bool], timeout: float = TIMEOUT) -> None:
        deadline = self.loop.time() + timeout
        while not condition():
            assert self.loop.time() < deadline, f"timed out; sent: {summary(self.sent)}"
            await asyncio.sleep(0.002)

    async def idle(self, count: int = 1) -> None:
        await self.until(lambda: self.idles() >= count)

    async def settle(self) -> None:
        """Let the agent handle what is queued (no timers involved)."""
        for _ in range(10):
            await asyncio.sleep(0)

    async def close(self) -> None:
        self.task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await self.task
        reply = self.agent._reply
        if reply is not None:
            await asyncio.gather(reply, return_exceptions=True)
            assert reply.done()


def summary(sent: list[Sent]) -> list[tuple[Any, ...]]:
    """Each frame as a short tuple, without ids, for exact sequence assertions."""
    out: list[tuple[Any, ...]] = []
    for m in sent:
        if isinstance(m, TurnState):
            out.append(("state", m.state))
        elif isinstance(m, AgentText):
            out.append(("text", m.text))
        elif isinstance(m, Transcript):
            out.append(("transcript", m.role, m.text))
        elif isinstance(m, AudioStart):
            out.append(("audio.start",))
        elif isinstance(m, AudioFrame):
            out.append(("frame", len(m.payload)))
        elif isinstance(m, ToolCallDelta):
            out.append(("delta", m.preview["argumentsDelta"]))
        elif isinstance(m, ToolCall):
            out.append(("tool.call", m.name, m.arguments))
        elif isinstance(m, ToolStream):
            detail = {
                k: getattr(m, k)
                for k in ("delta", "arguments", "progress", "ok", "code")
                if getattr(m, k) is not UNSET
            }
            out.append(("stream", m.phase, detail))
        elif isinstance(m, Interrupted):
            out.append(("interrupted", m.epoch))
        elif isinstance(m, Error):
            out.append(("error", m.code, m.message, m.recoverable))
        elif isinstance(m, Ready):
            out.append(("ready",))
        else:
            out.append((type(m).__name__,))
    return out


def echo_summary(words: list[str], frame: int = 960, frames: int = 10) -> list[tuple[Any, ...]]:
    return [
        ("state", "thinking"),
        ("state", "speaking"),
        *[("text", w if k == 0 else f" {w}") for k, w in enumerate(words)],
        ("transcript", "agent", " ".join(words)),
        ("audio.start",),
        *[("frame", frame)] * frames,
        ("state", "idle"),
    ]


def scenario(
    hello: Hello | None = None,
) -> Callable[[Callable[[Harness], Awaitable[None]]], Callable[[], None]]:
    """Run an async test body against a fresh harness, then stop the agent."""

    def wrap(body: Callable[[Harness], Awaitable[None]]) -> Callable[[], None]:
        def test() -> None:
            async def main() -> None:
                h = Harness(hello or Hello())
                try:
                    await body(h)
                finally:
                    await h.close()

            asyncio.run(main())

        test.__name__ = body.__name__
        test.__doc__ = body.__doc__
        return test

    return wrap


def after_ready(h: Harness) -> list[tuple[Any, ...]]:
    assert isinstance(h.sent[0], Ready)
    return summary(h.sent[1:])


def turn_ids(h: Harness) -> set[str]:
    return {m.turn_id for m in h.of(TurnState)}


# --- formats and the factory -----------------------------------------------------------


def test_factory_builds_an_agent_per_session() -> None:
    info = SessionInfo(None, (), (), None, None, None)
    first, second = scripted_agent(info), scripted_agent(info)
    assert isinstance(first, ScriptedAgent)
    assert isinstance(first, Agent)
    assert first is not second
    assert first.input_formats == first.output_formats == SCRIPTED_FORMATS
    assert [(f.encoding, f.rate) for f in SCRIPTED_FORMATS] == [
        ("pcm16", 24000),
        ("pcm16", 16000),
        ("pcmu", 8000),
    ]


# --- echo and unknown text -------------------------------------------------------------


@scenario()
async def test_echo(h: Harness) -> None:
    h.text("echo hello big world")
    await h.idle()
    assert after_ready(h) == echo_summary(["hello", "big", "world"])
    assert len(turn_ids(h)) == 1
    (start,) = h.of(AudioStart)
    (state, *_) = h.of(TurnState)
    assert (start.turn_id, start.epoch) == (state.turn_id, state.epoch)
    (transcript,) = h.of(Transcript)
    assert transcript.final
    assert transcript.turn_id == state.turn_id
    frames = h.of(AudioFrame)
    assert b"".join(f.payload for f in frames) == tone(200, PCM16_24K)
    assert [f.seq for f in frames] == list(range(10))


@pytest.mark.parametrize(("fmt", "frame"), [(PCMU, 160), (PCM16_16K, 640)])
def test_echo_in_the_session_output_format(fmt: Format, frame: int) -> None:
    @scenario(Hello(output=fmt))
    async def body(h: Harness) -> None:
        ready = h.sent[0]
        assert isinstance(ready, Ready)
        assert (ready.output.encoding, ready.output.rate) == (fmt.encoding, fmt.rate)
        h.text("echo hi")
        await h.idle()
        assert after_ready(h) == echo_summary(["hi"], frame=frame)
        assert b"".join(f.payload for f in h.of(AudioFrame)) == tone(200, fmt)

    body()


@scenario()
async def test_unknown_text_is_echoed_whole(h: Harness) -> None:
    h.text("  what   is this ")
    await h.idle()
    assert after_ready(h) == echo_summary(["what", "is", "this"])


@pytest.mark.parametrize(
    ("heard", "read"),
    [
        ("Echo, good morning.", "echo good morning."),
        ("Speak 500.", "speak 500"),
        ("Burst 3.", "burst 3"),
        ("Context?", "context?"),
        ("History?", "history?"),
        ('Call add {"a": 1}', 'call add {"a": 1}'),
        ("Error!", "error"),
        # Not a command word: as heard.
        ("Echoes of the past.", "Echoes of the past."),
        ("Overlord now.", "Overlord now."),
        ("", ""),
    ],
)
def test_a_transcript_is_read_as_the_command_it_names(heard: str, read: str) -> None:
    assert spoken_command(heard) == read


def test_only_the_voice_agents_brain_reads_transcripts() -> None:
    # The voice agent's options choose this factory for a scripted brain; that it is
    # used is shown end to end by tests/voice/test_spoken_commands.py.
    info = SessionInfo(None, (), (), None, None, None)
    assert spoken_scripted_agent(info).spoken
    assert not scripted_agent(info).spoken


@scenario()
async def test_typed_text_is_read_exactly(h: Harness) -> None:
    h.text("Echo, hello")  # not the command: typed text is matched case-sensitively
    await h.idle()
    assert after_ready(h) == echo_summary(["Echo,", "hello"])


@scenario()
async def test_empty_text(h: Harness) -> None:
    h.text("")
    await h.idle()
    assert after_ready(h) == echo_summary([])


@scenario()
async def test_each_text_is_its_own_turn(h: Harness) -> None:
    h.text("echo a")
    await h.idle()
    h.text("echo b")
    await h.idle(2)
    assert after_ready(h) == echo_summary(["a"]) + echo_summary(["b"])
    epochs = [m.epoch for m in h.of(TurnState)]
    assert epochs[0] < epochs[-1]
    assert len(turn_ids(h)) == 2


# --- tools -----------------------------------------------------------------------------

TOOLS = (Tool(name="add"), Tool(name="lookup"))


@scenario(Hello(tools=TOOLS))
async def test_call_ok(h: Harness) -> None:
    h.text('call add {"a": 1, "b": [2, 3], "label": "sum"}')
    await h.until(lambda: bool(h.of(ToolCall)))
    sent = after_ready(h)
    assert sent[:2] == [("state", "thinking"), ("state", "acting")]
    deltas = [s[1] for s in sent if s[0] == "delta"]
    assert "".join(deltas) == '{"a":1,"b":[2,3],"label":"sum"}'
    assert all(len(d) == 8 for d in deltas[:-1])
    assert sent[-1] == ("tool.call", "add", {"a": 1, "b": [2, 3], "label": "sum"})
    (call,) = h.of(ToolCall)
    assert call.turn_id == h.of(TurnState)[0].turn_id
    assert {d.call_id for d in h.of(ToolCallDelta)} == {call.call_id}
    assert h.idles() == 0

    h.send(ToolResult.success(call.call_id, call.epoch, {"sum": 6, "items": ["x"]}))
    await h.idle()
    assert after_ready(h)[-2:] == [
        ("text", 'result ok {"sum":6,"items":["x"]}'),
        ("state", "idle"),
    ]


@scenario(Hello(tools=TOOLS))
async def test_call_failed(h: Harness) -> None:
    h.text("call lookup null")
    await h.until(lambda: bool(h.of(ToolCall)))
    (call,) = h.of(ToolCall)
    assert call.arguments is None
    h.send(ToolResult.failure(call.call_id, call.epoch, "FAILED", "no such thing"))
    await h.idle()
    assert after_ready(h)[-2:] == [("text", "result error FAILED"), ("state", "idle")]


@scenario(Hello(tools=TOOLS))
async def test_call_rejected_code_is_reported(h: Harness) -> None:
    h.text('call add {"a":1}')
    await h.until(lambda: bool(h.of(ToolCall)))
    (call,) = h.of(ToolCall)
    h.send(ToolResult.failure(call.call_id, call.epoch, "REJECTED"))
    await h.idle()
    assert h.of(AgentText)[-1].text == "result error REJECTED"


@scenario(Hello(tools=TOOLS))
async def test_call_of_a_tool_the_client_does_not_host(h: Harness) -> None:
    h.text("call unknown {}")
    await h.idle()
    assert after_ready(h) == [
        ("state", "thinking"),
        ("state", "acting"),
        ("text", "result error FAILED"),
        ("state", "idle"),
    ]


@pytest.mark.parametrize(
    ("text", "reply"),
    [
        ("call add {nope", "error invalid JSON"),
        ("call add", "error invalid JSON"),
        ("call add NaN", "error invalid JSON"),
        ("call", "error usage: call TOOL JSON"),
        ("calls 2 add [", "error invalid JSON"),
        ("calls x add {}", "error usage: calls N TOOL JSON"),
        ("calls 2", "error usage: calls N TOOL JSON"),
        ("speak", "error usage: speak MS"),
        ("speak -5", "error usage: speak MS"),
        ("burst many", "error usage: burst N"),
        ("server-tool 1e3", "error usage: server-tool MS"),
    ],
)
def test_bad_arguments(text: str, reply: str) -> None:
    @scenario(Hello(tools=TOOLS))
    async def body(h: Harness) -> None:
        h.text(text)
        await h.idle()
        assert after_ready(h) == [("state", "thinking"), ("text", reply), ("state", "idle")]

    body()


@scenario(Hello(tools=TOOLS, capabilities=(TOOL_STREAM,)))
async def test_call_with_tool_streams(h: Harness) -> None:
    h.text('call add {"a":1,"b":2}')
    await h.until(lambda: bool(h.of(ToolCall)))
    (call,) = h.of(ToolCall)
    h.send(ToolResult.success(call.call_id, call.epoch, 3))
    await h.idle()
    assert after_ready(h) == [
        ("state", "thinking"),
        ("state", "acting"),
        ("stream", "start", {}),
        ("stream", "arguments-delta", {"delta": '{"a":1,"'}),
        ("stream", "arguments-delta", {"delta": 'b":2}'}),
        ("stream", "arguments-complete", {"arguments": {"a": 1, "b": 2}}),
        ("tool.call", "add", {"a": 1, "b": 2}),
        ("stream", "settled", {"ok": True}),
        ("text", "result ok 3"),
        ("state", "idle"),
    ]
    assert not h.of(ToolCallDelta)


@scenario(Hello(tools=TOOLS))
async def test_calls_are_issued_back_to_back_and_reported_in_order(h: Harness) -> None:
    h.text('calls 3 add {"n":1}')
    await h.until(lambda: len(h.of(ToolCall)) == 3)
    calls = h.of(ToolCall)
    assert len({c.call_id for c in calls}) == 3
    assert {c.turn_id for c in calls} == {h.of(TurnState)[0].turn_id}
    assert [s for s in after_ready(h) if s[0] == "tool.call"] == [
        ("tool.call", "add", {"n": 1})
    ] * 3
    # Answered out of order; the chunks still follow the call order.
    h.send(ToolResult.success(calls[2].call_id, calls[2].epoch, "third"))
    h.send(ToolResult.failure(calls[1].call_id, calls[1].epoch, "INVALID"))
    await h.settle()
    assert not h.of(AgentText)
    h.send(ToolResult.success(calls[0].call_id, calls[0].epoch, None))
    await h.idle()
    assert [t.text for t in h.of(AgentText)] == [
        "result ok null",
        "\nresult error INVALID",
        '\nresult ok "third"',
    ]


@scenario(Hello(tools=TOOLS))
async def test_calls_zero(h: Harness) -> None:
    h.text("calls 0 add {}")
    await h.idle()
    assert after_ready(h) == [("state", "thinking"), ("state", "acting"), ("state", "idle")]


# --- speak, burst ----------------------------------------------------------------------


@scenario()
async def test_speak_streams_in_real_time(h: Harness) -> None:
    h.text("speak 100")
    await h.idle()
    assert after_ready(h) == [
        ("state", "thinking"),
        ("state", "speaking"),
        ("audio.start",),
        *[("frame", 960)] * 5,
        ("state", "idle"),
    ]
    times = [t for m, t in zip(h.sent, h.times, strict=True) if isinstance(m, AudioFrame)]
    # Frame k leaves at start + k * 20 ms: about 80 ms from the first to the last.
    assert times[-1] - times[0] >= 0.075
    assert all(t - times[0] >= k * 0.02 - 0.001 for k, t in enumerate(times))


@scenario()
async def test_speak_past_a_second_is_one_continuous_tone(h: Harness) -> None:
    # Frames come from a cached one-second cycle; across the cycle's end and in the
    # short last frame they must still be the slices of one tone.
    h.text("speak 1030")
    await h.idle()
    payloads = [f.payload for f in h.of(AudioFrame)]
    assert [len(p) for p in payloads] == [960] * 51 + [480]
    assert b"".join(payloads) == tone(1030, PCM16_24K)


@scenario()
async def test_speak_zero_sends_no_audio(h: Harness) -> None:
    h.text("speak 0")
    await h.idle()
    assert after_ready(h) == [("state", "thinking"), ("state", "speaking"), ("state", "idle")]


@scenario()
async def test_burst(h: Harness) -> None:
    async def ticker() -> None:
        while True:
            h.tick += 1
            await asyncio.sleep(0)

    ticking = asyncio.create_task(ticker())
    h.text("burst 5")
    await h.idle()
    ticking.cancel()
    assert after_ready(h) == [
        ("state", "thinking"),
        ("text", "chunk 1"),
        *[("text", f" chunk {k}") for k in range(2, 6)],
        ("state", "idle"),
    ]
    # Written without yielding to the event loop: the ticker never ran in between.
    chunk_ticks = {t for m, t in zip(h.sent, h.ticks, strict=True) if isinstance(m, AgentText)}
    assert len(chunk_ticks) == 1


# --- server tools ----------------------------------------------------------------------


@scenario(Hello(capabilities=(TOOL_STREAM,)))
async def test_server_tool_with_tool_streams(h: Harness) -> None:
    h.text("server-tool 300")
    await h.idle()
    sent = after_ready(h)
    assert sent == [
        ("state", "thinking"),
        ("state", "acting"),
        ("stream", "start", {}),
        ("stream", "arguments-delta", {"delta": '{"ms":300}'}),
        ("stream", "arguments-complete", {"arguments": {"ms": 300}}),
        ("stream", "progress", {"progress": {"elapsedMs": 100}}),
        ("stream", "progress", {"progress": {"elapsedMs": 200}}),
        ("stream", "settled", {"ok": True}),
        ("text", "server-tool done"),
        ("state", "idle"),
    ]
    streams = h.of(ToolStream)
    assert {(s.name, s.call_id) for s in streams} == {("server.sleep", streams[0].call_id)}
    times = [t for m, t in zip(h.sent, h.times, strict=True) if isinstance(m, ToolStream)]
    assert times[-1] - times[2] >= 0.28  # settled about 300 ms after the issue
    assert not h.of(ToolCall)


@scenario()
async def test_server_tool_without_tool_streams(h: Harness) -> None:
    h.text("server-tool 200")
    await h.idle()
    assert after_ready(h) == [
        ("state", "thinking"),
        ("state", "acting"),
        ("delta", '{"ms":200}'),  # a §7.4 preview, as for any call without tool-stream-v1
        ("text", "server-tool done"),
        ("state", "idle"),
    ]
    assert not h.of(ToolStream)
    assert not h.of(ToolCall)


# --- error and context -----------------------------------------------------------------


@scenario()
async def test_error(h: Harness) -> None:
    h.text("error")
    await h.until(lambda: bool(h.of(Error)))
    await h.settle()
    assert after_ready(h) == [("error", "AGENT_ERROR", "scripted error", True)]


@scenario(Hello(context={"doc": "notes.md", "cursor": [3, 14], "ü": None}))
async def test_context(h: Harness) -> None:
    h.text("context?")
    await h.idle()
    assert after_ready(h) == [
        ("state", "thinking"),
        ("text", '{"cursor":[3,14],"doc":"notes.md","\\u00fc":null}'),
        ("state", "idle"),
    ]
    h.send(ContextUpdate(context={"z": 1, "a": {"y": 2, "b": 3}}))
    h.text("context?")
    await h.idle(2)
    assert h.of(AgentText)[-1].text == '{"a":{"b":3,"y":2},"z":1}'
    h.send(ContextUpdate(context=None))
    h.text("context?")
    await h.idle(3)
    assert h.of(AgentText)[-1].text == "null"
    assert h.agent.contexts == [{"z": 1, "a": {"y": 2, "b": 3}}, None]


@scenario()
async def test_context_without_one(h: Harness) -> None:
    h.text("context?")
    await h.idle()
    assert h.of(AgentText)[-1].text == "null"


# --- interruption and playback ---------------------------------------------------------


def frames_after(h: Harness, kind: type[Any]) -> list[AudioFrame]:
    index = next(i for i, m in enumerate(h.sent) if isinstance(m, kind))
    return [m for m in h.sent[index:] if isinstance(m, AudioFrame)]


@scenario()
async def test_interrupt_stops_speech(h: Harness) -> None:
    h.text("speak 2000")
    await h.until(lambda: len(h.of(AudioFrame)) >= 3)
    (turn, *_) = h.of(TurnState)
    h.send(Interrupt(epoch=turn.epoch, reason="user"))
    assert h.of(Interrupted) == [Interrupted(epoch=turn.epoch)]
    played = len(h.of(AudioFrame))
    await asyncio.sleep(0.1)
    assert len(h.of(AudioFrame)) == played
    assert frames_after(h, Interrupted) == []
    assert h.idles() == 0  # an interrupted turn never reaches idle
    reply = h.agent._reply
    assert reply is not None
    assert reply.done()
    assert reply.cancelled()


@scenario()
async def test_new_text_replaces_the_reply_in_flight(h: Harness) -> None:
    h.text("speak 2000")
    await h.until(lambda: len(h.of(AudioFrame)) >= 2)
    h.text("echo next")
    await h.idle()
    first = h.of(TurnState)[0]
    index = next(i for i, m in enumerate(h.sent) if isinstance(m, Interrupted))
    assert h.sent[index] == Interrupted(epoch=first.epoch)
    assert summary(h.sent[index + 1 :]) == echo_summary(["next"])
    await asyncio.sleep(0.06)
    assert h.idles() == 1  # the speak reply was cancelled, not finished


@scenario(Hello(tools=TOOLS, capabilities=(TOOL_STREAM,)))
async def test_interrupt_cancels_a_waiting_call(h: Harness) -> None:
    h.text('call add {"a":1}')
    await h.until(lambda: bool(h.of(ToolCall)))
    (call,) = h.of(ToolCall)
    h.send(Interrupt(epoch=call.epoch, reason="keyboard"))
    await h.settle()
    # The client's answer to a closed epoch's call has no effect (§7.2).
    h.send(ToolResult.failure(call.call_id, call.epoch, "INTERRUPTED"))
    await h.settle()
    assert after_ready(h)[-2:] == [("stream", "cancelled", {}), ("interrupted", call.epoch)]
    assert not h.of(AgentText)


@scenario(Hello(capabilities=(TOOL_STREAM,)))
async def test_interrupt_cancels_a_server_tool(h: Harness) -> None:
    h.text("server-tool 1000")
    await h.until(lambda: any(s.phase == "progress" for s in h.of(ToolStream)))
    h.send(Interrupt(epoch=h.of(TurnState)[0].epoch, reason="user"))
    await asyncio.sleep(0.15)
    phases = [s.phase for s in h.of(ToolStream)]
    assert phases[-1] == "cancelled"
    assert phases.count("progress") == 1
    assert not h.of(AgentText)


@scenario()
async def test_stale_interrupt_has_no_effect(h: Harness) -> None:
    h.text("echo a")
    await h.idle()
    h.text("speak 200")
    await h.until(lambda: bool(h.of(AudioFrame)) and len(h.of(TurnState)) >= 4)
    h.send(Interrupt(epoch=h.of(TurnState)[0].epoch, reason="user"))
    await h.idle(2)
    assert not h.of(Interrupted)


@scenario()
async def test_playback_reports_are_kept_per_item(h: Harness) -> None:
    h.text("echo hi")
    await h.idle()
    (start,) = h.of(AudioStart)
    h.send(Playback(item_id=start.item_id, played_ms=40))
    h.send(Playback(item_id=start.item_id, played_ms=120))
    h.send(Playback(item_id=start.item_id, played_ms=5000))  # capped at what was sent
    await h.settle()
    report = h.agent.playback[start.item_id]
    assert (report.played_ms, report.turn_id) == (200, start.turn_id)
    assert list(h.agent.playback) == [start.item_id]


# --- input audio -----------------------------------------------------------------------


def chunks(payload: bytes, fmt: Format = PCM16_24K) -> list[bytes]:
    size = frame_bytes(fmt)
    return [payload[i : i + size] for i in range(0, len(payload), size)]


def speech_reply(ms: int, frame: int = 960) -> list[tuple[Any, ...]]:
    heard = f"(speech {ms} ms)"
    return [
        ("state", "listening"),
        ("transcript", "user", heard),
        *echo_summary(heard.split(), frame=frame),
    ]


@scenario()
async def test_speech_gets_a_listening_turn_and_an_echo(h: Harness) -> None:
    h.audio(*chunks(tone(500, PCM16_24K) + silence(400, PCM16_24K)))
    await h.idle()
    assert after_ready(h) == speech_reply(500)
    assert len(turn_ids(h)) == 1  # the reply continues the listening turn
    (user,) = [t for t in h.of(Transcript) if t.role == "user"]
    assert user.final
    assert user.turn_id == h.of(TurnState)[0].turn_id


@scenario(Hello(input=PCMU, output=PCMU))
async def test_speech_in_pcmu(h: Harness) -> None:
    h.audio(*chunks(silence(100, PCMU) + tone(260, PCMU) + silence(300, PCMU), PCMU))
    await h.idle()
    assert after_ready(h) == speech_reply(260, frame=160)


@scenario()
async def test_speech_frame_by_frame(h: Harness) -> None:
    for frame in chunks(tone(300, PCM16_24K)):
        h.audio(frame)
        await h.settle()
    assert summary(h.sent[1:]) == [("state", "listening")]
    for frame in chunks(silence(300, PCM16_24K)):
        h.audio(frame)
    await h.idle()
    assert after_ready(h) == speech_reply(300)


@scenario()
async def test_quiet_input_is_not_speech(h: Harness) -> None:
    h.audio(*chunks(tone(500, PCM16_24K, amplitude=0.01) + silence(400, PCM16_24K)))
    await h.settle()
    assert after_ready(h) == []


@scenario()
async def test_speech_interrupts_the_reply_in_flight(h: Harness) -> None:
    h.text("speak 2000")
    await h.until(lambda: len(h.of(AudioFrame)) >= 2)
    speaking = h.of(TurnState)[0]
    # All at once: the interruption's event reaches the agent after the speech ended,
    # and must not cancel the reply to the speech.
    h.audio(*chunks(tone(200, PCM16_24K) + silence(300, PCM16_24K)))
    await h.idle()
    index = next(i for i, m in enumerate(h.sent) if isinstance(m, Interrupted))
    assert h.sent[index] == Interrupted(epoch=speaking.epoch)
    assert summary(h.sent[index + 1 :]) == speech_reply(200)
    await asyncio.sleep(0.06)
    assert h.idles() == 1


@scenario()
async def test_speech_while_listening_keeps_the_turn(h: Harness) -> None:
    h.audio(*chunks(tone(100, PCM16_24K) + silence(100, PCM16_24K) + tone(100, PCM16_24K)))
    await h.settle()
    assert summary(h.sent[1:]) == [("state", "listening")]
    h.audio(*chunks(silence(300, PCM16_24K)))
    await h.idle()
    assert after_ready(h) == speech_reply(300)


# --- lifecycle -------------------------------------------------------------------------


def test_cancelling_run_cancels_the_reply() -> None:
    async def main() -> None:
        h = Harness(Hello())
        h.text("speak 2000")
        await h.until(lambda: bool(h.of(AudioFrame)))
        reply = h.agent._reply
        assert reply is not None
        await h.close()
        assert reply.cancelled()
        count = len(h.sent)
        await asyncio.sleep(0.05)
        assert len(h.sent) == count

    asyncio.run(main())


def test_wire_text_is_what_the_codec_expects() -> None:
    """The harness decodes every frame; spot-check one raw chunk for the contract's JSON."""

    async def main() -> None:
        h = Harness(Hello(tools=TOOLS))
        try:
            h.text('call add {"x": "é"}')
            await h.until(lambda: bool(h.of(ToolCall)))
            deltas = "".join(d.preview["argumentsDelta"] for d in h.of(ToolCallDelta))
            assert deltas == json.dumps({"x": "é"}, separators=(",", ":"))
        finally:
            await h.close()

    asyncio.run(main())


async def test_the_agent_keeps_bounded_state_whatever_the_client_sends() -> None:
    """docs/limits.md: the scripted agent remembers the last 64 contexts and the playback
    reports of the last 64 items (95 contexts of 20 MB, or 300,000 reports, grew it
    without bound before)."""
    h = Harness(Hello())
    for n in range(200):
        h.send(ContextUpdate(context={"n": n}))
        h.send(Playback(item_id=f"i{n}", played_ms=n))
    await h.settle()
    assert len(h.agent.contexts) == REMEMBERED
    assert h.agent.contexts[-1] == {"n": 199}
    assert len(h.agent.playback) == REMEMBERED
    assert "i199" in h.agent.playback
    assert "i0" not in h.agent.playback
    await h.close()
