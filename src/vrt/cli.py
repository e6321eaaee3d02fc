"""The ``vrt`` command."""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import math
import os
import signal
import ssl
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Annotated, Any, Final, cast

import typer
import typer.core

from . import __version__
from .agents import DEFAULT_AGENT, AgentSetupError, load_agent, load_default_agent
from .client.client import DEFAULT_GIVE_UP_AFTER
from .protocol.codec import check_encoding
from .protocol.server import ServerConfig
from .protocol.streams import DEFAULT_MAX_KEPT

# The examples at the end of each --help ("\b" keeps click from rewrapping a block).
MAIN_EPILOG = """\b
Examples:
  vrt serve                                  a server with the voice agent (offline
                                             speech; scripted without the voice extra)
  printf 'echo hello\\n' | vrt chat ws://127.0.0.1:8765
  vrt serve --agent scripted & vrt conformance server ws://127.0.0.1:8765
  vrt docs                                   the documentation, offline

Run 'vrt COMMAND --help' for a command's options."""

SERVE_EPILOG = """\b
Examples:
  vrt serve
  vrt serve --agent openai-realtime --metrics :9100 --log-format json
  vrt serve --host 0.0.0.0 --tls-cert cert.pem --tls-key key.pem \\
            --auth-token alice:s3cret --allowed-origin https://app.example
  VRT_PORT=9000 vrt serve --config vrt.toml --print-config

More: 'vrt docs server' (options and the library), 'vrt docs operations'
(metrics, health, logs, configuration), 'vrt docs agents'."""

DEMO_EPILOG = """\b
Example:
  vrt demo                 then open the printed http://127.0.0.1:8780/

More: 'vrt docs browser'."""

CHAT_EPILOG = """\b
Examples:
  vrt chat ws://127.0.0.1:8765
  printf 'echo hello world\\n' | vrt chat ws://127.0.0.1:8765
  vrt chat wss://vrt.example --auth s3cret --cafile ca.pem

More: 'vrt docs client'."""

CONFORMANCE_SERVER_EPILOG = """\b
Examples:
  vrt serve --agent scripted &               the agent the checks talk to
  vrt conformance server ws://127.0.0.1:8765
  vrt conformance server ws://127.0.0.1:8765 --only §5.4 --junit report.xml
  vrt conformance server --list

More: 'vrt docs conformance'."""

CONFORMANCE_CLIENT_EPILOG = """\b
Examples:
  vrt conformance client -- ./my-client --its-own-flag
  vrt conformance client --jobs 2 --json report.json -- node client.mjs
  vrt conformance client --list

More: 'vrt docs conformance' (what the client under test must do)."""

BENCH_EPILOG = """\b
Examples:
  vrt bench --smoke          seconds: checks that the runner works
  vrt bench                  about a minute: every scenario, quick
  vrt bench --only rtt,push --json out.json

More: 'vrt docs performance'."""


class ManPage(typer.core.TyperCommand):
    """A command whose ``--help`` reads like a man page: arguments named in capitals
    (optional ones in brackets) and options with their metavar and default, without
    the type labels typer adds (``<str>``, ``{URL}``)."""

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if isinstance(param, typer.core.TyperArgument):
                name = _argument_name(param)
                pieces.append(name if param.required else f"[{name}]")
        return pieces

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        """An impossible value (a flag, a VRT_* variable or a --config file) gets one
        line naming the option and exit status 2, not click's usage block."""
        try:
            return super().parse_args(ctx, args)
        except typer.BadParameter as exc:
            typer.echo(f"{ctx.command_path}: {exc.format_message()}", err=True)
            raise typer.Exit(2) from None

    def format_options(self, ctx: Any, formatter: Any) -> None:
        params = self.get_params(ctx)
        arguments = [
            (_argument_name(param), param.help or "")
            for param in params
            if isinstance(param, typer.core.TyperArgument)
        ]
        options = [
            record
            for param in params
            if not isinstance(param, typer.core.TyperArgument)
            and (record := param.get_help_record(ctx))
        ]
        if arguments:
            with formatter.section("Arguments"):
                formatter.write_dl(arguments)
        if options:
            with formatter.section("Options"):
                formatter.write_dl(options)


class ManPageWithCommand(ManPage):
    """A command that runs another one given after ``--``."""

    tail = "-- COMMAND [ARGS]..."

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        return [*super().collect_usage_pieces(ctx), self.tail]


class ManPageWithRunner(ManPageWithCommand):
    """``vrt bench``: what follows is the runner's own options."""

    tail = "[RUNNER-OPTIONS]..."


def _argument_name(param: typer.core.TyperArgument) -> str:
    return (param.metavar or param.name or "").upper()


