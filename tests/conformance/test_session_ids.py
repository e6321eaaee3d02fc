"""What the session-id analysis (``ready-session-id-unguessable``) sees in ids of many
kinds, without a server: fair to random ids however they are written, hard on counters,
clocks, narrow or repeated randomness, and blind, as any black box is, to a hash of a
counter (the README says so)."""

from __future__ import annotations

import base64
import hashlib
import itertools
import secrets
import time
import uuid
from collections.abc import Callable

import pytest

from vrt.conformance.session_ids import MUST_BITS, RECOMMENDED_BITS, SAMPLES, analyse


def _ids(make: Callable[[int], str]) -> list[str]:
    return [make(k) for k in range(SAMPLES)]


RANDOM: dict[str, Callable[[int], str]] = {
    "uuid4": lambda k: str(uuid.uuid4()),
    "uuid4-hex": lambda k: uuid.uuid4().hex,
    "uuid4-upper": lambda k: str(uuid.uuid4()).upper(),
    "hex-128": lambda k: secrets.token_hex(16),
    "base64url-128": lambda k: secrets.token_urlsafe(16),
    "base64-128": lambda k: base64.b64encode(secrets.token_bytes(16)).decode(),
    "prefixed-base64url": lambda k: "s_" + secrets.token_urlsafe(16),
    "suffixed-hex": lambda k: secrets.token_hex(16) + ".eu-west",
    "base32-160": lambda k: base64.b32encode(secrets.token_bytes(20)).decode().rstrip("="),
}


@pytest.mark.parametrize("kind", sorted(RANDOM))
def test_random_ids_of_122_bits_or_more_pass_both_checks(kind: str) -> None:
    for _ in range(20):  # the same verdict, sample after sample
        found = analyse(_ids(RANDOM[kind]))
        assert not found.duplicates
        assert found.bits >= RECOMMENDED_BITS, found.describe()
        assert not found.ordered


GUESSABLE: dict[str, tuple[Callable[[int], str], str]] = {
    "counter": (lambda k: f"session-{k:08d}", "a counter or a clock"),
    "counter-hex-wide": (lambda k: f"{k + 4096:032x}", "a counter or a clock"),
    "counter-unpadded": (lambda k: f"s{k * 7 + 3}", "a counter or a clock"),
    "clock-ns": (lambda k: f"{time.time_ns():x}", "a counter or a clock"),
    "clock-ms-decimal": (lambda k: str(int(time.time() * 1000) + k), "a counter or a clock"),
    "32-bits": (lambda k: "sess-" + secrets.token_hex(4), "prefix 'sess-'"),
    "48-bits-base64": (lambda k: secrets.token_urlsafe(6), ""),
    "48-bits-twice": (lambda k: secrets.token_hex(6) * 2, "follow from others"),
    "uuid-with-16-random-bits": (
        lambda k: f"00000000-0000-4000-8000-0000{secrets.token_hex(2)}0000",
        "",
    ),
}


@pytest.mark.parametrize("kind", sorted(GUESSABLE))
def test_structured_or_narrow_ids_fail_the_must(kind: str) -> None:
    make, finding = GUESSABLE[kind]
    found = analyse(_ids(make))
    assert found.bits < MUST_BITS, found.describe()
    assert finding in found.describe()


def test_time_ordered_ids_with_random_tails_pass_the_must_only() -> None:
    """A UUIDv7-like id (48 bits of milliseconds, then 80 random bits): unguessable
    enough for the MUST, but below the RECOMMENDED 122, and seen as time-ordered."""
    counter = itertools.count()

    def v7(k: int) -> str:
        return f"{int(time.time() * 1000) + next(counter):012x}" + secrets.token_hex(10)

    found = analyse(_ids(v7))
    assert MUST_BITS <= found.bits < RECOMMENDED_BITS, found.describe()
    assert found.ordered


def test_repeats_are_found() -> None:
    ids = _ids(lambda k: secrets.token_hex(16))
    ids[5] = ids[2]
    assert analyse(ids).duplicates == (ids[2],)


def test_a_hash_of_a_counter_is_beyond_any_black_box() -> None:
    """The limit the README states: ids that are a hash of a counter look random from
    outside, so they are estimated as random. Only the server's code can show it."""
    found = analyse(_ids(lambda k: hashlib.sha256(f"session {k}".encode()).hexdigest()[:32]))
    assert found.bits >= RECOMMENDED_BITS
