"""Test support: a raw vRT WebSocket client and a harness for a live server.

:func:`start_server` runs a :class:`~vrt.server.app.VrtServer` with the scripted agent
on 127.0.0.1, port 0, in the running event loop; :class:`GateAuthenticator` holds a
``hello`` in the "opening" state of §5.1 until the test releases it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypeVar

from vrt.agents.base import AgentFactory, SessionInfo
from vrt.agents.scripted import ScriptedAgent
from vrt.audio import frame_bytes, silence, tone
from vrt.protocol.codec import Decoded
from vrt.protocol.frames import AudioFrame, FrameKind, build_frame
from vrt.protocol.messages import (
    PCM16_24K,
    AgentText,
    Format,
    Message,
    Ready,
    ServerMessage,
    TurnState,
)
from vrt.protocol.server import ServerConfig, ServerSession
from vrt.server.app import VrtServer
from vrt.server.auth import Authenticator

from .raw_client import Frame, Item, Kind, NoFrame, RawClient, ServerClosed, matches, type_name

M = TypeVar("M", bound=Message)

__all__ = [
    "Connect",
    "Frame",
    "GateAuthenticator",
    "Item",
    "Kind",
    "NoFrame",
    "OpenSession",
    "RawClient",
    "RunningServer",
    "ServerClosed",
    "StartServer",
    "audio",
    "chunks",
    "eventually",
    "input_audio",
    "is_idle",
    "is_state",
    "matches",
    "messages",
    "of_type",
    "speech",
    "start_server",
    "type_name",
]


@dataclass(slots=True)
class RunningServer:
    """A started server, its URL and the scripted agents it built, in creation order."""

    server: VrtServer
    url: str
    agents: list[ScriptedAgent] = field(default_factory=list)

    def session(self, session_id: str) -> ServerSession:
        """The live session ``session_id`` (fails the test when there is none)."""
        session = self.server.session(session_id)
        assert session is not None, f"no live session {session_id}"
        return session

    async def close(self) -> None:
        await self.server.close()


async def start_server(
    *,
    agent_factory: AgentFactory | None = None,
    authenticator: Authenticator | None = None,
    config: ServerConfig | None = None,
    resume_window: float = 30.0,
    **options: Any,
) -> RunningServer:
    """Start a server on 127.0.0.1, port 0. Without ``agent_factory`` it runs the
    scripted agent and records each agent in :attr:`RunningServer.agents`."""
    agents: list[ScriptedAgent] = []

    def scripted(info: SessionInfo) -> ScriptedAgent:
        del info
        agent = ScriptedAgent()
        agents.append(agent)
        return agent

    server = VrtServer(
        agent_factory or scripted,
        authenticator=authenticator,
        config=replace(config or ServerConfig(), resume_window=resume_window),
        **options,
    )
    url = await server.start("127.0.0.1", 0)
    return RunningServer(server, url, agents)


class GateAuthenticator:
    """An authenticator that holds every ``hello`` until :meth:`open` (the connection
    stays "opening", §5.1). ``auth`` equal to ``"refuse"`` is refused; any other value
    (or none) is the principal ``"user"``."""

    def __init__(self) -> None:
        self.called = asyncio.Event()
        self.released = asyncio.Event()
        self.calls = 0

    async def __call__(self, auth: Any) -> str | None:
        self.calls += 1
        self.called.set()
        await self.released.wait()
        return None if auth == "refuse" else "user"

    async def wait_called(self, timeout: float = 2.0) -> None:
        """Until the server has received a ``hello`` and asked for authentication."""
        await asyncio.wait_for(self.called.wait(), timeout)

    def open(self) -> None:
        """Let every held and later ``hello`` through."""
        self.released.set()

    def hold(self) -> None:
        """Hold the next ``hello`` again."""
        self.called.clear()
        self.released.clear()


# -- small helpers --


async def eventually(
    condition: Callable[[], bool], timeout: float = 2.0, what: str = "the condition"
) -> None:
    """Poll ``condition`` (every few ms) until it holds; fail after ``timeout``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        if loop.time() >= deadline:
            raise AssertionError(f"{what} did not hold within {timeout} s")
        await asyncio.sleep(0.005)


def messages(items: Sequence[Item]) -> list[ServerMessage]:
    """The control messages among ``items`` (audio frames left out)."""
    return [item.message for item in items if isinstance(item, Decoded)]


def of_type(items: Sequence[Item], cls: type[M]) -> list[M]:
    """The messages of class ``cls`` among ``items``, in order."""
    return [m for m in messages(items) if isinstance(m, cls)]


def audio(items: Sequence[Item]) -> list[AudioFrame]:
    """The audio frames among ``items``, in order."""
    return [item for item in items if isinstance(item, AudioFrame)]


def chunks(items: Sequence[Item]) -> list[str]:
    """The agent ``text`` chunks among ``items``."""
    return [m.text for m in messages(items) if isinstance(m, AgentText)]


def is_state(item: Item, state: str) -> bool:
    """Whether ``item`` is ``turn.state`` ``state``."""
    return (
        isinstance(item, Decoded)
        and isinstance(item.message, TurnState)
        and item.message.state == state
    )


def is_idle(item: Item) -> bool:
    return is_state(item, "idle")


def input_audio(payload: bytes, *, fmt: Format = PCM16_24K, first_seq: int = 0) -> list[bytes]:
    """``payload`` as 20 ms input audio frames (kind 1, §8.1) with seqs from ``first_seq``."""
    size = frame_bytes(fmt, 20)
    return [
        build_frame(FrameKind.INPUT, first_seq + n, payload[i : i + size])
        for n, i in enumerate(range(0, len(payload), size))
    ]


def speech(loud_ms: int, quiet_ms: int = 400, *, fmt: Format = PCM16_24K) -> list[bytes]:
    """Input audio frames: ``loud_ms`` of tone (speech for the scripted agent's VAD), then
    ``quiet_ms`` of silence (enough to end it)."""
    return input_audio(tone(loud_ms, fmt) + silence(quiet_ms, fmt), fmt=fmt)


# -- the types of the fixtures in tests/server/conftest.py --


class StartServer(Protocol):
    """``await start(**options)``: :func:`start_server`, closed after the test."""

    def __call__(self, **options: Any) -> Awaitable[RunningServer]: ...


class Connect(Protocol):
    """``await connect(url)``: a :class:`RawClient`, closed after the test."""

    def __call__(self, url: str, *, auto_ack: bool = False) -> Awaitable[RawClient]: ...


class OpenSession(Protocol):
    """``await open_session(url, **hello)``: a client and the ``ready`` of its hello."""

    def __call__(
        self, url: str, *, auto_ack: bool = False, **hello: Any
    ) -> Awaitable[tuple[RawClient, Ready]]: ...
