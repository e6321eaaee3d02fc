"""Load and soak generation for a vRT server on loopback (``python -m load --help``)."""
