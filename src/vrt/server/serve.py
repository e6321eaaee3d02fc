"""``vrt serve``'s start-up: from its settings (vrt.settings) to a server that runs
until SIGTERM or Ctrl-C, then drains.

Whatever no server could start with (an agent that cannot be set up, a credential or a
certificate that does not parse, a store this installation cannot use, options that do
not go together) is refused before anything listens, in one line (:class:`StartError`,
exit status 2). The ranges of single values were checked as the command line was read.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import os
import signal
import ssl
import sys
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlsplit

from .. import __version__
from ..agents import DEFAULT_AGENT, AgentFactory, AgentSetupError, load_agent, load_default_agent
from ..errors import VrtException
from ..logs import LogFormat, configure
from ..protocol.codec import check_encoding
from ..settings import BY_NAME, MEMORY, ServeSettings, either
from .app import VrtServer
from .auth import Authenticator, TokenAuthenticator, parse_token_spec
from .gc_tuning import tune_for_serving
from .redis_store import STORE_FORMS, STORE_SCHEMES, check_url
from .workers import supervise

if TYPE_CHECKING:
    from .health import OperationsListener
    from .metrics import ServerMetrics
    from .telemetry import Telemetry

__all__ = ["StartError", "main", "serve"]


class StartError(VrtException):
    """Something no server can start with, said in one line."""


def main(settings: ServeSettings) -> int:
    """``vrt serve``: the exit status; a refusal is one line on standard error."""
    try:
        return serve(settings)
    except StartError as exc:
        return _refused(exc)


def serve(settings: ServeSettings) -> int:
    """Serve with ``settings`` until SIGTERM or Ctrl-C; the exit status. Raises
    :class:`StartError` for what no server can start with."""
    _configure_logs(settings)
    start = _prepare(settings)
    if settings.workers > 1:
        return supervise(
            settings.workers, settings.host, settings.port, start.worker, start.all_ready
        )
    run(start.run(start.server(reuse_port=False), settings.port))
    return 0


def run(main: Coroutine[Any, Any, None]) -> None:
    """Run on uvloop where it is installed: it cuts the event loop's cost per frame."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
    else:
        uvloop.run(main)


def _refused(exc: StartError) -> int:
    print(f"vrt: {exc}", file=sys.stderr, flush=True)
    return 2


def _say(line: str) -> None:
    print(line, flush=True)


# --- what is checked before anything starts, in this order ---------------------------


def _configure_logs(settings: ServeSettings) -> None:
    log_format, log_level = BY_NAME["log_format"], BY_NAME["log_level"]
    if settings.log_format not in log_format.about.choices:
        raise StartError(f"{log_format.flag} takes {either(log_format.about.choices)}")
    try:
        configure(settings.log_level, cast("LogFormat", settings.log_format))
    except ValueError:
        raise StartError(f"{log_level.flag} takes {either(log_level.about.choices)}") from None
    if os.environ.get("VRT_STRICT") == "1":  # development: check every message sent
        check_encoding(True)


def _prepare(settings: ServeSettings) -> Startup:
    agent, factory = _agent(settings.agent, _agent_options(settings.agent_option))
    authenticator = _authenticator(settings.auth_token)
    tls = _tls(settings.tls_cert, settings.tls_key)
    telemetry = _telemetry(agent, settings.metrics)
    _check_store(settings)
    return Startup(settings, agent, factory, authenticator, tls, telemetry)


def _agent_options(items: list[str] | None) -> dict[str, str]:
    options: dict[str, str] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise StartError(f"--agent-option {item!r}: expected KEY=VALUE")
        options[key] = value
    return options


def _agent(name: str | None, options: dict[str, str]) -> tuple[str, AgentFactory]:
    """The agent's name and factory: ``name``'s, or the default agent's."""
    try:
        return (name, load_agent(name, options)) if name is not None else _default_agent(options)
    except KeyError as exc:
        raise StartError(str(exc.args[0])) from None
    except AgentSetupError as exc:
        raise StartError(f"--agent {name or DEFAULT_AGENT}: {exc}") from None
    except ImportError as exc:
        raise StartError(
            f"the {name or DEFAULT_AGENT} agent needs a package that is missing: {exc.name}"
        ) from None


