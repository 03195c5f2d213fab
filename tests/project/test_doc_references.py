"""The documents the code cites are in the repository: every ``docs/...`` path named in a
module of ``lance_format``, ``flight_server`` or ``scripts`` exists, and no text points at the
outside notes the code was first written from ("Seed 002", "digest §3")."""

from __future__ import annotations

import re

from repo_paths import REPO

DOC_PATH = re.compile(r"\bdocs/[\w./-]*\w")
OUTSIDE = re.compile(r"\bseed \d|\bdigest\s*§|§|format-digest|shared/spec", re.IGNORECASE)


def _sources() -> dict[str, str]:
    files = [
        p
        for package in ("lance_format", "flight_server", "scripts")
        for p in sorted((REPO / package).rglob("*.py"))
        if not p.name.endswith("_pb2.py")
    ]
    return {str(p.relative_to(REPO)): p.read_text() for p in files}


def test_cited_documents_exist():
    sources = _sources()
    cited = {m for text in sources.values() for m in DOC_PATH.findall(text)}
    assert len(cited) >= 5  # the docstrings do cite docs/format/
    assert sorted(c for c in cited if not (REPO / c).exists()) == []


def test_no_references_to_outside_documents():
    found = [
        f"{name}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}"
        for name, text in _sources().items()
        for m in OUTSIDE.finditer(text)
    ]
    assert found == []


def test_the_patterns_catch_what_they_must():
    """The patterns themselves, on the forms the old docstrings used."""
    for bad in ('Seed 003 ("Search Cache")', "see digest §4.2", "format-digest.md"):
        assert OUTSIDE.search(bad), bad
    for fine in ("seed=42", "a seeded k-means", "hmac.compare_digest(a, b)"):
        assert not OUTSIDE.search(fine), fine
    assert DOC_PATH.findall("see docs/format/table.md; and docs/format/v2_0.md:") == [
        "docs/format/table.md",
        "docs/format/v2_0.md",
    ]
