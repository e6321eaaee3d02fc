"""The protocol's tables as the conformance suites judge them, in one place.

The message classes (§4.1, Appendix A), the §8.2 formats and the §9.2 error codes as the
suites transcribe them, and the §5.1 server table and §7.5 tool-stream phases as the
protocol core has them as data (``vrt.protocol.tables``, one transcription for the code
and its judge). Checks read their expectations from here
(``row("opening", "hello").error``), never from literals of their own.
``tests/core/test_tables_match_spec.py`` holds the transcriptions to the protocol text
(Appendix A, §9.2) and the core's tables to §5.1 and §7.5.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from ..protocol.tables import (
    SERVER_EFFECTS,
    TOOL_STREAM_MEMBERS,
    TOOL_STREAM_TERMINAL,
    Effect,
    ServerAction,
    ServerInput,
    ServerState,
)
from ..protocol.tables import SERVER_TABLE as _CORE_SERVER_TABLE
from ..protocol.tables import Row as CoreRow

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


def _row(core: CoreRow[ServerState, ServerInput, ServerAction]) -> Row:
    effect = SERVER_EFFECTS.get(core.action, Effect())
    return Row(
        state=core.state.value if core.state is not None else "any",
        input=core.input.value,
        action=core.action.value,
        next=core.next.value if core.next is not None else "unchanged",
        error=effect.error,
        recoverable=effect.recoverable,
        seq_zero=effect.seq_zero,
        close=effect.close,
    )


#: §5.1's server table as the core transcribes it (``vrt.protocol.tables``), with the
#: observable effect of each action; the closed state's "nothing" rows left out.
SERVER_TABLE: Final[tuple[Row, ...]] = tuple(
    _row(core) for core in _CORE_SERVER_TABLE.rows if core.section != "—"
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
    phase: members[0] if members else None for phase, members in TOOL_STREAM_MEMBERS.items()
}
TERMINAL_PHASES: Final = frozenset(TOOL_STREAM_TERMINAL)


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
