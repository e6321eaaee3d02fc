"""The core's smaller parts where the pair reaches them: audio formats (§8.2), the
capability registry (§3.3, §3.4), settings and bounds (§11), the tables (§5.1), the
decoder's second parser (§2.2, §9.1) and strict encoding."""

from __future__ import annotations

import json
from typing import Any, Final

import pytest

from vrt.protocol import (
    AudioChunk,
    ClientSession,
    Decoded,
    Decoder,
    Error,
    Format,
    Hello,
    Interrupt,
    Invalid,
    Limits,
    LocalProtocolError,
    decode_client,
    decode_server,
    encode,
)
from vrt.protocol.capabilities import (
    TOOL_STREAM,
    check_gated,
    gating_capability,
    is_token,
    negotiate,
    validate_supported,
)
from vrt.protocol.client.calls import REMEMBERED_ANSWERS, ToolQueue
from vrt.protocol.client.session import REMEMBERED_ITEMS
from vrt.protocol.formats import choose_format, duration_ms, opus_duration_ms
from vrt.protocol.messages import PCM16_24K, ToolCall
from vrt.protocol.outputs import Close, SendBinary, SendText, dispatch
from vrt.protocol.server import PlaybackReported, ServerConfig, ServerSession
from vrt.protocol.server.budget import ReadBudget
from vrt.protocol.streams import IncomingStream, OutgoingStream
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
    markdown,
)
from vrt.protocol.testing import Link, Pair

PCMU: Final = Format(encoding="pcmu")
CONTEXT: Final = b'{"v":1,"seq":1,"type":"context","context":'
OPUS: Final = Format(encoding="opus")


class Formats(Pair):
    """A server whose agent produces ``formats`` unchanged (§8.2)."""

    def __init__(self, client: ClientSession, *formats: Format) -> None:
        super().__init__(client)
        self.formats = formats

    def decide(self, link: Link, hello: Hello) -> None:
        session = ServerSession(hello, self.config, output_formats=self.formats)
        self.sessions[session.session_id] = session
        link.server.open(session, self.now)


@pytest.mark.parametrize(
    ("fmt", "payload", "ms"),
    [
        (PCMU, bytes(160), 20),
        (OPUS, bytes([0x08]), 20),  # SILK 20 ms, code 0: one frame
        (OPUS, bytes([0x09]), 40),  # code 1: two frames
        (OPUS, bytes([0x0B, 0x03]), 60),  # code 3: the count in the second byte
        (OPUS, bytes([0x0B]), 0),  # code 3, truncated: nothing
        (OPUS, b"", 0),
    ],
)
def test_playback_is_capped_by_the_duration_in_the_sessions_format(
    fmt: Format, payload: bytes, ms: int
) -> None:
    """§8.2: the client's preferred format when the agent takes it unchanged; §8.4: a
    playback report is capped at what was received and what was sent, in that format."""
    pair = Formats(ClientSession(output=fmt), fmt)
    pair.connect()
    session = pair.session
    assert session.record.output.encoding == fmt.encoding
    turn = session.begin_turn("speaking")
    item = session.agent_output.start_audio(turn)
    assert item is not None
    session.agent_output.send_audio(item, payload)
    pair.settle()
    if payload:
        assert [e.payload for e in pair.client_events if isinstance(e, AudioChunk)] == [payload]
    assert pair.client.playback(item, 10_000.0, pair.now) == ms
    pair.settle()
    assert pair.agent_events == [PlaybackReported(item_id=item, played_ms=ms, turn_id=turn)]


def test_a_format_the_agent_cannot_produce_falls_back_to_pcm16() -> None:
    """§8.2: otherwise pcm16 at 24 kHz."""
    assert choose_format(PCMU, (PCM16_24K,)) == PCM16_24K
    assert choose_format(None, (PCMU,)) == PCM16_24K
    assert duration_ms(bytes(480), Format(encoding="pcm16", sample_rate=24000)) == 10.0
    assert opus_duration_ms(bytes([0xF8])) == 20.0  # CELT 20 ms


def test_capabilities_are_negotiated_and_gated() -> None:
    """§3.3: the offered tokens the other side supports, once each, in order; §3.4: a
    gated message only while its capability is in effect; private tokens are x-."""
    assert negotiate((TOOL_STREAM, "x-a", TOOL_STREAM), (TOOL_STREAM,)) == (TOOL_STREAM,)
    assert validate_supported((TOOL_STREAM, "x-mine", TOOL_STREAM)) == (TOOL_STREAM, "x-mine")
    for bad in ("Not A Token", "unregistered-v1"):
        with pytest.raises(LocalProtocolError):
            validate_supported((bad,))
    assert not is_token("x" * 65)
    assert gating_capability("tool.stream") == TOOL_STREAM
    assert gating_capability("text") is None
    with pytest.raises(LocalProtocolError):
        check_gated("tool.stream", ())


