"""Random access cost: with warm search metadata, one value costs at most two read requests.

Once the search cache is filled (``warm()``, or a first take that fills it), a take of one row touches at most 2 IOPs per column: mini-block reads the
one chunk (chunk offsets, repetition index and dictionary are cached); full-zip reads the
repetition-index entry and then the value.  Counted with the reader's ``io_stats``, which sees
every positional read.

The multipage fixture has, in 2.1/2.2, exactly one physical column per top-level field (no
structs), so field k is column k when we size columns with the independent container parser.
"""

from __future__ import annotations

import fixtures as fx
import pyarrow as pa
import pytest
from fixtures import assert_tables_equal

VERSIONS_21 = ("2.1", "2.2")  # structural encodings (2.0 has no search cache contract)
COLUMNS = {
    "id": "mini-block, bitpacked",
    "int32_nulls": "mini-block with def levels",
    "string": "mini-block variable width",
    "low_card": "mini-block dictionary",
    "list_int32": "mini-block list (repetition index)",
    "list_string": "mini-block list of strings",
    "vec32": "mini-block FSL",
    "long_string": "full-zip variable width",
    "vec128": "full-zip fixed width",
}
MAX_REQUESTS_PER_VALUE = 2


def _rows(n: int, page_starts: list[int], seed: str) -> list[int]:
    """Rows in several pages: page edges and random rows."""
    rng = fx.rng_for("take-io", seed)
    rows = {0, n - 1}
    for p in page_starts:
        if 0 < p < n:
            rows |= {p - 1, p}
    rows |= set(rng.integers(0, n, 6).tolist())
    return sorted(rows)[:16]


@pytest.mark.parametrize("column", list(COLUMNS), ids=list(COLUMNS))
@pytest.mark.parametrize("version", VERSIONS_21)
def test_take_one_row_costs_at_most_two_requests(api, fixture_store, version, column) -> None:
    f = fixture_store.get("multipage", version)
    col_idx = f.expected.column_names.index(column)
    col_bytes = fx.column_bytes(f.path, col_idx)
    assert col_bytes > 20_000, f"{column}: fixture column too small to prove anything"
    cache = api.SearchCache(64 << 20)
    r = api.LanceFileReader(f.path, cache=cache)
    r.warm()
    expected = f.expected.select([column])
    for row in _rows(f.expected.num_rows, f.page_starts, f"{version}/{column}"):
        r.io_stats.reset()
        got = r.take([row], columns=[column])
        requests, nbytes = r.io_stats.requests, r.io_stats.bytes_read
        assert_tables_equal(got, expected.slice(row, 1), f"{column} row {row}")
        assert requests >= 1, "values are not cached, so a take must read something"
        assert requests <= MAX_REQUESTS_PER_VALUE, (
            f"{COLUMNS[column]}: take of row {row} made {requests} read requests"
        )
        assert nbytes * 10 < col_bytes, (
            f"{COLUMNS[column]}: take of row {row} read {nbytes} of the column's {col_bytes} bytes"
        )


@pytest.mark.parametrize("version", VERSIONS_21)
def test_take_many_rows_costs_at_most_two_requests_per_row(api, fixture_store, version) -> None:
    f = fixture_store.get("multipage", version)
    cols = ["long_string", "list_int32"]
    r = api.LanceFileReader(f.path, cache=api.SearchCache(64 << 20))
    r.warm()
    rows = [59_999, 3, 31_000, 17_123, 8_000]
    r.io_stats.reset()
    got = r.take(rows, columns=cols)
    assert_tables_equal(got, f.expected.select(cols).take(pa.array(rows)), "take")
    assert r.io_stats.requests <= MAX_REQUESTS_PER_VALUE * len(rows) * len(cols)


@pytest.mark.parametrize("version", fx.VERSIONS[1:])
def test_take_in_a_million_row_column(api, fixture_store, version) -> None:
    f = fixture_store.get("big", version)
    r = api.LanceFileReader(f.path, cache=api.SearchCache(64 << 20))
    r.warm()
    for row in (0, 299_999, 300_000, 777_777, 1_199_999):
        r.io_stats.reset()
        got = r.take([row], columns=["int32_nulls"])
        assert_tables_equal(got, f.expected.select(["int32_nulls"]).slice(row, 1), f"row {row}")
        assert 1 <= r.io_stats.requests <= MAX_REQUESTS_PER_VALUE
        assert r.io_stats.bytes_read < 64 * 1024


@pytest.mark.parametrize("version", VERSIONS_21)
def test_first_take_fills_the_cache(api, fixture_store, version) -> None:
    """Without warm(): the first take loads the search metadata, the next ones hit it."""
    f = fixture_store.get("multipage", version)
    cache = api.SearchCache(64 << 20)
    r = api.LanceFileReader(f.path, cache=cache)
    r.take([10], columns=["long_string"])
    assert cache.misses > 0 and cache.currsize > 0
    hits_before = cache.hits
    r.io_stats.reset()
    got = r.take([11], columns=["long_string"])
    assert_tables_equal(got, f.expected.select(["long_string"]).slice(11, 1), "row 11")
    assert r.io_stats.requests <= MAX_REQUESTS_PER_VALUE
    assert cache.hits > hits_before


@pytest.mark.parametrize("version", VERSIONS_21)
def test_warm_then_take_hits_the_cache(api, fixture_store, version) -> None:
    f = fixture_store.get("multipage", version)
    cache = api.SearchCache(64 << 20)
    r = api.LanceFileReader(f.path, cache=cache)
    r.warm()
    assert cache.currsize > 0 and cache.misses > 0
    hits, misses = cache.hits, cache.misses
    r.take([123, 45_678], columns=list(COLUMNS))
    assert cache.hits > hits
    assert cache.misses == misses, "warm() should have loaded every page's search metadata"


@pytest.mark.parametrize("capacity", [0, 4 * 1024, 64 * 1024])
@pytest.mark.parametrize("version", VERSIONS_21)
def test_cache_capacity_is_respected(api, fixture_store, version, capacity) -> None:
    f = fixture_store.get("multipage", version)
    cache = api.SearchCache(capacity)
    r = api.LanceFileReader(f.path, cache=cache)
    r.warm()
    assert cache.currsize <= capacity
    rows = list(range(0, 60_000, 3_997))
    for row in rows:
        got = r.take([row], columns=["list_int32", "long_string", "low_card"])
        assert cache.currsize <= capacity
    assert_tables_equal(
        got, f.expected.select(["list_int32", "long_string", "low_card"]).slice(rows[-1], 1), "last"
    )
    full = r.take(rows)
    assert cache.currsize <= capacity
    assert_tables_equal(full, f.expected.take(pa.array(rows)), "take after eviction")


def test_cache_shared_between_readers(api, fixture_store) -> None:
    f = fixture_store.get("multipage", "2.2")
    cache = api.SearchCache(64 << 20)
    api.LanceFileReader(f.path, cache=cache).warm()
    misses = cache.misses
    r2 = api.LanceFileReader(f.path, cache=cache)
    r2.io_stats.reset()
    got = r2.take([5], columns=["long_string"])
    assert_tables_equal(got, f.expected.select(["long_string"]).slice(5, 1), "row 5")
    assert cache.misses == misses
    assert cache.hits > 0
