"""The text-frame codec: §2.2 members, §3.1 version, §4.1 seq classes, §9.1 classification,
§11 limits, and the encoder.

Each class is named after the section whose rules it checks; each test quotes or
paraphrases the rule. Frames are written out as text so that what is on the wire is
exactly what the test says.
"""

from __future__ import annotations

import json
from typing import Any, Final

import msgspec
import pytest
from hypothesis import given, settings
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
    Format,
    Hello,
    Interrupt,
    Interrupted,
    Invalid,
    Limits,
    LocalProtocolError,
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
    Transcript,
    TurnState,
    UserText,
    decode_client,
    decode_server,
    encode,
)
from vrt.protocol.messages import CLIENT_TYPES, SERVER_TYPES
from vrt.protocol.schemas import Sender, message_schemas

MAX_U32: Final = 4294967295

#: Appendix A: the §4.1 class of every type, per direction, written out independently of
#: the schemas' x-vrt-class annotations so that a wrong annotation fails here.
SEQ_CLASS: Final[dict[Sender, dict[str, str]]] = {
    "client": {
        "hello": "transient",
        "text": "sequenced",
        "interrupt": "sequenced",
        "playback": "sequenced",
        "tool.result": "sequenced",
        "context": "sequenced",
        "ack": "transient",
        "ping": "transient",
    },
    "server": {
        "ready": "transient",
        "audio.start": "transient",
        "turn.state": "sequenced",
        "transcript": "sequenced",
        "text": "sequenced",
        "tool.call.delta": "sequenced",
        "tool.call": "sequenced",
        "tool.stream": "sequenced",
        "interrupted": "sequenced",
        "ack": "transient",
        "pong": "transient",
        "error": "sessionless",
    },
}

#: One valid body (members other than v, seq, type) for every type of each direction.
BODIES: Final[dict[Sender, dict[str, dict[str, Any]]]] = {
    "client": {
        "hello": {},
        "text": {"text": "What is the weather in Oslo?"},
        "interrupt": {"epoch": 3, "reason": "speech"},
        "playback": {"itemId": "item_1", "playedMs": 1200},
        "tool.result": {"callId": "call_1", "epoch": 1, "ok": True, "output": {"t": 21}},
        "context": {"context": {"document": "notes.md"}},
        "ack": {"upTo": 4},
        "ping": {},
    },
    "server": {
        "ready": {
            "sessionId": "sess_1",
            "input": {"encoding": "pcm16"},
            "output": {"encoding": "pcm16", "sampleRate": 24000},
        },
        "audio.start": {"itemId": "item_1", "turnId": "turn_1", "epoch": 1},
        "turn.state": {"turnId": "turn_1", "epoch": 1, "state": "thinking"},
        "transcript": {
            "role": "user",
            "text": "hello",
            "final": True,
            "itemId": None,
            "turnId": None,
        },
        "text": {"text": "It is sunny.", "turnId": "turn_1"},
        "tool.call.delta": {
            "callId": "call_1",
            "turnId": "turn_1",
            "epoch": 1,
            "preview": {"argumentsDelta": '{"ci'},
        },
        "tool.call": {
            "callId": "call_1",
            "name": "get_weather",
            "arguments": {"city": "Oslo"},
            "turnId": "turn_1",
            "epoch": 1,
        },
        "tool.stream": {
            "callId": "call_1",
            "name": "get_weather",
            "turnId": "turn_1",
            "epoch": 1,
            "phase": "start",
        },
        "interrupted": {"epoch": 2},
        "ack": {"upTo": 0},
        "pong": {},
        "error": {"code": "NO_SESSION", "message": "say hello first", "recoverable": False},
    },
}

#: One message struct of every class, built through the constructors.
MESSAGES: Final[dict[Sender, list[Message]]] = {
    "client": [
        Hello(
            session_id="sess_1",
            resume_from=7,
            tools=(
                Tool(name="get_weather", description="Weather", parameters={"type": "object"}),
                Tool(name="set_timer"),
            ),
            input=Format(encoding="pcm16", sample_rate=16000),
            output=Format(encoding="pcmu"),
            capabilities=("tool-stream-v1", "x-acme.beta"),
            context={"doc": [1, 2.5, None, True]},
            auth={"token": "t0k"},
        ),
        UserText(text="hi"),
        Interrupt(epoch=3, reason="keyboard"),
        Playback(item_id="item_1", played_ms=0),
        ToolResult.success("call_1", 2, {"ok": [1, 2]}),
        ContextUpdate(context=None),
        Ack(up_to=MAX_U32),
        Ping(),
    ],
    "server": [
        Ready(
            session_id="sess_1",
            input=Format(encoding="pcm16", sample_rate=24000),
            output=Format(encoding="opus"),
            resumed_from=3,
            capabilities=("tool-stream-v1",),
        ),
        AudioStart(item_id="item_1", turn_id="turn_1", epoch=0),
        TurnState(turn_id="turn_1", epoch=1, state="acting"),
        Transcript(role="agent", text="ok", final=False, item_id="item_1", turn_id=None),
        AgentText(text="chunk", turn_id=None),
        ToolCallDelta(call_id="c", turn_id="t", epoch=1, preview=None),
        ToolCall(call_id="c", name="get_weather", arguments=[1, "a"], turn_id="t", epoch=1),
        ToolStream(
            call_id="c", name="n", turn_id="t", epoch=1, phase="settled", ok=False, code="TIMEOUT"
        ),
        Interrupted(epoch=MAX_U32),
        Ack(up_to=0),
        Pong(),
        Error(code="AGENT_ERROR", message="model failed", recoverable=True),
    ],
}


def frame(type_: str, seq: int = 0, **members: Any) -> str:
    """A compact text frame with v 1, the given seq and type, then the members."""
    return json.dumps({"v": 1, "seq": seq, "type": type_, **members}, separators=(",", ":"))


def context_frame(value: str) -> str:
    """A client context frame whose context is the JSON text ``value``."""
    return '{"v":1,"seq":1,"type":"context","context":' + value + "}"


def nested(levels: int) -> str:
    """``levels`` nested empty arrays."""
    return "[" * levels + "]" * levels


def valid_frame(sender: Sender, type_: str) -> str:
    seq = 0 if SEQ_CLASS[sender][type_] in ("transient", "sessionless") else 1
    return frame(type_, seq, **BODIES[sender][type_])


def invalid(result: object, code: ErrorCode) -> Invalid:
    assert isinstance(result, Invalid), f"expected {code}, got {result!r}"
    assert result.code == code, f"expected {code}, got {result.code}: {result.reason}"
    return result


def decoded(result: object) -> Decoded[Any]:
    assert isinstance(result, Decoded), f"expected a message, got {result!r}"
    return result


CLIENT: Final = Decoder("client")
SERVER: Final = Decoder("server")
DECODERS: Final[dict[Sender, Decoder]] = {"client": CLIENT, "server": SERVER}
SENDERS: Final[tuple[Sender, Sender]] = ("client", "server")
ALL_TYPES: Final = [(s, t) for s in SENDERS for t in SEQ_CLASS[s]]


def _other(sender: Sender) -> Sender:
    return "server" if sender == "client" else "client"


def _type_ids(pair: tuple[str, str]) -> str:
    return f"{pair[0]}-{pair[1]}"


