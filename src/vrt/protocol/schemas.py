"""The normative JSON Schemas of ``schema/``, compiled once for validation at run time.

Every message type of a direction is the name of a file in ``schema/<direction>/``, and
its §4.1 sequence class is the file's ``x-vrt-class`` annotation, so Appendix A lives in
the schemas only and the code reads it from there.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass, field
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
    #: Every member the schema names, conditional ones included.
    members: frozenset[str]
    schema: dict[str, Any]
    validator: jsonschema_rs.Validator
    #: Members that exist always, and (member, value, members then, members else) for
    #: each ``if``/``then``/``else`` on a member's value (tool.result's ``ok``,
    #: tool.stream's ``phase``).
    base_members: frozenset[str] = frozenset()
    conditionals: tuple[tuple[str, Any, frozenset[str], frozenset[str]], ...] = ()
    _active: dict[tuple[builtins.type[Any], Any], frozenset[str]] = field(default_factory=dict)

    def active_members(self, value: dict[str, Any]) -> frozenset[str]:
        """The members this message has, given its values: a member of a branch that
        does not apply is not one of its members (it is an unknown one, §2.2)."""
        if not self.conditionals:
            return self.members
        # The discriminator's type keys the cache with its value: Python takes 1 for
        # True, JSON Schema does not (a message being encoded has not been checked).
        found_value = value.get(self.conditionals[0][0])
        key = (found_value.__class__, found_value)
        try:
            return self._active[key]
        except KeyError:
            found = self._active[key] = self._find_active(value)
            return found
        except TypeError:  # an unhashable discriminator: the schema refused it already
            return self._find_active(value)

    def _find_active(self, value: dict[str, Any]) -> frozenset[str]:
        active = set(self.base_members)
        for member, expected, then, otherwise in self.conditionals:
            # JSON Schema: an absent member satisfies ``properties`` in the ``if``.
            holds = member not in value or _json_equal(value[member], expected)
            active |= then if holds else otherwise
        return frozenset(active)


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


def _json_equal(a: Any, b: Any) -> bool:
    """Equality as JSON Schema's ``const`` means it: true is not 1."""
    return type(a) is type(b) and a == b if isinstance(a, bool) or isinstance(b, bool) else a == b


def _conditionals(
    schema: dict[str, Any],
) -> tuple[tuple[str, Any, frozenset[str], frozenset[str]], ...]:
    found = []
    for node in [schema, *schema.get("allOf", [])]:
        condition = node.get("if", {}).get("properties", {})
        if len(condition) != 1:
            continue
        ((member, test),) = condition.items()
        found.append(
            (
                member,
                test["const"],
                _members(node.get("then", {})),
                _members(node.get("else", {})),
            )
        )
    return tuple(found)


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
            base_members=frozenset(schema.get("properties", {})),
            conditionals=_conditionals(schema),
        )
        if len({c[0] for c in table[sender][type_].conditionals}) > 1:
            raise ValueError(f"{relative}: conditions on more than one member")
    return table


@cache
def shared_object_members(name: str) -> frozenset[str]:
    """The members of ``common.json#/$defs/<name>`` (``format``, ``tool``)."""
    return _members(load_json("schema/common.json")["$defs"][name])
