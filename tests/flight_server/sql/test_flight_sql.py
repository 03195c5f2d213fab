"""Flight SQL through the real ADBC Flight SQL driver (and raw pyarrow.flight where the
driver has no call for it): metadata, queries, prepared statements, DELETE, bulk ingest,
cancellation, errors, auth.

Truth: DuckDB running the same SQL over the same datasets read by pylance; TPC-H Q1 and Q6
against DuckDB over the Parquet files tpchgen-cli wrote; datasets after a write as pylance
reads them.  The server is the thin router of :mod:`flight_sql_helpers` (what
``LanceFlightServer`` does for Flight SQL calls).
"""

from __future__ import annotations

import datetime
import decimal
import json
import logging
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import adbc_driver_flightsql.dbapi as dbapi
import duckdb
import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.flight as flight
import pytest
from flight_sql_helpers import (
    Q1,
    Q6,
    adbc_connect,
    assert_same,
    dataset_names,
    duckdb_truth,
    people_table,
    pylance_tables,
    read_parquet,
    running_server,
    tpch_parquet,
    uri,
)

from flight_server.sql import FlightSqlService
from flight_server.sql import flight_sql_pb2 as pb
from flight_server.sql.naming import Resolver
from flight_server.sql.protocol import is_flight_sql, pack

# (id, SQL, ordered): filters, joins and aggregates across the two TPC-H datasets, all types
QUERIES = [
    ("filter", "SELECT id, name, score FROM people WHERE score > 1.5 AND name IS NOT NULL ORDER BY id", True),
    ("in_like", "SELECT id FROM people WHERE name IN ('ann', 'dee') OR name LIKE 'b%' ORDER BY id", True),
    ("nan_sorts_high", "SELECT id FROM people WHERE score >= 2.0 ORDER BY id", True),
    ("not_nulls", "SELECT id FROM people WHERE NOT (score < 1.0) ORDER BY id", True),
    ("dates", "SELECT id, born FROM people WHERE born BETWEEN DATE '1995-01-01' AND DATE '2005-12-31' ORDER BY id", True),
    ("all_types", "SELECT * FROM people ORDER BY id", True),
    ("decimal_timestamp", "SELECT id, amount * 2 AS twice, seen FROM people WHERE amount >= 50 AND seen < TIMESTAMP '2024-01-01 09:00:00' ORDER BY id", True),
    (
        "join_aggregate",
        "SELECT o.o_orderpriority, count(*) AS n, sum(l.l_extendedprice) AS revenue, avg(l.l_discount) AS disc "
        "FROM orders o JOIN lineitem l ON o.o_orderkey = l.l_orderkey "
        "WHERE l.l_shipdate > DATE '1995-01-01' AND o.o_orderstatus = 'F' GROUP BY 1 ORDER BY 1",
        True,
    ),
    ("semi_join", "SELECT count(*) AS n FROM orders WHERE o_orderkey IN (SELECT l_orderkey FROM lineitem WHERE l_quantity > 49)", True),
    (
        "window",
        "SELECT l_orderkey, l_linenumber, sum(l_quantity) OVER (PARTITION BY l_orderkey ORDER BY l_linenumber) AS running "
        "FROM lineitem WHERE l_orderkey < 200 ORDER BY 1, 2",
        True,
    ),
    (
        "cte_union",
        "WITH big AS (SELECT o_orderkey FROM orders WHERE o_totalprice > 300000) "
        "SELECT 'big' AS k, count(*) AS n FROM big UNION ALL SELECT 'disc', count(*) FROM lineitem WHERE l_discount = 0.05",
        False,
    ),
    ("top_n", "SELECT l_orderkey, l_extendedprice FROM lineitem ORDER BY l_extendedprice DESC, l_orderkey LIMIT 7", True),
    (
        "group_having",
        "SELECT l_shipmode, count(DISTINCT l_orderkey) AS orders, max(l_receiptdate) AS last FROM lineitem "
        "GROUP BY l_shipmode HAVING count(*) > 100 ORDER BY l_shipmode",
        True,
    ),
]  # fmt: skip


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    base = tmp_path_factory.mktemp("flight_sql")
    parquet = tpch_parquet(base)
    root = base / "root"
    lance.write_dataset(
        read_parquet(parquet["lineitem"]), root / "tpch/lineitem", max_rows_per_file=16384
    )
    lance.write_dataset(read_parquet(parquet["orders"]), root / "tpch/orders")
    lance.write_dataset(people_table(), root / "people", max_rows_per_file=5)
    lance.write_dataset(pa.table({"x": [1]}), root / "a/dup")
    lance.write_dataset(pa.table({"x": [2, 3]}), root / "b/dup")
    names = {"lineitem": "tpch/lineitem", "orders": "tpch/orders", "people": "people"}
    return SimpleNamespace(root=root, parquet=parquet, tables=pylance_tables(root, names))


@pytest.fixture(scope="module")
def server(data):
    with running_server(str(data.root)) as s:
        yield s


@pytest.fixture(scope="module")
def conn(server):
    c = adbc_connect(server)
    yield c
    c.close()


@pytest.fixture
def scratch(tmp_path: Path):
    """A root of its own for tests that write, with a server over it."""
    root = tmp_path / "root"
    root.mkdir()
    with running_server(str(root)) as s:
        yield SimpleNamespace(root=root, server=s)


def fetch(conn, sql: str, params=None) -> pa.Table:
    cur = conn.cursor()
    try:
        cur.execute(sql, parameters=params)
        return cur.fetch_arrow_table()
    finally:
        cur.close()


def cmd_descriptor(msg) -> flight.FlightDescriptor:
    return flight.FlightDescriptor.for_command(pack(msg))


def read_info(client: flight.FlightClient, info: flight.FlightInfo) -> pa.Table:
    return pa.concat_tables(client.do_get(e.ticket).read_all() for e in info.endpoints)


# -- protocol and naming units ---------------------------------------------------------------


def test_handles_only_flight_sql_commands():
    assert is_flight_sql(pack(pb.CommandStatementQuery(query="SELECT 1")))
    assert FlightSqlService.handles(pack(pb.CommandGetTables()))
    assert not FlightSqlService.handles(json.dumps({"dataset": "x"}).encode())
    assert not FlightSqlService.handles(b"tpch/lineitem")
    assert not FlightSqlService.handles(b"")
    assert FlightSqlService.handles_action("CreatePreparedStatement")
    assert not FlightSqlService.handles_action("list_datasets")