class TestFixtures:
    def test_every_type_has_a_sample(self) -> None:
        """The tables above cover every class of messages.py, so no type escapes."""
        assert set(SEQ_CLASS["client"]) == {c.TYPE for c in CLIENT_TYPES}
        assert set(SEQ_CLASS["server"]) == {c.TYPE for c in SERVER_TYPES}
        assert set(BODIES["client"]) == set(SEQ_CLASS["client"])
        assert set(BODIES["server"]) == set(SEQ_CLASS["server"])
        assert {type(m) for m in MESSAGES["client"]} == set(CLIENT_TYPES)
        assert {type(m) for m in MESSAGES["server"]} == set(SERVER_TYPES)

    @pytest.mark.parametrize("pair", ALL_TYPES, ids=_type_ids)
    def test_sample_bodies_are_valid(self, pair: tuple[Sender, str]) -> None:
        sender, type_ = pair
        message = decoded(DECODERS[sender].decode(valid_frame(sender, type_))).message
        assert type_ == message.TYPE


class TestSection9_1Classification:
    """§9.1: "A receiver classifies an invalid control message by the first rule it
    breaks": MALFORMED, UNSUPPORTED_VERSION, UNKNOWN_TYPE, INVALID_FIELD."""

    @pytest.mark.parametrize(
        "text",
        ["", " ", "{", "}", '{"v":1', "nul", "{'v':1}", '{"v":1,}', '{"v":01}', "{v:1}"],
    )
    def test_not_json_is_malformed(self, text: str) -> None:
        result = invalid(CLIENT.decode(text), ErrorCode.MALFORMED)
        assert "JSON" in result.reason
        assert result.type is None

    @pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
    def test_javascript_constants_are_not_json(self, constant: str) -> None:
        invalid(
            CLIENT.decode('{"v":1,"seq":0,"type":"ping","x":' + constant + "}"), ErrorCode.MALFORMED
        )

    @pytest.mark.parametrize(
        ("text", "kind"),
        [
            ("[]", "array"),
            ('[{"v":1,"seq":0,"type":"ping"}]', "array"),
            ("1", "number"),
            ("null", "null"),
            ('"ping"', "string"),
            ("true", "boolean"),
        ],
    )
    def test_a_value_that_is_not_an_object_is_malformed(self, text: str, kind: str) -> None:
        result = invalid(SERVER.decode(text), ErrorCode.MALFORMED)
        assert kind in result.reason
        assert "object" in result.reason

    @pytest.mark.parametrize(
        ("text", "code"),
        [
            # not an object, and everything else wrong inside: MALFORMED wins
            ('[{"v":2,"type":"nope","seq":-1}]', ErrorCode.MALFORMED),
            # bad v, unknown type, bad seq, duplicate member: UNSUPPORTED_VERSION wins
            ('{"v":2,"seq":-1,"type":"nope","type":"nope"}', ErrorCode.UNSUPPORTED_VERSION),
            ('{"seq":-1}', ErrorCode.UNSUPPORTED_VERSION),
            # good v; unknown type, bad seq, duplicate member: UNKNOWN_TYPE wins
            ('{"v":1,"seq":-1,"type":"nope","x":1,"x":2}', ErrorCode.UNKNOWN_TYPE),
            ('{"v":1,"seq":-1}', ErrorCode.UNKNOWN_TYPE),
            # a known type with a bad seq and a missing member: INVALID_FIELD
            ('{"v":1,"seq":-1,"type":"text"}', ErrorCode.INVALID_FIELD),
        ],
    )
    def test_first_broken_rule_wins(self, text: str, code: ErrorCode) -> None:
        invalid(CLIENT.decode(text), code)

    def test_type_is_reported_only_once_rules_1_to_3_pass(self) -> None:
        assert (
            invalid(CLIENT.decode('{"v":2,"type":"text"}'), ErrorCode.UNSUPPORTED_VERSION).type
            is None
        )
        assert invalid(CLIENT.decode('{"v":1,"type":"x"}'), ErrorCode.UNKNOWN_TYPE).type is None
        bad = invalid(CLIENT.decode('{"v":1,"seq":0,"type":"text"}'), ErrorCode.INVALID_FIELD)
        assert bad.type == "text"

    @pytest.mark.parametrize("value", ["absent", 1, None, True, ["ping"], {"ping": 1}, 1.5])
    def test_type_absent_or_not_a_string(self, value: object) -> None:
        members = {} if value == "absent" else {"type": value}
        text = json.dumps({"v": 1, "seq": 0, **members})
        result = invalid(CLIENT.decode(text), ErrorCode.UNKNOWN_TYPE)
        assert "type" in result.reason

    @pytest.mark.parametrize(
        "name",
        [
            "__proto__",
            "toString",
            "constructor",
            "hasOwnProperty",
            "valueOf",
            "__class__",
            "__dict__",
            "__init__",
            "Hello",
            "HELLO",
            " hello",
            "hello ",
            "hello\u0000",
            "hel\u200blo",
            "hello.",
            "",
            "Ping",
            "tool_result",
            "tool-result",
            "TOOL.RESULT",
        ],
    )
    def test_type_is_matched_as_an_exact_string(self, name: str) -> None:
        """§9.1: "type is compared as an exact string; implementations MUST NOT resolve it
        through inherited object properties"."""
        result = invalid(CLIENT.decode(frame(name)), ErrorCode.UNKNOWN_TYPE)
        assert repr(name) in result.reason or "§9.1" in result.reason

    @pytest.mark.parametrize("name", ["__proto__", "toString", "constructor", "Ready", "Error"])
    def test_type_is_matched_exactly_for_servers_too(self, name: str) -> None:
        invalid(SERVER.decode(frame(name)), ErrorCode.UNKNOWN_TYPE)

    @pytest.mark.parametrize(
        "pair",
        [(s, t) for s in SENDERS for t in SEQ_CLASS[_other(s)] if t not in SEQ_CLASS[s]],
        ids=_type_ids,
    )
    def test_other_directions_type_is_unknown(self, pair: tuple[Sender, str]) -> None:
        """§2.3: "A message type defined for one direction is an unknown type when the
        other direction sends it"; the reason names the direction."""
        sender, type_ = pair
        result = invalid(
            DECODERS[sender].decode(valid_frame(_other(sender), type_)), ErrorCode.UNKNOWN_TYPE
        )
        assert "§2.3" in result.reason
        assert type_ in result.reason

    def test_shared_types_take_their_own_directions_members(self) -> None:
        """§2.3: "Both directions define text and ack, with different members"."""
        assert isinstance(decoded(SERVER.decode(valid_frame("server", "text"))).message, AgentText)
        assert isinstance(decoded(CLIENT.decode(valid_frame("client", "text"))).message, UserText)
        # a client text with no turnId is fine for a server receiver, not for a client
        invalid(SERVER.decode(valid_frame("client", "text")), ErrorCode.INVALID_FIELD)

    def test_decode_shortcuts_use_their_direction(self) -> None:
        assert isinstance(decoded(decode_client(valid_frame("client", "ping"))).message, Ping)
        assert isinstance(decoded(decode_server(valid_frame("server", "pong"))).message, Pong)
        invalid(decode_client(valid_frame("server", "pong")), ErrorCode.UNKNOWN_TYPE)
        invalid(decode_server(valid_frame("client", "ping")), ErrorCode.UNKNOWN_TYPE)

    def test_schema_violation_reason_names_the_member(self) -> None:
        text = frame("interrupt", 1, epoch=1, reason="cough")
        result = invalid(CLIENT.decode(text), ErrorCode.INVALID_FIELD)
        assert "/reason" in result.reason
        result = invalid(
            CLIENT.decode(frame("playback", 1, itemId="", playedMs=1)), ErrorCode.INVALID_FIELD
        )
        assert "itemId" in result.reason
        result = invalid(CLIENT.decode(frame("text", 1)), ErrorCode.INVALID_FIELD)
        assert "text" in result.reason


