"""LICENSE is the standard Apache License 2.0, unmodified, as pyproject.toml declares."""

from __future__ import annotations

import hashlib
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: SHA-256 of https://www.apache.org/licenses/LICENSE-2.0.txt, the canonical text (the
#: same bytes as the LICENSE files of google-genai 3.6.1 and sniffio 1.3.1, two
#: Apache-2.0 wheels from unrelated authors).
APACHE_2_0_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"


def test_the_license_file_is_the_unmodified_apache_license_2_0() -> None:
    text = (ROOT / "LICENSE").read_bytes()
    assert hashlib.sha256(text).hexdigest() == APACHE_2_0_SHA256
    assert b"Apache License\n                           Version 2.0, January 2004" in text
    assert b"END OF TERMS AND CONDITIONS" in text


def test_pyproject_declares_the_license_of_the_file() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["license"] == "Apache-2.0"
    # Without license-files, hatchling's default globs (LICEN[CS]E*, ...) put LICENSE in
    # the wheel's .dist-info/licenses and name it in License-File (PEP 639).
    assert "LICENSE" in project.get("license-files", ["LICENSE"])
