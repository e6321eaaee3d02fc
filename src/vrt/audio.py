"""Small pure-Python audio helpers for the vRT audio formats (§8.2): G.711 µ-law,
test tones, frame arithmetic, RMS and an energy voice activity detector.

Only ``pcm16`` (signed 16-bit little-endian mono at the format's sample rate) and
``pcmu`` (G.711 µ-law, 8000 Hz mono) are supported. Opus packets cannot be handled
without a codec, so every helper raises :class:`ValueError` for an ``opus`` format.

µ-law follows ITU-T G.711 on 16-bit samples: the sign and magnitude are coded
separately, so the decision levels are symmetric around zero (a 14-bit coder fed with
``sample >> 2``, like the old ``audioop``, rounds small negative samples away from
zero instead). 0 encodes to ``0xFF`` and ``0xFF`` decodes to 0; magnitudes beyond
32635 clip to the largest code.
"""

from __future__ import annotations

import math
import operator
import sys
from array import array
from typing import Final, Literal, NamedTuple

from .protocol.formats import duration_ms
from .protocol.messages import Format

__all__ = [
    "EnergyVad",
    "VadEvent",
    "duration_ms",
    "frame_bytes",
    "pcm16_to_pcmu",
    "pcmu_to_pcm16",
    "rms",
    "silence",
    "tone",
]

_BIG_ENDIAN: Final = sys.byteorder == "big"
_BIAS: Final = 0x84  # G.711 µ-law bias for 16-bit input (33 in 14-bit units)
_CLIP: Final = 32635  # largest magnitude that still fits after adding the bias


def _decode_byte(code: int) -> int:
    code = ~code & 0xFF
    exponent = (code >> 4) & 0x07
    magnitude = ((((code & 0x0F) << 3) + _BIAS) << exponent) - _BIAS
    return -magnitude if code & 0x80 else magnitude


#: µ-law byte -> the little-endian bytes of its 16-bit sample.
_DECODE_LE: Final = tuple(
    _decode_byte(code).to_bytes(2, "little", signed=True) for code in range(256)
)
#: µ-law byte -> 16-bit sample, and its square.
_DECODE: Final = tuple(_decode_byte(code) for code in range(256))
_SQUARE: Final = tuple(sample * sample for sample in _DECODE)


def _build_encode_table() -> bytes:
    # Indexed by the sample as an unsigned 16-bit value, so that one lookup per sample
    # encodes. Each (segment, mantissa) covers a contiguous run of magnitudes, so the
    # table is built by runs rather than sample by sample.
    positive = bytearray()  # magnitudes 0..32768
    for exponent in range(8):
        for mantissa in range(16):
            end = ((17 + mantissa) << (exponent + 3)) - _BIAS  # first magnitude of the next code
            code = ~((exponent << 4) | mantissa) & 0xFF  # inverted, so positive has bit 7 set
            positive += bytes([code]) * (min(end, 32769) - len(positive))
    positive += bytes([positive[-1]]) * (32769 - len(positive))  # beyond _CLIP: clipped
    # Negative samples -32768..-1 are unsigned 32768..65535: magnitudes 32768 down to 1,
    # with the code's sign bit clear.
    clear_sign = bytes(code & 0x7F for code in range(256))
    negative = bytes(positive[32768:0:-1]).translate(clear_sign)
    return bytes(positive[:32768]) + negative


_ENCODE: Final = _build_encode_table()


def _reject_opus(fmt: Format) -> None:
    if fmt.encoding not in ("pcm16", "pcmu"):
        raise ValueError(
            f"{fmt.encoding} audio is not supported by vrt.audio: only pcm16 and pcmu are "
            "(an Opus packet needs a codec to decode)"
        )


def _samples(pcm16: bytes) -> array[int]:
    """Little-endian 16-bit samples as an array; a trailing odd byte is ignored."""
    samples = array("h")
    samples.frombytes(pcm16[: len(pcm16) & ~1])
    if _BIG_ENDIAN:
        samples.byteswap()
    return samples


