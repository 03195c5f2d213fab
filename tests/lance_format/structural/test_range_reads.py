"""Contiguous range reads as a scan makes them: consecutive steps that cut pages and
mini-block chunks mid-way (flat mini-block pages decode such a part by chunk range and a
slice, other pages through row indices), against pylance's own read_range."""

from __future__ import annotations

import lance.file
import pytest
from fixtures import assert_tables_equal

from lance_format.cache import PageCache
from lance_format.reader import LanceFileReader

THEMES = ("multipage", "strings", "encodings", "null_pages", "dictionary", "lists")
VERSIONS = ("2.1", "2.2")


def _theirs(path: str, start: int, count: int):
    return lance.file.LanceFileReader(path).read_range(start, count, batch_size=8192).to_table()


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("theme", THEMES)
def test_scan_steps_match_pylance(fixture_store, theme: str, version: str) -> None:
    f = fixture_store.get(theme, version)
    n = f.expected.num_rows
    ours = LanceFileReader(f.path, page_cache=PageCache(0))  # no cache: every step decodes
    step = n // 7 + 13  # odd: steps start and end inside chunks and pages
    for start in range(0, n, step):
        stop = min(start + step, n)
        got = ours.read_range(start, stop)
        assert_tables_equal(got, _theirs(f.path, start, stop - start), f"step {start}:{stop}")


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("theme", ("multipage", "null_pages"))
def test_ranges_around_page_starts_match_pylance(fixture_store, theme: str, version: str) -> None:
    """One-row and short ranges just before, at and after each page start (a range of one
    row, and ranges ending at the last row of a page or starting at its first)."""
    f = fixture_store.get(theme, version)
    n = f.expected.num_rows
    ours = LanceFileReader(f.path, page_cache=PageCache(0))
    for p in [s for s in f.page_starts if 0 < s < n][:6]:
        for start, stop in ((p - 1, p), (p, p + 1), (p - 5, p), (p, p + 5), (p - 3, p + 4)):
            start, stop = max(0, start), min(n, stop)
            got = ours.read_range(start, stop)
            assert_tables_equal(got, _theirs(f.path, start, stop - start), f"{start}:{stop}")
