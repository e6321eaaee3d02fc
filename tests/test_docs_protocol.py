"""docs/protocol.md, the protocol reference in the project's words, keeps up with the
protocol text (spec/vrt-protocol-v1.3.txt), the member contract (spec/messages.md), the
schemas and the registry: every section under the text's own number and title, every
error code, close code, failure code, message type, enumeration value and capability,
and, section by section, the same requirement keywords (BCP 14) as the text."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from vrt.protocol.errors import ErrorCode
from vrt.protocol.outputs import CloseCode

ROOT = Path(__file__).resolve().parents[1]
TEXT = (ROOT / "spec" / "vrt-protocol-v1.3.txt").read_text(encoding="utf-8")
MESSAGES = (ROOT / "spec" / "messages.md").read_text(encoding="utf-8")
DOC = (ROOT / "docs" / "protocol.md").read_text(encoding="utf-8")

# A heading of the text is a line of its own followed by an empty line: "4. Reliability",
# "4.1 Sequence numbers", "Appendix A. Message summary". (Revision entries such as
# "1.3 (2026-10-19)" are followed by their list, not by an empty line.)
_TEXT_HEADING = re.compile(r"^(?:(\d+)\. |(\d+\.\d+) |Appendix ([A-Z])\. )(.+)$")
# The text lost the spaces around code spans ("seqMUST NOT wrap"), so a keyword is
# delimited by anything but a capital letter.
_KEYWORD = re.compile(
    r"(?<![A-Z])(MUST NOT|MUST|REQUIRED|SHALL NOT|SHALL|SHOULD NOT|SHOULD|RECOMMENDED"
    r"|MAY|OPTIONAL)(?![A-Z])"
)


def text_sections() -> list[tuple[str, list[str]]]:
    """The text's sections in order: the Markdown heading the doc must have for each
    (``## §4 Reliability``, ``### §4.1 Sequence numbers``), and the section's lines up
    to the next heading."""
    lines = TEXT.splitlines()
    sections: list[tuple[str, list[str]]] = []
    for number, line in enumerate(lines):
        heading = _TEXT_HEADING.match(line)
        followed_by_blank = number + 1 < len(lines) and lines[number + 1] == ""
        if heading and followed_by_blank:
            section, subsection, appendix, title = heading.groups()
            if section:
                sections.append((f"## §{section} {title}", []))
            elif subsection:
                sections.append((f"### §{subsection} {title}", []))
            else:
                sections.append((f"## Appendix {appendix}. {title}", []))
        elif sections:
            sections[-1][1].append(line)
    return sections


def doc_sections() -> dict[str, list[str]]:
    """The doc's sections by heading line, each with its lines up to the next heading."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in DOC.splitlines():
        if line.startswith("## ") or line.startswith("### "):
            current = sections.setdefault(line, [])
        elif current is not None:
            current.append(line)
    return sections


def text_section(heading: str) -> str:
    return "\n".join(next(lines for title, lines in text_sections() if title == heading))


def table_first_cells(section: str) -> list[str]:
    """The first cell of each row of the tables in a section of the text."""
    cells: list[str] = []
    for line in section.splitlines():
        if "|" in line:
            first = line.strip().strip("|").split("|")[0].strip()
            cells.extend(part.strip() for part in first.split(","))
    return cells


def test_every_section_of_the_text_is_a_heading_of_the_doc_in_the_same_order() -> None:
    expected = [heading for heading, _ in text_sections()]
    assert len(expected) == 46, expected  # 11 sections, 33 subsections, 2 appendices
    numbered = [line for line in DOC.splitlines() if re.match(r"^#{2,3} (§|Appendix )", line)]
    assert numbered == expected


@pytest.mark.parametrize("heading", [heading for heading, _ in text_sections()])
def test_each_section_keeps_the_requirement_keywords_of_the_text(heading: str) -> None:
    """MUST stays MUST, SHOULD stays SHOULD: as many of each in the doc's section as in
    the text's (the two §6.3 are told apart by their titles)."""
    text = Counter(_KEYWORD.findall(text_section(heading)))
    doc = Counter(_KEYWORD.findall("\n".join(doc_sections()[heading])))
    assert doc == text


def error_codes() -> set[str]:
    table = table_first_cells(text_section("### §9.2 Error codes"))
    codes = {cell for cell in table if re.fullmatch(r"[A-Z]+(_[A-Z]+)*", cell)}
    assert "AGENT_ERROR" in codes
    assert "MALFORMED" in codes
    # messages.md's additions (LIMIT_EXCEEDED, RATE_LIMITED), and every code vrt sends.
    codes |= set(re.findall(r"`([A-Z]+(?:_[A-Z]+)+)`", MESSAGES))
    return codes | {code.value for code in ErrorCode}


@pytest.mark.parametrize("code", sorted(error_codes()))
def test_every_error_code_is_in_the_doc(code: str) -> None:
    assert f"`{code}`" in DOC


def failure_codes() -> list[str]:
    table = table_first_cells(text_section("### §7.3 Failure codes"))
    return [cell for cell in table if re.fullmatch(r"[A-Z]+", cell)]


def test_every_failure_code_is_a_row_of_the_doc() -> None:
    codes = failure_codes()
    assert codes == ["INTERRUPTED", "REJECTED", "INVALID", "TIMEOUT", "FAILED"]
    section = "\n".join(doc_sections()["### §7.3 Failure codes"])
    for code in codes:
        assert f"| `{code}` |" in section


def close_codes() -> set[int]:
    table = table_first_cells(text_section("### §9.3 Close codes"))
    codes = {int(cell) for cell in table if cell.isdigit()}
    assert codes == {1000, 1011, 4000, 4401, 4404, 4408}
    codes |= {int(code) for code in re.findall(r"\b(1\d{3}|4\d{3})\b", MESSAGES)}
    return codes | {
        value for name, value in vars(CloseCode).items() if name.isupper() and value > 0
    }


@pytest.mark.parametrize("code", sorted(close_codes()))
def test_every_close_code_is_a_row_of_the_doc(code: int) -> None:
    assert f"\n| {code} |" in DOC


def message_types() -> set[tuple[str, str]]:
    """(direction, type) from the text's Appendix A and from every schema file."""
    rows = text_section("## Appendix A. Message summary").splitlines()
    pairs = set()
    for row in rows:
        cells = [cell.strip() for cell in row.strip().strip("|").split("|")]
        if cells[0] in ("client", "server"):
            pairs.add((cells[0], cells[1]))
    assert len(pairs) == 20
    for direction in ("client", "server"):
        for path in (ROOT / "schema" / direction).glob("*.json"):
            schema = json.loads(path.read_text(encoding="utf-8"))
            pairs.add((direction, schema["properties"]["type"]["const"]))
    return pairs


@pytest.mark.parametrize("pair", sorted(message_types()), ids="{0[0]}-{0[1]}".format)
def test_every_message_type_is_a_row_of_the_message_summary(pair: tuple[str, str]) -> None:
    direction, kind = pair
    summary = "\n".join(doc_sections()["## Appendix A. Message summary"])
    assert f"| {direction} | `{kind}` |" in summary
    link = f"(../schema/{direction}/{kind}.json)"
    assert link in summary
    assert (ROOT / "schema" / direction / f"{kind}.json").is_file()


def schema_values() -> set[str]:
    """Every string a schema fixes: enumeration values and constants."""
    values: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "enum":
                    values.update(item for item in value if isinstance(item, str))
                elif key == "const" and isinstance(value, str):
                    values.add(value)
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    for path in (ROOT / "schema").rglob("*.json"):
        walk(json.loads(path.read_text(encoding="utf-8")))
    assert {"listening", "arguments-delta", "keyboard", "pcmu"} <= values
    return values


@pytest.mark.parametrize("value", sorted(schema_values()))
def test_every_enumeration_value_of_the_schemas_is_in_the_doc(value: str) -> None:
    assert f"`{value}`" in DOC


def test_every_registered_capability_is_a_row_of_the_registry_table() -> None:
    registry = json.loads((ROOT / "capabilities.json").read_text(encoding="utf-8"))
    section = "\n".join(doc_sections()["### §3.4 Capability registry"])
    for entry in registry["capabilities"]:
        messages = ", ".join(f"`{m}`" for m in entry["messages"]) or "none"
        row = f"| `{entry['token']}` | {entry['status']} | {entry['since']} | {entry['section']}"
        assert row in section, row
        assert section.count(f"| {messages} |") >= 1, messages
