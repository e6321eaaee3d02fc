"""``vrt demo``: a vRT server and the browser SDK's demo page, side by side on loopback.

The server listens on ``ws://HOST:PORT`` as ``vrt serve`` would; the page (``vrt/_web/demo``
in the package: the browser SDK's demo page, built from ``clients/web/demo`` and kept in
the repository, so that a wheel built without Node has it) is served over HTTP on
``http://HOST:HTTP_PORT/``, with ``config.json`` telling it the server's URL. The page's
origin is then a loopback origin, which ``vrt serve`` accepts without
``--allowed-origin``. Static files come from the standard library's HTTP server in a
thread: this serves one developer's browser, not the public. Still, any web page that
browser opens can reach it: a request whose ``Host`` is not this machine's (DNS
rebinding: a site's name pointed at 127.0.0.1) is refused, and a connection that sends
nothing is dropped after :data:`IDLE_TIMEOUT` seconds.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import signal
import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Final

from .agents import AgentFactory
from .server import VrtServer

__all__ = ["IDLE_TIMEOUT", "demo_files", "host_allowed", "run_demo", "start_page_server"]

log = logging.getLogger("vrt.demo")

#: Seconds a connection to the page server may stay silent (before or between requests).
IDLE_TIMEOUT: Final = 5.0
PACKAGED: Final = Path(__file__).resolve().parent / "_web" / "demo"


def demo_files(static: Path | None = None) -> Path:
    """The folder of the demo page: ``static`` if given, else the package's copy."""
    folder = PACKAGED if static is None else static
    if (folder / "index.html").is_file() and (folder / "demo.js").is_file():
        return folder
    if static is None:
        raise FileNotFoundError(
            f"the demo page is missing from the package ({folder}): reinstall vrealtime"
        )
    raise FileNotFoundError(
        f"{folder} has no demo page (index.html and demo.js); 'npm run build' in "
        "clients/web builds one in clients/web/dist/demo"
    )


def host_allowed(host_header: str | None, bound: str) -> bool:
    """Whether a request's ``Host`` names this machine as the page server is reached:
    localhost, a loopback address, the address it is bound to, or (bound to every
    interface) any IP address. A name that merely resolves here is refused: that is
    how DNS rebinding lets a foreign page read and drive a local server."""
    if not host_header:
        return False
    host = host_header.strip().lower()
    if host.startswith("["):
        host = host[1 : host.find("]")] if "]" in host else ""
    elif host.count(":") == 1:
        host = host.partition(":")[0]
    host = host.rstrip(".")
    if host in ("localhost", bound.lower().strip("[]")):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if address.is_loopback:
        return True
    try:
        return ipaddress.ip_address(bound.strip("[]")).is_unspecified
    except ValueError:  # bound by name
        return False


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

    #: socketserver.StreamRequestHandler: the connection's socket timeout, so that one
    #: left open without a request ends (each connection holds a thread).
    timeout = IDLE_TIMEOUT

    def __init__(self, *args: Any, config: bytes, bound: str, **kwargs: Any) -> None:
        self._config = config
        self._bound = bound
        super().__init__(*args, **kwargs)

    def _refused(self) -> bool:
        if host_allowed(self.headers.get("Host"), self._bound):
            return False
        self.send_error(421, "Misdirected Request", "this server answers localhost only")
        return True

    def do_HEAD(self) -> None:
        if not self._refused():
            super().do_HEAD()

    def do_GET(self) -> None:
        if self._refused():
            return
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
    handler = partial(_PageHandler, directory=str(files), config=config, bound=host)
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
