"""SQL filters and Arrow expressions: the rows we keep must be the rows pylance keeps.

One table with every kind of column the filters meet (ints of several widths, floats with
NaN and signed zeros, strings with LIKE metacharacters and quotes, booleans, dates,
timestamps with and without a zone, decimals, a struct, awkward column names) and nulls
everywhere is written once per session with pylance.  Each filter is run by pylance on that
dataset and by ``table.filter(parse_filter(sql, schema))``; the sets of ids must agree.
Hypothesis then builds random predicates over the same columns and checks them the same way.
"""

from __future__ import annotations

import datetime as dt
import pickle
from decimal import Decimal

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lance_format.errors import InvalidArgumentError, SchemaError
from lance_format.table import filters as filters_module
from lance_format.table.filters import (
    CompiledFilter,
    compile_filter,
    parse_filter,
    referenced_columns,
)

N_ROWS = 240
STRINGS = ["abc", "a_c", "a%c", "it's", "ABC", "", "xyz", "abcd", "b\\c", "aXc", "é", "bb", "Abc "]
BASE_DATE = dt.date(2020, 1, 1)
BASE_TS = dt.datetime(2020, 1, 1)


def _with_nulls(values: list, rng: np.random.Generator, share: float = 0.15) -> list:
    mask = rng.random(len(values)) < share
    return [None if m else v for v, m in zip(values, mask, strict=True)]


def build_table() -> pa.Table:
    rng = np.random.default_rng(20240611)
    n = N_ROWS
    ints = rng.integers(-20, 21, n).tolist()
    floats = np.round(rng.normal(0, 3, n), 2).tolist()
    specials = [float("nan"), 0.0, -0.0, 1.5, 2.0, 1e10, -3.25, float("inf")]
    for k, v in enumerate(specials):
        floats[k * 7] = v
    st_values = [
        {"x": int(x), "y": f"k{int(x) % 5}"} if rng.random() > 0.1 else None
        for x in rng.integers(0, 15, n)
    ]
    for k in range(0, n, 17):
        if st_values[k] is not None:
            st_values[k] = {"x": None, "y": "q"}
    return pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "i": pa.array(_with_nulls(ints, rng), pa.int32()),
            "i8": pa.array(_with_nulls(rng.integers(-100, 100, n).tolist(), rng), pa.int8()),
            "u16": pa.array(rng.integers(0, 65535, n).tolist(), pa.uint16()),
            "big": pa.array(_with_nulls((rng.integers(-4, 5, n) * 10**12).tolist(), rng)),
            "f": pa.array(_with_nulls(floats, rng), pa.float64()),
            "f32": pa.array((rng.integers(-8, 9, n) / 4).tolist(), pa.float32()),
            "s": pa.array(_with_nulls(rng.choice(STRINGS, n).tolist(), rng), pa.string()),
            "ls": pa.array(_with_nulls(rng.choice(STRINGS, n).tolist(), rng), pa.large_string()),
            "b": pa.array(_with_nulls((rng.random(n) > 0.5).tolist(), rng), pa.bool_()),
            "d": pa.array(
                _with_nulls(
                    [BASE_DATE + dt.timedelta(days=int(k)) for k in rng.integers(0, 90, n)], rng
                ),
                pa.date32(),
            ),
            "ts": pa.array(
                _with_nulls(
                    [BASE_TS + dt.timedelta(minutes=int(k) * 37) for k in rng.integers(0, 4000, n)],
                    rng,
                ),
                pa.timestamp("us"),
            ),
            "tz": pa.array(
                _with_nulls(
                    [BASE_TS + dt.timedelta(hours=int(k)) for k in rng.integers(0, 500, n)], rng
                ),
                pa.timestamp("us", tz="UTC"),
            ),
            "dec": pa.array(
                _with_nulls([Decimal(int(k)) / 100 for k in rng.integers(-1000, 1000, n)], rng),
                pa.decimal128(10, 2),
            ),
            "st": pa.array(st_values, pa.struct([("x", pa.int32()), ("y", pa.string())])),
            "Mixed Col": pa.array(rng.integers(0, 10, n).tolist(), pa.int16()),
            "MixedCase": pa.array(rng.integers(0, 10, n).tolist(), pa.int64()),
        }
    )


TABLE = build_table()
SCHEMA = TABLE.schema


@pytest.fixture(scope="session")
def pylance_ds(tmp_path_factory: pytest.TempPathFactory) -> lance.LanceDataset:
    uri = str(tmp_path_factory.mktemp("filters") / "table.lance")
    lance.write_dataset(TABLE, uri)
    return lance.dataset(uri)


def pylance_ids(ds: lance.LanceDataset, sql: str) -> list[int]:
    return sorted(ds.to_table(filter=sql, columns=["id"]).column("id").to_pylist())


def our_ids(sql: str | pc.Expression, table: pa.Table = TABLE) -> list[int]:
    return sorted(table.filter(parse_filter(sql, table.schema)).column("id").to_pylist())


# -- filters pylance accepts: same rows -----------------------------------------------------

