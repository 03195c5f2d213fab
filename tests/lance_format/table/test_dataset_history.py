"""The issue's interop history, compaction, a delete racing a compaction, and bad input.

A history alternates pylance and us at every step (create, append, delete, add a column,
compact, delete, compact) for each file version, both manifest naming schemes and stable row
ids on and off; after every step, every version so far must read the same through both.
"""

from __future__ import annotations

import os
import threading

import lance
import numpy as np
import pyarrow as pa
import pytest
from test_dataset import _same_as_pylance, _table

from lance_format.errors import (
    CommitConflictError,
    CorruptFileError,
    InvalidArgumentError,
    LanceError,
    SchemaError,
    UnsupportedError,
)
from lance_format.table import compaction, paths
from lance_format.table.dataset import dataset as open_dataset
from lance_format.table.dataset import write_dataset

VERSIONS = ["2.0", "2.1", "2.2"]


def _check_all_versions(uri: str) -> None:
    for v in range(1, lance.dataset(uri).version + 1):
        _same_as_pylance(uri, v)


@pytest.mark.parametrize("stable", [False, True], ids=["addr", "stable"])
@pytest.mark.parametrize("v2_paths", [True, False], ids=["v2names", "v1names"])
@pytest.mark.parametrize("version", VERSIONS)
def test_history_both_ways(tmp_path, version, v2_paths, stable):
    uri = str(tmp_path / "ds")
    lance.write_dataset(
        _table(1200),
        uri,
        data_storage_version=version,
        max_rows_per_file=300,
        enable_v2_manifest_paths=v2_paths,
        enable_stable_row_ids=stable,
    )  # pylance creates
    write_dataset(_table(250, 1, start=1200), uri, mode="append", max_rows_per_file=100)
    lance.dataset(uri).delete("id % 4 = 0 OR id BETWEEN 300 AND 520")  # pylance deletes
    open_dataset(uri).add_columns({"y": "id * 10"})  # we add a column
    ids_before = lance.dataset(uri).to_table(columns=["id"], with_row_id=True)
    lance.dataset(uri).optimize.compact_files(target_rows_per_fragment=500)  # pylance compacts
    open_dataset(uri).delete("id % 5 = 1")  # we delete
    m = open_dataset(uri).optimize.compact_files(target_rows_per_fragment=400)  # we compact
    assert m.fragments_removed > 0 and m.fragments_added > 0
    lance.write_dataset(
        _table(30, 2, start=5000).append_column("y", pa.array(range(30), pa.int64())),
        uri,
        mode="append",
    )  # pylance appends after our compaction
    _check_all_versions(uri)
    naming = paths.ManifestNaming.V2 if v2_paths else paths.ManifestNaming.V1
    assert {e.naming for e in paths.list_versions(uri)} == {naming}
    if stable:  # rows kept their ids through both compactions
        after = lance.dataset(uri).to_table(columns=["id"], with_row_id=True)
        before = dict(
            zip(ids_before["id"].to_pylist(), ids_before["_rowid"].to_pylist(), strict=True)
        )
        kept = [
            (rid, before[i])
            for i, rid in zip(after["id"].to_pylist(), after["_rowid"].to_pylist(), strict=True)
            if i in before
        ]
        assert len(kept) > 500 and all(a == b for a, b in kept)


def test_compaction_plan_matches_pylance(tmp_path):
    """The same fragments, compacted by pylance and by us, end in the same fragment sizes."""
    sizes = {}
    for who in ("pylance", "ours"):
        uri = str(tmp_path / who)
        for i in range(4):
            lance.write_dataset(
                _table(250, i, start=250 * i),
                uri,
                mode="append" if i else "create",
                max_rows_per_file=100,
            )
        lance.dataset(uri).delete("id < 30 OR id % 97 = 0")
        if who == "pylance":
            metrics = lance.dataset(uri).optimize.compact_files(target_rows_per_fragment=400)
        else:
            metrics = open_dataset(uri).optimize.compact_files(target_rows_per_fragment=400)
        ds = lance.dataset(uri)
        sizes[who] = ([f.count_rows() for f in ds.get_fragments()], ds.version)
        assert metrics.fragments_removed == 12
        _check_all_versions(uri)
    assert sizes["ours"] == sizes["pylance"]


