"""vrt: the vRT (vRealTime) protocol for realtime voice and text agents."""

__version__ = "0.1.0"
