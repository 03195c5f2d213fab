"""Spark filter objects -> our SQL predicates (no JVM): a pushed filter keeps exactly Spark's rows.

A filter we accept disappears from Spark's plan, so for every filter the translation
accepts, the rows our scanner keeps (the SQL compiled by ``lance_format``'s filter parser and
evaluated by Arrow) must equal the rows Spark would keep.  Spark's semantics are written out
here independently as a small row-by-row evaluator (three-valued logic, NaN equal to itself
and above every number, ``<=>`` never NULL, ``IN`` with NULLs), and every combination of
column, operator, literal and negation over a table with nulls, NaNs, signed zeros, quotes,
LIKE metacharacters and awkward column names is checked against it.  Filters that cannot be
translated exactly must be handed back to Spark, and are checked to be.
"""

from __future__ import annotations

import datetime as dt
import itertools
import math
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.dataset as pads
import pytest
from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
    StringContains,
    StringEndsWith,
    StringStartsWith,
)

from flight_server.spark.filters import (
    column_sql,
    filter_sql,
    literal_sql,
    translate_filters,
)
from lance_format.table.filters import compile_filter

UTC = dt.UTC
STRINGS = ["abc", "a_c", "a%c", "it's", "ABC", "", "b\\c", "ab\\%", "line\nbreak", "é😀", "abcd"]
FLOATS = [0.0, -0.0, 1.5, -2.25, float("nan"), float("inf"), 1e-300, 3.0]
DEC_TYPE = pa.decimal128(9, 2)
BASE_TS = dt.datetime(2021, 3, 4, 5, 6, 7, 891011, tzinfo=UTC)


def _table() -> pa.Table:
    rng = np.random.default_rng(7)
    n = 60

    def pick(values: list, null_share: float = 0.2) -> list:
        out = [values[i] for i in rng.integers(0, len(values), n)]
        return [None if rng.random() < null_share else v for v in out]

    ints = pick(list(range(-3, 4)))
    structs = [None if v is None else {"inner": v, "tag": "t"} for v in pick(list(range(3)))]
    return pa.table(
        {
            "i64": pa.array(ints, pa.int64()),
            "i8": pa.array(pick(list(range(-2, 3))), pa.int8()),
            "u32": pa.array(pick([0, 1, 4_000_000_000]), pa.uint32()),
            "f64": pa.array(pick(FLOATS), pa.float64()),
            "f32": pa.array(pick([0.5, -0.0, 0.0, float("nan"), 2.75]), pa.float32()),
            "dec": pa.array(pick([Decimal("0.05"), Decimal("-1.10"), Decimal("7.00")]), DEC_TYPE),
            "s": pa.array(pick(STRINGS), pa.string()),
            "ls": pa.array(pick(STRINGS), pa.large_string()),
            "dict": pa.array(pick(["x", "y'z"]), pa.string()).dictionary_encode(),
            "b": pa.array(pick([True, False]), pa.bool_()),
            "d": pa.array(pick([dt.date(2020, 1, 1), dt.date(1969, 12, 31)]), pa.date32()),
            "ts": pa.array(
                pick([BASE_TS, BASE_TS + dt.timedelta(microseconds=1), BASE_TS.replace(year=1960)]),
                pa.timestamp("us", tz="UTC"),
            ),
            "ts_ms_ny": pa.array(
                pick([BASE_TS.replace(microsecond=891000), BASE_TS.replace(microsecond=0)]),
                pa.timestamp("ms", tz="America/New_York"),
            ),
            "ntz": pa.array(
                pick([BASE_TS.replace(tzinfo=None), BASE_TS.replace(tzinfo=None, hour=23)]),
                pa.timestamp("us"),
            ),
            # names that need quoting: a keyword, dots, a backtick, case twins
            "select": pa.array(pick([1, 2]), pa.int32()),
            "a.b": pa.array(pick([1, 2]), pa.int32()),
            "we`ird": pa.array(pick(["p", "q"]), pa.string()),
            "Case": pa.array(pick([1, 2]), pa.int16()),
            "case": pa.array(pick([3, 4]), pa.int16()),
            "st": pa.array(structs, pa.struct([("inner", pa.int64()), ("tag", pa.string())])),
        }
    )


TABLE = _table()
ROWS = TABLE.to_pylist()


# -- Spark's semantics, row by row (the independent truth) ---------------------------------


