"""Piper's espeak-ng phonemisation without piper-tts's reference leak.

piper-tts's C bridge (``piper.espeakbridge.get_phonemes``, 1.8.0) appends each clause's
``(phonemes, terminator, end_of_sentence)`` tuple to its result list without releasing
its own reference (``PyList_Append`` does not steal it), so every clause synthesised
leaves a tuple and its phoneme string behind: about 150 bytes a clause, for the life of
the server (docs/runs/2026-12-05-voice-soak.md). :func:`mend` replaces that function
with one that calls the same espeak-ng (linked into the bridge, whose symbols it exports)
through ctypes, clause by clause as the bridge does, and returns the same list: the
same library and state (the one the bridge initialised and set the voice of), no Python
objects made in C. It does so only when the bridge is seen to leak, so a fixed piper-tts
keeps its own.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Callable
from typing import Any, Final

__all__ = ["leaks", "mend"]

_CHARS_AUTO: Final = 0  # espeakCHARS_AUTO: UTF-8, or Latin-1 where it is not
_PHONEMES_IPA: Final = 0x02  # espeakPHONEMES_IPA
#: The clause bits of espeak-ng's terminator (the bridge's mask).
_CLAUSE_BITS: Final = 0x000FFFFF
_TYPE_SENTENCE: Final = 0x00080000
_TYPE_CLAUSE: Final = 0x00040000
_COMMA_INTONATION: Final = 0x00001000
_QUESTION_INTONATION: Final = 0x00002000
_EXCLAMATION_INTONATION: Final = 0x00003000
#: espeak-ng's clause kinds (its pause and intonation bits) to the punctuation the bridge
#: gives them; any other clause has none.
_TERMINATORS: Final = {
    40 | _TYPE_SENTENCE: ".",
    40 | _QUESTION_INTONATION | _TYPE_SENTENCE: "?",
    45 | _EXCLAMATION_INTONATION | _TYPE_SENTENCE: "!",
    20 | _COMMA_INTONATION | _TYPE_CLAUSE: ",",
    30 | _TYPE_CLAUSE: ":",
    30 | _COMMA_INTONATION | _TYPE_CLAUSE: ";",
}

Phonemes = list[tuple[str, str, bool]]


def leaks(get_phonemes: Callable[[str], Any]) -> bool:
    """Whether ``get_phonemes`` keeps a reference to the clauses it returns: a clause
    held only by the returned list has two references while it is read (the list's and
    ``getrefcount``'s argument)."""
    clauses = get_phonemes("a.")
    return any(sys.getrefcount(clauses[index]) > 2 for index in range(len(clauses)))


def _bridge_phonemes(library_path: str) -> Callable[[str], Phonemes]:
    """``get_phonemes`` of the bridge at ``library_path``, through ctypes."""
    library = ctypes.CDLL(library_path)  # the loaded bridge itself: its espeak-ng state
    text_to_phonemes = library.espeak_TextToPhonemesWithTerminator
    text_to_phonemes.restype = ctypes.c_char_p
    text_to_phonemes.argtypes = [
        ctypes.POINTER(ctypes.c_void_p),
        ctypes.c_int,
        ctypes.c_int,
        ctypes.POINTER(ctypes.c_int),
    ]

    def get_phonemes(text: str) -> Phonemes:
        data = ctypes.create_string_buffer(text.encode())
        # espeak-ng moves the pointer past each clause it reads, to NULL at the end.
        position = ctypes.c_void_p(ctypes.addressof(data))
        terminator = ctypes.c_int()
        clauses: Phonemes = []
        while position.value is not None:
            terminator.value = 0
            phonemes = text_to_phonemes(
                ctypes.byref(position), _CHARS_AUTO, _PHONEMES_IPA, ctypes.byref(terminator)
            )
            kind = terminator.value & _CLAUSE_BITS
            clauses.append(
                (
                    (phonemes or b"").decode(),  # NULL: none (the bridge's None would fail)
                    _TERMINATORS.get(kind, ""),
                    kind & _TYPE_SENTENCE == _TYPE_SENTENCE,
                )
            )
        return clauses

    return get_phonemes


def mend() -> bool:
    """Replace piper-tts's ``espeakbridge.get_phonemes`` when it leaks (see the module
    documentation); whether it was replaced. Call it after the bridge is initialised
    (a Piper voice loaded), with the phonemiser's lock held or no synthesis running."""
    from piper import espeakbridge

    if not leaks(espeakbridge.get_phonemes):
        return False
    path = espeakbridge.__file__
    assert path is not None
    espeakbridge.get_phonemes = _bridge_phonemes(path)  # type: ignore[assignment]
    return True
