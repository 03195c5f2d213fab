"""Datasets, both directions: pylance writes and we read every version, we write and pylance
reads every version, and histories that alternate between the two.

The truth for a version is always pylance's own read of that version (``lance.dataset(uri,
version=v)``), compared with ours after sorting nothing: fragment order is the manifest's,
so both sides must return rows in the same order.
"""

from __future__ import annotations

import lance
import numpy as np
import pyarrow as pa
import pytest

import lance_format
from lance_format.errors import InvalidArgumentError, LanceError, SchemaError
from lance_format.table.dataset import dataset as open_dataset
from lance_format.table.dataset import write_dataset

VERSIONS = ["2.0", "2.1", "2.2"]


def _table(n: int, seed: int = 0, start: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    ids = np.arange(start, start + n)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "x": pa.array(rng.random(n)),
            "s": pa.array([None if i % 7 == 0 else f"s{i % 13}" for i in ids]),
            "l": pa.array([[int(i)] * (int(i) % 3) for i in ids], pa.list_(pa.int32())),
        }
    )


def _same_as_pylance(uri: str, version: int | None = None) -> None:
    """Our read of ``version`` equals pylance's: full, projected, filtered, counted, taken."""
    theirs = lance.dataset(uri, version=version)
    ours = open_dataset(uri, version)
    assert ours.version == theirs.version
    assert ours.schema.equals(theirs.schema)
    expected = theirs.to_table()
    assert ours.to_table().equals(expected)
    assert ours.count_rows() == theirs.count_rows()
    assert ours.to_table(columns=["s", "id"]).equals(theirs.to_table(columns=["s", "id"]))
    flt = "id % 3 = 1 AND s IS NOT NULL"
    assert ours.to_table(filter=flt).equals(theirs.to_table(filter=flt))
    assert ours.count_rows(flt) == theirs.count_rows(flt)
    n = expected.num_rows
    if n:
        idx = np.random.default_rng(1).integers(0, n, 25).tolist()
        assert ours.take(idx).equals(theirs.take(idx))
        with_ids = theirs.to_table(with_row_id=True, columns=["id"])
        assert ours.to_table(with_row_id=True, columns=["id"]).equals(with_ids)
        rowids = with_ids.column("_rowid").to_numpy()[idx[:10]]
        assert ours.take_rows(rowids).equals(theirs._take_rows(rowids.tolist()))
    assert ours.to_table(limit=7, offset=5).equals(theirs.to_table(limit=7, offset=5))


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("v2_paths", [True, False])
def test_pylance_history_read_by_us(tmp_path, version, v2_paths):
    uri = str(tmp_path / "ds")
    lance.write_dataset(
        _table(3000),
        uri,
        data_storage_version=version,
        max_rows_per_file=1000,
        enable_v2_manifest_paths=v2_paths,
    )
    lance.write_dataset(_table(500, 1, start=3000), uri, mode="append")
    lance.dataset(uri).delete("id % 10 = 3 OR id BETWEEN 100 AND 1999")
    lance.write_dataset(_table(200, 2, start=9000), uri, mode="append")
    for v in range(1, lance.dataset(uri).version + 1):
        _same_as_pylance(uri, v)


@pytest.mark.parametrize("version", VERSIONS)
def test_our_history_read_by_pylance(tmp_path, version):
    uri = str(tmp_path / "ds")
    write_dataset(_table(2500), uri, data_storage_version=version, max_rows_per_file=1000)
    write_dataset(_table(300, 1, start=2500), uri, mode="append")
    open_dataset(uri).delete("id % 4 = 0")
    open_dataset(uri).delete("id < 1000")  # drops the first fragment entirely
    write_dataset(_table(100, 2, start=5000), uri, mode="overwrite")
    for v in range(1, 6):
        _same_as_pylance(uri, v)
    assert lance.dataset(uri).version == 5


@pytest.mark.parametrize("version", VERSIONS)
def test_alternating_history(tmp_path, version):
    uri = str(tmp_path / "ds")
    lance.write_dataset(_table(2000), uri, data_storage_version=version, max_rows_per_file=700)
    write_dataset(_table(300, 1, start=2000), uri, mode="append")
    lance.dataset(uri).delete("id % 5 = 0")
    open_dataset(uri).delete("id % 5 = 1")
    lance.write_dataset(_table(50, 3, start=7000), uri, mode="append")
    write_dataset(_table(60, 4, start=8000), uri, mode="append")
    for v in range(1, lance.dataset(uri).version + 1):
        _same_as_pylance(uri, v)