def test_name_resolution_rules():
    r = Resolver(["people", "tpch/lineitem", "a/dup", "b/dup", "deep/er/t"])
    assert r.resolve("lineitem") == ("tpch/lineitem", None)
    assert r.resolve("LINEITEM") == ("tpch/lineitem", None)
    assert r.resolve("lineitem", "tpch", "lance") == ("tpch/lineitem", None)
    assert r.resolve("people", "main") == ("people", None)
    assert r.resolve("tpch/lineitem") == ("tpch/lineitem", None)
    assert r.resolve("t", "deep/er") == ("deep/er/t", None)
    assert r.resolve("lineitem@5") == ("tpch/lineitem", 5)
    assert r.resolve("tpch/lineitem@v7") == ("tpch/lineitem", 7)
    assert r.resolve("people@nightly") == ("people", "nightly")
    assert r.resolve("dup", "b") == ("b/dup", None)
    with pytest.raises(ValueError, match="ambiguous.*a.dup.*b.dup"):
        r.resolve("dup")
    with pytest.raises(Exception, match="not found"):
        r.resolve("nosuch")
    with pytest.raises(Exception, match="unknown catalog"):
        r.resolve("people", "main", "other")


# -- connection, info and metadata ----------------------------------------------------------


def test_connect_warns_autocommit_and_refuses_transactions(server):
    with pytest.warns(Warning, match="Cannot disable autocommit"):
        c = dbapi.connect(uri(server))
    c.close()
    client = flight.connect(uri(server))
    with pytest.raises(
        pa.ArrowNotImplementedError, match=r"\[UNIMPLEMENTED\] transactions are not"
    ):
        list(
            client.do_action(
                flight.Action("BeginTransaction", pack(pb.ActionBeginTransactionRequest()))
            )
        )
    client.close()


def test_closing_an_adbc_connection_is_quiet(server, capfd, caplog):
    """On close the ADBC driver sends the optional ``CloseSession`` action and ignores an
    UNIMPLEMENTED answer; any other answer it prints to stderr (it printed "DoAction
    NOT_FOUND" at every close when the server called unknown actions not found).  The
    server logs that answer at INFO: a warning per connection would only be noise, while
    other unknown actions still warn."""
    caplog.set_level(logging.INFO, logger="flight_server.requests")
    with pytest.warns(Warning, match="Cannot disable autocommit"):
        c = dbapi.connect(uri(server))
    cur = c.cursor()
    cur.execute("SELECT 1 AS x")
    assert cur.fetch_arrow_table().to_pylist() == [{"x": 1}]
    cur.close()
    c.close()
    captured = capfd.readouterr()
    # the driver's own line (other output on stderr, such as another test's log handler,
    # is not its business)
    assert re.search(r"^DoAction \w+$", captured.err, re.M) is None, captured.err
    client = flight.connect(uri(server))
    for kind in ("CloseSession", "no_such_action"):
        with pytest.raises(pa.ArrowNotImplementedError, match=r"\[UNIMPLEMENTED\] unknown action"):
            list(client.do_action(flight.Action(kind, b"")))
    client.close()
    unimplemented = [r for r in caplog.records if "UNIMPLEMENTED" in r.getMessage()]
    levels = [(r.fields["error"].split("'")[1], r.levelname) for r in unimplemented]  # type: ignore[attr-defined]
    assert levels == [
        ("CloseSession", "INFO"),  # the driver's, on close
        ("CloseSession", "INFO"),
        ("no_such_action", "WARNING"),
    ]


def test_adbc_get_info(conn):
    info = conn.adbc_get_info()
    assert info["vendor_name"] == "lance-flight"
    assert info["vendor_version"]
    assert info["vendor_arrow_version"] == pa.__version__
    assert info["driver_name"] == "ADBC Flight SQL Driver - Go"


# The union member each SqlInfo code's value must use, per FlightSql.proto's description.
_BOOL_CODES = {3, 4, 5, 9, 10, 11, 500, 501, 502, 506, 515, 516, 518, 519, 520, 521, 523, 524,
               527, 532, 536, 537, 539, 556, 563, 565, 566, 572, 573, 574, 575, 576}  # fmt: skip
_STRING_CODES = {0, 1, 2, 504, 513, 514, 529, 530, 531}
_INT32_CODES = {8, 100, 101, 503, 505, 507, 522, 525, 526, 528, 533, 534, 535, 538, 540, 562,
                564, 567, 568, 569, 570, 571}  # fmt: skip
_INT64_CODES = set(range(541, 562)) - {556}
_LIST_CODES = {508, 509, 510, 511, 512}
_MAP_CODES = {517}


def test_sql_info_union_members_and_facts(server):
    client = flight.connect(uri(server))
    info = client.get_flight_info(cmd_descriptor(pb.CommandGetSqlInfo()))
    table = read_info(client, info)
    client.close()
    assert info.schema.equals(table.schema)
    assert table.schema.field("info_name").type == pa.uint32()
    assert not table.schema.field("info_name").nullable
    assert pa.types.is_union(table.schema.field("value").type)
    union = table.column("value").combine_chunks()
    kinds = dict(
        zip(table.column("info_name").to_pylist(), union.type_codes.to_pylist(), strict=True)
    )
    expected = {
        0: _STRING_CODES,
        1: _BOOL_CODES,
        2: _INT64_CODES,
        3: _INT32_CODES,
        4: _LIST_CODES,
        5: _MAP_CODES,
    }
    every = set().union(*expected.values())
    assert set(kinds) == every  # everything the spec defines except the Substrait versions
    for member, codes in expected.items():
        for code in codes:
            assert kinds[code] == member, (code, kinds[code], member)
    values = dict(zip(table.column("info_name").to_pylist(), union.to_pylist(), strict=True))
    assert values[3] is False  # read-only: no
    assert values[8] == 0  # SQL_SUPPORTED_TRANSACTION_NONE
    assert values[563] is False
    assert values[504] == '"'
    assert values[526] & 1 and values[526] & 2  # ANSI92 entry + intermediate
    assert values[10] is True and values[11] is False  # bulk ingest, without transactions
    assert "SELECT" in values[508]
    # the dialect facts are DuckDB's: its NULL ordering, its quoting, its functions
    con = duckdb.connect(":memory:")
    functions = {
        r[0].upper() for r in con.sql("SELECT function_name FROM duckdb_functions()").fetchall()
    }
    # special forms DuckDB parses itself rather than listing as functions: check they run
    special = ["CURRENT_DATE", "CURRENT_TIME", "CURRENT_TIMESTAMP", "EXTRACT(year FROM DATE '2000-01-01')",
               "POSITION('b' IN 'abc')", "TRIM(' a ')", "COALESCE(NULL, 1)", "IFNULL(NULL, 1)"]  # fmt: skip
    con.sql("SELECT " + ", ".join(special)).to_arrow_table()
    functions |= {f.split("(")[0] for f in special}
    for code in (509, 510, 511, 512):
        missing = [f for f in values[code] if f not in functions]
        assert not missing, (code, missing)
    assert con.sql("SELECT x FROM (VALUES (1), (NULL)) t(x) ORDER BY x").fetchall()[-1] == (None,)
    assert con.sql('SELECT 1 AS "Quoted"').fetchall() == [(1,)]
    con.close()


