"""Which members a message has (§2.2): those its schema names, less the members of an
``if``/``then``/``else`` branch that does not apply, the branch decided as JSON Schema
decides it. Survivors of mutation testing on ``schemas.py``
(docs/testing.md#mutation-testing).
"""

from __future__ import annotations

from typing import Final

from vrt.protocol.schemas import _json_equal, message_schemas

TOOL_RESULT: Final = message_schemas()["client"]["tool.result"]
BASE: Final = frozenset({"v", "type", "seq", "callId", "epoch", "ok"})


def test_the_branch_that_applies_gives_the_members() -> None:
    """§7.2, §2.2: a ``tool.result`` has ``output`` when ``ok`` is true and ``code`` and
    ``message`` when it is false; a member of the other branch is an unknown member. An
    absent ``ok`` satisfies the ``if`` (JSON Schema), asked twice (the cache) alike."""
    for _ in range(2):
        assert TOOL_RESULT.active_members({"ok": True}) == BASE | {"output"}
        assert TOOL_RESULT.active_members({"ok": False}) == BASE | {"code", "message"}
        assert TOOL_RESULT.active_members({}) == BASE | {"output"}


def test_a_discriminator_that_is_no_scalar_takes_the_else_branch() -> None:
    """An ``ok`` that is an array fails the ``if`` (``const: true``), so the ``else``
    branch applies; such a value cannot key the cache and is decided each time."""
    for _ in range(2):
        assert TOOL_RESULT.active_members({"ok": [True]}) == BASE | {"code", "message"}


def test_const_compares_as_json_schema_compares() -> None:
    """JSON Schema ``const``: ``true`` is not ``1`` (booleans are not numbers), while
    ``1`` and ``1.0`` are the same number."""
    assert _json_equal(True, True)
    assert not _json_equal(True, 1)
    assert not _json_equal(1, True)
    assert not _json_equal(False, 0)
    assert _json_equal(1, 1.0)
    assert _json_equal("settled", "settled")
    assert not _json_equal("settled", "failed")


def test_a_number_is_no_boolean_to_the_cache() -> None:
    """§2.2: ``ok`` of 1 or 0 is no boolean to JSON Schema (``const: true`` fails for 1),
    though Python takes ``1 == True``: asked in either order, each gets its own branch. A
    message being encoded has not been through the schema, so such a value can come."""
    for values in ([1, True, 0, False], [True, 1, False, 0]):
        for ok in values:
            assert TOOL_RESULT.active_members({"ok": ok}) == TOOL_RESULT._find_active({"ok": ok})
    assert TOOL_RESULT.active_members({"ok": 1}) == BASE | {"code", "message"}
