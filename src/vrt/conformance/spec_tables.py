"""The protocol's tables as the conformance suites judge them, in one place.

These are the suites' own transcriptions of vrt-protocol-v1.3 and ``messages.md``: the
message classes (§4.1, Appendix A), the §5.1 server table, the §7.5 tool-stream phase
rules, the §8.2 formats and the §9.2 error codes. Checks read their expectations from
here (``row("opening", "hello").error``), never from literals of their own. When the
protocol core exposes these tables as data, this module is where they are imported
instead; nothing else in the suites changes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "CLIENT_INTEGER_MEMBERS",
    "CLIENT_SEQUENCED",
    "CLIENT_TRANSIENT",
    "DEFAULT_RATES",
    "ERROR_RECOVERABLE",
    "SERVER_INTEGER_MEMBERS",
    "SERVER_SEQUENCED",
    "SERVER_TABLE",
    "SERVER_TRANSIENT",
    "TERMINAL_PHASES",
    "TOOL_STREAM_PHASES",
    "Row",
    "audio_ms",
    "row",
    "same_format",
    "tool_stream_problems",
]

# --- §4.1, Appendix A: message classes by direction --------------------------------

CLIENT_SEQUENCED: Final = frozenset({"text", "interrupt", "playback", "tool.result", "context"})
CLIENT_TRANSIENT: Final = frozenset({"hello", "ack", "ping"})
SERVER_SEQUENCED: Final = frozenset(
    {
        "turn.state",
        "transcript",
        "text",
        "tool.call.delta",
        "tool.call",
        "tool.stream",
        "interrupted",
    }
)
SERVER_TRANSIENT: Final = frozenset({"ready", "audio.start", "ack", "pong"})
#: ``error`` is sessionless: seq 0 before a session is bound, sequenced after.

# --- §2.2: members written as plain integers ----------------------------------------

SERVER_INTEGER_MEMBERS: Final = frozenset(
    {"v", "seq", "epoch", "upTo", "resumedFrom", "sampleRate"}
)
CLIENT_INTEGER_MEMBERS: Final = frozenset(
    {"v", "seq", "epoch", "upTo", "playedMs", "resumeFrom", "sampleRate"}
)

# --- §9.2: error codes and their recoverable flag -----------------------------------

ERROR_RECOVERABLE: Final[Mapping[str, bool]] = {
    "MALFORMED": True,
    "UNSUPPORTED_VERSION": True,
    "UNKNOWN_TYPE": True,
    "INVALID_FIELD": True,
    "NO_SESSION": False,
    "DUPLICATE_HELLO": True,
    "UNAUTHORIZED": False,
    "RESUME_FAILED": False,
    "START_FAILED": False,
    # AGENT_ERROR: as flagged.
}

# --- §5.1: the server table ---------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """One row of §5.1's server table, with what a check can observe of its action."""

    state: str
    input: str
    action: str
    next: str
    #: The error the action sends, if any, its recoverable flag and whether its seq is 0.
    error: str | None = None
    recoverable: bool | None = None
    seq_zero: bool = False
    #: The close code the action ends with, if any.
    close: int | None = None


SERVER_TABLE: Final[tuple[Row, ...]] = (
    Row("awaiting hello", "hello", "authenticate (§5.3)", "opening"),
    Row("awaiting hello", "ping", "pong", "awaiting hello"),
    Row(
        "awaiting hello",
        "any other valid control message",
        "error NO_SESSION (not recoverable, seq 0)",
        "awaiting hello",
        error="NO_SESSION",
        recoverable=False,
        seq_zero=True,
    ),
    Row("awaiting hello", "valid input audio frame", "ignore", "awaiting hello"),
    Row(
        "opening",
        "control message other than hello or ping",
        "keep it, in order; handle it after ready",
        "opening",
    ),
    Row(
        "opening",
        "hello",
        "error DUPLICATE_HELLO (recoverable)",
        "opening",
        error="DUPLICATE_HELLO",
        recoverable=True,
    ),
    Row(
        "opening",
        "authentication refused",
        "error UNAUTHORIZED (seq 0), close 4401",
        "closed",
        error="UNAUTHORIZED",
        recoverable=False,
        seq_zero=True,
        close=4401,
    ),
    Row(
        "opening",
        "resume of an unknown, expired or foreign session",
        "error RESUME_FAILED (seq 0), close 4404",
        "closed",
        error="RESUME_FAILED",
        recoverable=False,
        seq_zero=True,
        close=4404,
    ),
    Row(
        "opening",
        "the session cannot start",
        "error START_FAILED, close 1011",
        "closed",
        error="START_FAILED",
        recoverable=False,
        close=1011,
    ),
    Row(
        "opening", "session opened or resumed", "ready, resend (§5.4), handle kept messages", "open"
    ),
    Row(
        "open",
        "hello",
        "error DUPLICATE_HELLO (recoverable)",
        "open",
        error="DUPLICATE_HELLO",
        recoverable=True,
    ),
    Row("open", "sequenced message", "deduplicate (§4.3), handle, acknowledge", "open"),
    Row("open", "input audio frame", "pass to the session", "open"),
    Row(
        "any",
        "invalid control message or audio frame",
        "error with its code (§9.1), recoverable",
        "unchanged",
        recoverable=True,
    ),
    Row("any", "heartbeat timeout (§4.4)", "close 4408", "closed", close=4408),
    Row("open", "connection closed", "park the session", "closed"),
)