# Result schemas as FlightSql.proto documents them (nullability included).
S = pa.string()
SPEC_SCHEMAS = {
    "catalogs": pa.schema([pa.field("catalog_name", S, False)]),
    "db_schemas": pa.schema([pa.field("catalog_name", S), pa.field("db_schema_name", S, False)]),
    "tables": pa.schema([pa.field("catalog_name", S), pa.field("db_schema_name", S),
                         pa.field("table_name", S, False), pa.field("table_type", S, False)]),
    "table_types": pa.schema([pa.field("table_type", S, False)]),
    "primary_keys": pa.schema([pa.field("catalog_name", S), pa.field("db_schema_name", S),
                               pa.field("table_name", S, False), pa.field("column_name", S, False),
                               pa.field("key_name", S), pa.field("key_sequence", pa.int32(), False)]),
    "keys": pa.schema([pa.field("pk_catalog_name", S), pa.field("pk_db_schema_name", S),
                       pa.field("pk_table_name", S, False), pa.field("pk_column_name", S, False),
                       pa.field("fk_catalog_name", S), pa.field("fk_db_schema_name", S),
                       pa.field("fk_table_name", S, False), pa.field("fk_column_name", S, False),
                       pa.field("key_sequence", pa.int32(), False), pa.field("fk_key_name", S),
                       pa.field("pk_key_name", S), pa.field("update_rule", pa.uint8(), False),
                       pa.field("delete_rule", pa.uint8(), False)]),
    "xdbc": pa.schema([
        pa.field("type_name", S, False), pa.field("data_type", pa.int32(), False),
        pa.field("column_size", pa.int32()), pa.field("literal_prefix", S),
        pa.field("literal_suffix", S), pa.field("create_params", pa.list_(pa.field("item", S, False))),
        pa.field("nullable", pa.int32(), False), pa.field("case_sensitive", pa.bool_(), False),
        pa.field("searchable", pa.int32(), False), pa.field("unsigned_attribute", pa.bool_()),
        pa.field("fixed_prec_scale", pa.bool_(), False), pa.field("auto_increment", pa.bool_()),
        pa.field("local_type_name", S), pa.field("minimum_scale", pa.int32()),
        pa.field("maximum_scale", pa.int32()), pa.field("sql_data_type", pa.int32(), False),
        pa.field("datetime_subcode", pa.int32()), pa.field("num_prec_radix", pa.int32()),
        pa.field("interval_precision", pa.int32())]),
}  # fmt: skip
SPEC_SCHEMAS["tables_with_schema"] = SPEC_SCHEMAS["tables"].append(
    pa.field("table_schema", pa.binary(), False)
)

METADATA_COMMANDS = [
    ("catalogs", pb.CommandGetCatalogs(), "catalogs"),
    ("db_schemas", pb.CommandGetDbSchemas(), "db_schemas"),
    ("tables", pb.CommandGetTables(), "tables"),
    ("tables_schema", pb.CommandGetTables(include_schema=True), "tables_with_schema"),
    ("table_types", pb.CommandGetTableTypes(), "table_types"),
    ("primary_keys", pb.CommandGetPrimaryKeys(table="lineitem"), "primary_keys"),
    ("exported_keys", pb.CommandGetExportedKeys(table="lineitem"), "keys"),
    ("imported_keys", pb.CommandGetImportedKeys(table="lineitem"), "keys"),
    (
        "cross_reference",
        pb.CommandGetCrossReference(pk_table="orders", fk_table="lineitem"),
        "keys",
    ),
    ("xdbc", pb.CommandGetXdbcTypeInfo(), "xdbc"),
]


@pytest.mark.parametrize(
    "cmd,schema_key",
    [(c, k) for _, c, k in METADATA_COMMANDS],
    ids=[i for i, _, _ in METADATA_COMMANDS],
)
def test_metadata_result_schemas_match_the_spec(server, cmd, schema_key):
    client = flight.connect(uri(server))
    want = SPEC_SCHEMAS[schema_key]
    desc = cmd_descriptor(cmd)
    assert client.get_schema(desc).schema.equals(want)
    info = client.get_flight_info(desc)
    assert info.schema.equals(want)
    for endpoint in info.endpoints:
        assert client.do_get(endpoint.ticket).read_all().schema.equals(want)
    client.close()


def test_metadata_filters_and_rows(server, data):
    client = flight.connect(uri(server))

    def rows(cmd):
        return read_info(client, client.get_flight_info(cmd_descriptor(cmd))).to_pylist()

    datasets = dataset_names(data.root)
    schemas = sorted({d.rpartition("/")[0] or "main" for d in datasets})
    assert rows(pb.CommandGetCatalogs()) == [{"catalog_name": "lance"}]
    assert [r["db_schema_name"] for r in rows(pb.CommandGetDbSchemas())] == schemas
    assert rows(pb.CommandGetDbSchemas(db_schema_filter_pattern="tp_h")) == [
        {"catalog_name": "lance", "db_schema_name": "tpch"}
    ]
    assert rows(pb.CommandGetDbSchemas(catalog="")) == []
    got = [(r["db_schema_name"], r["table_name"]) for r in rows(pb.CommandGetTables())]
    want = sorted((d.rpartition("/")[0] or "main", d.rpartition("/")[2]) for d in datasets)
    assert got == want
    assert [
        r["table_name"] for r in rows(pb.CommandGetTables(table_name_filter_pattern="line%"))
    ] == ["lineitem"]
    assert rows(pb.CommandGetTables(table_types=["VIEW"])) == []
    assert rows(pb.CommandGetTables(catalog="elsewhere")) == []
    assert [r["table_type"] for r in rows(pb.CommandGetTableTypes())] == ["TABLE"]
    assert rows(pb.CommandGetPrimaryKeys(table="lineitem")) == []
    xdbc = rows(pb.CommandGetXdbcTypeInfo())
    assert [r["data_type"] for r in xdbc] == sorted(r["data_type"] for r in xdbc)
    assert {r["type_name"] for r in rows(pb.CommandGetXdbcTypeInfo(data_type=pb.XDBC_BIGINT))} == {
        "BIGINT"
    }
    client.close()


