"""Lance 2.0 files written by OUR ``LanceFileWriter(version="2.0")``, read by pylance (the
oracle) and by our reader; 2.0 datasets that pylance created, appended to by us.

The truth is always the Arrow input.  Sections:

1. every type pylance's 2.0 writer accepts, with nulls at every level, empty and all-null
   columns, in one batch, in odd slices with an empty batch, and in tiny pages; the page
   encodings of a one-page file are the ones pylance chooses for the same data;
2. the reader's fixture corpus (``fixtures.THEMES``) in 2.0, and every column pylance
   refuses in 2.0 is refused by us too (``UnsupportedError``, no file left behind);
3. Hypothesis: random nested schemas, data, batching and page sizes;
4. datasets: ``write_dataset(..., data_storage_version="2.0")``, appends to a pylance 2.0
   dataset, compaction and added columns, all read back by pylance.

Arrow dictionaries are compared after decoding (``assert_tables_equal``): a 2.0 page stores
null keys as a key to a null item (pylance's reader takes the keys without validity), so
pylance returns the dictionary with that item appended, exactly as for its own 2.0 files.
"""

from __future__ import annotations

import glob
import os
import tempfile
from dataclasses import dataclass

import fixtures as fx
import lance
import lance.file
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from fixtures import assert_tables_equal
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lance_format
from lance_format import LanceFileReader, LanceFileWriter
from lance_format.container.describe import describe
from lance_format.errors import LanceError, UnsupportedError
from lance_format.v2_0 import v20_column_fields

V = "2.0"
ROWS = 2500
TINY_PAGE = 2048
BLOB = {"lance-encoding:blob": "true"}


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def _write(path: str, table: pa.Table, batch_rows: int | None = None, **options):
    """Write ``table`` with our writer, as slices of ``batch_rows`` with an empty batch."""
    with LanceFileWriter(path, table.schema, version=V, **options) as w:
        if batch_rows is None:
            w.write_table(table)
        else:
            for start in range(0, max(table.num_rows, 1), batch_rows):
                w.write_batch(_batch(table.slice(start, batch_rows)))
                if start == 0:
                    w.write_batch(_batch(table.slice(0, 0)))
    return w


def _batch(t: pa.Table) -> pa.RecordBatch:
    return (
        t.combine_chunks().to_batches()[0]
        if t.num_rows
        else pa.RecordBatch.from_pylist([], schema=t.schema)
    )


def _pylance_read(path: str) -> pa.Table:
    return lance.file.LanceFileReader(path).read_all(batch_size=8192).to_table()


def _check(path: str, table: pa.Table, what: str, rng: np.random.Generator | None = None):
    """pylance's read and take, our read and take: all equal the input."""
    meta = lance.file.LanceFileReader(path).metadata()
    assert (meta.major_version, meta.minor_version) == (0, 3), f"{what}: footer version"
    assert_tables_equal(_pylance_read(path), table, f"{what}: pylance read")
    ours = LanceFileReader(path)
    assert ours.version == V
    assert_tables_equal(ours.read(), table, f"{what}: our read")
    n = table.num_rows
    if n and rng is not None:
        idx = np.sort(rng.choice(n, size=min(n, 40), replace=False))
        want = table.take(pa.array(idx))
        got = lance.file.LanceFileReader(path).take_rows(idx.tolist()).to_table()
        assert_tables_equal(got, want, f"{what}: pylance take")
        assert_tables_equal(ours.take(idx), want, f"{what}: our take")


def _no_leftovers(directory: str) -> None:
    assert not [p for p in os.listdir(directory) if p.endswith(".partial")], "partial file left"


def _f32(n, rng):
    return fx.floats("float32", p_null=0.1)(n, rng)


def _i32(n, rng):
    return fx.ints("int32", p_null=0.2, lo=-1000, hi=1000)(n, rng)


def _i16(n, rng):
    return fx.ints("int16", p_null=0.1)(n, rng)


def _uuid(n, rng):
    data = rng.integers(0, 256, 16 * n, dtype=np.uint8).tobytes()
    storage = pa.Array.from_buffers(pa.binary(16), n, [None, pa.py_buffer(data)])
    return pa.ExtensionArray.from_storage(pa.uuid(), storage)


def _dict_no_null_keys(n, rng):
    return fx.dictionary(pa.int32(), pa.array(["red", "green", "blue"]), p_null=0.0)(n, rng)


