"""VrtClient under faults: TLS trust (§2.1), giving up a resume, what was never
delivered (§5.4), a stopped client, and the bound on what the server may send (§11).

Each test drives a real :class:`VrtClient` against a real :class:`VrtServer`, most
through the recording proxy of ``conftest.py``. A server "restart" is the proxy
pointed at a second server that has never heard of the session: its answer to the
resume is ``RESUME_FAILED``, as a restarted process's would be, with no clock
involved.
"""

from __future__ import annotations

import asyncio
import ssl
import struct
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import pytest
import trustme

from vrt.agents import Agent, SessionInfo, load_agent
from vrt.client import (
    DEFAULT_GIVE_UP_AFTER,
    DEFAULT_MAX_MESSAGE_BYTES,
    Connected,
    Disconnected,
    RunTool,
    SessionClosed,
    SessionFailed,
    TextReceived,
    ToolFinished,
    TurnChanged,
    Undelivered,
    VrtClient,
    VrtError,
)
from vrt.client.tls import cafile_context
from vrt.protocol.client import ConnectionLost
from vrt.protocol.errors import LocalProtocolError
from vrt.protocol.messages import ContextUpdate, UserText
from vrt.server import VrtServer

if TYPE_CHECKING:
    from conftest import (
        Action,
        ClientFactory,
        Eventually,
        Frame,
        Link,
        LiveServer,
        Proxy,
        ProxyFactory,
        Recorder,
        ServerFactory,
        ToolKit,
    )
    from vrt.client import Event

OP_CLOSE = 8


def is_idle(event: Event) -> bool:
    return isinstance(event, TurnChanged) and event.state == "idle"


def resumed(event: Event) -> bool:
    return isinstance(event, Connected) and event.resumed


def close_codes(proxy: Proxy) -> list[int]:
    """The close codes the client sent, in order."""
    return [
        struct.unpack("!H", f.payload[:2])[0]
        for f in proxy.frames
        if f.direction == "c2s" and f.opcode == OP_CLOSE and len(f.payload) >= 2
    ]


def restart(proxy: Proxy, server: LiveServer) -> None:
    """From now on the proxy leads to ``server``: a restarted server, to the client."""
    parts = urlsplit(server.url)
    assert parts.hostname is not None
    assert parts.port is not None
    proxy.target = (parts.hostname, parts.port)


# --- §2.1 wss:// -------------------------------------------------------------------------


@pytest.fixture
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
async def tls_server(ca: trustme.CA) -> AsyncIterator[VrtServer]:
    """VrtServer (scripted agent) on wss://127.0.0.1, its certificate issued by ``ca``."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1", "localhost").configure_cert(context)
    server = VrtServer(load_agent("scripted", {}), ssl_context=context)
    await server.start("127.0.0.1", 0)
    yield server
    await server.close()


async def say(client: VrtClient, text: str, recorder: Recorder | None = None) -> str:
    """Send ``text``; the reply's chunks, joined. Events come from ``recorder`` when
    one reads the client's events, else from the client."""
    await client.send_text(text)
    chunks: list[str] = []
    while True:
        if recorder is not None:
            event = await recorder.next(lambda e: True, what="any event")
        else:
            event = await client.next_event(5)
        if isinstance(event, TextReceived):
            chunks.append(event.text)
        elif is_idle(event) and chunks:
            return "".join(chunks)


