"""What ``vrt chat`` puts on a person's screen (issue 34 point 8, issue 31 point 6): a
server's terminal controls are never obeyed, each reply is read once, a line typed
while the agent's text streams is not glued onto it, and wss:// to a plain server says
that TLS failed. The screen is a terminal emulator (pyte), so the assertions are on what
a person reads, not on the bytes written."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import subprocess
import termios
import time
from io import StringIO

import pyte
import pytest
from rich.console import Console

from support.processes import vrt_command, vrt_serve
from vrt import chat as chat_module
from vrt.chat import _Chat
from vrt.client import (
    ErrorReceived,
    Event,
    TextReceived,
    ToolFinished,
    TranscriptReceived,
    TurnChanged,
    VrtClient,
)
from vrt.terminal_text import printable

COLUMNS = 40

# What a hostile server can put in a text: clear the screen and home the cursor, write
# the clipboard (OSC 52), set the window title (OSC 0), a hyperlink (OSC 8), a carriage
# return that overwrites the line, a bell, and a right-to-left override.
HOSTILE = (
    "\x1b[2J\x1b[Hsafe"
    "\x1b]52;c;cm0gLXJmIH4=\x07"
    "\x1b]0;owned\x1b\\"
    "\x1b]8;;https://evil.example\x07link\x1b]8;;\x07"
    "\rX\x07\u202etxt"
)


class Screen:
    """A terminal the chat's console writes to: what a person would see."""

    def __init__(self) -> None:
        self.screen = pyte.Screen(COLUMNS, 12)
        self.stream = pyte.Stream(self.screen)
        self.raw = ""

    def write(self, text: str) -> int:
        self.raw += text
        # A terminal's output processing turns each newline into CR LF (onlcr).
        self.stream.feed(text.replace("\n", "\r\n"))
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return True

    def lines(self) -> list[str]:
        return [line.rstrip() for line in self.screen.display if line.strip()]


def on_screen(chat: _Chat) -> Screen:
    screen = Screen()
    chat.out = Console(
        file=screen,  # type: ignore[arg-type]
        width=COLUMNS,
        force_terminal=True,
        color_system=None,
        soft_wrap=True,
    )
    return screen


def test_printable_drops_every_control_and_keeps_the_text() -> None:
    assert printable(HOSTILE) == "safelinkXtxt"
    assert printable("two\nlines\tand a tab") == "two\nlines\tand a tab"


async def test_a_servers_controls_are_never_obeyed(vrt_url: str) -> None:
    """§6.3 text, transcripts, error messages and tool results, each with escape
    sequences: the screen shows their text, and the window title and clipboard stay
    untouched (pyte records a title that was set; its clipboard write would show as
    text starting 52;)."""
    chat = _Chat(vrt_url, None, (), False)
    screen = on_screen(chat)
    client = VrtClient(vrt_url)
    events: list[Event] = [
        TextReceived(text=HOSTILE, turn_id="t1"),
        TurnChanged(turn_id="t1", epoch=1, state="idle"),
        TranscriptReceived(role="user", text=HOSTILE, final=True, item_id=None, turn_id="t2"),
        ErrorReceived(code="AGENT_ERROR", message=HOSTILE, recoverable=True),
        ToolFinished(call_id="c1", name="add", ok=True, output=HOSTILE),
    ]
    for event in events:
        await chat._show(client, event)
    assert "\x1b]" not in screen.raw
    assert "\x07" not in screen.raw
    assert screen.screen.title == ""
    shown = screen.lines()
    assert shown[0] == "agent: safelinkXtxt", shown
    assert "you said: safelinkXtxt" in shown
    assert "error AGENT_ERROR: safelinkXtxt" in shown
    assert any("⚙ add" in line for line in shown)  # JSON shows controls as \\u001b


