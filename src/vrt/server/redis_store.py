"""Sessions in Redis, so that a session outlives its process and resumes on any other
(docs/deploy.md). ``pip install 'vrealtime[redis]'``; ``vrt serve --store redis://...``.

Each session is three keys with the hash tag ``{sessionId}``, so that a Redis Cluster
keeps them in one slot and one Lua script can touch all three:

* ``PREFIX:{id}``, a hash: ``owner`` (the lease: ``WORKER:N``, N the fencing token,
  increased by every process that takes the session), ``fence`` (N), ``principal``,
  ``state`` (``snapshot.SessionState``), ``client`` (the client's tools and context),
  ``outlast`` (the last seq stored), ``logbytes``;
* ``PREFIX:{id}:out``, a stream of the kept unacknowledged messages (§4.1, §5.4): one
  entry per write, holding that write's messages (msgpack ``[[seq, bytes], ...]``),
  with the entry id ``LASTSEQ-0``; an entry goes once every message in it is
  acknowledged or dropped (``XTRIM MINID``), so Redis does one small thing per write,
  however many messages it holds;
* ``PREFIX:{id}:log``, a list: the conversation log (``vrt.agents.history``), one
  element per write (msgpack, a list of entries), the newest within ``max_log_bytes``.

Every write is one script that first checks the lease, so a process that lost the
session (a stalled one, say) cannot change it. A journal's write goes to Redis the
moment it is made, on a connection of its own that the process keeps for them (the
link): the command is written to the socket at once and its reply read in order, with
no pool, pipeline or task per write; a Cluster gets each write through the cluster
client instead. The other scripts (create, claim, refresh, end) go in pipelines, those
of one event-loop step together. The keys expire a
resume window after the session's connection ended (refreshed while it is connected),
so Redis forgets abandoned sessions by itself; a session that ends leaves a tombstone
for the length of a resume window, so that nobody brings it back.

A process that takes a session publishes its id on the channel ``PREFIX:owner:WORKER``
of the previous owner, which then closes its connection with 4000 and forgets it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import secrets
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Literal, cast
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import msgspec

from ..agents.history import HistoryEntry
from ..logs import Throttled
from ..protocol.server import ServerConfig, ServerSession
from .journal import Batch, SessionJournal, StoreUnavailable, WriteOutcome
from .snapshot import client_data, restore_session, session_state
from .store import Claim, Refusal

__all__ = [
    "DEFAULT_MAX_LOG_BYTES",
    "STORE_FORMS",
    "STORE_SCHEMES",
    "RedisSessionStore",
    "check_url",
]

log = logging.getLogger("vrt.server")

#: The schemes of a store URL, and what ``--store`` takes, for messages.
STORE_SCHEMES: Final = ("redis", "rediss", "unix")
STORE_FORMS: Final = "memory, redis://HOST:PORT/DB, rediss://... or unix://PATH"
#: The conversation log kept per session (docs/limits.md): the newest entries within it.
DEFAULT_MAX_LOG_BYTES: Final = 256 << 10
#: The smallest ``max_log_bytes`` a URL may ask for: less keeps hardly a turn for an
#: agent rebuilt elsewhere (the newest write's entries are kept whatever the bound).
MIN_LOG_BYTES: Final = 1 << 10
#: The kept messages of one write go in stream entries of about this size (the last
#: message of an entry may take it past): the stream holds at most this much more
#: than the kept window.
STREAM_ENTRY_BYTES: Final = 32 << 10
#: Pipelines in flight at once; writes that arrive meanwhile go with the next one.
MAX_PIPELINES: Final = 4
_OWNER = "owner"

# KEYS: meta, out, log. ARGV: token, principal, state, client, ttl.
_CREATE: Final = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'fence', 1, 'principal', ARGV[2],
           'state', ARGV[3], 'client', ARGV[4], 'outlast', 0, 'logbytes', 0)
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1
"""

