"""The ``vrt`` command."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, cast

import typer
import typer.core

from . import __version__
from .agents import DEFAULT_AGENT, AgentSetupError, load_agent, load_default_agent
from .client.client import DEFAULT_GIVE_UP_AFTER
from .config import checked, load_file, render, with_settings
from .settings import DEFAULTS, ENV_PREFIX, AtLeast, Port, Seconds, ServeSettings

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
        ctx.default_map = {**(ctx.default_map or {}), **load_file(value, ctx.command)}


@app.command(cls=ManPage, epilog=SERVE_EPILOG)
@with_settings
def serve(
    ctx: typer.Context,
    *,
    config: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE",
            envvar=ENV_PREFIX + "CONFIG",
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
    **settings: Any,
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
        typer.echo(render(ctx), nl=False)
        raise typer.Exit
    from .server.serve import main as start

    raise typer.Exit(start(ServeSettings(**settings)))


@app.command(cls=ManPage, epilog=DEMO_EPILOG)
def demo(
    host: Annotated[
        str, typer.Option(metavar="HOST", help="Interface for both servers (keep it loopback).")
    ] = DEFAULTS.host,
    port: Annotated[
        int,
        typer.Option(
            metavar="PORT",
            callback=checked(Port()),
            help="The vRT server's port; 0 picks a free one.",
        ),
    ] = DEFAULTS.port,
    http_port: Annotated[
        int,
        typer.Option(
            metavar="PORT",
            callback=checked(Port()),
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
    from .server.serve import run

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
        run(run_demo(factory, host=host, port=port, http_port=http_port, files=files, agent=agent))
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
            callback=checked(Seconds()),
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
    float,
    typer.Option(metavar="SEC", callback=checked(Seconds()), help="Seconds allowed per check."),
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
            callback=checked(Seconds()),
            help="The server's heartbeat timeout, to check close 4408 (§4.4); skipped without it.",
        ),
    ] = None,
    tool_timeout: Annotated[
        float | None,
        typer.Option(
            metavar="SEC",
            callback=checked(Seconds()),
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
            callback=checked(Seconds(zero=True)),
            help="Seconds to wait for a ping before skipping the ping checks.",
        ),
    ] = 3.0,
    jobs: Annotated[
        int,
        typer.Option(
            metavar="N",
            callback=checked(AtLeast(1)),
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
