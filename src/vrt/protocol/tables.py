"""The protocol's state tables, as data: §5.1's server and client tables, the lifecycle
of a server-side session (§5.1) and §7.5's tool-stream phases.

Each table reads like the spec's: one :class:`Row` per line, state × input → action and
next state, with the section it comes from. The state machines of the core
(:class:`~vrt.protocol.server.ServerConnection`, :class:`~vrt.protocol.client.ClientSession`
and a server session's :class:`~vrt.protocol.server.channel.SessionChannel`) look up their
row for every input and perform its action; the conformance suites and the tests import
the same tables, so nothing restates them. A (state, input) pair with no row is a bug of
the caller (:class:`~vrt.protocol.errors.LocalProtocolError`): every input a peer can
cause has a row, so bad peer input never raises.

``docs/architecture.md`` shows these tables as :func:`markdown` renders them; a test keeps
the two equal. How a table is held, looked up and compiled is :mod:`.transitions`.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Final

import msgspec

from .machine import Machine
from .messages import ToolStreamPhase
from .transitions import CompiledRows, Row, Transitions, markdown

__all__ = [
    "CLIENT_TABLE",
    "SERVER_EFFECTS",
    "SERVER_TABLE",
    "SESSION_TABLE",
    "TOOL_STREAM_MEMBERS",
    "TOOL_STREAM_NEXT",
    "TOOL_STREAM_TERMINAL",
    "ClientAction",
    "ClientInput",
    "ClientState",
    "CompiledRows",
    "Effect",
    "Machine",
    "Row",
    "ServerAction",
    "ServerInput",
    "ServerState",
    "SessionAction",
    "SessionInput",
    "SessionState",
    "Transitions",
    "markdown",
]

# --- §5.1, server behaviour per connection --------------------------------------------


class ServerState(StrEnum):
    """The states of a connection on the server (§5.1 "Connection state")."""

    AWAITING_HELLO = "awaiting hello"
    OPENING = "opening"
    OPEN = "open"
    CLOSED = "closed"


class ServerInput(StrEnum):
    """What can happen to a connection on the server."""

    HELLO = "hello"
    PING = "ping"
    ACK = "ack"
    SEQUENCED = "sequenced message"
    INPUT_AUDIO = "valid input audio frame"
    INVALID = "invalid control message or audio frame"
    FLOOD = "invalid frames or traffic far beyond the rate limits (§11)"
    AUTH_REFUSED = "authentication refused"
    RESUME_REFUSED = "resume of an unknown, expired or foreign session"
    START_FAILED = "the session cannot start"
    OPENED = "session opened or resumed"
    REPLACED = "a newer connection resumed the session"
    SESSION_ENDED = "the session ended"
    HEARTBEAT_TIMEOUT = "heartbeat timeout"
    HELLO_TIMEOUT = "no hello within the hello deadline"
    SHUTDOWN = "the server shuts down"
    CONNECTION_CLOSED = "connection closed"


class ServerAction(StrEnum):
    AUTHENTICATE = "authenticate (§5.3)"
    PONG = "pong"
    NO_SESSION = "error NO_SESSION (not recoverable, seq 0)"
    IGNORE = "ignore"
    KEEP = "keep it, in order; handle it after ready"
    DUPLICATE_HELLO = "error DUPLICATE_HELLO (recoverable)"
    REFUSE_UNAUTHORIZED = "error UNAUTHORIZED (seq 0), close 4401"
    REFUSE_RESUME = "error RESUME_FAILED (seq 0), close 4404"
    REFUSE_START = "error START_FAILED, close 1011"
    READY = "ready, resend (§5.4), handle kept messages"
    HANDLE = "deduplicate (§4.3), handle, acknowledge"
    APPLY_ACK = "discard acknowledged messages (§4.2)"
    PASS_AUDIO = "pass to the session"
    INVALID = "error with its code (§9.1), recoverable"
    RATE_LIMIT = "error RATE_LIMITED (not recoverable), close 1008"
    CLOSE_REPLACED = "close 4000"
    CLOSE_SESSION = "close with the session's reason"
    CLOSE_HEARTBEAT = "close 4408"
    CLOSE_HELLO_TIMEOUT = "close 1008"
    SHUTDOWN = "error SERVER_SHUTDOWN (not recoverable), close 1001"
    PARK = "park the session"
    CLOSED = "nothing (the connection is gone)"


_SS = ServerState
_SI = ServerInput
_SA = ServerAction


def _server(
    state: ServerState | None,
    input: ServerInput,
    action: ServerAction,
    next: ServerState | None,
    section: str = "§5.1",
) -> Row[ServerState, ServerInput, ServerAction]:
    return Row(state=state, input=input, action=action, next=next, section=section)


#: §5.1 "Server behaviour per connection", in the spec's order, with the rows the text
#: states elsewhere (pong in any state, §4.4; acks, §4.2; audio before ready, §8.1; a
#: replaced connection, §5.4) and two of vrt's (the hello deadline, a session that ends
#: while connected: docs/decisions.md).
SERVER_TABLE: Final = Transitions(
    (
        _server(_SS.AWAITING_HELLO, _SI.HELLO, _SA.AUTHENTICATE, _SS.OPENING),
        _server(_SS.AWAITING_HELLO, _SI.PING, _SA.PONG, None),
        _server(_SS.AWAITING_HELLO, _SI.SEQUENCED, _SA.NO_SESSION, None),
        _server(_SS.AWAITING_HELLO, _SI.ACK, _SA.NO_SESSION, None),
        _server(_SS.AWAITING_HELLO, _SI.INPUT_AUDIO, _SA.IGNORE, None),
        _server(_SS.AWAITING_HELLO, _SI.HELLO_TIMEOUT, _SA.CLOSE_HELLO_TIMEOUT, _SS.CLOSED, "§11"),
        _server(_SS.OPENING, _SI.SEQUENCED, _SA.KEEP, None),
        _server(_SS.OPENING, _SI.ACK, _SA.KEEP, None),
        _server(_SS.OPENING, _SI.PING, _SA.PONG, None, "§4.4"),
        _server(_SS.OPENING, _SI.INPUT_AUDIO, _SA.IGNORE, None, "§8.1"),
        _server(_SS.OPENING, _SI.HELLO, _SA.DUPLICATE_HELLO, None),
        _server(_SS.OPENING, _SI.AUTH_REFUSED, _SA.REFUSE_UNAUTHORIZED, _SS.CLOSED),
        _server(_SS.OPENING, _SI.RESUME_REFUSED, _SA.REFUSE_RESUME, _SS.CLOSED),
        _server(_SS.OPENING, _SI.START_FAILED, _SA.REFUSE_START, _SS.CLOSED),
        _server(_SS.OPENING, _SI.OPENED, _SA.READY, _SS.OPEN),
        _server(_SS.OPEN, _SI.HELLO, _SA.DUPLICATE_HELLO, None),
        _server(_SS.OPEN, _SI.SEQUENCED, _SA.HANDLE, None),
        _server(_SS.OPEN, _SI.ACK, _SA.APPLY_ACK, None, "§4.2"),
        _server(_SS.OPEN, _SI.PING, _SA.PONG, None, "§4.4"),
        _server(_SS.OPEN, _SI.INPUT_AUDIO, _SA.PASS_AUDIO, None),
        _server(_SS.OPEN, _SI.REPLACED, _SA.CLOSE_REPLACED, _SS.CLOSED, "§5.4"),
        _server(_SS.OPEN, _SI.SESSION_ENDED, _SA.CLOSE_SESSION, _SS.CLOSED, "§5.6"),
        _server(None, _SI.INVALID, _SA.INVALID, None, "§5.1, §9.1"),
        _server(None, _SI.FLOOD, _SA.RATE_LIMIT, _SS.CLOSED, "§11"),
        _server(None, _SI.HEARTBEAT_TIMEOUT, _SA.CLOSE_HEARTBEAT, _SS.CLOSED, "§5.1, §4.4"),
        _server(None, _SI.SHUTDOWN, _SA.SHUTDOWN, _SS.CLOSED, "§5.6"),
        _server(_SS.OPEN, _SI.CONNECTION_CLOSED, _SA.PARK, _SS.CLOSED),
        _server(None, _SI.CONNECTION_CLOSED, _SA.CLOSED, _SS.CLOSED, "§5.1 text"),
        # A session still bound when the server closed the connection (4408, 1008)
        # parks once the socket is gone: its resume window starts then.
        _server(_SS.CLOSED, _SI.CONNECTION_CLOSED, _SA.PARK, None, "§5.1 text"),
        *(
            _server(_SS.CLOSED, each, _SA.CLOSED, None, "—")
            for each in ServerInput
            if each is not _SI.CONNECTION_CLOSED
        ),
    ),
    live=(_SS.AWAITING_HELLO, _SS.OPENING, _SS.OPEN),
)


class Effect(msgspec.Struct, frozen=True, kw_only=True):
    """What a peer observes of an action: the ``error`` it sends (with its recoverable
    flag, and whether its seq is 0 because no session is bound, §4.1) and the close code
    it ends the connection with."""

    error: str | None = None
    recoverable: bool | None = None
    seq_zero: bool = False
    close: int | None = None


#: The observable effect of each server action that sends an error or closes; every
#: other action sends neither. The conformance suite judges a server by these.
SERVER_EFFECTS: Final[Mapping[ServerAction, Effect]] = {
    _SA.NO_SESSION: Effect(error="NO_SESSION", recoverable=False, seq_zero=True),
    _SA.DUPLICATE_HELLO: Effect(error="DUPLICATE_HELLO", recoverable=True),
    _SA.REFUSE_UNAUTHORIZED: Effect(
        error="UNAUTHORIZED", recoverable=False, seq_zero=True, close=4401
    ),
    _SA.REFUSE_RESUME: Effect(error="RESUME_FAILED", recoverable=False, seq_zero=True, close=4404),
    _SA.REFUSE_START: Effect(error="START_FAILED", recoverable=False, close=1011),
    _SA.INVALID: Effect(recoverable=True),
    _SA.RATE_LIMIT: Effect(error="RATE_LIMITED", recoverable=False, close=1008),
    _SA.CLOSE_REPLACED: Effect(close=4000),
    _SA.CLOSE_HEARTBEAT: Effect(close=4408),
    _SA.CLOSE_HELLO_TIMEOUT: Effect(close=1008),
    _SA.SHUTDOWN: Effect(error="SERVER_SHUTDOWN", recoverable=False, close=1001),
}


# --- §5.1, a server-side session's lifecycle ------------------------------------------


class SessionState(StrEnum):
    """The states of a server-side session (§5.1): it outlives its connections. A new
    session is parked until its first connection binds it (with no resume window yet:
    it has never been connected)."""

    CONNECTED = "connected"
    PARKED = "parked"
    CLOSED = "closed"


class SessionInput(StrEnum):
    """What can happen to a server-side session."""

    ATTACH = "a connection binds it (its ready)"
    PARK = "its connection ended"
    EXPIRE = "the resume window ends"
    END = "the server ends it"


class SessionAction(StrEnum):
    BIND = "bind the connection; no resume window while it is bound"
    REPLACE = "the older connection closes 4000; bind the newer"
    PARK = "unbind; the resume window starts"
    RELEASE = "unbind (the connection that closed it is gone)"
    END = "end it: its connection closes with the session's code and reason"
    IGNORE = "nothing"


_ES = SessionState
_EI = SessionInput
_EA = SessionAction


def _session(
    state: SessionState | None,
    input: SessionInput,
    action: SessionAction,
    next: SessionState | None,
    section: str = "§5.1",
) -> Row[SessionState, SessionInput, SessionAction]:
    return Row(state=state, input=input, action=action, next=next, section=section)


#: §5.1 "A server-side session is connected, parked or closed", with §5.4's replaced
#: connection and §5.6's ends. A connection binds only a session that is not closed (a
#: closed one is refused, §5.4), a parked session has no connection to lose, and the
#: resume window runs only while parked: those pairs have no row.
SESSION_TABLE: Final = Transitions(
    (
        _session(_ES.PARKED, _EI.ATTACH, _EA.BIND, _ES.CONNECTED, "§5.1, §5.4"),
        _session(_ES.CONNECTED, _EI.ATTACH, _EA.REPLACE, None, "§5.1, §5.4"),
        _session(_ES.CONNECTED, _EI.PARK, _EA.PARK, _ES.PARKED),
        _session(_ES.PARKED, _EI.EXPIRE, _EA.END, _ES.CLOSED),
        _session(None, _EI.END, _EA.END, _ES.CLOSED, "§5.1 text, §5.6"),
        # A session that ended while connected keeps its connection until the socket
        # is gone (its close is written first): then it lets it go.
        _session(_ES.CLOSED, _EI.PARK, _EA.RELEASE, None, "§5.1 text, §5.6"),
        _session(_ES.CLOSED, _EI.END, _EA.IGNORE, None, "—"),
        _session(_ES.CLOSED, _EI.EXPIRE, _EA.IGNORE, None, "—"),
    ),
    live=(_ES.CONNECTED, _ES.PARKED),
)


# --- §5.1, client behaviour -----------------------------------------------------------


class ClientState(StrEnum):
    """The states of a client session (§5.1 "Client state")."""

    CONNECTING = "connecting"
    WAITING = "waiting"
    OPEN = "open"
    CLOSED = "closed"


class ClientInput(StrEnum):
    CONNECTION_OPENED = "connection opened"
    READY = "ready"
    READY_MISMATCH = "ready that does not match the session resumed"
    CANNOT_RESEND = "ready after which the client cannot resend (§5.4)"
    UNAUTHORIZED = "error UNAUTHORIZED"
    RESUME_FAILED = "error RESUME_FAILED"
    SESSION_ENDED = "error that ends the session (AGENT_ERROR or SERVER_SHUTDOWN, not recoverable)"
    ERROR_NOT_RECOVERABLE = "error that is not recoverable"
    ERROR = "other error"
    SEQUENCED = "sequenced message"
    AUDIO_START = "audio.start"
    OUTPUT_AUDIO = "output audio frame"
    ACK = "ack"
    PONG = "pong"
    INVALID = "invalid message"
    CONNECTION_LOST = "connection lost"
    SILENT = "nothing received for 2.5 ping intervals"
    SEND = "the application sends a sequenced message"
    SEND_AUDIO = "the application sends input audio"


class ClientAction(StrEnum):
    SEND_HELLO = "send hello (with sessionId and resumeFrom when resuming)"
    OPEN = "on a resume, resend (§5.4); start audio"
    REPORT = "report it"
    REPORT_AND_STOP = "report it; stop, unless a retry can succeed (a fresh credential, §5.3)"
    AWAIT_CREDENTIAL = "report it; reconnect only with a fresh credential (§5.3)"
    STOP = "stop resuming; never replay old messages into a new session"
    ABANDON = "close the connection; report RESUME_FAILED (§5.4)"
    HANDLE = "deduplicate (§4.3), handle, acknowledge"
    ANNOUNCE = "begin the item (§8.3)"
    PLAY = "play, unless its epoch is closed (§6.2)"
    APPLY_ACK = "discard acknowledged messages (§4.2)"
    IGNORE = "ignore"
    RECONNECT = "reconnect with backoff, then resume"
    CLOSE_DEAD = "close it (4000), reconnect, resume (§4.4)"
    KEEP = "keep it; send it after ready"
    WRITE = "write it"
    DROP = "drop it (audio is never sent before ready, §5.1)"
    REFUSE = "refuse (LocalProtocolError): the session is closed"


_CS = ClientState
_CI = ClientInput
_CA = ClientAction


def _client(
    state: ClientState | None,
    input: ClientInput,
    action: ClientAction,
    next: ClientState | None,
    section: str = "§5.1",
) -> Row[ClientState, ClientInput, ClientAction]:
    return Row(state=state, input=input, action=action, next=next, section=section)


#: §5.1 "Client behaviour", in the spec's order, with the rows the text states elsewhere
#: (§4.4 dead connections, §5.3 credentials, §5.4 resumes, §8.3 audio items).
CLIENT_TABLE: Final = Transitions(
    (
        _client(_CS.CONNECTING, _CI.CONNECTION_OPENED, _CA.SEND_HELLO, _CS.WAITING),
        _client(_CS.WAITING, _CI.READY, _CA.OPEN, _CS.OPEN),
        _client(_CS.WAITING, _CI.READY_MISMATCH, _CA.ABANDON, _CS.CLOSED, "§5.4"),
        _client(_CS.WAITING, _CI.CANNOT_RESEND, _CA.ABANDON, _CS.CLOSED, "§5.4"),
        _client(_CS.WAITING, _CI.UNAUTHORIZED, _CA.AWAIT_CREDENTIAL, _CS.CONNECTING, "§5.3"),
        _client(_CS.WAITING, _CI.ERROR_NOT_RECOVERABLE, _CA.REPORT_AND_STOP, _CS.CLOSED),
        _client(_CS.WAITING, _CI.SEQUENCED, _CA.IGNORE, None, "§5.2"),
        _client(_CS.WAITING, _CI.OUTPUT_AUDIO, _CA.IGNORE, None, "§8.3"),
        _client(_CS.OPEN, _CI.SEQUENCED, _CA.HANDLE, None),
        _client(_CS.OPEN, _CI.OUTPUT_AUDIO, _CA.PLAY, None, "§8.3, §6.2"),
        _client(_CS.OPEN, _CI.READY, _CA.IGNORE, None, "§5.2"),
        _client(_CS.OPEN, _CI.READY_MISMATCH, _CA.IGNORE, None, "§5.2"),
        _client(_CS.OPEN, _CI.CANNOT_RESEND, _CA.IGNORE, None, "§5.2"),
        _client(_CS.OPEN, _CI.UNAUTHORIZED, _CA.REPORT, None, "§5.3"),
        _client(_CS.OPEN, _CI.ERROR_NOT_RECOVERABLE, _CA.REPORT, None, "§9.2"),
        _client(_CS.OPEN, _CI.CONNECTION_LOST, _CA.RECONNECT, _CS.CONNECTING),
        _client(_CS.OPEN, _CI.SEND, _CA.WRITE, None, "§4.1"),
        _client(_CS.OPEN, _CI.SEND_AUDIO, _CA.WRITE, None, "§8.1"),
        _client(None, _CI.RESUME_FAILED, _CA.STOP, _CS.CLOSED),
        _client(None, _CI.SESSION_ENDED, _CA.STOP, _CS.CLOSED, "§9.2"),
        _client(None, _CI.ERROR, _CA.REPORT, None, "§9.2"),
        _client(None, _CI.INVALID, _CA.REPORT, None, "§9.1"),
        _client(None, _CI.AUDIO_START, _CA.ANNOUNCE, None, "§8.3"),
        _client(None, _CI.ACK, _CA.APPLY_ACK, None, "§4.2"),
        _client(None, _CI.PONG, _CA.IGNORE, None, "§4.4"),
        _client(None, _CI.CONNECTION_LOST, _CA.RECONNECT, _CS.CONNECTING, "§5.4"),
        _client(None, _CI.SILENT, _CA.CLOSE_DEAD, _CS.CONNECTING, "§4.4"),
        _client(None, _CI.SEND, _CA.KEEP, None, "§5.1 text"),
        _client(None, _CI.SEND_AUDIO, _CA.DROP, None, "§5.1 text"),
        _client(_CS.CONNECTING, _CI.READY, _CA.IGNORE, None, "§5.1 text"),
        _client(_CS.CONNECTING, _CI.READY_MISMATCH, _CA.IGNORE, None, "§5.1 text"),
        _client(_CS.CONNECTING, _CI.CANNOT_RESEND, _CA.IGNORE, None, "§5.1 text"),
        _client(_CS.CONNECTING, _CI.UNAUTHORIZED, _CA.IGNORE, None, "§5.1 text"),
        _client(_CS.CONNECTING, _CI.ERROR_NOT_RECOVERABLE, _CA.IGNORE, None, "§5.1 text"),
        _client(_CS.CONNECTING, _CI.SESSION_ENDED, _CA.IGNORE, None, "§5.1 text"),
        _client(_CS.CONNECTING, _CI.SEQUENCED, _CA.IGNORE, None, "§5.1 text"),
        _client(_CS.CONNECTING, _CI.OUTPUT_AUDIO, _CA.IGNORE, None, "§5.1 text"),
        _client(_CS.CONNECTING, _CI.SILENT, _CA.IGNORE, None, "§5.1 text"),
        _client(_CS.CLOSED, _CI.SEND, _CA.REFUSE, None, "§5.4"),
        _client(_CS.CLOSED, _CI.CONNECTION_OPENED, _CA.REFUSE, None, "§5.4"),
        _client(_CS.CLOSED, _CI.CONNECTION_LOST, _CA.IGNORE, None, "§5.4"),
        *(
            _client(_CS.CLOSED, each, _CA.IGNORE, None, "—")
            for each in ClientInput
            if each not in (_CI.SEND, _CI.CONNECTION_LOST, _CI.CONNECTION_OPENED)
        ),
    ),
    live=(_CS.CONNECTING, _CS.WAITING, _CS.OPEN),
)


# --- §7.5, tool-stream phases ---------------------------------------------------------

#: phase -> the phases that may follow it (``None``: before the first message). A call
#: starts with ``start``; ``arguments-delta`` comes before ``arguments-complete``, which
#: comes at most once; ``progress`` only between it and the terminal phase; exactly one
#: terminal phase (``settled`` needs an issued call; ``failed`` one that never was).
TOOL_STREAM_NEXT: Final[Mapping[ToolStreamPhase | None, frozenset[ToolStreamPhase]]] = {
    None: frozenset({"start"}),
    "start": frozenset({"arguments-delta", "arguments-complete", "cancelled", "failed"}),
    "arguments-delta": frozenset({"arguments-delta", "arguments-complete", "cancelled", "failed"}),
    "arguments-complete": frozenset({"progress", "settled", "cancelled"}),
    "progress": frozenset({"progress", "settled", "cancelled"}),
    "settled": frozenset(),
    "cancelled": frozenset(),
    "failed": frozenset(),
}

#: The terminal phases (§7.5): nothing about the call follows them.
TOOL_STREAM_TERMINAL: Final = frozenset(
    phase for phase, after in TOOL_STREAM_NEXT.items() if phase is not None and not after
)

#: The member each phase carries (§7.5 table); ``settled`` also carries ``code`` when
#: ``ok`` is false.
TOOL_STREAM_MEMBERS: Final[Mapping[ToolStreamPhase, tuple[str, ...]]] = {
    "start": (),
    "arguments-delta": ("delta",),
    "arguments-complete": ("arguments",),
    "progress": ("progress",),
    "settled": ("ok",),
    "cancelled": (),
    "failed": ("message",),
}
