"""``vrt chat`` as a process with its input on a pipe, against servers in the test's
event loop: the scripted agent, a chat model (the Chat Completions stand-in behind
``--agent openai-chat``), a server that restarts or goes away, and wss:// with a CA
made by the test.

What is checked is what a user reads: the reply to piped input before the chat quits,
a turn's text on one line exactly as its chunks concatenate, why a session ended, and
error lines that name what to fix.
"""

from __future__ import annotations

import asyncio
import os
import re
import ssl
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import trustme

from agents.openai_chat_standin import ChatStandIn, text_reply
from support.processes import free_port, vrt_command
from vrt.agents import load_agent
from vrt.chat import demo_tools
from vrt.client import TextReceived, TurnChanged, VrtClient
from vrt.server import VrtServer

if TYPE_CHECKING:
    from conftest import LiveServer

TIMEOUT = 15.0


class Chat:
    """``vrt chat`` in a process: write lines to its input, read what it prints."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.stdout = ""
        self.stderr = ""
        self._seen = 0
        self._changed = asyncio.Event()
        assert process.stdout is not None
        assert process.stderr is not None
        self._readers = [
            asyncio.get_running_loop().create_task(self._pump(process.stdout, "stdout")),
            asyncio.get_running_loop().create_task(self._pump(process.stderr, "stderr")),
        ]

    @classmethod
    async def start(cls, *args: str, env: dict[str, str] | None = None) -> Chat:
        process = await asyncio.create_subprocess_exec(
            *vrt_command(),
            "chat",
            *args,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, **(env or {})},
        )
        return cls(process)

    async def _pump(self, stream: asyncio.StreamReader, name: str) -> None:
        while data := await stream.read(65536):
            setattr(self, name, getattr(self, name) + data.decode("utf-8", "replace"))
            self._changed.set()

    def send(self, *lines: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write("".join(line + "\n" for line in lines).encode())

    def end_input(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()

    async def expect(self, pattern: str) -> re.Match[str]:
        """Wait for ``pattern`` (a regex) on stdout after the last match."""

        async def find() -> re.Match[str]:
            while True:
                found = re.compile(pattern).search(self.stdout, self._seen)
                if found:
                    self._seen = found.end()
                    return found
                self._changed.clear()
                await self._changed.wait()

        try:
            return await asyncio.wait_for(find(), TIMEOUT)
        except TimeoutError:
            raise AssertionError(
                f"{pattern!r} not in the output:\n{self.stdout}\n{self.stderr}"
            ) from None

    async def wait(self) -> int:
        """The exit code, once the process ended and its output was read."""
        code = await asyncio.wait_for(self.process.wait(), TIMEOUT)
        await asyncio.gather(*self._readers)
        return code

    async def kill(self) -> None:
        if self.process.returncode is None:
            self.process.kill()
            await self.process.wait()
        for reader in self._readers:
            reader.cancel()


@pytest.fixture
async def chats() -> AsyncIterator[list[Chat]]:
    """Chat processes started by a test; killed after it."""
    started: list[Chat] = []
    yield started
    for chat in started:
        await chat.kill()


async def chat_with(chats: list[Chat], *args: str, env: dict[str, str] | None = None) -> Chat:
    chat = await Chat.start(*args, env=env)
    chats.append(chat)
    return chat


async def piped(
    chats: list[Chat],
    url: str,
    lines: Sequence[str],
    *options: str,
    env: dict[str, str] | None = None,
) -> tuple[int, str, str]:
    """``printf 'LINES' | vrt chat OPTIONS URL``: exit code, stdout, stderr."""
    chat = await chat_with(chats, *options, url, env=env)
    chat.send(*lines)
    chat.end_input()
    code = await chat.wait()
    return code, chat.stdout, chat.stderr


def agent_lines(output: str) -> list[str]:
    """The agent's text lines, without the ``agent: `` prefix."""
    return [
        line.removeprefix("agent: ") for line in output.splitlines() if line.startswith("agent: ")
    ]


async def reply_chunks(url: str, text: str) -> list[str]:
    """The text chunks the server sends in reply to ``text``, asked by a VrtClient with
    the chat's tools."""
    async with VrtClient(url, tools=demo_tools()) as client:
        await client.send_text(text)
        chunks: list[str] = []
        while True:
            event = await client.next_event(TIMEOUT)
            if isinstance(event, TextReceived):
                chunks.append(event.text)
            elif isinstance(event, TurnChanged) and event.state == "idle" and chunks:
                return chunks


# --- piped input ------------------------------------------------------------------------