app = typer.Typer(
    name="vrt",
    help="vRT (vRealTime): a server for realtime voice and text agents, and its tools.",
    epilog=MAIN_EPILOG,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _core_build() -> str:
    """Whether the protocol core runs compiled (the optional mypyc wheel,
    docs/performance.md) or as Python."""
    from .protocol import codec

    return "pure Python" if (codec.__file__ or "").endswith(".py") else "compiled"


def _version(value: bool) -> None:
    if value:
        typer.echo(f"vrt {__version__} (protocol core: {_core_build()})")
        raise typer.Exit


@app.callback()
def main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    """vRT (vRealTime): a server for realtime voice and text agents, and its tools."""


def _fail(message: str) -> typer.Exit:
    typer.echo(f"vrt: {message}", err=True)
    return typer.Exit(2)


def _load_config(ctx: typer.Context, param: typer.CallbackParam, value: Path | None) -> None:
    """``--config FILE``: the file's settings become the command's defaults, under the
    flags and the environment (config.py)."""
    if value is not None and not ctx.resilient_parsing:
        from .config import load_file

        ctx.default_map = {**(ctx.default_map or {}), **load_file(value, ctx.command)}


def _env(name: str) -> str:
    return "VRT_" + name.upper()


MAX_PORT: Final = 65535
#: The schemes of --store besides memory (vrt.server.redis_store.check_url).
STORE_SCHEMES: Final = ("redis", "rediss", "unix")


def _seconds(*, zero: bool = False) -> Callable[[float | None], float | None]:
    """A callback for an option in seconds: a finite number, positive (or, with
    ``zero``, not negative); nan, inf and negative durations are impossible values."""

    def check(value: float | None) -> float | None:
        if value is not None and (
            not math.isfinite(value) or value < 0 or (value == 0 and not zero)
        ):
            wanted = "0 or more" if zero else "more than 0"
            raise typer.BadParameter(f"{value:g} seconds: expected a finite number, {wanted}")
        return value

    return check


def _at_least(lowest: int) -> Callable[[int | None], int | None]:
    """A callback for a count: ``lowest`` or more."""

    def check(value: int | None) -> int | None:
        if value is not None and value < lowest:
            raise typer.BadParameter(f"{value}: expected a whole number, {lowest} or more")
        return value

    return check


def _port(value: int) -> int:
    """A TCP port: 0 (pick a free one) to 65535; the operating system would take a
    larger number modulo 65536 (99999 listens on 34463)."""
    if not 0 <= value <= MAX_PORT:
        raise typer.BadParameter(f"{value} is not a TCP port (0 to {MAX_PORT}; 0 picks a free one)")
    return value


@app.command(cls=ManPage, epilog=SERVE_EPILOG)
def serve(
    ctx: typer.Context,
    host: Annotated[
        str,
        typer.Option(
            metavar="HOST",
            envvar=_env("host"),
            help="Interface to listen on: 0.0.0.0 or :: for every one.",
        ),
    ] = "127.0.0.1",
    port: Annotated[
        int,
        typer.Option(
            metavar="PORT",
            envvar=_env("port"),
            callback=_port,
            help="TCP port; 0 picks a free one.",
        ),
    ] = 8765,
    agent: Annotated[
        str | None,
        typer.Option(
            metavar="NAME",
            envvar=_env("agent"),
            help=f"The agent behind each session: {DEFAULT_AGENT} (the default: offline "
            "speech in and out; the scripted agent when the voice extra is not installed), "
            "scripted (deterministic, for tests and demos), openai-realtime or gemini-live "
            "(speech to speech), openai-chat (text, any OpenAI-compatible server). Their "
            "settings: vrt docs agents.",
            show_default=False,
        ),
    ] = None,
    agent_option: Annotated[
        list[str] | None,
        typer.Option(
            "--agent-option",
            metavar="KEY=VALUE",
            envvar=_env("agent_option"),
            help="A setting of the agent, e.g. model=gpt-4o-mini (repeatable).",
        ),
    ] = None,
    auth_token: Annotated[
        list[str] | None,
        typer.Option(
            "--auth-token",
            metavar="PRINCIPAL:TOKEN",
            envvar=_env("auth_token"),
            help="Require hello.auth to equal TOKEN; the session belongs to PRINCIPAL "
            "(repeatable, §5.3). Default: no authentication.",
        ),
    ] = None,
    allowed_origin: Annotated[
        list[str] | None,
        typer.Option(
            "--allowed-origin",
            metavar="ORIGIN",
            envvar=_env("allowed_origin"),
            help="Accept browser pages from this origin, e.g. https://app.example "
            "(repeatable; '*' for any). Default: only pages from loopback and from "
            "HOST, against cross-site WebSocket hijacking. Clients that are not "
            "browsers are not concerned.",
        ),
    ] = None,
    tls_cert: Annotated[
        Path | None,
        typer.Option(
            metavar="PEM",
            envvar=_env("tls_cert"),
            help="Certificate chain: serve wss:// (§2.1). Default: ws://.",
        ),
    ] = None,
    tls_key: Annotated[
        Path | None,
        typer.Option(metavar="PEM", envvar=_env("tls_key"), help="The private key of --tls-cert."),
    ] = None,
    resume_window: Annotated[
        float,
        typer.Option(
            metavar="SEC",
            envvar=_env("resume_window"),
            callback=_seconds(),
            help="How long a session whose connection dropped waits for a resume (§5.1).",
        ),
    ] = 30.0,
    heartbeat_timeout: Annotated[
        float,
        typer.Option(
            metavar="SEC",
            envvar=_env("heartbeat_timeout"),
            callback=_seconds(),
            help="Close a connection silent this long with 4408 (§4.4).",
        ),
    ] = 45.0,
    hello_timeout: Annotated[
        float,
        typer.Option(
            metavar="SEC",
            envvar=_env("hello_timeout"),
            callback=_seconds(),
            help="Close a connection that sends no hello this long with 1008.",
        ),
    ] = 10.0,
    tool_timeout: Annotated[
        float,
        typer.Option(
            metavar="SEC",
            envvar=_env("tool_timeout"),
            callback=_seconds(),
            help="Settle a client tool call without a result this long as TIMEOUT (§7.2).",
        ),
    ] = 30.0,
    drain_timeout: Annotated[
        float,
        typer.Option(
            metavar="SEC",
            envvar=_env("drain_timeout"),
            callback=_seconds(zero=True),
            help="On SIGTERM or Ctrl-C, let replies in flight finish this long before "
            "ending every session with SERVER_SHUTDOWN; a second signal stops at once.",
        ),
    ] = 10.0,
    max_unacked: Annotated[
        int,
        typer.Option(
            metavar="N",
            envvar=_env("max_unacked"),
            callback=_at_least(1),
            help="Unacknowledged messages kept per session for resends (§4.1).",
        ),
    ] = DEFAULT_MAX_KEPT,
    max_sessions: Annotated[
        int | None,
        typer.Option(
            metavar="N",
            envvar=_env("max_sessions"),
            callback=_at_least(1),
            help="At most N live sessions, connected or waiting for a resume. One more "
            "evicts the session parked the longest, or with none parked gets "
            "START_FAILED (close 1011); resumes are always served. Default: no limit, "
            "but the voice agent's own (32 per core: vrt docs limits).",
        ),
    ] = None,
    max_parked: Annotated[
        int | None,
        typer.Option(
            metavar="N",
            envvar=_env("max_parked"),
            callback=_at_least(0),
            help="At most N sessions waiting for a resume; one more evicts the one parked "
            "the longest (its resume gets RESUME_FAILED). Default: no limit.",
        ),
    ] = None,
    max_connections: Annotated[
        int | None,
        typer.Option(
            metavar="N",
            envvar=_env("max_connections"),
            callback=_at_least(1),
            help="TCP connections open at once; one more is refused with HTTP 503. "
            "Default: the open-file limit less headroom.",
        ),
    ] = None,
    metrics: Annotated[
        str | None,
        typer.Option(
            metavar="HOST:PORT",
            envvar=_env("metrics"),
            help="Serve Prometheus metrics on http://HOST:PORT/metrics, with /healthz and "
            "/readyz, on a listener of their own (:PORT is loopback). Needs "
            "'vrealtime[metrics]'. Default: off.",
        ),
    ] = None,
    store: Annotated[
        str,
        typer.Option(
            metavar="URL",
            envvar=_env("store"),
            help="Where sessions live: memory (in this process: a restart loses them), or "
            "redis://HOST:PORT/DB (rediss:// with TLS; a Redis Cluster is found by "
            "itself), shared by every vrt process behind the same address, so that a "
            "session resumes on any of them; ?max_log_bytes=N bounds the conversation "
            "kept per session (default 262144). Needs pip install 'vrealtime[redis]'. "
            "More: vrt docs deploy. Default: memory.",
        ),
    ] = "memory",
    workers: Annotated[
        int,
        typer.Option(
            metavar="N",
            envvar=_env("workers"),
            callback=_at_least(1),
            help="Serve with N processes on the same port (SO_REUSEPORT); N > 1 needs "
            "--store redis://... SIGTERM drains them all. Default: 1.",
        ),
    ] = 1,
    log_level: Annotated[
        str,
        typer.Option(
            metavar="LEVEL",
            envvar=_env("log_level"),
            help="debug, info, warning or error.",
        ),
    ] = "info",
    log_format: Annotated[
        str,
        typer.Option(
            metavar="FORMAT",
            envvar=_env("log_format"),
            help="text, or json: one JSON object per line with session, turn, epoch and "
            "principal where known.",
        ),
    ] = "text",
    config: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE",
            envvar=_env("config"),
            is_eager=True,
            callback=_load_config,
            help="Read settings from this TOML file: the flags' names as keys, e.g. "
            "port = 9000. Flags and VRT_* variables override it.",
        ),
    ] = None,
    print_config: Annotated[
        bool,
        typer.Option(
            "--print-config",
            help="Print the settings in force, and where each came from, as TOML; then exit.",
        ),
    ] = False,
) -> None:
    """Start a vRT server.

    Clients connect to ws://HOST:PORT (wss:// with --tls-cert) and talk to the agent.
    The server prints its URL and its browser-origin policy, and stops on SIGTERM or
    Ctrl-C after letting replies in flight finish (--drain-timeout).

    Every option can also be set with an environment variable (VRT_ and the option's
    name, e.g. VRT_PORT=9000) or in a --config file; a flag wins over the environment,
    which wins over the file.
    """
    if print_config:
        from .config import render

        typer.echo(render(ctx), nl=False)
        raise typer.Exit
    from .logs import LOG_FORMATS, configure
    from .server import TokenAuthenticator, VrtServer, parse_token_spec

    if log_format not in LOG_FORMATS:
        raise _fail("--log-format takes text or json")
    try:
        configure(log_level, cast("Any", log_format))
    except ValueError:
        raise _fail("--log-level takes debug, info, warning or error") from None
    if os.environ.get("VRT_STRICT") == "1":  # development: check every message sent
        check_encoding(True)
    options: dict[str, str] = {}
    for item in agent_option or ():
        key, sep, setting = item.partition("=")
        if not sep or not key:
            raise _fail(f"--agent-option {item!r}: expected KEY=VALUE")
        options[key] = setting
    try:
        if agent is None:
            agent, factory, notice = load_default_agent(options)
            if notice:  # a log line, so that --log-format json keeps stderr all JSON
                logging.getLogger("vrt.agents").warning("%s", notice)
        else:
            factory = load_agent(agent, options)
    except KeyError as exc:
        raise _fail(str(exc.args[0])) from None
    except AgentSetupError as exc:
        raise _fail(f"--agent {agent or DEFAULT_AGENT}: {exc}") from None
    except ImportError as exc:
        raise _fail(
            f"the {agent or DEFAULT_AGENT} agent needs a package that is missing: {exc.name}"
        ) from None
    authenticator = None
    if auth_token:
        try:
            authenticator = TokenAuthenticator(parse_token_spec(spec) for spec in auth_token)
        except ValueError as exc:
            raise _fail(f"--auth-token: {exc}") from None
    context = None
    if tls_cert or tls_key:
        if not (tls_cert and tls_key):
            raise _fail("--tls-cert and --tls-key go together")
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            context.load_cert_chain(tls_cert, tls_key)
        except (OSError, ssl.SSLError) as exc:
            raise _fail(f"cannot load the TLS certificate {tls_cert}: {exc}") from None
    telemetry = _telemetry(agent, metrics)
    shared = store != "memory"
    if shared:
        _check_store(store)
    elif workers > 1:
        raise _fail("--workers above 1 needs a shared session store: --store redis://HOST:PORT/DB")
    if metrics is not None and workers > 1:
        raise _fail(
            "--metrics serves one process: with --workers above 1, run one vrt serve per "
            "port behind the proxy instead, each with its own --metrics"
        )
    config_ = ServerConfig(
        heartbeat_timeout=heartbeat_timeout,
        resume_window=resume_window,
        hello_timeout=hello_timeout,
        tool_timeout=tool_timeout,
        max_unacked=max_unacked,
    )
    auth = "authentication on" if authenticator else "no authentication"
    where = f"sessions in {_safe_url(store)}" if shared else "sessions in memory"

    def make_server(reuse_port: bool) -> VrtServer:
        session_store = None
        if shared:
            from .server.redis_store import RedisSessionStore

            session_store = RedisSessionStore(store)
        return VrtServer(
            factory,
            authenticator=authenticator,
            config=config_,
            ssl_context=context,
            allowed_origins=allowed_origin,
            max_sessions=max_sessions,
            max_parked=max_parked,
            max_connections=max_connections,
            store=session_store,
            reuse_port=reuse_port,
            observer=telemetry[0] if telemetry else None,
        )

    def announce(url: str, detail: str = "") -> None:
        typer.echo(f"vrt {__version__} listening on {url} (agent {agent}, {auth}, {where}{detail})")
        sys.stdout.flush()

    async def run(server: VrtServer, port: int, ready: Callable[[], None] | None = None) -> None:
        try:
            url = await server.start(host, port)
        except OSError as exc:
            raise _fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
        operations = None
        if telemetry is not None and metrics is not None:
            from .server.health import OperationsListener, parse_address

            operations = OperationsListener(server, telemetry[1])
            ops_host, ops_port = parse_address(metrics)
            try:
                ops_url = await operations.start(ops_host, ops_port)
            except OSError as exc:
                await server.close()
                raise _fail(
                    f"--metrics cannot listen on {metrics}: {exc.strerror or exc}"
                ) from None
        # Start-up is done: what it made is kept out of every later collection, and the
        # young generation collected less often (vrt.server.gc_tuning).
        from .server.gc_tuning import tune_for_serving

        tune_for_serving()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        if ready is None:
            announce(url)
            typer.echo(f"origins: {server.origins.describe()}")
            if operations is not None:
                typer.echo(
                    f"metrics: {ops_url}/metrics; health: {ops_url}/healthz, {ops_url}/readyz"
                )
            sys.stdout.flush()
        else:
            ready()
        await stop.wait()
        if ready is None:
            then = "parked in the session store" if shared else "ended (SERVER_SHUTDOWN)"
            typer.echo(
                f"draining: replies in flight have {drain_timeout:g} s to finish; sessions "
                f"are then {then}"
            )
            sys.stdout.flush()
        stop.clear()
        drain = loop.create_task(server.shutdown(drain_timeout))
        again = loop.create_task(stop.wait())
        await asyncio.wait({drain, again}, return_when=asyncio.FIRST_COMPLETED)
        if not drain.done():  # a second signal: stop at once
            drain.cancel()
            await server.close()
        again.cancel()
        if operations is not None:
            await operations.close()
        if ready is None:
            typer.echo("stopped")

    if workers > 1:
        from .server.workers import supervise

        def worker(worker_port: int, ready: Callable[[], None]) -> None:
            _run(run(make_server(True), worker_port, ready))

        def announced(chosen: int) -> None:
            scheme = "wss" if context is not None else "ws"
            shown = f"[{host}]" if ":" in host else host
            announce(f"{scheme}://{shown}:{chosen}", f", {workers} workers")

        raise typer.Exit(supervise(workers, host, port, worker, announced))

    _run(run(make_server(False), port))


