"""What a text frame's bytes say, counted in C: how many JSON values it holds (before it
is parsed), how deep it nests, whether an object names a member twice (§2.2, §11).

Nothing here walks a parsed value in Python, so what a frame costs the decoder
(``vrt.protocol.codec``) is linear in its size whatever its shape. Each count reads the
frame with its strings emptied (:func:`outside_strings`): outside strings, JSON's
structure is in its brackets, commas and colons alone.
"""

from __future__ import annotations

import gc
import json
import math
from itertools import accumulate
from typing import Any, Final

import orjson

__all__ = [
    "MANY_CONTAINERS",
    "deeper_than",
    "duplicate_name",
    "outside_strings",
    "parse",
    "read_integer",
    "too_many_values",
    "unique_names",
]

_WHITESPACE: Final = b" \t\n\r"
#: Every byte but the four brackets, for ``bytes.translate(None, ...)``.
_NOT_BRACKETS: Final = bytes(b for b in range(256) if b not in b"[]{}")
#: Opening brackets as the signed byte +1, closing ones as -1.
_STEPS: Final = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")
#: A number with more digits than this is beyond the range of a double (~1.8e308)
#: whatever its value; Python would refuse to read one past 4,300 digits anyway.
_MAX_INTEGER_DIGITS: Final = 400
#: Above this many brackets, a frame is parsed with the garbage collector paused.
MANY_CONTAINERS: Final = 2_000


def parse(data: bytes) -> Any:
    """``orjson.loads``, with the cyclic garbage collector paused for a frame of many
    arrays and objects. Each container built counts towards a collection, and the
    collections that run while 100,000 of them are built walk them again and again:
    measured, parsing took 3 to 4 times as long. Paused, they are walked once, later."""
    if (
        len(data) < MANY_CONTAINERS  # each bracket is a byte: the common case, uncounted
        or data.count(b"[") + data.count(b"{") < MANY_CONTAINERS
        or not gc.isenabled()
    ):
        return orjson.loads(data)
    gc.disable()
    try:
        return orjson.loads(data)
    finally:
        gc.enable()


def read_integer(digits: str) -> int | float:
    # Beyond a double's range either way: read as infinity, which _walk reports.
    return int(digits) if len(digits) <= _MAX_INTEGER_DIGITS else math.inf


def outside_strings(data: bytes) -> bytes:
    """``data`` with every JSON string emptied (``""``), in C: with the escapes ``\\\\``
    and ``\\"`` gone (taken left to right, as JSON reads them), every ``"`` left opens
    or closes a string."""
    plain = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    return b'""'.join(plain.split(b'"')[::2])


def too_many_values(data: bytes, limit: int) -> int:
    """The number of JSON values in ``data`` when it is more than ``limit``; 0 otherwise.

    Counted in C, without parsing: outside strings, each non-empty array or object holds
    one value more than it has commas, so a frame holds ``1 + commas + non-empty
    containers`` values. Counting the brackets and commas of the whole frame, strings
    included, bounds that from above, which settles the common case in one pass. (The
    decoder only asks of a frame of ``limit`` bytes or more: a shorter one holds fewer
    values, each taking a byte at least.)
    """
    bound = 1 + data.count(b",") + data.count(b"[") + data.count(b"{")
    if bound <= limit:
        return 0
    bare = outside_strings(data).translate(None, _WHITESPACE)
    empty = bare.count(b"[]") + bare.count(b"{}")
    count = 1 + bare.count(b",") + bare.count(b"[") + bare.count(b"{") - empty
    return count if count > limit else 0


def deeper_than(data: bytes, max_depth: int) -> bool:
    """Whether the frame (parsed already, so its brackets match) nests deeper than
    ``max_depth``: its brackets alone, read as +1 and -1, rise as high as it nests
    (the running sum is taken in C)."""
    if len(data) <= 2 * max_depth:
        return False  # nesting past max_depth takes more than max_depth brackets, each closed
    if data.count(b"[") + data.count(b"{") <= max_depth:
        return False
    steps = outside_strings(data).translate(_STEPS, _NOT_BRACKETS)
    return max(accumulate(memoryview(steps).cast("b"))) > max_depth


def unique_names(data: bytes, value: dict[str, Any]) -> bool:
    """Whether no object of the frame has a member name twice (§2.2), by counting.

    Outside strings JSON has a ':' only after a member name. (The decoder settles a
    frame without arrays and with a ':' per member before it calls this.) Re-encode what was parsed:
    duplicates were dropped from it, with any ':' in their values, so equal counts mean
    no duplicate (a ``\\u`` escape can hide a ':' that the re-encoding writes plainly).
    Otherwise only the ':' outside strings settle it.
    """
    colons = data.count(b":")
    try:
        again = orjson.dumps(value)
    except orjson.JSONEncodeError:  # an unpaired surrogate or an integer past 64 bits
        again = json.dumps(value).encode()
    if colons == again.count(b":") and b"\\u" not in data:
        return True
    return outside_strings(data).count(b":") == outside_strings(again).count(b":")


def duplicate_name(data: bytes) -> str:
    found: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: set[str] = set()
        for key, _ in items:
            if key in seen and not found:
                found.append(key)
            seen.add(key)
        return dict(items)

    json.loads(data.decode("utf-8"), object_pairs_hook=pairs)
    return found[0] if found else "?"
