"""Piper's espeak-ng phonemisation without the leaks of piper-tts's bridge.

piper-tts 1.8.0 phonemises each clause it synthesises with two calls into its C bridge
(``piper.espeakbridge``, espeak-ng linked in), and both keep memory for good
(docs/runs/2026-12-05-voice-soak-2.md):

* ``set_voice(name)``, called before every clause: espeak-ng's voice change queues a
  copy of the voice (1,360 bytes here) for its wave generator, which frees it only when
  it makes speech, and phonemisation makes none (reported against espeak-ng's
  ``DoVoiceChange``, echogarden-project/echogarden#64). :func:`mend` lets the call
  through only when the voice differs from the one the bridge last set: setting the
  voice it has changes nothing but the memory.
* ``get_phonemes(text)`` appends each clause's ``(phonemes, terminator,
  end_of_sentence)`` tuple to its result list without releasing its own reference
  (``PyList_Append`` does not steal it): about 150 bytes a clause. When the bridge is
  seen to do so, :func:`mend` replaces it with one that calls the same espeak-ng (whose
  symbols the bridge exports) through ctypes, clause by clause as the bridge does, and
  returns the same list: the same library and state, no Python objects made in C. A
  fixed piper-tts keeps its own.
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


class _VoiceOnce:
    """``set_voice`` that asks the bridge only for a voice it has not set last;
    ``initialize`` forgets it (espeak-ng starts again without one)."""

    def __init__(self, set_voice: Callable[[str], None], initialize: Callable[[str], None]):
        self.set_voice = set_voice
        self.initialize_bridge = initialize
        self.current: str | None = None

    def __call__(self, voice: str) -> None:
        if voice != self.current:
            self.set_voice(voice)  # an unknown voice raises: nothing is set
            self.current = voice

    def initialize(self, data_dir: str) -> None:
        self.current = None
        self.initialize_bridge(data_dir)


def mend() -> None:
    """Mend piper-tts's bridge (see the module documentation). Call it after the bridge
    is initialised (a Piper voice loaded), with the phonemiser's lock held or no
    synthesis running; again, it changes nothing."""
    from piper import espeakbridge

    if not isinstance(espeakbridge.set_voice, _VoiceOnce):
        once = _VoiceOnce(espeakbridge.set_voice, espeakbridge.initialize)
        espeakbridge.set_voice = once
        espeakbridge.initialize = once.initialize
    if leaks(espeakbridge.get_phonemes):
        path = espeakbridge.__file__
        assert path is not None
        espeakbridge.get_phonemes = _bridge_phonemes(path)  # type: ignore[assignment]
