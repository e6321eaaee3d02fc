"""``vrt chat`` end to end: a real ``vrt serve`` subprocess and ``vrt chat`` driven
through a pseudo-terminal, as a user would (typing lines, pressing Ctrl-C)."""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import os
import pty
import re
import select
import struct
import subprocess
import termios
import time
from collections.abc import Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from support.processes import free_port, vrt_command, vrt_serve
from vrt.chat import _Chat
from vrt.client import (
    AudioStarted,
    Connected,
    Disconnected,
    ErrorReceived,
    Event,
    SessionClosed,
    SessionFailed,
    TextReceived,
    ToolStreamUpdate,
    TranscriptReceived,
    TurnChanged,
    Undelivered,
    UndeliveredMessage,
    VrtClient,
)
from vrt.protocol.messages import PCM16_24K, ToolStream, ToolStreamPhase, UserText

TIMEOUT = 10.0
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    """``vrt serve`` on a free port, for the whole module."""
    with vrt_serve() as url:
        yield url


def _controlling_terminal() -> None:
    # In the child, after setsid: make the pty (its stdin) the controlling terminal,
    # so that Ctrl-C typed on it sends SIGINT to the child.
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class Terminal:
    """A program on a pseudo-terminal: type into it and wait for its output."""

    def __init__(self, args: list[str]) -> None:
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
        env = dict(os.environ, COLUMNS="200", PYTHONUNBUFFERED="1")
        self.process = subprocess.Popen(
            args,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            start_new_session=True,
            preexec_fn=_controlling_terminal,  # noqa: PLW1509 - no threads here to deadlock
            env=env,
        )
        os.close(slave)
        self.master = master
        self.output = ""
        self._seen = 0

    def _read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.master], [], [], timeout)
        if not ready:
            return True
        try:
            data = os.read(self.master, 65536)
        except OSError:  # the child closed the terminal
            return False
        if not data:
            return False
        self.output += ANSI.sub("", data.decode("utf-8", "replace")).replace("\r", "")
        return True

    def expect(self, pattern: str, timeout: float = TIMEOUT) -> re.Match[str]:
        """Wait for ``pattern`` (a regex) in the output after the last match."""
        deadline = time.monotonic() + timeout
        while True:
            found = re.compile(pattern).search(self.output, self._seen)
            if found:
                self._seen = found.end()
                return found
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._read(min(remaining, 0.1)):
                if found := re.compile(pattern).search(self.output, self._seen):
                    self._seen = found.end()
                    return found
                raise AssertionError(f"{pattern!r} not in the output:\n{self.output}")

    def type(self, text: str) -> None:
        os.write(self.master, text.encode())

    def line(self, text: str) -> None:
        self.type(text + "\n")
        self.expect(re.escape(text))  # the terminal's own echo

    def wait(self, timeout: float = TIMEOUT) -> int:
        deadline = time.monotonic() + timeout
        while self.process.poll() is None and time.monotonic() < deadline:
            self._read(0.05)
        return self.process.wait(max(0.0, deadline - time.monotonic()))

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        with contextlib.suppress(OSError):
            os.close(self.master)


@pytest.fixture
def chat(server_url: str) -> Iterator[Terminal]:
    terminal = Terminal([*vrt_command(), "chat", server_url])
    try:
        terminal.expect("connected to")
        yield terminal
    finally:
        terminal.close()


def test_echo_tool_and_quit(chat: Terminal) -> None:
    """Text in, the agent's streamed text out (once: its transcript, the same words, is
    left out); a demo tool runs; /quit exits 0."""
    chat.line("echo hello world")
    chat.expect(r"agent: hello world")
    chat.expect(r"· idle")
    chat.line('call add {"a": 1, "b": 2}')
    chat.expect(r"⚙ running add")
    chat.expect(r"result ok 3\b")
    chat.expect(r"· idle")
    chat.line("/quit")
    assert chat.wait() == 0


def test_ctrl_c_interrupts_then_quits(chat: Terminal) -> None:
    """§6.2: Ctrl-C while a response is in flight interrupts it (reason keyboard); a
    second Ctrl-C within 2 s quits cleanly."""
    chat.line("speak 3000")
    chat.expect(r"· speaking")
    chat.type("\x03")
    chat.expect(r"⏹ interrupted \(Ctrl-C again within 2 s quits\)")
    chat.type("\x03")
    assert chat.wait() == 0
    assert "Traceback" not in chat.output


def test_interrupt_command_does_not_speak_of_ctrl_c(chat: Terminal) -> None:
    """/interrupt interrupts (§6.2, reason user); the Ctrl-C hint belongs to Ctrl-C."""
    chat.line("speak 3000")
    chat.expect(r"· speaking")
    chat.line("/interrupt")
    line = chat.expect(r"⏹ interrupted[^\n]*\n")
    assert "Ctrl-C" not in line.group(0)
    chat.line("/quit")
    assert chat.wait() == 0


def test_ctrl_c_with_nothing_in_flight_quits(chat: Terminal) -> None:
    chat.type("\x03")
    assert chat.wait() == 0
    assert "Traceback" not in chat.output


