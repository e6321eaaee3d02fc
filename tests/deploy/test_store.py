"""The Redis session store inside one test process: two servers sharing a Redis of the
test's own, so that the moment between the store write and the socket write can be
caught, and Redis stopped, restarted and inspected (docs/deploy.md)."""

from __future__ import annotations

import asyncio
import gc
import json
import weakref
from collections.abc import AsyncIterator
from typing import Any

import pytest

from conftest import StoreView
from support import RawClient, RunningServer, chunks, eventually, is_idle, start_server
from support.redis_servers import RedisServer, start_redis
from vrt.protocol.codec import Decoded, decode_server
from vrt.protocol.messages import Error, ToolCall
from vrt.protocol.outputs import Output, SendText
from vrt.protocol.server import ServerConfig
from vrt.server.metrics import ServerMetrics
from vrt.server.redis_store import RedisSessionStore
from vrt.server.telemetry import Telemetry
from vrt.server.websocket import ServerWebSocket


@pytest.fixture
async def pair(redis_server: RedisServer) -> AsyncIterator[tuple[RunningServer, RunningServer]]:
    """Two servers (two workers) sharing the run's Redis, keys of their own."""
    url = redis_server.store_url("pair")
    a = await start_server(store=RedisSessionStore(url))
    b = await start_server(store=RedisSessionStore(url))
    yield a, b
    await a.close()
    await b.close()


async def reply(client: RawClient, text: str) -> str:
    await client.text(text)
    return "".join(chunks(await client.until(is_idle, 3.0)))


async def resume(url: str, old: RawClient, session_id: str) -> RawClient:
    client = await RawClient.connect(url)
    client.next_seq = old.next_seq
    await client.hello(sessionId=session_id, resumeFrom=old.last_seq)
    return client


def _seqs(outbox: list[Output]) -> list[int]:
    seqs = []
    for item in outbox:
        if type(item) is SendText:
            decoded = decode_server(item.data)
            if isinstance(decoded, Decoded) and decoded.seq:
                seqs.append(decoded.seq)
    return seqs


async def test_what_reaches_the_socket_is_in_the_store_first(
    pair: tuple[RunningServer, RunningServer], redis_server: RedisServer
) -> None:
    """Write-ahead: whenever sequenced messages are handed to the socket, the store
    already holds them. The owner then dies at exactly that point (its socket write
    never happens): the client resumes on the other process and gets them once. The
    owner's write started with the turn's first reply, so what the rest of its step made
    was neither stored nor sent: the other process resends what was stored, each message
    once, in order, and ends the turn."""
    a, b = pair
    view = StoreView(redis_server.url, "pair")
    client = await RawClient.connect(a.url)
    ready = await client.hello()
    session_id = ready.session_id
    assert await reply(client, "echo warm") == "warm"
    caught: list[int] = []
    original = ServerWebSocket.write_items

    def write_items(connection: ServerWebSocket, outbox: list[Output]) -> None:
        seqs = _seqs(outbox)
        if connection.loop is not asyncio.get_running_loop() or not seqs or caught:
            original(connection, outbox)
            return
        # The store has every message of this write already (the test's own reading).
        assert max(view.kept(session_id) or [0]) >= max(seqs)
        assert view.state(session_id).out_last_seq >= max(seqs)
        caught.extend(seqs)
        # The process dies here: the socket write never happens, nothing more is stored.
        hosted = a.server.sessions.get(session_id)
        assert hosted is not None
        assert hosted.journal is not None
        hosted.journal.lost = True
        connection._abort()

    try:
        setattr(ServerWebSocket, "write_items", write_items)  # noqa: B010 - the probe
        await client.text("burst 5")
        await eventually(lambda: bool(caught), 3.0)
    finally:
        setattr(ServerWebSocket, "write_items", original)  # noqa: B010
    assert not any(seq in client.raw for seq in caught), "the socket write happened"
    resumed = await resume(b.url, client, session_id)
    try:
        items = await resumed.until(is_idle, 3.0)
        text = "".join(chunks(items))
        assert text.startswith("chunk 1"), text
        assert "chunk 1 chunk 2 chunk 3 chunk 4 chunk 5".startswith(text), text
        assert sorted(resumed.raw) == list(range(client.last_seq + 1, resumed.last_seq + 1))
        assert set(caught) <= set(resumed.raw)
        assert json.loads(await reply(resumed, "history?")) == ["echo warm", "burst 5"]
    finally:
        await resumed.close()
        await client.close()