# name -> (builder, field metadata)
EVERY_TYPE = {
    "int8": fx.ints("int8", p_null=0.1),
    "int16": fx.ints("int16", p_null=0.1),
    "int32": fx.ints("int32", p_null=0.1),
    "int64": fx.ints("int64", p_null=0.1),
    "uint8": fx.ints("uint8", p_null=0.1),
    "uint16": fx.ints("uint16"),
    "uint32": fx.ints("uint32", p_null=0.1),
    "uint64": fx.ints("uint64", p_null=0.1),
    "float16": fx.floats("float16", p_null=0.1),
    "float32": fx.floats("float32", p_null=0.1),
    "float64": fx.floats("float64"),
    "bool": fx.bools(p_null=0.2),
    "bool_no_nulls": fx.bools(),
    "date32": fx.typed_ints(pa.date32(), -30000, 30000, 0.1, "int32"),
    "date64": fx.typed_ints(pa.date64(), -(10**12), 10**12, 0.1),
    "time32": fx.typed_ints(pa.time32("ms"), 0, 86_399_999, 0.1, "int32"),
    "time64": fx.typed_ints(pa.time64("ns"), 0, 86_399_999_999_999, 0.1),
    "timestamp_us": fx.typed_ints(pa.timestamp("us"), 0, 10**15, 0.1),
    "timestamp_ns_utc": fx.typed_ints(pa.timestamp("ns", "UTC"), 0, 10**18, 0.1),
    "duration": fx.typed_ints(pa.duration("s"), -(10**9), 10**9, 0.1),
    "decimal128": fx.decimals(pa.decimal128(10, 2)),
    "decimal256": fx.decimals(pa.decimal256(40, 5)),
    "fixed_binary": fx.fixed_binary(5, p_null=0.1),
    "uuid": _uuid,
    "string": fx.var_strings(0, 30, p_null=0.1),
    "string_low_card": fx.words(5, p_null=0.1),
    "string_long": fx.var_strings(200, 400, p_null=0.05),
    "large_string": fx.var_strings(0, 20, p_null=0.1, typ=pa.large_string()),
    "binary": fx.var_strings(0, 20, p_null=0.1, typ=pa.binary(), alphabet="bytes"),
    "large_binary": fx.var_strings(0, 20, p_null=0.1, typ=pa.large_binary(), alphabet="bytes"),
    "empty_strings": fx.var_strings(0, 0),
    "null": fx.all_null(pa.null()),
    "all_null_int32": fx.all_null(pa.int32()),
    "all_null_string": fx.all_null(pa.string()),
    "all_null_list": fx.all_null(pa.list_(pa.int32())),
    "all_null_fsl": fx.all_null(pa.list_(pa.float32(), 4)),
    "empty_lists": fx.list_of(_i32, max_len=0, p_null=0.0, p_empty=0.0),
    "vector": fx.fsl_of(fx.floats("float32"), 8, p_null=0.1),
    "fsl_item_nulls": fx.fsl_of(_f32, 3, p_null=0.1),
    "fsl_fsl": fx.fsl_of(fx.fsl_of(_i16, 2, p_null=0.1), 3, p_null=0.1),
    "fsl_bool": fx.fsl_of(fx.bools(0.1), 3, p_null=0.1),
    "list_int32": fx.list_of(_i32, max_len=5),
    "list_garbage_under_nulls": fx.list_of(_i32, max_len=3, garbage_under_nulls=True),
    "large_list_string": fx.list_of(fx.var_strings(0, 8, 0.1), max_len=4, large=True),
    "list_list_int64": fx.list_of(fx.list_of(fx.ints("int64", p_null=0.1), max_len=3)),
    "list_vector": fx.list_of(fx.fsl_of(fx.floats("float32"), 4, p_null=0.1), max_len=3),
    "struct": fx.struct_of(a=_i32, b=fx.var_strings(0, 9, 0.2), c=fx.list_of(_f32, max_len=3)),
    "struct_struct": fx.struct_of(inner=fx.struct_of(x=_i16, y=fx.words(3, 0.1)), z=fx.bools(0.1)),
    "struct_vector": fx.struct_of(v=fx.fsl_of(_f32, 2, p_null=0.1)),
    "list_struct": fx.list_of(fx.struct_of(x=_i32, y=fx.var_strings(0, 6, 0.2)), max_len=4),
    "list_struct_list": fx.list_of(
        fx.struct_of(l=fx.list_of(fx.words(4, 0.1), max_len=3)), max_len=3, p_null=0.3
    ),
    "empty_struct": lambda n, rng: pa.array([{}] * n, pa.struct([])),
    "dict_string": fx.dictionary(pa.int32(), pa.array(["a", "bb", "ccc", "dddd"])),
    "dict_no_null_keys": _dict_no_null_keys,
    "dict_int8_int64": fx.dictionary(pa.int8(), pa.array([10**12, -5, 7]), p_null=0.2),
    "dict_uint16_string_unused": fx.dictionary(
        pa.uint16(), pa.array([f"w{i}" for i in range(50)]), use=5
    ),
    "dict_null_item": fx.dictionary(pa.int16(), pa.array(["x", None, "z"]), p_null=0.1),
}
METADATA = {
    "packed": {"packed": "true"},
    "blob": BLOB,
    "string_zstd": {"lance-encoding:compression": "zstd"},
    "string_lz4": {"lance-encoding:compression": "lz4"},
}
EVERY_TYPE.update(
    packed=fx.struct_of(
        a=fx.ints("int32"), b=fx.floats("float64"), c=fx.fsl_of(fx.ints("int16"), 2)
    ),
    blob=fx.blobs([3, None, 0, 700, 1, None, 64]),
    string_zstd=fx.var_strings(0, 40, p_null=0.1),
    string_lz4=fx.var_strings(0, 40, p_null=0.1),
)


