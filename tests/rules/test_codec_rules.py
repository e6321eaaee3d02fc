"""The decoder's classification and reasons (§9.1, §4.1, §5.2, §11), limits' own
bounds, and the unknown members nested objects keep (§2.2). Survivors of mutation
testing on ``codec.py`` (docs/testing.md#mutation-testing).

A reason is what a peer's developer reads in ``error.message``: the tests pin it.
"""

from __future__ import annotations

import sys
from typing import Any

import msgspec
import orjson
import pytest

from vrt.protocol.codec import Decoded, Decoder, Invalid, Limits, decode_client
from vrt.protocol.errors import ErrorCode
from vrt.protocol.messages import Format, Hello, Ready, TurnState


def _refused(data: bytes | str, decoder: Decoder | None = None) -> Invalid:
    result = decoder.decode(data) if decoder is not None else decode_client(data)
    assert isinstance(result, Invalid), result
    return result


def _hello(**members: object) -> bytes:
    return orjson.dumps({"v": 1, "seq": 0, "type": "hello", **members})


# -- limits ---------------------------------------------------------------------------


def test_limits_accept_their_smallest_and_largest_values() -> None:
    """§11: the smallest frame limit (64 bytes) and the parser's own depth (1024) are
    valid settings; one beyond either is refused."""
    assert Limits(max_frame_bytes=64).max_frame_bytes == 64
    assert Limits(max_depth=1024).max_depth == 1024
    with pytest.raises(ValueError, match="limits too small"):
        Limits(max_frame_bytes=63)
    with pytest.raises(ValueError, match=r"^max_depth can be at most 1024 \(the parser"):
        Limits(max_depth=1025)


# -- §9.1 rule 1: MALFORMED ---------------------------------------------------------


@pytest.mark.parametrize(
    ("frame", "kind"),
    [
        (b"null", "null"),
        (b"true", "a boolean"),
        (b"1", "a number"),
        (b'"s"', "a string"),
        (b"[]", "an array"),
    ],
)
def test_a_frame_that_is_not_an_object_names_its_kind(frame: bytes, kind: str) -> None:
    """§9.1: JSON that is not an object is MALFORMED, and the reason says what it is."""
    assert _refused(frame) == Invalid(
        ErrorCode.MALFORMED, f"the frame is {kind}, not a JSON object"
    )


def test_a_constant_in_a_frame_the_fallback_parser_reads_is_malformed() -> None:
    """§9.1, RFC 8259: ``NaN`` is not JSON, also in a frame with an unpaired surrogate
    (which only the fallback parser reads): MALFORMED, not INVALID_FIELD."""
    frame = b'{"v":1,"seq":1,"type":"text","text":"\\ud800","x":NaN}'
    assert _refused(frame) == Invalid(
        ErrorCode.MALFORMED, "the frame is not JSON: NaN is not a JSON value"
    )


def test_deep_nesting_in_a_frame_the_fallback_parser_reads_is_limit_exceeded() -> None:
    """§11: nesting too deep for the fallback parser is LIMIT_EXCEEDED."""
    frame = b'{"v":1,"seq":1,"type":"text","text":"\\ud800","x":' + b"[" * 5000 + b"]" * 5000 + b"}"
    assert _refused(frame) == Invalid(ErrorCode.LIMIT_EXCEEDED, "the frame is nested too deeply")


# -- §9.1 rules 2 and 3 -------------------------------------------------------------


def test_an_unsupported_version_is_shown() -> None:
    """§3.1, §9.1: the reason shows ``v`` as sent, cut to 40 characters."""
    assert _refused(_hello(v=2)).reason == (
        "v is 2; this receiver speaks vRT major version 1 (§3.1)"
    )
    exact = "a" * 38  # 40 characters with its quotes: shown whole
    assert _refused(_hello(v=exact)).reason.startswith(f'v is "{exact}"; ')
    longer = "a" * 39  # 41: cut to 37 and "..."
    assert _refused(_hello(v=longer)).reason.startswith(f'v is "{longer[:36]}...; ')


def test_a_missing_or_non_string_type_is_explained() -> None:
    """§9.1: UNKNOWN_TYPE says whether ``type`` is absent or not a string."""
    assert _refused(b'{"v":1,"seq":0}') == Invalid(
        ErrorCode.UNKNOWN_TYPE, "the message has no type member (§9.1)"
    )
    assert _refused(b'{"v":1,"seq":0,"type":5}').reason == "type is a number, not a string (§9.1)"
    assert _refused(b'{"v":1,"seq":0,"type":{}}').reason == "type is an object, not a string (§9.1)"


