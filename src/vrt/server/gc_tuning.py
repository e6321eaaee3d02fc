"""The cyclic garbage collector's settings for a serving process (``vrt serve``).

CPython collects its youngest generation every 700 net container allocations, and every
collection of the older generations walks every container still alive: the modules,
schemas and models loaded at start-up (about 30,000 objects before an agent's) and
every open session's. A server that opens sessions keeps most of what it allocates, so
with CPython's defaults the collector took about a quarter of the CPU of opening one
(90 µs per ``hello`` → ``ready`` in process, 66 µs with the collector off;
``bench/hotpath.py open``, docs/performance.md). Two settings, as long-running Python
servers commonly use:

* what exists once the server is set up is frozen (``gc.freeze``): it lives as long as
  the process, and no later collection walks it again;
* the youngest generation is collected every :data:`YOUNG_THRESHOLD` allocations, so
  that fewer collections walk the survivors: cyclic garbage waits a little longer (at
  most that many objects' worth), nothing else changes.

A process that embeds :class:`~vrt.server.VrtServer` in its own application keeps its
own collector settings; it can call :func:`tune_for_serving` once it is set up.
"""

from __future__ import annotations

import gc
from typing import Final

__all__ = ["YOUNG_THRESHOLD", "tune_for_serving"]

#: Net container allocations between collections of the youngest generation (CPython's
#: default is 700).
YOUNG_THRESHOLD: Final = 10_000


def tune_for_serving() -> None:
    """Collect what is garbage now, freeze what is left, raise the youngest generation's
    threshold (see the module docstring). Call it once start-up is done, before the
    server accepts; calling it again freezes what was made since."""
    gc.collect()
    gc.freeze()
    young, middle, oldest = gc.get_threshold()
    gc.set_threshold(max(YOUNG_THRESHOLD, young), middle, oldest)