def test_adbc_get_objects_every_depth(conn, data):
    datasets = dataset_names(data.root)
    tables = {d: lance.dataset(str(data.root / d)).schema for d in datasets}
    catalogs = conn.adbc_get_objects(depth="catalogs").read_all().to_pylist()
    assert [c["catalog_name"] for c in catalogs] == ["lance"]
    [cat] = conn.adbc_get_objects(depth="db_schemas").read_all().to_pylist()
    assert sorted(s["db_schema_name"] for s in cat["catalog_db_schemas"]) == sorted(
        {d.rpartition("/")[0] or "main" for d in datasets}
    )
    [cat] = conn.adbc_get_objects(depth="tables").read_all().to_pylist()
    got = {
        (s["db_schema_name"], t["table_name"])
        for s in cat["catalog_db_schemas"]
        for t in s["db_schema_tables"]
    }
    assert got == {(d.rpartition("/")[0] or "main", d.rpartition("/")[2]) for d in datasets}
    [cat] = conn.adbc_get_objects(depth="all").read_all().to_pylist()
    for s in cat["catalog_db_schemas"]:
        for t in s["db_schema_tables"]:
            name = (
                t["table_name"]
                if s["db_schema_name"] == "main"
                else f"{s['db_schema_name']}/{t['table_name']}"
            )
            columns = [(c["column_name"], c["ordinal_position"]) for c in t["table_columns"]]
            assert columns == [(f.name, i + 1) for i, f in enumerate(tables[name])]
            assert t["table_type"] == "TABLE"
            for c in t["table_columns"]:  # from the Flight SQL column metadata
                assert (c["xdbc_scope_catalog"], c["xdbc_scope_schema"]) == (
                    "lance",
                    s["db_schema_name"],
                )
                assert c["xdbc_scope_table"] == t["table_name"] and c["xdbc_type_name"]
    # a filtered listing
    [cat] = conn.adbc_get_objects(depth="columns", db_schema_filter="tpch", table_name_filter="orders",
                                  column_name_filter="o_order%").read_all().to_pylist()  # fmt: skip
    [s] = cat["catalog_db_schemas"]
    [t] = s["db_schema_tables"]
    assert [c["column_name"] for c in t["table_columns"]] == [
        f.name for f in tables["tpch/orders"] if f.name.startswith("o_order")
    ]


def _plain_schema(schema: pa.Schema) -> pa.Schema:
    return pa.schema([pa.field(f.name, f.type, f.nullable) for f in schema])


def test_adbc_get_table_schema_and_types(conn, data):
    want = lance.dataset(str(data.root / "tpch/lineitem")).schema
    got = conn.adbc_get_table_schema("lineitem", db_schema_filter="tpch")
    assert _plain_schema(got).equals(_plain_schema(want))
    assert got.field("l_quantity").metadata[b"ARROW:FLIGHT:SQL:TYPE_NAME"] == b"DECIMAL(15,2)"
    got = conn.adbc_get_table_schema("people")
    assert _plain_schema(got).equals(_plain_schema(lance.dataset(str(data.root / "people")).schema))
    assert conn.adbc_get_table_types() == ["TABLE"]
    with pytest.raises(dbapi.Error):
        conn.adbc_get_table_schema("nosuch")


# -- queries ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sql,ordered", [(q, o) for _, q, o in QUERIES], ids=[i for i, _, _ in QUERIES]
)
def test_queries_equal_duckdb_over_pylance(conn, data, sql, ordered):
    assert_same(fetch(conn, sql), duckdb_truth(sql, data.tables), ordered=ordered)


PARAM_QUERIES = [
    ("two_params", "SELECT id, name FROM people WHERE id > ? AND name <> ? ORDER BY id", (2, "dee")),
    ("date_decimal", "SELECT count(*) AS n, sum(l_extendedprice) AS s FROM lineitem WHERE l_shipdate >= ? AND l_quantity < ?",
     (datetime.date(1996, 1, 1), decimal.Decimal("10"))),
    ("numbered", "SELECT o_orderkey FROM orders WHERE o_totalprice > $2 AND o_orderstatus = $1 ORDER BY 1 LIMIT 20", ("O", 350000.0)),
    ("join_param", "SELECT o.o_orderpriority, count(*) AS n FROM orders o JOIN lineitem l ON o.o_orderkey = l.l_orderkey "
     "WHERE l.l_quantity = ? GROUP BY 1 ORDER BY 1", (decimal.Decimal("7"),)),
]  # fmt: skip


@pytest.mark.parametrize(
    "sql,params", [(q, p) for _, q, p in PARAM_QUERIES], ids=[i for i, _, _ in PARAM_QUERIES]
)
def test_bound_parameters(conn, data, sql, params):
    assert_same(fetch(conn, sql, params), duckdb_truth(sql, data.tables, list(params)))


def test_same_statement_rebound_with_new_parameters(conn, data):
    sql = "SELECT count(*) AS n FROM lineitem WHERE l_linenumber = ?"
    cur = conn.cursor()
    for n in (1, 4, 7):
        cur.execute(sql, parameters=(n,))
        assert (
            cur.fetch_arrow_table().to_pylist() == duckdb_truth(sql, data.tables, [n]).to_pylist()
        )
    cur.close()


@pytest.mark.parametrize("name,sql", [("q1", Q1), ("q6", Q6)])
def test_tpch_equals_duckdb_over_parquet(conn, data, name, sql):
    con = duckdb.connect(":memory:")
    con.sql(f"CREATE VIEW lineitem AS SELECT * FROM read_parquet('{data.parquet['lineitem']}')")
    want = con.sql(sql).to_arrow_table()
    con.close()
    got = fetch(conn, sql)
    assert got.num_rows == want.num_rows > 0
    assert_same(got, want.cast(got.schema) if name == "q1" else want)


@pytest.mark.parametrize(
    "table",
    ["lineitem", "tpch.lineitem", "lance.tpch.lineitem", '"tpch/lineitem"', "TPCH.LineItem", '"lance"."tpch"."lineitem"'],
)  # fmt: skip
def test_table_naming_forms(conn, data, table):
    got = fetch(conn, f"SELECT count(*) AS n, max(l_orderkey) AS m FROM {table}")
    assert got.to_pylist() == [
        {
            "n": data.tables["lineitem"].num_rows,
            "m": max(data.tables["lineitem"].column("l_orderkey").to_pylist()),
        }
    ]


