"""Expression projections (``columns={"out": "SQL"}``) and scan options, against pylance.

Every expression is run by pylance and by us on the same dataset: the output schema (names in
the order given, types, nullability) and values must be equal.  What pylance refuses we
refuse too, and what we cannot compute is refused clearly, never ignored.
"""

from __future__ import annotations

import math

import lance
import numpy as np
import pyarrow as pa
import pytest

import lance_format
from lance_format.errors import InvalidArgumentError, UnsupportedError

N = 40


def _table(n: int = N) -> pa.Table:
    rng = np.random.default_rng(11)
    ids = np.arange(n)
    words = ["abc", "Hello World", "ÄÖü", "  pad  ", "b.c", "x"]
    nullable = pa.schema(
        [
            pa.field("id", pa.int64(), False),
            pa.field("i32", pa.int32()),
            pa.field("u8", pa.uint8()),
            pa.field("i8", pa.int8()),
            pa.field("x", pa.float64()),
            pa.field("f32", pa.float32()),
            pa.field("s", pa.string()),
            pa.field("ls", pa.large_string(), False),
            pa.field("dec", pa.decimal128(12, 2)),
            pa.field("b", pa.bool_()),
            pa.field("st", pa.struct([pa.field("a", pa.int64(), False)])),
            pa.field("cat", pa.dictionary(pa.int8(), pa.string())),
            pa.field("d", pa.date32()),
            pa.field("ts", pa.timestamp("us")),
            pa.field("tensor", pa.fixed_shape_tensor(pa.float32(), [2])),
        ]
    )
    valid = ids % 7 != 3
    tensor = pa.FixedSizeListArray.from_arrays(pa.array(rng.random(2 * n), pa.float32()), 2)
    return pa.Table.from_arrays(
        [
            pa.array(ids),
            pa.array(rng.integers(-1000, 1000, n), pa.int32(), mask=~valid),
            pa.array(rng.integers(0, 255, n), pa.uint8(), mask=~valid),
            pa.array(rng.integers(-128, 127, n), pa.int8()),
            pa.array(rng.normal(0, 10, n), mask=~valid),
            pa.array(rng.normal(0, 10, n), pa.float32()),
            pa.array(
                [
                    words[i % len(words)] if v else None
                    for i, v in zip(ids.tolist(), valid.tolist(), strict=True)
                ]
            ),
            pa.array([words[(i + 2) % len(words)] for i in ids], pa.large_string()),
            pa.array(rng.integers(-9999, 9999, n), pa.int32()).cast(pa.decimal128(12, 2)),
            pa.array(
                [
                    bool(i % 2) if v else None
                    for i, v in zip(ids.tolist(), valid.tolist(), strict=True)
                ]
            ),
            pa.array(
                [
                    {"a": int(i)} if v else None
                    for i, v in zip(ids.tolist(), valid.tolist(), strict=True)
                ]
            ),
            pa.array([["r", "g", "b"][i % 3] for i in ids])
            .dictionary_encode()
            .cast(pa.dictionary(pa.int8(), pa.string())),
            pa.array(rng.integers(-20000, 30000, n), pa.int32(), mask=~valid).cast(pa.date32()),
            pa.array(rng.integers(-(10**15), 4 * 10**15, n), pa.timestamp("us")),
            pa.ExtensionArray.from_storage(nullable.field("tensor").type, tensor),
        ],
        schema=nullable,
    )


@pytest.fixture(scope="module")
def uri(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("projection") / "ds")
    lance.write_dataset(_table(), path, max_rows_per_file=15)
    return path