def _check_store(store: str) -> None:
    """``--store``: a URL of a store this installation can use, or one line saying why
    not (an unknown scheme, or the redis extra missing), exit status 2."""
    scheme, sep, _ = store.partition("://")
    if not sep or scheme not in STORE_SCHEMES:
        raise _fail(
            f"--store {store!r}: expected memory, redis://HOST:PORT/DB, rediss://... or unix://PATH"
        )
    try:
        from .server.redis_store import check_url

        check_url(store)
    except ImportError as exc:
        raise _fail(
            f"--store {scheme}:// needs the redis extra: pip install 'vrealtime[redis]' "
            f"(missing: {exc.name})"
        ) from None
    except ValueError as exc:
        raise _fail(f"--store: {exc}") from None


def _safe_url(url: str) -> str:
    """``url`` without a password, for what is printed."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    return f"{parts.scheme}://{host}{f':{parts.port}' if parts.port else ''}{parts.path}"


def _telemetry(agent: str, metrics: str | None) -> tuple[Any, Any] | None:
    """The server's observer and its metrics (None without --metrics): traces when
    OpenTelemetry is configured come with it; without --metrics the server finds
    those itself."""
    if metrics is None:
        return None
    try:
        from .server.health import parse_address

        parse_address(metrics)
    except ValueError as exc:
        raise _fail(f"--metrics {exc}") from None
    if importlib.util.find_spec("prometheus_client") is None:
        raise _fail("--metrics needs prometheus-client: pip install 'vrealtime[metrics]'")
    from .server.metrics import ServerMetrics
    from .server.telemetry import Telemetry
    from .server.tracing import configured_tracer

    server_metrics = ServerMetrics(agent)
    return Telemetry(server_metrics, configured_tracer()), server_metrics


def _run(main: Coroutine[Any, Any, None]) -> None:
    """Run on uvloop where it is installed: it cuts the event loop's cost per frame."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
    else:
        uvloop.run(main)


