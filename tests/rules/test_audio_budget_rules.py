"""Input audio is charged by its duration (§8.2, §11; protocol/server/budget.py), on the
sans-I/O objects alone: a 14-byte Opus packet that claims 120 ms costs 120 ms, not one
frame of a 512-per-second budget."""

from __future__ import annotations

from dataclasses import replace

import pytest
from rules_core import read

from vrt.protocol.codec import encode
from vrt.protocol.frames import FrameKind, build_frame
from vrt.protocol.messages import Error, Format, Hello
from vrt.protocol.server import ServerConfig, ServerConnection, ServerSession
from vrt.protocol.server.budget import ReadBudget
from vrt.protocol.server.events import AudioReceived, HelloReceived

OPUS = Format(encoding="opus", sample_rate=48000)
PCMU = Format(encoding="pcmu", sample_rate=8000)
#: TOC 0xF8: CELT fullband 20 ms, code 0 (one frame); 0xFB: code 3, the count in the
#: next byte: 6 frames of 20 ms, 120 ms (RFC 6716 §3.1). 14 bytes in all.
TINY_120MS = bytes([0xFB, 0x06]) + bytes(12)


def _opened(fmt: Format, config: ServerConfig) -> tuple[ServerConnection, ServerSession]:
    connection = ServerConnection(config, 0.0)
    connection.receive_text(encode(Hello(input=fmt), 0), 0.0)
    (event,) = connection.take_events()
    assert isinstance(event, HelloReceived)
    session = ServerSession(event.hello, config, input_formats=(fmt,), output_formats=(fmt,))
    assert connection.open(session, 0.0) is None
    connection.take_outbox()
    assert session.record.input.encoding == fmt.encoding
    return connection, session


def _passed(session: ServerSession) -> int:
    return sum(isinstance(e, AudioReceived) for e in session.take_events())


def test_tiny_opus_packets_are_charged_what_they_claim_to_play() -> None:
    """100 packets of 14 bytes claiming 120 ms each (12 s of audio) at one instant:
    the first 2 s (the burst) pass, then reading stops; what was read a whole burst
    beyond is dropped, with one recoverable RATE_LIMITED; reading resumes when the
    debt is paid back at the audio rate."""
    config = ServerConfig()  # audio: 1.1 s per second, 2 s saved
    connection, session = _opened(OPUS, config)
    for seq in range(100):
        connection.receive_binary(build_frame(FrameKind.INPUT, seq, TINY_120MS), 0.0)
    # Within the burst and a burst of debt, 4 s: 33 packets (3.96 s; the 34th goes past).
    assert _passed(session) == 33
    assert connection.dropped_audio == 67
    errors = read(connection.take_outbox(), by="server").of(Error)
    assert [(e.code, e.recoverable) for e in errors] == [("RATE_LIMITED", True)]
    assert "2 s ahead of real time" in errors[0].message
    # Every packet was charged, the dropped ones too: 12 s against a 2 s burst.
    assert connection.readable_at() == pytest.approx((12.0 - 2.0) / 1.1)


def test_the_same_bytes_as_paced_audio_pass_whole() -> None:
    """A client that sends its audio in real time never meets the budget: 20 ms pcmu
    frames every 20 ms for a minute, all passed, no error."""
    connection, session = _opened(PCMU, ServerConfig())
    for seq in range(3000):
        now = seq * 0.02
        connection.frame_received(now, 165)
        connection.receive_binary(build_frame(FrameKind.INPUT, seq, bytes(160)), now)
        assert connection.readable_at() <= now
    assert _passed(session) == 3000
    assert connection.dropped_audio == 0
    assert read(connection.take_outbox(), by="server").of(Error) == []


def test_the_audio_bucket_refills_at_its_rate_up_to_its_burst() -> None:
    budget = ReadBudget(512, 4096, 1 << 20, 1 << 22, 0.0, audio_rate=1.0, audio_burst=2.0)
    assert budget.spend_audio(2.0, 0.0) == 0.0
    assert budget.spend_audio(1.0, 0.0) == -0.5  # half a burst in debt
    assert budget.readable_at() == 1.0
    assert budget.spend_audio(0.5, 10.0) == 0.0  # refilled to the burst, not beyond
    assert budget.spend_audio(1.6, 10.0) == pytest.approx(-0.05)
    assert budget.readable_at() == pytest.approx(10.1)


def test_audio_before_a_session_is_not_charged() -> None:
    config = replace(ServerConfig(), audio_burst=0.1)
    connection = ServerConnection(config, 0.0)
    connection.receive_binary(build_frame(FrameKind.INPUT, 0, TINY_120MS), 0.0)
    assert connection.readable_at() == 0.0
    assert connection.dropped_audio == 0
