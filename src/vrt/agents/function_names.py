"""Tool names as a model provider accepts them, and back.

A vRT tool name matches ``^[A-Za-z0-9_.-]{1,64}$`` (``schema/common.json``). Providers
are stricter, and a name they refuse fails far more than the one tool:

* OpenAI (Chat Completions and the Realtime API) accepts ``^[a-zA-Z0-9_-]+$`` and at
  most 64 characters; anything else rejects the whole request (``Invalid
  'tools[0].function.name': string does not match pattern``, reported in
  github.com/brekkylab/ailoy/pull/109 and github.com/mcp-use/mcp-use/issues/90), or for
  the Realtime API the whole ``session.update``.
* Gemini wants a name that starts with a letter or ``_``, then letters, digits, ``_``,
  ``.``, ``:`` or ``-``, at most 64 characters (``Invalid function name. Must start with a
  letter or an underscore...``, github.com/google-gemini/gemini-cli/issues/9535).

:class:`FunctionNames` gives every vRT tool a provider name that is valid, unique and as
close to the original as possible (a valid name is kept), and maps the names the model
calls back to the vRT names.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

__all__ = ["GEMINI", "OPENAI", "FunctionNames", "NameRule"]


class NameRule:
    """What a provider accepts: the characters, the first character, the length."""

    def __init__(self, invalid: str, *, first: str | None, max_length: int) -> None:
        self.invalid = re.compile(invalid)
        self.first = re.compile(first) if first is not None else None
        self.max_length = max_length

    def fix(self, name: str) -> str:
        fixed = self.invalid.sub("_", name) or "tool"
        if self.first is not None and not self.first.match(fixed):
            fixed = f"_{fixed}"
        return fixed[: self.max_length]


#: ``^[a-zA-Z0-9_-]+$``, at most 64 characters.
OPENAI: Final = NameRule(r"[^A-Za-z0-9_-]", first=None, max_length=64)
#: A letter or ``_`` first; then ``[A-Za-z0-9_.:-]``; at most 64 characters.
GEMINI: Final = NameRule(r"[^A-Za-z0-9_.:-]", first=r"[A-Za-z_]", max_length=64)


class FunctionNames:
    """The provider name of each vRT tool, and the way back."""

    def __init__(self, tools: Iterable[str], rule: NameRule) -> None:
        self._to_provider: dict[str, str] = {}
        self._to_vrt: dict[str, str] = {}
        for tool in tools:
            base = rule.fix(tool)
            name, n = base, 1
            while name in self._to_vrt:
                n += 1
                suffix = f"_{n}"
                name = f"{base[: rule.max_length - len(suffix)]}{suffix}"
            self._to_provider[tool] = name
            self._to_vrt[name] = tool

    def provider(self, tool: str) -> str:
        """The name the provider is told for the vRT tool ``tool``."""
        return self._to_provider[tool]

    def vrt(self, function: str) -> str | None:
        """The vRT tool the model means by ``function``; None for a name it invented."""
        return self._to_vrt.get(function)

    def items(self) -> Iterable[tuple[str, str]]:
        """(vRT name, provider name) of every tool."""
        return self._to_provider.items()
