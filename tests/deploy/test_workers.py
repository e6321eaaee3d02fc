"""``vrt serve --workers N --store redis://...``: N processes on one port sharing the
store; a dead worker is replaced; SIGTERM drains them all into the store, and the
sessions resume on a server started afterwards (they outlive every process)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from fleet import Server

from support import RawClient, chunks, eventually, is_idle
from support.processes import free_port, run_repo_module, vrt_command
from support.redis_servers import RedisServer


def _serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*vrt_command(), "serve", "--port", "0", "--agent", "scripted", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_workers_need_a_shared_store() -> None:
    done = _serve("--workers", "2")
    assert done.returncode == 2
    assert "--workers above 1 needs a shared session store" in done.stderr


def test_a_store_url_that_is_not_redis_is_refused() -> None:
    done = _serve("--store", "postgres://127.0.0.1/x")
    assert done.returncode == 2
    assert "--store" in done.stderr


def test_a_store_url_with_a_bad_log_bound_is_refused_before_serving() -> None:
    done = _serve("--store", "redis://127.0.0.1:1/0?max_log_bytes=lots")
    assert done.returncode == 2
    assert "max_log_bytes='lots'" in done.stderr
    assert "at least 1024" in done.stderr


async def reply(client: RawClient, text: str) -> str:
    await client.text(text)
    return "".join(chunks(await client.until(is_idle, 5.0)))


async def test_workers_share_sessions_and_drain_into_the_store(
    redis_server: RedisServer,
) -> None:
    store = redis_server.store_url()
    port = free_port()
    with tempfile.NamedTemporaryFile("w+", suffix=".log") as log:
        supervisor = subprocess.Popen(
            [
                *vrt_command(),
                "serve",
                "--agent",
                "scripted",
                "--port",
                str(port),
                "--workers",
                "2",
                "--store",
                store,
                "--log-level",
                "info",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
        )

        def output() -> str:
            log.seek(0)
            return log.read()

        try:
            await eventually(lambda: "listening on" in output(), 20.0, "the workers to listen")
            assert "2 workers" in output()
            workers = dict(re.findall(r"\(pid (\d+)\) is worker (\w+)", output()))
            assert len(workers) == 2
            url = f"ws://127.0.0.1:{port}"
            client = await RawClient.connect(url)
            ready = await client.hello()
            assert await reply(client, "echo first") == "first"
            # kill -9 the worker that owns the session: the supervisor starts another,
            # and the session resumes on whichever worker the kernel picks.
            owner = _owner(redis_server, store, ready.session_id)
            victim = next(int(pid) for pid, worker in workers.items() if worker == owner)
            os.kill(victim, signal.SIGKILL)
            await eventually(
                lambda: len(re.findall(r"is worker", output())) == 3, 20.0, "a new worker"
            )
            resumed = await RawClient.connect(url)
            resumed.next_seq = client.next_seq
            await resumed.hello(sessionId=ready.session_id, resumeFrom=client.last_seq)
            assert json.loads(await reply(resumed, "history?")) == ["echo first"]
            last_seq, next_seq = resumed.last_seq, resumed.next_seq
            supervisor.send_signal(signal.SIGTERM)  # every worker drains into the store
            assert (await resumed.closed(15.0))[0] == 1001
            assert supervisor.wait(20) == 0
            await client.close()
            await resumed.close()
        finally:
            if supervisor.poll() is None:
                supervisor.kill()
                supervisor.wait()
    # Nothing of the first deployment runs any more; a new server resumes the session.
    later = Server("later", free_port(), ("--store", store))
    later.start()
    try:
        again = await RawClient.connect(later.url)
        again.next_seq = next_seq
        ready_again = await again.hello(sessionId=ready.session_id, resumeFrom=last_seq)
        assert ready_again.resumed_from == next_seq - 1
        assert json.loads(await reply(again, "history?")) == ["echo first", "history?"]
        await again.close()
    finally:
        later.stop()
    time.sleep(0)


async def test_a_load_run_pauses_each_worker_in_turn_and_loses_nothing(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """``python -m load --pause-every`` against ``vrt serve --workers 2``: each worker
    stopped in turn while every turn's connection is cut and resumed (on either
    worker); no error, and each process's memory reported on its own."""
    port = free_port()
    log = (tmp_path / "serve.log").open("w")
    supervisor = subprocess.Popen(
        [
            *vrt_command(),
            *("serve", "--agent", "scripted", "--port", str(port)),
            *("--workers", "2", "--store", redis_server.store_url()),
        ],
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    try:
        await eventually(lambda: len(_children(supervisor.pid)) == 2, 20.0, "two workers")
        await asyncio.sleep(2.0)  # both listening
        out = tmp_path / "load.json"
        done = await asyncio.to_thread(
            run_repo_module,
            "load",
            *("--url", f"ws://127.0.0.1:{port}", "--server-pid", str(supervisor.pid)),
            *("--text-sessions", "6", "--audio-sessions", "2", "--minutes", "0.2"),
            *("--ramp", "1", "--workers", "1", "--warmup", "2", "--churn", "1"),
            *("--pause-every", "3", "--pause-for", "0.5", "--json", str(out)),
            timeout=120,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        report = json.loads(out.read_text())
        assert report["errors"] == 0, report["error_samples"]
        assert report["resumes"] >= report["turns"] >= 1
        assert report["pauses"] >= 3  # both workers, at least once each
        assert report["audio_frame_lateness_ms"]["max"] >= 400
        processes = report["server_processes_rss_mb"]
        assert set(processes) == {str(supervisor.pid), *map(str, _children(supervisor.pid))}
    finally:
        supervisor.send_signal(signal.SIGTERM)
        try:
            supervisor.wait(20)
        except subprocess.TimeoutExpired:
            supervisor.kill()
            supervisor.wait()
        log.close()


def _children(pid: int) -> list[int]:
    """Read here, not taken from the generator, whose report this checks."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as children:
            return [int(child) for child in children.read().split()]
    except OSError:
        return []


def _owner(redis: RedisServer, store: str, session_id: str) -> str:
    prefix = store.rsplit("prefix=", 1)[1]
    owner = redis.command("hget", f"{prefix}:{{{session_id}}}", "owner")
    return owner.partition(":")[0]
