"""Cutting a reply's streaming text into clauses to synthesise one at a time.

The first audio of a reply waits only for its first clause, so clauses end early: at
a sentence end (``. ! ?``), at ``; :``, and at a comma or dash once the clause has a few
words; the first clause of a reply sooner (``first_words``), and each clause after it
at twice as many words as the one before at most, so that a clause is synthesised
while the shorter one before it plays (a short first clause followed by a long
sentence would otherwise leave a pause between them). A boundary counts only once the
text after it has started (``3.5`` or ``e.g.`` mid-stream is not cut), or when the
reply's text is complete.

No clause is longer than :data:`LONGEST` characters, whatever the text (a reply's first,
with ``first_words``: :data:`FIRST_LONGEST`): a synthesiser's cost grows faster than its
input's length (Piper held gigabytes for one 2 KB clause), so a clause that would be
longer is cut at its last space within the bound, or, with no space in it, at the bound
itself. Text with no space waits a little before that cut (it
may be a brain's words sent one per chunk, to be joined by its transcript), up to
:data:`_UNSPACED` characters.
"""

from __future__ import annotations

import re
import unicodedata
from contextvars import ContextVar
from typing import Final

__all__ = ["FIRST_LONGEST", "LONGEST", "ClauseSplitter", "first_clause", "speakable"]

#: True while the first clause of a reply is synthesised: the one its user waits for. A
#: synthesiser that sessions share makes it before clauses made ahead of playback
#: (:mod:`vrt.voice.piper`).
first_clause: ContextVar[bool] = ContextVar("first_clause", default=False)

_STRONG: Final = re.compile(r"[.!?;:]+[\"')\]]*\s")
_WEAK: Final = re.compile(r"[,\u2013\u2014]\s")
#: Words a clause needs before a comma ends it (a lone "Well," is not worth a pause).
_WEAK_MIN_WORDS: Final = 4
#: The longest clause, in characters.
LONGEST: Final = 100
#: The longest first clause of a reply when ``first_words`` is set: its synthesis is
#: what the user waits for, and every session's first clauses share one synthesis lane.
FIRST_LONGEST: Final = 40
#: Text with no space is cut once this much of it waits.
_UNSPACED: Final = 2 * LONGEST
_SPACES: Final = re.compile(r"\s+")


def speakable(text: str) -> str:
    """``text`` without control and format characters (each becomes a space; runs of
    spaces become one): a synthesiser is handed letters, not a terminal's escapes, NULs
    or bidirectional overrides."""
    if text.isprintable():
        return text
    return _SPACES.sub(
        " ", "".join(" " if unicodedata.category(c)[0] == "C" else c for c in text)
    ).strip()


def _bounded(
    text: str, end: int | None, *, complete: bool = False, longest: int = LONGEST
) -> int | None:
    """Where a clause of ``text`` ending at ``end`` (None: no boundary yet) ends instead
    when it would be longer than ``longest``."""
    if end is not None and end <= longest:
        return end
    if end is None and len(text) <= longest:
        return None
    space = text.rfind(" ", 0, longest + 1)
    if space > 0:
        return space + 1
    if end is not None or complete or len(text) >= _UNSPACED:
        return longest
    return None


class ClauseSplitter:
    """Feed text as it streams (:meth:`add`), take the clauses it completes.

    ``first_words``: the first clause of a reply also ends at a comma after two words,
    or after this many words when no boundary came, and each later clause after twice
    the words of the one before (0: no such rule). The first clause's audio is what the
    user waits for; the rest is synthesised while it plays."""

    def __init__(self, first_words: int = 0) -> None:
        self._text = ""
        self._first_words = first_words
        #: Words after which the next clause ends when no boundary came (0: none).
        self._cap = first_words
        self._first = True

    def add(self, chunk: str) -> list[str]:
        self._text += chunk
        clauses: list[str] = []
        while (clause := self._next()) is not None:
            clauses.append(clause)
        return clauses

    def finish(self) -> list[str]:
        """The rest of the text, as the last clauses (none when only spaces remain)."""
        rest, self._text = self._text.strip(), ""
        clauses: list[str] = []
        while rest:
            end = _bounded(rest, len(rest), complete=True, longest=self._longest())
            assert end is not None
            clause, rest = rest[:end].strip(), rest[end:].strip()
            if clause:
                clauses.append(clause)
                self._first = False
        return clauses

    def _longest(self) -> int:
        return FIRST_LONGEST if self._first and self._first_words > 0 else LONGEST

    def replace(self, text: str) -> None:
        """Make ``text`` the part not yet taken (the brain's final transcript said more
        exactly what the reply is)."""
        self._text = text

    def _next(self) -> str | None:
        # Boundaries are looked for only where a clause can end (a few characters past
        # LONGEST: a closing quote and the space after), so that a long text costs time
        # in proportion to its length, not its square.
        text = self._text[: LONGEST + 8]
        end = None
        eager = self._first and self._first_words > 0
        strong = _STRONG.search(text)
        if strong is not None:
            end = strong.end()
        else:
            for weak in _WEAK.finditer(text):
                if len(text[: weak.start()].split()) >= (2 if eager else _WEAK_MIN_WORDS):
                    end = weak.end()
                    break
        cap = self._cap
        if end is None and cap > 0:
            words = list(re.finditer(r"\S+\s+", text))
            if len(words) >= cap:
                end = words[cap - 1].end()
        end = _bounded(self._text, end, longest=self._longest())
        if end is None:
            return None
        clause, self._text = self._text[:end].strip(), self._text[end:]
        if clause:
            self._first = False
            self._cap *= 2
        return clause or self._next()
