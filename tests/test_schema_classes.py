"""The message classes mirror the normative schemas member for member, so code and
schema cannot drift apart: one class per schema file, the same wire member names, the
same required members, the same enumerations and the same nullability.
"""

from __future__ import annotations

import types
import typing
from pathlib import Path
from typing import Any, Final, Literal, Union

import msgspec
import pytest

from vrt.protocol import UNSET, Format, Message, Tool
from vrt.protocol.artifacts import load_json
from vrt.protocol.messages import CLIENT_TYPES, SERVER_TYPES
from vrt.protocol.schemas import MessageSchema, Sender, message_schemas, shared_object_members

ROOT: Final = Path(__file__).resolve().parents[1]
ENVELOPE: Final = frozenset({"v", "seq", "type"})
CLASSES: Final[dict[Sender, tuple[type[Message], ...]]] = {
    "client": CLIENT_TYPES,
    "server": SERVER_TYPES,
}
COMMON: Final[dict[str, Any]] = load_json("schema/common.json")["$defs"]


def schema_files(sender: Sender) -> list[str]:
    return sorted(p.name.removesuffix(".json") for p in (ROOT / "schema" / sender).glob("*.json"))


CASES: Final = [(s, t) for s in ("client", "server") for t in schema_files(s)]


def case_id(case: tuple[str, str]) -> str:
    return f"{case[0]}-{case[1]}"


def class_for(sender: Sender, type_: str) -> type[Message]:
    matches = [cls for cls in CLASSES[sender] if type_ == cls.TYPE]
    assert len(matches) == 1, f"{sender} {type_}: {len(matches)} classes, expected exactly 1"
    return matches[0]


def wire_fields(cls: type[msgspec.Struct]) -> dict[str, msgspec.structs.FieldInfo]:
    return {f.encode_name: f for f in msgspec.structs.fields(cls) if f.encode_name != "extra"}


