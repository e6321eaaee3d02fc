"""What one client, hostile or broken, can make the server keep or compute (§10, §11;
docs/limits.md), and the RFC 6455 edge cases real clients meet. One test (at least) per
point of the hardening issue; each fails on the code before its fix.

Memory bounds are asserted as ratios of the documented budget; nothing here asserts a
speed (``python -m load --attack`` measures the bystander's round trips).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import resource
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import trustme

from support import RawClient, StartServer, chunks, eventually, is_idle
from support.processes import free_port
from support.raw_socket import BINARY, CLOSE, CONTINUATION, PING, TEXT, RawSocket, handshake
from vrt.protocol.messages import UNSET, Error, Ready
from vrt.protocol.server import ServerConfig
from vrt.server.websocket import EdgeLimits

pytestmark = pytest.mark.timeout(120)


def hello_frame(**members: Any) -> bytes:
    return json.dumps({"v": 1, "seq": 0, "type": "hello", **members}).encode()


def text_frame(seq: int, text: str) -> bytes:
    return json.dumps({"v": 1, "seq": seq, "type": "text", "text": text}).encode()


async def ready_on(raw: RawSocket, **members: Any) -> dict[str, Any]:
    """Send hello on a raw socket and read until ready."""
    raw.send(TEXT, hello_frame(**members))
    while True:
        frame = await raw.recv()
        assert frame is not None, "the server closed before ready"
        if frame.opcode == TEXT:
            message = json.loads(frame.payload)
            if message["type"] == "ready":
                return dict(message)


# --- 1. clients that stop reading ----------------------------------------------------


class TestClientsThatStopReading:
    async def test_output_beyond_the_write_bound_aborts_and_the_session_resumes_whole(
        self, start: StartServer
    ) -> None:
        """Output for a client that does not read is bounded before it is written: past
        ``max_write_buffer`` the connection is aborted (no close handshake the peer would
        never read), its session parks, and a resume gets every sequenced message it
        missed, kept in the stream (§4.1, §5.4)."""
        server = await start(
            config=UNTHROTTLED,
            edge=EdgeLimits(max_message_bytes=1 << 22, max_write_buffer=256 << 10),
        )
        raw = await RawSocket.connect(server.url)
        ready = await ready_on(raw)
        raw.pause_reading()  # from now on the client reads nothing
        big = "x" * 30_000
        for seq in range(1, 401):  # 12 MB of replies asked for: more than TCP buffers hold
            raw.send(TEXT, text_frame(seq, f"echo {big}"))
        session = server.session(ready["sessionId"])
        await eventually(lambda: session.status == "parked", timeout=20)
        raw.resume_reading()
        assert await raw.eof(), "the connection was not ended"
        client = await RawClient.connect(server.url)
        resumed = await client.hello(sessionId=ready["sessionId"], resumeFrom=0)
        handled = resumed.resumed_from
        assert handled is not UNSET
        assert handled > 0
        texts: list[str] = []
        while texts.count(big) < handled:  # the reply to every echo handled, once
            item = await client.recv(timeout=10)
            texts += chunks([item])
        assert texts.count(big) == handled
        await client.close()

    async def test_a_peer_that_reads_nothing_for_the_write_timeout_is_aborted(
        self, start: StartServer
    ) -> None:
        """Above the high-water mark audio is dropped, and a peer that does not drain
        within ``write_timeout`` is aborted (transport abort); the session parks."""
        server = await start(
            config=UNTHROTTLED,
            edge=EdgeLimits(
                max_message_bytes=1 << 22,
                max_write_buffer=64 << 20,
                high_water=16 << 10,
                write_timeout=0.5,
            ),
        )
        raw = await RawSocket.connect(server.url)
        ready = await ready_on(raw)
        raw.pause_reading()
        for seq in range(1, 81):  # replies far above 16 KiB, and above what TCP buffers hold
            raw.send(TEXT, text_frame(seq, "echo " + "y" * 100_000))
        session = server.session(ready["sessionId"])
        await eventually(lambda: session.status == "parked", timeout=20)
        raw.close()

    async def test_memory_of_clients_that_never_read_is_bounded_by_the_budget(self) -> None:
        """N clients that never read cost at most N × the per-connection budget
        (docs/limits.md: buffered output + kept window + read buffer), measured on a
        ``vrt serve`` process. Before the bound, ten such clients held 448 MB."""
        async with serve_process() as (process, url):
            await asyncio.sleep(0.5)
            before = rss_mb(process.pid)
            sockets = []
            big = "z" * 60_000
            for _ in range(10):
                raw = await RawSocket.connect(url)
                await ready_on(raw)
                raw.pause_reading()
                for seq in range(1, 101):  # 6 MB of replies asked for, never read
                    raw.send(TEXT, text_frame(seq, f"echo {big}"))
                sockets.append(raw)
            peak = before
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                peak = max(peak, rss_mb(process.pid))
                await asyncio.sleep(0.2)
            # docs/limits.md: 4 MiB per connection (1 MiB of output, 2 MiB of kept
            # messages, reads and decoded messages in flight); Python's slack: 1.5 x.
            assert peak - before < 1.5 * 10 * PER_CONNECTION_MB, (before, peak)
            for raw in sockets:
                raw.close()


#: A read budget no test client reaches: these tests are about what is written.
UNTHROTTLED = ServerConfig(
    byte_rate=float(1 << 30),
    byte_burst=float(1 << 30),
    max_unacked=1 << 20,
    max_unacked_bytes=1 << 30,
)

#: The per-connection memory bound documented in docs/limits.md.
PER_CONNECTION_MB = 4.0


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


# --- 2. file handles ------------------------------------------------------------------


class TestFileHandles:
    async def test_connections_beyond_the_cap_are_refused_at_accept(
        self, start: StartServer
    ) -> None:
        """``max_connections`` counts every TCP connection from accept, upgraded or not;
        beyond it a connection gets HTTP 503 and is closed, and the cap frees as
        connections go."""
        server = await start(max_connections=3)
        port = int(server.url.rsplit(":", 1)[1])
        held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(2)]
        client = await RawClient.connect(server.url)  # the third: a session
        await client.hello()
        await eventually(lambda: server.server.connection_cap.open == 3)
        _, writer, status, _ = await handshake(server.url)
        assert status == 503
        writer.close()
        for _, opened in held:
            opened.close()
        await eventually(lambda: server.server.connection_cap.open == 1)
        again = await RawClient.connect(server.url)
        assert isinstance(await again.hello(), Ready)
        await again.close()
        await client.close()

    async def test_a_server_with_few_file_handles_survives_a_connect_flood(self) -> None:
        """With ``ulimit -n 256``, 600 plain TCP connects: the server refuses beyond its
        cap, logs a bounded number of lines (the accept path spun and logged ~10 MB/s
        before), and serves a session afterwards."""
        async with serve_process(open_files=256, stderr=subprocess.PIPE) as (process, url):
            port = int(url.rsplit(":", 1)[1])
            flood = []
            for _ in range(600):
                raw = socket.socket()
                raw.setblocking(False)
                with contextlib.suppress(BlockingIOError):
                    raw.connect(("127.0.0.1", port))
                flood.append(raw)
            await asyncio.sleep(3)
            for raw in flood:
                raw.close()
            await asyncio.sleep(0.5)
            client = await RawClient.connect(url)
            assert isinstance(await client.hello(), Ready)
            await client.close()
            process.send_signal(signal.SIGINT)
            process.send_signal(signal.SIGINT)
            _, err = await asyncio.to_thread(process.communicate, timeout=10)
        lines = err.decode().splitlines()
        assert len(lines) < 20, lines[:20]
        assert any("at the cap of" in line for line in lines), lines


# --- 3. valid messages made expensive: the read budget -----------------------------


class TestReadBudget:
    async def test_reading_a_client_beyond_its_budget_slows_down(self, start: StartServer) -> None:
        """Every frame counts against the connection's read budget; past it the server
        stops reading the connection until the budget refills (§11). 150 pings against a
        burst of 100 at 20 frames/s leave the budget 50 frames short: the next ping is
        read only once it refilled, 2.5 s later (asserted as a lower bound, which a slow
        machine only makes longer); nothing is lost."""
        server = await start(config=ServerConfig(frame_rate=20, frame_burst=100))
        client = await RawClient.connect(server.url)
        await client.hello()
        for _ in range(150):
            await client.send_transient("ping")
        for _ in range(150):
            item = await client.recv(timeout=20)
            assert getattr(item, "message", None).__class__.__name__ == "Pong", item
        began = time.monotonic()
        await client.send_transient("ping")
        item = await client.recv(timeout=20)
        assert getattr(item, "message", None).__class__.__name__ == "Pong", item
        assert time.monotonic() - began >= 1.5
        await client.close()

    async def test_a_flood_far_beyond_the_budget_is_rate_limited(self, start: StartServer) -> None:
        """A client far beyond its budget (more frames in one read than its burst) gets
        RATE_LIMITED, not recoverable, and close 1008 (§11; messages.md)."""
        server = await start(config=ServerConfig(frame_rate=50, frame_burst=10))
        raw = await RawSocket.connect(server.url)
        await ready_on(raw)
        for _ in range(2000):  # one write: many reads' worth of frames
            raw.send(TEXT, b'{"v":1,"seq":0,"type":"ping"}')
        errors = []
        while True:
            frame = await raw.recv(timeout=20)
            assert frame is not None
            if frame.opcode == CLOSE:
                break
            message = json.loads(frame.payload)
            if message["type"] == "error":
                errors.append(message)
        assert frame.close_code == 1008
        assert [(e["code"], e["recoverable"]) for e in errors] == [("RATE_LIMITED", False)]

    async def test_a_client_within_its_budget_is_never_limited(self, start: StartServer) -> None:
        """A resume's resend of a full kept window (1,024 messages) fits the burst."""
        server = await start()
        client = await RawClient.connect(server.url)
        await client.hello()
        for _ in range(1100):
            await client.send_transient("ping")
        for _ in range(1100):
            item = await client.recv(timeout=10)
            assert getattr(item, "message", None).__class__.__name__ == "Pong", item
        await client.close()