class TestSection3_1Version:
    """§3.1: "A receiver MUST reject a control message whose v is absent or is not
    exactly the number 1 with UNSUPPORTED_VERSION"; messages.md: 1.0 and 1e0 are 1."""

    @pytest.mark.parametrize(
        "v",
        [
            "absent",
            "2",
            "0",
            "-1",
            '"1"',
            "true",
            "false",
            "null",
            "[1]",
            '{"v":1}',
            "1.5",
            "1.0000001",
            "0.9999999",
            "2e0",
            "1e400",
            "-1e400",
        ],
    )
    def test_not_the_number_one(self, v: str) -> None:
        body = '"seq":0,"type":"ping"'
        text = "{" + body + "}" if v == "absent" else '{"v":' + v + "," + body + "}"
        result = invalid(CLIENT.decode(text), ErrorCode.UNSUPPORTED_VERSION)
        assert "v is" in result.reason
        assert "§3.1" in result.reason

    @pytest.mark.parametrize("v", ["1", "1.0", "1e0", "1E0", "1E+0", "10e-1", "0.1e1", "1.00"])
    def test_the_number_one_in_any_spelling(self, v: str) -> None:
        decoded(CLIENT.decode('{"v":' + v + ',"seq":0,"type":"ping"}'))
        decoded(SERVER.decode('{"v":' + v + ',"seq":0,"type":"pong"}'))

    def test_version_checked_before_type_for_both_directions(self) -> None:
        for sender in ("client", "server"):
            text = valid_frame(sender, "ack").replace('"v":1', '"v":2')
            invalid(DECODERS[sender].decode(text), ErrorCode.UNSUPPORTED_VERSION)


class TestSection2_2Members:
    """§2.2: no member twice; required members present even when null; unknown members
    ignored at any depth and preserved."""

    @pytest.mark.parametrize(
        ("text", "name"),
        [
            ('{"v":1,"seq":1,"type":"text","text":"a","text":"b"}', "text"),
            ('{"v":1,"seq":1,"seq":1,"type":"text","text":"a"}', "seq"),
            ('{"v":1,"seq":1,"type":"text","text":"a","x":1,"x":1}', "x"),
            ('{"v":1,"seq":1,"type":"context","context":{"a":1,"b":2,"a":1}}', "a"),
            ('{"v":1,"seq":1,"type":"context","context":[[{"k":[{"z":1,"z":2}]}]]}', "z"),
            ('{"v":1,"seq":1,"type":"context","context":{"a":1,"\\u0061":2}}', "a"),
            ('{"v":1,"seq":0,"type":"hello","tools":[{"name":"a","name":"b"}]}', "name"),
            (
                '{"v":1,"seq":0,"type":"hello","input":{"encoding":"pcm16","encoding":"opus"}}',
                "encoding",
            ),
            ('{"v":1,"seq":0,"type":"hello","context":{"t:{":"{:}","t:{":"x"}}', "t:{"),
        ],
    )
    def test_duplicate_member_is_invalid_field(self, text: str, name: str) -> None:
        """§2.2: "Senders MUST NOT emit two members with the same name in one object";
        messages.md: such a message is INVALID_FIELD, at any depth."""
        result = invalid(CLIENT.decode(text), ErrorCode.INVALID_FIELD)
        assert repr(name) in result.reason
        assert "§2.2" in result.reason

    def test_duplicate_in_a_server_message(self) -> None:
        text = (
            '{"v":1,"seq":1,"type":"tool.call","callId":"c","name":"n",'
            '"arguments":{"a":1,"a":1},"turnId":"t","epoch":1}'
        )
        invalid(SERVER.decode(text), ErrorCode.INVALID_FIELD)

    @pytest.mark.parametrize(
        ("text", "code"),
        [
            # rules 2 and 3 read the last occurrence, then the duplicate is INVALID_FIELD
            ('{"v":2,"v":1,"seq":0,"type":"ping"}', ErrorCode.INVALID_FIELD),
            ('{"v":1,"v":2,"seq":0,"type":"ping"}', ErrorCode.UNSUPPORTED_VERSION),
            ('{"v":1,"seq":0,"type":"ping","\\u0076":2}', ErrorCode.UNSUPPORTED_VERSION),
            ('{"v":1,"seq":0,"type":"nope","type":"ping"}', ErrorCode.INVALID_FIELD),
            ('{"v":1,"seq":0,"type":"ping","type":"nope"}', ErrorCode.UNKNOWN_TYPE),
            ('{"v":1,"seq":0,"type":"ping","type":"pong"}', ErrorCode.UNKNOWN_TYPE),
            ('{"v":1,"seq":0,"type":1,"type":"ping"}', ErrorCode.INVALID_FIELD),
        ],
    )
    def test_last_occurrence_decides_v_and_type(self, text: str, code: ErrorCode) -> None:
        invalid(CLIENT.decode(text), code)

    def test_last_type_is_reported_after_a_duplicate(self) -> None:
        result = invalid(
            CLIENT.decode('{"v":1,"seq":1,"type":"ping","type":"text","text":"a"}'),
            ErrorCode.INVALID_FIELD,
        )
        assert result.type == "text"
        assert "'type'" in result.reason

    @pytest.mark.parametrize(
        "members",
        [
            {"text": "a:b"},
            {"text": "{:}"},
            {"text": '{"text":"x","text":"y"}'},
            {"text": "[{::]}"},
            {"text": '\\":'},
            {"text": 'quote " colon : brace {'},
            {"text": "a", "x": {"a:b": 1, "a": 2}},
            {"text": "a", "x": [{"a": 1}, {"a": 1}]},
            {"text": "a", "x": {"text": 1, "v": 2, "type": "ping", "y": {"text": 2}}},
            {"text": "a", "x": {"\\": ":", "\\\\": "{"}},
            {"text": "a", "x:y": "z:w", "x": "x"},
        ],
    )
    def test_no_false_duplicates(self, members: dict[str, Any]) -> None:
        """Colons and braces inside strings, and equal names in different objects, are
        not duplicates."""
        text = json.dumps({"v": 1, "seq": 1, "type": "text", **members}, separators=(",", ":"))
        message = decoded(CLIENT.decode(text)).message
        assert message.text == members["text"]

    def test_pretty_printed_frames_decode(self) -> None:
        text = json.dumps(
            {"v": 1, "seq": 1, "type": "context", "context": {"a": [1, {"b": ":"}]}}, indent=2
        )
        assert decoded(CLIENT.decode(text)).message == ContextUpdate(context={"a": [1, {"b": ":"}]})

    def test_required_null_members_must_be_present(self) -> None:
        """§2.2: "A member that a schema marks as required MUST be present even when its
        value is null"."""
        body = dict(BODIES["server"]["transcript"])
        message = decoded(SERVER.decode(frame("transcript", 1, **body))).message
        assert message.item_id is None
        del body["itemId"]
        result = invalid(SERVER.decode(frame("transcript", 1, **body)), ErrorCode.INVALID_FIELD)
        assert "itemId" in result.reason
        invalid(SERVER.decode(frame("text", 1, text="x")), ErrorCode.INVALID_FIELD)
        failure = {"callId": "c", "epoch": 1, "ok": False, "code": "FAILED"}
        invalid(CLIENT.decode(frame("tool.result", 1, **failure)), ErrorCode.INVALID_FIELD)
        result_message = decoded(
            CLIENT.decode(frame("tool.result", 1, **failure, message=None))
        ).message
        assert result_message.message is None
        invalid(
            CLIENT.decode(frame("tool.result", 1, callId="c", epoch=1, ok=True)),
            ErrorCode.INVALID_FIELD,
        )
        ok = decoded(
            CLIENT.decode(frame("tool.result", 1, callId="c", epoch=1, ok=True, output=None))
        )
        assert ok.message.output is None

    def test_absent_optional_members_are_unset_and_null_is_not_absent(self) -> None:
        hello = decoded(CLIENT.decode(frame("hello"))).message
        assert isinstance(hello, Hello)
        assert hello.session_id is UNSET
        assert hello.context is UNSET
        with_null = decoded(CLIENT.decode(frame("hello", context=None))).message
        assert with_null.context is None

    def test_unknown_members_are_ignored_and_kept_at_every_depth(self) -> None:
        """§2.2: "Receivers MUST ignore members they do not recognise, at any depth, and
        MUST preserve them"."""
        text = frame(
            "hello",
            tools=[{"name": "a", "x-tool": {"deep": [1]}}, {"name": "b"}],
            input={"encoding": "pcm16", "channels": 2},
            output={"encoding": "opus"},
            future={"k": None},
            context={"unknown": "is data"},
        )
        hello = decoded(CLIENT.decode(text)).message
        assert isinstance(hello, Hello)
        assert hello.extra == {"future": {"k": None}}
        assert hello.tools is not UNSET
        assert hello.tools[0].extra == {"x-tool": {"deep": [1]}}
        assert hello.tools[1].extra is UNSET
        assert hello.input is not UNSET
        assert hello.input.extra == {"channels": 2}
        assert hello.output is not UNSET
        assert hello.output.extra is UNSET
        assert hello.context == {"unknown": "is data"}
        ready = frame(
            "ready",
            sessionId="s",
            input={"encoding": "pcm16", "q": 1},
            output={"encoding": "pcmu", "sampleRate": 8000},
            z=[],
        )
        decoded_ready = decoded(SERVER.decode(ready)).message
        assert isinstance(decoded_ready, Ready)
        assert decoded_ready.input.extra == {"q": 1}
        assert decoded_ready.extra == {"z": []}

    @pytest.mark.parametrize(
        ("sender", "text"),
        [
            (
                "client",
                '{"v":1,"seq":1,"type":"tool.result","callId":"c","epoch":1,"ok":true,'
                '"output":1,"code":"NOPE"}',
            ),
            (
                "client",
                '{"v":1,"seq":1,"type":"tool.result","callId":"c","epoch":1,"ok":true,'
                '"output":1,"message":5}',
            ),
            (
                "server",
                '{"v":1,"seq":1,"type":"tool.stream","callId":"c","name":"n","turnId":"t",'
                '"epoch":1,"phase":"start","code":null}',
            ),
            (
                "server",
                '{"v":1,"seq":1,"type":"tool.stream","callId":"c","name":"n","turnId":"t",'
                '"epoch":1,"phase":"progress","progress":1,"delta":5}',
            ),
        ],
        ids=["result-ok-code", "result-ok-message", "stream-start-code", "stream-progress-delta"],
    )
    def test_members_of_an_inactive_branch_follow_the_schema(
        self, sender: Sender, text: str
    ) -> None:
        """The schema constrains code/message of tool.result only when ok is false, and
        delta/code of tool.stream only in their phase; elsewhere they are unconstrained
        and the schema accepts the message. "Where this document and a schema disagree
        about the structure of a message, the schema wins": the decoder must agree with
        the schema (or, if the project decides these are invalid, the schema must say so
        and the Invalid must carry its type and a readable reason)."""
        type_ = json.loads(text)["type"]
        assert message_schemas()[sender][type_].validator.is_valid(json.loads(text))
        result = DECODERS[sender].decode(text)
        assert isinstance(result, Decoded), f"schema-valid message refused: {result}"

    def test_unknown_member_named_like_a_member_of_another_type(self) -> None:
        ping = decoded(CLIENT.decode(frame("ping", text="x", upTo=3))).message
        assert ping == Ping(extra={"text": "x", "upTo": 3})


