"""Capabilities (§3.3) and the registry (§3.4)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

import pytest
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from vrt.protocol import LocalProtocolError
from vrt.protocol.capabilities import (
    GLOBAL_TOOL_IDS,
    TOOL_STREAM,
    Capability,
    check_gated,
    gating_capability,
    is_token,
    negotiate,
    registry,
    validate_supported,
)
from vrt.protocol.schemas import message_schemas

ROOT: Final = Path(__file__).resolve().parents[1]
CAPABILITIES: Final = ROOT / "capabilities.json"
CAPABILITIES_SCHEMA: Final = ROOT / "capabilities.schema.json"
COMMON: Final = ROOT / "schema" / "common.json"


def load(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def registry_validator() -> Draft202012Validator:
    """capabilities.schema.json, based at its own file URI, with schema/common.json
    registered at its file URI so that "schema/common.json#/$defs/capability" resolves."""
    schema = load(CAPABILITIES_SCHEMA)
    common = Resource.from_contents(load(COMMON), default_specification=DRAFT202012)
    refs: Registry[Any] = Registry().with_resource(COMMON.as_uri(), common)
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator({**schema, "$id": CAPABILITIES_SCHEMA.as_uri()}, registry=refs)


def all_types() -> set[str]:
    schemas = message_schemas()
    return set(schemas["client"]) | set(schemas["server"])


class TestSection3_3Negotiation:
    """ "A server opening a new session computes the capabilities in effect: the offered
    tokens it supports, each once"; "Receivers MUST ignore capability tokens they do
    not recognise.\""""

    def test_intersection(self) -> None:
        assert negotiate(["tool-stream-v1", "global-tool-ids-v1"], ["tool-stream-v1"]) == (
            "tool-stream-v1",
        )

    def test_each_once(self) -> None:
        offered = ["tool-stream-v1", "x-a", "tool-stream-v1", "x-a"]
        assert negotiate(offered, ["x-a", "tool-stream-v1", "x-a"]) == ("tool-stream-v1", "x-a")

    def test_unknown_tokens_are_ignored(self) -> None:
        offered = ["not-a-thing", "x-unknown", "tool-stream-v1", "TOOL-STREAM-V1", "a..b"]
        assert negotiate(offered, [TOOL_STREAM, GLOBAL_TOOL_IDS]) == (TOOL_STREAM,)

    def test_supported_but_not_offered_is_not_in_effect(self) -> None:
        assert negotiate([], [TOOL_STREAM]) == ()
        assert negotiate([GLOBAL_TOOL_IDS], [TOOL_STREAM]) == ()
        assert negotiate([TOOL_STREAM], []) == ()

    def test_order_follows_the_offer(self) -> None:
        offered = [GLOBAL_TOOL_IDS, "x-b", TOOL_STREAM]
        result = negotiate(offered, [TOOL_STREAM, "x-b", GLOBAL_TOOL_IDS])
        assert result == (GLOBAL_TOOL_IDS, "x-b", TOOL_STREAM)

    def test_takes_any_iterables(self) -> None:
        offered = (t for t in [TOOL_STREAM, "x"])
        assert negotiate(offered, frozenset({TOOL_STREAM})) == (TOOL_STREAM,)


class TestSection3_4Gating:
    """ "A message type listed under a capability MUST NOT be sent unless that capability
    is in effect. Every other message type is baseline.\""""

    def test_tool_stream_without_its_capability_raises(self) -> None:
        for in_effect in ((), (GLOBAL_TOOL_IDS,), ("x-tool-stream-v1",), ("tool-stream-v2",)):
            with pytest.raises(LocalProtocolError, match="tool-stream-v1") as info:
                check_gated("tool.stream", in_effect)
            assert "tool.stream" in str(info.value)

    def test_tool_stream_with_its_capability_passes(self) -> None:
        check_gated("tool.stream", (TOOL_STREAM,))
        check_gated("tool.stream", [GLOBAL_TOOL_IDS, TOOL_STREAM])
        check_gated("tool.stream", frozenset({TOOL_STREAM}))

    @pytest.mark.parametrize("message_type", sorted(all_types() - {"tool.stream"}))
    def test_baseline_types_pass_without_capabilities(self, message_type: str) -> None:
        assert gating_capability(message_type) is None
        check_gated(message_type, ())

    def test_gating_capability(self) -> None:
        assert gating_capability("tool.stream") == TOOL_STREAM
        assert gating_capability("tool.call.delta") is None

    def test_gated_types_are_exactly_the_registrys(self) -> None:
        gated = {t for t in all_types() if gating_capability(t) is not None}
        listed = {m for entry in load(CAPABILITIES)["capabilities"] for m in entry["messages"]}
        assert gated == listed == {"tool.stream"}


class TestSection3_4Registry:
    """capabilities.json "lists every standard capability, in the format of
    capabilities.schema.json"."""

    def test_registry_matches_capabilities_json(self) -> None:
        entries = load(CAPABILITIES)["capabilities"]
        expected = {
            e["token"]: Capability(
                token=e["token"],
                status=e["status"],
                since=e["since"],
                section=e["section"],
                messages=tuple(e["messages"]),
            )
            for e in entries
        }
        assert len(expected) == len(entries), "a token is registered twice"
        assert registry() == expected

    def test_known_tokens(self) -> None:
        assert TOOL_STREAM in registry()
        assert GLOBAL_TOOL_IDS in registry()
        assert registry()[TOOL_STREAM].messages == ("tool.stream",)
        assert registry()[GLOBAL_TOOL_IDS].messages == ()
        assert registry()[TOOL_STREAM].section == "§7.5"
        assert registry()[GLOBAL_TOOL_IDS].section == "§6.3"

    def test_gated_message_types_exist(self) -> None:
        for entry in registry().values():
            assert set(entry.messages) <= all_types(), entry.token

    def test_capabilities_json_validates_against_its_schema(self) -> None:
        validator = registry_validator()
        errors = [e.message for e in validator.iter_errors(load(CAPABILITIES))]
        assert errors == []

    @pytest.mark.parametrize(
        "token",
        ["Tool-Stream-V1", "tool_stream", "a..b", "-a", "x-private", "", "a" * 65],
    )
    def test_schema_rejects_bad_tokens(self, token: str) -> None:
        """Proves the $ref to common.json#/$defs/capability is followed: without it
        these tokens would pass (and x- tokens are never standard)."""
        document = load(CAPABILITIES)
        document["capabilities"][0]["token"] = token
        assert not registry_validator().is_valid(document)

    @pytest.mark.parametrize(
        ("member", "value"),
        [("status", "beta"), ("since", "2.0"), ("section", "7.5"), ("messages", ["a", "a"])],
    )
    def test_schema_rejects_bad_entries(self, member: str, value: object) -> None:
        document = load(CAPABILITIES)
        document["capabilities"][0][member] = value
        assert not registry_validator().is_valid(document)