SQL_FILTERS = [
    "i > 5",
    "i >= 5 AND s = 'abc'",
    "i < 0 OR f > 2.5",
    "NOT (i = 1 OR b)",
    "i <> 2",
    "i != 2",
    "i == 3",
    "5 < i",
    "s IS NULL",
    "s IS NOT NULL",
    "f IS NULL",
    "st IS NULL",
    "st.x IS NULL",
    "st.x > 10",
    "st.y = 'k3'",
    "st['x'] < 5",
    "st.x BETWEEN 2 AND 5",
    "st.x IN (1, 2, 9)",
    "s LIKE 'a%'",
    "s LIKE 'a_c'",
    "s LIKE 'a\\%c'",
    "s LIKE 'a\\_c'",
    "s LIKE 'b\\\\c'",
    "s NOT LIKE '%c'",
    "s ILIKE 'ABC%'",
    "s LIKE '%'",
    "ls LIKE '%b%'",
    "s = 'it''s'",
    's = "abc"',
    "s > 'a'",
    "s < 'b' AND s >= 'A'",
    "i IN (1, 2, 3)",
    "i NOT IN (1, 2, NULL)",
    "i IN (1, NULL)",
    "i NOT IN (-1, 0, 1)",
    "s IN ('abc', 'xyz')",
    "ls IN ('abc', 'it''s')",
    "f IN (0.0, 1.5)",
    "f32 IN (0.25, -0.5)",
    "d IN (date '2020-01-05', date '2020-02-01')",
    "i BETWEEN 1 AND 10",
    "i BETWEEN 10 AND 1",
    "i NOT BETWEEN -5 AND 5",
    "f BETWEEN -1 AND 1",
    "s BETWEEN 'a' AND 'b'",
    "b",
    "NOT b",
    "b = true",
    "b = false",
    "b IS TRUE",
    "b IS NOT TRUE",
    "b IS FALSE",
    "b IS NOT FALSE",
    "b IN (true)",
    "f > 2",
    "f < 0",
    "f <= 0",
    "f = 0",
    "f = -0.0",
    "f >= 1e10",
    "f != 1.5",
    "f > -1",
    "NOT (f > 2)",
    "f > 1e308 * 10",
    "f32 > 0.1",
    "f32 = 0.25",
    "f32 * 4 = 1",
    "d = date '2020-01-05'",
    "d > date '2020-03-01'",
    "d = date '2020-1-5'",
    "ts > timestamp '2020-01-05 00:00:00'",
    "ts <= timestamp '2020-01-03T12:00:00'",
    "ts BETWEEN timestamp '2020-01-01 00:00:00' AND timestamp '2020-01-10 00:00:00'",
    "ts > timestamp '2020-01-05 00:00:00+02:00'",
    "tz <= timestamp '2020-01-03 12:00:00'",
    "tz > timestamp '2020-01-10 01:00:00+01:00'",
    "ts > date '2020-01-20'",
    "d > timestamp '2020-02-01 00:00:00'",
    "dec > 3",
    "dec = 5",
    "dec < -2 OR dec > 9",
    "dec BETWEEN 1 AND 5",
    "dec > CAST('3.3' AS DECIMAL(10,2))",
    "dec >= CAST(4.444 AS DECIMAL(10,2))",
    "dec + 1 > 5",
    "dec * 2 > 5",
    "dec % 2 > 1",
    "i + i8 * 2 > 10",
    "i - 3 < i8",
    "i / 2 = 2",
    "i / 3 = -2",
    "i % 3 = 1",
    "i % 3 = -1",
    "-i > 3",
    "i + f > 3",
    "u16 + 65000 > 65500",
    "u16 * 70000 > 1000000000",
    "i * 1000000000 > 0",
    "big * 9223372 > 0",
    "big + 9223372036854775807 < 0",
    "abs(i) > 5",
    "lower(s) = 'abc'",
    "upper(s) LIKE 'A%'",
    "length(s) = 3",
    "starts_with(s, 'a')",
    "ends_with(s, 'c')",
    "contains(s, 'b')",
    "regexp_like(s, '^a.c$')",
    "regexp_like(s, 'A.C', 'i')",
    "regexp_match(s, 'b+')",
    "NOT regexp_match(s, 'b')",
    "isnan(f)",
    "is_valid(i)",
    "coalesce(i, 0) = 0",
    "s || 'x' = 'abcx'",
    "ls || 'x' = 'abcx'",
    "CAST(i AS DOUBLE) / 2 = 1.5",
    "strpos(s, 'b') > 1",
    "strpos(s, 'b') = 0",
    "round(f) = 2",
    "round(f, 1) > 0.5",
    "sqrt(abs(f)) > 1",
    "reverse(s) = 'cba'",
    "concat(s, 'x', ls) = 'abcxabc'",
    "left(s, 1) = 'a'",
    "right(s, 2) = 'bc'",
    "lpad(s, 5, '*') = '**abc'",
    "replace(s, 'b', 'x') = 'axc'",
    "nullif(i, 3) IS NULL",
    "greatest(i, i8) > 3",
    "least(i, i8) < 0",
    "octet_length(s) > 3",
    "ln(abs(f) + 1) > 1",
    "power(f, 2) > 2",
    "CAST(f AS FLOAT) > 1",
    "CAST(ts AS DATE) = date '2020-01-02'",
    "CAST(d AS TIMESTAMP) > timestamp '2020-02-03 00:00:00'",
    "CAST(i AS STRING) = '3'",
    "CAST(i AS BIGINT) * 3000000000 > 0",
    "CAST('3' AS INT) = i",
    "`Mixed Col` > 3",
    "MixedCase > 6",
    "mixedcase > 6",
    "MIXEDCASE < 2",
    "(i > 1 AND (s LIKE 'a%' OR f < 0)) OR NOT (b AND d IS NULL)",
    "i = 3 AND s = 'abc' OR b",
    "i = 3 OR s = 'abc' AND b",
    "i = NULL",
    "b = NULL",
    "s LIKE NULL",
    "i + NULL IS NULL",
    "true",
    "false",
    "1 = 1",
    "i = 1 + 2",
    "f32 = 0.25 + 0",
]


@pytest.mark.parametrize("sql", SQL_FILTERS)
def test_sql_filter_matches_pylance(pylance_ds: lance.LanceDataset, sql: str) -> None:
    assert our_ids(sql) == pylance_ids(pylance_ds, sql)


