"""The Flight server's read side through a real ``pyarrow.flight`` client.

Most tests talk to ``lance-flight serve`` running in a subprocess; truth is pylance's read of
the same dataset (``lance.dataset(...)``): every endpoint of a FlightInfo read and concatenated
in endpoint order must equal pylance's table.  A few tests run the server in-process where
they need to look inside it (laziness of do_get, the error mapping).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import traceback

import grpc
import lance
import lance.file
import numpy as np
import pyarrow as pa
import pyarrow.flight as fl
import pytest
from flight_fixtures import REPO, action, cmd, make_table, read_info, serve

import lance_format
from flight_server import requestlog
from flight_server.catalog import Catalog
from flight_server.errors import (
    AlreadyExists,
    BadRequest,
    DeadlineExceeded,
    FailedPrecondition,
    Forbidden,
    NotFound,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
    Unimplemented,
    error_kind,
    flight_errors,
    to_flight_error,
)
from flight_server.logs import LogfmtFormatter
from flight_server.server import LanceFlightServer
from flight_server.streams import LARGE_MESSAGE_BYTES, MESSAGE_BYTES
from lance_format.cache import SearchCache
from lance_format.errors import (
    CommitConflictError,
    CorruptFileError,
    RetryableCommitConflictError,
    SchemaError,
    UnsupportedError,
)


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("root")
    items = str(root / "tpch" / "items")
    lance.write_dataset(make_table(10_000), items, max_rows_per_file=3000)  # v1: 4 fragments
    lance.dataset(items).tags.create("first", 1)
    lance.dataset(items).delete("id % 10 = 3")  # v2
    paged = str(root / "big" / "paged")
    lance_format.write_dataset(
        make_table(120_000, seed=1), paged, max_rows_per_file=60_000, max_page_bytes=32 * 1024
    )
    lance.dataset(paged).delete("id % 1000 = 7 OR (id >= 50000 AND id < 50500)")
    broken = root / "broken" / "ds" / "_versions"  # a manifest that does not parse
    broken.mkdir(parents=True)
    (broken / "1.manifest").write_bytes(b"\x00" * 64)
    return str(root)


@pytest.fixture(scope="module")
def server(root):
    with serve(root, "--cache-bytes", "64M") as s:
        yield s
    assert s.process.returncode == 0  # SIGTERM: graceful exit


@pytest.fixture
def client(server):
    c = fl.connect(server.location)
    yield c
    c.close()


def _theirs(root: str, name: str, **kw) -> lance.LanceDataset:
    return lance.dataset(os.path.join(root, name), **kw)


# -- discovery ---------------------------------------------------------------------------


def test_list_flights_every_dataset_and_criteria(client, root):
    infos = {tuple(p.decode() for p in i.descriptor.path): i for i in client.list_flights()}
    assert {("tpch/items",), ("big/paged",)} <= set(infos)
    for (name,), info in infos.items():
        assert info.total_records == _theirs(root, name).count_rows()
    only = [i.descriptor.path[0].decode() for i in client.list_flights(b"tpch/")]
    assert only == ["tpch/items"]
    # a broken dataset is left out of the listing; asking for it is an internal error
    assert ("broken/ds",) not in infos
    with pytest.raises(fl.FlightInternalError) as e:
        client.get_flight_info(fl.FlightDescriptor.for_path("broken/ds"))
    assert error_kind(e.value) == "INTERNAL" and root not in str(e.value)


def test_whole_dataset_path_descriptor(client, root):
    info = client.get_flight_info(fl.FlightDescriptor.for_path("tpch/items"))
    theirs = _theirs(root, "tpch/items")
    assert info.total_records == theirs.count_rows()
    assert len(info.endpoints) == len(theirs.get_fragments())
    assert not info.ordered
    assert all(len(e.locations) == 0 for e in info.endpoints)  # one server: "this connection"
    assert info.schema.equals(theirs.schema)
    assert read_info(client, info).equals(theirs.to_table().combine_chunks())
    schema = client.get_schema(fl.FlightDescriptor.for_path("tpch/items")).schema
    assert schema.equals(theirs.schema)


def test_total_bytes_are_the_projected_pages_on_disk(client, root):
    theirs = _theirs(root, "big/paged")
    names = theirs.schema.names

    def page_bytes(columns: list[str]) -> int:
        total = 0
        for frag in theirs.get_fragments():
            for df in frag.data_files():
                path = os.path.join(root, "big/paged/data", df.path)
                meta = lance.file.LanceFileReader(path).metadata()
                for c in columns:  # flat schema: column i holds field i
                    col = meta.columns[names.index(c)]
                    total += sum(b.size for p in col.pages for b in p.buffers)
        return total

    whole = client.get_flight_info(fl.FlightDescriptor.for_path("big/paged"))
    assert whole.total_bytes == page_bytes(names)
    part = client.get_flight_info(cmd(dataset="big/paged", columns=["x"]))
    assert part.total_bytes == page_bytes(["x"]) < whole.total_bytes
    assert client.get_flight_info(cmd(dataset="big/paged", filter="id > 5")).total_bytes == -1


# -- queries -----------------------------------------------------------------------------


def test_projection_filter_with_row_id(client, root):
    theirs = _theirs(root, "tpch/items")
    flt = "x > 0.5 AND s IS NOT NULL"
    d = cmd(dataset="tpch/items", columns=["s", "id"], filter=flt, with_row_id=True)
    info = client.get_flight_info(d)
    assert info.total_records == -1  # unknown before the filter runs
    expected = theirs.to_table(columns=["s", "id"], filter=flt, with_row_id=True)
    assert info.schema.equals(expected.schema)
    assert client.get_schema(d).schema.equals(expected.schema)
    assert read_info(client, info).equals(expected.combine_chunks())


def test_row_ids_in_the_order_asked(client, root):
    theirs = _theirs(root, "tpch/items")
    all_ids = theirs.to_table(columns=["id"], with_row_id=True).column("_rowid").to_numpy()
    ids = np.random.default_rng(3).choice(all_ids, 500, replace=False).tolist()
    ids += ids[:5]  # repeats are returned again
    d = cmd(dataset="tpch/items", row_ids=ids, columns=["id", "x"], with_row_id=True, batch_size=64)
    info = client.get_flight_info(d)
    assert info.total_records == len(ids) and info.ordered
    reader = client.do_get(info.endpoints[0].ticket)
    batches = [chunk.data for chunk in reader]
    assert len(batches) > 1 and all(b.num_rows <= 64 for b in batches)
    got = pa.Table.from_batches(batches)
    expected = theirs._take_rows(ids, columns=["id", "x"])
    assert got.drop_columns(["_rowid"]).equals(expected)
    assert got.column("_rowid").to_pylist() == ids
    assert got.schema.equals(info.schema)
    empty = client.get_flight_info(cmd(dataset="tpch/items", row_ids=[]))
    assert empty.total_records == 0 and read_info(client, empty).num_rows == 0
    assert 3 not in all_ids  # row 3 of fragment 0 (id 3) is deleted
    info = client.get_flight_info(cmd(dataset="tpch/items", row_ids=[3]))
    with pytest.raises(pa.ArrowInvalid) as e:
        read_info(client, info)
    assert error_kind(e.value) == "INVALID_ARGUMENT"


@pytest.mark.parametrize(
    "limit,offset,flt",
    [(3000, 2000, None), (50, 0, None), (None, 8000, None), (0, 10, None), (100, 99_999, None)]
    + [(300, 40, "x < 0.3")],
    ids=["middle", "head", "tail", "zero", "past-end", "filtered"],
)
def test_limit_offset_in_row_order(client, root, limit, offset, flt):
    theirs = _theirs(root, "tpch/items")
    kw = {k: v for k, v in (("limit", limit), ("offset", offset), ("filter", flt)) if v is not None}
    info = client.get_flight_info(
        cmd(dataset="tpch/items", split_rows=1000, with_row_id=True, **kw)
    )
    assert info.ordered
    expected = theirs.to_table(limit=limit, offset=offset, filter=flt, with_row_id=True)
    got = read_info(client, info, parallel=True)  # endpoint order, whatever the read order
    assert got.equals(expected.combine_chunks())
    if flt is None:
        assert info.total_records == expected.num_rows
        if limit == 3000:
            assert len(info.endpoints) > 1  # no filter: one endpoint per fragment it spans
    else:
        assert len(info.endpoints) == 1 and info.total_records == -1


def test_versions_tags_and_pinned_tickets(client, root):
    theirs = _theirs(root, "tpch/items", version=1)
    for version in (1, "first"):
        info = client.get_flight_info(cmd(dataset="tpch/items", version=version))
        assert read_info(client, info).equals(theirs.to_table().combine_chunks())
    # a commit after get_flight_info does not change what its tickets return
    uri = os.path.join(root, "big", "pinned")
    lance.write_dataset(make_table(500), uri)
    info = client.get_flight_info(fl.FlightDescriptor.for_path("big/pinned"))
    lance.write_dataset(make_table(100, start=500), uri, mode="append")
    lance.dataset(uri).delete("id < 50")
    assert read_info(client, info).equals(lance.dataset(uri, version=1).to_table())
    latest = client.get_flight_info(fl.FlightDescriptor.for_path("big/pinned"))
    assert read_info(client, latest).equals(lance.dataset(uri).to_table().combine_chunks())
    # once cleanup removed the version, its tickets are NOT_FOUND (not a read of the files)
    lance.dataset(uri).cleanup_old_versions(older_than=dt.timedelta(0))
    with pytest.raises(pa.ArrowKeyError) as e:
        client.do_get(info.endpoints[0].ticket).read_all()
    assert error_kind(e.value) == "NOT_FOUND"


def _page_starts(root: str, name: str, fragment) -> set[int]:
    """Rows where pages start in a fragment's data file, from the file's metadata."""
    path = os.path.join(root, name, "data", fragment.data_files()[0].path)
    meta = lance_format.LanceFileReader(path).metadata
    return {p.first_row for c in meta.columns for p in c.pages}


def test_split_endpoints_read_in_parallel(client, root):
    theirs = _theirs(root, "big/paged")
    for flt in (None, "id % 3 = 0"):
        kw = {"filter": flt} if flt else {}
        info = client.get_flight_info(cmd(dataset="big/paged", split_rows=15_000, **kw))
        assert len(info.endpoints) > 2 * len(theirs.get_fragments())
        tickets = [json.loads(e.ticket.ticket) for e in info.endpoints]
        # ranges tile each fragment exactly, cut where pages start
        for frag in theirs.get_fragments():
            ranges = [(t["start"], t["stop"]) for t in tickets if t["fragment"] == frag.fragment_id]
            assert ranges[0][0] == 0 and ranges[-1][1] == frag.physical_rows
            assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:], strict=False))
            assert {a for a, _ in ranges} <= _page_starts(root, "big/paged", frag)
        got = read_info(client, info, parallel=True)
        assert got.equals(theirs.to_table(filter=flt).combine_chunks())


def test_batch_size_bounds_every_batch(client, root):
    info = client.get_flight_info(cmd(dataset="big/paged", batch_size=5000, columns=["id"]))
    sizes = [c.data.num_rows for c in client.do_get(info.endpoints[0].ticket)]
    first = _theirs(root, "big/paged").get_fragments()[0]
    assert max(sizes) <= 5000 and sum(sizes) == first.count_rows()


@pytest.fixture(scope="module")
def wide_root(tmp_path_factory) -> str:
    """One fragment of 64 batches of 32Ki rows x 4 doubles (1 MiB each): far more than
    gRPC's flow-control window and the server's read-ahead hold."""
    root = tmp_path_factory.mktemp("wide")
    n = 64 * 32768
    rng = np.random.default_rng(0)
    wide = pa.table({k: rng.random(n) for k in "abcd"})
    lance.write_dataset(wide, str(root / "wide"), max_rows_per_file=n)
    # the same with a dictionary column (a pandas categorical): its stream carries dictionaries
    words = pa.array([f"word-{i % 5000}" for i in range(n)]).dictionary_encode()
    lance.write_dataset(pa.table({"a": rng.random(n), "w": words}), str(root / "words"))
    return str(root)


@pytest.mark.parametrize("dataset", ["wide", "words"])
def test_stream_is_lazy_and_stops_when_cancelled(wide_root, dataset):
    """The client reads one batch: the server decodes a few more (gRPC's window and one
    read-ahead step), not the whole endpoint; after a cancel it decodes nothing more."""
    pulled: list[int] = []

    class Counting(LanceFlightServer):
        def _stream(self, context, batches, *rest):
            for b in super()._stream(context, batches, *rest):
                pulled.append(b.num_rows)
                yield b

    server = Counting(wide_root, "grpc://127.0.0.1:0", warm=False)
    reader = None
    try:
        with fl.connect(f"grpc://127.0.0.1:{server.port}") as c:
            info = c.get_flight_info(cmd(dataset=dataset, batch_size=32768))
            reader = c.do_get(info.endpoints[0].ticket)
            assert reader.read_chunk().data.schema.equals(info.schema)
            time.sleep(1.0)  # give a runaway producer the time to run away
            assert 1 <= len(pulled) <= 32  # of 64 batches (1 MiB each)
            reader.cancel()
            time.sleep(0.5)
            seen = len(pulled)
            time.sleep(0.5)
            assert len(pulled) == seen < 64
    finally:
        if reader is not None:
            reader.cancel()  # a failed assertion must not leave the call open: shutdown waits
        server.shutdown()


def test_warm_stays_within_its_budget(root):
    catalog = Catalog(root, SearchCache(64 << 20))
    files = sum(
        len(f.data_files())
        for name in ("tpch/items", "big/paged", "big/pinned")
        if os.path.isdir(os.path.join(root, name))
        for f in lance.dataset(os.path.join(root, name)).get_fragments()
    )
    assert catalog.warm(budget_bytes=1) == {"datasets": 0, "files": 1}
    warmed = Catalog(root, SearchCache(64 << 20)).warm()
    assert warmed["files"] == files and warmed["datasets"] == len(catalog.names()) - 1  # broken


class _Counting(fl.ServerMiddlewareFactory):
    def __init__(self) -> None:
        self.methods: list[str] = []

    def start_call(self, info, headers):
        self.methods.append(str(info.method))
        return None


def test_extra_middleware_joins_the_servers_own(root, caplog):
    extra = _Counting()
    server = LanceFlightServer(root, "grpc://127.0.0.1:0", warm=False, middleware={"n": extra})
    try:
        with caplog.at_level(logging.INFO, logger="flight_server.requests"):
            with fl.connect(f"grpc://127.0.0.1:{server.port}") as c:
                c.get_flight_info(fl.FlightDescriptor.for_path("tpch/items"))
    finally:
        server.shutdown()
    assert len(extra.methods) == 1 and "GET_FLIGHT_INFO" in extra.methods[0]
    lines = [text(r) for r in caplog.records if r.name == "flight_server.requests"]
    assert any("method=GetFlightInfo" in line and "dataset=tpch/items" in line for line in lines)


# -- errors ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda: cmd(dataset="tpch/items", bogus=1),
        lambda: cmd(dataset="tpch/items", limit=-1),
        lambda: cmd(dataset="tpch/items", offset="3"),
        lambda: cmd(dataset="tpch/items", batch_size=0),
        lambda: cmd(dataset="tpch/items", split_rows=True),
        lambda: cmd(dataset="tpch/items", version=[1]),
        lambda: cmd(dataset="tpch/items", version=0),
        lambda: cmd(dataset="tpch/items", with_row_id="yes"),
        lambda: cmd(dataset="tpch/items", row_ids=[1, -2]),
        lambda: cmd(dataset="tpch/items", row_ids=[1 << 64]),
        lambda: cmd(dataset="tpch/items", limit=1 << 63),
        lambda: cmd(dataset="tpch/items", row_ids=[1], filter="id > 1"),
        lambda: cmd(dataset="tpch/items", columns="id"),
        lambda: cmd(dataset="tpch/items", columns=["nope"]),
        lambda: cmd(dataset="tpch/items", filter="nope > 1"),
        lambda: cmd(dataset="tpch/items", filter="id >"),
        lambda: cmd(dataset="tpch/items", filter=""),
        lambda: cmd(columns=["id"]),
        lambda: fl.FlightDescriptor.for_command(b"not json"),
        lambda: fl.FlightDescriptor.for_command(b"[1, 2]"),
        lambda: cmd(dataset="../outside"),
        lambda: cmd(dataset="/etc"),
        lambda: cmd(dataset="tpch//items"),
        lambda: fl.FlightDescriptor.for_path("tpch/../../x"),
        lambda: fl.FlightDescriptor.for_path("tpch", "items"),
    ],
    ids=[
        "unknown-key",
        "negative",
        "offset-type",
        "zero-batch",
        "bool-split",
        "version-type",
        "version-zero",
        "row-id-flag",
        "negative-row-id",
        "huge-row-id",
        "huge-limit",
        "row-ids-and-filter",
        "columns-type",
        "column",
        "filter-col",
        "filter-sql",
        "filter-empty",
        "no-dataset",
        "json",
        "not-object",
        "dots",
        "abs",
        "empty-part",
        "path-dots",
        "path-parts",
    ],
)
def test_bad_requests_are_invalid_argument(client, make):
    with pytest.raises(pa.ArrowInvalid) as e:
        client.get_flight_info(make())
    assert error_kind(e.value) == "INVALID_ARGUMENT"
    assert str(e.value).startswith("[INVALID_ARGUMENT] ")
    assert "Traceback" not in str(e.value)
    with pytest.raises(pa.ArrowInvalid) as e:
        client.get_schema(make())
    assert error_kind(e.value) == "INVALID_ARGUMENT"
    assert "Traceback" not in str(e.value) and "flight_server" not in str(e.value)
    assert action(client, "health")["status"] == "ok"  # the server still answers


def test_messages_name_the_wrong_key(client):
    for body, key in (
        ({"limit": -1}, "'limit'"),
        ({"columns": ["nope"]}, "'columns'"),
        ({"filter": "nope > 1"}, "'filter'"),
        ({"bogus": 1}, "bogus"),
    ):
        with pytest.raises(pa.ArrowInvalid) as e:
            client.get_flight_info(cmd(dataset="tpch/items", **body))
        assert key in str(e.value)


def test_not_found_and_bad_tickets(client, root, tmp_path):
    for d in (
        cmd(dataset="no/such"),
        cmd(dataset="tpch/items", version=99),
        cmd(dataset="tpch/items", version="no-such-tag"),
    ):
        with pytest.raises(pa.ArrowKeyError) as e:
            client.get_flight_info(d)
        assert error_kind(e.value) == "NOT_FOUND"
        assert root not in str(e.value)  # the server's paths stay private
        with pytest.raises(pa.ArrowKeyError) as e:
            client.get_schema(d)
        assert error_kind(e.value) == "NOT_FOUND"
    with pytest.raises(pa.ArrowNotImplementedError) as e:  # as Arrow's servers answer
        action(client, "no_such_action")
    assert error_kind(e.value) == "UNIMPLEMENTED"
    good = json.loads(
        client.get_flight_info(fl.FlightDescriptor.for_path("tpch/items"))
        .endpoints[0]
        .ticket.ticket
    )
    forged = [
        b"garbage",
        b"\xff\xfe",
        b"[]",
        b'{"v":1}',
        b'{"v":2,"dataset":"tpch/items","version":1}',
        b'{"v":1,"dataset":"tpch/items","version":1,"start":5}',
        b'{"v":1,"dataset":"tpch/items","version":"1"}',
        b'{"v":1,"dataset":"tpch/items","version":1,"extra":1}',
        json.dumps({**good, "start": 10, "stop": 5}).encode(),
        json.dumps({**good, "stop": 10**9}).encode(),
        json.dumps({**good, "dataset": "../x"}).encode(),
        json.dumps({**good, "columns": ["nope"]}).encode(),
        json.dumps({**good, "columns": "id"}).encode(),
        json.dumps({**good, "row_ids": [1 << 64]}).encode(),
        json.dumps({k: v for k, v in good.items() if k != "fragment"}).encode(),
    ]
    for raw in forged:
        with pytest.raises(pa.ArrowInvalid) as e:
            client.do_get(fl.Ticket(raw)).read_all()
        assert error_kind(e.value) == "INVALID_ARGUMENT", raw
    for raw in (json.dumps({**good, "fragment": 77}), json.dumps({**good, "version": 50})):
        with pytest.raises(pa.ArrowKeyError) as e:
            client.do_get(fl.Ticket(raw.encode())).read_all()
        assert error_kind(e.value) == "NOT_FOUND"
    # a symlink inside the root that points outside it is not followed
    outside = tmp_path / "outside"
    lance.write_dataset(make_table(10), str(outside))
    os.symlink(outside, os.path.join(root, "escape"))
    try:
        with pytest.raises(pa.ArrowInvalid) as e:
            client.get_flight_info(fl.FlightDescriptor.for_path("escape"))
        assert error_kind(e.value) == "INVALID_ARGUMENT"
        assert "escape" not in action(client, "list_datasets")["datasets"]
    finally:
        os.unlink(os.path.join(root, "escape"))
    assert action(client, "health")["status"] == "ok"


def _grpc_code(port: int, action_type: str) -> str:
    """DoAction over plain gRPC (no pyarrow): the status code name the server sent."""
    return _grpc_status(port, action_type)[0]


def _grpc_status(port: int, action_type: str) -> tuple[str, str]:
    """DoAction over plain gRPC (no pyarrow): the status code name and message sent."""
    body = action_type.encode()
    request = bytes([0x0A, len(body)]) + body  # Action{type}
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.unary_stream(
            "/arrow.flight.protocol.FlightService/DoAction",
            request_serializer=lambda b: b,
            response_deserializer=lambda b: b,
        )
        try:
            list(call(request, timeout=10))
        except grpc.RpcError as exc:
            return exc.code().name, exc.details()
    return "OK", ""


_RAISE = {
    "ValueError": lambda: ValueError("m"),
    "ArrowInvalid": lambda: pa.ArrowInvalid("m"),
    "KeyError": lambda: KeyError("m"),
    "NotImplementedError": lambda: NotImplementedError("m"),
    "RuntimeError": lambda: RuntimeError("m"),
    "ArrowCancelled": lambda: pa.ArrowCancelled("m"),
    "FlightServerError": lambda: fl.FlightServerError("m", b"x"),
    "FlightInternalError": lambda: fl.FlightInternalError("m", b"x"),
    "FlightUnauthenticatedError": lambda: fl.FlightUnauthenticatedError("m"),
    "FlightUnauthorizedError": lambda: fl.FlightUnauthorizedError("m"),
    "FlightUnavailableError": lambda: fl.FlightUnavailableError("m"),
    "FlightCancelledError": lambda: fl.FlightCancelledError("m"),
}
# raised by a handler -> (gRPC code, what the pyarrow client raises, traceback in the message)
_FACTS = {
    "ValueError": ("INVALID_ARGUMENT", pa.ArrowInvalid, True),
    "ArrowInvalid": ("INVALID_ARGUMENT", pa.ArrowInvalid, True),
    "KeyError": ("NOT_FOUND", pa.ArrowKeyError, True),
    "NotImplementedError": ("UNIMPLEMENTED", pa.ArrowNotImplementedError, True),
    "RuntimeError": ("UNKNOWN", fl.FlightServerError, True),
    "ArrowCancelled": ("UNKNOWN", fl.FlightServerError, True),
    "FlightServerError": ("UNKNOWN", fl.FlightServerError, False),
    "FlightInternalError": ("INTERNAL", fl.FlightInternalError, False),
    "FlightUnauthenticatedError": ("UNAUTHENTICATED", fl.FlightUnauthenticatedError, False),
    "FlightUnauthorizedError": ("PERMISSION_DENIED", fl.FlightUnauthorizedError, False),
    "FlightUnavailableError": ("UNAVAILABLE", fl.FlightUnavailableError, False),
    "FlightCancelledError": ("CANCELLED", fl.FlightCancelledError, False),
}


class _Raising(fl.FlightServerBase):
    def do_action(self, context, action):
        raise _RAISE[action.type]()

    def get_schema(self, context, descriptor):
        raise _RAISE[descriptor.path[0].decode()]()


def test_pyarrow_error_facts():
    """What pyarrow does with what a handler raises: why errors.py maps as it does."""
    server = _Raising("grpc://127.0.0.1:0")
    try:
        with fl.connect(f"grpc://127.0.0.1:{server.port}") as c:
            for name, (code, cls, traceback) in _FACTS.items():
                assert _grpc_code(server.port, name) == code, name
                with pytest.raises(cls) as e:
                    list(c.do_action(fl.Action(name, b"")))
                assert type(e.value) is cls, name
                assert ("Traceback" in str(e.value)) == traceback, name
                if name in ("FlightServerError", "FlightInternalError"):
                    assert e.value.extra_info == b"x"
            # get_schema (pyarrow 26) drops the Flight classes: the client gets a plain
            # ArrowException with the traceback, the other classes map as everywhere
            for name in ("FlightServerError", "FlightUnauthenticatedError"):
                with pytest.raises(pa.ArrowException) as e:
                    c.get_schema(fl.FlightDescriptor.for_path(name))
                assert not isinstance(e.value, fl.FlightError)
                assert "Traceback" in str(e.value)
            for name in ("ArrowInvalid", "KeyError"):
                with pytest.raises(_FACTS[name][1]):
                    c.get_schema(fl.FlightDescriptor.for_path(name))
    finally:
        server.shutdown()


# project error -> (kind, pyarrow client class, gRPC code)
_MAPPED = {
    "bad": (lambda: BadRequest("m"), "INVALID_ARGUMENT", pa.ArrowInvalid, "INVALID_ARGUMENT"),
    "schema": (lambda: SchemaError("m"), "INVALID_ARGUMENT", pa.ArrowInvalid, "INVALID_ARGUMENT"),
    "missing": (lambda: NotFound("m"), "NOT_FOUND", pa.ArrowKeyError, "NOT_FOUND"),
    "unsupported": (
        lambda: UnsupportedError("m"),
        "UNIMPLEMENTED",
        pa.ArrowNotImplementedError,
        "UNIMPLEMENTED",
    ),
    "unimplemented": (
        lambda: Unimplemented("m"),
        "UNIMPLEMENTED",
        pa.ArrowNotImplementedError,
        "UNIMPLEMENTED",
    ),
    "corrupt": (lambda: CorruptFileError("m"), "INTERNAL", fl.FlightInternalError, "INTERNAL"),
    "bug": (lambda: IndexError("m"), "INTERNAL", fl.FlightInternalError, "INTERNAL"),
    "unauthenticated": (
        lambda: Unauthenticated("m"),
        "UNAUTHENTICATED",
        fl.FlightUnauthenticatedError,
        "UNAUTHENTICATED",
    ),
    "forbidden": (
        lambda: Forbidden("m"),
        "PERMISSION_DENIED",
        fl.FlightUnauthorizedError,
        "PERMISSION_DENIED",
    ),
    "stopping": (lambda: Unavailable("m"), "UNAVAILABLE", fl.FlightUnavailableError, "UNAVAILABLE"),
    "deadline": (
        lambda: DeadlineExceeded("m"),
        "DEADLINE_EXCEEDED",
        fl.FlightTimedOutError,
        "DEADLINE_EXCEEDED",
    ),
    "busy": (
        lambda: ResourceExhausted("m", retryable=True),
        "RESOURCE_EXHAUSTED",
        fl.FlightUnavailableError,
        "UNAVAILABLE",
    ),
    # no status a pyarrow server can send carries these: UNKNOWN, the kind in extra_info
    "exists": (lambda: AlreadyExists("m"), "ALREADY_EXISTS", fl.FlightServerError, "UNKNOWN"),
    "conflict": (lambda: CommitConflictError("m"), "ABORTED", fl.FlightServerError, "UNKNOWN"),
    "retry": (
        lambda: RetryableCommitConflictError("m"),
        "ABORTED",
        fl.FlightServerError,
        "UNKNOWN",
    ),
    "precondition": (
        lambda: FailedPrecondition("m"),
        "FAILED_PRECONDITION",
        fl.FlightServerError,
        "UNKNOWN",
    ),
    "memory": (
        lambda: ResourceExhausted("m"),
        "RESOURCE_EXHAUSTED",
        fl.FlightServerError,
        "UNKNOWN",
    ),
}


class _Mapped(fl.FlightServerBase):
    @flight_errors
    def do_action(self, context, action):
        raise _MAPPED[action.type][0]()

    @flight_errors
    def get_schema(self, context, descriptor):
        raise _MAPPED[descriptor.path[0].decode()][0]()


def test_every_error_kind_reaches_the_client_without_a_traceback():
    server = _Mapped("grpc://127.0.0.1:0")
    try:
        with fl.connect(f"grpc://127.0.0.1:{server.port}") as c:
            for name, (_, kind, cls, code) in _MAPPED.items():
                with pytest.raises(cls) as e:
                    list(c.do_action(fl.Action(name, b"")))
                assert type(e.value) is cls, name
                assert error_kind(e.value) == kind, name
                assert str(e.value).startswith(f"[{kind}] "), name
                assert "Traceback" not in str(e.value) and ".py" not in str(e.value), name
                got, message = _grpc_status(server.port, name)
                assert got == code, name  # what any gRPC client (ADBC, grpcio) sees
                assert message.startswith(f"[{kind}] ") and "Traceback" not in message, name
                # get_schema: pyarrow catches no Flight class there, so those kinds are
                # UNKNOWN; the codes carried by the Python class are the same; no traceback
                with pytest.raises(pa.ArrowException) as e:
                    c.get_schema(fl.FlightDescriptor.for_path(name))
                assert error_kind(e.value) == kind, name
                assert "Traceback" not in str(e.value), name
                if issubclass(cls, (pa.ArrowInvalid, pa.ArrowKeyError, NotImplementedError)):
                    assert type(e.value) is cls, name
            for name, retryable in (("conflict", False), ("retry", True), ("stopping", True)):
                with pytest.raises(fl.FlightError) as e:
                    list(c.do_action(fl.Action(name, b"")))
                assert json.loads(e.value.extra_info)["retryable"] is retryable
    finally:
        server.shutdown()


def test_other_exceptions_keep_their_tracebacks():
    """The format hook changes the errors of this project only: anything else pyarrow or a
    log formats keeps its traceback."""
    try:
        raise ValueError("plain")
    except ValueError as exc:
        lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
    assert lines[0].startswith("Traceback") and "plain" in lines[-1]
    wire = to_flight_error(BadRequest("m"))
    assert traceback.format_exception(type(wire), wire, None) == ["INVALID_ARGUMENT"]


def test_deep_json_and_do_exchange_are_clean_errors(client):
    for body in (
        b"[" * 100_000,
        b'{"a":' * 100_000,
        b'{"dataset": ' + b"[" * 65 + b"]" * 65 + b"}",
    ):
        with pytest.raises(pa.ArrowInvalid, match=r"^\[INVALID_ARGUMENT\] .*deeper than 64"):
            client.get_flight_info(fl.FlightDescriptor.for_command(body))
        with pytest.raises(pa.ArrowInvalid, match="deeper than 64"):
            client.do_get(fl.Ticket(body)).read_all()
    # brackets inside strings are not nesting
    with pytest.raises(pa.ArrowKeyError, match="NOT_FOUND"):
        client.get_flight_info(cmd(dataset="no/such", filter="s = '" + "[" * 100 + "'"))
    writer, reader = client.do_exchange(fl.FlightDescriptor.for_path("tpch/items"))
    with pytest.raises(pa.ArrowNotImplementedError, match=r"^\[UNIMPLEMENTED\] DoExchange") as e:
        writer.begin(pa.schema([("a", pa.int64())]))
        reader.read_chunk()
    assert "Traceback" not in str(e.value)
    with contextlib.suppress(pa.ArrowException):
        writer.close()  # reports the call's status once more
    assert action(client, "health")["status"] == "ok"


# -- processes ---------------------------------------------------------------------------


def test_workers_spread_endpoints(root):
    with serve(root, "--workers", "2", "--no-warm") as s:
        workers = s.lines[-1].split()[1:]
        assert len(workers) == 2 and s.location == workers[0]
        c = fl.connect(s.location)
        info = c.get_flight_info(fl.FlightDescriptor.for_path("tpch/items"))
        firsts = [e.locations[0].uri.decode() for e in info.endpoints]
        assert set(firsts) == set(workers) and firsts[0] != firsts[1]  # round robin
        theirs = lance.dataset(os.path.join(root, "tpch/items")).to_table().combine_chunks()
        # every ticket can be redeemed at its first location and at the other one
        pids = set()
        for shift in (0, 1):
            tables = []
            for e in info.endpoints:
                loc = e.locations[shift].uri.decode()
                with fl.connect(loc) as other:
                    tables.append(other.do_get(e.ticket).read_all())
                    pids.add(action(other, "health")["pid"])
            assert pa.concat_tables(tables).combine_chunks().equals(theirs)
        assert len(pids) == 2 and s.process.pid not in pids
        c.close()
        # a worker that dies is restarted on its port (its location is in every FlightInfo)
        with fl.connect(workers[1]) as w:
            victim = action(w, "health")["pid"]
        os.kill(victim, signal.SIGKILL)

        def replaced() -> bool:
            try:
                with fl.connect(workers[1]) as w:
                    return action(w, "health")["pid"] not in (victim, None)
            except fl.FlightError:
                return False

        deadline = time.monotonic() + 60
        while not replaced() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert replaced()
        with fl.connect(workers[1]) as w:
            assert w.do_get(info.endpoints[1].ticket).read_all().num_rows > 0
    assert s.process.returncode == 0


def test_serve_refuses_a_missing_root_and_a_taken_port(root, tmp_path):
    def serve_args(*args: str) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "flight_server.cli", "serve", *args, "--no-warm"]
        env = {**os.environ, "PYTHONPATH": REPO}
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=REPO, env=env)

    missing = serve_args(str(tmp_path / "nope"), "--port", "0")
    assert missing.returncode == 2 and "not a directory" in missing.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        for extra in ([], ["--workers", "2"]):
            busy = serve_args(root, "--port", port, *extra)
            assert busy.returncode == 2 and "error:" in busy.stderr
            assert "listening" not in busy.stdout


def test_sigint_stops_gracefully(root):
    with serve(root, "--no-warm") as s:
        assert s.stop(signal.SIGINT) == 0


def test_sigterm_with_a_stalled_reader_still_exits_cleanly(wide_root):
    """A client that stops reading cannot hold the server: after the grace period its stream
    ends with UNAVAILABLE and the process exits 0."""
    with serve(wide_root, "--no-warm", "--shutdown-grace", "1") as s:
        c = fl.connect(s.location)
        # one endpoint of all 64 MiB: more than gRPC's windows and the server's queues hold,
        # so the stream cannot finish while the client stalls
        info = c.get_flight_info(cmd(dataset="wide", batch_size=32768, split_rows=1 << 22))
        assert len(info.endpoints) == 1
        reader = c.do_get(info.endpoints[0].ticket)
        reader.read_chunk()
        assert s.stop(signal.SIGTERM) == 0
        with pytest.raises(fl.FlightUnavailableError):
            for _ in reader:
                pass
        c.close()
        assert "exiting" in s.log() or "stopped" in s.log()


def text(record) -> str:
    """The line the server's text formatter writes for ``record``."""
    return LogfmtFormatter().format(record)


