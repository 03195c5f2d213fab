"""Lance data files written by pylance at test time: the corpus every reader test runs on.

The files are grouped by *theme* (primitives, strings, lists, ...) and written once per file
version, so a failing test id such as ``lists-2.1`` points at what broke.  Everything is
seeded, so a failure reproduces.

pylance refuses some type/version combinations.  Those are not skipped silently: each column
carries a :class:`Refusal` per version it cannot be written in, with the reason and the
error text pylance gives, and ``test_file_reader.py::test_pylance_refuses`` checks that
pylance still refuses it (so the exclusion list cannot go stale).

pylance is the oracle, so it may be imported here (tests/ only).
"""

from __future__ import annotations

import glob
import os
import shutil
import struct
import time
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property

import lance
import lance.file
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

VERSIONS: tuple[str, ...] = ("2.0", "2.1", "2.2")
ALL = VERSIONS

# --------------------------------------------------------------------------------------------
# Spec types
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Refusal:
    """Why pylance will not write a column in one version, and the error text proving it."""

    reason: str
    match: str  # a substring of pylance's error message


@dataclass(frozen=True)
class Column:
    name: str
    make: Callable[[int, np.random.Generator], pa.Array]
    metadata: Mapping[str, str] | None = None
    refused: Mapping[str, Refusal] = field(default_factory=dict)

    def field_for(self, arr: pa.Array) -> pa.Field:
        return pa.field(self.name, arr.type, metadata=dict(self.metadata or {}) or None)


@dataclass(frozen=True)
class Theme:
    name: str
    columns: tuple[Column, ...]
    num_rows: int = 5000
    # Rows per write_batch call (None: one batch).  Several batches give several pages.
    batch_rows: int | None = None
    writer_options: Mapping[str, object] = field(default_factory=dict)
    doc: str = ""

    def columns_for(self, version: str) -> tuple[Column, ...]:
        return tuple(c for c in self.columns if version not in c.refused)


# --------------------------------------------------------------------------------------------
# Refusals (pylance 14.0.2), shared by several columns
# --------------------------------------------------------------------------------------------

STRUCT_VALIDITY_20 = Refusal(
    "2.0 has no struct validity: a struct (or packed struct) with null rows is rejected",
    "does not encode struct validity",
)
MAP_20 = Refusal("2.0 has no map encoding", "has no field encoding")
MAP_21 = Refusal("map is a 2.2 feature", "Map data type is not enabled")
VARPACKED_21 = Refusal(
    "a packed struct with a variable-width child or with null children needs "
    "VariablePackedStruct, which is 2.2 only",
    "Variable packed struct encoding is not enabled",
)
PACKED_STR_20 = Refusal(
    "the 2.0 packed-struct encoder handles fixed-width, non-null children only",
    "only implemented for fixed-width",
)
PACKED_CHILD_NULLS_22 = Refusal(
    "a packed struct whose children have nulls (struct-level nulls are fine)",
    "Per-value compression not yet supported for block type Nullable",
)
VIEW_20 = Refusal(
    "2.0 cannot encode Arrow view types (2.1/2.2 store them as string/binary)",
    "Cannot encode a data block of type VariableWidth",
)
FSL_VARWIDTH = Refusal(
    "pylance panics writing a fixed-size list of variable-width items (any version)",
    "compute_stat should only be called once",
)
PACKED_BOOL_20 = Refusal(
    "a packed struct cannot hold a bool (1-bit) child", "only supports full-byte buffers"
)
PACKED_BOOL_21 = Refusal(
    "a packed struct cannot hold a bool (1-bit) child", "must be positive byte widths"
)
UNSUPPORTED_TYPE = Refusal("no Lance logical type exists for it", "Unsupported data type")

# --------------------------------------------------------------------------------------------
# Value builders (vectorised; every builder is f(n, rng) -> pa.Array)
# --------------------------------------------------------------------------------------------


def _mask(rng: np.random.Generator, n: int, p: float) -> np.ndarray | None:
    """A null mask (True = null) with probability p, or None for p == 0."""
    return (rng.random(n) < p) if p > 0 else None


def ints(dtype: str, p_null: float = 0.0, lo: int | None = None, hi: int | None = None):
    def make(n: int, rng: np.random.Generator) -> pa.Array:
        info = np.iinfo(dtype)
        a = rng.integers(
            info.min if lo is None else lo,
            info.max if hi is None else hi,
            n,
            dtype=dtype,
            endpoint=True,
        )
        return pa.array(a, mask=_mask(rng, n, p_null))

    return make


def floats(dtype: str, p_null: float = 0.0):
    def make(n: int, rng: np.random.Generator) -> pa.Array:
        a = (rng.standard_normal(n) * 1000).astype(dtype)
        a[: min(n, 3)] = [np.inf, -np.inf, -0.0][
            : min(n, 3)
        ]  # no NaN: Table.equals treats NaN != NaN
        return pa.array(a, mask=_mask(rng, n, p_null))

    return make


def bools(p_null: float = 0.0):
    def make(n: int, rng: np.random.Generator) -> pa.Array:
        return pa.array(rng.random(n) < 0.5, mask=_mask(rng, n, p_null))

    return make


def typed_ints(typ: pa.DataType, lo: int, hi: int, p_null: float = 0.0, np_dtype: str = "int64"):
    """Integers in [lo, hi] cast (without checks) to a temporal/decimal-free Arrow type."""

    def make(n: int, rng: np.random.Generator) -> pa.Array:
        a = rng.integers(lo, hi, n, dtype=np_dtype, endpoint=True)
        return pa.array(a, mask=_mask(rng, n, p_null)).cast(typ)

    return make


def decimals(typ: pa.DataType, p_null: float = 0.1):
    def make(n: int, rng: np.random.Generator) -> pa.Array:
        # Unscaled values built from two int64 halves: covers > 64-bit magnitudes.
        hi = rng.integers(-(10**8), 10**8, n)
        lo = rng.integers(0, 10**9, n)
        sign = np.where(rng.random(n) < 0.5, -1, 1)
        unscaled = [int(h) * 10**9 + int(lo_) for h, lo_ in zip(hi, lo, strict=True)]
        if typ.precision < 19:
            unscaled = [u % 10 ** (typ.precision - 1) for u in unscaled]
        import decimal

        ctx = decimal.Context(prec=80)
        vals = [
            ctx.scaleb(decimal.Decimal(int(s) * u), -typ.scale)
            for s, u in zip(sign, unscaled, strict=True)
        ]
        m = _mask(rng, n, p_null)
        return pa.array(vals, type=typ, mask=m)

    return make


def _ascii_bytes(rng: np.random.Generator, total: int) -> np.ndarray:
    return rng.integers(97, 123, total, dtype=np.uint8)


