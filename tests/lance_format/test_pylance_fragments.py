"""pylance's fragment-level and low-level commit calls, run with ``import lance`` and with
``import lance_format as lance``: the same script must give the same results.

Covers ``LanceFragment(dataset, id)``, ``LanceFragment.merge`` committed as a Merge,
``drop_columns`` leaving no data file without fields, ``LanceOperation.UpdateConfig`` and
``CreateIndex`` with ``lance.dataset.Index`` objects, ``versions()``/``get_version()`` and
the builtin error classes of batch commits and empty fragments.
"""

from __future__ import annotations

import datetime as dt
import importlib
import uuid

import pandas as pd
import pyarrow as pa
import pytest
from test_pylance_api import LIBS, both, same_errors


def _sub(lib, name):
    return importlib.import_module(f"{lib.__name__}.{name}")


def test_fragment_from_dataset_and_id(tmp_path):
    def script(lib, uri):
        ds = lib.write_dataset(pa.table({"a": range(10)}), uri, max_rows_per_file=4)
        frag = lib.LanceFragment(ds, 1)
        return frag.fragment_id, frag.count_rows(), frag.to_table().to_pydict()

    theirs, ours = both(tmp_path, script)
    assert theirs == ours == (1, 4, {"a": [4, 5, 6, 7]})


def test_fragment_without_an_id_is_refused(tmp_path):
    def script(lib, uri):
        ds = lib.write_dataset(pa.table({"a": range(3)}), uri)
        lib.LanceFragment(ds, None)

    theirs, ours = same_errors(tmp_path, script)
    assert isinstance(ours, ValueError)


@pytest.mark.parametrize("key", ["id", "_rowid", "_rowaddr"])
def test_fragment_merge_committed_as_merge(tmp_path, key):
    def script(lib, uri):
        table = pa.table({"id": [3, 1, 2, 5, 7], "x": [1, 2, 3, 4, 5]})
        ds = lib.write_dataset(table, uri, max_rows_per_file=3)
        ds.delete("x = 2")
        merged, schema = [], None
        for frag in ds.get_fragments():
            if key == "id":
                right = pa.table({"key": [1, 2, 3, 9, 7], "y": ["a", "b", "c", "z", "g"]})
                new, schema = frag.merge(right, "id", "key")
            else:
                option = "with_row_id" if key == "_rowid" else "with_row_address"
                rows = frag.scanner(columns=[], **{option: True}).to_table()
                right = rows.add_column(0, "y", [[str(v) for v in rows.column(0).to_pylist()]])
                new, schema = frag.merge(right, key)
            merged.append(new)
        op = _sub(lib, "dataset").LanceOperation.Merge(merged, schema)
        ds = lib.LanceDataset.commit(uri, op, read_version=ds.version)
        return ds.to_table().to_pydict(), ds.schema.names

    theirs, ours = both(tmp_path, script)
    assert theirs == ours


def test_dropped_columns_leave_no_empty_data_file(tmp_path):
    def script(lib, uri):
        ds = lib.write_dataset(pa.table({"a": range(3)}), uri)
        ds.add_columns({"b": "a + 1"})
        ds.add_columns({"c": "a + 2"})
        ds.drop_columns(["b"])
        kept = [f.fields for f in ds.get_fragments()[0].metadata.files]
        frag = lib.LanceFragment.create(uri, pa.table({"a": range(3, 6), "c": range(5, 8)}))
        created = [i for f in frag.files for i in f.fields]
        op = lib.LanceOperation.Append([frag])
        ds = lib.LanceDataset.commit(uri, op, read_version=ds.version)
        return kept, created, ds.to_table().to_pydict()

    theirs, ours = both(tmp_path, script)
    assert theirs == ours
    assert theirs[0] == [[0], [2]]


def test_update_config_operation(tmp_path):
    def script(lib, uri):
        ds = lib.write_dataset(pa.table({"a": range(3)}), uri)
        m = lib.LanceOperation.UpdateMap
        op = lib.LanceOperation.UpdateConfig(
            config_updates=m({"k": "v", "k2": "w"}),
            schema_metadata_updates=m({"s": "1"}),
            field_metadata_updates={0: m({"f": "2"})},
        )
        ds = lib.LanceDataset.commit(uri, op, read_version=ds.version)
        op = lib.LanceOperation.UpdateConfig(config_updates=m({"k2": None}))
        ds = lib.LanceDataset.commit(uri, op, read_version=ds.version)
        config = ds.config() if callable(ds.config) else ds.config
        txn = ds.read_transaction(2)
        return (
            dict(config),
            ds.schema.metadata,
            ds.schema.field("a").metadata,
            type(txn.operation).__name__,
            txn.operation.config_updates.updates,
            txn.operation.field_metadata_updates[0].updates,
        )

    theirs, ours = both(tmp_path, script)
    assert theirs == ours
    assert theirs[0] == {"k": "v"}


