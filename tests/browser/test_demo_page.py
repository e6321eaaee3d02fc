"""The demo page end to end, as a user meets it: ``vrt demo`` started by the test, the
page in Chromium, a conversation by text with tools and an interruption (§6.2, §7)."""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path

from support.browser import run_scenario
from support.processes import free_port


async def test_demo_flows_against_vrt_demo() -> None:
    port, http_port = free_port(), free_port()
    vrt = Path(sys.executable).with_name("vrt")
    server = await asyncio.create_subprocess_exec(
        str(vrt), "demo", "--agent", "scripted", "--port", str(port), "--http-port", str(http_port),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    try:
        assert server.stdout is not None
        banner = (await asyncio.wait_for(server.stdout.readline(), 30)).decode()
        assert f"http://127.0.0.1:{http_port}/" in banner, banner
        result = await run_scenario("demo", page=f"http://127.0.0.1:{http_port}/")
    finally:
        server.terminate()
        await server.wait()

    lines = [(item["kind"], item["text"]) for item in result["transcript"]]
    assert ("user", "echo hello browser") in lines
    # The chunks of a turn concatenate, the spaces inside them.
    assert ("agent", "hello browser") in lines, lines
    tools = [text for kind, text in lines if kind.startswith("tool")]
    assert "⚙ add → 5" in tools
    assert '⚙ set_color → {"color":"#aa00aa"}' in tools
    # §7.1: arguments that do not match the declared schema never reach the tool.
    assert any(text.startswith("⚙ add → INVALID") for text in tools), tools
    assert result["toolsRun"] == ["add", "set_color"]
    assert result["accent"] == "#aa00aa"
    assert any(kind == "note" and text.startswith("you interrupted") for kind, text in lines)

    # At the interrupt, every item since the last stop was reported with what the
    # speaker played of it (§8.4): the echo's 200 ms tone whole, the speech in part.
    (report,) = result["playbacks"]
    *echoes, spoken = report
    assert [round(item["playedMs"]) for item in echoes] == [200]
    assert 0 < spoken["playedMs"] < 5000

    panel = result["panel"]
    assert panel["state"] == "open"
    assert panel["session"] == result["sessionId"]
    assert panel["connections"] == "1"
    assert panel["resumes"] == "0"
    assert re.fullmatch(r"\d+\.\d ms", panel["rtt"]), panel["rtt"]
    assert panel["formats"] == "in pcm16 24000, out pcm16 24000"
