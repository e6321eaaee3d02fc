"""The client under test for ``vrt conformance client``, written with the Python SDK.

    vrt conformance client -- python -m vrt.conformance.reference_client

It implements the suite's contract (conformance/README.md, "Client suite") on
:class:`vrt.client.VrtClient` and ``@tool``, and adds nothing to the protocol: every
behaviour the suite judges (acks, pings, resume, dedupe, the epoch gate, one call at a
time, one result per call) comes from the SDK. It exists so that CI judges the SDK, and
as an example for a client in another language.

Environment (set by the suite):

- ``VRT_URL``: the server to connect to;
- ``VRT_CONFORMANCE_LOG``: a file to append one JSON line to when a tool starts
  (``{"callId", "name", "arguments"}``) and when it finishes
  (``{"event": "finished", "callId"}``);
- ``VRT_SAY``: lines to perform after the first ``ready`` (optional): each is sent as
  user text, except ``/interrupt`` (a client-initiated interrupt, §6.2), ``/audio MS``
  (MS milliseconds of input audio in ``ready.input``'s format) and ``/sleep MS``;
- ``VRT_CAPABILITIES``: capabilities to offer, comma separated (optional);
- ``VRT_AUTH``: the credential for ``hello.auth`` (optional);
- ``VRT_PING_INTERVAL``: the ping interval in seconds (optional; default 15).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from ..audio import frame_bytes, tone
from ..client import (
    AudioChunk,
    ClientTool,
    Disconnected,
    PlaybackStop,
    SessionClosed,
    SessionFailed,
    ToolContext,
    ToolError,
    VrtClient,
    VrtError,
    declared_tool,
    tool,
)
from ..protocol.messages import Format, Tool

__all__ = [
    "INPUT_PREFERENCE",
    "Player",
    "ReferenceClient",
    "Settings",
    "ToolLog",
    "conformance_tools",
    "main",
]

RECORD = "conformance.record"
SLOW = "conformance.slow"
FAIL = "conformance.fail"
#: The input format the client prefers (hello.input): not pcm16 at 24000 Hz, so that the
#: suite judges both its choice of that format and of the preferred one (§5.2, §8.2).
INPUT_PREFERENCE: Final = Format(encoding="pcm16", sample_rate=16000)
#: ``/audio MS`` and ``/sleep MS`` lines of VRT_SAY.
_TIMED_COMMAND: Final = re.compile(r"/(audio|sleep) (\d+)")


@dataclass(frozen=True)
class Settings:
    url: str
    log: Path | None
    say: tuple[str, ...]
    capabilities: tuple[str, ...]
    auth: str | None
    ping_interval: float

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Settings:
        url = env.get("VRT_URL")
        if not url:
            raise ValueError("VRT_URL is not set")
        log = env.get("VRT_CONFORMANCE_LOG")
        say = tuple(line for line in env.get("VRT_SAY", "").split("\n") if line)
        capabilities = tuple(
            c.strip() for c in env.get("VRT_CAPABILITIES", "").split(",") if c.strip()
        )
        return cls(
            url=url,
            log=Path(log) if log else None,
            say=say,
            capabilities=capabilities,
            auth=env.get("VRT_AUTH") or None,
            ping_interval=float(env.get("VRT_PING_INTERVAL") or 15.0),
        )


class ToolLog:
    """The ``VRT_CONFORMANCE_LOG`` file: one JSON line per tool start and finish."""

    def __init__(self, path: Path | None) -> None:
        self.path = path

    def _write(self, entry: dict[str, Any]) -> None:
        if self.path is None:
            return
        with self.path.open("a", encoding="utf-8") as file:
            file.write(json.dumps(entry, ensure_ascii=False) + "\n")

    def started(self, context: ToolContext, name: str, arguments: Any) -> None:
        self._write({"callId": context.call_id, "name": name, "arguments": arguments})

    def finished(self, context: ToolContext) -> None:
        self._write({"event": "finished", "callId": context.call_id})


def conformance_tools(log: ToolLog) -> list[ClientTool]:
    """The three tools of the contract."""

    async def record(conformance_context: ToolContext, **arguments: Any) -> Any:
        log.started(conformance_context, RECORD, arguments)
        try:
            return arguments
        finally:
            log.finished(conformance_context)

    async def slow(ms: int, context: ToolContext) -> dict[str, int]:
        """Sleep ``ms`` milliseconds; stops early when the call is cancelled."""
        log.started(context, SLOW, {"ms": ms})
        try:
            await asyncio.sleep(ms / 1000)
            return {"slept": ms}
        finally:
            log.finished(context)

    async def fail(conformance_context: ToolContext, **arguments: Any) -> Any:
        log.started(conformance_context, FAIL, arguments)
        try:
            raise ToolError("FAILED", "conformance.fail always fails")
        finally:
            log.finished(conformance_context)

    return [
        declared_tool(Tool(name=RECORD, description="Return the arguments."), record),
        tool(slow, name=SLOW),
        declared_tool(Tool(name=FAIL, description="Always fail."), fail),
    ]


class Player:
    """Output audio played in simulated real time: one queue, items in arrival order."""

    def __init__(self) -> None:
        self._busy_until = 0.0
        #: item id -> (start, seconds) of each chunk queued since the last stop
        self._chunks: dict[str, list[tuple[float, float]]] = {}

    def add(self, item_id: str, seconds: float, now: float) -> None:
        start = max(now, self._busy_until)
        self._busy_until = start + seconds
        self._chunks.setdefault(item_id, []).append((start, seconds))

    def stop(self, now: float) -> list[tuple[str, int]]:
        """Stop and discard what is buffered; the milliseconds played of each item."""
        played = [
            (item, int(sum(min(max(now - start, 0.0), length) for start, length in chunks) * 1000))
            for item, chunks in self._chunks.items()
        ]
        self._chunks.clear()
        self._busy_until = now
        return played


class ReferenceClient:
    """Runs sessions until the server closes with 1000 (or the process is killed)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.log = ToolLog(settings.log)
        self.player = Player()
        self.said = False
        self._script: asyncio.Task[None] | None = None

    def make_client(self) -> VrtClient:
        s = self.settings
        return VrtClient(
            s.url,
            tools=conformance_tools(self.log),
            auth=s.auth,
            capabilities=s.capabilities,
            input=INPUT_PREFERENCE,
            ping_interval=s.ping_interval,
        )

    async def open_session(self) -> VrtClient:
        client = self.make_client()
        await client.connect()
        if not self.said:  # VRT_SAY goes once, into the first session only
            self.said = True
            self._script = asyncio.get_running_loop().create_task(self.perform(client))
        return client

    async def perform(self, client: VrtClient) -> None:
        """The lines of VRT_SAY, in order, while the session's events are handled."""
        for line in self.settings.say:
            timed = _TIMED_COMMAND.fullmatch(line)
            if line == "/interrupt":
                await client.interrupt("user")
            elif timed is not None and timed.group(1) == "sleep":
                await asyncio.sleep(int(timed.group(2)) / 1000)
            elif timed is not None:
                self.send_audio(client, int(timed.group(2)))
            else:
                await client.send_text(line)

    @staticmethod
    def send_audio(client: VrtClient, ms: int) -> None:
        """``ms`` of a tone in the session's input format, as 20 ms frames at once."""
        fmt = client.core.input
        if fmt is None or fmt.encoding == "opus":
            print(f"reference client: cannot make {fmt} audio", file=sys.stderr)
            return
        payload = tone(ms, fmt)
        size = frame_bytes(fmt, 20)
        for offset in range(0, len(payload), size):
            client.send_audio(payload[offset : offset + size])

    async def run(self) -> int:
        while True:
            try:
                client = await self.open_session()
            except VrtError as exc:
                print(f"reference client: {exc}", file=sys.stderr)
                return 1
            outcome = await self.serve(client)
            if outcome == "done":
                return 0
            if outcome != "new-session":
                return 1
            print("reference client: RESUME_FAILED; opening a new session", file=sys.stderr)

    async def serve(self, client: VrtClient) -> str:
        """Handle the session's events; "done", "new-session" or "stopped"."""
        loop = asyncio.get_running_loop()
        failure: str | None = None
        async for event in client.events():
            if isinstance(event, AudioChunk):
                self.player.add(event.item_id, self._seconds(client, event.payload), loop.time())
            elif isinstance(event, PlaybackStop):
                for item_id, played in self.player.stop(loop.time()):
                    await client.playback(item_id, played)
            elif isinstance(event, SessionFailed):
                failure = event.code
            elif isinstance(event, Disconnected) and event.code == 1000:
                await client.close()
                return "done"
            elif isinstance(event, SessionClosed):
                break
        await client.close()
        return "new-session" if failure == "RESUME_FAILED" else "stopped"

    @staticmethod
    def _seconds(client: VrtClient, payload: bytes) -> float:
        fmt = client.core.output
        if fmt is None or fmt.encoding == "opus":
            return 0.02
        if fmt.encoding == "pcmu":
            return len(payload) / 8000
        return len(payload) / 2 / fmt.rate


def main() -> int:
    try:
        settings = Settings.from_env(os.environ)
    except ValueError as exc:
        print(f"reference client: {exc}", file=sys.stderr)
        return 2
    try:
        return asyncio.run(ReferenceClient(settings).run())
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
