"""Self-checks of the language-neutral test vectors in examples/.

These tests import nothing from the project: they check the vector files against their
own format (examples/vectors.schema.json), against the normative message schemas in
schema/ (with the generic ``jsonschema`` package) and against a small reference
classifier of the §9.1 rules written here, so that a wrong vector fails here before it
misleads an implementation in any language.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator, Mapping
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator, ValidationError
from jsonschema.protocols import Validator
from jsonschema.validators import extend
from referencing import Registry
from referencing.jsonschema import DRAFT202012

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
SCHEMA_DIR = ROOT / "schema"
VECTOR_SCHEMA = EXAMPLES / "vectors.schema.json"
BINARY_FILE = EXAMPLES / "binary" / "frames.json"
SENDERS = ("client", "server")
ERROR_CODES = ("MALFORMED", "UNSUPPORTED_VERSION", "UNKNOWN_TYPE", "INVALID_FIELD")

Case = dict[str, Any]


def _load(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _vector_files() -> list[Path]:
    return sorted(p for p in EXAMPLES.rglob("*.json") if p != VECTOR_SCHEMA)


def _text_files() -> list[Path]:
    return [p for s in SENDERS for p in sorted((EXAMPLES / s).glob("*.json"))]


def _text_cases() -> list[tuple[str, Case]]:
    """(sender, case) for every text-frame case."""
    out: list[tuple[str, Case]] = []
    for path in _text_files():
        doc = _load(path)
        out.extend((doc["sender"], case) for case in doc["cases"])
    return out


def _binary_cases() -> list[Case]:
    cases: list[Case] = _load(BINARY_FILE)["cases"]
    return cases


def _message_types(sender: str) -> frozenset[str]:
    """The message types of one direction, from the file names in schema/<sender>/."""
    return frozenset(p.name.removesuffix(".json") for p in (SCHEMA_DIR / sender).glob("*.json"))


TEXT_CASES = _text_cases()
BINARY_CASES = _binary_cases()
TYPES = {sender: _message_types(sender) for sender in SENDERS}


def frame_text(case: Case) -> str:
    """The frame a case stands for: its text, or the compact JSON encoding of message."""
    if "text" in case:
        text: str = case["text"]
        return text
    return json.dumps(case["message"], separators=(",", ":"), ensure_ascii=False)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_strict(text: str) -> tuple[Any, bool]:
    """Parse RFC 8259 JSON (no NaN/Infinity); duplicates: last wins, and reported."""
    duplicate = False

    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal duplicate
        if len({k for k, _ in pairs}) != len(pairs):
            duplicate = True
        return dict(pairs)

    value = json.loads(text, object_pairs_hook=hook, parse_constant=_reject_constant)
    return value, duplicate


# --- message schemas -----------------------------------------------------------------


def _ecma_pattern(
    validator: Validator, pattern: str, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    """`pattern` with ECMA-262 semantics for `$` (JSON Schema regexes are ECMA-262).

    Python's `$` also matches before a final newline, so plain `jsonschema` would accept
    "tool-stream-v1\\n" as a capability token; ECMA-262 (and jsonschema-rs) does not.
    """
    if not validator.is_type(instance, "string"):
        return
    if re.search(re.sub(r"(?<!\\)\$", r"\\Z", pattern), instance) is None:
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


MessageValidator = extend(Draft202012Validator, validators={"pattern": _ecma_pattern})


@cache
def _registry() -> Registry[Any]:
    registry: Registry[Any] = Registry()
    for path in sorted(SCHEMA_DIR.rglob("*.json")):
        contents = _load(path)
        # The dialect is given explicitly here. Without "$schema", jsonschema keeps using
        # MessageValidator (with its ECMA-262 `pattern`) across $refs instead of switching
        # back to the stock Draft202012Validator that "$schema" names.
        contents.pop("$schema", None)
        resource = DRAFT202012.create_resource(contents)
        registry = registry.with_resource(path.resolve().as_uri(), resource)
    return registry


@cache
def message_validator(sender: str, type_: str) -> Validator:
    uri = (SCHEMA_DIR / sender / f"{type_}.json").resolve().as_uri()
    validator: Validator = MessageValidator({"$ref": uri}, registry=_registry())
    return validator


def _duplicate_tool_names(sender: str, message: dict[str, Any]) -> bool:
    tools = message.get("tools")
    if sender != "client" or message.get("type") != "hello" or not isinstance(tools, list):
        return False
    names = [t["name"] for t in tools if isinstance(t, dict) and "name" in t]
    return len(set(names)) != len(names)


def classify(sender: str, text: str) -> str:
    """Reference classification of a text frame sent by `sender` (§9.1, messages.md)."""
    try:
        value, duplicate = parse_strict(text)
    except ValueError:
        return "MALFORMED"
    if not isinstance(value, dict):
        return "MALFORMED"
    v = value.get("v")
    if isinstance(v, bool) or not isinstance(v, int | float) or v != 1:
        return "UNSUPPORTED_VERSION"
    type_ = value.get("type")
    if not isinstance(type_, str) or type_ not in TYPES[sender]:
        return "UNKNOWN_TYPE"
    if (
        not message_validator(sender, type_).is_valid(value)
        or duplicate
        or _duplicate_tool_names(sender, value)
    ):
        return "INVALID_FIELD"
    return "valid"


def _expected(case: Case) -> str:
    return "valid" if case["valid"] else str(case["error"])


# --- 1. file format ------------------------------------------------------------------


@pytest.mark.parametrize("path", _vector_files(), ids=lambda p: str(p.relative_to(EXAMPLES)))
def test_file_matches_vector_schema(path: Path) -> None:
    schema = _load(VECTOR_SCHEMA)
    Draft202012Validator.check_schema(schema)
    errors = [e.message for e in Draft202012Validator(schema).iter_errors(_load(path))]
    assert not errors, errors[:5]


def test_text_files_are_in_their_sender_directory() -> None:
    for path in _text_files():
        assert _load(path)["sender"] == path.parent.name, path


# --- 2. coverage ---------------------------------------------------------------------


def test_case_ids_are_unique() -> None:
    ids = [c["id"] for _, c in TEXT_CASES] + [c["id"] for c in BINARY_CASES]
    dupes = [i for i, n in Counter(ids).items() if n > 1]
    assert not dupes


def test_enough_text_cases() -> None:
    assert len(TEXT_CASES) >= 150


@pytest.mark.parametrize(
    ("sender", "type_"), [(s, t) for s in SENDERS for t in sorted(TYPES[s])], ids=str
)
def test_every_type_has_a_valid_case(sender: str, type_: str) -> None:
    found = [
        c["id"]
        for s, c in TEXT_CASES
        if s == sender and c["valid"] and parse_strict(frame_text(c))[0].get("type") == type_
    ]
    assert found, f"no valid {sender} {type_} vector"


@pytest.mark.parametrize(("sender", "code"), [(s, e) for s in SENDERS for e in ERROR_CODES])
def test_every_error_code_for_both_senders(sender: str, code: str) -> None:
    assert any(s == sender and c.get("error") == code for s, c in TEXT_CASES)


# --- 3. agreement with the message schemas and the §9.1 rules --------------------------

VALID = [(s, c) for s, c in TEXT_CASES if c["valid"]]
INVALID_FIELD = [(s, c) for s, c in TEXT_CASES if c.get("error") == "INVALID_FIELD"]


def _case_id(item: tuple[str, Case]) -> str:
    return str(item[1]["id"])


@pytest.mark.parametrize("item", VALID, ids=_case_id)
def test_valid_case_matches_its_schema(item: tuple[str, Case]) -> None:
    sender, case = item
    message, _ = parse_strict(frame_text(case))
    errors = [e.message for e in message_validator(sender, message["type"]).iter_errors(message)]
    assert not errors


@pytest.mark.parametrize("item", INVALID_FIELD, ids=_case_id)
def test_invalid_field_case_against_its_schema(item: tuple[str, Case]) -> None:
    sender, case = item
    message, _ = parse_strict(frame_text(case))  # Python's json: the last duplicate wins
    accepted = message_validator(sender, message["type"]).is_valid(message)
    if case.get("beyondSchema", False):
        assert accepted, "a beyondSchema case must pass the JSON Schema"
    else:
        assert not accepted, "the JSON Schema accepts this message: mark it beyondSchema?"


@pytest.mark.parametrize("item", TEXT_CASES, ids=_case_id)
def test_reference_classifier_agrees(item: tuple[str, Case]) -> None:
    sender, case = item
    assert classify(sender, frame_text(case)) == _expected(case)


# --- 4. binary frames ----------------------------------------------------------------


def parse_audio_frame(frame: bytes, receiver: str) -> tuple[int, int, bytes] | None:
    """§8.1: kind, big-endian u32 seq, payload; None when malformed for this receiver."""
    accepted = 1 if receiver == "server" else 2
    if len(frame) < 5 or frame[0] != accepted:
        return None
    return frame[0], int.from_bytes(frame[1:5], "big"), frame[5:]


@pytest.mark.parametrize("case", BINARY_CASES, ids=lambda c: str(c["id"]))
def test_binary_case(case: Case) -> None:
    parsed = parse_audio_frame(bytes.fromhex(case["hex"]), case["receiver"])
    if case["valid"]:
        assert parsed == (case["kind"], case["seq"], bytes.fromhex(case["payloadHex"]))
    else:
        assert parsed is None
        assert case["error"] == "MALFORMED"


def test_binary_coverage() -> None:
    assert len(BINARY_CASES) >= 25
    valid = [c for c in BINARY_CASES if c["valid"]]
    seqs = {c["seq"] for c in valid}
    assert {0, 1, 255, 256, 65535, 16777216, 4294967295} <= seqs
    assert any(len(c["payloadHex"]) == 2 * 960 for c in valid)
    assert any(c["payloadHex"] == "" for c in valid)
    lengths = {len(c["hex"]) // 2 for c in BINARY_CASES if not c["valid"]}
    assert {0, 1, 2, 3, 4} <= lengths
    kinds = {(c["receiver"], c["hex"][:2]) for c in BINARY_CASES if len(c["hex"]) >= 10}
    for receiver in ("server", "client"):
        assert {(receiver, k) for k in ("00", "03", "ff")} <= kinds
    assert ("server", "02") in kinds
    assert ("client", "01") in kinds
