"""The protocol text the repository carries (spec/) is the published one, ships in the
wheel and is shown by `vrt docs`.

spec/ holds copies of the protocol text and its member contract, unchanged. Where the
published files are beside the repository (``shared/spec`` in a folder above it), the
copies must be byte for byte the same, so that they cannot drift apart."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vrt.cli import app

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "spec"
FILES = ("vrt-protocol-v1.3.txt", "messages.md")


def published_spec() -> Path | None:
    """``shared/spec`` in the nearest folder above the repository that has one."""
    for folder in ROOT.parents:
        candidate = folder / "shared" / "spec"
        if candidate.is_dir():
            return candidate
    return None


def test_the_repository_carries_the_protocol_text() -> None:
    assert sorted(path.name for path in SPEC.iterdir()) == sorted(FILES)
    text = (SPEC / "vrt-protocol-v1.3.txt").read_text(encoding="utf-8")
    assert text.startswith("vRT protocol, version 1\nRevision 1.3, 2026-10-19.")


@pytest.mark.parametrize("name", FILES)
def test_the_copy_is_the_published_file(name: str) -> None:
    published = published_spec()
    if published is None:
        pytest.skip("no shared/spec above the repository to compare with")
    assert (SPEC / name).read_bytes() == (published / name).read_bytes(), (
        f"spec/{name} differs from {published / name}: copy the published file unchanged"
    )


def test_the_wheel_carries_the_spec_beside_the_docs() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    wheel = pyproject["tool"]["hatch"]["build"]["targets"]["wheel"]
    assert wheel["force-include"]["spec"] == "vrt/_artifacts/spec"
    assert wheel["force-include"]["docs"] == "vrt/_artifacts/docs"


def test_vrt_docs_lists_and_prints_the_protocol_text() -> None:
    runner = CliRunner()
    listing = runner.invoke(app, ["docs"])
    assert listing.exit_code == 0, listing.output
    titles = dict(line.split(maxsplit=1) for line in listing.output.splitlines())
    assert titles["vrt-protocol-v1.3"] == "vRT protocol, version 1"
    assert titles["messages"].startswith("vRT v1 message members")
    assert titles["protocol"].startswith("The vRT protocol, version 1")
    for topic, name in (("vrt-protocol-v1.3", FILES[0]), ("messages", FILES[1])):
        page = runner.invoke(app, ["docs", topic])
        assert page.exit_code == 0, page.output
        assert page.output == (SPEC / name).read_text(encoding="utf-8")