def _default_agent(options: dict[str, str]) -> tuple[str, AgentFactory]:
    name, factory, notice = load_default_agent(options)
    if notice:  # a log line, so that --log-format json keeps stderr all JSON
        logging.getLogger("vrt.agents").warning("%s", notice)
    return name, factory


def _authenticator(tokens: list[str] | None) -> Authenticator | None:
    if not tokens:
        return None
    try:
        return TokenAuthenticator(parse_token_spec(spec) for spec in tokens)
    except ValueError as exc:
        raise StartError(f"--auth-token: {exc}") from None


def _tls(cert: Path | None, key: Path | None) -> ssl.SSLContext | None:
    if not (cert or key):
        return None
    if not (cert and key):
        raise StartError("--tls-cert and --tls-key go together")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise StartError(f"cannot load the TLS certificate {cert}: {exc}") from None
    return context


def _telemetry(agent: str, metrics: str | None) -> tuple[Telemetry, ServerMetrics] | None:
    """The server's observer and its metrics (None without --metrics): traces when
    OpenTelemetry is configured come with it; without --metrics the server finds
    those itself."""
    if metrics is None:
        return None
    from .health import parse_address

    try:
        parse_address(metrics)
    except ValueError as exc:
        raise StartError(f"--metrics {exc}") from None
    if importlib.util.find_spec("prometheus_client") is None:
        raise StartError("--metrics needs prometheus-client: pip install 'vrealtime[metrics]'")
    from .metrics import ServerMetrics
    from .telemetry import Telemetry
    from .tracing import configured_tracer

    server_metrics = ServerMetrics(agent)
    return Telemetry(server_metrics, configured_tracer()), server_metrics


def _check_store(settings: ServeSettings) -> None:
    """``--store``: memory, or the URL of a store this installation can use (not an
    unknown scheme, not without the redis extra); and what goes with it."""
    if settings.store != MEMORY:
        _check_store_url(settings.store)
    elif settings.workers > 1:
        raise StartError(
            "--workers above 1 needs a shared session store: --store redis://HOST:PORT/DB"
        )
    if settings.metrics is not None and settings.workers > 1:
        raise StartError(
            "--metrics serves one process: with --workers above 1, run one vrt serve per "
            "port behind the proxy instead, each with its own --metrics"
        )


def _check_store_url(store: str) -> None:
    scheme, sep, _ = store.partition("://")
    if not sep or scheme not in STORE_SCHEMES:
        raise StartError(f"--store {store!r}: expected {STORE_FORMS}")
    try:
        check_url(store)
    except ImportError as exc:
        raise StartError(
            f"--store {scheme}:// needs the redis extra: pip install 'vrealtime[redis]' "
            f"(missing: {exc.name})"
        ) from None
    except ValueError as exc:
        raise StartError(f"--store: {exc}") from None


