"""The defaults the documentation states are the code's: each value lives in one place
in the code (vrt.settings for `vrt serve`'s options, the constructors' defaults for the
library's bounds), and these tests hold every copy in docs/ to it.

What is read: a `vrt serve` option's default next to its flag ("`--drain-timeout`
seconds (10)", "`--store memory` (the default)", the synopsis of docs/server.md), and
each row of docs/limits.md, whose "Default" cell must state the default of every
option and constructor argument its "Set with" cell names."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

import pytest

from vrt.client.client import VrtClient
from vrt.protocol.client.session import ClientSession
from vrt.protocol.codec import Limits
from vrt.protocol.server import ServerConfig
from vrt.server import VrtServer
from vrt.server.auth import FailedAuthLimiter
from vrt.server.redis_store import DEFAULT_MAX_LOG_BYTES, MIN_LOG_BYTES, RedisSessionStore
from vrt.server.websocket import EdgeLimits
from vrt.settings import BY_NAME, Setting

DOCS: Final = Path(__file__).resolve().parents[1] / "docs"
#: The constructors docs/limits.md names in its "Set with" cells.
CONSTRUCTORS: Final[dict[str, Callable[..., Any]]] = {
    cls.__name__: cls
    for cls in (
        ServerConfig,
        Limits,
        EdgeLimits,
        FailedAuthLimiter,
        RedisSessionStore,
        VrtServer,
        VrtClient,
        ClientSession,
    )
}
#: A flag's default beside it in prose, in the forms the docs use.
BESIDE_A_FLAG: Final = (
    # `--drain-timeout` seconds (10), (10 by default); `--max-unacked` (1,024)
    re.compile(r"`(?:vrt serve )?(--[a-z-]+)`(?: seconds)? \(([\d,.]+)(?: by default)?\)"),
    # (`vrt serve --resume-window`, 30 s by default)
    re.compile(r"`(?:vrt serve )?(--[a-z-]+)`, ([\d,.]+)(?: s)? by default"),
    # `--store memory` (the default); (`--store memory`, the default)
    re.compile(r"`(--[a-z-]+) ([^`\s|]+)[^`]*`,? \(?the default"),
)
SYNOPSIS_OPTION: Final = re.compile(r"(--[a-z-]+) ([^\]\s|]+)")


def same(setting: Setting, text: str) -> bool:
    """Whether ``text`` in the docs states ``setting``'s default."""
    default = setting.default
    if isinstance(default, str):
        return text == default
    return float(text.replace(",", "")) == default


def pages() -> Iterator[Path]:
    yield from sorted(DOCS.glob("*.md"))
    yield DOCS.parent / "README.md"


def stated_beside_flags() -> list[tuple[str, str, str]]:
    """(page, flag, value) for every default of a `vrt serve` option stated in prose."""
    found = []
    for page in pages():
        text = " ".join(page.read_text().split())
        for pattern in BESIDE_A_FLAG:
            found += [(page.name, match[1], match[2]) for match in pattern.finditer(text)]
    return found


def test_defaults_stated_beside_a_flag_are_the_options_defaults() -> None:
    stated = [
        (page, flag, value)
        for page, flag, value in stated_beside_flags()
        if flag[2:].replace("-", "_") in BY_NAME
        and BY_NAME[flag[2:].replace("-", "_")].default is not None
    ]
    # What the patterns must find, so that they cannot silently match nothing.
    assert {(page, flag) for page, flag, _ in stated} >= {
        ("operations.md", "--drain-timeout"),
        ("deploy.md", "--drain-timeout"),
        ("deploy.md", "--max-unacked"),
        ("client.md", "--resume-window"),
        ("server.md", "--store"),
        ("server.md", "--log-level"),
    }
    wrong = [
        (page, flag, value)
        for page, flag, value in stated
        if not same(BY_NAME[flag[2:].replace("-", "_")], value)
    ]
    assert wrong == []


