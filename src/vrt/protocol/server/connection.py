"""One WebSocket on the server, walking the rows of §5.1's server table.

A driver reports every WebSocket frame it reads with :meth:`frame_received` (which
keeps the heartbeat and the connection's read budget), feeds the connection the
messages and audio frames it receives, with the time, and writes out what
:meth:`ServerConnection.take_outbox` returns; while :meth:`readable_at` is in the future
it stops reading the connection; it authenticates ``hello`` and finds or
creates the session when :meth:`take_events` reports a :class:`HelloReceived`, then calls
:meth:`ServerConnection.open` or one of the ``refuse_*`` methods. Every input is looked
up in :data:`~vrt.protocol.tables.SERVER_TABLE` and the row's action performed, so each
behaviour here comes from one row of the table.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Mapping
from typing import Any, Final

from ..codec import Decoded, Invalid, encode, shared_decoder
from ..errors import ErrorCode, recoverable_by_default
from ..formats import duration_ms
from ..frames import HEADER_SIZE, FrameKind, parse_frame
from ..machine import Action, Machine
from ..messages import UNSET, Ack, Error, Hello, Ping, Pong, Ready
from ..outputs import Close, CloseCode, Output, SendText
from ..tables import SERVER_TABLE, ServerAction, ServerInput, ServerState
from .budget import ReadBudget
from .channel import BoundConnection
from .config import ServerConfig
from .events import AudioReceived, HelloReceived
from .session import ServerSession

__all__ = ["ServerConnection"]

#: The seq of an audio frame, after its kind byte (§8.1).
_SEQ: Final = struct.Struct(">I")
#: The pong frame never varies (§4.4: transient, seq 0): encoded once, shared (frozen).
_PONG: Final = SendText(data=encode(Pong(), 0))
# Bound once: reading a member off its enum class goes through the metaclass, some ten
# times the cost of reading a global, and these are read for every message.
_CLOSED: Final = ServerState.CLOSED
_AWAITING_HELLO: Final = ServerState.AWAITING_HELLO
_SEQUENCED: Final = ServerInput.SEQUENCED
_ACK: Final = ServerInput.ACK
_PING: Final = ServerInput.PING
_INPUT_AUDIO: Final = ServerInput.INPUT_AUDIO


class ServerConnection(Machine[ServerState, ServerInput]):
    """One client WebSocket, bound to at most one session (§5.1)."""

    def __init__(self, config: ServerConfig, now: float) -> None:
        self.config = config
        self.session: ServerSession | None = None
        self.hello: Hello | None = None
        self._enter(ServerState.AWAITING_HELLO)
        self._decoder = shared_decoder("client", config.limits)
        self._outbox: list[Output] = []
        self._events: list[HelloReceived] = []
        self._kept: list[Decoded[Any]] = []
        self._last_frame = now
        self._hello_deadline = now + config.hello_timeout
        self._budget = ReadBudget(
            config.frame_rate,
            config.frame_burst,
            config.byte_rate,
            config.byte_burst,
            now,
            config.audio_rate,
            config.audio_burst,
        )
        #: Input audio frames dropped: read a whole audio burst beyond the budget.
        self.dropped_audio = 0
        self._invalid: deque[float] | None = None  # made on the first invalid frame

    # -- driver interface --

    def take_outbox(self) -> list[Output]:
        """Frames to write and closes to perform, in order: this connection's and its
        session's. A session that has ended closes its connection here (§5.6)."""
        session = self.session
        if session is not None:
            if session.ended is None and not self._outbox:
                return session.take_outbox()  # the common case: the session's list, uncopied
            self._take_session_frames()
            if session.ended is not None:
                self._input(ServerInput.SESSION_ENDED, session.ended, 0.0)
        out, self._outbox = self._outbox, []
        return out

    def has_output(self) -> bool:
        """True when :meth:`take_outbox` has frames to write, or a close to perform for
        a session that has ended."""
        if self._outbox:
            return True
        session = self.session
        return session is not None and (bool(session.channel.frames) or session.ended is not None)

    def take_events(self) -> list[HelloReceived]:
        events, self._events = self._events, []
        return events

    def receive_text(self, data: bytes | str, now: float) -> None:
        self._last_frame = now
        decoded = self._decoder.decode(data)
        if isinstance(decoded, Invalid):
            self._input(ServerInput.INVALID, decoded, now)
            return
        message = decoded.message
        if decoded.seq:
            self._input(_SEQUENCED, decoded, now)
        elif isinstance(message, Ack):
            self._input(_ACK, decoded, now)
        elif isinstance(message, Ping):
            self._input(_PING, decoded, now)
        else:  # the only other client message with seq 0 is hello (§4.1)
            self._input(ServerInput.HELLO, decoded, now)

    def receive_binary(self, data: bytes, now: float) -> None:
        self._last_frame = now
        limit = self.config.limits.max_audio_frame_bytes
        if len(data) > limit:
            invalid = Invalid(
                ErrorCode.LIMIT_EXCEEDED,
                f"audio frame of {len(data)} bytes; this server takes at most {limit} (§11)",
            )
            self._input(ServerInput.INVALID, invalid, now)
            return
        if len(data) >= HEADER_SIZE and data[0] == FrameKind.INPUT:
            # Input audio (§8.1), parsed here: one object per frame, the agent's event.
            event = AudioReceived(payload=data[HEADER_SIZE:], seq=_SEQ.unpack_from(data, 1)[0])
            self._input(_INPUT_AUDIO, event, now)
            return
        # Not input audio: parse_frame says what is wrong with it (the frames it
        # accepts from a client, input audio of a whole header, were taken above).
        refused = parse_frame(data, "server")
        assert isinstance(refused, Invalid), "input audio is parsed above"
        self._input(ServerInput.INVALID, refused, now)

    def frame_received(self, now: float, size: int = 0) -> bool:
        """A WebSocket frame of ``size`` bytes arrived, of any kind: it counts for the
        heartbeat (§4.4: a frame of any kind) and against the connection's read budget
        (budget.py). True when the budget is spent: the driver stops reading until
        :meth:`readable_at`; a connection far beyond it is closed with RATE_LIMITED (§11)."""
        self._last_frame = now
        level = self._budget.spend(size, now)
        if level >= 0:
            return False
        if level < -1:
            self._input(
                ServerInput.FLOOD,
                f"more than {self.config.frame_rate:g} frames or {self.config.byte_rate:g} "
                "bytes per second, long after reading was slowed (§11)",
                now,
            )
        return True

    def readable_at(self) -> float:
        """From when the driver may read this connection again: in the future while its
        read budget is spent (the client's data waits in TCP; nothing is lost)."""
        return self._budget.readable_at()

    def connection_lost(self, now: float) -> None:
        """The WebSocket ended: a bound session is parked (§5.1)."""
        self._input(ServerInput.CONNECTION_CLOSED, None, now)

    def timer_deadline(self) -> float | None:
        """The earliest of the heartbeat (§4.4), the hello deadline and the bound
        session's own deadlines."""
        state = self.state
        if state is _CLOSED:
            return None
        deadline = self._last_frame + self.config.heartbeat_timeout
        if state is _AWAITING_HELLO:
            deadline = min(deadline, self._hello_deadline)
        session = self.session
        if session is not None:
            session_deadline = session.timer_deadline()
            if session_deadline is not None and session_deadline < deadline:
                deadline = session_deadline
        return deadline

    def on_timer(self, now: float) -> None:
        if self.state is _CLOSED:
            return
        if now >= self._last_frame + self.config.heartbeat_timeout:
            self._input(ServerInput.HEARTBEAT_TIMEOUT, None, now)
        elif self.state is _AWAITING_HELLO and now >= self._hello_deadline:
            self._input(ServerInput.HELLO_TIMEOUT, None, now)
        elif self.session is not None:
            self.session.on_timer(now)

    # -- decisions on the hello (opening) --

    def shut_down(self, reason: str) -> None:
        """The server is going away (§5.6): ``error SERVER_SHUTDOWN``, not recoverable, so
        the client does not resume here; then close 1001."""
        self._input(ServerInput.SHUTDOWN, reason, 0.0)

    def refuse_unauthorized(self, reason: str = "authentication failed") -> None:
        """§5.3: ``error UNAUTHORIZED`` with seq 0, then close 4401."""
        self._input(ServerInput.AUTH_REFUSED, reason, 0.0)

    def refuse_resume(self) -> None:
        """§5.4: unknown, expired and foreign sessions get the very same answer."""
        self._input(ServerInput.RESUME_REFUSED, "the session cannot be resumed", 0.0)

    def refuse_start(self, reason: str = "the session could not start") -> None:
        """§5.1: ``error START_FAILED``, close 1011."""
        self._input(ServerInput.START_FAILED, reason, 0.0)

    def open(self, session: ServerSession, now: float) -> BoundConnection | None:
        """Bind ``session`` (new, or the one ``hello.sessionId`` names) and send ``ready``.

        For a resume, resends what the client missed (§5.4), or refuses with
        ``RESUME_FAILED`` and closes the session when that is impossible. Then handles
        the messages kept while opening. Returns the older connection this one replaced
        (it has a close 4000 to write), if any.
        """
        if self.state is ServerState.CLOSED:
            return None  # the connection went away while its hello was being decided
        replaced = session.channel.connection
        hello = self.hello
        resume_from = 0
        if hello is not None and hello.session_id is not UNSET:
            resume_from = hello.resume_from if hello.resume_from is not UNSET else 0
        # A new session sends what it produced before ready right after it (§5.2).
        resend = session.outgoing.resend_after(resume_from)
        if resend is None or session.ended is not None:
            self.refuse_resume()
            session.close("resume failed")
            return None
        # Binding the session replaces an older connection (SESSION_TABLE, §5.4).
        self._input(ServerInput.OPENED, (session, resend), now)
        kept, self._kept = self._kept, []
        for decoded in kept:  # §5.1: the messages kept while opening, handled after ready
            self._input(ServerInput.SEQUENCED if decoded.seq else ServerInput.ACK, decoded, now)
        return replaced if replaced is not None and replaced is not self else None

    def replaced(self, now: float) -> None:
        """A newer connection resumed this one's session (§5.4): close 4000; the
        session is no longer this connection's to park."""
        self.session = None
        self._input(ServerInput.REPLACED, None, now)

    # -- actions, one per ServerAction --

    def _authenticate(self, decoded: Decoded[Any], now: float) -> None:
        self.hello = decoded.message
        self._events.append(HelloReceived(hello=decoded.message))

    def _pong(self, decoded: Decoded[Any], now: float) -> None:
        self._emit(_PONG)  # §4.4: pong in any state

    def _no_session(self, decoded: Decoded[Any], now: float) -> None:
        self._error(
            ErrorCode.NO_SESSION, f"{decoded.message.TYPE} before hello: send hello first (§5.1)"
        )

    def _ignore(self, argument: Any, now: float) -> None:
        pass

    def _keep(self, decoded: Decoded[Any], now: float) -> None:
        limit = self.config.max_kept_while_opening
        if len(self._kept) >= limit:
            self._error(ErrorCode.LIMIT_EXCEEDED, f"more than {limit} messages before ready (§11)")
        else:
            self._kept.append(decoded)  # §5.1: kept, in order, handled after ready

    def _duplicate_hello(self, decoded: Decoded[Any], now: float) -> None:
        self._error(ErrorCode.DUPLICATE_HELLO, "this connection already has a session (§5.1)")

    def _refuse_unauthorized(self, reason: str, now: float) -> None:
        self._refuse(ErrorCode.UNAUTHORIZED, reason, CloseCode.UNAUTHORIZED)

    def _refuse_resume(self, reason: str, now: float) -> None:
        self._refuse(ErrorCode.RESUME_FAILED, reason, CloseCode.UNKNOWN_SESSION)

    def _refuse_start(self, reason: str, now: float) -> None:
        self._refuse(ErrorCode.START_FAILED, reason, CloseCode.START_FAILED)

    def _ready(self, opened: tuple[ServerSession, list[bytes]], now: float) -> None:
        session, resend = opened
        self.session = session
        session.attach(self, now)
        hello = self.hello
        resuming = hello is not None and hello.session_id is not UNSET
        ready = Ready(
            session_id=session.session_id,
            input=session.record.input,
            output=session.record.output,
            capabilities=session.capabilities,
            resumed_from=session.incoming.last_seq if resuming else UNSET,
        )
        self._outbox.append(SendText(data=encode(ready, 0)))
        self._outbox.extend(SendText(data=data) for data in resend)
        self.hello = None  # its tools and context now live in the session, as JSON

    def _handle(self, decoded: Decoded[Any], now: float) -> None:
        assert self.session is not None
        self.session.receive_sequenced(decoded, now)

    def _apply_ack(self, decoded: Decoded[Any], now: float) -> None:
        assert self.session is not None
        self.session.receive_ack(decoded.message)

    def _pass_audio(self, event: AudioReceived, now: float) -> None:
        session = self.session
        assert session is not None
        # Charged by what it plays (budget.py): the driver stops reading while the
        # audio runs ahead of real time; what was read a whole burst beyond is dropped,
        # and the first drop is said once (a client that paces its audio loses none).
        seconds = duration_ms(event.payload, session.record.input) / 1000.0
        if seconds and self._budget.spend_audio(seconds, now) < -1:
            self.dropped_audio += 1
            if self.dropped_audio == 1:
                self._error(
                    ErrorCode.RATE_LIMITED,
                    f"input audio more than {self.config.audio_burst:g} s ahead of real "
                    "time: the frames beyond are dropped (§11)",
                    True,
                )
            return
        session.audio_received(event)

    def _invalid_input(self, invalid: Invalid, now: float) -> None:
        window = self._invalid
        if window is None:
            window = self._invalid = deque()
        window.append(now)
        while window and window[0] <= now - self.config.invalid_window:
            window.popleft()
        if len(window) > self.config.max_invalid:
            reason = (
                f"more than {self.config.max_invalid} invalid frames in "
                f"{self.config.invalid_window:g} s (§11)"
            )
            self._input(ServerInput.FLOOD, reason, now)
        else:
            self._error(invalid.code, invalid.reason, True)

    def _rate_limit(self, reason: str, now: float) -> None:
        self._refuse(ErrorCode.RATE_LIMITED, reason, CloseCode.POLICY)

    def _close_replaced(self, argument: None, now: float) -> None:
        self._close(CloseCode.REPLACED, "replaced by a newer connection")

    def _close_session(self, ended: tuple[int, str], now: float) -> None:
        self._close(*ended)

    def _close_heartbeat(self, argument: None, now: float) -> None:
        # §4.4: no frame for the heartbeat timeout; the session stays resumable.
        self._close(CloseCode.HEARTBEAT_TIMEOUT, "heartbeat timeout")

    def _close_hello_timeout(self, argument: None, now: float) -> None:
        self._close(CloseCode.POLICY, f"no hello within {self.config.hello_timeout:g} s")

    def _shut_down(self, reason: str, now: float) -> None:
        self._refuse(ErrorCode.SERVER_SHUTDOWN, reason, CloseCode.GOING_AWAY)

    def _park(self, argument: None, now: float) -> None:
        """The socket is gone: a session still bound parks, and its resume window starts."""
        session = self.session
        self.session = None
        if session is not None and session.channel.connection is self:
            session.park(now)

    @classmethod
    def _actions(cls) -> Mapping[ServerAction, Action]:
        return {
            ServerAction.AUTHENTICATE: cls._authenticate,
            ServerAction.PONG: cls._pong,
            ServerAction.NO_SESSION: cls._no_session,
            ServerAction.IGNORE: cls._ignore,
            ServerAction.KEEP: cls._keep,
            ServerAction.DUPLICATE_HELLO: cls._duplicate_hello,
            ServerAction.REFUSE_UNAUTHORIZED: cls._refuse_unauthorized,
            ServerAction.REFUSE_RESUME: cls._refuse_resume,
            ServerAction.REFUSE_START: cls._refuse_start,
            ServerAction.READY: cls._ready,
            ServerAction.HANDLE: cls._handle,
            ServerAction.APPLY_ACK: cls._apply_ack,
            ServerAction.PASS_AUDIO: cls._pass_audio,
            ServerAction.INVALID: cls._invalid_input,
            ServerAction.RATE_LIMIT: cls._rate_limit,
            ServerAction.CLOSE_REPLACED: cls._close_replaced,
            ServerAction.CLOSE_SESSION: cls._close_session,
            ServerAction.CLOSE_HEARTBEAT: cls._close_heartbeat,
            ServerAction.CLOSE_HELLO_TIMEOUT: cls._close_hello_timeout,
            ServerAction.SHUTDOWN: cls._shut_down,
            ServerAction.PARK: cls._park,
            ServerAction.CLOSED: cls._ignore,
        }

    # -- internals --

    def _take_session_frames(self) -> None:
        """Take the bound session's frames into this connection's outbox, so that what
        the connection sends next follows what the session sent before it."""
        session = self.session
        if session is not None:
            self._outbox += session.take_outbox()

    def _emit(self, item: Output) -> None:
        self._take_session_frames()
        self._outbox.append(item)

    def _close(self, code: int, reason: str) -> None:
        # The session stays bound until the driver reports the socket gone
        # (connection_lost), which parks it then: the resume window starts at that time.
        self._emit(Close(code=code, reason=reason))

    def _refuse(self, code: ErrorCode, reason: str, close_code: int) -> None:
        self._error(code, reason)
        self._close(close_code, reason)

    def _error(self, code: ErrorCode, reason: str, recoverable: bool | None = None) -> None:
        """An ``error``: sequenced once a session is bound, seq 0 before (§4.1)."""
        if recoverable is None:
            recoverable = recoverable_by_default(code)
        session = self.session
        if self.state is ServerState.OPEN and session is not None:
            session.channel.send_error(code, reason, recoverable)
        else:
            error = Error(code=code, message=reason, recoverable=recoverable)
            self._emit(SendText(data=encode(error, 0)))


ServerConnection.compile_table(SERVER_TABLE, ServerState)
