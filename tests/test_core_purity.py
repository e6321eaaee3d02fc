"""The protocol core is sans-I/O (docs/architecture.md, practice 1): no module under
src/vrt/protocol imports asyncio, sockets, selectors, ssl, threading or a WebSocket
library, and the core passes ``mypy --strict``.

Checked twice: by the imports written in each module (AST), and by what importing the
whole core adds to ``sys.modules`` in a fresh interpreter.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Final

import pytest

ROOT: Final = Path(__file__).resolve().parents[1]
CORE: Final = ROOT / "src" / "vrt" / "protocol"
FORBIDDEN: Final = frozenset(
    {
        "asyncio",
        "socket",
        "selectors",
        "ssl",
        "threading",
        "_thread",
        "concurrent",
        "multiprocessing",
        "socketserver",
        "websockets",
        "wsproto",
        "aiohttp",
        "picows",
        "trio",
        "anyio",
        "uvloop",
        "tornado",
    }
)
#: Modules the core's dependencies load on their own: jsonschema_rs imports email.utils,
#: which imports socket (and with it selectors). The core itself must add none of them.
LOADED_BY_DEPENDENCIES: Final = ("orjson", "msgspec", "jsonschema_rs")


def core_modules() -> list[Path]:
    return sorted(CORE.rglob("*.py"))


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT / "src").with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_names(path: Path) -> set[str]:
    """Top-level names of every module the file imports, at any depth of the AST,
    including ``importlib.import_module("x")`` and ``__import__("x")`` with a literal."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            first = node.args[0]
            if (
                called in ("import_module", "__import__")
                and isinstance(first, ast.Constant)
                and isinstance(first.value, str)
            ):
                names.add(first.value.split(".")[0])
    return names


def test_core_has_modules() -> None:
    names = {p.stem for p in core_modules()}
    assert {"__init__", "codec", "frames", "streams", "capabilities", "messages"} <= names


@pytest.mark.parametrize("path", core_modules(), ids=lambda p: p.name)
def test_module_imports_no_io(path: Path) -> None:
    bad = imported_names(path) & FORBIDDEN
    assert not bad, f"{module_name(path)} imports {sorted(bad)}: the core must stay sans-I/O"


def test_import_scanner_sees_every_form(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text(
        "import os, asyncio.events\n"
        "from socket import socket\n"
        "from . import sibling\n"
        "def f():\n"
        "    import threading\n"
        "    importlib.import_module('ssl')\n"
        "    __import__('websockets.sync')\n",
        encoding="utf-8",
    )
    expected = {"os", "asyncio", "socket", "threading", "ssl", "websockets"}
    assert imported_names(source) == expected


_PROBE: Final = """
import importlib, json, pkgutil, sys
for name in {deps!r}:
    importlib.import_module(name)
before = set(sys.modules)
import vrt.protocol
for info in pkgutil.walk_packages(vrt.protocol.__path__, "vrt.protocol."):
    importlib.import_module(info.name)
after = set(sys.modules)
print(json.dumps({{"before": sorted(before), "added": sorted(after - before)}}))
"""


def test_importing_the_core_loads_no_io_module() -> None:
    probe = _PROBE.format(deps=LOADED_BY_DEPENDENCIES)
    run = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=False, cwd=ROOT
    )
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    added = {name.split(".")[0] for name in report["added"]}
    assert "vrt" in added, "the probe did not import the core"
    bad = added & FORBIDDEN
    assert not bad, f"importing vrt.protocol loads {sorted(bad)}"
    # asyncio, threading, ssl and the WebSocket libraries must not be loaded at all, not
    # even by a dependency.
    everything = {name.split(".")[0] for name in report["before"] + report["added"]}
    tolerated = {"socket", "selectors", "_thread"}  # see LOADED_BY_DEPENDENCIES
    assert not (everything & FORBIDDEN) - tolerated, sorted(everything & FORBIDDEN)


def test_core_passes_mypy_strict() -> None:
    if importlib.util.find_spec("mypy") is None:
        pytest.skip("mypy is not installed")
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", "/dev/null", "src/vrt/protocol"],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stdout + run.stderr
