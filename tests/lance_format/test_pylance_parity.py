"""pylance calls a user's script makes, run with ``import lance`` and with
``import lance_format as lance`` and compared: write-progress hooks, fragment column updates
and fragments made from a data file, pickling, ``BlobColumn`` and ``vec_to_table``, UDF
checkpoints, auto cleanup, appends of some of the columns, commit messages, ``drop``,
default scan options and constant filters.
"""

from __future__ import annotations

import importlib
import json
import os
import pickle
import uuid

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyroaring
import pytest
from test_pylance_api import both, same_errors


def _sub(lib, name):
    return importlib.import_module(f"{lib.__name__}.{name}")


def _counting_progress(lib):
    base = _sub(lib, "progress").FragmentWriteProgress

    class Counting(base):
        def __init__(self):
            self.begun, self.completed = [], []

        def begin(self, fragment, **kwargs):
            self.begun.append((fragment.id, fragment.physical_rows or 0))

        def complete(self, fragment, **kwargs):
            self.completed.append((fragment.id, fragment.physical_rows))

    return Counting()


def test_progress_hooks_hear_of_every_fragment(tmp_path):
    def script(lib, uri):
        progress = _counting_progress(lib)
        frags = _sub(lib, "fragment").write_fragments(
            pa.table({"a": range(80)}), uri, max_rows_per_file=40, progress=progress
        )
        one = _counting_progress(lib)
        frag = lib.LanceFragment.create(uri, pa.table({"a": range(7)}), fragment_id=5, progress=one)
        return (
            [f.physical_rows for f in frags],
            progress.begun,
            progress.completed,
            one.completed,
            frag.id,
        )

    theirs, ours = both(tmp_path, script)
    assert theirs == ours
    assert ours[2] == [(0, 40), (0, 40)]


def test_file_system_progress_leaves_what_a_crash_would(tmp_path):
    def script(lib, uri):
        progress_dir = os.path.join(uri + "_progress")
        progress = _sub(lib, "progress").FileSystemFragmentWriteProgress(
            progress_dir, metadata={"worker": "w1"}
        )
        frag = lib.LanceFragment.create(uri, pa.table({"a": range(10)}), progress=progress)
        with open(os.path.join(progress_dir, "fragment_0.json")) as f:
            recorded = json.load(f)

        def failing():
            yield pa.record_batch([pa.array(range(5))], names=["a"])
            raise RuntimeError("the source broke")

        reader = pa.RecordBatchReader.from_batches(pa.schema([("a", pa.int64())]), failing())
        with pytest.raises(Exception, match="the source broke"):
            lib.LanceFragment.create(uri, reader, fragment_id=1, progress=progress)
        with open(os.path.join(progress_dir, "fragment_1.in_progress")) as f:
            left = json.load(f)
        return (
            sorted(os.listdir(progress_dir)),
            recorded["id"],
            recorded["files"][0]["path"] == frag.files[0].path,
            left,
        )

    theirs, ours = both(tmp_path, script)
    assert theirs == ours
    assert ours[3] == {"fragment_id": 1, "metadata": {"worker": "w1"}}


@pytest.mark.parametrize("key", ["_rowid", "id"])
def test_fragment_update_columns_committed_as_update(tmp_path, key):
    def script(lib, uri):
        table = pa.table(
            {"id": [1, 2, 3, 4], "name": ["a", "b", "c", "d"], "s": [{"x": i} for i in range(4)]}
        )
        ds = lib.write_dataset(table, uri)
        if key == "_rowid":
            data = pa.table({"_rowid": pa.array([0, 2, 99], pa.uint64()), "name": ["A", None, "Z"]})
        else:
            data = pa.table({"id": [2, 4], "s": [{"x": 20}, {"x": 40}]})
        frag, modified, offsets = ds.get_fragment(0).update_columns(
            data, left_on=key, with_offsets=True
        )
        op = lib.LanceOperation.Update(updated_fragments=[frag], fields_modified=modified)
        new = lib.LanceDataset.commit(uri, op, read_version=ds.version)
        files = [(len(f.fields), [i for i in f.fields if i < 0]) for f in frag.files]
        return (
            new.to_table().to_pydict(),
            modified,
            files,
            list(pyroaring.BitMap.deserialize(offsets)),
        )

    theirs, ours = both(tmp_path, script)
    assert theirs == ours