def test_qualified_column_references_keep_working(conn, data):
    sql = "SELECT lineitem.l_orderkey FROM tpch.lineitem WHERE lineitem.l_orderkey < 5 ORDER BY 1"
    assert (
        fetch(conn, sql).column(0).to_pylist()
        == duckdb_truth(sql.replace("tpch.", ""), data.tables).column(0).to_pylist()
    )


def test_ambiguous_and_unknown_names(conn):
    with pytest.raises(dbapi.ProgrammingError, match=r"\[INVALID_ARGUMENT\].*ambiguous"):
        fetch(conn, "SELECT * FROM dup")
    assert fetch(conn, "SELECT x FROM b.dup ORDER BY x").column(0).to_pylist() == [2, 3]
    with pytest.raises(dbapi.ProgrammingError, match=r"\[NOT_FOUND\].*catalog"):
        fetch(conn, "SELECT * FROM other.tpch.lineitem")


def test_pushdown_reaches_our_scanner(server, conn, data):
    log = server.service.scan_log
    log.clear()
    # l_quantity > 49 keeps 2% of the rows: pushed; l_shipmode = 'AIR' keeps a seventh:
    # DuckDB filters it (a pushed predicate costs a copy of every row it keeps)
    sql = "SELECT l_orderkey, l_extendedprice FROM lineitem WHERE l_quantity > 49 AND l_shipmode = 'AIR'"
    got = fetch(conn, sql)
    assert_same(got, duckdb_truth(sql, data.tables), ordered=False)
    [scan] = [r for r in log.snapshot() if r.dataset == "tpch/lineitem"]
    assert scan.columns is not None
    assert {"l_orderkey", "l_extendedprice", "l_shipmode"} <= set(scan.columns)
    assert any("l_quantity" in f for f in scan.filters)
    assert not any("l_shipmode" in f for f in scan.filters)
    lineitem = data.tables["lineitem"]
    selective = pc.sum(pc.greater(lineitem["l_quantity"], 49)).as_py()
    assert got.num_rows < scan.rows == selective < lineitem.num_rows  # filtered in the scan
    # a join: each side projected, the filter on its own side
    log.clear()
    fetch(
        conn,
        "SELECT o.o_orderdate FROM orders o JOIN lineitem l ON o.o_orderkey = l.l_orderkey WHERE l.l_quantity = 1",
    )
    scans = {r.dataset: r for r in log.snapshot()}
    assert set(scans["tpch/orders"].columns) == {"o_orderkey", "o_orderdate"}
    assert set(scans["tpch/lineitem"].columns) == {"l_orderkey"}
    assert any("l_quantity" in f for f in scans["tpch/lineitem"].filters)


def test_unselective_predicates_stay_with_duckdb(server, conn, data):
    """TPC-H Q1's predicate keeps nearly every row: DuckDB applies it, the scan reads all."""
    log = server.service.scan_log
    log.clear()
    sql = (
        "SELECT l_returnflag, count(*) AS n FROM lineitem "
        "WHERE l_shipdate <= date '1998-09-02' GROUP BY l_returnflag"
    )
    got = fetch(conn, sql)
    assert_same(got, duckdb_truth(sql, data.tables), ordered=False)
    [scan] = [r for r in log.snapshot() if r.dataset == "tpch/lineitem"]
    assert scan.filters == [] and scan.rows == data.tables["lineitem"].num_rows


def test_results_stream_in_batches(data, tmp_path):
    with running_server(str(data.root), service_kw={"result_batch_rows": 1000}) as s:
        client = flight.connect(uri(s))
        info = client.get_flight_info(
            cmd_descriptor(pb.CommandStatementQuery(query="SELECT l_orderkey FROM lineitem"))
        )
        assert info.total_records == -1  # planned, not run
        reader = client.do_get(info.endpoints[0].ticket)
        sizes = [chunk.data.num_rows for chunk in reader]
        client.close()
    assert sum(sizes) == data.tables["lineitem"].num_rows
    assert len(sizes) > 10 and max(sizes) <= 1000


# -- versions and handles --------------------------------------------------------------------


@pytest.fixture
def history(scratch):
    path = scratch.root / "hist"
    lance.write_dataset(pa.table({"id": range(10)}), path)
    ds = lance.write_dataset(pa.table({"id": range(10, 15)}), path, mode="append")
    ds.tags.create("first", 1)
    scratch.path = path
    return scratch


@pytest.mark.parametrize(
    "table,version",
    [("hist", None), ("hist@1", 1), ('"hist@v1"', 1), ("hist AT (VERSION => 1)", 1), ("hist@first", 1),
     ("hist AT (VERSION => 'first') h", 1), ("main.hist@2", 2)],
)  # fmt: skip
def test_pinned_versions(history, table, version):
    c = adbc_connect(history.server)
    got = fetch(c, f"SELECT count(*) AS n, sum(id) AS s FROM {table}").to_pylist()
    c.close()
    want = lance.dataset(str(history.path), version=version).to_table()
    assert got == [{"n": want.num_rows, "s": sum(want.column("id").to_pylist())}]


def test_unknown_version_is_not_found(history):
    c = adbc_connect(history.server)
    with pytest.raises(dbapi.ProgrammingError, match=r"\[NOT_FOUND\]"):
        fetch(c, "SELECT * FROM hist@99")
    assert fetch(c, "SELECT count(*) AS n FROM hist").to_pylist() == [{"n": 15}]
    c.close()


def test_ticket_pins_the_versions_planned(history):
    client = flight.connect(uri(history.server))
    info = client.get_flight_info(
        cmd_descriptor(pb.CommandStatementQuery(query="SELECT count(*) AS n FROM hist"))
    )
    lance.write_dataset(pa.table({"id": range(100, 130)}), history.path, mode="append")
    assert read_info(client, info).to_pylist() == [{"n": 15}]  # what GetFlightInfo planned
    again = client.get_flight_info(
        cmd_descriptor(pb.CommandStatementQuery(query="SELECT count(*) AS n FROM hist"))
    )
    assert read_info(client, again).to_pylist() == [{"n": 45}]
    client.close()


