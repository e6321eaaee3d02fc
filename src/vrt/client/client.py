"""The asyncio vRT client: one session across connections, with automatic resume.

    async with VrtClient("ws://127.0.0.1:8765", tools=[add]) as client:
        await client.send_text("echo hello")
        async for event in client.events():
            ...

The protocol itself lives in :class:`vrt.protocol.client.ClientSession` (sans I/O);
this module moves bytes between it and a WebSocket, runs the tools it asks for, and
reconnects after a lost connection with exponential backoff and jitter (§5.1).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any, NamedTuple, TypeAlias

import websockets
from websockets.asyncio.client import ClientConnection, connect

from ..protocol.client import (
    CancelTool,
    ClientEvent,
    ClientSession,
    ClientState,
    Connected,
    RunTool,
    SessionFailed,
)
from ..protocol.messages import UNSET, Format, InterruptReason, UnsetType
from ..protocol.outputs import Close, CloseCode, SendBinary, SendText
from .tools import ClientTool, ToolContext, ToolError

__all__ = ["Disconnected", "Event", "SessionClosed", "VrtClient", "VrtError"]

log = logging.getLogger("vrt.client")


class _NoFrameDumps(logging.Filter):
    """websockets logs every frame at DEBUG; hello carries the credential and the
    session id (§5.3, §10), so frame contents are never logged."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.msg
        return not (isinstance(message, str) and message[:2] in ("> ", "< "))


_WIRE_LOG = logging.getLogger("vrt.client.websocket")
_WIRE_LOG.addFilter(_NoFrameDumps())

#: How long a clean close waits for the server's close frame.
CLOSE_TIMEOUT = 2.0
#: How long closing a connection found dead waits before dropping it.
DEAD_CLOSE_TIMEOUT = 0.1


class Disconnected(NamedTuple):
    """The connection ended; ``resuming`` tells whether the client will resume."""

    code: int | None
    reason: str
    resuming: bool


class SessionClosed(NamedTuple):
    """The client stopped: closed by the application, or the session failed."""

    reason: str


Event: TypeAlias = ClientEvent | Disconnected | SessionClosed

CredentialHook: TypeAlias = Callable[[], Awaitable[str | dict[str, Any] | None]]