def test_do_get_ranges_through_a_small_page_cache(tmp_path):
    """Scans travel as whole ranges of several messages, each at most ``batch_size`` rows;
    repeated reads equal pylance's and the decoded-page cache never holds more than its
    budget (here far less than the data), while still serving part of each read."""
    uri = str(tmp_path / "t")
    lance.write_dataset(make_table(60_000), uri, max_rows_per_file=20_000)
    expected = lance.dataset(uri).to_table()
    capacity = 256 << 10
    server = LanceFlightServer(
        str(tmp_path), "grpc://127.0.0.1:0", warm=False, page_cache_bytes=capacity
    )
    try:
        with fl.connect(f"grpc://127.0.0.1:{server.port}") as c:
            for _ in range(4):
                info = c.get_flight_info(cmd(dataset="t", batch_size=4096))
                batches = [chunk.data for e in info.endpoints for chunk in c.do_get(e.ticket)]
                assert max(b.num_rows for b in batches) <= 4096
                got = pa.Table.from_batches(batches)
                assert got.schema.names == expected.schema.names
                assert got.to_pydict() == expected.to_pydict()
                pages = action(c, "cache_stats")["pages"]
                assert pages["capacity_bytes"] == capacity and pages["bytes"] <= capacity
            assert pages["hits"] > 0 and pages["entries"] > 0
    finally:
        server.shutdown()