class TestSection2_2Integers:
    """§2.2 "Integers MUST be written without a fraction or exponent" is for senders;
    messages.md: receivers accept any in-range integral number, refuse 1.5."""

    @pytest.mark.parametrize(
        ("text", "attribute", "value"),
        [
            ('{"v":1,"seq":1.0,"type":"interrupt","epoch":3,"reason":"user"}', "seq", 1),
            ('{"v":1,"seq":1e0,"type":"interrupt","epoch":3,"reason":"user"}', "seq", 1),
            ('{"v":1,"seq":1,"type":"interrupt","epoch":3.0,"reason":"user"}', "epoch", 3),
            ('{"v":1,"seq":1,"type":"interrupt","epoch":3e0,"reason":"user"}', "epoch", 3),
            ('{"v":1,"seq":1,"type":"playback","itemId":"i","playedMs":1.2e3}', "played_ms", 1200),
            ('{"v":1,"seq":0,"type":"ack","upTo":4.294967295e9}', "up_to", MAX_U32),
            ('{"v":1,"seq":0,"type":"ack","upTo":-0}', "up_to", 0),
            ('{"v":1,"seq":0,"type":"ack","upTo":0.0}', "up_to", 0),
            ('{"v":1,"seq":4294967295.0,"type":"text","text":""}', "seq", MAX_U32),
        ],
    )
    def test_integral_numbers_decode_as_int(self, text: str, attribute: str, value: int) -> None:
        result = decoded(CLIENT.decode(text))
        got = result.seq if attribute == "seq" else getattr(result.message, attribute)
        assert got == value
        assert type(got) is int, f"{attribute} decoded as {type(got).__name__}"

    def test_sample_rate_and_resume_from_decode_as_int(self) -> None:
        text = frame(
            "hello", sessionId="s", resumeFrom=2.0, input={"encoding": "pcm16", "sampleRate": 1.6e4}
        )
        hello = decoded(CLIENT.decode(text)).message
        assert type(hello.resume_from) is int
        assert type(hello.input.sample_rate) is int
        assert hello.input.sample_rate == 16000

    @pytest.mark.parametrize(
        ("text", "member"),
        [
            ('{"v":1,"seq":1,"type":"interrupt","epoch":1.5,"reason":"user"}', "epoch"),
            ('{"v":1,"seq":1,"type":"playback","itemId":"i","playedMs":0.5}', "playedMs"),
            ('{"v":1,"seq":0,"type":"ack","upTo":4.5}', "upTo"),
            ('{"v":1,"seq":0,"type":"ack","upTo":"4"}', "upTo"),
            ('{"v":1,"seq":0,"type":"ack","upTo":true}', "upTo"),
            ('{"v":1,"seq":1.5,"type":"text","text":"a"}', "seq"),
            (
                '{"v":1,"seq":0,"type":"hello","input":{"encoding":"pcm16","sampleRate":8000.5}}',
                "sampleRate",
            ),
        ],
    )
    def test_fractions_are_invalid_field(self, text: str, member: str) -> None:
        result = invalid(CLIENT.decode(text), ErrorCode.INVALID_FIELD)
        assert member in result.reason

    @pytest.mark.parametrize(
        "epoch",
        [
            "4294967296",
            "-1",
            "1e20",
            "18446744073709551616",
            "123456789012345678901234567890",
            "-9223372036854775809",
        ],
    )
    def test_big_and_negative_integers_are_out_of_range(self, epoch: str) -> None:
        text = '{"v":1,"seq":1,"type":"interrupt","epoch":' + epoch + ',"reason":"user"}'
        result = invalid(CLIENT.decode(text), ErrorCode.INVALID_FIELD)
        assert "epoch" in result.reason

    @pytest.mark.parametrize(
        "literal",
        [
            "9007199254740993",
            "-9007199254740993",
            "18446744073709551615",
            "18446744073709551616",
            "123456789012345678901234567890",
            "-123456789012345678901234567890",
            "1e308",
            "1e-400",
        ],
    )
    def test_big_numbers_inside_json_values_are_accepted(self, literal: str) -> None:
        """A json value may hold any number a double can hold: it is read exactly or as
        the nearest double, never refused and never truncated."""
        text = context_frame("[" + literal + "]")
        [value] = decoded(CLIENT.decode(text)).message.context
        assert type(value) in (int, float)
        exact: int | float = float(literal) if "e" in literal else int(literal)
        assert value == exact or value == float(literal), f"{literal} read as {value!r}"

    @pytest.mark.parametrize("value", ["1e400", "-1e400", "1.5e309", '{"a":[1e999]}', "[0,-2e308]"])
    def test_numbers_beyond_a_double_are_invalid_field(self, value: str) -> None:
        text = context_frame(value)
        result = invalid(CLIENT.decode(text), ErrorCode.INVALID_FIELD)
        assert "double" in result.reason

    def test_number_beyond_a_double_in_an_unknown_member(self) -> None:
        invalid(CLIENT.decode('{"v":1,"seq":0,"type":"ping","x":1e400}'), ErrorCode.INVALID_FIELD)


