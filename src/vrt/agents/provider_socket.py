"""What the speech-to-speech adapters share about their provider WebSocket: the key
kept out of every log, the URL check, a socket whose events are sent in order without
blocking the caller, and the loop that keeps one provider session open for the vRT
session (:class:`ProviderAgent`).

* **The key never reaches a log.** The ``websockets`` library logs handshake headers
  (``Authorization``, ``x-goog-api-key``) at DEBUG on the logger it is given: an
  adapter registers its key with :func:`register_secret` for its own loggers, whose
  records are then redacted by a filter; :func:`redact` cleans any text that may quote
  the key (an exception, a provider's message).
* **Plain ``ws://`` only to this machine** (:func:`check_ws_url`): the key travels in a
  header, in clear text only over loopback (§10).
* **Reconnects are bounded.** A refused key (HTTP 401/403) or whatever the adapter
  finds permanent ends the vRT session with a non-recoverable ``AGENT_ERROR``; a lost
  connection is reopened at once when the last one lasted, else with a pause that
  doubles up to ``reconnect_max``; after ``max_failed_links`` provider sessions in a
  row that end within 10 s of opening, or ``give_up_after`` seconds without reaching
  the provider, the vRT session ends.
* **Audio said while no provider session takes it is held, briefly.** Input audio that
  arrives while a provider session is being replaced (a reconnect, a ``goAway``, a
  recycle) is kept, the newest ``HELD_AUDIO`` seconds of it that are at most that old,
  and sent to the next provider session once it takes the client's events, as
  LiveKit's OpenAI plugin does (its one event channel outlives the connection).
  Older audio is dropped: speech replayed long after it was said would start a
  conversation nobody is having.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import random
import re
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Final, Generic, NoReturn, TypeVar
from urllib.parse import urlsplit

import orjson
import websockets
from websockets.asyncio.client import ClientConnection, connect

from ..errors import VrtException
from ..protocol.messages import Format
from .base import (
    Agent,
    AgentFactory,
    AgentInput,
    AgentSession,
    AgentSetupError,
    AudioReceived,
    SessionInfo,
)

__all__ = [
    "HELD_AUDIO",
    "HeldAudio",
    "LinkSettings",
    "ProviderAgent",
    "ProviderSocket",
    "SessionOver",
    "check_ws_url",
    "keyed_factory",
    "loopback",
    "model_voice_url",
    "option_reader",
    "redact",
    "register_secret",
    "shown",
]

#: A provider connection that lasted this long (s) was stable: reconnect at once.
STABLE_LINK: Final = 10.0
_MAX_PROVIDER_MESSAGE: Final = 16 * 1024 * 1024
#: Session events kept while the model is unreachable (texts, context, results).
MAX_PENDING: Final = 256

#: Input audio held while no provider session takes it (s): the newest this much of
#: it, none older than this. A word said while a connection is replaced (a few hundred
#: ms) reaches the model; a minute's outage does not come back as stale speech.
HELD_AUDIO: Final = 2.0
#: Bytes a second of audio in an encoding without a fixed rate (opus): generous.
_COMPRESSED_RATE: Final = 16_000

_SECRETS: set[str] = set()
#: The most of a provider's message a client is shown (§9.2 messages are short).
MAX_SHOWN: Final = 300
#: C0 and C1 control characters, and the bidirectional overrides and isolates that
#: could disguise a message on the client's screen.
_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]+")


def redact(text: str) -> str:
    """``text`` with every registered secret replaced by ``[redacted]``."""
    for secret in _SECRETS:
        if secret in text:
            text = text.replace(secret, "[redacted]")
    return text


def shown(text: str, limit: int = MAX_SHOWN) -> str:
    """A provider's message as a client may see it: every registered secret redacted,
    control characters turned into spaces, whitespace collapsed, at most ``limit``
    characters (a provider's message is not ours to trust: it may echo the key, hold
    terminal escapes, or run to kilobytes)."""
    text = " ".join(_CONTROL.sub(" ", redact(text)).split())
    if len(text) > limit:
        text = text[: limit - 1].rstrip() + "…"
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


def option_reader(
    options: Mapping[str, str],
    environ: Mapping[str, str],
    settings: Mapping[str, str],
    key_variables: str,
) -> Callable[[str, str], str]:
    """A reader of the settings ``{option: environment variable}``: the
    ``--agent-option`` value, else the variable, else the default. Raises
    AgentSetupError (one line) for an unknown option, and for one that looks like a key
    (command lines end up in logs: the key is read only from ``key_variables``)."""
    unknown = sorted(set(options) - set(settings))
    if unknown:
        if any("key" in name.lower() for name in unknown):
            raise AgentSetupError(
                f"the API key is read only from the environment: set {key_variables}, "
                "never an --agent-option (command lines end up in logs)"
            )
        raise AgentSetupError(
            f"unknown option {unknown[0]!r}; known: {', '.join(sorted(settings))}"
        )

    def get(name: str, default: str) -> str:
        value = options.get(name)
        if value is None:
            value = environ.get(settings[name])
        return default if value is None else value.strip()

    return get


def model_voice_url(
    get: Callable[[str, str], str], defaults: tuple[str, str, str], key_variable: str
) -> tuple[str, str, str]:
    """The ``model``, ``voice`` and ``base_url`` settings every speech-to-speech adapter
    has (read with :func:`option_reader`, ``defaults`` in that order), checked: no
    empty model or voice, a URL :func:`check_ws_url` accepts."""
    model, voice = get("model", defaults[0]), get("voice", defaults[1])
    if not model or not voice:
        raise AgentSetupError("model and voice must not be empty")
    base_url = get("base_url", defaults[2])
    check_ws_url(base_url, key_variable)
    return model, voice, base_url


def audio_bytes_per_second(fmt: Format) -> int:
    if fmt.encoding == "pcm16":
        return 2 * fmt.rate
    if fmt.encoding == "pcmu":
        return fmt.rate
    return _COMPRESSED_RATE


class HeldAudio:
    """Input audio frames held while no provider session takes them: the newest
    ``seconds`` of audio (by their size in ``fmt``), none older than ``seconds`` when
    taken. What a client can make the server keep is bounded by the audio's size."""

    def __init__(self, seconds: float = HELD_AUDIO, clock: Callable[[], float] = time.monotonic):
        self.seconds = seconds
        self._clock = clock
        self._frames: deque[tuple[float, bytes]] = deque()
        #: The bytes held now.
        self.size = 0
        #: Frames dropped, too many or too old.
        self.dropped = 0

    def hold(self, payload: bytes, fmt: Format) -> None:
        limit = self.seconds * audio_bytes_per_second(fmt)
        self._frames.append((self._clock(), payload))
        self.size += len(payload)
        while self.size > limit and self._frames:
            self._drop()

    def take(self) -> list[bytes]:
        """The frames held, oldest first, but those older than ``seconds``; none after."""
        oldest = self._clock() - self.seconds
        while self._frames and self._frames[0][0] < oldest:
            self._drop()
        frames = [payload for _, payload in self._frames]
        self._frames.clear()
        self.size = 0
        return frames

    def _drop(self) -> None:
        _, payload = self._frames.popleft()
        self.size -= len(payload)
        self.dropped += 1