def test_whole_rows_match_pylance(pylance_ds: lance.LanceDataset) -> None:
    """Not just the ids: the filtered tables are equal row for row (NaN-free columns)."""
    sql = "(i > 0 OR st.x < 3) AND s IS NOT NULL"
    cols = [c for c in SCHEMA.names if c != "f"]
    theirs = pylance_ds.to_table(filter=sql, columns=cols).sort_by("id")
    ours = TABLE.select(cols).filter(parse_filter(sql, SCHEMA)).sort_by("id")
    assert ours.num_rows > 10
    assert ours.equals(theirs.cast(ours.schema))


# -- where we accept more than pylance: same rows as pylance's spelling -------------------

EQUIVALENT = [
    ("d = '2020-01-05'", "d = date '2020-01-05'"),
    ("d >= '2020-02-01'", "d >= date '2020-02-01'"),
    ("ts > '2020-01-05 00:00:00'", "ts > timestamp '2020-01-05 00:00:00'"),
    ("ts > '2020-01-05'", "ts > timestamp '2020-01-05 00:00:00'"),
    ("ts > '2020-01-05T01:00:00+01:00'", "ts > timestamp '2020-01-05 00:00:00'"),
    ("tz < '2020-01-07 06:00'", "tz < timestamp '2020-01-07 06:00:00'"),
    ("d IN ('2020-01-05', '2020-02-01')", "d IN (date '2020-01-05', date '2020-02-01')"),
    ("i > 2.5", "i >= 3"),
    ("i = 3.0", "i = 3"),
    ("i IN (1.0, 3)", "i IN (1, 3)"),
    ("i < 3000000000", "i IS NOT NULL"),
    ("u16 > -1", "u16 >= 0"),
    ("dec > 3.3", "dec > CAST('3.3' AS DECIMAL(10,2))"),
    ("dec = 4.25", "dec = CAST('4.25' AS DECIMAL(10,2))"),
    ("dec > 3.333", "dec > CAST('3.34' AS DECIMAL(10,2)) OR dec = CAST('3.34' AS DECIMAL(10,2))"),
    ("s LIKE 'a!%c' ESCAPE '!'", "s LIKE 'a\\%c'"),
    ("s LIKE 'a!_c!!' ESCAPE '!'", "s = 'a_c!'"),
    ("b IS UNKNOWN", "b IS NULL"),
    ("CAST(i AS VARCHAR) = '3'", "CAST(i AS STRING) = '3'"),
    ("trim(s) = 'Abc'", "s = 'Abc ' OR s = 'Abc'"),
    ("+i > 0", "i > 0"),
    ("ts = timestamp '2020-01-01 07:00'", "ts = timestamp '2020-01-01 07:00:00'"),
]


@pytest.mark.parametrize(("ours", "theirs"), EQUIVALENT)
def test_extensions_match_pylance_spelling(
    pylance_ds: lance.LanceDataset, ours: str, theirs: str
) -> None:
    assert our_ids(ours) == pylance_ids(pylance_ds, theirs)


def test_decimal_literal_compares_exactly() -> None:
    """A literal with more digits than the column compares exactly, not via float."""
    table = pa.table(
        {
            "id": [0, 1, 2],
            "v": pa.array([Decimal("3.33"), Decimal("3.34"), None], pa.decimal128(5, 2)),
        }
    )
    assert our_ids("v > 3.333", table) == [1]
    assert our_ids("v < 3.335", table) == [0]
    assert our_ids("v < 3.345", table) == [0, 1]
    assert our_ids("v = 3.330", table) == [0]


def test_timestamp_literal_finer_than_column() -> None:
    """A nanosecond literal against a microsecond column is not rounded into equality."""
    table = pa.table({"id": [0], "t": pa.array([dt.datetime(2020, 1, 1, 7)], pa.timestamp("us"))})
    assert our_ids("t = '2020-01-01 07:00:00.000000001'", table) == []
    assert our_ids("t < '2020-01-01 07:00:00.000000001'", table) == [0]
    # a typed literal is cast first, and a cast truncates to its unit as in pylance
    assert our_ids("t = timestamp '2020-01-01 07:00:00.000000001'", table) == [0]


def test_dictionary_column() -> None:
    table = pa.table({"id": [0, 1, 2, 3], "c": pa.array(["a", "b", None, "a"]).dictionary_encode()})
    assert our_ids("c = 'a'", table) == [0, 3]
    assert our_ids("c LIKE 'b%' OR c IN ('x', 'a')", table) == [0, 1, 3]


# -- Arrow expressions are accepted as they are ---------------------------------------------


def test_expression_filter_matches_pylance(pylance_ds: lance.LanceDataset) -> None:
    expr = (pc.field("i") > 3) & pc.field("st", "x").is_valid() | pc.field("s").isin(["abc"])
    assert parse_filter(expr, SCHEMA).equals(expr)
    sql = "(i > 3 AND st.x IS NOT NULL) OR s IN ('abc')"
    assert our_ids(expr) == pylance_ids(pylance_ds, sql)
    assert parse_filter(None, SCHEMA) is None


def test_expression_errors() -> None:
    with pytest.raises(SchemaError) as info:
        parse_filter(pc.field("nope") > 1, SCHEMA)
    assert info.value.column == "nope"
    with pytest.raises(SchemaError) as info:
        parse_filter(pc.field("st", "nope") > 1, SCHEMA)
    assert info.value.column == "st.nope"
    with pytest.raises(InvalidArgumentError, match="boolean"):
        parse_filter(pc.field("i") + 1, SCHEMA)
    with pytest.raises(InvalidArgumentError, match="cannot be evaluated"):
        parse_filter(pc.field("s") + 1 > 2, SCHEMA)
    with pytest.raises(InvalidArgumentError, match="SQL string or"):
        parse_filter(42, SCHEMA)  # type: ignore[arg-type]


