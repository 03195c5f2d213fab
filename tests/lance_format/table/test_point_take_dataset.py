"""One-row and few-row takes of a dataset (the point path: a fragment's read plan, each
column's one-page point step building its array in one Arrow call) against pylance.

The dataset pylance writes holds every kind of column the point path builds directly
(integers, floats, temporal, decimal, fixed-size binary, strings and binaries, large
ones) beside the ones that keep the general path (nulls, booleans, dictionaries, structs,
lists); takes are checked after deletions, with stable row ids and with system columns.
A second dataset holds nullable columns of every point codec (and booleans) whose def
levels pylance bitpacks, with nulls at chunk edges and a chunk of nulls, in 2.1 and 2.2.
"""

from __future__ import annotations

import datetime
import decimal
import glob

import lance
import numpy as np
import pyarrow as pa
import pytest
from fixtures import assert_tables_equal

import lance_format
from lance_format.structural.column import owns_column

N = 3000


def _table(start: int, n: int) -> pa.Table:
    i = np.arange(start, start + n)
    rng = np.random.default_rng(start)
    words = [f"word-{k % 97}-{'x' * (k % 13)}" for k in i]
    nulls = pa.array([None if k % 7 == 0 else int(k) for k in i], pa.int32())
    return pa.table(
        {
            "i64": pa.array(i, pa.int64()),
            "u8": pa.array(i % 200, pa.uint8()),
            "f32": pa.array(rng.random(n), pa.float32()),
            "f64": pa.array(rng.normal(size=n), pa.float64()),
            "ts": pa.array(i * 1_000_000, pa.timestamp("us")),
            "day": pa.array(
                [datetime.date(2020, 1, 1) + datetime.timedelta(days=int(k)) for k in i],
                pa.date32(),
            ),
            "dec": pa.array([decimal.Decimal(int(k)) / 100 for k in i], pa.decimal128(12, 2)),
            "fsb": pa.array([int(k).to_bytes(4, "little") for k in i], pa.binary(4)),
            "s": pa.array(words, pa.string()),
            "ls": pa.array(words, pa.large_string()),
            "b": pa.array([w.encode() for w in words], pa.binary()),
            "low_card": pa.array([f"cat{k % 5}" for k in i], pa.string()),
            "dict": pa.array([f"d{k % 3}" for k in i]).dictionary_encode(),
            "nullable": nulls,
            "flag": pa.array(i % 3 == 0),
            "st": pa.StructArray.from_arrays(
                [pa.array(i, pa.int32()), pa.array(words)], names=["a", "w"]
            ),
            "lst": pa.array([[int(k)] * int(k % 4) for k in i], pa.list_(pa.int64())),
        }
    )


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    """(plain, with deletions, stable row ids with deletions) datasets pylance wrote."""
    out = []
    for name, stable, delete in (
        ("plain", False, False),
        ("del", False, True),
        ("sri", True, True),
    ):
        uri = str(tmp_path_factory.mktemp("point") / name)
        lance.write_dataset(_table(0, N), uri, max_rows_per_file=1000, enable_stable_row_ids=stable)
        if delete:
            lance.dataset(uri).delete("i64 % 5 = 1 OR (i64 >= 1200 AND i64 < 1300)")
        out.append(uri)
    return out


