"""Every relative link of README.md and of every page of docs/ (the dated runs of
docs/runs/ included) leads to a file of the repository, and every #anchor to a heading
of the file it names (GitHub's anchors)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Pages that must link on (the front page and the protocol's reference).
LINKING = ("README.md", "docs/protocol.md")
DOCUMENTS = (
    *LINKING,
    *sorted(
        str(page.relative_to(ROOT))
        for page in (ROOT / "docs").rglob("*.md")
        if str(page.relative_to(ROOT)) not in LINKING
    ),
)
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(markdown: str) -> set[str]:
    """GitHub's anchor of each heading: lower case, punctuation dropped, spaces to -."""
    found = set()
    for heading in re.findall(r"^#+ (.+)$", markdown, re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        found.add(slug)
    return found


def links(document: str) -> list[str]:
    text = (ROOT / document).read_text(encoding="utf-8")
    text = re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)
    return [link for link in _LINK.findall(text) if not re.match(r"[a-z]+:", link)]


def test_anchors_are_githubs() -> None:
    assert anchors("## §5.1 State\n## Where the text is silent\n") == {
        "51-state",
        "where-the-text-is-silent",
    }


@pytest.mark.parametrize("document", DOCUMENTS)
def test_every_relative_link_resolves(document: str) -> None:
    found = links(document)
    if document in LINKING:
        assert found, f"{document} has no relative links"
    source = ROOT / document
    for link in found:
        path, _, anchor = link.partition("#")
        target = (source.parent / path).resolve() if path else source
        assert target.exists(), f"{document}: {link} names no file"
        assert target.is_relative_to(ROOT), f"{document}: {link} leaves the repository"
        if anchor:
            assert anchor in anchors(target.read_text(encoding="utf-8")), (
                f"{document}: {link}: no heading with that anchor"
            )
