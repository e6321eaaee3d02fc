"""Fixtures and switches for the reliability tests (chaos, fuzzing, security).

Tests marked ``slow`` are the full-size runs (1,000+ chaos conversations, long fuzzing);
they are skipped unless ``VRT_LONG=1``, so that a plain ``python -m pytest`` stays
CI-sized.
"""

from __future__ import annotations

import os

import pytest

#: True when the full-size runs were asked for.
LONG = os.environ.get("VRT_LONG") == "1"


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip the full-size runs (marked ``slow``) unless VRT_LONG=1."""
    if item.get_closest_marker("slow") is not None and not LONG:
        pytest.skip("a full-size run: set VRT_LONG=1 to run it")
