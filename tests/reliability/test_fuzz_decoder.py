"""Hypothesis against the decoder and the sans-I/O cores (§9.1, §11).

tests/test_properties.py already covers arbitrary bytes, text, JSON values and objects,
the exact depth limit and one-member mutations at the level of parsed JSON. This file
adds what a hostile peer does to the bytes themselves:

* valid frames mutated byte by byte (flipped, inserted, deleted, truncated, duplicated
  ranges): the decoder never raises and answers with one of the five codes;
* nesting far beyond any limit (up to 200,000 levels) and numbers of every spelling at
  every numeric member: never an exception, the right code where the rule decides it;
* frames at and around the size limit, with multi-byte characters;
* the sans-I/O server connection and client session fed the same fuzz: they never
  raise, the server answers each invalid frame with exactly one recoverable ``error``
  carrying the decoder's code, the client reports each one and continues, and both
  still work afterwards.

CI: 200 examples per test; ``VRT_LONG=1`` adds the same properties at 5,000 examples.
``tests/reliability/fuzz_atheris.py`` is the coverage-guided harness (run by hand).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Final

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vrt.protocol.client import ClientSession, ErrorReceived
from vrt.protocol.codec import Decoded, Decoder, Invalid, Limits, encode
from vrt.protocol.errors import ErrorCode
from vrt.protocol.frames import FrameKind, build_frame, parse_frame
from vrt.protocol.messages import (
    PCM16_24K,
    ContextUpdate,
    Hello,
    Interrupt,
    Playback,
    Ready,
    ToolCall,
    ToolResult,
    TurnState,
    UserText,
)
from vrt.protocol.outputs import SendText
from vrt.protocol.schemas import Sender
from vrt.protocol.server import (
    ServerConfig,
    ServerConnection,
    ServerSession,
    UserTextReceived,
)

CI: Final = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)
LONG: Final = settings(CI, max_examples=5000)
CODES: Final = {
    ErrorCode.MALFORMED,
    ErrorCode.UNSUPPORTED_VERSION,
    ErrorCode.UNKNOWN_TYPE,
    ErrorCode.INVALID_FIELD,
    ErrorCode.LIMIT_EXCEEDED,
}
CLIENT: Final = Decoder("client")
SERVER: Final = Decoder("server")

#: Valid frames of both directions, to be mutated.
CLIENT_FRAMES: Final = [
    encode(UserText(text="hello ünïcødé ☃"), 1),
    encode(Interrupt(epoch=7, reason="speech"), 2),
    encode(Playback(item_id="i_1", played_ms=120), 3),
    encode(ToolResult.success("c_1", 4, {"sum": [1, 2.5, None, True]}), 4),
    encode(ToolResult.failure("c_2", 4, "REJECTED", "no"), 5),
    encode(ContextUpdate(context={"doc": {"path": "a.md", "lines": [1, 2, 3]}}), 6),
    encode(Hello(session_id="s_x", resume_from=3, auth="tok"), 0),
    b'{"v":1,"seq":0,"type":"hello","tools":[{"name":"add","parameters":{"type":"object"}}],'
    b'"input":{"encoding":"pcm16","sampleRate":24000},"capabilities":["tool-stream-v1"]}',
]
SERVER_FRAMES: Final = [
    encode(TurnState(turn_id="t_1", epoch=1, state="thinking"), 1),
    encode(ToolCall(call_id="c_1", name="add", arguments={"a": 1}, turn_id="t_1", epoch=1), 2),
    encode(Ready(session_id="s_1", input=PCM16_24K, output=PCM16_24K, capabilities=()), 0),
]


def outcome(decoder: Decoder, data: bytes) -> Decoded[Any] | Invalid:
    result = decoder.decode(data)
    assert isinstance(result, (Decoded, Invalid))
    if isinstance(result, Invalid):
        assert result.code in CODES, result
        assert result.reason
    return result


@st.composite
def byte_mutations(draw: st.DrawFn, frames: list[bytes]) -> bytes:
    data = bytearray(draw(st.sampled_from(frames)))
    for _ in range(draw(st.integers(1, 4))):
        if not data:
            break
        at = draw(st.integers(0, len(data) - 1))
        how = draw(st.sampled_from(["flip", "insert", "delete", "truncate", "repeat", "byte"]))
        if how == "flip":
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif how == "insert":
            data[at:at] = draw(st.sampled_from([b"{", b"}", b"[", b",", b'"', b":", b"\\", b"1e9",
                                                b"\x00", b"\xc3", b" ", b"null"]))  # fmt: skip
        elif how == "delete":
            del data[at : at + draw(st.integers(1, 8))]
        elif how == "truncate":
            del data[at:]
        elif how == "repeat":
            end = min(len(data), at + draw(st.integers(1, 40)))
            data[at:at] = data[at:end]
        else:
            data[at] = draw(st.integers(0, 255))
    return bytes(data)


def mutated_bytes(data: bytes, sender: str) -> None:
    outcome(CLIENT if sender == "client" else SERVER, data)


@CI
@given(data=byte_mutations(CLIENT_FRAMES))
def test_client_frames_mutated_byte_by_byte(data: bytes) -> None:
    mutated_bytes(data, "client")


@CI
@given(data=byte_mutations(SERVER_FRAMES))
def test_server_frames_mutated_byte_by_byte(data: bytes) -> None:
    mutated_bytes(data, "server")


@pytest.mark.parametrize("levels", [65, 1000, 1024, 1025, 50_000, 200_000])
@pytest.mark.parametrize("shape", ["[", '{"a":'])
def test_nesting_far_beyond_the_limit(levels: int, shape: str) -> None:
    """§11: JSON nesting depth is bounded; far beyond the parser's own bound the answer
    is still LIMIT_EXCEEDED, never a RecursionError."""
    closer = "]" if shape == "[" else "}"
    inner = shape * levels + "0" + closer * levels
    for text in (
        '{"v":1,"seq":1,"type":"context","context":' + inner + "}",
        inner,
        "[" * levels,  # unterminated
    ):
        result = outcome(CLIENT, text.encode())
        assert isinstance(result, Invalid)  # a bare object may fail rule 2 first
        if text.startswith('{"v"'):
            assert result.code == ErrorCode.LIMIT_EXCEEDED


NUMBERS: Final = ["1e400", "-1e400", "1" + "0" * 400, "18446744073709551616", "4294967296",
                  "4294967295", "1.0", "1e0", "10e-1", "-0", "0.5", "1E+0", "1e-400",
                  "-1", "9007199254740993"]  # fmt: skip
#: (frame with @ where the number goes, member) for every numeric member of the client set.
NUMERIC: Final = [
    ('{"v":@,"seq":1,"type":"text","text":"x"}', "v"),
    ('{"v":1,"seq":@,"type":"text","text":"x"}', "seq"),
    ('{"v":1,"seq":1,"type":"interrupt","epoch":@,"reason":"user"}', "epoch"),
    ('{"v":1,"seq":1,"type":"playback","itemId":"i","playedMs":@}', "playedMs"),
    ('{"v":1,"seq":0,"type":"ack","upTo":@}', "upTo"),
    ('{"v":1,"seq":0,"type":"hello","sessionId":"s","resumeFrom":@}', "resumeFrom"),
    ('{"v":1,"seq":1,"type":"tool.result","callId":"c","epoch":@,"ok":true,"output":1}', "epoch"),
    ('{"v":1,"seq":1,"type":"context","context":@}', "context"),
    ('{"v":1,"seq":1,"type":"tool.result","callId":"c","epoch":1,"ok":true,"output":[@]}',
     "output"),
]  # fmt: skip


def beyond_doubles(number: str) -> bool:
    return abs(float(number)) == float("inf")


SPELLINGS: Final = [
    pytest.param(template, member, number, id=f"{member}-{number[:12]}")
    for template, member in NUMERIC
    for number in NUMBERS
]


@pytest.mark.parametrize(("template", "member", "number"), SPELLINGS)
def test_numbers_of_every_spelling_at_every_numeric_member(
    template: str, member: str, number: str
) -> None:
    """messages.md: an integral value in range is the same number however it is spelt;
    a fraction is INVALID_FIELD (for v, UNSUPPORTED_VERSION); decisions.md: "Numbers
    beyond the double range (1e400) ... INVALID_FIELD wherever they appear, after rules
    1-3"."""
    result = outcome(CLIENT, template.replace("@", number).encode())
    value = float(number)
    beyond = beyond_doubles(number)
    integral = not beyond and value == int(value)
    if member == "v":
        assert isinstance(result, Invalid) == (value != 1 or not integral)
        if isinstance(result, Invalid):
            assert result.code == ErrorCode.UNSUPPORTED_VERSION
        return
    if beyond:
        assert isinstance(result, Invalid), result
        assert result.code == ErrorCode.INVALID_FIELD
        return
    if member in ("context", "output"):
        assert isinstance(result, Decoded), result  # free-form JSON: any finite number
        return
    if member == "playedMs" and value >= 2**64:
        # docs/limits.md: integer members hold 64 bits; playedMs has no maximum in the
        # schema, so past that it is an implementation limit (§11), not a bad field.
        assert isinstance(result, Invalid), result
        assert result.code == ErrorCode.LIMIT_EXCEEDED
        return
    low = 1 if member == "seq" else 0
    high = float("inf") if member == "playedMs" else 4294967295  # playedMs: integer >= 0
    in_range = integral and low <= value <= high
    assert isinstance(result, Decoded) == in_range, result
    if isinstance(result, Invalid):
        assert result.code == ErrorCode.INVALID_FIELD


