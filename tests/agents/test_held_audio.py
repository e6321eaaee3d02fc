"""The input audio a speech-to-speech adapter holds while no provider session takes
it (``provider_socket.HeldAudio``): the newest ``HELD_AUDIO`` seconds, none older."""

from __future__ import annotations

from vrt.agents.provider_socket import HELD_AUDIO, HeldAudio
from vrt.protocol.messages import PCM16_24K, Format

PCMU = Format(encoding="pcmu", sample_rate=8000)


def test_a_client_that_streams_for_minutes_makes_it_hold_only_the_bound() -> None:
    """What a client can make the server keep while the model is away: the bytes of
    ``HELD_AUDIO`` seconds in the session's format, however much it sends."""
    now = [0.0]
    held = HeldAudio(clock=lambda: now[0])
    frame = bytes(960)  # 20 ms of pcm16 at 24 kHz
    for _ in range(3000 * 10):  # ten minutes, as fast as it can
        held.hold(frame, PCM16_24K)
    assert held.size == HELD_AUDIO * 48_000
    assert held.dropped == 30_000 - 100
    assert len(held.take()) == 100
    assert held.size == 0
    assert held.take() == []
    for _ in range(1000):
        held.hold(bytes(160), PCMU)  # 20 ms of µ-law at 8 kHz
    assert held.size == HELD_AUDIO * 8_000


def test_audio_older_than_the_bound_is_not_sent() -> None:
    """An outage longer than ``HELD_AUDIO``: only what was said in its last seconds
    reaches the next session; speech replayed long after would answer nobody."""
    now = [0.0]
    held = HeldAudio(clock=lambda: now[0])
    held.hold(b"old", PCM16_24K)
    now[0] = 10.0
    held.hold(b"recent", PCM16_24K)
    now[0] = 10.0 + HELD_AUDIO / 2
    held.hold(b"newest", PCM16_24K)
    assert held.take() == [b"recent", b"newest"]
    assert held.dropped == 1