class ProviderSocket:
    """One provider WebSocket whose client events a writer task sends in order, so
    that :meth:`send` never blocks: a state change and the events it causes stay in
    one synchronous step."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.outbox: asyncio.Queue[bytes] = asyncio.Queue()
        self.writer = asyncio.get_running_loop().create_task(self._write())
        #: Why this provider session ends the vRT session, once that is known.
        self.fatal: str | None = None
        #: It ended as announced (a time limit): reconnect at once, not a failure.
        self.expected = False
        #: Reconnect at once, though it counts as a failure (e.g. a stale resume).
        self.retry_now = False

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


@dataclass(frozen=True, slots=True)
class LinkSettings:
    """The settings :class:`ProviderAgent` reads: the first fields of each adapter's
    configuration, which gives ``base_url`` its provider's default."""

    base_url: str
    #: For the WebSocket handshake, and for the provider's confirmation of the session.
    connect_timeout: float = 10.0
    reconnect_initial: float = 0.5
    reconnect_max: float = 10.0
    #: Provider sessions in a row that end within 10 s of opening before the vRT session
    #: ends (a connection that keeps failing is not retried for ever).
    max_failed_links: int = 5
    #: Seconds without reaching the provider before the vRT session ends.
    give_up_after: float = 300.0


C = TypeVar("C", bound=LinkSettings)


