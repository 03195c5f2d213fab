"""JSON and list functions, binary and list literals in filters and updates, against pylance.

One dataset with a JSON column (objects with nested arrays, JSON nulls, missing keys, SQL
NULLs), lists with NULL elements and NULL lists, and binary values is written with pylance;
each filter runs through pylance and through lance_format on the same files, and the kept
ids must agree.  Updates run on two copies, one per library, and the tables must agree.
"""

from __future__ import annotations

import datetime as dt
import json

import lance
import pyarrow as pa
import pytest

import lance_format
from lance_format.errors import InvalidArgumentError
from lance_format.table.filters import parse_filter

DOCS = [
    {"a": 1, "b": "x", "c": [1, 2], "d": True, "f": 1.5, "n": {"k": "v"}},
    {"a": 2, "b": None, "c": [], "d": False, "f": -2.5},
    None,
    {"z": [3], "c": ["x", 2]},
    {"a": 3, "b": "y", "c": [2, 3, 4], "f": 2.0, "n": {"k": "w"}},
    {"a": -7, "tags": ["red", "blue"], "n": {"k": None}},
]


def build_table() -> pa.Table:
    n = len(DOCS)
    return pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "j": pa.array(
                [None if d is None else json.dumps(d) for d in DOCS], pa.json_(pa.string())
            ),
            "l": pa.array([[1, 2], [3], None, [None, 2], [], [5, 1, 5]], pa.list_(pa.int64())),
            "ls": pa.array(
                [["a"], ["b", "c"], [None], None, ["c", "a"], []], pa.list_(pa.string())
            ),
            "b": pa.array([b"\x01\x02", b"x", None, b"", b"\xff", b"\x01\x02"], pa.binary()),
            "i": pa.array([1, None, 3, 4, 5, 6], pa.int32()),
            "v": pa.FixedSizeListArray.from_arrays(pa.array(range(12), pa.float32()), 2),
            "lst": pa.array(
                [[{"x": 1, "y": "a"}], [{"x": 2, "y": "b"}, {"x": 3, "y": None}], None, [], [None]]
                + [[{"x": 5, "y": "e"}]],
                pa.list_(pa.struct([("x", pa.int64()), ("y", pa.string())])),
            ),
        }
    )


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory):
    path = tmp_path_factory.mktemp("functions") / "ds"
    lance.write_dataset(build_table(), path)
    return lance.dataset(path), lance_format.dataset(str(path))


def _ids(ds, sql: str) -> list[int]:
    return sorted(ds.to_table(filter=sql)["id"].to_pylist())


