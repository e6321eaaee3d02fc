"""Parked sessions and their timers.

A parked session has no connection to carry its timer (a connection arms one for its
session's deadlines): it gets its own, for its tool timeouts (§7.2) and the end of its
resume window (§5.1). The lot keeps them in the order they parked, so that the session
parked the longest is the one evicted when a limit is reached (its resume then fails
with RESUME_FAILED, §5.4).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from .hosted import HostedSession

__all__ = ["ParkingLot"]


class ParkingLot:
    """The parked sessions of a server, the longest parked first, each with its timer
    (``HostedSession.parked_timer``)."""

    __slots__ = ("_due", "_parked")

    def __init__(self, due: Callable[[HostedSession], None]) -> None:
        #: Called when a parked session's deadline is reached.
        self._due = due
        self._parked: dict[str, HostedSession] = {}

    def __len__(self) -> int:
        return len(self._parked)

    def __contains__(self, hosted: HostedSession) -> bool:
        return self._parked.get(hosted.session.session_id) is hosted

    def longest(self) -> HostedSession | None:
        """The session parked the longest, if any."""
        return next(iter(self._parked.values()), None)

    def park(self, hosted: HostedSession) -> None:
        """``hosted`` parked: the last in the order, its timer armed."""
        session = hosted.session
        self._parked[session.session_id] = hosted
        # ``_arm``, inline: every connection that ends parks its session.
        deadline = session.timer_deadline()
        hosted.parked_timer = (
            asyncio.get_running_loop().call_at(deadline, self._fired, hosted) if deadline else None
        )

    def leave(self, hosted: HostedSession) -> None:
        """``hosted`` is no longer parked (resumed, ended, moved): its timer stops."""
        if self._parked.get(hosted.session.session_id) is hosted:
            del self._parked[hosted.session.session_id]
        timer = hosted.parked_timer
        if timer is not None:
            timer.cancel()
            hosted.parked_timer = None

    def rearm(self, hosted: HostedSession) -> None:
        """Re-arm a parked session's timer (its deadline moved: the agent started a
        tool call, a timer fired), where it stands in the order."""
        timer = hosted.parked_timer
        if timer is not None:
            timer.cancel()
        self._arm(hosted)

    def _arm(self, hosted: HostedSession) -> None:
        deadline = hosted.session.timer_deadline()
        hosted.parked_timer = (
            asyncio.get_running_loop().call_at(deadline, self._fired, hosted) if deadline else None
        )

    def _fired(self, hosted: HostedSession) -> None:
        hosted.parked_timer = None
        self._due(hosted)
