"""Wheel build hook: carry the browser SDK's demo page (clients/web/dist/demo) inside the
wheel as ``vrt/_web/demo`` when it has been built (``npm ci && npm run build`` in
clients/web), so that ``vrt demo`` works from ``pip install vrealtime``. Without a
build the wheel is made without it, and ``vrt demo`` says how to build it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


class DemoPageHook(BuildHookInterface):
    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        demo = Path(self.root) / "clients" / "web" / "dist" / "demo"
        if (demo / "demo.js").is_file():
            build_data["force_include"][str(demo)] = "vrt/_web/demo"
