"""What an agent says, as a part of its session (``ServerSession.agent_output``): text
chunks, transcripts and errors (§6.1, §9.2), and output audio items and frames (§8.3).
Each is dropped (False) once its turn is over: nothing of a closed epoch is sent (§6.2).
"""

from __future__ import annotations

import struct
from typing import Final, Literal

from ..errors import ErrorCode
from ..formats import duration_ms
from ..frames import FrameKind
from ..ids import new_id
from ..messages import AgentText, AudioStart, Transcript
from ..outputs import SendBinary
from ..tables import SessionState
from .channel import SessionChannel
from .config import ServerConfig
from .record import Item, SessionRecord

__all__ = ["AgentOutput"]

#: An audio frame's header (§8.1), as frames.build_frame packs it; seqs wrap at 2^32.
_OUTPUT_HEADER: Final = struct.Struct(">BI")
_U32_MASK: Final = (1 << 32) - 1
# Bound once: reading a member off its enum class goes through the metaclass (channel.py).
_CONNECTED: Final = SessionState.CONNECTED


class AgentOutput:
    """The agent's output: what it sends goes through the session's channel."""

    __slots__ = ("_channel", "_record", "_remembered_items")

    def __init__(self, channel: SessionChannel, record: SessionRecord, config: ServerConfig):
        self._channel = channel
        self._record = record
        self._remembered_items = config.remembered_items

    # -- text, transcripts, errors --

    def send_text(self, turn_id: str, text: str) -> bool:
        """One chunk of the agent's text. Dropped (False) when the turn is over."""
        if self._record.current_turn(turn_id) is None:
            return False
        self._channel.send(AgentText(text=text, turn_id=turn_id))
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
        if role == "agent" and turn_id is not None and self._record.current_turn(turn_id) is None:
            return False
        self._channel.send(
            Transcript(role=role, text=text, final=final, item_id=item_id, turn_id=turn_id)
        )
        return True

    def error(self, message: str, *, recoverable: bool = True) -> None:
        """``error AGENT_ERROR`` (§9.2), e.g. when the model connection fails."""
        self._channel.send_error(ErrorCode.AGENT_ERROR, message, recoverable)

    # -- audio --

    def start_audio(self, turn_id: str, item_id: str | None = None) -> str | None:
        """Begin an output audio item of the turn (§8.3); None when the turn is over."""
        turn = self._record.current_turn(turn_id)
        if turn is None:
            return None
        item = Item(item_id or new_id("i_"), turn.id, turn.epoch)
        items = self._record.items
        items[item.id] = item
        while len(items) > self._remembered_items:
            del items[next(iter(items))]
        self._announce(item)
        return item.id

    def _announce(self, item: Item) -> None:
        channel = self._channel
        channel.send_transient(AudioStart(item_id=item.id, turn_id=item.turn_id, epoch=item.epoch))
        channel.announced = item.id  # a resumed connection starts over (SessionChannel)

    def send_audio(self, item_id: str, payload: bytes, played_ms: float | None = None) -> bool:
        """One output frame of ``item_id``; False when its turn is over (§6.2: audio of a
        closed epoch is never sent). While parked the frame is lost (audio is never
        resent, §5.4), but the turn goes on, so that is still True. ``played_ms`` is the
        frame's duration when the agent knows it better than :func:`duration_ms`."""
        record = self._record
        item = record.items.get(item_id)
        turn = record.turn
        if item is None or turn is None or turn.epoch != item.epoch:
            return False
        channel = self._channel
        if channel.state is not _CONNECTED:
            return True
        if played_ms is None:
            output = record.output
            played_ms = (
                (len(payload) >> 1) * 1000.0 / output.rate  # duration_ms, inline: per frame
                if output.encoding == "pcm16"
                else duration_ms(payload, output)
            )
        item.sent_ms += played_ms
        if channel.announced != item_id:
            self._announce(item)
        seq = record.audio_out_seq
        record.audio_out_seq = (seq + 1) & _U32_MASK  # next_audio_seq, inline: per frame
        channel.frames.append(SendBinary(data=_OUTPUT_HEADER.pack(FrameKind.OUTPUT, seq) + payload))
        return True