# -- errors: typed, naming the column or quoting the SQL -----------------------------------

UNKNOWN_COLUMNS = [
    ("nope > 1", "nope"),
    ("i > 1 AND nope IS NULL", "nope"),
    ("st.nope = 1", "st.nope"),
    ("s.x > 1", "s"),
    ("`I` > 1", "I"),
    ("lower(nope) = 'a'", "nope"),
]


@pytest.mark.parametrize(("sql", "column"), UNKNOWN_COLUMNS)
def test_unknown_column(pylance_ds: lance.LanceDataset, sql: str, column: str) -> None:
    with pytest.raises(SchemaError) as info:
        parse_filter(sql, SCHEMA)
    assert info.value.column == column
    assert sql in str(info.value)
    with pytest.raises(Exception):  # noqa: B017 - pylance rejects it too
        pylance_ds.to_table(filter=sql)


SYNTAX_ERRORS = [
    "i = 1 AND",
    "i >",
    "(i > 1",
    "s = 'unterminated",
    "i IN ()",
    "SELECT 1",
    "i = 0x1F",
]
# pylance reads only the first statement or expression of these and ignores the rest
TRAILING_GARBAGE = ["i > 1)", "i = 1; DROP TABLE t", "i = 1 i = 2"]


@pytest.mark.parametrize("sql", SYNTAX_ERRORS)
def test_syntax_error(pylance_ds: lance.LanceDataset, sql: str) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        parse_filter(sql, SCHEMA)
    assert repr(sql) in str(info.value)
    with pytest.raises(Exception):  # noqa: B017 - pylance rejects it too
        pylance_ds.to_table(filter=sql)


@pytest.mark.parametrize("sql", TRAILING_GARBAGE)
def test_trailing_garbage_is_an_error(sql: str) -> None:
    with pytest.raises(InvalidArgumentError, match="not valid SQL"):
        parse_filter(sql, SCHEMA)


UNSUPPORTED = [
    ("no_such_function(i) > 1", "no_such_function"),
    ("md5(s) = 'x'", "MD5"),
    ("i IN (SELECT 1)", "IN with a query"),
    ("EXISTS (SELECT 1)", "EXISTS"),
    ("CASE WHEN i > 1 THEN true ELSE false END", "CASE"),
    ("TRY_CAST(s AS INT) IS NULL", "TRY_CAST"),
    ("i BETWEEN SYMMETRIC 1 AND 2", "SYMMETRIC"),
    ("s LIKE s", "pattern"),
    ("CAST(i AS DECIMAL) > 1", "DECIMAL"),
    ("CAST(i AS MAP(INT, INT)) IS NULL", "MAP"),
    ("i = @p", "PARAMETER"),
]


@pytest.mark.parametrize(("sql", "construct"), UNSUPPORTED)
def test_unsupported_sql(sql: str, construct: str) -> None:
    with pytest.raises(InvalidArgumentError, match="unsupported") as info:
        parse_filter(sql, SCHEMA)
    message = str(info.value)
    assert construct.lower() in message.lower()
    assert repr(sql) in message


TYPE_ERRORS = [
    ("s > 1", "cannot compare"),
    ("i = 'a'", "cannot compare"),
    ("i AND b", "boolean"),
    ("NOT i", "boolean"),
    ("i + s > 1", "arithmetic"),
    ("d + 1 > d", "arithmetic"),
    ("NULL", "boolean"),
    ("i", "boolean"),
    ("st.y", "boolean"),
    ("i LIKE 'a%'", "LIKE needs a string"),
    ("d = 'yesterday'", "not a date"),
    ("ts > '2020-13-01'", "cannot read"),
    ("st = 1", "cannot compare"),
    ("CAST('x' AS INT) = i", "cannot cast"),
    ("", "empty"),
    ("   ", "empty"),
]


@pytest.mark.parametrize(("sql", "fragment"), TYPE_ERRORS)
def test_type_errors(sql: str, fragment: str) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        parse_filter(sql, SCHEMA)
    assert fragment.lower() in str(info.value).lower()


# -- referenced columns ---------------------------------------------------------------------

REFERENCED = [
    ("i > 1 AND s = 'x'", ["i", "s"]),
    ("st.x > 1", ["st.x"]),
    ("st IS NULL OR st.y = 'a'", ["st"]),
    ("st.x > 1 AND st.y = 'a'", ["st.x", "st.y"]),
    ("`Mixed Col` > 1", ["Mixed Col"]),
    ("mixedcase > 1", ["MixedCase"]),
    ("i + i8 > big AND i > 0", ["big", "i", "i8"]),
    ("lower(s) LIKE 'a%' OR ts > '2020-01-01'", ["s", "ts"]),
    ("true", []),
    ("1 = 1", []),
]


@pytest.mark.parametrize(("sql", "expected"), REFERENCED)
def test_referenced_columns(sql: str, expected: list[str]) -> None:
    compiled = compile_filter(sql, SCHEMA)
    assert isinstance(compiled, CompiledFilter)
    assert compiled.columns == expected
    assert referenced_columns(compiled.expression, SCHEMA) == expected
    # an equal expression that was not made here is probed and gives the same answer
    copy = pickle.loads(pickle.dumps(compiled.expression))
    assert_probe_agrees(copy, compiled)


def assert_probe_agrees(expr: pc.Expression, compiled: CompiledFilter) -> None:
    """Probing finds the same top-level columns; its nested paths lie within ours.

    (A struct read whole, as in ``st IS NULL``, still binds without its fields, so probing
    may report only the fields some other part reads.)
    """
    probed = filters_module._probe_paths(expr, SCHEMA)
    assert sorted({p[0] for p in probed}) == sorted(compiled.top_level_columns)
    for path in probed:
        assert any(path[: len(q)] == q for q in compiled.paths), (path, compiled.paths)


