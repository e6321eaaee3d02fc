"""The ``vrt`` command."""

from __future__ import annotations

import asyncio
import logging
import signal
import ssl
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Annotated, Any

import typer

from . import __version__
from .agents import DEFAULT_AGENT, load_agent
from .protocol.server import ServerConfig
from .protocol.streams import DEFAULT_MAX_KEPT

app = typer.Typer(
    name="vrt",
    help="vRT (vRealTime): a server for realtime voice and text agents, and its tools.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"vrt {__version__}")
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


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port (0 picks a free one).")] = 8765,
    agent: Annotated[
        str,
        typer.Option(
            help="The agent behind each session: scripted (deterministic, for tests and demos)."
        ),
    ] = DEFAULT_AGENT,
    auth_token: Annotated[
        list[str] | None,
        typer.Option(
            "--auth-token",
            metavar="PRINCIPAL:TOKEN",
            help="Require hello.auth to equal TOKEN; the session belongs to PRINCIPAL. "
            "Repeatable. None given: no authentication.",
        ),
    ] = None,
    resume_window: Annotated[
        float,
        typer.Option(metavar="SEC", help="How long a dropped session waits (§5.1)."),
    ] = 30.0,
    heartbeat_timeout: Annotated[
        float,
        typer.Option(metavar="SEC", help="Close a silent connection with 4408 (§4.4)."),
    ] = 45.0,
    tool_timeout: Annotated[
        float,
        typer.Option(
            metavar="SEC", help="Settle a client tool call without result as TIMEOUT (§7.2)."
        ),
    ] = 30.0,
    max_unacked: Annotated[
        int,
        typer.Option(
            metavar="N", help="Unacknowledged messages kept per session for resends (§4.1)."
        ),
    ] = DEFAULT_MAX_KEPT,
    tls_cert: Annotated[
        Path | None, typer.Option(help="PEM certificate: serve wss:// (§2.1).")
    ] = None,
    tls_key: Annotated[Path | None, typer.Option(help="PEM private key of --tls-cert.")] = None,
    allowed_origin: Annotated[
        list[str] | None,
        typer.Option(
            "--allowed-origin",
            metavar="ORIGIN",
            help="Accept browsers only from this Origin (repeatable): against cross-site "
            "WebSocket hijacking.",
        ),
    ] = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "info",
) -> None:
    """Start a vRT server. Stop it with Ctrl-C (SIGINT) or SIGTERM."""
    from .server import TokenAuthenticator, VrtServer, parse_token_spec

    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        factory = load_agent(agent)
    except KeyError as exc:
        raise _fail(str(exc.args[0])) from None
    except ImportError as exc:
        raise _fail(
            f"the {agent} agent needs a package that is not installed: {exc.name}"
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
            raise _fail(f"cannot load the TLS certificate: {exc}") from None
    for name, value in (
        ("resume-window", resume_window),
        ("heartbeat-timeout", heartbeat_timeout),
        ("tool-timeout", tool_timeout),
    ):
        if value <= 0:
            raise _fail(f"--{name} must be positive")
    if max_unacked < 1:
        raise _fail("--max-unacked must be at least 1")
    config = ServerConfig(
        heartbeat_timeout=heartbeat_timeout, tool_timeout=tool_timeout, max_unacked=max_unacked
    )
    server = VrtServer(
        factory,
        authenticator=authenticator,
        config=config,
        resume_window=resume_window,
        ssl_context=context,
        allowed_origins=allowed_origin,
    )

    async def run() -> None:
        try:
            url = await server.start(host, port)
        except OSError as exc:
            raise _fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        auth = "authentication on" if authenticator else "no authentication"
        typer.echo(f"vrt {__version__} listening on {url} (agent {agent}, {auth})", err=False)
        sys.stdout.flush()
        await stop.wait()
        typer.echo("shutting down")
        await server.close()

    _run(run())


def _run(main: Coroutine[Any, Any, None]) -> None:
    """Run on uvloop where it is installed: it cuts the event loop's cost per frame."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
    else:
        uvloop.run(main)
