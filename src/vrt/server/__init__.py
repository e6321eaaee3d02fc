"""The asyncio vRT server around the sans-I/O core (``vrt.protocol.server``)."""

from ..protocol.server import ServerConfig
from .app import VrtServer
from .auth import Authenticator, TokenAuthenticator, parse_token_spec
from .store import MemorySessionStore, SessionStore

__all__ = [
    "Authenticator",
    "MemorySessionStore",
    "ServerConfig",
    "SessionStore",
    "TokenAuthenticator",
    "VrtServer",
    "parse_token_spec",
]
