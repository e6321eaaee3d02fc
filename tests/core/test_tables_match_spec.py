"""The tables of ``vrt.protocol.tables`` against the protocol text they transcribe.

The test reads spec/vrt-protocol-v1.3.txt (the published text, byte for byte), parses
the tables of §5.1 and the phase table and rules of §7.5, and holds every row of the
code to them, so that editing a row fails here unless the spec changed with it:

- A row whose first citation is the § of a table of the spec (``§5.1``) is a row of
  that table: same state ("any" for every live state), input, action and next state
  ("unchanged", or the state itself). Where the spec names a class of inputs the code
  splits it (``REFINED``), and a reference in the spec's input cell may move to the
  row's citations ("heartbeat timeout (§4.4)" is "heartbeat timeout", ``§5.1, §4.4``).
  Every row of the spec's table is there.
- Every other row cites the rule it comes from elsewhere: another section (``§4.4``),
  the section's text rather than its table (``§5.1 text``), or ``—`` for a closed
  state's "nothing" rows. Each cited section exists in the spec.
- A table of the code with no table in the spec (its states are not a spec table's)
  cites sections whose text names its states.

Tables are found by type, so a table added to ``tables.py`` is checked without naming
it here. What the server's actions send (``SERVER_EFFECTS``) is held to the actions'
words and §9.2's flags, and the conformance suites' own transcriptions
(``vrt.conformance.spec_tables``: message classes, error flags) to Appendix A and §9.2.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Final

import pytest

from vrt.conformance.spec_tables import (
    CLIENT_SEQUENCED,
    CLIENT_TRANSIENT,
    ERROR_RECOVERABLE,
    SERVER_SEQUENCED,
    SERVER_TRANSIENT,
)
from vrt.protocol import tables
from vrt.protocol.errors import ErrorCode, recoverable_by_default
from vrt.protocol.outputs import CloseCode
from vrt.protocol.schemas import message_schemas
from vrt.protocol.tables import (
    SERVER_EFFECTS,
    TOOL_STREAM_MEMBERS,
    TOOL_STREAM_NEXT,
    TOOL_STREAM_TERMINAL,
    Effect,
    Row,
    ServerAction,
    Transitions,
)

ROOT: Final = Path(__file__).resolve().parents[2]
SPEC_FILE: Final = ROOT / "spec" / "vrt-protocol-v1.3.txt"

#: The spec's table names some inputs as a class; the code has one input per member.
REFINED: Final[Mapping[str, frozenset[str]]] = {
    # awaiting hello: every valid client control message other than hello and ping.
    "any other valid control message": frozenset({"sequenced message", "ack"}),
    # opening: the same set.
    "control message other than hello or ping": frozenset({"sequenced message", "ack"}),
    # open: only a valid frame reaches the session; an invalid one is the "any" row.
    "input audio frame": frozenset({"valid input audio frame"}),
}

#: The citation of a closed state's "nothing" rows (docs/architecture.md summarises them).
NOTHING: Final = "—"
#: The qualifier of a citation of a section's text rather than its table.
TEXT: Final = " text"

_HEADING: Final = re.compile(r"^(\d+)(?:\.(\d+))?\.? \S")
_REFERENCE: Final = re.compile(r"\s*\(§\d+(?:\.\d+)?\)$")


def published_spec() -> Path | None:
    """``shared/spec`` in the nearest folder above the repository that has one."""
    for folder in ROOT.parents:
        candidate = folder / "shared" / "spec" / SPEC_FILE.name
        if candidate.is_file():
            return candidate
    return None


def spec_text() -> str:
    return SPEC_FILE.read_text(encoding="utf-8")


def sections(text: str) -> dict[str, str]:
    """The text of each numbered section, by its number ("5.1"; "5" is the part before
    its first subsection). Two sections with one number are joined; the appendices end
    the numbered part."""
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("Appendix "):
            break
        heading = _HEADING.match(line)
        if heading:
            number = ".".join(part for part in heading.groups() if part is not None)
            current = found.setdefault(number, [])
        if current is not None:
            current.append(line)
    return {number: "\n".join(lines) for number, lines in found.items()}


def table_rows(lines: list[str], start: int) -> tuple[list[str], list[list[str]]]:
    """The header and rows of the table whose header is ``lines[start]``. A row whose
    first cell was set as code lost its leading bar in the text: any line with a bar
    continues the table."""
    header = [cell.strip() for cell in lines[start].strip().strip("|").split("|")]
    rows = []
    for line in lines[start + 2 :]:
        if "|" not in line:
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return header, rows


@dataclass(frozen=True)
class SpecTable:
    section: str
    header: tuple[str, ...]
    rows: tuple[tuple[str, str, str, str], ...]

    @property
    def states(self) -> frozenset[str]:
        """The states the table has rows for (its "any" rows apart)."""
        return frozenset(row[0] for row in self.rows) - {"any"}


def state_tables(text: str) -> list[SpecTable]:
    """The state × input → action, next state tables of the spec."""
    found = []
    for number, body in sections(text).items():
        lines = body.splitlines()
        for k, line in enumerate(lines):
            if line.startswith("|") and "| Input |" in line:
                header, rows = table_rows(lines, k)
                assert all(len(row) == 4 for row in rows), (number, header)
                found.append(SpecTable(number, tuple(header), tuple(map(tuple, rows))))  # type: ignore[arg-type]
    return found


def transition_tables() -> dict[str, Transitions[Any, Any, Any]]:
    """Every table of ``vrt.protocol.tables``, by name."""
    return {name: value for name, value in vars(tables).items() if isinstance(value, Transitions)}


def citations(row: Row[Any, Any, Any]) -> list[str]:
    return [part.strip() for part in row.section.split(",")]


def cited_section(citation: str) -> str:
    """The section number of a citation: "§5.1 text" -> "5.1"."""
    assert citation.startswith("§"), citation
    return citation[1:].removesuffix(TEXT)


def spec_table_of(table: Transitions[Any, Any, Any], spec: list[SpecTable]) -> SpecTable | None:
    """The spec's table that ``table`` transcribes: the one whose states it has."""
    states = {state.value for state in _states(table)}
    matching = [candidate for candidate in spec if candidate.states <= states]
    assert len(matching) <= 1, [m.header for m in matching]
    return matching[0] if matching else None


