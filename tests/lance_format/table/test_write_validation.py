"""Every write path refuses what pylance refuses, and a refusal leaves nothing behind.

For each bad input: pylance itself refuses it, or writes a dataset it cannot read (the
independent truth, and the builtin exception class we must match); each of our write paths
raises, ``data/`` holds no new file, no version is committed, and pylance still reads every
version unchanged.
"""

from __future__ import annotations

import os

import lance
import numpy as np
import pyarrow as pa
import pytest

import lance_format
from lance_format.errors import InvalidArgumentError, InvalidDataError
from lance_format.table import dataset as dataset_module
from lance_format.table import write

NOT_NULL_ITEM = pa.list_(pa.field("item", pa.int32(), nullable=False))
STRICT_STRUCT = pa.struct([pa.field("x", pa.int32(), nullable=False), pa.field("y", pa.string())])


def _offsets(values: list[int]) -> pa.Buffer:
    return pa.array(values, pa.int32()).buffers()[1]


def _case_not_null() -> tuple[pa.Table, pa.Table]:
    schema = pa.schema([pa.field("a", pa.int32(), nullable=False), pa.field("b", pa.string())])
    good = pa.table({"a": pa.array([1, 2, 3], pa.int32()), "b": ["p", "q", "r"]}, schema=schema)
    bad = pa.table({"a": pa.array([4, None], pa.int32()), "b": ["s", "t"]}, schema=schema)
    return good, bad


def _case_struct_child() -> tuple[pa.Table, pa.Table]:
    good = pa.table({"s": pa.array([{"x": 1, "y": "a"}, {"x": 2, "y": None}], STRICT_STRUCT)})
    child = pa.array([5, None], pa.int32())
    bad_s = pa.StructArray.from_arrays([child, pa.array(["c", "d"])], fields=list(STRICT_STRUCT))
    return good, pa.table({"s": bad_s})


def _case_list_item() -> tuple[pa.Table, pa.Table]:
    good = pa.table({"l": pa.array([[1, 2], [3]], NOT_NULL_ITEM)})
    # the null sits in the range of a null slot: pylance refuses that too
    bad_l = pa.ListArray.from_arrays(
        pa.array([0, 1, 2], pa.int32()),
        pa.array([7, None], pa.int32()),
        type=NOT_NULL_ITEM,
        mask=pa.array([False, True]),
    )
    return good, pa.table({"l": bad_l})


def _case_bad_offsets() -> tuple[pa.Table, pa.Table]:
    good = pa.table({"b": pa.array([b"ab", b"c"], pa.binary())})
    bad = pa.Array.from_buffers(
        pa.binary(), 3, [None, _offsets([0, 5, 2, 6]), pa.py_buffer(b"abcdef")]
    )
    return good, pa.table({"b": bad})


def _case_bad_utf8() -> tuple[pa.Table, pa.Table]:
    good = pa.table({"s": pa.array(["ok", "fine"])})
    bad = pa.Array.from_buffers(
        pa.string(), 2, [None, _offsets([0, 1, 2]), pa.py_buffer(b"\xff\xfe")]
    )
    return good, pa.table({"s": bad})


def _case_dictionary_key() -> tuple[pa.Table, pa.Table]:
    typ = pa.dictionary(pa.int32(), pa.string())
    good = pa.table({"d": pa.array(["x", "y", "x"]).dictionary_encode()})
    bad = pa.DictionaryArray.from_arrays(
        pa.array([0, 5], pa.int32()), pa.array(["x", "y"]), safe=False
    )
    assert bad.type == typ
    return good, pa.table({"d": bad})


CASES = {
    "not-null": _case_not_null,
    "struct-child": _case_struct_child,
    "list-item": _case_list_item,
    "bad-offsets": _case_bad_offsets,
    "bad-utf8": _case_bad_utf8,
    "dictionary-key": _case_dictionary_key,
}


def _data_files(uri: str) -> set[str]:
    data = os.path.join(uri, "data")
    return set(os.listdir(data)) if os.path.isdir(data) else set()


def _pylance_refusal(tmp_path, bad: pa.Table) -> type[BaseException]:
    """The builtin class pylance raises for ``bad``: when writing it, or (bad UTF-8,
    dictionary keys out of range: pylance writes those) when reading what it wrote."""
    uri = str(tmp_path / "pylance")
    with pytest.raises(Exception) as e:
        lance.write_dataset(bad, uri)
        lance.dataset(uri).to_table()
    return OSError if isinstance(e.value, OSError) else ValueError