FILTERS = [
    # JSON
    "json_extract(j, '$.a') = '1'",
    "json_extract(j, '$.b') = '\"x\"'",
    "json_extract(j, '$.b') IS NULL",
    "json_extract(j, '$.c') = '[1,2]'",
    "json_extract(j, '$.c[1]') = '2'",
    "json_extract(j, '$.n.k') = '\"v\"'",
    "json_extract(j, '$.n.k') IS NULL",
    "json_exists(j, '$.a')",
    "json_extract(j, '$.c[*]') = '[1,2]'",
    "json_extract(j, '$.tags[*]') = '[\"red\",\"blue\"]'",
    "json_extract(j, '$.z[*]') = '3'",
    "json_extract(j, '$.c[*]') IS NULL",
    "json_exists(j, '$.c[*]')",
    "json_extract(j, '$.n.*') = '\"v\"'",
    "json_extract(j, '$.n.*') IS NULL",
    "json_array_contains(j, '$.*', 'red')",
    "json_exists(j, '$.b')",
    "json_exists(j, '$.n.k')",
    "NOT json_exists(j, '$.z')",
    "json_get_int(j, 'a') = 1",
    "json_get_int(j, 'a') < 0",
    "json_get_int(j, 'zz') IS NULL",
    "json_get_int(j, 'f') = 2",
    "json_get_int(j, 'd') = 1",
    "json_get_string(j, 'b') = 'x'",
    "json_get_string(j, 'a') = '1'",
    "json_get_string(j, 'd') = 'true'",
    "json_get_string(j, 'b') IS NULL",
    "json_get_float(j, 'f') > 1",
    "json_get_float(j, 'a') = 1.0",
    "json_get_bool(j, 'd')",
    "json_get_bool(j, 'd') IS NULL",
    "json_array_contains(j, '$.c', 1)",
    "json_array_contains(j, '$.c', '2')",
    "json_array_contains(j, '$.tags', 'red')",
    "json_array_contains(j, '$.c', 'x')",
    "json_array_contains(j, '$.b', 'x')",
    "json_array_length(j, '$.c') = 2",
    "json_array_length(j, '$.c') IS NULL",
    "json_array_length(j, '$.b') = 0",
    "json_array_length(j, '$.n') = 0",
    "json_array_length(j, '$') = 0",
    "json_get(j, 'a') IS NULL",
    "json_get_int(json_get(j, 'c'), '1') = 2",
    "json_get_string(json_get(j, 'n'), 'k') = 'w'",
    "json_extract(json_get(j, 'c'), '$[1]') = '2'",
    # lists
    "array_has(l, 2)",
    "array_has(l, 1) IS NULL",
    "NOT array_has(l, 5)",
    "array_contains(l, 5)",
    "array_has(ls, 'a')",
    "array_has_any(l, [1, 3])",
    "array_has_any(l, [7])",
    "array_has_any(ls, ['c', 'q'])",
    "array_has_all(l, [1, 2])",
    "array_has_all(l, [5])",
    "array_has_all(ls, ['a', 'c'])",
    "array_has_any(l, [1, NULL])",
    "array_has_all(l, [2, NULL])",
    "array_has_any(l, [NULL]) IS NULL",
    "array_has_all(ls, [NULL])",
    "array_has_any(l, [])",
    "array_has_all(l, [])",
    "array_has_any(l, [1, 2.5])",
    "array_has_all(l, [1, 2.5]) IS NULL",
    "array_has(l, 2.0)",
    "array_has(l, 2.5) IS NULL",
    "array_has(l, NULL) IS NULL",
    "l[1] = 1",
    "l[2] = 2",
    "l[-1] = 2",
    "l[0] IS NULL",
    "l[5] IS NULL",
    "ls[1] = 'b'",
    "v[2] > 4",
    "array_has(v, 3.0)",
    "array_has_any(v, [0, 11])",
    "lst[1]['x'] = 2",
    "lst[1].y = 'a'",
    "lst[2]['y'] IS NULL",
    "lst[-1].x = 3",
    "l = [1, 2]",
    "l <> [1, 2]",
    "[3] = l",
    "ls = ['b', 'c']",
    # literals and casts
    "b = X'0102'",
    "b <> x'ff'",
    "b = X''",
    "current_date > date '2020-01-01'",
    "arrow_cast(i, 'Int64') = 3",
    "arrow_cast(i, 'Float64') > 2.5",
    "arrow_cast(id, 'Utf8') = '4'",
]


@pytest.mark.parametrize("sql", FILTERS)
def test_filter_matches_pylance(datasets, sql: str) -> None:
    theirs, ours = datasets
    assert _ids(ours, sql) == _ids(theirs, sql)


def test_filters_are_selective(datasets) -> None:
    """Most of the filters above keep some rows and drop others: the comparison has teeth."""
    theirs, _ = datasets
    mixed = [sql for sql in FILTERS if 0 < len(_ids(theirs, sql)) < len(DOCS)]
    assert len(mixed) >= len(FILTERS) * 3 // 4


@pytest.mark.parametrize(
    "sql",
    ["json_get_int(j, 'b') IS NULL", "json_get_bool(j, 'a')", "json_get_string(j, 'c') = ''"],
)
def test_strict_json_conversion_fails_as_in_pylance(datasets, sql: str) -> None:
    """A value of the wrong JSON kind is an error in both, not a NULL."""
    theirs, ours = datasets
    with pytest.raises(Exception, match="InvalidCast"):
        theirs.to_table(filter=sql)
    with pytest.raises(InvalidArgumentError, match="InvalidCast"):
        ours.to_table(filter=sql)


def test_current_date_is_today() -> None:
    table = pa.table({"d": pa.array([dt.date(2000, 1, 1), dt.date(9999, 1, 1)], pa.date32())})
    today = dt.datetime.now(dt.UTC).date()
    expected = [d for d in table["d"].to_pylist() if d < today]
    kept = table.filter(parse_filter("d < current_date", table.schema))
    assert kept["d"].to_pylist() == expected