@app.command(cls=ManPage, epilog=DEMO_EPILOG)
def demo(
    host: Annotated[
        str, typer.Option(metavar="HOST", help="Interface for both servers (keep it loopback).")
    ] = "127.0.0.1",
    port: Annotated[
        int,
        typer.Option(
            metavar="PORT", callback=_port, help="The vRT server's port; 0 picks a free one."
        ),
    ] = 8765,
    http_port: Annotated[
        int,
        typer.Option(
            metavar="PORT",
            callback=_port,
            help="The demo page's HTTP port; 0 picks a free one.",
        ),
    ] = 8780,
    agent: Annotated[
        str | None,
        typer.Option(
            metavar="NAME",
            help=f"The agent, as for vrt serve (default {DEFAULT_AGENT}, or scripted without "
            "the voice extra).",
            show_default=False,
        ),
    ] = None,
    agent_option: Annotated[
        list[str] | None,
        typer.Option(
            "--agent-option", metavar="KEY=VALUE", help="A setting of the agent (repeatable)."
        ),
    ] = None,
    static: Annotated[
        Path | None,
        typer.Option(metavar="DIR", help="Serve the page from DIR. Default: the built demo."),
    ] = None,
) -> None:
    """Serve the browser SDK's demo page next to a vRT server.

    Open the printed http:// URL in a browser: the page connects to the server, and
    you can type, talk (with a microphone), call its tools and interrupt. Both listen
    on HOST; the page's loopback origin is one the server accepts. Ctrl-C stops both.
    """
    from .demo import demo_files, run_demo
    from .logs import configure

    configure("warning")
    options = dict(item.partition("=")[::2] for item in agent_option or ())
    try:
        files = demo_files(static)
        if agent is None:
            agent, factory, notice = load_default_agent(options)
            if notice:
                typer.echo(f"vrt: {notice}", err=True)
        else:
            factory = load_agent(agent, options)
    except FileNotFoundError as exc:
        raise _fail(str(exc)) from None
    except (KeyError, AgentSetupError) as exc:
        raise _fail(f"--agent {agent or DEFAULT_AGENT}: {exc}") from None
    try:
        _run(run_demo(factory, host=host, port=port, http_port=http_port, files=files, agent=agent))
    except OSError as exc:
        raise _fail(f"cannot listen on {host}: {exc.strerror or exc}") from None


