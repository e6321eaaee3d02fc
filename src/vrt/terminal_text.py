"""Text from a server, made safe to show in a terminal.

A server's text, transcripts, error messages and tool results reach ``vrt chat``'s
terminal; a terminal obeys the control sequences in what it prints (clear the screen,
OSC 52 writes to the clipboard, OSC 0 sets the window title, OSC 8 makes hyperlinks,
a carriage return overwrites the line). Everything shown goes through
:func:`printable`, which keeps the text and drops the controls.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["printable"]

# An escape sequence as a whole (ECMA-48): CSI (ESC [ ... final byte), OSC, DCS, SOS,
# PM and APC strings (up to BEL or ESC \, or the end of the text), and two-byte escapes;
# then every C0 control but tab and newline, DEL and the C1 controls (their 8-bit CSI
# and OSC included); then the bidirectional overrides and isolates, which reorder what
# a reader sees (Trojan Source, CVE-2021-42574).
_SEQUENCES: Final = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]?"
    r"|[\x1b\x9b]\][^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[PX^_][^\x1b\x9c]*(?:\x1b\\|\x9c)?"
    r"|\x1b[ -/]*[0-~]?"
)
_CONTROLS: Final = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """``text`` without escape sequences and control characters (tab and newline stay)."""
    return _CONTROLS.sub("", _SEQUENCES.sub("", text))
