"""§5.1's session lifecycle (``SESSION_TABLE``): every (state, input) pair, on a real
session, does what its row says (its action, then its next state), and a pair without a
row is the caller's bug (LocalProtocolError)."""

from __future__ import annotations

import itertools
from typing import Final

import pytest

from vrt.protocol.errors import LocalProtocolError
from vrt.protocol.machine import Machine
from vrt.protocol.messages import Hello
from vrt.protocol.outputs import CloseCode
from vrt.protocol.server import ServerConfig, ServerSession
from vrt.protocol.tables import SESSION_TABLE, SessionAction, SessionInput, SessionState

CONFIG: Final = ServerConfig(resume_window=30.0)
#: When the input happens: after the resume window of a session parked at 1.0.
NOW: Final = 40.0


class Connection:
    """A bound connection, as the session sees it: it only learns it was replaced."""

    def __init__(self) -> None:
        self.replaced_at: float | None = None

    def replaced(self, now: float) -> None:
        self.replaced_at = now


def session_in(state: SessionState) -> tuple[ServerSession, Connection]:
    """A session in ``state``, and the connection that was (or is) bound to it."""
    session = ServerSession(Hello(), CONFIG)
    connection = Connection()
    assert session.status is SessionState.PARKED  # a new session, before its ready
    session.attach(connection, 0.0)
    if state is SessionState.PARKED:
        session.park(1.0)
    elif state is SessionState.CLOSED:
        session.close("ended earlier", CloseCode.GOING_AWAY)
    assert session.status is state
    return session, connection


def give(session: ServerSession, input: SessionInput, newer: Connection) -> None:
    """Feed ``input`` to the session's lifecycle, as its drivers do."""
    channel = session.channel
    if input is SessionInput.ATTACH:
        session.attach(newer, NOW)
    elif input is SessionInput.PARK:
        session.park(NOW)
    elif input is SessionInput.EXPIRE:
        channel.expire(NOW)
    else:
        session.close("ended now", CloseCode.NORMAL)


PAIRS: Final = list(itertools.product(SessionState, SessionInput))


@pytest.mark.parametrize(("state", "input"), PAIRS, ids=[f"{s}-{i.name}" for s, i in PAIRS])
def test_every_pair_does_what_its_row_says(state: SessionState, input: SessionInput) -> None:
    session, older = session_in(state)
    newer = Connection()
    rows = SESSION_TABLE.for_state(state)
    if input not in rows:
        with pytest.raises(LocalProtocolError, match="is not possible in state"):
            give(session, input, newer)
        return
    row = rows[input]
    ended, expires = session.ended, session.record.expires_at
    give(session, input, newer)
    assert session.status is (row.next or state)
    action = row.action
    if action is SessionAction.BIND:
        assert session.connection is newer
        assert session.record.expires_at is None  # no resume window while bound
    elif action is SessionAction.REPLACE:
        assert session.connection is newer
        assert older.replaced_at == NOW  # §5.4: the older connection closes 4000
    elif action is SessionAction.PARK:
        assert session.connection is None
        assert session.record.expires_at == NOW + CONFIG.resume_window
    elif action is SessionAction.RELEASE:
        assert session.connection is None
        assert session.record.expires_at is None  # a closed session waits for nothing
    elif action is SessionAction.END:
        reason = "resume window expired" if input is SessionInput.EXPIRE else "ended now"
        assert session.ended == (CloseCode.NORMAL, reason)
        assert session.record.expires_at is None
    else:
        assert action is SessionAction.IGNORE
        assert (session.ended, session.record.expires_at) == (ended, expires)
    if action is not SessionAction.REPLACE:
        assert older.replaced_at is None


def test_only_a_bound_session_writes_to_its_connection() -> None:
    """§5.4: while parked, a sequenced message is only kept (for the resume) and a
    transient one is lost; once closed nothing is sent, nor kept."""
    session, _ = session_in(SessionState.CONNECTED)
    turn = session.begin_turn("speaking")
    assert len(session.take_outbox()) == 1
    session.park(1.0)
    assert session.agent_output.send_text(turn, "kept")
    kept = session.outgoing.last_seq
    assert session.take_outbox() == []
    session.close()
    session.agent_output.send_text(turn, "after the end")
    assert session.outgoing.last_seq == kept
    assert session.take_outbox() == []


def test_a_machine_names_its_actions() -> None:
    """machine.py: a table is compiled for a class with the methods it names for the
    table's actions; a class that names none cannot compile one."""

    class Nameless(Machine[SessionState, SessionInput]):
        pass

    with pytest.raises(NotImplementedError):
        Nameless.compile_table(SESSION_TABLE, SessionState)
