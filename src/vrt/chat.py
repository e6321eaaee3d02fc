"""``vrt chat``: talk to any vRT server from a terminal.

Each line typed is sent as user text (§6.3); the agent's text streams onto one line
per turn, its chunks joined exactly as sent, with transcripts, turn states, tool
activity and errors around it. The client hosts two demo tools, ``get_time()`` and
``add(a, b)``. Ctrl-C while a response is in flight interrupts it (§6.2, reason
``keyboard``); a second Ctrl-C within two seconds, or one while nothing is in flight,
quits, as do ``/quit`` and the end of input (after the reply in flight). Input from a
pipe is sent a line at a time, each after the reply to the one before. With
``--audio`` (and the ``sounddevice`` package) the microphone and the speaker are used
as well.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import os
import signal
import ssl
import sys
import threading
from datetime import datetime
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

from rich.cells import cell_len
from rich.console import Console
from rich.markup import escape as _markup_escape

from .client import (
    DEFAULT_GIVE_UP_AFTER,
    AudioChunk,
    AudioStarted,
    CancelTool,
    ClientTool,
    Connected,
    Disconnected,
    ErrorReceived,
    Event,
    InterruptedEpoch,
    PlaybackStop,
    RunTool,
    SessionClosed,
    SessionFailed,
    TextReceived,
    ToolFinished,
    ToolPreview,
    ToolStreamUpdate,
    TranscriptReceived,
    TurnChanged,
    Undelivered,
    VrtClient,
    VrtError,
    tool,
)
from .client.audio import Microphone, PlaybackClock, Speaker
from .client.tls import cafile_context, describe_tls_error, insecure_context
from .protocol.errors import LocalProtocolError
from .protocol.messages import PCM16_24K, UserText
from .terminal_text import printable

__all__ = ["demo_tools", "run_chat"]

#: A second Ctrl-C within this many seconds quits.
QUIT_WINDOW: Final = 2.0
#: The turns whose text was shown, remembered to leave out their agent transcripts.
_TEXT_TURNS_KEPT: Final = 16

HELP: Final = (
    "Type a message and press Enter. Ctrl-C interrupts the agent; Ctrl-C twice quits. "
    "Commands: /interrupt, /context JSON, /quit."
)


def escape(text: str) -> str:
    """Text from anywhere, as rich markup that shows it literally and without the
    terminal's control sequences (issue: a server could clear the screen, write the
    clipboard with OSC 52 or set the window title; terminal_text.py)."""
    return _markup_escape(printable(text))


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def demo_tools() -> list[ClientTool]:
    """The two tools ``vrt chat`` hosts."""

    @tool
    async def get_time() -> str:
        """The current local date and time (ISO 8601)."""
        return datetime.now().astimezone().isoformat(timespec="seconds")

    @tool
    async def add(a: float, b: float) -> float:
        """Add two numbers."""
        total = a + b
        return int(total) if float(total).is_integer() else total

    return [get_time, add]


def _url_problem(url: str) -> str | None:
    """Why ``url`` cannot be a server URL; None when it can."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError when out of range
    except ValueError as exc:
        return f"not a valid URL ({exc})"
    if parts.scheme not in ("ws", "wss") or not parts.hostname:
        return "not a ws:// or wss:// URL"
    return None


def _stdin_lines(loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[str | None]) -> None:
    """Read lines from standard input in a thread; None at the end of input. Reads the
    file descriptor directly, so that no buffered-reader lock is held at exit."""

    def put(item: str | None) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is already closed
            loop.call_soon_threadsafe(queue.put_nowait, item)

    pending = b""
    while True:
        try:
            data = os.read(sys.stdin.fileno(), 4096)
        except (OSError, ValueError):
            data = b""
        if not data:
            if pending:
                put(pending.decode("utf-8", "replace"))
            put(None)
            return
        pending += data
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            put(line.decode("utf-8", "replace"))