class TestSection2_1Text:
    """§2.1: "A text frame carries exactly one control message: a UTF-8 JSON object"."""

    @pytest.mark.parametrize(
        "text",
        [
            '{"v":1,"seq":1,"type":"context","context":"\\ud800"}',
            '{"v":1,"seq":1,"type":"context","context":"\\udc00x"}',
            '{"v":1,"seq":1,"type":"context","context":["ok","\\ude00\\ud83d"]}',
            '{"v":1,"seq":1,"type":"context","context":{"\\ud800":1}}',
            '{"v":1,"seq":1,"type":"text","text":"a\\ud800"}',
        ],
    )
    def test_unpaired_surrogate_is_invalid_field(self, text: str) -> None:
        result = invalid(CLIENT.decode(text), ErrorCode.INVALID_FIELD)
        assert "surrogate" in result.reason or "member name" in result.reason

    def test_paired_surrogates_decode(self) -> None:
        text = '{"v":1,"seq":1,"type":"text","text":"\\ud83d\\ude00"}'
        assert decoded(CLIENT.decode(text)).message.text == "\U0001f600"

    @pytest.mark.parametrize(
        "data",
        [
            b"\xff",
            b'{"v":1,"seq":1,"type":"text","text":"\xff"}',
            b'{"v":1,"seq":1,"type":"text","text":"\xc0\xaf"}',
            b'{"v":1,"seq":1,"type":"text","text":"\xe2\x82"}',
            b'{"v":1,"seq":1,"type":"text","text":"\xed\xa0\x80"}',
            b'{"v":1,"seq":1,"type":"text","text":"\xf4\x90\x80\x80"}',
        ],
    )
    def test_invalid_utf8_is_malformed(self, data: bytes) -> None:
        result = invalid(CLIENT.decode(data), ErrorCode.MALFORMED)
        assert "UTF-8" in result.reason

    def test_str_with_a_lone_surrogate_is_malformed(self) -> None:
        invalid(CLIENT.decode('{"v":1,"seq":1,"type":"text","text":"\ud800"}'), ErrorCode.MALFORMED)

    @pytest.mark.parametrize(
        "data",
        [b'\xef\xbb\xbf{"v":1,"seq":0,"type":"ping"}', '\ufeff{"v":1,"seq":0,"type":"ping"}'],
    )
    def test_byte_order_mark_is_malformed(self, data: bytes | str) -> None:
        """RFC 8259 §8.1: implementations MUST NOT add a byte order mark; it is not JSON."""
        invalid(CLIENT.decode(data), ErrorCode.MALFORMED)

    @pytest.mark.parametrize(
        "text",
        [
            '{"v":1,"seq":1,"type":"text","text":"h\u00e9 \u4e16\U0001f600"}',
            ' \n\t{"v":1,"seq":0,"type":"ping"}\r\n ',
            '{"v":2}',
            "[",
            '{"v":1,"seq":1,"type":"text","text":"a","text":"b"}',
        ],
    )
    def test_str_and_bytes_decode_alike(self, text: str) -> None:
        assert CLIENT.decode(text) == CLIENT.decode(text.encode())

    def test_non_ascii_text_round_trips(self) -> None:
        text = 'h\u00e9 \u4e16\U0001f600 \u0000\u001f"\\'
        result = decoded(CLIENT.decode(frame("text", 1, text=text)))
        assert result.message.text == text


class TestSection4_1SeqClasses:
    """§4.1: transient messages have seq 0, sequenced 1..4294967295, error 0 or sequenced."""

    @pytest.mark.parametrize("pair", ALL_TYPES, ids=_type_ids)
    def test_seq_by_class(self, pair: tuple[Sender, str]) -> None:
        sender, type_ = pair
        decoder = DECODERS[sender]
        body = BODIES[sender][type_]
        seq_class = SEQ_CLASS[sender][type_]
        allowed = {
            "transient": [0],
            "sequenced": [1, 2, MAX_U32],
            "sessionless": [0, 1, MAX_U32],
        }[seq_class]
        refused = {
            "transient": [1, MAX_U32, -1],
            "sequenced": [0, -1, MAX_U32 + 1],
            "sessionless": [-1, MAX_U32 + 1],
        }[seq_class]
        for seq in allowed:
            assert decoded(decoder.decode(frame(type_, seq, **body))).seq == seq
        for seq in refused:
            result = invalid(decoder.decode(frame(type_, seq, **body)), ErrorCode.INVALID_FIELD)
            assert "seq" in result.reason
            assert "§4.1" in result.reason
            assert seq_class in result.reason

    @pytest.mark.parametrize("seq", ["absent", '"1"', "null", "true", "[1]", "1.5"])
    def test_seq_absent_or_not_an_integer(self, seq: str) -> None:
        members = '"type":"text","text":"a"'
        text = '{"v":1,' + ("" if seq == "absent" else '"seq":' + seq + ",") + members + "}"
        result = invalid(CLIENT.decode(text), ErrorCode.INVALID_FIELD)
        assert "seq" in result.reason


