"""The brain of a voice agent: any text agent, unchanged, behind a view of the session.

The brain runs as it would behind the server (``await brain.run(session)``), on a
:class:`BrainSession`: the same session underneath (:meth:`AgentSession.inside`), with
four differences that make its text spoken:

* it hears what the voice agent hands it: typed text as it arrives, and each utterance's
  final transcript as ``UserTextReceived``; never input audio;
* the text chunks it sends go to the client as they are and to the voice agent's
  speaker, which synthesises them clause by clause (:class:`Listener`);
* its own audio is sent only while its turn has no text (the scripted ``speak MS``);
  once the turn has text, the speech of that text replaces it. Its agent transcripts
  are not sent (the voice agent sends one of what was spoken);
* ``turn.end()`` does not end the turn: the speaker ends it when the speech is out.

When the brain answers an utterance, :meth:`BrainSession.begin_turn` continues the
utterance's ``listening`` turn (``thinking``) instead of starting another, as §6.1's turn
of a spoken exchange does. A brain that keeps a conversation history can learn what the
user actually heard of an interrupted reply by implementing :class:`HeardAware`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ..agents.base import AgentSession, AudioItem, Turn
from ..protocol.messages import TurnStateName

__all__ = ["BrainSession", "HeardAware", "Listener", "SpokenTurn"]


class Listener(Protocol):
    """What the voice agent hears of the brain's turns."""

    def reply_started(self, turn_id: str) -> None: ...

    def reply_text(self, turn_id: str, chunk: str) -> None: ...

    def reply_transcript(self, turn_id: str, text: str) -> None: ...

    def reply_done(self, turn_id: str) -> None: ...

    def speaks(self, turn_id: str) -> bool:
        """Whether the reply of ``turn_id`` has text to speak."""
        ...


@runtime_checkable
class HeardAware(Protocol):
    """A brain that keeps a history implements this to learn that the user heard only
    ``heard`` of its reply in turn ``turn_id`` (barge-in, §8.4) and truncate it."""

    def heard(self, turn_id: str, heard: str) -> None: ...


class BrainSession(AgentSession):
    """The session as the brain sees it (see the module documentation)."""

    listener: Listener
    #: The listening turn the next ``begin_turn`` continues (an utterance's answer).
    adopt: Turn | None = None

    @classmethod
    def for_brain(cls, outer: AgentSession, listener: Listener) -> BrainSession:
        session = cls.inside(outer)
        session.listener = listener
        return session

    def _spoken(self, turn: Turn) -> SpokenTurn:
        return SpokenTurn(self, turn.id)

    def begin_turn(self, state: TurnStateName = "thinking") -> Turn:
        adopt, self.adopt = self.adopt, None
        if adopt is not None and adopt.active and adopt.state(state):
            turn: Turn = adopt
        else:
            turn = super().begin_turn(state)
        self.listener.reply_started(turn.id)
        return self._spoken(turn)

    def user_started_speaking(self) -> Turn:
        return self._spoken(super().user_started_speaking())

    @property
    def turn(self) -> Turn | None:
        turn = super().turn
        return self._spoken(turn) if turn is not None else None


@dataclass(frozen=True, slots=True, init=False)
class SpokenTurn(Turn):
    """A turn of the brain: its text is spoken, its own audio and agent transcripts are
    not sent, and its end waits for the speech."""

    def _listener(self) -> Listener:
        session = self.session
        assert isinstance(session, BrainSession)
        return session.listener

    def text(self, chunk: str) -> bool:
        if not Turn.text(self, chunk):
            return False
        self._listener().reply_text(self.id, chunk)
        return True

    def transcript(self, text: str, *, final: bool = True, item_id: str | None = None) -> bool:
        if not self.active:
            return False
        if final:
            self._listener().reply_transcript(self.id, text)
        return True

    def audio(self, item_id: str | None = None) -> AudioItem | None:
        if self._listener().speaks(self.id):
            return _MutedItem(self.session, self.id) if self.active else None
        item = Turn.audio(self, item_id)
        return _BrainItem(self.session, item.id, self.id) if item is not None else None

    def state(self, state: TurnStateName) -> bool:
        if state == "idle":
            return self.end()
        return Turn.state(self, state)

    def end(self) -> bool:
        if not self.active:
            return False
        self._listener().reply_done(self.id)
        return True


@dataclass(frozen=True, slots=True)
class _BrainItem(AudioItem):
    """The brain's own audio in a turn with no text yet: sent, until the turn has text
    (then the speech of the text is the turn's audio)."""

    turn_id: str

    def write(self, payload: bytes, duration_ms: float | None = None) -> bool:
        session = self.session
        assert isinstance(session, BrainSession)
        if session.listener.speaks(self.turn_id):
            turn = session.turn
            return turn is not None and turn.id == self.turn_id
        return AudioItem.write(self, payload, duration_ms)


@dataclass(frozen=True, slots=True)
class _MutedItem(AudioItem):
    """The brain's own audio: accepted while its turn lasts, never sent. (``id`` is the
    turn's id: the item has none on the wire.)"""

    def write(self, payload: bytes, duration_ms: float | None = None) -> bool:
        turn = self.session.turn
        return turn is not None and turn.id == self.id