def test_end_of_input_quits(chat: Terminal) -> None:
    chat.type("\x04")  # Ctrl-D at the start of a line: end of input
    assert chat.wait() == 0


def test_connection_failure_is_one_line(tmp_path: Path) -> None:
    """Nothing listens there: one clear line on stderr, exit code 1, no traceback."""
    done = subprocess.run(
        [*vrt_command(), "chat", f"ws://127.0.0.1:{free_port()}"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        stdin=subprocess.DEVNULL,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("vrt chat: ")
    assert "connection refused" in lines[0]
    assert "None" not in lines[0]
    assert "Traceback" not in done.stderr + done.stdout


@pytest.mark.skipif(
    importlib.util.find_spec("sounddevice") is not None, reason="sounddevice is installed"
)
def test_audio_without_sounddevice_continues_text_only(server_url: str) -> None:
    terminal = Terminal([*vrt_command(), "chat", "--audio", server_url])
    try:
        terminal.expect(r"pip install 'vrealtime\[audio\]'")
        terminal.expect("connected to")
        terminal.line("echo still works")
        terminal.expect("agent: still works")
        terminal.line("/quit")
        assert terminal.wait() == 0
    finally:
        terminal.close()


async def test_events_are_shown(vrt_url: str) -> None:
    """What the chat prints for connection events, errors, tool streams and a failed
    session (in process)."""
    chat = _Chat(vrt_url, None, (), False)
    screen = StringIO()
    chat.out = Console(file=screen, width=200, color_system=None, soft_wrap=True)
    client = VrtClient(vrt_url)

    def stream(phase: ToolStreamPhase, **members: Any) -> ToolStreamUpdate:
        message = ToolStream(
            call_id="c1", name="add", turn_id="t1", epoch=1, phase=phase, **members
        )
        return ToolStreamUpdate(
            call_id="c1", name="add", turn_id="t1", epoch=1, phase=phase, message=message
        )

    def undelivered(*texts: tuple[str, bool]) -> Undelivered:
        return Undelivered(
            messages=tuple(
                UndeliveredMessage(seq=n, message=UserText(text=text), sent=sent)
                for n, (text, sent) in enumerate(texts, 1)
            )
        )

    events: list[Event] = [
        Disconnected(code=1001, reason="going away", resuming=True, attempt=0, retry_in=0.1),
        Disconnected(code=None, reason="connection refused", resuming=True, attempt=1),
        Disconnected(code=None, reason="connection refused", resuming=True, attempt=2),
        Connected(
            session_id="s1", resumed=True, input=PCM16_24K, output=PCM16_24K, capabilities=()
        ),
        ErrorReceived(code="AGENT_ERROR", message="scripted [error]", recoverable=True),
        stream("start"),
        stream("arguments-complete", arguments={"a": 1}),
        stream("progress", progress={"elapsedMs": 100}),
        stream("settled", ok=False, code="TIMEOUT"),
        SessionFailed(code="RESUME_FAILED", message="unknown session"),
        undelivered(("echo sent", True), ("echo offline", False)),
        SessionClosed(reason="the session failed (RESUME_FAILED: unknown session)"),
    ]
    for event in events:
        await chat._show(client, event)
    shown = screen.getvalue()
    for expected in [
        "connection lost (1001: going away); reconnecting…",
        "still reconnecting: connection refused",
        "reconnected: the session resumed",
        "error AGENT_ERROR: scripted [error]",
        "⚙ add …",
        '⚙ add({"a":1})',
        '⚙ add progress {"elapsedMs":100}',
        "⚙ add failed TIMEOUT",
        "session failed: RESUME_FAILED: unknown session",
        "the server no longer has this session",
        "not acknowledged (the server may have it): echo sent",
        "not delivered: echo offline",
    ]:
        assert expected in shown, shown
    assert shown.count("still reconnecting") == 1
    assert "session closed" not in shown  # the failure already said why
    assert chat.exit_code == 1


async def test_a_turns_text_stays_on_one_line(vrt_url: str) -> None:
    """Notes that arrive while the agent's text streams wait for the end of its line;
    chunks are joined exactly, with nothing added."""
    chat = _Chat(vrt_url, None, (), False)
    screen = StringIO()
    chat.out = Console(file=screen, width=200, color_system=None, soft_wrap=True)
    client = VrtClient(vrt_url)
    events: list[Event] = [
        TurnChanged(turn_id="t1", epoch=1, state="speaking"),
        TextReceived(text="Hel", turn_id="t1"),
        TranscriptReceived(
            role="agent", text="Hello, world", final=True, item_id=None, turn_id="t1"
        ),
        AudioStarted(item_id="i1", turn_id="t1", epoch=1),
        TextReceived(text="lo,", turn_id="t1"),
        TextReceived(text=" world", turn_id="t1"),
        TurnChanged(turn_id="t1", epoch=1, state="idle"),
    ]
    for event in events:
        await chat._show(client, event)
    assert screen.getvalue().splitlines() == [
        "· speaking",
        "agent: Hello, world",
        "♪ audio (not played: text-only)",
        "· idle",
    ]