@pytest.mark.parametrize(
    "sql",
    [
        "json_extract(j, '$..a') = '1'",  # recursive descent: not supported
        "json_exists(j, '$.c[0:1]')",  # nor slices
        "array_has_any(l, [id])",
        "arrow_cast(i, 'Decimal128(10, 2)') = 1",
    ],
)
def test_unsupported_is_a_clear_error(sql: str) -> None:
    with pytest.raises(InvalidArgumentError, match="unsupported SQL construct"):
        parse_filter(sql, build_table().schema)


@pytest.mark.parametrize(
    ("updates", "where"),
    [
        ({"l": "[7, 8]"}, "id = 1"),
        ({"v": "[42.0, 43.0]"}, "id < 3"),
        ({"ls": "['p', 'q']"}, "array_has(ls, 'a')"),
        ({"b": "X'0a0b'"}, "json_exists(j, '$.b')"),
        ({"i": "arrow_cast(id, 'Int32')"}, "l[1] = 1"),
    ],
)
def test_update_values_match_pylance(tmp_path, updates: dict, where: str) -> None:
    table = build_table()
    lance.write_dataset(table, tmp_path / "theirs")
    lance.write_dataset(table, tmp_path / "ours")
    theirs = lance.dataset(tmp_path / "theirs")
    theirs.update(updates, where=where)
    ours = lance_format.dataset(str(tmp_path / "ours"))
    ours.update(updates, where=where)
    expected = lance.dataset(tmp_path / "theirs").to_table().sort_by("id")
    # what we wrote, read back by pylance
    got = lance.dataset(tmp_path / "ours").to_table().sort_by("id")
    assert got.equals(expected)
    assert ours.to_table().sort_by("id").equals(expected)


CONVERTED = [
    *["35", "1.5", "-4", "1e3", "1E2", "+3", ".5", "3.", "-0", "0", "inf", "NaN", " 35", "0x10"],
    *["1_0", "", "true", "false", "TRUE", "False", "yes", "NO", "no", "on", "t", "1", "y"],
    *[True, False, 2.5, -2.5, 7, None, [1], {"a": 1}],
]


def _converted(ds, fn: str, row: int) -> object:
    try:
        table = ds.to_table(columns={"x": f"{fn}(j, 'v')"}, filter=f"id = {row}")
    except Exception as e:  # both raise on a value of the wrong kind
        assert "InvalidCast" in str(e)
        return "error"
    value = table["x"][0].as_py()
    return repr(value) if isinstance(value, float) else value  # NaN, -0.0 compare by text


@pytest.mark.parametrize(
    "fn", ["json_get_int", "json_get_float", "json_get_bool", "json_get_string"]
)
def test_json_get_conversions_match_pylance(tmp_path, fn: str) -> None:
    """Which JSON values each json_get_* converts (strings holding numbers or true/yes/no,
    booleans as 0/1, floats rounded half away from zero) and which are errors."""
    docs = pa.array([json.dumps({"v": v}) for v in CONVERTED], pa.json_(pa.string()))
    table = pa.table({"id": pa.array(range(len(CONVERTED)), pa.int64()), "j": docs})
    lance.write_dataset(table, tmp_path / "ds")
    theirs, ours = lance.dataset(tmp_path / "ds"), lance_format.dataset(str(tmp_path / "ds"))
    seen = []
    for row in range(len(CONVERTED)):
        expected = _converted(theirs, fn, row)
        assert _converted(ours, fn, row) == expected, CONVERTED[row]
        seen.append(expected)
    assert "error" in seen and None in seen  # values, NULLs and errors alike
    assert len(set(map(repr, seen))) >= 4


PROJECTED = {
    "all": "json_extract(j, '$.*')",
    "c": "json_extract(j, '$.c')",
    "n": "json_get(j, 'n')",  # JSONB bytes, byte for byte
    "len": "json_array_length(j, '$.c')",
    "exists": "json_exists(j, '$.n.k')",
    "second": "l[2]",
    "last_y": "lst[-1]['y']",
    "any": "array_has_any(l, [1, NULL])",
    "cast": "arrow_cast(i, 'Float32')",
}


def test_projected_values_match_pylance(datasets) -> None:
    """The functions' values and types, not only the rows they keep."""
    theirs, ours = datasets
    expected = theirs.to_table(columns=PROJECTED)
    got = ours.to_table(columns=PROJECTED)
    for name in PROJECTED:
        assert got[name].type == expected[name].type, name
        assert got[name].to_pylist() == expected[name].to_pylist(), name
