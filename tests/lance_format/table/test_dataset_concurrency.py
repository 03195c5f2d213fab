"""Concurrent writers and crashes: commits are put-if-not-exists, rebased or refused.

* 8 processes append 20 times each to one dataset at the same time: exactly 160 new
  fragments, every row present once, and pylance agrees; so do two pylance processes and
  two of ours appending together.
* A writer killed with SIGKILL in the middle of writing leaves the dataset readable at its
  last committed version, by us and by pylance.
* A writer committing in a tight loop, killed at random moments (so some kills land inside a
  commit), leaves every committed version whole; ``cleanup_old_versions`` then removes what
  the killed writer left behind.
"""

from __future__ import annotations

import datetime as dt
import multiprocessing as mp
import os
import random
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


def _run_together(target, uri: str, workers: int) -> None:
    """``target(uri, worker, start)`` in ``workers`` processes, released at once."""
    ctx = mp.get_context("spawn")
    start = ctx.Event()
    procs = [ctx.Process(target=target, args=(uri, w, start)) for w in range(workers)]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(timeout=600)
        assert p.exitcode == 0


def test_eight_processes_append_concurrently(tmp_path):
    uri = str(tmp_path / "ds")
    write_dataset(pa.table({"id": pa.array([], pa.int64())}), uri)
    _run_together(_appender, uri, WORKERS)
    ours = open_dataset(uri)
    assert ours.version == 1 + WORKERS * APPENDS
    assert len(ours.get_fragments()) == WORKERS * APPENDS
    ids = np.sort(ours.to_table().column("id").to_numpy())
    assert np.array_equal(ids, np.arange(WORKERS * APPENDS * ROWS))
    theirs = lance.dataset(uri)
    assert theirs.version == ours.version
    assert np.array_equal(np.sort(theirs.to_table().column("id").to_numpy()), ids)


def _mixed_appender(uri: str, worker: int, start: mp.Event) -> None:
    start.wait()
    for i in range(APPENDS):
        if worker % 2:  # pylance, which retries a lost race itself (and may give up)
            for attempt in range(20):
                try:
                    lance.write_dataset(_rows(worker, i), uri, mode="append")
                    break
                except OSError:
                    if attempt == 19:
                        raise
        else:
            write_dataset(_rows(worker, i), uri, mode="append")


def test_pylance_and_our_writers_append_concurrently(tmp_path):
    """Two pylance processes and two of ours append to one dataset at once: each side
    finds the newest version its own way (ours from the version hint both write, confirmed
    by the manifests after it), and every commit lands once."""
    uri = str(tmp_path / "ds")
    lance.write_dataset(pa.table({"id": pa.array([], pa.int64())}), uri)
    _run_together(_mixed_appender, uri, 4)
    ours = open_dataset(uri)
    assert ours.version == 1 + 4 * APPENDS
    ids = np.sort(ours.to_table().column("id").to_numpy())
    assert np.array_equal(ids, np.arange(4 * APPENDS * ROWS))
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


def _committing_writer(uri: str, run: int) -> None:
    base = 10_000_000 * (run + 1)
    for i in range(100_000):
        batch = pa.table({"id": pa.array(np.arange(1000) + 1000 * i + base, pa.int64())})
        write_dataset(batch, uri, mode="append")
        if i % 3 == 2:
            open_dataset(uri).delete(f"id = {base + 1000 * i}")


def _referenced(uri: str) -> set[str]:
    ds = lance.dataset(uri)
    names = set()
    for f in ds.get_fragments():
        names.update(df.path for df in f.data_files())
    return names


def test_writer_killed_during_commits(tmp_path):
    uri = str(tmp_path / "ds")
    write_dataset(pa.table({"id": pa.array(np.arange(100), pa.int64())}), uri)
    ctx = mp.get_context("spawn")
    rng = random.Random(7)
    for run in range(3):
        p = ctx.Process(target=_committing_writer, args=(uri, run))
        before = open_dataset(uri).version
        p.start()
        # kill it mid-stream: once it is committing (its start-up time depends on the load),
        # at a random moment among its next commits
        deadline = time.monotonic() + 120
        while open_dataset(uri).version < before + 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert p.is_alive(), "the writer ended before it could be killed"
        time.sleep(rng.random() * 0.5)
        os.kill(p.pid, signal.SIGKILL)
        p.join()
        ours = open_dataset(uri)
        theirs = lance.dataset(uri)
        assert ours.version == theirs.version
        for v in range(1, ours.version + 1):  # every committed version is whole
            assert open_dataset(uri, v).to_table().equals(lance.dataset(uri, version=v).to_table())
    assert open_dataset(uri).version > 5  # the kills did interrupt a working writer
    open_dataset(uri).cleanup_old_versions(dt.timedelta(0), delete_unverified=True)
    left = set(os.listdir(os.path.join(uri, "data")))
    assert left == _referenced(uri)  # orphans (and partial files) are gone
    assert not [n for n in os.listdir(os.path.join(uri, "_versions")) if n.startswith(".tmp")]
    txns = set(os.listdir(os.path.join(uri, "_transactions")))
    assert len(txns) == 1  # only the latest version's transaction remains
    ids = lance.dataset(uri).to_table().column("id").to_numpy()
    assert len(np.unique(ids)) == len(ids)


def test_an_append_commits_without_listing_unless_it_lost_a_race(tmp_path, monkeypatch):
    """The commit of an append first tries the version after the one it read, without
    listing the versions (a dataset of many small appends has thousands); when another
    writer took that version meanwhile, the put fails and the commit lists, rebases and
    lands after it.  Truth: pylance's read of every row."""
    from lance_format.table import commit as commit_module
    from lance_format.table import manifest as manifest_module
    from lance_format.table import paths, staging
    from lance_format.table import write as write_module

    uri = str(tmp_path / "ds")
    write_dataset(_rows(0, 0), uri)
    listings = []
    real = paths.latest_version
    monkeypatch.setattr(
        paths, "latest_version", lambda root, **kw: listings.append(root) or real(root, **kw)
    )
    write_dataset(_rows(0, 1), uri, mode="append")
    assert len(listings) == 1  # the write's own look at the dataset, none in the commit
    # a commit based on version 2 while another writer already made version 3
    read = manifest_module.read_manifest(real(uri).path)
    write_dataset(_rows(1, 0), uri, mode="append")
    fragments = write_module.write_fragments(_rows(1, 1), uri, read.schema)
    txn = staging.staged_transaction(fragments, mode="append", read_version=read.version)
    listings.clear()
    committed = commit_module.commit(uri, txn, read=read)
    assert committed.version == 4 and len(listings) == 1  # lost the race, listed, rebased
    got = lance.dataset(uri).to_table().sort_by("id")
    expected = pa.concat_tables([_rows(0, 0), _rows(0, 1), _rows(1, 0), _rows(1, 1)])
    assert got.equals(expected.sort_by("id"))