def var_strings(
    min_len: int,
    max_len: int,
    p_null: float = 0.0,
    typ: pa.DataType | None = None,
    alphabet: str = "ascii",
):
    """Random strings/binaries with lengths in [min_len, max_len] (built from buffers)."""
    typ = typ or pa.string()

    def make(n: int, rng: np.random.Generator) -> pa.Array:
        lens = rng.integers(min_len, max_len, n, endpoint=True)
        if alphabet == "bytes":
            data = rng.integers(0, 256, int(lens.sum()), dtype=np.uint8)
        else:
            data = _ascii_bytes(rng, int(lens.sum()))
        large = typ in (pa.large_string(), pa.large_binary())
        off_t = np.int64 if large else np.int32
        offsets = np.zeros(n + 1, dtype=off_t)
        np.cumsum(lens, out=offsets[1:])
        validity = None
        m = _mask(rng, n, p_null)
        if m is not None:
            validity = pa.array(~m).buffers()[1]
        base = pa.binary() if typ in (pa.binary(), pa.string()) else pa.large_binary()
        arr = pa.Array.from_buffers(
            base,
            n,
            [validity, pa.py_buffer(offsets.tobytes()), pa.py_buffer(data.tobytes())],
            null_count=-1,
        )
        return arr.cast(typ) if typ != base else arr

    return make


def words(k: int, p_null: float = 0.0, typ: pa.DataType | None = None, min_len: int = 3):
    """Strings drawn from a vocabulary of k words (low cardinality when k is small)."""

    def make(n: int, rng: np.random.Generator) -> pa.Array:
        vocab = var_strings(min_len, 12)(k, rng)
        taken = vocab.take(pa.array(rng.integers(0, k, n))).cast(typ or pa.string())
        m = _mask(rng, n, p_null)
        return taken if m is None else pc.if_else(pa.array(m), pa.nulls(n, taken.type), taken)

    return make


def unicode_strings(p_null: float = 0.1):
    pool = ["é", "ß", "東京", "🙂", "ascii", "", "Ω≈ç√", "naïve", "\u0000nul"]

    def make(n: int, rng: np.random.Generator) -> pa.Array:
        a = np.array(pool, dtype=object)[rng.integers(0, len(pool), n)]
        return pa.array(a.tolist(), pa.string(), mask=_mask(rng, n, p_null))

    return make


def fixed_binary(width: int, distinct: int | None = None, p_null: float = 0.0):
    def make(n: int, rng: np.random.Generator) -> pa.Array:
        if distinct is None:
            data = rng.integers(0, 256, n * width, dtype=np.uint8)
        else:
            pool = rng.integers(0, 256, (distinct, width), dtype=np.uint8)
            data = pool[rng.integers(0, distinct, n)].reshape(-1)
        m = _mask(rng, n, p_null)
        validity = pa.array(~m).buffers()[1] if m is not None else None
        return pa.Array.from_buffers(
            pa.binary(width), n, [validity, pa.py_buffer(data.tobytes())], null_count=-1
        )

    return make


def constant(value: object, typ: pa.DataType, p_null: float = 0.0):
    def make(n: int, rng: np.random.Generator) -> pa.Array:
        return pa.array([value] * n, typ, mask=_mask(rng, n, p_null))

    return make


def all_null(typ: pa.DataType):
    def make(n: int, rng: np.random.Generator) -> pa.Array:
        return pa.nulls(n, typ)

    return make


def list_of(
    child: Callable[[int, np.random.Generator], pa.Array],
    max_len: int = 4,
    p_null: float = 0.1,
    p_empty: float = 0.1,
    large: bool = False,
    min_len: int = 0,
    garbage_under_nulls: bool = False,
):
    """list<child> with null and empty lists.  With garbage_under_nulls, null lists still
    cover child values (legal Arrow that a writer must drop)."""

    def make(n: int, rng: np.random.Generator) -> pa.Array:
        lens = rng.integers(max(min_len, 1) if p_empty else min_len, max_len, n, endpoint=True)
        nulls = _mask(rng, n, p_null)
        if p_empty:
            lens[rng.random(n) < p_empty] = 0
        if nulls is not None and not garbage_under_nulls:
            lens[nulls] = 0
        off_t = np.int64 if large else np.int32
        offsets = np.zeros(n + 1, dtype=off_t)
        np.cumsum(lens, out=offsets[1:])
        values = child(int(offsets[-1]), rng)
        cls = pa.LargeListArray if large else pa.ListArray
        return cls.from_arrays(
            pa.array(offsets), values, mask=pa.array(nulls) if nulls is not None else None
        )

    return make


def fsl_of(child: Callable[[int, np.random.Generator], pa.Array], size: int, p_null: float = 0.0):
    def make(n: int, rng: np.random.Generator) -> pa.Array:
        values = child(n * size, rng)
        m = _mask(rng, n, p_null)
        return pa.FixedSizeListArray.from_arrays(
            values, size, mask=pa.array(m) if m is not None else None
        )

    return make


def struct_of(p_null: float = 0.0, **children: Callable[[int, np.random.Generator], pa.Array]):
    def make(n: int, rng: np.random.Generator) -> pa.Array:
        arrays = [mk(n, rng) for mk in children.values()]
        m = _mask(rng, n, p_null)
        return pa.StructArray.from_arrays(
            arrays, names=list(children), mask=pa.array(m) if m is not None else None
        )

    return make


def map_of(keys, values, max_len: int = 3, p_null: float = 0.1, p_empty: float = 0.1):
    def make(n: int, rng: np.random.Generator) -> pa.Array:
        lens = rng.integers(1, max_len, n, endpoint=True)
        lens[rng.random(n) < p_empty] = 0
        nulls = _mask(rng, n, p_null)
        if nulls is not None:
            lens[nulls] = 0
        offsets = np.zeros(n + 1, dtype=np.int32)
        np.cumsum(lens, out=offsets[1:])
        total = int(offsets[-1])
        return pa.MapArray.from_arrays(
            pa.array(offsets),
            keys(total, rng),
            values(total, rng),
            mask=pa.array(nulls) if nulls is not None else None,
        )

    return make


def dictionary(
    index_type: pa.DataType, values: pa.Array, p_null: float = 0.1, use: int | None = None
):
    """An Arrow dictionary array; ``use`` limits indices to the first entries (unused tail)."""

    def make(n: int, rng: np.random.Generator) -> pa.Array:
        hi = (use or len(values)) - 1
        idx = pa.array(rng.integers(0, hi, n, endpoint=True), mask=_mask(rng, n, p_null))
        return pa.DictionaryArray.from_arrays(idx.cast(index_type), values)

    return make