def test_a_server_decoder_knows_server_types() -> None:
    """§2.3, §9.1: a decoder made for what a server sends reads server messages, and
    names its own direction for a type it does not know."""
    decoder = Decoder("server")
    assert decoder.sender == "server"
    decoded = decoder.decode(
        b'{"v":1,"seq":1,"type":"turn.state","turnId":"t","epoch":1,"state":"thinking"}'
    )
    assert isinstance(decoded, Decoded)
    assert isinstance(decoded.message, TurnState)
    assert _refused(b'{"v":1,"seq":1,"type":"nope"}', decoder).reason == (
        "'nope' is not a server message type of vRT v1 (§9.1)"
    )


# -- §9.1 rule 4: INVALID_FIELD -----------------------------------------------------


def test_a_seq_out_of_its_class_is_explained() -> None:
    """§4.1: a sequenced message with seq 0 is INVALID_FIELD, and the reason states its
    seq class."""
    assert _refused(b'{"v":1,"seq":0,"type":"text","text":"a"}').reason == (
        "text: seq 0 is out of its class: a sequenced message's seq is an integer from 1 "
        "to 4294967295 (§4.1)"
    )


def test_a_schema_error_names_where_it_is() -> None:
    """§9.1: a schema error at the top has no location; a nested one a JSON pointer."""
    assert _refused(b'{"v":1,"seq":1,"type":"text"}').reason == (
        'text: "text" is a required property'
    )
    assert _refused(_hello(tools=[{"name": 5}])).reason == (
        'hello at /tools/0/name: 5 is not of type "string"'
    )


def test_a_tool_declared_twice_is_invalid_field_of_hello() -> None:
    """§5.2: two tools with one name are INVALID_FIELD, of type hello."""
    assert _refused(_hello(tools=[{"name": "a"}, {"name": "a"}])) == Invalid(
        ErrorCode.INVALID_FIELD,
        "hello: tool name 'a' is declared twice; names must be unique (§5.2)",
        "hello",
    )


def test_a_surrogate_is_found_whatever_follows_it() -> None:
    """§9.1: a string with an unpaired surrogate is INVALID_FIELD, also when an object
    follows it in the message (the check must not forget what it found)."""
    frame = b'{"v":1,"seq":1,"type":"text","text":"\\ud800","x":{"a":1}}'
    assert _refused(frame) == Invalid(
        ErrorCode.INVALID_FIELD,
        "text: holds a string with an unpaired surrogate, which cannot be passed on faithfully",
        "text",
    )


# -- §2.2: nested objects keep their unknown members ----------------------------------


def test_formats_and_tools_keep_unknown_members() -> None:
    """§2.2: a format's and a tool's unknown members are kept, not dropped. (A decoder of
    its own: the shared ones are built once, before a mutation run switches a mutant on.)"""
    decoded = Decoder("client").decode(
        _hello(
            input={"encoding": "pcm16", "x-in": 1},
            output={"encoding": "pcm16", "x-out": 2},
            tools=[{"name": "a", "x-tool": 3}],
        )
    )
    assert isinstance(decoded, Decoded), decoded
    hello = decoded.message
    assert isinstance(hello, Hello)
    assert isinstance(hello.input, Format)
    assert isinstance(hello.output, Format)
    assert hello.input.extra == {"x-in": 1}
    assert hello.output.extra == {"x-out": 2}
    assert hello.tools != ()
    assert [tool.extra for tool in hello.tools] == [{"x-tool": 3}]  # type: ignore[union-attr]


def test_the_formats_of_ready_keep_unknown_members() -> None:
    """§2.2: as in ``hello``, the formats a ``ready`` confirms keep their unknown members."""
    ready = orjson.dumps(
        {
            "v": 1,
            "seq": 0,
            "type": "ready",
            "sessionId": "s",
            "input": {"encoding": "pcm16", "x-in": 1},
            "output": {"encoding": "pcmu", "sampleRate": 8000, "x-out": 2},
        }
    )
    decoded = Decoder("server").decode(ready)
    assert isinstance(decoded, Decoded), decoded
    message = decoded.message
    assert isinstance(message, Ready)
    assert message.input.extra == {"x-in": 1}
    assert message.output.extra == {"x-out": 2}


@pytest.mark.parametrize("extra", [{}, {"x-vendor": True}])
def test_an_integral_float_is_an_integer(extra: dict[str, object]) -> None:
    """§2.2: ``24000.0`` is the integer 24000 (JSON does not tell them apart), in a
    format with or without unknown members."""
    decoded = decode_client(_hello(input={"encoding": "pcm16", "sampleRate": 24000.0, **extra}))
    assert isinstance(decoded, Decoded), decoded
    hello = decoded.message
    assert isinstance(hello, Hello)
    assert isinstance(hello.input, Format)
    assert hello.input.sample_rate == 24000


# -- more of §9.1 and §11, as the reasons say them ----------------------------------


