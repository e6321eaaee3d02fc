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


SRC: Final = DOC.parents[1] / "src" / "vrt"


def file_map() -> list[tuple[Path, Path, str]]:
    """The file map at the top of docs/architecture.md, as (the folder the entry
    describes the contents of, the folder the entry is in, the entry's text): a folder
    entry describes itself, a file entry its folder."""
    block = re.search(r"^```\n(.*?)^```", DOC.read_text(), re.S | re.M)
    assert block is not None, "docs/architecture.md has no file map"
    root = DOC.parents[1]
    entries: list[tuple[Path, Path, str]] = []
    folders: dict[int, Path] = {}
    for line in block.group(1).splitlines():
        indent = len(line) - len(line.lstrip())
        if indent >= 20 and entries:  # the description goes on
            inside, parent, text = entries[-1]
            entries[-1] = (inside, parent, text + " " + line.strip())
            continue
        parent = folders.get(indent - 2, root) if indent else root
        name = line.split()[0]
        if name.endswith("/"):
            folders[indent] = parent / name
        entries.append((parent / name if name.endswith("/") else parent, parent, line.strip()))
    return entries


def test_every_file_the_map_names_is_in_the_tree() -> None:
    root = DOC.parents[1]
    missing = [
        f"{inside.relative_to(root)}: {name}"
        for inside, parent, text in file_map()
        for name in re.findall(r"(?<![\w/])[\w/]+(?:\.py\b|/(?=[\s,)]))", text)
        if not any((folder / name).exists() for folder in (inside, parent, root))
        and not list(inside.rglob(name.rstrip("/")))
    ]
    assert missing == []


def test_the_map_names_every_package_and_every_module_of_the_core_and_of_vrt() -> None:
    named = " ".join(text for _, _, text in file_map())
    packages = sorted(init.parent.relative_to(SRC).as_posix() for init in SRC.rglob("__init__.py"))
    unnamed = [p for p in packages if p != "." and f"{p.rsplit('/', 1)[-1]}/" not in named]
    assert unnamed == [], "packages of src/vrt the map leaves out"
    modules = [
        path.name
        for path in (*SRC.glob("*.py"), *(SRC / "protocol").rglob("*.py"))
        if path.name != "__init__.py"
    ]
    assert sorted(m for m in modules if not re.search(rf"\b{re.escape(m)}\b", named)) == []