@app.command(cls=ManPage, epilog=CHAT_EPILOG)
def chat(
    url: Annotated[str, typer.Argument(metavar="URL", help="The server, e.g. ws://127.0.0.1:8765")],
    auth: Annotated[
        str | None,
        typer.Option(
            metavar="TOKEN", help="Credential sent in hello.auth (never in the URL, §5.3)."
        ),
    ] = None,
    capability: Annotated[
        list[str] | None,
        typer.Option(
            "--capability",
            metavar="TOKEN",
            help="Offer a capability, e.g. tool-stream-v1 (repeatable).",
        ),
    ] = None,
    cafile: Annotated[
        Path | None,
        typer.Option(
            metavar="PEM",
            help="wss:// only: trust the CA certificates in this file instead of the "
            "system trust store. Default: the system store, or SSL_CERT_FILE when set.",
        ),
    ] = None,
    insecure: Annotated[
        bool,
        typer.Option(
            "--insecure",
            help="wss:// only: do not verify the server's certificate (test servers only).",
        ),
    ] = False,
    give_up_after: Annotated[
        float,
        typer.Option(
            metavar="SEC",
            callback=_seconds(),
            help="After a lost connection, stop if the session is not resumed within SEC seconds.",
        ),
    ] = DEFAULT_GIVE_UP_AFTER,
    audio: Annotated[
        bool, typer.Option("--audio", help="Talk and listen through the microphone and speaker.")
    ] = False,
    voice: Annotated[
        bool,
        typer.Option(
            "--voice",
            help="Speech only: the microphone (always on, or --push-to-talk) and the speaker.",
        ),
    ] = False,
    push_to_talk: Annotated[
        bool, typer.Option("--push-to-talk", help="With --voice: Enter starts and ends speaking.")
    ] = False,
    wav: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE",
            help="Speak a recording (mono 16-bit WAV) instead of the microphone, print the "
            "exchange and the voice-to-voice latency. More: vrt docs voice.",
        ),
    ] = None,
    save_reply: Annotated[
        Path | None, typer.Option(metavar="FILE", help="With --wav: save the reply's audio.")
    ] = None,
) -> None:
    """Talk to any vRT server by text in the terminal (or by speech: --voice, --wav).

    Each line is sent as user text; the agent's reply streams onto one line. Ctrl-C
    interrupts the agent; a second Ctrl-C within 2 s quits, as do /quit and the end of
    input (after the reply in flight). Piped input is sent a line at a time, each after
    the reply to the one before. The client hosts two tools, get_time() and add(a, b).
    A dropped connection is resumed (§5.4) for up to --give-up-after seconds.
    """
    if save_reply is not None and wav is None:
        raise _fail("--save-reply saves the spoken reply to --wav FILE: give --wav too")
    if wav is not None or voice:
        from .voice.chat import run_voice_chat, run_wav

        if wav is not None:
            raise typer.Exit(run_wav(url, wav, auth=auth, save_reply=save_reply))
        raise typer.Exit(run_voice_chat(url, auth=auth, push_to_talk=push_to_talk))
    from .chat import run_chat

    code = run_chat(
        url,
        auth=auth,
        capabilities=tuple(capability or ()),
        audio=audio,
        cafile=cafile,
        insecure=insecure,
        give_up_after=give_up_after,
    )
    raise typer.Exit(code)


