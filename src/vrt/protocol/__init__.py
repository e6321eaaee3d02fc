"""The sans-I/O vRT protocol core: bytes and messages in, events and messages out.

Nothing here performs I/O, starts a task or reads a clock: time is an argument.
"""

# The messages, the outputs and both roles' events are exported whole: each module's
# __all__ lists them, once.
from . import messages, outputs
from .client import ClientSession
from .client import events as _client_events
from .client.events import *  # noqa: F403
from .codec import (
    DEFAULT_LIMITS,
    Decoded,
    Decoder,
    Invalid,
    Limits,
    check_encoding,
    decode_client,
    decode_server,
    encode,
)
from .errors import ErrorCode, LocalProtocolError
from .formats import choose_format, duration_ms
from .frames import AudioFrame, FrameKind, build_frame, parse_frame
from .messages import *  # noqa: F403
from .outputs import *  # noqa: F403
from .server import ServerConfig, ServerConnection, ServerSession
from .server import events as _server_events
from .server.events import *  # noqa: F403
from .tables import (
    CLIENT_TABLE,
    SERVER_TABLE,
    SESSION_TABLE,
    TOOL_STREAM_NEXT,
    TOOL_STREAM_TERMINAL,
    ClientState,
    ServerState,
    SessionState,
)

__all__ = [
    "CLIENT_TABLE",
    "DEFAULT_LIMITS",
    "SERVER_TABLE",
    "SESSION_TABLE",
    "TOOL_STREAM_NEXT",
    "TOOL_STREAM_TERMINAL",
    "AudioFrame",
    "ClientSession",
    "ClientState",
    "Decoded",
    "Decoder",
    "ErrorCode",
    "FrameKind",
    "Invalid",
    "Limits",
    "LocalProtocolError",
    "ServerConfig",
    "ServerConnection",
    "ServerSession",
    "ServerState",
    "SessionState",
    "build_frame",
    "check_encoding",
    "choose_format",
    "decode_client",
    "decode_server",
    "duration_ms",
    "encode",
    "parse_frame",
]
__all__ += messages.__all__
__all__ += outputs.__all__
__all__ += _client_events.__all__
__all__ += _server_events.__all__
