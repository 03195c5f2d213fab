"""``_row_created_at_version`` / ``_row_last_updated_at_version`` against pylance 14.

The same history of writes (create, append, update, merge_insert, delete, add_columns with
data and schema-only, drop, compaction) runs through pylance and through lance_format; after
each step both libraries read both datasets, and the version columns must agree per row id
with what pylance computed on its own dataset.  Rows are keyed by ``id`` (merge_insert lays
moved and inserted rows out differently in the two libraries, so row ids of inserted rows
may differ).
"""

from __future__ import annotations

import lance
import numpy as np
import pyarrow as pa
import pytest

import lance_format
from lance_format.table import row_versions

COLS = ["id", "v", "_row_created_at_version", "_row_last_updated_at_version"]


def _history(lib, uri: str):
    """Yield after every step of the history (the dataset object, a step name)."""
    ds = lib.write_dataset(
        pa.table({"id": range(10), "v": range(10)}),
        uri,
        enable_stable_row_ids=True,
        max_rows_per_file=6,
    )
    yield "create"
    ds = lib.write_dataset(pa.table({"id": range(10, 15), "v": range(10, 15)}), uri, mode="append")
    yield "append"
    ds.update({"v": "v + 100"}, where="id < 3")
    yield "update"
    ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(
        pa.table({"id": [4, 20], "v": [0, 0]})
    )
    yield "merge_insert"
    ds.delete("id = 5")
    yield "delete"
    ds.add_columns(pa.field("z", pa.int32()))
    yield "add_columns schema only"
    ds.add_columns({"w": "v * 2"})
    yield "add_columns"
    ds.drop_columns(["w"])
    yield "drop"
    ds.optimize.compact_files()
    yield "compact"
    ds.update({"v": "v - 1"}, where="id >= 13")
    yield "update after compaction"


def _read(lib, uri: str, **kw) -> pa.Table:
    return lib.dataset(uri).to_table(columns=COLS, **kw).sort_by("id")


def test_version_columns_match_pylance_through_a_history(tmp_path):
    theirs, ours = str(tmp_path / "pylance"), str(tmp_path / "ours")
    steps = zip(_history(lance, theirs), _history(lance_format, ours), strict=True)
    for step, _ in steps:
        truth = _read(lance, theirs)
        assert _read(lance_format, theirs) == truth, step  # we read pylance's
        assert _read(lance, ours) == truth, step  # pylance reads what we wrote
        assert _read(lance_format, ours) == truth, step


def test_version_columns_in_filters_takes_and_fragments(tmp_path):
    uri = str(tmp_path / "ds")
    for _ in _history(lance, uri):
        pass
    for lib in (lance, lance_format):
        ds = lib.dataset(uri)
        got = ds.to_table(columns=["id"], filter="_row_created_at_version = 4")
        assert got.column("id").to_pylist() == [20]
        assert ds.count_rows(f"_row_last_updated_at_version = {ds.version}") == 3
    ours, theirs = lance_format.dataset(uri), lance.dataset(uri)
    cols = ["id", "_row_last_updated_at_version"]
    # (pylance 14's take of these columns fails; its scan is the truth)
    assert ours.take([0, 7, 3], columns=cols).combine_chunks() == theirs.to_table(
        columns=cols
    ).take([0, 7, 3])
    schema = ours.scanner(columns=cols).projected_schema
    assert schema == theirs.scanner(columns=cols).projected_schema
    frag = ours.get_fragments()[0].to_table(columns=cols)
    assert frag == theirs.get_fragments()[0].to_table(columns=cols)


def test_without_stable_row_ids_every_row_reads_version_one(tmp_path):
    uri = str(tmp_path / "ds")
    lance.write_dataset(pa.table({"id": range(5)}), uri)
    lance.write_dataset(pa.table({"id": range(5, 8)}), uri, mode="append")
    cols = ["id", "_row_created_at_version", "_row_last_updated_at_version"]
    assert lance_format.dataset(uri).to_table(columns=cols) == lance.dataset(uri).to_table(
        columns=cols
    )


@pytest.mark.parametrize(
    "versions",
    [[1, 1, 1], [3, 3, 5, 5, 5, 2], [7], []],
)
def test_sequence_encoding_round_trips(versions):
    values = np.array(versions, dtype=np.uint64)
    data = row_versions.encode_versions(values)
    assert row_versions.decode_versions(data).tolist() == versions
    runs = row_versions.decode_runs(data)
    changes = sum(1 for i, v in enumerate(versions) if i == 0 or versions[i - 1] != v)
    assert [v for _, v in runs] == [
        v for i, v in enumerate(versions) if i == 0 or versions[i - 1] != v
    ]
    assert len(runs) == changes


def test_fragment_metadata_json_carries_the_sequences_as_pylance(tmp_path):
    import json

    from lance_format.fragment import FragmentMetadata

    uri = str(tmp_path / "ds")
    for _ in _history(lance, uri):
        pass
    for ours, theirs in zip(
        lance_format.dataset(uri).get_fragments(), lance.dataset(uri).get_fragments(), strict=True
    ):
        expected = theirs.metadata.to_json()
        assert ours.metadata.to_json() == expected
        back = FragmentMetadata.from_json(json.dumps(expected))
        assert back.to_pb() == ours.metadata.to_pb()