@pytest.mark.parametrize("column", ["nope", "_rowaddr"])
def test_fragment_update_columns_refusals(tmp_path, column):
    def script(lib, uri):
        ds = lib.write_dataset(pa.table({"id": [1, 2], "v": [1, 2]}), uri)
        data = pa.table({"_rowid": pa.array([0], pa.uint64()), column: pa.array([5], pa.uint64())})
        ds.get_fragment(0).update_columns(data)

    theirs, ours = same_errors(tmp_path, script)
    words = "does not exist" if column == "nope" else "cannot be updated"
    assert words in str(theirs) and words in str(ours)


def test_fragment_from_an_existing_data_file(tmp_path):
    def script(lib, uri):
        data = pa.table({"a": range(8), "b": [str(i) for i in range(8)]})
        ds = lib.write_dataset([], uri, schema=data.schema)
        names = []
        for _ in range(2):
            names.append(f"{uuid.uuid4()}.lance")
            with _sub(lib, "file").LanceFileWriter(os.path.join(uri, "data", names[-1])) as w:
                w.write_batch(data)
            frag = lib.LanceFragment.create_from_file(names[-1], ds, 0)
            ds = lib.LanceDataset.commit(uri, lib.LanceOperation.Append([frag]), ds.version)
        shape = [(f.fields, f.column_indices) for f in frag.files]
        return ds.to_table().to_pydict(), [f.fragment_id for f in ds.get_fragments()], shape

    theirs, ours = both(tmp_path, script)
    assert theirs == ours


def test_pickled_datasets_fragments_and_metadata(tmp_path):
    def script(lib, uri):
        ds = lib.write_dataset(
            pa.table({"a": range(10)}), uri, max_rows_per_file=4, enable_stable_row_ids=True
        )
        ds.delete("a = 1")
        again = pickle.loads(pickle.dumps(ds))
        frag = pickle.loads(pickle.dumps(ds.get_fragments()[0]))
        meta = ds.get_fragments()[0].metadata
        return (
            again.to_table().to_pydict(),
            again.version,
            frag.to_table().to_pydict(),
            pickle.loads(pickle.dumps(meta)) == meta,
        )

    theirs, ours = both(tmp_path, script)
    assert theirs == ours


def test_blob_column_and_vec_to_table(tmp_path):
    def script(lib, uri):
        col = pa.array([b"ab", None, b""], pa.large_binary())
        read = [f.read() for f in lib.BlobColumn(col)]
        vectors = _sub(lib, "vector").vec_to_table(np.arange(6).reshape(3, 2))
        named = _sub(lib, "vector").vec_to_table({"p": [1, 2], "q": [3, 4]}, names=["k", "v"])
        return read, vectors, named

    theirs, ours = both(tmp_path, script)
    assert theirs == ours


def test_udf_checkpoint_resumes_a_failed_add_columns(tmp_path):
    def script(lib, uri):
        ds = lib.write_dataset(pa.table({"a": range(100)}), uri, max_rows_per_file=20)
        cache = uri + "_cache.sqlite"
        seen = []

        def double(fail):
            @lib.batch_udf(
                output_schema=pa.schema([("b", pa.int64())]),
                checkpoint_file=cache,
            )
            def udf(batch):
                first = batch["a"][0].as_py()
                seen.append(first)
                if fail and first >= 50:
                    raise RuntimeError("stop")
                return pa.record_batch([pc.multiply(batch["a"], 2)], ["b"])

            return udf

        with pytest.raises(Exception, match="stop"):
            ds.add_columns(double(True), read_columns=["a"])
        left = os.path.exists(cache)
        seen.clear()
        ds.add_columns(double(False), read_columns=["a"])
        return left, sorted(seen), os.path.exists(cache), ds.to_table().column("b").to_pylist()

    theirs, ours = both(tmp_path, script)
    assert theirs == ours
    assert ours[1] == [60, 80] or min(ours[1]) >= 50


def test_udf_checkpoint_refused_for_one_fragment(tmp_path):
    def script(lib, uri):
        ds = lib.write_dataset(pa.table({"a": range(10)}), uri)
        udf = lib.batch_udf(checkpoint_file=uri + "_c.sqlite")(lambda b: b)
        ds.get_fragments()[0].merge_columns(udf, columns=["a"])

    theirs, ours = same_errors(tmp_path, script)
    assert "A checkpoint file cannot be used" in str(ours)


