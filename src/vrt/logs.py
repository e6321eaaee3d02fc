"""Logging for ``vrt serve``: one event per line, as text or JSON, through the standard
``logging`` module (docs/operations.md#logs).

Every line about a session carries its ids: ``session``, ``turn`` and ``epoch`` (where
the session has a turn) and ``principal`` (where it authenticated). They come from the
session a log call names (``extra=session_fields(session)``) or, for whatever an agent
logs from its own task, from the session that task serves (:data:`CURRENT_SESSION`,
set when the server starts the agent). Nothing else of a session is logged: never a
credential, never the text of a message.

Levels mean something: ERROR is a fault of this server or its agent, WARNING a
condition an operator should look at, INFO what happens to sessions, and what a client
does wrong is INFO (WARNING when it looks like an attack), never ERROR.
"""

from __future__ import annotations

import logging
import sys
import time
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import IO, TYPE_CHECKING, Any, Final, Literal

import orjson

if TYPE_CHECKING:
    from .protocol.server import ServerSession

__all__ = [
    "CURRENT_SESSION",
    "LOG_FORMATS",
    "JsonFormatter",
    "SessionContext",
    "TextFormatter",
    "Throttled",
    "configure",
    "session_fields",
]

LogFormat = Literal["text", "json"]
LOG_FORMATS: Final = ("text", "json")
#: The session whose agent task is running, for what that task logs.
CURRENT_SESSION: ContextVar[ServerSession | None] = ContextVar("vrt_session", default=None)
#: The ids a line may carry, in the order they are shown.
IDS: Final = ("session", "turn", "epoch", "principal")


_Ids = tuple[str, str | None, int | None, str | None]


def _ids_of(session: ServerSession) -> _Ids:
    turn = session.turn_id
    return session.session_id, turn, session.epoch if turn is not None else None, session.principal


def session_fields(session: ServerSession | None) -> dict[str, Any]:
    """``extra=`` for a log call about ``session``: its ids as they are now. A record
    carries ids, never the session itself, so that a handler that keeps records (a
    memory handler, a test's capture) keeps no session alive after it ends."""
    return {"vrt_ids": _ids_of(session)} if session is not None else {}


class SessionContext(logging.Filter):
    """Puts the ids of the session a record is about on the record (``session``,
    ``turn``, ``epoch``, ``principal``); a handler filter, so that it sees the records
    of every logger."""

    def filter(self, record: logging.LogRecord) -> bool:
        ids: _Ids | None = getattr(record, "vrt_ids", None)
        if ids is None:
            session = CURRENT_SESSION.get()
            ids = _ids_of(session) if session is not None else None
        if ids is not None:
            record.session, record.turn, record.epoch, record.principal = ids
        return True


def _ids(record: logging.LogRecord) -> dict[str, Any]:
    ids = {}
    for name in IDS:
        value = getattr(record, name, None)
        if value is not None:
            ids[name] = value
    return ids


class TextFormatter(logging.Formatter):
    """``TIME LEVEL LOGGER: MESSAGE [session=… turn=… epoch=… principal=…]``."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        ids = _ids(record)
        if not ids:
            return line
        shown = " ".join(f"{name}={value}" for name, value in ids.items())
        head, newline, rest = line.partition("\n")  # a traceback stays below
        return f"{head} [{shown}]{newline}{rest}"


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``time`` (UTC, RFC 3339), ``level``, ``logger``,
    ``message``, the session's ids where known, ``exception`` with the traceback."""

    def format(self, record: logging.LogRecord) -> str:
        event: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            **_ids(record),
        }
        if record.exc_info:
            event["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            event["exception"] = record.exc_text
        return orjson.dumps(event, default=str).decode()


def configure(
    level: str | int = "info", fmt: LogFormat = "text", stream: IO[str] | None = None
) -> None:
    """Send every log line to ``stream`` (standard error) at ``level`` and above, in
    ``fmt``. The WebSocket library's own lines (one per connection) show at debug."""
    if fmt not in LOG_FORMATS:
        raise ValueError(f"the log format is text or json, not {fmt!r}")
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.addFilter(SessionContext())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper() if isinstance(level, str) else level)
    # picows logs every accepted and closed connection at INFO; vrt's own lines say
    # what happens to sessions. Its warnings and errors still show.
    picows = logging.getLogger("picows")
    picows.setLevel(logging.NOTSET if root.level <= logging.DEBUG else logging.WARNING)


class Throttled:
    """One log line per ``interval`` seconds at most for a condition that a client can
    repeat at will, with how many times it happened since the last line."""

    def __init__(self, logger: logging.Logger, level: int, interval: float = 10.0) -> None:
        self.logger = logger
        self.level = level
        self.interval = interval
        self._unreported = 0
        self._reported_at = -interval

    def __call__(self, message: str, *args: object) -> None:
        self._unreported += 1
        now = time.monotonic()
        if now - self._reported_at >= self.interval:
            if self.logger.isEnabledFor(self.level):
                suffix = f" ({self._unreported} times since the last such line)"
                self.logger.log(
                    self.level, message + (suffix if self._unreported > 1 else ""), *args
                )
            self._reported_at, self._unreported = now, 0