class TestTls:
    async def test_wss_trusts_the_system_store_and_ssl_cert_file(
        self, tls_server: VrtServer, ca: trustme.CA, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """§2.1: "Deployments other than local development MUST use TLS (wss:)". A wss://
        URL needs no code: the client verifies the server against the system trust
        store, which SSL_CERT_FILE replaces, as OpenSSL defines it."""
        ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
        monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "ca.pem"))
        monkeypatch.delenv("SSL_CERT_DIR", raising=False)
        assert tls_server.url.startswith("wss://")
        async with VrtClient(tls_server.url) as client:
            assert "over" in await say(client, "echo over tls")

    async def test_wss_refuses_a_server_the_trust_store_does_not_vouch_for(
        self, tls_server: VrtServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The same client with another CA in SSL_CERT_FILE: the handshake fails, and the
        error says the certificate was not accepted and which file was trusted."""
        other = tmp_path / "other-ca.pem"
        trustme.CA().cert_pem.write_to_path(str(other))
        monkeypatch.setenv("SSL_CERT_FILE", str(other))
        monkeypatch.delenv("SSL_CERT_DIR", raising=False)
        client = VrtClient(tls_server.url)
        with pytest.raises(VrtError) as refused:
            await client.connect()
        assert refused.value.code == "CONNECT_FAILED"
        assert isinstance(refused.value.__cause__, ssl.SSLCertVerificationError)
        assert "certificate was not accepted" in refused.value.message
        assert f"SSL_CERT_FILE={other}" in refused.value.message
        await client.close()

    async def test_an_explicit_context_is_used(
        self, tls_server: VrtServer, ca: trustme.CA, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
        monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "nothing-here.pem"))
        async with VrtClient(tls_server.url, ssl_context=cafile_context(tmp_path / "ca.pem")):
            pass

    async def test_wss_to_a_plain_server_fails_at_once_saying_so(self, vrt: LiveServer) -> None:
        """A plain ws:// server waits for an HTTP request and never answers a TLS
        handshake: connect() asks it in plain HTTP once the handshake has waited
        PROBE_AFTER, and fails saying what to use, not after its open timeout (60 s
        here: the test's own timeout would end it first) with "no answer in time"."""
        secure = vrt.url.replace("ws://", "wss://")
        client = VrtClient(secure, open_timeout=60.0)
        with pytest.raises(VrtError) as refused:
            await client.connect()
        assert refused.value.code == "CONNECT_FAILED"
        assert "TLS failed: the server answers in plain HTTP, not TLS" in refused.value.message
        assert f"try {vrt.url}" in refused.value.message
        await client.close()

    async def test_a_slow_tls_server_that_answers_plain_http_too_is_not_given_up(
        self, tls_server: VrtServer, ca: trustme.CA, tmp_path: Path
    ) -> None:
        """A TLS endpoint may answer a plain HTTP request in plain HTTP (nginx does,
        with a 400), and over a slow link its handshake outlasts PROBE_AFTER: the plain
        answer must not end a handshake that is merely slow. Here 250 ms each way, for
        the handshake and the plain question alike, as a real link would be."""
        latency = 0.25
        upstream = urlsplit(tls_server.url).port

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            while data := await src.read(65536):
                await asyncio.sleep(latency)
                dst.write(data)
                await dst.drain()
            dst.close()

        async def endpoint(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            first = await reader.read(1)
            if first != b"\x16":  # not a TLS record: answer as nginx does on its TLS port
                await reader.read(65536)
                await asyncio.sleep(2 * latency)
                writer.write(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
                await writer.drain()
                writer.close()
                return
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", upstream)
            await asyncio.sleep(latency)
            up_writer.write(first)
            await asyncio.gather(
                pump(reader, up_writer), pump(up_reader, writer), return_exceptions=True
            )

        slow = await asyncio.start_server(endpoint, "127.0.0.1", 0)
        port = slow.sockets[0].getsockname()[1]
        ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
        client = VrtClient(
            f"wss://127.0.0.1:{port}",
            ssl_context=cafile_context(tmp_path / "ca.pem"),
            open_timeout=30.0,
        )
        try:
            connected = await client.connect()
            assert connected.session_id
        finally:
            await client.close()
            slow.close()

    def test_a_context_with_ws_is_refused(self) -> None:
        with pytest.raises(ValueError, match="wss://"):
            VrtClient("ws://127.0.0.1:1", ssl_context=ssl.create_default_context())

    def test_cafile_problems_name_the_file(self, tmp_path: Path) -> None:
        with pytest.raises(ValueError, match=r"missing\.pem"):
            cafile_context(tmp_path / "missing.pem")
        junk = tmp_path / "junk.pem"
        junk.write_text("not a certificate\n")
        with pytest.raises(ValueError, match=r"junk\.pem: not a PEM file"):
            cafile_context(junk)


# --- giving up a resume ---------------------------------------------------------------


class TestGiveUp:
    def test_the_default_is_documented(self) -> None:
        assert DEFAULT_GIVE_UP_AFTER == 60.0
        assert VrtClient("ws://127.0.0.1:1").give_up_after == DEFAULT_GIVE_UP_AFTER
        with pytest.raises(ValueError, match="give_up_after"):
            VrtClient("ws://127.0.0.1:1", give_up_after=0)

    async def test_gives_up_when_the_server_stays_away(
        self, vrt: LiveServer, make_proxy: ProxyFactory, make_client: ClientFactory
    ) -> None:
        """The network stays down: retries stop at give_up_after with SessionFailed
        (RESUME_TIMEOUT) then SessionClosed, and no attempt follows."""
        proxy = await make_proxy(vrt.url)
        client, recorder = make_client(proxy.url, give_up_after=0.5)
        await client.connect()
        proxy.accepting = False
        proxy.cut()
        failed = await recorder.next_of(SessionFailed)
        assert failed.code == "RESUME_TIMEOUT"
        assert "0.5 s" in failed.message
        closed = await recorder.next_of(SessionClosed)
        assert "gave up" in closed.reason or "0.5 s" in closed.reason
        attempts = proxy.refused
        assert attempts >= 1
        retries = [e for e in recorder.events if isinstance(e, Disconnected)]
        assert all(e.resuming for e in retries)
        assert [e.attempt for e in retries] == list(range(len(retries)))
        await asyncio.sleep(0.3)
        assert proxy.refused == attempts  # it really stopped
        with pytest.raises(LocalProtocolError, match="ended"):
            await client.send_text("echo too late")

    async def test_an_attempt_that_never_gets_ready_is_abandoned(
        self, vrt: LiveServer, make_proxy: ProxyFactory, make_client: ClientFactory
    ) -> None:
        """The server accepts the connection and never answers the resuming hello: the
        attempt is abandoned at the give-up time, not at the heartbeat's (2.5 pings)."""
        proxy = await make_proxy(vrt.url)
        client, recorder = make_client(proxy.url, give_up_after=0.5, ping_interval=60)
        await client.connect()
        proxy.hold_new_links = True  # the server's frames never reach the client
        proxy.cut()
        failed = await recorder.next_of(SessionFailed)
        assert failed.code == "RESUME_TIMEOUT"
        assert len(proxy.links) >= 2
        await recorder.next_of(SessionClosed)


class TestOpening:
    """The first connection dies before its ``ready``: no session exists to resume,
    so the client opens one with a fresh ``hello``, within ``give_up_after``."""

    async def test_a_first_connection_lost_before_ready_is_opened_again(
        self, vrt: LiveServer, make_proxy: ProxyFactory, make_client: ClientFactory
    ) -> None:
        proxy = await make_proxy(vrt.url)
        cut = [False]

        def lose_the_first_ready(frame: Frame, link: Link) -> Action:
            del link
            if frame.direction == "s2c" and frame.type == "ready" and not cut[0]:
                cut[0] = True
                return "drop+cut"
            return "forward"

        proxy.hook = lose_the_first_ready
        client, recorder = make_client(proxy.url, give_up_after=5)
        connected = await client.connect()
        assert not connected.resumed
        hellos = [f.message for f in proxy.frames if f.type == "hello"]
        assert len(hellos) == 2
        assert all(h is not None and "resume" not in h for h in hellos)  # §5.1: fresh
        retries = [e for e in recorder.events if isinstance(e, Disconnected)]
        assert len(retries) == 1
        assert retries[0].resuming
        assert await say(client, "echo after a second hello", recorder) == ("after a second hello")
        # The core's verdict (ConnectionLost) is the driver's: the application is told
        # Disconnected.
        assert not [e for e in recorder.events if isinstance(e, ConnectionLost)]

    async def test_opening_gives_up_after_give_up_after(
        self, vrt: LiveServer, make_proxy: ProxyFactory, make_client: ClientFactory
    ) -> None:
        """The server's frames never arrive: connect() raises CONNECT_FAILED at the
        give-up time, naming the attempts, and nothing follows."""
        proxy = await make_proxy(vrt.url)
        proxy.hold_new_links = True
        client, recorder = make_client(proxy.url, give_up_after=0.6, ping_interval=0.1)
        with pytest.raises(VrtError) as raised:
            await client.connect()
        assert raised.value.code == "CONNECT_FAILED"
        assert "could not open the session within 0.6 s" in raised.value.message
        assert not any(isinstance(e, SessionFailed) for e in recorder.events)
        links = len(proxy.links)
        assert links >= 2
        await asyncio.sleep(0.3)
        assert len(proxy.links) == links  # it really stopped

    async def test_a_refused_hello_is_not_sent_again(
        self, make_proxy: ProxyFactory, make_client: ClientFactory
    ) -> None:
        """A hello the server refuses (START_FAILED, not recoverable, §9.2) ends
        connect() at once: asking again would be refused again."""

        def broken(info: SessionInfo) -> Agent:
            raise RuntimeError(f"no agent for {info.principal}")

        server = VrtServer(broken)
        await server.start("127.0.0.1", 0)
        try:
            proxy = await make_proxy(server.url)
            client, _ = make_client(proxy.url, give_up_after=5)
            with pytest.raises(VrtError) as raised:
                await client.connect()
            assert raised.value.code == "START_FAILED"
            assert [f.type for f in proxy.frames].count("hello") == 1
        finally:
            await server.close()


# --- §5.4 what was never delivered ----------------------------------------------------------


def drop_client_messages(flag: list[bool]) -> Any:
    """A hook dropping the client's sequenced messages while ``flag[0]`` is true."""

    def hook(frame: Frame, link: Link) -> Action:
        del link
        if flag[0] and frame.direction == "c2s" and frame.sequenced:
            return "drop"
        return "forward"

    return hook


class TestUndelivered:
    async def test_resume_failed_reports_what_was_never_delivered(
        self,
        vrt: LiveServer,
        make_server: ServerFactory,
        make_proxy: ProxyFactory,
        make_client: ClientFactory,
        until: Eventually,
    ) -> None:
        """§5.4: after RESUME_FAILED the client MUST NOT resend old messages into this or
        any other session, and it surfaces them: an Undelivered event names each one,
        whether it left the client, and the application resends into a new session."""
        proxy = await make_proxy(vrt.url)
        dropping = [False]
        proxy.hook = drop_client_messages(dropping)
        client, recorder = make_client(proxy.url)
        await client.connect()
        assert await say(client, "echo delivered", recorder)
        await until(lambda: client.core.outgoing.unacked == 0, "its ack")
        dropping[0] = True
        await client.send_text("echo lost on the way")  # written, never read by the server
        await until(lambda: any(f.dropped for f in proxy.frames), "the text dropped")
        proxy.accepting = False  # the network goes down ...
        proxy.cut()
        await recorder.next(lambda e: isinstance(e, Disconnected), what="Disconnected")
        await client.send_text("echo typed while offline")
        await client.update_context({"doc": "b"})
        restarted = await make_server()
        restart(proxy, restarted)
        dropping[0] = False
        proxy.accepting = True  # ... and comes back to a server without the session

        failed = await recorder.next_of(SessionFailed)
        assert failed.code == "RESUME_FAILED"
        report = await recorder.next_of(Undelivered)
        await recorder.next_of(SessionClosed)
        assert isinstance(recorder.events[-1], SessionClosed)
        assert recorder.events.index(failed) < recorder.events.index(report)

        assert [(m.type, m.sent) for m in report.messages] == [
            ("text", True),
            ("text", False),
            ("context", False),
        ]
        assert report.messages[0].message == UserText(text="echo lost on the way")
        assert report.messages[2].message == ContextUpdate(context={"doc": "b"})
        assert report.texts == ("echo lost on the way", "echo typed while offline")
        assert client.undelivered == report.messages
        # Nothing old went to the new server: its connection saw a hello, and no more.
        last = len(proxy.links) - 1
        assert [f.type for f in proxy.messages("c2s", link=last)] == ["hello"]
        assert restarted.agents == []

        # The application decides: it resends the texts in a new session, as new messages.
        async with VrtClient(restarted.url) as fresh:
            for text in report.texts:
                assert await say(fresh, text)
            assert restarted.agent(fresh.session_id).texts == list(report.texts)

    async def test_messages_the_server_handled_are_not_reported(
        self,
        vrt: LiveServer,
        make_server: ServerFactory,
        make_proxy: ProxyFactory,
        make_client: ClientFactory,
        until: Eventually,
    ) -> None:
        """A message the server handled but never acknowledged is delivered: a resumed
        ready's resumedFrom says so (§5.4). It is not reported when a later resume fails."""
        proxy = await make_proxy(vrt.url)

        def no_acks(frame: Frame, link: Link) -> Action:
            del link
            return "drop" if frame.direction == "s2c" and frame.type == "ack" else "forward"

        proxy.hook = no_acks
        client, recorder = make_client(proxy.url)
        await client.connect()
        assert await say(client, "echo handled", recorder)
        assert client.core.outgoing.unacked == 1  # kept: its ack never came
        proxy.cut()
        await recorder.next(resumed)  # resumedFrom 1: the server has it
        proxy.accepting = False
        proxy.cut()
        await recorder.next(lambda e: isinstance(e, Disconnected), what="Disconnected")
        await client.send_text("echo offline")
        restart(proxy, await make_server())
        proxy.accepting = True
        report = await recorder.next_of(Undelivered)
        assert report.texts == ("echo offline",)

    async def test_close_by_the_application_reports_nothing(
        self, vrt: LiveServer, make_proxy: ProxyFactory, make_client: ClientFactory
    ) -> None:
        proxy = await make_proxy(vrt.url)
        client, recorder = make_client(proxy.url)
        await client.connect()
        proxy.accepting = False
        proxy.cut()
        await recorder.next(lambda e: isinstance(e, Disconnected), what="Disconnected")
        await client.send_text("echo never mind")
        await client.close()
        await recorder.next_of(SessionClosed)
        assert recorder.of(Undelivered) == []


# --- a stopped client --------------------------------------------------------------------


class TestStopped:
    async def test_connect_after_close_says_the_client_stopped(self, vrt_url: str) -> None:
        client = VrtClient(vrt_url)
        await client.connect()
        await client.close()
        with pytest.raises(RuntimeError) as stopped:
            await client.connect()
        message = str(stopped.value)
        assert "already connected" not in message
        assert "stopped (closed by the application)" in message
        assert "new VrtClient" in message

    async def test_connect_after_a_failed_session_names_the_failure(
        self,
        vrt: LiveServer,
        make_server: ServerFactory,
        make_proxy: ProxyFactory,
        make_client: ClientFactory,
    ) -> None:
        proxy = await make_proxy(vrt.url)
        client, recorder = make_client(proxy.url)
        await client.connect()
        restart(proxy, await make_server())
        proxy.cut()
        await recorder.next_of(SessionClosed)
        with pytest.raises(RuntimeError, match="RESUME_FAILED"):
            await client.connect()

    async def test_connect_twice(self, vrt_url: str) -> None:
        client = VrtClient(vrt_url)
        await client.connect()
        try:
            with pytest.raises(RuntimeError, match="already called"):
                await client.connect()
        finally:
            await client.close()

    async def test_connect_after_close_without_connecting(self) -> None:
        client = VrtClient("ws://127.0.0.1:1")
        await client.close()
        with pytest.raises(RuntimeError, match="stopped"):
            await client.connect()


# --- §11 the size of what the server sends -----------------------------------------------


def text_frame_header(size: int) -> bytes:
    """The header of an unmasked, final text frame of ``size`` bytes."""
    if size < 126:
        return struct.pack("!BB", 0x81, size)
    if size < 1 << 16:
        return struct.pack("!BBH", 0x81, 126, size)
    return struct.pack("!BBQ", 0x81, 127, size)


def pong_of(size: int) -> bytes:
    """A valid ``pong`` (transient, §4.4) padded with an unknown member to ``size`` bytes."""
    head, tail = b'{"v":1,"seq":0,"type":"pong","pad":"', b'"}'
    return head + b"x" * (size - len(head) - len(tail)) + tail


class TestMessageSize:
    def test_the_default_bound(self) -> None:
        assert DEFAULT_MAX_MESSAGE_BYTES == 4 << 20
        assert VrtClient("ws://127.0.0.1:1").max_message_bytes == DEFAULT_MAX_MESSAGE_BYTES
        with pytest.raises(ValueError, match="max_message_bytes"):
            VrtClient("ws://127.0.0.1:1", max_message_bytes=10)

    async def test_a_huge_message_is_refused_from_its_header(
        self, vrt: LiveServer, make_proxy: ProxyFactory, make_client: ClientFactory
    ) -> None:
        """A frame announcing 200 MiB: the client refuses it before reading any of it
        (nothing of it is ever sent here), closes with 1009 and fails the session
        (LIMIT_EXCEEDED): memory stays at the bound, whatever the server announces."""
        proxy = await make_proxy(vrt.url)
        client, recorder = make_client(proxy.url)
        await client.connect()
        link = proxy.live
        assert link is not None
        link.client_writer.write(text_frame_header(200 << 20))
        failed = await recorder.next_of(SessionFailed)
        assert failed.code == "LIMIT_EXCEEDED"
        assert str(200 << 20) in failed.message
        assert str(DEFAULT_MAX_MESSAGE_BYTES) in failed.message
        await recorder.next_of(SessionClosed)
        assert close_codes(proxy) == [1009]
        assert len(proxy.links) == 1  # a resume would only be sent the same again

    async def test_the_bound_is_exact(
        self, vrt: LiveServer, make_proxy: ProxyFactory, make_client: ClientFactory
    ) -> None:
        """max_message_bytes is accepted; one byte more is not."""
        bound = 64 << 10
        proxy = await make_proxy(vrt.url)
        client, recorder = make_client(proxy.url, max_message_bytes=bound)
        await client.connect()
        link = proxy.live
        assert link is not None
        payload = pong_of(bound)
        link.client_writer.write(text_frame_header(len(payload)) + payload)
        assert await say(client, "echo still here", recorder)
        assert recorder.of(SessionFailed) == []
        payload = pong_of(bound + 1)
        link.client_writer.write(text_frame_header(len(payload)) + payload)
        failed = await recorder.next_of(SessionFailed)
        assert failed.code == "LIMIT_EXCEEDED"
        assert close_codes(proxy) == [1009]


# --- tools, as the application sees them ---------------------------------------------------


async def test_invalid_arguments_are_never_shown_as_running(
    vrt: LiveServer, make_client: ClientFactory, kit: ToolKit
) -> None:
    """§7.1: arguments that do not fit are answered INVALID without running the tool;
    the application sees ToolFinished(INVALID), never RunTool, for that call."""
    client, recorder = make_client(vrt.url, tools=kit.tools)
    await client.connect()
    await client.send_text('call add {"a": "x", "b": 1}')
    finished = await recorder.next_of(ToolFinished)
    assert (finished.name, finished.ok, finished.code) == ("add", False, "INVALID")
    assert finished.message
    assert recorder.of(RunTool) == []
    assert kit.started == []
    await client.send_text('call add {"a": 2, "b": 1}')
    run = await recorder.next_of(RunTool)
    finished = await recorder.next_of(ToolFinished)
    assert (finished.call_id, finished.ok, finished.output) == (run.call_id, True, 3)


def test_the_events_the_driver_adds_are_keyword_only() -> None:
    """The driver's events are frozen, keyword-only structs (as the session's are)."""
    for kind in (Disconnected, SessionClosed, ToolFinished, Undelivered):
        with pytest.raises(TypeError):
            kind("positional")  # type: ignore[call-arg, arg-type]
    event = SessionClosed(reason="r")
    with pytest.raises(AttributeError):
        event.reason = "other"  # type: ignore[misc]
