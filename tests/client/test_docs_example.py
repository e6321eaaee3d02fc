"""The complete program of docs/client.md runs against a live server and exits 0."""

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

DOC = Path(__file__).resolve().parents[2] / "docs" / "client.md"


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