class TestJsonValues:
    async def test_a_message_of_too_many_values_is_refused_and_the_session_goes_on(
        self, start: StartServer
    ) -> None:
        """A valid message of 300,000 empty arrays (1 MB: 25 MB of Python objects once
        parsed) is refused before it is parsed, LIMIT_EXCEEDED and recoverable (§11,
        §9.1); the context before it stays and the session answers."""
        server = await start()
        client = await RawClient.connect(server.url)
        await client.hello(context={"doc": "a"})
        await client.send_sequenced("context", context=[[]] * 300_000)
        error = await client.expect_message(Error, timeout=10)
        assert (error.code, error.recoverable) == ("LIMIT_EXCEEDED", True)
        assert "300005 JSON values" in error.message
        await client.text("context?")
        replies = await client.until(is_idle, timeout=10)
        assert json.loads("".join(chunks(replies))) == {"doc": "a"}
        await client.close()


# --- 4. memory within the limits --------------------------------------------------------


class TestSessionMemoryBudget:
    async def test_a_hello_larger_than_the_state_budget_cannot_start(
        self, start: StartServer
    ) -> None:
        """What a session keeps of the client's data (hello.tools + hello.context, as
        JSON) is bounded: beyond ``max_state_bytes``, START_FAILED and close 1011 (§5.1)."""
        server = await start(config=ServerConfig(max_state_bytes=10_000))
        client = await RawClient.connect(server.url)
        await client.send_hello(context=[[]] * 5000)
        error = await client.expect_message(Error)
        assert error.code == "START_FAILED"
        assert "at most 10000" in error.message
        assert (await client.closed())[0] == 1011

    async def test_a_context_beyond_the_budget_is_refused_and_the_previous_one_stays(
        self, start: StartServer
    ) -> None:
        server = await start(config=ServerConfig(max_state_bytes=10_000))
        client = await RawClient.connect(server.url, auto_ack=True)
        await client.hello(context={"doc": "a"})
        await client.send_sequenced("context", context=[[]] * 5000)
        error = await client.expect_message(Error)
        assert (error.code, error.recoverable) == ("LIMIT_EXCEEDED", True)
        await client.text("context?")
        replies = await client.until(is_idle)
        assert json.loads("".join(chunks(replies))) == {"doc": "a"}
        await client.close()

    async def test_an_inflating_context_is_kept_at_its_size(self, start: StartServer) -> None:
        """A context of empty arrays is kept as its JSON, not as 25x its size in Python
        objects (1 MB of them cost 25 MB per session before). 99,000 is as many as the
        bound on JSON values lets through (docs/limits.md)."""
        server = await start()
        client = await RawClient.connect(server.url)
        ready = await client.hello(context=[[]] * 99_000)
        record = server.session(ready.session_id).record
        assert len(record.context_json) < 400_000
        await client.close()

    async def test_the_kept_window_is_bounded_in_bytes(self, start: StartServer) -> None:
        """A client that never acknowledges makes the server keep at most
        ``max_unacked_bytes`` of messages (§4.1, §11)."""
        server = await start(config=ServerConfig(max_unacked_bytes=100_000))
        client = await RawClient.connect(server.url)
        ready = await client.hello()
        for seq in range(1, 21):
            await client.send_sequenced("text", text="echo " + "k" * 20_000)
            await client.until(is_idle)
            del seq
        outgoing = server.session(ready.session_id).outgoing
        assert 0 < outgoing.kept_bytes <= 100_000
        assert outgoing.lost_through > 0
        await client.close()


