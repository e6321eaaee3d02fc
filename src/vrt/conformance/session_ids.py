"""How guessable a server's session ids look from outside (§5.2, §10).

A black box sees only the ids. From many of them, opened one after another, it can see
structure: a part common to every id, positions that never change or take few values,
positions that follow from others, ids that grow in the order they were issued (a
counter or a clock), and from that an upper bound on the randomness of the rest. It
cannot see whether what looks random is: an id that is a hash (or any other mixing) of
a counter, a clock or a small seed looks random and is estimated as random. The
estimate is an upper bound: it can prove an id guessable, never unguessable.

:func:`analyse` does the analysis; the server suite's checks judge it against
:data:`MUST_BITS` (``ready-session-id-unguessable``) and :data:`RECOMMENDED_BITS`
(``ready-session-id-122-bits``).
"""

from __future__ import annotations

import itertools
import math
import string
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

__all__ = ["MUST_BITS", "RECOMMENDED_BITS", "SAMPLES", "IdAnalysis", "analyse"]

#: Sessions the checks open (one after another, so that their order is known).
SAMPLES: Final = 32
#: Below this estimate an id is guessable in practice: a verdict on the MUST.
MUST_BITS: Final = 64
#: §5.2: "RECOMMENDED: at least 122 random bits, as in a version 4 UUID".
RECOMMENDED_BITS: Final = 122
#: A position is counted at its alphabet's full width when it shows at least this share
#: of the distinct characters that uniform random draws would show.
_FULL_WIDTH_SHARE: Final = 0.6
#: Repeats of a position's characters needed before another position is called a
#: function of it (fewer could be chance).
_DEPENDENCE_WITNESSES: Final = 4

_ALPHABETS: Final = (
    ("decimal", string.digits),
    ("hex", "0123456789abcdef"),
    ("hex", "0123456789ABCDEF"),
    ("base32", "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"),
    ("base32", "abcdefghijklmnopqrstuvwxyz234567"),
    ("base32 (Crockford)", "0123456789ABCDEFGHJKMNPQRSTVWXYZ"),
    ("base32 (Crockford)", "0123456789abcdefghjkmnpqrstvwxyz"),
    ("base36", string.digits + string.ascii_lowercase),
    ("base36", string.digits + string.ascii_uppercase),
    ("alphanumeric", string.digits + string.ascii_letters),
    ("base64url", string.digits + string.ascii_letters + "-_"),
    ("base64", string.digits + string.ascii_letters + "+/"),
)


@dataclass(frozen=True)
class IdAnalysis:
    """What the ids show of their structure."""

    count: int
    duplicates: tuple[str, ...]
    prefix: str
    suffix: str
    #: The name and size of the smallest usual alphabet of the varying positions.
    alphabet: str
    alphabet_size: int
    #: Positions (in the part between prefix and suffix) that ever change.
    varying: int
    #: An upper bound on the random bits of one id.
    bits: float
    #: The ids grow (or shrink) in the order they were issued.
    ordered: bool
    #: What was found, in words, for a report.
    findings: tuple[str, ...] = field(default=())

    def describe(self) -> str:
        shown = "; ".join(self.findings)
        return (
            f"{self.count} ids, at most {self.bits:.0f} random bits each "
            f"({self.varying} varying positions of {self.alphabet}){': ' + shown if shown else ''}"
        )


def analyse(ids: Sequence[str]) -> IdAnalysis:
    """The structure of ``ids``, in the order they were issued."""
    count = len(ids)
    duplicates = tuple(sorted({i for i in ids if ids.count(i) > 1}))
    prefix = _common_prefix(ids)
    rest = [i[len(prefix) :] for i in ids]
    suffix = _common_prefix([r[::-1] for r in rest])[::-1]
    parts = [r[: len(r) - len(suffix)] for r in rest]
    findings: list[str] = []
    if duplicates:
        findings.append(f"{len(duplicates)} ids issued twice")
    if prefix or suffix:
        findings.append(f"every id has the prefix {prefix!r} and the suffix {suffix!r}")
    width = min((len(p) for p in parts), default=0)
    if any(len(p) != width for p in parts):
        findings.append(
            f"the varying parts have {width} to {max(len(p) for p in parts)} characters"
        )
    columns = [[p[k] for p in parts] for k in range(width)]
    moving = [k for k, column in enumerate(columns) if len(set(column)) > 1]
    constant = width - len(moving)
    if constant:
        findings.append(f"{constant} positions inside the varying part never change")
    name, size = _alphabet({c for k in moving for c in columns[k]})
    derived = _derived(columns, moving, count)
    if derived:
        findings.append(f"{len(derived)} positions follow from others")
    bits = 0.0
    narrow = 0
    for k in moving:
        if k in derived:
            continue
        column_bits = _column_bits(columns[k], size, count)
        narrow += column_bits < math.log2(size)
        bits += column_bits
    if narrow:
        findings.append(f"{narrow} positions take fewer values than random ones would")
    ordered = count > 2 and _ordered(parts)
    if ordered:
        findings.append("they grow in the order the sessions were opened (a counter or a clock)")
    return IdAnalysis(
        count=count,
        duplicates=duplicates,
        prefix=prefix,
        suffix=suffix,
        alphabet=name,
        alphabet_size=size,
        varying=len(moving) - len(derived),
        bits=bits,
        ordered=ordered,
        findings=tuple(findings),
    )


def _common_prefix(values: Sequence[str]) -> str:
    if not values:
        return ""
    first, last = min(values), max(values)
    k = 0
    while k < min(len(first), len(last)) and first[k] == last[k]:
        k += 1
    return first[:k]


def _alphabet(characters: set[str]) -> tuple[str, int]:
    for name, letters in _ALPHABETS:
        if characters <= set(letters):
            return name, len(letters)
    return f"{len(characters)} distinct characters", max(len(characters), 2)


def _column_bits(column: list[str], size: int, count: int) -> float:
    """The bits one position carries: its alphabet's width when it shows about as many
    distinct characters as random draws would, else the width of the few it uses
    (rounded up to a power of two: a UUID's variant position, 4 values, is 2 bits)."""
    distinct = len(set(column))
    if distinct <= 1:
        return 0.0
    expected = size * (1 - (1 - 1 / size) ** count)
    if distinct >= _FULL_WIDTH_SHARE * expected:
        return math.log2(size)
    return float(math.ceil(math.log2(distinct)))


def _derived(columns: list[list[str]], moving: list[int], count: int) -> set[int]:
    """Positions whose character is a function of an earlier position's, across every
    id, where enough repeats of the earlier one witness it."""
    derived: set[int] = set()
    for j in moving:
        for i in moving:
            if i >= j or i in derived:
                continue
            if count - len(set(columns[i])) < _DEPENDENCE_WITNESSES:
                continue
            mapping: dict[str, str] = {}
            pairs = zip(columns[i], columns[j], strict=True)
            if all(mapping.setdefault(a, b) == b for a, b in pairs):
                derived.add(j)
                break
    return derived


def _ordered(parts: list[str]) -> bool:
    keys: list[tuple[int, str]] = [(len(p), p) for p in parts]  # a counter grows in length
    steps = list(itertools.pairwise(keys))
    return all(a < b for a, b in steps) or all(a > b for a, b in steps)
