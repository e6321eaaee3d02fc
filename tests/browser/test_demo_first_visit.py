"""A newcomer's first visit to ``vrt demo``'s page in Chromium (issue 34 point 5, issue
31 point 11): it connects to its own server on load with nothing to click; a server
named in the page's address (anyone can write such a link) is never contacted until
the user presses Connect; the microphone opens only after a gesture."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from support.browser import run_scenario, write_wav
from support.processes import free_port


async def test_the_page_connects_home_and_asks_before_anything_else(tmp_path: Path) -> None:
    contacted: list[bytes] = []

    async def foreign(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        contacted.append(await reader.read(100))
        writer.close()

    listener = await asyncio.start_server(foreign, "127.0.0.1", 0)
    foreign_url = f"ws://127.0.0.1:{listener.sockets[0].getsockname()[1]}"
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
        wav = write_wav(tmp_path / "speech.wav", [(500, 0.0), (1000, 0.3), (500, 0.0)])
        result = await run_scenario(
            "first-visit",
            page=f"http://127.0.0.1:{http_port}/",
            foreign=foreign_url,
            wav=str(wav),
        )
    finally:
        server.terminate()
        await server.wait()
        listener.close()
        await listener.wait_closed()

    assert result["ownState"] == "open"  # connected on load, no click, no ?connect=1
    assert result["foreignUrl"] == foreign_url
    assert result["foreignClient"] is False
    assert contacted == []  # the named server never heard from the page
    notes = [item["text"] for item in result["foreignNotes"]]
    assert any("press Connect" in text and foreign_url in text for text in notes), notes
    assert result["micBeforeGesture"] is False
    assert result["micAfterGesture"] is True
