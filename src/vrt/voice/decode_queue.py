"""The recogniser's queue: every session's decodes, one at a time on one thread, in an
order that keeps the sessions that wait for an answer ahead of the rest (issue 31.4).

* **Finals ahead of partials.** A final decode (the speculative guess at a pause, or
  the decode at the end of the turn) is what a user waits for; a partial is a preview.
  The next decode is the oldest queued final, else the oldest queued partial.
* **At most one queued job per session.** A session's new job replaces its queued one
  (a newer partial replaces an older; a final replaces a partial); a partial arriving
  while the session's final waits is dropped. Work already running finishes, and its
  result is dropped if nobody wants it.
* **A bounded queue.** At most ``limit`` jobs wait. Past it, a partial is dropped, and a
  final takes the place of the newest queued partial; with none to take, the final
  fails at once with :class:`~vrt.voice.stages.StageError` ("speech recognition is
  over capacity"), which the voice agent sends as a recoverable ``AGENT_ERROR``
  (§9.2): the user knows to say it again, and nothing waits behind work it cannot
  finish in time.
* **A session's jobs end with it.** A job whose future is cancelled (the session ended,
  the utterance was dropped: :meth:`SpeculativeRecognition.cancel`) leaves the queue
  at once, and the result of one already running is thrown away.

* **Saturation, for admission.** The queue is :attr:`~DecodeQueue.saturated` for
  ``hold`` seconds after the last sign that it cannot keep the 500 ms voice-to-voice aim
  (docs/voice.md): a final queued behind ``busy_finals`` waiting finals, a final that
  waited more than ``max_lag`` seconds before its decode began, or a final refused over
  capacity. The voice agent's factory refuses new sessions while it is (issue 31.4,
  docs/limits.md); the sessions already open go on.

A dropped job's future is cancelled. Order and bounds are by count; only saturation
looks at a clock.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Final

from .stages import Samples, StageError

__all__ = ["BUSY_FINALS", "DEFAULT_LIMIT", "HOLD", "MAX_LAG", "DecodeQueue"]

#: Queued jobs at most: with finals of about 0.2 s each, the last waits about 2 s.
DEFAULT_LIMIT: Final = 10
#: A final queued behind this many waiting finals waits about 0.4 s or more before its
#: own decode: past the 500 ms aim once synthesis starts.
BUSY_FINALS: Final = 2
#: A final whose decode began this many seconds after it was queued missed the aim.
MAX_LAG: Final = 0.3
#: Seconds the queue stays saturated after the last sign of it: long enough for a
#: turn-taking conversation's pauses not to open the door between bursts.
HOLD: Final = 5.0


@dataclass(eq=False, slots=True)
class _Job:
    owner: object
    final: bool
    audio: Samples
    future: asyncio.Future[str] = field(repr=False)
    queued_at: float = 0.0


class DecodeQueue:
    """Decodes for every session of a recogniser (see the module documentation).

    ``decode(audio, final)`` is the blocking decode, run on ``executor`` (one thread)."""

    def __init__(
        self,
        decode: Callable[[Samples, bool], str],
        executor: Executor,
        *,
        limit: int = DEFAULT_LIMIT,
        busy_finals: int = BUSY_FINALS,
        max_lag: float = MAX_LAG,
        hold: float = HOLD,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._decode = decode
        self._executor = executor
        self.limit = limit
        self.busy_finals = busy_finals
        self.max_lag = max_lag
        self.hold = hold
        self._clock = clock
        self._saturated_at: float | None = None
        self._finals: deque[_Job] = deque()
        self._partials: deque[_Job] = deque()
        self._queued: dict[object, _Job] = {}  # each owner's one queued job
        self._running: _Job | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        #: Decodes started (for tests and benchmarks).
        self.started = 0

    @property
    def waiting(self) -> int:
        return len(self._finals) + len(self._partials)

    @property
    def saturated(self) -> bool:
        """Whether the queue showed, within the last ``hold`` seconds, that it cannot
        keep the aim (see the module documentation)."""
        marked = self._saturated_at
        return marked is not None and self._clock() - marked < self.hold

    def _mark_saturated(self) -> None:
        self._saturated_at = self._clock()

    def submit(self, owner: object, audio: Samples, *, final: bool) -> asyncio.Future[str]:
        """Queue a decode of ``audio`` for ``owner`` (a session's recognition); its text
        comes through the future (cancelled if the job is dropped)."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._restart(loop)
        future: asyncio.Future[str] = loop.create_future()
        job = _Job(owner, final, audio, future, self._clock())
        queued = self._queued.get(owner)
        if queued is not None:
            if queued.final and not final:
                future.cancel()  # the session's final waits: a preview adds nothing
                return future
            self._drop(queued)
        if final and len(self._finals) >= self.busy_finals:
            self._mark_saturated()
        if self.waiting >= self.limit:
            if not final or not self._partials:
                if final:
                    self._mark_saturated()
                    future.set_exception(
                        StageError(
                            "speech recognition is over capacity "
                            f"({self.limit} utterances queued): please say it again"
                        )
                    )
                else:
                    future.cancel()
                return future
            self._drop(self._partials[-1])
        (self._finals if final else self._partials).append(job)
        self._queued[owner] = job
        future.add_done_callback(lambda _: self._forget(job))
        self._next()
        return future

    def _drop(self, job: _Job) -> None:
        self._forget(job)
        job.future.cancel()

    def _forget(self, job: _Job) -> None:
        queue = self._finals if job.final else self._partials
        if job in queue:
            queue.remove(job)
        if self._queued.get(job.owner) is job:
            del self._queued[job.owner]

    def _restart(self, loop: asyncio.AbstractEventLoop) -> None:
        # A recogniser outlives event loops in tests and benchmarks (asyncio.run each):
        # what the old loop queued cannot be answered on it any more.
        for job in (*self._finals, *self._partials):
            job.future.cancel()
        self._finals.clear()
        self._partials.clear()
        self._queued.clear()
        self._running = None
        self._loop = loop

    def _next(self) -> None:
        if self._running is not None:
            return
        queue = self._finals or self._partials
        if not queue:
            return
        job = queue.popleft()
        del self._queued[job.owner]
        self._running = job
        self.started += 1
        if job.final and self._clock() - job.queued_at > self.max_lag:
            self._mark_saturated()
        assert self._loop is not None
        work = self._loop.run_in_executor(self._executor, self._decode, job.audio, job.final)
        work.add_done_callback(lambda done: self._finished(job, done))

    def _finished(self, job: _Job, done: asyncio.Future[str]) -> None:
        if self._running is job:
            self._running = None
        if not job.future.done():
            if done.cancelled():
                job.future.cancel()
            elif (exc := done.exception()) is not None:
                job.future.set_exception(exc)
            else:
                job.future.set_result(done.result())
        self._next()
