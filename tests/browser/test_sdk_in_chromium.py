"""The browser SDK in Chromium against a scripted server of the test's own (a bare
WebSocket server, not vrt's), which sends what a conforming client must cope with: a
resume whose ``ready.resumedFrom`` is beyond what the client sent, a ``ready`` for
another session, and a tool call whose arguments do not match the tool's parameters.

The page (the SDK from the demo bundle, ``driver.mjs`` scenario ``sdk``) records the
events its client reports, from listeners and from ``events()``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from websockets.asyncio.server import ServerConnection, serve

from support.browser import run_scenario
from vrt.demo import demo_files, start_page_server

Script = Callable[[ServerConnection, int], Awaitable[None]]


def ready(session_id: str, **extra: Any) -> str:
    return json.dumps(
        {
            "v": 1,
            "seq": 0,
            "type": "ready",
            "sessionId": session_id,
            "input": {"encoding": "pcm16"},
            "output": {"encoding": "pcm16"},
            **extra,
        }
    )


async def hello(ws: ServerConnection) -> dict[str, Any]:
    """The client's hello (pings before it are skipped)."""
    while True:
        message = json.loads(await ws.recv())
        if message["type"] == "hello":
            return dict(message)


@asynccontextmanager
async def scripted(script: Script) -> AsyncIterator[str]:
    """A WebSocket server on loopback that runs ``script`` for its n-th connection (from 1)."""
    count = 0

    async def handler(ws: ServerConnection) -> None:
        nonlocal count
        count += 1
        await script(ws, count)

    async with serve(handler, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        yield f"ws://127.0.0.1:{port}/"


async def run(url: str, **options: Any) -> dict[str, Any]:
    httpd, page = start_page_server(demo_files(), "127.0.0.1", 0, url)
    try:
        return await run_scenario("sdk", timeout=60, page=page, url=url, **options)
    finally:
        httpd.shutdown()
        httpd.server_close()


def kinds(events: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    return [(e["type"], e.get("code", e.get("reason"))) for e in events]


async def first_connection_then_resume(ws: ServerConnection, n: int, resumed: str) -> None:
    """The first connection opens s-1 and is dropped; the resume is answered ``resumed``."""
    message = await hello(ws)
    if n == 1:
        await ws.send(ready("s-1"))
        await asyncio.sleep(0.2)
        await ws.close(1011, "dropped by the test")
        return
    assert message.get("sessionId") == "s-1", message
    await ws.send(resumed)
    await ws.wait_closed()


async def test_a_resume_beyond_what_was_sent_ends_with_session_failed_then_closed() -> None:
    """§5.4: resumedFrom beyond the client's last seq fails the resume; the application
    sees sessionFailed RESUME_FAILED, then closed, last, from events() as from listeners."""

    async def script(ws: ServerConnection, n: int) -> None:
        await first_connection_then_resume(ws, n, ready("s-1", resumedFrom=9))

    async with scripted(script) as url:
        result = await run(url)
    for events in (result["dispatched"], result["iterated"]):
        assert kinds(events)[-2:] == [
            ("sessionFailed", "RESUME_FAILED"),
            ("closed", "the session failed"),
        ], events


async def test_a_ready_for_another_session_closes_the_connection_at_once() -> None:
    """§5.4: a ready that does not match the session resumed fails the resume and the
    client closes the connection then, not when its open timeout (10 s) runs out."""
    closed_after: list[float] = []

    async def script(ws: ServerConnection, n: int) -> None:
        if n == 1:
            await first_connection_then_resume(ws, n, "")
            return
        await hello(ws)
        await ws.send(ready("s-other", resumedFrom=0))
        sent = time.monotonic()
        try:
            await asyncio.wait_for(ws.wait_closed(), 5)
        except TimeoutError:
            return
        closed_after.append(time.monotonic() - sent)

    async with scripted(script) as url:
        result = await run(url)
    assert closed_after, f"the client left the connection open: {result}"
    assert closed_after[0] < 2.0, f"closed only after {closed_after[0]:.1f} s: {result}"
    assert kinds(result["iterated"])[-2:] == [
        ("sessionFailed", "RESUME_FAILED"),
        ("closed", "the session failed"),
    ]


async def test_a_call_answered_invalid_is_not_reported_as_starting() -> None:
    """§7.1: a call whose arguments do not match the tool's parameters is answered
    INVALID and never runs, so the application gets its toolResult but no toolCall."""
    results: list[dict[str, Any]] = []

    async def script(ws: ServerConnection, n: int) -> None:
        await hello(ws)
        await ws.send(ready("s-1"))
        for seq, (call_id, arguments) in enumerate(
            [("bad", {"n": "one"}), ("good", {"n": 1})], start=1
        ):
            call = {"callId": call_id, "name": "strict", "arguments": arguments}
            turn = {"turnId": "t1", "epoch": 1}
            await ws.send(json.dumps({"v": 1, "seq": seq, "type": "tool.call", **call, **turn}))
        async for raw in ws:
            message = json.loads(raw)
            if message["type"] == "tool.result":
                results.append(message)

    async with scripted(script) as url:
        result = await run(url, results=2)
    assert [(r["callId"], r["ok"], r.get("code")) for r in results] == [
        ("bad", False, "INVALID"),
        ("good", True, None),
    ]
    for events in (result["dispatched"], result["iterated"]):
        assert [e["callId"] for e in events if e["type"] == "toolCall"] == ["good"], events
        assert [e["callId"] for e in events if e["type"] == "toolResult"] == ["bad", "good"]