# Options both conformance suites take.
OnlyChecks = Annotated[
    list[str] | None,
    typer.Option(
        "--only",
        "--check",
        "-k",
        metavar="ID|§SECTION",
        help="Run only these checks (repeatable): an id, a glob (resume-*), a part of an id, "
        "or a section (§5.4, 5.4, or 5 for the chapter).",
    ),
]
SkipChecks = Annotated[
    list[str] | None,
    typer.Option(
        "--skip", metavar="ID|§SECTION", help="Leave these checks out (repeatable; as --only)."
    ),
]
ListChecks = Annotated[
    bool,
    typer.Option(
        "--list", help="List the selected checks (id, section, level, needs) and run nothing."
    ),
]
AllowSkips = Annotated[
    bool,
    typer.Option(
        "--allow-skips",
        help="Exit 0 when MUST checks were skipped (the run is incomplete) and none failed.",
    ),
]
JsonReport = Annotated[
    Path | None, typer.Option("--json", metavar="PATH", help="Write a JSON report here.")
]
JunitReport = Annotated[
    Path | None, typer.Option("--junit", metavar="PATH", help="Write a JUnit XML report here.")
]
CheckTimeout = Annotated[
    float, typer.Option(metavar="SEC", callback=_seconds(), help="Seconds allowed per check.")
]

