"""Text frames to typed messages and back (§2.2, §4.1, §9.1).

The decoder takes one text frame and returns either the typed message with its ``seq``
or an :class:`Invalid` that carries the §9.1 classification and a readable reason. It
never raises, whatever the input. It classifies by the first rule the frame breaks:

1. ``MALFORMED``: not JSON, or not a JSON object;
2. ``UNSUPPORTED_VERSION``: ``v`` absent or not the number 1;
3. ``UNKNOWN_TYPE``: ``type`` absent, not a string, or not a type of the sender's direction,
   matched as an exact string;
4. ``INVALID_FIELD``: anything else the message's schema forbids, the seq class of §4.1
   included, plus what a schema cannot say: a member name twice in one object (§2.2),
   two tools with one name (§5.2), a number beyond the double range or a string with
   an unpaired surrogate (neither can be passed through faithfully).

Rules 2 and 3 read the last occurrence of a duplicated member, as JavaScript's
``JSON.parse`` does (messages.md). Limits (§11, :class:`Limits`) give ``LIMIT_EXCEEDED``.

The hot path is orjson to parse, a count of ``:`` against the parsed members to rule
out duplicates without a second parse, jsonschema-rs with the files of ``schema/``, and
msgspec to build the struct. Nothing walks the parsed value in Python: the values of a
frame (bounded before it is parsed), its depth and its member names are counted over
its bytes in C, so what a frame costs is linear in its size whatever its shape.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from typing import Any, Final, NamedTuple, cast

import msgspec
import orjson

from .describe import json_pointer, kind_of, shown
from .errors import ErrorCode, LocalProtocolError
from .messages import (
    CLIENT_TYPES,
    SERVER_TYPES,
    UNSET,
    ClientMessage,
    Decoded,
    Format,
    Hello,
    Message,
    Ready,
    ServerMessage,
    Tool,
    _Object,
)
from .scan import (
    MANY_CONTAINERS,
    deeper_than,
    duplicate_name,
    parse,
    read_integer,
    too_many_values,
    unique_names,
)
from .schemas import MessageSchema, Sender, message_schemas, shared_object_members

__all__ = [
    "DEFAULT_LIMITS",
    "Decoded",
    "Decoder",
    "Invalid",
    "Limits",
    "check_encoding",
    "decode_client",
    "decode_server",
    "encode",
    "shared_decoder",
]

#: orjson refuses deeper nesting itself.
_PARSER_MAX_DEPTH: Final = 1024


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds a decoder enforces (§11); see ``docs/limits.md``.

    A text frame beyond ``max_frame_bytes`` is refused before it is parsed; one nested
    deeper than ``max_depth`` (the message object itself is depth 1) after; one that
    holds more than ``max_json_values`` JSON values before; a ``hello`` with more than
    ``max_tools`` tools once it is otherwise valid; an audio frame beyond
    ``max_audio_frame_bytes``. Each gives ``LIMIT_EXCEEDED``.
    """

    max_frame_bytes: int = 1 << 20
    max_depth: int = 64
    max_tools: int = 128
    #: Every JSON value counts: the message object, each member value, each array
    #: element. What a frame costs to parse and keep grows with its values, not its
    #: bytes (a 1 MiB frame of 340,000 empty arrays is 25 MB of Python objects), so
    #: they are counted, in C, before the frame is parsed.
    max_json_values: int = 100_000
    #: Audio frames (§8.1) are bounded separately: 20 ms of 48 kHz pcm16 is 1,920 bytes.
    max_audio_frame_bytes: int = 1 << 16

    def __post_init__(self) -> None:
        if (
            self.max_frame_bytes < 64
            or self.max_depth < 4
            or self.max_tools < 0
            or self.max_json_values < 16
        ):
            raise ValueError(f"limits too small to carry vRT messages: {self}")
        if self.max_depth > _PARSER_MAX_DEPTH:
            raise ValueError(
                f"max_depth can be at most {_PARSER_MAX_DEPTH} (the parser's own bound)"
            )