class TestSection5_2Tools:
    def test_tool_names_must_be_unique(self) -> None:
        """§5.2: tool "Names MUST be unique within the list"; messages.md: INVALID_FIELD."""
        text = frame("hello", tools=[{"name": "a"}, {"name": "b"}, {"name": "a"}])
        result = invalid(CLIENT.decode(text), ErrorCode.INVALID_FIELD)
        assert "'a'" in result.reason
        assert "§5.2" in result.reason

    def test_tool_names_differing_in_case_are_distinct(self) -> None:
        decoded(CLIENT.decode(frame("hello", tools=[{"name": "a"}, {"name": "A"}])))


class TestSection11Limits:
    """§11 and messages.md: a message over a limit is LIMIT_EXCEEDED."""

    SMALL: Final = Limits(max_frame_bytes=64, max_depth=4, max_tools=2)

    def test_defaults(self) -> None:
        assert Decoder("client").limits == Limits()
        assert Limits().max_depth >= 16

    def test_frame_size_is_counted_in_bytes(self) -> None:
        decoder = Decoder("client", self.SMALL)
        head = '{"v":1,"seq":1,"type":"text","text":"'
        exact = head + "a" * (64 - len(head) - 2) + '"}'
        assert len(exact.encode()) == 64
        decoded(decoder.decode(exact))
        decoded(decoder.decode(exact.encode()))
        result = invalid(decoder.decode(exact[:-2] + 'a"}'), ErrorCode.LIMIT_EXCEEDED)
        assert "65" in result.reason
        assert "§11" in result.reason
        wide = head + "\u00e9" * 13 + '"}'
        assert len(wide) <= 64 < len(wide.encode())
        invalid(decoder.decode(wide), ErrorCode.LIMIT_EXCEEDED)

    def test_frame_size_is_checked_before_anything_else(self) -> None:
        decoder = Decoder("client", self.SMALL)
        invalid(decoder.decode(b"\xff" * 65), ErrorCode.LIMIT_EXCEEDED)
        invalid(decoder.decode("[" * 65), ErrorCode.LIMIT_EXCEEDED)

    @pytest.mark.parametrize(
        ("context", "code"),
        [
            ("[[1]]", None),
            ("[[[1]]]", None),
            ('{"a":{"b":1}}', None),
            ('{"a":{"b":[]}}', None),
            ("[[[[1]]]]", ErrorCode.LIMIT_EXCEEDED),
            ("[[[{}]]]", ErrorCode.LIMIT_EXCEEDED),
            ('{"a":{"b":{"c":[]}}}', ErrorCode.LIMIT_EXCEEDED),
        ],
    )
    def test_depth(self, context: str, code: ErrorCode | None) -> None:
        """The message object is depth 1; each nested array or object adds one."""
        decoder = Decoder("client", Limits(max_depth=4))
        result = decoder.decode(context_frame(context))
        if code is None:
            decoded(result)
        else:
            failure = invalid(result, code)
            assert failure.type == "context"
            assert "4" in failure.reason
            assert "§11" in failure.reason

    def test_default_depth(self) -> None:
        limit = Limits().max_depth
        deep = limit - 1  # plus the message object itself
        decoded(CLIENT.decode(context_frame(nested(deep))))
        deeper = deep + 1
        invalid(
            CLIENT.decode(context_frame(nested(deeper))),
            ErrorCode.LIMIT_EXCEEDED,
        )

    @pytest.mark.parametrize("extra", ["", ',"big":1e400', ',"s":"\\ud800"'])
    def test_far_too_deep_never_crashes(self, extra: str) -> None:
        n = 100_000
        text = '{"v":1,"seq":1,"type":"context"' + extra + ',"context":' + nested(n) + "}"
        invalid(CLIENT.decode(text), ErrorCode.LIMIT_EXCEEDED)

    def test_depth_limit_applies_as_configured(self) -> None:
        """Limits documents that only a frame nested deeper than max_depth gives
        LIMIT_EXCEEDED: a configured limit either works or is refused at construction."""
        try:
            decoder = Decoder("client", Limits(max_depth=2000))
        except ValueError:
            return
        n = 1100
        result = decoder.decode(context_frame(nested(n)))
        assert isinstance(result, Decoded), f"{n + 1} levels under a limit of 2000: {result}"

    def test_max_tools(self) -> None:
        decoder = Decoder("client", Limits(max_tools=2))
        decoded(
            decoder.decode('{"v":1,"seq":0,"type":"hello","tools":[{"name":"a"},{"name":"b"}]}')
        )
        result = invalid(
            decoder.decode(
                '{"v":1,"seq":0,"type":"hello","tools":[{"name":"a"},{"name":"b"},{"name":"c"}]}'
            ),
            ErrorCode.LIMIT_EXCEEDED,
        )
        assert "3 tools" in result.reason
        assert result.type == "hello"

    def test_no_tools_allowed(self) -> None:
        decoder = Decoder("client", Limits(max_tools=0))
        decoded(decoder.decode(frame("hello", tools=[])))
        invalid(decoder.decode(frame("hello", tools=[{"name": "a"}])), ErrorCode.LIMIT_EXCEEDED)

    def test_limits_too_small_for_the_protocol_are_refused(self) -> None:
        with pytest.raises(ValueError, match="too small"):
            Limits(max_frame_bytes=10)
        with pytest.raises(ValueError, match="too small"):
            Limits(max_depth=1)
        with pytest.raises(ValueError, match="too small"):
            Limits(max_tools=-1)
        with pytest.raises(ValueError, match="too small"):
            Limits(max_json_values=15)


def values_in(value: Any) -> int:
    """The JSON values in ``value``, itself included: the reference count."""
    if isinstance(value, dict):
        return 1 + sum(values_in(item) for item in value.values())
    if isinstance(value, list):
        return 1 + sum(values_in(item) for item in value)
    return 1


def depth_of(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((depth_of(item) for item in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((depth_of(item) for item in value), default=0)
    return 0


#: Strings that look like structure: brackets, commas, colons, quotes and backslashes.
tricky_text = st.text(alphabet='[]{},:"\\ ab\u00e9', max_size=8)
tricky_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**6), 10**6) | tricky_text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(tricky_text, inner, max_size=4),
    max_leaves=30,
)