async def test_piped_input_prints_the_reply_before_quitting(
    vrt: LiveServer, chats: list[Chat]
) -> None:
    """``printf 'echo hi\\n' | vrt chat URL``: the end of input waits for the reply."""
    code, out, err = await piped(chats, vrt.url, ["echo hi"])
    assert code == 0, err
    assert agent_lines(out) == ["hi"], out
    assert "· idle" in out
    assert "Traceback" not in out + err


async def test_piped_lines_each_get_their_reply(vrt: LiveServer, chats: list[Chat]) -> None:
    """Each piped line goes after the reply to the one before: none interrupts another
    (text sent while the agent responds would, §6.3)."""
    code, out, err = await piped(chats, vrt.url, ["echo one", "echo two", "echo three"])
    assert code == 0, err
    assert agent_lines(out) == ["one", "two", "three"], out
    assert "interrupted" not in out
    assert [a.texts for a in vrt.agents] == [["echo one", "echo two", "echo three"]]


# --- chunks: exactly as sent, one line per turn --------------------------------------------


async def test_scripted_chunks_are_shown_exactly_as_they_concatenate(
    vrt: LiveServer, chats: list[Chat]
) -> None:
    """The chat adds nothing between chunks and keeps a turn's text on one line, even
    when the transcript and the audio notice arrive while the text streams."""
    commands = ["echo hello world", "chunks 3", 'call add {"a": 2, "b": 3}']
    expected = ["".join(await reply_chunks(vrt.url, command)) for command in commands]
    assert all(expected)
    code, out, err = await piped(chats, vrt.url, commands)
    assert code == 0, err
    assert agent_lines(out) == expected, out


async def test_a_chat_models_chunks_read_as_the_model_wrote_them(chats: list[Chat]) -> None:
    """A real model's chunks split words anywhere and carry their own spaces: the chat
    shows their exact concatenation."""
    standin = ChatStandIn()
    await standin.start()
    standin.reply(
        text_reply("Hel", "lo", ", wor", "ld", "! How", " can I ", "help?"),
        text_reply("Sure", ":", " 2 + 3 = 5", "."),
    )
    factory = load_agent("openai-chat", {"model": "test-model", "base_url": standin.url})
    server = VrtServer(factory)
    url = await server.start("127.0.0.1", 0)
    try:
        code, out, err = await piped(chats, url, ["hi", "add 2 and 3"])
    finally:
        await server.close()
        await standin.close()
    assert code == 0, err
    assert agent_lines(out) == ["Hello, world! How can I help?", "Sure: 2 + 3 = 5."], out


# --- tools ----------------------------------------------------------------------------------


async def test_invalid_arguments_are_not_shown_as_running(
    vrt: LiveServer, chats: list[Chat]
) -> None:
    """A call whose arguments do not fit is answered INVALID without running: the chat
    says so, and never "running add(...)" for it."""
    code, out, err = await piped(
        chats, vrt.url, ['call add {"a": "x", "b": 1}', 'call add {"a": 2, "b": 1}']
    )
    assert code == 0, err
    assert re.search(r"⚙ add answered INVALID: .*number", out), out
    assert out.count("⚙ running add") == 1, out
    assert '⚙ running add({"a":2,"b":1})' in out
    assert "⚙ add → 3" in out


# --- the session ends: say why ---------------------------------------------------------------


async def scripted_server(port: int) -> VrtServer:
    server = VrtServer(load_agent("scripted", {}))
    await server.start("127.0.0.1", port)
    return server


async def crash(server: VrtServer) -> None:
    """Stop ``server`` as a crash would: its sockets just go, without a word."""
    for connection in list(server._connections):
        assert connection.transport is not None
        connection.transport.disconnect(graceful=False)
    await server.close()


async def test_a_server_that_shuts_down_is_reported_with_its_reason(chats: list[Chat]) -> None:
    """The server stops gracefully: it ends the session with SERVER_SHUTDOWN (not
    recoverable), so the chat says why and exits 1 instead of "reconnecting…"."""
    port = free_port()
    server = await scripted_server(port)
    chat = await chat_with(chats, f"ws://127.0.0.1:{port}")
    chat.send("echo before")
    await chat.expect(r"agent: before")
    await chat.expect(r"· idle")
    await server.close()
    await chat.expect(r"session failed: SERVER_SHUTDOWN: .+")
    assert await chat.wait() == 1
    assert "reconnecting" not in chat.stdout
    assert "Traceback" not in chat.stdout + chat.stderr


