"""The compiled core (mypyc, docs/performance.md) against its own Python sources: fed the
same random inputs, both builds must give the same outputs, byte for byte.

mypyc runs the core's annotations as checks and conversions, so a typing mistake mypy
lets through (an ``int`` where ``float`` is declared, a value of the wrong class) can
change what only the compiled build does. Here the installed ``vrt.protocol`` (the
compiled wheel) and the sources it was built from, loaded beside it as
``vrt_source.protocol`` (support/source_core.py), are given:

- the same frames to decode, as each receiver (the vectors of examples/, mutated byte by
  byte and member by member, spliced, or random bytes), with the default limits and with
  small ones: the same message (and its re-encoding) or the same error code and text;
- the same binary frames to parse (§8.1);
- the same random run of the in-memory client-server pair (``vrt.protocol.testing``):
  actions of the user, the agent and the network, and raw frames injected into either
  side; the same frames delivered, events told and exceptions raised.

Identifiers are random (ids.py): each run draws them from one counter instead.

``.ci/compiled`` runs this with the wheel installed and ``VRT_SOURCE_TREE`` naming a copy
of the sources; elsewhere it skips.
"""

from __future__ import annotations

import importlib
import json
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any, Final
from unittest import mock

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import vrt.protocol
from support import source_core

EXAMPLES: Final = Path(__file__).resolve().parents[2] / "examples"
SETTINGS: Final = settings(
    max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
#: Limits small enough that random frames reach each of them (§11).
SMALL_LIMITS: Final = {
    "max_frame_bytes": 300,
    "max_depth": 4,
    "max_tools": 1,
    "max_json_values": 24,
    "max_audio_frame_bytes": 64,
}


@pytest.fixture(scope="module")
def builds() -> tuple[ModuleType, ModuleType]:
    """(the installed compiled core, the core of the source tree, interpreted)."""
    if not source_core.compiled(vrt.protocol):
        pytest.skip(
            "the installed vrt.protocol is pure Python: there is no compiled build to hold "
            "to its sources (.ci/compiled runs this against the mypyc wheel)"
        )
    tree = source_core.source_tree()
    if tree is None:
        pytest.skip(
            f"{source_core.SOURCE_TREE} is unset: it names the source tree the compiled "
            "core is held to (.ci/compiled sets it)"
        )
    source = source_core.load(tree)
    assert not source_core.compiled(source)
    # As conftest.py does for the installed core: both check what they encode.
    source.check_encoding(True)
    return vrt.protocol, source


# --- what is compared ------------------------------------------------------------------


def plain(value: Any) -> Any:
    """``value`` in a form both builds' objects compare in: structs by class name and
    fields, enums by class name and value, floats by their repr (so that 1 and 1.0,
    0.0 and -0.0, differ)."""
    if isinstance(value, msgspec.Struct):
        fields = {name: plain(getattr(value, name)) for name in value.__struct_fields__}
        return (type(value).__name__, fields)
    if value is msgspec.UNSET:
        return "UNSET"
    if isinstance(value, (str, bytes, bool, int)) or value is None:
        kind = type(value)
        return value if kind in (str, bytes, bool, int, type(None)) else (kind.__name__, value)
    if isinstance(value, float):
        return ("float", repr(value))
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a NamedTuple
        return (type(value).__name__, [plain(item) for item in value])
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    return (type(value).__name__, repr(value))


def failure(exc: BaseException) -> tuple[str, ...]:
    """An exception by its class, its text and the class of its cause (``from``)."""
    cause = type(exc.__cause__).__name__ if exc.__cause__ is not None else ""
    return ("raised", type(exc).__name__, str(exc), cause)


def decoded(core: ModuleType, result: Any) -> Any:
    """What a decode gave: its error code and text, or the message, its seq and the
    message encoded again."""
    if isinstance(result, core.Invalid):
        return ("invalid", str(result.code), result.reason, result.type)
    try:
        again: Any = core.encode(result.message, result.seq)
    except Exception as exc:
        again = failure(exc)
    return ("decoded", result.seq, plain(result.message), again)


def assert_same(compiled: Any, source: Any) -> None:
    """Equal, or the first place they differ, named."""
    if compiled == source:
        return
    if isinstance(compiled, list) and isinstance(source, list):
        for index, (a, b) in enumerate(zip(compiled, source, strict=False)):
            if a != b:
                raise AssertionError(f"at {index}:\n  compiled: {a!r}\n  source:   {b!r}")
        raise AssertionError(f"lengths differ: compiled {len(compiled)}, source {len(source)}")
    if isinstance(compiled, dict) and isinstance(source, dict):
        for key in compiled.keys() | source.keys():
            if compiled.get(key) != source.get(key):
                assert_same(compiled.get(key), source.get(key))
    raise AssertionError(f"compiled: {compiled!r}\nsource:   {source!r}")


# --- frames ----------------------------------------------------------------------------


def _seeds(sender: str) -> list[str]:
    """The text of every vector ``sender`` sends (tests/test_vectors_decoder.py)."""
    found: list[str] = []
    for path in sorted((EXAMPLES / sender).glob("*.json")):
        for case in json.loads(path.read_text(encoding="utf-8"))["cases"]:
            text = case.get("text")
            if text is None:
                text = json.dumps(case["message"], separators=(",", ":"), ensure_ascii=False)
            found.append(text)
    return found


SEEDS: Final = {"client": _seeds("client"), "server": _seeds("server")}
BINARY_SEEDS: Final = [
    bytes.fromhex(case["hex"])
    for case in json.loads((EXAMPLES / "binary" / "frames.json").read_text())["cases"]
]

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=8,
)


