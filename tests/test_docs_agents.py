"""The example agent of docs/agents.md runs as written, behind a real server."""

from __future__ import annotations

import re
import types
from pathlib import Path

from vrt.client import AudioChunk, TextReceived, TurnChanged, VrtClient
from vrt.server import VrtServer

DOC = Path(__file__).resolve().parent.parent / "docs" / "agents.md"


def _example_module() -> types.ModuleType:
    text = DOC.read_text(encoding="utf-8")
    found = re.search(r"## A complete agent.*?```python\n(.*?)```", text, re.S)
    assert found, "docs/agents.md lost its complete example"
    module = types.ModuleType("example_agent")
    exec(compile(found.group(1), str(DOC), "exec"), module.__dict__)
    return module


async def test_the_example_agent_answers_a_real_client() -> None:
    example = _example_module()
    server = VrtServer(example.reverse_agent)
    url = await server.start("127.0.0.1", 0)
    try:
        async with VrtClient(url) as client:
            await client.send_text("one two three")
            texts: list[str] = []
            audio = 0
            async for event in client.events():
                if isinstance(event, TextReceived):
                    texts.append(event.text)
                elif isinstance(event, AudioChunk):
                    audio += len(event.payload)
                elif isinstance(event, TurnChanged) and event.state == "idle":
                    break
        assert texts == ["three", "two", "one"]
        assert audio == 3 * 4800
    finally:
        await server.close()