async def test_each_reply_is_read_once(vrt_url: str) -> None:
    """The agent's transcript of a turn whose text was shown says the same again: it is
    left out; a turn that spoke without text still shows what was said."""
    chat = _Chat(vrt_url, None, (), False)
    screen = StringIO()
    chat.out = Console(file=screen, width=200, color_system=None, soft_wrap=True)
    client = VrtClient(vrt_url)
    events: list[Event] = [
        TextReceived(text="hello world", turn_id="t1"),
        TranscriptReceived(role="agent", text="hello world", final=True, item_id="i", turn_id="t1"),
        TurnChanged(turn_id="t1", epoch=1, state="idle"),
        TranscriptReceived(role="agent", text="spoken only", final=True, item_id="j", turn_id="t2"),
    ]
    for event in events:
        await chat._show(client, event)
    shown = screen.getvalue()
    assert shown.count("hello world") == 1, shown
    assert "agent said: spoken only" in shown


async def test_a_line_typed_while_the_agent_streams_gets_its_own_line(
    vrt_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The terminal echoes what is typed at the cursor, at the end of the agent's open
    line: when the line is sent, the chat redraws the two apart."""
    monkeypatch.setattr(chat_module, "_interactive", lambda: True)
    chat = _Chat(vrt_url, None, (), False)
    screen = on_screen(chat)
    client = VrtClient(vrt_url)
    await chat._show(client, TextReceived(text="the weather today is sunny and", turn_id="t1"))
    typed = "what about tomorrow"
    screen.stream.feed(typed + "\r\n")  # the terminal's echo of the typed line
    chat._typed_over_text(typed)
    await chat._show(client, TextReceived(text=" warm", turn_id="t1"))
    chat._end_line()
    assert screen.lines() == [
        "agent: the weather today is sunny and",
        "what about tomorrow",
        "agent:  warm",
    ]


def test_wss_to_a_plain_server_says_tls_failed() -> None:
    """A TLS handshake with a ws:// server waits for an answer that never comes: the
    chat asks the server in plain HTTP, and says so at once instead of after its open
    timeout with only "no answer in time"."""
    with vrt_serve() as url:
        secure = url.replace("ws://", "wss://")
        done = subprocess.run(
            [*vrt_command(), "chat", secure],
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "TLS failed" in lines[0]
    assert f"try {url}" in lines[0]


def test_save_reply_without_wav_is_refused() -> None:
    done = subprocess.run(
        [*vrt_command(), "chat", "ws://127.0.0.1:9", "--save-reply", "out.wav"],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "vrt: --save-reply saves the spoken reply to --wav FILE: give --wav too"
    ]


def test_typing_over_the_voice_agents_reply_in_a_terminal() -> None:
    """End to end in a pseudo-terminal against the default voice agent, whose reply line
    stays open while it speaks: a line typed then interrupts it (§6.3) and is read on a
    line of its own, not glued to the reply."""
    pytest.importorskip("faster_whisper")
    with vrt_serve(default_agent=True) as url:
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
        process = subprocess.Popen(
            [*vrt_command(), "chat", url],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            start_new_session=True,
            env=dict(os.environ, COLUMNS="100", PYTHONUNBUFFERED="1"),
        )
        os.close(slave)
        screen = pyte.Screen(100, 30)
        stream = pyte.ByteStream(screen)

        def until(text: str) -> None:
            deadline = time.monotonic() + 60
            while not any(text in line for line in screen.display):
                assert time.monotonic() < deadline, f"{text!r} not on the screen"
                ready, _, _ = select.select([master], [], [], 0.05)
                if ready:
                    stream.feed(os.read(master, 65536))

        try:
            until("connected to")
            os.write(master, b"echo one two three four five six seven eight nine ten\n")
            until("agent: one")
            os.write(master, b"hello again\n")
            until("agent: hello again")
            until("· idle")
        finally:
            process.kill()
            process.wait()
            os.close(master)
    shown = [line.rstrip() for line in screen.display if line.strip()]
    assert "interrupted by the server" in "\n".join(shown), shown  # typed while it spoke
    assert "agent: one two three four five six seven eight nine ten" in shown, shown
    assert "hello again" in shown, shown  # the typed line, on its own
