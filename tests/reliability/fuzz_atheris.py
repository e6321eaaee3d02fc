"""Coverage-guided fuzzing of the decoder and the sans-I/O cores with atheris (libFuzzer).

Run by hand (atheris installs from PyPI as a prebuilt wheel on Linux x86-64)::

    pip install atheris
    python tests/reliability/fuzz_atheris.py -atheris_runs=200000
    python tests/reliability/fuzz_atheris.py --make-corpus corpus/   # seeds: valid frames
    python tests/reliability/fuzz_atheris.py -max_total_time=600 corpus/

Each input is split by the first byte into a target:

* the client-direction and server-direction decoders, without their safety net (the
  internal ``_decode``: an exception there is a defect the net would hide as
  INVALID_FIELD "could not be read");
* the server's per-connection core (``ServerConnection``) on an open session, fed text
  and binary frames, and the client core (``ClientSession``): the checks of
  ``test_fuzz_decoder.server_core`` and ``client_core`` (no exception; each invalid
  frame answered with exactly one recoverable ``error`` with the decoder's code, or
  reported to the application; the session still works afterwards).

A crash prints the input and stops; libFuzzer writes it to ``crash-<sha1>`` for replay
(``python tests/reliability/fuzz_atheris.py crash-<sha1>``).
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any


def make_corpus(folder: Path) -> None:
    """Seed inputs: valid frames of both directions behind each target byte."""
    from vrt.protocol.codec import encode
    from vrt.protocol.frames import FrameKind, build_frame
    from vrt.protocol.messages import (
        ContextUpdate,
        Hello,
        Interrupt,
        Playback,
        ToolCall,
        ToolResult,
        TurnState,
        UserText,
    )

    frames = [
        encode(UserText(text="hello"), 1),
        encode(Interrupt(epoch=2, reason="user"), 2),
        encode(Playback(item_id="i_1", played_ms=20), 3),
        encode(ToolResult.success("c_1", 1, {"x": [1, 2.5]}), 4),
        encode(ToolResult.failure("c_1", 1, "FAILED", None), 5),
        encode(ContextUpdate(context={"doc": "a"}), 6),
        encode(Hello(session_id="s_1", resume_from=2, auth="t"), 0),
        encode(TurnState(turn_id="t_1", epoch=1, state="idle"), 1),
        encode(ToolCall(call_id="c", name="add", arguments={}, turn_id="t", epoch=1), 2),
        b'{"v":1,"seq":0,"type":"ack","upTo":3}',
        b'{"v":1,"seq":0,"type":"hello","tools":[{"name":"a"}],"capabilities":["x-y"]}',
    ]
    folder.mkdir(parents=True, exist_ok=True)
    for n, frame in enumerate(frames):
        for target in (0, 1):
            (folder / f"decode-{target}-{n}").write_bytes(bytes([target]) + frame)
        text = bytes([2, 0, len(frame) & 0xFF]) + frame  # one text frame for the server core
        (folder / f"server-{n}").write_bytes(text)
    audio = build_frame(FrameKind.INPUT, 7, b"\0\0")
    (folder / "server-audio").write_bytes(bytes([2, 1, len(audio)]) + audio)


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--make-corpus":
        make_corpus(Path(sys.argv[2]))
        return
    atheris: Any = importlib.import_module("atheris")
    # The core checks are those of the hypothesis tests, so both fuzzers hold the cores
    # to one contract; only vrt is instrumented for coverage.
    with atheris.instrument_imports(include=["vrt"]):
        from test_fuzz_decoder import client_core, server_core

        from vrt.protocol.codec import Decoder, Invalid
        from vrt.protocol.errors import ErrorCode

    codes = {
        ErrorCode.MALFORMED,
        ErrorCode.UNSUPPORTED_VERSION,
        ErrorCode.UNKNOWN_TYPE,
        ErrorCode.INVALID_FIELD,
        ErrorCode.LIMIT_EXCEEDED,
    }
    decoders = {"client": Decoder("client"), "server": Decoder("server")}

    def decode(sender: str, data: bytes) -> None:
        result = decoders[sender]._decode(data)  # no safety net: exceptions are defects
        if isinstance(result, Invalid):
            assert result.code in codes, result

    def one_input(data: bytes) -> None:
        provider = atheris.FuzzedDataProvider(data)
        target = provider.ConsumeIntInRange(0, 3)
        if target < 2:
            decode("client" if target == 0 else "server", provider.ConsumeBytes(1 << 16))
            return
        frames = []
        while provider.remaining_bytes():
            binary = provider.ConsumeBool()
            frames.append((binary, provider.ConsumeBytes(provider.ConsumeIntInRange(0, 512))))
        (server_core if target == 2 else client_core)(frames)

    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