@pytest.mark.parametrize("limit", [64, 1000, 1 << 20])
def test_the_frame_size_limit_is_exact_in_bytes(limit: int) -> None:
    """§11: the control message size is bounded in bytes, multi-byte characters included."""
    decoder = Decoder("client", Limits(max_frame_bytes=limit))
    head, tail = b'{"v":1,"seq":1,"type":"text","text":"', b'"}'
    room = limit - len(head) - len(tail)
    for filler in ("x", "é", "☃", "😀"):
        size = len(filler.encode())
        body = (filler * (room // size)).encode()
        body += b"x" * (room - len(body))
        assert isinstance(outcome(decoder, head + body + tail), Decoded)
        result = outcome(decoder, head + body + b"x" + tail)
        assert isinstance(result, Invalid)
        assert result.code == ErrorCode.LIMIT_EXCEEDED


@CI
@given(st.binary(max_size=80))
def test_audio_frames_never_raise(data: bytes) -> None:
    receivers: tuple[Sender, ...] = ("server", "client")
    for receiver in receivers:
        parsed = parse_frame(data, receiver)
        if isinstance(parsed, Invalid):
            assert parsed.code == ErrorCode.MALFORMED
        else:
            assert len(data) >= 5
            assert data[0] == (1 if receiver == "server" else 2)


# --- the sans-I/O cores -----------------------------------------------------------------

fuzz_frames = (
    byte_mutations(CLIENT_FRAMES)
    | st.text(max_size=120).map(str.encode)
    | st.binary(max_size=120)
    | st.builds(lambda k, p: bytes([k]) + p, st.integers(0, 3), st.binary(max_size=20))
)


def open_server_connection() -> tuple[ServerConnection, ServerSession]:
    config = ServerConfig(max_invalid=10**9)
    connection = ServerConnection(config, 0.0)
    connection.receive_text(encode(Hello(tools=()), 0), 0.0)
    (event,) = connection.take_events()
    session = ServerSession(event.hello, config)
    connection.open(session, 0.0)
    connection.take_outbox()
    return connection, session


def server_core(frames: list[tuple[bool, bytes]]) -> None:
    connection, session = open_server_connection()
    for number, (binary, data) in enumerate(frames):
        if binary:
            connection.receive_binary(data, float(number))
            parsed = parse_frame(data, "server")
            expected = parsed.code if isinstance(parsed, Invalid) else None
        else:
            try:
                data.decode("utf-8")
            except UnicodeDecodeError:
                continue  # the WebSocket layer closes with 1007 before the core sees it
            connection.receive_text(data, float(number))
            decoded = CLIENT.decode(data)
            expected = decoded.code if isinstance(decoded, Invalid) else None
        out = connection.take_outbox()
        session.take_events()
        if expected is not None:
            errors = [json.loads(item.data) for item in out if isinstance(item, SendText)]
            errors = [e for e in errors if e.get("type") == "error"]
            assert [(e["code"], e["recoverable"]) for e in errors] == [(expected, True)]
    # Still works: the next text is handled.
    seq = session.incoming.last_seq + 1
    connection.receive_text(encode(UserText(text="still here"), seq), 1e6)
    assert UserTextReceived(text="still here") in session.take_events()


def client_core(frames: list[tuple[bool, bytes]]) -> None:
    client = ClientSession()
    client.connection_made(0.0)
    ready = Ready(session_id="s_1", input=PCM16_24K, output=PCM16_24K, capabilities=())
    client.receive_text(encode(ready, 0), 0.0)
    client.take_events()
    for number, (binary, data) in enumerate(frames):
        if binary:
            client.receive_binary(data, float(number))
            continue
        client.receive_text(data, float(number))
        events = client.take_events()
        if isinstance(SERVER.decode(data), Invalid):
            assert [type(e) for e in events] == [ErrorReceived], events
    seq = client.incoming.last_seq + 1
    client.receive_text(encode(TurnState(turn_id="t_9", epoch=9, state="idle"), seq), 1e6)
    assert client.take_events()


frame_lists = st.lists(st.tuples(st.booleans(), fuzz_frames), max_size=20)


@CI
@given(frame_lists)
def test_the_server_core_answers_every_bad_frame_and_goes_on(
    frames: list[tuple[bool, bytes]],
) -> None:
    server_core(frames)


@CI
@given(st.lists(st.tuples(st.booleans(), byte_mutations(SERVER_FRAMES) | fuzz_frames),
                max_size=20))  # fmt: skip
def test_the_client_core_reports_every_bad_frame_and_goes_on(
    frames: list[tuple[bool, bytes]],
) -> None:
    client_core(frames)


@pytest.mark.slow
@LONG
@given(data=byte_mutations(CLIENT_FRAMES + SERVER_FRAMES))
def test_frames_mutated_byte_by_byte_long(data: bytes) -> None:
    mutated_bytes(data, "client")
    mutated_bytes(data, "server")


@pytest.mark.slow
@LONG
@given(frame_lists)
def test_the_cores_under_fuzz_long(frames: list[tuple[bool, bytes]]) -> None:
    server_core(frames)
    client_core(frames)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_the_atheris_harness_finds_nothing(tmp_path: Path) -> None:
    """The coverage-guided harness (fuzz_atheris.py), 300,000 inputs from a seed corpus."""
    pytest.importorskip("atheris")
    harness = str(Path(__file__).with_name("fuzz_atheris.py"))
    corpus = tmp_path / "corpus"
    subprocess.run([sys.executable, harness, "--make-corpus", str(corpus)], check=True)
    runs = os.environ.get("VRT_ATHERIS_RUNS", "300000")
    done = subprocess.run(
        [sys.executable, harness, f"-atheris_runs={runs}", str(corpus)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    print(done.stderr[-600:])
    assert done.returncode == 0, done.stderr[-3000:]


def test_input_audio_of_the_right_kind_is_valid() -> None:
    """The binary fuzz above mostly builds invalid frames; one valid one for contrast."""
    assert not isinstance(parse_frame(build_frame(FrameKind.INPUT, 5, b"\0\0"), "server"), Invalid)