def test_a_hot_ticket_is_answered_whole_and_never_stale(tmp_path):
    """Once every page a plain ticket reads is cached, the server makes the ticket's whole
    answer (slices of those pages) and keeps it in the page cache: later reads of the
    ticket are sent by Flight from it, in messages of at most ``batch_size`` rows.  Every
    read equals pylance's: after an append (a new version, new tickets), after the
    dataset is dropped and made again (version 1 again, other data), and for tickets
    that are not plain scans."""
    root = str(tmp_path)
    uri = os.path.join(root, "t")
    lance.write_dataset(make_table(30_000), uri, max_rows_per_file=10_000)
    server = LanceFlightServer(root, "grpc://127.0.0.1:0", warm=False, page_cache_bytes=64 << 20)

    def read(c, **kw) -> pa.Table:
        info = c.get_flight_info(cmd(dataset="t", batch_size=4096, **kw))
        batches = [chunk.data for e in info.endpoints for chunk in c.do_get(e.ticket)]
        assert max(b.num_rows for b in batches) <= 4096
        return pa.Table.from_batches(batches, schema=info.schema)

    def theirs(**kw) -> pa.Table:
        return lance.dataset(uri).to_table(**kw)

    try:
        with fl.connect(f"grpc://127.0.0.1:{server.port}") as c:
            for _ in range(4):  # cold, admitting the pages, making the answers, from them
                assert read(c).equals(theirs())
            pages = action(c, "cache_stats")["pages"]
            assert pages["derived"] == 3  # one whole answer per endpoint (fragment)
            assert pages["derived_hits"] == 3  # the fourth read
            assert pages["bytes"] <= 64 << 20
            for _ in range(3):
                assert read(c, columns=["id"]).equals(theirs(columns=["id"]))
                assert read(c, filter="id < 100").equals(theirs(filter="id < 100"))
            assert action(c, "cache_stats")["pages"]["derived"] == 6  # and the projection's
            lance.write_dataset(make_table(5_000), uri, mode="append")
            for _ in range(4):
                assert read(c).equals(theirs())
            shutil.rmtree(uri)  # dropped and made again: version 1 holds other rows
            lance.write_dataset(make_table(20_000).slice(7_000), uri, max_rows_per_file=10_000)
            for _ in range(4):
                assert read(c).equals(theirs())
    finally:
        server.shutdown()