def test_compaction_edge_cases(tmp_path):
    uri = str(tmp_path / "ds")
    write_dataset(_table(3000), uri, max_rows_per_file=1000)
    ds = open_dataset(uri)
    # nothing is small or deleted enough: no new version
    assert ds.compact_files(target_rows_per_fragment=1000) == compaction.CompactionMetrics()
    assert open_dataset(uri).version == 1
    # one fragment, heavily deleted, compacts on its own (deletions materialised)
    ds.delete("id BETWEEN 1000 AND 1500")
    m = open_dataset(uri).compact_files(target_rows_per_fragment=1000)
    assert (m.fragments_removed, m.fragments_added, m.files_removed) == (1, 1, 2)
    frags = lance.dataset(uri).get_fragments()
    # pylance 14 lists the fragments by id after a rewrite: the new one last
    assert [(f.fragment_id, f.count_rows()) for f in frags] == [(0, 1000), (2, 1000), (3, 499)]
    assert frags[2].deletion_file() is None
    _check_all_versions(uri)
    with pytest.raises(InvalidArgumentError):
        open_dataset(uri).compact_files(target_rows_per_fragment=0)
    with pytest.raises(InvalidArgumentError):
        open_dataset(uri).compact_files(materialize_deletions_threshold=2.0)


def test_failed_compaction_leaves_no_files(tmp_path, monkeypatch):
    uri = str(tmp_path / "ds")
    write_dataset(_table(600), uri, max_rows_per_file=100)
    before = set(os.listdir(os.path.join(uri, "data")))

    def refuse(*args, **kwargs):
        raise CommitConflictError("injected")

    monkeypatch.setattr(compaction.commit, "commit", refuse)
    with pytest.raises(CommitConflictError):
        open_dataset(uri).compact_files(target_rows_per_fragment=1000)
    assert set(os.listdir(os.path.join(uri, "data"))) == before
    assert lance.dataset(uri).version == 1


@pytest.mark.parametrize("first", ["delete", "compact"])
def test_delete_racing_compaction(tmp_path, first):
    """Both start from the same version and touch the same fragment: exactly one commits,
    the other raises CommitConflictError, whichever goes first (pylance's rule)."""
    uri = str(tmp_path / "ds")
    write_dataset(_table(900), uri, max_rows_per_file=300)
    open_dataset(uri).delete("id % 2 = 0")  # every fragment is now a compaction candidate
    a = open_dataset(uri)
    b = open_dataset(uri)
    ops = {
        "delete": lambda: a.delete("id = 301"),
        "compact": lambda: b.compact_files(target_rows_per_fragment=1000),
    }
    second = "compact" if first == "delete" else "delete"
    ops[first]()
    with pytest.raises(CommitConflictError):
        ops[second]()
    _check_all_versions(uri)
    # the loser left no data files behind: every data file is referenced by some version
    referenced = set()
    for v in range(1, lance.dataset(uri).version + 1):
        for f in lance.dataset(uri, version=v).get_fragments():
            referenced.update(df.path for df in f.data_files())
    assert set(os.listdir(os.path.join(uri, "data"))) <= referenced


def test_delete_racing_compaction_in_threads(tmp_path):
    """The same race with real concurrency: one success, one conflict, nothing lost."""
    uri = str(tmp_path / "ds")
    write_dataset(_table(900), uri, max_rows_per_file=300)
    open_dataset(uri).delete("id % 2 = 0")
    a, b = open_dataset(uri), open_dataset(uri)
    barrier = threading.Barrier(2)
    outcome: dict[str, str] = {}

    def run(name, fn):
        barrier.wait()
        try:
            fn()
            outcome[name] = "ok"
        except CommitConflictError:
            outcome[name] = "conflict"

    threads = [
        threading.Thread(target=run, args=("delete", lambda: a.delete("id = 301"))),
        threading.Thread(
            target=run,
            args=("compact", lambda: b.compact_files(target_rows_per_fragment=1000)),
        ),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcome.values()) == ["conflict", "ok"]
    expected = set(range(1, 900, 2)) - ({301} if outcome["delete"] == "ok" else set())
    assert set(lance.dataset(uri).to_table(columns=["id"])["id"].to_pylist()) == expected


def test_row_id_and_address_in_filters(tmp_path):
    uri = str(tmp_path / "ds")
    lance.write_dataset(_table(1000), uri, max_rows_per_file=400)
    lance.dataset(uri).delete("id % 3 = 0")
    theirs = lance.dataset(uri).to_table(with_row_id=True, columns=["id"])
    ids = theirs["_rowid"].to_numpy()
    pick = ids[(ids >> 32) == 1][:5]
    flt = f"_rowid IN ({', '.join(str(int(i)) for i in pick)})"
    got = open_dataset(uri).to_table(columns=["id"], filter=flt)
    assert got.equals(lance.dataset(uri).to_table(columns=["id"], filter=flt))
    assert got.num_rows == 5
    assert open_dataset(uri).count_rows("_rowaddr >= 4294967296") == int(((ids >> 32) >= 1).sum())