EXPRESSIONS = [
    "upper(s)",
    "lower(ls)",
    "id",
    "s",
    "cat",
    "tensor",
    "st",
    "st.a",
    "st['a'] + 1",
    "id * 2",
    "id + i32",
    "i32 * 2",
    "1 + i32",
    "u8 + 200",
    "i8 * 100",
    "u8 - 2",
    "i32 / 7",
    "i32 % 7",
    "(i32 + 1) * 2",
    "i32 * (1 + 2)",
    "x * 2",
    "x / 2",
    "f32 * 0.1",
    "f32 + 1",
    "i32 + x",
    "i8 + id",
    "dec * 2",
    "dec + 1",
    "dec / 3",
    "-dec / 3",
    "dec + x",
    "-i32",
    "cast(id as string)",
    "cast(x as int)",
    "cast(i32 as double) / 4",
    "cast(x as decimal(10,2))",
    "length(s)",
    "char_length(ls)",
    "octet_length(s)",
    "bit_length(s)",
    "s || 'x'",
    "upper(s) || ls",
    "concat(s, '-', ls)",
    "concat(s, s)",
    "concat(ls, ls)",
    "concat_ws('-', s, s)",
    "concat_ws('-', s, ls)",
    "regexp_replace(s, 'l+', 'L')",
    "regexp_replace(s, 'L', '_', 'gi')",
    "regexp_replace(ls, 'a', 'b')",
    "date_part('year', d)",
    "date_part('month', ts)",
    "date_part('day', d)",
    "date_part('hour', ts)",
    "date_part('minute', ts)",
    "date_part('second', ts)",
    "date_part('dow', d)",
    "date_part('doy', d)",
    "date_part('quarter', d)",
    "date_part('week', d)",
    "ltrim(s)",
    "rtrim(ls)",
    "btrim(s)",
    "replace(s, 'l', 'L')",
    "reverse(s)",
    "left(s, 2)",
    "right(ls, 3)",
    "lpad(s, 5, '*')",
    "rpad(ls, 4)",
    "strpos(s, 'l')",
    "strpos(s, 'Ö')",
    "starts_with(s, 'a')",
    "abs(i32)",
    "abs(x)",
    "round(x)",
    "round(x, 1)",
    "round(f32)",
    "sqrt(abs(x))",
    "exp(f32 / 10)",
    "ln(abs(x) + 1)",
    "log10(abs(x) + 1)",
    "log2(abs(x) + 1)",
    "trunc(x)",
    "power(x, 2)",
    "power(i32, 2)",
    "coalesce(s, 'none')",
    "coalesce(i32, 0)",
    "coalesce(x, 0)",
    "coalesce(s, ls)",
    "ifnull(s, 'n')",
    "nullif(i32, 3)",
    "greatest(id, i32)",
    "least(id, i32)",
    "id > 1",
    "x > 0 AND b",
    "s LIKE 'a%'",
    "s IS NULL",
    "i32 IN (1, 2)",
    "id BETWEEN 3 AND 9",
    "NOT b",
    "_rowid",
    "_rowaddr",
]


def _same(ours: pa.Table, theirs: pa.Table) -> None:
    assert ours.schema.equals(theirs.schema), (ours.schema, theirs.schema)
    for a, b in zip(ours.columns, theirs.columns, strict=True):
        if a.equals(b):
            continue
        la, lb = a.to_pylist(), b.to_pylist()  # NaN == NaN here
        assert len(la) == len(lb)
        for x, y in zip(la, lb, strict=True):
            assert x == y or (isinstance(x, float) and math.isnan(x) and math.isnan(y)), (x, y)


@pytest.mark.parametrize("sql", EXPRESSIONS)
def test_expression_matches_pylance(uri, sql):
    cols = {"out": sql, "id": "id"}
    _same(
        lance_format.dataset(uri).to_table(columns=cols), lance.dataset(uri).to_table(columns=cols)
    )


def test_issue_sequence_and_order(uri):
    """The issue's call: the expression is computed, and outputs come in the order given."""
    cols = {"b": "upper(s)", "a": "id", "x2": "x * 2", "s": "lower(s)"}
    ours = lance_format.dataset(uri).to_table(columns=cols)
    assert ours.column_names == ["b", "a", "x2", "s"]
    assert ours.column("b").to_pylist() == [
        None if v is None else v.upper() for v in _table().column("s").to_pylist()
    ]
    _same(ours, lance.dataset(uri).to_table(columns=cols))


