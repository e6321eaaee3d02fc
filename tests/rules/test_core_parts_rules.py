"""The small parts of the core every role shares: the identifiers the server assigns
(§5.2, §6.3), the choice of a session's format (§8.2), the JSON pointer a decoder's
reason names (§9.1), the check of the capabilities a side offers (§3.4), and what a
table says when it has no row (§5.1). Survivors of mutation testing on ``ids.py``,
``formats.py``, ``describe.py``, ``capabilities.py`` and ``tables.py``
(docs/testing.md#mutation-testing).
"""

from __future__ import annotations

import base64

import pytest

from vrt.protocol.capabilities import TOOL_STREAM, validate_supported
from vrt.protocol.client.session import ClientSession
from vrt.protocol.describe import json_pointer
from vrt.protocol.errors import LocalProtocolError
from vrt.protocol.formats import choose_format
from vrt.protocol.ids import ID_RANDOM_BITS, new_id
from vrt.protocol.messages import PCM16_24K, Format
from vrt.protocol.server.connection import ServerConnection
from vrt.protocol.tables import (
    CLIENT_TABLE,
    SERVER_TABLE,
    ClientInput,
    ClientState,
    Row,
    ServerAction,
    ServerInput,
    ServerState,
    Transitions,
)

# -- identifiers ------------------------------------------------------------------------


def test_an_identifier_carries_128_random_bits_after_its_prefix() -> None:
    """§5.2: a session id MUST be unguessable, at least 122 random bits RECOMMENDED;
    §6.3: the same for turn ids. Every id vrt assigns carries ``ID_RANDOM_BITS`` (128)
    random bits after its prefix, no fewer (guessable) and no more than it says."""
    assert ID_RANDOM_BITS >= 122
    first, second = new_id("s_"), new_id("s_")
    assert first != second
    for found in (first, second):
        assert found.startswith("s_")
        random = base64.urlsafe_b64decode(found.removeprefix("s_") + "==")
        assert len(random) * 8 == ID_RANDOM_BITS


# -- §8.2 the session's format ------------------------------------------------------------


def test_a_preference_matches_only_in_both_encoding_and_rate() -> None:
    """§8.2: the client's preferred format is used when the agent takes it unchanged,
    otherwise pcm16 at 24 kHz. The same encoding at another rate, or another encoding
    at the same rate, is not the same format."""
    pcm16_16k = Format(encoding="pcm16", sample_rate=16000)
    assert choose_format(pcm16_16k, (PCM16_24K,)) == PCM16_24K
    pcmu = Format(encoding="pcmu", sample_rate=8000)
    assert choose_format(pcmu, (Format(encoding="pcm16", sample_rate=8000),)) == PCM16_24K


# -- §9.1 where a schema error is ---------------------------------------------------------


def test_a_json_pointer_escapes_tilde_and_slash() -> None:
    """§9.1: an INVALID_FIELD reason names the member as a JSON pointer; RFC 6901 §3
    writes ``~`` as ``~0`` and ``/`` as ``~1`` in a name, ``~`` first, so a name holding
    ``~1`` reads back as itself."""
    assert json_pointer([]) == "/"
    assert json_pointer(["tools", 0, "name"]) == "/tools/0/name"
    assert json_pointer(["a/b", "m~n", "~1"]) == "/a~1b/m~0n/~01"


# -- §3.4 what a side may offer -----------------------------------------------------------


def test_an_unregistered_token_is_refused_with_the_rule_it_breaks() -> None:
    """§3.4: only registered tokens and private ``x-`` tokens may be offered; the error
    names the token and the rule, so the developer who configured it can fix it."""
    with pytest.raises(LocalProtocolError) as info:
        validate_supported([TOOL_STREAM, "acme.beta"])
    assert str(info.value) == (
        "'acme.beta' is not a registered capability; only private x- tokens may be "
        "offered unregistered (§3.4)"
    )


# -- §5.1 a pair without a row ------------------------------------------------------------


def test_a_pair_without_a_row_names_the_state_and_the_input() -> None:
    """§5.1: every input a peer can cause has a row; a pair without one is the caller's
    bug, and the LocalProtocolError says which input in which state, whether the table
    or a state machine's compiled rows are asked."""
    expected = "connection opened is not possible in state open (§5.1)"
    with pytest.raises(LocalProtocolError) as info:
        CLIENT_TABLE.row(ClientState.OPEN, ClientInput.CONNECTION_OPENED)
    assert str(info.value) == expected
    with pytest.raises(LocalProtocolError) as info:
        ClientSession.compiled[ClientState.OPEN][ClientInput.CONNECTION_OPENED]
    assert str(info.value) == expected
    assert SERVER_TABLE.row(ServerState.CLOSED, ServerInput.HELLO).section == "—"
    assert ServerInput.HELLO in ServerConnection.compiled[ServerState.CLOSED]


def test_an_any_row_is_every_live_states_and_a_state_without_rows_refuses_all() -> None:
    """§5.1: a row for "any" state is a row of every live state, also of one that has no
    row of its own, and of no other state; a state without rows has none, and its
    compiled rows refuse every input (LocalProtocolError)."""
    ping: Row[ServerState, ServerInput, ServerAction] = Row(
        state=None, input=ServerInput.PING, action=ServerAction.PONG, next=None, section="§4.4"
    )
    table = Transitions([ping], live=[ServerState.AWAITING_HELLO])
    assert table.for_state(ServerState.AWAITING_HELLO) == {ServerInput.PING: ping}
    assert table.for_state(ServerState.CLOSED) == {}
    compiled = table.compile(
        [ServerState.AWAITING_HELLO, ServerState.CLOSED], {ServerAction.PONG: "pong"}
    )
    assert compiled[ServerState.AWAITING_HELLO] == {ServerInput.PING: ("pong", None)}
    assert compiled[ServerState.AWAITING_HELLO].state is ServerState.AWAITING_HELLO
    with pytest.raises(LocalProtocolError, match="ping is not possible in state closed"):
        compiled[ServerState.CLOSED][ServerInput.PING]
