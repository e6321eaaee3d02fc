"""docs/architecture.md shows the §5.1 tables (the session's lifecycle too) exactly as
they are in the code (``vrt.protocol.tables``), so that a newcomer finds a behaviour's
row in one step."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Final

import pytest

from vrt.protocol.tables import (
    CLIENT_TABLE,
    SERVER_TABLE,
    SESSION_TABLE,
    Row,
    ServerAction,
    ServerInput,
    ServerState,
    Transitions,
    markdown,
)

DOC: Final = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"


def shown(name: str) -> str:
    found = re.search(rf"<!-- table: {name} -->\n(.*?)\n<!-- /table -->", DOC.read_text(), re.S)
    assert found is not None, f"docs/architecture.md has no table {name!r}"
    return found.group(1)


@pytest.mark.parametrize(
    ("name", "table", "state_title"),
    [
        ("server", SERVER_TABLE, "Connection state"),
        ("client", CLIENT_TABLE, "Client state"),
        ("session", SESSION_TABLE, "Session state"),
    ],
)
def test_the_doc_shows_the_table_in_the_code(
    name: str, table: Transitions[Any, Any, Any], state_title: str
) -> None:
    # Rendered in the test, not at collection, so that a mutant of ``markdown`` runs.
    assert shown(name) == markdown(table, state_title), (
        "run python tests/test_docs_architecture.py to put the tables of the code in the doc"
    )


def test_only_the_rows_marked_with_a_dash_are_left_out() -> None:
    """A closed state's "nothing" rows (section "—") are summarised below each table of
    docs/architecture.md; every other row is shown, in its order, wherever the dash rows
    stand in the table."""
    rows = [
        Row(
            state=None, input=ServerInput.PING, action=ServerAction.PONG, next=None, section="§4.4"
        ),
        Row(
            state=ServerState.CLOSED,
            input=ServerInput.PING,
            action=ServerAction.CLOSED,
            next=None,
            section="—",
        ),
        Row(
            state=ServerState.OPEN,
            input=ServerInput.ACK,
            action=ServerAction.APPLY_ACK,
            next=ServerState.CLOSED,
            section="§4.2",
        ),
    ]
    assert markdown(Transitions(rows, live=[ServerState.OPEN]), "State").splitlines() == [
        "| State | Input | Action | Next state | § |",
        "|---|---|---|---|---|",
        "| any | ping | pong | unchanged | §4.4 |",
        "| open | ack | discard acknowledged messages (§4.2) | closed | §4.2 |",
    ]


def rewrite() -> None:
    """Put the tables of the code into docs/architecture.md."""
    text = DOC.read_text()
    for name, rendered in (
        ("server", markdown(SERVER_TABLE, "Connection state")),
        ("client", markdown(CLIENT_TABLE, "Client state")),
        ("session", markdown(SESSION_TABLE, "Session state")),
    ):
        start = f"<!-- table: {name} -->\n"
        before, _, rest = text.partition(start)
        _, end, after = rest.partition("\n<!-- /table -->")
        text = before + start + rendered + end + after
    DOC.write_text(text)


if __name__ == "__main__":  # python tests/test_docs_architecture.py: regenerate the tables
    rewrite()