def test_adding_a_null_constant_column_writes_no_file(tmp_path):
    def script(lib, uri):
        ds = lib.write_dataset(pa.table({"a": range(10)}), uri, max_rows_per_file=5)
        before = [f.data_files() for f in ds.get_fragments()]
        ds.add_columns({"b": "CAST(NULL AS INT)", "c": "CAST(NULL AS STRING)"})
        after = [f.data_files() for f in ds.get_fragments()]
        ds.add_columns({"d": "NULL"})  # of the null type: written out, as pylance does
        written = [f.data_files() for f in ds.get_fragments()]
        ds.validate()
        return before == after, after == written, ds.schema, ds.to_table().to_pydict()

    theirs, ours = both(tmp_path, script)
    assert theirs == ours


def test_auto_cleanup_keeps_the_base_version(tmp_path):
    def script(lib, uri):
        table = pa.table({"a": [1]})
        options = _sub(lib, "dataset").AutoCleanupConfig(interval=2, older_than_seconds=0)
        ds = lib.write_dataset(table, uri, auto_cleanup_options=options)
        config = ds.config()
        counts = []
        for _ in range(4):
            lib.write_dataset(table, uri, mode="append")
            counts.append([v["version"] for v in lib.dataset(uri).versions()])
        ds.optimize.disable_auto_cleanup()
        lib.write_dataset(table, uri, mode="append")
        counts.append([v["version"] for v in lib.dataset(uri).versions()])
        ds = lib.dataset(uri)
        ds.optimize.enable_auto_cleanup({"interval": 1, "older_than_seconds": 0})
        counts.append([v["version"] for v in lib.dataset(uri).versions()])
        return config, counts, ds.count_rows()

    theirs, ours = both(tmp_path, script)
    assert theirs == ours


def test_append_of_some_columns(tmp_path):
    def script(lib, uri):
        ds = lib.write_dataset(pa.table({"a": [1, 2], "b": ["x", "y"], "c": [1.5, 2.5]}), uri)
        ds.insert(pa.table({"a": [3]}))
        lib.write_dataset(pa.table({"c": [9.5], "a": [4]}), uri, mode="append")
        return lib.dataset(uri).to_table().to_pydict()

    theirs, ours = both(tmp_path, script)
    assert theirs == ours


def test_append_missing_a_non_nullable_column(tmp_path):
    def script(lib, uri):
        schema = pa.schema([pa.field("a", pa.int64()), pa.field("b", pa.int64(), False)])
        lib.write_dataset(pa.table({"a": [1], "b": [2]}, schema=schema), uri)
        lib.write_dataset(pa.table({"a": [3]}), uri, mode="append")

    same_errors(tmp_path, script)


def test_commit_messages_and_transactions(tmp_path):
    def script(lib, uri):
        key = _sub(lib, "dataset").LANCE_COMMIT_MESSAGE_KEY
        ds = lib.write_dataset(pa.table({"a": [1]}), uri, commit_message="first")
        lib.write_dataset(
            pa.table({"a": [2]}), uri, mode="append", transaction_properties={"k": "v"}
        )
        ds = lib.dataset(uri)
        ds.update({"a": "a + 10"}, conflict_retries=3)
        txns = ds.get_transactions()
        props = [t.transaction_properties for t in txns]
        return key, [p.get(key) for p in props], [p.get("k") for p in props], len(txns)

    theirs, ours = both(tmp_path, script)
    assert theirs == ours


def test_drop_a_dataset(tmp_path):
    def script(lib, uri):
        lib.write_dataset(pa.table({"a": [1]}), uri)
        lib.LanceDataset.drop(uri)
        gone = not os.path.exists(uri)
        lib.LanceDataset.drop(uri, ignore_not_found=True)
        return gone

    theirs, ours = both(tmp_path, script)
    assert theirs == ours is True

    def missing(lib, uri):
        lib.LanceDataset.drop(uri)

    same_errors(tmp_path, missing)


def test_default_scan_options_in_the_schema_and_constant_filters(tmp_path):
    def script(lib, uri):
        lib.write_dataset(pa.table({"a": range(5)}), uri)
        with_id = lib.dataset(uri, default_scan_options={"with_row_id": True}).schema.names
        with_addr = lib.dataset(uri, default_scan_options={"with_row_address": True}).schema
        ds = lib.dataset(uri)
        counts = [ds.count_rows(f) for f in ("true", "false", "1 = 1")]
        ds.delete("true")
        return with_id, with_addr.names, counts, ds.count_rows()

    theirs, ours = both(tmp_path, script)
    assert theirs == ours


def test_data_file_path_is_also_callable(tmp_path):
    def script(lib, uri):
        ds = lib.write_dataset(pa.table({"a": [1]}), uri)
        data_file = ds.get_fragments()[0].data_files()[0]
        with pytest.warns(DeprecationWarning):
            called = data_file.path()
        return called == data_file.path, repr(data_file).startswith("DataFile(path='")

    theirs, ours = both(tmp_path, script)
    assert theirs == ours == (True, True)