def _assert_unchanged(uri: str, versions: dict[int, pa.Table], files: set[str]) -> None:
    assert _data_files(uri) == files
    ds = lance.dataset(uri)
    assert ds.version == max(versions)
    for v, table in versions.items():
        assert lance.dataset(uri, version=v).to_table().equals(table)


@pytest.mark.parametrize("case", CASES)
def test_every_write_path_refuses_what_pylance_refuses(tmp_path, case):
    good, bad = CASES[case]()
    builtin = _pylance_refusal(tmp_path, bad)
    uri = str(tmp_path / "ds")
    lance_format.write_dataset(good, uri)
    lance_format.write_dataset(good, uri, mode="append")
    versions = {1: good, 2: pa.concat_tables([good, good])}
    files = _data_files(uri)

    attempts = {
        "append": lambda: lance_format.write_dataset(bad, uri, mode="append"),
        "overwrite": lambda: lance_format.write_dataset(bad, uri, mode="overwrite"),
        # valid batches first, in files of one row already closed: all must go
        "append-late": lambda: lance_format.write_dataset(
            pa.concat_tables([good, bad]), uri, mode="append", max_rows_per_file=1
        ),
        "stage": lambda: dataset_module.write_fragments(bad, uri),
        "stage-2.1": lambda: write.write_fragments(
            bad, uri, lance_format.dataset(uri).lance_schema, data_storage_version="2.1"
        ),
    }
    for name, attempt in attempts.items():
        with pytest.raises(InvalidDataError) as e:
            attempt()
        assert isinstance(e.value, builtin), name
        assert "Traceback" not in str(e.value)
        _assert_unchanged(uri, versions, files)

    fresh = str(tmp_path / "fresh")
    with pytest.raises(builtin):
        lance_format.write_dataset(bad, fresh)
    assert _data_files(fresh) == set() and not os.path.exists(os.path.join(fresh, "_versions"))

    for version in ("2.0", "2.1", "2.2"):
        path = tmp_path / f"file-{version}.lance"
        with lance_format.LanceFileWriter(str(path), good.schema, version=version) as w:
            w.write_table(good)
            with pytest.raises(builtin):
                w.write_table(bad)
        # the refused batch left the writer as it was: the file holds the good rows only
        assert lance.file.LanceFileReader(str(path)).read_all().to_table().equals(good)
    assert not [name for name in os.listdir(tmp_path) if name.endswith(".partial")]


def test_append_checks_the_datasets_nullability_not_the_datas(tmp_path):
    """The dataset says NOT NULL; the appended data's schema says nothing of it."""
    uri = str(tmp_path / "ds")
    good, _ = _case_not_null()
    lance_format.write_dataset(good, uri)
    files = _data_files(uri)
    loose = pa.table({"a": pa.array([None], pa.int32()), "b": ["z"]})
    with pytest.raises(OSError):
        lance.write_dataset(loose, uri, mode="append")
    with pytest.raises(InvalidDataError, match="'a'.*non-nullable"):
        lance_format.write_dataset(loose, uri, mode="append")
    _assert_unchanged(uri, {1: good}, files)
    # an overwrite replaces the schema, so the same data is fine there (as in pylance)
    lance_format.write_dataset(loose, uri, mode="overwrite")
    assert lance.dataset(uri).to_table().equals(loose)


def test_nulls_under_a_null_struct_are_masked(tmp_path):
    """A null under a null struct parent is no null of the child: both writers accept it."""
    child = pa.array([1, None, 3], pa.int32())
    s = pa.StructArray.from_arrays(
        [child, pa.array(["a", "b", None])],
        fields=list(STRICT_STRUCT),
        mask=pa.array([False, True, False]),
    )
    table = pa.table({"s": s})
    lance.write_dataset(table, str(tmp_path / "pylance"))
    lance_format.write_dataset(table, str(tmp_path / "ours"))
    expected = lance.dataset(str(tmp_path / "pylance")).to_table()
    assert lance.dataset(str(tmp_path / "ours")).to_table().equals(expected)
    assert expected.column("s").to_pylist() == [{"x": 1, "y": "a"}, None, {"x": 3, "y": None}]


