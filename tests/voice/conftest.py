"""The voice agent's tests need the ``voice`` extra (``pip install -e '.[dev,voice]'``,
as the README's test command and CI do); without it this folder is not collected."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from vrt.voice import missing_packages

collect_ignore_glob = ["test_*.py"] if missing_packages() else []


@pytest.fixture(scope="session")
def stages() -> object:
    """The offline stages, loaded once for the test session (about 3 s)."""
    from vrt.voice.options import build_stages

    return build_stages({})


@pytest.fixture(scope="session")
def voice_url() -> Iterator[str]:
    """``vrt serve`` with its default agent (the voice agent, scripted brain), its reply
    audio sent as fast as it is synthesised (``lead_ms``: pacing plays no part in what
    these tests check, and it keeps them short)."""
    from support.processes import vrt_serve

    with vrt_serve("--agent-option", "lead_ms=60000", default_agent=True) as url:
        yield url