def test_bad_input_is_typed_and_says_what(tmp_path):
    from lance_format.table import manifest

    uri = str(tmp_path / "ds")
    write_dataset(_table(500), uri, max_rows_per_file=200)
    # a schema mismatch on append
    with pytest.raises(SchemaError, match="z"):
        write_dataset(_table(10).rename_columns(["id", "z", "s", "l"]), uri, mode="append")
    wrong = _table(10).set_column(1, "x", pa.array(["a"] * 10))
    with pytest.raises(SchemaError, match="x"):
        write_dataset(wrong, uri, mode="append")
    # a filter naming an unknown column
    with pytest.raises(LanceError, match="nope"):
        open_dataset(uri).count_rows("nope = 1")
    # a missing data file: named in the error, raised when read (opening stays cheap)
    frag = lance.dataset(uri).get_fragments()[1]
    os.unlink(os.path.join(uri, "data", frag.data_files()[0].path))
    with pytest.raises(CorruptFileError, match="missing"):
        open_dataset(uri).to_table()
    # an unknown reader feature flag: unsupported, before anything is read or written
    latest = paths.list_versions(uri)[-1].path
    m = manifest.read_manifest(latest)
    m.pb.reader_feature_flags |= 1 << 40
    m.pb.writer_feature_flags |= 1 << 40
    m.pb.version += 1
    manifest.write_manifest(uri, m.pb, paths.ManifestNaming.V2, b"")
    with pytest.raises(UnsupportedError, match="flag"):
        open_dataset(uri)
    with pytest.raises(UnsupportedError, match="flag"):
        write_dataset(_table(5), uri, mode="append")
    # a manifest that does not parse
    uri2 = str(tmp_path / "ds2")
    write_dataset(_table(50), uri2)
    latest = paths.list_versions(uri2)[-1].path
    data = bytearray(open(latest, "rb").read())
    data[len(data) // 2 : len(data) // 2 + 8] = b"\xff" * 8
    with open(latest, "wb") as f:
        f.write(bytes(data))
    with pytest.raises(CorruptFileError):
        open_dataset(uri2).to_table()


def test_take_rows_after_compaction_follows_stable_ids(tmp_path):
    uri = str(tmp_path / "ds")
    write_dataset(_table(1000), uri, max_rows_per_file=200, enable_stable_row_ids=True)
    open_dataset(uri).delete("id % 2 = 0")
    ids = open_dataset(uri).to_table(columns=["id"], with_row_id=True)
    open_dataset(uri).compact_files(target_rows_per_fragment=1000)
    ds = open_dataset(uri)
    assert len(ds.get_fragments()) == 1
    pick = np.asarray(ids["_rowid"])[[0, 7, 123, 400]]
    got = ds.take_rows(pick, columns=["id"])
    assert got["id"].to_pylist() == np.asarray(ids["id"])[[0, 7, 123, 400]].tolist()
    assert got.equals(lance.dataset(uri)._take_rows(pick.tolist(), columns=["id"]))


def test_page_boundaries_and_range_scans(tmp_path):
    """A fragment cut at page boundaries and scanned range by range (how Flight endpoints
    read it) gives back exactly pylance's rows, row ids included."""
    import lance.file

    from lance_format import LanceFileReader, LanceFileWriter

    n = 60_000
    t = pa.table({"a": np.arange(n), "s": [f"row {i} " * 3 for i in range(n)]})
    path = str(tmp_path / "f.lance")
    with LanceFileWriter(path, t.schema, max_page_bytes=64 * 1024) as w:
        w.write_table(t)
    bounds = LanceFileReader(path).page_boundaries()
    heaviest = lance.file.LanceFileReader(path).metadata().columns[1]  # "s"
    assert len(bounds) == len(heaviest.pages) + 1 > 3
    assert bounds[0] == 0 and bounds[-1] == n and (np.diff(bounds) > 0).all()
    assert LanceFileReader(path).page_boundaries(["a"])[-1] == n

    uri = str(tmp_path / "ds")
    lance.write_dataset(t, uri, max_rows_per_file=40_000)
    lance.dataset(uri).delete("a % 7 = 0")
    ds = open_dataset(uri)
    expected = lance.dataset(uri).to_table(with_row_id=True, filter="a % 2 = 0")
    pieces = []
    for frag in ds.get_fragments():
        b = frag.page_boundaries()
        assert b[0] == 0 and b[-1] == frag.physical_rows
        b = np.unique(np.concatenate([b, np.linspace(0, frag.physical_rows, 4).astype(int)]))
        for lo, hi in zip(b[:-1], b[1:], strict=True):
            scan = ds.scanner(
                fragments=[frag],
                ranges={frag.fragment_id: (int(lo), int(hi))},
                with_row_id=True,
                filter="a % 2 = 0",
            )
            pieces.append(scan.to_table())
            assert scan.count_rows() == pieces[-1].num_rows
    assert pa.concat_tables(pieces).equals(expected)
    with pytest.raises(InvalidArgumentError):
        ds.scanner(ranges={0: (5, 1)}).to_table()
    with pytest.raises(InvalidArgumentError):
        ds.scanner(ranges={99: (0, 1)}).to_table()
