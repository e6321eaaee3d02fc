"""While Redis is down: what clients are told and what the log says (docs/deploy.md,
"When Redis is unreachable or restarts")."""

from __future__ import annotations

import logging

import pytest

from support import RawClient, start_server
from support.redis_servers import start_redis
from vrt.protocol.codec import Decoded
from vrt.server.auth import TokenAuthenticator
from vrt.server.redis_store import RedisSessionStore

TOKENS = (("alice", "alice-token"), ("bob", "bob-token"))


async def _resume_answer(url: str, session_id: str, auth: str) -> tuple[list[str], int | None]:
    """The messages and the close code a resume of ``session_id`` gets."""
    client = await RawClient.connect(url)
    try:
        await client.send_hello(sessionId=session_id, resumeFrom=0, auth=auth)
        code, _reason = await client.closed(5.0)
        seen = [type(item.message).__name__ for item in client.skipped if isinstance(item, Decoded)]
        return seen, code
    finally:
        await client.close()


async def test_a_foreign_resume_during_an_outage_looks_like_an_unknown_one() -> None:
    """§5.3: a session of another principal is indistinguishable from an unknown one. While
    the store cannot say whether a session exists, an unknown id gets close 1013 (resume
    again shortly); so must another principal's live session held in this process's
    memory, which used to get RESUME_FAILED and 4404 and so told that it exists. Its
    owner's resume is still served from memory."""
    with start_redis() as redis:
        running = await start_server(
            store=RedisSessionStore(redis.store_url("foreign"), timeout=0.5),
            authenticator=TokenAuthenticator(TOKENS),
        )
        owner = await RawClient.connect(running.url)
        try:
            ready = await owner.hello(auth="alice-token")
            redis.stop()
            foreign = await _resume_answer(running.url, ready.session_id, "bob-token")
            unknown = await _resume_answer(running.url, "s_" + "x" * 22, "bob-token")
            assert unknown == ([], 1013)
            assert foreign == unknown
            owner.abort()
            mine = await RawClient.connect(running.url)
            await mine.hello(
                sessionId=ready.session_id, resumeFrom=owner.last_seq, auth="alice-token"
            )
            await mine.close()
        finally:
            await owner.close()
            await running.close()


async def test_an_outage_logs_once_per_interval_however_many_clients(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """docs/operations.md: what a client can repeat at will is logged at most once per
    10 s. While Redis is down every new session and every resume elsewhere is refused:
    one warning line each per 10 s, not one per refusal."""
    with start_redis() as redis:
        running = await start_server(store=RedisSessionStore(redis.store_url("quiet"), timeout=0.3))
        caplog.set_level(logging.INFO, logger="vrt.server")
        try:
            redis.stop()
            for n in range(12):
                fresh = await RawClient.connect(running.url)
                await fresh.send_hello()
                assert (await fresh.closed(5.0))[0] == 1011
                await fresh.close()
                resumed = await RawClient.connect(running.url)
                await resumed.send_hello(sessionId=f"s_gone{n}", resumeFrom=0)
                assert (await resumed.closed(5.0))[0] == 1013
                await resumed.close()
            warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
            assert len(warnings) <= 3, [r.getMessage() for r in warnings]
        finally:
            await running.close()
