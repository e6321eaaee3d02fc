"""Which web pages may open a WebSocket to the server: the ``Origin`` check.

A browser lets any page it shows open a WebSocket to any address, the user's own
machine included, and says which page did in the ``Origin`` header (RFC 6455 §10.2,
RFC 6454). Without a check, a site the user visits could drive a local ``vrt serve``
and, with a model behind it, spend the user's API key (cross-site WebSocket
hijacking). So, as Jupyter does, the server accepts by default only pages served from
a loopback address or from the host it listens on, and with ``--allowed-origin`` only
the origins listed. A client that sends no ``Origin`` is not a browser, and this check
does not concern it (authentication does, §5.3).

Origins are compared in their ASCII serialisation (RFC 6454 §6.2): lowercase scheme and
host, the scheme's default port left out, no trailing slash. A listed value that no
browser could ever send (a path, a ``ws://`` scheme, a pattern) is reported when the
policy is built, so that a typo does not silently lock every page out.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

__all__ = ["ANY_ORIGIN", "OriginPolicy", "normalise_origin"]

#: ``--allowed-origin '*'``: every page may connect (for a server behind its own gate).
ANY_ORIGIN: Final = "*"

_DEFAULT_PORTS: Final = {"http": 80, "https": 443, "ws": 80, "wss": 443}
_PAGE_SCHEMES: Final = frozenset({"http", "https"})
_WILDCARD_HOSTS: Final = frozenset({"", "0.0.0.0", "::"})


def _host(raw: str) -> str | None:
    """A URL host in the form an ``Origin`` carries it: lowercase, IDNA-encoded names,
    IPv6 addresses in brackets; None when it is not a host."""
    if not raw:
        return None
    if raw.startswith("["):
        try:
            return f"[{ipaddress.IPv6Address(raw[1:-1]).compressed}]"
        except ValueError:
            return None
    if not raw.isascii():
        try:
            raw = raw.encode("idna").decode("ascii")
        except UnicodeError:
            return None
    return raw.lower()


def normalise_origin(value: str) -> str | None:
    """``value`` as a browser would send it in ``Origin`` (``scheme://host[:port]``), or
    None when it cannot be one: no scheme or host, or a path, query, fragment or user
    name, which an origin never has. ``null`` stays ``null``."""
    value = value.strip()
    if value == "null":
        return value
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError:
        return None
    if (
        not parts.scheme
        or parts.path not in ("", "/")
        or parts.query
        or parts.fragment
        or "@" in parts.netloc
        or value.endswith(("?", "#"))
    ):
        return None
    netloc = parts.netloc
    raw_host = netloc[: netloc.index("]") + 1] if netloc.startswith("[") else netloc.split(":")[0]
    host = _host(raw_host)
    if host is None:
        return None
    scheme = parts.scheme.lower()
    if port is None or port == _DEFAULT_PORTS.get(scheme):
        return f"{scheme}://{host}"
    return f"{scheme}://{host}:{port}"


def _is_loopback(host: str) -> bool:
    """``localhost`` and its subdomains (RFC 6761 §6.3), 127.0.0.0/8 and ::1."""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _never_matches(value: str) -> str | None:
    """Why a listed value can never equal a browser's ``Origin``, if it cannot."""
    if value == ANY_ORIGIN:
        return None
    if "*" in value:
        return "patterns are not supported: list each origin"
    normal = normalise_origin(value)
    if normal is None:
        parts = urlsplit(value if "://" in value else f"https://{value}")
        guess = f"{parts.scheme}://{parts.netloc}" if parts.netloc else None
        hint = f"; did you mean {guess}?" if guess and guess != value else ""
        return "an Origin is scheme://host[:port], with no path, query or user name" + hint
    scheme = normal.split("://")[0]
    if normal != "null" and scheme not in _PAGE_SCHEMES:
        if scheme in ("ws", "wss"):
            page = "https" if scheme == "wss" else "http"
            suggestion = page + normal[len(scheme) :]
            return f"a page's origin is http(s), never {scheme}; did you mean {suggestion}?"
        if "-extension" not in scheme:  # browser extensions send their own schemes
            return f"browsers send origins of web pages (http, https), not {scheme}"
    return None


@dataclass(frozen=True, slots=True)
class OriginPolicy:
    """Decides whether a browser page's WebSocket upgrade is accepted.

    Build it with :meth:`build`; :meth:`listening_on` adds the host the server listens
    on to the hosts whose pages are accepted by default.
    """

    #: The origins listed (normalised), or None for the default policy.
    allowed: frozenset[str] | None = None
    #: Hosts of this server, whose pages the default policy accepts (any port).
    own_hosts: frozenset[str] = frozenset()
    #: The listed values that can never match, each with the reason.
    problems: tuple[tuple[str, str], ...] = ()

    @classmethod
    def build(cls, allowed: Iterable[str] | None = None) -> OriginPolicy:
        """The default policy without ``allowed``; else exactly the origins listed
        (``*`` for any)."""
        if allowed is None:
            return cls()
        values = [value.strip() for value in allowed]
        problems = tuple(
            (value, why) for value in values if (why := _never_matches(value)) is not None
        )
        listed = {normal for value in values if (normal := normalise_origin(value))}
        listed.update(value for value in values if value == ANY_ORIGIN)
        return cls(allowed=frozenset(listed), problems=problems)

    def listening_on(self, host: str) -> OriginPolicy:
        """The policy of a server listening on ``host``: its pages are its own. On every
        interface (``0.0.0.0``, ``::``) that is the machine's name."""
        if host.strip("[]") in _WILDCARD_HOSTS:
            own = socket.gethostname()
        else:
            own = host.strip("[]")
            if ":" in own:
                own = f"[{own}]"
        name = _host(own)
        hosts = self.own_hosts if name is None or _is_loopback(name) else {*self.own_hosts, name}
        return OriginPolicy(self.allowed, frozenset(hosts), self.problems)

    @property
    def any_origin(self) -> bool:
        return self.allowed is not None and ANY_ORIGIN in self.allowed

    def allows(self, origin: str | None) -> bool:
        """Whether an upgrade with this ``Origin`` header (None: none sent) is accepted."""
        if origin is None:
            return True
        allowed = self.allowed
        if allowed is not None:
            if origin in allowed or ANY_ORIGIN in allowed:
                return True
            return normalise_origin(origin) in allowed
        normal = normalise_origin(origin)
        if normal is None or normal == "null":
            return False
        scheme, _, rest = normal.partition("://")
        if scheme not in _PAGE_SCHEMES:
            return False
        host = rest[: rest.index("]") + 1] if rest.startswith("[") else rest.split(":")[0]
        return _is_loopback(host) or host in self.own_hosts

    def describe(self) -> str:
        """One line for the startup banner and the logs."""
        if self.allowed is None:
            own = "".join(f", {host}" for host in sorted(self.own_hosts))
            return (
                f"browser pages from loopback (localhost, 127.0.0.0/8, [::1]{own}) may connect; "
                "pages from any other origin get HTTP 403 (allow a site with --allowed-origin)"
            )
        if self.any_origin:
            return "browser pages from any origin may connect (--allowed-origin '*')"
        listed = ", ".join(sorted(self.allowed)) or "none"
        return f"browser pages may connect only from {listed}; others get HTTP 403"

    def warnings(self) -> list[str]:
        """What the operator should hear about at startup."""
        lines = [
            f"--allowed-origin {value!r} can never match: {why}" for value, why in self.problems
        ]
        if self.any_origin:
            lines.append(
                "--allowed-origin '*': any web site a user visits can open sessions on this "
                "server; keep it behind authentication"
            )
        if self.allowed is not None and "null" in self.allowed:
            lines.append(
                "--allowed-origin null accepts every sandboxed frame and local file, of any site"
            )
        return lines
