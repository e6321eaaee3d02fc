"""Settings for every test: the core checks every message vrt writes against the
schemas (``check_encoding``), here and in the ``vrt serve`` processes tests start
(``VRT_STRICT=1``), so that a message the spec forbids fails the test that made it."""

from __future__ import annotations

import os

from vrt.protocol.codec import check_encoding

os.environ["VRT_STRICT"] = "1"
check_encoding(True)
