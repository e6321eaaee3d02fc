"""`vrt serve`'s settings are declared once (vrt.settings), and everything else is made
from that list: each option with its flag, environment variable, file key, default and
range; the protocol's deadlines and bounds with ServerConfig's defaults and ranges; the
library's checks with the same ranges."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from vrt.cli import app
from vrt.protocol.server import ServerConfig
from vrt.protocol.server.config import MUST_BE_POSITIVE
from vrt.server import VrtServer
from vrt.settings import (
    SETTINGS,
    AtLeast,
    Port,
    Seconds,
    ServeSettings,
    Setting,
    check_ranges,
    either,
)

runner = CliRunner()
RANGED = [setting for setting in SETTINGS if setting.about.range is not None]


def serve_options() -> dict[str, Any]:
    group = typer.main.get_command(app)
    assert isinstance(group, typer.core.TyperGroup)
    return {param.name or "": param for param in group.commands["serve"].params}


def test_every_setting_is_an_option_of_vrt_serve() -> None:
    options = serve_options()
    assert [name for name in options if name not in ("config", "print_config")] == [
        setting.name for setting in SETTINGS
    ]
    for setting in SETTINGS:
        option = options[setting.name]
        assert option.opts == [setting.flag]
        assert option.envvar == setting.env
        assert option.metavar == setting.about.metavar
        assert option.default == setting.default


def test_the_protocol_settings_take_server_config_defaults_and_ranges() -> None:
    core = [setting for setting in SETTINGS if setting.about.core]
    assert {s.name for s in core} == {
        "resume_window",
        "heartbeat_timeout",
        "hello_timeout",
        "tool_timeout",
        "max_unacked",
    }
    for setting in core:
        assert setting.default == getattr(ServerConfig(), setting.name)
        assert (setting.refusal(0) is not None) == (setting.name in MUST_BE_POSITIVE)
    given = ServeSettings(resume_window=7.5, max_unacked=9).server_config()
    assert (given.resume_window, given.max_unacked) == (7.5, 9)
    assert given.heartbeat_timeout == ServerConfig().heartbeat_timeout


def out_of_range(setting: Setting) -> str:
    within = setting.about.range
    if isinstance(within, Seconds):
        return "-1" if within.zero else "0"
    if isinstance(within, AtLeast):
        return str(within.lowest - 1)
    return "65536"


@pytest.mark.parametrize("setting", RANGED, ids=lambda s: s.name)
def test_a_value_out_of_range_is_one_line_from_a_flag_the_environment_or_a_file(
    setting: Setting, tmp_path: Path
) -> None:
    bad = out_of_range(setting)
    config = tmp_path / "vrt.toml"
    config.write_text(f"{setting.key} = {bad}\n")
    for args, env in (
        (["serve", setting.flag, bad], {}),
        (["serve"], {setting.env: bad}),
        (["serve", "--config", str(config)], {}),
    ):
        result = runner.invoke(app, args, env=env)
        assert result.exit_code == 2, result.output
        [line] = result.output.strip().splitlines()
        assert f"'{setting.flag}'" in line
        value = float(bad) if isinstance(setting.about.range, Seconds) else int(bad)
        reason = setting.refusal(value)
        assert reason is not None
        assert reason in line


def test_ranges_say_what_they_take() -> None:
    assert Seconds().refusal(math.nan) == "nan seconds: expected a finite number, more than 0"
    assert Seconds(zero=True).refusal(0.0) is None
    assert Seconds(zero=True).refusal(math.inf) is not None
    assert AtLeast(1).refusal(0) == "0: expected a whole number, 1 or more"
    assert Port().refusal(0) is None
    assert Port().refusal(99999) == "99999 is not a TCP port (0 to 65535; 0 picks a free one)"


def test_the_library_checks_its_arguments_against_the_same_ranges() -> None:
    with pytest.raises(ValueError, match=r"^max_sessions: 0: expected a whole number, 1 or more$"):
        VrtServer(lambda info: None, max_sessions=0)  # type: ignore[arg-type,return-value]
    with pytest.raises(ValueError, match=r"^max_parked: -1: "):
        VrtServer(lambda info: None, max_parked=-1)  # type: ignore[arg-type,return-value]
    check_ranges(max_sessions=None, port=0, drain_timeout=0.0)


def test_messages_name_the_choices() -> None:
    assert either(("text", "json")) == "text or json"
    assert either(("debug", "info", "warning", "error")) == "debug, info, warning or error"
    for args, said in (
        (["--log-format", "yaml"], "vrt: --log-format takes text or json"),
        (["--log-level", "loud"], "vrt: --log-level takes debug, info, warning or error"),
    ):
        result = runner.invoke(app, ["serve", "--agent", "scripted", *args])
        assert (result.exit_code, result.output.strip()) == (2, said)
