"""``vrt serve``'s collector settings (``vrt.server.gc_tuning``): start-up frozen, the
young generation's threshold raised, and cyclic garbage still collected."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from vrt.server.gc_tuning import YOUNG_THRESHOLD, tune_for_serving


@pytest.fixture
def collector() -> Iterator[None]:
    """The test process's own settings back afterwards."""
    threshold = gc.get_threshold()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


@pytest.mark.usefixtures("collector")
def test_start_up_is_frozen_and_the_young_generation_collected_less_often() -> None:
    gc.set_threshold(700, 10, 10)
    alive = len(gc.get_objects())
    tune_for_serving()
    assert gc.get_freeze_count() >= alive // 2  # what start-up made: no longer walked
    assert gc.get_threshold() == (YOUNG_THRESHOLD, 10, 10)
    assert len(gc.get_objects()) < alive // 2


@pytest.mark.usefixtures("collector")
def test_a_higher_threshold_already_set_is_kept() -> None:
    gc.set_threshold(YOUNG_THRESHOLD * 2, 5, 5)
    tune_for_serving()
    assert gc.get_threshold() == (YOUNG_THRESHOLD * 2, 5, 5)


@pytest.mark.usefixtures("collector")
def test_cycles_made_after_it_are_still_collected_by_the_collector_itself() -> None:
    tune_for_serving()
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    gone = weakref.ref(a)
    del a, b
    # Allocations that stay: a young collection runs meanwhile.
    kept: list[list[int]] = [[] for _ in range(3 * YOUNG_THRESHOLD)]
    assert gone() is None
    assert len(kept) == 3 * YOUNG_THRESHOLD
