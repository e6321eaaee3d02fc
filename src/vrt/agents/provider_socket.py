"""What the speech-to-speech adapters share about their provider WebSocket: the key
kept out of every log, the URL check, and a socket whose events are sent in order
without blocking the caller.

* **The key never reaches a log.** The ``websockets`` library logs handshake headers
  (``Authorization``, ``x-goog-api-key``) at DEBUG on the logger it is given: an
  adapter registers its key with :func:`register_secret` for its own loggers, whose
  records are then redacted by a filter; :func:`redact` cleans any text that may quote
  the key (an exception, a provider's message).
* **Plain ``ws://`` only to this machine** (:func:`check_ws_url`): the key travels in a
  header, in clear text only over loopback (§10).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
from typing import Any, Final
from urllib.parse import urlsplit

import orjson
import websockets
from websockets.asyncio.client import ClientConnection

from .base import AgentSetupError

__all__ = ["ProviderSocket", "check_ws_url", "loopback", "redact", "register_secret"]

_SECRETS: set[str] = set()


def redact(text: str) -> str:
    """``text`` with every registered secret replaced by ``[redacted]``."""
    for secret in _SECRETS:
        if secret in text:
            text = text.replace(secret, "[redacted]")
    return text


class _RedactSecrets(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if _SECRETS:
            message = record.getMessage()
            redacted = redact(message)
            if redacted != message:
                record.msg, record.args = redacted, None
        return True


_REDACTOR: Final = _RedactSecrets()


def register_secret(secret: str, *loggers: logging.Logger) -> None:
    """Redact ``secret`` from every record of ``loggers`` (and from :func:`redact`)."""
    _SECRETS.add(secret)
    for logger in loggers:
        if _REDACTOR not in logger.filters:
            logger.addFilter(_REDACTOR)


def loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_ws_url(url: str, key_variable: str) -> None:
    """Raise AgentSetupError (one line) unless ``url`` is a ``wss://`` URL, or
    ``ws://`` to this machine, without credentials in it."""
    parts = urlsplit(url)
    if parts.scheme not in ("ws", "wss") or not parts.hostname:
        raise AgentSetupError(f"base_url must be a ws:// or wss:// URL, not {url!r}")
    if parts.username or parts.password:
        raise AgentSetupError(f"base_url must not carry credentials; set {key_variable}")
    if parts.scheme == "ws" and not loopback(parts.hostname):
        raise AgentSetupError("base_url: ws:// (no TLS) is allowed only for localhost; use wss://")


class ProviderSocket:
    """One provider WebSocket whose client events a writer task sends in order, so
    that :meth:`send` never blocks: a state change and the events it causes stay in
    one synchronous step."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.outbox: asyncio.Queue[bytes] = asyncio.Queue()
        self.writer = asyncio.get_running_loop().create_task(self._write())

    def send(self, event: dict[str, Any]) -> None:
        self.outbox.put_nowait(orjson.dumps(event))

    async def _write(self) -> None:
        ws = self.ws
        outbox = self.outbox
        with contextlib.suppress(websockets.ConnectionClosed):
            while True:
                await ws.send(await outbox.get(), text=True)

    def abort(self) -> None:
        """Cut the connection at once (the reader ends)."""
        if self.ws.transport is not None:
            self.ws.transport.abort()

    async def close(self) -> None:
        self.writer.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self.writer
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.ws.close(), 2.0)