class TestSection11JsonValues:
    """§11 asks receivers to bound what a message costs: a frame holding more JSON values
    than ``Limits.max_json_values`` is LIMIT_EXCEEDED, counted before it is parsed
    (a 1 MiB frame of 340,000 empty arrays would otherwise be 25 MB of objects)."""

    LIMIT: Final = 40

    def frame_with(self, values: int) -> str:
        """A context frame of exactly ``values`` JSON values: the message object, v, seq,
        type and context (the array), then ``values - 5`` elements inside the array."""
        return context_frame("[" + ",".join(["[]"] * (values - 5)) + "]")

    def test_at_the_limit_passes_and_one_more_is_refused(self) -> None:
        decoder = Decoder("client", Limits(max_json_values=self.LIMIT))
        exact = self.frame_with(self.LIMIT)
        assert values_in(json.loads(exact)) == self.LIMIT
        decoded(decoder.decode(exact))
        result = invalid(decoder.decode(self.frame_with(self.LIMIT + 1)), ErrorCode.LIMIT_EXCEEDED)
        assert f"{self.LIMIT + 1} JSON values" in result.reason
        assert f"at most {self.LIMIT}" in result.reason
        assert "§11" in result.reason

    def test_the_default_holds_at_its_boundary(self) -> None:
        limit = Limits().max_json_values
        assert limit == 100_000
        decoded(CLIENT.decode(self.frame_with(limit)))
        invalid(CLIENT.decode(self.frame_with(limit + 1)), ErrorCode.LIMIT_EXCEEDED)

    def test_the_attack_shape_is_refused(self) -> None:
        """The shape the hardening issue measured: a valid 1 MiB frame of empty arrays."""
        text = context_frame("[" + ",".join(["[]"] * 340_000) + "]")
        assert len(text) <= Limits().max_frame_bytes
        result = invalid(CLIENT.decode(text), ErrorCode.LIMIT_EXCEEDED)
        assert "340005 JSON values" in result.reason

    def test_structure_inside_strings_does_not_count(self) -> None:
        """Commas and brackets inside a string are text, not values: a long text of them
        is one value, escaped quotes and backslashes included."""
        text = frame("text", seq=1, text='[{,\\"}]' * 100_000)
        assert text.count(",") > Limits().max_json_values
        decoded(CLIENT.decode(text))

    DECODER_16 = Decoder("client", Limits(max_json_values=16))

    def test_empty_containers_and_whitespace(self) -> None:
        """An empty container spaced inside (``[ ]``, ``{\\n}``) is one value, as ``[]``
        is: a frame of exactly the limit passes, and one more value is refused."""
        # the message, v, seq, type, the context array, then 11:
        # [ ] { } [ [ ] ] {"a": [ ]} and five more spaced empty containers
        inner = '[ [ ] , { } , [ [\n] ] , {"a" : [\t]} , [ ] , {\r} , [  ] , { } , [ ]'
        assert values_in(json.loads(context_frame(inner + "]"))) == 16
        decoded(self.DECODER_16.decode(context_frame(inner + "]")))
        result = invalid(
            self.DECODER_16.decode(context_frame(inner + ", { } ]")), ErrorCode.LIMIT_EXCEEDED
        )
        assert "17 JSON values" in result.reason
        invalid(
            self.DECODER_16.decode(context_frame("[" + ",".join(["[ ]"] * 12) + "]")),
            ErrorCode.LIMIT_EXCEEDED,
        )

    @given(value=tricky_json, pretty=st.booleans())
    @settings(max_examples=300, deadline=None)
    def test_the_count_is_exact(self, value: Any, pretty: bool) -> None:
        """Counted in C from the frame's bytes, it agrees with a count over the parsed
        value, whatever the strings hold and however the frame is spaced."""
        message = {"v": 1, "seq": 1, "type": "context", "context": value}
        text = json.dumps(message, indent=1 if pretty else None, ensure_ascii=False)
        count = values_in(message)
        for limit in (16, count - 1, count):
            if limit < 16:
                continue
            decoder = Decoder("client", Limits(max_json_values=limit))
            result = decoder.decode(text)
            if count > limit:
                assert isinstance(result, Invalid), (limit, count, text)
                assert f"{count} JSON values" in result.reason
            else:
                assert not (isinstance(result, Invalid) and "JSON values" in result.reason)

    @given(value=tricky_json)
    @settings(max_examples=300, deadline=None)
    def test_depth_is_exact_whatever_the_strings_hold(self, value: Any) -> None:
        message = {"v": 1, "seq": 1, "type": "context", "context": value}
        depth = 1 + depth_of(value)
        text = json.dumps(message)
        for limit in (4, depth - 1, depth):
            if limit < 4:
                continue
            result = Decoder("client", Limits(max_depth=limit)).decode(text)
            deeper = isinstance(result, Invalid) and "nests deeper" in result.reason
            assert deeper == (depth > limit), (limit, depth, text)


class TestHugeNumbers:
    """A number of any length is valid JSON (RFC 8259): never MALFORMED, and never the
    parser's own words. One beyond a double's range is INVALID_FIELD, as 1e400 is."""

    @pytest.mark.parametrize("digits", [310, 401, 4301, 1_000_000 - 100])
    def test_an_integer_of_any_length_is_invalid_field_in_vrts_words(self, digits: int) -> None:
        for sign in ("", "-"):
            text = context_frame("[" + sign + "1" * digits + "]")
            result = invalid(CLIENT.decode(text), ErrorCode.INVALID_FIELD)
            assert "beyond the range of a double" in result.reason
            assert "4300" not in result.reason
            assert "set_int_max_str_digits" not in result.reason

    def test_a_long_integer_a_double_holds_is_read(self) -> None:
        literal = "1" + "0" * 307  # 1e307
        [value] = decoded(CLIENT.decode(context_frame("[" + literal + "]"))).message.context
        assert value in (10**307, 1e307)


def _pairs_without_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    names = [name for name, _ in pairs]
    assert len(names) == len(set(names)), f"duplicate member in encoder output: {names}"
    return dict(pairs)


def wire(data: bytes) -> dict[str, Any]:
    """The encoder's output parsed strictly: no duplicate members at any depth."""
    value = json.loads(data, object_pairs_hook=_pairs_without_duplicates)
    assert isinstance(value, dict)
    return value


ALL_MESSAGES: Final = [(s, m) for s in SENDERS for m in MESSAGES[s]]


def _message_id(pair: tuple[str, Message]) -> str:
    return f"{pair[0]}-{pair[1].TYPE}"


def _seq_for(sender: Sender, message: Message) -> int:
    return 0 if SEQ_CLASS[sender][message.TYPE] in ("transient", "sessionless") else 41