def test_sliced_input_is_checked_in_its_range_only(tmp_path):
    """A null outside a sliced list's range is no part of the data written."""
    values = pa.array([None, 1, 2, 3], pa.int32())
    lists = pa.ListArray.from_arrays(pa.array([0, 1, 3, 4], pa.int32()), values)
    lists = lists.cast(NOT_NULL_ITEM, safe=False).slice(1)
    table = pa.table({"l": lists})
    uri = str(tmp_path / "ds")
    lance_format.write_dataset(table, uri)
    assert lance.dataset(uri).to_table().column("l").to_pylist() == [[1, 2], [3]]


def test_validation_error_names_the_column(tmp_path):
    bad = _case_struct_child()[1]
    with pytest.raises(InvalidDataError) as e:
        lance_format.write_dataset(bad, str(tmp_path / "ds"))
    assert e.value.column == "s.x" and isinstance(e.value, InvalidArgumentError)
    assert "s.x" in str(e.value) and "non-nullable" in str(e.value)


def test_large_valid_batches_pass(tmp_path):
    """Non-nullable nested fields with no nulls, in several batches, round-trip."""
    n = 20_000
    rng = np.random.default_rng(3)
    ids = pa.array(rng.integers(0, 1000, n), pa.int64())
    lists = pa.ListArray.from_arrays(
        pa.array(np.arange(0, 2 * n + 1, 2, dtype=np.int32)),
        pa.array(rng.integers(0, 9, 2 * n, dtype=np.int32)),
    ).cast(NOT_NULL_ITEM)
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("l", NOT_NULL_ITEM)])
    table = pa.table({"id": ids, "l": lists}, schema=schema)
    uri = str(tmp_path / "ds")
    lance_format.write_dataset(table.to_batches(max_chunksize=3000), uri, schema=schema)
    assert lance.dataset(uri).to_table().equals(table)


def test_values_arrow_judges_but_pylance_stores_are_written(tmp_path):
    """Arrow's full validation also judges values (date64 in whole days, times within a day,
    decimals within their precision); pylance stores those as they are, and so do we."""
    table = pa.table(
        {
            "d": pa.array([655036098680, 86_400_000], pa.int64()).view(pa.date64()),
            "t": pa.array([999_999, 5], pa.int32()).view(pa.time32("s")),
            "l": pa.array([[1, 90_000], None], pa.list_(pa.int32())).view(pa.list_(pa.time32("s"))),
            "n": pa.array([12345, 1], pa.decimal128(10, 0)).view(pa.decimal128(3, 0)),
        }
    )
    lance.write_dataset(table, str(tmp_path / "pylance"))
    expected = lance.dataset(str(tmp_path / "pylance")).to_table()
    lance_format.write_dataset(table, str(tmp_path / "ours"))
    got = lance.dataset(str(tmp_path / "ours")).to_table()
    assert got.equals(expected)
    assert got.column("d").cast(pa.int64()).to_pylist() == [655036098680, 86_400_000]


def _refused_before_writing(tmp_path, table: pa.Table, builtin, ours, match: str) -> str:
    """pylance raises ``builtin`` for ``table``; our dataset and file writers raise ``ours``
    (also a ``builtin``) before creating anything.  Returns the dataset path tried."""
    with pytest.raises(builtin):
        lance.write_dataset(table, str(tmp_path / "pylance"))
    uri = str(tmp_path / "ours")
    with pytest.raises(ours, match=match) as e:
        lance_format.write_dataset(table, uri)
    assert isinstance(e.value, builtin)
    assert not os.path.exists(uri)
    with pytest.raises(ours, match=match):
        lance_format.LanceFileWriter(str(tmp_path / "f.lance"), table.schema)
    assert not os.path.exists(tmp_path / "f.lance")
    # an overwrite of an existing dataset leaves every version as it was
    existing = str(tmp_path / "existing")
    first = pa.table({"k": [1, 2]})
    lance_format.write_dataset(first, existing)
    files = _data_files(existing)
    with pytest.raises(ours, match=match):
        lance_format.write_dataset(table, existing, mode="overwrite")
    _assert_unchanged(existing, {1: first}, files)
    return uri


