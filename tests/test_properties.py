"""Property tests of the codec (Hypothesis).

(a) decode(encode(m, seq)) gives back (seq, m) for generated valid messages of every
    type of both directions;
(b) the decoder never raises: whatever the input, it returns a message or an Invalid
    with one of the five codes, and LIMIT_EXCEEDED only when a limit is exceeded.

Profiles: "vrt-properties" (default, the whole file in well under 30 s) and
"vrt-long" (VRT_LONG=1).
"""

from __future__ import annotations

import json
import os
import typing
from typing import Any, Final, Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vrt.protocol import (
    UNSET,
    Ack,
    AgentText,
    AudioStart,
    ContextUpdate,
    Decoded,
    Decoder,
    Error,
    ErrorCode,
    FailureCode,
    Format,
    Hello,
    Interrupt,
    Interrupted,
    Invalid,
    Limits,
    Message,
    Ping,
    Playback,
    Pong,
    Ready,
    Tool,
    ToolCall,
    ToolCallDelta,
    ToolResult,
    ToolStream,
    ToolStreamPhase,
    Transcript,
    TurnState,
    UserText,
    encode,
)
from vrt.protocol.messages import CLIENT_TYPES, SERVER_TYPES
from vrt.protocol.schemas import Sender, message_schemas, shared_object_members

