"""Failed authentication is rate-limited per address and logged, throttled, without
telling whether a principal exists (§5.3, docs/limits.md)."""

from __future__ import annotations

import hmac
import logging
from typing import Any

import pytest

from support import RawClient, start_server
from vrt.protocol.messages import Error
from vrt.server.auth import FailedAuthLimiter, TokenAuthenticator, address_key

TOKENS = (("alice", "alice-secret-token"), ("bob", "bob-secret-token"))


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_an_address_gets_its_burst_then_its_rate() -> None:
    clock = Clock()
    limiter = FailedAuthLimiter(burst=3, rate=0.5, clock=clock)
    for _ in range(3):
        assert limiter.allows("203.0.113.7")
        limiter.failed("203.0.113.7")
    assert not limiter.allows("203.0.113.7")
    assert limiter.allows("203.0.113.8")  # another address is not concerned
    clock.now += 2.0  # one failure's worth refilled
    assert limiter.allows("203.0.113.7")
    limiter.failed("203.0.113.7")
    assert not limiter.allows("203.0.113.7")


def test_the_table_of_addresses_is_bounded() -> None:
    """An attacker with many addresses makes the server remember at most
    ``max_addresses`` of them; an address whose budget refilled is forgotten."""
    clock = Clock()
    limiter = FailedAuthLimiter(burst=2, rate=1.0, max_addresses=100, clock=clock)
    for n in range(1000):
        limiter.failed(f"10.0.{n // 256}.{n % 256}")
    assert len(limiter) == 100
    clock.now += 10.0
    for n in range(50):
        limiter.failed(f"10.1.0.{n}")
    assert len(limiter) <= 100


def test_an_ipv6_host_counts_as_its_slash_64() -> None:
    assert address_key(("2001:db8:1:2::5", 1234, 0, 0)) == "2001:db8:1:2::/64"
    assert address_key(("2001:db8:1:2:ffff::9", 1, 0, 0)) == "2001:db8:1:2::/64"
    assert address_key(("::ffff:192.0.2.1", 1, 0, 0)) == "192.0.2.1"
    assert address_key(("192.0.2.1", 1)) == "192.0.2.1"
    assert address_key(None) == "?"


async def _answer(url: str, auth: Any) -> tuple[str, str, int | None]:
    client = await RawClient.connect(url)
    try:
        await client.send_hello(auth=auth)
        error = await client.expect_message(Error)
        code, _ = await client.closed()
        return error.code, error.message, code
    finally:
        await client.close()


async def test_wrong_tokens_are_throttled_per_address_and_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Past the burst, a hello from the address is refused before its credential is
    looked at (a right one too: guessing goes no faster than the budget); the failures
    make one warning line (per 10 s), which names neither the token nor a principal."""
    calls = 0
    tokens = TokenAuthenticator(TOKENS)

    def counted(auth: Any) -> str | None:
        nonlocal calls
        calls += 1
        return tokens(auth)

    running = await start_server(
        authenticator=counted, auth_failures=FailedAuthLimiter(burst=5, rate=0.01)
    )
    caplog.set_level(logging.INFO, logger="vrt.server")
    try:
        answers = [await _answer(running.url, f"guess-{n}") for n in range(20)]
        assert {(code, close) for code, _, close in answers} == {("UNAUTHORIZED", 4401)}
        assert calls == 5  # the rest were refused unread
        code, message, close = await _answer(running.url, "alice-secret-token")
        assert (code, close, calls) == ("UNAUTHORIZED", 4401, 5)
        assert "too many failed authentications" in message
        warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert 1 <= len(warnings) <= 2, warnings
        for line in warnings:
            assert not any(word in line for word in ("guess", "secret", "alice", "bob"))
    finally:
        await running.close()


async def test_unknown_and_wrong_credentials_get_one_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A token of no principal and a near miss of alice's: the same answer, after
    comparing against every token either way (compare_digest, constant time)."""
    tokens = TokenAuthenticator(TOKENS)
    compared = []
    real = hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        compared.append(len(b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", counting)
    assert tokens("nobody-at-all") is None
    unknown = list(compared)
    compared.clear()
    assert tokens("alice-secret-tokeN") is None
    assert compared == unknown == [len(t) for _, t in TOKENS]
    monkeypatch.undo()
    running = await start_server(authenticator=tokens)
    try:
        assert await _answer(running.url, "nobody-at-all") == await _answer(
            running.url, "alice-secret-tokeN"
        )
    finally:
        await running.close()
