"""Point lookups (lance_format/structural/point.py) against pylance.

Every fixture file pylance wrote in 2.1 and 2.2 (every structural layout: mini-block with and
without def levels, full-zip, constant and all-null pages, dictionaries, FSST, nested and list
columns, several pages), taken at the edges of its pages and of its mini-block chunks, one row
at a time, all at once, unsorted and with duplicates.  The truth is pylance's read of the file
and its own ``take_rows``.  A last test checks that these files drive every point decoder, so a
codec that silently fell back to the general path would not hide an untested kernel.
"""

from __future__ import annotations

import fixtures as fx
import lance.file
import numpy as np
import pyarrow as pa
import pytest
from fixtures import assert_tables_equal

from lance_format import LanceFileReader
from lance_format.structural import point
from lance_format.structural.column import owns_column
from lance_format.version import LanceFileVersion

# 2.1+ files with rows (2.0 files have no structural layouts; the empty theme has no rows)
POINT_IDS = [(t, v) for t, v in fx.FIXTURE_IDS if v != "2.0" and t != "empty"]
EDGE_ROWS = 48  # edge rows taken per file: up to half of them page edges, the rest chunk edges


def _leaves(reader: LanceFileReader):
    out = []

    def walk(f) -> None:
        if owns_column(f):
            out.append(reader._leaf_reader(f))
        else:
            for c in f.children:
                walk(c)

    for f in reader.lance_schema.fields:
        walk(f)
    return out


def _edges(reader: LanceFileReader) -> tuple[list[int], list]:
    """Rows at the first and last row of every page and every point-planned chunk, and the
    point plans of the file's pages."""
    n = reader.num_rows
    pages, chunks, plans = set(), set(), []
    for leaf in _leaves(reader):
        for page, start in zip(leaf.column.pages, leaf.page_starts.tolist(), strict=False):
            pages.update((start, start + page.num_rows - 1))
            plan = leaf.point(page)
            if plan is None:
                continue
            plans.append(plan)
            if isinstance(plan, point.FullZipPoint):  # no chunks: every row is its own
                continue
            first = plan.chunk_first_row + start
            chunks.update(first.tolist())
            chunks.update((first + plan.meta.chunk_values - 1).tolist())
    rng = fx.rng_for("point-edges", str(n))
    half = EDGE_ROWS // 2
    page_rows = rng.permutation(sorted(r for r in pages if 0 <= r < n)).tolist()[:half]
    chunk_rows = rng.permutation(sorted(r for r in chunks - pages if 0 <= r < n)).tolist()
    return sorted(set(page_rows + chunk_rows[: EDGE_ROWS - len(page_rows)])), plans


@pytest.mark.parametrize("point_id", POINT_IDS, ids=[f"{t}-{v}" for t, v in POINT_IDS])
def test_point_takes_at_page_and_chunk_edges(fixture_store, point_id) -> None:
    f = fixture_store.get(*point_id)
    expected = f.expected
    assert expected.num_rows > 0
    r = LanceFileReader(f.path)
    r.warm()
    rows, _ = _edges(r)
    theirs = lance.file.LanceFileReader(f.path).take_rows(rows, batch_size=8192).to_table()
    assert_tables_equal(r.take(rows), theirs, "edge rows, all at once")
    for row in rows[:: max(1, len(rows) // 12)]:
        assert_tables_equal(r.take([row]), expected.slice(row, 1), f"row {row}")
    mixed = fx.rng_for("point-mixed", f.id).permutation(rows + rows[:5]).tolist()
    assert_tables_equal(r.take(mixed), expected.take(pa.array(mixed)), "unsorted, duplicates")


def test_point_take_of_many_rows_across_pages(fixture_store) -> None:
    """A large take (thousands of rows over every page and chunk) through the point path,
    with neighbouring chunks read together."""
    for version in ("2.1", "2.2"):
        f = fixture_store.get("multipage", version)
        n = f.expected.num_rows
        rows = np.unique(fx.rng_for("point-many", version).integers(0, n, 5000))
        r = LanceFileReader(f.path)
        theirs = lance.file.LanceFileReader(f.path).take_rows(rows.tolist()).to_table()
        assert_tables_equal(r.take(rows), theirs, f"5000 rows of multipage {version}")


def test_fixtures_drive_every_point_decoder(fixture_store) -> None:
    """Value codecs, def-level codecs, FSST, both kinds of dictionary and full-zip pages
    all appear among the point plans of the fixture files (so the tests above run every
    kernel branch)."""
    kinds, defs, fsst, dictionaries, full_zip = set(), set(), False, set(), False
    for t, v in POINT_IDS:
        r = LanceFileReader(fixture_store.get(t, v).path)
        assert r.version >= LanceFileVersion.V2_1
        for plan in _edges(r)[1]:
            if isinstance(plan, point.FullZipPoint):
                full_zip = True
                continue
            kinds.add(plan.kind)
            if plan.has_def:
                defs.add(plan.def_kind)
            fsst = fsst or plan.table is not None
            d = plan.meta.dictionary
            if d is not None:
                is_string = pa.types.is_string(d.type) or pa.types.is_binary(d.type)
                dictionaries.add("variable" if is_string else "fixed")
    assert kinds == {point.FLAT, point.BITPACK, point.RLE, point.VARIABLE, point.BITS}
    assert {point.RLE_BLOCK, point.OUT_OF_LINE} <= defs
    assert fsst
    assert dictionaries == {"fixed", "variable"}
    assert full_zip
