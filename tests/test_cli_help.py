"""`vrt --help` and every subcommand's: a man page (what it does, each option with its
default, an example), with no type labels of the CLI library and no pointer to a file a
package user does not have; and `vrt serve`'s settings from flags, VRT_* variables and a
--config file, in that order."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vrt.cli import app

COMMANDS = [
    [],
    ["serve"],
    ["demo"],
    ["chat"],
    ["bench"],
    ["docs"],
    ["conformance"],
    ["conformance", "server"],
    ["conformance", "client"],
]
runner = CliRunner()


def help_of(command: list[str]) -> str:
    result = runner.invoke(app, [*command, "--help"], env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "vrt")
def test_help_reads_like_a_man_page(command: list[str]) -> None:
    text = help_of(command)
    assert text.startswith("Usage: vrt")
    for artefact in ("<bool>", "<str>", "<int>", "<float>", "<path>", "<list", "{URL}", "╭"):
        assert artefact not in text, artefact
    # Repository files a package user does not have; the docs ship with `vrt docs`.
    assert not re.search(r"\b(docs|conformance|bench|src)/\S+\.(md|py)", text), text
    assert "Example" in text or command == ["docs"], text
    if command == ["docs"]:
        assert "Example: vrt docs" in text


def test_every_option_says_its_default_or_what_happens_without_it() -> None:
    text = help_of(["serve"])
    for option in ("--host HOST", "--port PORT", "--resume-window SEC", "--log-format FORMAT"):
        assert option in text
    assert "[env var: VRT_PORT; default: 8765]" in " ".join(text.split())
    for unset in ("--max-sessions", "--metrics", "--auth-token", "--allowed-origin"):
        block = text[text.index(unset) :].split("\n  --", 1)[0]
        assert "Default" in block, block


def test_the_client_suite_usage_shows_the_command_after_a_double_dash() -> None:
    assert "Usage: vrt conformance client [OPTIONS] -- COMMAND [ARGS]..." in help_of(
        ["conformance", "client"]
    )
    assert "Usage: vrt chat [OPTIONS] URL" in help_of(["chat"])


def test_docs_lists_and_prints_the_documentation() -> None:
    listing = runner.invoke(app, ["docs"])
    assert listing.exit_code == 0
    names = {line.split()[0] for line in listing.output.splitlines()}
    assert {"server", "operations", "agents", "conformance", "limits"} <= names
    page = runner.invoke(app, ["docs", "operations"])
    assert page.output.startswith("# Operations")
    assert runner.invoke(app, ["docs", "nothing"]).exit_code == 2


def print_config(args: list[str], env: dict[str, str] | None = None) -> dict[str, str]:
    result = runner.invoke(app, ["serve", *args, "--print-config"], env=env or {})
    assert result.exit_code == 0, result.output
    settings = {}
    for line in result.output.splitlines():
        if not line.startswith("#"):
            key, _, rest = line.partition(" = ")
            settings[key] = rest
    return settings


def test_settings_come_from_flags_then_the_environment_then_the_file(tmp_path: Path) -> None:
    config = tmp_path / "vrt.toml"
    config.write_text(
        'port = 7001\nhost = "0.0.0.0"\nlog-format = "json"\n'
        '[serve]\nmax-sessions = 5\nauth-token = ["alice:s3cret"]\n'
        'agent-option = { model = "m1" }\n'
    )
    only_file = print_config(["--config", str(config)])
    assert only_file["port"] == "7001  # file"
    assert only_file["max-sessions"] == "5  # file"
    assert only_file["agent-option"] == '["model=m1"]  # file'
    assert only_file["resume-window"] == "30.0  # default"
    assert only_file["auth-token"] == '["alice:***"]  # file'  # never the token
    env = {"VRT_PORT": "7002", "VRT_MAX_SESSIONS": "6", "VRT_CONFIG": str(config)}
    with_env = print_config([], env)
    assert with_env["port"] == "7002  # environment VRT_PORT"
    assert with_env["max-sessions"] == "6  # environment VRT_MAX_SESSIONS"
    assert with_env["host"] == '"0.0.0.0"  # file'
    with_flag = print_config(["--port", "7003"], env)
    assert with_flag["port"] == "7003  # flag"
    assert with_flag["max-sessions"] == "6  # environment VRT_MAX_SESSIONS"


def test_the_printed_config_reads_back(tmp_path: Path) -> None:
    first = runner.invoke(
        app, ["serve", "--port", "7004", "--allowed-origin", "https://a.example", "--print-config"]
    )
    (tmp_path / "back.toml").write_text(first.output)
    again = print_config(["--config", str(tmp_path / "back.toml")])
    assert again["port"] == "7004  # file"
    assert again["allowed-origin"] == '["https://a.example"]  # file'


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("prot = 1\n", "'prot' is not a setting"),
        ("port = [1, 2]\n", "takes one value"),
        ("port = \n", "not valid TOML"),
    ],
)
def test_a_bad_config_file_is_refused_clearly(tmp_path: Path, content: str, message: str) -> None:
    config = tmp_path / "vrt.toml"
    config.write_text(content)
    result = runner.invoke(app, ["serve", "--config", str(config)])
    assert result.exit_code == 2
    assert message in result.output


def test_vrt_bench_outside_a_source_tree_says_how_to_get_the_runner(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("vrt.bench_command.find_runner", lambda: None)
    result = runner.invoke(app, ["bench", "--smoke"])
    assert result.exit_code == 2
    assert "pip download --no-deps --no-binary :all: vrealtime" in result.output


def test_the_version_says_whether_the_core_runs_compiled() -> None:
    """``vrt --version`` names the protocol core's build: the tests run the sources, so
    pure Python here; `.ci/compiled` checks the compiled wheel says so."""
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0, result.output
    assert re.fullmatch(r"vrt \S+ \(protocol core: pure Python\)\n", result.output), result.output
