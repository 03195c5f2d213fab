"""Legacy (v1, "0.1") files and datasets, written by pylance, read through the v2 API.

The truth is pylance itself: ``lance.file.LanceFileReader`` refuses v1 files, so a data file
is checked against pylance's read of its fragment (``Fragment.to_table`` of a version without
deletions), and datasets against ``lance.dataset(uri)`` at every version.  pylance's v1
quirks are part of that truth: plain-encoded nulls read back as values, an empty string in
a nullable column reads as null, null lists as empty lists, struct validity is dropped.
"""

from __future__ import annotations

import glob
import math
import os
import shutil
import struct

import fixtures as fx
import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lance_format as lf
from lance_format.errors import LanceError, UnsupportedError
from lance_format.legacy import pages_that_may_match, rows_that_may_match
from lance_format.legacy.container import read_legacy_metadata
from lance_format.legacy.statistics import read_statistics

ROWS_PER_GROUP = 128
ROWS_PER_FILE = 700


# --------------------------------------------------------------------------------------------
# Fixtures
# --------------------------------------------------------------------------------------------


def _with_empty_strings(make, every: int = 9):
    """Strings where every ``every``-th row is "" (which v1 reads back as null)."""

    def mk(n, rng):
        arr = make(n, rng)
        m = pa.array(np.arange(n) % every == 0)
        return pc.if_else(m, pa.scalar("", arr.type), arr)

    return mk


def _with_nans(make):
    def mk(n, rng):
        arr = make(n, rng).to_numpy(zero_copy_only=False).copy()
        arr[5::31] = np.nan
        return pa.array(arr, mask=np.isnan(arr) & (np.arange(n) % 2 == 0))

    return mk


_I32 = fx.ints("int32", lo=-1000, hi=1000)
# (name, builder): every type pylance 14 writes in a v1 file
COLUMNS = [
    ("seq", fx.sequence()),
    ("i8", fx.ints("int8", p_null=0.1)),
    ("i16", fx.ints("int16")),
    ("i32", fx.ints("int32", p_null=0.2, lo=-1000, hi=1000)),
    ("i64", fx.ints("int64")),
    ("u8", fx.ints("uint8")),
    ("u16", fx.ints("uint16", p_null=0.1)),
    ("u32", fx.ints("uint32")),
    ("u64", fx.ints("uint64")),
    ("f16", fx.floats("float16")),
    ("f32", _with_nans(fx.floats("float32"))),
    ("f64", fx.floats("float64", p_null=0.1)),
    ("bool", fx.bools(p_null=0.1)),
    ("date32", fx.typed_ints(pa.date32(), 0, 20000, p_null=0.1, np_dtype="int32")),
    ("date64", fx.typed_ints(pa.date64(), 0, 10**12)),
    ("ts_us_utc", fx.typed_ints(pa.timestamp("us", "UTC"), 0, 10**15, p_null=0.1)),
    ("ts_ns", fx.typed_ints(pa.timestamp("ns"), 0, 10**18)),
    ("time32", fx.typed_ints(pa.time32("ms"), 0, 86_399_999, np_dtype="int32")),
    ("time64", fx.typed_ints(pa.time64("us"), 0, 86_399_999_999)),
    ("dur", fx.typed_ints(pa.duration("s"), -(10**9), 10**9)),
    ("dec128", fx.decimals(pa.decimal128(20, 3))),
    ("dec256", fx.decimals(pa.decimal256(45, 5))),
    ("fsb", fx.fixed_binary(5, p_null=0.1)),
    ("str", _with_empty_strings(fx.var_strings(0, 12, p_null=0.1))),
    ("str_notnull", fx.var_strings(0, 6)),
    ("long_str", fx.var_strings(60, 90, p_null=0.05)),
    ("large_str", fx.var_strings(0, 8, p_null=0.1, typ=pa.large_string())),
    ("bin", fx.var_strings(1, 10, p_null=0.1, typ=pa.binary(), alphabet="bytes")),
    ("large_bin", fx.var_strings(0, 10, typ=pa.large_binary(), alphabet="bytes")),
    ("dict_str", fx.dictionary(pa.int32(), pa.array(["red", "green", "blue"]))),
    ("dict_i8", fx.dictionary(pa.int8(), pa.array(["x", "yy", "zzz"]), p_null=0.0)),
    ("dict_u16_int", fx.dictionary(pa.uint16(), pa.array([10, -3, 99], pa.int64()))),
    ("vec", fx.fsl_of(fx.floats("float32"), 8, p_null=0.1)),
    ("vec_bool", fx.fsl_of(fx.bools(), 3)),
    ("vec_vec", fx.fsl_of(fx.fsl_of(_I32, 2), 3)),
    ("vec_fsb", fx.fsl_of(fx.fixed_binary(2), 2)),
    ("lst", fx.list_of(fx.ints("int32", p_null=0.1, lo=0, hi=50))),
    ("lst_garbage", fx.list_of(_I32, garbage_under_nulls=True)),
    ("large_lst", fx.list_of(fx.ints("int64"), large=True)),
    ("lst_str", fx.list_of(_with_empty_strings(fx.var_strings(0, 5, p_null=0.1)))),
    ("lst_lst", fx.list_of(fx.list_of(_I32, max_len=3))),
    ("lst_vec", fx.list_of(fx.fsl_of(fx.floats("float32"), 2))),
    ("lst_struct", fx.list_of(fx.struct_of(a=_I32, b=fx.var_strings(1, 4, p_null=0.2)))),
    (
        "st",
        fx.struct_of(
            p_null=0.1,
            x=fx.ints("int16", p_null=0.2),
            s=fx.var_strings(1, 6, p_null=0.1),
            inner=fx.struct_of(d=fx.floats("float64"), l=fx.list_of(_I32)),
        ),
    ),
    ("nulls", fx.all_null(pa.null())),
    ("uuid", lambda n, rng: pa.ExtensionArray.from_storage(pa.uuid(), fx.fixed_binary(16)(n, rng))),
    ("str_view", lambda n, rng: fx.var_strings(0, 5)(n, rng).cast(pa.string_view())),
]