def runs(run_len: int, typ: pa.DataType | None = None, start: int = 0):
    def make(n: int, rng: np.random.Generator) -> pa.Array:
        return pa.array(start + np.arange(n) // run_len).cast(typ or pa.int64())

    return make


def sequence(typ: pa.DataType | None = None):
    def make(n: int, rng: np.random.Generator) -> pa.Array:
        return pa.array(np.arange(n)).cast(typ or pa.int64())

    return make


def null_page_every(inner, every: int, width: int):
    """A nullable column whose rows [k*every, k*every+width) are all null: all-null pages
    when the writer cuts pages per batch."""

    def make(n: int, rng: np.random.Generator) -> pa.Array:
        arr = inner(n, rng)
        pos = np.arange(n)
        m = (pos % every) < width
        return pc.if_else(pa.array(m), pa.nulls(n, arr.type), arr)

    return make


def blobs(n_template: list[int | None]):
    """Blob payloads: sizes from the template (None = null), cycled over the rows."""

    def make(n: int, rng: np.random.Generator) -> pa.Array:
        cache: dict[int, bytes] = {}
        out: list[bytes | None] = []
        for i in range(n):
            size = n_template[i % len(n_template)]
            if size is None:
                out.append(None)
                continue
            if size not in cache:
                cache[size] = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
            out.append(cache[size])
        return pa.array(out, pa.large_binary())

    return make


# --------------------------------------------------------------------------------------------
# Themes
# --------------------------------------------------------------------------------------------

_F32 = floats("float32")
_I32 = ints("int32", lo=-1000, hi=1000)
_I32N = ints("int32", p_null=0.2, lo=-1000, hi=1000)

PRIMITIVES = Theme(
    "primitives",
    doc="every fixed-width Arrow type pylance accepts, with and without nulls",
    batch_rows=2500,
    columns=(
        *(Column(t, ints(t)) for t in ["int8", "int16", "int32", "int64"]),
        *(Column(t, ints(t)) for t in ["uint8", "uint16", "uint32", "uint64"]),
        Column("int8_nulls", ints("int8", p_null=0.3)),
        Column("int64_nulls", ints("int64", p_null=0.05)),
        Column("uint32_nulls", ints("uint32", p_null=0.5)),
        Column("negative_small", ints("int32", lo=-8, hi=-1)),
        Column("float16", floats("float16")),
        Column("float32", floats("float32")),
        Column("float64", floats("float64")),
        Column("float32_nulls", floats("float32", p_null=0.2)),
        Column("float64_nulls", floats("float64", p_null=0.9)),
        Column("bool", bools()),
        Column("bool_nulls", bools(p_null=0.3)),
        Column("date32", typed_ints(pa.date32(), -40000, 40000, np_dtype="int32")),
        Column("date64", typed_ints(pa.date64(), -(10**12), 10**12, p_null=0.1)),
        Column("time32_s", typed_ints(pa.time32("s"), 0, 86399, np_dtype="int32")),
        Column("time32_ms", typed_ints(pa.time32("ms"), 0, 86399999, 0.1, "int32")),
        Column("time64_us", typed_ints(pa.time64("us"), 0, 86399999999)),
        Column("time64_ns", typed_ints(pa.time64("ns"), 0, 86399999999999, 0.1)),
        *(
            Column(f"ts_{u}", typed_ints(pa.timestamp(u), -(10**15), 10**15))
            for u in ["s", "ms", "us", "ns"]
        ),
        Column("ts_s_utc", typed_ints(pa.timestamp("s", "UTC"), 0, 10**10)),
        Column("ts_ms_ny", typed_ints(pa.timestamp("ms", "America/New_York"), 0, 10**13, 0.1)),
        Column("ts_us_utc", typed_ints(pa.timestamp("us", "UTC"), 0, 10**16, 0.2)),
        Column("ts_ns_offset", typed_ints(pa.timestamp("ns", "+05:30"), 0, 10**18)),
        *(
            Column(f"dur_{u}", typed_ints(pa.duration(u), -(10**12), 10**12, 0.05))
            for u in ["s", "ms", "us", "ns"]
        ),
        Column("decimal128_10_2", decimals(pa.decimal128(10, 2))),
        Column("decimal128_38_10", decimals(pa.decimal128(38, 10), p_null=0.0)),
        Column("decimal256_40_5", decimals(pa.decimal256(40, 5))),
        Column("decimal256_76_20", decimals(pa.decimal256(76, 20), p_null=0.3)),
    ),
)

STRINGS = Theme(
    "strings",
    doc="variable-width and fixed-size binary: short (mini-block, FSST), long (full-zip), views",
    batch_rows=2500,
    columns=(
        Column("string", var_strings(5, 15)),
        Column("string_nulls", var_strings(0, 12, p_null=0.2)),
        Column("string_empty_values", var_strings(0, 1, p_null=0.1)),
        Column("large_string", var_strings(5, 15, typ=pa.large_string())),
        Column("large_string_nulls", var_strings(0, 20, p_null=0.3, typ=pa.large_string())),
        Column("binary", var_strings(1, 20, typ=pa.binary(), alphabet="bytes")),
        Column("binary_nulls", var_strings(0, 20, 0.2, pa.binary(), "bytes")),
        Column("large_binary", var_strings(0, 30, 0.1, pa.large_binary(), "bytes")),
        Column("unicode", unicode_strings()),
        Column("long_string", var_strings(300, 350)),
        Column("long_string_nulls", var_strings(257, 2000, p_null=0.25)),
        Column("long_large_binary", var_strings(200, 600, 0.1, pa.large_binary(), "bytes")),
        Column("mixed_short_long", var_strings(0, 400, p_null=0.05)),
        Column("fsb16", fixed_binary(16)),
        Column("fsb3_nulls", fixed_binary(3, p_null=0.2)),
        Column("fsb16_low_card", fixed_binary(16, distinct=256)),
        Column("null_type", all_null(pa.null())),
        Column(
            "string_view",
            lambda n, rng: var_strings(0, 20, 0.1)(n, rng).cast(pa.string_view()),
            refused={"2.0": VIEW_20},
        ),
        Column(
            "binary_view",
            lambda n, rng: var_strings(0, 20, 0.1, pa.binary())(n, rng).cast(pa.binary_view()),
            refused={"2.0": VIEW_20},
        ),
    ),
)

ENCODINGS = Theme(
    "encodings",
    doc="columns that steer pylance's encoders: dictionary, constant, RLE, bitpacking, general "
    "compression, BSS, all-null",
    batch_rows=3000,
    num_rows=6000,
    columns=(
        Column(
            "low_card_int64",
            lambda n, rng: pa.array(
                (rng.integers(0, 10, n) * 1_000_000_007 + 123456789).astype(np.int64)
            ),
        ),
        Column("low_card_string", words(4)),
        Column("low_card_string_nulls", words(3, p_null=0.2)),
        Column("const_int32", constant(7, pa.int32())),
        Column("const_int32_nulls", constant(42, pa.int32(), p_null=0.2)),
        Column("const_string", constant("constant", pa.string())),
        Column("const_string_nulls", constant("same", pa.string(), p_null=0.3)),
        Column("const_large_string", constant("big-constant", pa.large_string())),
        Column("const_fsb", constant(b"0123456789abcdef", pa.binary(16))),
        Column("const_float64", constant(2.5, pa.float64())),
        Column("const_bool", constant(True, pa.bool_())),
        Column("const_decimal256", constant(12345, pa.decimal256(40, 2))),
        Column("const_long_string", constant("x" * 300, pa.string())),
        Column("sorted_runs_int64", runs(100)),
        Column(
            "sorted_runs_string",
            lambda n, rng: pa.array(np.char.add("run-", (np.arange(n) // 250).astype(str))),
        ),
        Column("int32_0_15", ints("int32", lo=0, hi=15)),
        Column("uint8_0_7", ints("uint8", lo=0, hi=7)),
        Column("int64_sequence", sequence()),
        Column("int16_small_nulls", ints("int16", p_null=0.1, lo=0, hi=100)),
        Column("all_null_int32", all_null(pa.int32())),
        Column("all_null_string", all_null(pa.string())),
        Column("all_null_float64", all_null(pa.float64())),
        Column("all_null_bool", all_null(pa.bool_())),
        Column("all_null_fsb", all_null(pa.binary(8))),
        Column(
            "zstd_int64",
            ints("int64", lo=0, hi=999),
            metadata={"lance-encoding:compression": "zstd"},
        ),
        Column(
            "zstd9_string",
            var_strings(5, 30),
            metadata={
                "lance-encoding:compression": "zstd",
                "lance-encoding:compression-level": "9",
            },
        ),
        Column(
            "zstd_long_string",
            var_strings(300, 500, p_null=0.1),
            metadata={"lance-encoding:compression": "zstd"},
        ),
        Column(
            "lz4_string",
            var_strings(5, 30, p_null=0.1),
            metadata={"lance-encoding:compression": "lz4"},
        ),
        Column(
            "lz4_int32",
            ints("int32", lo=0, hi=5000),
            metadata={"lance-encoding:compression": "lz4"},
        ),
        Column(
            "zstd_bss_float64",
            floats("float64", p_null=0.05),
            metadata={"lance-encoding:compression": "zstd", "lance-encoding:bss": "on"},
        ),
        Column(
            "zstd_bss_float32",
            floats("float32"),
            metadata={"lance-encoding:compression": "zstd", "lance-encoding:bss": "auto"},
        ),
        Column("bss_only_float32", floats("float32"), metadata={"lance-encoding:bss": "on"}),
        Column(
            "rle_runs_int32",
            runs(500, pa.int32()),
            metadata={"lance-encoding:rle-threshold": "0.9"},
        ),
        Column(
            "rle_runs_nulls",
            lambda n, rng: pc.if_else(
                pa.array((np.arange(n) // 300) % 3 == 0),
                pa.nulls(n, pa.int16()),
                runs(300, pa.int16())(n, rng),
            ),
            metadata={"lance-encoding:rle-threshold": "0.9"},
        ),
        Column(
            "dict_divisor_string",
            words(200, p_null=0.05),
            metadata={"lance-encoding:dict-divisor": "2"},
        ),
        Column(
            "zstd_list_int32",
            list_of(ints("int32", lo=0, hi=100)),
            metadata={"lance-encoding:compression": "zstd"},
        ),
    ),
)

VECTORS = Theme(
    "vectors",
    doc="fixed-size lists: wide (full-zip) and narrow (mini-block), null rows and null items",
    num_rows=3000,
    batch_rows=1000,
    columns=(
        Column("vec128", fsl_of(_F32, 128)),
        Column("vec128_nulls", fsl_of(_F32, 128, p_null=0.1)),
        Column("vec128_null_items", fsl_of(floats("float32", p_null=0.05), 128)),
        Column("vec16_nullable", fsl_of(_F32, 16, p_null=0.2)),
        Column("vec8_null_items", fsl_of(floats("float32", p_null=0.2), 8)),
        Column("vec8_null_items_rows", fsl_of(floats("float32", p_null=0.2), 8, p_null=0.1)),
        Column("vec4_f16", fsl_of(floats("float16"), 4)),
        Column("vec3_bool", fsl_of(bools(), 3, p_null=0.1)),
        Column("vec2_int64", fsl_of(ints("int64"), 2)),
        Column("vec_uint8_32", fsl_of(ints("uint8"), 32)),
        Column("fsl_fsl", fsl_of(fsl_of(_I32N, 2, p_null=0.1), 3, p_null=0.1)),
        Column("list_fsl4", list_of(fsl_of(_F32, 4), max_len=3)),
        Column("list_fsl4_nulls", list_of(fsl_of(_F32, 4, p_null=0.2), max_len=3, p_null=0.2)),
        Column("all_null_vec", all_null(pa.list_(pa.float32(), 16))),
        Column(
            "fsl_string",
            fsl_of(var_strings(1, 5), 2),
            refused={v: FSL_VARWIDTH for v in VERSIONS},
        ),
        Column(
            "list_fsl_string",
            list_of(fsl_of(var_strings(1, 5), 2)),
            refused={v: FSL_VARWIDTH for v in VERSIONS},
        ),
    ),
)

LISTS = Theme(
    "lists",
    doc="variable-length lists: nulls and empties at every level, nesting, long-string items",
    batch_rows=2500,
    columns=(
        Column("list_int32", list_of(_I32, p_null=0.1, p_empty=0.1)),
        Column("list_int32_no_nulls", list_of(_I32, p_null=0.0, p_empty=0.2)),
        Column("list_int32_dense", list_of(_I32, p_null=0.0, p_empty=0.0, min_len=1)),
        Column("list_int32_null_items", list_of(_I32N, p_null=0.1, p_empty=0.1)),
        Column("list_garbage_under_nulls", list_of(_I32, p_null=0.3, garbage_under_nulls=True)),
        Column("large_list_int64", list_of(ints("int64", lo=0, hi=3), large=True)),
        Column("large_list_string", list_of(var_strings(0, 8, 0.1), large=True, p_null=0.05)),
        Column("list_list_int32", list_of(list_of(_I32N, 3, 0.1, 0.1), 3, 0.1, 0.1)),
        Column(
            "list_list_list",
            list_of(list_of(list_of(_I32, 2, 0.1, 0.1), 2, 0.1, 0.1), 2, 0.1, 0.1),
        ),
        Column(
            "list_struct",
            list_of(struct_of(a=_I32, b=words(4, p_null=0.2)), p_null=0.1, p_empty=0.1),
        ),
        Column(
            "list_struct_nulls",
            list_of(struct_of(p_null=0.2, a=_I32N, b=var_strings(0, 6, 0.1))),
            refused={"2.0": STRUCT_VALIDITY_20},
        ),
        Column("list_string_low_card", list_of(words(3))),
        Column("list_string", list_of(var_strings(0, 10, p_null=0.1), p_null=0.1)),
        Column("list_long_string", list_of(var_strings(230, 400, p_null=0.05), 3, 0.1, 0.1)),
        Column("list_bool", list_of(bools(0.1))),
        Column("list_float64", list_of(floats("float64", 0.1), max_len=6)),
        Column("list_null_type", list_of(all_null(pa.null()))),
        Column("all_null_list", all_null(pa.list_(pa.int32()))),
        Column("all_empty_list", list_of(_I32, p_null=0.0, p_empty=1.0)),
        Column("list_decimal", list_of(decimals(pa.decimal128(12, 3)), max_len=2)),
    ),
)

STRUCTS = Theme(
    "structs",
    doc="structs with nulls at the struct and the child level, nesting, lists inside structs",
    batch_rows=2500,
    columns=(
        Column("struct_child_nulls", struct_of(x=_I32N, s=var_strings(0, 8, 0.2))),
        Column(
            "struct_nulls",
            struct_of(p_null=0.2, x=_I32N, s=var_strings(0, 8, 0.2)),
            refused={"2.0": STRUCT_VALIDITY_20},
        ),
        Column(
            "nested_struct_nulls",
            struct_of(
                p_null=0.1,
                a=_I32,
                t=struct_of(p_null=0.2, y=ints("int64", 0.1), z=words(5, 0.1)),
            ),
            refused={"2.0": STRUCT_VALIDITY_20},
        ),
        Column(
            "nested_struct_child_nulls",
            struct_of(a=_I32, t=struct_of(y=ints("int64", 0.1), z=words(5, 0.1))),
        ),
        Column("struct_list", struct_of(l=list_of(_I32N), b=bools())),
        Column(
            "struct_list_nulls",
            struct_of(p_null=0.15, l=list_of(var_strings(0, 5, 0.1))),
            refused={"2.0": STRUCT_VALIDITY_20},
        ),
        Column("struct_fsl", struct_of(v=fsl_of(_F32, 4, p_null=0.1), f=floats("float64"))),
        Column("struct_long_string", struct_of(id=_I32, text=var_strings(260, 300, 0.1))),
        Column("struct_all_null_child", struct_of(x=all_null(pa.int32()), y=_I32)),
        Column(
            "packed",
            struct_of(a=_I32, b=_F32, c=ints("int64")),
            metadata={"lance-encoding:packed": "true"},
        ),
        Column(
            "packed_legacy_key",
            struct_of(a=ints("int16"), b=floats("float64"), c=ints("uint8")),
            metadata={"packed": "true"},
        ),
        Column(
            "packed_bool",
            struct_of(a=_I32, c=bools()),
            metadata={"lance-encoding:packed": "true"},
            refused={
                "2.0": PACKED_BOOL_20,
                "2.1": PACKED_BOOL_21,
                "2.2": PACKED_BOOL_21,
            },
        ),
        Column(
            "packed_nulls",
            struct_of(p_null=0.2, a=_I32, b=_F32),
            metadata={"lance-encoding:packed": "true"},
            refused={"2.0": STRUCT_VALIDITY_20},
        ),
        Column(
            "packed_child_nulls",
            struct_of(a=_I32N, b=_F32),
            metadata={"lance-encoding:packed": "true"},
            refused={"2.0": PACKED_STR_20, "2.1": VARPACKED_21, "2.2": PACKED_CHILD_NULLS_22},
        ),
        Column(
            "packed_string_nulls",
            struct_of(p_null=0.2, a=_I32, s=var_strings(0, 10)),
            metadata={"lance-encoding:packed": "true"},
            refused={"2.0": STRUCT_VALIDITY_20, "2.1": VARPACKED_21},
        ),
        Column(
            "packed_string",
            struct_of(a=_I32, s=var_strings(0, 10)),
            metadata={"lance-encoding:packed": "true"},
            refused={"2.0": PACKED_STR_20, "2.1": VARPACKED_21},
        ),
        # Must stay the LAST column: pylance 14 misreads the columns that follow a struct<>
        # in 2.1/2.2 (wrong values or "Need at least N bytes"), though it writes them fine.
        Column("empty_struct", lambda n, rng: pa.array([{}] * n, pa.struct([]))),
    ),
)

MAPS = Theme(
    "maps",
    doc="map columns (2.2 only)",
    num_rows=3000,
    columns=(
        Column(
            "map_string_int32",
            map_of(words(6), _I32N),
            refused={"2.0": MAP_20, "2.1": MAP_21},
        ),
        Column(
            "map_int64_list",
            map_of(sequence(), list_of(var_strings(0, 6, 0.1))),
            refused={"2.0": MAP_20, "2.1": MAP_21},
        ),
        Column(
            "list_map",
            list_of(map_of(words(3), floats("float64", 0.2)), max_len=2),
            refused={"2.0": MAP_20, "2.1": MAP_21},
        ),
    ),
)

_DICT_STR = pa.array(["red", "green", "blue", "yellow", "", "a much longer dictionary value"])

DICTIONARY = Theme(
    "dictionary",
    doc="Arrow dictionary arrays (pylance stores the values, not the Arrow dictionary)",
    num_rows=3000,
    columns=(
        Column("dict_int32_string", dictionary(pa.int32(), _DICT_STR)),
        Column("dict_int8_string_unused", dictionary(pa.int8(), _DICT_STR, use=3)),
        Column("dict_int16_int64", dictionary(pa.int16(), pa.array([5, -6, 2**40]), p_null=0.0)),
        Column(
            "dict_uint8_large_string",
            dictionary(pa.uint8(), pa.array(["x", "y"], pa.large_string()), p_null=0.3),
        ),
    ),
)

BLOBS = Theme(
    "blobs",
    doc="large_binary with lance-encoding:blob (BlobLayout in 2.1/2.2 files written by "
    "LanceFileWriter; the 2.2 blob-v2 descriptor form only appears in datasets, see "
    "write_blob_v2_dataset)",
    num_rows=24,
    columns=(
        Column("id", sequence(pa.int32())),
        Column(
            "blob",
            blobs(
                [5, 0, None, 100, 70_000, 3, None, 200_000, 0, 64, 65_536, 5 * 1024 * 1024 + 7]
                + [10] * 12
            ),
            metadata={"lance-encoding:blob": "true"},
        ),
        Column(
            "blob_small",
            blobs([None, 1, 2, 0]),
            metadata={"lance-encoding:blob": "true"},
        ),
    ),
)

EMPTY = Theme(
    "empty",
    doc="a file with zero rows",
    num_rows=0,
    columns=(
        Column("i", ints("int32")),
        Column("s", var_strings(0, 4)),
        Column("l", list_of(_I32)),
        Column("st", struct_of(x=_I32)),
        Column("v", fsl_of(_F32, 4)),
    ),
)

# Columns chosen so that, in 2.1/2.2, top-level field k is physical column k (no structs):
# test_take_io relies on it.
MULTIPAGE = Theme(
    "multipage",
    doc="many pages and chunks: several batches, a small writer cache (2.1+ flush a page "
    "when a column's buffered data exceeds its share of data_cache_bytes) and a small "
    "max_page_bytes (2.0 splits pages by it), an empty batch, all-null pages",
    num_rows=60_000,
    batch_rows=8_000,
    writer_options={"max_page_bytes": 64 * 1024, "data_cache_bytes": 1024 * 1024},
    columns=(
        Column("id", sequence(pa.int64())),
        Column("int32_nulls", ints("int32", p_null=0.1)),
        Column("string", var_strings(0, 24, p_null=0.05)),
        Column("long_string", var_strings(260, 600, p_null=0.05)),
        Column("list_int32", list_of(_I32N, max_len=6)),
        Column("list_string", list_of(var_strings(0, 10, 0.05), max_len=3)),
        Column("vec32", fsl_of(_F32, 32, p_null=0.02)),
        Column("vec128", fsl_of(_F32, 128)),
        Column("low_card", words(5)),
    ),
)

NULL_PAGES = Theme(
    "null_pages",
    doc="all-null pages between valued ones (one page per batch: a tiny writer cache), and "
    "an empty batch",
    num_rows=12_000,
    batch_rows=3_000,
    writer_options={"data_cache_bytes": 1},
    columns=(
        Column("int32", null_page_every(_I32N, 6_000, 3_000)),
        Column("string", null_page_every(var_strings(0, 9, 0.1), 6_000, 3_000)),
        Column("long_string", null_page_every(var_strings(256, 300), 6_000, 3_000)),
        Column("list_int32", null_page_every(list_of(_I32N), 6_000, 3_000)),
        Column("vec4", null_page_every(fsl_of(_F32, 4), 6_000, 3_000)),
        Column("bool", null_page_every(bools(0.2), 6_000, 3_000)),
        Column("late_values", null_page_every(ints("int64"), 12_000, 9_000)),
        Column(
            "struct",
            null_page_every(struct_of(x=_I32N, s=words(3)), 6_000, 3_000),
            refused={"2.0": STRUCT_VALIDITY_20},
        ),
    ),
)

BIG = Theme(
    "big",
    doc="more than 1M rows in a column, written in several batches with default page sizes",
    num_rows=1_200_000,
    batch_rows=300_000,
    writer_options={"max_page_bytes": 1 << 20, "data_cache_bytes": 4 << 20},
    columns=(
        Column("id", sequence(pa.int64())),
        Column("f32", floats("float32")),
        Column("int32_nulls", ints("int32", p_null=0.1, lo=0, hi=1 << 20)),
        Column("small_ints", ints("uint8", lo=0, hi=15)),
    ),
)

THEMES: tuple[Theme, ...] = (
    PRIMITIVES,
    STRINGS,
    ENCODINGS,
    VECTORS,
    LISTS,
    STRUCTS,
    MAPS,
    DICTIONARY,
    BLOBS,
    EMPTY,
    MULTIPAGE,
    NULL_PAGES,
    BIG,
)
THEMES_BY_NAME = {t.name: t for t in THEMES}

# (theme, version) for every file that exists (a theme all of whose columns are refused in a
# version has no file there; the refusal tests cover it).
FIXTURE_IDS: tuple[tuple[str, str], ...] = tuple(
    (t.name, v) for t in THEMES for v in VERSIONS if t.columns_for(v)
)


def struct_leaf_paths(f: pa.Field) -> list[str]:
    """Dotted paths of the leaves under a struct column (through ``item`` of list<struct>);
    [] for other columns and for packed structs, whose children are one physical column."""
    if f.metadata and (b"lance-encoding:packed" in f.metadata or b"packed" in f.metadata):
        return []

    def leaves(prefix: str, t: pa.DataType, depth: int) -> list[str]:
        if pa.types.is_struct(t) and t.num_fields:
            res: list[str] = []
            for i in range(t.num_fields):
                res += leaves(f"{prefix}.{t.field(i).name}", t.field(i).type, depth + 1)
            return res
        if (pa.types.is_list(t) or pa.types.is_large_list(t)) and pa.types.is_struct(t.value_type):
            return leaves(f"{prefix}.item", t.value_type, depth + 1)
        return [prefix] if depth else []

    return leaves(f.name, f.type, 0)


def _theme_has_struct_paths(theme: Theme, version: str) -> bool:
    rng = np.random.default_rng(0)
    for col in theme.columns_for(version):
        arr = col.make(4, rng)
        if struct_leaf_paths(col.field_for(arr)):
            return True
    return False


# Fixtures with struct columns, for nested projection tests.
NESTED_FIXTURE_IDS: tuple[tuple[str, str], ...] = tuple(
    (t, v) for t, v in FIXTURE_IDS if _theme_has_struct_paths(THEMES_BY_NAME[t], v)
)

# Refusals that are not columns of a theme: types no version accepts, and file shapes.
EXTRA_REFUSALS: tuple[tuple[str, Callable[[int, np.random.Generator], pa.Array], Refusal], ...] = (
    ("decimal32", lambda n, rng: pa.array([1] * n, pa.decimal32(5, 2)), UNSUPPORTED_TYPE),
    ("decimal64", lambda n, rng: pa.array([1] * n, pa.decimal64(12, 2)), UNSUPPORTED_TYPE),
    (
        "month_day_nano",
        lambda n, rng: pa.array([(1, 2, 3)] * n, pa.month_day_nano_interval()),
        UNSUPPORTED_TYPE,
    ),
    (
        "dense_union",
        lambda n, rng: pa.UnionArray.from_dense(
            pa.array([0] * n, pa.int8()),
            pa.array(range(n), pa.int32()),
            [pa.array(range(n), pa.int32())],
            ["a"],
        ),
        UNSUPPORTED_TYPE,
    ),
    (
        "list_view",
        lambda n, rng: pa.array([[1]] * n, pa.list_view(pa.int32())),
        UNSUPPORTED_TYPE,
    ),
)


def all_refusals() -> list[tuple[str, str, Callable, Refusal]]:
    """(id, version, builder, refusal) for every combination pylance refuses."""
    out = []
    for theme in THEMES:
        for col in theme.columns:
            for v, ref in col.refused.items():
                out.append((f"{theme.name}.{col.name}", v, col.make, ref))
    for name, make, ref in EXTRA_REFUSALS:
        for v in VERSIONS:
            out.append((name, v, make, ref))
    return out


# --------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------


def rng_for(*parts: str) -> np.random.Generator:
    """A generator seeded from names (stable across runs, unlike hash())."""
    return np.random.default_rng(zlib.crc32("/".join(parts).encode()))


def build_table(theme: Theme, version: str) -> pa.Table:
    """The source table of a theme in one version (refused columns dropped)."""
    arrays, fields = [], []
    for col in theme.columns_for(version):
        # Seeded per column (not per version), so every version holds the same values.
        arr = col.make(theme.num_rows, rng_for(theme.name, col.name))
        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks()
        arrays.append(arr)
        fields.append(col.field_for(arr))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def write_table(
    path: str,
    table: pa.Table,
    version: str,
    batch_rows: int | None = None,
    writer_options: Mapping[str, object] | None = None,
    empty_batch_at: int | None = None,
) -> None:
    """Write with pylance, in batches of ``batch_rows`` (plus an optional empty batch).

    Each batch is materialised with ``take`` rather than passed as a zero-copy slice:
    pylance 14 panics ("assertion failed: end <= self.len()") when a written batch holds a
    struct nested in a struct with a non-zero array offset.
    """
    opts = dict(writer_options or {})
    with lance.file.LanceFileWriter(path, table.schema, version=version, **opts) as w:
        step = batch_rows or max(table.num_rows, 1)
        for k, start in enumerate(range(0, table.num_rows, step)):
            if empty_batch_at is not None and k == empty_batch_at:
                w.write_batch(table.slice(0, 0))
            stop = min(start + step, table.num_rows)
            try:
                batch = table.take(pa.array(np.arange(start, stop)))
            except pa.ArrowNotImplementedError:  # view types have no take kernel
                batch = table.slice(start, stop - start)
            w.write_batch(batch)
        if table.num_rows == 0:
            w.write_batch(table)


@dataclass
class FixtureFile:
    theme: str
    version: str
    path: str
    source: pa.Table

    @property
    def id(self) -> str:
        return f"{self.theme}-{self.version}"

    @cached_property
    def expected(self) -> pa.Table:
        """pylance's own read of the file: the truth our reader must reproduce."""
        return pylance_read(self.path)

    @cached_property
    def page_starts(self) -> list[int]:
        return page_row_starts(self.path)


def pylance_read(path: str, columns: list[str] | None = None) -> pa.Table:
    reader = lance.file.LanceFileReader(path, columns=columns)
    return reader.read_all(batch_size=8192).to_table()


class FixtureStore:
    """Writes fixture files on first use and keeps them for the session."""

    def __init__(self, root: str):
        self.root = root
        self._files: dict[tuple[str, str], FixtureFile] = {}
        self.seconds: dict[str, float] = {}

    def get(self, theme_name: str, version: str) -> FixtureFile:
        key = (theme_name, version)
        if key not in self._files:
            theme = THEMES_BY_NAME[theme_name]
            t0 = time.perf_counter()
            table = build_table(theme, version)
            path = os.path.join(self.root, f"{theme_name}_{version}.lance")
            write_table(
                path,
                table,
                version,
                theme.batch_rows,
                theme.writer_options,
                empty_batch_at=2 if theme in (MULTIPAGE, NULL_PAGES) else None,
            )
            self.seconds[f"{theme_name}-{version}"] = time.perf_counter() - t0
            self._files[key] = FixtureFile(theme_name, version, path, table)
        return self._files[key]

    def get_all(self) -> list[FixtureFile]:
        return [self.get(t, v) for t, v in FIXTURE_IDS]


# --------------------------------------------------------------------------------------------
# Dataset-written files (not producible with LanceFileWriter)
# --------------------------------------------------------------------------------------------


def write_blob_v2_dataset(root: str) -> tuple[str, pa.Table]:
    """A 2.2 dataset with blob v2 columns (inline, packed sidecar, dedicated sidecar).

    Returns (data file path, what the dataset returns for it).  pylance's *file* reader cannot
    read the blob column of such a file (the descriptor fields have id -1); the dataset's
    ``to_table()`` returns the descriptor struct (kind, position, size, blob_id, blob_uri),
    so that is the oracle.
    """
    sizes = [5, 0, None, 70_000, 200_000, 5 * 1024 * 1024, 100, None]
    rng = rng_for("blob_v2")
    vals = [None if s is None else rng.integers(0, 256, s, dtype=np.uint8).tobytes() for s in sizes]
    f = pa.field("blob", pa.large_binary(), metadata={"lance-encoding:blob": "true"})
    schema = pa.schema([pa.field("id", pa.int32()), f])
    table = pa.table(
        {"id": pa.array(range(len(sizes)), pa.int32()), "blob": pa.array(vals, pa.large_binary())},
        schema=schema,
    )
    ds_dir = os.path.join(root, "blob_v2_ds")
    shutil.rmtree(ds_dir, ignore_errors=True)
    ds = lance.write_dataset(table, ds_dir, data_storage_version="2.2")
    (data_file,) = glob.glob(os.path.join(ds_dir, "data", "*.lance"))
    return data_file, ds.to_table()


def write_legacy_file(root: str) -> str:
    """A v1 ("legacy", footer 0.2) data file, via a dataset (LanceFileWriter refuses v1)."""
    ds_dir = os.path.join(root, "legacy_ds")
    shutil.rmtree(ds_dir, ignore_errors=True)
    table = pa.table({"a": pa.array(range(100), pa.int32()), "s": pa.array(["x"] * 100)})
    lance.write_dataset(table, ds_dir, data_storage_version="legacy")
    (data_file,) = glob.glob(os.path.join(ds_dir, "data", "*.lance"))
    return data_file


# --------------------------------------------------------------------------------------------
# Independent inspection of the container (a few lines of protobuf wire parsing, so tests
# do not depend on the reader under test to find page boundaries and column sizes)
# --------------------------------------------------------------------------------------------


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


def _fields(buf: bytes):
    """Yield (field_number, wire_type, value) for one protobuf message."""
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        num, wt = key >> 3, key & 7
        if wt == 0:
            val, pos = _varint(buf, pos)
        elif wt == 2:
            ln, pos = _varint(buf, pos)
            val, pos = buf[pos : pos + ln], pos + ln
        elif wt == 1:
            val, pos = buf[pos : pos + 8], pos + 8
        elif wt == 5:
            val, pos = buf[pos : pos + 4], pos + 4
        else:
            raise ValueError(f"wire type {wt}")
        yield num, wt, val


def _packed_or_single(wt: int, val) -> list[int]:
    if wt == 0:
        return [val]
    out, pos = [], 0
    while pos < len(val):
        v, pos = _varint(val, pos)
        out.append(v)
    return out


@dataclass
class PageInfo:
    length: int
    priority: int
    buffer_sizes: list[int]
    buffer_offsets: list[int]


@dataclass
class ContainerInfo:
    major: int
    minor: int
    num_columns: int
    footer: tuple[int, int, int, int, int]  # cm_start, cmo_start, gbo_start, n_gb, n_col
    column_meta: list[tuple[int, int]]
    global_buffers: list[tuple[int, int]]
    pages: list[list[PageInfo]]  # per column


def inspect_container(path: str) -> ContainerInfo:
    """Parse the footer, offset tables and the page list of every column."""
    with open(path, "rb") as fh:
        data = fh.read()
    cm_start, cmo, gbo, n_gb, n_col, major, minor = struct.unpack("<QQQIIHH", data[-40:-4])
    cms = [struct.unpack_from("<QQ", data, cmo + 16 * i) for i in range(n_col)]
    gbs = [struct.unpack_from("<QQ", data, gbo + 16 * i) for i in range(n_gb)]
    pages: list[list[PageInfo]] = []
    for pos, size in cms:
        col_pages = []
        for num, _wt, val in _fields(data[pos : pos + size]):
            if num != 2:
                continue
            info = PageInfo(0, 0, [], [])
            for pnum, pwt, pval in _fields(val):
                if pnum == 1:
                    info.buffer_offsets += _packed_or_single(pwt, pval)
                elif pnum == 2:
                    info.buffer_sizes += _packed_or_single(pwt, pval)
                elif pnum == 3:
                    info.length = pval
                elif pnum == 5:
                    info.priority = pval
            col_pages.append(info)
        pages.append(col_pages)
    return ContainerInfo(major, minor, n_col, (cm_start, cmo, gbo, n_gb, n_col), cms, gbs, pages)


def page_row_starts(path: str) -> list[int]:
    """Row numbers where some column starts a new page (2.1+: page priority = first row;
    2.0: cumulative page lengths, which for list children count items, still fine as
    candidate boundaries)."""
    info = inspect_container(path)
    starts: set[int] = set()
    for col in info.pages:
        acc = 0
        for p in col:
            starts.add(p.priority if info.major == 2 else acc)
            acc += p.length
    return sorted(starts)


def column_bytes(path: str, column_index: int) -> int:
    """Total size of the page buffers of one physical column."""
    info = inspect_container(path)
    return sum(sum(p.buffer_sizes) for p in info.pages[column_index])


# --------------------------------------------------------------------------------------------
# Comparison
# --------------------------------------------------------------------------------------------


def _has_dictionary(t: pa.DataType) -> bool:
    if pa.types.is_dictionary(t):
        return True
    return any(_has_dictionary(t.field(i).type) for i in range(t.num_fields))


def _decode_dictionaries(arr: pa.ChunkedArray) -> pa.ChunkedArray:
    """Decode top-level and nested dictionaries (by a cast to the value type)."""

    def plain(t: pa.DataType) -> pa.DataType:
        if pa.types.is_dictionary(t):
            return t.value_type
        if pa.types.is_struct(t):
            return pa.struct(
                [t.field(i).with_type(plain(t.field(i).type)) for i in range(t.num_fields)]
            )
        if pa.types.is_large_list(t):
            return pa.large_list(t.value_field.with_type(plain(t.value_type)))
        if pa.types.is_list(t):
            return pa.list_(t.value_field.with_type(plain(t.value_type)))
        if pa.types.is_fixed_size_list(t):
            return pa.list_(t.value_field.with_type(plain(t.value_type)), t.list_size)
        return t

    return arr.cast(plain(arr.type))


def assert_tables_equal(ours: pa.Table, expected: pa.Table, what: str = "") -> None:
    """Equal schema (types, nullability, field and schema metadata) and equal values.

    Dictionary-typed columns must have the same type, but their values are compared after
    decoding: which dictionary holds them (order, unused entries) is not data.
    """
    prefix = f"{what}: " if what else ""
    assert ours.schema.equals(expected.schema, check_metadata=True), (
        f"{prefix}schema differs\nours:\n{ours.schema}\nexpected:\n{expected.schema}"
    )
    assert ours.num_rows == expected.num_rows, (
        f"{prefix}row count {ours.num_rows} != {expected.num_rows}"
    )
    for name, a, b in zip(ours.column_names, ours.columns, expected.columns, strict=True):
        if a.equals(b):
            continue
        if _has_dictionary(a.type) and _decode_dictionaries(a).equals(_decode_dictionaries(b)):
            continue
        raise AssertionError(f"{prefix}column {name!r} differs: {_first_diff(a, b)}")


def _first_diff(a: pa.ChunkedArray, b: pa.ChunkedArray) -> str:
    la, lb = a.to_pylist(), b.to_pylist()
    for i, (x, y) in enumerate(zip(la, lb, strict=False)):
        if x != y:
            return f"row {i}: ours={_short(x)} expected={_short(y)}"
    return (
        f"lengths {len(la)} vs {len(lb)}"
        if len(la) != len(lb)
        else "no value differs (null layout?)"
    )


def _short(v: object) -> str:
    s = repr(v)
    return s if len(s) < 200 else s[:200] + "..."


def prune_to_paths(table: pa.Table, paths: list[str]) -> pa.Table:
    """Project a table by top-level names or dotted struct paths ("s.t.z", "l.item.a"),
    pruning structs the way pylance does; an independent reference for projection tests."""
    out_names: list[str] = []
    grouped: dict[str, list[list[str]]] = {}
    for p in paths:
        head, *rest = p.split(".")
        if head not in grouped:
            grouped[head] = []
            out_names.append(head)
        grouped[head].append(rest)
    arrays, fields = [], []
    for name in out_names:
        f = table.schema.field(name)
        arr = table.column(name).combine_chunks()
        arr, ftype = _prune(arr, f.type, grouped[name])
        arrays.append(arr)
        fields.append(f.with_type(ftype))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields, metadata=table.schema.metadata))


def _prune(arr: pa.Array, typ: pa.DataType, subpaths: list[list[str]]):
    if any(not sp for sp in subpaths):
        return arr, typ
    if pa.types.is_struct(typ):
        order: list[str] = []
        sub: dict[str, list[list[str]]] = {}
        for sp in subpaths:
            if sp[0] not in sub:
                sub[sp[0]] = []
                order.append(sp[0])
            sub[sp[0]].append(sp[1:])
        # Keep the struct's own field order, like pylance.
        names = [typ.field(i).name for i in range(typ.num_fields) if typ.field(i).name in sub]
        children, cfields = [], []
        for n in names:
            idx = typ.get_field_index(n)
            child, ctype = _prune(arr.field(idx), typ.field(idx).type, sub[n])
            children.append(child)
            cfields.append(typ.field(idx).with_type(ctype))
        mask = arr.is_null() if arr.null_count else None
        new = pa.StructArray.from_arrays(children, fields=cfields, mask=mask)
        return new, new.type
    if pa.types.is_list(typ) or pa.types.is_large_list(typ):
        rest = [sp[1:] for sp in subpaths if sp[0] == "item"]
        values, vtype = _prune(arr.values, typ.value_type, rest)
        cls = pa.LargeListArray if pa.types.is_large_list(typ) else pa.ListArray
        ltype = (pa.large_list if pa.types.is_large_list(typ) else pa.list_)(
            typ.value_field.with_type(vtype)
        )
        new = cls.from_arrays(
            arr.offsets, values, type=ltype, mask=arr.is_null() if arr.null_count else None
        )
        return new, ltype
    raise KeyError(f"cannot descend into {typ}")


def read_manifest(root: str):
    """The only manifest of a freshly written dataset, as a ``table_pb2.Manifest``."""
    from lance_format.pb import table_pb2  # lazily, like the ``api`` fixture (see conftest.py)

    (path,) = glob.glob(os.path.join(root, "_versions", "*.manifest"))
    with open(path, "rb") as fh:
        data = fh.read()
    (pos,) = struct.unpack("<q", data[-16:-8])
    (n,) = struct.unpack_from("<I", data, pos)
    m = table_pb2.Manifest()
    m.ParseFromString(data[pos + 4 : pos + 4 + n])
    return m