def test_a_defect_in_the_decoder_is_invalid_field_not_an_exception(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """§9.1: the decoder never raises: a defect inside it is INVALID_FIELD."""

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("boom")

    # A defect in what the decoder calls last for a valid frame. Replaced in msgspec,
    # which the decoder reads at each call, compiled (mypyc) or not: a compiled Decoder
    # does not look up its own methods in its class, so replacing _decode goes unseen.
    monkeypatch.setattr(msgspec, "convert", broken)
    assert Decoder("client").decode(b'{"v":1,"seq":0,"type":"ping"}') == Invalid(
        ErrorCode.INVALID_FIELD, "the message could not be read: RuntimeError('boom')"
    )


def test_a_text_frame_that_is_not_utf8_is_malformed() -> None:
    """§2.2, §9.1: a text frame given as a str that cannot be UTF-8 is MALFORMED."""
    assert _refused("\ud800") == Invalid(ErrorCode.MALFORMED, "the frame is not UTF-8")


def test_nesting_beyond_the_parser_is_limit_exceeded() -> None:
    """§11: nesting deeper than the parser goes is LIMIT_EXCEEDED."""
    assert _refused(b"[" * 1100 + b"]" * 1100) == Invalid(
        ErrorCode.LIMIT_EXCEEDED, "the frame is nested too deeply (§11)"
    )


def test_an_absent_version_is_called_absent() -> None:
    """§3.1, §9.1: without ``v`` the reason says it is absent."""
    assert _refused(b'{"seq":0,"type":"hello"}') == Invalid(
        ErrorCode.UNSUPPORTED_VERSION,
        "v is absent; this receiver speaks vRT major version 1 (§3.1)",
    )


def test_an_integer_past_64_bits_is_limit_exceeded() -> None:
    """§11: a valid integer this receiver cannot hold (``playedMs`` has no maximum) is
    LIMIT_EXCEEDED, of its message's type."""
    frame = b'{"v":1,"seq":1,"type":"playback","itemId":"i","playedMs":%d}' % 2**70
    refused = _refused(frame)
    assert refused.code == ErrorCode.LIMIT_EXCEEDED
    assert refused.type == "playback"
    assert refused.reason.startswith(
        "playback: a number this receiver cannot hold, past 64-bit integers (§11): "
    )


def test_an_integer_beyond_the_double_range_is_invalid_field() -> None:
    """§9.1: an integer beyond the range of a double cannot be passed on faithfully:
    INVALID_FIELD, not a limit."""
    frame = b'{"v":1,"seq":1,"type":"playback","itemId":"i","playedMs":' + b"9" * 400 + b"}"
    assert _refused(frame) == Invalid(
        ErrorCode.INVALID_FIELD,
        "playback: holds a number beyond the range of a double, which cannot be passed on "
        "faithfully",
        "playback",
    )


def test_the_largest_double_is_in_range() -> None:
    """§9.1: the largest double, written as an integer, is in range; only what follows
    it (an unpaired surrogate) is refused."""
    largest = str(int(sys.float_info.max)).encode()
    frame = b'{"v":1,"seq":1,"type":"context","context":[' + largest + b',"\\ud800x"]}'
    assert _refused(frame).reason == (
        "context: holds a string with an unpaired surrogate, which cannot be passed on faithfully"
    )


def test_a_duplicate_hidden_behind_an_escaped_colon_is_found() -> None:
    """§2.2: a member twice in one object is INVALID_FIELD, even when the value kept
    holds a ``:`` written as ``\\u003a`` (which makes the quick colon count agree)."""
    frame = b'{"v":1,"seq":1,"type":"text","x":[],"text":"y","text":"\\u003a"}'
    assert _refused(frame) == Invalid(
        ErrorCode.INVALID_FIELD, "text: member 'text' appears twice in one object (§2.2)", "text"
    )


@pytest.mark.parametrize(
    "frame",
    [
        b'{"v":1,"seq":1,"type":"context","context":{"a":{}},"context":{}}',
        b'{"v":1,"seq":1,"type":"context","context":{},"context":{}}',
        b'{"v":1,"seq":1,"type":"context","context":{"k":{},"k":{}}}',
    ],
)
def test_a_name_given_twice_beside_empty_objects_is_refused(frame: bytes) -> None:
    """§2.2: the decoder's shortcut for objects without arrays (a ':' per member parsed)
    never hides a member named twice, at the top or nested."""
    reason = _refused(frame).reason
    assert "appears twice in one object (§2.2)" in reason


def test_empty_objects_nested_without_arrays_decode() -> None:
    frame = b'{"v":1,"seq":1,"type":"context","context":{},"x-a":{},"x-b":{}}'
    decoded = decode_client(frame)
    assert isinstance(decoded, Decoded), decoded
