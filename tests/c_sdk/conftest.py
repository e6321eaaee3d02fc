"""The C client's build for the tests of this folder: ``VRT_C_BUILD`` (a build folder of
clients/c), or one CMake build per run into a temporary folder. Skips, saying why, where
cmake, a C compiler or the Debian packages clients/c needs are missing."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
C_ROOT = ROOT / "clients" / "c"
PACKAGES = "libjsmn-dev libwslay-dev libmbedtls-dev"


@pytest.fixture(scope="session")
def build() -> Iterator[Path]:
    """A build folder with vrt_tests, vrt-c-chat and vrt-c-client-under-test."""
    given = os.environ.get("VRT_C_BUILD")
    if given:
        yield Path(given)
        return
    if shutil.which("cmake") is None or (shutil.which("cc") or shutil.which("gcc")) is None:
        pytest.skip("cmake and a C compiler are needed to build clients/c")
    with tempfile.TemporaryDirectory(prefix="vrt-c-build-") as folder:
        configure = subprocess.run(
            ["cmake", "-S", str(C_ROOT), "-B", folder, "-DCMAKE_BUILD_TYPE=Release"],
            capture_output=True,
            text=True,
            check=False,
        )
        if configure.returncode != 0:
            last = (configure.stderr.strip().splitlines() or ["(no output)"])[-1]
            pytest.skip(f"clients/c does not configure (Debian packages {PACKAGES}?): {last}")
        subprocess.run(
            ["cmake", "--build", folder, "-j2"], capture_output=True, text=True, check=True
        )
        yield Path(folder)
