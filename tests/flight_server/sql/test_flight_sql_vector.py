"""``lance_vector_search(...)`` through Flight SQL with the ADBC driver, against pylance's
search on the same dataset."""

from __future__ import annotations

import lance
import numpy as np
import pyarrow as pa
import pytest
from flight_sql_helpers import adbc_connect, running_server
from vector_helpers import write_vector_dataset

DIM = 8


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("sqlvec")
    write_vector_dataset(root / "items", n=1500, dim=DIM, seed=21, rows_per_file=500)
    lance.dataset(str(root / "items")).delete("id % 11 = 0")
    return root


@pytest.fixture(scope="module")
def conn(root):
    with running_server(str(root)) as server:
        c = adbc_connect(server)
        yield c
        c.close()


def _sql(conn, sql: str) -> pa.Table:
    with conn.cursor() as cur:
        cur.execute(sql)
        return cur.fetch_arrow_table()


def _literal(q: np.ndarray) -> str:
    return "[" + ", ".join(repr(float(x)) for x in q) + f"]::FLOAT[{len(q)}]"


QUERY = np.random.default_rng(5).standard_normal(DIM).astype(np.float32)


@pytest.mark.parametrize("metric", ["l2", "cosine", "dot"])
def test_search_equals_pylance(conn, root, metric):
    got = _sql(
        conn,
        f"SELECT id, _distance FROM lance_vector_search('items', 'vec', {_literal(QUERY)}, 12, "
        f"metric = '{metric}') ORDER BY _distance, id",
    )
    want = lance.dataset(str(root / "items")).to_table(
        columns=["id"], nearest={"column": "vec", "q": QUERY, "k": 12, "metric": metric}
    )
    assert got["id"].to_pylist() == want["id"].to_pylist()
    np.testing.assert_allclose(got["_distance"].to_numpy(), want["_distance"].to_numpy(), rtol=2e-5)


def test_named_options_filter_alias_and_join(conn, root):
    got = _sql(
        conn,
        f"SELECT s.id, s.label, s._distance, i.id AS again FROM lance_vector_search("
        f"'items', 'vec', {_literal(QUERY)}, k := 6, prefilter := true, filter := 'label = ''r3''')"
        " AS s JOIN items i ON i.id = s.id ORDER BY s._distance",
    )
    want = lance.dataset(str(root / "items")).to_table(
        nearest={"column": "vec", "q": QUERY, "k": 6}, filter="label = 'r3'", prefilter=True
    )
    assert got["id"].to_pylist() == want["id"].to_pylist() == got["again"].to_pylist()
    assert set(got["label"].to_pylist()) == {"r3"}


@pytest.mark.parametrize(
    "call, message",
    [
        ("lance_vector_search('items', 'vec', [1.0, 2.0], 3)", "does not match"),
        ("lance_vector_search('items', 'vec', [1,2,3,4,5,6,7,8], 0)", "must be > 0"),
        ("lance_vector_search('items', 'label', [1,2,3,4,5,6,7,8], 3)", "must be a vector"),
        ("lance_vector_search('items', 'vec', [1,2,3,4,5,6,7,8], metric = 'x')", "unknown metric"),
        ("lance_vector_search('items', 'vec', [1,2,3,4,5,6,7,8], bogus = 1)", "unknown option"),
        ("lance_vector_search('nope', 'vec', [1,2,3,4,5,6,7,8])", "not found"),
        ("lance_vector_search('items', 'vec')", "positional"),
    ],
)
def test_bad_calls_are_clear_errors(conn, call, message):
    import adbc_driver_manager

    with pytest.raises(adbc_driver_manager.Error, match=message):
        _sql(conn, f"SELECT * FROM {call}")
