"""Hypothesis against a live server: bad frames over a real socket (§9.1, §11).

One server runs, with its clients, on an event loop in a thread of its own for the
whole module; Hypothesis drives it from the test thread. A fuzzed session receives, one
example at a time, arbitrary text frames, arbitrary binary frames, valid messages with
one member mutated, deep nesting and huge numbers; every frame that is invalid must be
answered by exactly one ``error`` with the code the §9.1 classification gives (checked
against the decoder and, where the mutation decides it, against the rule itself),
``recoverable: true``, and the connection must stay open. Meanwhile a second session
pings every few milliseconds: it must keep being answered (its round trips are printed). At the
end both sessions still answer ``echo``.

The invalid-frame rate limit and the read budget are lifted for the fuzzed server
(they are tested in test_security.py and tests/server/test_hardening.py). CI: 300
examples per strategy; ``VRT_LONG=1`` adds 3,000 per strategy.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import threading
import time
from collections.abc import Coroutine, Iterator
from typing import Any, Final, TypeVar

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from support import RawClient, RunningServer, chunks, is_idle, messages, start_server
from vrt.protocol.codec import Decoder, Invalid
from vrt.protocol.frames import parse_frame
from vrt.protocol.messages import Error
from vrt.protocol.schemas import message_schemas
from vrt.protocol.server import ServerConfig

T = TypeVar("T")

CI: Final = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)
LONG: Final = settings(CI, max_examples=3000)
DECODER: Final = Decoder("client")
AUDIO_LIMIT: Final = 1 << 16


class Env:
    """The server, the fuzzed session and the bystander, on the loop of one thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.rtts: list[float] = []
        self.frames = 0
        self.server: RunningServer
        self.fuzzed: RawClient
        self.bystander: RawClient
        self._pinger: asyncio.Task[None]

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    async def start(self) -> None:
        # Classification, not rates, is judged here: the invalid-frame limit and the read
        # budgets, audio's by its duration included, are lifted (test_security.py,
        # test_hardening.py and tests/rules test them).
        unlimited = float(1 << 40)
        config = ServerConfig(
            max_invalid=10**9,
            frame_rate=unlimited,
            frame_burst=unlimited,
            byte_rate=unlimited,
            byte_burst=unlimited,
            audio_rate=unlimited,
            audio_burst=unlimited,
        )
        self.server = await start_server(config=config)
        self.fuzzed = await RawClient.connect(self.server.url, auto_ack=True)
        await self.fuzzed.hello()
        self.bystander = await RawClient.connect(self.server.url, auto_ack=True)
        await self.bystander.hello()
        self._pinger = asyncio.get_running_loop().create_task(self._ping())

    async def _ping(self) -> None:
        while True:
            began = time.perf_counter()
            await self.bystander.barrier(5.0)
            self.rtts.append(time.perf_counter() - began)
            await asyncio.sleep(0.002)

    async def exchange(self, frame: str | bytes) -> list[Error]:
        """Send one frame on the fuzzed session; the errors it got before a pong."""
        self.frames += 1
        await self.fuzzed.send(frame)
        items = await self.fuzzed.barrier(10.0)
        return [m for m in messages(items) if isinstance(m, Error)]

    async def stop_pinger(self) -> None:
        self._pinger.cancel()
        await asyncio.gather(self._pinger, return_exceptions=True)

    async def stop(self) -> None:
        await self.stop_pinger()
        await self.fuzzed.close()
        await self.bystander.close()
        await self.server.close()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


@pytest.fixture(scope="module")
def env() -> Iterator[Env]:
    env = Env()
    env.run(env.start())
    yield env
    try:
        env.run(env.stop_pinger())
        # The fuzzed session still works, and so does the bystander.
        for client in (env.fuzzed, env.bystander):
            assert client.close_info is None, client.format_log()

            async def echo(c: RawClient = client) -> list[str]:
                await c.text("echo still ok")
                return chunks(await c.until(is_idle, 5.0))

            # Raw clients count their own seq; the fuzzed session never had a frame of
            # its own handled, so seq 1 is next for both.
            assert env.run(echo()) == ["still", " ok"]
        rtts = sorted(env.rtts)
        print(
            f"\nfuzz server: {env.frames} bad frames; bystander: {len(rtts)} round trips, "
            f"median {statistics.median(rtts) * 1000:.2f} ms, "
            f"p99 {rtts[int(len(rtts) * 0.99)] * 1000:.2f} ms, max {rtts[-1] * 1000:.2f} ms"
        )
        # The bystander kept being answered; how fast is a benchmark's to judge.
        assert rtts, "the bystander got no answer while the fuzzing ran"
    finally:
        env.run(env.stop())
        env.close()