@pytest.mark.parametrize(
    "options",
    [
        {"filter": "id % 3 = 1"},
        {"filter": "x > 0", "limit": 5, "offset": 2},
        {"with_row_id": True},
        {"with_row_address": True, "filter": "s IS NOT NULL"},
        {"batch_size": 7},
    ],
)
def test_projection_with_scan_options(uri, options):
    cols = {"b": "upper(s)", "n": "i32 + 1", "t": "tensor"}
    ours = lance_format.dataset(uri)
    theirs = lance.dataset(uri)
    _same(ours.to_table(columns=cols, **options), theirs.to_table(columns=cols, **options))
    batches = list(ours.to_batches(columns=cols, **options))
    assert all(b.schema.equals(ours.scanner(columns=cols, **options).schema) for b in batches)
    _same(pa.Table.from_batches(batches), theirs.to_table(columns=cols, **options))
    if "limit" not in options:  # pylance cannot count with a limit
        counted = theirs.scanner(columns=cols, **options).count_rows()
        assert ours.scanner(columns=cols, **options).count_rows() == counted


def test_take_with_projection(uri):
    cols = {"b": "upper(s)", "t": "tensor", "d": "dec / 3"}
    rows = [5, 0, 33, 5, 17]
    _same(lance_format.dataset(uri).take(rows, columns=cols), lance.dataset(uri).take(rows, cols))


@pytest.mark.parametrize(
    ("cols", "match"),
    [
        ({"one": "1"}, "at least one column"),
        ({"n": "NULL"}, "at least one column"),
        ({"b": "i32 + 1.5"}, "cannot be converted"),
        ({"b": "u8 * 1000"}, "cannot be converted"),
        ({"b": "substr(s, 1, 2)"}, "unsupported"),
        ({"b": "no_such(s)"}, "unsupported"),
        ({"b": "nope + 1"}, "nope"),
        ({"b": "upper("}, "not valid SQL"),
    ],
)
def test_refused_projections(uri, cols, match):
    with pytest.raises(Exception):  # noqa: B017 - pylance refuses these too
        lance.dataset(uri).to_table(columns=cols)
    with pytest.raises((InvalidArgumentError, lance_format.SchemaError), match=match):
        lance_format.dataset(uri).to_table(columns=cols)


def test_functions_we_cannot_compute_are_refused(uri):
    for sql in ("md5(s)", "date_part('epoch', ts)", "split_part(s, ' ', 1)"):
        with pytest.raises(InvalidArgumentError, match="unsupported SQL construct"):
            lance_format.dataset(uri).to_table(columns={"b": sql})


def test_projection_values_must_be_sql_text(uri):
    with pytest.raises(InvalidArgumentError, match="SQL expressions"):
        lance_format.dataset(uri).to_table(columns={"b": 1})
    with pytest.raises(InvalidArgumentError, match="at least one output"):
        lance_format.dataset(uri).to_table(columns={})


def test_integer_division_by_zero_is_an_error(uri):
    with pytest.raises(Exception, match="(?i)divide by zero"):
        lance.dataset(uri).to_table(columns={"b": "i32 / 0"})
    with pytest.raises(InvalidArgumentError, match="(?i)divide by zero"):
        lance_format.dataset(uri).to_table(columns={"b": "i32 / 0"})


def test_scan_options_are_never_ignored(uri):
    ds = lance_format.dataset(uri)
    with pytest.raises(UnsupportedError, match="full_text_query"):
        ds.to_table(full_text_query="words")
    with pytest.raises(UnsupportedError, match="include_deleted_rows"):
        ds.scanner(include_deleted_rows=True)
    with pytest.raises(InvalidArgumentError, match="no_such_option"):
        ds.to_table(no_such_option=1)
    # options left at None change nothing; rows always come in order
    expected = lance.dataset(uri).to_table()
    assert ds.to_table(nearest=None, batch_readahead=None).equals(expected)
    assert ds.to_table(scan_in_order=False).equals(expected)
    # count_rows takes the scanner's options, as pylance's does
    assert ds.count_rows("id > 3", offset=None) == lance.dataset(uri).count_rows("id > 3")
    with pytest.raises(UnsupportedError, match="fast_search"):
        ds.count_rows("id > 3", fast_search=True)