def _nested(depth: int, in_objects: bool) -> Any:
    value: Any = []
    for _ in range(depth):
        value = {"a": value} if in_objects else [value]
    return value


#: Values nested about as deep as the limits, default and small (§11).
deep_values = st.builds(_nested, st.sampled_from([1, 2, 3, 4, 5, 62, 63, 64]), st.booleans())
#: Member names the schemas use, and a few they do not.
names = st.sampled_from(
    [
        *("v", "seq", "type", "text", "epoch", "tools", "name", "input", "output", "extra"),
        *("sessionId", "resumeFrom", "upTo", "itemId", "playedMs", "callId", "x", ""),
    ]
)


def _encoded(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")  # some vectors hold unpaired surrogates


@st.composite
def edited(draw: st.DrawFn, seeds: list[str]) -> bytes:
    """A vector with random bytes replaced, inserted or removed, or cut short."""
    data = bytearray(_encoded(draw(st.sampled_from(seeds))))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data)))
        how = draw(st.sampled_from(["replace", "insert", "delete", "cut"]))
        if how == "replace" and at < len(data):
            data[at] = draw(st.integers(0, 255))
        elif how == "insert":
            data[at:at] = draw(st.sampled_from([b'"', b"\\", b"[", b"]", b"{", b"}", b",", b":"]))
        elif how == "delete":
            del data[at : at + draw(st.integers(1, 8))]
        else:
            del data[at:]
    return bytes(data)


@st.composite
def reworked(draw: st.DrawFn, seeds: list[str]) -> bytes:
    """A vector that is a JSON object with members set to random values or removed,
    or an object repeating a member (§2.2)."""
    text = draw(st.sampled_from(seeds))
    try:
        value = json.loads(text)
    except ValueError:
        return _encoded(text)
    if not isinstance(value, dict):
        return _encoded(text)
    for _ in range(draw(st.integers(1, 3))):
        name = draw(names)
        if draw(st.booleans()):
            value[name] = draw(json_values | deep_values)
        else:
            value.pop(name, None)
    frame = json.dumps(value, separators=(",", ":"), ensure_ascii=draw(st.booleans()))
    if draw(st.booleans()):  # a member given twice
        name = draw(names)
        frame = frame[:-1] + f',"{name}":{json.dumps(draw(json_values))}' + "}"
    return _encoded(frame)


def frames(sender: str) -> st.SearchStrategy[bytes]:
    seeds = SEEDS[sender]
    spliced = st.tuples(st.sampled_from(seeds), st.sampled_from(seeds), st.integers(0, 400))
    return st.one_of(
        st.sampled_from(seeds).map(_encoded),
        edited(seeds),
        reworked(seeds),
        spliced.map(lambda s: _encoded(s[0][: s[2]] + s[1][s[2] :])),
        st.binary(max_size=80),
    )


@settings(SETTINGS)
@given(
    sender=st.sampled_from(["client", "server"]),
    data=st.data(),
    small=st.booleans(),
    as_text=st.booleans(),
)
def test_decoders_agree(
    builds: tuple[ModuleType, ModuleType],
    sender: str,
    data: st.DataObject,
    small: bool,
    as_text: bool,
) -> None:
    raw = data.draw(frames(sender))
    # A str frame, as a driver may pass one; bytes that are not UTF-8 become surrogates.
    frame = raw.decode("utf-8", "surrogateescape") if as_text else raw
    results = []
    for core in builds:
        limits = core.Limits(**SMALL_LIMITS) if small else core.DEFAULT_LIMITS
        results.append(decoded(core, core.Decoder(sender, limits).decode(frame)))
    assert_same(*results)


def audio_frame(core: ModuleType, result: Any) -> Any:
    if isinstance(result, core.Invalid):
        return ("invalid", str(result.code), result.reason, result.type)
    return ("frame", plain(result.kind), result.seq, result.payload)


