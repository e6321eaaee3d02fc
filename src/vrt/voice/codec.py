"""From the session's wire formats (§8.2) to the stages' float samples and back.

pcm16 at any rate and pcmu are converted here (µ-law by :mod:`vrt.audio`, rates by
``soxr``'s streaming resampler, which keeps its filter state across frames so that
20 ms pieces join without clicks). Opus is decoded and encoded with PyAV (FFmpeg's
libopus), which the voice extra installs; :data:`OPUS_AVAILABLE` is False without it.
"""

from __future__ import annotations

import importlib.util
from typing import Any, Final

import numpy as np
import soxr

from ..audio import pcm16_to_pcmu, pcmu_to_pcm16
from ..protocol.messages import Format
from .stages import Samples

__all__ = ["FRAME_MS", "OPUS_AVAILABLE", "InputDecoder", "OutputEncoder", "to_pcm16"]

#: Output frames are 20 ms, the protocol's usual frame (and an Opus frame size).
FRAME_MS: Final = 20
OPUS_AVAILABLE: Final = importlib.util.find_spec("av") is not None
_OPUS_RATE: Final = 48000


def to_pcm16(samples: Samples) -> bytes:
    """Float samples to pcm16 little-endian bytes (clipped to full scale)."""
    scaled = np.clip(samples, -1.0, 1.0) * 32767.0
    return np.round(scaled).astype("<i2").tobytes()


def _from_pcm16(payload: bytes) -> Samples:
    usable = len(payload) - len(payload) % 2  # a payload SHOULD hold whole samples (§8.2)
    return np.frombuffer(payload[:usable], dtype="<i2").astype(np.float32) / 32768.0


class _Resampler:
    def __init__(self, source: int, target: int, quality: str = "HQ") -> None:
        self._stream = (
            soxr.ResampleStream(source, target, 1, dtype="float32", quality=quality)
            if source != target
            else None
        )

    def __call__(self, samples: Samples, last: bool = False) -> Samples:
        if self._stream is None:
            return samples
        out: Samples = self._stream.resample_chunk(samples, last=last)
        return out


class InputDecoder:
    """One session's input frames, in its input format, to float samples at ``rate``."""

    def __init__(self, fmt: Format, rate: int) -> None:
        self.format = fmt
        self._opus: Any = None
        if fmt.encoding == "opus":
            import av

            self._opus = av.CodecContext.create("opus", "r")
            self._opus.sample_rate = _OPUS_RATE
            self._opus.layout = "mono"
            source = _OPUS_RATE
        else:
            source = fmt.rate
        # Medium quality: ample for speech recognition, and its filter delays the input
        # less (15 ms from 24 kHz, 26 ms from 8 kHz, against 21 and 66 ms for high).
        self._resample = _Resampler(source, rate, "MQ")

    def decode(self, payload: bytes) -> Samples:
        """The samples of one input frame (none for an empty or undecodable one)."""
        encoding = self.format.encoding
        if encoding == "pcm16":
            samples = _from_pcm16(payload)
        elif encoding == "pcmu":
            samples = _from_pcm16(pcmu_to_pcm16(payload))
        else:
            samples = self._decode_opus(payload)
        if not samples.size:
            return samples
        return self._resample(samples)

    def _decode_opus(self, payload: bytes) -> Samples:
        import av

        if not payload:
            return np.zeros(0, np.float32)
        try:
            frames = self._opus.decode(av.Packet(payload))
        except av.FFmpegError:
            return np.zeros(0, np.float32)  # a bad packet is lost audio (§5.4), not an error
        parts = [frame.to_ndarray().reshape(-1).astype(np.float32) for frame in frames]
        return np.concatenate(parts) if parts else np.zeros(0, np.float32)


class OutputEncoder:
    """Synthesised samples at ``rate`` to 20 ms output frames in the session's format.

    :meth:`encode` returns the whole frames the samples complete; :meth:`flush` the
    rest, padded with silence to a whole frame (Opus needs whole frames; for pcm the
    padding is under 20 ms of silence at the end of an item)."""

    def __init__(self, fmt: Format, rate: int) -> None:
        self.format = fmt
        self._opus: Any = None
        target = _OPUS_RATE if fmt.encoding == "opus" else fmt.rate
        self.frame_samples = target * FRAME_MS // 1000
        self._resample = _Resampler(rate, target)
        self._pending = np.zeros(0, np.float32)
        self._pts = 0
        if fmt.encoding == "opus":
            import av

            codec = av.CodecContext.create("libopus", "w")
            codec.sample_rate = _OPUS_RATE
            codec.layout = "mono"
            codec.format = "s16"
            codec.bit_rate = 32000
            codec.options = {"frame_duration": str(FRAME_MS), "application": "voip"}
            codec.open()
            self._opus = codec

    def encode(self, samples: Samples) -> list[bytes]:
        return self._frames(self._resample(samples), pad=False)

    def flush(self) -> list[bytes]:
        return self._frames(self._resample(np.zeros(0, np.float32), last=True), pad=True)

    def _frames(self, samples: Samples, *, pad: bool) -> list[bytes]:
        data = np.concatenate((self._pending, samples)) if self._pending.size else samples
        size = self.frame_samples
        whole = len(data) - len(data) % size
        if pad and whole < len(data):
            data = np.concatenate((data, np.zeros(size - (len(data) - whole), np.float32)))
            whole = len(data)
        self._pending = data[whole:]
        return [self._encode_frame(data[i : i + size]) for i in range(0, whole, size)]

    def _encode_frame(self, frame: Samples) -> bytes:
        pcm = to_pcm16(frame)
        encoding = self.format.encoding
        if encoding == "pcm16":
            return pcm
        if encoding == "pcmu":
            return pcm16_to_pcmu(pcm)
        import av

        audio = av.AudioFrame.from_ndarray(
            np.frombuffer(pcm, dtype="<i2").reshape(1, -1), format="s16", layout="mono"
        )
        audio.sample_rate = _OPUS_RATE
        audio.pts = self._pts
        self._pts += len(frame)
        packets = self._opus.encode(audio)
        return b"".join(bytes(packet) for packet in packets)
