"""``vrt demo``'s page server (src/vrt/demo.py), without a browser: where the page comes
from, what is served, and the errors a newcomer meets."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from typer.testing import CliRunner

import vrt
from vrt.cli import app
from vrt.demo import PACKAGED, demo_files, host_allowed, start_page_server

WEB = Path(__file__).resolve().parent.parent / "clients" / "web"


@pytest.fixture
def site(tmp_path: Path) -> Path:
    (tmp_path / "index.html").write_text("<!doctype html><title>demo</title>")
    (tmp_path / "demo.js").write_text("export {};")
    (tmp_path / "secret").mkdir()
    return tmp_path


def test_demo_files_finds_a_given_folder_and_names_the_build_step(tmp_path: Path) -> None:
    (tmp_path / "index.html").write_text("")
    with pytest.raises(FileNotFoundError, match="npm run build"):
        demo_files(tmp_path)  # no demo.js: not a built page


def test_the_package_carries_the_demo_page() -> None:
    """Issue 34 point 5: after ``pip install '.[voice]'`` (no Node, no build) ``vrt demo``
    has its page: it is package data, not a build product of the checkout."""
    files = demo_files()
    assert files == PACKAGED
    assert files.relative_to(Path(vrt.__file__).parent) == Path("_web/demo")
    assert {p.name for p in files.iterdir()} == {"index.html", "demo.js", "demo.css"}


def test_the_packaged_page_is_the_build_of_its_sources() -> None:
    """The committed copy (``npm run package-demo``) is what ``npm run build`` makes of
    clients/web today, less the source map comment. CI builds clients/web (npm test)
    before the Python tests; without a build here the test builds it, or skips without
    Node (fails in CI)."""
    built = WEB / "dist" / "demo"
    if not (built / "demo.js").is_file() or _older_than_sources(built / "demo.js"):
        if shutil.which("node") is None or not (WEB / "node_modules").is_dir():
            message = "no fresh build of clients/web, and no Node to make one"
            if os.environ.get("CI") == "true":  # as the browser tests (docs/browser.md)
                pytest.fail(message)
            pytest.skip(message)
        subprocess.run(["node", "build.mjs"], cwd=WEB, check=True, timeout=110)
    for name in ("index.html", "demo.css"):
        assert (PACKAGED / name).read_bytes() == (built / name).read_bytes(), (
            f"{name} differs: run 'npm run package-demo' in clients/web"
        )
    script = (built / "demo.js").read_text().removesuffix("//# sourceMappingURL=demo.js.map\n")
    assert (PACKAGED / "demo.js").read_text() == script, (
        "demo.js differs from a fresh build: run 'npm run package-demo' in clients/web"
    )


def _older_than_sources(built: Path) -> bool:
    sources = [*WEB.glob("src/**/*.ts"), *WEB.glob("demo/*"), WEB / "build.mjs"]
    return built.stat().st_mtime < max(path.stat().st_mtime for path in sources)


@pytest.mark.parametrize(
    ("host", "allowed"),
    [
        ("127.0.0.1:8780", True),
        ("localhost:8780", True),
        ("LOCALHOST", True),
        ("[::1]:8780", True),
        ("127.0.0.2", True),
        # DNS rebinding: a site's own name, pointed at 127.0.0.1 after the page loaded.
        ("rebind.example:8780", False),
        ("localhost.evil.example", False),
        ("192.168.1.7:8780", False),
        ("", False),
        (None, False),
    ],
)
def test_only_this_machines_names_are_answered(host: str | None, allowed: bool) -> None:
    assert host_allowed(host, "127.0.0.1") is allowed


def test_bound_to_every_interface_any_address_is_answered_but_no_foreign_name() -> None:
    assert host_allowed("192.168.1.7:8780", "0.0.0.0")
    assert host_allowed("[fe80::1]:8780", "::")
    assert not host_allowed("rebind.example", "0.0.0.0")


def test_the_page_server_refuses_a_foreign_host(site: Path) -> None:
    httpd, _ = start_page_server(site, "127.0.0.1", 0, "ws://127.0.0.1:9")
    try:
        port = httpd.server_address[1]
        for host, status in (("rebind.example", 421), (f"localhost:{port}", 200)):
            with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
                sock.sendall(f"GET /config.json HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
                answer = sock.makefile("rb").readline().decode()
            assert answer.split()[1] == str(status), (host, answer)
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_the_page_server_drops_a_silent_connection(
    site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A connection that sends nothing holds a thread: it is closed after IDLE_TIMEOUT
    (made short here); the socket's own timeout only bounds a broken server."""
    monkeypatch.setattr("vrt.demo._PageHandler.timeout", 0.2)
    httpd, _ = start_page_server(site, "127.0.0.1", 0, "ws://127.0.0.1:9")
    try:
        with socket.create_connection(("127.0.0.1", httpd.server_address[1])) as sock:
            sock.settimeout(30)
            assert sock.recv(1) == b""  # closed by the server, not timed out here
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_page_server_serves_the_page_and_the_server_url(site: Path) -> None:
    httpd, url = start_page_server(site, "127.0.0.1", 0, "ws://127.0.0.1:9")
    try:
        assert url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(url + "config.json") as response:
            assert json.load(response) == {"url": "ws://127.0.0.1:9"}
        with urllib.request.urlopen(url + "demo.js") as response:
            assert response.headers["Content-Type"].startswith("text/javascript")
            assert response.headers["Cache-Control"] == "no-store"
        with urllib.request.urlopen(url) as response:
            assert b"<title>demo</title>" in response.read()
        with pytest.raises(urllib.error.HTTPError) as listing:
            urllib.request.urlopen(url + "secret/")
        assert listing.value.code == 404  # no directory listings
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_vrt_demo_without_a_built_page_says_how_to_build_it(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["demo", "--static", str(tmp_path)])
    assert result.exit_code == 2
    assert "npm run build" in result.output