async def test_redis_unreachable_then_back(redis_server: RedisServer) -> None:
    """New sessions are refused with START_FAILED while Redis is down; an existing
    connection goes on from memory; once Redis is back (empty, as after a restart
    without persistence) the session is written whole again and resumes on another
    process with no message lost or repeated."""
    with start_redis() as redis:
        url = redis.store_url("down")
        config = ServerConfig()
        a = await start_server(store=RedisSessionStore(url, timeout=0.5), config=config)
        b = await start_server(store=RedisSessionStore(url, timeout=0.5), config=config)
        view = StoreView(redis.url, "down")
        client = await RawClient.connect(a.url)
        try:
            ready = await client.hello()
            assert await reply(client, "echo up") == "up"
            redis.stop()
            assert await reply(client, "echo down") == "down"  # from memory
            refused = await RawClient.connect(a.url)
            await refused.send_hello()
            error = await refused.expect_message(Error, 3.0)
            assert error.code == "START_FAILED"
            assert (await refused.closed(3.0))[0] == 1011
            await refused.close()
            redis.start()  # empty: everything it held is gone
            assert await reply(client, "echo back") == "back"
            await eventually(lambda: _has(view, ready.session_id), 5.0, "the session rewritten")
            await eventually(
                lambda: view.state(ready.session_id).out_last_seq == client.last_seq, 5.0
            )
            client.abort()
            resumed = await resume(b.url, client, ready.session_id)
            try:
                history = json.loads(await reply(resumed, "history?"))
                # The conversation log before the restart went with Redis's memory
                # (docs/deploy.md: run Redis with persistence to keep it); what the
                # journal could not write while Redis was down is written now.
                assert history == ["echo down", "echo back"]
            finally:
                await resumed.close()
        finally:
            await client.close()
            await a.close()
            await b.close()


def _has(view: StoreView, session_id: str) -> bool:
    try:
        return bool(view.meta(session_id).get("state"))
    except Exception:
        return False


async def test_redis_forgets_an_abandoned_session(redis_server: RedisServer) -> None:
    """The keys of a parked session expire with its resume window (TTL), in Redis too."""
    url = redis_server.store_url("ttl")
    view = StoreView(redis_server.url, "ttl")
    a = await start_server(store=RedisSessionStore(url), resume_window=0.6)
    try:
        client = await RawClient.connect(a.url)
        ready = await client.hello()
        assert await reply(client, "echo bye") == "bye"
        ttl = _pttl(redis_server, f"ttl:{{{ready.session_id}}}")
        assert 0 < ttl <= (0.6 + 2 * 0.5) * 1000 + 50  # the window and two refreshes
        client.abort()
        await eventually(lambda: a.server.session_count == 0, 3.0, "the window to close")
        await eventually(lambda: not view.meta(ready.session_id).get("state"), 5.0)
        await asyncio.sleep(0)
    finally:
        await a.close()


def _pttl(redis: RedisServer, key: str) -> int:
    return int(redis.command("pttl", key))


async def test_acknowledged_messages_leave_the_store(redis_server: RedisServer) -> None:
    """The store keeps only what the client has not acknowledged (§4.2), as the
    process does: its memory per session is bounded the same way."""
    url = redis_server.store_url("acks")
    view = StoreView(redis_server.url, "acks")
    a = await start_server(store=RedisSessionStore(url))
    client = await RawClient.connect(a.url)
    try:
        ready = await client.hello()
        assert await reply(client, "burst 20") != ""
        await eventually(lambda: len(view.kept(ready.session_id)) == client.last_seq, 2.0)
        await client.ack()
        await client.text("echo x")
        await client.until(is_idle)
        await eventually(
            lambda: view.kept(ready.session_id)[0] > 22 if view.kept(ready.session_id) else True,
            2.0,
        )
    finally:
        await client.close()
        await a.close()


