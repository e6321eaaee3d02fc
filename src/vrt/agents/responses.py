"""Per-response measurements, taken at the agent seam for every agent alike.

A *response* is a turn's agent output (§6.1): it begins when a turn begins past
``listening`` (``begin_turn("thinking")``, a text reply) or leaves ``listening`` (the
end of the user's speech), and ends when the turn goes ``idle`` (*completed*) or is
interrupted (§6.2: the user's speech, the client's ``interrupt`` or new ``text``, the
agent's own ``interrupt``, or the session ending under it: *interrupted*). The
:class:`~vrt.agents.base.AgentSession` methods every agent calls tell a
:class:`ResponseWatch` of each step, so that no adapter carries timing code of its own:

* when the response began, and when it ended, and how;
* its first text: the first agent ``text`` chunk or agent ``transcript`` (what a client
  can show), as LiveKit's ``ttft`` and Pipecat's TTFB for a language model;
* its first output audio frame, as LiveKit's ``RealtimeModelMetrics.ttft`` ("time to
  first audio token") and Pipecat's TTFB for speech;
* the tokens the model reported meanwhile: the growth of the agent's ``usage``
  (:class:`~vrt.agents.usage.TokenUsage`, which each adapter updates per provider
  response) since the previous response ended. A provider that reports a response's
  usage only after it ended (OpenAI's ``response.done`` of a cancelled response comes
  after the interruption) has it counted with the next response.

Times are read from the session's clock (the event loop's): each measurement is one
clock reading, and the output audio path pays one attribute test per frame.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from .usage import TokenUsage

__all__ = ["Response", "ResponseWatch"]

log = logging.getLogger("vrt.agents")

Outcome = Literal["completed", "interrupted"]


@dataclass(slots=True)
class Response:
    """One response's measurements, in seconds of the session's clock."""

    turn_id: str
    started: float
    first_text: float | None = None
    first_audio: float | None = None
    ended: float = 0.0
    outcome: Outcome = "completed"
    #: The tokens the model reported for it; None when the agent reports none, or none
    #: arrived during the response.
    usage: TokenUsage | None = None

    @property
    def duration(self) -> float:
        """From its beginning to its end (LiveKit's ``duration``, Pipecat's processing
        time)."""
        return self.ended - self.started

    @property
    def time_to_first_text(self) -> float | None:
        return None if self.first_text is None else self.first_text - self.started

    @property
    def time_to_first_audio(self) -> float | None:
        return None if self.first_audio is None else self.first_audio - self.started

    @property
    def output_tokens_per_second(self) -> float | None:
        """Output tokens over the duration (LiveKit's ``tokens_per_second``)."""
        duration = self.duration
        if self.usage is None or duration <= 0:
            return None
        return self.usage.output_tokens / duration


class ResponseWatch:
    """Follows one session's responses and hands each to ``sink`` when it ends.

    ``agent`` is read for its ``usage`` (a :class:`TokenUsage`) when a response ends,
    so an agent that reports none costs nothing more. At most one response is open at
    a time (a session has one turn at a time, §6.1).
    """

    __slots__ = ("_agent", "_clock", "_counted", "_open", "_sink", "_source", "audio_due")

    def __init__(
        self, clock: Callable[[], float], sink: Callable[[Response], None], agent: object
    ) -> None:
        self._clock = clock
        self._sink = sink
        self._agent = agent
        self._open: Response | None = None
        #: True while the open response has sent no audio: the audio path tests it.
        self.audio_due = False
        usage = getattr(agent, "usage", None)
        #: The agent's counters, and what they held when the last response ended (what
        #: is already counted).
        self._source = usage if isinstance(usage, TokenUsage) else None
        self._counted = usage.copy() if isinstance(usage, TokenUsage) else TokenUsage()

    @property
    def current(self) -> Response | None:
        """The response in progress, if any."""
        return self._open

    def turn(self, turn_id: str, state: str, *, interrupting: bool = False) -> None:
        """The turn in progress is ``turn_id``, now in ``state`` (``idle``: it ended).
        A response still open for another turn has ended: interrupted when
        ``interrupting`` (the user started speaking, §6.2), else completed (a new turn
        ends the one in progress, §6.1)."""
        current = self._open
        if current is not None and current.turn_id != turn_id:
            self._end(current, "interrupted" if interrupting else "completed")
            current = None
        if state == "idle":
            if current is not None:
                self._end(current, "completed")
        elif state != "listening" and current is None:
            self._open = Response(turn_id, self._clock())
            self.audio_due = True

    def interrupted(self, turn_id: str | None = None) -> None:
        """The response in flight (of ``turn_id``, when given) was interrupted (§6.2)."""
        current = self._open
        if current is not None and (turn_id is None or current.turn_id == turn_id):
            self._end(current, "interrupted")

    def text(self, turn_id: str) -> None:
        """Turn ``turn_id`` sent text (a chunk or an agent transcript)."""
        current = self._open
        if current is not None and current.first_text is None and current.turn_id == turn_id:
            current.first_text = self._clock()

    def audio(self) -> None:
        """The open response sent its first audio frame (called while ``audio_due``)."""
        self.audio_due = False
        current = self._open
        if current is not None:
            current.first_audio = self._clock()

    def close(self) -> None:
        """The session ended: a response still open was cut short."""
        if self._open is not None:
            self._end(self._open, "interrupted")

    def _end(self, response: Response, outcome: Outcome) -> None:
        self._open = None
        self.audio_due = False
        response.ended = self._clock()
        response.outcome = outcome
        usage = getattr(self._agent, "usage", None)
        if isinstance(usage, TokenUsage):
            if usage is not self._source:  # new counters (the agent replaced them)
                self._source, self._counted = usage, TokenUsage()
            added = usage.since(self._counted)
            self._counted = usage.copy()
            if added != TokenUsage():
                response.usage = added
        try:
            self._sink(response)
        except Exception:  # a metrics or tracing fault must not fail the agent's call
            log.exception("recording a response's measurements failed")