# KEYS: meta, out, log. ARGV: token, ttl, state, client ('' = unchanged), first kept
# seq, full ('1' rewrites the session whole), log cap in bytes, principal, the log
# entries' blob ('' none), then for each stream entry of the kept messages written,
# its last seq and its blob. Returns 1 written, 0 fenced (another owner, or the
# session ended), -1 missing.
_WRITE: Final = """
local owner = redis.call('HGET', KEYS[1], 'owner')
local full = ARGV[6] == '1'
if owner ~= ARGV[1] then
  if owner or not full then
    if owner then return 0 end
    return -1
  end
end
local ttl = ARGV[2]
local outlast = tonumber(redis.call('HGET', KEYS[1], 'outlast') or '0')
if full then
  redis.call('DEL', KEYS[2])
  outlast = 0
  redis.call('HSETNX', KEYS[1], 'fence', 1)
  redis.call('HSETNX', KEYS[1], 'logbytes', 0)
  redis.call('HSET', KEYS[1], 'principal', ARGV[8])
end
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'state', ARGV[3])
if ARGV[4] ~= '' then redis.call('HSET', KEYS[1], 'client', ARGV[4]) end
for i = 10, #ARGV, 2 do
  local last = tonumber(ARGV[i])
  if last > outlast then
    redis.call('XADD', KEYS[2], ARGV[i] .. '-0', 'm', ARGV[i + 1])
    outlast = last
  end
end
redis.call('HSET', KEYS[1], 'outlast', outlast)
redis.call('XTRIM', KEYS[2], 'MINID', ARGV[5])
local added = #ARGV[9]
if added > 0 then
  redis.call('RPUSH', KEYS[3], ARGV[9])
  local total = redis.call('HINCRBY', KEYS[1], 'logbytes', added)
  local cap = tonumber(ARGV[7])
  while total > cap and redis.call('LLEN', KEYS[3]) > 1 do
    total = total - #redis.call('LPOP', KEYS[3])
  end
  redis.call('HSET', KEYS[1], 'logbytes', total)
end
redis.call('PEXPIRE', KEYS[1], ttl)
redis.call('PEXPIRE', KEYS[2], ttl)
redis.call('PEXPIRE', KEYS[3], ttl)
return 1
"""

# KEYS: meta, out, log. ARGV: principal, worker, the caller's current token ('' if
# none), ttl. Returns {0, why} (why: missing, ended or foreign; the client gets one
# answer for all three, §5.3, the log tells them apart), {1, token, previous} (the
# caller's copy is current), or {2, token, previous, state, client, kept entries, log}.
_CLAIM: Final = """
local m = redis.call('HMGET', KEYS[1], 'owner', 'principal')
if not m[1] then return {0, 'missing'} end
if m[1] == 'ended' then return {0, 'ended'} end
if m[2] ~= ARGV[1] then return {0, 'foreign'} end
local fence = redis.call('HINCRBY', KEYS[1], 'fence', 1)
local owner = ARGV[2] .. ':' .. fence
redis.call('HSET', KEYS[1], 'owner', owner)
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('PEXPIRE', KEYS[2], ARGV[4])
redis.call('PEXPIRE', KEYS[3], ARGV[4])
if m[1] == ARGV[3] then return {1, owner, m[1]} end
local s = redis.call('HMGET', KEYS[1], 'state', 'client')
return {2, owner, m[1], s[1], s[2], redis.call('XRANGE', KEYS[2], '-', '+'),
        redis.call('LRANGE', KEYS[3], 0, -1)}
"""

# KEYS: meta, out, log. ARGV: token, ttl. The session ended: a tombstone stays.
_END: Final = """
if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[2], KEYS[3])
redis.call('HDEL', KEYS[1], 'state', 'client', 'principal')
redis.call('HSET', KEYS[1], 'owner', 'ended')
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
"""

# KEYS: meta, out, log. ARGV: token, ttl. The lease refreshed: 1, 0 fenced, -1 missing.
_TOUCH: Final = """
local owner = redis.call('HGET', KEYS[1], 'owner')
if owner ~= ARGV[1] then
  if owner then return 0 end
  return -1
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
redis.call('PEXPIRE', KEYS[3], ARGV[2])
return 1
"""

_SCRIPTS: Final = {
    "create": _CREATE,
    "write": _WRITE,
    "claim": _CLAIM,
    "end": _END,
    "touch": _TOUCH,
}


def check_url(url: str) -> None:
    """Raise ValueError for a URL this store cannot use, ImportError without the
    ``redis`` package (``pip install 'vrealtime[redis]'``)."""
    import redis  # noqa: F401

    parts = urlsplit(url)
    if parts.scheme not in STORE_SCHEMES:
        raise ValueError(f"expected {STORE_FORMS}, got {url!r}")
    _max_log_bytes(dict(parse_qsl(parts.query, keep_blank_values=True)).get("max_log_bytes"))


