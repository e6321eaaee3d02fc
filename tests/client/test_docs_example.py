"""The complete program of docs/client.md, and the Python example of README.md, run
against a live server and exit 0, printing what the documents say they print."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from vrt.client import TextReceived, TurnChanged, VrtClient

if TYPE_CHECKING:
    from conftest import LiveServer

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "client.md"
README = ROOT / "README.md"
#: The address the README's example connects to: `vrt serve`'s default.
README_URL = "ws://127.0.0.1:8765"


def complete_program() -> str:
    """The first ```python block under the heading "A complete program"."""
    text = DOC.read_text(encoding="utf-8")
    heading = re.search(r"^#+ A complete program\s*$", text, re.MULTILINE)
    assert heading is not None, "docs/client.md has no heading 'A complete program'"
    block = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
    found = block.search(text, heading.end())
    assert found is not None, "no ```python block under 'A complete program'"
    return found.group(1)


def test_the_program_is_complete() -> None:
    program = complete_program()
    compile(program, "client.md", "exec")
    assert program.count("@tool") == 2
    assert 'os.environ.get("VRT_URL", "ws://127.0.0.1:8765")' in program


async def test_the_program_runs(vrt: LiveServer, tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(complete_program(), encoding="utf-8")
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(script),
        env={**os.environ, "VRT_URL": vrt.url},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=tmp_path,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), 30)
    lines = stdout.decode().splitlines()
    assert process.returncode == 0, stderr.decode()
    # Each reply on its own line, its chunks joined exactly as the agent sent them.
    assert lines[0] == await reply(vrt.url, "echo hello there")
    assert lines[1] == "result ok 5.0"
    assert re.fullmatch(r'result ok "\d{4}-\d\d-\d\dT[^"]+"', lines[2]), lines


def readme_example() -> str:
    """The one ```python block of README.md."""
    blocks = re.findall(r"^```python\n(.*?)^```", README.read_text("utf-8"), re.M | re.S)
    assert len(blocks) == 1, f"README.md has {len(blocks)} python blocks, expected one"
    return str(blocks[0])


def test_the_readme_example_prints_the_streamed_chunks_on_one_line() -> None:
    example = readme_example()
    compile(example, "README.md", "exec")
    assert example.count(README_URL) == 1
    assert 'print(event.text, end="", flush=True)' in example


async def test_the_readme_example_runs(vrt: LiveServer, tmp_path: Path) -> None:
    script = tmp_path / "readme.py"
    script.write_text(readme_example().replace(README_URL, vrt.url), encoding="utf-8")
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(script),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=tmp_path,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 0, stderr.decode()
    # The reply's chunks ("hello", " world") joined on one line, as the README says.
    expected = await reply(vrt.url, "echo hello world")
    assert expected == "hello world"
    assert stdout.decode() == expected + "\n"
    assert "It prints `hello world`." in README.read_text("utf-8")


async def reply(url: str, text: str) -> str:
    """The agent's reply to ``text``: its chunks, concatenated."""
    async with VrtClient(url) as client:
        await client.send_text(text)
        chunks: list[str] = []
        while True:
            event = await client.next_event(10)
            if isinstance(event, TextReceived):
                chunks.append(event.text)
            elif isinstance(event, TurnChanged) and event.state == "idle":
                return "".join(chunks)