settings.register_profile(
    "vrt-properties",
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "vrt-long",
    max_examples=1000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
LONG: Final = bool(os.environ.get("VRT_LONG"))
PROFILE: Final = settings.get_profile("vrt-long" if LONG else "vrt-properties")
pytestmark = [pytest.mark.timeout(1800)] if LONG else []

MAX_U32: Final = 4294967295
ENCODINGS: Final[tuple[Literal["pcm16", "pcmu", "opus"], ...]] = ("pcm16", "pcmu", "opus")
CODES: Final = frozenset(
    {
        ErrorCode.MALFORMED,
        ErrorCode.UNSUPPORTED_VERSION,
        ErrorCode.UNKNOWN_TYPE,
        ErrorCode.INVALID_FIELD,
        ErrorCode.LIMIT_EXCEEDED,
    }
)
SENDERS: Final[tuple[Sender, Sender]] = ("client", "server")
DECODERS: Final = {sender: Decoder(sender) for sender in SENDERS}

# --- building blocks ------------------------------------------------------------------

u32 = st.integers(0, MAX_U32)
seq_sequenced = st.integers(1, MAX_U32)
ids = st.text(min_size=1, max_size=256)
ids_short = st.text(min_size=1, max_size=12) | ids
ids_or_null = st.none() | ids_short
tool_names = st.from_regex(r"\A[A-Za-z0-9_.-]{1,64}\Z")
capability_tokens = st.from_regex(r"\A[a-z0-9]{1,8}([.-][a-z0-9]{1,8}){0,4}\Z").filter(
    lambda t: len(t) <= 64
)
failure_codes = st.sampled_from(typing.get_args(FailureCode))
error_codes = st.from_regex(r"\A[A-Z]{1,10}(_[A-Z]{1,10}){0,3}\Z")

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
json_objects = st.dictionaries(st.text(max_size=8), json_values, max_size=4)


def extras(known: frozenset[str]) -> st.SearchStrategy[Any]:
    """UNSET, or a non-empty dict of members a receiver does not recognise."""
    names = st.text(max_size=10).filter(lambda n: n not in known)
    return st.just(UNSET) | st.dictionaries(names, json_values, min_size=1, max_size=3)


def members_of(sender: Sender, type_: str) -> frozenset[str]:
    return message_schemas()[sender][type_].members


def optional(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.just(UNSET) | strategy


@st.composite
def formats(draw: st.DrawFn) -> Format:
    encoding = draw(st.sampled_from(ENCODINGS))
    rate = st.just(8000) if encoding == "pcmu" else st.integers(1, 384000)
    return Format(
        encoding=encoding,
        sample_rate=draw(optional(rate)),
        extra=draw(extras(shared_object_members("format"))),
    )


tools = st.builds(
    Tool,
    name=tool_names,
    description=optional(st.text(max_size=40)),
    parameters=optional(json_objects),
    extra=extras(shared_object_members("tool")),
)


@st.composite
def hellos(draw: st.DrawFn) -> Hello:
    session_id = draw(optional(ids_short))
    return Hello(
        session_id=session_id,
        # dependentRequired: resumeFrom only with sessionId
        resume_from=UNSET if session_id is UNSET else draw(optional(u32)),
        tools=draw(optional(st.lists(tools, max_size=4, unique_by=lambda t: t.name).map(tuple))),
        input=draw(optional(formats())),
        output=draw(optional(formats())),
        capabilities=draw(optional(st.lists(capability_tokens, max_size=4).map(tuple))),
        context=draw(optional(json_values)),
        auth=draw(optional(st.text(max_size=30) | json_objects)),
        extra=draw(extras(members_of("client", "hello"))),
    )


@st.composite
def tool_results(draw: st.DrawFn) -> ToolResult:
    extra = draw(extras(members_of("client", "tool.result")))
    call_id, epoch = draw(ids_short), draw(u32)
    if draw(st.booleans()):
        return ToolResult(
            call_id=call_id, epoch=epoch, ok=True, output=draw(json_values), extra=extra
        )
    return ToolResult(
        call_id=call_id,
        epoch=epoch,
        ok=False,
        code=draw(failure_codes),
        message=draw(st.none() | st.text(max_size=40)),
        extra=extra,
    )


@st.composite
def tool_streams(draw: st.DrawFn) -> ToolStream:
    phase = draw(st.sampled_from(typing.get_args(ToolStreamPhase)))
    members: dict[str, Any] = {}
    if phase == "arguments-delta":
        members["delta"] = draw(st.text(max_size=20))
    elif phase == "arguments-complete":
        members["arguments"] = draw(json_values)
    elif phase == "progress":
        members["progress"] = draw(json_values)
    elif phase == "settled":
        members["ok"] = draw(st.booleans())
        if not members["ok"]:
            members["code"] = draw(failure_codes)
    elif phase == "failed":
        members["message"] = draw(st.text(max_size=20))
    return ToolStream(
        call_id=draw(ids_short),
        name=draw(st.text(max_size=20)),
        turn_id=draw(ids_short),
        epoch=draw(u32),
        phase=phase,
        extra=draw(extras(members_of("server", "tool.stream"))),
        **members,
    )


def x(sender: Sender, type_: str) -> st.SearchStrategy[Any]:
    return extras(members_of(sender, type_))


#: (strategy for the message, strategy for its seq), per direction and type.
STRATEGIES: Final[
    dict[Sender, dict[str, tuple[st.SearchStrategy[Any], st.SearchStrategy[int]]]]
] = {
    "client": {
        "hello": (hellos(), st.just(0)),
        "text": (st.builds(UserText, text=st.text(), extra=x("client", "text")), seq_sequenced),
        "interrupt": (
            st.builds(
                Interrupt,
                epoch=u32,
                reason=st.sampled_from(["speech", "user", "keyboard"]),
                extra=x("client", "interrupt"),
            ),
            seq_sequenced,
        ),
        "playback": (
            st.builds(
                Playback,
                item_id=ids,
                played_ms=st.integers(0, 2**53),
                extra=x("client", "playback"),
            ),
            seq_sequenced,
        ),
        "tool.result": (tool_results(), seq_sequenced),
        "context": (
            st.builds(ContextUpdate, context=json_values, extra=x("client", "context")),
            seq_sequenced,
        ),
        "ack": (st.builds(Ack, up_to=u32, extra=x("client", "ack")), st.just(0)),
        "ping": (st.builds(Ping, extra=x("client", "ping")), st.just(0)),
    },
    "server": {
        "ready": (
            st.builds(
                Ready,
                session_id=ids,
                input=formats(),
                output=formats(),
                resumed_from=optional(u32),
                capabilities=optional(
                    st.lists(capability_tokens, max_size=4, unique=True).map(tuple)
                ),
                extra=x("server", "ready"),
            ),
            st.just(0),
        ),
        "audio.start": (
            st.builds(
                AudioStart,
                item_id=ids_short,
                turn_id=ids_short,
                epoch=u32,
                extra=x("server", "audio.start"),
            ),
            st.just(0),
        ),
        "turn.state": (
            st.builds(
                TurnState,
                turn_id=ids_short,
                epoch=u32,
                state=st.sampled_from(["listening", "thinking", "speaking", "acting", "idle"]),
                extra=x("server", "turn.state"),
            ),
            seq_sequenced,
        ),
        "transcript": (
            st.builds(
                Transcript,
                role=st.sampled_from(["user", "agent"]),
                text=st.text(),
                final=st.booleans(),
                item_id=ids_or_null,
                turn_id=ids_or_null,
                extra=x("server", "transcript"),
            ),
            seq_sequenced,
        ),
        "text": (
            st.builds(AgentText, text=st.text(), turn_id=ids_or_null, extra=x("server", "text")),
            seq_sequenced,
        ),
        "tool.call.delta": (
            st.builds(
                ToolCallDelta,
                call_id=ids_short,
                turn_id=ids_short,
                epoch=u32,
                preview=json_values,
                extra=x("server", "tool.call.delta"),
            ),
            seq_sequenced,
        ),
        "tool.call": (
            st.builds(
                ToolCall,
                call_id=ids_short,
                name=st.text(max_size=30),
                arguments=json_values,
                turn_id=ids_short,
                epoch=u32,
                extra=x("server", "tool.call"),
            ),
            seq_sequenced,
        ),
        "tool.stream": (tool_streams(), seq_sequenced),
        "interrupted": (
            st.builds(Interrupted, epoch=u32, extra=x("server", "interrupted")),
            seq_sequenced,
        ),
        "ack": (st.builds(Ack, up_to=u32, extra=x("server", "ack")), st.just(0)),
        "pong": (st.builds(Pong, extra=x("server", "pong")), st.just(0)),
        "error": (
            st.builds(
                Error,
                code=error_codes,
                message=st.text(max_size=40),
                recoverable=st.booleans(),
                extra=x("server", "error"),
            ),
            u32,
        ),
    },
}

ALL_TYPES: Final = [(s, t) for s in SENDERS for t in STRATEGIES[s]]


def test_strategies_cover_every_type() -> None:
    assert set(STRATEGIES["client"]) == {c.TYPE for c in CLIENT_TYPES}
    assert set(STRATEGIES["server"]) == {c.TYPE for c in SERVER_TYPES}


# --- (a) round trip ---------------------------------------------------------------------


@pytest.mark.parametrize(("sender", "type_"), ALL_TYPES, ids=[f"{s}-{t}" for s, t in ALL_TYPES])
@PROFILE
@given(data=st.data())
def test_decode_encode_round_trip(sender: Sender, type_: str, data: st.DataObject) -> None:
    message_strategy, seq_strategy = STRATEGIES[sender][type_]
    message: Message = data.draw(message_strategy, label="message")
    seq = data.draw(seq_strategy, label="seq")
    assert type_ == message.TYPE
    encoded = encode(message, seq)
    result = DECODERS[sender].decode(encoded)
    assert isinstance(result, Decoded), f"{encoded!r} refused: {result}"
    assert result.seq == seq
    assert result.message == message
    assert encode(result.message, result.seq) == encoded


# --- (b) the decoder never raises -----------------------------------------------------------


def depth(value: Any) -> int:
    """Nesting depth as the limits count it: an object or array is one level more than
    its deepest child; scalars add nothing."""
    if isinstance(value, dict):
        return 1 + max((depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((depth(v) for v in value), default=0)
    return 0


def parsed(data: bytes) -> Any:
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None


def check_outcome(decoder: Decoder, data: bytes | str) -> Decoded[Any] | Invalid:
    result = decoder.decode(data)
    assert isinstance(result, (Decoded, Invalid)), result
    raw = data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass")
    value = parsed(raw)
    limits = decoder.limits
    too_big = len(raw) > limits.max_frame_bytes
    too_deep = depth(value) > limits.max_depth
    tools = value.get("tools") if isinstance(value, dict) else None
    too_many_tools = isinstance(tools, list) and len(tools) > limits.max_tools
    exceeded = too_big or too_deep or too_many_tools
    if isinstance(result, Invalid):
        assert result.code in CODES, result
        assert result.reason
        if result.code == ErrorCode.LIMIT_EXCEEDED:
            assert exceeded, f"no limit exceeded: {result}"
        if result.code == ErrorCode.INVALID_FIELD:
            # Invalid.type: "The message type, once rules 1-3 have passed"
            assert result.type is not None, result
    else:
        assert not exceeded, f"a limit was exceeded: {result}"
    if too_big:
        assert isinstance(result, Invalid)
        assert result.code == ErrorCode.LIMIT_EXCEEDED
    return result


SMALL: Final = Limits(max_frame_bytes=400, max_depth=4, max_tools=2)
SMALL_DECODERS: Final = {sender: Decoder(sender, SMALL) for sender in SENDERS}

senders = st.sampled_from(SENDERS)
limited = st.booleans()


def pick(sender: Sender, small: bool) -> Decoder:
    return (SMALL_DECODERS if small else DECODERS)[sender]


@PROFILE
@given(senders, limited, st.binary(max_size=600))
def test_arbitrary_bytes(sender: Sender, small: bool, data: bytes) -> None:
    check_outcome(pick(sender, small), data)


@PROFILE
@given(senders, limited, st.text(max_size=300))
def test_arbitrary_text(sender: Sender, small: bool, text: str) -> None:
    result = check_outcome(pick(sender, small), text)
    assert result == pick(sender, small).decode(text.encode())


any_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=20,
)


def dumps(value: Any) -> str:
    # allow_nan=True writes Infinity, which is not JSON: good input for the decoder too
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@PROFILE
@given(senders, limited, any_json)
def test_arbitrary_json_values(sender: Sender, small: bool, value: Any) -> None:
    decoder = pick(sender, small)
    text = dumps(value)
    result = check_outcome(decoder, text)
    if not isinstance(value, dict) and len(text.encode()) <= decoder.limits.max_frame_bytes:
        assert isinstance(result, Invalid)
        assert result.code == ErrorCode.MALFORMED


KNOWN_MEMBERS: Final = sorted(
    {m for s in SENDERS for schema in message_schemas()[s].values() for m in schema.members}
)
REAL_TYPES: Final = sorted({t for s in SENDERS for t in message_schemas()[s]})
member_names = st.sampled_from(KNOWN_MEMBERS) | st.text(max_size=8)
member_values = (
    json_values
    | u32
    | ids_short
    | formats().map(lambda f: json.loads(encode(Hello(input=f)))["input"])
    | st.lists(st.fixed_dictionaries({"name": tool_names}), max_size=4)
)


@st.composite
def objects_with_v1(draw: st.DrawFn) -> dict[str, Any]:
    members = draw(st.dictionaries(member_names, member_values, max_size=8))
    members["v"] = 1
    real = st.sampled_from(REAL_TYPES)
    members["type"] = draw(st.one_of(real, real, real, st.text(max_size=12)))
    if draw(st.booleans()):
        members["seq"] = draw(st.sampled_from([0, 1, MAX_U32]) | u32 | json_values)
    return members


@PROFILE
@given(senders, limited, objects_with_v1())
def test_arbitrary_objects_with_v1(sender: Sender, small: bool, value: dict[str, Any]) -> None:
    result = check_outcome(pick(sender, small), dumps(value))
    own_type = value["type"] in message_schemas()[sender]
    if isinstance(result, Invalid):
        assert result.code not in (ErrorCode.MALFORMED, ErrorCode.UNSUPPORTED_VERSION), result
        if result.code == ErrorCode.UNKNOWN_TYPE:
            assert not own_type, result
        elif result.code == ErrorCode.INVALID_FIELD:
            assert result.type == value["type"], result
    else:
        assert value["type"] == result.message.TYPE


@PROFILE
@given(senders, st.integers(1, 12), st.integers(0, 3))
def test_depth_limit_is_exact(sender: Sender, levels: int, shape: int) -> None:
    """A context/unknown member nested ``levels`` deep decodes iff the message's depth
    (1 + levels) is within max_depth."""
    inner: Any = 0
    for i in range(levels):
        inner = [inner] if (i + shape) % 2 else {"k": inner}
    type_, body = ("context", {"context": inner}) if sender == "client" else ("pong", {"z": inner})
    seq = 1 if sender == "client" else 0
    text = dumps({"v": 1, "seq": seq, "type": type_, **body})
    result = check_outcome(SMALL_DECODERS[sender], text)
    assert isinstance(result, Decoded) == (1 + levels <= SMALL.max_depth)


@st.composite
def mutated(draw: st.DrawFn) -> tuple[Sender, str, dict[str, Any]]:
    """A valid message of a random type with one member other than v and type replaced,
    added or removed."""
    sender, type_ = draw(st.sampled_from(ALL_TYPES))
    message_strategy, seq_strategy = STRATEGIES[sender][type_]
    value = json.loads(encode(draw(message_strategy), draw(seq_strategy)))
    names = sorted(members_of(sender, type_) - {"v", "type"})
    name = draw(
        st.sampled_from(names) | st.text(max_size=8).filter(lambda n: n not in ("v", "type"))
    )
    if name in value and draw(st.booleans()):
        del value[name]
    else:
        value[name] = draw(member_values)
    return sender, type_, value


@PROFILE
@given(limited, mutated())
def test_mutated_valid_messages(small: bool, case: tuple[Sender, str, dict[str, Any]]) -> None:
    """With v and type intact, rules 1-3 pass: the outcome is the message itself or
    INVALID_FIELD (or a limit), and never for another type."""
    sender, type_, value = case
    result = check_outcome(pick(sender, small), dumps(value))
    if isinstance(result, Invalid):
        assert result.code in (ErrorCode.INVALID_FIELD, ErrorCode.LIMIT_EXCEEDED), result
        if result.code == ErrorCode.INVALID_FIELD:
            assert result.type == type_
    else:
        assert type_ == result.message.TYPE
        assert json.loads(encode(result.message, result.seq)) == value