@pytest.mark.parametrize("sql", SQL_FILTERS)
def test_referenced_columns_suffice(sql: str) -> None:
    """Reading only the reported top-level columns gives the same rows; none is spare."""
    compiled = compile_filter(sql, SCHEMA)
    tops = compiled.top_level_columns
    narrow = TABLE.select(["id", *[c for c in tops if c != "id"]])
    assert our_ids(compiled.expression, narrow) == our_ids(sql)
    assert_probe_agrees(compiled.expression, compiled)
    for dropped in tops:
        rest = [c for c in tops if c != dropped]
        with pytest.raises((pa.ArrowInvalid, pa.ArrowKeyError)):
            TABLE.select(rest).filter(compiled.expression)


def test_referenced_columns_of_foreign_expression() -> None:
    expr = (pc.field("st", "x") > 1) & pc.field("f").is_null() | (pc.field("i") == pc.field("i8"))
    assert referenced_columns(expr, SCHEMA) == ["f", "i", "i8", "st.x"]
    nested = pa.schema(
        [
            ("a", pa.struct([("b.c", pa.int8()), ("d", pa.struct([("e", pa.int8())]))])),
            ("z", pa.int8()),
        ]
    )
    expr = (pc.field("a", "b.c") > 1) | (pc.field("a", "d", "e") == 2)
    assert referenced_columns(expr, nested) == ["a.`b.c`", "a.d.e"]
    assert compile_filter("a.`b.c` > 1 OR a.d.e = 2", nested).columns == ["a.`b.c`", "a.d.e"]
    assert compile_filter("a.`b.c` > 1", nested).top_level_columns == ["a"]


# -- random predicates against pylance ------------------------------------------------------


def _sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _column_values(name: str) -> list:
    return [v for v in TABLE.column(name).to_pylist() if v is not None]


INT_RANGES = {
    "i": (-(2**31), 2**31 - 1),
    "i8": (-128, 127),
    "u16": (0, 65535),
    "st.x": (0, 2**31 - 1),
}


def _int_literal(column: str) -> st.SearchStrategy[str]:
    lo, hi = INT_RANGES[column]
    source = "st" if column == "st.x" else column
    seen = (
        [r["x"] for r in _column_values("st") if r["x"] is not None]
        if source == "st"
        else _column_values(column)
    )
    return st.one_of(st.sampled_from(seen), st.integers(max(lo, -300), min(hi, 70000))).map(str)


def _float_literal() -> st.SearchStrategy[str]:
    seen = [v for v in _column_values("f") if v == v and abs(v) != float("inf")]
    finite = st.floats(-20, 20, allow_nan=False).map(lambda v: repr(round(v, 2)))
    return st.one_of(st.sampled_from(seen).map(repr), finite, st.integers(-10, 10).map(str))


def _date_literal() -> st.SearchStrategy[str]:
    days = st.integers(-5, 95).map(lambda k: BASE_DATE + dt.timedelta(days=k))
    return days.map(lambda d: f"date '{d.isoformat()}'")


def _ts_literal() -> st.SearchStrategy[str]:
    minutes = st.integers(0, 4000 * 37).map(lambda k: BASE_TS + dt.timedelta(minutes=k))
    return minutes.map(lambda t: f"timestamp '{t.isoformat(sep=' ')}'")


LITERALS: dict[str, st.SearchStrategy[str]] = {
    "i": _int_literal("i"),
    "i8": _int_literal("i8"),
    "u16": _int_literal("u16"),
    "st.x": _int_literal("st.x"),
    "f": _float_literal(),
    "f32": st.integers(-10, 10).map(lambda k: repr(k / 4)),
    "s": st.one_of(st.sampled_from(STRINGS), st.text("abcX'%_ ", max_size=4)).map(_sql_string),
    "ls": st.sampled_from(STRINGS).map(_sql_string),
    "b": st.sampled_from(["true", "false"]),
    "d": _date_literal(),
    "ts": _ts_literal(),
    "tz": _ts_literal(),
    "dec": st.integers(-12, 12).map(str),
    "big": st.sampled_from([-(10**12), 0, 3 * 10**12, 7]).map(str),
}
COLUMNS = sorted(LITERALS)
OPS = ["=", "<>", "<", "<=", ">", ">=", "!="]


@st.composite
def atoms(draw: st.DrawFn, in_list: bool = False) -> str:
    column = draw(st.sampled_from(COLUMNS))
    literal = LITERALS[column]
    kinds = ["cmp", "cmp", "cmp", "null", "between", "like", "colcmp", "expr", "bool"]
    kind = "in" if in_list else draw(st.sampled_from(kinds))
    if kind == "null":
        return f"{column} IS {draw(st.sampled_from(['NULL', 'NOT NULL']))}"
    if kind == "in":
        # no NULL in random lists: pylance's optimiser merges IN lists and loses it (see
        # test_in_list_merge_keeps_sql_nulls); fixed cases above cover NULL in lists
        values = draw(st.lists(literal, min_size=1, max_size=4))
        neg = draw(st.sampled_from(["", "NOT "]))
        return f"{column} {neg}IN ({', '.join(values)})"
    if kind == "between":
        neg = draw(st.sampled_from(["", "NOT "]))
        return f"{column} {neg}BETWEEN {draw(literal)} AND {draw(literal)}"
    if kind == "like" and column in ("s", "ls"):
        pattern = draw(st.text("abcX%_", max_size=4))
        op = draw(st.sampled_from(["LIKE", "NOT LIKE", "ILIKE"]))
        return f"{column} {op} {_sql_string(pattern)}"
    if kind == "bool":
        return draw(st.sampled_from(["b", "NOT b", "b IS NOT FALSE", "b IS FALSE", "b = true"]))
    if kind == "expr":
        left = draw(
            st.sampled_from(
                [
                    "i + i8",
                    "i - 7",
                    "i * i8",
                    "i8 * 100000",
                    "u16 + 65000",
                    "i % 4",
                    "i8 / 3",
                    "-i",
                    "abs(i8)",
                    "f * 2",
                    "f32 + 0.5",
                    "dec + 1",
                    "length(s)",
                    "CAST(i AS DOUBLE) / 4",
                    "coalesce(i, i8)",
                ]
            )
        )
        return f"{left} {draw(st.sampled_from(OPS))} {draw(st.integers(-30, 30))}"
    if kind == "colcmp":
        pairs = [("i", "i8"), ("i", "f"), ("f", "f32"), ("i8", "u16"), ("d", "ts"), ("s", "ls")]
        left, right = draw(st.sampled_from(pairs))
        return f"{left} {draw(st.sampled_from(OPS))} {right}"
    op = draw(st.sampled_from(OPS))
    if draw(st.booleans()):
        return f"{column} {op} {draw(literal)}"
    return f"{draw(literal)} {op} {column}"


