"""The server suite's checks, one module per chapter of the protocol text. Importing
this package registers every check on :data:`vrt.conformance.server_context.SUITE`, in
the order of the text."""

import importlib

#: The modules, in the order of the protocol text (§2-3, §4, §5, §6, §7, §8, §9-11).
CHAPTERS = ("framing", "reliability", "sessions", "turns", "tools", "audio", "errors")

for _chapter in CHAPTERS:
    importlib.import_module(f"{__name__}.{_chapter}")
