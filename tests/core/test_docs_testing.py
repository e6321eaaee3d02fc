"""The example of docs/testing.md runs as written (vrt.protocol.testing's usage)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

DOC: Final = Path(__file__).resolve().parents[2] / "docs" / "testing.md"


def test_the_pair_example_runs() -> None:
    """§4.1, §5.4, §7.2 as the example shows them: one answer per call, the text sent
    while the connection was down delivered once after the resume."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## Using `vrt.protocol.testing`", 1)[1]
    blocks = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    assert blocks, "docs/testing.md has no Python example"
    exec(compile(blocks[0], str(DOC), "exec"), {})
