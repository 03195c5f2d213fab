"""Writing legacy (0.1) datasets, as pylance 14 still does, against pylance itself.

The same writes run through both libraries: the fragments (rows per file, by pylance's
row-group rounding), the data-file records and the rows must agree, and each library
reads the other's files.
"""

from __future__ import annotations

import lance
import pyarrow as pa
import pytest

import lance_format
from lance_format.errors import UnsupportedError


def _table(n: int = 2100) -> pa.Table:
    k = n // 3
    return pa.table(
        {
            "i": pa.array([1, None, 3] * k, pa.int32()),
            "s": ["ab", None, ""] * k,
            "l": [[1, 2], None, []] * k,
            "st": [{"x": 1.5, "y": "q"}, None, {"x": 2.5, "y": None}] * k,
            "b": [True, False, None] * k,
            "f": pa.array([[1.0, 2.0]] * (3 * k), pa.list_(pa.float32(), 2)),
            "ls": [["a"], ["b", None], None] * k,
            "ts": pa.array([1, 2, 3] * k, pa.timestamp("us")),
            "u8": pa.array([1, 2, 3] * k, pa.uint8()),
            "lb": pa.array([b"x", b"yy", None] * k, pa.large_binary()),
        }
    )


def _files(uri: str) -> list:
    return [
        (
            f.metadata.physical_rows,
            [
                (d.file_major_version, d.file_minor_version, list(d.fields), list(d.column_indices))
                for d in f.metadata.files
            ],
        )
        for f in lance.dataset(uri).get_fragments()
    ]


@pytest.mark.parametrize(
    ("max_rows_per_file", "max_rows_per_group"), [(1500, 1024), (10, 1024), (1000, 300)]
)
def test_legacy_writes_match_pylance(tmp_path, max_rows_per_file, max_rows_per_group):
    table = _table(2100 if max_rows_per_file > 10 else 60)
    uris = {}
    for lib, name in ((lance, "pylance"), (lance_format, "ours")):
        uri = uris[name] = str(tmp_path / name)
        lib.write_dataset(
            table,
            uri,
            data_storage_version="legacy",
            max_rows_per_file=max_rows_per_file,
            max_rows_per_group=max_rows_per_group,
        )
        lib.write_dataset(table.slice(0, 7), uri, mode="append")
    assert _files(uris["ours"]) == _files(uris["pylance"])
    truth = lance.dataset(uris["pylance"]).to_table()
    assert lance.dataset(uris["ours"]).to_table() == truth
    assert lance_format.dataset(uris["ours"]).to_table() == truth
    assert str(lance.dataset(uris["ours"]).data_storage_version) == "0.1"


def test_row_changes_on_a_legacy_dataset_match_pylance(tmp_path):
    tables = []
    for lib, name in ((lance, "pylance"), (lance_format, "ours")):
        uri = str(tmp_path / name)
        ds = lib.write_dataset(
            _table(300).append_column("id", pa.array(range(300))),
            uri,
            use_legacy_format=True,
            max_rows_per_file=100,
        )
        ds.update({"u8": "u8 + 10"}, where="id < 5")
        ds.delete("id % 7 = 0")
        ds.optimize.compact_files()
        tables.append(lance.dataset(uri).to_table().sort_by("id"))
        assert str(lance.dataset(uri).data_storage_version) == "0.1"
    assert tables[0] == tables[1]


def test_dictionary_columns_are_refused(tmp_path):
    table = pa.table({"d": pa.array(["a", "b", "a"]).dictionary_encode()})
    with pytest.raises(UnsupportedError):
        lance_format.write_dataset(table, str(tmp_path / "ds"), data_storage_version="legacy")
    assert not (tmp_path / "ds" / "_versions").exists()