def _core(sql: str) -> str:
    while sql.startswith("NOT (") and sql.endswith(")"):
        sql = sql[5:-1]
    return sql


def _not_self_contradiction(t: tuple[str, str, str]) -> bool:
    """pylance's optimiser rewrites ``A AND NOT A`` shapes without regard to NULLs (see
    test_contradiction_keeps_sql_nulls), so random predicates never pair a term with itself."""
    return _core(t[0]) != _core(t[2])


def predicates() -> st.SearchStrategy[str]:
    """Random trees of atoms, plus at most one IN list.

    pylance's optimiser merges two IN lists on one column (``x IN A OR x NOT IN B``) as if
    x could not be NULL (see test_in_list_merge_keeps_sql_nulls), so a predicate never
    holds two.
    """
    tree = st.recursive(
        atoms(),
        lambda inner: st.one_of(
            st.tuples(inner, st.sampled_from(["AND", "OR"]), inner)
            .filter(_not_self_contradiction)
            .map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
            inner.map(lambda p: f"NOT ({p})"),
            inner.map(lambda p: f"({p}) IS {'TRUE'}"),
        ),
        max_leaves=6,
    )
    with_in = st.tuples(
        tree, st.sampled_from(["AND", "OR", "AND NOT", "OR NOT"]), atoms(in_list=True)
    ).map(lambda t: f"({t[0]}) {t[1]} ({t[2]})")
    return st.one_of(tree, with_in, atoms(in_list=True))


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(sql=predicates())
def test_random_predicates_match_pylance(pylance_ds: lance.LanceDataset, sql: str) -> None:
    assert our_ids(sql) == pylance_ids(pylance_ds, sql), sql


def test_contradiction_keeps_sql_nulls(pylance_ds: lance.LanceDataset) -> None:
    """``NOT (NOT (x IN L) AND x IN L)`` is NULL where x is NULL, so those rows are dropped.

    pylance's optimiser folds the whole predicate to TRUE and keeps them; we follow SQL.
    """
    sql = "NOT ((NOT (i IN (1, 3))) AND i IN (1, 3))"
    valid = [
        r
        for r, v in zip(TABLE["id"].to_pylist(), TABLE["i"].to_pylist(), strict=True)
        if v is not None
    ]
    assert our_ids(sql) == valid
    assert pylance_ids(pylance_ds, sql) == list(range(N_ROWS))  # the documented difference


def test_in_list_merge_keeps_sql_nulls(pylance_ds: lance.LanceDataset) -> None:
    """``x IN (1, 3, NULL) AND x IN (3, 5)`` is NULL for x = 5, and stays NULL under NOT.

    pylance's optimiser intersects the two lists into ``x IN (3)``, dropping the NULL, and
    so keeps the x = 5 rows; we follow SQL.
    """
    sql = "NOT (i IN (1, 3, NULL) AND i IN (3, 5))"
    values = TABLE["i"].to_pylist()
    expected = [r for r, v in enumerate(values) if v is not None and v != 3 and v != 5]
    assert our_ids(sql) == expected
    fives = [r for r, v in enumerate(values) if v == 5]
    assert fives and pylance_ids(pylance_ds, sql) == sorted(expected + fives)
    # and without a NULL in either list: disjoint NOT IN lists are folded to TRUE
    sql = "NOT ((s NOT IN ('abc') OR s NOT IN ('xyz')) IS TRUE)"
    nulls = [r for r, v in enumerate(TABLE["s"].to_pylist()) if v is None]
    assert nulls and our_ids(sql) == nulls
    assert pylance_ids(pylance_ds, sql) == []


def test_long_or_chain_and_deep_nesting() -> None:
    """Thousands of ORs (a generated filter) work; absurd nesting is a typed error."""
    sql = " OR ".join(f"i = {k}" for k in range(-20, 2980))
    expected = [r for r, v in enumerate(TABLE["i"].to_pylist()) if v is not None]
    assert our_ids(sql) == expected
    assert referenced_columns(parse_filter(sql, SCHEMA), SCHEMA) == ["i"]
    with pytest.raises(InvalidArgumentError, match="nested too deeply"):
        parse_filter("(" * 3000 + "i = 1" + ")" * 3000, SCHEMA)


# -- long IN lists and the size and depth limits ---------------------------------------------


def _sql_list(values: list) -> str:
    """Python values as SQL literals, as a generated filter would write them."""
    out = []
    for v in values:
        if v is None:
            out.append("NULL")
        elif isinstance(v, str):
            out.append(_sql_string(v))
        else:
            out.append(repr(v))
    return ", ".join(out)