def _max_log_bytes(value: str | None) -> int:
    """The URL's ``max_log_bytes``: a whole number of bytes, at least ``MIN_LOG_BYTES``."""
    if value is None:
        return DEFAULT_MAX_LOG_BYTES
    try:
        number = int(value)
    except ValueError:
        number = -1
    if number < MIN_LOG_BYTES:
        raise ValueError(
            f"max_log_bytes={value!r} in the store URL: expected a whole number of bytes, "
            f"at least {MIN_LOG_BYTES} (default {DEFAULT_MAX_LOG_BYTES})"
        )
    return number


_MSGPACK: Final = msgspec.msgpack.Encoder()
_KEPT: Final = msgspec.msgpack.Decoder(list[tuple[int, bytes]])
_LOG: Final = msgspec.msgpack.Decoder(list[HistoryEntry])


def _stream_entries(kept: list[tuple[int, bytes]]) -> list[Any]:
    """The kept messages of one write as stream entries, ``[last seq, blob, ...]``: one
    entry while they are small, more as they grow (each at most
    :data:`STREAM_ENTRY_BYTES`, or one message), so that ``XTRIM MINID`` frees them
    as the client acknowledges them and the stream holds little more than the
    session's kept window (``max_unacked_bytes``), not whole writes behind it."""
    entries: list[Any] = []
    start, size = 0, 0
    for index, (seq, data) in enumerate(kept):
        size += len(data)
        if size >= STREAM_ENTRY_BYTES or index == len(kept) - 1:
            entries += (seq, _MSGPACK.encode(kept[start : index + 1]))
            start, size = index + 1, 0
    return entries


def decode_kept(blob: bytes) -> list[tuple[int, bytes]]:
    """The messages of one ``out`` stream entry."""
    return _KEPT.decode(blob)


def decode_log(blob: bytes) -> list[HistoryEntry]:
    """The conversation log entries of one ``log`` list element."""
    return _LOG.decode(blob)


def _principal(principal: str | None) -> str:
    return "" if principal is None else "=" + principal


@dataclass(slots=True)
class _Pending:
    script: str
    keys: tuple[str, str, str]
    args: list[Any]
    future: asyncio.Future[Any] = field(repr=False)
    session_id: str = ""


_OUTCOMES: Final[dict[int, WriteOutcome]] = {1: "ok", 0: "fenced", -1: "missing"}
#: Why the claim script refused a resume, for the log (the client is told only
#: RESUME_FAILED, §5.3).
_REFUSALS: Final[dict[Refusal, str]] = {
    "missing": "no such session (never stored, or expired with its resume window)",
    "ended": "the session ended",
    "foreign": "the session belongs to another principal",
}