def test_create_index_operation_with_index_objects(tmp_path):
    index_uuid = str(uuid.uuid4())

    def script(lib, uri):
        ds = lib.write_dataset(pa.table({"a": range(6)}), uri, max_rows_per_file=3)
        index = _sub(lib, "dataset").Index(
            uuid=index_uuid,
            name="a_idx",
            fields=[0],
            dataset_version=ds.version,
            fragment_ids={0, 1},
            index_version=0,
        )
        op = lib.LanceOperation.CreateIndex(new_indices=[index], removed_indices=[])
        ds = lib.LanceDataset.commit(uri, op, read_version=ds.version)
        listed = [
            (i["name"], i["uuid"], i["fields"], i["version"], set(i["fragment_ids"]))
            for i in ds.list_indices()
        ]
        back = ds.read_transaction(ds.version).operation.new_indices[0]
        return listed, (back.uuid, back.name, back.fields, set(back.fragment_ids))

    theirs, ours = both(tmp_path, script)
    assert theirs == ours
    assert theirs[0] == [("a_idx", index_uuid, ["a"], 1, {0, 1})]


def test_versions_and_get_version(tmp_path):
    def script(lib, uri):
        ds = lib.write_dataset(pa.table({"a": range(10)}), uri, max_rows_per_file=4)
        ds.delete("a < 2")
        ds.add_columns({"b": "a * 2"})
        versions = ds.versions()
        current = ds.get_version()
        for v in [*versions, current]:
            assert isinstance(v["timestamp"], dt.datetime) and v["timestamp"].tzinfo is None
            assert abs(v["timestamp"] - dt.datetime.now()) < dt.timedelta(minutes=5)
            v["timestamp"] = None
            v["metadata"].pop("total_files_size")  # the two write different bytes
        return versions, current

    theirs, ours = both(tmp_path, script)
    assert theirs == ours
    assert theirs[1]["metadata"]["total_rows"] == "8"


def test_versions_total_files_size_is_the_data_files(tmp_path):
    ds = LIBS["ours"].write_dataset(pa.table({"a": range(10)}), str(tmp_path), max_rows_per_file=4)
    on_disk = sum(p.stat().st_size for p in (tmp_path / "data").iterdir())
    assert ds.get_version()["metadata"]["total_files_size"] == str(on_disk)


def test_lance_schema_from_pyarrow():
    schema = pa.schema([pa.field("a", pa.int64()), pa.field("s", pa.struct([("x", pa.utf8())]))])
    for lib in LIBS.values():
        assert _sub(lib, "schema").LanceSchema.from_pyarrow(schema).to_pyarrow() == schema


def test_batch_commit_of_an_overwrite_is_an_os_error(tmp_path):
    def script(lib, uri):
        ds = lib.write_dataset(pa.table({"a": range(3)}), uri)
        frags = _sub(lib, "fragment").write_fragments(pa.table({"a": range(3)}), uri)
        txn = lib.Transaction(ds.version, lib.LanceOperation.Overwrite(ds.schema, frags))
        lib.LanceDataset.commit_batch(uri, [txn])

    theirs, ours = same_errors(tmp_path, script)
    assert isinstance(theirs, OSError) and isinstance(ours, OSError)


@pytest.mark.parametrize("frame", [pd.DataFrame([]), pd.DataFrame([{}])])
def test_fragment_of_no_columns_is_an_os_error(tmp_path, frame):
    theirs, ours = same_errors(tmp_path, lambda lib, uri: lib.LanceFragment.create(uri, frame))
    assert isinstance(ours, OSError)


