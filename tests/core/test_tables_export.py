"""clients/protocol-tables.json, which the browser and C SDKs generate their protocol
constants from, is what tools/export_tables.py makes of ``vrt.protocol`` today: a row
edited in ``tables.py`` fails here until the export is refreshed (and the spec test,
tests/core/test_tables_match_spec.py, until the spec says so too)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Final

from vrt.protocol import tables
from vrt.protocol.tables import CLIENT_TABLE, ClientInput, ClientState, Transitions

ROOT: Final = Path(__file__).resolve().parents[2]
EXPORTER: Final = ROOT / "tools" / "export_tables.py"
EXPORT: Final = ROOT / "clients" / "protocol-tables.json"


def test_the_export_is_up_to_date() -> None:
    result = subprocess.run(
        [sys.executable, str(EXPORTER), "--check"],
        env=dict(os.environ, PYTHONPATH=str(ROOT / "src")),
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_every_table_is_exported_with_its_compiled_rows() -> None:
    exported = json.loads(EXPORT.read_text(encoding="utf-8"))["tables"]
    names = [n for n, v in vars(tables).items() if isinstance(v, Transitions)]
    assert sorted(exported) == sorted(n.removesuffix("_TABLE").lower() for n in names)
    client = exported["client"]
    assert client["states"] == {s.name: s.value for s in ClientState}
    for state in ClientState:
        rows = CLIENT_TABLE.for_state(state)
        assert set(client["byState"][state.name]) == {i.name for i in rows}
    # An "any" row reaches every live state that has no row of its own for the input.
    assert client["byState"]["WAITING"]["CONNECTION_LOST"] == {
        "action": "RECONNECT",
        "next": "CONNECTING",
    }
    assert CLIENT_TABLE.row(ClientState.WAITING, ClientInput.CONNECTION_LOST).state is None
