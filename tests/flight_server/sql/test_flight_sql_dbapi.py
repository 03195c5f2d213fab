"""A second Flight SQL client, ``flightsql-dbapi`` (pure Python over pyarrow.flight), on a
smaller set of the same queries, so that the server does not fit one driver only.

This client predates ``DoPutPreparedStatementResult``: it binds parameters and then executes
the original handle, which the server supports by remembering the last binding of each
prepared statement in process.  It also registers the Flight SQL messages in protobuf's
default pool, which our generated module must tolerate (it uses a pool of its own).
"""

from __future__ import annotations

from types import SimpleNamespace

import lance
import pyarrow as pa
import pytest
from flight_sql_helpers import (
    Q1,
    Q6,
    duckdb_truth,
    people_table,
    pylance_tables,
    read_parquet,
    running_server,
    tpch_parquet,
)
from flightsql import FlightSQLClient, connect

import flight_server.sql.flight_sql_pb2  # noqa: F401 - imported alongside the client's own


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    base = tmp_path_factory.mktemp("flight_sql_dbapi")
    parquet = tpch_parquet(base)
    root = base / "root"
    lance.write_dataset(
        read_parquet(parquet["lineitem"]), root / "tpch/lineitem", max_rows_per_file=16384
    )
    lance.write_dataset(read_parquet(parquet["orders"]), root / "tpch/orders")
    lance.write_dataset(people_table(), root / "people", max_rows_per_file=5)
    names = {"lineitem": "tpch/lineitem", "orders": "tpch/orders", "people": "people"}
    return SimpleNamespace(root=root, tables=pylance_tables(root, names))


@pytest.fixture(scope="module")
def conn(data):
    with running_server(str(data.root)) as server:
        client = FlightSQLClient(host="127.0.0.1", port=server.port, insecure=True)
        c = connect(client)
        yield c
        c.close()
        client.close()


def rows(conn, sql: str, params=None) -> list[tuple]:
    """The client's rows (it turns NULL strings into NaN through pandas: queries avoid them)."""
    cur = conn.cursor()
    cur.execute(sql, params)
    return [tuple(r) for r in cur.fetchall()]


def truth_rows(data, sql: str, params=None) -> list[tuple]:
    return [tuple(r.values()) for r in duckdb_truth(sql, data.tables, params).to_pylist()]


QUERIES = [
    ("filter", "SELECT id, name FROM people WHERE score > 1.5 AND name IS NOT NULL ORDER BY id", None),
    ("join_aggregate",
     "SELECT o.o_orderpriority, count(*) AS n, sum(l.l_extendedprice) AS revenue FROM orders o "
     "JOIN lineitem l ON o.o_orderkey = l.l_orderkey WHERE l.l_shipdate > DATE '1995-01-01' GROUP BY 1 ORDER BY 1",
     None),
    ("q1", Q1, None),
    ("q6", Q6, None),
    ("params", "SELECT id, name FROM people WHERE id > ? AND active = ? AND name IS NOT NULL ORDER BY id", [3, True]),
    ("join_params", "SELECT count(*) FROM orders o JOIN lineitem l ON o.o_orderkey = l.l_orderkey "
     "WHERE l.l_linenumber = ? AND o.o_orderstatus = ?", [2, "O"]),
]  # fmt: skip


@pytest.mark.parametrize(
    "sql,params", [(q, p) for _, q, p in QUERIES], ids=[i for i, _, _ in QUERIES]
)
def test_queries_equal_duckdb_over_pylance(conn, data, sql, params):
    got, want = rows(conn, sql, params), truth_rows(data, sql, params)
    assert len(got) == len(want) > 0
    for g, w in zip(got, want, strict=True):
        for a, b in zip(g, w, strict=True):
            assert a == pytest.approx(b, rel=1e-9) if isinstance(b, float) else a == b


def test_metadata_calls(conn, data):
    assert conn.flightsql_get_schema_names() == ["main", "tpch"]
    assert sorted(conn.flightsql_get_table_names()) == ["lineitem", "orders", "people"]
    assert sorted(conn.flightsql_get_table_names("tpch")) == ["lineitem", "orders"]
    columns = conn.flightsql_get_columns("orders", "tpch")
    assert [c["name"] for c in columns] == data.tables["orders"].column_names
    info = conn.flightsql_get_sql_info([0, 504, 8])
    assert info == {0: "lance-flight", 504: '"', 8: 0}


def test_errors_and_recovery(conn, data):
    cur = conn.cursor()
    with pytest.raises(pa.ArrowInvalid, match=r"\[INVALID_ARGUMENT\] cannot parse"):
        cur.execute("SELEC 1")
    with pytest.raises(pa.ArrowKeyError, match=r"\[NOT_FOUND\].*nosuch"):
        cur.execute("SELECT * FROM nosuch")
    with pytest.raises(pa.ArrowInvalid, match=r"\[INVALID_ARGUMENT\].*takes 1 param"):
        cur.execute("SELECT * FROM people WHERE id = ?", [1, 2])
    assert rows(conn, "SELECT count(*) FROM people") == [(data.tables["people"].num_rows,)]