def expected_code(frame: str | bytes) -> str | None:
    """The code §9.1/§11 gives ``frame``; None when the frame is valid."""
    if isinstance(frame, bytes):
        if len(frame) > AUDIO_LIMIT:
            return "LIMIT_EXCEEDED"
        parsed = parse_frame(frame, "server")
        return parsed.code if isinstance(parsed, Invalid) else None
    decoded = DECODER.decode(frame)
    return decoded.code if isinstance(decoded, Invalid) else None


def check(env: Env, frame: str | bytes, rule: str | None = None) -> None:
    code = expected_code(frame)
    assume(code is not None)
    if rule is not None:
        assert code == rule, (frame, code)
    errors = env.run(env.exchange(frame))
    assert [(e.code, e.recoverable) for e in errors] == [(code, True)], (frame, errors)
    assert env.fuzzed.close_info is None


# --- strategies ------------------------------------------------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner,
                                                                   max_size=4),
    max_leaves=10,
)  # fmt: skip

#: Valid client messages (seq 1: this session's next) to mutate.
TEMPLATES: Final[list[dict[str, Any]]] = [
    {"v": 1, "seq": 1, "type": "text", "text": "hi"},
    {"v": 1, "seq": 1, "type": "interrupt", "epoch": 3, "reason": "user"},
    {"v": 1, "seq": 1, "type": "playback", "itemId": "i_1", "playedMs": 20},
    {"v": 1, "seq": 1, "type": "tool.result", "callId": "c_1", "epoch": 1, "ok": True,
     "output": None},
    {"v": 1, "seq": 1, "type": "tool.result", "callId": "c_1", "epoch": 1, "ok": False,
     "code": "FAILED", "message": None},
    {"v": 1, "seq": 1, "type": "context", "context": {"doc": "a"}},
    {"v": 1, "seq": 0, "type": "ack", "upTo": 0},
    {"v": 1, "seq": 0, "type": "ping"},
    {"v": 1, "seq": 0, "type": "hello", "tools": [{"name": "add"}],
     "input": {"encoding": "pcm16", "sampleRate": 24000}},
]  # fmt: skip


CLIENT_TYPES: Final = frozenset(message_schemas()["client"])


def rule_for(message: dict[str, Any], name: str) -> str | None:
    """The §9.1 rule a change of member ``name`` decides by itself, if any (v and type
    are checked before anything else, in that order)."""
    if name == "v":
        v = message.get("v")
        number = "v" in message and type(v) in (int, float) and v == 1
        return None if number else "UNSUPPORTED_VERSION"
    if name == "type":
        type_ = message.get("type")
        return None if isinstance(type_, str) and type_ in CLIENT_TYPES else "UNKNOWN_TYPE"
    return None


@st.composite
def mutated(draw: st.DrawFn) -> tuple[str, str | None]:
    """A template with one member replaced, removed or added; with the rule the
    mutation decides, when it decides one."""
    message = dict(draw(st.sampled_from(TEMPLATES)))
    name = draw(st.sampled_from(sorted(message)) | st.text(max_size=8))
    how = draw(st.sampled_from(["replace", "delete", "number"]))
    if how == "delete":
        message.pop(name, None)
    elif how == "number":
        message[name] = draw(
            st.sampled_from([10**40, -(10**40), 2**64, 2**32, -1, 1.5, 0.0, 1e308, True])
        )
    else:
        message[name] = draw(json_values)
    text = json.dumps(message, separators=(",", ":"))
    return text, ("MALFORMED" if not strict_json(text) else rule_for(message, name))


def strict_json(text: str) -> bool:
    """Whether ``text`` is JSON (json.dumps writes Infinity for an infinite float)."""

    def refuse(name: str) -> Any:
        raise ValueError(name)

    try:
        json.loads(text, parse_constant=refuse)
    except ValueError:
        return False
    return True


@st.composite
def huge_numbers(draw: st.DrawFn) -> tuple[str, str | None]:
    """A template with a number beyond the double range, or 10**k, spliced into one place."""
    message = dict(draw(st.sampled_from(TEMPLATES)))
    name = draw(st.sampled_from(sorted(message)))
    number = draw(st.sampled_from(["1e400", "-1e400", "1" + "0" * 400, "123456789" * 40,
                                   "1e-400", "4294967296", "1.0e0", "-0"]))  # fmt: skip
    message[name] = "@@"
    text = json.dumps(message, separators=(",", ":")).replace('"@@"', number)
    message[name] = json.loads(number)
    return text, rule_for(message, name)


