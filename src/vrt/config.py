"""Where ``vrt serve`` takes its settings (vrt.settings) from: flags, ``VRT_*``
environment variables, and a TOML file (``--config vrt.toml``), in that order of
precedence, then the defaults (docs/operations.md#configuration).

Every flag ``--some-name`` is also the environment variable ``VRT_SOME_NAME`` and the
key ``some-name`` of the file (``some_name`` is accepted too), at the top level or under
``[serve]``. A flag that may be repeated takes a list in the file and whitespace-
separated values in the environment. ``--print-config`` shows the settings in force,
where each came from, credentials masked.

The options are made from the settings' declarations (:func:`with_settings`). The
precedence is click's own, under typer (command line, environment, ``default_map``,
default): the file's values are handed to it as the command's ``default_map``.
"""

from __future__ import annotations

import inspect
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Final, TypeVar

import typer

from .settings import SETTINGS, Range, Setting

__all__ = ["SECRET_SETTINGS", "checked", "load_file", "render", "with_settings"]

#: Settings whose values are credentials: never printed.
SECRET_SETTINGS: Final = frozenset(s.name for s in SETTINGS if s.about.secret)
#: Settings that are not read from a file (``--config`` itself, and actions).
NOT_IN_FILE: Final = frozenset({"config", "print_config", "help"})

Command = TypeVar("Command", bound=Callable[..., Any])


def checked(within: Range) -> Callable[[Any], Any]:
    """An option's callback: its value, or :class:`typer.BadParameter` saying why it is
    out of ``within`` (one line, exit status 2: ``ManPage.parse_args``)."""

    def check(value: Any) -> Any:
        reason = None if value is None else within.refusal(value)
        if reason is not None:
            raise typer.BadParameter(reason)
        return value

    return check


def _option(setting: Setting) -> Any:
    about = setting.about
    return typer.Option(
        setting.flag,
        metavar=about.metavar,
        envvar=setting.env,
        help=about.help,
        callback=checked(about.range) if about.range is not None else None,
    )


def with_settings(command: Command) -> Command:
    """``command`` taking one option per setting (vrt.settings), listed before its own
    keyword-only parameters; the settings reach it as keyword arguments
    (``**settings``). typer reads the options from the signature set here."""
    signature = inspect.signature(command, eval_str=True)
    own = [p for p in signature.parameters.values() if p.kind is not p.VAR_KEYWORD]
    options = [
        inspect.Parameter(
            setting.name,
            inspect.Parameter.KEYWORD_ONLY,
            default=setting.default,
            annotation=Annotated[setting.type, _option(setting)],
        )
        for setting in SETTINGS
    ]
    first = next((i for i, p in enumerate(own) if p.kind is p.KEYWORD_ONLY), len(own))
    command.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[*own[:first], *options, *own[first:]]
    )
    return command


#: click's ParameterSource names, as --print-config shows them.
_SOURCES: Final = {
    "COMMANDLINE": "flag",
    "ENVIRONMENT": "environment",
    "DEFAULT_MAP": "file",
    "DEFAULT": "default",
}


def load_file(path: Path, command: Any) -> dict[str, Any]:
    """The settings of ``command`` in the TOML file ``path``, by parameter name.

    Raises :class:`typer.BadParameter` for a file that cannot be read, a key that is no
    setting of the command, or a value of the wrong shape."""
    try:
        with path.open("rb") as file:
            data = tomllib.load(file)
    except OSError as exc:
        raise typer.BadParameter(f"cannot read {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise typer.BadParameter(f"{path} is not valid TOML: {exc}") from None
    table = data.pop("serve", {})
    if not isinstance(table, dict):
        raise typer.BadParameter(f"{path}: [serve] must be a table")
    overlap = set(table) & set(data)
    if overlap:
        raise typer.BadParameter(f"{path}: {sorted(overlap)} both at the top and in [serve]")
    data.update(table)
    params = {
        param.name: param
        for param in command.params
        if param.name is not None and param.name not in NOT_IN_FILE
    }
    settings: dict[str, Any] = {}
    for key, given in data.items():
        value = given
        name = key.replace("-", "_")
        param = params.get(name)
        if param is None:
            known = ", ".join(sorted(n.replace("_", "-") for n in params))
            raise typer.BadParameter(f"{path}: {key!r} is not a setting; the settings are {known}")
        if param.multiple:
            if isinstance(value, dict):  # agent-option = { model = "..." }
                value = [f"{k}={v}" for k, v in value.items()]
            if not isinstance(value, list):
                value = [value]
            value = [str(item) for item in value]
        elif isinstance(value, (dict, list)):
            raise typer.BadParameter(f"{path}: {key!r} takes one value, not {value!r}")
        settings[name] = value
    return settings


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(item) for item in value) + "]"
    text = str(value).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{text}"'


def _mask(value: Any) -> Any:
    """``PRINCIPAL:TOKEN`` → ``PRINCIPAL:***``."""
    if isinstance(value, (list, tuple)):
        return [_mask(item) for item in value]
    principal, sep, _ = str(value).partition(":")
    return f"{principal}:***" if sep else "***"


def render(ctx: typer.Context) -> str:
    """The settings in force for ``ctx``'s command, as a TOML file that ``--config``
    reads back, each with where it came from; unset ones commented out."""
    lines = [f"# vrt {ctx.info_name}: the settings in force (flag > environment > file > default)"]
    for param in ctx.command.params:
        name = param.name
        if name is None or name in NOT_IN_FILE or param.param_type_name != "option":
            continue
        value = ctx.params.get(name)
        source = ctx.get_parameter_source(name)
        origin = _SOURCES.get(source.name, "default") if source is not None else "default"
        if origin == "environment":
            origin = f"environment {param.envvar}"
        key = name.replace("_", "-")
        if name in SECRET_SETTINGS and value:
            value = _mask(value)
        if value is None or (isinstance(value, (list, tuple)) and not value):
            lines.append(f"# {key}: not set ({origin})")
        else:
            if isinstance(value, Path):
                value = str(value)
            lines.append(f"{key} = {_toml(value)}  # {origin}")
    return "\n".join(lines) + "\n"