@pytest.mark.parametrize("kind", ["expression", "function", "reader"])
def test_fragment_merge_columns(tmp_path, kind):
    def script(lib, uri):
        ds = lib.write_dataset(pa.table({"a": range(10), "b": range(10)}), uri, max_rows_per_file=4)
        ds.delete("a = 5")
        new, schema = [], None
        for frag in ds.get_fragments():
            if kind == "expression":
                meta, schema = frag.merge_columns({"c": "a * 3"})
            elif kind == "function":

                def triple(batch):
                    return pa.record_batch([pa.compute.multiply(batch["a"], 3)], ["c"])

                meta, schema = frag.merge_columns(triple, columns=["a"])
            else:
                rows = frag.count_rows()
                batches = [pa.record_batch([pa.array(range(rows))], ["c"])]
                reader_schema = pa.schema([pa.field("c", pa.int64())])
                meta, schema = frag.merge_columns(iter(batches), reader_schema=reader_schema)
            new.append(meta)
        op = lib.LanceOperation.Merge(new, schema)
        ds = lib.LanceDataset.commit(uri, op, read_version=ds.version)
        return ds.to_table().to_pydict(), schema.to_pyarrow()

    theirs, ours = both(tmp_path, script)
    assert theirs == ours


def test_dataset_merge_in_place(tmp_path):
    def script(lib, uri):
        ds = lib.write_dataset(pa.table({"id": range(6), "x": range(6)}), uri, max_rows_per_file=4)
        ds.merge(pa.table({"key": [5, 0, 2, 9], "y": ["f", "a", "c", "z"]}), "id", "key")
        ds.merge(pa.table({"id": [1, 3], "z": [1.5, 3.5]}).to_batches()[0], left_on="id")
        return ds.version, ds.to_table().to_pydict()

    theirs, ours = both(tmp_path, script)
    assert theirs == ours


def test_drop_columns_drops_their_indices(tmp_path):
    vectors = pa.FixedSizeListArray.from_arrays(pa.array(range(512 * 8), pa.float32()), 8)

    def script(lib, uri):
        ds = lib.write_dataset(pa.table({"a": vectors, "b": range(512), "c": range(512)}), uri)
        ds.create_index("a", "IVF_FLAT", num_partitions=2)
        ds.drop_columns(["b"])
        kept = [i["fields"] for i in ds.list_indices()]
        ds.drop_columns(["a"])
        return kept, ds.list_indices(), ds.to_table().to_pydict()

    theirs, ours = both(tmp_path, script)
    assert theirs == ours
    assert theirs[0] == [["a"]] and theirs[1] == []


@pytest.mark.parametrize("rows", [50, 101])
def test_add_columns_reader_of_the_wrong_length(tmp_path, rows):
    def script(lib, uri):
        ds = lib.write_dataset(pa.table({"a": range(100)}), uri, max_rows_per_file=25)
        batches = iter([pa.record_batch([pa.array(range(rows))], ["f"])])
        ds.add_columns(batches, reader_schema=pa.schema([pa.field("f", pa.int64())]))

    theirs, ours = same_errors(tmp_path, script)
    expected = "Stream ended before" if rows < 100 else "Stream produced more values"
    assert expected in str(theirs) and expected in str(ours)


def test_create_and_drop_index_in_place(tmp_path):
    vectors = pa.FixedSizeListArray.from_arrays(pa.array(range(256 * 8), pa.float32()), 8)

    def script(lib, uri):
        ds = lib.write_dataset(
            pa.table({"v": vectors, "id": range(256)}), uri, max_rows_per_file=128
        )
        returned = ds.create_index("v", "IVF_FLAT", num_partitions=2)
        after_create = (returned is ds, ds.version, [i["name"] for i in ds.list_indices()])
        ds.optimize.compact_files()  # against the version with the index: no conflict
        dropped = ds.drop_index("v_idx")
        return after_create, dropped, ds.version, ds.list_indices(), len(ds.get_fragments())

    theirs, ours = both(tmp_path, script)
    assert theirs == ours
    assert theirs[0] == (True, 2, ["v_idx"])


