"""README.md opens with what vrt is, in one line, then the two commands for a fresh
machine: the server, and the tests (kept byte for byte as they are). Each `vrt serve`
command it shows, a real model's included, is one `vrt serve` accepts."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from vrt.agents import DEFAULT_AGENT, load_agent
from vrt.cli import app

ROOT = Path(__file__).resolve().parents[1]

COMMANDS = (
    "python3 -m venv .venv && . .venv/bin/activate && pip install '.[voice]' && vrt serve",
    "python3 -m venv .venv && . .venv/bin/activate && pip install -e '.[dev,voice,redis]'"
    " && python -m pytest",
)


def test_the_readme_opens_with_one_line_then_the_two_commands() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert lines[:2] == ["# vrt", ""]
    assert lines[2].startswith("vrt is the Python implementation of vRT (vRealTime)")
    assert lines[3:8] == ["", "```sh", *COMMANDS, "```"]


def serve_commands() -> list[list[str]]:
    """Every `vrt serve ...` line of the README's shell blocks, continuations joined."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    commands = []
    for block in re.findall(r"^```sh\n(.*?)^```", text, re.MULTILINE | re.DOTALL):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words[:2] == ["vrt", "serve"]:
                commands.append(words[2:])
    return commands


def serve_options() -> set[str]:
    result = CliRunner().invoke(app, ["serve", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return set(re.findall(r"^\s+(--[a-z-]+)", result.output, re.MULTILINE))


def test_the_readme_shows_each_real_model() -> None:
    agents = {args[args.index("--agent") + 1] for args in serve_commands() if "--agent" in args}
    assert {"openai-realtime", "gemini-live", "voice"} <= agents
    brains = [args for args in serve_commands() if "brain=openai-chat" in args]
    assert any("brain.base_url=http://localhost:11434/v1" in args for args in brains)  # Ollama
    assert any("brain.base_url=http://localhost:8080/v1" in args for args in brains)  # llama.cpp


@pytest.mark.parametrize("args", serve_commands(), ids=" ".join)
def test_each_serve_command_of_the_readme_is_accepted(
    args: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each option is one `vrt serve` has, and the agent takes each --agent-option (set
    up as `vrt serve` does, with a key in the environment; the voice agent's speech
    models are not loaded: its options and its brain's are checked all the same)."""
    known = serve_options()
    flags = [word for word in args if word.startswith("--")]
    assert set(flags) <= known, set(flags) - known
    options = dict(
        args[index + 1].split("=", 1) for index, word in enumerate(args) if word == "--agent-option"
    )
    agent = args[args.index("--agent") + 1] if "--agent" in args else DEFAULT_AGENT
    for key in ("OPENAI_API_KEY", "GEMINI_API_KEY"):
        monkeypatch.setenv(key, "test-key")
    unloaded = SimpleNamespace(vad=None, stt=None, tts=None)  # no speech models
    monkeypatch.setattr("vrt.voice.options.build_stages", lambda own: unloaded)
    assert load_agent(agent, options) is not None
