"""Fixtures and switches for the reliability tests (chaos, fuzzing, security).

Tests marked ``slow`` are the full-size runs (1,000+ chaos conversations, long fuzzing);
they are skipped unless ``VRT_LONG=1``, so that a plain ``python -m pytest`` stays
CI-sized.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

_TESTS = str(Path(__file__).resolve().parents[1])
if _TESTS not in sys.path:  # tests/ has no __init__.py: make ``support`` importable
    sys.path.insert(0, _TESTS)

#: True when the full-size runs were asked for.
LONG = os.environ.get("VRT_LONG") == "1"


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip the full-size runs (marked ``slow``) unless VRT_LONG=1."""
    if item.get_closest_marker("slow") is not None and not LONG:
        pytest.skip("a full-size run: set VRT_LONG=1 to run it")