def pcm16_to_pcmu(pcm16: bytes) -> bytes:
    """Encode signed 16-bit little-endian PCM to G.711 µ-law, one byte per sample."""
    unsigned = array("H")
    unsigned.frombytes(pcm16[: len(pcm16) & ~1])
    if _BIG_ENDIAN:
        unsigned.byteswap()
    return bytes(map(_ENCODE.__getitem__, unsigned))


def pcmu_to_pcm16(pcmu: bytes) -> bytes:
    """Decode G.711 µ-law to signed 16-bit little-endian PCM, two bytes per sample."""
    return b"".join(map(_DECODE_LE.__getitem__, pcmu))


def _sample_count(ms: float, rate: int) -> int:
    if ms < 0:
        raise ValueError(f"a duration cannot be negative: {ms} ms")
    return round(rate * ms / 1000)


def tone(ms: float, fmt: Format, freq: float = 440.0, amplitude: float = 0.2) -> bytes:
    """A sine tone of ``ms`` milliseconds in ``fmt`` (pcm16 at ``fmt.rate``, or pcmu).

    ``amplitude`` is a fraction of full scale. Slicing one long tone into frames keeps
    the phase continuous, unlike concatenating short tones. A whole-hertz tone repeats
    exactly every ``rate / gcd(rate, freq)`` samples (25 ms for 440 Hz at the usual
    rates), so one period is computed and repeated: a 10 s tone costs what 25 ms does.
    """
    _reject_opus(fmt)
    if not 0.0 <= amplitude <= 1.0:
        raise ValueError(f"amplitude must be between 0 and 1, not {amplitude}")
    rate = fmt.rate
    count = _sample_count(ms, rate)
    period = rate // math.gcd(rate, int(freq)) if float(freq).is_integer() and freq > 0 else 0
    computed = min(count, period) if period else count
    step = 2.0 * math.pi * freq / rate
    peak = amplitude * 32767.0
    samples = array("h", (round(peak * math.sin(step * n)) for n in range(computed)))
    if _BIG_ENDIAN:
        samples.byteswap()
    pcm16 = samples.tobytes()
    if computed < count:
        pcm16 = (pcm16 * -(-count // computed))[: 2 * count]
    return pcm16 if fmt.encoding == "pcm16" else pcm16_to_pcmu(pcm16)


def silence(ms: float, fmt: Format) -> bytes:
    """``ms`` milliseconds of digital silence in ``fmt``."""
    _reject_opus(fmt)
    count = _sample_count(ms, fmt.rate)
    return bytes(2 * count) if fmt.encoding == "pcm16" else b"\xff" * count


def frame_bytes(fmt: Format, ms: float = 20) -> int:
    """The payload size of ``ms`` milliseconds of ``fmt`` (whole samples)."""
    _reject_opus(fmt)
    count = _sample_count(ms, fmt.rate)
    return 2 * count if fmt.encoding == "pcm16" else count


def rms(payload: bytes, fmt: Format) -> float:
    """Root mean square level of ``payload`` on a 0..1 scale (1 is full scale)."""
    _reject_opus(fmt)
    if fmt.encoding == "pcm16":
        samples = _samples(payload)
        count = len(samples)
        # Integer products summed by C iterators: exact, and several times faster than
        # a generator expression (this runs on every input frame of the scripted agent).
        energy = sum(map(operator.mul, samples, samples))
    else:
        count = len(payload)
        energy = sum(map(_SQUARE.__getitem__, payload))
    if not count:
        return 0.0
    return math.sqrt(energy / count) / 32768.0


class VadEvent(NamedTuple):
    """What :class:`EnergyVad` detected, in audio time since its first input.

    ``speech-start``: ``at_ms`` is where the first loud frame begins; ``duration_ms`` is 0.
    ``speech-end``: ``at_ms`` is where the last loud frame ends and ``duration_ms`` is
    the speech from the start of the first loud frame to the end of the last one.
    """

    kind: Literal["speech-start", "speech-end"]
    at_ms: float
    duration_ms: float


class EnergyVad:
    """Energy voice activity detection on fixed analysis frames.

    Input of any size is cut into ``frame_ms`` frames (a remainder waits for the next
    :meth:`feed`), so the result does not depend on how the audio was chunked. Speech
    starts at a frame whose RMS is at least ``threshold``, and ends once ``hangover_ms``
    of frames below it follow the last loud frame. Times come from payload sizes, never
    from a clock, so the detector is deterministic.
    """

    def __init__(
        self, threshold: float = 0.02, hangover_ms: float = 300.0, frame_ms: float = 20.0
    ) -> None:
        if frame_ms <= 0 or hangover_ms < 0:
            raise ValueError("frame_ms must be positive and hangover_ms non-negative")
        self.threshold = threshold
        self.hangover_ms = hangover_ms
        self.frame_ms = frame_ms
        self.reset()

    def reset(self) -> None:
        """Forget all input: no speech, audio time back to 0."""
        self._pending = b""
        self._format: Format | None = None
        self._time_ms = 0.0
        self._speech_start: float | None = None
        self._last_loud_end = 0.0
        self._quiet_key: tuple[str, float] | None = None
        self._quiet = b""

    def _quiet_bytes(self, fmt: Format) -> bytes:
        """Bytes that only quiet samples contain. A frame made of nothing else has every
        sample below the threshold, so its RMS is too: ``bytes.translate`` settles it in
        C, and the RMS is computed only for frames that may be loud. For pcm16 these are
        high bytes ``-k..k-1`` with ``256 k`` under the threshold; for pcmu, the codes
        whose sample is under it."""
        key = (fmt.encoding, self.threshold)
        if self._quiet_key != key:
            level = self.threshold * 32768
            if fmt.encoding == "pcm16":
                k = max(0, math.ceil(level / 256) - 1)
                self._quiet = bytes(range(k)) + bytes(range(256 - k, 256)) if k else b""
            else:
                self._quiet = bytes(c for c in range(256) if abs(_DECODE[c]) < level)
            self._quiet_key = key
        return self._quiet

    @property
    def speaking(self) -> bool:
        return self._speech_start is not None

    @property
    def time_ms(self) -> float:
        """Audio time analysed so far (excluding a partial frame still pending)."""
        return self._time_ms

    def feed(self, payload: bytes, fmt: Format) -> list[VadEvent]:
        """Analyse ``payload`` in ``fmt`` and return what it detected, in order."""
        _reject_opus(fmt)
        if self._format is not None and (
            self._format.encoding != fmt.encoding or self._format.rate != fmt.rate
        ):
            self._pending = b""  # a partial frame of another format cannot be completed
        self._format = fmt
        size = frame_bytes(fmt, self.frame_ms)
        frame_ms = duration_ms(bytes(size), fmt)
        data = self._pending + payload
        quiet = self._quiet_bytes(fmt)
        wide = fmt.encoding == "pcm16"
        events: list[VadEvent] = []
        offset = 0
        while len(data) - offset >= size:
            frame = data[offset : offset + size]
            offset += size
            start = self._time_ms
            self._time_ms += frame_ms
            telling = frame[1::2] if wide else frame  # pcm16 is little-endian: high bytes
            if telling.translate(None, quiet) and rms(frame, fmt) >= self.threshold:
                if self._speech_start is None:
                    self._speech_start = start
                    events.append(VadEvent("speech-start", start, 0.0))
                self._last_loud_end = self._time_ms
            elif (
                self._speech_start is not None
                and self._time_ms - self._last_loud_end >= self.hangover_ms
            ):
                speech = self._last_loud_end - self._speech_start
                events.append(VadEvent("speech-end", self._last_loud_end, speech))
                self._speech_start = None
        self._pending = data[offset:]
        return events
