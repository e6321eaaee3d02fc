"""The ``__all__`` of each public package is its public API, exactly (as websockets'
test_exports.py does for its package): the core (``vrt.protocol``), the server
(``vrt.server``), the client SDK (``vrt.client``) and the agents (``vrt.agents``). Each
name the drivers' packages export is documented in ``docs/``."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
import types
from pathlib import Path
from typing import Final

import pytest

PACKAGES: Final = ("vrt.protocol", "vrt.server", "vrt.client", "vrt.agents")
#: The packages whose every export a user reads about in docs/ (the core's messages and
#: events are documented by their wire names, in docs/protocol.md).
DOCUMENTED: Final = ("vrt.server", "vrt.client", "vrt.agents")
DOCS: Final = Path(__file__).resolve().parents[1] / "docs"


def package(name: str) -> types.ModuleType:
    return importlib.import_module(name)


def submodules(name: str) -> list[str]:
    return sorted(info.name for info in pkgutil.iter_modules(package(name).__path__, name + "."))


SUBMODULES: Final = [(name, sub) for name in PACKAGES for sub in submodules(name)]


def submodule(name: str) -> types.ModuleType | None:
    """``name`` imported, or None when it needs an optional extra that is not installed
    (``vrt.agents.openai_chat`` needs the ``openai`` extra's httpx)."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] == "vrt":
            raise
        return None


def public_names(module: types.ModuleType) -> set[str]:
    """Names bound in ``module`` that do not start with ``_``, submodules aside."""
    return {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)
        and name != "annotations"  # from __future__ import annotations
    }


def defined_in_package(name: str) -> set[str]:
    """What the package's own ``__init__`` defines at its top level."""
    source = inspect.getsource(package(name))
    found: set[str] = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            found.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            found.update(t.id for t in targets if isinstance(t, ast.Name))
    return found


def homes(name: str, export: str) -> list[types.ModuleType]:
    """The modules whose ``__all__`` lists ``export``: the package's submodules, and the
    module of vrt that defines it when that is outside the package (``vrt.server``
    re-exports the core's ``ServerConfig``)."""
    candidates = [m for m in map(submodule, submodules(name)) if m is not None]
    origin = getattr(getattr(package(name), export), "__module__", None)
    if isinstance(origin, str) and origin.startswith("vrt.") and not origin.startswith(name):
        candidates.append(importlib.import_module(origin))
    return [m for m in candidates if export in getattr(m, "__all__", ())]


@pytest.mark.parametrize("name", PACKAGES)
def test_all_has_no_duplicates(name: str) -> None:
    exported = package(name).__all__
    assert len(exported) == len(set(exported))


@pytest.mark.parametrize("name", PACKAGES)
def test_every_name_in_all_exists(name: str) -> None:
    missing = [export for export in package(name).__all__ if not hasattr(package(name), export)]
    assert missing == []


@pytest.mark.parametrize("name", PACKAGES)
def test_all_lists_exactly_the_public_names(name: str) -> None:
    for sub in submodules(name):
        submodule(sub)  # bind every submodule, as a user's imports would
    assert public_names(package(name)) == set(package(name).__all__)


@pytest.mark.parametrize("name", PACKAGES)
def test_star_import_gives_all(name: str) -> None:
    namespace: dict[str, object] = {}
    exec(f"from {name} import *", namespace)
    assert set(namespace) - {"__builtins__"} == set(package(name).__all__)


@pytest.mark.parametrize("name", PACKAGES)
def test_every_exported_name_is_public_in_its_home_module(name: str) -> None:
    own = defined_in_package(name)
    orphans = sorted(
        export for export in package(name).__all__ if export not in own and not homes(name, export)
    )
    assert orphans == [], "exported, but in no submodule's __all__"


@pytest.mark.parametrize(("name", "sub"), SUBMODULES)
def test_reexported_names_are_in_all(name: str, sub: str) -> None:
    """A public name of a submodule's __all__ that the package re-exports is listed."""
    module = submodule(sub)
    if module is None:
        pytest.skip(f"{sub} needs an optional extra")
    for public in getattr(module, "__all__", ()):
        if getattr(package(name), public, None) is getattr(module, public):
            assert public in package(name).__all__, f"{sub}.{public} is re-exported, not in __all__"


@pytest.mark.parametrize(("name", "sub"), SUBMODULES)
def test_submodule_all_names_exist(name: str, sub: str) -> None:
    module = submodule(sub)
    if module is None:
        pytest.skip(f"{sub} needs an optional extra")
    exported = getattr(module, "__all__", None)
    assert exported is not None, f"{sub} has no __all__"
    assert [n for n in exported if not hasattr(module, n)] == []
    assert len(exported) == len(set(exported))


@pytest.mark.parametrize("name", PACKAGES)
def test_reexports_are_the_same_objects(name: str) -> None:
    own = defined_in_package(name)
    for export in package(name).__all__:
        if export in own:
            continue
        value = getattr(package(name), export)
        assert any(getattr(home, export) is value for home in homes(name, export)), export


def documented() -> str:
    """The code of docs/*.md: its examples (fenced blocks) and what the prose writes
    between backticks, where a name is a name and not an English word."""
    code = []
    for page in sorted(DOCS.glob("*.md")):
        text = page.read_text(encoding="utf-8")
        code += re.findall(r"^```.*?^```", text, flags=re.MULTILINE | re.DOTALL)
        prose = re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)
        code += re.findall(r"`[^`\n]+`", prose)
    return "\n".join(code)


@pytest.mark.parametrize("name", DOCUMENTED)
def test_every_export_is_documented(name: str) -> None:
    """A user meets each exported name in docs/, as code (between backticks)."""
    spans = documented()
    missing = [
        export
        for export in package(name).__all__
        if not re.search(rf"(?<!\w){re.escape(export)}(?!\w)", spans)
    ]
    assert missing == [], f"{name}: document these in docs/"


def test_the_documentation_check_reads_whole_names() -> None:
    assert re.search(r"(?<!\w)Event(?!\w)", "`vrt.client.Event`")
    assert not re.search(r"(?<!\w)Event(?!\w)", "`ErrorEvent`, `Events`")