def _states(table: Transitions[Any, Any, Any]) -> type[StrEnum]:
    state = next(row.state for row in table.rows if row.state is not None)
    return type(state)


def _input_matches(spec_input: str, row: Row[Any, Any, Any]) -> bool:
    value = row.input.value
    if spec_input == value or value in REFINED.get(spec_input, ()):
        return True
    moved = _REFERENCE.search(spec_input)
    return moved is not None and (
        spec_input[: moved.start()] == value and moved.group().strip(" ()") in citations(row)
    )


def matches(spec_row: tuple[str, str, str, str], row: Row[Any, Any, Any]) -> bool:
    state, spec_input, action, next_state = spec_row
    row_state = row.state.value if row.state is not None else "any"
    row_next = {"unchanged", row_state} if row.next is None else {row.next.value}
    return (
        state == row_state
        and _input_matches(spec_input, row)
        and action == row.action.value
        and next_state in row_next
    )


def from_spec_table(row: Row[Any, Any, Any], spec_table: SpecTable) -> bool:
    return citations(row)[0] == f"§{spec_table.section}"


# --- the text ---------------------------------------------------------------------------


def test_the_text_read_is_the_published_one() -> None:
    published = published_spec()
    if published is None:
        pytest.skip("no shared/spec above the repository to compare with")
    assert SPEC_FILE.read_bytes() == published.read_bytes()


def test_the_spec_has_the_two_tables_of_5_1() -> None:
    spec = state_tables(spec_text())
    assert [(t.section, t.header[0]) for t in spec] == [
        ("5.1", "Connection state"),
        ("5.1", "Client state"),
    ]
    assert [len(t.rows) for t in spec] == [16, 6]


def test_every_spec_table_is_transcribed_once() -> None:
    spec = state_tables(spec_text())
    transcribed = [spec_table_of(table, spec) for table in transition_tables().values()]
    for spec_table in spec:
        assert transcribed.count(spec_table) == 1, spec_table.header