def keyed_factory(
    agent: Callable[[C, str], Agent],
    config: C,
    api_key: str,
    *loggers: logging.Logger,
) -> AgentFactory:
    """The factory of an adapter whose agents all get ``config`` and ``api_key``; the
    key is redacted from ``loggers`` from now on (:func:`register_secret`)."""
    register_secret(api_key, *loggers)

    def factory(info: SessionInfo) -> Agent:
        del info  # everything the agent needs is on its AgentSession when it runs
        return agent(config, api_key)

    return factory


class SessionOver(VrtException):
    """The agent closed its vRT session for good (the reason was sent to the client):
    ``run`` returns."""


L = TypeVar("L", bound=ProviderSocket)


class ProviderAgent(ABC, Generic[L]):
    """The lifecycle of a speech-to-speech adapter: one provider session at a time for
    the vRT session, reopened after a loss (see the module documentation for the
    bounds). An adapter implements the hooks: how to connect and start a provider
    session, read it, classify its close, and what a loss costs the client."""

    #: What a refused key (HTTP 401/403) tells the user to check.
    key_hint: ClassVar[str]
    config: LinkSettings
    _log: logging.Logger
    _wire_log: logging.Logger

    def __init__(self) -> None:
        self._session: AgentSession | None = None
        #: The provider session in use, once it takes the client's events.
        self._link: L | None = None
        #: Session events (audio aside) that arrived while no model was connected.
        self._pending: deque[AgentInput] = deque(maxlen=MAX_PENDING)
        #: Input audio that arrived while no model was connected (its newest seconds).
        self._held_audio = HeldAudio()

    @property
    def session(self) -> AgentSession:
        assert self._session is not None, "run() first"
        return self._session

    async def run(self, session: AgentSession) -> None:
        self._session = session
        self._prepare(session)
        consumer = asyncio.get_running_loop().create_task(self._consume())
        try:
            await self._keep_connected()
        finally:
            consumer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await consumer

    async def _consume(self) -> None:
        async for event in self.session.events():
            link = self._link
            if isinstance(event, AudioReceived):
                if link is not None:
                    self._send_audio(link, event.payload)
                else:
                    self._held_audio.hold(event.payload, self.session.input_format)
            elif link is None:
                # Kept, in order, for the next provider session (_drain_pending).
                if len(self._pending) == self._pending.maxlen:
                    self._log.warning("model unreachable: dropping the oldest kept session event")
                self._pending.append(event)
            else:
                self._dispatch(link, event)

    def _drain_pending(self, link: L) -> None:
        """What the client did while no model was connected, now that one is: the
        audio held (the newest seconds of it), then the other events in order."""
        held = self._held_audio.take()
        if held:
            self._log.info("sending %d audio frames said while no model was connected", len(held))
        for payload in held:
            self._send_audio(link, payload)
        while self._pending:
            self._dispatch(link, self._pending.popleft())

    def _dispatch(self, link: L, event: AgentInput) -> None:
        try:
            self._handle(link, event)
        except (KeyError, TypeError, ValueError, AttributeError):
            self._log.exception("cannot handle the session event %s", type(event).__name__)

    def _end(self, message: str) -> NoReturn:
        """End the vRT session for good: non-recoverable ``AGENT_ERROR``, then close."""
        message = redact(message)
        self._log.warning("ending the session: %s", message)
        self.session.close(message)
        raise SessionOver(message)

    async def _keep_connected(self) -> None:
        """Open, read and reopen provider sessions until the vRT session ends."""
        loop = asyncio.get_running_loop()
        pause = 0.0
        failed = 0
        try:
            while True:
                link = await self._open(pause)
                opened = loop.time()
                try:
                    await self._read(link)
                    self._classify_close(link)
                finally:
                    self._link = None
                    await link.close()
                if link.fatal is not None:
                    self._end(link.fatal)
                lasted = loop.time() - opened >= STABLE_LINK
                failed = 0 if lasted or link.expected else failed + 1
                if failed >= self.config.max_failed_links:
                    self._end(
                        f"the connection to the model failed {failed} times in a row right "
                        "after it opened; giving up"
                    )
                self._lost(link)
                # A connection that keeps dropping right after it opened is not
                # reopened in a tight loop: the pause grows until one lasts.
                if lasted or link.expected or link.retry_now:
                    pause = 0.0
                else:
                    config = self.config
                    pause = min(max(2 * pause, config.reconnect_initial), config.reconnect_max)
        except SessionOver:
            return

    async def _open(self, pause: float) -> L:
        """Connect (after ``pause`` seconds, retrying with exponential backoff) and start
        a provider session."""
        if pause:
            await asyncio.sleep(pause)
        config = self.config
        loop = asyncio.get_running_loop()
        delay = config.reconnect_initial
        reported = False
        started = loop.time()
        while True:
            try:
                ws = await connect(
                    self._url(),
                    additional_headers=self._headers(),
                    open_timeout=config.connect_timeout,
                    compression=None,  # base64 audio hardly compresses; deflate only adds latency
                    max_size=_MAX_PROVIDER_MESSAGE,
                    logger=self._wire_log,
                )
            except websockets.InvalidStatus as exc:
                status = exc.response.status_code
                if status in (401, 403):
                    self._end(
                        f"the model service refused the API key (HTTP {status}): {self.key_hint}"
                    )
                problem = f"HTTP {status}"
            except (OSError, TimeoutError, websockets.InvalidHandshake) as exc:
                problem = redact(f"{type(exc).__name__}: {exc}")
            else:
                return self._start(ws)
            self._log.warning("cannot reach the model at %s (%s)", config.base_url, problem)
            if loop.time() - started >= config.give_up_after:
                self._end(
                    f"cannot reach the model ({problem}) for {config.give_up_after:.0f} s; "
                    "giving up"
                )
            if not reported:  # once per outage: the client needs news, not a stream of it
                reported = True
                self.session.error(
                    f"cannot reach the model ({problem}); retrying", recoverable=True
                )
            await asyncio.sleep(delay * random.uniform(0.75, 1.0))
            delay = min(delay * 2, config.reconnect_max)

    # -- what an adapter provides --

    def _prepare(self, session: AgentSession) -> None:
        """Read what the agent needs of the session (its tools, its context)."""

    @abstractmethod
    def _send_audio(self, link: L, payload: bytes) -> None:
        """Pass one input audio frame to the provider."""

    @abstractmethod
    def _handle(self, link: L, event: AgentInput) -> None:
        """Pass one control event of the session to the provider."""

    def _url(self) -> str:
        return self.config.base_url

    @abstractmethod
    def _headers(self) -> dict[str, str]:
        """The headers of the provider's WebSocket upgrade (its credentials)."""

    @abstractmethod
    def _start(self, ws: ClientConnection) -> L:
        """Send the session's configuration; the link, not yet confirmed. The adapter
        sets ``self._link`` (and drains the pending events) once the link takes the
        client's events."""

    @abstractmethod
    async def _read(self, link: L) -> None:
        """Read the provider's events until the link closes."""

    def _classify_close(self, link: L) -> None:
        """Set ``link.fatal``, ``expected`` or ``retry_now`` from how it closed."""

    def _lost(self, link: L) -> None:
        """Tell the client what the loss cost it, before the next link opens."""
