"""Every setting of ``vrt serve``, declared once.

A setting is a field of :class:`ServeSettings`: its name (``max_sessions``: the flag
``--max-sessions``, the environment variable ``VRT_MAX_SESSIONS`` and the key
``max-sessions`` of a ``--config`` file), its type, its default, the values it takes
and its help. The protocol's deadlines and bounds (``resume_window``, ...) take their
default and their range from :class:`~vrt.protocol.server.ServerConfig`, which keeps
them. From this one list are made the command's options, their validation and its
``--help`` (``vrt.config``, ``vrt.cli``); start-up reads a :class:`ServeSettings`
(``vrt.server.serve``), and the library checks its own arguments against the same
ranges (:func:`check_ranges`).

This module imports nothing of the server, so that every ``vrt`` command can build its
command line without loading it.
"""

# Each field's default is a dataclasses.field made by _option or _core (ruff cannot see it).
# ruff: noqa: RUF009

from __future__ import annotations

import math
import typing
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Final, TypeAlias

from .agents import DEFAULT_AGENT
from .logs import LOG_FORMATS
from .protocol.server.config import MUST_BE_POSITIVE, ServerConfig

__all__ = [
    "BY_NAME",
    "DEFAULTS",
    "ENV_PREFIX",
    "LOG_LEVELS",
    "MAX_PORT",
    "MEMORY",
    "SETTINGS",
    "AtLeast",
    "Port",
    "Range",
    "Seconds",
    "ServeSettings",
    "Setting",
    "check_ranges",
    "either",
]

ENV_PREFIX: Final = "VRT_"
MAX_PORT: Final = 65535
#: ``--store memory``: sessions live in the process.
MEMORY: Final = "memory"
#: The levels ``--log-level`` names (the logging module takes a few more spellings).
LOG_LEVELS: Final = ("debug", "info", "warning", "error")


@dataclass(frozen=True, slots=True)
class Seconds:
    """A duration: a finite number of seconds, more than 0 (with ``zero``, 0 or more).
    nan, inf and negative durations are impossible values."""

    zero: bool = False

    def refusal(self, value: float) -> str | None:
        """Why ``value`` is out of range, or None."""
        if math.isfinite(value) and (value > 0 or (self.zero and value == 0)):
            return None
        wanted = "0 or more" if self.zero else "more than 0"
        return f"{value:g} seconds: expected a finite number, {wanted}"


@dataclass(frozen=True, slots=True)
class AtLeast:
    """A count: a whole number, ``lowest`` or more."""

    lowest: int

    def refusal(self, value: int) -> str | None:
        """Why ``value`` is out of range, or None."""
        if value >= self.lowest:
            return None
        return f"{value}: expected a whole number, {self.lowest} or more"


@dataclass(frozen=True, slots=True)
class Port:
    """A TCP port: 0 (pick a free one) to :data:`MAX_PORT`. The operating system would
    take a larger number modulo 65536 (99999 listens on 34463)."""

    def refusal(self, value: int) -> str | None:
        """Why ``value`` is out of range, or None."""
        if 0 <= value <= MAX_PORT:
            return None
        return f"{value} is not a TCP port (0 to {MAX_PORT}; 0 picks a free one)"


Range: TypeAlias = Seconds | AtLeast | Port


@dataclass(frozen=True, slots=True)
class About:
    """What a setting's declaration says besides its name, type and default."""

    metavar: str
    help: str
    range: Range | None = None
    #: The values it takes, named in its messages (start-up checks them).
    choices: tuple[str, ...] = ()
    #: It feeds the ``ServerConfig`` field of the same name.
    core: bool = False
    #: A credential: never printed (``--print-config``).
    secret: bool = False


def _option(
    default: Any,
    metavar: str,
    text: str,
    within: Range | None = None,
    *,
    choices: tuple[str, ...] = (),
    secret: bool = False,
) -> Any:
    """A setting: its default, metavar, help ``text`` and range."""
    about = About(metavar, text, within, choices, secret=secret)
    return field(default=default, metadata={"about": about})