# --- 5. the hello deadline ---------------------------------------------------------------


class TestHelloDeadline:
    async def test_a_connection_without_hello_is_closed_even_if_it_pings(
        self, start: StartServer
    ) -> None:
        """An upgraded connection that never sends hello is closed (1008) at the hello
        deadline, WebSocket pings or not; it lived 45 s, or for ever with pings, before."""
        server = await start(config=ServerConfig(hello_timeout=0.5))
        raw = await RawSocket.connect(server.url)
        began = time.monotonic()
        while time.monotonic() - began < 10:
            raw.send(PING, b"alive")
            try:
                frame = await raw.recv(timeout=0.2)
            except TimeoutError:
                continue
            assert frame is not None
            if frame.opcode == CLOSE:
                assert frame.close_code == 1008
                return
        raise AssertionError("the connection outlived its hello deadline")

    async def test_connections_before_hello_count_against_the_cap(self, start: StartServer) -> None:
        server = await start(max_connections=2)
        first = await RawSocket.connect(server.url)
        second = await RawSocket.connect(server.url)
        _, writer, status, _ = await handshake(server.url)
        assert status == 503
        writer.close()
        first.close()
        second.close()


# --- 6. parked sessions and --max-sessions ----------------------------------------------


class TestParkedSessions:
    async def test_a_new_session_at_the_limit_evicts_the_longest_parked(
        self, start: StartServer
    ) -> None:
        server = await start(max_sessions=2)
        a = await RawClient.connect(server.url)
        ready_a = await a.hello()
        b = await RawClient.connect(server.url)
        await b.hello()
        a.abort()
        await eventually(lambda: server.session(ready_a.session_id).status == "parked")
        c = await RawClient.connect(server.url)
        assert isinstance(await c.hello(), Ready)  # A's place
        again = await RawClient.connect(server.url)
        await again.send_hello(sessionId=ready_a.session_id)
        assert (await again.expect_message(Error)).code == "RESUME_FAILED"
        for client in (b, c, again):
            await client.close()

    async def test_max_parked_evicts_the_longest_parked(self, start: StartServer) -> None:
        server = await start(max_parked=1)
        a = await RawClient.connect(server.url)
        ready_a = await a.hello()
        b = await RawClient.connect(server.url)
        ready_b = await b.hello()
        a.abort()
        await eventually(lambda: server.session(ready_a.session_id).status == "parked")
        b.abort()
        await eventually(lambda: server.server.session(ready_a.session_id) is None)
        assert server.session(ready_b.session_id).status == "parked"