def _long_lists() -> tuple[list[str], list[str]]:
    """Long IN lists pylance accepts, and ones it refuses where we read each literal as a
    comparison would (values beyond the column's type, dates written as strings)."""
    rng = np.random.default_rng(7)

    def pick(column: str, k: int) -> list:
        values = [v for v in TABLE[column].to_pylist() if v is not None and v == v]
        return [values[j] for j in rng.integers(0, len(values), k)]

    accepted = [
        f"i IN ({_sql_list(pick('i', 30) + [-1000, 7])})",
        f"i NOT IN ({_sql_list(pick('i', 30))})",
        f"i IN ({_sql_list(pick('i', 20) + [None])})",  # NULL: misses become NULL
        f"i NOT IN ({_sql_list(pick('i', 20) + [None])})",
        f"i8 IN ({_sql_list(pick('i8', 20))})",
        f"u16 IN ({_sql_list(pick('u16', 20))})",
        f"big IN ({_sql_list(pick('big', 20))})",
        f"f IN ({_sql_list(pick('f', 20) + [0, -0.0, 1e10, 3])})",
        f"f IN ({', '.join(['1.5e0', '.5', '-0', '2', '-3.25', '1E10'] * 3)})",
        f"f32 IN ({_sql_list(pick('f32', 20) + [0.1, -0.0])})",
        f"f NOT IN ({_sql_list(pick('f', 20) + [None])})",
        f"s IN ({_sql_list(pick('s', 20))})",  # it's: escaped quotes
        f"s IN ({_sql_list(['abc', 'xyz', 'a_c'] * 6 + [None])})",
        f"s NOT IN ({', '.join('  ' + _sql_string(v) for v in STRINGS * 2)})",
        f"ls IN ({_sql_list(pick('ls', 20))})",
        f"dec IN ({_sql_list(list(range(-12, 12)))})",
        f"s IN ({_sql_list(pick('s', 20))}) AND i IN ({_sql_list(pick('i', 20))})",
        f"i > 3 OR (s IN ({_sql_list(pick('s', 16))}) AND NOT i8 IN ({_sql_list(pick('i8', 16))}))",
        f"s = 'x IN ({_sql_list(list(range(20)))})' OR i IN ({_sql_list(pick('i', 16))})",
    ]
    refused_by_pylance = [
        f"i IN ({_sql_list(pick('i', 20) + [10**10])})",
        f"i8 IN ({_sql_list(pick('i8', 20) + [300, -129])})",
        f"u16 IN ({_sql_list(pick('u16', 20) + [-1])})",
        f"big IN ({_sql_list(pick('big', 20) + [2**63 + 5])})",
        f"i IN ({_sql_list([float(v) for v in pick('i', 20)] + [2.5])})",
        f"s IN ({_sql_list(list(range(20)))})",
        f"dec IN ({', '.join(str(v) for v in pick('dec', 20))}, 3, -0.5, 1e1)",
        f"dec NOT IN ({', '.join(str(v) for v in pick('dec', 20))}, 0.125)",  # one by one
        f"d IN ({_sql_list([str(d) for d in pick('d', 20)])})",
        f"d NOT IN ({_sql_list([str(d) for d in pick('d', 20)] + ['2020-1-5', ' 2020-02-01'])})",
    ]
    return accepted, refused_by_pylance


LONG_LISTS, LONG_LISTS_OURS_ONLY = _long_lists()


def _outcome(sql: str) -> list[int] | str:
    try:
        return our_ids(sql)
    except InvalidArgumentError as e:
        return type(e).__name__


def _lifted_and_parsed(sql: str, monkeypatch) -> list[int] | str:
    """The outcome of ``sql`` with its lists lifted, checked equal to the parser's."""
    from lance_format.table import filter_text

    assert filter_text.prepare(sql).lists  # the list was lifted
    lifted = _outcome(sql)
    with monkeypatch.context() as m:
        m.setattr(filter_text, "MIN_LIFTED_ITEMS", 10**9)
        assert not filter_text.prepare(sql).lists
        assert _outcome(sql) == lifted
    return lifted


@pytest.mark.parametrize("sql", LONG_LISTS, ids=range(len(LONG_LISTS)))
def test_long_in_lists_match_pylance(pylance_ds, sql: str, monkeypatch) -> None:
    """Lists of 16 literals or more skip the SQL parser (one Arrow array each, built at
    once); the rows must be pylance's, and the same as when the parser reads the list."""
    assert _lifted_and_parsed(sql, monkeypatch) == pylance_ids(pylance_ds, sql)


@pytest.mark.parametrize("sql", LONG_LISTS_OURS_ONLY, ids=range(len(LONG_LISTS_OURS_ONLY)))
def test_long_in_lists_read_as_the_parser_reads_them(sql: str, monkeypatch) -> None:
    """Where pylance refuses a list, lifted or not it means the same to us."""
    _lifted_and_parsed(sql, monkeypatch)


def test_lifted_lists_prune_as_parsed_lists(monkeypatch) -> None:
    from lance_format.table import filter_text

    sql = f"i IN ({_sql_list(list(range(-5, 15)))}) AND s IN ({_sql_list(STRINGS * 2)})"
    lifted = filters_module.conjunct_terms(sql)
    monkeypatch.setattr(filter_text, "MIN_LIFTED_ITEMS", 10**9)
    assert lifted == filters_module.conjunct_terms(sql)
    assert [t[:2] for t in lifted] == [("i", "in"), ("s", "in")]


