"""The Python examples of the server and client documents (docs/server.md,
docs/client.md) against the code: the library example of docs/server.md runs (issue 34
point 7: it raised TypeError), and every call in every example names only parameters
the called function or class takes. docs/client.md's complete program is run by
tests/client/test_docs_example.py."""

from __future__ import annotations

import ast
import asyncio
import importlib
import inspect
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest

from support.processes import free_port
from vrt.server import VrtServer

DOCS = Path(__file__).resolve().parent.parent / "docs"
DOCUMENTS = ["server.md", "client.md"]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def examples(name: str) -> list[tuple[int, str]]:
    text = (DOCS / name).read_text()
    return [(text[: m.start()].count("\n") + 1, m.group(1)) for m in BLOCK.finditer(text)]


def parsed(code: str) -> ast.Module:
    """An example, which the caller wraps in a coroutine (the examples await)."""
    return ast.parse(code, mode="exec")


def _imported(tree: ast.Module) -> dict[str, Any]:
    names: dict[str, Any] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("vrt"):
            module = importlib.import_module(node.module)
            for alias in node.names:
                names[alias.asname or alias.name] = getattr(module, alias.name)
    return names


CASES = [
    pytest.param(name, line, code, id=f"{name}:{line}")
    for name in DOCUMENTS
    for line, code in examples(name)
]


@pytest.mark.parametrize(("name", "line", "code"), CASES)
def test_each_call_passes_only_parameters_that_exist(name: str, line: int, code: str) -> None:
    """A keyword the callee does not take is a TypeError for whoever copies the example."""
    wrapped = "async def _example():\n" + textwrap.indent(code, "    ")
    tree = parsed(wrapped)
    names = _imported(tree)
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        target = names.get(node.func.id)
        if target is None or not callable(target):
            continue
        keywords = {k.arg: None for k in node.keywords if k.arg is not None}
        try:
            signature = inspect.signature(target)
        except (TypeError, ValueError):  # a builtin without a signature
            continue
        try:
            signature.bind_partial(**keywords)
        except TypeError as exc:
            raise AssertionError(
                f"docs/{name}, the example at line {line}: {node.func.id}({', '.join(keywords)}): "
                f"{exc}"
            ) from None


def _library_example() -> str:
    text = (DOCS / "server.md").read_text()
    section = text.split("## As a library", 1)[1]
    found = BLOCK.search(section)
    assert found is not None, "docs/server.md: no example under 'As a library'"
    return found.group(1)


async def test_the_server_library_example_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run as written, on a free port; ``serve_forever`` returns at once here."""
    port = free_port()
    code = _library_example().replace("8765", str(port))

    async def served(self: VrtServer) -> None:
        return None

    monkeypatch.setattr(VrtServer, "serve_forever", served)
    namespace: dict[str, Any] = {}
    exec(
        "async def _example():\n" + textwrap.indent(code, "    ") + "\n    return locals()",
        namespace,
    )
    made = await asyncio.wait_for(namespace["_example"](), 30)
    try:
        assert made["url"] == f"ws://127.0.0.1:{port}"
    finally:
        await made["server"].close()
