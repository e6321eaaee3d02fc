"""The browser SDK's decoder against the Python decoder (``vrt.protocol.codec``), on
thousands of server frames neither was written for: every server vector, and each
mutated member by member (removed, retyped, out of range, duplicated, nested deeper,
escaped). Both must give the same §9.1 outcome for every frame."""

from __future__ import annotations

import array
import asyncio
import json
import random
from collections.abc import Iterator
from typing import Any

from support.browser import ROOT, WEB
from vrt.audio import pcm16_to_pcmu
from vrt.protocol.codec import Invalid, decode_server

ODD_VALUES: list[Any] = [
    None, True, False, 0, -1, 1, 1.5, 4294967295, 4294967296, "", "x", "x" * 257,
    "é" * 256, [], {}, ["a"], {"k": None}, "Hello", "tool-stream-v1\n", "A_B", "a_b",
]  # fmt: skip
SPELLINGS = ["1.0", "1e0", "10e-1", "-0", "1E+0", "0.1e1", "1e400", '"\\ud800"', '"\\u0031"']


def _base_frames() -> Iterator[str]:
    for path in sorted((ROOT / "examples" / "server").glob("*.json")):
        for case in json.loads(path.read_text())["cases"]:
            yield case["text"] if "text" in case else json.dumps(case["message"])


def _mutations(text: str, rng: random.Random) -> Iterator[str]:
    yield text
    try:
        value = json.loads(text)
    except ValueError:
        return
    if not isinstance(value, dict):
        return
    for key in list(value):
        rest = {k: v for k, v in value.items() if k != key}
        yield json.dumps(rest)
        for odd in rng.sample(ODD_VALUES, 6):
            yield json.dumps({**value, key: odd})
        body = json.dumps(rest)[1:-1]
        for spelling in rng.sample(SPELLINGS, 2):
            yield "{" + body + ("," if body else "") + f'"{key}":{spelling}' + "}"
        if body:  # the member twice, first or last, with its value or another
            yield (
                "{"
                + f'"{key}":{json.dumps(value[key])},'
                + body
                + f',"{key}":{json.dumps(value[key])}'
                + "}"
            )
        escaped = "".join(f"\\u{ord(c):04x}" for c in key)
        yield "{" + body + ("," if body else "") + f'"{escaped}":{json.dumps(value[key])}' + "}"
        nested: Any = value[key]
        for _ in range(rng.choice([1, 70])):
            nested = [nested]
        yield json.dumps({**value, key: nested})
    yield json.dumps({**value, "x-unknown": {"deep": [1, {"k": "v"}]}, "__proto__": 1})


def _python(text: str) -> str:
    outcome = decode_server(text.encode("utf-8", "surrogatepass"))
    return outcome.code.value if isinstance(outcome, Invalid) else "valid"


async def test_typescript_and_python_decoders_agree() -> None:
    rng = random.Random(14)
    corpus = sorted({m for text in _base_frames() for m in _mutations(text, rng)})
    assert len(corpus) > 3000
    process = await asyncio.create_subprocess_exec(
        "node", str(WEB / "test" / "classify.mjs"),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    stdin = "\n".join(json.dumps(text) for text in corpus).encode() + b"\n"
    stdout, _ = await asyncio.wait_for(process.communicate(stdin), 120)
    typescript = stdout.decode().split()
    assert len(typescript) == len(corpus)
    differences = [
        (text, ts, py)
        for text, ts in zip(corpus, typescript, strict=True)
        if ts != (py := _python(text))
    ]
    assert not differences, f"{len(differences)} of {len(corpus)} differ, e.g. {differences[:8]}"


async def test_mu_law_matches_vrt_audio_for_every_sample() -> None:
    process = await asyncio.create_subprocess_exec(
        "node", str(WEB / "test" / "mulaw.mjs"), stdout=asyncio.subprocess.PIPE
    )
    stdout, _ = await asyncio.wait_for(process.communicate(), 60)
    every_sample = array.array("h", range(-32768, 32768)).tobytes()
    assert bytes.fromhex(stdout.decode()) == pcm16_to_pcmu(every_sample)