def _value(row: dict, path: tuple[str, ...]):
    value = row
    for part in path:
        if value is None:
            return None
        value = value[part]
    return value


def _key(v):
    """Spark's total order for floats: NaN equals NaN and sorts above every number."""
    if isinstance(v, float) and math.isnan(v):
        return (1, 0.0)
    if isinstance(v, (float, int, Decimal)) and not isinstance(v, bool):
        return (0, v)
    return v


def _normalise(v):
    # Arrow gives zoned timestamps in their own zone; Spark compares instants
    if isinstance(v, dt.datetime) and v.tzinfo is not None:
        return v.astimezone(UTC)
    return v


def spark_eval(f, row: dict):
    """True / False / None (NULL) as Spark evaluates the filter on ``row``."""
    if isinstance(f, Not):
        inner = spark_eval(f.child, row)
        return None if inner is None else not inner
    a = _normalise(_value(row, f.attribute))
    if isinstance(f, IsNull):
        return a is None
    if isinstance(f, IsNotNull):
        return a is not None
    if isinstance(f, EqualNullSafe):
        if a is None or f.value is None:
            return a is None and f.value is None
        return _key(a) == _key(_normalise(f.value))
    if isinstance(f, In):
        if a is None:
            return None
        if any(v is not None and _key(a) == _key(_normalise(v)) for v in f.value):
            return True
        return None if any(v is None for v in f.value) else False
    if a is None:
        return None
    if isinstance(f, StringStartsWith):
        return a.startswith(f.value)
    if isinstance(f, StringEndsWith):
        return a.endswith(f.value)
    if isinstance(f, StringContains):
        return f.value in a
    x, y = _key(a), _key(_normalise(f.value))
    return {
        EqualTo: lambda: x == y,
        GreaterThan: lambda: x > y,
        GreaterThanOrEqual: lambda: x >= y,
        LessThan: lambda: x < y,
        LessThanOrEqual: lambda: x <= y,
    }[type(f)]()


def spark_rows(filters: list) -> list[int]:
    return [i for i, row in enumerate(ROWS) if all(spark_eval(f, row) is True for f in filters)]


def our_rows(sql: str) -> list[int]:
    compiled = compile_filter(sql, TABLE.schema)
    indexed = TABLE.append_column("__i", pa.array(range(TABLE.num_rows), pa.int64()))
    kept = pads.dataset(indexed).to_table(columns=["__i"], filter=compiled.expression)
    return sorted(kept.column("__i").to_pylist())


# -- the sweep -----------------------------------------------------------------------------

LITERALS: dict[tuple[str, ...], list] = {
    ("i64",): [0, -3, 2, 99],
    ("i8",): [-2, 1],
    ("u32",): [1, 4_000_000_000],
    ("f64",): [0.0, -0.0, 1.5, -2.25, 1e-300, 2.0],
    ("f32",): [0.5, -0.0, 2.75],
    ("dec",): [Decimal("0.05"), Decimal("-1.1"), Decimal("7"), 7],
    ("s",): STRINGS + ["ab", "zzz"],
    ("ls",): ["abc", "it's", ""],
    ("dict",): ["y'z", "x"],
    ("b",): [True, False],
    ("d",): [dt.date(2020, 1, 1), dt.date(1970, 1, 1)],
    ("ts",): [BASE_TS, BASE_TS.astimezone(dt.timezone(dt.timedelta(hours=-5)))],
    ("ts_ms_ny",): [BASE_TS.replace(microsecond=891000), BASE_TS.replace(microsecond=500)],
    ("ntz",): [BASE_TS.replace(tzinfo=None)],
    ("select",): [1],
    ("a.b",): [2],
    ("we`ird",): ["q"],
    ("Case",): [1],
    ("case",): [3],
    ("st", "inner"): [1],
}
COMPARISONS = [EqualTo, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual, EqualNullSafe]


def _sweep() -> list:
    out = []
    for path, values in LITERALS.items():
        out += [IsNull(path), IsNotNull(path)]
        for op, value in itertools.product(COMPARISONS, values):
            out.append(op(path, value))
        out.append(In(path, tuple(values[:2])))
        out.append(In(path, (values[0], None)))
        out.append(EqualNullSafe(path, None))
    for text in ["a", "a_", "%", "\\", "c", "", "b\\", "é", "it'"]:
        for op in (StringStartsWith, StringEndsWith, StringContains):
            out.append(op(("s",), text))
    return out