# What pylance 14 refuses to write in a v1 file: name -> (values, error message).  Kept
# honest by test_pylance_refusals; every other type of COLUMNS is written and read.
REFUSED = {
    "map": (fx.map_of(fx.var_strings(1, 3), _I32), "unsupported data type: Map"),
    "fsl_of_struct": (fx.fsl_of(fx.struct_of(a=_I32), 2), "Expecting fixed stride data type"),
    "fsl_of_string": (fx.fsl_of(fx.var_strings(1, 3), 2), "Expecting fixed stride data type"),
    "fsl_of_dictionary": (
        lambda n, rng: pa.FixedSizeListArray.from_arrays(
            pa.array(["a", "b"] * n).dictionary_encode(), 2
        ),
        "Expecting fixed stride data type",
    ),
    "empty_struct": (lambda n, rng: pa.array([{}] * n, pa.struct([])), "empty page table"),
    "interval": (
        lambda n, rng: pa.array([(1, 2, 3)] * n, pa.month_day_nano_interval()),
        "Unsupported data type: Interval",
    ),
    "decimal64": (
        lambda n, rng: pa.array([1] * n, pa.decimal64(12, 2)),
        "Unsupported data type: Decimal64",
    ),
    "list_view": (
        lambda n, rng: pa.array([[1]] * n, pa.list_view(pa.int32())),
        "Unsupported data type: ListView",
    ),
    "run_end_encoded": (
        lambda n, rng: pa.RunEndEncodedArray.from_arrays(pa.array([n], pa.int32()), [1]),
        "Unsupported data type: RunEndEncoded",
    ),
}


def _table(n: int, salt: str) -> pa.Table:
    arrays = {name: make(n, fx.rng_for("legacy", salt, name)) for name, make in COLUMNS}
    arrays["seq"] = pa.array(np.arange(n, dtype=np.int64) + (0 if salt == "a" else 10**6))
    not_null = ("seq", "str_notnull", "vec_vec")  # "" in a non-nullable column stays ""
    fields = [pa.field(k, v.type, k not in not_null) for k, v in arrays.items()]
    return pa.table(arrays, schema=pa.schema(fields))