@settings(SETTINGS, max_examples=500)
@given(
    data=st.one_of(
        st.sampled_from(BINARY_SEEDS),
        st.binary(max_size=12),
        st.tuples(st.sampled_from(BINARY_SEEDS), st.binary(max_size=3)).map(b"".join),
    ),
    receiver=st.sampled_from(["client", "server"]),
    kind=st.sampled_from([1, 2]),
    seq=st.integers(-(2**40), 2**40),
)
def test_audio_frames_agree(
    builds: tuple[ModuleType, ModuleType], data: bytes, receiver: str, kind: int, seq: int
) -> None:
    """§8.1: parsing any bytes, and building a frame of any seq (taken modulo 2^32)."""
    parsed = [audio_frame(core, core.parse_frame(data, receiver)) for core in builds]
    assert_same(*parsed)
    built = [core.build_frame(core.FrameKind(kind), seq, data) for core in builds]
    assert_same(*built)


# --- the in-memory pair ----------------------------------------------------------------

directions = st.sampled_from(["to_server", "to_client"])
#: Values no JSON encoder writes: the core raises LocalProtocolError, from the cause.
unencodable = st.sampled_from([object(), 1j])
#: What a run of the pair is made of: (action, its arguments...).
actions = st.one_of(
    st.tuples(st.just("user_says"), st.text(max_size=12)),
    st.tuples(st.just("agent_says"), st.text(max_size=12)),
    st.tuples(st.just("agent_speaks"), st.integers(1, 3)),
    st.tuples(st.just("agent_calls"), json_values | unencodable),
    st.tuples(st.just("tool_ends"), st.booleans()),
    st.tuples(st.just("user_interrupts"), st.sampled_from(["user", "speech"])),
    st.tuples(st.just("agent_ends_turn")),
    st.tuples(st.just("user_audio"), st.integers(0, 960)),
    st.tuples(st.just("playback"), st.floats(0, 5000) | st.integers(0, 5000)),
    st.tuples(st.just("context"), json_values | unencodable),
    st.tuples(st.just("time_passes"), st.sampled_from([0.0, 0.05, 0.25, 1.0, 20.0])),
    st.tuples(st.just("cut_now"), st.booleans(), st.booleans(), st.booleans()),
    st.tuples(st.just("cut_later"), directions, st.integers(0, 400)),
    st.tuples(st.just("duplicate"), directions),
    st.tuples(st.just("lose"), directions),
    st.tuples(st.just("resume"), st.sampled_from([0.0, 0.01, 0.3])),
    st.tuples(st.just("to_server"), frames("client")),
    st.tuples(st.just("to_client"), frames("server")),
    st.tuples(st.just("audio_to_server"), st.sampled_from(BINARY_SEEDS)),
    st.tuples(st.just("audio_to_client"), st.sampled_from(BINARY_SEEDS)),
)


@contextmanager
def counted_ids() -> Iterator[None]:
    """Identifiers from a counter: the n-th one drawn is the same in both runs."""
    drawn = iter(range(1, 1 << 30))

    def token_urlsafe(nbytes: int | None = None) -> str:
        return f"{next(drawn):022d}"

    with mock.patch.object(secrets, "token_urlsafe", token_urlsafe):
        yield


