"""README.md opens with what vrt is, in one line, then the two commands for a fresh
machine: the server, and the tests. The commands are kept byte for byte as they are."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

COMMANDS = (
    "python3 -m venv .venv && . .venv/bin/activate && pip install '.[voice]' && vrt serve",
    "python3 -m venv .venv && . .venv/bin/activate && pip install -e '.[dev,voice,redis]'"
    " && python -m pytest",
)


def test_the_readme_opens_with_one_line_then_the_two_commands() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert lines[:2] == ["# vrt", ""]
    assert lines[2].startswith("vrt is the Python implementation of vRT (vRealTime)")
    assert lines[3:8] == ["", "```sh", *COMMANDS, "```"]