def test_the_log_bound_comes_from_the_url_unless_given() -> None:
    assert RedisSessionStore("redis://h/0").max_log_bytes == 256 << 10
    assert RedisSessionStore("redis://h/0?max_log_bytes=2048").max_log_bytes == 2048
    given = RedisSessionStore("redis://h/0?max_log_bytes=2048", max_log_bytes=4096)
    assert given.max_log_bytes == 4096
    assert "max_log_bytes" not in given.url  # vrt's, not the redis package's
    for bad in ("0", "1023", "-5", "1e6", ""):
        with pytest.raises(ValueError, match="at least 1024"):
            RedisSessionStore(f"redis://h/0?max_log_bytes={bad}")


async def test_the_conversation_log_is_bounded(redis_server: RedisServer) -> None:
    url = redis_server.store_url("logcap")
    view = StoreView(redis_server.url, "logcap")
    store = RedisSessionStore(url + "&max_log_bytes=2000")
    a = await start_server(store=store)
    client = await RawClient.connect(a.url, auto_ack=True)
    try:
        ready = await client.hello()
        for n in range(60):
            await reply(client, f"echo message number {n}")
        meta = view.meta(ready.session_id)
        assert int(meta["logbytes"]) <= 2000
        history = view.history(ready.session_id)
        assert history, "the newest entries stay"
        texts: list[Any] = [getattr(e, "text", None) for e in history]
        assert "echo message number 59" in texts
        assert "echo message number 0" not in texts
    finally:
        await client.close()
        await a.close()


async def test_a_write_overtaken_by_a_resume_on_the_same_process_is_not_a_lost_session(
    redis_server: RedisServer,
) -> None:
    """A resume that lands on the process that has the session takes a new lease while
    a write with the previous one is on its way: the refused write is written again with
    the new lease, and the resumed connection is not closed as if another process had
    the session (found by the load generator with two workers)."""
    store = RedisSessionStore(redis_server.store_url("overtaken"))
    a = await start_server(store=store)
    client = await RawClient.connect(a.url)
    held = asyncio.Event()
    release = asyncio.Event()
    original = store.write

    def write(batch: Any) -> Any:
        if held.is_set():
            return original(batch)
        held.set()
        future = asyncio.get_running_loop().create_future()

        async def later() -> None:
            await release.wait()
            try:
                future.set_result(await original(batch))
            except Exception as exc:
                future.set_exception(exc)

        asyncio.get_running_loop().create_task(later())
        return future

    try:
        ready = await client.hello()
        setattr(store, "write", write)  # noqa: B010 - the probe
        await client.text("echo held")
        await eventually(held.is_set, 2.0)
        client.abort()
        view = StoreView(redis_server.url, "overtaken")
        before = view.owner(ready.session_id)
        resuming = asyncio.get_running_loop().create_task(resume(a.url, client, ready.session_id))
        # The resume took a new lease; its ready waits behind the write on its way.
        await eventually(lambda: view.owner(ready.session_id) != before, 3.0)
        release.set()
        resumed = await resuming
        items = await resumed.until(is_idle, 3.0)
        assert "".join(chunks(items)) == "held"
        assert await reply(resumed, "echo still mine") == "still mine"
        assert resumed.close_info is None
        await resumed.close()
    finally:
        release.set()
        await client.close()
        await a.close()


