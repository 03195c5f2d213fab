"""Parallel decoding: a leaf's range cut into parts on the thread pool, and read-ahead.

The truth is pylance's reader of the same file: cutting a range must not change a value.
"""

from __future__ import annotations

import threading
import time

import lance.file
import numpy as np
import pyarrow as pa
import pytest

from lance_format import LanceFileReader
from lance_format import reader as reader_module
from lance_format.structural.column import LeafColumnReader
from lance_format.workers import prefetch

N = 150_000


def _table() -> pa.Table:
    rng = np.random.default_rng(7)
    words = np.array(["alpha", "beta", "gamma delta", "epsilon", "", "zeta eta theta"])
    text = words[rng.integers(0, len(words), N)] + rng.integers(0, 999, N).astype(str)
    nulls = rng.random(N) < 0.1
    lens = rng.integers(0, 4, N)
    offsets = np.zeros(N + 1, dtype=np.int32)
    np.cumsum(lens, out=offsets[1:])
    items = pa.array(words[rng.integers(0, len(words), int(offsets[-1]))])
    return pa.table(
        {
            "id": pa.array(np.arange(N), mask=rng.random(N) < 0.05),
            "text": pa.array(text, mask=nulls),
            "tags": pa.ListArray.from_arrays(pa.array(offsets), items, mask=pa.array(lens == 3)),
            "s": pa.StructArray.from_arrays(
                [pa.array(rng.integers(0, 100, N)), pa.array(text)], names=["k", "v"]
            ),
        }
    )


@pytest.fixture(scope="module", params=["2.1", "2.2"])
def written(request, tmp_path_factory) -> tuple[str, pa.Table]:
    path = str(tmp_path_factory.mktemp("par") / f"f{request.param}.lance")
    table = _table()
    with lance.file.LanceFileWriter(path, version=request.param) as w:
        w.write_batch(table)
    theirs = lance.file.LanceFileReader(path).read_all().to_table()
    return path, theirs


def test_split_ranges_read_like_pylance(written, monkeypatch) -> None:
    path, theirs = written
    parts: list[tuple[str, int, int]] = []
    original = LeafColumnReader.read

    def recording(self, rows=None, start=0, stop=None):
        parts.append((self.field.name, start, stop))
        return original(self, rows, start, stop)

    monkeypatch.setattr(LeafColumnReader, "read", recording)
    monkeypatch.setattr(reader_module, "POOL_SIZE", 2)  # as on the 2-core CI machine
    monkeypatch.setattr(reader_module, "MIN_SPLIT_SECONDS", 0.0)  # however quick to decode
    reader = LanceFileReader(path)
    for start, stop in [(0, N), (12_345, 140_001), (70_000, N)]:
        got = reader.read_range(start, stop)
        assert got.equals(theirs.slice(start, stop - start)), (start, stop)
        for column in ("text", "tags", "s"):  # alone, a leaf is more than a thread's share
            parts.clear()
            got = reader.read_range(start, stop, [column])
            assert got.column(0).equals(theirs.column(column).slice(start, stop - start))
            assert any((a, b) != (start, stop) for _, a, b in parts), parts  # a leaf was cut


def test_a_quick_leaf_is_not_cut(written, monkeypatch) -> None:
    """Cutting a leaf pays a hand-off and a join: a part must be worth MIN_SPLIT_SECONDS
    of decoding (as measured for the leaf), or the leaf is decoded whole."""
    path, theirs = written
    parts: list[tuple[int, int]] = []
    original = LeafColumnReader.read

    def recording(self, rows=None, start=0, stop=None):
        parts.append((start, stop))
        return original(self, rows, start, stop)

    monkeypatch.setattr(LeafColumnReader, "read", recording)
    monkeypatch.setattr(reader_module, "POOL_SIZE", 2)
    monkeypatch.setattr(reader_module, "MIN_SPLIT_SECONDS", 3600.0)
    got = LanceFileReader(path).read_range(0, N, ["text"])
    assert got.column(0).equals(theirs.column("text"))
    assert parts == [(0, N)]


def test_takes_decode_on_the_pool_like_pylance(written) -> None:
    path, theirs = written
    rows = np.sort(np.random.default_rng(3).choice(N, 5000, replace=False))
    got = LanceFileReader(path).take(rows)
    assert got.equals(theirs.take(pa.array(rows)))


# -- prefetch ---------------------------------------------------------------------------------


def test_prefetch_keeps_order_and_reads_ahead_boundedly() -> None:
    produced: list[int] = []

    def items():
        for i in range(100):
            produced.append(i)
            yield i

    it = prefetch(items(), depth=2)
    assert next(it) == 0
    time.sleep(0.3)
    # one handed out, two queued, one waiting for a slot
    assert len(produced) <= 4
    assert list(it) == list(range(1, 100))


def test_prefetch_reraises_the_producers_error() -> None:
    def items():
        yield 1
        raise ValueError("corrupt page")

    it = prefetch(items())
    assert next(it) == 1
    with pytest.raises(ValueError, match="corrupt page"):
        next(it)


def test_prefetch_closed_early_stops_and_closes_the_producer() -> None:
    closed = threading.Event()
    produced: list[int] = []

    def items():
        try:
            for i in range(10_000):
                produced.append(i)
                yield i
        finally:
            closed.set()

    it = prefetch(items())
    assert next(it) == 0
    it.close()
    assert closed.wait(2.0)
    seen = len(produced)
    time.sleep(0.3)
    assert len(produced) == seen < 10


def test_on_each_thread_runs_once_on_every_pool_thread() -> None:
    """Per-thread preparation reaches every decoding thread: one call a pool thread, each
    told how many there are, every call's result returned."""
    from lance_format import on_each_thread
    from lance_format.workers import POOL_SIZE, pool

    seen: list[int] = []
    lock = threading.Lock()

    def note(threads: int) -> int:
        with lock:
            seen.append(threading.get_ident())
        return threads

    assert on_each_thread(note) == [POOL_SIZE] * POOL_SIZE
    assert len(set(seen)) == POOL_SIZE == len(seen)
    # the pool's own threads: a task submitted now runs on one of them
    assert pool().submit(threading.get_ident).result() in seen
