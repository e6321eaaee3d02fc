"""The asyncio vRT client: one session across connections, with automatic resume.

    async with VrtClient("ws://127.0.0.1:8765", tools=[add]) as client:
        await client.send_text("echo hello")
        async for event in client.events():
            ...

The protocol itself lives in :class:`vrt.protocol.client.ClientSession` (sans I/O);
this module moves bytes between it and a WebSocket, runs the tools it asks for,
reconnects after a lost connection with exponential backoff and jitter (§5.1), gives
up after ``give_up_after`` seconds without a resumed connection, and reports what the
server never acknowledged when the session ends (§5.4).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final, TypeAlias
from urllib.parse import urlsplit

import msgspec
import websockets
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import PayloadTooBig
from websockets.protocol import State

from ..errors import VrtException
from ..protocol.client import (
    AudioChunk,
    CancelTool,
    ClientEvent,
    ClientSession,
    ClientState,
    Connected,
    ConnectionLost,
    RunTool,
    SessionFailed,
)
from ..protocol.errors import LocalProtocolError
from ..protocol.messages import (
    UNSET,
    ClientSequencedMessage,
    Format,
    InterruptReason,
    UnsetType,
    UserText,
)
from ..protocol.outputs import Close, CloseCode, Output, dispatch
from .tls import PROBE_AFTER, describe_tls_error, plain_http_answer, system_context, system_trust
from .tools import ClientTool, ToolContext, ToolError

__all__ = [
    "DEFAULT_GIVE_UP_AFTER",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "DEFAULT_MAX_UNREAD_BYTES",
    "DEFAULT_MAX_UNREAD_EVENTS",
    "LIMIT_EXCEEDED",
    "RESUME_TIMEOUT",
    "Disconnected",
    "Event",
    "SessionClosed",
    "ToolFinished",
    "Undelivered",
    "UndeliveredMessage",
    "VrtClient",
    "VrtError",
]

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
CLOSE_TIMEOUT: Final = 2.0
#: How long closing a connection found dead waits before dropping it.
DEAD_CLOSE_TIMEOUT: Final = 0.1
#: Seconds without a resumed connection after which the client stops (§5.4): twice
#: vrt's default resume window (30 s), so that a server configured longer still has
#: its chance; set ``give_up_after`` to your server's window to stop sooner.
DEFAULT_GIVE_UP_AFTER: Final = 60.0
#: The largest WebSocket message the client accepts: 4 x the 1 MiB control-message
#: limit (``Limits.max_frame_bytes``), the server's own bound on what it accepts.
DEFAULT_MAX_MESSAGE_BYTES: Final = 4 << 20
#: The smallest ``max_message_bytes`` allowed: a ``ready`` must fit.
MIN_MESSAGE_BYTES: Final = 1024
#: Events the application may leave unread, and what the frames that made them took
#: (docs/client.md, "Bounds"): past either, the oldest audio chunks are dropped, and
#: with none left to drop the session fails with LIMIT_EXCEEDED.
DEFAULT_MAX_UNREAD_EVENTS: Final = 10_000
DEFAULT_MAX_UNREAD_BYTES: Final = 16 << 20

#: Codes of :class:`SessionFailed` that the client decides itself (the others are the
#: server's §9.2 codes).
RESUME_TIMEOUT: Final = "RESUME_TIMEOUT"
LIMIT_EXCEEDED: Final = "LIMIT_EXCEEDED"


# --- events the driver adds to the session's own ---------------------------------------


class Disconnected(msgspec.Struct, frozen=True, kw_only=True):
    """The connection ended, or an attempt to reconnect failed.

    ``resuming`` tells whether the client tries again; if so, ``attempt`` counts the
    failed attempts of this outage (0: an open connection was just lost) and the next
    one starts in ``retry_in`` seconds.
    """

    code: int | None
    reason: str
    resuming: bool
    attempt: int = 0
    retry_in: float | None = None


class SessionClosed(msgspec.Struct, frozen=True, kw_only=True):
    """The client stopped: closed by the application, or the session failed. Always
    the last event."""

    reason: str


class ToolFinished(msgspec.Struct, frozen=True, kw_only=True):
    """For display: one of your tools was answered and its ``tool.result`` sent (§7.2):
    it returned (``ok``, ``output``), raised (``code`` FAILED or the ToolError's), or
    never ran because its arguments did not fit its parameters (``code`` INVALID)."""

    call_id: str
    name: str
    ok: bool
    output: Any = None
    code: str | None = None
    message: str | None = None


class UndeliveredMessage(msgspec.Struct, frozen=True, kw_only=True):
    """One message of yours the server never acknowledged.

    ``sent`` is False for a message that never left the client (it was sent while
    disconnected, to go out after the next ``ready``); True for one that was written
    to a connection before it was lost, which the server may have handled.
    """

    seq: int
    message: ClientSequencedMessage
    sent: bool

    @property
    def type(self) -> str:
        """The message's wire type: ``text``, ``context``, ``interrupt``, ``playback``
        or ``tool.result``."""
        return self.message.TYPE


class Undelivered(msgspec.Struct, frozen=True, kw_only=True):
    """The session ended with messages of yours the server never acknowledged (§5.4).

    Emitted just before :class:`SessionClosed` when the session failed or the client
    gave up, never after :meth:`VrtClient.close`. It is a report: the client never
    resends these (§5.4 forbids replaying them into this or any other session). To
    carry on, open a new session and send again what still makes sense there, as new
    messages: ``texts`` are the user's words; tool results, interrupts and playback
    reports concern the old session's calls, epochs and audio and mean nothing in a
    new one.
    """

    messages: tuple[UndeliveredMessage, ...]

    @property
    def texts(self) -> tuple[str, ...]:
        """The user texts among them, oldest first."""
        return tuple(m.message.text for m in self.messages if isinstance(m.message, UserText))


Event: TypeAlias = ClientEvent | Disconnected | SessionClosed | ToolFinished | Undelivered

CredentialHook: TypeAlias = Callable[[], Awaitable[str | dict[str, Any] | None]]

#: The most an action writes itself (see VrtClient._flush_and_send), write buffer
#: included: half websockets' default high-water mark (32 KiB, ``write_limit``), so
#: that such a write never makes ``ws.send`` wait for the drain.
_DIRECT_WRITE_MAX: Final = 16 << 10

#: The events the driver acts on (see VrtClient._handle): all but ConnectionLost, which
#: only the driver reads, are then passed on.
_DRIVER_EVENTS: Final = frozenset({RunTool, CancelTool, Connected, SessionFailed, ConnectionLost})


class _Link:
    """One WebSocket of the client, as the core's outputs are written to it
    (:func:`~vrt.protocol.outputs.dispatch`): each method gives what to await."""

    __slots__ = ("over", "ws")

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        #: The connection was closed under a write, or its Close was written: nothing
        #: more is written to it (what is pending stays unsent).
        self.over = False

    def text(self, data: bytes) -> Awaitable[None]:
        return self.ws.send(data, text=True)

    def binary(self, data: bytes) -> Awaitable[None]:
        return self.ws.send(data)

    async def close(self, close: Close) -> None:
        self.over = True
        # §4.4: a dead connection gets its close frame but no wait for an answer that
        # will not come (the core says so: ``wait``); the resume starts at once.
        timeout = CLOSE_TIMEOUT if close.wait else DEAD_CLOSE_TIMEOUT
        await asyncio.wait_for(self.ws.close(close.code, close.reason), timeout)


class _EventQueue:
    """The application's events, oldest first: what ``asyncio.Queue`` does here (one
    producer, any consumers) at a fraction of its cost per event and of its size per
    session (a queue holds three deques and an Event with a fourth).

    Consumers wait in order; ``put`` wakes the first, as ``Queue.put_nowait`` does,
    and a consumer woken then cancelled passes the wake on, as ``Queue.get`` does.

    It counts what it holds unread, events and the bytes of the frames that made them
    (``next_size``, charged to the next event put), against ``max_events`` and
    ``max_bytes`` (:attr:`over`); :meth:`drop_oldest_audio` makes room by dropping
    audio, which is lossy by design (§5.4), never a sequenced message.
    """

    __slots__ = (
        "_getters",
        "_head",
        "_items",
        "_scan",
        "_sizes",
        "audio",
        "bytes",
        "dropped",
        "max_bytes",
        "max_events",
        "next_size",
        "overflowed",
        "unread",
    )

    def __init__(self, max_events: int, max_bytes: int) -> None:
        #: Events not yet taken are ``_items[_head:]`` (None: an event dropped); the
        #: list is emptied when they are all taken and compacted when a backlog never
        #: drains. ``_sizes`` is parallel: the bytes charged to each.
        self._items: list[Event | None] = []
        self._sizes: list[int] = []
        self._head = 0
        #: Where the search for the oldest audio chunk starts (none before it).
        self._scan = 0
        self._getters: list[asyncio.Future[None]] = []
        self.max_events = max_events
        self.max_bytes = max_bytes
        self.unread = 0
        self.bytes = 0
        self.audio = 0
        #: Audio chunks dropped unread.
        self.dropped = 0
        #: The bytes of the frame being handled: charged to the next event put.
        self.next_size = 0
        #: The session failed for unread events: nothing more is queued.
        self.overflowed = False

    @property
    def over(self) -> bool:
        return self.unread > self.max_events or self.bytes > self.max_bytes

    def put(self, event: Event) -> None:
        size, self.next_size = self.next_size, 0
        self._items.append(event)
        self._sizes.append(size)
        self.unread += 1
        self.bytes += size
        if type(event) is AudioChunk:
            self.audio += 1
        if self._getters:
            self._wake()

    def drop_oldest_audio(self) -> bool:
        """Drop the oldest unread audio chunk; False when there is none. Each event is
        looked at once by these searches, however many run."""
        if not self.audio:
            return False
        items = self._items
        index = max(self._scan, self._head)
        while type(items[index]) is not AudioChunk:
            index += 1
        items[index] = None
        self._scan = index + 1
        self._forget(index)
        self.audio -= 1
        self.dropped += 1
        return True

    def _forget(self, index: int) -> None:
        self.unread -= 1
        self.bytes -= self._sizes[index]

    def _wake(self) -> None:
        getters = self._getters
        while getters:
            getter = getters.pop(0)
            if not getter.done():
                getter.set_result(None)
                return

    async def get(self) -> Event:
        while True:
            while self._head == len(self._items):
                getter = asyncio.get_running_loop().create_future()
                self._getters.append(getter)
                try:
                    await getter
                except BaseException:
                    getter.cancel()
                    with contextlib.suppress(ValueError):
                        self._getters.remove(getter)
                    if self._head != len(self._items) and not getter.cancelled():
                        self._wake()  # woken for an event it will not take
                    raise
            items, head = self._items, self._head
            event = items[head]
            if event is not None:
                self._forget(head)
                if type(event) is AudioChunk:
                    self.audio -= 1
            head += 1
            if head == len(items):
                items.clear()
                self._sizes.clear()
                head = self._scan = 0
            elif head >= 64 and head * 2 >= len(items):
                # Taken events are not kept alive by a lasting backlog.
                del items[:head]
                del self._sizes[:head]
                self._scan = max(0, self._scan - head)
                head = 0
            self._head = head
            if event is not None:
                return event


class VrtError(VrtException):
    """The session could not be opened or cannot continue. ``code`` is the server's
    (UNAUTHORIZED, START_FAILED, ...) or the client's own: CONNECT_FAILED (no
    connection could be made, ``__cause__`` holding the transport's exception, or
    none got its ``ready`` within ``give_up_after``),
    LIMIT_EXCEEDED, CLOSED."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