def _wide_dataset(root) -> pa.Table:
    """Dataset ``t`` under ``root``, written by pylance, of 120,000 rows of 170 bytes (64K
    rows, the default batch size, pass the large message's 8 MB); pylance's read of it."""
    rows = 120_000
    table = pa.table(
        {
            "id": np.arange(rows, dtype=np.int64),
            "x": np.random.default_rng(3).random(rows),
            "s": pa.array([f"value {i:012d} " * 10 for i in range(rows)]),
        }
    )
    uri = str(root / "t")
    lance.write_dataset(table, uri)
    return lance.dataset(uri).to_table()


def test_a_scan_stream_sends_one_large_message_early(tmp_path, monkeypatch):
    """A scan's second message is one of about LARGE_MESSAGE_BYTES, the others of about
    MESSAGE_BYTES, on every read: cold, from the page cache, and from a hot ticket's whole
    answer (a new pyarrow client's allocator then keeps the later messages' memory instead
    of faulting it in afresh: see ``streams.LARGE_MESSAGE_BYTES``).  The rows are
    pylance's; a ticket's batch size still bounds the large message."""
    expected = _wide_dataset(tmp_path)
    assert expected.nbytes > 2 * LARGE_MESSAGE_BYTES
    server = LanceFlightServer(
        str(tmp_path), "grpc://127.0.0.1:0", warm=False, page_cache_bytes=256 << 20
    )
    try:
        with fl.connect(f"grpc://127.0.0.1:{server.port}") as c:
            for _ in range(4):  # cold, admitting the pages, making the whole answer, from it
                info = c.get_flight_info(cmd(dataset="t"))
                (endpoint,) = info.endpoints
                batches = [chunk.data for chunk in c.do_get(endpoint.ticket)]
                assert pa.Table.from_batches(batches).equals(expected)
                sizes = [b.nbytes for b in batches]
                (big,) = [i for i, n in enumerate(sizes) if n > MESSAGE_BYTES * 9 // 8]
                assert 1 <= big <= 2  # after the first range (a message or two)
                assert LARGE_MESSAGE_BYTES <= sizes[big] < LARGE_MESSAGE_BYTES + 2 * MESSAGE_BYTES
            assert action(c, "cache_stats")["pages"]["derived_hits"] == 1
            info = c.get_flight_info(cmd(dataset="t", batch_size=5_000))
            batches = [chunk.data for chunk in c.do_get(info.endpoints[0].ticket)]
            assert max(b.num_rows for b in batches) == 5_000
            assert pa.Table.from_batches(batches).equals(expected)
            # a client that is not pyarrow's (the ADBC driver's user agent, as it sends it)
            # gets no large message, read after read, its whole answer made apart
            go = "ADBC Flight SQL Driver (unknown or development build) grpc-go/1.84.0"
            monkeypatch.setattr(requestlog, "header", lambda context, name: go)
            before = action(c, "cache_stats")["pages"]
            for _ in range(3):
                info = c.get_flight_info(cmd(dataset="t"))
                batches = [chunk.data for chunk in c.do_get(info.endpoints[0].ticket)]
                assert pa.Table.from_batches(batches).equals(expected)
                assert max(b.nbytes for b in batches) <= MESSAGE_BYTES * 9 // 8
            pages = action(c, "cache_stats")["pages"]
            assert pages["derived"] == before["derived"] + 1  # made from cached pages
            assert pages["derived_hits"] == before["derived_hits"] + 2
    finally:
        server.shutdown()


def test_no_large_message_turns_it_off(tmp_path):
    """``lance-flight serve --no-large-message``: a pyarrow client's scan comes in messages
    of about MESSAGE_BYTES only (for clients or proxies that limit message sizes); the
    same root served without it sends one large message.  Rows are pylance's both ways."""
    expected = _wide_dataset(tmp_path)
    for args, large in ((["--no-large-message"], False), ([], True)):
        with serve(str(tmp_path), "--no-warm", *args) as s, fl.connect(s.location) as c:
            info = c.get_flight_info(cmd(dataset="t"))
            batches = [chunk.data for e in info.endpoints for chunk in c.do_get(e.ticket)]
            assert pa.Table.from_batches(batches).equals(expected)
            biggest = max(b.nbytes for b in batches)
            assert (biggest >= LARGE_MESSAGE_BYTES) is large
            assert large or biggest <= MESSAGE_BYTES * 9 // 8