conformance = typer.Typer(
    help="Judge any vRT server or client against the protocol, clause by clause. Exit "
    "status: 0 passed, 1 a MUST check failed, 2 unreachable, 3 incomplete (MUST checks "
    "skipped; see --allow-skips).",
    epilog="\b\nExamples:\n  vrt conformance server ws://127.0.0.1:8765\n"
    "  vrt conformance client -- ./my-client\n\nMore: 'vrt docs conformance'.",
    no_args_is_help=True,
    rich_markup_mode=None,
)
app.add_typer(
    conformance, name="conformance", short_help="Judge a vRT server or client against the protocol."
)


def _listing(lines: list[str]) -> typer.Exit:
    typer.echo("\n".join(lines))
    return typer.Exit(0)


@conformance.command("server", cls=ManPage, epilog=CONFORMANCE_SERVER_EPILOG)
def conformance_server(
    url: Annotated[
        str | None,
        typer.Argument(metavar="URL", help="The server under test, e.g. ws://127.0.0.1:8765"),
    ] = None,
    auth: Annotated[
        str | None,
        typer.Option(metavar="TOKEN", help="A credential the server accepts (sent in hello.auth)."),
    ] = None,
    auth_other: Annotated[
        str | None,
        typer.Option(
            metavar="TOKEN",
            help="A credential of another principal (enables the foreign-resume checks).",
        ),
    ] = None,
    only: OnlyChecks = None,
    skip: SkipChecks = None,
    list_checks: ListChecks = False,
    allow_skips: AllowSkips = False,
    json_report: JsonReport = None,
    junit_report: JunitReport = None,
    timeout: CheckTimeout = 20.0,
    heartbeat_timeout: Annotated[
        float | None,
        typer.Option(
            metavar="SEC",
            callback=_seconds(),
            help="The server's heartbeat timeout, to check close 4408 (§4.4); skipped without it.",
        ),
    ] = None,
    tool_timeout: Annotated[
        float | None,
        typer.Option(
            metavar="SEC",
            callback=_seconds(),
            help="The server's timeout for client tool calls, to check that a late result is "
            "ignored (§7.2); skipped without it. Start the server with a short one.",
        ),
    ] = None,
    speech_detection: Annotated[
        str,
        typer.Option(
            metavar="probe|yes|no",
            help="Whether the server detects speech in input audio: probe it (the speech "
            "checks skip when none shows), yes (judge them) or no (they do not apply).",
        ),
    ] = "probe",
) -> None:
    """Run the server suite against the server at URL.

    The server must run an agent that follows the scripted agent contract: start vrt
    with 'vrt serve --agent scripted' (its default, the voice agent, answers speech
    and does not follow the script); another implementation: 'vrt docs conformance'.
    Each check opens its own connections; a report names every MUST it judged, with
    its section.
    """
    from .conformance.server_context import SpeechDetection
    from .conformance.server_suite import SUITE, run_server_suite

    selected = SUITE.select(only or (), skip or ())
    if list_checks:
        raise _listing(SUITE.listing(selected))
    if url is None:
        raise _fail("give the server's URL, e.g. vrt conformance server ws://127.0.0.1:8765")
    if speech_detection not in ("probe", "yes", "no"):
        raise _fail("--speech-detection takes probe, yes or no")
    raise typer.Exit(
        run_server_suite(
            url,
            auth=auth,
            auth_other=auth_other,
            only=tuple(only or ()),
            skip=tuple(skip or ()),
            json_path=json_report,
            junit_path=junit_report,
            timeout=timeout,
            heartbeat_timeout=heartbeat_timeout,
            tool_timeout=tool_timeout,
            speech_detection=cast(SpeechDetection, speech_detection),
            allow_skips=allow_skips,
        )
    )


