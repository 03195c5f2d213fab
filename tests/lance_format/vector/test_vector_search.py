"""Exact nearest-neighbour search against pylance 14's ``to_table(nearest=...)``.

pylance is the oracle: on seeded random vectors our search must return the same rows, in the
same order, with ``_distance`` equal within float32 rounding, for every metric, with pre- and
post-filters, deletions, several fragments, projections and row ids.
"""

from __future__ import annotations

import base64

import lance
import numpy as np
import pyarrow as pa
import pytest
from vector_helpers import random_vectors, write_vector_dataset

from lance_format.errors import InvalidArgumentError
from lance_format.table.dataset import dataset as open_dataset

N, DIM = 2000, 32
RTOL = {np.float32: 2e-5, np.float64: 2e-5, np.float16: 1e-3, np.uint8: 0}


def _write(path, dtype=np.float32, n=N, dim=DIM, seed=7, rows_per_file=700, **kw):
    return write_vector_dataset(
        path, n=n, dim=dim, seed=seed, rows_per_file=rows_per_file, dtype=dtype, **kw
    )


def _both(path, **kw) -> tuple[pa.Table, pa.Table]:
    theirs = lance.dataset(path).to_table(**kw)
    ours = open_dataset(path).to_table(**kw)
    return theirs, ours


def _assert_same(theirs: pa.Table, ours: pa.Table, rtol: float = 2e-5) -> None:
    assert ours.schema == theirs.schema
    assert ours.num_rows == theirs.num_rows
    for name in theirs.column_names:
        if name == "_distance":
            np.testing.assert_allclose(
                ours[name].to_numpy(), theirs[name].to_numpy(), rtol=rtol, atol=1e-5
            )
        else:
            assert ours[name].to_pylist() == theirs[name].to_pylist(), name


@pytest.fixture(scope="module")
def f32(tmp_path_factory) -> str:
    return _write(tmp_path_factory.mktemp("vec") / "f32.lance")


@pytest.fixture(scope="module")
def queries() -> np.ndarray:
    return np.random.default_rng(99).standard_normal((3, DIM)).astype(np.float32)


@pytest.mark.parametrize("metric", ["l2", "cosine", "dot", "euclidean", "COSINE"])
def test_metrics_match_pylance(f32, queries, metric):
    for q in queries:
        theirs, ours = _both(f32, nearest={"column": "vec", "q": q, "k": 25, "metric": metric})
        _assert_same(theirs, ours)


def test_distance_definitions_computed_independently(f32, queries):
    """The definitions themselves, from the vectors pylance returns: squared l2, 1 - cos,
    1 - x.q."""
    q = queries[0]
    vec = np.stack(
        lance.dataset(f32).to_table(columns=["vec"])["vec"].to_numpy(zero_copy_only=False)
    )
    ds = open_dataset(f32)
    for metric, fn in [
        ("l2", lambda x: ((x - q) ** 2).sum(1)),
        ("cosine", lambda x: 1 - x @ q / np.linalg.norm(x, axis=1) / np.linalg.norm(q)),
        ("dot", lambda x: 1 - x @ q),
    ]:
        got = ds.to_table(nearest={"column": "vec", "q": q, "k": 10, "metric": metric})
        want = fn(vec.astype(np.float64))
        order = np.lexsort((np.arange(len(want)), want))[:10]
        assert got["id"].to_pylist() == order.tolist()
        np.testing.assert_allclose(got["_distance"].to_numpy(), want[order], rtol=1e-5)


@pytest.mark.parametrize("dtype", [np.float16, np.float64])
@pytest.mark.parametrize("metric", ["l2", "cosine", "dot"])
def test_other_float_widths(tmp_path, queries, dtype, metric):
    path = _write(tmp_path / "w.lance", dtype=dtype, n=600, rows_per_file=250)
    theirs, ours = _both(
        path, nearest={"column": "vec", "q": queries[1], "k": 15, "metric": metric}
    )
    _assert_same(theirs, ours, rtol=RTOL[dtype])


def test_hamming_on_binary_vectors(tmp_path):
    path = _write(tmp_path / "b.lance", dtype=np.uint8, n=900, dim=8, rows_per_file=400)
    q = np.random.default_rng(3).integers(0, 256, 8, dtype=np.uint8)
    for nearest in (
        {"column": "vec", "q": q, "k": 30},
        {"column": "vec", "q": q, "k": 30, "metric": "hamming"},
    ):
        theirs, ours = _both(path, nearest=nearest, with_row_id=True)
        _assert_same(theirs, ours, rtol=0)
    with pytest.raises(InvalidArgumentError, match="does not support"):
        open_dataset(path).to_table(nearest={"column": "vec", "q": q, "metric": "l2"})