@st.composite
def deep(draw: st.DrawFn) -> tuple[str, str | None]:
    levels = draw(st.integers(64, 5000))
    opener, closer = draw(st.sampled_from([("[", "]"), ('{"a":', "}")]))
    inner = opener * levels + "0" + closer * levels
    where = draw(st.sampled_from(["context", "extra"]))
    if where == "context":
        text = '{"v":1,"seq":1,"type":"context","context":' + inner + "}"
    else:
        text = '{"v":1,"seq":0,"type":"ping","x":' + inner + "}"
    return text, "LIMIT_EXCEEDED"


binary_frames = (
    st.binary(max_size=4)
    | st.builds(lambda k, rest: bytes([k]) + rest, st.integers(0, 255).filter(lambda k: k != 1),
                st.binary(min_size=4, max_size=64))
)  # fmt: skip


# --- the tests -----------------------------------------------------------------------


def arbitrary_text(env: Env, text: str) -> None:
    check(env, text)


def arbitrary_binary(env: Env, data: bytes) -> None:
    check(env, data, "MALFORMED")


def one_member_mutated(env: Env, case: tuple[str, str | None]) -> None:
    check(env, *case)


def structure(env: Env, case: tuple[str, str | None]) -> None:
    check(env, *case)


@CI
@given(text=st.text(max_size=200))
def test_arbitrary_text_frames(env: Env, text: str) -> None:
    arbitrary_text(env, text)


@CI
@given(data=binary_frames)
def test_arbitrary_binary_frames(env: Env, data: bytes) -> None:
    arbitrary_binary(env, data)


@CI
@given(case=mutated())
def test_valid_messages_with_one_member_mutated(env: Env, case: tuple[str, str | None]) -> None:
    one_member_mutated(env, case)


@CI
@given(case=deep() | huge_numbers())
def test_deep_nesting_and_huge_numbers(env: Env, case: tuple[str, str | None]) -> None:
    structure(env, case)


def test_oversized_frames(env: Env) -> None:
    """§11: a control message over 1 MiB, or an audio frame over 64 KiB: LIMIT_EXCEEDED,
    recoverable, the connection open."""
    for size in (1 << 20, (1 << 20) + 4096, 3 << 20):
        text = '{"v":1,"seq":1,"type":"text","text":"' + "x" * size + '"}'
        errors = env.run(env.exchange(text))
        assert [(e.code, e.recoverable) for e in errors] == [("LIMIT_EXCEEDED", True)]
    for size in (AUDIO_LIMIT + 1, 1 << 20):
        errors = env.run(env.exchange(b"\x01\x00\x00\x00\x00" + bytes(size)))
        assert [(e.code, e.recoverable) for e in errors] == [("LIMIT_EXCEEDED", True)]


def test_duplicate_hello_on_the_fuzzed_session(env: Env) -> None:
    """§5.1: a hello on an open connection: DUPLICATE_HELLO, recoverable."""
    errors = env.run(env.exchange('{"v":1,"seq":0,"type":"hello"}'))
    assert [(e.code, e.recoverable) for e in errors] == [("DUPLICATE_HELLO", True)]


@pytest.mark.slow
@LONG
@given(text=st.text(max_size=400))
def test_arbitrary_text_frames_long(env: Env, text: str) -> None:
    arbitrary_text(env, text)


@pytest.mark.slow
@LONG
@given(data=binary_frames)
def test_arbitrary_binary_frames_long(env: Env, data: bytes) -> None:
    arbitrary_binary(env, data)


@pytest.mark.slow
@LONG
@given(case=mutated())
def test_valid_messages_with_one_member_mutated_long(
    env: Env, case: tuple[str, str | None]
) -> None:
    one_member_mutated(env, case)


@pytest.mark.slow
@LONG
@given(case=deep() | huge_numbers())
def test_deep_nesting_and_huge_numbers_long(env: Env, case: tuple[str, str | None]) -> None:
    structure(env, case)


async def test_text_that_is_not_utf8_closes_1007_and_the_session_resumes() -> None:
    """messages.md: "A text frame that is not valid UTF-8 fails the WebSocket connection
    with close code 1007; the session is parked and stays resumable"."""
    server = await start_server()
    try:
        client = await RawClient.connect(server.url)
        session_id = (await client.hello()).session_id
        # websockets refuses to send invalid UTF-8 as text; write the frame ourselves.
        payload = b'{"v":1,"seq":1,"type":"text","text":"\xff"}'
        mask = b"\x00\x00\x00\x00"
        client.ws.transport.write(bytes([0x81, 0x80 | len(payload)]) + mask + payload)
        assert (await client.closed(5.0))[0] == 1007
        again = await RawClient.connect(server.url)
        ready = await again.hello(sessionId=session_id)
        assert ready.resumed_from == 0
        await again.text("echo back")
        assert chunks(await again.until(is_idle, 5.0)) == ["back"]
        await again.close()
    finally:
        await server.close()
