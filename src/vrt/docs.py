"""vrt's documentation as the package carries it (``vrt docs``): the Markdown of the
repository's ``docs/``, the conformance suite's guide and the protocol text with its
member contract (``spec/``), so that help texts can point a package user at a document
that is on their machine.

A wheel carries them as ``vrt/_artifacts/docs`` and ``vrt/_artifacts/spec``
(pyproject.toml); a source checkout or an editable install reads them from the
repository.
"""

from __future__ import annotations

from pathlib import Path

from .protocol.artifacts import artifact_root

__all__ = ["document", "topics"]


def _files() -> dict[str, Path]:
    root = artifact_root()
    folder = root / "docs"
    files = {path.stem: path for path in sorted(folder.glob("*.md"))}
    guide = root / "conformance" / "README.md"
    if "conformance" not in files and guide.is_file():  # a checkout
        files["conformance"] = guide
    for path in sorted((root / "spec").glob("*")):
        if path.suffix in (".md", ".txt"):
            files.setdefault(path.stem, path)
    return files


def topics() -> list[tuple[str, str]]:
    """Every document: its name and its title (the first heading)."""
    listed = []
    for name, path in _files().items():
        with path.open(encoding="utf-8") as lines:
            if path.suffix == ".txt":  # the protocol text: its first line is its title
                title = next(lines, name).strip()
            else:
                title = next(
                    (line.lstrip("# ").strip() for line in lines if line.startswith("#")), name
                )
        listed.append((name, title))
    return listed


def document(topic: str) -> str:
    """The text of ``topic`` (its file name without ``.md`` or ``.txt``); KeyError if none."""
    return _files()[topic.removesuffix(".md").removesuffix(".txt")].read_text(encoding="utf-8")