def _safe_url(url: str) -> str:
    """``url`` without a password, for what is printed."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    return f"{parts.scheme}://{host}{f':{parts.port}' if parts.port else ''}{parts.path}"


# --- the server, once everything checked ---------------------------------------------


@dataclass(frozen=True, slots=True)
class Startup:
    """What the settings made: the agent, the authenticator, TLS, metrics. It builds
    the server (one, or one per worker) and runs it."""

    settings: ServeSettings
    agent: str
    factory: AgentFactory
    authenticator: Authenticator | None
    tls: ssl.SSLContext | None
    telemetry: tuple[Telemetry, ServerMetrics] | None

    @property
    def shared(self) -> bool:
        """Whether sessions live in a shared store (they then outlive the process)."""
        return self.settings.store != MEMORY

    def server(self, *, reuse_port: bool) -> VrtServer:
        settings = self.settings
        store = None
        if self.shared:
            from .redis_store import RedisSessionStore

            store = RedisSessionStore(settings.store)
        return VrtServer(
            self.factory,
            authenticator=self.authenticator,
            config=settings.server_config(),
            ssl_context=self.tls,
            allowed_origins=settings.allowed_origin,
            max_sessions=settings.max_sessions,
            max_parked=settings.max_parked,
            max_connections=settings.max_connections,
            store=store,
            reuse_port=reuse_port,
            observer=self.telemetry[0] if self.telemetry else None,
        )

    async def run(
        self, server: VrtServer, port: int, ready: Callable[[], None] | None = None
    ) -> None:
        """Serve on ``port`` until SIGINT or SIGTERM, then drain. Alone (no ``ready``)
        it says where it listens and when it stops; a worker calls ``ready()`` once it
        listens, and its supervisor speaks."""
        url = await self._listen(server, port)
        operations = await self._operations(server)
        # Start-up is done: what it made is kept out of every later collection, and the
        # young generation collected less often (vrt.server.gc_tuning).
        tune_for_serving()
        stop = _stop_on_signals()
        if ready is None:
            self._say_listening(url, server, operations)
        else:
            ready()
        await stop.wait()
        if ready is None:
            self._say_draining()
        await _drain(server, self.settings.drain_timeout, stop)
        if operations is not None:
            await operations.close()
        if ready is None:
            _say("stopped")

    def worker(self, port: int, ready: Callable[[], None]) -> None:
        """One worker of ``--workers``, in its own process."""
        try:
            run(self.run(self.server(reuse_port=True), port, ready))
        except StartError as exc:
            raise SystemExit(_refused(exc)) from None

    def all_ready(self, port: int) -> None:
        """Every worker listens on ``port``."""
        host = self.settings.host
        scheme = "wss" if self.tls is not None else "ws"
        shown = f"[{host}]" if ":" in host else host
        self._announce(f"{scheme}://{shown}:{port}", f", {self.settings.workers} workers")

    async def _listen(self, server: VrtServer, port: int) -> str:
        host = self.settings.host
        try:
            return await server.start(host, port)
        except OSError as exc:
            raise StartError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None

    async def _operations(self, server: VrtServer) -> OperationsListener | None:
        """The listener of ``--metrics``, started; None without it."""
        metrics = self.settings.metrics
        if self.telemetry is None or metrics is None:
            return None
        from .health import OperationsListener, parse_address

        operations = OperationsListener(server, self.telemetry[1])
        try:
            await operations.start(*parse_address(metrics))
        except OSError as exc:
            await server.close()
            raise StartError(
                f"--metrics cannot listen on {metrics}: {exc.strerror or exc}"
            ) from None
        return operations

    def _announce(self, url: str, detail: str = "") -> None:
        auth = "authentication on" if self.authenticator else "no authentication"
        where = (
            f"sessions in {_safe_url(self.settings.store)}" if self.shared else "sessions in memory"
        )
        _say(f"vrt {__version__} listening on {url} (agent {self.agent}, {auth}, {where}{detail})")

    def _say_listening(
        self, url: str, server: VrtServer, operations: OperationsListener | None
    ) -> None:
        self._announce(url)
        _say(f"origins: {server.origins.describe()}")
        if operations is not None:
            ops = operations.url
            _say(f"metrics: {ops}/metrics; health: {ops}/healthz, {ops}/readyz")

    def _say_draining(self) -> None:
        then = "parked in the session store" if self.shared else "ended (SERVER_SHUTDOWN)"
        _say(
            f"draining: replies in flight have {self.settings.drain_timeout:g} s to finish; "
            f"sessions are then {then}"
        )


def _stop_on_signals() -> asyncio.Event:
    """An event set by SIGINT and SIGTERM."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return stop


async def _drain(server: VrtServer, timeout: float, stop: asyncio.Event) -> None:
    """Let the replies in flight finish for ``timeout`` seconds, then end the sessions;
    another signal (``stop`` set again) stops at once."""
    stop.clear()
    loop = asyncio.get_running_loop()
    drain = loop.create_task(server.shutdown(timeout))
    again = loop.create_task(stop.wait())
    await asyncio.wait({drain, again}, return_when=asyncio.FIRST_COMPLETED)
    if not drain.done():
        drain.cancel()
        await server.close()
    again.cancel()