def _every_type_table(n: int = ROWS) -> pa.Table:
    arrays, fields = [], []
    for name, make in EVERY_TYPE.items():
        arr = make(n, fx.rng_for("v20", name))
        arrays.append(arr)
        fields.append(pa.field(name, arr.type, metadata=METADATA.get(name)))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


@pytest.fixture(scope="module")
def every_type() -> pa.Table:
    return _every_type_table()


# --------------------------------------------------------------------------------------------
# 1. Every type
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", ["one_batch", "slices", "tiny_pages"])
def test_every_type_roundtrip(tmp_path, every_type: pa.Table, variant: str) -> None:
    path = str(tmp_path / "t.lance")
    if variant == "one_batch":
        _write(path, every_type)
    elif variant == "slices":
        _write(path, every_type, batch_rows=333)  # odd offsets: bitmaps are re-based
    else:
        _write(path, every_type, batch_rows=1000, max_page_bytes=TINY_PAGE)
    _check(path, every_type, variant, np.random.default_rng(7))
    _no_leftovers(str(tmp_path))


def test_dictionary_without_null_keys_is_exact(tmp_path, every_type: pa.Table) -> None:
    """Only null keys change the dictionary (see the module docstring)."""
    path = str(tmp_path / "d.lance")
    t = every_type.select(["dict_no_null_keys", "dict_uint16_string_unused"])
    _write(path, t)
    got = _pylance_read(path)
    assert got.column("dict_no_null_keys").equals(t.column("dict_no_null_keys"))


def test_full_int8_dictionary_with_null_keys(tmp_path) -> None:
    """A null key needs a null item: an int8 dictionary of 128 items makes room by keeping
    only the items in use, and is refused when all 128 are in use."""
    items = pa.array([f"v{i}" for i in range(128)])
    keys = pa.array([5, None, 127, 5], pa.int8())
    table = pa.table({"d": pa.DictionaryArray.from_arrays(keys, items)})
    path = str(tmp_path / "d.lance")
    _write(path, table)
    _check(path, table, "compacted dictionary", np.random.default_rng(1))
    all_used = pa.array(list(range(128)) + [None], pa.int8())
    full = pa.table({"d": pa.DictionaryArray.from_arrays(all_used, items)})
    with pytest.raises(UnsupportedError, match="null item"):
        _write(str(tmp_path / "full.lance"), full)
    assert not os.path.exists(tmp_path / "full.lance")


