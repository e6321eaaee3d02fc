"""The client suite's checks, one module per chapter of the protocol text. Importing
this package registers every check on :data:`vrt.conformance.client_harness.SUITE`, in
the order of the text."""

import importlib

#: The modules, in the order of the protocol text (§2-4, §5, §6, §7, §8, §9).
CHAPTERS = ("framing", "sessions", "epochs", "tools", "audio", "errors")

for _chapter in CHAPTERS:
    importlib.import_module(f"{__name__}.{_chapter}")
