"""What an agent says, as methods of :class:`~vrt.protocol.server.ServerSession`: text
chunks, transcripts and errors (§6.1, §9.2), and output audio items and frames (§8.3).
Each is dropped (False) once its turn is over: nothing of a closed epoch is sent (§6.2).
"""

from __future__ import annotations

import struct
from abc import ABC, abstractmethod
from typing import Final, Literal

from mypy_extensions import trait

from ..errors import ErrorCode
from ..formats import duration_ms
from ..frames import FrameKind
from ..ids import new_id
from ..messages import AgentText, AudioStart, Message, Transcript
from ..outputs import Output, SendBinary
from .config import ServerConfig
from .record import Item, SessionRecord, Turn

__all__ = ["AgentOutput"]

#: An audio frame's header (§8.1), as frames.build_frame packs it; seqs wrap at 2^32.
_OUTPUT_HEADER: Final = struct.Struct(">BI")
_U32_MASK: Final = (1 << 32) - 1


@trait  # a mixin: mypyc compiles a class with one base class and any traits
class AgentOutput(ABC):
    """The agent's output: mixed into ServerSession, which provides what follows."""

    record: SessionRecord
    config: ServerConfig
    #: What the bound connection writes next; None while the session is parked.
    _outbox: list[Output] | None
    #: The item of the last ``audio.start`` on this connection.
    _announced: str | None

    @abstractmethod
    def _send(self, message: Message) -> None:
        """Send a sequenced message of the session."""

    @abstractmethod
    def send_transient(self, message: Message) -> None:
        """Send a transient message (seq 0) on the bound connection."""

    @abstractmethod
    def send_error(self, code: str, message: str, recoverable: bool) -> None:
        """Send an ``error``."""

    @abstractmethod
    def _turn(self, turn_id: str) -> Turn | None:
        """The turn in progress if it is ``turn_id``."""

    # -- agent side: text, transcripts, errors --

    def send_text(self, turn_id: str, text: str) -> bool:
        """One chunk of the agent's text. Dropped (False) when the turn is over."""
        if self._turn(turn_id) is None:
            return False
        self._send(AgentText(text=text, turn_id=turn_id))
        return True

    def send_transcript(
        self,
        role: Literal["user", "agent"],
        text: str,
        *,
        final: bool = True,
        item_id: str | None = None,
        turn_id: str | None = None,
    ) -> bool:
        """A transcript; an agent transcript of a turn that is over is dropped."""
        if role == "agent" and turn_id is not None and self._turn(turn_id) is None:
            return False
        self._send(Transcript(role=role, text=text, final=final, item_id=item_id, turn_id=turn_id))
        return True

    def agent_error(self, message: str, *, recoverable: bool = True) -> None:
        """``error AGENT_ERROR`` (§9.2), e.g. when the model connection fails."""
        self.send_error(ErrorCode.AGENT_ERROR, message, recoverable)

    # -- agent side: audio --

    def start_audio(self, turn_id: str, item_id: str | None = None) -> str | None:
        """Begin an output audio item of the turn (§8.3); None when the turn is over."""
        turn = self._turn(turn_id)
        if turn is None:
            return None
        item = Item(item_id or new_id("i_"), turn.id, turn.epoch)
        items = self.record.items
        items[item.id] = item
        while len(items) > self.config.remembered_items:
            del items[next(iter(items))]
        self._announce(item)
        return item.id

    def _announce(self, item: Item) -> None:
        self.send_transient(AudioStart(item_id=item.id, turn_id=item.turn_id, epoch=item.epoch))
        self._announced = item.id  # a resumed connection starts over (attach)

    def send_audio(self, item_id: str, payload: bytes, played_ms: float | None = None) -> bool:
        """One output frame of ``item_id``; False when its turn is over (§6.2: audio of a
        closed epoch is never sent). While parked the frame is lost (audio is never
        resent, §5.4), but the turn goes on, so that is still True. ``played_ms`` is the
        frame's duration when the agent knows it better than :func:`duration_ms`."""
        item = self.record.items.get(item_id)
        turn = self.record.turn
        if item is None or turn is None or turn.epoch != item.epoch:
            return False
        out = self._outbox
        if out is None:
            return True
        item.sent_ms += (
            played_ms if played_ms is not None else duration_ms(payload, self.record.output)
        )
        if self._announced != item_id:
            self._announce(item)
        record = self.record
        seq = record.audio_out_seq
        record.audio_out_seq = (seq + 1) & _U32_MASK  # next_audio_seq, inline: per frame
        out.append(SendBinary(data=_OUTPUT_HEADER.pack(FrameKind.OUTPUT, seq) + payload))
        return True
