"""The IO layer (positional reads, coalescing, counters) and the search cache (LRU in bytes)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from lance_format import CorruptFileError, LanceIOError, SearchCache
from lance_format.storage import LocalFile


@pytest.fixture()
def blob_file(tmp_path):
    data = os.urandom(100_000)
    path = tmp_path / "blob.bin"
    path.write_bytes(data)
    return path, data


def test_read_at_counts_requests_and_bytes(blob_file):
    path, data = blob_file
    f = LocalFile(path)
    assert f.read_at(10, 20) == data[10:30]
    assert f.read_at(99_990, 10) == data[-10:]
    assert (f.stats.requests, f.stats.bytes_read) == (2, 30)


def test_read_ranges_coalesces_near_ranges_and_keeps_order(blob_file):
    path, data = blob_file
    f = LocalFile(path)
    ranges = [(50_000, 10), (0, 100), (200, 50), (90_000, 5)]
    out = f.read_ranges(ranges)
    assert out == [data[s : s + n] for s, n in ranges]
    # (0,100) and (200,50) are within the gap and merge; the other two stand alone
    assert f.stats.requests == 3


def test_out_of_file_reads_are_corrupt_file_errors(blob_file):
    path, _ = blob_file
    f = LocalFile(path)
    with pytest.raises(CorruptFileError):
        f.read_at(99_999, 2)
    with pytest.raises(CorruptFileError):
        f.read_at(-1, 1)


def test_missing_file_is_an_io_error(tmp_path):
    with pytest.raises(LanceIOError):
        LocalFile(tmp_path / "nope.lance")


class _Sized:
    def __init__(self, n: int):
        self.nbytes = n
        self.payload = np.zeros(n, dtype=np.uint8)


def test_cache_is_bounded_in_bytes_and_counts_hits():
    cache = SearchCache(capacity_bytes=1000)
    loads = []

    def loader(k):
        def load():
            loads.append(k)
            return _Sized(300)

        return load

    for k in range(5):
        cache.get_or_load(k, loader(k))
    assert cache.currsize <= 1000
    assert len(cache) == 3  # 3 x 300 bytes fit, the two oldest were evicted
    assert cache.misses == 5 and cache.hits == 0
    cache.get_or_load(4, loader(4))
    assert cache.hits == 1 and loads == [0, 1, 2, 3, 4]
    cache.get_or_load(0, loader(0))  # evicted: loaded again
    assert loads[-1] == 0 and cache.misses == 6


def test_cache_skips_values_larger_than_capacity():
    cache = SearchCache(capacity_bytes=100)
    value = cache.get_or_load("big", lambda: _Sized(1000))
    assert value.nbytes == 1000
    assert "big" not in cache and cache.currsize == 0