def test_bfloat16_inside_lists_and_tensors_reads_back(tmp_path):
    """Extension values below a fixed-size list or struct are read as their extension type
    (Arrow aborts the process on a list whose child has another type)."""
    import lance
    import lance.arrow

    import lance_format

    values = lance.arrow.bfloat16_array([i / 8 for i in range(9)])
    vectors = pa.FixedSizeListArray.from_arrays(values, 3)
    tensors = pa.ExtensionArray.from_storage(pa.fixed_shape_tensor(values.type, [3]), vectors)
    data = pa.table(
        {
            "vector": vectors,
            "tensor": tensors,
            "s": pa.StructArray.from_arrays([values.slice(0, 3)], ["b"]),
        }
    )
    uri = str(tmp_path / "bf16")
    lance.write_dataset(data, uri)
    ours = lance_format.dataset(uri).to_table()
    assert [c.to_pylist() for c in ours.columns] == [c.to_pylist() for c in data.columns]
    assert ours.column("tensor").type.value_type.extension_name == "lance.bfloat16"


@pytest.mark.parametrize("clauses", ["fail_insert", "fail", "nothing"])
def test_merge_insert_refusals(tmp_path, clauses):
    def script(lib, uri):
        ds = lib.write_dataset(pa.table({"id": [1, 2, 3], "v": [1, 2, 3]}), uri)
        builder = ds.merge_insert("id")
        if clauses.startswith("fail"):
            builder = builder.when_matched_fail()
        if clauses.endswith("insert"):
            builder = builder.when_not_matched_insert_all()
        builder.execute(pa.table({"id": [1, 9], "v": [0, 9]}))

    same_errors(tmp_path, script)


def test_merge_insert_when_matched_fail_inserts_new_keys(tmp_path):
    def script(lib, uri):
        ds = lib.write_dataset(pa.table({"id": [1, 2, 3], "v": [1, 2, 3]}), uri)
        stats = (
            ds.merge_insert("id")
            .when_matched_fail()
            .when_not_matched_insert_all()
            .execute(pa.table({"id": [6, 7], "v": [6, 7]}))
        )
        return stats, ds.version, ds.to_table().to_pydict()

    theirs, ours = both(tmp_path, script)
    assert theirs == ours


def test_file_session(tmp_path):
    def script(lib, uri):
        session = _sub(lib, "file").LanceFileSession(uri)
        for name, values in (("d/foo.lance", [1, 2]), ("bar.lance", [3])):
            with session.open_writer(name) as writer:
                writer.write_batch(pa.table({"a": values}))
        read = session.open_reader("d/foo.lance").read_all().to_table().to_pydict()
        head = session.read_range("bar.lance", 0, 4)
        session.delete_file("bar.lance")
        return read, session.list(), session.contains("d/foo.lance"), head

    theirs, ours = both(tmp_path, script)
    assert theirs == ours

    def missing(lib, uri):
        _sub(lib, "file").LanceFileSession(uri).open_reader("nope.lance")

    same_errors(tmp_path, missing)


def test_file_writer_without_schema_or_data(tmp_path):
    def script(lib, uri):
        with _sub(lib, "file").LanceFileWriter(uri + ".lance"):
            pass

    theirs, ours = same_errors(tmp_path, script)
    assert "Schema is unknown and file cannot be created" in str(ours)


@pytest.mark.parametrize("version", ["2.0", "2.2"])
def test_data_stats_bytes_per_field(tmp_path, version):
    def script(lib, uri):
        table = pa.table(
            {
                "x": [1, 2, 3, 4],
                "y": ["foo", "bar", "baz", "qux"],
                "s": [{"a": i} for i in range(4)],
            }
        )
        ds = lib.write_dataset(table, uri, max_rows_per_file=2, data_storage_version=version)
        ds.add_columns({"z": "y"})
        stats = ds.stats.data_stats()
        return [(f.id, f.bytes_on_disk) for f in stats.fields]

    theirs, ours = both(tmp_path, script)
    assert theirs == ours