class TestEncoder:
    """The encoder writes what §2.2 asks of senders: compact JSON, plain integers, every
    required member (null included), never a member twice."""

    @pytest.mark.parametrize("pair", ALL_MESSAGES, ids=_message_id)
    def test_round_trip(self, pair: tuple[Sender, Message]) -> None:
        sender, message = pair
        seq = _seq_for(sender, message)
        result = decoded(DECODERS[sender].decode(encode(message, seq)))
        assert (result.seq, result.message) == (seq, message)

    @pytest.mark.parametrize("pair", ALL_MESSAGES, ids=_message_id)
    def test_prefix_and_compactness(self, pair: tuple[Sender, Message]) -> None:
        sender, message = pair
        seq = _seq_for(sender, message)
        data = encode(message, seq)
        assert isinstance(data, bytes)
        prefix = b'{"v":1,"seq":%d,"type":"%s"' % (seq, message.TYPE.encode())
        assert data.startswith(prefix)
        value = wire(data)
        assert data == json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()

    def test_seq_is_written_as_given(self) -> None:
        assert encode(UserText(text="a"), MAX_U32).startswith(
            b'{"v":1,"seq":4294967295,"type":"text"'
        )
        assert encode(Ping()) == b'{"v":1,"seq":0,"type":"ping"}'

    def test_integers_are_plain(self) -> None:
        data = encode(Interrupt(epoch=3, reason="user"), 1)
        assert data == b'{"v":1,"seq":1,"type":"interrupt","epoch":3,"reason":"user"}'

    def test_required_null_members_are_written(self) -> None:
        transcript = Transcript(role="user", text="hi", final=True, item_id=None, turn_id=None)
        assert wire(encode(transcript, 1))["itemId"] is None
        assert b'"itemId":null' in encode(transcript, 1)
        assert b'"turnId":null' in encode(AgentText(text="x", turn_id=None), 1)
        failure = ToolResult.failure("c", 1, "REJECTED")
        assert wire(encode(failure, 1)) == {
            "v": 1,
            "seq": 1,
            "type": "tool.result",
            "callId": "c",
            "epoch": 1,
            "ok": False,
            "code": "REJECTED",
            "message": None,
        }
        assert wire(encode(ToolResult.success("c", 1), 1))["output"] is None

    def test_unset_optional_members_are_omitted(self) -> None:
        assert encode(Hello()) == b'{"v":1,"seq":0,"type":"hello"}'
        success = wire(encode(ToolResult.success("c", 1, 5), 1))
        assert "code" not in success
        assert "message" not in success
        ready = wire(
            encode(
                Ready(
                    session_id="s", input=Format(encoding="pcm16"), output=Format(encoding="opus")
                )
            )
        )
        assert set(ready) == {"v", "seq", "type", "sessionId", "input", "output"}
        assert ready["input"] == {"encoding": "pcm16"}
        stream = wire(
            encode(ToolStream(call_id="c", name="n", turn_id="t", epoch=0, phase="cancelled"), 1)
        )
        assert set(stream) == {"v", "seq", "type", "callId", "name", "turnId", "epoch", "phase"}

    def test_null_optional_member_is_written(self) -> None:
        assert wire(encode(Hello(context=None)))["context"] is None
        assert decoded(CLIENT.decode(encode(Hello(context=None)))).message.context is None

    def test_member_names_are_camel_case(self) -> None:
        hello = Hello(
            session_id="s", resume_from=1, input=Format(encoding="pcm16", sample_rate=16000)
        )
        assert wire(encode(hello)) == {
            "v": 1,
            "seq": 0,
            "type": "hello",
            "sessionId": "s",
            "resumeFrom": 1,
            "input": {"encoding": "pcm16", "sampleRate": 16000},
        }

    @pytest.mark.parametrize(
        ("sender", "text"),
        [
            ("client", '{"v":1,"seq":3,"type":"text","text":"a","future":{"x":[1,null]},"z":"z"}'),
            ("client", '{"v":1,"seq":0,"type":"ping","n":-1.5e-7}'),
            (
                "client",
                '{"v":1,"seq":0,"type":"hello","tools":[{"name":"a","k":1},{"name":"b"}],"input":{"encoding":"pcm16","c":2},"output":{"encoding":"opus","d":{}},"e":true}',
            ),
            (
                "server",
                '{"v":1,"seq":0,"type":"ready","sessionId":"s","input":{"encoding":"pcmu","sampleRate":8000,"x":"y"},"output":{"encoding":"pcm16","y":[]},"w":0}',
            ),
            (
                "server",
                '{"v":1,"seq":9,"type":"tool.call","callId":"c","name":"n","arguments":{"a":{"unknown":1}},"turnId":"t","epoch":2,"later":"x"}',
            ),
        ],
    )
    def test_unknown_members_round_trip(self, sender: Sender, text: str) -> None:
        """§2.2: receivers "MUST preserve them when passing a message through"."""
        first = decoded(DECODERS[sender].decode(text))
        data = encode(first.message, first.seq)
        assert wire(data) == json.loads(text)
        assert DECODERS[sender].decode(data) == first

    def test_nested_unknown_members_named_like_envelope_members_are_kept(self) -> None:
        """Inside a tool or format, v, seq and type are ordinary unknown members (a tool
        declared as {"type": "function", ...} is common) and must be preserved (§2.2)."""
        text = (
            '{"v":1,"seq":0,"type":"hello","tools":[{"name":"a","type":"function","v":2}],'
            '"input":{"encoding":"pcm16","seq":7}}'
        )
        first = decoded(CLIENT.decode(text))
        assert first.message.tools[0].extra == {"type": "function", "v": 2}
        data = encode(first.message, first.seq)
        assert wire(data) == json.loads(text)
        assert CLIENT.decode(data) == first

    def test_unknown_members_follow_known_ones(self) -> None:
        data = encode(UserText(text="a", extra={"z": 1}), 2)
        assert data == b'{"v":1,"seq":2,"type":"text","text":"a","z":1}'

    def test_extra_never_overrides_a_known_member(self) -> None:
        message = UserText(text="a", extra={"text": "b", "v": 2, "seq": 9, "type": "ping", "k": 0})
        assert wire(encode(message, 3)) == {"v": 1, "seq": 3, "type": "text", "text": "a", "k": 0}
        hello = Hello(
            tools=(Tool(name="t", extra={"name": "u", "k": 1}),),
            input=Format(encoding="pcm16", extra={"encoding": "opus", "q": 1}),
        )
        out = wire(encode(hello))
        assert out["tools"] == [{"name": "t", "k": 1}]
        assert out["input"] == {"encoding": "pcm16", "q": 1}
        assert out["type"] == "hello"
        ready = Ready(
            session_id="s",
            input=Format(encoding="opus"),
            output=Format(encoding="opus"),
            extra={"sessionId": "other"},
        )
        assert wire(encode(ready))["sessionId"] == "s"

    def test_extra_never_supplies_an_unset_known_member(self) -> None:
        """extra holds unknown members only: a known name in it must not reach the wire
        even when the member itself is UNSET (here it would write a resumeFrom without
        sessionId, which hello.json refuses, and decode(encode(m)) != m)."""
        hello = Hello(
            extra={"resumeFrom": 5, "future": 1},
            input=Format(encoding="opus", extra={"sampleRate": 1}),
        )
        assert wire(encode(hello)) == {
            "v": 1,
            "seq": 0,
            "type": "hello",
            "input": {"encoding": "opus"},
            "future": 1,
        }

    @pytest.mark.parametrize(
        "value",
        [object(), {1j}, 1j, Ellipsis, type],
        ids=["object", "set-of-complex", "complex", "ellipsis", "class"],
    )
    def test_unencodable_value_raises_local_protocol_error(self, value: object) -> None:
        with pytest.raises(LocalProtocolError, match="context"):
            encode(ContextUpdate(context=value), 1)
        with pytest.raises(LocalProtocolError, match="text"):
            encode(UserText(text="a", extra={"x": value}), 1)

    @pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
    def test_non_finite_number_is_written_as_null(self, value: float) -> None:
        """JSON (RFC 8259 §6) has no NaN or Infinity. docs/decisions.md: the encoder
        writes null for them, as JavaScript's JSON.stringify does, rather than walk
        every free-form value to refuse them."""
        assert encode(ContextUpdate(context=[value]), 1).endswith(b'"context":[null]}')

    def test_local_protocol_error_is_not_a_remote_invalid(self) -> None:
        with pytest.raises(LocalProtocolError) as info:
            encode(ContextUpdate(context=object()), 1)
        assert isinstance(info.value.__cause__, (TypeError, ValueError, msgspec.EncodeError))
