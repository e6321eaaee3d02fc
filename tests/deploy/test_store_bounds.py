"""What Redis holds of a session is bounded by bytes, key by key, across an outage too
(docs/deploy.md, "Sizing"; docs/limits.md)."""

from __future__ import annotations

import asyncio

from conftest import StoreView
from support import RawClient, eventually, is_idle, start_server
from support.redis_servers import RedisServer, start_redis
from vrt.agents.history import AgentSaid, UserSaid
from vrt.protocol.server import ServerConfig
from vrt.server.journal import encode_entry
from vrt.server.redis_store import STREAM_ENTRY_BYTES, RedisSessionStore

MB = 1_000_000


def _usage(redis: RedisServer, prefix: str, session_id: str) -> dict[str, int]:
    base = f"{prefix}:{{{session_id}}}"
    return {
        key: int(redis.command("memory", "usage", key, "samples", "0") or 0)
        for key in (base, base + ":out", base + ":log")
    }


async def test_a_session_in_redis_takes_at_most_its_documented_bounds(
    redis_server: RedisServer,
) -> None:
    """A 1 MB context and eight unacknowledged 1 MB texts: the hash holds the context
    (max_state_bytes), the stream the kept window (max_unacked_bytes, not whole writes
    behind it), the log its cap (max_log_bytes, not the newest write whole): 7.8 MB
    before, against the ~3.3 MiB docs/deploy.md states."""
    config = ServerConfig()
    store = RedisSessionStore(redis_server.store_url("sizes"))
    running = await start_server(store=store, config=config)
    client = await RawClient.connect(running.url)  # never acknowledges
    try:
        ready = await client.hello(context={"blob": "c" * MB})
        for n in range(8):
            await client.text("echo " + chr(97 + n) * (MB - 100))
            await client.until(is_idle, 10.0)
        await asyncio.sleep(0.3)
        usage = _usage(redis_server, "sizes", ready.session_id)
        meta, out, log = usage.values()
        overhead = 16 << 10  # Redis's own per key
        assert meta <= config.max_state_bytes + overhead, usage
        assert out <= config.max_unacked_bytes + STREAM_ENTRY_BYTES + overhead, usage
        assert log <= store.max_log_bytes + overhead, usage
    finally:
        await client.close()
        await running.close()


def test_an_entry_larger_than_the_whole_log_is_shortened() -> None:
    most = 2048
    for entry in (UserSaid(text="x" * 100_000), AgentSaid(turn_id="t_1", text="é" * 50_000)):
        data = encode_entry(entry, most)
        assert data is not None
        assert len(data) <= most
    assert encode_entry(UserSaid(text="short"), most) is not None


async def test_the_log_cap_holds_for_a_single_large_write(redis_server: RedisServer) -> None:
    """The newest write is no longer kept whole however large: a 200 KB text with a
    2 KiB cap leaves at most 2 KiB, the text shortened with a note."""
    view = StoreView(redis_server.url, "onebig")
    store = RedisSessionStore(redis_server.store_url("onebig") + "&max_log_bytes=2048")
    running = await start_server(store=store)
    client = await RawClient.connect(running.url, auto_ack=True)
    try:
        ready = await client.hello()
        await client.text("echo " + "y" * 200_000)
        await client.until(is_idle, 10.0)
        await asyncio.sleep(0.2)
        assert int(view.meta(ready.session_id)["logbytes"]) <= 2048
        history = view.history(ready.session_id)
        assert history
        assert "not kept" in getattr(history[-1], "text", "")
    finally:
        await client.close()
        await running.close()


async def test_an_outage_coalesces_the_log_instead_of_accumulating_it() -> None:
    """While Redis is down the journal holds what the log would keep, not everything
    said meanwhile (298 MB for a worker before, each session's log then written as
    200 times max_log_bytes); once Redis is back the rewrite is within the cap too,
    and has the newest of the conversation."""
    cap = 4096
    with start_redis() as redis:
        view = StoreView(redis.url, "outage")
        store = RedisSessionStore(redis.store_url("outage") + f"&max_log_bytes={cap}", timeout=0.3)
        running = await start_server(store=store)
        client = await RawClient.connect(running.url, auto_ack=True)
        try:
            ready = await client.hello()
            redis.stop()
            for n in range(40):
                await client.text(f"echo {n:02d}" + "z" * 10_000)
                await client.until(is_idle, 5.0)
            hosted = running.server.sessions.get(ready.session_id)
            assert hosted is not None
            assert hosted.journal is not None
            assert hosted.journal._log_bytes <= cap
            redis.start()  # empty: the journal writes the session whole again
            await eventually(lambda: bool(view.history(ready.session_id)), 10.0, "the rewrite")
            assert int(view.meta(ready.session_id)["logbytes"]) <= cap
            newest = getattr(view.history(ready.session_id)[-1], "text", "")
            assert newest.startswith("39z"), newest[:40]  # the last reply, shortened
        finally:
            await client.close()
            await running.close()