def test_bfloat16_casts_and_printing(tmp_path):
    def script(lib, uri):
        arrow = _sub(lib, "arrow")
        out = []
        for dt in (np.float16, np.float32, np.float64):
            floats = pa.array([1.1, 2.0, 0.25, -3.5], pa.float64()).cast(pa.from_numpy_dtype(dt))
            bf16 = arrow.cast(floats, "bfloat16")
            back = arrow.cast(bf16, floats.type)
            fsl = pa.FixedSizeListArray.from_arrays(floats, 2)
            bf16_fsl = arrow.cast(fsl, pa.list_(arrow.BFloat16Type(), 2))
            out.append(
                (
                    [None if v is None else str(v) for v in bf16.to_pylist()],
                    back.to_pylist(),
                    arrow.cast(bf16_fsl, fsl.type).to_pylist(),
                )
            )
        out.append(str(arrow.bfloat16_array([1.0, 2.5, 3.0])))
        return out

    theirs, ours = both(tmp_path, script)
    assert theirs == ours


def test_takes_that_name_deleted_rows(tmp_path):
    def script(lib, uri):
        ds = lib.write_dataset(pa.table({"a": range(10)}), uri, max_rows_per_file=4)
        ids = ds.to_table(columns=[], with_row_id=True).column("_rowid").to_pylist()
        ds.delete("a = 1 OR a = 6")
        return ds._take_rows(ids).to_pydict(), ds._take_rows(ids[4:6]).to_pydict()

    theirs, ours = both(tmp_path, script)
    assert theirs == ours

    def blobs(lib, uri):
        blob = pa.field("b", pa.large_binary(), metadata={"lance-encoding:blob": "true"})
        table = pa.table(
            {"a": range(3), "b": [b"x", b"yy", b"zzz"]}, pa.schema([("a", pa.int64()), blob])
        )
        ds = lib.write_dataset(table, uri + "_blobs")
        ids = ds.to_table(columns=[], with_row_id=True).column("_rowid").to_pylist()
        ds.delete("a = 1")
        ds.take_blobs("b", ids=ids)

    theirs, ours = same_errors(tmp_path, blobs)
    assert isinstance(ours, NotImplementedError) and "must not target deleted" in str(ours)


@pytest.mark.parametrize("size", [5, 50])
def test_strict_batch_size_spans_fragments(tmp_path, size):
    def script(lib, uri):
        rows = [{"a": f"r{i}", "b": i} for i in range(96)]
        lib.write_dataset(pa.Table.from_pylist(rows), uri, max_rows_per_file=32)
        ds = lib.dataset(uri)
        strict = [b.num_rows for b in ds.to_batches(batch_size=size, strict_batch_size=True)]
        loose = [b.num_rows for b in ds.to_batches(batch_size=size)]
        values = [
            r["b"]
            for b in ds.to_batches(batch_size=size, strict_batch_size=True)
            for r in b.to_pylist()
        ]
        return strict, loose, values

    theirs, ours = both(tmp_path, script)
    assert theirs == ours


def test_default_batch_size_from_the_environment(tmp_path, monkeypatch):
    def script(lib, uri):
        lib.write_dataset(pa.table({"a": range(100)}), uri, max_rows_per_file=40)
        ds = lib.dataset(uri)
        monkeypatch.setenv("LANCE_DEFAULT_BATCH_SIZE", "12")
        sized = [b.num_rows for b in ds.scanner(scan_in_order=True).to_batches()]
        monkeypatch.delenv("LANCE_DEFAULT_BATCH_SIZE")
        return sized

    theirs, ours = both(tmp_path, script)
    assert theirs == ours


def test_scans_without_columns_still_count_rows(tmp_path):
    def script(lib, uri):
        ds = lib.write_dataset(pa.table({"a": range(100)}), uri, max_rows_per_file=30)
        ds.delete("a = 5")
        sizes = [b.num_rows for b in ds.scanner(columns=[], batch_size=10).to_batches()]
        names = {tuple(b.schema.names) for b in ds.scanner(columns=[]).to_batches()}
        rows = [
            ds.to_table(columns=[]).num_rows,
            ds.to_table(columns=[], filter="a > 50", limit=5, offset=3).num_rows,
            ds.to_table(columns=[], with_row_id=True).num_rows,
        ]
        return sizes, names, rows

    theirs, ours = both(tmp_path, script)
    assert theirs == ours


def test_a_delete_of_nothing_still_commits(tmp_path):
    def script(lib, uri):
        ds = lib.write_dataset(pa.table({"a": [1, 2]}), uri)
        ds.delete("a > 100")
        txn = ds.read_transaction(ds.version)
        return ds.version, type(txn.operation).__name__, ds.count_rows(), len(ds.get_transactions())

    theirs, ours = both(tmp_path, script)
    assert theirs == ours