def test_the_refined_inputs_are_every_client_message_they_name() -> None:
    """ "any other valid control message" (than hello and ping) is every sequenced
    client message and ack: the classes of schema/client (Appendix A)."""
    client = message_schemas()["client"]
    others = set(client) - {"hello", "ping"}
    sequenced = {t for t in others if client[t].seq_class == "sequenced"}
    assert others == sequenced | {"ack"}
    for refined in ("any other valid control message", "control message other than hello or ping"):
        assert REFINED[refined] == {"sequenced message", "ack"}


# --- every row ----------------------------------------------------------------------------


def _rows() -> Iterator[tuple[str, Row[Any, Any, Any]]]:
    for name, table in transition_tables().items():
        for row in table.rows:
            yield name, row


def _row_id(row: Row[Any, Any, Any]) -> str:
    state = row.state.value if row.state is not None else "any"
    return f"{state} / {row.input.value}"


def row_problem(
    table: Transitions[Any, Any, Any], row: Row[Any, Any, Any], text: str
) -> str | None:
    """What is wrong with ``row`` of ``table`` against the spec ``text``; None if nothing."""
    spec_table = spec_table_of(table, state_tables(text))
    known = sections(text)
    if row.section == NOTHING:
        # A closed state's "nothing" rows: a state the spec's table never leaves from.
        if row.state is None or row.next is not None:
            return "a dash row is a closed state's row that changes nothing"
        if spec_table is not None and row.state.value in spec_table.states:
            return f"the table of §{spec_table.section} has rows for {row.state.value}"
        return None
    for citation in citations(row):
        if not citation.startswith("§") or cited_section(citation) not in known:
            return f"{row.section}: no such section in the spec"
    if spec_table is None:
        # A table the spec states in words: the sections it cites name its states.
        cited = " ".join(known[cited_section(c)] for c in citations(row))
        for state in _states(table):
            if not re.search(rf"\b{re.escape(state.value)}\b", cited):
                return f"{row.section} does not mention the state {state.value!r}"
        return None
    if from_spec_table(row, spec_table):
        if not any(matches(spec_row, row) for spec_row in spec_table.rows):
            return (
                f"{_row_id(row)} -> {row.action.value}, {row.next} cites the table of "
                f"§{spec_table.section}, which has no such row"
            )
    elif any(_pair_matches(spec_row, row) for spec_row in spec_table.rows):
        # Rows vrt adds, or takes from elsewhere in the text, are not rows of the table.
        return f"{_row_id(row)} is a row of §{spec_table.section}'s table: cite it"
    return None


@pytest.mark.parametrize(
    ("name", "row"), list(_rows()), ids=[f"{n}: {_row_id(r)}" for n, r in _rows()]
)
def test_each_row_is_its_spec_row_or_cites_another_rule(name: str, row: Row[Any, Any, Any]) -> None:
    assert row_problem(transition_tables()[name], row, spec_text()) is None


class _Lifecycle(StrEnum):
    CONNECTED = "connected"
    PARKED = "parked"
    CLOSED = "closed"


class _Event(StrEnum):
    EXPIRE = "the resume window expires"


class _Step(StrEnum):
    CLOSE = "close the session"


def test_a_table_the_spec_states_in_words_cites_sections_naming_its_states() -> None:
    """A table without a table in the spec (a session's own states, §5.1's text) is
    held to the sections it cites: they must exist and name each of its states."""
    text = spec_text()

    def row(section: str) -> Row[Any, Any, Any]:
        return Row(
            state=_Lifecycle.PARKED,
            input=_Event.EXPIRE,
            action=_Step.CLOSE,
            next=_Lifecycle.CLOSED,
            section=section,
        )

    for section, problem in (
        ("§5.1", None),
        ("§5.1 text", None),
        ("§4.2", "mention"),
        ("§12", "no such"),
    ):
        table = Transitions([row(section)], live=[_Lifecycle.CONNECTED, _Lifecycle.PARKED])
        assert spec_table_of(table, state_tables(text)) is None
        found = row_problem(table, table.rows[0], text)
        assert (found is None) if problem is None else (problem in str(found)), (section, found)