# --- 7. shutdown -------------------------------------------------------------------------


class TestShutdown:
    async def test_sigterm_lets_the_reply_in_flight_finish_then_says_server_shutdown(
        self,
    ) -> None:
        """SIGTERM: stop accepting, let the turn in flight end, then ``error
        SERVER_SHUTDOWN`` (not recoverable) before close 1001, so the client knows at
        once not to resume here (docs/decisions.md)."""
        async with serve_process() as (process, url):
            client = await RawClient.connect(url, auto_ack=True)
            await client.hello()
            await client.text("speak 1500")
            await client.until(lambda item: is_state_item(item, "speaking"))
            process.send_signal(signal.SIGTERM)
            items = await client.until(is_idle, timeout=10)  # the reply finished
            assert is_idle(items[-1])
            error = await client.expect_message(Error, timeout=10)
            assert (error.code, error.recoverable) == ("SERVER_SHUTDOWN", False)
            assert (await client.closed(timeout=5))[0] == 1001
            assert await asyncio.to_thread(process.wait, 10) == 0

    async def test_a_second_signal_stops_at_once(self) -> None:
        async with serve_process("--drain-timeout", "60") as (process, url):
            client = await RawClient.connect(url, auto_ack=True)
            await client.hello()
            await client.text("speak 20000")
            await client.until(lambda item: is_state_item(item, "speaking"))
            process.send_signal(signal.SIGTERM)
            await asyncio.sleep(0.5)
            process.send_signal(signal.SIGTERM)
            assert await asyncio.to_thread(process.wait, 10) == 0  # not 60 s of drain
            error = await client.expect_message(Error, timeout=5)
            assert error.code == "SERVER_SHUTDOWN"