def _interactive() -> bool:
    with contextlib.suppress(ValueError, OSError):
        return sys.stdin.isatty()
    return False


class _Chat:
    def __init__(
        self,
        url: str,
        auth: str | None,
        capabilities: tuple[str, ...],
        audio: bool,
        *,
        cafile: Path | None = None,
        insecure: bool = False,
        give_up_after: float = DEFAULT_GIVE_UP_AFTER,
    ) -> None:
        self.url = url
        self.auth = auth
        self.capabilities = capabilities
        self.audio = audio
        self.cafile = cafile
        self.insecure = insecure
        self.give_up_after = give_up_after
        self.out = Console(highlight=False, soft_wrap=True)
        self.err = Console(stderr=True, highlight=False, soft_wrap=True)
        self.client: VrtClient | None = None
        self.exit_code = 0
        self.quitting = False
        self._quit: asyncio.Event | None = None
        self._text_turn: str | None = None  # the turn whose text line is open
        self._text_line = ""  # what that line shows so far
        self._text_turns: list[str] = []  # the latest turns whose text was shown
        self._held: list[str] = []  # notes that wait for the open text line to end
        self._pending_reply = False  # text sent, its turn not seen yet
        self._sent_at_epoch = 0
        self._turn_epoch = 0  # the latest turn seen
        self._turn_active = False
        self._settled = asyncio.Event()  # nothing in flight
        self._settled.set()
        self._last_sigint: float | None = None
        self._keyboard_interrupt = False  # the next local interrupt came from Ctrl-C
        self._outage_reason: str | None = None  # the last reconnection problem shown
        self._failed = False  # SessionFailed was shown
        self._arguments: dict[str, str] = {}  # streamed arguments per call
        self._previewed: set[str] = set()
        self._clock = PlaybackClock()
        self._speaker: Speaker | None = None
        self._microphone: Microphone | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    # -- output --

    def _end_line(self) -> None:
        if self._text_turn is not None:
            self.out.print()
            self._text_turn = None
            self._text_line = ""
        held, self._held = self._held, []
        for markup in held:
            self.out.print(markup)

    def say(self, markup: str) -> None:
        """A line that matters now: it ends the agent's text line if one is open."""
        self._end_line()
        self.out.print(markup)

    def note(self, markup: str) -> None:
        """A line that can wait: while the agent's text streams it is held until the
        text line ends, so that a turn's text stays on one line."""
        if self._text_turn is not None:
            self._held.append(markup)
        else:
            self.out.print(markup)

    # -- lifecycle --

    @property
    def in_flight(self) -> bool:
        return self._pending_reply or self._turn_active

    def _progress(self) -> None:
        if self.in_flight:
            self._settled.clear()
        else:
            self._settled.set()

    def quit(self, code: int = 0) -> None:
        if not self.quitting:
            self.exit_code = code
        self.quitting = True
        if self._quit is not None:
            self._quit.set()

    def _spawn(self, coroutine: Any) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _tls(self) -> tuple[ssl.SSLContext | None, str | None]:
        """The TLS context and what it trusts, from --cafile / --insecure; (None, None)
        for the client's default (the system trust store and SSL_CERT_FILE)."""
        if self.cafile is not None:
            return cafile_context(self.cafile), f"--cafile {self.cafile}"
        if self.insecure:
            return insecure_context(), None
        return None, None

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        self._quit = asyncio.Event()
        # Event loops without signal support (Windows) refuse the handler; Ctrl-C then
        # falls back to KeyboardInterrupt.
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signal.SIGINT, self._on_sigint)
        problem = _url_problem(self.url)
        if problem is not None:
            self.err.print(f"vrt chat: {escape(self.url)}: {escape(problem)}")
            return 1
        secure = urlsplit(self.url).scheme == "wss"
        if (self.cafile is not None or self.insecure) and not secure:
            self.err.print("vrt chat: --cafile and --insecure apply to wss:// URLs only")
            return 2
        if self.cafile is not None and self.insecure:
            self.err.print("vrt chat: --cafile and --insecure cannot go together")
            return 2
        try:
            context, trusted = self._tls()
        except ValueError as exc:
            self.err.print(f"vrt chat: --cafile {escape(str(exc))}")
            return 2
        if self.insecure:
            self.err.print(
                "[yellow]vrt chat: --insecure: the server's certificate is not checked; "
                "anyone on the path can pose as the server[/]"
            )
        fmt = None
        if self.audio:
            if importlib.util.find_spec("sounddevice") is None:
                advice = (
                    "audio needs sounddevice: pip install 'vrealtime[audio]' — continuing text-only"
                )
                self.say(f"[yellow]{escape(advice)}[/]")
                self.audio = False
            else:
                fmt = PCM16_24K
        client = VrtClient(
            self.url,
            tools=demo_tools(),
            auth=self.auth,
            capabilities=self.capabilities,
            input=fmt,
            output=fmt,
            give_up_after=self.give_up_after,
            ssl_context=context,
        )
        self.client = client
        connecting = loop.create_task(client.connect())
        quitting = loop.create_task(self._quit.wait())
        await asyncio.wait({connecting, quitting}, return_when=asyncio.FIRST_COMPLETED)
        quitting.cancel()
        if not connecting.done():
            connecting.cancel()
            await client.close()
            return self.exit_code
        try:
            ready = connecting.result()
        except Exception as exc:  # one clear line, never a traceback
            self.err.print(f"vrt chat: {escape(self._open_failure(exc, trusted))}")
            with contextlib.suppress(Exception):
                await client.close()
            return 1
        details = f"session {ready.session_id}"
        if ready.capabilities:
            details += ", capabilities " + " ".join(ready.capabilities)
        self.say(f"[green]connected to {escape(self.url)}[/] [dim]({escape(details)})[/]")
        interactive = _interactive()
        if interactive:
            self.say(f"[dim]{escape(HELP)}[/]")
        if self.audio:
            self._start_audio(ready)
        lines: asyncio.Queue[str | None] = asyncio.Queue()
        threading.Thread(target=_stdin_lines, args=(loop, lines), daemon=True).start()
        self._spawn(self._events(client))
        self._spawn(self._input(client, lines, one_at_a_time=not interactive))
        await self._quit.wait()
        await self._shutdown(client)
        return self.exit_code

    def _open_failure(self, exc: BaseException, trusted: str | None) -> str:
        """Why the session could not be opened, in one line."""
        if not isinstance(exc, VrtError):
            return f"cannot open a session at {self.url}: {type(exc).__name__}: {exc}"
        cause = exc.__cause__
        if trusted is not None and isinstance(cause, ssl.SSLError):
            return f"cannot connect to {self.url}: {describe_tls_error(cause, trusted)}"
        if exc.code == "CONNECT_FAILED":
            return exc.message
        return f"cannot open a session at {self.url}: {exc.code}: {exc.message}"

    async def _shutdown(self, client: VrtClient) -> None:
        self._end_line()
        for task in list(self._tasks):
            task.cancel()
        if self._microphone is not None:
            self._microphone.close()
        if self._speaker is not None:
            self._speaker.close()
        await client.close()

    def _start_audio(self, ready: Connected) -> None:
        client = self.client
        assert client is not None
        try:
            self._speaker = Speaker(ready.output, self._clock)
            self._microphone = Microphone(ready.input, client.send_audio)
        except (RuntimeError, ValueError) as exc:
            self.say(f"[yellow]{escape(str(exc))} — continuing text-only[/]")
            if self._speaker is not None:
                self._speaker.close()
                self._speaker = None
            return
        self.say("[dim]audio on: speak, and listen (use headphones to avoid echo)[/]")

    # -- input --

    def _on_sigint(self) -> None:
        now = asyncio.get_running_loop().time()
        recent = self._last_sigint is not None and now - self._last_sigint <= QUIT_WINDOW
        self._last_sigint = now
        if self.in_flight and not recent and self.client is not None and self.client.connected:
            self._spawn(self._interrupt(keyboard=True))
            return
        self.quit(0)

    async def _interrupt(self, *, keyboard: bool = False) -> None:
        client = self.client
        if client is None:
            return
        self._turn_active = False
        self._pending_reply = False
        self._progress()
        self._keyboard_interrupt = keyboard
        with contextlib.suppress(LocalProtocolError):
            await client.interrupt("keyboard" if keyboard else "user")

    async def _input(
        self, client: VrtClient, lines: asyncio.Queue[str | None], *, one_at_a_time: bool
    ) -> None:
        """Send each line; at the end of input, quit once the reply in flight is over.
        ``one_at_a_time`` (input from a pipe): each line waits for the reply to the
        one before, as if typed after reading it; text sent while the agent responds
        would interrupt it (§6.3)."""
        while True:
            line = await lines.get()
            if line is None:
                await self._settled.wait()  # the end of input: the reply still counts
                self.quit(self.exit_code)
                return
            self._typed_over_text(line)
            text = line.strip()
            if not text:
                continue
            if text in ("/quit", "/exit"):
                self.quit(0)
                return
            try:
                await self._command(client, text)
            except LocalProtocolError as exc:
                self.say(f"[red]cannot send: {escape(str(exc))}[/]")
            if one_at_a_time:
                await self._settled.wait()

    def _typed_over_text(self, line: str) -> None:
        """A line typed while the agent's text streamed: the terminal echoed it into the
        agent's line. Redraw them apart: the agent's line so far, then what was typed;
        the rest of the reply starts a line of its own."""
        if self._text_turn is None or not (_interactive() and self.out.is_terminal):
            return
        width = max(1, self.out.width)
        cells = cell_len("agent: " + self._text_line) + cell_len(line)
        rows = max(1, -(-cells // width))  # the rows the glued line took
        # ESC[nF: to the start of the line n rows up; ESC[J: erase to the screen's end.
        self.out.file.write(f"\x1b[{rows}F\x1b[J")
        self.out.print(f"[bold cyan]agent:[/] {escape(self._text_line)}")
        self.out.print(escape(line))
        self._text_turn = None
        self._text_line = ""
        held, self._held = self._held, []
        for markup in held:
            self.out.print(markup)

    async def _command(self, client: VrtClient, text: str) -> None:
        if text == "/help":
            self.say(f"[dim]{escape(HELP)}[/]")
        elif text == "/interrupt":
            await self._interrupt()
        elif text.startswith("/context"):
            raw = text.removeprefix("/context").strip() or "null"
            try:
                context = json.loads(raw)
            except ValueError:
                self.say('[red]/context takes JSON, e.g. /context {"doc": "notes.md"}[/]')
                return
            await client.update_context(context)
            self.say("[dim]context sent[/]")
        else:
            self._sent_at_epoch = client.core.observed_epoch
            await client.send_text(text)
            self._pending_reply = True
            self._progress()

    # -- events --

    async def _events(self, client: VrtClient) -> None:
        async for event in client.events():
            try:
                await self._show(client, event)
            except Exception as exc:  # a display problem must not end the chat
                self.say(f"[red]cannot show {type(event).__name__}: {escape(repr(exc))}[/]")
            self._progress()

    async def _show(self, client: VrtClient, event: Event) -> None:
        if isinstance(event, TextReceived):
            self._text(event)
        elif isinstance(event, TranscriptReceived):
            # The agent's transcript of a turn whose text was shown says it again.
            if event.final and not (event.role == "agent" and event.turn_id in self._text_turns):
                who = "agent said" if event.role == "agent" else "you said"
                self.note(f"[dim]{who}:[/] {escape(event.text)}")
        elif isinstance(event, TurnChanged):
            self._turn(event)
        elif isinstance(event, (ToolPreview, ToolStreamUpdate, RunTool, CancelTool, ToolFinished)):
            self._tool(event)
        elif isinstance(event, AudioStarted):
            if self._speaker is None:
                self.note("[dim]♪ audio (not played: text-only)[/]")
        elif isinstance(event, AudioChunk):
            if self._speaker is not None:
                self._speaker.play(event.item_id, event.payload, asyncio.get_running_loop().time())
        elif isinstance(event, PlaybackStop):
            await self._stop_playback(client)
        elif isinstance(event, InterruptedEpoch):
            self._interrupted(event)
        elif isinstance(event, ErrorReceived):
            if self._pending_reply and not self._turn_active:
                self._pending_reply = False  # the answer to the text: no turn will come
            self.say(f"[red]error {escape(event.code)}: {escape(event.message)}[/]")
        else:
            self._session(event)

    def _text(self, event: TextReceived) -> None:
        """A chunk of the agent's text, printed exactly: the chunks of a turn
        concatenate to its reply (a model's chunks carry their own spaces)."""
        if self._text_turn != (event.turn_id or ""):
            self._end_line()
            self.out.print("[bold cyan]agent:[/] ", end="")
            self._text_turn = event.turn_id or ""
            if event.turn_id and event.turn_id not in self._text_turns:
                self._text_turns = [*self._text_turns[1 - _TEXT_TURNS_KEPT :], event.turn_id]
        shown = printable(event.text)
        self._text_line += shown
        self.out.print(_markup_escape(shown), end="")

    def _session(self, event: Event) -> None:
        """Connection and session events."""
        if isinstance(event, Disconnected):
            self._disconnected(event)
        elif isinstance(event, Connected):
            if event.resumed:
                self._outage_reason = None
                self.say("[green]reconnected: the session resumed[/]")
        elif isinstance(event, SessionFailed):
            self._failed = True
            self.say(f"[red]session failed: {escape(event.code)}: {escape(event.message)}[/]")
            if event.code == "RESUME_FAILED":
                self.say(
                    "[dim]the server no longer has this session (it restarted, or the "
                    "resume window passed)[/]"
                )
        elif isinstance(event, Undelivered):
            self._undelivered(event)
        elif isinstance(event, SessionClosed) and not self.quitting:
            if not self._failed:  # a failure was already said
                self.say(f"[red]session closed: {escape(event.reason)}[/]")
            self.quit(1)

    def _disconnected(self, event: Disconnected) -> None:
        reason = event.reason or "no reason given"
        if event.code is not None:
            reason = f"{event.code}: {reason}"
        if not event.resuming:
            self.say(f"[yellow]connection lost ({escape(reason)})[/]")
            return
        if event.attempt == 0:
            self.say(f"[yellow]connection lost ({escape(reason)}); reconnecting…[/]")
        elif reason != self._outage_reason:
            self.say(f"[yellow]still reconnecting: {escape(reason)}[/]")
        self._outage_reason = reason

    def _undelivered(self, event: Undelivered) -> None:
        """The user's texts the server never acknowledged, to type again in a new chat."""
        for item in event.messages:
            if isinstance(item.message, UserText):
                text = escape(item.message.text)
                if item.sent:
                    self.say(f"[yellow]not acknowledged (the server may have it):[/] {text}")
                else:
                    self.say(f"[red]not delivered:[/] {text}")

    def _interrupted(self, event: InterruptedEpoch) -> None:
        if event.epoch >= self._turn_epoch:
            self._turn_active = False
        if event.epoch > self._sent_at_epoch:
            self._pending_reply = False
        if event.local:
            hint = " [dim](Ctrl-C again within 2 s quits)[/]" if self._keyboard_interrupt else ""
            self._keyboard_interrupt = False
            self.say(f"[yellow]⏹ interrupted[/]{hint}")
        else:
            self.say("[yellow]⏹ interrupted by the server[/]")

    def _turn(self, event: TurnChanged) -> None:
        if event.epoch > self._sent_at_epoch:
            self._pending_reply = False  # the reply to the last text has begun
        if event.epoch >= self._turn_epoch:
            self._turn_epoch = event.epoch
            self._turn_active = event.state != "idle"
        if event.state == "idle":
            self._end_line()
        self.note(f"[dim]· {escape(event.state)}[/]")

    def _tool(
        self, event: ToolPreview | ToolStreamUpdate | RunTool | CancelTool | ToolFinished
    ) -> None:
        if isinstance(event, RunTool):
            self.say(
                f"[magenta]⚙ running {escape(event.name)}({escape(_compact(event.arguments))})[/]"
            )
        elif isinstance(event, ToolFinished):
            name = escape(event.name)
            if event.ok:
                self.say(f"[magenta]⚙ {name} → {escape(_compact(event.output))}[/]")
            else:
                failure = f"{event.code}: {event.message}"
                self.say(f"[magenta]⚙ {name} answered {escape(failure)}[/]")
        elif isinstance(event, CancelTool):
            self.say("[magenta]⚙ cancelling the running tool[/]")
        elif isinstance(event, ToolPreview):
            preview = event.preview
            if isinstance(preview, dict) and set(preview) == {"argumentsDelta"}:
                if event.call_id not in self._previewed:
                    self._previewed.add(event.call_id)
                    self.note("[dim]⚙ preparing a tool call…[/]")
            else:
                self.note(f"[dim]⚙ progress {escape(_compact(preview))}[/]")
        else:
            self._tool_stream(event)

    def _tool_stream(self, event: ToolStreamUpdate) -> None:
        name = escape(event.name)
        message = event.message
        phase = event.phase
        if phase == "start":
            self.note(f"[dim]⚙ {name} …[/]")
        elif phase == "arguments-delta" and message is not None:
            delta = message.delta if isinstance(message.delta, str) else ""
            self._arguments[event.call_id] = self._arguments.get(event.call_id, "") + delta
        elif phase == "arguments-complete" and message is not None:
            self._arguments.pop(event.call_id, None)
            self.note(f"[dim]⚙ {name}({escape(_compact(message.arguments))})[/]")
        elif phase == "progress" and message is not None:
            self.note(f"[dim]⚙ {name} progress {escape(_compact(message.progress))}[/]")
        elif phase == "settled" and message is not None:
            outcome = "ok" if message.ok is True else f"failed {message.code}"
            self.note(f"[dim]⚙ {name} {escape(outcome)}[/]")
        elif phase == "cancelled":
            self.note(f"[dim]⚙ {name} cancelled[/]")
        elif phase == "failed" and message is not None:
            self.note(f"[dim]⚙ {name} never issued: {escape(str(message.message))}[/]")

    async def _stop_playback(self, client: VrtClient) -> None:
        if self._speaker is None:
            return
        self._speaker.stop()
        for item_id, played in self._clock.stop(asyncio.get_running_loop().time()):
            with contextlib.suppress(LocalProtocolError):
                await client.playback(item_id, played)


def run_chat(
    url: str,
    *,
    auth: str | None,
    capabilities: tuple[str, ...],
    audio: bool,
    cafile: Path | None = None,
    insecure: bool = False,
    give_up_after: float = DEFAULT_GIVE_UP_AFTER,
) -> int:
    """Run the terminal chat until the user quits; returns the process exit code (0 on
    a normal quit, 1 when the session could not be opened or ended by itself, 2 for
    unusable TLS options)."""
    chat = _Chat(
        url,
        auth,
        capabilities,
        audio,
        cafile=cafile,
        insecure=insecure,
        give_up_after=give_up_after,
    )
    try:
        return asyncio.run(chat.run())
    except KeyboardInterrupt:
        return chat.exit_code