def _rows(n: int) -> list[int]:
    edges = [0, 1, 999, 1000, 1001, n // 2, n - 2, n - 1]
    rng = np.random.default_rng(7)
    return sorted({r for r in edges + rng.integers(0, n, 24).tolist() if 0 <= r < n})


@pytest.mark.parametrize("which", [0, 1, 2])
def test_one_row_takes_match_pylance(datasets, which) -> None:
    uri = datasets[which]
    ours, theirs = lance_format.dataset(uri), lance.dataset(uri)
    n = theirs.count_rows()
    assert ours.count_rows() == n
    for r in _rows(n):
        assert_tables_equal(ours.take([r]), theirs.take([r]), f"row {r}")
    # the same projection again: the plans made by the first take are reused
    for r in _rows(n)[:4]:
        assert_tables_equal(ours.take([r]), theirs.take([r]), f"row {r} again")


@pytest.mark.parametrize("which", [0, 2])
def test_projected_takes_with_system_columns_match_pylance(datasets, which) -> None:
    uri = datasets[which]
    ours, theirs = lance_format.dataset(uri), lance.dataset(uri)
    n = theirs.count_rows()
    for columns in (
        ["s", "i64"],
        ["nullable", "_rowid", "_rowaddr"],
        ["dec", "fsb", "st", "_rowid"],
        ["lst", "dict", "ls"],
    ):
        for r in _rows(n)[::3]:
            assert_tables_equal(
                ours.take([r], columns=columns), theirs.take([r], columns=columns), f"{columns}"
            )


def test_few_row_takes_unsorted_and_duplicated_match_pylance(datasets) -> None:
    uri = datasets[1]
    ours, theirs = lance_format.dataset(uri), lance.dataset(uri)
    n = theirs.count_rows()
    for rows in ([5, 3], [n - 1, 0, n - 1], [999, 1000, 998, 1001], list(range(40, 50))):
        assert_tables_equal(ours.take(rows), theirs.take(rows), f"rows {rows}")


def test_take_of_a_null_and_a_valid_row(datasets) -> None:
    """The nullable column's rows with and without a null (the general path builds the
    validity) in one dataset object, in both orders."""
    uri = datasets[0]
    ours, theirs = lance_format.dataset(uri), lance.dataset(uri)
    for rows in ([7], [8], [7, 8], [8, 14]):
        got = ours.take(rows, columns=["nullable"])
        assert_tables_equal(got, theirs.take(rows, columns=["nullable"]), f"rows {rows}")
    assert ours.take([7], columns=["nullable"]).column(0).null_count == 1


NULLABLE_N = 5130  # the last 1024-row chunk keeps 10 rows: its def levels stay raw


def _nullable_table() -> pa.Table:
    """Nullable columns of several codecs (bitpacked, flat, runs, strings) with nulls at the
    1024-row chunk edges, a whole chunk of nulls (rows 2048..3071) and scattered ones."""
    i = np.arange(NULLABLE_N)
    rng = np.random.default_rng(17)
    null = (i % 1024 == 0) | (i % 1024 == 1023) | ((i >= 2048) & (i < 3072))
    null |= rng.random(NULLABLE_N) < 0.2

    def col(values, typ) -> pa.Array:
        return pa.array(values, typ, mask=null)

    return pa.table(
        {
            "i32": col(i, pa.int32()),
            "i64": col(rng.integers(-(2**40), 2**40, NULLABLE_N), pa.int64()),
            "u8": col(i % 200, pa.uint8()),
            "f64": col(rng.normal(size=NULLABLE_N), pa.float64()),
            "runs": col(i // 500, pa.int64()),
            "day": col(i.astype("datetime64[D]"), pa.date32()),
            "s": col([f"name-{k}-{'y' * (k % 11)}" for k in i], pa.string()),
            "flag": col(i % 3 == 0, pa.bool_()),
        }
    )


@pytest.fixture(scope="module", params=["2.1", "2.2"])
def nullable_dataset(request, tmp_path_factory):
    uri = str(tmp_path_factory.mktemp("nullable") / request.param)
    lance.write_dataset(_nullable_table(), uri, data_storage_version=request.param)
    return uri


def test_nullable_columns_have_point_plans(nullable_dataset) -> None:
    """pylance's nullable mini-block pages (OutOfLineBitpacking def levels) get a point plan,
    so the takes below run the point kernel rather than the general path."""
    (path,) = glob.glob(f"{nullable_dataset}/data/*.lance")
    r = lance_format.LanceFileReader(path)
    planned = set()
    for f in r.lance_schema.fields:
        assert owns_column(f)
        leaf = r._leaf_reader(f)
        plans = [leaf.point(page) for page in leaf.column.pages]
        if all(p is not None and p.has_def for p in plans):
            planned.add(f.name)
    assert {"i32", "i64", "u8", "f64", "runs", "day", "s", "flag"} <= planned


def test_nullable_takes_match_pylance(nullable_dataset) -> None:
    ours, theirs = lance_format.dataset(nullable_dataset), lance.dataset(nullable_dataset)
    n = NULLABLE_N
    edges = [0, 1, 1022, 1023, 1024, 1025, 2047, 2048, 2500, 3071, 3072, 5119, 5120, n - 1]
    for r in edges:
        assert_tables_equal(ours.take([r]), theirs.take([r]), f"row {r}")
    rng = np.random.default_rng(3)
    many = np.unique(rng.integers(0, n, 1000)).tolist()
    assert_tables_equal(ours.take(many), theirs.take(many), "1000 rows")
    mixed = rng.permutation(edges + edges[:6] + many[:50]).tolist()
    assert_tables_equal(ours.take(mixed), theirs.take(mixed), "unsorted, duplicates")
    all_null = list(range(2048, 3072, 97))
    got = ours.take(all_null, columns=["i32", "s"])
    assert_tables_equal(got, theirs.take(all_null, columns=["i32", "s"]), "all-null chunk")
    assert got.column("i32").null_count == len(all_null)