def test_a_client_holds_in_effect_only_what_it_offered() -> None:
    """§3.3: the capabilities in effect are offered ones; a ready naming one the client
    never offered does not put it in effect."""
    pcm = {"encoding": "pcm16", "sampleRate": 24000}
    ready = {"v": 1, "seq": 0, "type": "ready", "sessionId": "s", "input": pcm, "output": pcm}
    ready["capabilities"] = ["x-other", TOOL_STREAM]
    for offered, in_effect in (((TOOL_STREAM,), (TOOL_STREAM,)), ((), ())):
        client = ClientSession(capabilities=offered)
        client.connection_made(0.0)
        client.receive_text(json.dumps(ready), 0.0)
        assert client.capabilities == in_effect


@pytest.mark.parametrize(
    "changes",
    [
        {"heartbeat_timeout": 0},
        {"max_unacked": 0},
        {"frame_rate": 0},
    ],
)
def test_server_settings_must_be_positive(changes: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="positive"):
        ServerConfig(**changes)


def test_bounds_refuse_nonsense() -> None:
    """§11: limits too small to carry vRT, windows of nothing."""
    for kwargs in ({"max_frame_bytes": 1}, {"max_depth": 10_000}):
        with pytest.raises(ValueError, match=r"max_depth|too small"):
            Limits(**kwargs)
    with pytest.raises(ValueError, match="max_kept"):
        OutgoingStream(0)
    with pytest.raises(ValueError, match="max_kept_bytes"):
        OutgoingStream(1, max_kept_bytes=0)
    with pytest.raises(ValueError, match="positive"):
        ReadBudget(0, 1, 1, 1, 0.0)


def test_a_byte_bounded_window_drops_the_oldest_and_a_resume_needing_it_fails() -> None:
    """§4.1, §11: a sender MAY bound what it keeps; a resume that needs a discarded
    message then fails (§5.4)."""
    stream = OutgoingStream(10, max_kept_bytes=100)
    for n in range(4):
        stream.send(Error(code="AGENT_ERROR", message=str(n), recoverable=True))
    assert stream.unacked < 4
    assert 0 < stream.kept_bytes <= 100
    assert stream.resend_after(0) is None
    assert stream.ack(0) == 0
    assert OutgoingStream().ack(5) == 0  # nothing sent: nothing to discard
    assert IncomingStream().take_ack(0.0) is None


def test_the_client_remembers_a_bounded_number_of_items_and_answers() -> None:
    """§8.4, §7.2: playback reports and one-answer-per-call bookkeeping stay bounded."""
    pair = Pair()
    pair.connect()
    session = pair.session
    turn = session.begin_turn("speaking")
    for _ in range(REMEMBERED_ITEMS + 1):
        session.agent_output.start_audio(turn)
    pair.settle()
    assert len(pair.client._items) == REMEMBERED_ITEMS
    queue = ToolQueue()
    calls = [
        ToolCall(call_id=f"c{n}", name="t", arguments=None, turn_id="t", epoch=1)
        for n in range(REMEMBERED_ANSWERS + 1)
    ]
    for call in calls:
        assert queue.first_answer(call.call_id)
    assert not queue.first_answer(calls[-1].call_id)  # answered already
    assert not queue.known("c0")  # forgotten: the oldest answer left the bound
    assert queue.queued == 0


def test_the_tables_refuse_what_has_no_row() -> None:
    """docs/architecture.md: a (state, input) pair without a row is the caller's bug."""
    with pytest.raises(LocalProtocolError):
        CLIENT_TABLE.row(ClientState.OPEN, ClientInput.CONNECTION_OPENED)
    pair = Pair()
    pair.connect()
    with pytest.raises(LocalProtocolError):
        pair.client.connection_made(pair.now)  # a second connection while open
    assert SERVER_TABLE.row(ServerState.OPEN, ServerInput.PING).action is ServerAction.PONG
    row = Row(
        state=ServerState.OPEN,
        input=ServerInput.PING,
        action=ServerAction.PONG,
        next=None,
        section="§4.4",
    )
    with pytest.raises(ValueError, match="two rows"):
        Transitions([row, row], ServerState)
    assert markdown(SERVER_TABLE, "Connection state").count("\n") > 20