def test_stable_row_ids_both_ways(tmp_path):
    uri = str(tmp_path / "ds")
    lance.write_dataset(_table(1000), uri, enable_stable_row_ids=True, max_rows_per_file=400)
    write_dataset(_table(100, 1, start=1000), uri, mode="append")
    lance.dataset(uri).delete("id % 3 = 0")
    for v in range(1, 4):
        _same_as_pylance(uri, v)
    ours = str(tmp_path / "ours")
    write_dataset(_table(800), ours, enable_stable_row_ids=True, max_rows_per_file=300)
    lance.write_dataset(_table(50, 1, start=800), ours, mode="append")
    write_dataset(_table(70, 2, start=900), ours, mode="append")
    for v in range(1, 4):
        _same_as_pylance(ours, v)


def test_bad_input(tmp_path):
    uri = str(tmp_path / "ds")
    write_dataset(_table(10), uri)
    with pytest.raises(InvalidArgumentError, match="already exists"):
        write_dataset(_table(10), uri)
    with pytest.raises(SchemaError):
        write_dataset(_table(10).rename_columns(["id", "z", "s", "l"]), uri, mode="append")
    with pytest.raises(LanceError, match="nope"):
        open_dataset(uri).to_table(filter="nope > 1")
    with pytest.raises(InvalidArgumentError):
        open_dataset(uri, 99)
    with pytest.raises(LanceError):
        open_dataset(str(tmp_path / "missing"))
    assert open_dataset(uri).version == 1  # nothing half-committed
    assert lance_format  # the package imports cleanly with the table layer


def test_drop_columns_restore_and_staged_commits_with_pylance(tmp_path):
    from lance_format.table.dataset import write_fragments

    uri = str(tmp_path / "ds")
    lance.write_dataset(_table(1200), uri, max_rows_per_file=500)
    ours = open_dataset(uri)
    assert ours.drop_columns(["x"]) is None  # pylance's return; the object moved
    assert ours.version == 2 and ours.schema.names == ["id", "s", "l"]
    assert lance.dataset(uri).schema.names == ["id", "s", "l"]
    _same_as_pylance(uri)
    # fragments staged by two "workers", committed once by a third
    staged = write_fragments(
        _table(300, 1, start=1200).drop_columns(["x"]), uri, max_rows_per_file=200
    )
    staged += write_fragments(_table(100, 2, start=1500).drop_columns(["x"]), uri)
    assert lance.dataset(uri).version == ours.version  # staging commits nothing
    committed = open_dataset(uri).commit_fragments(staged)
    assert committed.version == ours.version + 1
    assert len(committed.get_fragments()) == 3 + 2 + 1
    _same_as_pylance(uri)
    # restore the first version (with x) as the newest one
    restored = open_dataset(uri)
    restored.restore(1)
    assert restored.version == committed.version + 1
    assert lance.dataset(uri).to_table().equals(lance.dataset(uri, version=1).to_table())
    _same_as_pylance(uri)
    with pytest.raises(SchemaError):
        restored.drop_columns(["nope"])


@pytest.mark.parametrize("version", VERSIONS)
def test_add_columns_both_ways(tmp_path, version):
    uri = str(tmp_path / "ds")
    lance.write_dataset(_table(1500), uri, data_storage_version=version, max_rows_per_file=600)
    lance.dataset(uri).delete("id % 9 = 0")  # computed over deleted rows too
    ours = open_dataset(uri)
    ours.add_columns({"id2": "id * 2 + 1", "up": "upper(s)"})
    assert [df for df in ours.get_fragments()[0].data_files()][1:]  # a second data file
    _same_as_pylance(uri)
    theirs = lance.dataset(uri).to_table(columns=["id", "id2", "up"])
    ids = theirs.column("id").to_numpy()
    assert np.array_equal(theirs.column("id2").to_numpy(), ids * 2 + 1)
    # a schema-only column: no data file, nulls everywhere
    ours.add_columns(pa.field("note", pa.string()))  # a second call on the same object
    assert lance.dataset(uri).to_table(columns=["note"]).column(0).null_count == theirs.num_rows
    _same_as_pylance(uri)
    # pylance adds a column, we read it; then we append rows including all columns
    lance.dataset(uri).add_columns({"x3": "x * 3"})
    _same_as_pylance(uri)
    cols = lance.dataset(uri).schema.names
    more = lance.dataset(uri).to_table(limit=10).select(cols)
    write_dataset(more, uri, mode="append")
    _same_as_pylance(uri)
    with pytest.raises(SchemaError):
        open_dataset(uri).add_columns({"id": "id + 1"})


CONSTANT_COLUMNS = {
    "zero": "0",
    "text": "'x'",
    "sum": "1 + 2",
    "none": "NULL",
    "half": "CAST(1.5 AS DOUBLE)",
    "yes": "true",
}


