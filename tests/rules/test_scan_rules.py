"""The garbage collector is paused while a frame of many arrays and objects is parsed
(``vrt.protocol.scan.parse``; docs/limits.md): each container built counts towards a
collection, and collections run while 100,000 of them are built walk them again and
again. A hardening bound, not a result: the parsed value is the same either way, so
these tests watch the collector's state at the moment the parser runs. Survivors of a
mutation run of ``protocol/scan.py`` (docs/testing.md#mutation-testing)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any, Final

import orjson
import pytest

from vrt.protocol import scan
from vrt.protocol.codec import Decoder, Invalid

#: orjson.loads itself, which the fixture replaces.
_loads: Final = orjson.loads


class _Watched:
    """Stands in for ``orjson.loads``: notes whether the collector was on when each frame
    was parsed."""

    def __init__(self) -> None:
        self.collector_on: list[bool] = []

    def loads(self, data: bytes) -> Any:
        self.collector_on.append(gc.isenabled())
        return _loads(data)


@pytest.fixture
def watched(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Watched]:
    # Replaced in the orjson module, which scan reads at each call, compiled (mypyc) or
    # not; a compiled scan does not look up its own globals, so replacing scan.orjson
    # would go unseen.
    watcher = _Watched()
    monkeypatch.setattr(orjson, "loads", watcher.loads)
    assert gc.isenabled()
    yield watcher
    gc.enable()


def _arrays(openings: int) -> bytes:
    """A valid frame with exactly ``openings`` opening brackets, all of arrays."""
    return b"[" + b",".join([b"[]"] * (openings - 1)) + b"]"


def _objects(openings: int) -> bytes:
    """A valid frame with exactly ``openings`` opening brackets, all of objects."""
    return b"{" + b",".join(b'"k%d":{}' % n for n in range(openings - 1)) + b"}"


@pytest.mark.parametrize("build", [_arrays, _objects])
def test_a_frame_of_many_containers_is_parsed_with_the_collector_paused(
    watched: _Watched, build: Any
) -> None:
    frame = build(scan.MANY_CONTAINERS)  # exactly the bound: paused
    assert scan.parse(frame) == _loads(frame)
    assert watched.collector_on == [False]
    assert gc.isenabled()  # and on again after


@pytest.mark.parametrize("build", [_arrays, _objects])
def test_one_container_fewer_is_parsed_as_usual(watched: _Watched, build: Any) -> None:
    frame = build(scan.MANY_CONTAINERS - 1)
    scan.parse(frame)
    assert watched.collector_on == [True]


def test_a_long_frame_of_few_containers_is_parsed_as_usual(watched: _Watched) -> None:
    frame = orjson.dumps({"text": "x" * 100_000})
    scan.parse(frame)
    assert watched.collector_on == [True]


def test_a_collector_the_caller_switched_off_stays_off(watched: _Watched) -> None:
    gc.disable()
    scan.parse(_arrays(scan.MANY_CONTAINERS))
    assert watched.collector_on == [False]
    assert not gc.isenabled()


def test_the_collector_is_on_again_after_a_frame_that_fails(watched: _Watched) -> None:
    with pytest.raises(orjson.JSONDecodeError):
        scan.parse(b"[" * (2 * scan.MANY_CONTAINERS))
    assert watched.collector_on == [False]
    assert gc.isenabled()


@pytest.mark.parametrize("build", [_arrays, _objects])
def test_the_decoder_parses_a_frame_of_many_containers_with_the_collector_paused(
    watched: _Watched, build: Any
) -> None:
    # The decoder parses a frame shorter than MANY_CONTAINERS bytes itself (it cannot
    # hold that many brackets) and hands a longer one to scan.parse.
    Decoder("client").decode(build(scan.MANY_CONTAINERS))
    assert watched.collector_on == [False]
    assert gc.isenabled()


def test_the_decoder_parses_a_short_frame_once_with_the_collector_on(
    watched: _Watched,
) -> None:
    decoded = Decoder("client").decode(b'{"v":1,"seq":0,"type":"ack","upTo":1}')
    assert not isinstance(decoded, Invalid)
    assert watched.collector_on == [True]