def test_handles_work_on_another_server_process(history):
    """Prepare and bind on one server, plan on a second, read on a third: nothing is held."""
    sql = "SELECT id FROM hist WHERE id >= ? ORDER BY id"
    with running_server(str(history.root)) as b, running_server(str(history.root)) as c:
        ca, cb, cc = (flight.connect(uri(s)) for s in (history.server, b, c))
        [res] = ca.do_action(
            flight.Action(
                "CreatePreparedStatement", pack(pb.ActionCreatePreparedStatementRequest(query=sql))
            )
        )
        created = pb.ActionCreatePreparedStatementResult()
        from google.protobuf import any_pb2

        wrapper = any_pb2.Any.FromString(res.body.to_pybytes())
        wrapper.Unpack(created)
        assert pa.ipc.read_schema(pa.py_buffer(created.parameter_schema)).names == ["0"]
        desc = cmd_descriptor(
            pb.CommandPreparedStatementQuery(
                prepared_statement_handle=created.prepared_statement_handle
            )
        )
        writer, meta = ca.do_put(desc, pa.schema([("0", pa.int64())]))
        writer.write_table(pa.table({"0": [12]}))
        writer.done_writing()
        reply = pb.DoPutPreparedStatementResult.FromString(meta.read().to_pybytes())
        writer.close()
        bound = cmd_descriptor(
            pb.CommandPreparedStatementQuery(
                prepared_statement_handle=reply.prepared_statement_handle
            )
        )
        info = cb.get_flight_info(bound)
        got = pa.concat_tables(cc.do_get(e.ticket).read_all() for e in info.endpoints)
        assert got.column("id").to_pylist() == [12, 13, 14]
        # the original handle was never bound on server b
        with pytest.raises(pa.ArrowInvalid, match=r"\[INVALID_ARGUMENT\].*parameter"):
            cb.get_flight_info(desc)
        for client in (ca, cb, cc):
            client.close()


# -- DELETE ----------------------------------------------------------------------------------


@pytest.fixture
def victims(scratch):
    table = pa.table({"id": pa.array(range(40), pa.int64()), "v": [None if i % 7 == 0 else i % 5 for i in range(40)],
                      "s": [f"s{i}" for i in range(40)]})  # fmt: skip
    path = scratch.root / "victims"
    lance.write_dataset(table, path, max_rows_per_file=15)
    scratch.path, scratch.table = path, table
    return scratch


def _remaining(path: Path) -> pa.Table:
    return lance.dataset(str(path)).to_table().sort_by("id")


def _kept(table: pa.Table, where: str, params=None) -> pa.Table:
    return duckdb_truth(
        f"SELECT * FROM victims WHERE ({where}) IS NOT TRUE ORDER BY id", {"victims": table}, params
    )


def test_delete_through_execute(victims):
    c = adbc_connect(victims.server)
    cur = c.cursor()
    cur.execute("DELETE FROM victims WHERE v < 2 OR s = 's39'")
    deleted = victims.table.num_rows - _kept(victims.table, "v < 2 OR s = 's39'").num_rows
    assert cur.rowcount == deleted > 0
    assert cur.fetch_arrow_table().to_pylist() == [{"count": deleted}]
    assert _remaining(victims.path).equals(_kept(victims.table, "v < 2 OR s = 's39'"))
    # with a parameter, through the same query path
    assert 8 in _remaining(victims.path).column("id").to_pylist()
    cur.execute("DELETE FROM victims WHERE id = ?", parameters=(8,))
    assert cur.rowcount == 1
    cur.close()
    c.close()
    assert 8 not in _remaining(victims.path).column("id").to_pylist()


def test_executemany_deletes_in_one_commit(victims):
    before = lance.dataset(str(victims.path)).version
    c = adbc_connect(victims.server)
    cur = c.cursor()
    cur.executemany(
        "DELETE FROM victims WHERE id = ? OR s = ?", [(1, "s30"), (3, "nope"), (99, "s31")]
    )
    assert cur.rowcount == 4
    cur.close()
    c.close()
    ds = lance.dataset(str(victims.path))
    assert ds.version == before + 1  # one commit for all parameter rows
    want = _kept(victims.table, "id IN (1, 3, 99) OR s IN ('s30', 'nope', 's31')")
    assert _remaining(victims.path).equals(want)


def test_delete_with_subquery_and_statement_update(victims):
    lance.write_dataset(pa.table({"bad": [2, 4, 6]}), victims.root / "blacklist")
    client = flight.connect(uri(victims.server))
    desc = cmd_descriptor(
        pb.CommandStatementUpdate(
            query="DELETE FROM victims WHERE id IN (SELECT bad FROM blacklist)"
        )
    )
    writer, meta = client.do_put(desc, pa.schema([]))
    writer.done_writing()
    result = pb.DoPutUpdateResult.FromString(meta.read().to_pybytes())
    writer.close()
    client.close()
    assert result.record_count == 3
    assert _remaining(victims.path).equals(_kept(victims.table, "id IN (2, 4, 6)"))


def test_delete_nothing_commits_nothing(victims):
    before = lance.dataset(str(victims.path)).version
    c = adbc_connect(victims.server)
    cur = c.cursor()
    cur.execute("DELETE FROM victims WHERE id > 1000")
    assert cur.rowcount == 0
    cur.close()
    c.close()
    assert lance.dataset(str(victims.path)).version == before


def test_update_through_execute_as_pylance(victims, tmp_path):
    """UPDATE ... SET ... WHERE over ADBC changes the same rows as pylance's update on a
    copy of the same data, in one Update commit; a parameterized UPDATE too."""
    ref = lance.write_dataset(victims.table, str(tmp_path / "ref"), max_rows_per_file=15)
    before = lance.dataset(str(victims.path)).version
    c = adbc_connect(victims.server)
    cur = c.cursor()
    cur.execute("UPDATE victims SET v = v + 100, s = concat(s, '!') WHERE id % 3 = 0")
    want = ref.update({"v": "v + 100", "s": "concat(s, '!')"}, where="id % 3 = 0")
    assert cur.rowcount == want["num_rows_updated"] == 14
    ds = lance.dataset(str(victims.path))
    assert ds.version == before + 1
    assert _remaining(victims.path).equals(ref.to_table().sort_by("id"))
    cur.execute("UPDATE victims SET s = ? WHERE id = ?", parameters=("new", 5))
    assert cur.rowcount == 1
    cur.execute("UPDATE victims SET s = 'none' WHERE id > 1000")
    assert cur.rowcount == 0
    # UPDATE ... FROM: one new value per row, or refused as ambiguous (nothing committed)
    cur.execute(
        "UPDATE victims SET s = b.x FROM (VALUES (7, 'seven')) AS b(k, x) WHERE victims.id = b.k"
    )
    assert cur.rowcount == 1
    ref.update({"s": "'seven'"}, where="id = 7")
    with pytest.raises(dbapi.ProgrammingError, match="ambiguous"):
        cur.execute(
            "UPDATE victims SET s = b.x FROM (VALUES (1, 'a'), (1, 'b')) AS b(k, x) "
            "WHERE victims.id = b.k"
        )
    cur.close()
    c.close()
    ref.update({"s": "'new'"}, where="id = 5")
    assert _remaining(victims.path).equals(ref.to_table().sort_by("id"))
    assert lance.dataset(str(victims.path)).version == before + 3  # no commit for no rows