async def test_a_server_restart_is_reported_with_its_reason(chats: list[Chat]) -> None:
    """The server restarts without a word (as after a crash): the chat shows the lost
    connection, then the refused resume (RESUME_FAILED) and what was not delivered, and
    exits 1, instead of "reconnecting…" for ever."""
    port = free_port()
    server = await scripted_server(port)
    chat = await chat_with(chats, f"ws://127.0.0.1:{port}")
    restarted: VrtServer | None = None
    try:
        chat.send("echo before")
        await chat.expect(r"agent: before")
        await chat.expect(r"· idle")
        await crash(server)
        await chat.expect(r"connection lost \(.*\); reconnecting…")
        chat.send("echo in between")
        restarted = await scripted_server(port)
        await chat.expect(r"session failed: RESUME_FAILED: .+")
        await chat.expect(r"the server no longer has this session")
        await chat.expect(r"not delivered: echo in between")
        assert await chat.wait() == 1
    finally:
        if restarted is not None:
            await restarted.close()
    assert "reconnected" not in chat.stdout
    assert "Traceback" not in chat.stdout + chat.stderr


async def test_a_server_that_stays_away_is_given_up(chats: list[Chat]) -> None:
    """--give-up-after: the chat stops retrying at that time and says why."""
    port = free_port()
    server = await scripted_server(port)
    chat = await chat_with(chats, "--give-up-after", "1", f"ws://127.0.0.1:{port}")
    chat.send("echo before")
    await chat.expect(r"agent: before")
    await chat.expect(r"· idle")
    await crash(server)
    await chat.expect(r"connection lost \(.*\); reconnecting…")
    await chat.expect(r"still reconnecting: connection refused")
    await chat.expect(r"session failed: RESUME_TIMEOUT: could not resume the session within 1 s")
    assert await chat.wait() == 1
    assert chat.stdout.count("still reconnecting") == 1  # each new reason once, not each attempt


# --- wss:// ---------------------------------------------------------------------------------


@pytest.fixture
async def tls(tmp_path: Path) -> AsyncIterator[tuple[str, Path]]:
    """A wss:// scripted server with a certificate from a test CA; (its URL, the CA file)."""
    ca = trustme.CA()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1", "localhost").configure_cert(context)
    cafile = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(cafile))
    server = VrtServer(load_agent("scripted", {}), ssl_context=context)
    url = await server.start("127.0.0.1", 0)
    yield url, cafile
    await server.close()


@pytest.fixture
def other_ca(tmp_path: Path) -> dict[str, str]:
    """An environment whose SSL_CERT_FILE is a CA that did not sign the server."""
    other = tmp_path / "other-ca.pem"
    trustme.CA().cert_pem.write_to_path(str(other))
    return {"SSL_CERT_FILE": str(other), "SSL_CERT_DIR": str(tmp_path / "no-such-dir")}


async def test_cafile_trusts_the_servers_ca(
    tls: tuple[str, Path], other_ca: dict[str, str], chats: list[Chat]
) -> None:
    url, cafile = tls
    code, out, err = await piped(
        chats, url, ["echo over tls"], "--cafile", str(cafile), env=other_ca
    )
    assert code == 0, err
    [line] = agent_lines(out)
    assert line.startswith("over"), out


async def test_an_untrusted_certificate_names_what_was_trusted(
    tls: tuple[str, Path], other_ca: dict[str, str], chats: list[Chat], tmp_path: Path
) -> None:
    """Without the CA the handshake fails with one line naming the trusted file."""
    url, _ = tls
    code, _, err = await piped(chats, url, ["echo hi"], env=other_ca)
    assert code == 1
    assert err.count("\n") == 1, err
    assert "certificate was not accepted" in err
    assert f"SSL_CERT_FILE={other_ca['SSL_CERT_FILE']}" in err
    wrong = tmp_path / "wrong.pem"
    trustme.CA().cert_pem.write_to_path(str(wrong))
    code, _, err = await piped(chats, url, ["echo hi"], "--cafile", str(wrong))
    assert code == 1
    assert f"trusted: --cafile {wrong}" in err, err
    assert "None" not in err


async def test_a_cafile_that_cannot_be_used_is_named(
    tls: tuple[str, Path], chats: list[Chat], tmp_path: Path
) -> None:
    url, _ = tls
    missing = tmp_path / "missing.pem"
    code, _, err = await piped(chats, url, [], "--cafile", str(missing))
    assert code == 2
    assert err.strip() == f"vrt chat: --cafile {missing}: No such file or directory"
    code, _, err = await piped(chats, url.replace("wss:", "ws:"), [], "--cafile", str(missing))
    assert code == 2
    assert "wss://" in err


async def test_insecure_skips_verification_and_says_so(
    tls: tuple[str, Path], other_ca: dict[str, str], chats: list[Chat]
) -> None:
    url, _ = tls
    code, out, err = await piped(chats, url, ["echo hi"], "--insecure", env=other_ca)
    assert code == 0, err
    assert agent_lines(out) == ["hi"], out
    assert "--insecure: the server's certificate is not checked" in err