_CORE_DEFAULTS: Final = ServerConfig()


def _core(name: str, metavar: str, text: str) -> Any:
    """A setting of ``ServerConfig``: its default is the field's, and it must be
    positive where ``ServerConfig`` says so (a duration more than 0, a count 1 or more)."""
    default = getattr(_CORE_DEFAULTS, name)
    within: Range | None = None
    if name in MUST_BE_POSITIVE:
        within = Seconds() if isinstance(default, float) else AtLeast(1)
    return field(default=default, metadata={"about": About(metavar, text, within, core=True)})


def either(choices: tuple[str, ...]) -> str:
    """``("a", "b", "c")`` → ``a, b or c``."""
    if len(choices) < 2:
        return "".join(choices)
    return f"{', '.join(choices[:-1])} or {choices[-1]}"


@dataclass(frozen=True, slots=True, kw_only=True)
class ServeSettings:
    """The settings of one ``vrt serve``, in the order ``--help`` lists them."""

    host: str = _option("127.0.0.1", "HOST", "Interface to listen on: 0.0.0.0 or :: for every one.")
    port: int = _option(8765, "PORT", "TCP port; 0 picks a free one.", Port())
    agent: str | None = _option(
        None,
        "NAME",
        f"The agent behind each session: {DEFAULT_AGENT} (the default: offline speech in "
        "and out; the scripted agent when the voice extra is not installed), scripted "
        "(deterministic, for tests and demos), openai-realtime or gemini-live (speech to "
        "speech), openai-chat (text, any OpenAI-compatible server). Their settings: vrt "
        "docs agents.",
    )
    agent_option: list[str] | None = _option(
        None, "KEY=VALUE", "A setting of the agent, e.g. model=gpt-4o-mini (repeatable)."
    )
    auth_token: list[str] | None = _option(
        None,
        "PRINCIPAL:TOKEN",
        "Require hello.auth to equal TOKEN; the session belongs to PRINCIPAL (repeatable, "
        "§5.3). Default: no authentication.",
        secret=True,
    )
    allowed_origin: list[str] | None = _option(
        None,
        "ORIGIN",
        "Accept browser pages from this origin, e.g. https://app.example (repeatable; '*' "
        "for any). Default: only pages from loopback and from HOST, against cross-site "
        "WebSocket hijacking. Clients that are not browsers are not concerned.",
    )
    tls_cert: Path | None = _option(
        None, "PEM", "Certificate chain: serve wss:// (§2.1). Default: ws://."
    )
    tls_key: Path | None = _option(None, "PEM", "The private key of --tls-cert.")
    resume_window: float = _core(
        "resume_window",
        "SEC",
        "How long a session whose connection dropped waits for a resume (§5.1).",
    )
    heartbeat_timeout: float = _core(
        "heartbeat_timeout", "SEC", "Close a connection silent this long with 4408 (§4.4)."
    )
    hello_timeout: float = _core(
        "hello_timeout", "SEC", "Close a connection that sends no hello this long with 1008."
    )
    tool_timeout: float = _core(
        "tool_timeout",
        "SEC",
        "Settle a client tool call without a result this long as TIMEOUT (§7.2).",
    )
    drain_timeout: float = _option(
        10.0,
        "SEC",
        "On SIGTERM or Ctrl-C, let replies in flight finish this long before ending every "
        "session with SERVER_SHUTDOWN; a second signal stops at once.",
        Seconds(zero=True),
    )
    max_unacked: int = _core(
        "max_unacked", "N", "Unacknowledged messages kept per session for resends (§4.1)."
    )
    max_sessions: int | None = _option(
        None,
        "N",
        "At most N live sessions, connected or waiting for a resume. One more evicts the "
        "session parked the longest, or with none parked gets START_FAILED (close 1011); "
        "resumes are always served. Default: no limit, but the voice agent's own (32 per "
        "core: vrt docs limits).",
        AtLeast(1),
    )
    max_parked: int | None = _option(
        None,
        "N",
        "At most N sessions waiting for a resume; one more evicts the one parked the "
        "longest (its resume gets RESUME_FAILED). Default: no limit.",
        AtLeast(0),
    )
    max_connections: int | None = _option(
        None,
        "N",
        "TCP connections open at once; one more is refused with HTTP 503. Default: the "
        "open-file limit less headroom.",
        AtLeast(1),
    )
    metrics: str | None = _option(
        None,
        "HOST:PORT",
        "Serve Prometheus metrics on http://HOST:PORT/metrics, with /healthz and /readyz, "
        "on a listener of their own (:PORT is loopback). Needs 'vrealtime[metrics]'. "
        "Default: off.",
    )
    store: str = _option(
        MEMORY,
        "URL",
        "Where sessions live: memory (in this process: a restart loses them), or "
        "redis://HOST:PORT/DB (rediss:// with TLS; a Redis Cluster is found by itself), "
        "shared by every vrt process behind the same address, so that a session resumes "
        "on any of them; ?max_log_bytes=N bounds the conversation kept per session. Needs "
        "pip install 'vrealtime[redis]'. More: vrt docs deploy.",
    )
    workers: int = _option(
        1,
        "N",
        "Serve with N processes on the same port (SO_REUSEPORT); N > 1 needs --store "
        "redis://... SIGTERM drains them all.",
        AtLeast(1),
    )
    log_level: str = _option("info", "LEVEL", f"{either(LOG_LEVELS)}.", choices=LOG_LEVELS)
    log_format: str = _option(
        "text",
        "FORMAT",
        f"{either(LOG_FORMATS)}: json writes one JSON object per line with session, turn, "
        "epoch and principal where known.",
        choices=LOG_FORMATS,
    )

    def server_config(self) -> ServerConfig:
        """The protocol's settings: the deadlines and bounds given, the rest defaults."""
        return ServerConfig(**{s.name: getattr(self, s.name) for s in SETTINGS if s.about.core})