@pytest.mark.parametrize("prefilter", [True, False])
def test_filters(f32, queries, prefilter):
    for flt in ("id % 3 = 0", "label = 'r4'", "id > 1990"):
        theirs, ours = _both(
            f32,
            nearest={"column": "vec", "q": queries[2], "k": 12},
            filter=flt,
            prefilter=prefilter,
        )
        _assert_same(theirs, ours)
        if prefilter and flt != "id > 1990":
            assert ours.num_rows == 12


def test_postfilter_on_distance(f32, queries):
    nearest = {"column": "vec", "q": queries[0], "k": 20}
    theirs, ours = _both(f32, nearest=nearest, filter="_distance < 25")
    _assert_same(theirs, ours)


def test_projection_row_ids_limit_offset(f32, queries):
    q = queries[0]
    for kw in (
        {"columns": ["label"], "with_row_id": True},
        {"columns": ["_distance", "id"]},
        {"columns": ["id"], "with_row_id": True, "limit": 4, "offset": 3},
        {"with_row_id": True},
    ):
        theirs, ours = _both(f32, nearest={"column": "vec", "q": q, "k": 9}, **kw)
        _assert_same(theirs, ours)


def test_deletions_nulls_and_ties(tmp_path):
    """Deleted rows and null vectors are never returned; equal distances come in row id
    order, across fragments; k above the row count returns every live row."""
    v = np.zeros((40, 4), np.float32)
    v[:, 0] = np.arange(40) % 3
    nulls = np.zeros(40, bool)
    nulls[[4, 17]] = True
    vec = pa.FixedSizeListArray.from_arrays(pa.array(v.ravel()), 4, mask=pa.array(nulls))
    table = pa.table({"id": pa.array(np.arange(40)), "vec": vec})
    path = str(tmp_path / "t.lance")
    lance.write_dataset(table, path, max_rows_per_file=9)
    lance.dataset(path).delete("id IN (3, 21, 30)")
    for k in (5, 11, 100):
        theirs, ours = _both(
            path, nearest={"column": "vec", "q": [1, 0, 0, 0], "k": k}, with_row_id=True
        )
        _assert_same(theirs, ours, rtol=0)
    assert ours.num_rows == 40 - 2 - 3


def test_deletions_and_appends_on_random_data(tmp_path, queries):
    path = _write(tmp_path / "d.lance", n=1200, rows_per_file=300)
    lance.dataset(path).delete("id % 7 = 2 OR id < 50")
    extra = pa.table(
        {
            "id": pa.array(np.arange(1200, 1500)),
            "label": pa.array(["x"] * 300),
            "vec": random_vectors(np.random.default_rng(5), 300, DIM),
        }
    )
    lance.write_dataset(extra, path, mode="append")
    for metric in ("l2", "cosine"):
        theirs, ours = _both(
            path, nearest={"column": "vec", "q": queries[1], "k": 40, "metric": metric}
        )
        _assert_same(theirs, ours)


def test_stable_row_ids(tmp_path, queries):
    path = _write(tmp_path / "s.lance", n=800, rows_per_file=300, enable_stable_row_ids=True)
    lance.dataset(path).delete("id < 100")
    theirs, ours = _both(
        path, nearest={"column": "vec", "q": queries[0], "k": 10}, with_row_id=True
    )
    _assert_same(theirs, ours)


def test_batch_of_queries(f32, queries):
    theirs, ours = _both(f32, nearest={"column": "vec", "q": queries, "k": 7})
    _assert_same(theirs, ours)
    assert ours.column_names[0] == "query_index"


def test_query_forms(f32, queries):
    """A list, an Arrow array and base64 little-endian float32 all name the same query."""
    q = queries[0]
    ds = open_dataset(f32)
    want = ds.to_table(nearest={"column": "vec", "q": q, "k": 5})
    for form in (q.tolist(), pa.array(q), base64.b64encode(q.astype("<f4").tobytes()).decode()):
        got = ds.to_table(nearest={"column": "vec", "q": form, "k": 5})
        assert got.equals(want)


def test_index_options_accepted(f32, queries):
    nearest = {
        "column": "vec",
        "q": queries[0],
        "k": 5,
        "use_index": False,
        "nprobes": 4,
        "refine_factor": 2,
    }
    theirs, ours = _both(f32, nearest=nearest)
    _assert_same(theirs, ours)