class VrtError(Exception):
    """The session could not be opened or cannot continue."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class VrtClient:
    """A vRT client session.

    :param url: ``ws://`` or ``wss://`` URL of the server. Never put credentials in it
        (§5.3): pass them as ``auth``.
    :param tools: client tools (``@tool`` functions) the server may call (§7).
    :param fresh_credential: called after UNAUTHORIZED; return a new credential to
        retry with, or None to stop (§5.3). Without it the client stops.
    :param ping_interval: seconds of silence before a ``ping``; a connection silent for
        2.5 intervals is treated as dead and resumed (§4.4).
    """

    def __init__(
        self,
        url: str,
        *,
        tools: Iterable[ClientTool] = (),
        auth: str | dict[str, Any] | None = None,
        capabilities: Iterable[str] = (),
        context: Any | UnsetType = UNSET,
        input: Format | None = None,
        output: Format | None = None,
        ping_interval: float = 15.0,
        reconnect: bool = True,
        backoff_initial: float = 0.1,
        backoff_max: float = 5.0,
        fresh_credential: CredentialHook | None = None,
        open_timeout: float = 10.0,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.url = url
        self.tools = {t.name: t for t in tools}
        self.core = ClientSession(
            tools=tuple(t.declaration for t in self.tools.values()),
            input=input,
            output=output,
            capabilities=tuple(capabilities),
            context=context,
            auth=auth,
            ping_interval=ping_interval,
        )
        self.reconnect = reconnect
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.fresh_credential = fresh_credential
        self.open_timeout = open_timeout
        self.ssl_context = ssl_context
        self._events: asyncio.Queue[Event] = asyncio.Queue()
        self._ws: ClientConnection | None = None
        self._outbox: asyncio.Queue[SendText | SendBinary | Close] = asyncio.Queue()
        self._rearm = asyncio.Event()
        self._runner: asyncio.Task[None] | None = None
        self._ready: asyncio.Future[Connected] | None = None
        self._running: dict[str, tuple[asyncio.Task[None], ToolContext]] = {}
        self._closing = False
        self._stopped = False  # SessionClosed was emitted
        self._opened = False  # the current connection got its ready

    # -- lifecycle --

    async def connect(self) -> Connected:
        """Open the session; returns once ``ready`` arrived, raises :class:`VrtError`
        if the server refused it."""
        if self._runner is not None:
            raise RuntimeError("already connected")
        loop = asyncio.get_running_loop()
        self._ready = loop.create_future()
        self._runner = loop.create_task(self._run())
        return await self._ready

    async def close(self) -> None:
        """Close the connection (1000); the session is not resumed after this."""
        self._closing = True
        if self._ws is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._ws.close(1000, "client done"), CLOSE_TIMEOUT)
        if self._runner is not None:
            self._runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._runner
        for task, _ in list(self._running.values()):
            task.cancel()
        self._stop("closed by the application")

    async def __aenter__(self) -> VrtClient:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def session_id(self) -> str | None:
        return self.core.session_id

    @property
    def connected(self) -> bool:
        return self.core.state is ClientState.OPEN

    # -- events --

    async def events(self) -> AsyncIterator[Event]:
        """Every event in order, until the client stops (the last one is SessionClosed)."""
        while True:
            event = await self._events.get()
            yield event
            if isinstance(event, SessionClosed):
                return

    async def next_event(self, timeout: float | None = None) -> Event:
        return await asyncio.wait_for(self._events.get(), timeout)

    # -- actions --

    async def send_text(self, text: str) -> None:
        """User text input; interrupts a response in flight on the server (§6.3)."""
        self.core.send_text(text, self._now())
        self._flush()

    async def update_context(self, context: Any) -> None:
        """Replace the application context (§5.5)."""
        self.core.update_context(context, self._now())
        self._flush()

    async def interrupt(self, reason: InterruptReason = "user") -> int:
        """Interrupt the agent now (§6.2): the epoch closes locally before anything is
        sent. Returns the closed epoch."""
        epoch = self.core.interrupt(reason, self._now())
        self._flush()
        return epoch

    async def playback(self, item_id: str, played_ms: float) -> int:
        """Report how much of an audio item the user heard (§8.4); capped at what was received."""
        played = self.core.playback(item_id, played_ms, self._now())
        self._flush()
        return played

    def send_audio(self, payload: bytes) -> bool:
        """One input audio frame in the session's input format; False while not connected."""
        sent = self.core.send_audio(payload, self._now())
        self._flush()
        return sent

    # -- internals --

    def _now(self) -> float:
        return asyncio.get_running_loop().time()

    def _flush(self) -> None:
        for item in self.core.take_outbox():
            self._outbox.put_nowait(item)
        for event in self.core.take_events():
            self._handle(event)
        self._rearm.set()

    def _handle(self, event: ClientEvent) -> None:
        if isinstance(event, RunTool):
            self._start_tool(event)
        elif isinstance(event, CancelTool):
            running = self._running.pop(event.call_id, None)
            if running is not None:
                running[1].cancel.cancel()
                running[0].cancel()
        elif isinstance(event, Connected):
            self._opened = True
            if self._ready is not None and not self._ready.done():
                self._ready.set_result(event)
        elif isinstance(event, SessionFailed):
            retrying = event.code == "UNAUTHORIZED" and self.fresh_credential is not None
            if not retrying and self._ready is not None and not self._ready.done():
                self._ready.set_exception(VrtError(event.code, event.message))
        self._events.put_nowait(event)

    def _start_tool(self, call: RunTool) -> None:
        context = ToolContext(call.call_id, call.turn_id, call.epoch)
        task = asyncio.get_running_loop().create_task(self._run_tool(call, context))
        self._running[call.call_id] = (task, context)

    async def _run_tool(self, call: RunTool, context: ToolContext) -> None:
        tool = self.tools[call.name]
        outcome: dict[str, Any]
        problem = tool.check(call.arguments)
        if problem is not None:
            outcome = {"ok": False, "code": "INVALID", "message": problem}
        else:
            try:
                output = await tool.run(call.arguments, context)
                outcome = {"ok": True, "output": output}
            except asyncio.CancelledError:
                return  # interrupted: the session already answered INTERRUPTED (§7.2)
            except ToolError as exc:
                outcome = {"ok": False, "code": exc.code, "message": exc.message}
            except Exception as exc:
                log.exception("tool %s failed", call.name)
                outcome = {"ok": False, "code": "FAILED", "message": f"{type(exc).__name__}: {exc}"}
        self._running.pop(call.call_id, None)
        ok = outcome.pop("ok")
        self.core.tool_finished(call.call_id, ok, self._now(), **outcome)
        self._flush()

    async def _run(self) -> None:
        attempt = 0
        try:
            while not self._closing:
                self._opened = False
                try:
                    code, reason = await self._connection()
                except (websockets.InvalidURI, ValueError) as exc:
                    self._stop(f"cannot connect to {self.url!r}: {exc}")
                    return
                if self._closing:
                    break
                core = self.core
                if core.auth_refused:
                    fresh = await self.fresh_credential() if self.fresh_credential else None
                    if fresh is None:
                        self._stop("the server refused the credential (UNAUTHORIZED)")
                        return
                    core.auth = fresh
                elif not (self.reconnect and core.resumable):
                    if core.state is ClientState.CLOSED:
                        self._stop("the session failed")
                    else:
                        self._stop(f"connection closed ({code}: {reason})")
                    return
                self._events.put_nowait(Disconnected(code, reason, True))
                # Exponential backoff with jitter, restarting once a connection got ready.
                attempt = 0 if self._opened else attempt + 1
                delay = min(self.backoff_max, self.backoff_initial * 2 ** max(0, attempt - 1))
                await asyncio.sleep(delay * random.uniform(0.5, 1.0))
        finally:
            if self._ready is not None and not self._ready.done():
                self._ready.set_exception(VrtError("CLOSED", "the client stopped"))

    def _stop(self, reason: str) -> None:
        self._closing = True
        if self._ready is not None and not self._ready.done():
            self._ready.set_exception(VrtError("CLOSED", reason))
        if not self._stopped:
            self._stopped = True
            self._events.put_nowait(SessionClosed(reason))

    async def _connection(self) -> tuple[int | None, str]:
        """One WebSocket: hello, frames both ways, timers; returns its close code and reason."""
        try:
            ws = await connect(
                self.url,
                ping_interval=None,  # the protocol's own heartbeat counts (§4.4)
                compression=None,
                open_timeout=self.open_timeout,
                max_size=None,
                ssl=self.ssl_context,
                logger=_WIRE_LOG,
            )
        except (OSError, websockets.InvalidHandshake, TimeoutError) as exc:
            return None, f"cannot connect: {exc}"
        self._ws = ws
        self._outbox = asyncio.Queue()
        self.core.connection_made(self._now())
        self._flush()
        loop = asyncio.get_running_loop()
        writer = loop.create_task(self._write(ws))
        timer = loop.create_task(self._timers(ws))
        try:
            while True:
                data = await ws.recv()
                now = self._now()
                if isinstance(data, str):
                    self.core.receive_text(data, now)
                else:
                    self.core.receive_binary(data, now)
                self._flush()
        except websockets.ConnectionClosed as exc:
            received = exc.rcvd
            return (received.code, received.reason) if received else (None, "connection lost")
        finally:
            writer.cancel()
            timer.cancel()
            self._ws = None
            self.core.connection_lost(self._now())
            self._flush()

    async def _write(self, ws: ClientConnection) -> None:
        outbox = self._outbox
        while True:
            item = await outbox.get()
            try:
                if type(item) is SendText:
                    await ws.send(item.data, text=True)
                elif type(item) is SendBinary:
                    await ws.send(item.data)
                elif isinstance(item, Close):
                    # §4.4: a dead connection gets its close frame (4000) but no wait
                    # for an answer that will not come; the resume starts at once.
                    dead = item.code == CloseCode.REPLACED
                    timeout = DEAD_CLOSE_TIMEOUT if dead else CLOSE_TIMEOUT
                    await asyncio.wait_for(ws.close(item.code, item.reason), timeout)
                    return
            except TimeoutError:
                ws.transport.abort()
                return
            except websockets.ConnectionClosed:
                return

    async def _timers(self, ws: ClientConnection) -> None:
        loop = asyncio.get_running_loop()
        while True:
            deadline = self.core.timer_deadline()
            self._rearm.clear()
            delay = None if deadline is None else max(0.0, deadline - loop.time())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._rearm.wait(), delay)
                continue
            self.core.on_timer(loop.time())
            self._flush()
