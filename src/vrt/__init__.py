"""vrt: the vRT (vRealTime) protocol for realtime voice and text agents."""

from .errors import VrtException

__all__ = ["VrtException"]

__version__ = "0.1.0"