def test_the_synopsis_of_vrt_serve_shows_every_option_and_its_default() -> None:
    text = (DOCS / "server.md").read_text()
    synopsis = text[text.index("vrt serve [") : text.index("```", text.index("vrt serve ["))]
    shown = dict(SYNOPSIS_OPTION.findall(synopsis))
    settings = {setting.flag: setting for setting in BY_NAME.values()}
    assert set(settings) <= set(shown)
    wrong = [
        (flag, value)
        for flag, value in shown.items()
        if flag in settings
        and settings[flag].default is not None
        and not value.isupper()  # a placeholder: N
        and not same(settings[flag], value)
    ]
    assert wrong == []


def renderings(value: float) -> set[str]:
    """How the docs may write ``value``: 1024, 1,024, 1 KiB, 0.25."""
    forms = {f"{value:g}"}
    if value == int(value):
        number = int(value)
        forms |= {str(number), f"{number:,}"}
        for unit, shift in (("KiB", 10), ("MiB", 20)):
            if number and number % (1 << shift) == 0:
                forms.add(f"{number >> shift} {unit}")
    return forms


def mentions(cell: str, value: float) -> bool:
    return any(
        re.search(rf"(?<!\d)(?<!\d[.,]){re.escape(form)}(?!\d|[.,]\d)", cell)
        for form in renderings(value)
    )


def limits_rows() -> Iterator[tuple[str, str, str]]:
    """(what, default, set with) for each row of docs/limits.md's tables."""
    for line in (DOCS / "limits.md").read_text().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) == 4 and not set(cells[0]) <= {"-"}:
            yield cells[0], cells[1], cells[2]


def documented_defaults() -> Iterator[tuple[str, str, str, Any]]:
    """(row, what the row names, its default cell, the code's default) for each option
    of `vrt serve` and each constructor argument a row of docs/limits.md names."""
    for what, default, set_with in limits_rows():
        if what == "What":
            continue
        for flag in re.findall(r"`(--[a-z-]+)`", set_with):
            setting = BY_NAME.get(flag[2:].replace("-", "_"))
            if setting is not None and isinstance(setting.default, (int, float)):
                yield what, flag, default, setting.default
        for name, arguments in re.findall(r"\b([A-Z]\w+)\(([^()]*)\)", set_with):
            if name not in CONSTRUCTORS:
                continue
            parameters = inspect.signature(CONSTRUCTORS[name]).parameters
            for argument in re.findall(r"(\w+)=", arguments):
                value = parameters[argument].default
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    yield what, f"{name}({argument}=)", default, value


def test_limits_state_the_code_defaults() -> None:
    checked = list(documented_defaults())
    assert len(checked) >= 30, checked
    wrong = [
        (what[:40], named, cell, value)
        for what, named, cell, value in checked
        if not mentions(cell, value)
    ]
    assert wrong == []


@pytest.mark.parametrize(
    ("cell", "value", "stated"),
    [
        ("1024, and 2 MiB in all", 2 << 20, True),
        ("1024, and 2 MiB in all", 1 << 20, False),
        ("512 frames/s with 4,096 saved", 4096.0, True),
        ("100 per 10 s", 1.0, False),
        ("1,024 kept", 24.0, False),
        ("1.1 s of audio per second", 1.1, True),
        ("1.1 s of audio per second", 1.0, False),
    ],
)
def test_a_default_is_read_as_a_whole_number(cell: str, value: float, stated: bool) -> None:
    assert mentions(cell, value) is stated


def test_the_store_url_bounds_are_stated_as_the_store_has_them() -> None:
    """``?max_log_bytes=`` of ``--store``: its default and least (vrt.server.redis_store)."""
    deploy = " ".join((DOCS / "deploy.md").read_text().split())
    stated = re.search(r"`max_log_bytes` \(default ([\d,]+), at least ([\d,]+)\)", deploy)
    assert stated is not None
    assert (int(stated[1]), int(stated[2])) == (DEFAULT_MAX_LOG_BYTES, MIN_LOG_BYTES)
    [row] = [default for what, default, _ in limits_rows() if what.startswith("Conversation log")]
    assert mentions(row, DEFAULT_MAX_LOG_BYTES)
