"""``vrt demo``: a vRT server and the browser SDK's demo page, side by side on loopback.

The server listens on ``ws://HOST:PORT`` as ``vrt serve`` would; the page (the files of
``clients/web/dist/demo``, built by ``npm run build`` in ``clients/web``) is served
over HTTP on ``http://HOST:HTTP_PORT/``, with ``config.json`` telling it the server's
URL. The page's origin is then a loopback origin, which ``vrt serve`` accepts without
``--allowed-origin``. Static files come from the standard library's HTTP server in a
thread: this serves one developer's browser, not the public.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from .agents import AgentFactory
from .server import VrtServer

__all__ = ["demo_files", "run_demo", "start_page_server"]

log = logging.getLogger("vrt.demo")

_BUILD_HINT = "build it first: cd clients/web && npm ci && npm run build"


def demo_files(static: Path | None = None) -> Path:
    """The folder of the demo page: ``static`` if given, else the package's copy
    (``vrt/_web/demo`` in a wheel), else ``clients/web/dist/demo`` of a checkout."""
    package = Path(__file__).resolve().parent
    candidates = (
        [static]
        if static is not None
        else [package / "_web" / "demo", package.parent.parent / "clients/web/dist/demo"]
    )
    for candidate in candidates:
        if (candidate / "index.html").is_file() and (candidate / "demo.js").is_file():
            return candidate
    where = ", ".join(str(c) for c in candidates)
    raise FileNotFoundError(f"the demo page was not found ({where}); {_BUILD_HINT}")


class _PageHandler(SimpleHTTPRequestHandler):
    """The page's files, plus ``/config.json`` with the server's URL; no caching."""

    extensions_map = {  # noqa: RUF012 - the stdlib's own attribute, per class
        ".html": "text/html; charset=utf-8",
        ".js": "text/javascript; charset=utf-8",
        ".css": "text/css; charset=utf-8",
        ".map": "application/json",
        ".json": "application/json",
        "": "application/octet-stream",
    }

    def __init__(self, *args: Any, config: bytes, **kwargs: Any) -> None:
        self._config = config
        super().__init__(*args, **kwargs)

    def do_GET(self) -> None:
        if self.path.split("?", 1)[0] == "/config.json":
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(self._config)))
            self.end_headers()
            self.wfile.write(self._config)
            return
        super().do_GET()

    def end_headers(self) -> None:
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        super().end_headers()

    def list_directory(self, path: Any) -> None:
        self.send_error(404)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("page: " + format, *args)


def start_page_server(
    files: Path, host: str, port: int, server_url: str
) -> tuple[ThreadingHTTPServer, str]:
    """Serve the page from ``files`` in a daemon thread; returns the server and its URL."""
    config = json.dumps({"url": server_url}).encode()
    handler = partial(_PageHandler, directory=str(files), config=config)
    httpd = ThreadingHTTPServer((host, port), handler)
    threading.Thread(target=httpd.serve_forever, name="vrt-demo-page", daemon=True).start()
    bound = httpd.server_address[1]
    shown = f"[{host}]" if ":" in host else host
    return httpd, f"http://{shown}:{bound}/"


async def run_demo(
    factory: AgentFactory, *, host: str, port: int, http_port: int, files: Path, agent: str
) -> None:
    """Run the server and the page until SIGINT or SIGTERM."""
    server = VrtServer(factory)
    url = await server.start(host, port)
    httpd, page = start_page_server(files, host, http_port, url)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    print(f"vrt demo: server {url} (agent {agent}); open {page} in a browser", flush=True)
    try:
        await stop.wait()
    finally:
        httpd.shutdown()
        httpd.server_close()
        await server.close()
