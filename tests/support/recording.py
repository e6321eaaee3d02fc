"""An agent for tests that watch the server side: the scripted agent, keeping every
input the server delivered to it."""

from __future__ import annotations

from vrt.agents import AgentInput, ToolSettled, UserTextReceived
from vrt.agents.base import AgentSession
from vrt.agents.scripted import ScriptedAgent

__all__ = ["RecordingAgent"]


class RecordingAgent(ScriptedAgent):
    """The scripted agent, also recording every input the server delivered to it."""

    def __init__(self) -> None:
        super().__init__()
        self.inputs: list[AgentInput] = []
        self.session_id: str | None = None

    async def run(self, session: AgentSession) -> None:
        self.session_id = session.session_id
        await super().run(session)

    def handle(self, session: AgentSession, event: AgentInput) -> None:
        self.inputs.append(event)
        super().handle(session, event)

    @property
    def settled(self) -> list[ToolSettled]:
        """Client tool calls as the server settled them (the client's result, TIMEOUT or
        INTERRUPTED), in order."""
        return [e for e in self.inputs if isinstance(e, ToolSettled)]

    @property
    def texts(self) -> list[str]:
        return [e.text for e in self.inputs if isinstance(e, UserTextReceived)]