@dataclass(frozen=True, slots=True)
class Setting:
    """One setting as the command line, the environment and the file see it."""

    name: str
    #: Its type, as an annotation: ``int``, ``str | None``, ``list[str] | None``.
    type: Any
    default: Any
    about: About

    @property
    def flag(self) -> str:
        """``--max-sessions``."""
        return "--" + self.key

    @property
    def env(self) -> str:
        """``VRT_MAX_SESSIONS``."""
        return ENV_PREFIX + self.name.upper()

    @property
    def key(self) -> str:
        """``max-sessions``, its key in a ``--config`` file (``max_sessions`` is read
        too)."""
        return self.name.replace("_", "-")

    def refusal(self, value: Any) -> str | None:
        """Why ``value`` is out of this setting's range, or None (None is always in)."""
        if value is None or self.about.range is None:
            return None
        return self.about.range.refusal(value)


def _settings() -> tuple[Setting, ...]:
    types = typing.get_type_hints(ServeSettings)
    return tuple(
        Setting(f.name, types[f.name], f.default, f.metadata["about"])
        for f in fields(ServeSettings)
    )


#: Every setting, in the order of ``--help``.
SETTINGS: Final = _settings()
#: Each setting by its name.
BY_NAME: Final = {setting.name: setting for setting in SETTINGS}
#: Every default, by name: ``DEFAULTS.port``.
DEFAULTS: Final = ServeSettings()


def check_ranges(**values: Any) -> None:
    """Raise ValueError for a value outside its setting's range: the library's check of
    what the command line checks as it reads it."""
    for name, value in values.items():
        reason = BY_NAME[name].refusal(value)
        if reason is not None:
            raise ValueError(f"{name}: {reason}")
