"""2.0/2.1 blob columns (``lance-encoding:blob`` on a large_binary field) against pylance 14.

A scan returns each row's ``(position, size)`` descriptor, as pylance's does (a 2.0 null is
``(1, 0)``, a 2.1 null a null struct); ``take_blobs`` gives file-like objects over the
bytes; ``blob_handling="all_binary"`` the bytes.  Datasets come from both writers, and
rewrites (update, compaction) must keep the bytes.
"""

from __future__ import annotations

import lance
import pyarrow as pa
import pytest

import lance_format

VALUES = [b"hello", b"", None, b"x" * 100, b"world", b"\x00\x01" * 300]


def _write(lib, uri: str, version: str):
    schema = pa.schema(
        [
            pa.field("id", pa.int64()),
            pa.field("blob", pa.large_binary(), metadata={"lance-encoding:blob": "true"}),
        ]
    )
    table = pa.table({"id": range(len(VALUES)), "blob": VALUES}, schema=schema)
    return lib.write_dataset(table, uri, data_storage_version=version, max_rows_per_file=4)


def _read_all(ds) -> list:
    return [
        None if f is None else f.readall() for f in ds.take_blobs("blob", indices=[0, 1, 3, 4, 5])
    ]


@pytest.mark.parametrize("version", ["2.0", "2.1"])
@pytest.mark.parametrize("writer", ["pylance", "ours"])
def test_legacy_blob_reads_match_pylance(tmp_path, version, writer):
    uri = str(tmp_path / "ds")
    _write(lance if writer == "pylance" else lance_format, uri, version)
    theirs, ours = lance.dataset(uri), lance_format.dataset(uri)
    assert ours.schema == theirs.schema
    assert ours.to_table() == theirs.to_table().combine_chunks()
    assert ours.to_table(columns=["blob"]).schema == theirs.to_table(columns=["blob"]).schema
    assert ours.take([0, 2, 3]) == theirs.take([0, 2, 3])
    assert _read_all(ours) == _read_all(theirs) == [VALUES[i] for i in (0, 1, 3, 4, 5)]
    binary = ours.to_table(blob_handling="all_binary")
    assert binary == theirs.to_table(blob_handling="all_binary").combine_chunks()
    assert binary.column("blob").to_pylist() == VALUES


@pytest.mark.parametrize("version", ["2.0", "2.1"])
def test_rewrites_keep_the_bytes(tmp_path, version):
    tables = []
    for lib, name in ((lance, "pylance"), (lance_format, "ours")):
        uri = str(tmp_path / name)
        ds = _write(lib, uri, version)
        ds.update({"id": "id + 10"}, where="id IN (0, 3)")
        ds.delete("id = 1")
        ds.optimize.compact_files()
        tables.append(lance.dataset(uri).to_table(blob_handling="all_binary").sort_by("id"))
    assert tables[0] == tables[1]
    assert sorted(v for v in tables[1].column("blob").to_pylist() if v) == sorted(
        v for i, v in enumerate(VALUES) if v and i != 1
    )
