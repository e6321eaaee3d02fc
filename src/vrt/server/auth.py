"""Authentication of ``hello.auth`` (§5.3): a callable that returns the principal.

Credentials travel only in ``hello.auth``, never in the URL (§2.1, §5.3), and are never
logged.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeAlias

__all__ = ["Authenticator", "TokenAuthenticator", "parse_token_spec"]

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
