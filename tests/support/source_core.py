"""The protocol core's Python sources, loaded beside the installed ``vrt.protocol``.

When the installed core is the compiled build (mypyc, docs/performance.md), the sources
it was built from can still run interpreted in the same process under another top-level
name, :data:`PARENT`: the core imports only relatively, so ``from .codec import`` in the
loaded copy resolves within the copy. tests/core/test_compiled_reference.py
feeds both the same inputs and requires the same outputs.

The source tree is a folder holding ``src/vrt/protocol`` and the artifacts the core reads
at its root (``schema/``, ``capabilities.json``, ``capabilities.schema.json``), named by
the environment variable :data:`SOURCE_TREE` (``.ci/compiled`` sets it).
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Final

__all__ = ["PARENT", "SOURCE_TREE", "compiled", "load", "source_tree"]

#: The environment variable naming the source tree.
SOURCE_TREE: Final = "VRT_SOURCE_TREE"
#: The top-level name the sources are loaded under: the core is ``vrt_source.protocol``.
PARENT: Final = "vrt_source"


def compiled(package: ModuleType) -> bool:
    """Whether the core's codec in ``package`` is an extension module (mypyc)."""
    codec = sys.modules[package.__name__ + ".codec"]
    return (codec.__file__ or "").endswith((".so", ".pyd"))


def source_tree() -> Path | None:
    """The source tree :data:`SOURCE_TREE` names, or None when it is unset."""
    value = os.environ.get(SOURCE_TREE)
    return Path(value) if value else None


def load(tree: Path) -> ModuleType:
    """The core of ``tree/src/vrt/protocol``, imported as ``vrt_source.protocol`` (once
    per process). Its parent ``vrt_source`` is an empty package over ``tree/src/vrt``:
    the core's one import beyond itself, ``..errors`` (the root exception), resolves
    there without running the rest of vrt.

    Raises ImportError when the folder holds an extension module: the copy would run
    compiled code instead of its sources, and prove nothing."""
    name = f"{PARENT}.protocol"
    if name in sys.modules:
        return sys.modules[name]
    folder = tree / "src" / "vrt"
    built = sorted(str(p) for p in folder.rglob("*") if p.suffix in (".so", ".pyd"))
    if built:
        raise ImportError(f"{folder} holds compiled modules, not only sources: {built}")
    if not (folder / "protocol" / "__init__.py").is_file():
        raise ImportError(f"no protocol core at {folder / 'protocol'}")
    spec = importlib.machinery.ModuleSpec(PARENT, None, is_package=True)
    spec.submodule_search_locations = [str(folder)]
    parent = importlib.util.module_from_spec(spec)
    sys.modules[PARENT] = parent
    try:
        return importlib.import_module(name)
    except BaseException:
        for loaded in [n for n in sys.modules if n == PARENT or n.startswith(PARENT + ".")]:
            del sys.modules[loaded]
        raise