def test_tiny_pages_layout(tmp_path, every_type: pa.Table) -> None:
    """Many pages per column; a struct's column keeps one page over all its entries
    (pylance's 2.0 reader accepts no other) and the pages of a list's child column hold the
    items of the list's pages, page for page."""
    path = str(tmp_path / "t.lance")
    _write(path, every_type, batch_rows=1000, max_page_bytes=TINY_PAGE)
    meta = LanceFileReader(path).metadata
    fields = v20_column_fields(meta.schema.fields)
    assert len(fields) == len(meta.columns)
    column = {f.id: c for f, c in zip(fields, meta.columns, strict=True)}
    for f in fields:
        pages = column[f.id].pages
        if f.logical_type == "struct" and not f.is_packed_struct():
            assert len(pages) == 1, f.name
            assert pages[0].encoding.WhichOneof("array_encoding") == "struct"
        if f.parent_id == -1:
            assert sum(p.num_rows for p in pages) == every_type.num_rows, f.name
        if f.logical_type in ("list", "large_list", "list.struct", "large_list.struct"):
            child = f.children[0]
            while child.logical_type == "struct" and child.children:  # one page: look below
                child = child.children[0]
            items = column[child.id].pages
            assert [p.num_rows for p in items] == [int(p.encoding.list.num_items) for p in pages]
    top = {f.name: f for f in meta.schema.fields}
    for name in ("list_int32", "vector", "string", "list_struct"):
        assert len(column[top[name].id].pages) > 3, name


def test_encodings_are_pylances(tmp_path, every_type: pa.Table) -> None:
    """For one page per column, every page's encoding tree is the one pylance writes for the
    same data (Flat, Nullable, Binary, List, Dictionary, FixedSizeList, SimpleStruct,
    PackedStruct, blob descriptors, compressed bytes)."""
    ours, theirs = str(tmp_path / "ours.lance"), str(tmp_path / "pylance.lance")
    _write(ours, every_type)
    with lance.file.LanceFileWriter(theirs, every_type.schema, version=V) as w:
        w.write_batch(every_type)
    a, b = LanceFileReader(ours).metadata, LanceFileReader(theirs).metadata
    assert len(a.columns) == len(b.columns)
    for i, (x, y) in enumerate(zip(a.columns, b.columns, strict=True)):
        assert describe(x.encoding) == describe(y.encoding), f"column {i} encoding"
        assert [describe(p.encoding) for p in x.pages] == [describe(p.encoding) for p in y.pages]
        assert [p.num_rows for p in x.pages] == [p.num_rows for p in y.pages], f"column {i}"


def test_empty_file(tmp_path, every_type: pa.Table) -> None:
    path = str(tmp_path / "e.lance")
    _write(path, every_type.slice(0, 0))
    _check(path, every_type.slice(0, 0), "empty")