def _pair_matches(spec_row: tuple[str, str, str, str], row: Row[Any, Any, Any]) -> bool:
    row_state = row.state.value if row.state is not None else "any"
    return spec_row[0] == row_state and _input_matches(spec_row[1], row)


@pytest.mark.parametrize("header", ["Connection state", "Client state"])
def test_every_row_of_the_spec_is_in_the_code(header: str) -> None:
    spec = state_tables(spec_text())
    (spec_table,) = [t for t in spec if t.header[0] == header]
    (table,) = [t for t in transition_tables().values() if spec_table_of(t, spec) == spec_table]
    cited = [row for row in table.rows if from_spec_table(row, spec_table)]
    for spec_row in spec_table.rows:
        found = {row.input.value for row in cited if matches(spec_row, row)}
        expected = REFINED.get(spec_row[1], frozenset({_REFERENCE.sub("", spec_row[1])}))
        assert found == expected, f"§{spec_table.section} {spec_row} is not in the code"


# --- §7.5 ---------------------------------------------------------------------------------


#: The words of §7.5 the rows of ``TOOL_STREAM_NEXT`` follow from.
RULES_7_5: Final = (
    "first, before any other phase of that call",
    "messages before",
    "which it sends at most once",
    "only after",
    "and before the terminal phase",
    "exactly one terminal phase, after which nothing about the call is sent",
    "The model stopped before completing the arguments, so the call was never issued",
    "The call ended because its turn was interrupted, before or after its arguments completed",
    "The model finished the arguments; the call is issued",
)


def phase_table(text: str) -> list[list[str]]:
    lines = sections(text)["7.5"].splitlines()
    (start,) = [k for k, line in enumerate(lines) if line.startswith("| Phase | Member |")]
    return table_rows(lines, start)[1]


def sentence(text: str, words: str) -> str:
    """``words`` as the spec writes them (a rule the test derives a row from)."""
    assert words in sections(text)["7.5"], f"§7.5 no longer says {words!r}"
    return words


def test_the_phases_and_their_members_are_the_spec_table() -> None:
    """Each phase, in the spec's order, and the members it always carries ("ok, and
    code when not ok": ``settled`` always carries ``ok``)."""
    rows = phase_table(spec_text())
    members = {}
    for phase, member, _meaning in rows:
        always = member.split(",")[0]
        members[phase] = () if always == "none" else (always.split(" (")[0],)
    assert list(TOOL_STREAM_MEMBERS) == list(members)
    assert dict(TOOL_STREAM_MEMBERS) == members
    assert [p for p in TOOL_STREAM_NEXT if p is not None] == list(members)


def test_the_terminal_phases_are_the_spec_s() -> None:
    text = spec_text()
    found = re.search(r"^(.*) are terminal\.", sections(text)["7.5"], re.M)
    assert found is not None
    terminal = {p.strip() for p in re.split(r",| and ", found.group(1)) if p.strip()}
    assert terminal == set(TOOL_STREAM_TERMINAL)


def test_each_phase_is_followed_by_what_the_rules_allow() -> None:
    """The rows of ``TOOL_STREAM_NEXT`` from the rules of §7.5: a call is issued at
    ``arguments-complete``; before it come ``start`` and the argument fragments, and
    it may fail; after it come progress and a result; it may be cancelled either side."""
    text = spec_text()
    sentence(text, "first, before any other phase of that call")
    sentence(text, "messages before")
    sentence(text, "which it sends at most once")
    sentence(text, "only after")
    sentence(text, "and before the terminal phase")
    sentence(text, "exactly one terminal phase, after which nothing about the call is sent")
    sentence(
        text, "The model stopped before completing the arguments, so the call was never issued"
    )
    sentence(
        text,
        "The call ended because its turn was interrupted, before or after its arguments completed",
    )
    sentence(text, "The model finished the arguments; the call is issued")
    before_issue = {"start", "arguments-delta"}
    after_issue = {"arguments-complete", "progress"}
    expected: dict[str | None, set[str]] = {None: {"start"}}
    for phase in before_issue:
        expected[phase] = {"arguments-delta", "arguments-complete", "cancelled", "failed"}
    for phase in after_issue:
        expected[phase] = {"progress", "settled", "cancelled"}
    for phase in TOOL_STREAM_TERMINAL:
        expected[phase] = set()
    assert {phase: set(after) for phase, after in TOOL_STREAM_NEXT.items()} == expected


