"""How scans are cut into the ranges and messages a DoGet stream sends."""

from __future__ import annotations

import warnings

import adbc_driver_flightsql.dbapi as flightsql
import lance
import numpy as np
import pyarrow as pa
import pyarrow.flight as fl
import pytest

import lance_format
from flight_server.streams import (
    LARGE_MESSAGE_BYTES,
    MESSAGE_BYTES,
    large_message_bytes,
    range_tables,
)
from lance_format.table import scanner as scanner_module


def _table(rows: int) -> pa.Table:
    rng = np.random.default_rng(7)
    return pa.table(
        {
            "id": np.arange(rows, dtype=np.int64),
            "x": rng.random(rows),
            "s": pa.array([f"row {i}" for i in range(rows)]),
        }
    )


CAP = 1 << 20


def test_range_tables_keep_every_row_and_grow_from_one_message():
    table = _table(200_000)
    pieces = [table.slice(a, 30_000) for a in range(0, table.num_rows, 30_000)]
    message = 64 << 10
    large = 4 * message
    sized = list(range_tables(table.schema, iter(pieces), 65536, CAP, message, large))
    ranges = [r.table for r in sized]
    assert pa.concat_tables(ranges).equals(table)
    sizes = [r.nbytes for r in ranges]
    # each range's size (for metrics) is shared out from its pieces' sizes by rows: close
    # to what Arrow measures range by range (the joined one within a few percent: its
    # string slices shared their buffers), and exactly the pieces' total
    for r in sized:
        assert abs(r.nbytes - r.table.nbytes) <= r.table.nbytes // 25
    assert abs(sum(r.nbytes for r in sized) - sum(p.nbytes for p in pieces)) <= len(sized)
    # the first range is about one message, so the client's first rows leave early; the
    # second is one message of about ``large`` bytes (a new pyarrow client's allocator
    # then keeps the later messages' memory: see LARGE_MESSAGE_BYTES); each next one
    # closes at twice the last one's threshold, up to the cap (the last range may be a
    # remainder)
    assert sizes[0] < 2 * message
    assert len(ranges[1].to_batches()) == 1 and large <= sizes[1] < large + message
    for i, size in enumerate(sizes[2:-1]):
        assert min(large << (i + 1), CAP) <= size < min(large << (i + 1), CAP) + 2 * message
    assert max(sizes) >= CAP
    for r in ranges[:1] + ranges[2:]:
        for batch in r.to_batches():
            assert batch.num_rows <= 65536
            assert batch.nbytes <= message + message // 8


def test_the_large_message_keeps_the_ticket_batch_size():
    """A ticket's batch size bounds every message, the joined one too, which then has
    exactly that many rows; a scan smaller than the large message is sent as it was cut
    (no copy)."""
    table = _table(200_000)
    pieces = [table.slice(a, 30_000) for a in range(0, table.num_rows, 30_000)]
    message = 16 << 10
    ranges = [r.table for r in range_tables(table.schema, iter(pieces), 1000, CAP, message)]
    assert pa.concat_tables(ranges).equals(table)
    assert ranges[1].num_rows == 1000 and len(ranges[1].to_batches()) == 1
    assert all(b.num_rows <= 1000 for r in ranges for b in r.to_batches())
    small = table.slice(0, 80_000)  # one message, then less than a large one or a batch
    parts = [small.slice(a, 10_000) for a in range(0, 80_000, 10_000)]
    out = [r.table for r in range_tables(small.schema, iter(parts), 65536)]  # server sizes
    assert max(b.nbytes for t in out for b in t.to_batches()) <= MESSAGE_BYTES * 9 // 8
    assert pa.concat_tables(out).equals(small)


def test_stream_scans_ramp_up_and_match_pylance(tmp_path, monkeypatch):
    monkeypatch.setattr(scanner_module, "READ_BYTES", 1 << 20)  # several steps a fragment
    table = _table(300_000)
    uri = str(tmp_path / "ds")
    lance.write_dataset(table, uri, data_storage_version="2.1")
    ds = lance_format.dataset(uri)
    ranges = list(ds.scanner(batch_size=1024).to_ranges())
    # the stream's first steps are smaller than the full steps after them
    assert ranges[0].num_rows < max(r.num_rows for r in ranges)
    assert ranges[0].num_rows * 2 <= ranges[1].num_rows or len(ranges) == 2
    assert pa.concat_tables(ranges).equals(lance.dataset(uri).to_table())
    batches = list(ds.to_batches(batch_size=1000))
    assert pa.Table.from_batches(batches).equals(lance.dataset(uri).to_table())
    # a scan within one step is not cut up
    monkeypatch.setattr(scanner_module, "READ_BYTES", 1 << 30)
    assert len(list(ds.scanner(batch_size=1024).to_ranges())) == 1


