"""The normative JSON Schemas of ``schema/``, compiled once for validation at run time.

Every message type of a direction is the name of a file in ``schema/<direction>/``, and
its §4.1 sequence class is the file's ``x-vrt-class`` annotation, so Appendix A lives in
the schemas only and the code reads it from there.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any, Final, Literal, TypeAlias

import jsonschema_rs

from .artifacts import artifact_root, load_json

__all__ = [
    "SENDERS",
    "MessageSchema",
    "Sender",
    "SeqClass",
    "message_schemas",
    "shared_object_members",
]

Sender: TypeAlias = Literal["client", "server"]
SeqClass: TypeAlias = Literal["transient", "sequenced", "sessionless"]
SENDERS: Final[tuple[Sender, Sender]] = ("client", "server")


@dataclass(frozen=True, slots=True)
class MessageSchema:
    """One message type of one direction: its schema, compiled, and its §4.1 class."""

    sender: Sender
    type: str
    seq_class: SeqClass
    members: frozenset[str]
    schema: dict[str, Any]
    validator: jsonschema_rs.Validator


def _registry() -> tuple[jsonschema_rs.Registry, dict[str, Any]]:
    root = artifact_root()
    resources: list[tuple[str, Any]] = []
    by_path: dict[str, Any] = {}
    for path in sorted((root / "schema").rglob("*.json")):
        relative = path.relative_to(root).as_posix()
        document = load_json(relative)
        by_path[relative] = document
        resources.append((path.resolve().as_uri(), document))
    return jsonschema_rs.Registry(resources), by_path


def _members(schema: dict[str, Any]) -> frozenset[str]:
    """Every member name the schema defines, conditional branches included."""
    names: set[str] = set()
    stack = [schema]
    while stack:
        node = stack.pop()
        names.update(node.get("properties", {}))
        stack.extend(node[key] for key in ("then", "else") if key in node)
        stack.extend(node.get("allOf", []))
    return frozenset(names)


@cache
def message_schemas() -> dict[Sender, dict[str, MessageSchema]]:
    """``{sender: {type: MessageSchema}}`` for each file of ``schema/client``, ``schema/server``."""
    registry, documents = _registry()
    root = artifact_root()
    table: dict[Sender, dict[str, MessageSchema]] = {"client": {}, "server": {}}
    for relative, schema in documents.items():
        folder, _, filename = relative.removeprefix("schema/").rpartition("/")
        if folder not in table:
            continue
        sender: Sender = "client" if folder == "client" else "server"
        type_ = filename.removesuffix(".json")
        validator = jsonschema_rs.validator_for(
            schema,
            registry=registry,
            base_uri=(root / relative).resolve().as_uri(),
        )
        table[sender][type_] = MessageSchema(
            sender=sender,
            type=type_,
            seq_class=schema["x-vrt-class"],
            members=_members(schema),
            schema=schema,
            validator=validator,
        )
    return table


@cache
def shared_object_members(name: str) -> frozenset[str]:
    """The members of ``common.json#/$defs/<name>`` (``format``, ``tool``)."""
    return _members(load_json("schema/common.json")["$defs"][name])