def is_state_item(item: object, state: str) -> bool:
    message = getattr(item, "message", None)
    return getattr(message, "state", None) == state


@contextlib.asynccontextmanager
async def serve_process(
    *options: str, open_files: int | None = None, stderr: int = subprocess.DEVNULL
) -> AsyncIterator[tuple[subprocess.Popen[bytes], str]]:
    """``vrt serve`` with the scripted agent in a process of its own on a free port, with
    at most ``open_files`` file handles when given."""
    port = free_port()

    def limit() -> None:
        if open_files is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (open_files, open_files))

    command = [sys.executable, "-c", "from vrt.cli import app; app()", "serve"]
    process = subprocess.Popen(
        [*command, "--port", str(port), "--agent", "scripted", *options],
        stdout=subprocess.DEVNULL,
        stderr=stderr,
        preexec_fn=limit,  # noqa: PLW1509 - setrlimit only; the child starts no thread first
    )
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                await asyncio.sleep(0.1)
        yield process, f"ws://127.0.0.1:{port}"
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(10)


# --- RFC 6455 edge cases (9, 11, 12) and TLS logs (10) ------------------------------


class TestWebSocketEdge:
    async def test_an_empty_close_is_echoed_empty(self, start: StartServer) -> None:
        """RFC 6455 §5.5.1: a close frame without a status is answered without one (it
        was echoed with status 0, which no peer may send)."""
        server = await start()
        raw = await RawSocket.connect(server.url)
        raw.send(CLOSE, b"")
        frame = await raw.until_close()
        assert frame.payload == b""

    async def test_a_close_code_no_peer_may_send_is_answered_1002(self, start: StartServer) -> None:
        server = await start()
        raw = await RawSocket.connect(server.url)
        raw.send(CLOSE, (1005).to_bytes(2, "big"))
        assert (await raw.until_close()).close_code == 1002

    async def test_a_close_code_is_echoed(self, start: StartServer) -> None:
        server = await start()
        raw = await RawSocket.connect(server.url)
        raw.send(CLOSE, (4321).to_bytes(2, "big") + b"bye")
        assert (await raw.until_close()).close_code == 4321

    async def test_fragments_count_for_the_heartbeat(self, start: StartServer) -> None:
        """§4.4: a frame of any kind counts, continuation fragments included: a client
        sending a fragment every 250 ms is not closed at a 1 s heartbeat timeout."""
        server = await start(config=ServerConfig(heartbeat_timeout=1.0))
        raw = await RawSocket.connect(server.url)
        await ready_on(raw)
        message = text_frame(1, "echo fragmented")
        pieces = [message[i : i + 4] for i in range(0, len(message), 4)]
        raw.send(TEXT, pieces[0], fin=False)
        for piece in pieces[1:-1]:
            await asyncio.sleep(0.25)
            raw.send(CONTINUATION, piece, fin=False)
        raw.send(CONTINUATION, pieces[-1])
        replies = []
        while "fragmented" not in replies:
            frame = await raw.recv()
            assert frame is not None
            assert frame.opcode != CLOSE, "closed mid-message"
            if frame.opcode == TEXT:
                message_in = json.loads(frame.payload)
                replies.append(message_in.get("text"))

    @pytest.mark.parametrize("rsv", [4, 2, 1])
    async def test_reserved_bits_fail_the_connection(self, start: StartServer, rsv: int) -> None:
        """RFC 6455 §5.2: with no extension agreed, a frame with RSV1, 2 or 3 set fails
        the connection (1002)."""
        server = await start()
        raw = await RawSocket.connect(server.url)
        raw.send(TEXT, hello_frame(), rsv=rsv)
        assert (await raw.until_close()).close_code == 1002

    async def test_a_new_message_inside_a_fragmented_one_fails_the_connection(
        self, start: StartServer
    ) -> None:
        """RFC 6455 §5.4: the fragments of one message are not interleaved with another."""
        server = await start()
        raw = await RawSocket.connect(server.url)
        raw.send(TEXT, b'{"v":1,', fin=False)
        raw.send(BINARY, b"\x01\x00\x00\x00\x00")
        assert (await raw.until_close()).close_code == 1002

    @pytest.mark.parametrize("version", ["8", "7", "12", ""])
    async def test_a_websocket_version_other_than_13_gets_426(
        self, start: StartServer, version: str
    ) -> None:
        """RFC 6455 §4.4: 426 with ``Sec-WebSocket-Version: 13``."""
        server = await start()
        _, writer, status, headers = await handshake(server.url, version=version)
        writer.close()
        assert status == 426
        assert headers.get("sec-websocket-version") == "13"

    async def test_a_failed_tls_handshake_logs_no_traceback(
        self, start: StartServer, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A client that fails the TLS handshake (plain text, an untrusted certificate)
        costs at most a debug line (each printed a ~50-line traceback before)."""
        ca = trustme.CA()
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert("127.0.0.1").configure_cert(context)
        server = await start(ssl_context=context)
        port = int(server.url.rsplit(":", 1)[1])
        with caplog.at_level(logging.DEBUG):
            for _ in range(3):
                _, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
                await writer.drain()
                writer.close()
                with pytest.raises(ssl.SSLError):
                    await asyncio.open_connection(
                        "127.0.0.1", port, ssl=ssl.create_default_context()
                    )
            await asyncio.sleep(0.3)
        loud = [r for r in caplog.records if r.levelno >= logging.INFO and r.name != "vrt.server"]
        assert loud == [], [r.getMessage() for r in loud]
        assert not any(r.exc_info for r in caplog.records)
