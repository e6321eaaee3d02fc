"""``vrt chat``: talk to any vRT server from a terminal.

Each line typed is sent as user text (§6.3); the agent's text streams onto one line
per turn, with transcripts, turn states, tool activity and errors around it. The
client hosts two demo tools, ``get_time()`` and ``add(a, b)``. Ctrl-C while a
response is in flight interrupts it (§6.2, reason ``keyboard``); a second Ctrl-C
within two seconds, or one while nothing is in flight, quits, as do ``/quit`` and
the end of input. With ``--audio`` (and the ``sounddevice`` package) the microphone
and the speaker are used as well.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import os
import signal
import sys
import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any, Final, TypeVar
from urllib.parse import urlsplit

from rich.console import Console
from rich.markup import escape

from .client import (
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
    ToolPreview,
    ToolStreamUpdate,
    TranscriptReceived,
    TurnChanged,
    VrtClient,
    VrtError,
    tool,
)
from .client.audio import Microphone, PlaybackClock, Speaker
from .protocol.errors import LocalProtocolError
from .protocol.messages import PCM16_24K

__all__ = ["demo_tools", "run_chat"]

T = TypeVar("T")

#: A second Ctrl-C within this many seconds quits.
QUIT_WINDOW: Final = 2.0

HELP: Final = (
    "Type a message and press Enter. Ctrl-C interrupts the agent; Ctrl-C twice quits. "
    "Commands: /interrupt, /context JSON, /quit."
)


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def demo_tools(report: Callable[[str, Any], object] | None = None) -> list[ClientTool]:
    """The two tools ``vrt chat`` hosts; ``report(name, result)`` sees each result."""

    def done(name: str, result: T) -> T:
        if report is not None:
            report(name, result)
        return result

    @tool
    async def get_time() -> str:
        """The current local date and time (ISO 8601)."""
        return done("get_time", datetime.now().astimezone().isoformat(timespec="seconds"))

    @tool
    async def add(a: float, b: float) -> float:
        """Add two numbers."""
        total = a + b
        return done("add", int(total) if float(total).is_integer() else total)

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


class _Chat:
    def __init__(
        self, url: str, auth: str | None, capabilities: tuple[str, ...], audio: bool
    ) -> None:
        self.url = url
        self.auth = auth
        self.capabilities = capabilities
        self.audio = audio
        self.out = Console(highlight=False, soft_wrap=True)
        self.err = Console(stderr=True, highlight=False, soft_wrap=True)
        self.client: VrtClient | None = None
        self.exit_code = 0
        self.quitting = False
        self._quit: asyncio.Event | None = None
        self._text_turn: str | None = None  # the turn whose text line is open
        self._pending_reply = False  # text sent, its turn not seen yet
        self._sent_at_epoch = 0
        self._turn_epoch = 0  # the latest turn seen
        self._turn_active = False
        self._last_sigint: float | None = None
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

    def say(self, markup: str) -> None:
        self._end_line()
        self.out.print(markup)

    def _tool_result(self, name: str, result: Any) -> None:
        self.say(f"[magenta]⚙ {escape(name)} → {escape(_compact(result))}[/]")

    # -- lifecycle --

    @property
    def in_flight(self) -> bool:
        return self._pending_reply or self._turn_active

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
        fmt = None
        if self.audio:
            if importlib.util.find_spec("sounddevice") is None:
                advice = "audio needs sounddevice: pip install 'vrt[audio]' — continuing text-only"
                self.say(f"[yellow]{escape(advice)}[/]")
                self.audio = False
            else:
                fmt = PCM16_24K
        client = VrtClient(
            self.url,
            tools=demo_tools(self._tool_result),
            auth=self.auth,
            capabilities=self.capabilities,
            input=fmt,
            output=fmt,
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
            reason = exc.message if isinstance(exc, VrtError) else f"{type(exc).__name__}: {exc}"
            self.err.print(
                f"vrt chat: cannot open a session at {escape(self.url)}: {escape(reason)}"
            )
            with contextlib.suppress(Exception):
                await client.close()
            return 1
        details = f"session {ready.session_id}"
        if ready.capabilities:
            details += ", capabilities " + " ".join(ready.capabilities)
        self.say(f"[green]connected to {escape(self.url)}[/] [dim]({escape(details)})[/]")
        self.say(f"[dim]{escape(HELP)}[/]")
        if self.audio:
            self._start_audio(ready)
        lines: asyncio.Queue[str | None] = asyncio.Queue()
        threading.Thread(target=_stdin_lines, args=(loop, lines), daemon=True).start()
        self._spawn(self._events(client))
        self._spawn(self._input(client, lines))
        await self._quit.wait()
        await self._shutdown(client)
        return self.exit_code

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
            self._spawn(self._interrupt())
            return
        self.quit(0)

    async def _interrupt(self) -> None:
        client = self.client
        if client is None:
            return
        self._turn_active = False
        with contextlib.suppress(LocalProtocolError):
            await client.interrupt("keyboard")

    async def _input(self, client: VrtClient, lines: asyncio.Queue[str | None]) -> None:
        while True:
            line = await lines.get()
            if line is None:
                self.quit(self.exit_code)  # end of input
                return
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
            self._pending_reply = True
            await client.send_text(text)

    # -- events --

    async def _events(self, client: VrtClient) -> None:
        async for event in client.events():
            try:
                await self._show(client, event)
            except Exception as exc:  # a display problem must not end the chat
                self.say(f"[red]cannot show {type(event).__name__}: {escape(repr(exc))}[/]")

    async def _show(self, client: VrtClient, event: Event) -> None:
        if isinstance(event, TextReceived):
            if self._text_turn != (event.turn_id or ""):
                self._end_line()
                self.out.print("[bold cyan]agent:[/] ", end="")
                self._text_turn = event.turn_id or ""
            self.out.print(escape(event.text), end="")
        elif isinstance(event, TranscriptReceived):
            if event.final:
                who = "agent said" if event.role == "agent" else "you said"
                self.say(f"[dim]{who}:[/] {escape(event.text)}")
        elif isinstance(event, TurnChanged):
            self._turn(event)
        elif isinstance(event, (ToolPreview, ToolStreamUpdate, RunTool, CancelTool)):
            self._tool(event)
        elif isinstance(event, AudioStarted):
            if self._speaker is None:
                self.say("[dim]♪ audio (not played: text-only)[/]")
        elif isinstance(event, AudioChunk):
            if self._speaker is not None:
                self._speaker.play(event.item_id, event.payload, asyncio.get_running_loop().time())
        elif isinstance(event, PlaybackStop):
            await self._stop_playback(client)
        elif isinstance(event, InterruptedEpoch):
            if event.epoch >= self._turn_epoch:
                self._turn_active = False
            if event.epoch > self._sent_at_epoch:
                self._pending_reply = False
            if event.local:
                self.say("[yellow]⏹ interrupted[/] [dim](Ctrl-C again within 2 s quits)[/]")
            else:
                self.say("[yellow]⏹ interrupted by the server[/]")
        elif isinstance(event, ErrorReceived):
            self.say(f"[red]error {escape(event.code)}: {escape(event.message)}[/]")
        elif isinstance(event, SessionFailed):
            self.say(f"[red]session failed: {escape(event.code)}: {escape(event.message)}[/]")
        elif isinstance(event, Disconnected):
            if event.resuming:
                self.say("[yellow]reconnecting…[/]")
        elif isinstance(event, Connected):
            if event.resumed:
                self.say("[green]reconnected[/]")
        elif isinstance(event, SessionClosed) and not self.quitting:
            self.say(f"[red]session closed: {escape(event.reason)}[/]")
            self.quit(1)

    def _turn(self, event: TurnChanged) -> None:
        if event.epoch > self._sent_at_epoch:
            self._pending_reply = False  # the reply to the last text has begun
        if event.epoch >= self._turn_epoch:
            self._turn_epoch = event.epoch
            self._turn_active = event.state != "idle"
        if event.state == "idle":
            self._end_line()
        self.say(f"[dim]· {escape(event.state)}[/]")

    def _tool(self, event: ToolPreview | ToolStreamUpdate | RunTool | CancelTool) -> None:
        if isinstance(event, RunTool):
            self.say(
                f"[magenta]⚙ running {escape(event.name)}({escape(_compact(event.arguments))})[/]"
            )
        elif isinstance(event, CancelTool):
            self.say("[magenta]⚙ cancelling the running tool[/]")
        elif isinstance(event, ToolPreview):
            preview = event.preview
            if isinstance(preview, dict) and set(preview) == {"argumentsDelta"}:
                if event.call_id not in self._previewed:
                    self._previewed.add(event.call_id)
                    self.say("[dim]⚙ preparing a tool call…[/]")
            else:
                self.say(f"[dim]⚙ progress {escape(_compact(preview))}[/]")
        else:
            self._tool_stream(event)

    def _tool_stream(self, event: ToolStreamUpdate) -> None:
        name = escape(event.name)
        message = event.message
        phase = event.phase
        if phase == "start":
            self.say(f"[dim]⚙ {name} …[/]")
        elif phase == "arguments-delta" and message is not None:
            delta = message.delta if isinstance(message.delta, str) else ""
            self._arguments[event.call_id] = self._arguments.get(event.call_id, "") + delta
        elif phase == "arguments-complete" and message is not None:
            self._arguments.pop(event.call_id, None)
            self.say(f"[dim]⚙ {name}({escape(_compact(message.arguments))})[/]")
        elif phase == "progress" and message is not None:
            self.say(f"[dim]⚙ {name} progress {escape(_compact(message.progress))}[/]")
        elif phase == "settled" and message is not None:
            outcome = "ok" if message.ok is True else f"failed {message.code}"
            self.say(f"[dim]⚙ {name} {escape(outcome)}[/]")
        elif phase == "cancelled":
            self.say(f"[dim]⚙ {name} cancelled[/]")
        elif phase == "failed" and message is not None:
            self.say(f"[dim]⚙ {name} never issued: {escape(str(message.message))}[/]")

    async def _stop_playback(self, client: VrtClient) -> None:
        if self._speaker is None:
            return
        self._speaker.stop()
        for item_id, played in self._clock.stop(asyncio.get_running_loop().time()):
            with contextlib.suppress(LocalProtocolError):
                await client.playback(item_id, played)


def run_chat(url: str, *, auth: str | None, capabilities: tuple[str, ...], audio: bool) -> int:
    """Run the terminal chat until the user quits; returns the process exit code (0 on
    a normal quit, 1 when the session could not be opened or ended by itself)."""
    chat = _Chat(url, auth, capabilities, audio)
    try:
        return asyncio.run(chat.run())
    except KeyboardInterrupt:
        return chat.exit_code
