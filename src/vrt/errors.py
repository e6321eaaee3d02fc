"""The root of every exception class vrt defines (docs/architecture.md, "Exceptions").

``except vrt.VrtException`` catches whatever the core, the server, the client SDK, the
agents and the voice agent raise of their own, and nothing else: a bug in the caller's
code or in a library under vrt still shows as what it is. Each class keeps its own name
and module (``vrt.client.VrtError``, ``vrt.protocol.LocalProtocolError``, ...), so code
that catches one of them catches it as before. As websockets' ``WebSocketException``,
the root is named apart from the client's ``VrtError``, which is one kind of failure
(a session that cannot open or go on), not every kind.

This module imports nothing: it loads without any optional extra, and the sans-I/O core
(``vrt.protocol``) depends on it without depending on anything else of vrt.
"""

__all__ = ["VrtException"]


class VrtException(Exception):
    """The base class of every exception vrt defines. Python's own exceptions for a bad
    argument (``ValueError``, ``TypeError``) or a call at the wrong time
    (``RuntimeError``) are raised as they are, and are not this."""