class LegacyDataset:
    """A v1 dataset with history: v1 create (3 files), v2 append, v3 and v4 deletes."""

    def __init__(self, root: str):
        self.uri = os.path.join(root, "legacy_ds")
        shutil.rmtree(self.uri, ignore_errors=True)
        self.source = _table(1800, "a")
        lance.write_dataset(
            self.source,
            self.uri,
            data_storage_version="legacy",
            max_rows_per_group=ROWS_PER_GROUP,
            max_rows_per_file=ROWS_PER_FILE,
        )
        self.appended = _table(300, "b")
        lance.write_dataset(self.appended, self.uri, mode="append", max_rows_per_group=100)
        ds = lance.dataset(self.uri)
        ds.delete("i32 > 900 OR seq = 5")
        ds = lance.dataset(self.uri)
        ds.delete("seq >= 700 AND seq < 1400")  # the whole second file
        self.versions = [v["version"] for v in lance.dataset(self.uri).versions()]

    def files(self, version: int = 2) -> list[tuple[str, lance.fragment.LanceFragment]]:
        ds = lance.dataset(self.uri, version=version)
        out = []
        for frag in ds.get_fragments():
            (df,) = frag.metadata.files
            out.append((os.path.join(self.uri, "data", df.path), frag))
        return out


@pytest.fixture(scope="module")
def legacy(tmp_path_factory) -> LegacyDataset:
    return LegacyDataset(str(tmp_path_factory.mktemp("legacy")))


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def _canon(v):
    """Python values with NaN made comparable (Table.equals says NaN != NaN)."""
    if isinstance(v, float) and math.isnan(v):
        return "NaN"
    if isinstance(v, list):
        return [_canon(x) for x in v]
    if isinstance(v, dict):
        return {k: _canon(x) for k, x in v.items()}
    return v


def assert_same(ours: pa.Table, theirs: pa.Table) -> None:
    assert ours.schema.names == theirs.schema.names
    assert ours.num_rows == theirs.num_rows
    for name in ours.column_names:
        a, b = ours.column(name), theirs.column(name)
        assert a.type == b.type, (name, a.type, b.type)
        if not a.equals(b):
            assert _canon(a.to_pylist()) == _canon(b.to_pylist()), name


# --------------------------------------------------------------------------------------------
# Data files
# --------------------------------------------------------------------------------------------


def test_fixture_is_legacy_with_many_row_groups(legacy) -> None:
    """The fixture exercises what it claims: v1 footers, several files and row groups."""
    files = legacy.files()
    assert len(files) == 4
    for path, frag in files:
        (df,) = frag.metadata.files
        assert (df.file_major_version, df.file_minor_version) == (0, 2)
        with open(path, "rb") as fh:
            assert fh.read()[-8:] == b"\x00\x00\x02\x00LANC"
        meta = read_legacy_metadata(lf.io.open_file(path))
        assert meta.num_batches >= 3
        assert meta.num_rows == frag.physical_rows


def test_file_reads_equal_pylance(legacy) -> None:
    for path, frag in legacy.files():
        with lf.LanceFileReader(path) as r:
            assert r.version == "0.1" == lance.dataset(legacy.uri).data_storage_version
            assert r.num_rows == frag.physical_rows
            assert r.schema == frag.schema
            assert_same(r.read(), frag.to_table())


def test_v1_read_semantics_match_pylance(legacy) -> None:
    """The v1 quirks, stated against the values written (pylance reads them the same way,
    as the test above shows): no nulls in plain columns, "" as null, struct validity gone."""
    path, _ = legacy.files()[0]
    got = lf.LanceFileReader(path).read_range(0, 600)
    src = legacy.source.slice(0, 600)
    for name in ("i32", "bool", "dec128", "vec"):
        assert got.column(name).null_count == 0 < src.column(name).null_count
    s_src = src.column("str")
    assert got.column("str").to_pylist() == [None if v == "" else v for v in s_src.to_pylist()]
    assert got.column("st").null_count == 0
    assert pc.all(pc.equal(got.column("bool"), src.column("bool").fill_null(False))).as_py()
    assert got.column("nulls").null_count == 600


