"""``vrt.protocol.__all__`` is the public API of the core, exactly (as websockets'
test_exports.py does for its package)."""

from __future__ import annotations

import importlib
import pkgutil
import types
from typing import Final

import pytest

import vrt.protocol

PACKAGE: Final = vrt.protocol
SUBMODULES: Final = sorted(
    info.name for info in pkgutil.iter_modules(PACKAGE.__path__, PACKAGE.__name__ + ".")
)


def submodule(name: str) -> types.ModuleType:
    return importlib.import_module(name)


def public_names(module: types.ModuleType) -> set[str]:
    """Names bound in ``module`` that do not start with ``_``, submodules aside."""
    return {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)
        and name != "annotations"  # from __future__ import annotations
    }


def test_all_has_no_duplicates() -> None:
    assert len(PACKAGE.__all__) == len(set(PACKAGE.__all__))


def test_every_name_in_all_exists() -> None:
    missing = [name for name in PACKAGE.__all__ if not hasattr(PACKAGE, name)]
    assert missing == []


def test_all_lists_exactly_the_public_names() -> None:
    for name in SUBMODULES:
        submodule(name)  # bind every submodule, as a user's imports would
    assert public_names(PACKAGE) == set(PACKAGE.__all__)


def test_star_import_gives_all() -> None:
    namespace: dict[str, object] = {}
    exec("from vrt.protocol import *", namespace)
    assert set(namespace) - {"__builtins__"} == set(PACKAGE.__all__)


def test_every_exported_name_is_public_in_its_home_module() -> None:
    homes = {
        name: [m for m in SUBMODULES if name in getattr(submodule(m), "__all__", ())]
        for name in PACKAGE.__all__
    }
    orphans = sorted(name for name, found in homes.items() if not found)
    assert orphans == [], "exported, but in no submodule's __all__"


@pytest.mark.parametrize("name", SUBMODULES)
def test_reexported_names_are_in_all(name: str) -> None:
    """A public name of a submodule's __all__ that the package re-exports is listed."""
    module = submodule(name)
    for public in getattr(module, "__all__", ()):
        if hasattr(PACKAGE, public) and getattr(PACKAGE, public) is getattr(module, public):
            assert public in PACKAGE.__all__, f"{name}.{public} is re-exported but not in __all__"


@pytest.mark.parametrize("name", SUBMODULES)
def test_submodule_all_names_exist(name: str) -> None:
    module = submodule(name)
    exported = getattr(module, "__all__", None)
    assert exported is not None, f"{name} has no __all__"
    assert [n for n in exported if not hasattr(module, n)] == []
    assert len(exported) == len(set(exported))


def test_reexports_are_the_same_objects() -> None:
    for name in PACKAGE.__all__:
        value = getattr(PACKAGE, name)
        homes = [submodule(m) for m in SUBMODULES if name in getattr(submodule(m), "__all__", ())]
        assert any(getattr(home, name) is value for home in homes), name
