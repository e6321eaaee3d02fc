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
from .agents import DEFAULT_AGENT, AgentSetupError, load_agent, load_default_agent
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
    host: Annotated[
        str, typer.Option(metavar="HOST", help="Interface to listen on.")
    ] = "127.0.0.1",
    port: Annotated[
        int, typer.Option(metavar="PORT", help="TCP port (0 picks a free one).")
    ] = 8765,
    agent: Annotated[
        str | None,
        typer.Option(
            metavar="NAME",
            help=f"The agent behind each session: {DEFAULT_AGENT} (the default: offline "
            "speech in and out, docs/voice.md; the scripted agent without the voice "
            "extra), scripted (deterministic, for tests and demos), openai-realtime "
            "(speech to speech), openai-chat (text; any OpenAI-compatible server). "
            "See docs/agents.md.",
            show_default=False,
        ),
    ] = None,
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
    max_sessions: Annotated[
        int | None,
        typer.Option(
            metavar="N",
            help="Refuse a new session (START_FAILED, close 1011) while N are live, "
            "connected or waiting for a resume; resumes are always served. Default: no limit.",
        ),
    ] = None,
    tls_cert: Annotated[
        Path | None, typer.Option(metavar="PATH", help="PEM certificate: serve wss:// (§2.1).")
    ] = None,
    tls_key: Annotated[
        Path | None, typer.Option(metavar="PATH", help="PEM private key of --tls-cert.")
    ] = None,
    allowed_origin: Annotated[
        list[str] | None,
        typer.Option(
            "--allowed-origin",
            metavar="ORIGIN",
            help="Accept browsers only from this Origin (repeatable): against cross-site "
            "WebSocket hijacking.",
        ),
    ] = None,
    agent_option: Annotated[
        list[str] | None,
        typer.Option(
            "--agent-option",
            metavar="KEY=VALUE",
            help="A setting of the agent, e.g. model=... (repeatable; see docs/agents.md).",
        ),
    ] = None,
    log_level: Annotated[
        str, typer.Option(metavar="LEVEL", help="debug, info, warning or error.")
    ] = "info",
) -> None:
    """Start a vRT server. Stop it with Ctrl-C (SIGINT) or SIGTERM."""
    from .server import TokenAuthenticator, VrtServer, parse_token_spec

    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if logging.getLogger().level > logging.DEBUG:
        # picows logs every accepted and closed connection at INFO; vrt's own lines say
        # what happens to sessions. Its warnings and errors still show.
        logging.getLogger("picows").setLevel(logging.WARNING)
    options: dict[str, str] = {}
    for item in agent_option or ():
        key, sep, setting = item.partition("=")
        if not sep or not key:
            raise _fail(f"--agent-option {item!r}: expected KEY=VALUE")
        options[key] = setting
    try:
        if agent is None:
            agent, factory, notice = load_default_agent(options)
            if notice:
                typer.echo(f"vrt: {notice}", err=True)
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
    if max_sessions is not None and max_sessions < 1:
        raise _fail("--max-sessions must be at least 1")
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
        max_sessions=max_sessions,
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


@app.command()
def chat(
    url: Annotated[str, typer.Argument(help="Server URL, e.g. ws://127.0.0.1:8765")],
    auth: Annotated[
        str | None,
        typer.Option(help="Credential sent in hello.auth (never in the URL, §5.3)."),
    ] = None,
    capability: Annotated[
        list[str] | None,
        typer.Option("--capability", help="Offer a capability, e.g. tool-stream-v1 (repeatable)."),
    ] = None,
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
            "exchange and the voice-to-voice latency. See docs/voice.md.",
        ),
    ] = None,
    save_reply: Annotated[
        Path | None, typer.Option(metavar="FILE", help="With --wav: save the reply's audio.")
    ] = None,
) -> None:
    """Talk to any vRT server by text in the terminal (or by speech: --voice, --wav).
    Ctrl-C interrupts the agent; a second Ctrl-C quits."""
    if wav is not None or voice:
        from .voice.chat import run_voice_chat, run_wav

        if wav is not None:
            raise typer.Exit(run_wav(url, wav, auth=auth, save_reply=save_reply))
        raise typer.Exit(run_voice_chat(url, auth=auth, push_to_talk=push_to_talk))
    from .chat import run_chat

    raise typer.Exit(run_chat(url, auth=auth, capabilities=tuple(capability or ()), audio=audio))


# Options both conformance suites take.
CheckSelection = Annotated[
    list[str] | None,
    typer.Option(
        "--check", "-k", metavar="ID", help="Run only checks whose id contains this (repeatable)."
    ),
]
JsonReport = Annotated[
    Path | None, typer.Option("--json", metavar="PATH", help="Write a JSON report here.")
]
JunitReport = Annotated[
    Path | None, typer.Option("--junit", metavar="PATH", help="Write a JUnit XML report here.")
]
CheckTimeout = Annotated[float, typer.Option(help="Seconds allowed per check.")]

conformance = typer.Typer(
    help="Judge any vRT server or client against the protocol, clause by clause.",
    no_args_is_help=True,
)
app.add_typer(conformance, name="conformance")


@conformance.command("server")
def conformance_server(
    url: Annotated[str, typer.Argument(help="The server under test, e.g. ws://127.0.0.1:8765")],
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
    check: CheckSelection = None,
    json_report: JsonReport = None,
    junit_report: JunitReport = None,
    timeout: CheckTimeout = 20.0,
    heartbeat_timeout: Annotated[
        float | None,
        typer.Option(
            metavar="SEC",
            help="The server's heartbeat timeout, to check close 4408 (§4.4); skipped without it.",
        ),
    ] = None,
) -> None:
    """Run the server suite against URL. Exits non-zero if any MUST check fails."""
    from .conformance.server_suite import run_server_suite

    raise typer.Exit(
        run_server_suite(
            url,
            auth=auth,
            auth_other=auth_other,
            select=tuple(check or ()),
            json_path=json_report,
            junit_path=junit_report,
            timeout=timeout,
            heartbeat_timeout=heartbeat_timeout,
        )
    )


@conformance.command(
    "client", context_settings={"allow_extra_args": True, "ignore_unknown_options": True}
)
def conformance_client(
    ctx: typer.Context,
    check: CheckSelection = None,
    json_report: JsonReport = None,
    junit_report: JunitReport = None,
    timeout: CheckTimeout = 20.0,
    ping_wait: Annotated[
        float, typer.Option(help="Seconds to wait for a ping before skipping the ping checks.")
    ] = 3.0,
    jobs: Annotated[int, typer.Option(help="Checks run at once (each starts its own client).")] = 1,
) -> None:
    """Run the client suite: `vrt conformance client -- COMMAND...` starts COMMAND with
    the test server's URL in VRT_URL for each check (see conformance/README.md)."""
    from .conformance.client_suite import run_client_suite

    command = list(ctx.args)
    if not command:
        raise _fail(
            "give the client's command after --, e.g. vrt conformance client -- ./my-client"
        )
    raise typer.Exit(
        run_client_suite(
            command,
            select=tuple(check or ()),
            json_path=json_report,
            junit_path=junit_report,
            timeout=timeout,
            ping_wait=ping_wait,
            jobs=jobs,
        )
    )
