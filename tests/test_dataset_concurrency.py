"""Concurrent writers and crashes: commits are put-if-not-exists, rebased or refused.

* 8 processes append 20 times each to one dataset at the same time: exactly 160 new
  fragments, every row present once, and pylance agrees.
* A writer killed with SIGKILL in the middle of writing leaves the dataset readable at its
  last committed version, by us and by pylance.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time

import lance
import numpy as np
import pyarrow as pa

from lance_format.table.dataset import dataset as open_dataset
from lance_format.table.dataset import write_dataset

WORKERS = 8
APPENDS = 20
ROWS = 5


def _rows(worker: int, i: int) -> pa.Table:
    base = (worker * APPENDS + i) * ROWS
    return pa.table({"id": pa.array(np.arange(base, base + ROWS), pa.int64())})


def _appender(uri: str, worker: int, start: mp.Event) -> None:
    start.wait()
    for i in range(APPENDS):
        write_dataset(_rows(worker, i), uri, mode="append")


def test_eight_processes_append_concurrently(tmp_path):
    uri = str(tmp_path / "ds")
    write_dataset(pa.table({"id": pa.array([], pa.int64())}), uri)
    ctx = mp.get_context("spawn")
    start = ctx.Event()
    procs = [ctx.Process(target=_appender, args=(uri, w, start)) for w in range(WORKERS)]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(timeout=600)
        assert p.exitcode == 0
    ours = open_dataset(uri)
    assert ours.version == 1 + WORKERS * APPENDS
    assert len(ours.get_fragments()) == WORKERS * APPENDS
    ids = np.sort(ours.to_table().column("id").to_numpy())
    assert np.array_equal(ids, np.arange(WORKERS * APPENDS * ROWS))
    theirs = lance.dataset(uri)
    assert theirs.version == ours.version
    assert np.array_equal(np.sort(theirs.to_table().column("id").to_numpy()), ids)


def _slow_writer(uri: str) -> None:
    def batches():
        for i in range(10_000):
            yield pa.record_batch({"id": pa.array(np.arange(i * 1000, (i + 1) * 1000), pa.int64())})
            time.sleep(0.001)

    write_dataset(batches(), uri, mode="append", max_rows_per_file=20_000)


def test_killed_writer_leaves_last_version(tmp_path):
    uri = str(tmp_path / "ds")
    write_dataset(pa.table({"id": pa.array(np.arange(100), pa.int64())}), uri)
    ctx = mp.get_context("spawn")
    for delay in (0.5, 1.5, 3.0):
        p = ctx.Process(target=_slow_writer, args=(uri,))
        p.start()
        time.sleep(delay)
        os.kill(p.pid, signal.SIGKILL)
        p.join()
        assert open_dataset(uri).version == 1
        assert open_dataset(uri).count_rows() == 100
        assert lance.dataset(uri).count_rows() == 100
