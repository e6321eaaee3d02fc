"""The language-neutral vectors of examples/ through the pair: each invalid frame a peer
sends gets its §9.1 answer and the session goes on; each valid one decodes and
re-encodes to the same JSON value (§2.2)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

import pytest

from vrt.protocol import Decoded, Error, ErrorReceived, decode_server, encode
from vrt.protocol.codec import shared_decoder
from vrt.protocol.outputs import SendBinary, SendText
from vrt.protocol.server import AudioReceived, ServerConfig, UserTextReceived
from vrt.protocol.tables import ClientState, ServerState
from vrt.protocol.testing import Pair

EXAMPLES: Final = Path(__file__).resolve().parents[2] / "examples"


def cases(sender: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for path in sorted((EXAMPLES / sender).glob("*.json")):
        found += json.loads(path.read_text(encoding="utf-8"))["cases"]
    return found


def frame(case: dict[str, Any]) -> bytes:
    if "text" in case:
        return str(case["text"]).encode("utf-8", "surrogatepass")
    return json.dumps(case["message"], separators=(",", ":"), ensure_ascii=False).encode(
        "utf-8", "surrogatepass"
    )


def server_errors(pair: Pair, since: int = 0) -> list[Error]:
    """The errors the client was handed, from frame ``since`` of the trace on."""
    out: list[Error] = []
    for _, direction, item in pair.trace[since:]:
        if direction == "to_client" and isinstance(item, SendText):
            decoded = decode_server(item.data)
            if isinstance(decoded, Decoded) and isinstance(decoded.message, Error):
                out.append(decoded.message)
    return out


CLIENT_INVALID: Final = [c for c in cases("client") if not c["valid"]]
SERVER_INVALID: Final = [c for c in cases("server") if not c["valid"]]
VALID: Final = [(s, c) for s in ("client", "server") for c in cases(s) if c["valid"]]
BINARY: Final = json.loads((EXAMPLES / "binary" / "frames.json").read_text())["cases"]


def test_the_vectors_are_there() -> None:
    assert CLIENT_INVALID
    assert SERVER_INVALID
    assert VALID
    assert BINARY


def test_every_invalid_client_frame_gets_its_error_and_the_session_goes_on() -> None:
    """§9.1: an invalid control message gets an error with its code, recoverable; the
    connection stays open (§5.1, any × invalid)."""
    pair = Pair(config=ServerConfig(max_invalid=10_000))
    link = pair.connect()
    for case in CLIENT_INVALID:
        before = len(pair.trace)
        link.to_server.write(SendText(data=frame(case)), pair.now)
        pair.settle()
        errors = server_errors(pair, before)
        assert [(e.code, e.recoverable) for e in errors] == [(case["error"], True)], case["id"]
    assert link.server.state is ServerState.OPEN
    pair.client.send_text("still here", pair.now)
    pair.settle()
    assert pair.agent_events[-1] == UserTextReceived(text="still here")


def test_every_invalid_server_frame_is_reported_and_the_client_goes_on() -> None:
    """§9.1: a client reports an invalid message and continues."""
    pair = Pair()
    link = pair.connect()
    for case in SERVER_INVALID:
        before = len(pair.client_events)
        link.to_client.write(SendText(data=frame(case)), pair.now)
        pair.settle()
        reported = [e for e in pair.client_events[before:] if isinstance(e, ErrorReceived)]
        assert [e.code for e in reported] == [case["error"]], case["id"]
    assert pair.client.state is ClientState.OPEN


@pytest.mark.parametrize(("sender", "case"), VALID, ids=[c["id"] for _, c in VALID])
def test_every_valid_frame_round_trips(sender: str, case: dict[str, Any]) -> None:
    """§2.2: a valid message decodes, and encodes back to the same JSON value, unknown
    members included."""
    decoder = shared_decoder("client" if sender == "client" else "server")
    data = frame(case)
    decoded = decoder.decode(data.decode("utf-8", "surrogatepass"))
    assert isinstance(decoded, Decoded), case["id"]
    again = encode(decoded.message, decoded.seq)
    assert json.loads(again) == json.loads(data)


def test_binary_frames_through_the_pair() -> None:
    """§8.1: a valid input frame reaches the agent, an invalid one gets MALFORMED;
    a client drops an invalid output frame."""
    pair = Pair(config=ServerConfig(max_invalid=10_000))
    link = pair.connect()
    for case in BINARY:
        data = bytes.fromhex(case["hex"])
        if case["receiver"] == "server":
            before = len(pair.trace)
            link.to_server.write(SendBinary(data=data), pair.now)
            pair.settle()
            if case["valid"]:
                assert isinstance(pair.agent_events[-1], AudioReceived), case["id"]
            else:
                assert [e.code for e in server_errors(pair, before)] == ["MALFORMED"]
        else:
            link.to_client.write(SendBinary(data=data), pair.now)
            pair.settle()
    assert pair.client.state is ClientState.OPEN