class Run:
    """One build's pair, driven by a list of actions; what it did, in comparable form."""

    def __init__(self, core: ModuleType, windowed: bool) -> None:
        self.core = core
        config = (
            core.ServerConfig(max_unacked=4, tool_timeout=1.0, heartbeat_timeout=2.0)
            if windowed
            else core.ServerConfig()
        )
        client = core.ClientSession(
            tools=(core.Tool(name="lookup"),), max_kept=4 if windowed else 1024
        )
        testing = importlib.import_module(core.__name__ + ".testing")
        self.pair = testing.Pair(client, config)
        self.answered: set[str] = set()
        self.outcomes: list[Any] = []

    def run(self, steps: list[tuple[Any, ...]]) -> dict[str, Any]:
        with counted_ids():
            self.outcomes.append(self._step(("connect", 0.0)))
            for step in steps:
                self.outcomes.append(self._step(step))
        pair = self.pair
        return {
            "outcomes": self.outcomes,
            "trace": [(plain(at), way, plain(item)) for at, way, item in pair.trace],
            "client_events": plain(pair.client_events),
            "agent_events": plain(pair.agent_events),
            "client_state": pair.client.state.name,
            "sessions": [(key, s.status) for key, s in pair.sessions.items()],
            "now": plain(pair.now),
        }

    def _step(self, step: tuple[Any, ...]) -> Any:
        try:
            return plain(getattr(self, step[0])(*step[1:]))
        except Exception as exc:
            return failure(exc)

    # -- the actions: each returns what the core returned, if anything --

    def connect(self, latency: float) -> None:
        self.pair.connect(latency)

    def resume(self, latency: float) -> None:
        if self.pair.client.state is self.core.ClientState.CONNECTING:
            self.pair.connect(latency)
            self.pair.advance(latency)

    def user_says(self, text: str) -> None:
        self.pair.client.send_text(text, self.pair.now)
        self.pair.settle()

    def _turn(self, state: str) -> str:
        session = self.pair.session
        turn: str | None = session.turn_id if session.response_in_flight else None
        return turn or session.begin_turn(state)

    def agent_says(self, text: str) -> bool:
        sent: bool = self.pair.session.agent_output.send_text(self._turn("speaking"), text)
        self.pair.settle()
        return sent

    def agent_speaks(self, frames: int) -> list[bool]:
        output = self.pair.session.agent_output
        item = output.start_audio(self._turn("speaking"))
        sent = [output.send_audio(item, bytes(480)) for _ in range(frames)]
        self.pair.settle()
        return sent

    def agent_calls(self, arguments: Any) -> tuple[str, bool]:
        calls = self.pair.session.tool_calls
        call_id: str = calls.start(self._turn("acting"), "lookup")
        issued: bool = calls.issue(call_id, arguments, self.pair.now)
        self.pair.settle()
        return call_id, issued

    def tool_ends(self, ok: bool) -> str | None:
        pair = self.pair
        for event in pair.client_events:
            if isinstance(event, self.core.RunTool) and event.call_id not in self.answered:
                self.answered.add(event.call_id)
                pair.client.tool_finished(event.call_id, ok, pair.now, output=event.arguments)
                pair.settle()
                call_id: str = event.call_id
                return call_id
        return None

    def user_interrupts(self, reason: str) -> Any:
        pair = self.pair
        done = (
            pair.client.interrupt("user", pair.now)
            if reason == "user"
            else pair.session.user_started_speaking()
        )
        pair.settle()
        return done

    def agent_ends_turn(self) -> bool:
        session = self.pair.session
        turn = session.turn_id
        ended: bool = turn is not None and session.end_turn(turn)
        self.pair.settle()
        return ended

    def user_audio(self, size: int) -> bool:
        sent: bool = self.pair.client.send_audio(bytes(size), self.pair.now)
        self.pair.settle()
        return sent

    def playback(self, played_ms: float) -> int | None:
        pair = self.pair
        items = [e.item_id for e in pair.client_events if isinstance(e, self.core.AudioStarted)]
        if not items:
            return None
        played: int = pair.client.playback(items[-1], played_ms, pair.now)
        pair.settle()
        return played

    def context(self, value: Any) -> None:
        self.pair.client.update_context(value, self.pair.now)
        self.pair.settle()

    def time_passes(self, seconds: float) -> None:
        self.pair.advance(seconds)

    def cut_now(self, lose: bool, client_notices: bool, server_notices: bool) -> None:
        self.pair.cut(
            lose_in_flight=lose,
            client_notices=client_notices,
            server_notices_after=0.0 if server_notices else None,
        )

    def cut_later(self, direction: str, nbytes: int) -> None:
        self.pair.links[-1].wire(direction).cut_after(nbytes)

    def duplicate(self, direction: str) -> None:
        self.pair.links[-1].wire(direction).duplicate_next()

    def lose(self, direction: str) -> None:
        self.pair.links[-1].wire(direction).lose_next()

    def to_server(self, data: bytes) -> None:
        """A frame the server reads as though the client sent it (§9.1: any bytes)."""
        link = self.pair.links[-1]
        if link.server_open:
            link.server.receive_text(data, self.pair.now)
            self.pair.settle()

    def audio_to_server(self, data: bytes) -> None:
        link = self.pair.links[-1]
        if link.server_open:
            link.server.receive_binary(data, self.pair.now)
            self.pair.settle()

    def to_client(self, data: bytes) -> None:
        self.pair.client.receive_text(data, self.pair.now)
        self.pair.settle()

    def audio_to_client(self, data: bytes) -> None:
        self.pair.client.receive_binary(data, self.pair.now)
        self.pair.settle()


@settings(SETTINGS, max_examples=800)
@given(steps=st.lists(actions, min_size=10, max_size=50), windowed=st.booleans())
def test_pairs_agree(
    builds: tuple[ModuleType, ModuleType], steps: list[tuple[Any, ...]], windowed: bool
) -> None:
    compiled, source = (Run(core, windowed).run(steps) for core in builds)
    assert_same(compiled, source)