@pytest.mark.parametrize(
    ("text", "code"),
    [
        (b'{"v":1,"seq":1,"type":"text","text":"\xff"}', "MALFORMED"),  # not UTF-8
        (b'{"v":1,"seq":1,"type":"text","text":"\\ud800"}', "INVALID_FIELD"),
        (b'{"v":1,"seq":1,"type":"text","text":"x","\\ud800":1}', "INVALID_FIELD"),
        (b'{"v":1,"seq":1,"type":"context","context":[1e400]}', "INVALID_FIELD"),
        (
            b'{"v":1,"seq":1,"type":"context","context":' + b"[" * 70 + b"]" * 70 + b"}",
            "LIMIT_EXCEEDED",
        ),
        (b'{"v":1,"seq":1,"type":"context","context":{"a":1,"a":2}}', "INVALID_FIELD"),
        (b'{"v":1,"seq":1,"type":"context","context":NaN}', "MALFORMED"),
        ('{"v":1,"seq":1,"type":"text","text":"\ud800"}', "MALFORMED"),  # unencodable str
        (b'{"v":1,"seq":1,"type":"context","context":[1e400,NaN]}', "MALFORMED"),
        (CONTEXT + b"[1e400," + b"[" * 3000 + b"]" * 3001 + b"}", "LIMIT_EXCEEDED"),
        (CONTEXT + b"[" * 3000 + b"]" * 3000 + b"}", "LIMIT_EXCEEDED"),
        (
            b'{"v":1,"seq":1,"type":"playback","itemId":"i","playedMs":' + b"9" * 25 + b"}",
            "LIMIT_EXCEEDED",
        ),
        (b'{"v":1,"seq":1,"type":"text","text":"' + b"x" * (1 << 20) + b'"}', "LIMIT_EXCEEDED"),
    ],
)
def test_what_the_first_parser_refuses_the_second_judges(text: bytes | str, code: str) -> None:
    """§2.2, §9.1: JSON that orjson does not read (numbers beyond a double, unpaired
    surrogates) is judged by the schema rules; what is not JSON is MALFORMED."""
    result = decode_client(text)
    assert isinstance(result, Invalid)
    assert result.code == code


def test_a_hello_with_more_tools_than_the_limit_is_refused() -> None:
    """§11: at most max_tools tools in a hello."""
    decoder = Decoder("client", Limits(max_tools=1))
    assert decoder.limits.max_tools == 1
    result = decoder.decode(b'{"v":1,"seq":0,"type":"hello","tools":[{"name":"a"},{"name":"b"}]}')
    assert isinstance(result, Invalid)
    assert result.code == "LIMIT_EXCEEDED"


def test_a_deep_frame_through_the_second_parser_is_too_deep() -> None:
    """§11: nesting beyond the limit is LIMIT_EXCEEDED, whichever parser read it."""
    deep = b'{"v":1,"seq":1,"type":"context","context":' + b"[" * 70 + b"1e400" + b"]" * 70 + b"}"
    result = decode_client(deep)
    assert isinstance(result, Invalid)
    assert result.code == "LIMIT_EXCEEDED"


def test_strict_encoding_refuses_what_the_spec_forbids() -> None:
    """architecture.md: with check_encoding, a message the receiver would refuse raises."""
    with pytest.raises(LocalProtocolError):
        encode(Interrupt(epoch=-5, reason="user"), 1)
    with pytest.raises(LocalProtocolError):
        encode(Error(code="AGENT_ERROR", message=object(), recoverable=True), 1)  # type: ignore[arg-type]


def test_the_pair_traces_what_it_delivers() -> None:
    """vrt.protocol.testing: the trace holds each frame handed over, decodable."""
    pair = Pair()
    pair.connect()
    texts = [i for _, _, i in pair.trace if isinstance(i, SendText)]
    assert isinstance(decode_client(texts[0].data), Decoded)
    assert isinstance(decode_server(texts[1].data), Decoded)
    with pytest.raises(LookupError):
        _ = Pair().session


class _Kinds:
    """An output writer that names what it was handed."""

    def text(self, data: bytes) -> str:
        return f"text {data!r}"

    def binary(self, data: bytes) -> str:
        return f"binary {data!r}"

    def close(self, close: Close) -> str:
        return f"close {close.code} {close.reason} wait={close.wait}"


def test_dispatch_hands_each_output_to_the_method_for_its_kind() -> None:
    """outputs.py: every driver turns outputs into frames through ``dispatch``; a close
    says whether to wait for the peer's answer (not for a connection found dead, §4.4)."""
    kinds = _Kinds()
    assert dispatch(SendText(data=b"x"), kinds) == "text b'x'"
    assert dispatch(SendBinary(data=b"x"), kinds) == "binary b'x'"
    assert dispatch(Close(code=1000, reason="bye"), kinds) == "close 1000 bye wait=True"
    dead = Close(code=4000, reason="no frame from the server", wait=False)
    assert dispatch(dead, kinds) == "close 4000 no frame from the server wait=False"