def schema_properties(schema: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Every member's subschemas, conditional branches (then, else, allOf) included."""
    found: dict[str, list[dict[str, Any]]] = {}
    stack = [schema]
    while stack:
        node = stack.pop()
        for name, sub in node.get("properties", {}).items():
            found.setdefault(name, []).append(sub)
        stack.extend(node[key] for key in ("then", "else") if key in node)
        stack.extend(node.get("allOf", []))
    return found


def resolve(sub: dict[str, Any]) -> dict[str, Any]:
    ref = sub.get("$ref")
    if ref is None:
        return sub
    prefix = "../common.json#/$defs/" if ref.startswith("../") else "#/$defs/"
    assert ref.startswith(prefix), f"unexpected $ref {ref}"
    return resolve(
        {**COMMON[ref.removeprefix(prefix)], **{k: v for k, v in sub.items() if k != "$ref"}}
    )


def schema_enum(sub: dict[str, Any]) -> set[Any] | None:
    sub = resolve(sub)
    return set(sub["enum"]) if "enum" in sub else None


def schema_allows_null(sub: dict[str, Any]) -> bool:
    sub = resolve(sub)
    if not set(sub) - {"description", "$comment"}:
        return True  # the json definition: any value
    kind = sub.get("type")
    if kind == "null" or (isinstance(kind, list) and "null" in kind):
        return True
    if None in sub.get("enum", ()):
        return True
    return any(schema_allows_null(s) for s in sub.get("oneOf", []) + sub.get("anyOf", []))


def flatten(annotation: Any) -> list[Any]:
    if typing.get_origin(annotation) in (Union, types.UnionType):
        return [a for arg in typing.get_args(annotation) for a in flatten(arg)]
    return [annotation]


def class_enum(annotation: Any) -> set[Any] | None:
    literals = [a for a in flatten(annotation) if typing.get_origin(a) is Literal]
    if not literals:
        return None
    return {value for lit in literals for value in typing.get_args(lit)}


def class_allows_null(annotation: Any) -> bool:
    members = flatten(annotation)
    return Any in members or type(None) in members


class TestClassPerSchema:
    @pytest.mark.parametrize("sender", ["client", "server"])
    def test_types_match_schema_files(self, sender: Sender) -> None:
        assert sorted(cls.TYPE for cls in CLASSES[sender]) == schema_files(sender)
        assert set(message_schemas()[sender]) == set(schema_files(sender))

    @pytest.mark.parametrize("sender", ["client", "server"])
    def test_type_is_the_wire_tag(self, sender: Sender) -> None:
        for cls in CLASSES[sender]:
            assert cls.__struct_config__.tag == cls.TYPE
            assert cls.__struct_config__.tag_field == "type"

    def test_there_are_cases(self) -> None:
        assert len(CASES) == 20


@pytest.mark.parametrize("case", CASES, ids=case_id)
class TestMembersAgree:
    def schema(self, case: tuple[Sender, str]) -> MessageSchema:
        return message_schemas()[case[0]][case[1]]

    def test_member_names(self, case: tuple[Sender, str]) -> None:
        cls = class_for(*case)
        schema = self.schema(case)
        assert schema.members >= ENVELOPE, "every schema defines v, seq and type"
        assert set(wire_fields(cls)) == schema.members - ENVELOPE
        assert set(schema_properties(schema.schema)) == schema.members

    def test_required_members_have_no_default(self, case: tuple[Sender, str]) -> None:
        cls = class_for(*case)
        schema = self.schema(case)
        required = set(schema.schema["required"]) - ENVELOPE
        assert set(schema.schema["required"]) >= ENVELOPE
        without_default = {name for name, f in wire_fields(cls).items() if f.required}
        assert without_default == required

    def test_optional_members_default_to_unset(self, case: tuple[Sender, str]) -> None:
        """Absent is UNSET, distinct from null (§2.2)."""
        for name, f in wire_fields(class_for(*case)).items():
            if not f.required:
                assert f.default is UNSET, name
                assert msgspec.UnsetType in flatten(f.type), name

    def test_enumerations(self, case: tuple[Sender, str]) -> None:
        """§3.2: receivers validate enumerations, so the class's Literal must equal the
        schema's enum exactly."""
        fields = wire_fields(class_for(*case))
        for name, subs in schema_properties(self.schema(case).schema).items():
            if name in ENVELOPE:
                continue
            for sub in subs:
                expected = schema_enum(sub)
                if expected is not None:
                    assert class_enum(fields[name].type) == expected, name

    def test_nullability(self, case: tuple[Sender, str]) -> None:
        fields = wire_fields(class_for(*case))
        for name, subs in schema_properties(self.schema(case).schema).items():
            if name in ENVELOPE:
                continue
            allows = any(schema_allows_null(sub) for sub in subs)
            assert class_allows_null(fields[name].type) == allows, name


@pytest.mark.parametrize(("cls", "name"), [(Format, "format"), (Tool, "tool")])
class TestSharedObjects:
    def test_members(self, cls: type[msgspec.Struct], name: str) -> None:
        assert set(wire_fields(cls)) == shared_object_members(name)
        assert set(COMMON[name]["properties"]) == shared_object_members(name)

    def test_required(self, cls: type[msgspec.Struct], name: str) -> None:
        required = {n for n, f in wire_fields(cls).items() if f.required}
        assert required == set(COMMON[name]["required"])

    def test_enumerations(self, cls: type[msgspec.Struct], name: str) -> None:
        fields = wire_fields(cls)
        for member, sub in COMMON[name]["properties"].items():
            expected = schema_enum(sub)
            if expected is not None:
                assert class_enum(fields[member].type) == expected

    def test_keeps_unknown_members(self, cls: type[msgspec.Struct], name: str) -> None:
        assert "extra" in {f.name for f in msgspec.structs.fields(cls)}