@pytest.mark.parametrize("version", VERSIONS)
def test_add_columns_reading_no_column_fill_every_row(tmp_path, version, monkeypatch):
    """A constant has one value per existing row (it once wrote files of 0 rows, after which
    neither reader could read the dataset): the same rows, values and schema as pylance's,
    over several fragments, deletions, a fully deleted fragment, and fragments longer than
    one evaluation step."""
    import shutil

    from lance_format.table import dataset as dataset_module

    monkeypatch.setattr(dataset_module, "ADD_COLUMNS_ROWS", 250)
    base = str(tmp_path / "base")
    lance.write_dataset(_table(1500), base, data_storage_version=version, max_rows_per_file=600)
    lance.dataset(base).delete("id % 9 = 0 OR id >= 1200")  # the third fragment goes
    theirs, ours = str(tmp_path / "theirs"), str(tmp_path / "ours")
    shutil.copytree(base, theirs)
    shutil.copytree(base, ours)
    for name, sql in CONSTANT_COLUMNS.items():
        lance.dataset(theirs).add_columns({name: sql})
        open_dataset(ours).add_columns({name: sql})
    # a constant beside a column-reading expression, in one call
    lance.dataset(theirs).add_columns({"k": "7", "id3": "id * 3"})
    open_dataset(ours).add_columns({"k": "7", "id3": "id * 3"})
    expected = lance.dataset(theirs).to_table()
    assert expected.num_rows == lance.dataset(base).count_rows() > 0
    assert lance.dataset(ours).to_table().equals(expected)
    assert lance.dataset(ours).schema == lance.dataset(theirs).schema  # nullability too
    assert open_dataset(ours).to_table().equals(expected)
    assert open_dataset(ours).to_table(filter="zero = 0 AND text = 'x'").num_rows == len(expected)
    for frag in lance.dataset(ours).get_fragments():
        assert frag.to_table().num_rows == frag.count_rows()
    _same_as_pylance(ours)


def test_cleanup_old_versions_keeps_what_pylance_needs(tmp_path):
    import datetime as dt
    import os

    uri = str(tmp_path / "ds")
    lance.write_dataset(_table(1000), uri, max_rows_per_file=400)  # v1
    write_dataset(_table(100, 1, start=1000), uri, mode="append")  # v2
    open_dataset(uri).tags.create("keep", 2)
    open_dataset(uri).delete("id % 2 = 0")  # v3
    write_dataset(_table(50, 2, start=5000), uri, mode="overwrite")  # v4: v1-3 files orphaned
    before = {v: lance.dataset(uri, version=v).to_table() for v in (2, 4)}
    orphan = os.path.join(uri, "data", "orphan-from-a-killed-writer.lance")
    with open(orphan, "wb") as f:
        f.write(b"x" * 100)
    # tagged old versions are refused unless asked to keep them
    with pytest.raises(InvalidArgumentError):
        open_dataset(uri).cleanup_old_versions(dt.timedelta(0))
    stats = open_dataset(uri).cleanup_old_versions(
        dt.timedelta(0), error_if_tagged_old_versions=False
    )
    assert stats.old_versions == 2  # v1 and v3
    assert os.path.exists(orphan)  # too young to be sure it is not a write in progress
    stats = open_dataset(uri).cleanup_old_versions(
        dt.timedelta(0), delete_unverified=True, error_if_tagged_old_versions=False
    )
    assert not os.path.exists(orphan) and stats.data_files_removed >= 1
    assert [v["version"] for v in lance.dataset(uri).versions()] == [2, 4]
    for v, table in before.items():
        assert lance.dataset(uri, version=v).to_table().equals(table)
        _same_as_pylance(uri, v)


def test_alter_columns_as_pylance(tmp_path):
    """Renames (top-level and nested) and nullability: the same schema and rows as pylance's
    ``alter_columns`` on a copy, and a version pylance reads."""
    import shutil

    table = pa.table(
        {
            "a": pa.array([1, None, 3], pa.int64()),
            "b": [1, 2, 3],
            "s": [{"x": 1, "y": "p"}, {"x": 2, "y": None}, {"x": 3, "y": "r"}],
        }
    )
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    lance.write_dataset(table, ours)
    shutil.copytree(ours, theirs)
    changes = [{"path": "s.x", "name": "z"}, {"path": "b", "name": "bb", "nullable": False}]
    got = open_dataset(ours)
    got.alter_columns(*changes)
    lance.dataset(theirs).alter_columns(*changes)
    assert got.version == 2
    assert lance.dataset(ours).schema == lance.dataset(theirs).schema
    assert lance.dataset(ours).to_table().equals(lance.dataset(theirs).to_table())
    with pytest.raises(InvalidArgumentError):  # nulls cannot become non-nullable
        got.alter_columns({"path": "a", "nullable": False})
    with pytest.raises(SchemaError):
        got.alter_columns({"path": "s.nope", "name": "q"})
    with pytest.raises(SchemaError):  # the new name is taken
        got.alter_columns({"path": "a", "name": "bb"})
    with pytest.raises(lance_format.InvalidDataError):  # not a cast pylance allows
        got.alter_columns({"path": "a", "data_type": pa.string()})
    assert lance.dataset(ours).version == 2  # the refusals committed nothing
