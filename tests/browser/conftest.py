"""Fixtures for the browser tests: the toolchain check, and the demo page served from
loopback next to an in-process server whose sessions record what they handled."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from support.browser import require_browser

# The fault proxy and the recording server of the reliability tests.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "reliability"))

from reliability_harness import LiveServer, start_live_server

from vrt.demo import demo_files, start_page_server


@pytest.fixture(autouse=True)
def _browser() -> None:
    require_browser()


@pytest.fixture
async def live() -> AsyncIterator[LiveServer]:
    server = await start_live_server()
    try:
        yield server
    finally:
        await server.close()


@pytest.fixture
def page(live: LiveServer) -> Iterator[str]:
    """The demo page on a loopback origin, pointed at ``live``."""
    httpd, url = start_page_server(demo_files(), "127.0.0.1", 0, live.url)
    try:
        yield url
    finally:
        httpd.shutdown()
        httpd.server_close()