@pytest.mark.parametrize(
    "typ",
    [
        pa.list_(pa.float32(), 0),
        pa.list_(pa.list_(pa.float32(), 0)),
        pa.list_(pa.list_(pa.int8(), 0), 2),
        pa.struct([pa.field("x", pa.list_(pa.float32(), 0))]),
        pa.map_(pa.string(), pa.list_(pa.int32(), 0)),
    ],
    ids=["flat", "in-list", "in-fsl", "in-struct", "in-map"],
)
def test_zero_width_fixed_size_lists_are_refused(tmp_path, typ):
    table = pa.table({"v": pa.nulls(2, typ)})
    uri = _refused_before_writing(tmp_path, table, OSError, InvalidDataError, "dimension 0")
    # nor can it be added to an existing dataset
    lance_format.write_dataset(pa.table({"a": [1, 2]}), uri)
    with pytest.raises(InvalidDataError):
        lance_format.dataset(uri).add_columns(pa.field("v", typ))
    assert lance.dataset(uri).version == 1 and lance.dataset(uri).schema.names == ["a"]


BAD_UTF8 = b"\xff\xfe"


@pytest.mark.parametrize(
    "schema",
    [
        pa.schema([pa.field("a", pa.int32(), metadata={b"k": BAD_UTF8})]),
        pa.schema([pa.field("a", pa.int32(), metadata={BAD_UTF8: b"v"})]),
        pa.schema([pa.field("a", pa.int32())], metadata={b"k": BAD_UTF8}),
        pa.schema(
            [pa.field("a", pa.struct([pa.field("x", pa.int32(), metadata={b"k": BAD_UTF8})]))]
        ),
        pa.schema(
            [pa.field("a", pa.list_(pa.field("item", pa.int32(), metadata={b"k": BAD_UTF8})))]
        ),
    ],
    ids=["field-value", "field-key", "schema", "struct-child", "list-item"],
)
def test_non_utf8_metadata_is_refused(tmp_path, schema):
    table = pa.table({"a": pa.nulls(2, schema.field("a").type)}, schema=schema)
    _refused_before_writing(tmp_path, table, ValueError, InvalidArgumentError, "not valid UTF-8")


def test_utf8_metadata_round_trips(tmp_path):
    schema = pa.schema([pa.field("a", pa.int32(), metadata={"clé": "värde"})], metadata={"ü": "ß"})
    table = pa.table({"a": pa.array([1], pa.int32())}, schema=schema)
    uri = str(tmp_path / "ours")
    lance_format.write_dataset(table, uri)
    got = lance.dataset(uri).schema
    assert got.field("a").metadata == {"clé".encode(): "värde".encode()}
    assert got.metadata == {"ü".encode(): "ß".encode()}


LOOSE_AND_STRICT = {
    "list": (pa.list_(pa.int32()), NOT_NULL_ITEM, [[1, 2], [3]]),
    "fixed-size-list": (
        pa.list_(pa.float32(), 2),
        pa.list_(pa.field("item", pa.float32(), nullable=False), 2),
        [[1.0, 2.0], [3.0, 4.0]],
    ),
    "struct": (
        pa.struct([pa.field("x", pa.int32())]),
        pa.struct([pa.field("x", pa.int32(), nullable=False)]),
        [{"x": 1}, {"x": 2}],
    ),
}


@pytest.mark.parametrize("case", LOOSE_AND_STRICT)
def test_nested_nullability_may_differ_as_in_pylance(tmp_path, case):
    """Data whose nested fields differ from the dataset's in nullability alone is written
    (cast to the dataset's types), as pylance does, in both directions and on create."""
    loose, strict, values = LOOSE_AND_STRICT[case]
    for first, then in ((loose, strict), (strict, loose)):
        results = []
        for name, module in (("pylance", lance), ("ours", lance_format)):
            uri = str(tmp_path / f"{name}-{first}")
            module.write_dataset(pa.table({"v": pa.array(values, first)}), uri)
            module.write_dataset(pa.table({"v": pa.array(values, then)}), uri, mode="append")
            results.append(lance.dataset(uri).to_table())
        assert results[1].equals(results[0])
        assert results[1].num_rows == 2 * len(values)


def test_nulls_for_a_strict_nested_field_are_refused_after_the_cast(tmp_path):
    loose, strict, _ = LOOSE_AND_STRICT["list"]
    uri = str(tmp_path / "ds")
    good = pa.table({"v": pa.array([[1], [2, 3]], strict)})
    lance_format.write_dataset(good, uri)
    files = _data_files(uri)
    bad = pa.table({"v": pa.array([[4, None]], loose)})
    lance.write_dataset(good, str(tmp_path / "copy"))
    with pytest.raises(OSError):  # pylance refuses the append too
        lance.write_dataset(bad, str(tmp_path / "copy"), mode="append")
    with pytest.raises(InvalidDataError) as e:
        lance_format.write_dataset(bad, uri, mode="append")
    assert isinstance(e.value, OSError)
    _assert_unchanged(uri, {1: good}, files)