def test_pages_reach_the_disk_while_writing(tmp_path) -> None:
    """The 2.0 path streams like 2.1/2.2: with 64 KiB pages the temporary file grows batch
    by batch (at most a few encodings wait in flight), not at close()."""
    n_batches, rows = 60, 2000
    rng = np.random.default_rng(5)
    batches = [
        pa.record_batch(
            {
                "id": pa.array(np.arange(k * rows, (k + 1) * rows)),
                "x": pa.array(rng.standard_normal(rows)),
                "s": fx.var_strings(0, 12)(rows, rng),
            }
        )
        for k in range(n_batches)
    ]
    path = tmp_path / "s.lance"
    sizes = []
    w = LanceFileWriter(str(path), batches[0].schema, version=V, max_page_bytes=64 << 10)
    for b in batches:
        w.write_batch(b)
        (partial,) = glob.glob(str(tmp_path / "*.partial"))
        sizes.append(os.path.getsize(partial))
    assert not path.exists()
    res = w.close()
    final = os.path.getsize(path)
    assert sizes == sorted(sizes)
    assert sizes[n_batches // 2 - 1] > final // 4
    assert all(len(pages) >= 10 for pages in res.encodings.values())
    _check(str(path), pa.Table.from_batches(batches), "streamed")


# --------------------------------------------------------------------------------------------
# 2. The fixture corpus and pylance's refusals
# --------------------------------------------------------------------------------------------

THEMES = [t.name for t in fx.THEMES if t.name != "big" and t.columns_for(V)]
REFUSED = [
    (t.name, c.name) for t in fx.THEMES for c in t.columns if V in c.refused and t.name != "big"
]


@pytest.mark.parametrize("theme", THEMES)
def test_fixture_theme(tmp_path, theme: str) -> None:
    th = fx.THEMES_BY_NAME[theme]
    table = fx.build_table(th, V)
    path = str(tmp_path / "f.lance")
    page = th.writer_options.get("max_page_bytes")
    _write(path, table, th.batch_rows, **({"max_page_bytes": page} if page else {}))
    _check(path, table, theme, np.random.default_rng(3))


@pytest.mark.parametrize("theme,column", REFUSED, ids=[f"{t}-{c}" for t, c in REFUSED])
def test_pylance_refusals_are_refused(tmp_path, theme: str, column: str) -> None:
    """Every column pylance refuses in 2.0 (struct validity, maps, view types, packed
    structs it cannot pack, fixed-size lists of strings) is an UnsupportedError here."""
    th = fx.THEMES_BY_NAME[theme]
    col = next(c for c in th.columns if c.name == column)
    arr = col.make(200, fx.rng_for(theme, column))
    table = pa.Table.from_arrays([arr], schema=pa.schema([col.field_for(arr)]))
    path = str(tmp_path / "r.lance")
    with pytest.raises(UnsupportedError):
        _write(path, table)
    assert not os.path.exists(path)
    _no_leftovers(str(tmp_path))


REFUSALS = {
    "map": (pa.array([[("a", 1)]], pa.map_(pa.string(), pa.int32())), "maps"),
    "fsl_string": (pa.array([["a", "b"]], pa.list_(pa.string(), 2)), "fixed-size lists"),
    "string_view": (pa.array(["a"], pa.string_view()), "string_view"),
    "struct_nulls": (pa.array([{"x": 1}, None]), "struct validity"),
    "list_struct_nulls": (pa.array([[{"x": 1}, None]]), "struct validity"),
    "empty_struct_nulls": (
        pa.StructArray.from_arrays([], fields=[], mask=pa.array([False, True])),
        "struct validity",
    ),
}


@pytest.mark.parametrize("kind", sorted(REFUSALS))
def test_refused_types(tmp_path, kind: str) -> None:
    arr, words = REFUSALS[kind]
    table = pa.table({"c": arr})
    path = str(tmp_path / "r.lance")
    with pytest.raises(UnsupportedError, match=words):
        _write(path, table)
    assert not os.path.exists(path)
    _no_leftovers(str(tmp_path))


@pytest.mark.parametrize("child", ["string", "bool", "nulls"])
def test_refused_packed_structs(tmp_path, child: str) -> None:
    """A 2.0 packed struct holds whole-byte fixed-width children without nulls."""
    values = {
        "string": pa.array(["a", "b"]),
        "bool": pa.array([True, False]),
        "nulls": pa.array([1, None], pa.int32()),
    }[child]
    arr = pa.StructArray.from_arrays([pa.array([1, 2], pa.int32()), values], names=["a", "b"])
    schema = pa.schema([pa.field("p", arr.type, metadata={"packed": "true"})])
    path = str(tmp_path / "p.lance")
    with pytest.raises(UnsupportedError, match="packed struct"):
        _write(path, pa.Table.from_arrays([arr], schema=schema))
    assert not os.path.exists(path)


# --------------------------------------------------------------------------------------------
# 3. Hypothesis: random nested schemas
# --------------------------------------------------------------------------------------------

LEAVES = [
    pa.int8(), pa.int32(), pa.uint64(), pa.float32(), pa.float64(), pa.bool_(), pa.date32(),
    pa.timestamp("ms"), pa.decimal128(12, 3), pa.binary(3), pa.string(), pa.large_string(),
    pa.binary(), pa.large_binary(),
]  # fmt: skip
FSL_ITEMS = [pa.float32(), pa.int16(), pa.uint8(), pa.bool_()]


@st.composite
def arrow_types(draw, depth: int = 3) -> pa.DataType:
    kinds = ["leaf"] + (["list", "large_list", "struct", "fsl"] if depth > 1 else [])
    if depth == 3:  # nested dictionaries: see test_take_of_nested_dictionary
        kinds.append("dict")
    kind = draw(st.sampled_from(kinds))
    if kind == "leaf":
        return draw(st.sampled_from(LEAVES))
    if kind == "fsl":
        return pa.list_(draw(st.sampled_from(FSL_ITEMS)), draw(st.sampled_from([1, 3, 16])))
    if kind == "dict":
        return pa.dictionary(draw(st.sampled_from([pa.int8(), pa.int32()])), pa.string())
    if kind in ("list", "large_list"):
        item = pa.field("item", draw(arrow_types(depth=depth - 1)), draw(st.booleans()))
        return pa.list_(item) if kind == "list" else pa.large_list(item)
    n = draw(st.integers(1, 3))
    return pa.struct(
        [
            pa.field(f"f{i}", draw(arrow_types(depth=depth - 1)), draw(st.booleans()))
            for i in range(n)
        ]
    )


@dataclass
class Shape:
    schema: pa.Schema
    num_rows: int
    seed: int
    p_null: float
    batch_rows: int | None
    max_page_bytes: int | None


@st.composite
def shapes(draw) -> Shape:
    fields = [
        pa.field(f"c{i}", draw(arrow_types()), draw(st.booleans()))
        for i in range(draw(st.integers(1, 3)))
    ]
    return Shape(
        pa.schema(fields),
        draw(st.sampled_from([0, 1, 7, 300, 2000])),
        draw(st.integers(0, 2**32 - 1)),
        draw(st.sampled_from([0.0, 0.2, 1.0])),
        draw(st.sampled_from([None, 97, 500])),
        draw(st.sampled_from([None, 1024, 65536])),
    )


class DataGen:
    """Random values for a type: nulls at every nullable level but structs (2.0 has no
    struct validity), empty lists, values hidden under null lists."""

    def __init__(self, shape: Shape):
        self.rng = np.random.default_rng(shape.seed)
        self.p_null = shape.p_null

    def mask(self, n: int, nullable: bool) -> np.ndarray | None:
        if not nullable or self.p_null == 0 or n == 0 or self.rng.random() < 0.2:
            return None
        return self.rng.random(n) < self.p_null

    def array(self, t: pa.DataType, n: int, nullable: bool) -> pa.Array:
        rng = self.rng
        if pa.types.is_struct(t):
            children = [self.array(f.type, n, f.nullable) for f in t]
            return pa.StructArray.from_arrays(children, fields=list(t))
        mask = self.mask(n, nullable)
        pmask = None if mask is None else pa.array(mask)
        if pa.types.is_fixed_size_list(t):
            values = self.array(t.value_type, n * t.list_size, True)
            return pa.FixedSizeListArray.from_arrays(values, type=t, mask=pmask)
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            lens = rng.integers(0, 5, n)
            if mask is not None and rng.random() < 0.7:
                lens[mask] = 0
            large = pa.types.is_large_list(t)
            offsets = np.zeros(n + 1, dtype=np.int64 if large else np.int32)
            np.cumsum(lens, out=offsets[1:])
            values = self.array(t.value_type, int(offsets[-1]), t.value_field.nullable)
            cls = pa.LargeListArray if large else pa.ListArray
            return cls.from_arrays(pa.array(offsets), values, type=t, mask=pmask)
        if pa.types.is_dictionary(t):
            words = pa.array([f"w{i}" for i in range(int(rng.integers(1, 20)))])
            keys = pa.array(rng.integers(0, len(words), n), mask=mask).cast(t.index_type)
            return pa.DictionaryArray.from_arrays(keys, words)
        arr = self.leaf(t, n)
        if mask is not None:
            arr = pc.if_else(pmask, pa.nulls(n, arr.type), arr)
        return arr.cast(t) if arr.type != t else arr

    def leaf(self, t: pa.DataType, n: int) -> pa.Array:
        rng = self.rng
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            if rng.random() < 0.3:  # low cardinality: the writer's own dictionary
                return fx.words(4, typ=t)(n, rng)
            return fx.var_strings(0, 30, typ=t)(n, rng)
        if pa.types.is_binary(t) or pa.types.is_large_binary(t):
            return fx.var_strings(0, 30, typ=t, alphabet="bytes")(n, rng)
        if pa.types.is_boolean(t):
            return pa.array(rng.random(n) < 0.5)
        if pa.types.is_floating(t):
            return pa.array((rng.standard_normal(n) * 100).astype(t.to_pandas_dtype()))
        if pa.types.is_integer(t):
            info = np.iinfo(t.to_pandas_dtype())
            return pa.array(rng.integers(info.min, info.max, n, endpoint=True, dtype=info.dtype))
        if pa.types.is_fixed_size_binary(t):
            return fx.fixed_binary(t.byte_width)(n, rng)
        if pa.types.is_decimal(t):
            return pa.array(rng.integers(-(10**8), 10**8, n)).cast(pa.decimal128(19, 0)).cast(t)
        if t == pa.date32():
            return pa.array(rng.integers(-30000, 30000, n, dtype=np.int32)).cast(t)
        return pa.array(rng.integers(0, 10**12, n)).cast(t)  # timestamps

    def table(self, schema: pa.Schema, n: int) -> pa.Table:
        return pa.Table.from_arrays(
            [self.array(f.type, n, f.nullable) for f in schema], schema=schema
        )


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(shape=shapes())
def test_random_schema_roundtrip(shape: Shape) -> None:
    table = DataGen(shape).table(shape.schema, shape.num_rows)
    opts = {} if shape.max_page_bytes is None else {"max_page_bytes": shape.max_page_bytes}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "h.lance")
        _write(path, table, shape.batch_rows, **opts)
        _check(path, table, "random", np.random.default_rng(shape.seed))