class TestSection3_3Tokens:
    """ "Tokens are lowercase ASCII words separated by . or -, at most 64 characters";
    "Implementations MUST NOT offer an unregistered token other than a private x-
    token.\""""

    @pytest.mark.parametrize(
        ("token", "ok"),
        [
            ("tool-stream-v1", True),
            ("x-acme.beta", True),
            ("a", True),
            ("a" * 64, True),
            ("a" * 65, False),
            ("", False),
            ("Tool", False),
            ("a_b", False),
            ("a..b", False),
            ("a.", False),
            (".a", False),
            ("a b", False),
            ("\u00e9", False),
        ],
    )
    def test_is_token(self, token: str, ok: bool) -> None:
        assert is_token(token) is ok

    def test_registered_and_private_tokens_are_accepted(self) -> None:
        tokens = [TOOL_STREAM, "x-acme.beta", GLOBAL_TOOL_IDS, TOOL_STREAM]
        assert validate_supported(tokens) == (TOOL_STREAM, "x-acme.beta", GLOBAL_TOOL_IDS)
        assert validate_supported([]) == ()

    @pytest.mark.parametrize("token", ["tool-stream-v2", "foo", "acme.beta", "xx-a"])
    def test_unregistered_standard_looking_tokens_are_rejected(self, token: str) -> None:
        with pytest.raises(LocalProtocolError, match=r"§3\.4") as info:
            validate_supported([TOOL_STREAM, token])
        assert repr(token) in str(info.value)

    @pytest.mark.parametrize("token", ["X-acme", "x_acme", "", "tool stream", "a" * 65])
    def test_malformed_tokens_are_rejected(self, token: str) -> None:
        with pytest.raises(LocalProtocolError, match=r"§3\.3"):
            validate_supported([token])
