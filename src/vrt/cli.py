"""The ``vrt`` command."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import ssl
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Annotated, Any, cast

import typer

from . import __version__
from .agents import DEFAULT_AGENT, AgentSetupError, load_agent
from .client.client import DEFAULT_GIVE_UP_AFTER
from .protocol.codec import check_encoding
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
        str,
        typer.Option(
            metavar="NAME",
            help="The agent behind each session: scripted (deterministic, for tests and "
            "demos), openai-realtime or gemini-live (speech to speech), openai-chat (text; "
            "any OpenAI-compatible server). See docs/agents.md.",
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
    max_sessions: Annotated[
        int | None,
        typer.Option(
            metavar="N",
            help="At most N live sessions, connected or waiting for a resume. A new one "
            "beyond it evicts the session parked the longest, or with none parked gets "
            "START_FAILED (close 1011); resumes are always served. Default: no limit.",
        ),
    ] = None,
    max_parked: Annotated[
        int | None,
        typer.Option(
            metavar="N",
            help="At most N sessions waiting for a resume; one more evicts the one parked "
            "the longest (its resume gets RESUME_FAILED). Default: no limit.",
        ),
    ] = None,
    max_connections: Annotated[
        int | None,
        typer.Option(
            metavar="N",
            help="TCP connections open at once; beyond it a connection is refused with "
            "HTTP 503 as it is accepted. Default: the open-file limit less headroom.",
        ),
    ] = None,
    hello_timeout: Annotated[
        float,
        typer.Option(metavar="SEC", help="Close a connection that sends no hello (1008)."),
    ] = 10.0,
    drain_timeout: Annotated[
        float,
        typer.Option(
            metavar="SEC",
            help="On SIGTERM or Ctrl-C, let replies in flight finish for this long before "
            "ending every session with SERVER_SHUTDOWN; a second signal stops at once.",
        ),
    ] = 10.0,
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
    store: Annotated[
        str,
        typer.Option(
            metavar="URL",
            envvar="VRT_STORE",
            help="Where sessions live: memory (in this process: a restart loses them), or "
            "redis://HOST:PORT/DB (rediss:// with TLS; a Redis Cluster is found by "
            "itself), shared by every vrt process behind the same address, so that a "
            "session resumes on any of them. Needs pip install 'vrealtime[redis]'. See "
            "docs/deploy.md.",
        ),
    ] = "memory",
    workers: Annotated[
        int,
        typer.Option(
            metavar="N",
            help="Serve with N processes on the same port (SO_REUSEPORT); N > 1 needs "
            "--store redis://... SIGTERM drains them all.",
        ),
    ] = 1,
    log_level: Annotated[
        str, typer.Option(metavar="LEVEL", help="debug, info, warning or error.")
    ] = "info",
) -> None:
    """Start a vRT server. Stop it with Ctrl-C (SIGINT) or SIGTERM."""
    from .server import TokenAuthenticator, VrtServer, parse_token_spec

    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if os.environ.get("VRT_STRICT") == "1":  # development: check every message sent
        check_encoding(True)
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
        factory = load_agent(agent, options)
    except KeyError as exc:
        raise _fail(str(exc.args[0])) from None
    except AgentSetupError as exc:
        raise _fail(f"--agent {agent}: {exc}") from None
    except ImportError as exc:
        raise _fail(f"the {agent} agent needs a package that is missing: {exc.name}") from None
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
    for name, limit in (("max-parked", max_parked), ("max-connections", max_connections)):
        if limit is not None and limit < (0 if name == "max-parked" else 1):
            raise _fail(f"--{name} is too small")
    if hello_timeout <= 0 or drain_timeout < 0:
        raise _fail("--hello-timeout must be positive and --drain-timeout not negative")
    if workers < 1:
        raise _fail("--workers must be at least 1")
    shared = store != "memory"
    if shared:
        try:
            from .server.redis_store import check_url
        except ImportError as exc:
            raise _fail(
                f"--store {store.split('://')[0]}:// needs the redis extra: "
                f"pip install 'vrealtime[redis]' (missing: {exc.name})"
            ) from None
        try:
            check_url(store)
        except ValueError as exc:
            raise _fail(f"--store: {exc}") from None
    elif workers > 1:
        raise _fail("--workers above 1 needs a shared session store: --store redis://HOST:PORT/DB")
    config = ServerConfig(
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
            config=config,
            ssl_context=context,
            allowed_origins=allowed_origin,
            max_sessions=max_sessions,
            max_parked=max_parked,
            max_connections=max_connections,
            store=session_store,
            reuse_port=reuse_port,
        )

    def announce(url: str, detail: str = "") -> None:
        typer.echo(f"vrt {__version__} listening on {url} (agent {agent}, {auth}, {where}{detail})")
        sys.stdout.flush()

    async def run(server: VrtServer, port: int, ready: Callable[[], None] | None = None) -> None:
        try:
            url = await server.start(host, port)
        except OSError as exc:
            raise _fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        if ready is None:
            announce(url)
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


def _safe_url(url: str) -> str:
    """``url`` without a password, for what is printed."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    return f"{parts.scheme}://{host}{f':{parts.port}' if parts.port else ''}{parts.path}"


