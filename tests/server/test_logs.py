"""Logs (vrt.logs, docs/operations.md#logs): one JSON object per line that carries the
session's ids and never a credential or a message's text; client faults at INFO, never
ERROR; a client cannot flood the log."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from websockets.sync.client import connect

from support import StartServer, is_idle
from support.processes import free_port, stop, vrt_command
from support.raw_client import RawClient
from support.raw_socket import handshake
from vrt.agents import AgentSession, UserTextReceived
from vrt.logs import JsonFormatter, TextFormatter, configure
from vrt.protocol.messages import PCM16_24K
from vrt.server import TokenAuthenticator

SECRET = "s3cret-token"
agent_log = logging.getLogger("vrt.agents.logging_test")


class LoggingAgent:
    """Logs from its own task in the middle of each turn."""

    input_formats = (PCM16_24K,)
    output_formats = (PCM16_24K,)

    async def run(self, session: AgentSession) -> None:
        async for event in session.events():
            if isinstance(event, UserTextReceived):
                turn = session.begin_turn()
                agent_log.info("thinking about a message of %d characters", len(event.text))
                turn.text("ok")
                turn.end()


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    """The root logger configured as vrt serve does, into a buffer; restored after."""
    root = logging.getLogger()
    saved = root.handlers[:], root.level, logging.getLogger("picows").level
    stream = io.StringIO()
    configure("info", "json", stream)
    try:
        yield stream
    finally:
        root.handlers[:], root.level = saved[0], saved[1]
        logging.getLogger("picows").setLevel(saved[2])


def lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


async def test_json_lines_carry_the_session_turn_epoch_and_principal(
    start: StartServer, captured: io.StringIO
) -> None:
    running = await start(
        agent_factory=lambda info: LoggingAgent(),
        authenticator=TokenAuthenticator([("alice", SECRET)]),
    )
    client = await RawClient.connect(running.url)
    ready = await client.hello(auth=SECRET)
    await client.text("my private words")
    await client.until(is_idle)
    await client.close()
    events = lines(captured)
    assert all({"time", "level", "logger", "message"} <= event.keys() for event in events)
    opened = next(e for e in events if e["message"].endswith("opened"))
    assert (opened["session"], opened["principal"], opened["level"]) == (
        ready.session_id,
        "alice",
        "info",
    )
    thinking = next(e for e in events if e["logger"] == "vrt.agents.logging_test")
    assert thinking["session"] == ready.session_id
    assert thinking["turn"].startswith("t_")
    assert thinking["epoch"] == 1
    assert thinking["principal"] == "alice"
    text = captured.getvalue()
    assert SECRET not in text
    assert "private words" not in text


async def test_a_client_protocol_error_is_not_logged_as_an_error(
    start: StartServer, captured: io.StringIO
) -> None:
    """picows logs an invalid frame at ERROR; it is the client's fault: INFO."""
    logging.getLogger("picows").setLevel(logging.INFO)
    running = await start()
    reader, writer, status, _ = await handshake(running.url)
    assert status == 101
    writer.write(b"\x81\x05hello")  # a client frame without a mask (RFC 6455 §5.1)
    await writer.drain()
    await asyncio.wait_for(reader.read(), 5)
    writer.close()
    events = lines(captured)
    parser = [e for e in events if e["logger"].startswith("picows")]
    assert parser, events
    assert all(e["level"] in ("info", "debug") for e in parser), parser


def test_text_lines_show_the_ids_after_the_message() -> None:
    record = logging.LogRecord("vrt.server", logging.INFO, __file__, 1, "session opened", (), None)
    record.session, record.turn, record.epoch, record.principal = "s_1", None, None, "bob"
    line = TextFormatter().format(record)
    assert line.endswith("INFO vrt.server: session opened [session=s_1 principal=bob]")
    assert json.loads(JsonFormatter().format(record))["principal"] == "bob"


def test_vrt_serve_logs_json_lines_only() -> None:
    """The command as deployed: every line on standard error is one JSON object."""
    port = free_port()
    process = subprocess.Popen(
        [*vrt_command(), "serve", "--port", str(port), "--log-format", "json",
         "--auth-token", f"carol:{SECRET}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        assert "listening on" in process.stdout.readline()
        with connect(f"ws://127.0.0.1:{port}") as ws:
            ws.send(f'{{"v":1,"seq":0,"type":"hello","auth":"{SECRET}"}}')
            assert json.loads(ws.recv(timeout=10))["type"] == "ready"
        with connect(f"ws://127.0.0.1:{port}") as ws:
            ws.send('{"v":1,"seq":0,"type":"hello","auth":"wrong"}')
            assert json.loads(ws.recv(timeout=10))["code"] == "UNAUTHORIZED"
    finally:
        stop(process)
    assert process.stderr is not None
    events = [json.loads(line) for line in process.stderr.read().splitlines()]
    opened = [e for e in events if e["message"].endswith("opened")]
    assert len(opened) == 1
    assert opened[0]["principal"] == "carol"
    assert opened[0]["session"].startswith("s_")
    assert not any(e["level"] == "error" for e in events)
    assert SECRET not in json.dumps(events)
    assert "wrong" not in json.dumps(events)
