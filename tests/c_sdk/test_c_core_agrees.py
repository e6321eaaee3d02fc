"""The C client core against the Python one (src/vrt/protocol/client/): seeded random
scripts of server frames (valid, duplicate, out of order, invalid), connections opened
and lost, timers and application calls are played to both, and every command must give
the same frames out (compared parsed; the free-text ``message`` members aside) and the
same events. The scripts need not make sense: on any input the two cores walk the same
rows of the §5.1 client table, keep the same epoch gate (§6.2) and tool queue (§7)."""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path
from typing import Any, TypeAlias

from vrt.protocol.client import ClientSession
from vrt.protocol.client.events import (
    AudioChunk,
    AudioStarted,
    CancelTool,
    ClientEvent,
    Connected,
    ConnectionLost,
    ErrorReceived,
    InterruptedEpoch,
    PlaybackStop,
    RunTool,
    SessionFailed,
    TextReceived,
    ToolPreview,
    ToolStreamUpdate,
    TranscriptReceived,
    TurnChanged,
)
from vrt.protocol.errors import LocalProtocolError
from vrt.protocol.messages import Tool
from vrt.protocol.outputs import SendBinary, SendText

#: Per command: the frames written (kind, value) and the events, as text.
Step: TypeAlias = tuple[list[tuple[str, Any]], list[str]]
SCRIPTS = 400


def script(seed: int) -> list[str]:
    """One random script in vrt_client_script's language (clients/c/tests/client_script.c)."""
    rng = random.Random(seed)
    now, seq, calls, lines = 0, 1, 0, []

    def frame(message: dict[str, Any]) -> str:
        return f"text {now} " + json.dumps(message, separators=(",", ":"))

    for _ in range(rng.randint(5, 60)):
        now += rng.choice([0, 1, 10, 100, 300, 5000, 16000, 40000])
        r = rng.random()
        if r < 0.08:
            lines.append(f"connect {now}")
        elif r < 0.13:
            lines.append(f"lost {now}")
        elif r < 0.20:
            ready: dict[str, Any] = {
                "v": 1,
                "seq": 0,
                "type": "ready",
                "sessionId": rng.choice(["s1", "s1", "s2"]),
                "input": {"encoding": "pcm16"},
                "output": {"encoding": "pcm16", "sampleRate": 24000},
            }
            if rng.random() < 0.5:
                ready["resumedFrom"] = rng.randint(0, 4)
            if rng.random() < 0.3:
                ready["capabilities"] = ["tool-stream-v1"]
            lines.append(frame(ready))
        elif r < 0.50:
            s = seq if rng.random() < 0.8 else rng.choice([max(1, seq - 1), seq + 1])
            seq = max(seq, s + 1)
            epoch = rng.randint(0, 4)
            kind = rng.choice(
                ["text", "turn", "call", "call", "interrupted", "error", "delta", "stream"]
            )
            body: dict[str, Any]
            if kind == "text":
                body = {"type": "text", "text": "hi", "turnId": None}
            elif kind == "turn":
                state = rng.choice(["thinking", "speaking", "listening", "idle"])
                body = {"type": "turn.state", "turnId": "t", "epoch": epoch, "state": state}
            elif kind == "call":
                calls += 1
                body = {
                    "type": "tool.call",
                    "callId": f"c{rng.randint(1, calls)}",
                    "name": rng.choice(["slow", "lookup", "nope"]),
                    "arguments": {"a": 1},
                    "turnId": "t",
                    "epoch": epoch,
                }
            elif kind == "interrupted":
                body = {"type": "interrupted", "epoch": epoch}
            elif kind == "error":
                code = rng.choice(
                    ["AGENT_ERROR", "RESUME_FAILED", "UNAUTHORIZED", "X_Y", "SERVER_SHUTDOWN"]
                )
                body = {
                    "type": "error",
                    "code": code,
                    "message": "m",
                    "recoverable": rng.random() < 0.5,
                }
            elif kind == "delta":
                body = {
                    "type": "tool.call.delta",
                    "callId": "d1",
                    "turnId": "t",
                    "epoch": epoch,
                    "preview": 1,
                }
            else:
                phase = rng.choice(["start", "progress", "settled", "cancelled"])
                body = {
                    "type": "tool.stream",
                    "callId": f"s{rng.randint(1, 3)}",
                    "name": "x",
                    "turnId": "t",
                    "epoch": epoch,
                    "phase": phase,
                    "progress": 1,
                    "ok": True,
                }
            lines.append(frame({"v": 1, "seq": s, **body}))
        elif r < 0.58:
            transient: dict[str, Any] = rng.choice(
                [
                    {"type": "ack", "upTo": rng.randint(0, 6)},
                    {"type": "pong"},
                    {
                        "type": "audio.start",
                        "itemId": rng.choice(["i1", "i2"]),
                        "turnId": "t",
                        "epoch": rng.randint(0, 4),
                    },
                    {
                        "type": "error",
                        "code": rng.choice(["UNAUTHORIZED", "RESUME_FAILED", "X"]),
                        "message": "m",
                        "recoverable": False,
                    },
                ]
            )
            lines.append(frame({"v": 1, "seq": 0, **transient}))
        elif r < 0.64:
            payload = "00" * rng.choice([0, 2, 480, 960])
            lines.append(
                f"binary {now} " + rng.choice(["0200000000" + payload, "01000000000000", "02", ""])
            )
        elif r < 0.72:
            lines.append(f"timer {now}")
        elif r < 0.78:
            lines.append(f"say {now} hello")
        elif r < 0.81:
            lines.append(f"interrupt {now}")
        elif r < 0.90:
            outcome = rng.choice(['ok {"r":1}', "fail REJECTED"])
            lines.append(f"finish {now} c{rng.randint(1, max(1, calls))} {outcome}")
        elif r < 0.94:
            lines.append(f"playback {now} {rng.choice(['i1', 'i2'])} {rng.randint(0, 100)}")
        else:
            junk = rng.choice(["not json", '{"v":2,"seq":1,"type":"text"}', "[]"])
            lines.append(f"text {now} {junk}")
    return lines