def _run(main: Coroutine[Any, Any, None]) -> None:
    """Run on uvloop where it is installed: it cuts the event loop's cost per frame."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
    else:
        uvloop.run(main)


@app.command()
def demo(
    host: Annotated[
        str, typer.Option(metavar="HOST", help="Interface for both servers (keep it loopback).")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(metavar="PORT", help="The vRT server's port.")] = 8765,
    http_port: Annotated[
        int, typer.Option(metavar="PORT", help="The demo page's HTTP port (0 picks a free one).")
    ] = 8780,
    agent: Annotated[
        str, typer.Option(metavar="NAME", help="The agent, as for vrt serve.")
    ] = DEFAULT_AGENT,
    agent_option: Annotated[
        list[str] | None,
        typer.Option("--agent-option", metavar="KEY=VALUE", help="A setting of the agent."),
    ] = None,
    static: Annotated[
        Path | None,
        typer.Option(metavar="DIR", help="Serve the page from DIR (default: the built demo)."),
    ] = None,
) -> None:
    """Serve the browser SDK's demo page next to a vRT server; open the printed URL."""
    from .demo import demo_files, run_demo

    logging.basicConfig(level="WARNING", format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    options = dict(item.partition("=")[::2] for item in agent_option or ())
    try:
        files = demo_files(static)
        factory = load_agent(agent, options)
    except FileNotFoundError as exc:
        raise _fail(str(exc)) from None
    except (KeyError, AgentSetupError) as exc:
        raise _fail(f"--agent {agent}: {exc}") from None
    try:
        _run(run_demo(factory, host=host, port=port, http_port=http_port, files=files, agent=agent))
    except OSError as exc:
        raise _fail(f"cannot listen on {host}: {exc.strerror or exc}") from None


@app.command()
def chat(
    url: Annotated[str, typer.Argument(metavar="URL", help="Server URL, e.g. ws://127.0.0.1:8765")],
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
            "system trust store (default: the system store, or SSL_CERT_FILE when set).",
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
            help="After a lost connection, stop if the session is not resumed within SEC seconds.",
        ),
    ] = DEFAULT_GIVE_UP_AFTER,
    audio: Annotated[
        bool, typer.Option("--audio", help="Talk and listen through the microphone and speaker.")
    ] = False,
) -> None:
    """Talk to any vRT server by text in the terminal.

    Each line is sent as user text; the agent's reply streams onto one line. Ctrl-C
    interrupts the agent; a second Ctrl-C within 2 s quits, as do /quit and the end of
    input (after the reply in flight). Piped input is sent a line at a time, each after
    the reply to the one before. The client hosts two tools, get_time() and add(a, b).

    Example: printf 'echo hello world\\n' | vrt chat ws://127.0.0.1:8765
    """
    from .chat import run_chat

    if not give_up_after > 0:
        raise _fail("--give-up-after must be positive")
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
CheckTimeout = Annotated[float, typer.Option(help="Seconds allowed per check.")]

conformance = typer.Typer(
    help="Judge any vRT server or client against the protocol, clause by clause. Exit "
    "status: 0 passed, 1 a MUST check failed, 2 unreachable, 3 incomplete (MUST checks "
    "skipped; see --allow-skips).",
    no_args_is_help=True,
)
app.add_typer(conformance, name="conformance")


def _listing(lines: list[str]) -> typer.Exit:
    typer.echo("\n".join(lines))
    return typer.Exit(0)


@conformance.command("server")
def conformance_server(
    url: Annotated[
        str | None,
        typer.Argument(help="The server under test, e.g. ws://127.0.0.1:8765"),
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
            help="The server's heartbeat timeout, to check close 4408 (§4.4); skipped without it.",
        ),
    ] = None,
    tool_timeout: Annotated[
        float | None,
        typer.Option(
            metavar="SEC",
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
    """Run the server suite against URL (see conformance/README.md)."""
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
    "client", context_settings={"allow_extra_args": True, "ignore_unknown_options": True}
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
        float, typer.Option(help="Seconds to wait for a ping before skipping the ping checks.")
    ] = 3.0,
    jobs: Annotated[int, typer.Option(help="Checks run at once (each starts its own client).")] = 1,
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
    """Run the client suite: `vrt conformance client -- COMMAND...` starts COMMAND with
    the test server's URL in VRT_URL for each check (see conformance/README.md)."""
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