def test_takes_and_ranges_equal_slices_of_the_full_read(legacy) -> None:
    rng = np.random.default_rng(8)
    for path, _ in legacy.files():
        with lf.LanceFileReader(path) as r:
            full = r.read()
            n = r.num_rows
            for _ in range(6):
                idx = rng.integers(0, n, int(rng.integers(1, 40)))
                assert_same(r.take(idx), full.take(pa.array(idx)))
            dense = np.sort(rng.choice(n, n // 2, replace=False))
            assert_same(r.take(dense), full.take(pa.array(dense)))
            for start, stop in [(0, 1), (ROWS_PER_GROUP - 3, ROWS_PER_GROUP + 5), (5, n), (n, n)]:
                assert_same(r.read_range(start, stop), full.slice(start, stop - start))
            cols = ["lst_struct", "st", "dict_str", "seq"]
            assert_same(r.read_range(3, n - 2, cols), full.select(cols).slice(3, n - 5))
            batches = list(r.read_batches(["str", "lst"], batch_size=97))
            assert max(b.num_rows for b in batches) == 97
            assert_same(pa.Table.from_batches(batches), full.select(["str", "lst"]))


def test_nested_projection(legacy) -> None:
    path, frag = legacy.files()[0]
    ours = lf.LanceFileReader(path).read(["st.inner.l", "st.x"])
    theirs = frag.to_table(columns=["st"]).column("st")
    assert ours.column_names == ["st"]
    st = ours.column("st").combine_chunks()
    assert st.type.names == ["x", "inner"]
    full = theirs.combine_chunks()
    assert st.field("x").equals(full.field("x"))
    assert st.field("inner").field("l").equals(full.field("inner").field("l"))


def test_random_access_uses_the_search_cache(legacy) -> None:
    path, _ = legacy.files()[1]
    full = lf.LanceFileReader(path).read(["str", "lst_str", "dict_str"])
    cache = lf.SearchCache()
    r = lf.LanceFileReader(path, cache=cache)
    r.warm(["str", "lst_str", "dict_str"])
    warmed = cache.stats()
    assert warmed["entries"] > 0
    r.io_stats.reset()
    got = r.take([ROWS_PER_GROUP + 7], ["str"])
    assert got.column("str").to_pylist() == full.column("str").to_pylist()[ROWS_PER_GROUP + 7 :][:1]
    assert r.io_stats.requests <= 1  # positions come from the cache: only the value is read
    idx = [3, 400, 2, 650]
    assert_same(r.take(idx, ["str", "lst_str", "dict_str"]), full.take(pa.array(idx)))
    assert cache.stats()["misses"] == warmed["misses"]  # nothing new to load after warm()
    # without a cache a take reads the row's positions, then its bytes
    cold = lf.LanceFileReader(path)
    cold.io_stats.reset()
    cold.take([ROWS_PER_GROUP + 7], ["str"])
    assert cold.io_stats.requests == 2


def test_page_boundaries_are_the_row_groups(legacy) -> None:
    path, _ = legacy.files()[0]
    r = lf.LanceFileReader(path)
    meta = read_legacy_metadata(lf.io.open_file(path))
    assert r.page_boundaries().tolist() == meta.batch_offsets.tolist()
    assert r.page_boundaries().tolist() == list(range(0, r.num_rows, ROWS_PER_GROUP)) + [r.num_rows]
    starts = r.metadata.columns[0].page_starts()
    assert starts.tolist() == meta.batch_offsets.tolist()


# --------------------------------------------------------------------------------------------
# Page statistics
# --------------------------------------------------------------------------------------------


def test_statistics_equal_the_written_values(legacy) -> None:
    """null_count/min/max per row group, checked against the source table (where a v1 read
    differs from what was written, the statistics follow what was written)."""
    path, _ = legacy.files()[0]
    f = lf.io.open_file(path)
    meta = read_legacy_metadata(f)
    stats = read_statistics(f, meta, path)
    ids = {fld.name: fld.id for fld in meta.schema.fields}
    assert str(ids["vec"]) not in stats.column_names  # no statistics for lists / vectors
    assert str(ids["dict_str"]) not in stats.column_names
    for name in ("i32", "u16", "date32", "f64", "str", "dec128"):
        col = stats.column(str(ids[name])).combine_chunks()
        for b in range(meta.num_batches):
            lo, hi = meta.batch_offsets[b], meta.batch_offsets[b + 1]
            part = legacy.source.column(name).slice(lo, hi - lo)
            assert col.field("null_count")[b].as_py() == part.null_count
            mm = pc.min_max(part)
            want_min, want_max = mm["min"].as_py(), mm["max"].as_py()
            if name == "str":  # "" reads back as null from the stats page too
                want_min = want_min or None
            assert col.field("min_value")[b].as_py() == want_min, (name, b)
            assert col.field("max_value")[b].as_py() == want_max, (name, b)


FILTERS = [
    ("seq", "<", 100),
    ("seq", ">=", 650),
    ("seq", "=", 300),
    ("seq", "!=", 300),
    ("seq", "in", [3, 500]),
    ("i32", ">", 990),
    ("i64", "<", 0),
    ("f64", "<", -2000.0),
    ("f32", ">", 0.5),
    ("str", "=", "abc"),
    ("str", ">", "x"),
    ("str", "is_null", None),
    ("str", "is_not_null", None),
    ("str_notnull", "<", "b"),
    ("bool", "=", True),
    ("date32", "<=", 100),
    ("dec128", ">", 0),
    ("i32", "is_null", None),
    ("st.x", "<", -30000),
    ("lst", "is_null", None),
]


def _truth(table: pa.Table, name: str, op: str, value) -> np.ndarray:
    """Which rows of a (read) table match, computed with pyarrow on the values as read."""
    col = table.column(name.split(".")[0])
    if "." in name:
        col = pc.struct_field(col, name.split(".")[1])
    if op == "is_null":
        return pc.is_null(col).to_numpy(zero_copy_only=False)
    if op == "is_not_null":
        return pc.is_valid(col).to_numpy(zero_copy_only=False)
    if op == "in":
        return pc.is_in(col, pa.array(value, col.type)).to_numpy(zero_copy_only=False)
    if pa.types.is_floating(col.type) and op in (">", ">=", "!="):  # NaN sorts above all
        base = {">": pc.greater, ">=": pc.greater_equal, "!=": pc.not_equal}[op](col, value)
        return pc.fill_null(pc.or_(base, pc.is_nan(col)), False).to_numpy(zero_copy_only=False)
    fn = {
        "<": pc.less,
        "<=": pc.less_equal,
        ">": pc.greater,
        ">=": pc.greater_equal,
        "=": pc.equal,
        "!=": pc.not_equal,
    }[op]
    return pc.fill_null(fn(col, pa.scalar(value, col.type)), False).to_numpy(zero_copy_only=False)


@pytest.mark.parametrize("name,op,value", FILTERS, ids=[f"{n}{o}{v}" for n, o, v in FILTERS])
def test_pruning_keeps_every_matching_row(legacy, name, op, value) -> None:
    for path, _ in legacy.files():
        r = lf.LanceFileReader(path)
        ranges = pages_that_may_match(r, name, op, value)
        kept = np.zeros(r.num_rows, dtype=bool)
        for s, e in ranges.tolist():
            kept[s:e] = True
        match = _truth(r.read(), name, op, value)
        assert not (match & ~kept).any(), (path, ranges)


def test_pruning_prunes(legacy) -> None:
    path, _ = legacy.files()[0]
    r = lf.LanceFileReader(path)
    assert pages_that_may_match(r, "seq", "<", 100).tolist() == [[0, ROWS_PER_GROUP]]
    assert pages_that_may_match(r, "seq", "=", 300).tolist() == [[256, 384]]
    assert pages_that_may_match(r, "seq", "in", [3, 10**8]).tolist() == [[0, 128]]
    assert pages_that_may_match(r, "seq", ">", 10**9).tolist() == []
    assert pages_that_may_match(r, "i32", "is_null", None).tolist() == []  # read as values
    everything = [[0, r.num_rows]]
    assert pages_that_may_match(r, "f32", ">", 1e30).tolist() == everything  # NaN may be there
    assert pages_that_may_match(r, "vec", "=", 1).tolist() == everything  # no statistics
    both = rows_that_may_match(r, [("seq", ">=", 200), ("seq", "<", 300)])
    assert both.tolist() == [[128, 384]]
    assert rows_that_may_match(r, [("seq", "<", 10), ("seq", ">", 500)]).tolist() == []
    with pytest.raises(lf.InvalidArgumentError):
        pages_that_may_match(r, "seq", "~", 1)
    with pytest.raises(lf.InvalidArgumentError):
        pages_that_may_match(r, "nope", "=", 1)


def test_string_pruning_follows_what_a_read_returns(tmp_path) -> None:
    """Row groups of 4: all null | all "" (read as null) | a..d | long values over 64 bytes
    (truncated, rounded-up bounds) | non-nullable column for comparison."""
    long = ["q" * 70 + "a", "q" * 70 + "b", "r" * 80, "s" * 65]
    s = [None] * 4 + [""] * 4 + ["a", "b", "c", "d"] + long
    schema = pa.schema([pa.field("s", pa.string()), pa.field("k", pa.string(), False)])
    t = pa.table({"s": s, "k": ["x"] * 4 + [""] * 4 + s[8:]}, schema=schema)
    uri = str(tmp_path / "strs")
    lance.write_dataset(t, uri, data_storage_version="legacy", max_rows_per_group=4)
    (path,) = glob.glob(os.path.join(uri, "data", "*.lance"))
    r = lf.LanceFileReader(path)
    assert r.read().column("s").to_pylist() == [None] * 8 + s[8:]
    assert r.read().column("k").to_pylist() == t.column("k").to_pylist()

    def groups(field, op, value=None):
        return [[a // 4, b // 4] for a, b in pages_that_may_match(r, field, op, value).tolist()]

    assert groups("s", "is_null") == [[0, 2]]
    assert groups("s", "is_not_null") == [[1, 4]]  # group 1 kept: "" or unknown max
    assert groups("s", "=", "c") == [[1, 3]]
    assert groups("s", ">", "q") == [[1, 2], [3, 4]]
    assert groups("s", "=", "q" * 70 + "b") == [[1, 2], [3, 4]]
    assert groups("s", "<", "a") == [[1, 2]]
    assert groups("k", "is_null") == []  # not nullable: "" stays ""
    assert groups("k", "=", "") == [[1, 2]]
    assert groups("k", "<", "b") == [[1, 3]]


def test_pruning_on_v2_files_keeps_everything(tmp_path) -> None:
    path = str(tmp_path / "v2.lance")
    fx.write_table(path, pa.table({"a": pa.array(range(10))}), "2.1")
    r = lf.LanceFileReader(path)
    assert pages_that_may_match(r, "a", "<", 0).tolist() == [[0, 10]]


# --------------------------------------------------------------------------------------------
# Datasets
# --------------------------------------------------------------------------------------------


def test_dataset_reads_equal_pylance_at_every_version(legacy) -> None:
    assert len(legacy.versions) == 4
    for v in legacy.versions:
        ours, theirs = lf.dataset(legacy.uri, version=v), lance.dataset(legacy.uri, version=v)
        assert ours.data_storage_version == theirs.data_storage_version == "0.1"
        assert ours.count_rows() == theirs.count_rows()
        assert_same(ours.to_table(), theirs.to_table())


DATASET_FILTERS = [
    "i32 > 500",
    "str = 'abc' OR str IS NULL",
    "seq BETWEEN 600 AND 1500",
    "bool AND f64 < 0",
    "dict_str = 'red'",
    "st.x < 0",
    "i32 IS NULL",
]


@pytest.mark.parametrize("flt", DATASET_FILTERS)
def test_dataset_filtered_scans_equal_pylance(legacy, flt) -> None:
    cols = ["seq", "i32", "str", "lst", "st"]
    for v in (2, legacy.versions[-1]):
        ours = lf.dataset(legacy.uri, version=v).to_table(columns=cols, filter=flt)
        theirs = lance.dataset(legacy.uri, version=v).to_table(columns=cols, filter=flt)
        assert_same(ours, theirs)


def test_dataset_take_equals_pylance(legacy) -> None:
    ours, theirs = lf.dataset(legacy.uri), lance.dataset(legacy.uri)
    idx = [0, 5, 699, 700, 1099, 3, 750]
    # pylance panics taking a fixed-size list of booleans from a v1 file ("Expecting fixed
    # stride data type"); ours is checked against slices of the full read above
    cols = [c for c in ours.schema.names if c != "vec_bool"]
    assert_same(ours.take(idx, columns=cols), theirs.take(idx, columns=cols))
    assert_same(
        ours.take(idx, columns=["vec_bool"]), ours.to_table().take(idx).select(["vec_bool"])
    )


def test_schema_evolution_by_pylance(tmp_path) -> None:
    """Columns added (a v1 file of their own, ids after the others) and dropped (a struct
    member too) by pylance read as pylance reads them."""
    uri = str(tmp_path / "evolve")
    t = _table(260, "a").select(["seq", "i32", "str", "st", "lst"])
    lance.write_dataset(t, uri, data_storage_version="legacy", max_rows_per_group=64)
    ds = lance.dataset(uri)
    ds.add_columns({"twice": "seq * 2", "tag": "concat(str, '!')"})
    ds = lance.dataset(uri)
    (frag,) = ds.get_fragments()
    assert len(frag.metadata.files) == 2 and frag.metadata.files[1].fields[0] > 0
    assert_same(lf.dataset(uri).to_table(), ds.to_table())
    ds.drop_columns(["i32", "st.x"])
    ds = lance.dataset(uri)
    assert_same(lf.dataset(uri).to_table(), ds.to_table())
    flt = "twice > 100 AND st.s IS NOT NULL"
    assert_same(lf.dataset(uri).to_table(filter=flt), ds.to_table(filter=flt))
    for v in (1, 2):
        assert_same(lf.dataset(uri, version=v).to_table(), lance.dataset(uri, version=v).to_table())


@pytest.mark.parametrize(
    "values",
    [
        pa.array(["", "a", "b"]),
        pa.array([None, "a", "b"]),
        pa.array([5, None, 7], pa.int32()),
        pa.array([b"", b"\x00\xff"], pa.large_binary()),
    ],
    ids=["empty-string", "null-string", "int-with-null", "large-binary"],
)
def test_dictionary_values_read_as_pylance_reads_them(tmp_path, values) -> None:
    """Dictionary values are stored without validity: an empty or null string value reads
    as null, a null integer as the stored value (pylance after reopening the dataset; the
    Dataset object ``write_dataset`` returns still holds the original values in memory)."""
    uri = str(tmp_path / "dict")
    keys = pa.array([0, 1, 2, 0, None, 1][: len(values) + 3], pa.int16())
    keys = pc.if_else(pc.less(keys, len(values)), keys, pa.scalar(0, pa.int16()))
    t = pa.table({"d": pa.DictionaryArray.from_arrays(keys, values)})
    lance.write_dataset(t, uri, data_storage_version="legacy")
    (frag,) = lance.dataset(uri).get_fragments()
    (path,) = glob.glob(os.path.join(uri, "data", "*.lance"))
    assert_same(lf.LanceFileReader(path).read(), frag.to_table())
    assert_same(lf.dataset(uri).to_table(), lance.dataset(uri).to_table())


def test_delete_through_our_dataset_layer_stays_readable_by_pylance(legacy, tmp_path) -> None:
    uri = str(tmp_path / "del")
    t = _table(300, "a").select(["seq", "i32", "str", "lst"])
    lance.write_dataset(t, uri, data_storage_version="legacy", max_rows_per_group=50)
    lf.dataset(uri).delete("seq % 3 = 0")
    theirs = lance.dataset(uri)
    assert theirs.count_rows() == 200 and theirs.data_storage_version == "0.1"
    assert_same(lf.dataset(uri).to_table(), theirs.to_table())


def test_appending_to_a_legacy_dataset_with_dictionaries_is_refused(legacy, tmp_path) -> None:
    """pylance keeps the dictionaries of a legacy dataset in its manifest file, which our
    manifests do not carry over (appends to legacy datasets without dictionary columns
    are tested in test_legacy_writer.py)."""
    uri = str(tmp_path / "copy")
    shutil.copytree(legacy.uri, uri)
    assert any(pa.types.is_dictionary(f.type) for f in lance.dataset(uri).schema)
    with pytest.raises(UnsupportedError, match="dict"):
        lf.write_dataset(legacy.appended, uri, mode="append")
    assert lance.dataset(uri).version == legacy.versions[-1]


# --------------------------------------------------------------------------------------------
# What pylance refuses, and corrupt files
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_pylance_refusals(tmp_path, name) -> None:
    make, message = REFUSED[name]
    table = pa.table({name: make(10, fx.rng_for("legacy-refused", name))})
    with pytest.raises(BaseException, match=message):  # pylance panics for some
        lance.write_dataset(table, str(tmp_path / name), data_storage_version="legacy")


def test_pylance_file_reader_refuses_v1(legacy) -> None:
    """Why data files are compared with pylance's fragment reads, not its file reader."""
    path, _ = legacy.files()[0]
    with pytest.raises(OSError, match="v1"):
        lance.file.LanceFileReader(path).read_all()


def test_float_dictionary_is_written_but_unreadable_in_both(tmp_path) -> None:
    """pylance writes a float-valued dictionary to v1 but cannot read it back; neither can
    we (upstream loads integer and binary dictionary values only)."""
    uri = str(tmp_path / "dict_float")
    d = pa.DictionaryArray.from_arrays(pa.array([0, 1, 0], pa.int32()), pa.array([1.5, 2.5]))
    lance.write_dataset(pa.table({"d": d}), uri, data_storage_version="legacy")
    with pytest.raises(ValueError, match="v1 dictionary values do not support"):
        lance.dataset(uri).to_table()
    (path,) = glob.glob(os.path.join(uri, "data", "*.lance"))
    with pytest.raises(UnsupportedError, match="dictionary values of type double"):
        lf.LanceFileReader(path).read()


def _small_legacy_file(root: str) -> str:
    uri = os.path.join(root, "small")
    names = ["seq", "i32", "bool", "str", "dict_str", "vec", "lst_str", "st", "nulls", "dec128"]
    t = _table(300, "a").select(names)
    lance.write_dataset(t, uri, data_storage_version="legacy", max_rows_per_group=64)
    (path,) = glob.glob(os.path.join(uri, "data", "*.lance"))
    return path


def _exercise(path: str) -> None:
    r = lf.LanceFileReader(path, cache=lf.SearchCache())
    r.read()
    r.take([0, r.num_rows // 2, max(r.num_rows - 1, 0)] if r.num_rows else [])
    r.read_range(r.num_rows // 3, r.num_rows)
    r.warm()
    pages_that_may_match(r, "seq", "<", 10)
    pages_that_may_match(r, "str", "is_null", None)


def test_corrupt_files_raise_lance_errors_only(tmp_path) -> None:
    path = _small_legacy_file(str(tmp_path))
    _exercise(path)  # the intact file reads
    data = open(path, "rb").read()
    tail_start = len(data) - 1200  # the metadata, schema, page tables and statistics
    rng = np.random.default_rng(20240)
    cases: list[bytes] = []
    for _ in range(120):  # byte flips, mostly in the metadata tail
        d = bytearray(data)
        lo = tail_start if rng.random() < 0.8 else 0
        for pos in rng.integers(lo, len(d), int(rng.integers(1, 4))):
            d[pos] ^= int(rng.integers(1, 256))
        cases.append(bytes(d))
    for cut in np.linspace(0, len(data) - 1, 40).astype(int):  # truncation
        cases.append(data[:cut] + data[-16:] if cut > 16 else data[:cut])
    for value in (0, 1, 2**31, 2**62, len(data), -1):  # hostile metadata position
        d = bytearray(data)
        struct.pack_into("<q", d, len(d) - 16, value)
        cases.append(bytes(d))
    outcomes = {"ok": 0, "error": 0}
    for i, case in enumerate(cases):
        p = tmp_path / f"case{i}.lance"
        p.write_bytes(case)
        try:
            _exercise(str(p))
            outcomes["ok"] += 1
        except LanceError:
            outcomes["error"] += 1
    assert outcomes["error"] > 50, outcomes


def test_dataset_scan_skips_pages_statistics_rule_out(legacy) -> None:
    """A filtered scan reads only the row groups whose statistics may match: the same
    predicate written so statistics cannot judge it reads more, and both equal pylance."""

    from lance_format.table.filters import conjunct_terms

    def scan(flt: str) -> tuple[pa.Table, int]:
        ds = lf.dataset(legacy.uri)
        for f in ds.get_fragments():  # statistics are read once per file: not counted
            f.may_match(conjunct_terms("seq < 40"))
            for r in f.readers():
                r.io_stats.reset()
        table = ds.to_table(columns=["seq", "i32"], filter=flt)
        read = sum(r.io_stats.bytes_read for f in ds.get_fragments() for r in f.readers())
        return table, read

    pruned, pruned_bytes = scan("seq < 40")
    full, full_bytes = scan("seq + 0 < 40")
    theirs = lance.dataset(legacy.uri).to_table(columns=["seq", "i32"], filter="seq < 40")
    assert_same(pruned, theirs)
    assert_same(full, theirs)
    assert pruned.num_rows > 0 and pruned_bytes < full_bytes / 2