def describe(event: ClientEvent) -> str:
    """An event as vrt_client_script prints it."""
    match event:
        case Connected():
            return f"connected {event.session_id} {int(event.resumed)}"
        case SessionFailed():
            return f"session_failed {event.code}"
        case ErrorReceived():
            return f"error {event.code} {int(event.recoverable)}"
        case TurnChanged():
            return f"turn {event.turn_id} {event.epoch} {event.state}"
        case TextReceived():
            return f"text {event.text}"
        case TranscriptReceived():
            return f"transcript {event.text}"
        case AudioStarted():
            return f"audio_started {event.item_id} {event.epoch}"
        case AudioChunk():
            return f"audio_chunk {event.item_id} {len(event.payload)}"
        case PlaybackStop():
            return f"playback_stop {event.epoch}"
        case InterruptedEpoch():
            return f"interrupted {event.epoch} {int(event.local)}"
        case ToolPreview():
            return f"tool_preview {event.call_id}"
        case ToolStreamUpdate():
            return f"tool_stream {event.call_id} {event.phase}"
        case RunTool():
            return f"run_tool {event.call_id} {event.name}"
        case CancelTool():
            return f"cancel_tool {event.call_id}"
    raise AssertionError(event)


def without_messages(value: Any) -> Any:
    """A frame's members but the free-text ``message`` (the words differ, not the facts)."""
    if isinstance(value, dict):
        return {key: item for key, item in value.items() if key != "message"}
    return value


def run_python(lines: list[str]) -> list[Step]:
    session = ClientSession(
        tools=(Tool(name="slow"), Tool(name="lookup")), capabilities=("tool-stream-v1",)
    )
    steps: list[Step] = []
    for line in lines:
        command, when, *rest = line.split(" ", 2)
        now, argument = int(when) / 1000, rest[0] if rest else ""
        try:
            if command == "connect":
                session.connection_made(now)
            elif command == "lost":
                session.connection_lost(now)
            elif command == "timer":
                session.on_timer(now)
            elif command == "say":
                session.send_text(argument, now)
            elif command == "interrupt":
                session.interrupt("user", now)
            elif command == "text":
                session.receive_text(argument, now)
            elif command == "binary":
                session.receive_binary(bytes.fromhex(argument), now)
            elif command == "playback":
                item, ms = argument.split()
                session.playback(item, int(ms), now)
            elif command == "finish":
                call_id, how, value = argument.split(" ", 2)
                if how == "ok":
                    session.tool_finished(call_id, True, now, output=json.loads(value))
                else:
                    session.tool_finished(call_id, False, now, code=value, message=None)  # type: ignore[arg-type]
        except LocalProtocolError:
            pass  # the C core returns an error code instead; neither sends anything
        frames: list[tuple[str, Any]] = []
        for output in session.take_outbox():
            if isinstance(output, SendText):
                frames.append(("text", without_messages(json.loads(output.data))))
            elif isinstance(output, SendBinary):
                frames.append(("binary", output.data.hex()))
            else:
                frames.append(("close", output.code))
        # ConnectionLost tells a driver whether to connect again: the C core leaves
        # that to its driver, so it has no such event.
        events = [e for e in session.take_events() if not isinstance(e, ConnectionLost)]
        steps.append((frames, [describe(event) for event in events]))
    return steps


def run_c(binary: Path, lines: list[str]) -> list[Step]:
    printed = subprocess.run(
        [str(binary)],
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    steps: list[Step] = []
    for line in printed.splitlines():
        if line.startswith("> "):
            steps.append(([], []))
        elif line.startswith("out text "):
            steps[-1][0].append(("text", without_messages(json.loads(line[9:]))))
        elif line.startswith("out binary "):
            steps[-1][0].append(("binary", line[11:]))
        elif line.startswith("out close "):
            steps[-1][0].append(("close", int(line[10:])))
        elif line.startswith("ev "):
            steps[-1][1].append(line[3:])
    return steps


def test_c_and_python_client_cores_agree(build: Path) -> None:
    binary = build / "vrt_client_script"
    events = 0
    for seed in range(SCRIPTS):
        lines = script(seed)
        python, c = run_python(lines), run_c(binary, lines)
        assert len(python) == len(c) == len(lines)
        for line, expected, got in zip(lines, python, c, strict=True):
            assert got == expected, f"seed {seed}, after {line!r}"
            events += len(got[1])
    assert events > 1000  # not vacuous: the scripts make the cores act
