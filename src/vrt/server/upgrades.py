"""Which WebSocket upgrade requests the server accepts.

Refused before any vRT message: a WebSocket version other than 13 (426, RFC 6455
§4.4), and a page whose origin the server does not allow (403, against cross-site
WebSocket hijacking; ``origins.OriginPolicy``). A credential put in the URL is never
honoured (§5.3: it goes in ``hello.auth``), only warned about.
"""

from __future__ import annotations

import logging
from urllib.parse import parse_qsl, urlsplit

from picows import WSUpgradeRequest, WSUpgradeResponse, WSUpgradeResponseWithListener

from ..logs import Throttled
from .origins import OriginPolicy
from .telemetry import ServerObserver

__all__ = ["UpgradeChecks"]

log = logging.getLogger("vrt.server")

#: Query parameters that look like credentials; never honoured (§5.3), always warned about.
_CREDENTIAL_PARAMS = frozenset({"token", "auth", "access_token", "key", "api_key", "apikey"})


class UpgradeChecks:
    """The checks of an upgrade request, and their throttled warnings."""

    def __init__(self, origins: OriginPolicy, observer: ServerObserver | None) -> None:
        self.origins = origins
        self.observer = observer
        self._refused_origin = Throttled(log, logging.WARNING)
        self._credential_in_url = Throttled(log, logging.WARNING)

    def refusal(self, request: WSUpgradeRequest) -> WSUpgradeResponseWithListener | None:
        """The HTTP answer refusing ``request``, or None to accept it."""
        version = request.headers.get("Sec-WebSocket-Version")
        if version != "13":
            # RFC 6455 §4.4: a version the server does not speak gets 426 and the ones
            # it does.
            if self.observer is not None:
                self.observer.upgrade_refused("version")
            return WSUpgradeResponseWithListener(
                WSUpgradeResponse.create_error_response(
                    426,
                    b"this server speaks WebSocket version 13",
                    {"Sec-WebSocket-Version": "13"},
                ),
                None,
            )
        origin = request.headers.get("Origin")
        if not self.origins.allows(origin):
            self._refused_origin("refused a WebSocket from a page of origin %r", origin)
            if self.observer is not None:
                self.observer.upgrade_refused("origin")
            return WSUpgradeResponseWithListener(
                WSUpgradeResponse.create_error_response(403, b"origin not allowed"), None
            )
        query = urlsplit(request.path.decode("latin-1", "replace")).query
        if any(name.lower() in _CREDENTIAL_PARAMS for name, _ in parse_qsl(query)):
            self._credential_in_url(
                "a client put a credential in the URL; it is ignored: send it in hello.auth (§5.3)"
            )
        return None
