"""What the docs tell a user to open or run exists: every path of the repository that
README.md and docs/*.md write as code, every ``python -m MODULE`` and ``python FILE``
with the options it is given, every ``vrt COMMAND`` with its options, and every
``npm run SCRIPT``. (The dated runs in docs/runs/ describe the code of their day and are
not held to it; their links are, in test_docs_links.py.)"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest

ROOT: Final = Path(__file__).resolve().parents[1]
DOCUMENTS: Final = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: The top-level folders of the repository: a path written from one of them is the
#: repository's.
TOP: Final = (".ci", "bench", "clients", "conformance", "docs", "examples", "load")
TOP_MORE: Final = ("schema", "spec", "src", "tests")
#: Where the docs write paths from, besides the root: the package (``server/app.py``)
#: and each SDK's own folder (docs/c-sdk.md writes ``src/*.c`` for ``clients/c/src``).
BASES: Final = (ROOT, ROOT / "src" / "vrt", ROOT / "clients" / "c", ROOT / "clients" / "web")
#: Paths of other projects that the docs cite as sources.
ELSEWHERE: Final = ("src/pipecat/",)

_FOLDERS: Final = "|".join(re.escape(folder) for folder in TOP + TOP_MORE)
_PATH: Final = re.compile(rf"(?<![\w./@-])((?:{_FOLDERS})/[\w.*/@-]*)")
_FENCE: Final = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def code(document: Path) -> list[str]:
    """The examples (fenced blocks) and the code spans of the prose of ``document``."""
    text = document.read_text(encoding="utf-8")
    return [*_FENCE.findall(text), *re.findall(r"`[^`\n]+`", _FENCE.sub("", text))]


def paths(document: Path) -> Iterator[str]:
    for span in code(document):
        for found in _PATH.findall(span):
            path = found.rstrip(".,:;").split("::")[0]
            if re.search(r"[A-Z]{3,}", path):  # a placeholder: bench-MODE.json, NAME.md
                continue
            yield path


def exists(path: str) -> bool:
    if path.startswith(ELSEWHERE):
        return True
    for base in BASES:
        if list(base.glob(path)) if "*" in path else (base / path).exists():
            return True
    # Built or generated where it is used (bench/results/, clients/c/build/): ignored by
    # git. A folder matches a pattern such as build/ only when written with its slash.
    # Each base's own .gitignore counts (clients/web ignores its generated src/gen/).
    written = [str((base / path).relative_to(ROOT)) for base in BASES]
    return any(
        subprocess.run(
            ["git", "check-ignore", "-q", candidate], cwd=ROOT, check=False, capture_output=True
        ).returncode
        == 0
        for candidate in [*written, *(name + "/" for name in written)]
    )


def commands(document: Path) -> Iterator[list[str]]:
    """Each command line of ``document``'s code, as words: a line of a block or a span,
    cut at ``|``, ``&&``, ``;``, ``&`` and ``#`` comments."""
    for span in code(document):
        lines = span.splitlines()[1:-1] if span.startswith("```") else [span.strip("`")]
        for line in lines:
            uncommented = re.sub(r"(^|\s)#.*", "", line)
            for part in re.split(r"\|\|?|&&?|;|\$\(|\)", uncommented):
                words = part.split()
                while words and re.fullmatch(r"\w+=\S*|sudo|time|nice|-n|\d+", words[0]):
                    words = words[1:]  # VAR=value, nice -n 19
                if words:
                    yield words


def options(words: list[str]) -> list[str]:
    found = []
    for word in words:
        if word == "--":  # what follows belongs to another program
            break
        if word.startswith("--") and len(word) > 2:
            found.append(word.split("=")[0])
    return found


#: The programs whose commands are checked, and the words before what is checked.
PROGRAMS: Final = {"python": (["python"], ["python3"]), "vrt": (["vrt"],), "npm": (["npm", "run"],)}


