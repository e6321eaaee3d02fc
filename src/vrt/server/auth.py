"""Authentication of ``hello.auth`` (§5.3): a callable that returns the principal.

Credentials travel only in ``hello.auth``, never in the URL (§2.1, §5.3), and are never
logged.
"""

from __future__ import annotations

import hmac
import ipaddress
import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Final, TypeAlias

from ..logs import Throttled

__all__ = [
    "Authenticator",
    "FailedAuthLimiter",
    "TokenAuthenticator",
    "address_key",
    "parse_token_spec",
]

log = logging.getLogger("vrt.server")

#: Takes ``hello.auth`` (None when absent) and returns the principal the session will
#: belong to, or None to refuse with UNAUTHORIZED. May be a coroutine function.
Authenticator: TypeAlias = Callable[[Any], "str | Awaitable[str | None] | None"]


class TokenAuthenticator:
    """Static bearer tokens: ``hello.auth`` must equal one of them exactly.

    Every token is compared in constant time, so the time taken does not tell how
    much of a token matched, nor which principal came close.
    """

    def __init__(self, tokens: Iterable[tuple[str, str]]) -> None:
        self._tokens = [(principal, token.encode()) for principal, token in tokens]
        if not self._tokens:
            raise ValueError("TokenAuthenticator needs at least one PRINCIPAL:TOKEN")

    def __call__(self, auth: Any) -> str | None:
        offered = auth.encode() if isinstance(auth, str) else b"\0invalid"
        found: str | None = None
        for principal, token in self._tokens:
            if hmac.compare_digest(offered, token) and found is None:
                found = principal
        return found


def parse_token_spec(spec: str) -> tuple[str, str]:
    """``PRINCIPAL:TOKEN`` as given to ``vrt serve --auth-token``."""
    principal, sep, token = spec.partition(":")
    if not sep or not principal or not token:
        raise ValueError("expected PRINCIPAL:TOKEN, both non-empty")
    return principal, token


#: Failed authentications an address may make at once, and then per second.
FAILURE_BURST: Final = 10
FAILURE_RATE: Final = 1.0
#: Addresses remembered at most (each about 200 bytes): 2 MB at most.
MAX_ADDRESSES: Final = 10_000


def address_key(peer: Any) -> str:
    """Whose failures count together: an IPv4 address, an IPv6 /64 (one host can hold
    a whole /64), or ``"?"`` when the transport does not say (a unix socket)."""
    host = peer[0] if isinstance(peer, tuple) and peer else None
    if not isinstance(host, str):
        return "?"
    try:
        address = ipaddress.ip_address(host.partition("%")[0])
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


class FailedAuthLimiter:
    """Failed authentications per address, as a token bucket: :data:`FAILURE_BURST` at
    once, then :data:`FAILURE_RATE` per second (docs/limits.md).

    An address over its budget is refused before its credential is looked at, so that
    guessing goes no faster than the budget whatever the client sends; a right
    credential from it waits for the budget too. The table is bounded: an address
    whose budget has refilled is forgotten (it is as if it had never failed), and at
    :data:`MAX_ADDRESSES` the one that failed the longest ago goes. Failures are logged
    at most once per 10 s with their count, never with the credential or a principal,
    so the log does not tell whether a principal exists either (§5.3).
    """

    def __init__(
        self,
        *,
        burst: int = FAILURE_BURST,
        rate: float = FAILURE_RATE,
        max_addresses: int = MAX_ADDRESSES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if burst < 1 or rate <= 0 or max_addresses < 1:
            raise ValueError("burst and max_addresses must be at least 1, rate above 0")
        self.burst = burst
        self.rate = rate
        self.max_addresses = max_addresses
        self.clock = clock
        #: address -> (budget left, when it was counted), the least recent first.
        self._table: dict[str, tuple[float, float]] = {}
        #: Hellos refused for their address's budget (for tests and metrics).
        self.refused = 0
        self.failures = 0
        self._failed_line = Throttled(log, logging.WARNING)
        self._refused_line = Throttled(log, logging.WARNING)

    def __len__(self) -> int:
        return len(self._table)

    def _budget(self, address: str, now: float) -> float:
        entry = self._table.get(address)
        if entry is None:
            return float(self.burst)
        left, at = entry
        return min(float(self.burst), left + (now - at) * self.rate)

    def allows(self, address: str) -> bool:
        """Whether a hello from ``address`` may be authenticated now."""
        if address not in self._table:
            return True
        if self._budget(address, self.clock()) >= 1.0:
            return True
        self.refused += 1
        self._refused_line(
            "refused a hello before authenticating it: too many failed authentications from %s",
            address,
        )
        return False

    def failed(self, address: str) -> None:
        """A hello from ``address`` failed authentication."""
        now = self.clock()
        left = self._budget(address, now) - 1.0
        self._table.pop(address, None)
        self._table[address] = (max(left, 0.0), now)
        self.failures += 1
        self._failed_line("a hello failed authentication (from %s)", address)
        self._prune(now)

    def _prune(self, now: float) -> None:
        table = self._table
        # The least recent first: those refilled since are forgotten.
        for address, (left, at) in list(itertools.islice(table.items(), 2)):
            if left + (now - at) * self.rate >= self.burst:
                del table[address]
        while len(table) > self.max_addresses:
            del table[next(iter(table))]
