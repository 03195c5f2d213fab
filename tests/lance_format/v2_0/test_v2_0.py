"""The 2.0 decoder (``lance.encodings.ArrayEncoding`` pages) against pylance's own reads.

Files are written by pylance with ``version="2.0"``; every column is decoded with
:mod:`lance_format.v2_0.decoder` through a small footer/ColumnMetadata parser kept in this
file (docs/format/container.md) and compared with pylance's ``read_all``, ``read_range`` and
``take_rows`` (``Array.equals``, so types must match exactly).
"""

from __future__ import annotations

import decimal
import struct
from dataclasses import dataclass

import lance.file
import numpy as np
import pyarrow as pa
import pytest
from google.protobuf import any_pb2

from lance_format.container.metadata import ColumnInfo, parse_column
from lance_format.errors import CorruptFileError, InvalidArgumentError, LanceError
from lance_format.pb import encodings_v2_0_pb2, file2_pb2, file_pb2
from lance_format.schema import LanceSchema
from lance_format.v2_0.decoder import decode_v20_field, take_v20_field, v20_column_fields

# -- a minimal container parser (independent of lance_format.container) -------------------


@dataclass
class Parsed:
    path: str
    data: bytes
    schema: LanceSchema
    raw: list[file2_pb2.ColumnMetadata]  # as this test parses them
    column_index: dict[int, int]
    num_rows: int
    requests: list[tuple[int, int]]

    @property
    def columns(self) -> list[ColumnInfo]:
        """The columns as the container parses them (what the 2.0 decoder takes)."""
        return [
            parse_column(cm.SerializeToString(), i, len(self.data)) for i, cm in enumerate(self.raw)
        ]

    def read_ranges(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        out = []
        for pos, size in ranges:
            if pos < 0 or size < 0 or pos + size > len(self.data):
                raise CorruptFileError(f"read of {size} bytes at {pos} is outside the file")
            self.requests.append((pos, size))
            out.append(self.data[pos : pos + size])
        return out

    def field(self, name: str):
        return self.schema.field_by_path(name)

    def decode(self, name: str, start: int, stop: int) -> pa.Array:
        return decode_v20_field(
            self.field(name), self.column_index, self.columns, self.read_ranges, start, stop
        )

    def take(self, name: str, indices) -> pa.Array:
        return take_v20_field(
            self.field(name), self.column_index, self.columns, self.read_ranges, np.asarray(indices)
        )

    def encoding(self, name: str, page: int = 0) -> encodings_v2_0_pb2.ArrayEncoding:
        meta = self.raw[self.column_index[self.field(name).id]]
        wrapped = any_pb2.Any()
        wrapped.ParseFromString(meta.pages[page].encoding.direct.encoding)
        enc = encodings_v2_0_pb2.ArrayEncoding()
        enc.ParseFromString(wrapped.value)
        return enc

    def num_pages(self, name: str) -> int:
        return len(self.raw[self.column_index[self.field(name).id]].pages)


def parse_file(path: str) -> Parsed:
    with open(path, "rb") as fh:
        data = fh.read()
    _cm, cmo_start, gbo_start, _ngb, ncol, major, minor, magic = struct.unpack(
        "<QQQIIHH4s", data[-40:]
    )
    assert magic == b"LANC" and (major, minor) == (0, 3)  # 2.0 says (0, 3) in the footer
    pos, size = struct.unpack_from("<QQ", data, gbo_start)
    fd = file_pb2.FileDescriptor()
    fd.ParseFromString(data[pos : pos + size])
    columns = []
    for i in range(ncol):
        p, s = struct.unpack_from("<QQ", data, cmo_start + 16 * i)
        cm = file2_pb2.ColumnMetadata()
        cm.ParseFromString(data[p : p + s])
        columns.append(cm)
    schema = LanceSchema.from_protos(fd.schema.fields, fd.schema.metadata)
    owners = v20_column_fields(schema.fields)
    assert len(owners) == ncol
    index = {f.id: i for i, f in enumerate(owners)}
    return Parsed(path, data, schema, columns, index, int(fd.length), [])


def write(path: str, table: pa.Table, batches: int = 1, **kwargs) -> str:
    with lance.file.LanceFileWriter(str(path), table.schema, version="2.0", **kwargs) as w:
        step = -(-table.num_rows // batches)
        for i in range(0, table.num_rows, step):
            # take() copies: pylance 14 panics on some sliced nested arrays
            rows = np.arange(i, min(i + step, table.num_rows))
            w.write_batch(table.take(pa.array(rows)))
    return str(path)


def same(ours: pa.Array, theirs: pa.Array | pa.ChunkedArray) -> bool:
    """Equal, types included.  Dictionary arrays are compared by type and decoded values:
    pylance re-chunks them by batch, each chunk with its own (duplicated) dictionary."""
    if ours.type != theirs.type:
        return False
    if pa.types.is_dictionary(theirs.type):
        chunks = theirs.chunks if isinstance(theirs, pa.ChunkedArray) else [theirs]
        decoded = pa.chunked_array([c.dictionary_decode() for c in chunks], ours.type.value_type)
        return ours.dictionary_decode().equals(decoded.combine_chunks())
    if isinstance(theirs, pa.ChunkedArray):
        theirs = theirs.combine_chunks()
    return ours.equals(theirs)


# -- data ----------------------------------------------------------------------------------

N = 3000


def _mask(rng: np.random.Generator, n: int, p: float) -> np.ndarray:
    return rng.random(n) < p


_ALPHABET = list("abcdefghijklmnopqrstuvwxyz0123456789 é€")
STRING = pa.string()


def _strings(rng, n, lo=0, hi=12, p_null=0.0, typ=STRING):
    lens = rng.integers(lo, hi, n)
    values = ["".join(rng.choice(_ALPHABET, k)) for k in lens]
    return pa.array(values, typ, mask=_mask(rng, n, p_null))


def _list(rng, values: pa.Array, n: int, p_null: float, large: bool = False, max_len: int = 4):
    lens = rng.integers(0, max_len + 1, n)
    offsets = np.concatenate([[0], np.cumsum(lens)])
    total = int(offsets[-1])
    child = values.slice(0, total) if len(values) >= total else values
    assert len(child) >= total
    mask = pa.array(_mask(rng, n, p_null))
    cls = pa.LargeListArray if large else pa.ListArray
    dtype = np.int64 if large else np.int32
    return cls.from_arrays(pa.array(offsets.astype(dtype)), child.slice(0, total), mask=mask)


def basic_table(n: int = N, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    ints = {}
    for name, typ in [
        ("i8", pa.int8()),
        ("i16", pa.int16()),
        ("i32", pa.int32()),
        ("i64", pa.int64()),
        ("u8", pa.uint8()),
        ("u16", pa.uint16()),
        ("u32", pa.uint32()),
        ("u64", pa.uint64()),
    ]:
        info = np.iinfo(typ.to_pandas_dtype())
        vals = rng.integers(info.min, info.max, n, dtype=typ.to_pandas_dtype(), endpoint=True)
        ints[name] = pa.array(vals, typ)
    ints["i32_nulls"] = pa.array(rng.integers(-100, 100, n), pa.int32(), mask=_mask(rng, n, 0.3))
    floats = {
        "f16": pa.array(rng.standard_normal(n).astype(np.float16)),
        "f32": pa.array(rng.standard_normal(n).astype(np.float32), mask=_mask(rng, n, 0.1)),
        "f64": pa.array(rng.standard_normal(n)),
    }
    temporal = {
        "bool": pa.array(rng.random(n) < 0.5),
        "bool_nulls": pa.array(rng.random(n) < 0.5, mask=_mask(rng, n, 0.2)),
        "date32": pa.array(rng.integers(-5000, 20000, n).astype(np.int32)).cast(pa.date32()),
        "date64": pa.array(rng.integers(0, 10**12, n) // 86_400_000 * 86_400_000).cast(pa.date64()),
        "time32s": pa.array(rng.integers(0, 86400, n).astype(np.int32)).cast(pa.time32("s")),
        "time32ms": pa.array(rng.integers(0, 86400000, n).astype(np.int32)).cast(pa.time32("ms")),
        "time64us": pa.array(rng.integers(0, 86400 * 10**6, n)).cast(pa.time64("us")),
        "time64ns": pa.array(rng.integers(0, 86400 * 10**9, n)).cast(pa.time64("ns")),
        "ts_s": pa.array(rng.integers(0, 2**40, n)).cast(pa.timestamp("s")),
        "ts_us_utc": pa.array(rng.integers(0, 2**60, n), mask=_mask(rng, n, 0.1)).cast(
            pa.timestamp("us", "UTC")
        ),
        "ts_ns_tz": pa.array(rng.integers(0, 2**60, n)).cast(pa.timestamp("ns", "+05:30")),
        "dur_ms": pa.array(rng.integers(-(2**40), 2**40, n)).cast(pa.duration("ms")),
        "dec128": pa.array(
            [decimal.Decimal(int(v)).scaleb(-2) for v in rng.integers(-(10**9), 10**9, n)],
            pa.decimal128(12, 2),
            mask=_mask(rng, n, 0.1),
        ),
        "dec256": pa.array(
            [decimal.Decimal(int(v)) for v in rng.integers(-(10**15), 10**15, n)],
            pa.decimal256(40, 0),
        ),
        "fsb": pa.array(
            [bytes(rng.integers(0, 256, 5, dtype=np.uint8)) for _ in range(n)], pa.binary(5)
        ),
        "uuid": pa.ExtensionArray.from_storage(
            pa.uuid(),
            pa.array(
                [bytes(rng.integers(0, 256, 16, dtype=np.uint8)) for _ in range(n)], pa.binary(16)
            ),
        ),
        "nul": pa.nulls(n),
    }
    cols = {**ints, **floats, **temporal}
    return pa.table(cols)


def strings_table(n: int = N, seed: int = 1) -> pa.Table:
    rng = np.random.default_rng(seed)
    words = np.array(["alpha", "beta", "gamma", "delta", ""])
    low = pa.array(words[rng.integers(0, 5, n)], mask=_mask(rng, n, 0.1))
    arrow_dict = pa.DictionaryArray.from_arrays(
        pa.array(rng.integers(0, 3, n).astype(np.int32), mask=_mask(rng, n, 0.1)),
        pa.array(["red", "green", "blue"]),
    )
    dict8 = pa.DictionaryArray.from_arrays(
        pa.array(rng.integers(0, 4, n).astype(np.int8)), pa.array([10, 20, 30, 40], pa.int64())
    )
    table = pa.table(
        {
            "s": _strings(rng, n, p_null=0.1),
            "s_nonull": _strings(rng, n, 0, 30),
            "ls": _strings(rng, n, p_null=0.2, typ=pa.large_string()),
            "bin": _strings(rng, n, typ=pa.binary(), p_null=0.05),
            "lbin": _strings(rng, n, typ=pa.large_binary()),
            "long": _strings(rng, n, 200, 400),
            "low_card": low,
            "low_card_nonull": pa.array(words[rng.integers(0, 5, n)]),
            "arrow_dict": arrow_dict,
            "arrow_dict8": dict8,
            "all_null_s": pa.nulls(n, pa.string()),
            "all_null_i": pa.nulls(n, pa.int64()),
            "all_null_b": pa.nulls(n, pa.bool_()),
            "empty_strings": pa.array([""] * n),
        }
    )
    meta = {
        "s_zstd": {"lance-encoding:compression": "zstd"},
        "s_lz4": {"lance-encoding:compression": "lz4"},
        "s_fsst": {"lance-encoding:compression": "fsst"},
        "i_zstd": {"lance-encoding:compression": "zstd"},
    }
    extra = {
        "s_zstd": _strings(rng, n, 0, 50, p_null=0.1),
        "s_lz4": _strings(rng, n, 0, 50, typ=pa.large_string()),
        "s_fsst": _strings(rng, n, 0, 50, p_null=0.1),
        "i_zstd": pa.array(rng.integers(0, 1000, n)),
    }
    for name, arr in extra.items():
        table = table.append_column(pa.field(name, arr.type, metadata=meta[name]), arr)
    return table


def nested_table(n: int = N, seed: int = 2) -> pa.Table:
    rng = np.random.default_rng(seed)
    i32 = pa.array(rng.integers(-50, 50, 5 * n).astype(np.int32), mask=_mask(rng, 5 * n, 0.1))
    strs = _strings(rng, 5 * n, p_null=0.1)
    inner = _list(rng, pa.array(rng.integers(0, 9, 20 * n)), 5 * n, 0.1)
    st_type = pa.struct([("a", pa.int32()), ("b", pa.string())])
    st_items = pa.StructArray.from_arrays([i32, strs], fields=list(st_type))
    fsl = pa.FixedSizeListArray.from_arrays(
        pa.array(rng.standard_normal(8 * n).astype(np.float32)), 8
    )
    fsl_nulls = pa.FixedSizeListArray.from_arrays(
        pa.array(rng.standard_normal(4 * n).astype(np.float32)),
        4,
        mask=pa.array(_mask(rng, n, 0.2)),
    )
    fsl_fsl = pa.FixedSizeListArray.from_arrays(
        pa.FixedSizeListArray.from_arrays(
            pa.array(rng.integers(0, 100, 6 * n).astype(np.int16)), 2
        ),
        3,
    )
    small_fsl = pa.FixedSizeListArray.from_arrays(
        pa.array(rng.standard_normal(10 * n).astype(np.float32)), 2
    )
    struct = pa.StructArray.from_arrays(
        [
            pa.array(rng.integers(0, 10, n).astype(np.int32)),
            _strings(rng, n, p_null=0.2),
            pa.StructArray.from_arrays(
                [pa.array(rng.random(n)), _list(rng, i32, n, 0.1)], names=["x", "l"]
            ),
        ],
        names=["a", "s", "inner"],
    )
    packed_type = pa.struct([("x", pa.int32()), ("y", pa.float64()), ("z", pa.uint8())])
    packed = pa.StructArray.from_arrays(
        [
            pa.array(rng.integers(0, 1000, n).astype(np.int32)),
            pa.array(rng.random(n)),
            pa.array(rng.integers(0, 255, n).astype(np.uint8)),
        ],
        fields=list(packed_type),
    )
    blob_values = [
        None
        if i % 11 == 5
        else bytes(rng.integers(0, 256, int(rng.integers(0, 300)), dtype=np.uint8))
        for i in range(n)
    ]
    arrays = {
        "list_i32": _list(rng, i32, n, 0.2),
        "large_list_s": _list(rng, strs, n, 0.1, large=True),
        "list_list": _list(rng, inner, n, 0.1),
        "list_struct": _list(rng, st_items, n, 0.1),
        "list_fsl": _list(rng, small_fsl, n, 0.1),
        "list_all_null": pa.nulls(n, pa.list_(pa.int32())),
        "list_all_empty": pa.array([[]] * n, pa.list_(pa.int32())),
        "fsl": fsl,
        "fsl_nulls": fsl_nulls,
        "fsl_fsl": fsl_fsl,
        "struct": struct,
    }
    table = pa.table(arrays)
    table = table.append_column(
        pa.field("packed", packed_type, metadata={"lance-encoding:packed": "true"}), packed
    )
    table = table.append_column(
        pa.field("legacy_packed", packed_type, metadata={"packed": "true"}), packed
    )
    table = table.append_column(
        pa.field("blob", pa.large_binary(), metadata={"lance-encoding:blob": "true"}),
        pa.array(blob_values, pa.large_binary()),
    )
    return table


TABLES = {"basic": basic_table, "strings": strings_table, "nested": nested_table}
# (theme, batches, writer kwargs): one page per column, and many small pages
VARIANTS = {
    "one_page": (1, {}),
    "many_pages": (7, {"data_cache_bytes": 8192}),
}


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[tuple[str, str], tuple[pa.Table, Parsed]]:
    root = tmp_path_factory.mktemp("v20")
    out = {}
    for theme, make in TABLES.items():
        table = make()
        for variant, (batches, kwargs) in VARIANTS.items():
            path = write(root / f"{theme}_{variant}.lance", table, batches, **kwargs)
            out[(theme, variant)] = (table, parse_file(path))
    return out


CASES = [(t, v) for t in TABLES for v in VARIANTS]


def _names(parsed: Parsed) -> list[str]:
    return [f.name for f in parsed.schema.fields]


@pytest.mark.parametrize("case", CASES, ids=[f"{t}-{v}" for t, v in CASES])
def test_read_all_matches_pylance(files, case):
    table, parsed = files[case]
    ref = lance.file.LanceFileReader(parsed.path).read_all().to_table()
    assert parsed.num_rows == table.num_rows
    for name in _names(parsed):
        ours = parsed.decode(name, 0, parsed.num_rows)
        theirs = ref.column(name)
        assert same(ours, theirs), name
        # and pylance read back what was written (so the comparison is meaningful)
        assert same(ours, table.column(name)), name


@pytest.mark.parametrize("case", CASES, ids=[f"{t}-{v}" for t, v in CASES])
def test_read_range_matches_pylance(files, case):
    _table, parsed = files[case]
    n = parsed.num_rows
    rng = np.random.default_rng(7)
    ranges = [(0, 1), (n - 1, n), (1, 2), (17, 1500), (999, 1001)]
    ranges += [tuple(sorted(rng.integers(0, n + 1, 2))) for _ in range(3)]
    for name in _names(parsed):
        reader = lance.file.LanceFileReader(parsed.path, columns=[name])
        for a, b in ranges:
            ours = parsed.decode(name, int(a), int(b))
            if b == a:
                assert len(ours) == 0
                continue
            theirs = reader.read_range(int(a), int(b - a)).to_table().column(0)
            assert same(ours, theirs), (name, a, b)


@pytest.mark.parametrize("case", CASES, ids=[f"{t}-{v}" for t, v in CASES])
def test_take_matches_pylance(files, case):
    _table, parsed = files[case]
    n = parsed.num_rows
    rng = np.random.default_rng(11)
    idx = np.unique(np.concatenate([[0, n - 1], rng.choice(n, 60, replace=False)]))
    for name in _names(parsed):
        reader = lance.file.LanceFileReader(parsed.path, columns=[name])
        theirs = reader.take_rows(idx.tolist()).to_table().column(0)
        assert same(parsed.take(name, idx), theirs), name
        # any order, with repeats
        shuffled = rng.permutation(np.concatenate([idx, idx[:5]]))
        expect = theirs.take(pa.array(np.searchsorted(idx, shuffled)))
        assert same(parsed.take(name, shuffled), expect), name


def test_variants_exercise_the_encodings(files):
    """Guard the fixtures: the encodings the tests are meant to cover are really there."""
    _t, p = files[("strings", "one_page")]
    assert p.encoding("low_card").WhichOneof("array_encoding") == "dictionary"
    assert (
        p.encoding("arrow_dict").dictionary.indices.nullable.no_nulls.values.flat.bits_per_value
        == 32
    )
    assert p.encoding("s_zstd").binary.bytes.flat.compression.scheme == "zstd"
    assert p.encoding("s_lz4").binary.bytes.flat.compression.scheme == "lz4"
    assert p.encoding("s_fsst").WhichOneof("array_encoding") == "fsst"
    assert p.encoding("s").binary.null_adjustment > 0
    _t, p = files[("nested", "one_page")]
    assert p.encoding("packed").WhichOneof("array_encoding") == "packed_struct"
    assert p.encoding("legacy_packed").WhichOneof("array_encoding") == "packed_struct"
    blob_col = p.raw[p.column_index[p.field("blob").id]]
    col_enc = any_pb2.Any()
    col_enc.ParseFromString(blob_col.encoding.direct.encoding)
    parsed_col = encodings_v2_0_pb2.ColumnEncoding()
    parsed_col.ParseFromString(col_enc.value)
    assert parsed_col.WhichOneof("column_encoding") == "blob"
    assert p.encoding("fsl_nulls").nullable.WhichOneof("nullability") == "some_nulls"
    _t, p = files[("nested", "many_pages")]
    assert p.num_pages("list_i32") > 3 and p.num_pages("list_i32.item") > 3
    assert p.num_pages("list_list.item.item") > 3
    _t, p = files[("basic", "many_pages")]
    assert p.num_pages("i64") > 3


def test_struct_children_and_list_items_by_path(files):
    """Children of structs and list items decode on their own column too."""
    table, p = files[("nested", "many_pages")]
    ref = table.column("struct").combine_chunks()
    got = decode_v20_field(
        p.field("struct.inner.l"), p.column_index, p.columns, p.read_ranges, 100, 2000
    )
    assert got.equals(ref.field("inner").field("l").slice(100, 1900))


# -- big multi-page file -------------------------------------------------------------------


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> tuple[pa.Table, Parsed]:
    n = 250_000
    rng = np.random.default_rng(5)
    words = np.array([f"w{i}" for i in range(20)])
    table = pa.table(
        {
            "id": pa.array(np.arange(n, dtype=np.int64)),
            "val": pa.array(rng.standard_normal(n), mask=_mask(rng, n, 0.05)),
            "cat": pa.array(words[rng.integers(0, 20, n)]),
            "txt": pa.array([f"row-{i}" for i in range(n)]),
            "lst": _list(
                rng, pa.array(rng.integers(0, 100, 3 * n).astype(np.int32)), n, 0.1, max_len=2
            ),
        }
    )
    path = write(
        tmp_path_factory.mktemp("big") / "big.lance", table, batches=5, data_cache_bytes=1 << 18
    )
    return table, parse_file(path)


def test_big_file_multi_page(big):
    table, p = big
    assert p.num_rows == 250_000
    assert p.num_pages("id") > 1 and p.num_pages("txt") > 1
    ref = lance.file.LanceFileReader(p.path).read_all().to_table()
    for name in _names(p):
        assert same(p.decode(name, 0, p.num_rows), ref.column(name)), name
    # a range across page boundaries
    starts = np.cumsum([pg.length for pg in p.raw[p.column_index[p.field("id").id]].pages])
    a, b = int(starts[0]) - 10, int(starts[1]) + 10
    for name in _names(p):
        theirs = lance.file.LanceFileReader(p.path, columns=[name]).read_range(a, b - a)
        assert same(p.decode(name, a, b), theirs.to_table().column(0)), name


def test_small_range_reads_only_its_bytes(big):
    """A few rows of a flat column read a few bytes, not the page."""
    _table, p = big
    p.requests.clear()
    got = p.decode("id", 123_456, 123_460)
    assert got.to_pylist() == [123_456, 123_457, 123_458, 123_459]
    assert sum(size for _, size in p.requests) <= 64
    p.requests.clear()
    p.decode("txt", 200_000, 200_003)
    assert sum(size for _, size in p.requests) <= 256
    p.requests.clear()
    idx = np.array([5, 100_000, 249_999])
    assert p.take("id", idx).to_pylist() == idx.tolist()
    assert sum(size for _, size in p.requests) <= 3 * 64


def test_big_take(big):
    table, p = big
    rng = np.random.default_rng(3)
    idx = np.sort(rng.choice(p.num_rows, 500, replace=False))
    for name in _names(p):
        theirs = lance.file.LanceFileReader(p.path, columns=[name]).take_rows(idx.tolist())
        assert same(p.take(name, idx), theirs.to_table().column(0)), name


# -- errors --------------------------------------------------------------------------------


def test_out_of_range_rows(files):
    _t, p = files[("basic", "one_page")]
    with pytest.raises(InvalidArgumentError):
        p.decode("i32", 0, p.num_rows + 1)
    with pytest.raises(InvalidArgumentError):
        p.take("i32", [p.num_rows])
    assert len(p.decode("i32", 5, 5)) == 0
    assert len(p.take("i32", [])) == 0


def _corrupt_sizes(p: Parsed, name: str, factor: float) -> Parsed:
    """A copy whose pages of ``name`` claim smaller buffers than the encoding needs."""
    columns = [file2_pb2.ColumnMetadata.FromString(c.SerializeToString()) for c in p.raw]
    col = columns[p.column_index[p.field(name).id]]
    for page in col.pages:
        sizes = [int(s * factor) for s in page.buffer_sizes]
        del page.buffer_sizes[:]
        page.buffer_sizes.extend(sizes)
    return Parsed(p.path, p.data, p.schema, columns, p.column_index, p.num_rows, [])


@pytest.mark.parametrize("name", ["i32", "i32_nulls", "bool_nulls", "dec128", "nul", "uuid"])
def test_truncated_buffers_are_corrupt_errors_basic(files, name):
    _t, p = files[("basic", "one_page")]
    bad = _corrupt_sizes(p, name, 0.5)
    if name == "nul":
        assert len(bad.decode(name, 0, p.num_rows)) == p.num_rows
        return
    with pytest.raises(CorruptFileError):
        bad.decode(name, 0, p.num_rows)


@pytest.mark.parametrize(
    "theme, name",
    [
        ("strings", "s"),
        ("strings", "low_card"),
        ("strings", "s_zstd"),
        ("strings", "s_lz4"),
        ("strings", "s_fsst"),
        ("strings", "arrow_dict"),
        ("nested", "list_i32"),
        ("nested", "packed"),
        ("nested", "fsl_nulls"),
    ],
)
def test_truncated_buffers_are_corrupt_errors(files, theme, name):
    _t, p = files[(theme, "one_page")]
    bad = _corrupt_sizes(p, name, 0.5)
    with pytest.raises(LanceError):
        bad.decode(name, 0, p.num_rows)


def test_garbage_offsets_are_corrupt_errors(files):
    """Rewrite the first Binary end offset of a string column to something huge."""
    _t, p = files[("strings", "one_page")]
    enc = p.encoding("s_nonull")
    col = p.raw[p.column_index[p.field("s_nonull").id]]
    buf = enc.binary.indices.nullable.no_nulls.values.flat.buffer.buffer_index
    pos = col.pages[0].buffer_offsets[buf]
    data = bytearray(p.data)
    data[pos : pos + 8] = (2**62).to_bytes(8, "little")
    bad = Parsed(p.path, bytes(data), p.schema, p.raw, p.column_index, p.num_rows, [])
    with pytest.raises(CorruptFileError):
        bad.decode("s_nonull", 0, p.num_rows)


def test_missing_column_is_corrupt(files):
    _t, p = files[("basic", "one_page")]
    f = p.field("i32")
    with pytest.raises(CorruptFileError):
        decode_v20_field(f, {}, p.columns, p.read_ranges, 0, 1)


def test_column_mapping_matches_manifest(tmp_path):
    """``v20_column_fields`` gives the columns pylance records in ``DataFile.column_indices``:
    every field has one, except the children of a packed struct."""
    from fixtures import read_manifest

    table = nested_table(500).select(["list_struct", "struct", "packed", "blob", "fsl"])
    ds = lance.write_dataset(table, str(tmp_path / "ds"), data_storage_version="2.0")
    manifest = read_manifest(str(tmp_path / "ds"))
    (fragment,) = manifest.fragments
    (data_file,) = fragment.files
    p = parse_file(str(tmp_path / "ds" / "data" / data_file.path))
    assert dict(zip(data_file.fields, data_file.column_indices, strict=True)) == p.column_index
    packed_children = {c.id for c in p.field("packed").children}
    assert packed_children and not packed_children & set(data_file.fields)
    ref = ds.to_table()
    for name in ["list_struct", "struct", "packed", "fsl"]:
        assert same(p.decode(name, 0, 500), ref.column(name)), name
    assert same(p.decode("blob", 0, 500), table.column("blob"))


@pytest.mark.parametrize("where", ["offset", "size"])
def test_page_buffer_outside_the_file_is_corrupt(files, tmp_path, where):
    """A 2.0 page whose buffer lies past the end of the file: the one column-metadata parser
    checks it against the file size, so opening the file is a CorruptFileError."""
    from lance_format import LanceFileReader
    from lance_format.container.footer import encode_tail
    from lance_format.version import LanceFileVersion

    _t, p = files[("basic", "one_page")]
    raw = [file2_pb2.ColumnMetadata.FromString(c.SerializeToString()) for c in p.raw]
    page = raw[p.column_index[p.field("i32").id]].pages[0]
    if where == "offset":
        page.buffer_offsets[0] = len(p.data) + 64
    else:
        page.buffer_sizes[0] = len(p.data)
    # rebuild the tail around the altered column metadata (the data bytes are unchanged)
    _cm, _cmo, gbo_start, n_gb, *_ = struct.unpack("<QQQIIHH", p.data[-40:-4])
    gbs = [struct.unpack_from("<QQ", p.data, gbo_start + 16 * i) for i in range(n_gb)]
    start = gbs[0][0]
    tail = encode_tail(
        start,
        [p.data[pos : pos + size] for pos, size in gbs],
        [c.SerializeToString() for c in raw],
        LanceFileVersion.V2_0,
    )
    path = tmp_path / "oob.lance"
    path.write_bytes(p.data[:start] + tail)
    with pytest.raises(CorruptFileError, match="outside the file"):
        LanceFileReader(str(path)).read_all()
    col = p.column_index[p.field("i32").id]
    with pytest.raises(CorruptFileError, match="outside the file"):
        parse_column(raw[col].SerializeToString(), col, len(p.data))
