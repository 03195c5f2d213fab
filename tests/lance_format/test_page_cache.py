"""The decoded-page cache: repeated reads skip decoding, results stay pylance's, bounds hold.

Every read is compared with pylance's read of the same file (the fixture's ``expected``) or
dataset, once without the cache, once filling it and once served from it.
"""

from __future__ import annotations

import json
import os
import re
import urllib.request

import fixtures as fx
import lance
import numpy as np
import pyarrow as pa
import pyarrow.flight as fl
import pytest
from fixtures import assert_tables_equal
from flight_fixtures import serve
from hypothesis import given, settings
from hypothesis import strategies as st

from flight_server.metrics import ServerMetrics, serve_metrics
from lance_format import LanceFileReader, PageCache, SearchCache, dataset
from lance_format.cache import page_cache, set_page_cache_bytes

VERSIONS_21 = ("2.1", "2.2")
THEMES = ("multipage", "null_pages", "lists", "structs")


def _ranges(n: int, page_starts: list[int]) -> list[tuple[int, int]]:
    """Ranges inside a page, straddling page edges, and the whole file."""
    out = [(0, n), (0, min(n, 7))]
    for p in page_starts[1:3]:
        if 3 <= p < n - 3:
            out += [(p - 3, p + 3), (p, min(n, p + 100))]
    if n > 10:
        out.append((n // 3, n // 3 + 5))
    return out


@pytest.mark.parametrize("version", VERSIONS_21)
@pytest.mark.parametrize("theme", THEMES)
def test_reads_equal_pylance_with_and_without_the_cache(fixture_store, theme, version) -> None:
    f = fixture_store.get(theme, version)
    n = f.expected.num_rows
    rows = np.sort(fx.rng_for("page-cache", theme, version).choice(n, min(n, 40), replace=False))
    pages = PageCache(64 << 20, admit_after=1)
    plain = LanceFileReader(f.path, page_cache=PageCache(0))
    cached = LanceFileReader(f.path, page_cache=pages)
    for what, reader in (("uncached", plain), ("filling", cached), ("hot", cached)):
        for a, b in _ranges(n, f.page_starts):
            got = reader.read_range(a, b)
            assert_tables_equal(got, f.expected.slice(a, b - a), f"{what} [{a}, {b})")
        # a take uses cached pages (after the range reads) but never fills the cache
        assert_tables_equal(reader.take(rows), f.expected.take(pa.array(rows)), f"{what} take")
    assert plain.page_cache.stats()["entries"] == 0
    stats = pages.stats()
    assert stats["hits"] > 0 and stats["entries"] > 0 and stats["bytes"] <= 64 << 20


@pytest.mark.parametrize("version", VERSIONS_21)
def test_a_hot_read_decodes_nothing_and_reads_no_bytes(fixture_store, version) -> None:
    f = fixture_store.get("multipage", version)
    pages = PageCache(256 << 20)  # pages are kept from their second read on
    r = LanceFileReader(f.path, cache=SearchCache(64 << 20, pages=pages))
    assert r.page_cache is pages  # the search cache carries the page cache to its readers
    assert_tables_equal(r.read(), f.expected, "first read")
    once = pages.stats()
    assert once["misses"] > 0 and once["hits"] == 0 and once["entries"] == 0
    assert_tables_equal(r.read(), f.expected, "second read")
    first = pages.stats()
    assert first["misses"] == 2 * once["misses"] and first["entries"] == once["misses"]
    r.io_stats.reset()
    assert_tables_equal(r.read(), f.expected, "third read")
    second = pages.stats()
    assert r.io_stats.requests == 0, "every page came from the cache: nothing to read"
    assert second["misses"] == first["misses"]
    assert second["hits"] == first["entries"]  # one hit per page
    # a new reader of the same file (as a new dataset object would open) shares the pages
    again = LanceFileReader(f.path, page_cache=pages)
    again.io_stats.reset()
    assert_tables_equal(again.read_range(100, 5000), f.expected.slice(100, 4900), "new reader")
    assert pages.stats()["misses"] == first["misses"]


@settings(max_examples=60, deadline=None)
@given(
    capacity=st.integers(0, 5000),
    ops=st.lists(st.tuples(st.integers(0, 40), st.integers(1, 3000)), min_size=1, max_size=200),
)
def test_cache_never_exceeds_its_byte_bound(capacity, ops) -> None:
    cache = PageCache(capacity, admit_after=1)
    sizes: dict[int, int] = {}
    for key, size in ops:
        value = np.zeros(size, dtype=np.uint8)
        cache.put(key, value)
        sizes[key] = size
        assert cache.currsize <= capacity
        got = cache.get(key)
        # kept unless it alone exceeds the bound (or the cache is off)
        assert (got is not None) == (0 < size <= capacity)
    stats = cache.stats()
    assert stats["bytes"] == cache.currsize <= capacity
    assert stats["bytes"] == sum(sizes[k] for k in range(41) if cache.get(k) is not None)
    # a full cache has evicted what no longer fits
    kept = sum(1 for k in range(41) if cache.get(k) is not None)
    inserted = len([1 for _, s in ops if 0 < s <= capacity])
    assert stats["evictions"] <= inserted and (kept == 0 or stats["evictions"] >= 0)


@pytest.mark.parametrize("capacity", [1, 300 * 1024])
def test_reads_through_a_small_cache_stay_within_it(fixture_store, capacity) -> None:
    f = fixture_store.get("multipage", "2.2")
    pages = PageCache(capacity, admit_after=1)
    r = LanceFileReader(f.path, page_cache=pages)
    n = f.expected.num_rows
    starts = sorted(set(f.page_starts) | set(range(0, n, 7000)))  # pages read from their start
    for a in (p for p in starts if p < n):
        b = min(n, a + 9000)
        assert_tables_equal(r.read_range(a, b), f.expected.slice(a, b - a), f"[{a}, {b})")
        assert pages.currsize <= capacity
    stats = pages.stats()
    assert stats["bytes"] <= capacity
    if capacity > 1:  # pages were kept, and the file is larger than the bound
        assert stats["evictions"] > 0 and stats["entries"] > 0


def test_pages_are_admitted_on_their_second_miss_and_seen_keys_stay_bounded() -> None:
    from lance_format.cache import SEEN_KEYS

    cache = PageCache(1 << 20)
    assert not cache.admits("p") and cache.admits("p")  # the second miss admits
    assert not cache.admits("q")
    for k in range(SEEN_KEYS + 10):  # a long one-off scan: the memory of misses is bounded
        cache.admits(("scan", k))
    assert len(cache._seen) <= SEEN_KEYS
    assert PageCache(1 << 20, admit_after=1).admits("p")


def test_a_page_read_in_several_steps_counts_once_towards_admission(fixture_store) -> None:
    f = fixture_store.get("multipage", "2.2")
    pages = PageCache(64 << 20)
    r = LanceFileReader(f.path, page_cache=pages)
    p0, p1 = f.page_starts[0], f.page_starts[1]
    steps = [(p0, (p0 + p1) // 2), ((p0 + p1) // 2, p1)]

    def scan() -> None:
        for a, b in steps:
            assert_tables_equal(r.read_range(a, b), f.expected.slice(a, b - a), f"[{a}, {b})")

    scan()
    assert pages.stats()["entries"] == 0, "one pass over a page is not a second read"
    scan()
    kept = pages.stats()["entries"]
    assert kept > 0
    hits = pages.stats()["hits"]
    scan()
    assert pages.stats()["hits"] > hits and pages.stats()["entries"] == kept


def test_new_versions_never_serve_stale_pages(tmp_path) -> None:
    uri = str(tmp_path / "ds")
    lance.write_dataset(_table(0), uri, max_rows_per_file=4000)
    caches = SearchCache(64 << 20, pages=PageCache(64 << 20, admit_after=1))

    def check(what: str) -> None:
        ours = dataset(uri, cache=caches)
        assert ours.to_table().equals(lance.dataset(uri).to_table()), what
        idx = np.arange(0, lance.dataset(uri).count_rows(), 37)
        assert ours.take(idx).equals(lance.dataset(uri).take(idx)), what

    check("v1")
    assert caches.pages.stats()["entries"] > 0
    lance.dataset(uri).delete("id % 5 = 0")
    check("after a delete")
    lance.dataset(uri).update({"x": "x + 1000"}, where="id < 3000")
    check("after an update")
    lance.write_dataset(_table(1), uri, mode="overwrite", max_rows_per_file=4000)
    check("after an overwrite")
    # an old version still reads its own rows
    old = dataset(uri, version=1, cache=caches)
    assert old.to_table().equals(lance.dataset(uri, version=1).to_table())


def test_a_file_rewritten_at_the_same_path_is_read_afresh(tmp_path) -> None:
    import lance.file

    path = str(tmp_path / "f.lance")
    pages = PageCache(64 << 20, admit_after=1)
    for seed in (0, 1):
        table = _table(seed)
        with lance.file.LanceFileWriter(path, table.schema, version="2.1") as w:
            w.write_batch(table)
        expected = lance.file.LanceFileReader(path).read_all().to_table()
        for _ in range(2):  # fill, then hit
            got = LanceFileReader(path, page_cache=pages).read()
            assert got.equals(expected), f"seed {seed}"


def test_process_cache_setting_is_used_by_readers_without_one(fixture_store) -> None:
    f = fixture_store.get("multipage", "2.1")
    before = page_cache().capacity_bytes
    try:
        set_page_cache_bytes(32 << 20)
        r = LanceFileReader(f.path)
        assert r.page_cache is page_cache()
        for _ in range(3):
            r.read_range(0, 1000)
        assert page_cache().stats()["hits"] > 0
        set_page_cache_bytes(0)  # off: nothing kept, reads still right
        r2 = LanceFileReader(f.path)
        assert_tables_equal(r2.read_range(0, 1000), f.expected.slice(0, 1000), "off")
        assert page_cache().stats()["entries"] == 0
    finally:
        set_page_cache_bytes(before)


def test_server_page_cache_flag_stats_and_metrics(tmp_path) -> None:
    root = str(tmp_path)
    lance.write_dataset(_table(0), os.path.join(root, "t"), max_rows_per_file=4000)
    theirs = lance.dataset(os.path.join(root, "t")).to_table()
    with serve(root, "--page-cache-bytes", "32M") as s:
        c = fl.connect(s.location)
        info = c.get_flight_info(fl.FlightDescriptor.for_path("t"))
        for _ in range(3):  # the second read keeps the pages, the third is served from them
            got = pa.concat_tables(c.do_get(e.ticket).read_all() for e in info.endpoints)
            assert got.equals(theirs)
        stats = _action(c, "cache_stats")["pages"]
        assert stats["capacity_bytes"] == 32 << 20
        assert stats["hits"] > 0 and 0 < stats["bytes"] <= 32 << 20
        c.close()
    with serve(root, "--page-cache-bytes", "0") as s:
        c = fl.connect(s.location)
        info = c.get_flight_info(fl.FlightDescriptor.for_path("t"))
        got = pa.concat_tables(c.do_get(e.ticket).read_all() for e in info.endpoints)
        assert got.equals(theirs)
        assert _action(c, "health")["page_cache"]["entries"] == 0
        c.close()
    # the metrics a server exposes for its page cache
    metrics = ServerMetrics()
    pages = PageCache(1 << 20)
    metrics.watch_page_cache(pages.stats)
    pages.put("a", np.zeros(100, np.uint8))
    pages.get("a")
    pages.get("b")
    with serve_metrics(metrics) as endpoint:
        text = urllib.request.urlopen(endpoint.url).read().decode()
    values = dict(re.findall(r"^(lance_flight_page_cache_\w+) (\S+)$", text, re.M))
    assert float(values["lance_flight_page_cache_hits_total"]) == 1
    assert float(values["lance_flight_page_cache_misses_total"]) == 1
    assert float(values["lance_flight_page_cache_bytes"]) == pages.currsize > 0
    assert float(values["lance_flight_page_cache_capacity_bytes"]) == 1 << 20


def _action(client, name: str) -> dict:
    (result,) = client.do_action(fl.Action(name, b"{}"))
    return json.loads(result.body.to_pybytes())


def _table(seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    n = 10_000
    return pa.table(
        {
            "id": np.arange(n, dtype=np.int64),
            "x": rng.integers(0, 1 << 40, n),
            "s": pa.array([f"s{v}" for v in rng.integers(0, 500, n)]),
            "l": pa.array([list(range(v % 4)) for v in range(n)], pa.list_(pa.int32())),
        }
    )


def test_scans_larger_than_the_cache_keep_a_stable_share_cached() -> None:
    """Repeated scans of twice the budget: plain LRU would evict each page just before its
    next read (no hits, an admission on every read); the cache keeps half the pages."""
    cache = PageCache(10_000)
    hits = []
    for _ in range(6):
        hit = 0
        for key in range(20):
            if cache.get(key) is not None:
                hit += 1
            elif cache.admits(key):
                cache.put(key, np.zeros(1000, dtype=np.uint8))
        hits.append(hit)
        assert cache.currsize <= 10_000
    assert hits[:2] == [0, 0] and hits[2:] == [10, 10, 10, 10]
    assert cache.stats()["evictions"] == 0
    # a page now read more often than the least recently used one gets in, evicting it
    assert cache.get(15) is None and cache.admits(15)
    cache.put(15, np.zeros(1000, dtype=np.uint8))
    assert cache.get(15) is not None and cache.get(0) is None
    assert cache.stats()["evictions"] == 1


# -- derived entries: results made of cached pages ------------------------------------------


def _referenced_bytes(cache: PageCache) -> int:
    """The distinct memory the cache's entries keep alive, counted independently of the
    cache's own accounting: every Arrow buffer of every resident value (a page here is an
    Arrow array; a derived value is a table), each buffer once."""
    seen: dict[int, int] = {}
    for value, _size in cache._entries.values():
        arrays = [value] if isinstance(value, pa.Array) else value.table.columns
        for arr in arrays:
            for chunk in arr.chunks if isinstance(arr, pa.ChunkedArray) else [arr]:
                for buf in chunk.buffers():
                    if buf is not None:
                        seen[buf.address] = buf.size
    return sum(seen.values())


class _Result:
    """A derived value as a server keeps one: its table and something else."""

    def __init__(self, table: pa.Table):
        self.table = table


def test_derived_entry_is_charged_only_for_memory_no_page_holds() -> None:
    cache = PageCache(10 << 20, admit_after=1)
    page = pa.array(np.arange(100_000, dtype=np.int64))  # 800 KB
    cache.put("p", page)
    alone = cache.currsize
    shared = pa.table({"a": pa.chunked_array([page.slice(10, 5000), page.slice(90_000)])})
    assert cache.put_derived("d", _Result(shared), shared)
    assert 0 < cache.currsize - alone <= 1024  # the slices cost their bookkeeping only
    fresh = pa.array(np.arange(50_000, dtype=np.int64))  # 400 KB of its own
    mixed = pa.table({"a": page.slice(0, 50_000), "b": fresh})
    assert cache.put_derived("m", _Result(mixed), mixed)
    assert cache.currsize - alone >= fresh.nbytes
    assert cache.get_derived("d").table is shared and cache.get_derived("nope") is None
    stats = cache.stats()
    assert (stats["derived"], stats["derived_hits"], stats["derived_misses"]) == (2, 1, 1)
    assert stats["hits"] == stats["misses"] == 0  # page statistics are left alone
    assert cache.get("d") is not None  # a plain get finds it too (one LRU)
    assert _referenced_bytes(cache) <= cache.currsize


def test_derived_entries_leave_with_the_pages_they_share() -> None:
    """However recently a derived entry was used, it goes when a page whose memory it
    shares is evicted: kept, it would hold that memory outside the cache's bound."""
    cache = PageCache(2_000_000, admit_after=1)
    p1 = pa.array(np.arange(100_000, dtype=np.int64))
    p2 = pa.array(np.arange(100_000, dtype=np.int64))
    cache.put("p1", p1)
    cache.put("p2", p2)
    on_p1 = pa.table({"a": p1.slice(5, 10)})
    on_p2 = pa.table({"a": p2.slice(5, 10)})
    cache.put_derived("d1", _Result(on_p1), on_p1)
    cache.put_derived("d2", _Result(on_p2), on_p2)
    cache.get_derived("d1")  # d1 is now the most recently used entry
    cache.put("p3", pa.array(np.arange(100_000, dtype=np.int64)))  # evicts p1, the oldest
    assert cache.get("p1") is None
    assert cache.get_derived("d1") is None  # gone with p1
    assert cache.get_derived("d2") is not None and cache.get("p2") is not None
    assert cache.stats()["derived"] == 1
    # a result whose own memory alone exceeds the budget is not kept
    big = pa.table({"a": np.zeros(300_000, dtype=np.int64)})
    assert not cache.put_derived("big", _Result(big), big)
    assert cache.get_derived("big") is None and cache.currsize <= 2_000_000
    cache.clear()
    assert cache.stats()["derived"] == 0 and cache.get_derived("d2") is None


@settings(max_examples=80, deadline=None)
@given(
    capacity=st.integers(0, 400_000),
    ops=st.lists(
        st.tuples(
            st.sampled_from(["page", "slices", "own", "get"]),
            st.integers(0, 12),
            st.integers(1, 20_000),
        ),
        min_size=1,
        max_size=80,
    ),
)
def test_pages_and_derived_entries_stay_within_the_bound_together(capacity, ops) -> None:
    """Whatever the order of pages and results built from them, the memory the cache keeps
    alive (each buffer counted once, computed from the values themselves) stays within
    its byte bound."""
    cache = PageCache(capacity, admit_after=1)
    made: dict[int, pa.Array] = {}
    for kind, key, n in ops:
        if kind == "page":
            made[key] = pa.array(np.arange(n, dtype=np.int64))
            cache.put(("p", key), made[key])
        elif kind in ("slices", "own"):
            page = cache.get(("p", key))
            base = page if page is not None else made.get(key)
            if base is None:
                continue
            cols = {"a": base.slice(len(base) // 3, len(base) // 2)}
            if kind == "own":
                cols["b"] = pa.array(np.full(len(cols["a"]), n, dtype=np.int32))  # its own
            table = pa.table(cols)
            cache.put_derived(("d", key), _Result(table), table)
        else:
            cache.get_derived(("d", key))
        assert cache.currsize <= capacity
        assert _referenced_bytes(cache) <= cache.currsize
    assert cache.stats()["bytes"] == cache.currsize
