"""Settings for every test: the core checks every message vrt writes against the
schemas (``check_encoding``), here and in the ``vrt serve`` processes tests start
(``VRT_STRICT=1``), so that a message the spec forbids fails the test that made it.
And the Redis server of the run, for the tests that need one (started on first use),
and the logging each test leaves as it found it."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, Phase, settings

from support.redis_servers import RedisServer, start_redis
from vrt.protocol.codec import check_encoding

os.environ["VRT_STRICT"] = "1"
check_encoding(True)

if "MUTANT_UNDER_TEST" in os.environ:
    # A mutation run (docs/testing.md) only asks whether a test fails: no shrinking of
    # a failing example, which can take a minute per mutant. mutmut runs the suite more
    # than once in one process (to map tests to functions, then clean), so a test method
    # is called from more than one instance of its class, which Hypothesis would refuse.
    settings.register_profile(
        "mutation",
        phases=[Phase.explicit, Phase.reuse, Phase.generate],
        suppress_health_check=[HealthCheck.differing_executors],
    )
    settings.load_profile("mutation")


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """A ``redis-server`` of the test run's own, on a free port (skips without one)."""
    with start_redis() as server:
        yield server


@pytest.fixture(autouse=True)
def _logging_as_found() -> Iterator[None]:
    """Put the root logger back as the test found it. ``vrt serve`` run in-process (the
    CLI tests' ``CliRunner``) configures it (``vrt.logs.configure``): a handler on that
    run's standard error, closed once the run returns, at INFO. Left in place, every
    later test's log lines, from any thread, would go to a closed file."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    picows = logging.getLogger("picows").level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    logging.getLogger("picows").setLevel(picows)