DEFAULT_LIMITS: Final = Limits()


class Invalid(NamedTuple):
    """A frame the decoder refused: its §9.1 code (or LIMIT_EXCEEDED) and why."""

    code: ErrorCode
    reason: str
    #: The message type, once rules 1-3 have passed; None before.
    type: str | None = None


_TAKES_ANY_NUMBER: Final = (int, float)
_ENVELOPE: Final = frozenset({"v", "seq", "type"})
_SEQ_RULE: Final = {
    "transient": "always 0",
    "sequenced": "an integer from 1 to 4294967295",
    "sessionless": "0, or an integer up to 4294967295 once a session is bound",
}


def _parse_fallback(data: bytes) -> Any | Invalid:
    """Parse what orjson refused: numbers beyond the double range and unpaired surrogates
    are JSON (RFC 8259) that orjson does not read; everything else it refuses is not JSON.
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return Invalid(ErrorCode.MALFORMED, f"the frame is not UTF-8: {exc.reason}")

    def no_constants(name: str) -> Any:
        raise ValueError(f"{name} is not a JSON value")

    try:
        return json.loads(text, parse_constant=no_constants, parse_int=read_integer)
    except RecursionError:
        return Invalid(ErrorCode.LIMIT_EXCEEDED, "the frame is nested too deeply")
    except ValueError as exc:
        return Invalid(ErrorCode.MALFORMED, f"the frame is not JSON: {exc}")


class Decoder:
    """Decodes the text frames one direction sends. Thread-safe; holds no session state."""

    __slots__ = ("_classes", "_known", "_limits", "_nested", "_schemas", "sender")

    def __init__(self, sender: Sender, limits: Limits = DEFAULT_LIMITS) -> None:
        self.sender: Sender = sender
        self._limits = limits
        self._schemas: dict[str, MessageSchema] = message_schemas()[sender]
        classes = CLIENT_TYPES if sender == "client" else SERVER_TYPES
        self._classes: dict[str, type[Message]] = {cls.TYPE: cls for cls in classes}
        self._known = {t: s.members | _ENVELOPE for t, s in self._schemas.items()}
        self._nested = _nested_members()

    @property
    def limits(self) -> Limits:
        return self._limits

    def decode(self, data: bytes | str) -> Decoded[Any] | Invalid:
        """Decode one text frame. Never raises."""
        try:
            return self._decode(data)
        except Exception as exc:  # a defect here must not take a session down (§9.1)
            return Invalid(ErrorCode.INVALID_FIELD, f"the message could not be read: {exc!r}")

    def _decode(self, data: bytes | str) -> Decoded[Any] | Invalid:
        if isinstance(data, str):
            try:
                data = data.encode()
            except UnicodeEncodeError:
                return Invalid(ErrorCode.MALFORMED, "the frame is not UTF-8")
        limits = self._limits
        if len(data) > limits.max_frame_bytes:
            return Invalid(
                ErrorCode.LIMIT_EXCEEDED,
                f"the frame has {len(data)} bytes; this receiver takes at most "
                f"{limits.max_frame_bytes} (§11)",
            )
        # A frame shorter than the bound holds fewer values (one byte each at least).
        values = len(data) >= limits.max_json_values and too_many_values(
            data, limits.max_json_values
        )
        if values:
            return Invalid(
                ErrorCode.LIMIT_EXCEEDED,
                f"the frame holds {values} JSON values; this receiver takes at most "
                f"{limits.max_json_values} (§11)",
            )
        unfaithful = ""  # what orjson refused in a frame that is JSON
        try:
            # scan.parse pauses the collector for a frame of many containers, which
            # takes MANY_CONTAINERS bytes at least; a shorter one is parsed here, a call
            # less (most frames).
            value = orjson.loads(data) if len(data) < MANY_CONTAINERS else parse(data)
        except orjson.JSONDecodeError as exc:
            why = str(exc)
            if "depth limit" in why:
                return Invalid(ErrorCode.LIMIT_EXCEEDED, "the frame is nested too deeply (§11)")
            if "surrogate" not in why and "infinity" not in why:
                # Not JSON at all: no second parse, which would cost a flood of large
                # malformed frames a second pass each (§9.1: never stall).
                return Invalid(ErrorCode.MALFORMED, f"the frame is not JSON: {why}")
            value = _parse_fallback(data)
            if isinstance(value, Invalid):
                return value
            unfaithful = (
                "a string with an unpaired surrogate"
                if "surrogate" in why
                else "a number beyond the range of a double"
            )
        if type(value) is not dict:
            return Invalid(ErrorCode.MALFORMED, f"the frame is {kind_of(value)}, not a JSON object")

        v = value.get("v")
        if type(v) not in _TAKES_ANY_NUMBER or v != 1:
            seen = shown(v) if "v" in value else "absent"
            return Invalid(
                ErrorCode.UNSUPPORTED_VERSION,
                f"v is {seen}; this receiver speaks vRT major version 1 (§3.1)",
            )
        type_ = value.get("type")
        schema = self._schemas.get(type_) if type(type_) is str else None
        if schema is None:
            return Invalid(ErrorCode.UNKNOWN_TYPE, self._unknown_type(value))
        type_ = schema.type

        # 0x5B is b"[": bytes.__contains__ reads a bytes needle as an integer first,
        # raising and clearing a TypeError before its search; an int goes to memchr.
        if unfaithful or 0x5B in data or data.count(b":") != len(value):
            # Else no array, and a ':' per member parsed (a ':' in a string or a duplicate
            # name only adds to the count): every nested object is empty, so the frame
            # nests two levels at most and names nothing twice (most frames: text, ack).
            problem = self._structure(data, value, unfaithful, type_)
            if problem is not None:
                return problem
        if not schema.validator.is_valid(value):
            return Invalid(ErrorCode.INVALID_FIELD, self._explain(schema, value), type_)
        if type_ == "hello" and "tools" in value:
            problem = self._check_tools(value["tools"])
            if problem is not None:
                return problem

        # Unknown members go to ``extra``, never through msgspec, where a member named
        # like a field ("extra") would be taken for it.
        known = (
            self._known[type_]
            if not schema.conditionals
            else schema.active_members(value) | _ENVELOPE
        )
        fields = value
        if not known.issuperset(value):
            fields = {k: item for k, item in value.items() if k in known}
        if type_ in self._nested:
            fields = self._build_nested(fields)
        try:
            message = msgspec.convert(fields, self._classes[type_], strict=False)
        except msgspec.ValidationError as exc:
            # Only magnitude gets here: the schema passed, but an integer member holds a
            # value beyond 64 bits (playedMs has no maximum), an implementation limit.
            return Invalid(
                ErrorCode.LIMIT_EXCEEDED,
                f"{type_}: a number this receiver cannot hold, past 64-bit integers (§11): {exc}",
                type_,
            )
        if fields is not value and len(fields) != len(value):
            extra = {k: item for k, item in value.items() if k not in known}
            message = msgspec.structs.replace(message, extra=extra)
        seq = value["seq"]
        return Decoded(seq if type(seq) is int else int(seq), message)

    def _unknown_type(self, value: dict[str, Any]) -> str:
        if "type" not in value:
            return "the message has no type member (§9.1)"
        type_ = value["type"]
        if type(type_) is not str:
            return f"type is {kind_of(type_)}, not a string (§9.1)"
        other: Sender = "server" if self.sender == "client" else "client"
        if type_ in message_schemas()[other]:
            return f"{type_!r} is a {other} message; a {self.sender} does not send it (§2.3)"
        return f"{type_!r} is not a {self.sender} message type of vRT v1 (§9.1)"

    def _structure(
        self, data: bytes, value: dict[str, Any], unfaithful: str, type_: str
    ) -> Invalid | None:
        """Depth (§11), member names given twice (§2.2), then ``unfaithful``: what the
        fallback parser let through that cannot be passed on faithfully. Only for a
        frame that :meth:`_decode` could not settle from its counts."""
        max_depth = self._limits.max_depth
        if deeper_than(data, max_depth):
            return Invalid(
                ErrorCode.LIMIT_EXCEEDED,
                f"the message nests deeper than {max_depth} levels (§11)",
                type_,
            )
        if not unique_names(data, value):
            name = duplicate_name(data)
            return Invalid(
                ErrorCode.INVALID_FIELD,
                f"{type_}: member {name!r} appears twice in one object (§2.2)",
                type_,
            )
        if unfaithful:
            return Invalid(
                ErrorCode.INVALID_FIELD,
                f"{type_}: holds {unfaithful}, which cannot be passed on faithfully",
                type_,
            )
        return None

    def _explain(self, schema: MessageSchema, value: dict[str, Any]) -> str:
        errors = list(schema.validator.iter_errors(value))
        for error in errors:
            if list(error.instance_path) == ["seq"]:
                rule = _SEQ_RULE[schema.seq_class]
                return (
                    f"{schema.type}: seq {value.get('seq')!r} is out of its class: a "
                    f"{schema.seq_class} message's seq is {rule} (§4.1)"
                )
        if not errors:
            return f"{schema.type}: does not match its schema"
        error = min(errors, key=lambda e: len(e.instance_path))
        path = list(error.instance_path)
        where = f" at {json_pointer(path)}" if path else ""
        return f"{schema.type}{where}: {error.message}"

    def _check_tools(self, tools: list[dict[str, Any]]) -> Invalid | None:
        if len(tools) > self._limits.max_tools:
            return Invalid(
                ErrorCode.LIMIT_EXCEEDED,
                f"hello declares {len(tools)} tools; this server takes at most "
                f"{self._limits.max_tools} (§11)",
                "hello",
            )
        seen: set[str] = set()
        for tool in tools:
            if tool["name"] in seen:
                return Invalid(
                    ErrorCode.INVALID_FIELD,
                    f"hello: tool name {tool['name']!r} is declared twice; "
                    "names must be unique (§5.2)",
                    "hello",
                )
            seen.add(tool["name"])
        return None

    def _build_nested(self, fields: dict[str, Any]) -> dict[str, Any]:
        """``fields`` with its formats and tools built, each keeping unknown members."""
        built = dict(fields)
        for member, cls in self._nested[fields["type"]]:
            raw = fields.get(member)
            if member == "tools" and isinstance(raw, list):
                built[member] = tuple(_build_object(item, cls) for item in raw)
            elif isinstance(raw, dict):
                built[member] = _build_object(raw, cls)
        return built


def _build_object(raw: dict[str, Any], cls: type[_Object]) -> _Object:
    unknown = raw.keys() - shared_object_members("format" if cls is Format else "tool")
    if not unknown:
        return msgspec.convert(raw, cls, strict=False)
    obj = msgspec.convert({k: v for k, v in raw.items() if k not in unknown}, cls, strict=False)
    return msgspec.structs.replace(obj, extra={k: raw[k] for k in raw if k in unknown})


def _nested_members() -> dict[str, tuple[tuple[str, type[_Object]], ...]]:
    """Members of hello and ready that hold typed objects which keep unknown members."""
    formats = (("input", Format), ("output", Format))
    return {
        Hello.TYPE: (("tools", Tool), *formats),
        Ready.TYPE: formats,
    }


@cache
def shared_decoder(sender: Sender, limits: Limits = DEFAULT_LIMITS) -> Decoder:
    """One decoder per direction and limits: it holds no session state, so every
    connection can share it (a decoder is a few KB of tables)."""
    return Decoder(sender, limits)


def decode_client(data: bytes | str) -> Decoded[ClientMessage] | Invalid:
    """Decode a frame a client sent, with the default limits."""
    return cast("Decoded[ClientMessage] | Invalid", shared_decoder("client").decode(data))


def decode_server(data: bytes | str) -> Decoded[ServerMessage] | Invalid:
    """Decode a frame a server sent, with the default limits."""
    return cast("Decoded[ServerMessage] | Invalid", shared_decoder("server").decode(data))


# --- encoding -------------------------------------------------------------------------

_ENCODER: Final = msgspec.json.Encoder()


def _has_extra(message: Message) -> bool:
    if message.extra is not UNSET:
        return True
    if isinstance(message, (Hello, Ready)):
        objects: list[Any] = [message.input, message.output]
        if isinstance(message, Hello) and message.tools is not UNSET:
            objects.extend(message.tools)
        return any(isinstance(o, _Object) and o.extra is not UNSET for o in objects)
    return False


def _wire_object(obj: _Object) -> dict[str, Any]:
    """The object as it goes on the wire: its members, then unknown members it kept."""
    wire: dict[str, Any] = msgspec.to_builtins(obj)
    extra = wire.pop("extra", None)
    if isinstance(obj, Hello) and obj.tools is not UNSET:
        wire["tools"] = [_wire_object(t) for t in obj.tools]
    if isinstance(obj, (Hello, Ready)):
        for member in ("input", "output"):
            fmt = getattr(obj, member)
            if isinstance(fmt, Format):
                wire[member] = _wire_object(fmt)
    if extra:
        known = _member_names(type(obj), wire)
        wire.update({key: item for key, item in extra.items() if key not in known})
    return wire


def _member_names(cls: type[_Object], wire: dict[str, Any]) -> frozenset[str]:
    """The members ``wire`` (an object of ``cls``) has, so that kept unknown members
    never stand in for them; a member of a branch that does not apply is not one."""
    if issubclass(cls, Message):
        schema = _schema_of(cls)
        return schema.active_members(wire) | _ENVELOPE
    return _object_members(cls)


@cache
def _object_members(cls: type[_Object]) -> frozenset[str]:
    return shared_object_members("format" if cls is Format else "tool")


@cache
def _schema_of(cls: type[Message]) -> MessageSchema:
    sender: Sender = "client" if cls in CLIENT_TYPES else "server"
    return message_schemas()[sender][cls.TYPE]


def encode(message: Message, seq: int = 0) -> bytes:
    """The compact canonical text of ``message`` with ``seq``.

    Members appear as ``v``, ``seq``, ``type``, then the message's members in schema
    order, then unknown members it kept (§2.2), never one name twice. Integers are
    written as integers; required members are written even when null.
    """
    try:
        if not _has_extra(message):
            data = b'{"v":1,"seq":%d,%b' % (seq, _ENCODER.encode(message)[1:])
        else:
            wire: dict[str, Any] = {"v": 1, "seq": seq}
            for key, item in _wire_object(message).items():
                wire.setdefault(key, item)
            data = _ENCODER.encode(wire)
    except (TypeError, ValueError, msgspec.EncodeError) as exc:
        error = LocalProtocolError(f"{message.TYPE} cannot be encoded: {exc}")
        # Set by hand as well: mypyc compiles ``raise ... from exc`` as a plain raise,
        # which leaves ``__cause__`` unset (tests/core/test_compiled_reference.py).
        error.__cause__ = exc
        raise error from exc
    if _checking[0]:
        _check_encoded(message, data)
    return data


#: Whether :func:`encode` checks what it writes (see :func:`check_encoding`).
_checking: list[bool] = [False]


def check_encoding(enabled: bool = True) -> None:  # pragma: no mutate block
    """Check every message :func:`encode` writes against the schemas, as its receiver
    would decode it, and raise :class:`LocalProtocolError` for one the spec forbids
    (a negative epoch, a member out of range, a seq of the wrong class). The tests run
    with it on; ``vrt serve`` turns it on when ``VRT_STRICT=1`` is set. It costs one
    decode per message, so production leaves it off."""
    _checking[0] = enabled


def _check_encoded(message: Message, data: bytes) -> None:
    sender: Sender = "client" if type(message) in CLIENT_TYPES else "server"
    decoded = shared_decoder(sender).decode(data)
    if isinstance(decoded, Invalid):
        raise LocalProtocolError(
            f"{message.TYPE} breaks the protocol ({decoded.code}): {decoded.reason}"
        )
