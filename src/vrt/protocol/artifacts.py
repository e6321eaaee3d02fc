"""Locate the language-neutral artifacts: ``schema/``, ``capabilities.json``, ``examples/``.

They exist once, at the repository root. A wheel carries the same files as package data
under ``vrt/_artifacts`` (see ``pyproject.toml``); a source checkout or an editable
install reads them from the root. Nothing here holds a second copy of their content.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

__all__ = ["artifact_root", "load_json"]

_MARKER = "capabilities.schema.json"


@cache
def artifact_root() -> Path:
    """The folder that holds ``schema/``, ``capabilities.json`` and ``examples/``."""
    package = Path(__file__).resolve().parent.parent
    for candidate in (package / "_artifacts", package.parent.parent):
        if (candidate / _MARKER).is_file():
            return candidate
    raise FileNotFoundError(
        f"vrt's protocol artifacts ({_MARKER}, schema/) were found neither in "
        f"{package / '_artifacts'} nor at the repository root {package.parent.parent}; "
        "reinstall the package"
    )


def load_json(relative: str) -> Any:
    """Read one artifact file, e.g. ``load_json("schema/client/hello.json")``."""
    with (artifact_root() / relative).open("rb") as f:
        return json.load(f)
