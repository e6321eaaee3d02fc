"""Every exception class vrt defines derives from one root, ``vrt.VrtException``
(docs/architecture.md, "Exceptions"), as websockets' derive from
``WebSocketException``: ``except vrt.VrtException`` catches all of them.

Read from the classes themselves: every module of the core, the server, the client SDK,
the agents and the voice agent is imported, and every public class there that is an
exception is checked. A module whose optional extra is missing is skipped, by name.
"""

from __future__ import annotations

import importlib
import inspect
import json
import pkgutil
import subprocess
import sys
import types
from typing import Final

import pytest

import vrt
import vrt.errors
from vrt.errors import VrtException

PACKAGES: Final = ("vrt.protocol", "vrt.server", "vrt.client", "vrt.agents", "vrt.voice")


def modules(package: str) -> list[str]:
    root = importlib.import_module(package)
    found = [info.name for info in pkgutil.walk_packages(root.__path__, package + ".")]
    return [package, *found]


MODULES: Final = sorted(name for package in PACKAGES for name in modules(package))


def imported(name: str) -> types.ModuleType:
    """``name`` imported, or the test skipped when it needs an extra not installed."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] == "vrt":
            raise
        pytest.skip(f"{name} needs {exc.name}, not installed")


def exceptions_defined_in(module: types.ModuleType) -> list[type[BaseException]]:
    return [
        value
        for name, value in vars(module).items()
        if inspect.isclass(value)
        and issubclass(value, BaseException)
        and value.__module__ == module.__name__
        and not name.startswith("_")
    ]


def test_the_root_is_exported_by_the_package() -> None:
    assert vrt.VrtException is VrtException
    assert "VrtException" in vrt.__all__
    assert issubclass(VrtException, Exception)


def test_the_classes_users_catch_keep_their_names_and_catch_as_before() -> None:
    from vrt.agents import AgentSetupError
    from vrt.client import ToolError, VrtError
    from vrt.protocol import LocalProtocolError
    from vrt.server.journal import StoreUnavailable

    for cls in (AgentSetupError, ToolError, VrtError, LocalProtocolError, StoreUnavailable):
        assert issubclass(cls, VrtException), cls
        assert issubclass(cls, Exception), cls
    assert not issubclass(VrtException, VrtError), "the client's VrtError is one kind, not all"


@pytest.mark.parametrize("name", MODULES)
def test_every_public_exception_class_derives_from_the_root(name: str) -> None:
    module = imported(name)
    stray = [
        cls.__qualname__
        for cls in exceptions_defined_in(module)
        if not issubclass(cls, VrtException)
    ]
    assert stray == [], f"{name}: derive these from vrt.errors.VrtException"


def test_the_walk_finds_the_known_exceptions() -> None:
    """The check above would pass vacuously if the walk found no exception class."""
    found = {
        cls.__name__
        for name in MODULES
        if name.split(".")[1] != "voice"  # the voice extra may be absent
        for cls in exceptions_defined_in(importlib.import_module(name))
    }
    assert {"LocalProtocolError", "VrtError", "ToolError", "AgentSetupError"} <= found


def test_exported_exceptions_of_each_package_derive_from_the_root() -> None:
    for package in ("vrt.protocol", "vrt.server", "vrt.client", "vrt.agents"):
        module = importlib.import_module(package)
        for export in module.__all__:
            value = getattr(module, export)
            if inspect.isclass(value) and issubclass(value, BaseException):
                assert issubclass(value, VrtException), f"{package}.{export}"


def test_the_root_loads_nothing_else() -> None:
    """``vrt.errors`` (and ``vrt`` itself) import nothing: catching vrt's exceptions
    needs no optional extra, and the core depends on no other part of vrt for it."""
    probe = (
        "import json, sys; before = set(sys.modules); import vrt.errors; "
        "print(json.dumps(sorted(set(sys.modules) - before)))"
    )
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert set(json.loads(run.stdout)) == {"vrt", "vrt.errors"}
