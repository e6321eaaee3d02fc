"""``vrt serve --workers N``: N server processes on one port, sharing a session store.

The supervisor (the process ``vrt serve`` started in) forks N workers before any event
loop runs. Each worker listens on the same port with SO_REUSEPORT, so the kernel spreads
new connections over them, and keeps its sessions in the shared store (``--store``),
so that a connection may resume its session on any worker (docs/deploy.md).

The supervisor prints the URL once every worker listens, forwards SIGTERM and SIGINT to
the workers (each drains: its sessions are parked in the store and its connections
closed so that clients resume on another worker; a second signal stops them at once),
and starts a new worker in place of one that died, at most once a second.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import socket
import sys
import time
import traceback
from collections.abc import Callable
from typing import Final

__all__ = ["supervise"]

log = logging.getLogger("vrt.server")

#: How long the workers have to start listening.
START_TIMEOUT: Final = 30.0
#: The shortest time between two restarts of a dead worker.
RESPAWN_INTERVAL: Final = 1.0

#: A worker's body: ``run(port, ready)`` serves on ``port`` and calls ``ready()`` once
#: it listens; it returns when the worker has stopped.
WorkerBody = Callable[[int, Callable[[], None]], None]


def reserve_port(host: str, port: int) -> tuple[int, socket.socket | None]:
    """A concrete port for the workers: ``port``, or a free one for 0, held by a bound
    (not listening) SO_REUSEPORT socket until they listen on it."""
    if port != 0:
        return port, None
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    holder = socket.socket(family, socket.SOCK_STREAM)
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    holder.bind((host, 0))
    chosen: int = holder.getsockname()[1]
    return chosen, holder


def supervise(
    count: int, host: str, port: int, body: WorkerBody, announce: Callable[[int], None]
) -> int:
    """Run ``count`` workers (see the module docstring); ``announce(port)`` once they all
    listen. Returns the exit status."""
    port, holder = reserve_port(host, port)
    ready_read, ready_write = os.pipe()
    children: dict[int, int] = {}  # pid -> worker index
    stopping = 0

    def spawn(index: int) -> None:
        pid = os.fork()
        if pid == 0:  # the worker
            os.close(ready_read)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            code = 0

            def ready() -> None:
                os.write(ready_write, b".")

            try:
                body(port, ready)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
            except BaseException:
                traceback.print_exc()
                code = 1
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        children[pid] = index

    def forward(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping += 1
        for pid in list(children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    for index in range(count):
        spawn(index)
    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    ready = 0
    deadline = time.monotonic() + START_TIMEOUT
    while ready < count and not stopping:
        left = deadline - time.monotonic()
        if left <= 0:
            log.error("the workers did not all start listening within %g s", START_TIMEOUT)
            forward(signal.SIGTERM, None)
            break
        readable, _, _ = select.select([ready_read], [], [], min(left, 0.5))
        if readable:
            ready += len(os.read(ready_read, count))
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid:
            children.pop(pid, None)
            log.error("a worker exited while starting (status %d)", status)
            forward(signal.SIGTERM, None)
            break
    if holder is not None:
        holder.close()
    if ready == count and not stopping:
        announce(port)
    last_spawn = 0.0
    while children:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        index = children.pop(pid, -1)
        if index < 0 or stopping:
            continue
        log.error("worker %d exited (status %d); starting a new one", index, status)
        pause = last_spawn + RESPAWN_INTERVAL - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        last_spawn = time.monotonic()
        if not stopping:
            spawn(index)
    os.close(ready_read)
    os.close(ready_write)
    return 0