def cases(kind: str) -> list[tuple[str, list[str]]]:
    return [
        (document.name, words)
        for document in DOCUMENTS
        for words in commands(document)
        for start in PROGRAMS[kind]
        if words[: len(start)] == start and len(words) > len(start)
    ]


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda d: d.name)
def test_every_path_the_docs_name_exists(document: Path) -> None:
    missing = sorted({path for path in paths(document) if not exists(path)})
    assert missing == [], f"{document.name} names paths that are not in the repository"


def module_source(name: str) -> Path | None:
    """The folder or file of a module of the repository (``bench.voice``), else None."""
    for base in (ROOT, ROOT / "src"):
        candidate = base.joinpath(*name.split("."))
        if candidate.is_dir():
            return candidate
        if candidate.with_suffix(".py").is_file():
            return candidate.with_suffix(".py")
    return None


def declares(source: Path, option: str) -> bool:
    """``option`` is written as a string in ``source`` (a file, or a package's files):
    argparse's ``add_argument("--full", ...)``."""
    files = sorted(source.rglob("*.py")) if source.is_dir() else [source]
    return any(f'"{option}"' in file.read_text(encoding="utf-8") for file in files)


@pytest.mark.parametrize(("document", "words"), cases("python"), ids=lambda c: str(c)[:60])
def test_every_python_command_runs_something_that_exists(document: str, words: list[str]) -> None:
    if words[1] == "-m":
        module = words[2]
        if module_source(module) is None:
            assert importlib.util.find_spec(module) is not None, f"{document}: no module {module}"
            return
        source = module_source(module)
    elif words[1].endswith(".py"):
        source = ROOT / words[1]
        assert source.is_file() or exists(words[1]), f"{document}: no file {words[1]}"
        if not source.is_file():
            return
    else:
        return  # python -c ..., python with no script
    assert source is not None
    unknown = [option for option in options(words[2:]) if not declares(source, option)]
    assert unknown == [], f"{document}: {' '.join(words)}: options its parser does not take"


def vrt_commands() -> Any:
    import typer.main

    from vrt.cli import app

    return typer.main.get_command(app)


@pytest.mark.parametrize(("document", "words"), cases("vrt"), ids=lambda c: str(c)[:60])
def test_every_vrt_command_and_option_exists(document: str, words: list[str]) -> None:
    command = vrt_commands()
    rest = words[1:]
    if not re.fullmatch(r"[a-z][a-z-]*", rest[0]):
        return  # not a command line: a placeholder (vrt COMMAND) or output (vrt 0.1.0 ...)
    while hasattr(command, "commands") and rest and not rest[0].startswith("-"):
        if rest[0] not in command.commands:
            pytest.fail(f"{document}: {' '.join(words)}: vrt has no command {rest[0]}")
        command = command.commands[rest[0]]
        rest = rest[1:]
    if command.context_settings.get("ignore_unknown_options"):
        return  # vrt bench hands its options to the bench runner
    known = {name for param in command.params for name in (*param.opts, *param.secondary_opts)}
    known.add("--help")
    unknown = [option for option in options(rest) if option not in known]
    assert unknown == [], f"{document}: {' '.join(words)}: no such options"


@pytest.mark.parametrize(("document", "words"), cases("npm"), ids=lambda c: str(c)[:60])
def test_every_npm_script_exists(document: str, words: list[str]) -> None:
    scripts = json.loads((ROOT / "clients" / "web" / "package.json").read_text())["scripts"]
    assert words[2] in scripts, f"{document}: npm run {words[2]}: no such script"


def test_the_scanners_read_what_the_docs_write(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "Run `python -m bench --full` and `src/vrt/cli.py`, not bench/x.py.\n"
        "```sh\nVRT_X=1 vrt serve --port 1 | vrt chat ws://h # a comment\n"
        "vrt conformance client -- node x.mjs --jobs\n```\n",
        encoding="utf-8",
    )
    assert list(paths(page)) == ["src/vrt/cli.py"]
    assert list(commands(page)) == [
        ["vrt", "serve", "--port", "1"],
        ["vrt", "chat", "ws://h"],
        ["vrt", "conformance", "client", "--", "node", "x.mjs", "--jobs"],
        ["python", "-m", "bench", "--full"],
        ["src/vrt/cli.py"],
    ]
    assert options(["client", "--", "node", "--jobs"]) == []