class RedisSessionStore:
    """Sessions in Redis (a single server, Sentinel-managed or a Cluster); see the
    module docstring and docs/deploy.md.

    :param url: ``redis://[user:password@]host:port/db`` or ``rediss://`` (TLS), with
        the ``redis`` package's options as query parameters (``socket_timeout``...),
        ``prefix`` (default ``vrt``) for the key names, and ``max_log_bytes``. A Redis
        Cluster is found by asking the server.
    :param max_log_bytes: the conversation log kept per session, newest entries first;
        default: the URL's ``max_log_bytes``, else 256 KiB.
    :param timeout: how long a Redis command may take before the store counts as
        unreachable (seconds), unless the URL sets ``socket_timeout``.
    """

    shared: Literal[True] = True

    def __init__(
        self,
        url: str,
        *,
        max_log_bytes: int | None = None,
        timeout: float = 1.0,
    ) -> None:
        check_url(url)
        parts = urlsplit(url)
        query = dict(parse_qsl(parts.query))
        self.prefix = query.pop("prefix", "vrt")
        from_url = _max_log_bytes(query.pop("max_log_bytes", None))
        query.setdefault("socket_timeout", str(timeout))
        query.setdefault("socket_connect_timeout", str(timeout))
        self.url = urlunsplit(parts._replace(query=urlencode(query)))
        self.max_log_bytes = from_url if max_log_bytes is None else max_log_bytes
        #: This process's name in leases: ``WORKER:N``.
        self.worker = secrets.token_hex(6)
        self.config = ServerConfig()
        self.cluster = False
        self._client: Any = None
        self._pubsub_client: Any = None
        self._shas: dict[str, str] = {}
        self._queue: list[_Pending] = []
        self._sending = 0
        self._send_due = False
        self._on_lost: Callable[[str], None] = lambda session_id: None
        self._journals: dict[str, SessionJournal] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        # The link: a connection of the journals' writes (see the module docstring).
        self._link: Any = None
        #: The link can be used: redis-py's connection keeps its stream writer as
        #: ``_writer`` (5.x to 8.x do); without it, writes go in pipelines as a Cluster's.
        self._linkable = True
        self._linking: asyncio.Task[None] | None = None
        self._reading: asyncio.Task[None] | None = None
        #: Writes sent on the link, oldest first: Redis answers them in this order.
        self._inflight: deque[_Pending] = deque()
        #: Writes waiting for the link to connect.
        self._unlinked: list[_Pending] = []
        self._wake: asyncio.Future[None] | None = None
        self._closed = False
        #: Resumes here in progress (``claim``), by session id: done once the lease is ours.
        self._claims: dict[str, asyncio.Future[None]] = {}
        #: A refused resume's log line, one per reason and 10 s at most: a client can
        #: send hellos for ids that do not exist as fast as it can connect.
        self._refused = {reason: Throttled(log, logging.INFO) for reason in _REFUSALS}

    def __repr__(self) -> str:
        return f"RedisSessionStore({self.safe_url!r})"

    @property
    def safe_url(self) -> str:
        """The URL without its password, for logs."""
        parts = urlsplit(self.url)
        host = parts.hostname or ""
        netloc = f"{host}:{parts.port}" if parts.port else host
        return urlunsplit((parts.scheme, netloc, parts.path, "", ""))

    def __len__(self) -> int:
        return len(self._journals)

    # -- lifecycle --

    async def open(self, config: ServerConfig, on_lost: Callable[[str], None]) -> None:
        """Connect, subscribe to this worker's channel and start refreshing leases.
        An unreachable Redis is not fatal: new sessions are refused until it answers."""
        import redis.asyncio as redis
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff

        self.config = config
        self._on_lost = on_lost
        self._loop = asyncio.get_running_loop()
        # One try per command: a write that timed out may have been applied, and a
        # retry would not know (the journal rewrites the session whole instead).
        retry = Retry(NoBackoff(), 0)
        client = redis.Redis.from_url(self.url, retry=retry)
        self._pubsub_client = client
        try:
            info = await client.info("cluster")
            self.cluster = bool(info.get("cluster_enabled"))
        except Exception as exc:
            log.warning("the session store %s does not answer yet: %s", self.safe_url, exc)
        log.info(
            "sessions in %s%s; this process (pid %d) is worker %s",
            self.safe_url,
            " (a Redis Cluster)" if self.cluster else "",
            os.getpid(),
            self.worker,
        )
        if self.cluster:
            from redis.asyncio.cluster import RedisCluster

            self._client = RedisCluster.from_url(self.url, retry=retry)
        else:
            self._client = client
        self._tasks = [
            self._loop.create_task(self._listen(), name="vrt store: ownership"),
            self._loop.create_task(self._refresh(), name="vrt store: leases"),
        ]

    async def close(self) -> None:
        self._closed = True
        tasks = [t for t in (*self._tasks, self._linking, self._reading) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        link, self._link = self._link, None
        closed = StoreUnavailable("the session store closed")
        self._fail([*self._inflight, *self._unlinked], closed)
        self._inflight.clear()
        self._unlinked = []
        if link is not None:
            with contextlib.suppress(Exception):
                await link.disconnect(nowait=True)
        for client in {
            id(self._client): self._client,
            id(self._pubsub_client): self._pubsub_client,
        }.values():
            if client is not None:
                with contextlib.suppress(Exception):
                    await client.aclose()

    # -- keys and timing --

    def keys(self, session_id: str) -> tuple[str, str, str]:
        base = f"{self.prefix}:{{{session_id}}}"
        return base, base + ":out", base + ":log"

    @property
    def refresh_interval(self) -> float:
        """How often the leases of this process's sessions are refreshed."""
        return max(0.5, min(10.0, self.config.resume_window / 3))

    def ttl_ms(self, session: ServerSession, now: float) -> int:
        """A connected session: a resume window and two refreshes from now; a parked
        one: the rest of its resume window and two refreshes."""
        margin = 2 * self.refresh_interval
        expires = session.record.expires_at
        window = self.config.resume_window if expires is None else max(0.0, expires - now)
        return int((window + margin) * 1000)

    def _channel(self, worker: str) -> str:
        return f"{self.prefix}:owner:{worker}"

    # -- sessions --

    async def create(self, session: ServerSession) -> SessionJournal:
        """Store a new session and take its lease; raises :class:`StoreUnavailable`."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        token = f"{self.worker}:1"
        created = await self._call(
            "create",
            session.session_id,
            [
                token,
                _principal(session.principal),
                session_state(session, now, time.time()),
                client_data(session),
                self.ttl_ms(session, now),
            ],
        )
        if created != 1:
            raise StoreUnavailable("a session with this id exists already")
        return self._journal(session, token)

    def _journal(self, session: ServerSession, token: str) -> SessionJournal:
        assert self._loop is not None
        journal = SessionJournal(session, self, token, self._lost, loop=self._loop)
        self._journals[session.session_id] = journal
        return journal

    async def claim(
        self, session_id: str, principal: str | None, local: SessionJournal | None
    ) -> Claim | Refusal:
        """Take the lease of ``session_id`` for a resume (§5.4), or say why not: a
        session unknown, ended or of another principal (the client gets the same
        answer, §5.3); raises :class:`StoreUnavailable`."""
        loop = asyncio.get_running_loop()
        taken: asyncio.Future[None] = loop.create_future()
        self._claims[session_id] = taken
        try:
            return await self._claim(session_id, principal, local)
        finally:
            if self._claims.get(session_id) is taken:
                del self._claims[session_id]
            taken.set_result(None)

    async def _claim(
        self, session_id: str, principal: str | None, local: SessionJournal | None
    ) -> Claim | Refusal:
        loop = asyncio.get_running_loop()
        reply = await self._call(
            "claim",
            session_id,
            [
                _principal(principal),
                self.worker,
                local.token if local is not None and not local.lost else "",
                int((self.config.resume_window + 2 * self.refresh_interval) * 1000),
            ],
        )
        if int(reply[0]) == 0:
            refusal = cast("Refusal", _text(reply[1]))
            # The id is the client's, any string (§11): quoted, so it cannot forge a line.
            self._refused[refusal](
                "the store refused the resume of %r: " + _REFUSALS[refusal], session_id
            )
            return refusal
        token, previous = _text(reply[1]), _text(reply[2])
        self._tell_previous(session_id, previous)
        if int(reply[0]) == 1 and local is not None:
            local.token = token
            self._journals[session_id] = local
            return Claim(session=local.session, journal=local, history=(), restored=False)
        state, client, entries, log_blobs = reply[3], reply[4], reply[5], reply[6]
        kept = [pair for _, fields in entries for pair in _KEPT.decode(_field(fields))]
        session = restore_session(self.config, state, client, kept, loop.time(), time.time())
        history = tuple(entry for blob in log_blobs for entry in _LOG.decode(blob))
        journal = self._journal(session, token)
        return Claim(session=session, journal=journal, history=history, restored=True)

    def _tell_previous(self, session_id: str, previous: str) -> None:
        """The previous owner, if another process, closes its connection (4000)."""
        worker = previous.partition(":")[0]
        if previous == "ended" or not worker or worker == self.worker:
            return
        assert self._loop is not None
        notice = f"{session_id} {previous}"
        self._loop.create_task(self._publish(self._channel(worker), notice))

    async def _publish(self, channel: str, notice: str) -> None:
        session_id = notice.partition(" ")[0]
        try:
            await self._pubsub_client.publish(channel, notice)
        except Exception as exc:  # the old owner's next write is refused all the same
            log.info("could not tell the previous owner of %s: %s", session_id, exc)

    async def end(self, journal: SessionJournal) -> None:
        """The session ended: delete it, leaving a tombstone (nothing resumes it)."""
        self.forget(journal)
        if journal.lost:
            return
        with contextlib.suppress(StoreUnavailable, TimeoutError):
            await asyncio.wait_for(journal.drained(), 5.0)
            await self._call(
                "end",
                journal.session.session_id,
                [
                    journal.token,
                    int((self.config.resume_window + 2 * self.refresh_interval) * 1000),
                ],
            )

    def forget(self, journal: SessionJournal) -> None:
        """This process no longer keeps the session (it ended, moved, or was parked in
        the store for another process to take)."""
        if self._journals.get(journal.session.session_id) is journal:
            del self._journals[journal.session.session_id]
        journal.detach()

    def _lost(self, session_id: str) -> None:
        journal = self._journals.pop(session_id, None)
        if journal is not None:
            journal.lost = True
        self._on_lost(session_id)

    # -- the ownership channel and the leases --

    async def _listen(self) -> None:
        """Sessions other processes took from this one (pub/sub), until cancelled."""
        channel = self._channel(self.worker)
        while True:
            pubsub = self._pubsub_client.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(channel)
                while True:
                    message = await pubsub.get_message(timeout=1.0)
                    if message is not None:
                        self._notice(_text(message["data"]))
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.debug("ownership channel: %s; subscribing again", exc)
                await asyncio.sleep(0.5)
            finally:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()

    def _notice(self, notice: str) -> None:
        """``SESSION TOKEN``: the lease this process lost. A late notice about an older
        lease (the session came back here since) is ignored. (A method of its own, so
        that the listening task keeps no reference to the session it let go.)"""
        session_id, _, token = notice.partition(" ")
        journal = self._journals.get(session_id)
        if journal is not None and not journal.lost and journal.token == token:
            log.info("session %s: resumed on another process", session_id)
            journal.lose()

    async def _refresh(self) -> None:
        """Refresh the leases of this process's sessions (their keys' expiry), in one
        pipeline; a refused one was taken by another process, a missing one was lost by
        Redis (a restart) and is written again whole."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.refresh_interval)
            journals = [j for j in self._journals.values() if not j.lost]
            if not journals:
                continue
            now = loop.time()
            tokens = [j.token for j in journals]
            calls = [
                self._enqueue("touch", j.session.session_id, [token, self.ttl_ms(j.session, now)])
                for j, token in zip(journals, tokens, strict=True)
            ]
            results = await asyncio.gather(*calls, return_exceptions=True)
            for journal, token, result in zip(journals, tokens, results, strict=True):
                if isinstance(result, BaseException) or journal.lost or journal.token != token:
                    continue  # a newer lease of this process's own: refreshed next time
                if int(result) == 0:
                    journal.lose()
                elif int(result) == -1:
                    journal.missing()

    # -- the pipeline --

    def write(self, batch: Batch) -> asyncio.Future[WriteOutcome]:
        """Send a journal's batch now, on the link (see :class:`JournalStore`)."""
        args: list[Any] = [
            batch.token,
            batch.ttl_ms,
            batch.state,
            batch.client if batch.client is not None else b"",
            batch.first_kept,
            "1" if batch.full else "0",
            self.max_log_bytes,
            _principal(batch.principal),
            _MSGPACK.encode([msgspec.Raw(data) for data in batch.log]) if batch.log else b"",
            *_stream_entries(batch.kept),
        ]
        assert self._loop is not None
        outcome: asyncio.Future[WriteOutcome] = self._loop.create_future()
        item = _Pending("write", self.keys(batch.session_id), args, outcome, batch.session_id)
        if self.sends_at_once:
            self._link_send(item)
        else:
            self._pipeline_write(item)
        return outcome

    def _pipeline_write(self, item: _Pending) -> None:
        """A journal's write with the next pipeline (a Cluster's, or without the link)."""
        raw = self._enqueue("write", item.session_id, item.args)
        raw.add_done_callback(functools.partial(self._settled, item))

    def _settle(self, session_id: str, result: Any, future: asyncio.Future[WriteOutcome]) -> None:
        """A write's reply. Refused while this process is taking the session again (a
        resume here, whose claim overtook the write): answered once the claim is done, so
        that the journal writes again with the new lease rather than give the session up."""
        outcome = _OUTCOMES.get(result, "missing")
        taken = self._claims.get(session_id)
        if outcome == "fenced" and taken is not None:
            taken.add_done_callback(lambda _: _resolve(future, outcome))
        else:
            _resolve(future, outcome)

    def _settled(self, item: _Pending, raw: asyncio.Future[Any]) -> None:
        """A pipelined write's reply (see :meth:`_settle`)."""
        outcome = item.future
        if outcome.done():
            return
        if raw.cancelled():
            outcome.cancel()
            return
        exc = raw.exception()
        if exc is not None:
            outcome.set_exception(exc)
            return
        self._settle(item.session_id, int(raw.result()), outcome)

    @property
    def sends_at_once(self) -> bool:
        """The link sends a write at once; a Cluster's writes go once the loop step is
        over (see :class:`JournalStore`), and so do all writes with a redis-py whose
        connection does not keep its stream writer where the link finds it."""
        return not self.cluster and self._linkable

    # -- the link: the journals' writes (not on a Cluster) --

    def _link_send(self, item: _Pending, *, source: bool = False) -> None:
        """Write ``item`` to the link's socket now (``source``: as ``EVAL`` with the
        script's text, for a Redis that forgot it); its reply comes in order."""
        link = self._link
        # The link's stream writer (redis-py keeps it as ``_writer``): writing to it at
        # once is the point of the link; its replies are read with read_response.
        writer = getattr(link, "_writer", None) if link is not None else None
        if writer is None or writer.is_closing():
            if link is not None:
                self._unlink(StoreUnavailable("the connection to the store closed"))
            self._unlinked.append(item)
            if self._linking is None:
                assert self._loop is not None
                self._linking = self._loop.create_task(self._connect_link())
            return
        sha = self._shas.get(item.script)
        if source or sha is None:  # (the scripts are being loaded again)
            head: tuple[Any, ...] = ("EVAL", _SCRIPTS[item.script], 3)
        else:
            head = ("EVALSHA", sha, 3)
        try:
            writer.writelines(link.pack_command(*head, *item.keys, *item.args))
        except Exception as exc:
            self._fail([item], exc)
            self._unlink(exc)
            return
        self._inflight.append(item)
        wake = self._wake
        if wake is not None and not wake.done():
            wake.set_result(None)

    async def _connect_link(self) -> None:
        """Connect the link (and load the scripts), then send what waited for it."""
        link = None
        try:
            if self._client is None or self._closed:
                raise StoreUnavailable("the store is not open")
            link = self._client.connection_pool.make_connection()
            await link.connect()
            if not self._shas:
                await self._load_scripts()
        except asyncio.CancelledError:
            self._linking = None
            self._fail(self._unlinked, StoreUnavailable("the store closed"))
            self._unlinked = []
            raise
        except Exception as exc:
            self._linking = None
            failed, self._unlinked = self._unlinked, []
            self._fail(failed, exc)
            if link is not None:
                with contextlib.suppress(Exception):
                    await link.disconnect(nowait=True)
            return
        self._linking = None
        if getattr(link, "_writer", None) is None:
            # Not the redis-py this was made for: the pipelines carry the writes instead
            # (slower by a few tens of microseconds), rather than reconnecting forever.
            log.warning("the session store's writes go in pipelines: no stream writer found")
            self._linkable = False
            with contextlib.suppress(Exception):
                await link.disconnect(nowait=True)
            waiting, self._unlinked = self._unlinked, []
            for item in waiting:
                self._pipeline_write(item)
            return
        self._link = link
        assert self._loop is not None
        self._reading = self._loop.create_task(self._read_link(link), name="vrt store: link")
        waiting, self._unlinked = self._unlinked, []
        for item in waiting:
            self._link_send(item)

    async def _read_link(self, link: Any) -> None:
        """Read the link's replies, in the order of its writes, while it is the link."""
        from redis.exceptions import NoScriptError, ResponseError

        assert self._loop is not None
        inflight = self._inflight
        try:
            while self._link is link:
                if not inflight:
                    self._wake = self._loop.create_future()
                    await self._wake
                    continue
                try:
                    result: Any = await link.read_response()
                except ResponseError as exc:  # an error reply: the link goes on
                    result = exc
                item = inflight.popleft()
                future = item.future
                if isinstance(result, NoScriptError):
                    self._link_send(item, source=True)  # Redis restarted and forgot it
                elif future.done():
                    pass
                elif isinstance(result, Exception):
                    future.set_exception(StoreUnavailable(f"{type(result).__name__}: {result}"))
                else:
                    self._settle(item.session_id, result, future)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the connection failed or timed out: writes unknown
            self._unlink(exc, link)

    def _unlink(self, exc: BaseException, link: Any = None) -> None:
        """The link failed: its writes in flight fail (their journals rewrite their
        sessions whole), and the next write connects a new one."""
        if link is not None and link is not self._link:
            return
        link, self._link = self._link, None
        failed = list(self._inflight)
        self._inflight.clear()
        self._fail(failed, exc)
        wake = self._wake
        if wake is not None and not wake.done():
            wake.set_result(None)
        if link is not None and self._loop is not None:
            self._loop.create_task(_disconnect(link))

    @staticmethod
    def _fail(items: list[_Pending], exc: BaseException) -> None:
        failure = exc if isinstance(exc, StoreUnavailable) else None
        for item in items:
            if not item.future.done():
                item.future.set_exception(
                    failure or StoreUnavailable(f"{type(exc).__name__}: {exc}")
                )

    async def _call(self, script: str, session_id: str, args: list[Any]) -> Any:
        return await self._enqueue(script, session_id, args)

    def _enqueue(self, script: str, session_id: str, args: list[Any]) -> asyncio.Future[Any]:
        loop = self._loop or asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._queue.append(_Pending(script, self.keys(session_id), args, future))
        if not self._send_due and self._sending < MAX_PIPELINES:
            # The task's first step runs after what this loop step still has to do, so
            # every write of the step goes in its pipeline.
            self._send_due = True
            self._sending += 1
            loop.create_task(self._send())
        return future

    async def _send(self) -> None:
        self._send_due = False
        try:
            while self._queue:
                items, self._queue = self._queue, []
                await self._pipeline(items)
        finally:
            self._sending -= 1

    async def _pipeline(self, items: list[_Pending], reloaded: bool = False) -> None:
        from redis.exceptions import NoScriptError

        client = self._client
        try:
            if not self._shas:
                await self._load_scripts()
            if self.cluster:
                # A Cluster client pipelines no scripts: each goes to its slot's node at
                # once, all of them concurrently.
                results = await asyncio.gather(
                    *(
                        client.evalsha(self._shas[item.script], 3, *item.keys, *item.args)
                        for item in items
                    ),
                    return_exceptions=True,
                )
            else:
                pipe = client.pipeline(transaction=False)
                for item in items:
                    pipe.evalsha(self._shas[item.script], 3, *item.keys, *item.args)
                results = await pipe.execute(raise_on_error=False)
        except asyncio.CancelledError:
            for item in items:
                item.future.cancel()
            raise
        except Exception as exc:
            if isinstance(exc, NoScriptError) and not reloaded:
                self._shas = {}  # Redis restarted and forgot the scripts
                await self._pipeline(items, reloaded=True)
                return
            failure = StoreUnavailable(f"{type(exc).__name__}: {exc}")
            for item in items:
                if not item.future.done():
                    item.future.set_exception(failure)
            return
        retry = [
            item
            for item, result in zip(items, results, strict=True)
            if isinstance(result, NoScriptError)
        ]
        if retry and not reloaded:
            self._shas = {}
            await self._pipeline(retry, reloaded=True)
        for item, result in zip(items, results, strict=True):
            if item.future.done() or (isinstance(result, NoScriptError) and not reloaded):
                continue
            if isinstance(result, Exception):
                item.future.set_exception(StoreUnavailable(f"{type(result).__name__}: {result}"))
            else:
                item.future.set_result(result)

    async def _load_scripts(self) -> None:
        client = self._client
        shas = {}
        for name, source in _SCRIPTS.items():
            # A Cluster client loads it on every primary (and may answer per node).
            sha = await client.script_load(source)
            sha = next(iter(sha.values())) if isinstance(sha, dict) else sha
            shas[name] = _text(sha)
        self._shas = shas


def _resolve(future: asyncio.Future[WriteOutcome], outcome: WriteOutcome) -> None:
    if not future.done():
        future.set_result(outcome)


async def _disconnect(link: Any) -> None:
    with contextlib.suppress(Exception):
        await link.disconnect(nowait=True)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _field(fields: Any) -> bytes:
    """The message of a stream entry (its one field ``m``)."""
    # A dict from the redis package, or a flat [name, value] list.
    value = fields.get(b"m", fields.get("m")) if isinstance(fields, dict) else fields[1]
    return value if isinstance(value, bytes) else str(value).encode()