def test_a_large_in_list_matches_pylance(pylance_ds) -> None:
    """50,000 items (a generated filter), through our dataset scanner too."""
    import lance_format

    values = list(range(-25_000, 25_000))
    ours = lance_format.dataset(pylance_ds.uri)
    for sql in (
        f"i IN ({_sql_list(values)})",
        f"s IN ({_sql_list([f'v{k}' for k in values] + ['abc'])})",
    ):
        expected = pylance_ids(pylance_ds, sql)
        assert our_ids(sql) == expected
        scanned = ours.to_table(filter=sql, columns=["id"]).column("id").to_pylist()
        assert sorted(scanned) == expected


def test_lifted_list_errors_name_the_list() -> None:
    sql = f"b IN ({_sql_list(list(range(20)))})"
    with pytest.raises(InvalidArgumentError) as e:
        parse_filter(sql, SCHEMA)
    assert "<20 values>" in str(e.value) and "lance_in_" not in str(e.value)


def test_a_placeholder_the_user_wrote_is_not_a_lifted_list() -> None:
    from lance_format.table import filter_text

    sql = f"i IN ({_sql_list(list(range(20)))}) OR i IN (:{filter_text.PLACEHOLDER_PREFIX}0)"
    with pytest.raises(InvalidArgumentError, match="PLACEHOLDER"):
        parse_filter(sql, SCHEMA)


DEEP = {
    "parentheses": "(" * 3000 + "i = 1" + ")" * 3000,
    "not": "NOT " * 100_000 + "b",
    "minus": "i = " + "- " * 100_000 + "1",
    "functions": "abs(" * 5000 + "i" + ")" * 5000 + " = 1",
    "case": "CASE WHEN " * 2000 + "b THEN 1 ELSE 0 END" * 2000 + " = 1",
    "arithmetic": "i" + " + i" * 2000 + " = 1",
    "mixed": "(NOT " * 20 + "b" + ")" * 20,
}


@pytest.mark.parametrize("sql", DEEP.values(), ids=DEEP.keys())
def test_deep_nesting_is_a_clear_error(sql: str) -> None:
    """Refused before the recursive parser or translator could run out of stack."""
    with pytest.raises(InvalidArgumentError, match="nested too deeply") as e:
        parse_filter(sql, SCHEMA)
    assert not isinstance(e.value.__context__, RecursionError)
    assert len(str(e.value)) < 600  # the filter is quoted cut short


def test_nesting_within_the_limits_matches_pylance(pylance_ds) -> None:
    from lance_format.table import filter_text

    depth = filter_text.MAX_FILTER_DEPTH
    sqls = [
        "(" * depth + "i = 1" + ")" * depth,
        "NOT (" * (depth * 2 // 3) + "i = 1" + ")" * (depth * 2 // 3),
        "i" + " + i" * (filter_text.MAX_TREE_DEPTH - 8) + " > 3",
    ]
    for sql in sqls:
        assert our_ids(sql) == pylance_ids(pylance_ds, sql)


def test_size_limits(monkeypatch) -> None:
    from lance_format.table import filter_text

    or_chain = " OR ".join(f"i = {k}" for k in range(10_000))  # ~120 KB for the parser
    assert len(or_chain) > filter_text.MAX_PARSED_BYTES
    with pytest.raises(InvalidArgumentError, match="outside long IN"):
        parse_filter(or_chain, SCHEMA)
    as_list = f"i IN ({', '.join(str(k) for k in range(-20, 10_000))})"  # as a list
    assert our_ids(as_list) == [r for r, v in enumerate(TABLE["i"].to_pylist()) if v is not None]
    monkeypatch.setattr(filter_text, "MAX_FILTER_BYTES", len(as_list) - 1)
    with pytest.raises(InvalidArgumentError, match="characters long; the limit is"):
        parse_filter(as_list, SCHEMA)


LIFTABLE = ["i", "i8", "u16", "st.x", "f", "f32", "s", "ls", "dec", "big"]


@st.composite
def long_in_lists(draw: st.DrawFn) -> str:
    column = draw(st.sampled_from(LIFTABLE))
    values = draw(st.lists(LITERALS[column], min_size=16, max_size=60))
    neg = draw(st.sampled_from(["", "NOT "]))
    other = draw(atoms())
    joiner = draw(st.sampled_from(["", " AND ", " OR "]))
    listed = f"{column} {neg}IN ({', '.join(values)})"
    return listed if not joiner else f"({other}){joiner}{listed}"


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(sql=long_in_lists())
def test_random_long_in_lists_match_pylance(pylance_ds: lance.LanceDataset, sql: str) -> None:
    from lance_format.table import filter_text

    assert filter_text.prepare(sql).lists, sql  # lifted, not parsed
    assert our_ids(sql) == pylance_ids(pylance_ds, sql), sql


def test_lists_inside_comments_and_strings_stay_text(pylance_ds) -> None:
    from lance_format.table import filter_text

    listed = _sql_list(list(range(20)))
    for sql in (
        f"i = 1 /* i IN ({listed}) */",
        f"i = 1 -- OR i IN ({listed})\n",
        f"s = 'i IN ({listed})' OR i = 1",
    ):
        assert not filter_text.prepare(sql).lists, sql
        assert our_ids(sql) == pylance_ids(pylance_ds, sql) == our_ids("i = 1")


def test_unterminated_comments_and_strings_are_errors() -> None:
    """Each is scanned once (an open comment before a long list once cost a rescan of the
    whole text per comment)."""
    listed = _sql_list(list(range(100_000)))
    for sql in (
        "i = 1 " + "/* a " * 20_000 + f" AND i IN ({listed})",
        f"i = 1 AND s = 'abc AND i IN ({listed})",
        f'i = 1 AND s = "abc AND i IN ({listed})',
        "i = 1 /* AND i = 2",
    ):
        with pytest.raises(InvalidArgumentError):
            parse_filter(sql, SCHEMA)
