"""What a newcomer's mistakes on the command line get (issue 34, points 4, 6 and 7): one
line naming the option and what it takes, exit status 2, never a traceback and never a
server on another port than the one asked for."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vrt.cli import app

runner = CliRunner()
SRC = Path(__file__).resolve().parent.parent / "src" / "vrt"


def refused(args: list[str], env: dict[str, str] | None = None) -> str:
    """The one line ``vrt ARGS`` answers with, after checking the exit status is 2."""
    result = runner.invoke(app, args, env=env)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    return lines[0]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        # The kernel takes a port modulo 65536: 99999 would listen on 34463.
        (["serve", "--port", "99999"], "99999 is not a TCP port"),
        (["serve", "--port", "70000"], "70000 is not a TCP port"),
        (["serve", "--port", "-1"], "-1 is not a TCP port"),
        (["demo", "--port", "65536"], "65536 is not a TCP port"),
        (["demo", "--http-port", "99999"], "99999 is not a TCP port"),
        (["serve", "--resume-window", "nan"], "--resume-window"),
        (["serve", "--heartbeat-timeout", "inf"], "--heartbeat-timeout"),
        (["serve", "--hello-timeout", "0"], "--hello-timeout"),
        (["serve", "--tool-timeout", "-3"], "--tool-timeout"),
        (["serve", "--drain-timeout", "-1"], "--drain-timeout"),
        (["serve", "--max-unacked", "0"], "--max-unacked"),
        (["serve", "--max-sessions", "0"], "--max-sessions"),
        (["serve", "--max-parked", "-1"], "--max-parked"),
        (["serve", "--max-connections", "0"], "--max-connections"),
        (["serve", "--workers", "0"], "--workers"),
        (["chat", "ws://127.0.0.1:1", "--give-up-after", "nan"], "--give-up-after"),
        (["conformance", "server", "ws://127.0.0.1:1", "--timeout", "0"], "--timeout"),
        (["conformance", "server", "ws://127.0.0.1:1", "--tool-timeout", "-1"], "--tool-timeout"),
        (["conformance", "client", "--jobs", "0", "--", "true"], "--jobs"),
        (["conformance", "client", "--ping-wait", "inf", "--", "true"], "--ping-wait"),
    ],
    ids=lambda a: " ".join(a) if isinstance(a, list) else None,
)
def test_an_impossible_value_gets_one_line(args: list[str], said: str) -> None:
    line = refused(args)
    assert said in line
    assert line.startswith("vrt ")


def test_an_impossible_port_from_the_environment_or_a_file_is_refused(tmp_path: Path) -> None:
    assert "99999 is not a TCP port" in refused(["serve"], env={"VRT_PORT": "99999"})
    config = tmp_path / "vrt.toml"
    config.write_text("port = 70000\n")
    assert "70000 is not a TCP port" in refused(["serve", "--config", str(config)])


def test_an_unknown_store_is_one_line() -> None:
    line = refused(["serve", "--agent", "scripted", "--store", "foo://x"])
    assert "expected memory, redis://" in line


def test_a_redis_store_without_the_redis_extra_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without the ``redis`` package (None in sys.modules: its import fails as when it is
    not installed) the line says what to install, by the package's name on PyPI."""
    monkeypatch.setitem(sys.modules, "redis", None)
    line = refused(["serve", "--agent", "scripted", "--store", "redis://127.0.0.1:1/0"])
    assert "pip install 'vrealtime[redis]'" in line


def test_install_hints_name_the_package_on_pypi() -> None:
    """The distribution is ``vrealtime``: ``pip install 'vrt[...]'`` installs something else."""
    wrong = [
        f"{path.relative_to(SRC)}: {line.strip()}"
        for path in SRC.rglob("*.py")
        for line in path.read_text().splitlines()
        if re.search(r"pip install\s+'?vrt\[", line)
    ]
    assert wrong == []


def test_the_main_help_names_the_default_agent() -> None:
    """vrt serve's default agent is the voice agent (vrt.agents.DEFAULT_AGENT)."""
    result = runner.invoke(app, ["--help"], env={"COLUMNS": "100"})
    serve_line = next(line for line in result.output.splitlines() if "vrt serve " in line)
    assert "voice agent" in serve_line
    assert "scripted agent" not in serve_line


def test_the_conformance_examples_start_the_scripted_agent() -> None:
    """The server suite talks to the scripted agent's contract; the default voice agent
    fails its MUSTs, so the help says to start the server with --agent scripted."""
    for command in (["--help"], ["conformance", "server", "--help"]):
        result = runner.invoke(app, command, env={"COLUMNS": "100"})
        assert "vrt serve --agent scripted" in result.output, result.output
