"""Export the protocol's tables and constants as JSON, for the SDKs in other languages.

    PYTHONPATH=src python tools/export_tables.py          # write clients/protocol-tables.json
    PYTHONPATH=src python tools/export_tables.py --check  # fail if it is out of date

``clients/protocol-tables.json`` is what the browser SDK (``clients/web/tools/generate.mjs``)
and the C SDK (``clients/c/tools/gen_tables.py``) generate their protocol constants from,
beside ``schema/`` and ``capabilities.json``, so that neither restates a table by hand
and neither needs Python's packages to build. Every table of :mod:`vrt.protocol.tables`
is exported (found by type: a new table is exported without naming it here), with its
rows as written and compiled per state ("any" rows spread over the live states, as
:meth:`~vrt.protocol.tables.Transitions.compile` does); then the §7.5 phases, the error
codes (§9.2), the close codes (§9.3) and the recommended timings and bounds (§4.2, §4.4,
§11). ``tests/test_protocol_tables_export.py`` fails while the file differs from this.
"""

from __future__ import annotations

import argparse
import json
import sys
from enum import StrEnum
from pathlib import Path
from typing import Any

from vrt.protocol import tables
from vrt.protocol.client.session import DEAD_AFTER_INTERVALS, PING_INTERVAL
from vrt.protocol.errors import ErrorCode, recoverable_by_default
from vrt.protocol.frames import HEADER_SIZE, FrameKind
from vrt.protocol.outputs import CloseCode
from vrt.protocol.streams import ACK_AFTER_MESSAGES, ACK_DELAY, DEFAULT_MAX_KEPT, MAX_SEQ
from vrt.protocol.tables import (
    SERVER_EFFECTS,
    TOOL_STREAM_MEMBERS,
    TOOL_STREAM_NEXT,
    TOOL_STREAM_TERMINAL,
    Transitions,
)

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "clients" / "protocol-tables.json"


def _names(enum: type[StrEnum]) -> dict[str, str]:
    return {member.name: member.value for member in enum}


def _name(member: StrEnum | None) -> str | None:
    return member.name if member is not None else None


def export_table(table: Transitions[Any, Any, Any]) -> dict[str, Any]:
    """One table: its states, inputs and actions (name: the spec's words), its rows as
    written, and per state each input's action and next state (None: unchanged)."""
    first = table.rows[0]
    states: type[StrEnum] = type(next(row.state for row in table.rows if row.state is not None))
    inputs: type[StrEnum] = type(first.input)
    actions: type[StrEnum] = type(first.action)
    order = {member: k for k, member in enumerate(inputs)}
    return {
        "states": _names(states),
        "inputs": _names(inputs),
        "actions": _names(actions),
        "rows": [
            {
                "state": _name(row.state),
                "input": row.input.name,
                "action": row.action.name,
                "next": _name(row.next),
                "section": row.section,
            }
            for row in table.rows
        ],
        "byState": {
            state.name: {
                input.name: {"action": row.action.name, "next": _name(row.next)}
                for input, row in sorted(
                    table.for_state(state).items(), key=lambda item: order[item[0]]
                )
            }
            for state in states
        },
    }


def export() -> dict[str, Any]:
    phases = [phase for phase in TOOL_STREAM_NEXT if phase is not None]

    def in_order(after: frozenset[str]) -> list[str]:
        return [phase for phase in phases if phase in after]

    found = {
        name.removesuffix("_TABLE").lower(): value
        for name, value in vars(tables).items()
        if isinstance(value, Transitions)
    }
    return {
        "generatedBy": "tools/export_tables.py from vrt.protocol; do not edit",
        "tables": {name: export_table(table) for name, table in found.items()},
        "serverEffects": {
            action.name: {
                "error": effect.error,
                "recoverable": effect.recoverable,
                "seqZero": effect.seq_zero,
                "close": effect.close,
            }
            for action, effect in SERVER_EFFECTS.items()
        },
        "toolStream": {
            "phases": phases,
            "first": in_order(TOOL_STREAM_NEXT[None]),
            "next": {phase: in_order(TOOL_STREAM_NEXT[phase]) for phase in phases},
            "terminal": in_order(TOOL_STREAM_TERMINAL),
            "members": {phase: list(TOOL_STREAM_MEMBERS[phase]) for phase in phases},
        },
        "errorCodes": {code.name: recoverable_by_default(code) for code in ErrorCode},
        "closeCodes": {k: v for k, v in vars(CloseCode).items() if k.isupper()},
        "frames": {"headerSize": HEADER_SIZE, "kinds": {k.name: k.value for k in FrameKind}},
        "streams": {
            "maxSeq": MAX_SEQ,
            "ackDelayMs": round(ACK_DELAY * 1000),
            "ackAfterMessages": ACK_AFTER_MESSAGES,
            "defaultMaxKept": DEFAULT_MAX_KEPT,
        },
        "heartbeat": {
            "pingIntervalMs": round(PING_INTERVAL * 1000),
            "deadAfterIntervals": DEAD_AFTER_INTERVALS,
        },
    }


def _flat(value: Any) -> bool:
    items = value.values() if isinstance(value, dict) else value
    return all(not isinstance(item, (dict, list)) for item in items)


def _format(value: Any, indent: str = "") -> str:
    """JSON with one line per row: an object or list of plain values stays on one line."""
    if not isinstance(value, (dict, list)) or _flat(value):
        return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
    inner = indent + "  "
    if isinstance(value, list):
        parts = [inner + _format(item, inner) for item in value]
        return "[\n" + ",\n".join(parts) + "\n" + indent + "]"
    parts = [
        f"{inner}{json.dumps(k, ensure_ascii=False)}: {_format(v, inner)}" for k, v in value.items()
    ]
    return "{\n" + ",\n".join(parts) + "\n" + indent + "}"


def text() -> str:
    return _format(export()) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the file is out of date")
    args = parser.parse_args()
    if not args.check:
        OUTPUT.write_text(text(), encoding="utf-8")
        return 0
    if not OUTPUT.exists() or OUTPUT.read_text(encoding="utf-8") != text():
        name = OUTPUT.relative_to(ROOT)
        print(
            f"out of date: {name} (run PYTHONPATH=src python tools/export_tables.py)",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