def test_a_hot_scan_starts_with_full_steps(tmp_path, monkeypatch):
    """Once a fragment's pages are in the decoded-page cache, its stream does not ramp: the
    first rows are slices of cached pages anyway, and each extra step cuts every column
    once more.  The rows stay pylance's."""
    monkeypatch.setattr(scanner_module, "READ_BYTES", 1 << 20)  # several steps a fragment
    table = _table(300_000)
    uri = str(tmp_path / "ds")
    lance.write_dataset(table, uri, data_storage_version="2.1")
    pages = lance_format.PageCache(256 << 20)  # pages are kept from their second read
    ds = lance_format.dataset(uri, cache=lance_format.SearchCache(64 << 20, pages=pages))
    sizes = []
    for _ in range(3):  # cold, admitting, hot
        ranges = list(ds.scanner(batch_size=1024).to_ranges())
        assert pa.concat_tables(ranges).equals(lance.dataset(uri).to_table())
        sizes.append([r.num_rows for r in ranges])
    assert sizes[0][0] < sizes[0][1]  # a cold scan ramps up
    assert pages.stats()["entries"] > 0
    full = max(sizes[0])
    assert sizes[2][0] == full  # the hot one starts at a full step
    assert len(sizes[2]) < len(sizes[0])


def test_a_scan_knows_when_its_rows_are_slices_of_cached_pages(tmp_path):
    """What lets a server make and keep a ticket's whole answer (see the server's
    ``_whole``): every page the scan reads is cached, and nothing is computed."""
    uri = str(tmp_path / "ds")
    lance.write_dataset(_table(60_000), uri, data_storage_version="2.1", max_rows_per_file=25_000)
    pages = lance_format.PageCache(256 << 20)  # pages are kept from their second read
    ds = lance_format.dataset(uri, cache=lance_format.SearchCache(64 << 20, pages=pages))
    first = ds.get_fragments()[0]

    def scan(**kw):
        return ds.scanner(batch_size=1024, **kw)

    assert not scan().slices_cached()  # cold
    for _ in range(2):  # only the first fragment, read twice: its pages are kept
        list(scan(fragments=[first]).to_ranges())
    assert scan(fragments=[first]).slices_cached()
    assert scan(fragments=[first], columns=["s"]).slices_cached()
    assert not scan().slices_cached()  # the other fragments are not cached
    for _ in range(2):
        list(scan().to_ranges())
    assert scan().slices_cached()
    # rows that are computed, filtered or reordered are not slices of pages
    assert not scan(filter="id < 10").slices_cached()
    assert not scan(with_row_id=True).slices_cached()
    assert not scan(columns={"y": "x * 2"}).slices_cached()
    assert not scan(order_by=["x"]).slices_cached()
    # deleted rows are not slices either (the same data files, so the same cached pages)
    lance.dataset(uri).delete("id < 10")
    again = lance_format.dataset(uri, cache=lance_format.SearchCache(64 << 20, pages=pages))
    assert not again.scanner().slices_cached()
    assert again.scanner(fragments=[again.get_fragments()[1]]).slices_cached()


def test_large_messages_go_only_to_clients_that_take_them():
    """The large message goes to Arrow's C++ Flight client (pyarrow) alone: gRPC's Go
    client, which the ADBC driver is, refuses messages over 4 MiB by default (16 MiB in
    ADBC), and so do gRPC's Java and Rust clients.  The user agents are the ones the real
    clients send."""
    seen: list[str] = []

    class Agents(fl.ServerMiddlewareFactory):
        def start_call(self, info, headers):
            seen.extend(headers.get("user-agent", []))

    class Server(fl.FlightServerBase):
        def list_flights(self, context, criteria):
            return iter([])

    server = Server("grpc://127.0.0.1:0", middleware={"agents": Agents()})
    try:
        with fl.connect(f"grpc://127.0.0.1:{server.port}") as client:
            list(client.list_flights())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the driver warns that autocommit stays on
            with flightsql.connect(f"grpc://127.0.0.1:{server.port}") as conn:
                with pytest.raises(flightsql.Error), conn.cursor() as cur:  # no SQL here
                    cur.execute("SELECT 1")
    finally:
        server.shutdown()
    pyarrow_agent, *go_agents = seen
    assert pyarrow_agent.startswith("grpc-c++/")
    assert go_agents and all("grpc-go/" in a for a in go_agents)
    assert large_message_bytes(pyarrow_agent) == LARGE_MESSAGE_BYTES
    assert {large_message_bytes(a) for a in go_agents} == {0}
    assert large_message_bytes(None) == large_message_bytes("") == 0