def test_compaction_keeps_blob_v2_bytes(tmp_path):
    def script(lib, uri):
        schema = pa.schema([pa.field("id", pa.int64()), lib.blob_field("blob")])
        parts = [([1, 2], [b"P1", None]), ([3, 4, 5], [b"P3", None, b""])]
        for i, (ids, values) in enumerate(parts):
            table = pa.Table.from_arrays([pa.array(ids), lib.blob_array(values)], schema=schema)
            mode = "create" if i == 0 else "append"
            lib.write_dataset(table, uri, mode=mode, data_storage_version="2.2")
        ds = lib.dataset(uri)
        ds.delete("id = 2")
        ds.optimize.compact_files(num_threads=1)
        ids = ds.to_table(columns=["id"]).column("id").to_pylist()
        blobs = ds.take_blobs("blob", indices=range(len(ids)))
        taken = {i: None if b is None else b.readall() for i, b in zip(ids, blobs, strict=True)}
        binary = ds.to_table(columns=["id", "blob"], blob_handling="all_binary").to_pydict()
        described = ds.to_table(columns=["blob"]).column("blob").to_pylist()
        sizes = [None if d is None else d["size"] for d in described]
        return len(ds.get_fragments()), taken, binary, sizes

    theirs, ours = both(tmp_path, script)
    assert theirs == ours
    assert theirs[1] == {1: b"P1", 3: b"P3", 4: None, 5: b""}
    reread = LIBS["pylance"].dataset(str(tmp_path / "ours"))
    assert reread.to_table(blob_handling="all_binary").to_pydict() == theirs[2]


def test_version_refs_and_manifest_path_migration(tmp_path):
    def script(lib, uri):
        lib.write_dataset(pa.table({"a": [1]}), uri, enable_v2_manifest_paths=False)
        lib.write_dataset(pa.table({"a": [2]}), uri, mode="append")
        names = sorted(p.name for p in (tmp_path / uri).joinpath("_versions").iterdir())
        ds = lib.dataset(uri)
        ds.migrate_manifest_paths_v2()
        migrated = sorted(p.name for p in (tmp_path / uri).joinpath("_versions").iterdir())
        reopened = lib.dataset(uri)
        return names, migrated, reopened.version_refs(), reopened.to_table().to_pydict()

    theirs, ours = both(tmp_path, script)
    assert theirs == ours
    assert theirs[0][:2] == ["1.manifest", "2.manifest"]
    assert LIBS["pylance"].dataset(str(tmp_path / "ours"), version=1).count_rows() == 1


def test_tag_metadata_replaced(tmp_path):
    def script(lib, uri):
        ds = lib.write_dataset(pa.table({"a": [1]}), uri)
        ds.tags.create("t", 1)
        before = ds.tags.list()["t"]
        ds.tags.replace_metadata("t", {"owner": "x", "k": "v"})
        ds.tags.replace_metadata("t", {"owner": "y"})
        after = ds.tags.list()["t"]
        assert after["updated_at"] == before["updated_at"]
        assert after["created_at"] == before["created_at"]
        return after["metadata"], after["version"]

    theirs, ours = both(tmp_path, script)
    assert theirs == ours == ({"owner": "y"}, 1)
    pylance_view = LIBS["pylance"].dataset(str(tmp_path / "ours")).tags.list()["t"]
    assert pylance_view["metadata"] == {"owner": "y"}


def test_replacing_metadata_of_a_missing_tag(tmp_path):
    def script(lib, uri):
        lib.write_dataset(pa.table({"a": [1]}), uri).tags.replace_metadata("nope", {})

    same_errors(tmp_path, script)


def test_relative_dataset_paths(tmp_path, monkeypatch):
    for name, lib in LIBS.items():
        (tmp_path / name).mkdir()
        monkeypatch.chdir(tmp_path / name)
        lib.write_dataset(pa.table({"a": [1, 2]}), "rel.lance")
        assert lib.dataset("rel.lance").count_rows() == 2
    assert LIBS["pylance"].dataset(str(tmp_path / "ours" / "rel.lance")).count_rows() == 2


@pytest.mark.parametrize("option", ["offset", "limit"])
def test_negative_offset_or_limit(tmp_path, option):
    def script(lib, uri):
        lib.write_dataset(pa.table({"a": range(10)}), uri).to_table(**{option: -1})

    theirs, ours = same_errors(tmp_path, script)
    expected = f"{option.capitalize()} must be non-negative"
    assert expected in str(theirs) and expected in str(ours)


def test_take_rows_by_row_id_with_a_projection(tmp_path):
    def script(lib, uri):
        ds = lib.write_dataset(pa.table({"a": range(10), "b": list("abcdefghij")}), uri)
        ds.delete("a = 2")
        ids = ds.to_table(columns=[], with_row_id=True).column("_rowid").to_pylist()
        return ds._take_rows([ids[5], ids[0]], columns={"a2": "a * 2", "up": "upper(b)"})

    theirs, ours = both(tmp_path, script)
    assert theirs == ours