SWEEP = _sweep()


@pytest.mark.parametrize("negated", [False, True], ids=["plain", "not"])
def test_every_pushed_filter_keeps_sparks_rows(negated: bool) -> None:
    checked = 0
    for f in SWEEP:
        f = Not(f) if negated else f
        sql = filter_sql(f, TABLE.schema)
        assert sql is not None, f"{f!r} should be pushable"
        assert our_rows(sql) == spark_rows([f]), f"{f!r} -> {sql!r}"
        checked += 1
    assert checked == len(SWEEP) > 300


def test_conjunctions_keep_sparks_rows() -> None:
    rng = np.random.default_rng(3)
    for _ in range(60):
        chosen = [SWEEP[i] for i in rng.choice(len(SWEEP), size=3, replace=False)]
        chosen = [Not(f) if rng.random() < 0.3 else f for f in chosen]
        result = translate_filters(chosen, TABLE.schema)
        assert result.pushed == chosen and result.rejected == []
        assert our_rows(result.sql) == spark_rows(chosen), result.sql


def test_unsupported_filters_go_back_to_spark() -> None:
    schema = pa.schema(
        [
            ("ns", pa.timestamp("ns", tz="UTC")),
            ("u64", pa.uint64()),
            ("bin", pa.binary()),
            ("d64", pa.date64()),
            ("f16", pa.float16()),
            ("lst", pa.list_(pa.int64())),
            ("i", pa.int64()),
            ("f", pa.float64()),
            ("dec", pa.decimal128(5, 2)),
            ("s", pa.string()),
            ("ts", pa.timestamp("us", tz="UTC")),
            ("ntz", pa.timestamp("us")),
            ("d", pa.date32()),
        ]
    )
    keep = EqualTo(("i",), 1)
    refused = [
        EqualTo(("ns",), BASE_TS),  # Spark sees microseconds of nanosecond values
        EqualTo(("u64",), 1),
        EqualTo(("bin",), b"x"),
        EqualTo(("d64",), dt.date(2020, 1, 1)),
        EqualTo(("f16",), 1.0),
        EqualTo(("lst",), [1]),
        EqualTo(("missing",), 1),
        EqualTo(("i", "x"), 1),  # not a struct
        EqualTo(("i",), "1"),  # wrong literal kinds
        EqualTo(("i",), 1.0),
        EqualTo(("i",), True),
        EqualTo(("i",), 1 << 70),
        EqualTo(("f",), float("nan")),  # no SQL spelling for non-finite literals
        GreaterThan(("f",), float("inf")),
        EqualTo(("f",), 1),
        EqualTo(("dec",), Decimal("0.001")),  # finer than the column's scale
        EqualTo(("dec",), 1.5),
        EqualTo(("s",), None),
        StringStartsWith(("i",), "1"),
        EqualTo(("ts",), BASE_TS.replace(tzinfo=None)),  # naive for a zoned column
        EqualTo(("ntz",), BASE_TS),  # zoned for a naive column
        EqualTo(("d",), BASE_TS),
        In(("i",), ()),
        In(("i",), (1, "x")),
        Not(EqualTo(("u64",), 1)),
    ]
    result = translate_filters([keep, *refused], schema)
    assert result.pushed == [keep]
    assert result.rejected == refused
    assert result.sql == "`i` = 1"
    assert translate_filters(refused, schema).sql is None


def test_sql_spelling() -> None:
    assert column_sql(("we`ird", "x.y")) == "`we``ird`.`x.y`"
    assert literal_sql("it's", pa.string()) == "'it''s'"
    assert literal_sql(Decimal("1E+2"), DEC_TYPE) == "100"
    assert literal_sql(dt.date(2020, 1, 2), pa.date32()) == "CAST('2020-01-02' AS DATE)"
    zoned = dt.datetime(2020, 1, 2, 3, 4, 5, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    assert literal_sql(zoned, pa.timestamp("us", "UTC")) == "'2020-01-02 01:04:05.000000+00:00'"
    both = translate_filters([EqualTo(("a",), 1), StringContains(("b",), "5%")], _ab_schema())
    assert both.sql == "(`a` = 1) AND (`b` LIKE '%5\\%%')"


def _ab_schema() -> pa.Schema:
    return pa.schema([("a", pa.int32()), ("b", pa.string())])
