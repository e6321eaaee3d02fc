"""Runs the language-neutral vectors of examples/ through this implementation.

Text vectors: examples/client/*.json and examples/server/*.json, each file holding
frames one ``sender`` sent; the frame is the case's ``text``, or the compact JSON of its
``message``. A valid case must decode, and survive encode -> decode unchanged; an
invalid case must give exactly its ``error`` (§9.1). Binary vectors:
examples/binary/frames.json through ``parse_frame`` (§8.1).

A missing or empty examples/ fails here rather than skipping: no vectors means nothing
was checked.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

import pytest

from vrt.protocol import Decoded, Decoder, Invalid, encode
from vrt.protocol.frames import AudioFrame, FrameKind, build_frame, parse_frame
from vrt.protocol.schemas import Sender

EXAMPLES: Final = Path(__file__).resolve().parents[1] / "examples"
SENDERS: Final[tuple[Sender, Sender]] = ("client", "server")

Case = dict[str, Any]


def load_text_cases(root: Path) -> list[tuple[Sender, Case]]:
    """(sender, case) for every case of root/client/*.json and root/server/*.json."""
    found: list[tuple[Sender, Case]] = []
    for sender in SENDERS:
        for path in sorted((root / sender).glob("*.json")):
            document = json.loads(path.read_text(encoding="utf-8"))
            assert document["sender"] == sender, f"{path}: sender is {document['sender']!r}"
            found.extend((sender, case) for case in document["cases"])
    return found


def load_binary_cases(root: Path) -> list[Case]:
    path = root / "binary" / "frames.json"
    if not path.is_file():
        return []
    cases: list[Case] = json.loads(path.read_text(encoding="utf-8"))["cases"]
    return cases


def frame_text(case: Case) -> str:
    """The frame a case stands for: its exact text, or its message as compact JSON."""
    if "text" in case:
        text: str = case["text"]
        return text
    return json.dumps(case["message"], separators=(",", ":"), ensure_ascii=False)


def check_text_case(decoder: Decoder, case: Case) -> None:
    """The whole check of one text vector; raises AssertionError on a disagreement."""
    text = frame_text(case)
    result = decoder.decode(text)
    if not case["valid"]:
        assert isinstance(result, Invalid), (
            f"{case['id']}: expected {case['error']}, decoded {result!r}"
        )
        assert result.code == case["error"], (
            f"{case['id']}: expected {case['error']}, got {result.code}: {result.reason}"
        )
        assert result.reason, "an Invalid always says why"
        return
    assert isinstance(result, Decoded), f"{case['id']}: expected valid, got {result!r}"
    assert json.loads(text)["type"] == result.message.TYPE
    # The same frame as bytes decodes the same.
    assert decoder.decode(text.encode()) == result
    # Round trip: what this side would pass on reads back as the same message...
    data = encode(result.message, result.seq)
    again = decoder.decode(data)
    assert isinstance(again, Decoded), f"{case['id']}: re-encoded frame refused: {again!r}"
    assert again.seq == result.seq
    assert again.message == result.message
    # ...and as the same JSON value, unknown members included (§2.2).
    assert json.loads(data) == json.loads(text)


def check_binary_case(case: Case) -> None:
    data = bytes.fromhex(case["hex"])
    result = parse_frame(data, case["receiver"])
    if not case["valid"]:
        assert isinstance(result, Invalid), f"{case['id']}: expected MALFORMED, got {result!r}"
        assert result.code == case["error"]
        return
    assert isinstance(result, AudioFrame), f"{case['id']}: expected a frame, got {result!r}"
    assert (result.kind, result.seq, result.payload.hex()) == (
        case["kind"],
        case["seq"],
        case["payloadHex"],
    )
    # Building the same frame gives the vector's bytes exactly.
    assert build_frame(FrameKind(case["kind"]), case["seq"], result.payload) == data


TEXT_CASES: Final = load_text_cases(EXAMPLES)
BINARY_CASES: Final = load_binary_cases(EXAMPLES)
DECODERS: Final = {sender: Decoder(sender) for sender in SENDERS}


class TestVectorsExist:
    """An empty examples/ must fail, not skip."""

    @pytest.mark.parametrize("sender", SENDERS)
    def test_text_vectors_found(self, sender: Sender) -> None:
        count = sum(1 for s, _ in TEXT_CASES if s == sender)
        assert count > 0, f"no {sender} vectors in {EXAMPLES / sender}"

    def test_both_outcomes_covered(self) -> None:
        for sender in SENDERS:
            outcomes = {case["valid"] for s, case in TEXT_CASES if s == sender}
            assert outcomes == {True, False}, sender
        codes = {case["error"] for _, case in TEXT_CASES if not case["valid"]}
        assert codes == {"MALFORMED", "UNSUPPORTED_VERSION", "UNKNOWN_TYPE", "INVALID_FIELD"}

    def test_binary_vectors_found(self) -> None:
        assert BINARY_CASES, f"no binary vectors in {EXAMPLES / 'binary' / 'frames.json'}"
        assert {c["valid"] for c in BINARY_CASES} == {True, False}

    def test_case_ids_are_unique(self) -> None:
        ids = [case["id"] for _, case in TEXT_CASES] + [c["id"] for c in BINARY_CASES]
        assert len(ids) == len(set(ids))


@pytest.mark.parametrize(("sender", "case"), TEXT_CASES, ids=[case["id"] for _, case in TEXT_CASES])
def test_text_vector(sender: Sender, case: Case) -> None:
    check_text_case(DECODERS[sender], case)


@pytest.mark.parametrize("case", BINARY_CASES, ids=[case["id"] for case in BINARY_CASES])
def test_binary_vector(case: Case) -> None:
    check_binary_case(case)


class TestRunner:
    """The runner itself, on hand-made vectors: it must catch a wrong decoder."""

    def write(self, root: Path, sender: str, cases: list[Case]) -> None:
        (root / sender).mkdir(parents=True)
        document = {"description": "hand-made", "sender": sender, "cases": cases}
        (root / sender / "t.json").write_text(json.dumps(document), encoding="utf-8")

    def test_loads_and_checks_hand_made_vectors(self, tmp_path: Path) -> None:
        self.write(
            tmp_path,
            "client",
            [
                {"id": "a", "message": {"v": 1, "seq": 0, "type": "ping", "k": [1]}, "valid": True},
                {"id": "b", "text": '{"v":1.0,"seq":1,"type":"text","text":"x"}', "valid": True},
                {"id": "c", "text": "[]", "valid": False, "error": "MALFORMED"},
                {
                    "id": "d",
                    "message": {"v": 1, "seq": 0, "type": "pong"},
                    "valid": False,
                    "error": "UNKNOWN_TYPE",
                },
            ],
        )
        cases = load_text_cases(tmp_path)
        assert [c["id"] for _, c in cases] == ["a", "b", "c", "d"]
        for sender, case in cases:
            check_text_case(DECODERS[sender], case)
        assert load_text_cases(tmp_path / "missing") == []
        assert load_binary_cases(tmp_path) == []

    @pytest.mark.parametrize(
        "case",
        [
            {"id": "w1", "text": "[]", "valid": True},
            {"id": "w2", "text": "[]", "valid": False, "error": "UNKNOWN_TYPE"},
            {
                "id": "w3",
                "message": {"v": 1, "seq": 0, "type": "ping"},
                "valid": False,
                "error": "INVALID_FIELD",
            },
            {"id": "w4", "text": '{"v":1,"seq":0,"type":"pong"}', "valid": True},
        ],
    )
    def test_a_wrong_expectation_fails(self, case: Case) -> None:
        with pytest.raises(AssertionError):
            check_text_case(DECODERS["client"], case)

    def test_a_wrong_binary_expectation_fails(self) -> None:
        good = {
            "id": "b",
            "receiver": "server",
            "hex": "0100000001ff",
            "valid": True,
            "kind": 1,
            "seq": 1,
            "payloadHex": "ff",
        }
        check_binary_case(good)
        with pytest.raises(AssertionError):
            check_binary_case(good | {"seq": 2})
        with pytest.raises(AssertionError):
            check_binary_case(good | {"receiver": "client"})
