"""Prototypes of proposed ``src/`` changes, applied to the vrt bench server process only.

Off by default: ``python -m bench --experiment NAME[,NAME...]`` patches the server under
test so that a proposal's effect can be measured side by side before anyone edits
``src/``. They are measurement aids, not fixes: each one states the change it stands for.
(The shared decoder, the event list, the echo tone cache, coalesced writes and the
enum-free frame parser were measured here first and are now in ``src/``.)

``ack-now``
    The server acknowledges at the end of the loop iteration that received a sequenced
    message, instead of 250 ms later (``streams.ACK_DELAY = 0``; §4.2 allows sooner).
``metrics``
    Not a proposal: the server runs as ``vrt serve --metrics`` does (its telemetry
    observer and the operations listener with its event-loop probe), to measure what
    metrics cost against the same run's baseline (``bench.servers.serve_vrt``).
``python-gc``
    Not a proposal: the server keeps CPython's garbage collector settings, as it did
    before ``vrt serve`` tuned them (``vrt.server.gc_tuning``), to measure what the
    tuning gains.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["EXPERIMENTS", "apply"]


def _ack_now() -> None:
    from vrt.protocol import streams

    streams.ACK_DELAY = 0.0  # type: ignore[misc]


def _metrics() -> None:
    """Applied by ``bench.servers.serve_vrt``, which builds the server."""


def _python_gc() -> None:
    """Applied by ``bench.servers.serve_vrt``, which tunes the collector otherwise."""


EXPERIMENTS: dict[str, Callable[[], None]] = {
    "ack-now": _ack_now,
    "metrics": _metrics,
    "python-gc": _python_gc,
}


def apply(names: list[str]) -> None:
    for name in names:
        EXPERIMENTS[name]()