@conformance.command(
    "client",
    cls=ManPageWithCommand,
    epilog=CONFORMANCE_CLIENT_EPILOG,
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
def conformance_client(
    ctx: typer.Context,
    only: OnlyChecks = None,
    skip: SkipChecks = None,
    list_checks: ListChecks = False,
    allow_skips: AllowSkips = False,
    json_report: JsonReport = None,
    junit_report: JunitReport = None,
    timeout: CheckTimeout = 20.0,
    ping_wait: Annotated[
        float,
        typer.Option(
            metavar="SEC",
            callback=_seconds(zero=True),
            help="Seconds to wait for a ping before skipping the ping checks.",
        ),
    ] = 3.0,
    jobs: Annotated[
        int,
        typer.Option(
            metavar="N",
            callback=_at_least(1),
            help="Checks run at once (each starts its own client).",
        ),
    ] = 1,
    audio_output: Annotated[
        bool,
        typer.Option(
            "--audio-output/--no-audio-output",
            help="Whether the client plays audio; without, the playback checks do not apply.",
        ),
    ] = True,
    audio_input: Annotated[
        bool,
        typer.Option(
            "--audio-input/--no-audio-input",
            help="Whether the client sends audio ('/audio MS'); without, the input audio "
            "checks do not apply.",
        ),
    ] = True,
) -> None:
    """Run the client suite against the client that COMMAND starts.

    For each check, COMMAND is started with the URL of a test server in the VRT_URL
    environment variable; the client opens a session there and performs the lines of
    VRT_SAY (user texts, and commands such as /audio MS), while the test server plays
    the check's part and judges what the client does. It is stopped at the end of the
    check. The whole contract: 'vrt docs conformance'.
    """
    from .conformance.client_suite import SUITE, run_client_suite

    selected = SUITE.select(only or (), skip or ())
    if list_checks:
        raise _listing(SUITE.listing(selected))
    command = list(ctx.args)
    if not command:
        raise _fail(
            "give the client's command after --, e.g. vrt conformance client -- ./my-client"
        )
    raise typer.Exit(
        run_client_suite(
            command,
            only=tuple(only or ()),
            skip=tuple(skip or ()),
            json_path=json_report,
            junit_path=junit_report,
            timeout=timeout,
            ping_wait=ping_wait,
            jobs=jobs,
            audio_output=audio_output,
            audio_input=audio_input,
            allow_skips=allow_skips,
        )
    )


@app.command(
    cls=ManPageWithRunner,
    epilog=BENCH_EPILOG,
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
def bench(ctx: typer.Context) -> None:
    """Measure vrt against a bare WebSocket server on this machine.

    Each scenario (round trip, push, audio, sessions, resume, interrupt, CPU) runs
    against vrt and against bare picows and websockets servers, each in a process of
    its own, and prints vrt's figures, the baseline's and their ratio. The runner
    lives in vrt's source tree, beside the package: from a checkout installed with
    'pip install -e .' this runs it, with the options it takes (--smoke, --full,
    --only, --json; see 'vrt bench -- --help').
    """
    from .bench_command import run_bench

    raise typer.Exit(run_bench(list(ctx.args)))


@app.command(cls=ManPage, short_help="Print vrt's documentation.")
def docs(
    topic: Annotated[
        str | None,
        typer.Argument(metavar="TOPIC", help="A document, e.g. server; none: the list."),
    ] = None,
) -> None:
    """Print vrt's documentation (Markdown) and the protocol text, which come with
    the package.

    Without TOPIC, lists the documents. Example: vrt docs protocol | less
    """
    from .docs import document, topics

    if topic is None:
        for name, title in topics():
            typer.echo(f"{name:24} {title}")
        return
    try:
        typer.echo(document(topic), nl=False)
    except KeyError:
        raise _fail(f"no document {topic!r}; 'vrt docs' lists them") from None