async def test_refused_resumes_cannot_flood_the_log(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A client can send hellos for ids that do not exist as fast as it connects: their
    refusals make one log line per 10 s, which counts the others."""
    a = await start_server(store=RedisSessionStore(redis_server.store_url("flood")))
    caplog.set_level("INFO", logger="vrt.server")
    try:
        for n in range(30):
            client = await RawClient.connect(a.url)
            await client.send_hello(sessionId=f"s_guess{n}", resumeFrom=0)
            assert (await client.closed())[0] == 4404
            await client.close()
        lines = [r.getMessage() for r in caplog.records if "refused the resume" in r.getMessage()]
        assert len(lines) == 1
        assert "s_guess0" in lines[0]
    finally:
        await a.close()


async def test_a_superseded_journal_refused_late_leaves_the_new_one_alone(
    redis_server: RedisServer,
) -> None:
    """Another process took the session, and before this one heard of it (its notice
    late) the client resumed here: the session is rebuilt here with a new journal. The
    old journal's write, refused late for its old lease, must not give up the new one
    (the client got 4000 "replaced by a newer connection" on its only connection: seen
    once under load with two workers, when a paused worker's notices came late)."""
    url = redis_server.store_url("superseded")
    store, other = RedisSessionStore(url), RedisSessionStore(url)
    a = await start_server(store=store)
    b = await start_server(store=other)
    client = await RawClient.connect(a.url)
    held: list[asyncio.Future[Any]] = []
    original = store.write

    def write(batch: Any) -> Any:
        if held:
            return original(batch)
        held.append(asyncio.get_running_loop().create_future())
        return held[0]

    resumed: RawClient | None = None
    try:
        ready = await client.hello()
        assert await reply(client, "echo first") == "first"
        setattr(store, "_notice", lambda notice: None)  # noqa: B010 - the notice comes late
        taken = await other.claim(ready.session_id, None, None)
        assert not isinstance(taken, str)
        other.forget(taken.journal)  # b took the lease, then let the session go
        setattr(store, "write", write)  # noqa: B010 - the old journal's write stalls
        await client.text("echo held")
        await eventually(lambda: bool(held), 2.0)
        client.abort()
        resumed = await resume(a.url, client, ready.session_id)
        held[0].set_result("fenced")  # the old lease's write, refused at last
        await asyncio.sleep(0.1)
        assert await reply(resumed, "echo still mine") == "still mine"
        assert resumed.close_info is None
    finally:
        if held and not held[0].done():
            held[0].set_result("fenced")
        if resumed is not None:
            await resumed.close()
        await client.close()
        await a.close()
        await b.close()


async def test_a_session_that_moved_leaves_nothing_in_the_old_processs_telemetry(
    redis_server: RedisServer,
) -> None:
    """The process a session left counts it ended (``moved``) and lets go of what its
    telemetry kept of it: the unsettled tool calls' clocks, the session's trace. Before,
    each session that had called a tool and then moved stayed in its old process's
    telemetry for good."""
    url = redis_server.store_url("moved")
    metrics = ServerMetrics("scripted")
    telemetry = Telemetry(metrics)
    a = await start_server(store=RedisSessionStore(url), observer=telemetry)
    b = await start_server(store=RedisSessionStore(url))
    client = await RawClient.connect(a.url)
    resumed: RawClient | None = None
    try:
        ready = await client.hello(tools=[{"name": "add", "parameters": {"type": "object"}}])
        await client.text('call add {"a": 1, "b": 2}')
        call = await client.expect_message(ToolCall, 3.0)
        await client.send_sequenced(
            "tool.result", callId=call.call_id, epoch=call.epoch, ok=True, output=3
        )
        await client.until(is_idle, 3.0)
        assert ready.session_id in telemetry._calls  # the call's clock, kept per session
        client.abort()
        resumed = await resume(b.url, client, ready.session_id)
        await eventually(lambda: metrics.sessions_ended["moved"] == 1, 3.0)
        assert ready.session_id not in telemetry._calls
        assert a.server.session_count == 0
    finally:
        if resumed is not None:
            await resumed.close()
        await client.close()
        await a.close()
        await b.close()


class _StreamlessConnection:
    """A redis-py connection seen without its stream writer (``_writer``), as a redis-py
    that keeps it elsewhere would be: everything else is the real connection's."""

    def __init__(self, real: Any) -> None:
        self._real = real

    def __getattr__(self, name: str) -> Any:
        if name == "_writer":
            raise AttributeError(name)
        return getattr(self._real, name)


async def test_without_the_stream_writer_the_writes_go_in_pipelines(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The journals' writes go on a connection of their own, written to through
    redis-py's stream writer; a redis-py without it must still store every write, in
    pipelines (as on a Cluster), not reconnect forever or lose the session."""
    url = redis_server.store_url("streamless")
    store = RedisSessionStore(url)
    a = await start_server(store=store)
    assert store.sends_at_once
    pool = store._client.connection_pool
    real = pool.make_connection
    monkeypatch.setattr(pool, "make_connection", lambda: _StreamlessConnection(real()))
    client = await RawClient.connect(a.url)
    try:
        ready = await client.hello()
        assert await reply(client, "echo stored all the same") == "stored all the same"
        assert not store.sends_at_once
        view = StoreView(redis_server.url, "streamless")
        await eventually(lambda: len(view.kept(ready.session_id)) == client.last_seq, 2.0)
        assert await reply(client, "echo and again") == "and again"
    finally:
        await client.close()
        await a.close()


async def test_a_session_that_moved_is_freed_without_the_cyclic_collector(
    pair: tuple[RunningServer, RunningServer],
) -> None:
    """The process a session left lets it go by reference counting alone: no reference
    cycle through the session (its message handlers, its journal, the task listening for
    ownership notices) keeps it for the cyclic collector, which at a load of resumes
    across workers ran far behind them (worker memory grew by ~2.4 MB a minute)."""
    a, b = pair
    client = await RawClient.connect(a.url)
    ready = await client.hello()
    assert await reply(client, "echo hi") == "hi"
    session_id = ready.session_id
    left = weakref.ref(a.session(session_id))
    await client.close()
    collecting = gc.isenabled()
    gc.disable()
    try:
        moved = await resume(b.url, client, session_id)
        try:
            assert await reply(moved, "echo again") == "again"
            await eventually(lambda: a.server.session(session_id) is None, 3.0)
            await eventually(lambda: left() is None, 1.0, "the session freed")
        finally:
            await moved.close()
    finally:
        if collecting:
            gc.enable()


async def test_a_refused_resume_is_logged_with_the_stores_reason(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    """The client hears RESUME_FAILED alike for a session that is unknown, ended or
    another principal's (§5.3); the server's log tells an operator which it was."""
    url = redis_server.store_url("why")
    store = RedisSessionStore(url)
    for throttled in store._refused.values():
        throttled.interval = 0.0  # every refusal logged, for this test
    a = await start_server(store=store, authenticator=lambda auth: auth or None)
    caplog.set_level("INFO", logger="vrt.server")

    async def refused(session_id: str, auth: str) -> str:
        caplog.clear()
        client = await RawClient.connect(a.url)
        try:
            await client.send_hello(sessionId=session_id, resumeFrom=0, auth=auth)
            assert (await client.closed())[0] == 4404
        finally:
            await client.close()
        return " ".join(r.getMessage() for r in caplog.records)

    try:
        owner = await RawClient.connect(a.url)
        ready = await owner.hello(auth="alice")
        foreign = await refused(ready.session_id, "mallory")
        assert "another principal" in foreign
        # Only a session the store lost is written again from this process's copy.
        assert "the session store lost it" not in foreign
        assert "no such session" in await refused("s_" + "x" * 22, "alice")
        forged = await refused("s_x\n2026-12-02 INFO vrt.server: forged", "alice")
        assert "\n" not in forged  # the client's id is quoted in the log
        # A resume that needs more than was sent ends the session (§5.4)...
        caplog.clear()
        breaker = await RawClient.connect(a.url)
        await breaker.send_hello(sessionId=ready.session_id, resumeFrom=99, auth="alice")
        assert (await breaker.closed())[0] == 4404
        await breaker.close()
        assert "a resume from 99 could not be served" in caplog.text
        await owner.close()
        view = StoreView(redis_server.url, "why")
        await eventually(lambda: view.owner(ready.session_id) == "ended", 3.0)
        # ... and a resume after that is refused for it.
        assert "the session ended" in await refused(ready.session_id, "alice")
    finally:
        await a.close()