# --- what the actions send (SERVER_EFFECTS), and the suites' transcriptions ---------------


def any_table(body: str, first_header: str) -> list[list[str]]:
    """The rows of the table in ``body`` whose header starts with ``first_header``."""
    lines = body.splitlines()
    (start,) = [k for k, line in enumerate(lines) if line.startswith(f"| {first_header} |")]
    return table_rows(lines, start)[1]


def appendix_a(text: str) -> list[list[str]]:
    body = text[text.index("Appendix A.") : text.index("Appendix B.")]
    return any_table(body, "Direction")


def recoverable_codes(text: str) -> dict[str, bool | None]:
    """§9.2: each code and whether it is recoverable (None: "as flagged")."""
    flags = {"yes": True, "no": False, "as flagged": None}
    return {
        code.strip(): flags[recoverable]
        for codes, recoverable, _when in any_table(sections(text)["9.2"], "Code")
        for code in codes.split(",")
    }


def effect_of(words: str, recoverable: Mapping[str, bool | None]) -> Effect | None:
    """What an action's words say a peer sees: "error X (not recoverable, seq 0), close
    N". An error the words do not flag has §9.2's flag."""
    error = re.search(r"\berror ([A-Z_]+)\b", words)
    close = re.search(r"\bclose (\d+)\b", words)
    if error is None and close is None and not words.startswith("error "):
        return None
    if "not recoverable" in words:
        flag: bool | None = False
    elif re.search(r"\brecoverable\b", words):
        flag = True
    else:
        flag = recoverable[error.group(1)] if error else None
    return Effect(
        error=error.group(1) if error else None,
        recoverable=flag,
        seq_zero="seq 0" in words,
        close=int(close.group(1)) if close else None,
    )


@pytest.mark.parametrize("action", list(ServerAction), ids=[a.name for a in ServerAction])
def test_each_server_effect_is_what_its_action_says(action: ServerAction) -> None:
    """``SERVER_EFFECTS`` (what the conformance suite judges a server by) is what each
    action's words, the spec's, say: the error, its flag (§9.2 where the words do not
    say), seq 0 and the close code."""
    assert SERVER_EFFECTS.get(action) == effect_of(action.value, recoverable_codes(spec_text()))


def test_the_error_codes_flags_are_9_2() -> None:
    spec = recoverable_codes(spec_text())
    assert {code: flag for code, flag in spec.items() if flag is not None} == dict(
        ERROR_RECOVERABLE
    )
    for code, flag in spec.items():
        if flag is not None:
            assert recoverable_by_default(ErrorCode(code)) is flag, code


def test_the_close_codes_of_9_3_are_the_code_s() -> None:
    codes = {int(row[0]) for row in any_table(sections(spec_text())["9.3"], "Code")}
    assert codes <= {value for name, value in vars(CloseCode).items() if name.isupper()}


def test_the_message_classes_are_appendix_a() -> None:
    """Appendix A's classes, as the suites transcribe them and as the schemas say."""
    classes: dict[tuple[str, str], str] = {}
    for direction, type_, cls, _purpose, _schema in appendix_a(spec_text()):
        classes[direction, type_] = cls.split(",")[0]
    schema_classes = {
        (direction, type_): schema.seq_class
        for direction, by_type in message_schemas().items()
        for type_, schema in by_type.items()
    }
    assert schema_classes == classes
    by_class = {
        ("client", "sequenced"): CLIENT_SEQUENCED,
        ("client", "transient"): CLIENT_TRANSIENT,
        ("server", "sequenced"): SERVER_SEQUENCED,
        ("server", "transient"): SERVER_TRANSIENT,
    }
    for (direction, cls), transcribed in by_class.items():
        expected = {t for (d, t), c in classes.items() if d == direction and c == cls}
        assert set(transcribed) == expected, (direction, cls)