def test_to_batches_and_scanner(f32, queries):
    ds = open_dataset(f32)
    nearest = {"column": "vec", "q": queries[0], "k": 30}
    scanner = ds.scanner(nearest=nearest, batch_size=8)
    batches = list(scanner.to_batches())
    assert all(b.num_rows <= 8 for b in batches)
    assert pa.Table.from_batches(batches, schema=scanner.schema).equals(
        ds.to_table(nearest=nearest)
    )


@pytest.mark.parametrize(
    "nearest, message",
    [
        ({"column": "vec", "q": [1.0] * 3}, "does not match"),
        ({"column": "vec", "q": [1.0] * DIM, "k": 0}, "must be > 0"),
        ({"column": "vec", "q": [1.0] * DIM, "k": 2.5}, "integer"),
        ({"column": "id", "q": [1.0] * DIM}, "must be a vector"),
        ({"column": "nope", "q": [1.0] * DIM}, "not in the dataset"),
        ({"column": "vec", "q": [1.0] * DIM, "metric": "manhattan"}, "unknown metric"),
        ({"column": "vec", "q": ["a"] * DIM}, "numbers"),
        ({"column": "vec", "q": "not base64!"}, "base64"),
        ({"column": "vec", "q": [1.0] * DIM, "nprobes": 0}, "must be > 0"),
        ({"column": "vec", "q": [1.0] * DIM, "bogus": 1}, "unknown nearest key"),
        ({"q": [1.0] * DIM}, "needs 'column'"),
    ],
)
def test_bad_input(f32, nearest, message):
    with pytest.raises(InvalidArgumentError, match=message):
        open_dataset(f32).to_table(nearest=nearest)
    # pylance refuses the same requests
    with pytest.raises((ValueError, TypeError, KeyError)):
        lance.dataset(f32).to_table(nearest=nearest)


@pytest.mark.parametrize("metric", ["l2", "cosine", "dot"])
def test_duplicated_random_vectors_tie_in_row_id_order(tmp_path, queries, metric):
    """Copies of the same float vectors in other fragments tie exactly: the float32 ranking
    must not break the tie differently from pylance."""
    rng = np.random.default_rng(17)
    base = rng.standard_normal((150, DIM)).astype(np.float32)
    v = np.concatenate([base, base[::-1], base])
    table = pa.table(
        {
            "id": pa.array(np.arange(len(v))),
            "vec": pa.FixedSizeListArray.from_arrays(pa.array(v.ravel()), DIM),
        }
    )
    path = str(tmp_path / "dup.lance")
    lance.write_dataset(table, path, max_rows_per_file=100)
    for q in (queries[0], base[7]):
        nearest = {"column": "vec", "q": q, "k": 16, "metric": metric}
        theirs, ours = _both(path, nearest=nearest, with_row_id=True)
        _assert_same(theirs, ours)


@pytest.mark.parametrize("prefilter", [True, False])
def test_nothing_matches(f32, queries, prefilter):
    theirs, ours = _both(
        f32,
        nearest={"column": "vec", "q": queries[0], "k": 5},
        filter="id < 0",
        prefilter=prefilter,
    )
    _assert_same(theirs, ours)
    assert ours.num_rows == 0


def test_with_row_address_and_count(f32, queries):
    nearest = {"column": "vec", "q": queries[1], "k": 6}
    theirs, ours = _both(f32, nearest=nearest, with_row_id=True, with_row_address=True)
    _assert_same(theirs, ours)
    assert open_dataset(f32).scanner(nearest=nearest, filter="id % 2 = 0").count_rows() == len(
        lance.dataset(f32).to_table(nearest=nearest, filter="id % 2 = 0")
    )


def test_candidate_memory_is_bounded_before_searching(f32):
    q = np.zeros((64, DIM), np.float32)
    with pytest.raises(InvalidArgumentError, match="MiB of candidates"):
        open_dataset(f32).to_table(nearest={"column": "vec", "q": q, "k": 1 << 20})
    with pytest.raises(InvalidArgumentError, match="at most"):
        open_dataset(f32).to_table(nearest={"column": "vec", "q": q[0], "k": (1 << 20) + 1})


def test_fast_search_without_an_index_finds_nothing(f32, queries):
    """fast_search searches only what an index covers: with none, no rows (pylance's
    answer); a plain scan refuses the option it has no use for."""
    theirs, ours = _both(
        f32, columns=["id"], fast_search=True, nearest={"column": "vec", "q": queries[0]}
    )
    assert theirs.num_rows == 0
    _assert_same(theirs, ours)
    from lance_format.errors import UnsupportedError

    with pytest.raises(UnsupportedError):
        open_dataset(f32).to_table(fast_search=True)