# -- bulk ingest -----------------------------------------------------------------------------


def _ingest(server, name, data, mode, **kw) -> int:
    c = adbc_connect(server)
    cur = c.cursor()
    try:
        return cur.adbc_ingest(name, data, mode=mode, **kw)
    finally:
        cur.close()
        c.close()


def test_ingest_create_and_create_fails_when_present(scratch):
    data = people_table()
    assert _ingest(scratch.server, "fresh", data, "create") == data.num_rows
    assert_same(lance.dataset(str(scratch.root / "fresh")).to_table(), data)
    with pytest.raises(dbapi.OperationalError, match=r"\[ALREADY_EXISTS\].*already exists"):
        _ingest(scratch.server, "fresh", data, "create")
    assert lance.dataset(str(scratch.root / "fresh")).count_rows() == data.num_rows


def test_ingest_append_and_append_needs_the_table(scratch):
    first = pa.table({"a": pa.array([1, 2], pa.int64()), "b": ["x", "y"]})
    more = pa.table({"a": pa.array([3], pa.int64()), "b": ["z"]})
    lance.write_dataset(first, scratch.root / "app")
    assert _ingest(scratch.server, "app", more, "append") == 1
    assert (
        lance.dataset(str(scratch.root / "app"))
        .to_table()
        .sort_by("a")
        .equals(pa.concat_tables([first, more]))
    )
    with pytest.raises(dbapi.ProgrammingError, match=r"\[NOT_FOUND\]"):
        _ingest(scratch.server, "missing", more, "append")
    assert not (scratch.root / "missing").exists()


def test_ingest_replace(scratch):
    lance.write_dataset(pa.table({"old": [1, 2, 3]}), scratch.root / "rep")
    new = pa.table({"new": ["a", "b"], "n": pa.array([1.5, 2.5])})
    assert _ingest(scratch.server, "rep", new, "replace") == 2
    ds = lance.dataset(str(scratch.root / "rep"))
    assert ds.to_table().equals(new) and ds.version == 2
    assert _ingest(scratch.server, "rep_new", new, "replace") == 2  # replace creates too
    assert lance.dataset(str(scratch.root / "rep_new")).to_table().equals(new)


def test_ingest_create_append_and_schema_names(scratch):
    t = pa.table({"k": pa.array(range(5), pa.int32())})
    assert _ingest(scratch.server, "ca", t, "create_append", db_schema_name="sub") == 5
    assert _ingest(scratch.server, "ca", t, "create_append", db_schema_name="sub") == 5
    assert lance.dataset(str(scratch.root / "sub/ca")).count_rows() == 10
    c = adbc_connect(scratch.server)
    assert fetch(c, "SELECT count(*) AS n FROM sub.ca").to_pylist() == [{"n": 10}]
    c.close()


def test_ingest_streams_many_batches(scratch):
    n = 200_000
    rng = np.random.default_rng(1)
    table = pa.table(
        {"i": np.arange(n), "f": rng.random(n), "s": pa.array([f"r{i % 977}" for i in range(n)])}
    )
    reader = pa.RecordBatchReader.from_batches(table.schema, table.to_batches(max_chunksize=20_000))
    assert _ingest(scratch.server, "big", reader, "create") == n
    assert lance.dataset(str(scratch.root / "big")).to_table().sort_by("i").equals(table)


# -- errors, safety, cancellation ------------------------------------------------------------


# the ADBC dbapi's exception class for each kind (from the gRPC status code)
ADBC_ERRORS = {
    "INVALID_ARGUMENT": dbapi.ProgrammingError,
    "NOT_FOUND": dbapi.ProgrammingError,
    "UNIMPLEMENTED": dbapi.NotSupportedError,
}
ERRORS = [
    ("syntax", "SELEC 1", "INVALID_ARGUMENT", "cannot parse"),
    ("unknown_table", "SELECT * FROM nosuch", "NOT_FOUND", "nosuch"),
    ("unknown_column", "SELECT nocol FROM people", "INVALID_ARGUMENT", "nocol"),
    ("two_statements", "SELECT 1; SELECT 2", "INVALID_ARGUMENT", "one statement"),
    ("insert", "INSERT INTO people (id) VALUES (1)", "UNIMPLEMENTED", "INSERT is not supported"),
    ("create", "CREATE TABLE t AS SELECT 1", "INVALID_ARGUMENT", "only queries"),
    ("file_access", "SELECT * FROM read_csv('/etc/passwd')", "INVALID_ARGUMENT", "disabled"),
    ("runtime_cast", "SELECT CAST(name AS INTEGER) FROM people", "INVALID_ARGUMENT", "Could not convert"),
    ("unbound_parameter", "SELECT * FROM people WHERE id = ? AND 1 = 1", "INVALID_ARGUMENT", "takes 1 parameter"),
]  # fmt: skip


@pytest.mark.parametrize(
    "sql,kind,pattern", [(s, k, p) for _, s, k, p in ERRORS], ids=[i for i, *_ in ERRORS]
)
def test_errors_are_clear_and_harmless(conn, data, sql, kind, pattern):
    # the server's errors carry their kind in the message and as their gRPC status, which
    # decides the ADBC exception class (bad SQL: ProgrammingError, as clients expect)
    with pytest.raises(ADBC_ERRORS[kind], match=rf"\[{kind}\] .*{pattern}") as err:
        fetch(conn, sql)
    assert "Traceback" not in str(err.value)
    assert fetch(conn, "SELECT count(*) AS n FROM people").to_pylist() == [
        {"n": data.tables["people"].num_rows}
    ]


def test_wrong_parameter_count(conn):
    with pytest.raises(
        dbapi.ProgrammingError, match=r"\[INVALID_ARGUMENT\].*takes 1 parameter.*2 were bound"
    ):
        fetch(conn, "SELECT * FROM people WHERE id = ?", (1, 2))
    assert fetch(conn, "SELECT id FROM people WHERE id = ?", (3,)).to_pylist() == [{"id": 3}]


