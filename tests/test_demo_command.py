"""``vrt demo``'s page server (src/vrt/demo.py), without a browser: where the page comes
from, what is served, and the errors a newcomer meets."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vrt.cli import app
from vrt.demo import demo_files, start_page_server


@pytest.fixture
def site(tmp_path: Path) -> Path:
    (tmp_path / "index.html").write_text("<!doctype html><title>demo</title>")
    (tmp_path / "demo.js").write_text("export {};")
    (tmp_path / "secret").mkdir()
    return tmp_path


def test_demo_files_finds_a_given_folder_and_names_the_build_step(tmp_path: Path) -> None:
    (tmp_path / "index.html").write_text("")
    with pytest.raises(FileNotFoundError, match="npm ci && npm run build"):
        demo_files(tmp_path)  # no demo.js: not a built page


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