def _nested_dictionary_table(n: int) -> pa.Table:
    """Dictionaries below the top level, with null items and nulls around them."""
    d = pa.dictionary(pa.int8(), pa.string())
    words = pa.array([[], ["a", None], None, ["b", "c", "a"]] * (n // 4), pa.list_(pa.string()))
    keys = pa.array(["x", None, "y", "x"] * (n // 4)).cast(d)
    st = pa.StructArray.from_arrays([keys, pa.array(np.arange(n))], names=["k", "v"])
    ends = np.minimum(np.arange(n + 1) * 2, 2 * n).astype(np.int32)
    return pa.table(
        {
            "l": words.cast(pa.list_(d)),
            "s": st,
            "ls": pa.ListArray.from_arrays(pa.array(ends), pa.concat_arrays([st, st])),
        }
    )


@pytest.mark.parametrize("writer", ["ours", "pylance"])
def test_take_of_nested_dictionary(tmp_path, writer) -> None:
    """Takes join pieces of several pages (and ranges): the dictionaries below the top level
    are joined too, whether the 2.0 file is ours or pylance's."""
    table = _nested_dictionary_table(1200)
    path = str(tmp_path / "d.lance")
    if writer == "ours":
        _write(path, table, max_page_bytes=4096)
    else:
        with lance.file.LanceFileWriter(path, table.schema, version="2.0") as w:
            w.write_batch(table)
    assert_tables_equal(_pylance_read(path), table, "pylance read")
    assert_tables_equal(LanceFileReader(path).read(), table, "our read")
    sorted_rows = [0, 2, 5, 6, 100, 640, 641, 1199]  # pylance's file API takes sorted rows
    theirs = lance.file.LanceFileReader(path).take_rows(sorted_rows).to_table()
    assert_tables_equal(LanceFileReader(path).take(sorted_rows), theirs, "our sorted take")
    rows = np.random.default_rng(4).integers(0, 1200, 60).tolist() + [1199, 0, 0]
    assert_tables_equal(LanceFileReader(path).take(rows), table.take(pa.array(rows)), "take")


def test_take_of_nested_dictionary_dataset(tmp_path) -> None:
    """The same through pylance-written 2.0 datasets of several fragments."""
    uri = str(tmp_path / "ds")
    lance.write_dataset(
        _nested_dictionary_table(1200), uri, data_storage_version="2.0", max_rows_per_file=500
    )
    ours, theirs = lance_format.dataset(uri), lance.dataset(uri)
    rows = np.random.default_rng(5).integers(0, 1200, 60).tolist() + [3, 0, 1199]
    assert_tables_equal(ours.take(rows), theirs.take(rows), "take")
    assert_tables_equal(ours.to_table(), theirs.to_table(), "scan")
    flt = "s.v % 7 = 1"
    assert_tables_equal(ours.to_table(filter=flt), theirs.to_table(filter=flt), "filter")


# --------------------------------------------------------------------------------------------
# 4. Datasets
# --------------------------------------------------------------------------------------------


def _flat_table(n: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table(
        {
            "id": pa.array(np.arange(n, dtype=np.int64) + seed * 10_000),
            "qty": fx.ints("int32", p_null=0.1)(n, rng),
            "price": fx.decimals(pa.decimal128(12, 2))(n, rng),
            "flag": fx.words(3, p_null=0.1)(n, rng),
            "comment": fx.var_strings(0, 40, p_null=0.1)(n, rng),
            "ship": fx.typed_ints(pa.date32(), 8000, 11000, 0.0, "int32")(n, rng),
            "vec": fx.fsl_of(fx.floats("float32"), 4, p_null=0.1)(n, rng),
        }
    )


def _nested_table(n: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table(
        {
            "id": pa.array(np.arange(n, dtype=np.int64)),
            "tags": fx.list_of(fx.words(4, 0.1))(n, rng),
            "point": fx.struct_of(x=fx.floats("float64", 0.1), label=fx.var_strings(0, 5, 0.1))(
                n, rng
            ),
        }
    )


def _assert_dataset(uri: str, expected: pa.Table) -> None:
    ds = lance.dataset(uri)
    assert ds.data_storage_version == V
    got = ds.to_table()
    assert_tables_equal(got.sort_by("id"), expected.sort_by("id"), "pylance dataset read")
    ours = lance_format.dataset(uri).to_table()
    assert_tables_equal(ours.sort_by("id"), expected.sort_by("id"), "our dataset read")
    for frag in ds.get_fragments():
        for f in frag.data_files():
            assert (f.file_major_version, f.file_minor_version) == (2, 0)


def test_write_dataset_2_0(tmp_path) -> None:
    uri = str(tmp_path / "ds")
    t = _flat_table(3000, 1)
    lance_format.write_dataset(t, uri, data_storage_version="2.0", max_rows_per_file=1000)
    assert len(lance.dataset(uri).get_fragments()) == 3
    _assert_dataset(uri, t)


def test_append_to_pylance_2_0_dataset(tmp_path) -> None:
    uri = str(tmp_path / "ds")
    first, second, third = _flat_table(1500, 1), _flat_table(700, 2), _flat_table(1200, 3)
    lance.write_dataset(first, uri, data_storage_version="2.0")
    lance_format.write_dataset(second, uri, mode="append")
    lance_format.write_dataset(third, uri, mode="append", max_rows_per_file=500)
    _assert_dataset(uri, pa.concat_tables([first, second, third]))
    lance.write_dataset(first.slice(0, 10), uri, mode="append")  # pylance appends after us
    _assert_dataset(uri, pa.concat_tables([first, second, third, first.slice(0, 10)]))


def test_compact_and_add_columns_in_2_0(tmp_path) -> None:
    uri = str(tmp_path / "ds")
    t = _flat_table(900, 4)
    lance.write_dataset(t, uri, data_storage_version="2.0", max_rows_per_file=200)
    ds = lance_format.dataset(uri)
    metrics = ds.compact_files(target_rows_per_fragment=10_000)
    assert metrics.fragments_added == 1
    assert len(lance.dataset(uri).get_fragments()) == 1
    _assert_dataset(uri, t)
    lance_format.dataset(uri).add_columns({"qty2": "qty * 2"})
    # pylance's own add_columns is the truth: int32 * 2 stays int32 (and wraps)
    theirs = str(tmp_path / "theirs")
    lance.write_dataset(t, theirs, data_storage_version="2.0", max_rows_per_file=200)
    lance.dataset(theirs).add_columns({"qty2": "qty * 2"})
    expected = lance.dataset(theirs).to_table(columns=["qty2"]).column("qty2")
    got = lance.dataset(uri).to_table()
    assert got.schema.field("qty2").type == expected.type == pa.int32()
    assert got.column("qty2").to_pylist() == expected.to_pylist()


@pytest.mark.parametrize("how", ["create", "append"])
def test_nested_dataset_2_0(tmp_path, how: str) -> None:
    uri = str(tmp_path / "ds")
    t = _nested_table(500, 5)
    if how == "create":
        lance_format.write_dataset(t, uri, data_storage_version="2.0")
        _assert_dataset(uri, t)
    else:
        lance.write_dataset(t, uri, data_storage_version="2.0")
        lance_format.write_dataset(t, uri, mode="append")
        _assert_dataset(uri, pa.concat_tables([t, t]))


def test_data_file_is_a_pylance_2_0_file(tmp_path) -> None:
    """The data files of our 2.0 dataset are 2.0 files to pylance's file reader too."""
    uri = str(tmp_path / "ds")
    t = _flat_table(100, 6)
    lance_format.write_dataset(t, uri, data_storage_version="2.0")
    (path,) = glob.glob(os.path.join(uri, "data", "*.lance"))
    _check(path, t, "data file")


def test_bad_input_is_lance_error(tmp_path) -> None:
    w = LanceFileWriter(str(tmp_path / "x.lance"), pa.schema([("a", pa.int32())]), version=V)
    with pytest.raises(LanceError):
        w.write_batch(pa.record_batch({"b": pa.array([1])}))
    assert not os.path.exists(tmp_path / "x.lance")
