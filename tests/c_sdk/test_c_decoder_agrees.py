"""The C decoder against the Python one (outside truth for each other): every server
vector of examples/ and 30 seeded mutations of each (bytes deleted, inserted, replaced
with JSON's punctuation, digits, letters, escapes, a NUL, a non-ASCII letter) get the same
outcome from both: valid, or the same §9.1 code (§9.1, examples/README.md)."""

from __future__ import annotations

import json
import random
import struct
import subprocess
from collections import Counter
from pathlib import Path

from vrt.protocol.codec import Invalid, shared_decoder

ROOT = Path(__file__).resolve().parents[2]
ALPHABET = list('{}[]:,"\\ 0123456789.eE+-truefalsnl\u00e9\u0000\n\tabcvseqtypeidX')


def frames() -> list[str]:
    texts = []
    for path in sorted((ROOT / "examples" / "server").glob("*.json")):
        for case in json.loads(path.read_text(encoding="utf-8"))["cases"]:
            if "text" in case:
                texts.append(case["text"])
            else:
                compact = json.dumps(case["message"], separators=(",", ":"), ensure_ascii=False)
                texts.append(compact)
    rng = random.Random(1)
    mutated = []
    for text in texts:
        for _ in range(30):
            chars = list(text)
            for _ in range(rng.randint(1, 3)):
                op, at = rng.random(), rng.randrange(len(chars) + 1)
                if op < 0.3 and chars:
                    del chars[min(at, len(chars) - 1)]
                elif op < 0.6:
                    chars.insert(at, rng.choice(ALPHABET))
                elif chars:
                    chars[min(at, len(chars) - 1)] = rng.choice(ALPHABET)
            mutated.append("".join(chars))
    return texts + mutated


def test_c_and_python_decoders_agree(build: Path) -> None:
    cases = frames()
    records = b"".join(struct.pack(">I", len(f.encode())) + f.encode() for f in cases)
    command = [str(build / "vrt_decode_stdin")]
    result = subprocess.run(command, input=records, capture_output=True, timeout=60, check=True)
    c_outcomes = result.stdout.decode().splitlines()
    assert len(c_outcomes) == len(cases)
    decoder = shared_decoder("server")
    python_outcomes = []
    for frame in cases:
        decoded = decoder.decode(frame)
        python_outcomes.append(decoded.code.value if isinstance(decoded, Invalid) else "valid")
    # Not vacuous: the mutations reach every outcome.
    seen = Counter(python_outcomes)
    for outcome in ("valid", "MALFORMED", "UNSUPPORTED_VERSION", "UNKNOWN_TYPE", "INVALID_FIELD"):
        assert seen[outcome] > 50, seen
    disagree = [
        (frame, py, c)
        for frame, py, c in zip(cases, python_outcomes, c_outcomes, strict=True)
        if py != c
    ]
    assert disagree == [], disagree[:10]