def test_view_types_are_stored_as_plain_types_as_in_pylance(tmp_path):
    table = pa.table(
        {
            "s": pa.array(["a", None, "ccc"], pa.string_view()),
            "b": pa.array([b"x", b"", None], pa.binary_view()),
        }
    )
    results = []
    for name, module in (("pylance", lance), ("ours", lance_format)):
        uri = str(tmp_path / name)
        module.write_dataset(table, uri)
        module.write_dataset(table, uri, mode="append")
        results.append(lance.dataset(uri).to_table())
    assert results[1].equals(results[0])
    assert results[1].schema.types == [pa.string(), pa.binary()]
    assert results[1].column("s").to_pylist() == ["a", None, "ccc"] * 2


def _bad_utf8_strings(n: int) -> pa.Array:
    """``n`` one-byte strings, the last of which is not UTF-8."""
    data = b"a" * (n - 1) + b"\xff"
    offsets = pa.array(np.arange(n + 1, dtype=np.int32)).buffers()[1]
    return pa.Array.from_buffers(pa.string(), n, [None, offsets, pa.py_buffer(data)])


def test_a_batch_is_validated_once_on_its_way_through_the_layers(monkeypatch):
    """A Flight stream's reader, the ingest and the file writer each check the same batch;
    Arrow's full validation runs once while the batch lives, slices included."""
    from lance_format import validation

    runs: list[pa.DataType] = []
    layout = validation._layout_type
    monkeypatch.setattr(validation, "_layout_type", lambda t: runs.append(t) or layout(t))
    validation.forget_checked()
    batch = pa.record_batch({"a": pa.array(np.arange(100)), "s": [f"v{i}" for i in range(100)]})
    validation.check_arrays(batch)
    validation.check_arrays(batch)
    validation.check_arrays(batch.slice(10, 50))
    assert len(runs) == 2  # one validation of the two columns
    # the same values in other buffers are another batch
    validation.check_arrays(pa.record_batch({"s": pa.array(batch.column(1).to_pylist())}))
    assert len(runs) == 3


def test_what_was_not_validated_is_validated_however_it_shares_buffers():
    """Only the validated range of the same live buffers counts: the whole of a batch whose
    slice passed, a dictionary over other values, and a new write are checked afresh."""
    from lance_format import validation

    validation.forget_checked()
    strings = _bad_utf8_strings(10)
    ok = pa.record_batch({"s": strings.slice(0, 9)})
    validation.check_arrays(ok)
    with pytest.raises(InvalidDataError):
        validation.check_arrays(pa.record_batch({"s": strings}))

    indices = pa.array([0, 1, 2], pa.int8())
    good = pa.DictionaryArray.from_arrays(indices, pa.array(["x", "y", "z"]))
    validation.check_arrays(pa.record_batch({"d": good}))
    short = pa.DictionaryArray.from_arrays(indices, pa.array(["x"]), safe=False)
    with pytest.raises(InvalidDataError):
        validation.check_arrays(pa.record_batch({"d": short}))


@pytest.mark.parametrize("first", ["nullable", "required"])
def test_batch_checks_follow_each_schemas_nullability(first: str) -> None:
    """What a batch's check needs of its schema is kept per schema; two schemas equal but
    for nullability (nested too) are told apart whichever is checked first."""
    from lance_format.validation import check_batch, forget_checked

    def schema(required: bool) -> pa.Schema:
        inner = pa.field("x", pa.int64(), nullable=not required)
        return pa.schema(
            [pa.field("a", pa.int64(), nullable=not required), pa.field("s", pa.struct([inner]))]
        )

    def batch(required: bool) -> pa.RecordBatch:
        s = schema(required)
        a = pa.array([1, 2] if required else [1, None], pa.int64())  # nested nulls only
        st = pa.StructArray.from_arrays(
            [pa.array([None, 2], pa.int64())], fields=[s.field("s").type.field(0)]
        )
        return pa.record_batch([a, st], schema=s)

    order = [False, True] if first == "nullable" else [True, False]
    for required in order * 2:
        forget_checked()
        if required:
            with pytest.raises(InvalidDataError, match="non-nullable"):
                check_batch(batch(True), [False, False])
        else:
            check_batch(batch(False), [False, False])
            with pytest.raises(InvalidDataError, match="non-nullable"):
                check_batch(batch(False), [True, False])  # the dataset's own nullability
