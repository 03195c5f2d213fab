"""Random Arrow schemas and data, written by pylance, read by us, compared with pylance.

Schemas nest up to depth 3 (primitives, strings, lists, structs, fixed-size lists); data
has random nulls at every level.  Hypothesis draws the *shape* (types, nullability, row
count, null rates, version, batching); the values come from a seeded numpy generator, which
keeps examples fast.  Combinations pylance refuses are not drawn (see fixtures.Refusal):
struct nulls in 2.0, fixed-size lists of variable-width items.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass

import fixtures as fx
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from fixtures import assert_tables_equal
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

PRIMITIVES = [
    pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(), pa.uint32(),
    pa.uint64(), pa.float16(), pa.float32(), pa.float64(), pa.bool_(), pa.date32(),
    pa.timestamp("us"), pa.timestamp("ns", "UTC"), pa.decimal128(12, 3), pa.binary(4),
]  # fmt: skip
VARWIDTH = [pa.string(), pa.large_string(), pa.binary(), pa.large_binary()]
# Fixed-width types a fixed-size list may hold (pylance panics on variable-width FSL items).
FSL_ITEMS = [pa.float32(), pa.int32(), pa.int64(), pa.uint8(), pa.float16(), pa.bool_()]


def _fixed_width(t: pa.DataType) -> bool:
    return t in FSL_ITEMS or (pa.types.is_fixed_size_list(t) and _fixed_width(t.value_type))


@st.composite
def arrow_types(draw, depth: int = 3) -> pa.DataType:
    kinds = ["prim", "var"] + (["list", "large_list", "struct", "fsl"] if depth > 1 else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "prim":
        return draw(st.sampled_from(PRIMITIVES))
    if kind == "var":
        return draw(st.sampled_from(VARWIDTH))
    if kind == "fsl":
        size = draw(st.sampled_from([1, 2, 3, 8, 70]))
        inner = draw(st.sampled_from(FSL_ITEMS))
        if depth > 2 and draw(st.booleans()):
            inner = pa.list_(inner, draw(st.sampled_from([2, 3])))
        return pa.list_(inner, size)
    if kind in ("list", "large_list"):
        child = draw(arrow_types(depth=depth - 1))
        field = pa.field("item", child, nullable=draw(st.booleans()))
        return pa.list_(field) if kind == "list" else pa.large_list(field)
    n = draw(st.integers(1, 3))
    names = [f"f{i}" for i in range(n)]
    return pa.struct(
        [pa.field(nm, draw(arrow_types(depth=depth - 1)), draw(st.booleans())) for nm in names]
    )


@dataclass
class Shape:
    schema: pa.Schema
    version: str
    num_rows: int
    seed: int
    p_null: float
    max_str: int
    batch_rows: int | None


@st.composite
def shapes(draw) -> Shape:
    version = draw(st.sampled_from(fx.VERSIONS))
    n_fields = draw(st.integers(1, 4))
    fields = [
        pa.field(f"c{i}", draw(arrow_types()), nullable=draw(st.booleans()))
        for i in range(n_fields)
    ]
    return Shape(
        schema=pa.schema(fields),
        version=version,
        num_rows=draw(st.sampled_from([100, 1500, 7, 0, 1, 2, 5000])),
        seed=draw(st.integers(0, 2**32 - 1)),
        p_null=draw(st.sampled_from([0.0, 0.1, 0.5, 1.0])),
        max_str=draw(st.sampled_from([0, 8, 40, 600])),
        batch_rows=draw(st.sampled_from([None, 333, 1000])),
    )


# --------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------


class DataGen:
    def __init__(self, shape: Shape):
        self.rng = np.random.default_rng(shape.seed)
        self.p_null = shape.p_null
        self.max_str = shape.max_str
        self.struct_nulls = shape.version != "2.0"  # 2.0 refuses struct validity

    def mask(self, n: int, nullable: bool) -> pa.Array | None:
        if not nullable or self.p_null == 0 or n == 0:
            return None
        p = self.p_null if self.rng.random() < 0.8 else 0.0
        return pa.array(self.rng.random(n) < p)

    def array(self, t: pa.DataType, n: int, nullable: bool) -> pa.Array:
        rng = self.rng
        mask = self.mask(n, nullable)
        if pa.types.is_struct(t):
            children = [self.array(f.type, n, f.nullable) for f in t]
            m = mask if self.struct_nulls else None
            return pa.StructArray.from_arrays(children, fields=list(t), mask=m)
        if pa.types.is_fixed_size_list(t):
            values = self.array(t.value_type, n * t.list_size, t.value_field.nullable)
            return pa.FixedSizeListArray.from_arrays(values, type=t, mask=mask)
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            lens = rng.integers(0, 5, n)
            if mask is not None:
                lens[mask.to_numpy(zero_copy_only=False)] = 0
            offsets = np.zeros(n + 1, dtype=np.int64 if pa.types.is_large_list(t) else np.int32)
            np.cumsum(lens, out=offsets[1:])
            values = self.array(t.value_type, int(offsets[-1]), t.value_field.nullable)
            cls = pa.LargeListArray if pa.types.is_large_list(t) else pa.ListArray
            return cls.from_arrays(pa.array(offsets), values, type=t, mask=mask)
        if t in VARWIDTH:
            arr = fx.var_strings(0, self.max_str, typ=t)(n, rng)
        elif t == pa.bool_():
            arr = pa.array(rng.random(n) < 0.5)
        elif pa.types.is_floating(t):
            arr = pa.array((rng.standard_normal(n) * 100).astype(t.to_pandas_dtype()))
        elif pa.types.is_integer(t):
            info = np.iinfo(t.to_pandas_dtype())
            hi = info.max if rng.random() < 0.5 else min(info.max, 15)  # sometimes bitpackable
            arr = pa.array(rng.integers(max(info.min, -hi), hi, n, endpoint=True, dtype=info.dtype))
        elif pa.types.is_fixed_size_binary(t):
            arr = fx.fixed_binary(t.byte_width)(n, rng)
        elif pa.types.is_decimal(t):
            arr = pa.array(rng.integers(-(10**8), 10**8, n)).cast(pa.decimal128(19, 0)).cast(t)
        elif t == pa.date32():
            arr = pa.array(rng.integers(-30000, 30000, n, dtype=np.int32)).cast(t)
        else:  # timestamps
            arr = pa.array(rng.integers(0, 10**12, n)).cast(t)
        if mask is not None:
            arr = pc.if_else(mask, pa.nulls(n, arr.type), arr)
        return arr.cast(t) if arr.type != t else arr

    def table(self, schema: pa.Schema, n: int) -> pa.Table:
        return pa.Table.from_arrays(
            [self.array(f.type, n, f.nullable) for f in schema], schema=schema
        )


def _write_and_read(shape: Shape, tmp: str) -> tuple[str, pa.Table, pa.Table]:
    table = DataGen(shape).table(shape.schema, shape.num_rows)
    path = os.path.join(tmp, "h.lance")
    fx.write_table(path, table, shape.version, shape.batch_rows)
    return path, table, fx.pylance_read(path)


COMMON = dict(
    deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)


@settings(max_examples=40, **COMMON)
@given(shape=shapes())
def test_strategy_roundtrips_through_pylance(shape: Shape) -> None:
    """pylance accepts every drawn shape and reads back what it wrote: the strategy avoids
    refused combinations and the generated data is what we think it is."""
    with tempfile.TemporaryDirectory() as tmp:
        _, source, expected = _write_and_read(shape, tmp)
        assert_tables_equal(expected, source, f"pylance round trip ({shape.version})")


@settings(max_examples=250, **COMMON)
@given(shape=shapes(), data=st.data())
def test_random_schema_matches_pylance(api, shape: Shape, data) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path, _, expected = _write_and_read(shape, tmp)
        r = api.LanceFileReader(path)
        n = expected.num_rows
        assert r.num_rows == n
        assert r.version == shape.version
        assert_tables_equal(r.read(), expected, "read")
        idx = data.draw(st.lists(st.integers(0, n - 1), max_size=20)) if n else []
        assert_tables_equal(r.take(idx), expected.take(pa.array(idx, pa.int64())), "take")
        start = data.draw(st.integers(0, n))
        stop = data.draw(st.integers(start, n))
        assert_tables_equal(r.read_range(start, stop), expected.slice(start, stop - start), "range")
        col = data.draw(st.sampled_from(expected.column_names))
        assert_tables_equal(r.read(columns=[col]), expected.select([col]), f"columns=[{col}]")