@dataclass(slots=True, kw_only=True)
class _Ended:
    """How one connection (or one attempt at one) ended."""

    code: int | None
    reason: str
    #: The transport's exception when no WebSocket could be opened.
    error: BaseException | None = None
    #: The server sent a message larger than ``max_message_bytes``.
    too_big: int | None = None


class VrtClient:
    """A vRT client session.

    :param url: ``ws://`` or ``wss://`` URL of the server. Never put credentials in it
        (§5.3): pass them as ``auth``.
    :param tools: client tools (``@tool`` functions) the server may call (§7).
    :param fresh_credential: called after UNAUTHORIZED; return a new credential to
        retry with, or None to stop (§5.3). Without it the client stops.
    :param ping_interval: seconds of silence before a ``ping``; a connection silent for
        2.5 intervals is treated as dead and resumed (§4.4).
    :param give_up_after: seconds after a lost connection within which a resume must
        succeed; then the client stops with ``SessionFailed("RESUME_TIMEOUT")``.
        ``math.inf`` retries for ever.
    :param max_message_bytes: the largest WebSocket message accepted from the server
        (§11). A larger one is refused from its header, before its payload is read:
        the connection closes with 1009 and the session fails with LIMIT_EXCEEDED.
    :param ssl_context: TLS settings for ``wss://``; by default the system trust store
        (``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` when set), see :mod:`vrt.client.tls`.
    :param open_timeout: seconds a connection may take to open: the WebSocket handshake
        and the server's ``ready``. A first connection past it fails ``connect()`` with
        CONNECT_FAILED; a resume past it is tried again (within ``give_up_after``).
    :param max_unread_events: events the application may leave unread (and
        ``max_unread_bytes``, what the frames that made them took; by default 16 MiB,
        or 4 times ``max_message_bytes`` when that is more). Past either the
        oldest audio chunks are dropped (counted in :attr:`dropped_events`); with none
        to drop, the session fails with LIMIT_EXCEEDED and the client closes the
        connection: every event queued before stays readable, nothing is dropped
        silently (docs/client.md, "Bounds").
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
        give_up_after: float = DEFAULT_GIVE_UP_AFTER,
        fresh_credential: CredentialHook | None = None,
        open_timeout: float = 10.0,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        ssl_context: ssl.SSLContext | None = None,
        max_unread_events: int = DEFAULT_MAX_UNREAD_EVENTS,
        max_unread_bytes: int | None = None,
    ) -> None:
        if not open_timeout > 0:
            raise ValueError("open_timeout must be positive")
        if max_unread_bytes is None:
            max_unread_bytes = max(DEFAULT_MAX_UNREAD_BYTES, 4 * max_message_bytes)
        if max_unread_events < 1 or max_unread_bytes < max_message_bytes:
            raise ValueError(
                "max_unread_events must be at least 1, max_unread_bytes at least max_message_bytes"
            )
        if not give_up_after > 0:
            raise ValueError("give_up_after must be positive (math.inf: never give up)")
        if max_message_bytes < MIN_MESSAGE_BYTES:
            raise ValueError(f"max_message_bytes must be at least {MIN_MESSAGE_BYTES}")
        if ssl_context is not None and not url.lower().startswith("wss:"):
            raise ValueError("ssl_context is for wss:// URLs only")
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
        self.give_up_after = give_up_after
        self.fresh_credential = fresh_credential
        self.open_timeout = open_timeout
        self.max_message_bytes = max_message_bytes
        self.ssl_context = ssl_context
        #: What the server never acknowledged, once the session failed (see
        #: :class:`Undelivered`); empty until then.
        self.undelivered: tuple[UndeliveredMessage, ...] = ()
        self._trusted = "the ssl_context passed to VrtClient"
        self._events = _EventQueue(max_unread_events, max_unread_bytes)
        #: The current WebSocket, as outputs are written to it.
        self._link: _Link | None = None
        #: What the core gave to write on the current connection and nobody has taken
        #: yet, in the core's order; the writer task takes it whole (see _write).
        self._pending: list[Output] = []
        #: The task writing ``_pending`` out, while there is something to write: started
        #: when something is pending, it ends when nothing is (an idle session keeps
        #: no task and no future for it).
        self._writer: asyncio.Task[None] | None = None
        #: The connection an action is writing to directly (see _flush_and_send): no
        #: writer is started until it is done, so that what is flushed meanwhile goes
        #: after it.
        self._sending: _Link | None = None
        # The core's next deadline (heartbeat, acks, tool timeouts), while connected.
        # With when it is due: one attribute, not two, so that an instance holds at
        # most 29 and keeps CPython's shared-key __dict__ (30 and up take a dict of
        # their own, 1.3 KB more per client).
        self._timer: tuple[asyncio.TimerHandle, float] | None = None
        self._runner: asyncio.Task[None] | None = None
        self._ready: asyncio.Future[Connected] | None = None
        self._running: dict[str, tuple[asyncio.Task[None], ToolContext]] = {}
        self._closing = False
        self._stopped: str | None = None  # why the client stopped; SessionClosed was emitted
        self._opened = False  # the current connection got its ready
        self._failure: SessionFailed | None = None
        #: How the core saw the last connection end: whether to connect again.
        self._lost: ConnectionLost | None = None

    # -- lifecycle --

    async def connect(self) -> Connected:
        """Open the session; returns once ``ready`` arrived, raises :class:`VrtError`
        if it could not be opened. A client carries one session: call it once."""
        if self._stopped is not None:
            raise RuntimeError(
                f"this client has stopped ({self._stopped}); a VrtClient carries one "
                "session: create a new VrtClient to open another"
            )
        if self._runner is not None:
            raise RuntimeError(
                "connect() was already called: this client is connected or connecting"
            )
        loop = asyncio.get_running_loop()
        self._ready = loop.create_future()
        self._runner = loop.create_task(self._run())
        return await self._ready

    async def close(self) -> None:
        """Close the connection (1000); the session is not resumed after this."""
        self._closing = True
        if self._link is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._link.ws.close(1000, "client done"), CLOSE_TIMEOUT)
        if self._runner is not None:
            self._runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._runner
        for task, _ in list(self._running.values()):
            task.cancel()
        self._stop("closed by the application", report=False)

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

    @property
    def dropped_events(self) -> int:
        """Audio chunks dropped because the application left too many events unread."""
        return self._events.dropped

    # -- events --

    async def events(self) -> AsyncIterator[Event]:
        """Every event in order, until the client stops (the last one is SessionClosed)."""
        while True:
            event = await self._events.get()
            yield event
            if isinstance(event, SessionClosed):
                return

    async def next_event(self, timeout: float | None = None) -> Event:
        if timeout is None:  # what wait_for does then, without its frame
            return await self._events.get()
        return await asyncio.wait_for(self._events.get(), timeout)

    # -- actions --

    async def send_text(self, text: str) -> None:
        """User text input; interrupts a response in flight on the server (§6.3)."""
        self._check_usable()
        self.core.send_text(text, self._now())
        await self._flush_and_send()

    async def update_context(self, context: Any) -> None:
        """Replace the application context (§5.5)."""
        self._check_usable()
        self.core.update_context(context, self._now())
        await self._flush_and_send()

    async def interrupt(self, reason: InterruptReason = "user") -> int:
        """Interrupt the agent now (§6.2): the epoch closes locally before anything is
        sent. Returns the closed epoch."""
        self._check_usable()
        epoch = self.core.interrupt(reason, self._now())
        await self._flush_and_send()
        return epoch

    async def playback(self, item_id: str, played_ms: float) -> int:
        """Report how much of an audio item the user heard (§8.4); capped at what was received."""
        self._check_usable()
        played = self.core.playback(item_id, played_ms, self._now())
        await self._flush_and_send()
        return played

    def send_audio(self, payload: bytes) -> bool:
        """One input audio frame in the session's input format; False while not connected."""
        sent = self.core.send_audio(payload, self._now())
        self._flush()
        return sent

    # -- internals: the session --

    def _now(self) -> float:
        return asyncio.get_running_loop().time()

    def _check_usable(self) -> None:
        if self._stopped is not None:
            raise LocalProtocolError(
                f"the session has ended ({self._stopped}); nothing was sent: "
                "start a new VrtClient for a new session"
            )

    def _flush(self) -> None:
        core = self.core
        while True:
            outbox, events = core.take_outbox(), core.take_events()
            if outbox:
                self._pending += outbox
                if self._sending is None:
                    self._wake_writer()
            # Handling an event calls the core back only for a RunTool (a call whose
            # arguments do not fit is answered at once); otherwise the core has
            # nothing more to give, and a second look would only find it empty.
            again = False
            for event in events:
                if type(event) is RunTool:
                    again = True
                self._handle(event)
            if not again:
                break
        self._arm_timer()

    def _wake_writer(self) -> None:
        link = self._link
        if self._pending and self._writer is None and link is not None and not link.over:
            self._writer = asyncio.get_running_loop().create_task(self._write(link))

    async def _flush_and_send(self) -> None:
        """:meth:`_flush`, then write what it gave from this task when no writer is
        running and nothing is pending: the same frames in the same order as the
        writer would, a loop step sooner (a writer task would run only on the next).

        Only where ``ws.send`` cannot wait: the connection open, its transport not
        closing, and the frame keeping the write buffer far below websockets'
        high-water mark, so that ``drain`` returns at once. The action then returns
        without yielding, as before; anything else (backpressure, a Close and what
        follows it) is left to the writer task, as before. Should a send wait all the
        same, what is flushed meanwhile goes to the writer, started only after this
        is done, so after it. A connection that closes under a send ends this as it
        ends the writer: quietly, the rest unsent, every sequenced message still kept
        by the core to resend on resume (§5.4).
        """
        link = self._link
        if (
            link is None
            or self._writer is not None
            or self._sending is not None
            or self._pending
            or link.over
        ):
            self._flush()
            return
        self._sending = link
        try:
            self._flush()
            pending = self._pending
            ws = link.ws
            transport = ws.transport
            while pending and self._link is link:
                item = pending[0]
                if (
                    isinstance(item, Close)
                    or ws.state is not State.OPEN
                    or transport.is_closing()
                    or transport.get_write_buffer_size() + len(item.data) > _DIRECT_WRITE_MAX
                ):
                    break  # the writer's, as before
                del pending[0]
                await dispatch(item, link)
        except websockets.ConnectionClosed:
            link.over = True  # as the writer stops at this
        finally:
            if self._sending is link:
                self._sending = None
            self._wake_writer()

    def _arm_timer(self) -> None:
        """Schedule the core's next deadline while connected. A timer already due no
        later stays: it is cheaper than a new one per flush, and when it fires the core
        does what is due then and this re-arms for the rest."""
        deadline = self.core.timer_deadline() if self._link is not None else None
        timer = self._timer
        if deadline is None:
            if timer is not None:
                timer[0].cancel()
                self._timer = None
            return
        if timer is not None:
            if timer[1] <= deadline:
                return
            timer[0].cancel()
        handle = asyncio.get_running_loop().call_at(deadline, self._on_timer)
        self._timer = (handle, deadline)

    def _on_timer(self) -> None:
        self._timer = None
        if self._link is not None:
            self.core.on_timer(self._now())
            self._flush()

    def _handle(self, event: ClientEvent) -> None:
        events = self._events
        if events.overflowed:
            return  # the session failed for unread events: it ends with what is queued
        if type(event) not in _DRIVER_EVENTS:  # most events only go to the application
            events.put(event)
            if events.over:
                self._unread_bound()
            return
        if isinstance(event, RunTool):
            if not self._start_tool(event):
                return
        elif isinstance(event, CancelTool):
            running = self._running.pop(event.call_id, None)
            if running is not None:
                running[1].cancel.cancel()
                running[0].cancel()
        elif isinstance(event, Connected):
            self._opened = True
            if self._ready is not None and not self._ready.done():
                self._ready.set_result(event)
        elif isinstance(event, ConnectionLost):
            self._lost = event  # the driver's to act on: the application gets Disconnected
            return
        elif isinstance(event, SessionFailed):
            self._failure = event
            retrying = self.core.auth_refused and self.fresh_credential is not None
            if not retrying and self._ready is not None and not self._ready.done():
                self._ready.set_exception(VrtError(event.code, event.message))
        events.put(event)
        if events.over:
            self._unread_bound()

    def _unread_bound(self) -> None:
        """Past the bound on unread events: drop the oldest audio; with none left, the
        session fails (LIMIT_EXCEEDED) and the connection closes, every event queued
        until then readable: a sequenced message is never dropped (§4.1)."""
        events = self._events
        first = events.dropped == 0
        while events.over and events.drop_oldest_audio():
            pass
        if not events.over:
            if first and events.dropped:
                log.warning("the application leaves events unread: dropping the oldest audio")
            return
        message = (
            f"the application left {events.unread} events ({events.bytes} bytes) unread; "
            f"max_unread_events is {events.max_events}, max_unread_bytes {events.max_bytes}"
        )
        events.overflowed = True  # what follows is the end: no more bound checks
        failed = SessionFailed(code=LIMIT_EXCEEDED, message=message)
        self._failure = failed
        if self._ready is not None and not self._ready.done():
            self._ready.set_exception(VrtError(LIMIT_EXCEEDED, message))
        events.put(failed)
        self._stop(message, LIMIT_EXCEEDED)
        if self._link is not None and not self._link.over:
            self._pending.append(Close(code=CloseCode.NORMAL, reason="too many unread events"))
            self._wake_writer()

    def _start_tool(self, call: RunTool) -> bool:
        """Start the call; False when its arguments do not fit (answered INVALID, §7.1)."""
        problem = self.tools[call.name].check(call.arguments)
        if problem is not None:
            self._finished(call, error=ToolError("INVALID", problem))
            return False
        context = ToolContext(call.call_id, call.turn_id, call.epoch)
        task = asyncio.get_running_loop().create_task(self._run_tool(call, context))
        self._running[call.call_id] = (task, context)
        return True

    async def _run_tool(self, call: RunTool, context: ToolContext) -> None:
        try:
            output = await self.tools[call.name].run(call.arguments, context)
        except asyncio.CancelledError:
            return  # interrupted: the session already answered INTERRUPTED (§7.2)
        except ToolError as exc:
            self._finished(call, error=exc)
        except Exception as exc:
            log.exception("tool %s failed", call.name)
            self._finished(call, error=ToolError("FAILED", f"{type(exc).__name__}: {exc}"))
        else:
            self._finished(call, output)
        finally:
            self._running.pop(call.call_id, None)
        self._flush()

    def _finished(self, call: RunTool, output: Any = None, error: ToolError | None = None) -> None:
        """The call's outcome (``error`` for a failure) goes to the session, and to the
        application unless the session discarded it (the call was interrupted)."""
        ok = error is None
        code, message = (None, None) if error is None else (error.code, error.message)
        if self.core.tool_finished(
            call.call_id, ok, self._now(), output=output, code=code, message=message
        ):
            self._events.put(
                ToolFinished(
                    call_id=call.call_id,
                    name=call.name,
                    ok=ok,
                    output=output,
                    code=code,
                    message=message,
                )
            )

    # -- internals: connections --

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        attempt = 0
        #: When the give-up time of the current outage passes; None while there is no
        #: session to resume (the first connection) or when the client never gives up.
        deadline: float | None = None
        try:
            while not self._closing:
                self._opened = False
                ended = await self._connection(deadline)
                if self._closing:
                    break
                now = loop.time()
                if self._opened:  # the outage, if any, is over; a new one starts now
                    attempt = 0
                    deadline = (
                        now + self.give_up_after if math.isfinite(self.give_up_after) else None
                    )
                else:
                    attempt += 1
                core = self.core
                if ended.too_big is not None:
                    self._fail(LIMIT_EXCEEDED, self._too_big(ended.too_big))
                    return
                # Whether the session goes on over a new connection is the core's to say
                # (ConnectionLost); when no WebSocket opened, or a first one got no
                # ready within open_timeout (connect() fails then), only a session
                # that was opened is resumed.
                lost = self._lost
                if ended.error is not None or lost is None:
                    goes_on = core.resumable
                else:
                    goes_on = lost.reconnect
                if core.auth_refused:
                    fresh = await self.fresh_credential() if self.fresh_credential else None
                    if fresh is None:
                        self._stop("the server refused the credential (UNAUTHORIZED)")
                        return
                    core.auth = fresh
                elif not (self.reconnect and goes_on):
                    self._stop(*self._why_ended(ended))
                    return
                elif deadline is None and math.isfinite(self.give_up_after):
                    # The first connection opened but died before its ready: nothing
                    # was opened, so a fresh hello is safe; it gets the same give-up
                    # time as a resume.
                    deadline = now + self.give_up_after
                if deadline is not None and now >= deadline:
                    self._give_up(ended, attempt)
                    return
                # Exponential backoff with jitter, restarting once a connection got ready;
                # never past the give-up time.
                delay = min(self.backoff_max, self.backoff_initial * 2 ** max(0, attempt - 1))
                delay *= random.uniform(0.5, 1.0)
                if deadline is not None:
                    delay = min(delay, deadline - now)
                self._events.put(
                    Disconnected(
                        code=ended.code,
                        reason=ended.reason,
                        resuming=True,
                        attempt=attempt,
                        retry_in=delay,
                    )
                )
                await asyncio.sleep(delay)
                if deadline is not None and loop.time() >= deadline:
                    self._give_up(ended, attempt)
                    return
        finally:
            if self._ready is not None and not self._ready.done():
                self._ready.set_exception(VrtError("CLOSED", "the client stopped"))

    def _too_big(self, size: int | None) -> str:
        what = f"a message of {size} bytes" if size else "a larger message"
        return f"the server sent {what}; max_message_bytes is {self.max_message_bytes}"

    def _fail(self, code: str, message: str) -> None:
        """The client itself ends the session: SessionFailed, then stop."""
        self._handle(SessionFailed(code=code, message=message))
        self._stop(message, code)

    def _why_ended(self, ended: _Ended) -> tuple[str, str, BaseException | None]:
        """The reason, VrtError code and cause for a client that stops after ``ended``."""
        core = self.core
        failure = self._failure
        if core.state is ClientState.CLOSED and failure is not None:
            return f"the session failed ({failure.code}: {failure.message})", failure.code, None
        if ended.error is not None:
            return f"cannot connect to {self.url}: {ended.reason}", "CONNECT_FAILED", ended.error
        if ended.code is None:
            return f"the connection ended ({ended.reason})", "CLOSED", None
        return (
            f"the connection closed ({ended.code}: {ended.reason or 'no reason given'})",
            "CLOSED",
            None,
        )

    def _give_up(self, ended: _Ended, attempts: int) -> None:
        last = f"{ended.code}: {ended.reason}" if ended.code is not None else ended.reason
        plural = "s" if attempts != 1 else ""
        if self.core.session_id is None:  # never opened: nothing to report as failed
            self._stop(
                f"could not open the session within {self.give_up_after:g} s "
                f"({attempts} attempt{plural}; the last: {last})",
                "CONNECT_FAILED",
            )
            return
        self._fail(
            RESUME_TIMEOUT,
            f"could not resume the session within {self.give_up_after:g} s "
            f"({attempts} attempt{plural}; the last: {last})",
        )

    def _stop(
        self,
        reason: str,
        code: str = "CLOSED",
        cause: BaseException | None = None,
        *,
        report: bool = True,
    ) -> None:
        self._closing = True
        if self._ready is not None and not self._ready.done():
            error = VrtError(code, reason)
            error.__cause__ = cause
            self._ready.set_exception(error)
        if self._stopped is None:
            self._stopped = reason
            if report:
                self.undelivered = self._unacknowledged()
                if self.undelivered:
                    self._events.put(Undelivered(messages=self.undelivered))
            self._events.put(SessionClosed(reason=reason))

    def _unacknowledged(self) -> tuple[UndeliveredMessage, ...]:
        """Our kept messages the server has not handled, read back from their bytes."""
        return tuple(
            UndeliveredMessage(seq=seq, message=message, sent=sent)
            for seq, message, sent in self.core.unacknowledged()
        )

    @property
    def _secure(self) -> bool:
        return urlsplit(self.url).scheme.lower() == "wss"

    def _ssl(self) -> ssl.SSLContext | None:
        if self.ssl_context is None and self._secure:
            self.ssl_context = system_context()
            self._trusted = system_trust()
        return self.ssl_context

    def _describe(self, error: BaseException) -> str:
        """Why no WebSocket could be opened, in one line."""
        if isinstance(error, ssl.SSLError):
            return describe_tls_error(error, self._trusted)
        if isinstance(error, socket.gaierror):
            return f"cannot resolve the host name ({error.strerror})"
        if isinstance(error, ConnectionRefusedError):
            return "connection refused (is the server running?)"
        if isinstance(error, TimeoutError):
            return "no answer in time"
        if isinstance(error, websockets.InvalidStatus):
            return f"the server answered HTTP {error.response.status_code}, not a WebSocket"
        if isinstance(error, OSError) and error.strerror:
            return error.strerror
        return str(error) or type(error).__name__

    async def _open_websocket(self, timeout: float) -> ClientConnection:
        return await connect(
            self.url,
            ping_interval=None,  # the protocol's own heartbeat counts (§4.4)
            compression=None,
            open_timeout=timeout,
            close_timeout=CLOSE_TIMEOUT,
            max_size=self.max_message_bytes,
            ssl=self._ssl(),
            logger=_WIRE_LOG,
        )

    async def _speaks_tls(self, opening: asyncio.Task[ClientConnection]) -> bool:
        """False when a ``wss://`` handshake still waits after :data:`~.tls.PROBE_AFTER`,
        the server answers plain HTTP, and the handshake still waits well after that
        answer: the server speaks ``ws://`` and would never answer (``opening`` is then
        cancelled). True otherwise, ``opening`` going on."""
        loop = asyncio.get_running_loop()
        done, _ = await asyncio.wait({opening}, timeout=PROBE_AFTER)
        if done:
            return True
        asked_at = loop.time()
        if not await plain_http_answer(self.url):
            return True
        # A TLS server may answer plain HTTP too (nginx does, with a 400), and over a
        # slow link its handshake can outlast PROBE_AFTER: the plain answer took as many
        # round trips as a handshake's first half, so the handshake gets twice that
        # again. A plain server never answers it, however long it is given.
        waited = max(2 * (loop.time() - asked_at), PROBE_AFTER)
        done, _ = await asyncio.wait({opening}, timeout=waited)
        if done:
            return True
        opening.cancel()
        return False

    async def _connection(self, deadline: float | None) -> _Ended:
        """One WebSocket: hello, frames both ways, timers; how it ended. Before its
        ``ready`` it is abandoned at ``deadline``."""
        loop = asyncio.get_running_loop()
        # The handshake and the ready, within open_timeout (and the give-up time).
        opened_by = loop.time() + self.open_timeout
        if deadline is not None:
            opened_by = min(opened_by, deadline)
        timeout = max(0.0, opened_by - loop.time())
        opening = loop.create_task(self._open_websocket(timeout))
        try:
            if self._secure and not await self._speaks_tls(opening):
                plain = "ws://" + self.url.split("://", 1)[1]
                refused = ConnectionError(
                    f"TLS failed: the server answers in plain HTTP, not TLS; try {plain}"
                )
                return _Ended(code=None, reason=str(refused), error=refused)
            ws = await opening
        except (
            OSError,
            websockets.InvalidHandshake,
            websockets.InvalidURI,
            TimeoutError,
            ValueError,
        ) as exc:
            return _Ended(code=None, reason=self._describe(exc), error=exc)
        finally:
            if not opening.done():
                opening.cancel()  # given up, or this task was cancelled
        self._link = _Link(ws)
        self._pending = []
        self._sending = None
        self._lost = None
        code: int | None = None  # the server's close code, if any: the core judges it
        watchdog = loop.call_at(opened_by, self._abandon, ws)
        self.core.connection_made(self._now())
        self._flush()
        try:
            while True:
                data = await ws.recv()
                now = self._now()
                self._events.next_size = len(data)
                if isinstance(data, str):
                    self.core.receive_text(data, now)
                else:
                    self.core.receive_binary(data, now)
                self._flush()
                self._events.next_size = 0
        except websockets.ConnectionClosed as exc:
            if isinstance(exc.__cause__, PayloadTooBig):
                size = exc.__cause__.size or 0
                return _Ended(code=1009, reason=self._too_big(size), too_big=size)
            if exc.rcvd is not None:
                code = exc.rcvd.code
                return _Ended(code=code, reason=exc.rcvd.reason)
            if not self._opened and loop.time() >= opened_by:
                if self.core.session_id is None and (deadline is None or opened_by < deadline):
                    # A first connection: connect() fails rather than wait for ever.
                    waited = TimeoutError(f"no ready within {self.open_timeout:g} s")
                    return _Ended(code=None, reason=str(waited), error=waited)
                return _Ended(code=None, reason="no ready in time")
            return _Ended(code=None, reason="connection lost")
        finally:
            watchdog.cancel()
            if self._writer is not None:
                self._writer.cancel()
                self._writer = None
            self._link = None
            self.core.connection_lost(self._now(), code)
            self._flush()

    def _abandon(self, ws: ClientConnection) -> None:
        """The give-up time passed while this attempt waited for its ready."""
        if not self._opened:
            ws.transport.abort()

    async def _write(self, link: _Link) -> None:
        """Write ``_pending`` out, and what is added meanwhile, until nothing is left."""
        try:
            while self._pending:
                # What is flushed while these are written goes to a new list, after.
                items, self._pending = self._pending, []
                for item in items:
                    try:
                        await dispatch(item, link)
                    except TimeoutError:  # a close without its answer in time
                        link.ws.transport.abort()
                        return
                    except websockets.ConnectionClosed:
                        link.over = True
                        return
                    if link.over:  # its Close was written
                        return
        finally:
            # A writer cancelled late must not unset the next connection's writer.
            if self._writer is asyncio.current_task():
                self._writer = None