def row(state: str, input: str) -> Row:
    """The row of §5.1's server table for ``state`` and an input that starts with
    ``input``."""
    found = [r for r in SERVER_TABLE if r.state == state and r.input.startswith(input)]
    if len(found) != 1:
        raise LookupError(f"§5.1 has {len(found)} rows for ({state!r}, {input!r})")
    return found[0]


# --- §7.5: tool-stream phases --------------------------------------------------------

#: Each phase and the member it carries (None: none).
TOOL_STREAM_PHASES: Final[Mapping[str, str | None]] = {
    "start": None,
    "arguments-delta": "delta",
    "arguments-complete": "arguments",
    "progress": "progress",
    "settled": "ok",
    "cancelled": None,
    "failed": "message",
}
TERMINAL_PHASES: Final = frozenset({"settled", "cancelled", "failed"})


def tool_stream_problems(streams: Sequence[Mapping[str, Any]]) -> list[str]:
    """What breaks §7.5's rules "for every call, the server MUST send" in one call's
    ``tool.stream`` messages (their JSON objects, in the order sent)."""
    if not streams:
        return ["no tool.stream message for the call"]
    phases = [str(s.get("phase")) for s in streams]
    problems: list[str] = []
    if phases[0] != "start":
        problems.append(f"the first phase is {phases[0]}, not start")
    if phases.count("start") != 1:
        problems.append(f"{phases.count('start')} start phases")
    terminals = [k for k, p in enumerate(phases) if p in TERMINAL_PHASES]
    if len(terminals) != 1:
        problems.append(f"{len(terminals)} terminal phases (exactly one is required)")
    elif terminals[0] != len(phases) - 1:
        problems.append(f"{phases[terminals[0] + 1 :]} sent after the terminal phase")
    completes = [k for k, p in enumerate(phases) if p == "arguments-complete"]
    if len(completes) > 1:
        problems.append(f"arguments-complete sent {len(completes)} times (at most once)")
    if completes and "arguments-delta" in phases[completes[0] :]:
        problems.append("arguments-delta after arguments-complete")
    for k, phase in enumerate(phases):
        if phase == "progress" and (
            not completes or k < completes[0] or (terminals and k > terminals[0])
        ):
            problems.append("progress outside arguments-complete .. terminal phase")
            break
    for member in ("callId", "name", "turnId", "epoch"):
        values = {json.dumps(s.get(member)) for s in streams}
        if len(values) > 1:
            problems.append(f"{member} changes within the call: {sorted(values)}")
    if completes:
        text = "".join(str(s.get("delta")) for s in streams if s.get("phase") == "arguments-delta")
        if text:
            try:
                joined = json.loads(text)
            except ValueError:
                problems.append(f"the arguments-delta fragments do not join to JSON: {text!r}")
            else:
                if joined != streams[completes[0]].get("arguments"):
                    problems.append("the joined arguments-delta text differs from the arguments")
    return problems


# --- §8.2: formats -------------------------------------------------------------------

#: The sample rate of each encoding when ``sampleRate`` is absent (pcmu is only 8000).
DEFAULT_RATES: Final[Mapping[str, int]] = {"pcm16": 24000, "pcmu": 8000, "opus": 48000}


def _rate(fmt: Mapping[str, Any]) -> Any:
    return fmt.get("sampleRate", DEFAULT_RATES.get(str(fmt.get("encoding")), 0))


def same_format(a: Any, b: Any) -> bool:
    """Whether two format objects name the same encoding and rate (defaults applied)."""
    if not isinstance(a, Mapping) or not isinstance(b, Mapping):
        return False
    return bool(a.get("encoding") == b.get("encoding") and _rate(a) == _rate(b))


def audio_ms(payload_bytes: int, fmt: Mapping[str, Any]) -> float | None:
    """Milliseconds of audio in ``payload_bytes`` of ``fmt``; None for Opus (packets
    carry no fixed duration per byte) or an unknown format."""
    encoding, rate = fmt.get("encoding"), _rate(fmt)
    if encoding == "pcm16" and isinstance(rate, int) and rate > 0:
        return payload_bytes / 2 / rate * 1000
    if encoding == "pcmu":
        return payload_bytes / 8
    return None
