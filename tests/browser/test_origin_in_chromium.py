"""The Origin policy as a real browser meets it: Chromium opens a page of another site
(its name mapped to this machine, so nothing leaves it) that tries to open a WebSocket
to a local server, as a hostile page would; and a page served from loopback, as the
demo is (docs/operations.md#browser-origins)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from support.browser import Driver
from support.processes import vrt_serve
from vrt.demo import demo_files, start_page_server

SITE = "other-site.example"


@pytest.fixture
def page_port() -> Iterator[int]:
    httpd, _url = start_page_server(demo_files(), "127.0.0.1", 0, "ws://unused")
    try:
        yield httpd.server_address[1]
    finally:
        httpd.shutdown()
        httpd.server_close()


async def opened(page: str, server: str) -> dict[str, object]:
    driver = await Driver.start("origin", page=page, url=server, hostRules=f"MAP {SITE} 127.0.0.1")
    return await driver.result()


async def test_a_page_of_another_site_cannot_drive_a_local_server(page_port: int) -> None:
    with vrt_serve() as server:
        other = await opened(f"http://{SITE}:{page_port}/", server)
        assert other == {"origin": f"http://{SITE}:{page_port}", "opened": False}
        loopback = await opened(f"http://127.0.0.1:{page_port}/", server)
        assert loopback == {"origin": f"http://127.0.0.1:{page_port}", "opened": True}


async def test_an_allowed_origin_is_matched_however_it_was_written(page_port: int) -> None:
    written = f"HTTP://Other-Site.Example:{page_port}/"  # case and slash as a person types
    with vrt_serve("--allowed-origin", written) as server:
        assert (await opened(f"http://{SITE}:{page_port}/", server))["opened"] is True
        # The list replaces the default: now a loopback page is refused.
        assert (await opened(f"http://127.0.0.1:{page_port}/", server))["opened"] is False
