"""Dictionary-typed columns (pandas categoricals) over Flight, read by real clients.

A Flight stream must send each dictionary before the first batch that uses it, and again
when a batch brings another one; without them the client fails with "IPC stream did not
have the expected number (1) of dictionaries".  Truth is pylance's read of the same dataset
(every endpoint of a FlightInfo read in order must equal it), DuckDB over pylance's table
for Flight SQL, and pylance's read of what a ``do_put`` wrote.  Also what the stream that
carries them must keep: an error raised mid-stream keeps its Flight status (no traceback),
and a client's cancel ends the work behind the stream.
"""

from __future__ import annotations

import json
import time

import lance
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.flight as fl
import pytest
from flight_fixtures import cmd, serve
from flight_sql_helpers import adbc_connect, duckdb_truth, running_server, uri

import lance_format
from flight_server.errors import Unavailable
from flight_server.server import LanceFlightServer
from flight_server.sql import flight_sql_pb2 as pb
from flight_server.sql.protocol import pack

N = 3000
COLORS = ["red", "green", "blue", "ochre"]


def _categorical_frame(n: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    sizes = rng.choice(["S", "M", "L", None], n)
    return pd.DataFrame(
        {
            "id": np.arange(n, dtype=np.int64),
            "color": pd.Categorical(rng.choice(COLORS, n)),
            "size": pd.Categorical(sizes, categories=["S", "M", "L"]),  # with nulls
            "word": pd.Categorical([f"w{i % 700:03d}" for i in range(n)]),
        }
    )


def _decoded(table: pa.Table) -> pa.Table:
    """Dictionary columns as their values (two readers may chunk and order dictionaries
    differently; the rows must be the same)."""
    columns = {}
    for f in table.schema:
        col = table[f.name]
        columns[f.name] = col.cast(f.type.value_type) if pa.types.is_dictionary(f.type) else col
    return pa.table(columns)


def _dictionaries(column: pa.ChunkedArray) -> set[tuple]:
    return {tuple(c.dictionary.to_pylist()) for c in column.chunks if len(c)}


def _read_endpoints(client: fl.FlightClient, info: fl.FlightInfo) -> tuple[pa.Table, list]:
    """Every endpoint read in order (kept as the client's chunks), and each reader's stats."""
    tables, stats = [], []
    for endpoint in info.endpoints:
        reader = client.do_get(endpoint.ticket)
        tables.append(reader.read_all())
        stats.append(reader.stats)
    return pa.concat_tables(tables), stats


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("dict_root")
    table = pa.Table.from_pandas(_categorical_frame(N), preserve_index=False)
    lance.write_dataset(table, str(root / "theirs"), max_rows_per_file=1000)
    lance_format.write_dataset(table, str(root / "ours"), max_rows_per_file=1000)
    # each append brings categories of its own: the dictionaries differ between batches
    changing = str(root / "changing")
    for i, cats in enumerate((["a", "b"], ["x", "y", "z"], ["b", "a", "q"])):
        part = pa.table(
            {
                "id": pa.array(np.arange(i * 500, (i + 1) * 500), pa.int64()),
                "c": pa.array(np.resize(cats, 500)).dictionary_encode(),
            }
        )
        lance_format.write_dataset(part, changing, mode="append" if i else "create")
    return root


@pytest.fixture(scope="module")
def server(root):
    with serve(str(root), "--no-warm") as s:
        yield s


@pytest.fixture
def client(server):
    with fl.connect(server.location) as c:
        yield c


@pytest.mark.parametrize("name", ["theirs", "ours"])
@pytest.mark.parametrize(
    "query",
    [
        {},
        {"split_rows": 300, "batch_size": 128},
        {"columns": ["word", "id"], "filter": "color = 'blue' OR size IS NULL"},
        {"limit": 700, "offset": 950, "batch_size": 100},
    ],
)
def test_categorical_every_endpoint_equals_pylance(client, root, name, query):
    info = client.get_flight_info(cmd(dataset=name, **query))
    got, stats = _read_endpoints(client, info)
    ds = lance.dataset(str(root / name))
    expected = ds.to_table(
        columns=query.get("columns"),
        filter=query.get("filter"),
        limit=query.get("limit"),
        offset=query.get("offset"),
    )
    assert got.schema.equals(expected.schema)  # dictionary types on the wire, as pylance's
    assert pa.types.is_dictionary(got.schema.field("word").type)
    assert _decoded(got).equals(_decoded(expected))
    assert all(s.num_dictionary_batches >= 1 for s in stats if s.num_record_batches)
    # and the categories as pylance gives them: the stored dictionaries, in their order
    # (a filtered scan of pylance's re-encodes the matching rows' values instead)
    for f in got.schema if "filter" not in query else ():
        if pa.types.is_dictionary(f.type):
            assert _dictionaries(got[f.name]) == _dictionaries(expected[f.name])


def test_rows_by_id_with_dictionaries(client, root):
    ds = lance.dataset(str(root / "theirs"))
    positions = [2999, 5, 1000, 999, 5]
    row_ids = ds.to_table(columns=["id"], with_row_id=True)["_rowid"].to_pylist()
    ids = [row_ids[p] for p in positions]
    info = client.get_flight_info(cmd(dataset="theirs", row_ids=ids, batch_size=2))
    got, _ = _read_endpoints(client, info)
    expected = ds.take(positions)
    assert _decoded(got).equals(_decoded(expected))


def test_dictionaries_changing_between_batches(client, root):
    # a filter with a limit is one stream across the three fragments
    query = cmd(dataset="changing", batch_size=200, filter="id >= 0", limit=1500)
    info = client.get_flight_info(query)
    assert len(info.endpoints) == 1
    reader = client.do_get(info.endpoints[0].ticket)
    got = reader.read_all()
    # one dictionary per fragment, sent again (replaced) when a batch brings another
    assert reader.stats.num_dictionary_batches >= 3
    assert reader.stats.num_replaced_dictionaries >= 2
    expected = lance.dataset(str(root / "changing")).to_table()
    assert _decoded(got).equals(_decoded(expected))
    assert got["c"].cast(pa.string()).to_pylist()[495:505] == ["b", "a", "b", "a", "b"] + [
        "x",
        "y",
        "z",
        "x",
        "y",
    ]


@pytest.mark.parametrize("name", ["theirs", "ours"])
def test_an_unchanged_dictionary_is_sent_once(client, name):
    """Ten batches of one fragment share each column's dictionary: the stream sends the
    three dictionaries once, not once per batch."""
    info = client.get_flight_info(cmd(dataset=name, batch_size=100))
    reader = client.do_get(info.endpoints[0].ticket)
    assert reader.read_all().num_rows == 1000
    stats = reader.stats
    assert stats.num_record_batches == 10
    assert stats.num_dictionary_batches == 3 and stats.num_replaced_dictionaries == 0


def test_put_of_a_dictionary_column(client, root, tmp_path):
    """A client streams batches whose dictionaries change; pylance reads the rows back."""
    frame = _categorical_frame(900, seed=3)
    table = pa.Table.from_pandas(frame, preserve_index=False)
    batches = [
        pa.RecordBatch.from_pandas(frame.iloc[i : i + 300], preserve_index=False)
        for i in range(0, 900, 300)
    ]
    descriptor = cmd(dataset="put/cats", mode="create")
    writer, results = client.do_put(descriptor, batches[0].schema)
    for batch in batches:
        writer.write_batch(batch)
    writer.done_writing()
    out = json.loads(results.read().to_pybytes())
    writer.close()
    assert out["rows_written"] == 900
    written = lance.dataset(str(root / "put" / "cats")).to_table()
    assert pa.types.is_dictionary(written.schema.field("color").type)
    assert _decoded(written).equals(_decoded(table))
    got, _ = _read_endpoints(client, client.get_flight_info(cmd(dataset="put/cats")))
    assert _decoded(got).equals(_decoded(table))


def test_put_of_an_ordered_categorical_keeps_its_categories(client, root):
    """An ordered categorical with an unused category, put (create, then append): pylance
    and our endpoints read the categories as the client sent them, in their order (Lance
    keeps no ordered flag: unordered, as pylance writes it)."""
    sizes = ["S", "M", "L", "XL"]
    frame = pd.DataFrame(
        {"n": np.arange(600), "size": pd.Categorical(["L", "S", None] * 200, sizes, ordered=True)}
    )
    batch = pa.RecordBatch.from_pandas(frame, preserve_index=False)
    for mode in ("create", "append"):
        writer, results = client.do_put(cmd(dataset="put/ordered", mode=mode), batch.schema)
        writer.write_batch(batch)
        writer.done_writing()
        results.read()
        writer.close()
    theirs = lance.dataset(str(root / "put" / "ordered")).to_table()
    ours, _ = _read_endpoints(client, client.get_flight_info(cmd(dataset="put/ordered")))
    for got in (theirs, ours):
        assert got.num_rows == 1200
        assert _dictionaries(got["size"]) == {tuple(sizes)}
        assert got["size"].to_pylist() == ["L", "S", None] * 400


def test_nested_dictionaries_put_and_read(client, root):
    """Dictionaries inside a struct and a list: put by a client in batches, read back over
    Flight (every endpoint) and by pylance, the same rows as sent."""
    n = 900
    words = pa.array(["a", "b", None, "a"] * (n // 4)).dictionary_encode()
    items = pa.array(["x", "y", "z"] * (2 * n // 3)).dictionary_encode()
    table = pa.table(
        {
            "s": pa.StructArray.from_arrays([words, pa.array(range(n))], names=["w", "n"]),
            "l": pa.ListArray.from_arrays(pa.array(range(0, 2 * n + 1, 2), pa.int32()), items),
        }
    )
    writer, results = client.do_put(cmd(dataset="put/nested", mode="create"), table.schema)
    writer.write_table(table, max_chunksize=200)
    writer.done_writing()
    assert json.loads(results.read().to_pybytes())["rows_written"] == n
    writer.close()
    expected = table.to_pylist()
    assert lance.dataset(str(root / "put" / "nested")).to_table().to_pylist() == expected
    info = client.get_flight_info(cmd(dataset="put/nested", split_rows=250, batch_size=100))
    got, _ = _read_endpoints(client, info)
    assert got.schema.field("l").type.value_type == pa.dictionary(pa.int32(), pa.string())
    assert got.to_pylist() == expected


def test_error_after_a_dictionary_batch_keeps_its_flight_status(root):
    """An error raised while the stream runs (here: the server shutting down after one
    batch) reaches the client as its own status, without a server traceback."""

    class Stopping(LanceFlightServer):
        def _stream(self, context, batches, *rest):
            for i, b in enumerate(super()._stream(context, batches, *rest)):
                if i == 1:
                    raise Unavailable("the server is shutting down; retry the call")
                yield b

    server = Stopping(str(root), "grpc://127.0.0.1:0", warm=False)
    try:
        with fl.connect(f"grpc://127.0.0.1:{server.port}") as c:
            info = c.get_flight_info(cmd(dataset="theirs", batch_size=100))
            reader = c.do_get(info.endpoints[0].ticket)
            first = reader.read_chunk().data
            assert first.num_rows == 100 and pa.types.is_dictionary(first.schema[1].type)
            with pytest.raises(fl.FlightUnavailableError) as err:
                reader.read_chunk()
            assert "shutting down" in str(err.value) and "Traceback" not in str(err.value)
    finally:
        server.shutdown()


# -- Flight SQL ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sql_conn(root):
    with running_server(str(root)) as server:
        conn = adbc_connect(server)
        yield conn
        conn.close()


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM theirs ORDER BY id",
        "SELECT id, color, word FROM ours WHERE size = 'M' ORDER BY id",
        "SELECT color, count(*) AS n FROM theirs GROUP BY color ORDER BY color",
        "SELECT * FROM changing ORDER BY id",
    ],
)
def test_flight_sql_over_dictionary_columns(sql_conn, root, sql):
    tables = {n: lance.dataset(str(root / n)).to_table() for n in ("theirs", "ours", "changing")}
    expected = duckdb_truth(sql, tables)
    with sql_conn.cursor() as cur:
        cur.execute(sql)
        got = cur.fetch_arrow_table()
    assert got.num_rows == expected.num_rows > 0
    assert _decoded(got).to_pylist() == _decoded(expected).to_pylist()


def test_flight_sql_enum_results(sql_conn):
    """DuckDB ENUMs come back as Arrow dictionaries: several result batches, each with its
    dictionary, read by the ADBC (Go) driver."""
    sql = (
        "SELECT i, (['lo', 'mid', 'hi'])[1 + i % 3]::ENUM('lo', 'mid', 'hi') AS level "
        "FROM range(100000) t(i) ORDER BY i"
    )
    with sql_conn.cursor() as cur:
        cur.execute(sql)
        got = cur.fetch_arrow_table()
    assert got.num_rows == 100_000 and got["level"].num_chunks >= 1
    assert pa.types.is_dictionary(got.schema.field("level").type)
    levels = got["level"].cast(pa.string()).to_pylist()
    assert levels == [["lo", "mid", "hi"][i % 3] for i in range(100_000)]


def test_adbc_ingest_of_categorical_columns(sql_conn, root):
    """ADBC's bulk ingest (a Flight SQL DoPut) of pandas categoricals: pylance reads the
    dataset back with dictionary types and the same rows."""
    table = pa.Table.from_pandas(_categorical_frame(2000, seed=7), preserve_index=False)
    with sql_conn.cursor() as cur:
        assert cur.adbc_ingest("ingested_cats", table, mode="create") == 2000
    written = lance.dataset(str(root / "ingested_cats")).to_table()
    assert pa.types.is_dictionary(written.schema.field("word").type)
    assert _decoded(written).equals(_decoded(table))


def test_flight_sql_error_mid_stream_reaches_adbc_without_a_traceback(sql_conn):
    """A query failing after result batches were sent: the error still travels as the
    service's own status (through the stream's outer generator), never a Python traceback."""
    sql = (
        "SELECT i, CASE WHEN i = 1500000 THEN error('boom at ' || i) ELSE i END AS v "
        "FROM range(2000000) t(i)"
    )
    rows = 0
    with sql_conn.cursor() as cur:
        cur.execute(sql)
        with pytest.raises(Exception) as err:
            for batch in cur.fetch_record_batch():
                rows += batch.num_rows
    assert 0 < rows < 1500000  # batches arrived before the failure
    assert "Traceback" not in str(err.value) and "request id" in str(err.value)


def test_flight_sql_client_cancel_ends_the_query(root):
    """The stream stays lazy on the Flight SQL path: a client that cancels after one batch
    of an endless-looking query ends it (the service forgets the running execution)."""
    query = pb.CommandStatementQuery(query="SELECT * FROM range(100000000) t(i)")
    with running_server(str(root), service_kw={"result_batch_rows": 500}) as s:
        with fl.connect(uri(s)) as client:
            info = client.get_flight_info(fl.FlightDescriptor.for_command(pack(query)))
            reader = client.do_get(info.endpoints[0].ticket)
            assert reader.read_chunk().data.num_rows == 500
            assert len(s.service._running) == 1
            reader.cancel()
            deadline = time.monotonic() + 10
            while s.service._running and time.monotonic() < deadline:
                time.sleep(0.05)
            assert not s.service._running
