"""``write_dataset``'s service-grade guarantees, for Python users as for the server:
idempotency keys, a create that loses the race to another creator, and no files left
behind by a failed write.  pylance reads every result."""

from __future__ import annotations

import os
import threading

import lance
import pyarrow as pa
import pytest

import lance_format as lf
from lance_format.errors import DatasetExistsError, InvalidArgumentError
from lance_format.table import dataset_write


def table(n: int, start: int = 0) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64())})


def data_files(uri: str) -> set[str]:
    d = os.path.join(uri, "data")
    return set(os.listdir(d)) if os.path.isdir(d) else set()


def test_an_idempotency_key_commits_once(tmp_path):
    uri = str(tmp_path / "idem")
    first = lf.write_dataset(table(10), uri, mode="append", idempotency_key="k1")
    files = data_files(uri)
    again = lf.write_dataset(table(10), uri, mode="append", idempotency_key="k1")
    assert again.version == first.version == 1 and data_files(uri) == files
    assert dataset_write.find_idempotent(uri, "k1") == dataset_write.WriteOutcome(1, 10, True)
    lf.write_dataset(table(5, 10), uri, mode="append", idempotency_key="k2")
    assert lance.dataset(uri).count_rows() == 15

    versions = []

    def retry() -> None:
        versions.append(
            lf.write_dataset(table(3, 50), uri, mode="append", idempotency_key="k3").version
        )

    threads = [threading.Thread(target=retry) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert versions == [3, 3, 3] and lance.dataset(uri).count_rows() == 18
    assert len(data_files(uri)) == len(files) + 2  # the losers removed their files
    with pytest.raises(InvalidArgumentError):
        lf.write_dataset(table(1), uri, mode="append", idempotency_key="")


def _racing(t: pa.Table, other: pa.Table, uri: str):
    """``t``'s batches; after the first, pylance creates the dataset."""
    for i, b in enumerate(t.to_batches(max_chunksize=5)):
        yield b
        if i == 0:
            lance.write_dataset(other, uri)


def test_a_create_that_loses_the_race_appends_or_fails(tmp_path):
    t, other = table(20), table(7, 100)
    uri = str(tmp_path / "append")
    ds = lf.write_dataset(_racing(t, other, uri), uri, t.schema, mode="append")
    assert ds.version == 2
    got = lance.dataset(uri).to_table().sort_by("id")
    assert got.equals(pa.concat_tables([t, other]).sort_by("id"))

    uri = str(tmp_path / "create")
    with pytest.raises(DatasetExistsError):
        lf.write_dataset(_racing(t, other, uri), uri, t.schema, mode="create")
    theirs = lance.dataset(uri)
    assert theirs.version == 1 and theirs.to_table().equals(other)
    assert data_files(uri) == {f.path for f in theirs.get_fragments()[0].data_files()}
    with pytest.raises(ValueError):  # also the builtin pylance raises
        lf.write_dataset(t, uri, mode="create")


def test_a_failed_write_leaves_nothing_behind(tmp_path):
    def failing():
        yield from table(30).to_batches(max_chunksize=10)
        raise RuntimeError("the source broke")

    uri = str(tmp_path / "new" / "ds")
    with pytest.raises(RuntimeError):
        lf.write_dataset(failing(), uri, table(1).schema, max_rows_per_file=10)
    assert not os.path.exists(tmp_path / "new")  # the directories it created are gone

    uri = str(tmp_path / "kept")
    lf.write_dataset(table(4), uri)
    before = data_files(uri)
    with pytest.raises(RuntimeError):
        lf.write_dataset(failing(), uri, table(1).schema, mode="append", max_rows_per_file=10)
    assert data_files(uri) == before and lance.dataset(uri).count_rows() == 4
