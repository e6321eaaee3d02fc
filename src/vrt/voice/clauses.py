"""Cutting a reply's streaming text into clauses to synthesise one at a time.

The first audio of a reply waits only for its first clause, so clauses end early: at
a sentence end (``. ! ?``), at ``; :``, and at a comma or dash once the clause has a few
words; the first clause of a reply sooner (``first_words``), and each clause after it
at twice as many words as the one before at most, so that a clause is synthesised
while the shorter one before it plays (a short first clause followed by a long
sentence would otherwise leave a pause between them). A clause that grows too
long without any of them is cut at a space (text with no space waits: it may be a
brain's words sent one per chunk, to be joined by its transcript). A boundary
counts only once the text after it has started (``3.5`` or ``e.g.`` mid-stream is not
cut), or when the reply's text is complete.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["ClauseSplitter"]

_STRONG: Final = re.compile(r"[.!?;:]+[\"')\]]*\s")
_WEAK: Final = re.compile(r"[,\u2013\u2014]\s")
#: Words a clause needs before a comma ends it (a lone "Well," is not worth a pause).
_WEAK_MIN_WORDS: Final = 4
#: Characters after which a clause with no boundary is cut at its last space.
_LONGEST: Final = 100


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
        """The rest of the text, as the last clause (none when only spaces remain)."""
        rest, self._text = self._text.strip(), ""
        return [rest] if rest else []

    def replace(self, text: str) -> None:
        """Make ``text`` the part not yet taken (the brain's final transcript said more
        exactly what the reply is)."""
        self._text = text

    def _next(self) -> str | None:
        text = self._text
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
        if end is None and len(text) > _LONGEST:
            space = text.rfind(" ", 0, _LONGEST)
            if space > 0:  # text with no space at all waits (a brain's word-per-chunk text)
                end = space + 1
        if end is None:
            return None
        clause, self._text = text[:end].strip(), text[end:]
        if clause:
            self._first = False
            self._cap *= 2
        return clause or self._next()
