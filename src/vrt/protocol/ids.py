"""Identifiers the server assigns: unguessable and unique across sessions.

Session ids are capabilities to resume (§5.2, §10) and need at least 122 random bits;
turn, call and item ids get as many, which also meets ``global-tool-ids-v1`` (§6.3) for
every peer, negotiated or not (the protocol allows the stronger identifiers always).
"""

from __future__ import annotations

import secrets
from typing import Final

__all__ = ["ID_RANDOM_BITS", "new_id"]

#: 16 random bytes: 128 bits, above the 122 of a version 4 UUID.
ID_RANDOM_BITS: Final = 128


def new_id(prefix: str) -> str:
    """A fresh identifier such as ``turn_Qx3...``; the prefix only helps humans read logs.

    Peers must treat identifiers as opaque (§6.3): nothing may be parsed out of them.
    """
    return prefix + secrets.token_urlsafe(ID_RANDOM_BITS // 8)