def _cancel_request(info: flight.FlightInfo) -> bytes:
    """Flight's CancelFlightInfoRequest, encoded by hand: field 1 = the FlightInfo bytes."""
    body = info.serialize()
    length, out = len(body), bytearray(b"\x0a")
    while True:
        out.append((length & 0x7F) | (0x80 if length > 0x7F else 0))
        length >>= 7
        if not length:
            break
    return bytes(out) + body


def _cancel_status(result: flight.Result) -> int:
    raw = result.body.to_pybytes()
    assert raw[0] == 0x08  # field 1, varint
    return raw[1]


def test_cancel_flight_info(data):
    with running_server(str(data.root), service_kw={"result_batch_rows": 500}) as s:
        client = flight.connect(uri(s))
        done = client.get_flight_info(
            cmd_descriptor(pb.CommandStatementQuery(query="SELECT 1 AS x"))
        )
        read_info(client, done)
        [res] = client.do_action(flight.Action("CancelFlightInfo", _cancel_request(done)))
        assert _cancel_status(res) == 3  # NOT_CANCELLABLE: finished
        info = client.get_flight_info(
            cmd_descriptor(pb.CommandStatementQuery(query="SELECT * FROM lineitem"))
        )
        reader = client.do_get(info.endpoints[0].ticket)
        first = reader.read_chunk()
        assert first.data.num_rows == 500
        [res] = client.do_action(flight.Action("CancelFlightInfo", _cancel_request(info)))
        assert _cancel_status(res) == 1  # CANCELLED
        # (read chunk by chunk: pyarrow's read_all() turns a CANCELLED status into a
        # simulated SIGINT, i.e. a KeyboardInterrupt, in the client process)
        with pytest.raises(flight.FlightCancelledError, match="cancelled"):
            while True:
                reader.read_chunk()
        # the server is fine
        assert read_info(client, done).to_pylist() == [{"x": 1}]
        assert not s.service._running
        client.close()


# -- authentication --------------------------------------------------------------------------


def test_with_basic_auth_and_roles(data, tmp_path):
    from flight_server.auth import Authenticator, hash_password

    root = tmp_path / "root"
    shutil.copytree(data.root / "people", root / "people")
    users = {
        "alice": (hash_password("alice-pw", iterations=1000), "write"),
        "bob": (hash_password("bob-pw", iterations=1000), "read"),
    }
    authenticator = Authenticator(users, secret="s" * 32)
    with running_server(str(root), authenticator=authenticator) as s:
        bob = adbc_connect(s, username="bob", password="bob-pw")
        assert fetch(bob, "SELECT count(*) AS n FROM people").to_pylist() == [{"n": 12}]
        with pytest.raises(dbapi.Error, match="UNAUTHORIZED.*read-only"):
            fetch(bob, "DELETE FROM people WHERE id = 1")
        cur = bob.cursor()
        with pytest.raises(dbapi.Error, match="UNAUTHORIZED.*read-only"):
            cur.adbc_ingest("more", pa.table({"a": [1]}), mode="create")
        cur.close()
        bob.close()
        alice = adbc_connect(s, username="alice", password="alice-pw")
        cur = alice.cursor()
        cur.execute("DELETE FROM people WHERE id = 1")
        assert cur.rowcount == 1
        cur.close()
        alice.close()
        with pytest.raises(dbapi.Error):
            adbc_connect(s, username="alice", password="wrong").cursor().execute("SELECT 1")
        with pytest.raises(flight.FlightUnauthenticatedError):
            flight.connect(uri(s)).get_flight_info(cmd_descriptor(pb.CommandGetCatalogs()))
    assert lance.dataset(str(root / "people")).count_rows() == 11


@pytest.mark.filterwarnings("ignore:Cannot disable autocommit")
def test_concurrent_clients_get_their_own_results(server, data):
    from concurrent.futures import ThreadPoolExecutor

    jobs = [(q, None) for _, q, _ in QUERIES[:6]] + [(q, p) for _, q, p in PARAM_QUERIES]

    def client(i: int) -> list[tuple[str, object, pa.Table]]:
        c = adbc_connect(server)
        try:
            picked = [jobs[(i * 3 + j) % len(jobs)] for j in range(4)]
            return [(sql, params, fetch(c, sql, params)) for sql, params in picked]
        finally:
            c.close()

    with ThreadPoolExecutor(4) as pool:
        results = [r for batch in pool.map(client, range(4)) for r in batch]
    assert len(results) == 16
    for sql, params, got in results:
        assert_same(got, duckdb_truth(sql, data.tables, list(params) if params else None))


def test_deprecated_cancel_query_action(server):
    from google.protobuf import any_pb2

    client = flight.connect(uri(server))
    info = client.get_flight_info(cmd_descriptor(pb.CommandStatementQuery(query="SELECT 2 AS y")))
    assert read_info(client, info).to_pylist() == [{"y": 2}]
    request = pack(pb.ActionCancelQueryRequest(info=info.serialize()))
    [res] = client.do_action(flight.Action("CancelQuery", request))
    result = pb.ActionCancelQueryResult()
    assert any_pb2.Any.FromString(res.body.to_pybytes()).Unpack(result)
    assert result.result == pb.ActionCancelQueryResult.CANCEL_RESULT_NOT_CANCELLABLE
    assert {a.type for a in client.list_actions()} >= {
        "CreatePreparedStatement",
        "CancelFlightInfo",
    }
    client.close()


def test_execute_partitions_and_read_them_later(conn, data):
    sql = "SELECT o_orderkey, o_totalprice FROM orders WHERE o_totalprice > 400000 ORDER BY 1"
    cur = conn.cursor()
    partitions, schema = cur.adbc_execute_partitions(sql)
    assert len(partitions) == 1
    assert schema.names == ["o_orderkey", "o_totalprice"]
    cur.adbc_read_partition(partitions[0])
    got = cur.fetch_arrow_table()
    cur.close()
    assert_same(got, duckdb_truth(sql, data.tables))


def test_ingest_names_stay_under_the_root(scratch):
    for name, schema in (("../escape", None), ("x", ".."), ("/abs", None)):
        with pytest.raises(dbapi.ProgrammingError, match=r"\[INVALID_ARGUMENT\].*dataset"):
            _ingest(scratch.server, name, pa.table({"a": [1]}), "create", db_schema_name=schema)
    assert sorted(p.name for p in scratch.root.parent.iterdir()) == ["root"]
    assert list(scratch.root.iterdir()) == []
