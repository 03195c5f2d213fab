"""The Flight server through a real ``pyarrow.flight`` client, against a server process.

Truth is pylance's read of the same dataset (``lance.dataset(...)``): every endpoint of a
FlightInfo read and concatenated in endpoint order must equal pylance's table.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor

import lance
import numpy as np
import pyarrow as pa
import pyarrow.flight as fl
import pytest
from flight_fixtures import REPO, serve

import lance_format
from flight_server.errors import error_kind


def _table(n: int, start: int = 0, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    ids = np.arange(start, start + n)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "x": pa.array(rng.random(n)),
            "s": pa.array([None if i % 11 == 0 else f"s{i % 17}" for i in ids]),
        }
    )


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("root")
    items = str(root / "tpch" / "items")
    lance.write_dataset(_table(10_000), items, max_rows_per_file=3000)  # v1: 4 fragments
    lance.dataset(items).tags.create("first", 1)
    lance.dataset(items).delete("id % 10 = 3")  # v2
    paged = str(root / "big" / "paged")
    lance_format.write_dataset(
        _table(120_000, seed=1), paged, max_rows_per_file=60_000, max_page_bytes=32 * 1024
    )
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


def _cmd(**kw) -> fl.FlightDescriptor:
    return fl.FlightDescriptor.for_command(json.dumps(kw).encode())


def _read(client, info: fl.FlightInfo, parallel: bool = False) -> pa.Table:
    def one(endpoint):
        return client.do_get(endpoint.ticket).read_all()

    if parallel:
        with ThreadPoolExecutor(4) as pool:
            tables = list(pool.map(one, info.endpoints))
    else:
        tables = [one(e) for e in info.endpoints]
    return pa.concat_tables(tables).combine_chunks() if tables else None


def _action(client, kind: str, **body) -> dict:
    results = list(client.do_action(fl.Action(kind, json.dumps(body).encode())))
    return json.loads(results[0].body.to_pybytes())


def test_list_flights_and_whole_dataset(client, root):
    infos = {tuple(p.decode() for p in i.descriptor.path): i for i in client.list_flights()}
    assert set(infos) == {("tpch/items",), ("big/paged",)}
    info = client.get_flight_info(fl.FlightDescriptor.for_path("tpch/items"))
    theirs = lance.dataset(os.path.join(root, "tpch/items"))
    assert info.total_records == theirs.count_rows()
    assert len(info.endpoints) == len(theirs.get_fragments())
    assert info.schema.equals(theirs.schema)
    assert _read(client, info).equals(theirs.to_table().combine_chunks())
    schema = client.get_schema(fl.FlightDescriptor.for_path("tpch/items")).schema
    assert schema.equals(theirs.schema)


def test_projection_filter_row_ids(client, root):
    theirs = lance.dataset(os.path.join(root, "tpch/items"))
    flt = "x > 0.5 AND s IS NOT NULL"
    info = client.get_flight_info(
        _cmd(dataset="tpch/items", columns=["s", "id"], filter=flt, with_row_id=True)
    )
    assert info.total_records == -1  # unknown before the filter runs
    expected = theirs.to_table(columns=["s", "id"], filter=flt, with_row_id=True)
    assert _read(client, info).equals(expected.combine_chunks())
    ids = expected.column("_rowid").to_pylist()[::7]
    info = client.get_flight_info(_cmd(dataset="tpch/items", row_ids=ids, columns=["id", "x"]))
    assert _read(client, info).equals(theirs._take_rows(ids, columns=["id", "x"]))


def test_limit_offset_is_one_ordered_endpoint(client, root):
    theirs = lance.dataset(os.path.join(root, "tpch/items"))
    info = client.get_flight_info(_cmd(dataset="tpch/items", limit=1234, offset=2900))
    assert len(info.endpoints) == 1 and info.ordered and info.total_records == 1234
    assert _read(client, info).equals(theirs.to_table(limit=1234, offset=2900))


def test_versions_tags_and_pinned_tickets(client, root, tmp_path):
    theirs = lance.dataset(os.path.join(root, "tpch/items"), version=1)
    for version in (1, "first"):
        info = client.get_flight_info(_cmd(dataset="tpch/items", version=version))
        assert _read(client, info).equals(theirs.to_table().combine_chunks())
    # a commit after get_flight_info does not change what its tickets return
    uri = os.path.join(root, "big", "pinned")
    lance.write_dataset(_table(500), uri)
    info = client.get_flight_info(fl.FlightDescriptor.for_path("big/pinned"))
    lance.write_dataset(_table(100, start=500), uri, mode="append")
    lance.dataset(uri).delete("id < 50")
    assert _read(client, info).equals(lance.dataset(uri, version=1).to_table())
    latest = client.get_flight_info(fl.FlightDescriptor.for_path("big/pinned"))
    assert _read(client, latest).equals(lance.dataset(uri).to_table().combine_chunks())


def test_split_endpoints_read_in_parallel(client, root):
    theirs = lance.dataset(os.path.join(root, "big/paged"))
    for flt in (None, "id % 3 = 0"):
        kw = {"filter": flt} if flt else {}
        info = client.get_flight_info(_cmd(dataset="big/paged", split_rows=15_000, **kw))
        assert len(info.endpoints) > 2 * len(theirs.get_fragments())
        tickets = [json.loads(e.ticket.ticket) for e in info.endpoints]
        # ranges tile each fragment exactly, cut at page starts
        for frag in theirs.get_fragments():
            ranges = [(t["start"], t["stop"]) for t in tickets if t["fragment"] == frag.fragment_id]
            assert ranges[0][0] == 0 and ranges[-1][1] == frag.physical_rows
            assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:], strict=False))
        got = _read(client, info, parallel=True)
        assert got.equals(theirs.to_table(filter=flt).combine_chunks())


def test_do_put_modes(client, root):
    uri = os.path.join(root, "put", "modes")
    t1, t2 = _table(2500), _table(700, start=2500)
    # a path descriptor appends, creating the dataset when absent
    w, r = client.do_put(fl.FlightDescriptor.for_path("put/modes"), t1.schema)
    w.write_table(t1, max_chunksize=1000)
    w.done_writing()
    result = json.loads(r.read().to_pybytes())
    w.close()
    assert result == {"version": 1, "rows_written": 2500}
    w, r = client.do_put(_cmd(dataset="put/modes", mode="append", max_rows_per_file=300), t2.schema)
    w.write_table(t2)
    w.done_writing()
    assert json.loads(r.read().to_pybytes())["version"] == 2
    w.close()
    assert lance.dataset(uri).to_table().equals(pa.concat_tables([t1, t2]))
    assert len(lance.dataset(uri).get_fragments()) == 1 + 3
    w, r = client.do_put(_cmd(dataset="put/modes", mode="overwrite"), t2.schema)
    w.write_table(t2)
    w.done_writing()
    w.close()
    assert lance.dataset(uri).to_table().equals(t2)
    # create over an existing dataset, and an append with the wrong schema: refused
    for cmd, data, kind in (
        ({"mode": "create"}, t2, "ALREADY_EXISTS"),
        ({"mode": "append"}, t2.drop_columns(["x"]), "INVALID_ARGUMENT"),
    ):
        with pytest.raises(fl.FlightServerError) as e:
            w, r = client.do_put(_cmd(dataset="put/modes", **cmd), data.schema)
            w.write_table(data)
            w.done_writing()
            w.close()
        assert error_kind(e.value) == kind
    assert lance.dataset(uri).version == 3


def test_staged_puts_commit_once_and_idempotency(client, root):
    uri = os.path.join(root, "put", "staged")
    lance.write_dataset(_table(100), uri)
    staged = []
    for i in range(3):
        t = _table(200, start=1000 * (i + 1))
        w, r = client.do_put(_cmd(dataset="put/staged", stage=True), t.schema)
        w.write_table(t)
        w.done_writing()
        staged.append(json.loads(r.read().to_pybytes()))
        w.close()
    assert lance.dataset(uri).version == 1  # nothing committed yet
    frags = [f for s in staged for f in s["fragments"]]
    out = _action(client, "commit_staged", dataset="put/staged", fragments=frags, read_version=1)
    assert out["version"] == 2 and lance.dataset(uri).count_rows() == 700
    # the same idempotency key twice commits once
    t = _table(50, start=9000)
    versions = []
    for _ in range(2):
        w, r = client.do_put(_cmd(dataset="put/staged", idempotency_key="k-1"), t.schema)
        w.write_table(t)
        w.done_writing()
        versions.append(json.loads(r.read().to_pybytes())["version"])
        w.close()
    assert versions == [3, 3] and lance.dataset(uri).count_rows() == 750
    # staged files of an abandoned job are removed on request, committed ones never
    w, r = client.do_put(_cmd(dataset="put/staged", stage=True), t.schema)
    w.write_table(t)
    w.done_writing()
    abandoned = json.loads(r.read().to_pybytes())["fragments"]
    w.close()
    data = os.path.join(uri, "data")
    before = len(os.listdir(data))
    assert (
        _action(client, "discard_staged", dataset="put/staged", fragments=abandoned)["removed"] == 1
    )
    assert len(os.listdir(data)) == before - 1
    with pytest.raises(fl.FlightServerError):
        _action(client, "discard_staged", dataset="put/staged", fragments=frags)
    assert lance.dataset(uri).count_rows() == 750


_DISCONNECTING_CLIENT = textwrap.dedent(
    """
    import json, sys, time
    import numpy as np, pyarrow as pa, pyarrow.flight as fl
    c = fl.connect(sys.argv[1])
    t = pa.table({"id": pa.array(np.arange(10000), pa.int64())})
    d = fl.FlightDescriptor.for_command(json.dumps({"dataset": "put/cut"}).encode())
    w, r = c.do_put(d, t.schema)
    for i in range(1000):
        w.write_table(t)
        if i == 20:
            print("sent", flush=True)
        time.sleep(0.01)
    """
)


def test_client_disconnect_mid_put_commits_nothing(server, root):
    uri = os.path.join(root, "put", "cut")
    lance.write_dataset(pa.table({"id": pa.array(np.arange(10), pa.int64())}), uri)
    files_before = set(os.listdir(os.path.join(uri, "data")))
    proc = subprocess.Popen(
        [sys.executable, "-c", _DISCONNECTING_CLIENT, server.location],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "sent"
    proc.kill()
    proc.wait()
    c = fl.connect(server.location)
    for _ in range(100):  # the server notices the broken stream, then cleans up
        _action(c, "health")
        if set(os.listdir(os.path.join(uri, "data"))) == files_before:
            break
        import time

        time.sleep(0.1)
    assert set(os.listdir(os.path.join(uri, "data"))) == files_before
    assert lance.dataset(uri).version == 1 and lance.dataset(uri).count_rows() == 10


def test_actions(client, root):
    names = {a.type for a in client.list_actions()}
    expected = {"list_datasets", "dataset_info", "versions", "create_tag", "delete_tag"}
    expected |= {"restore", "delete", "add_columns", "drop_columns", "compact", "cleanup"}
    expected |= {"commit_staged", "cache_stats", "health"}
    assert expected <= names
    uri = os.path.join(root, "act", "ds")
    lance.write_dataset(_table(3000), uri, max_rows_per_file=500)
    assert "act/ds" in _action(client, "list_datasets")["datasets"]
    info = _action(client, "dataset_info", dataset="act/ds")
    assert info["rows"] == 3000 and len(info["fragments"]) == 6 and info["encodings"]
    out = _action(client, "delete", dataset="act/ds", filter="id < 1200")
    assert out["deleted"] == 1200 and lance.dataset(uri).count_rows() == 1800
    _action(client, "create_tag", dataset="act/ds", tag="before", version=1)
    assert lance.dataset(uri).tags.list()["before"]["version"] == 1
    out = _action(client, "add_columns", dataset="act/ds", columns={"y": "id * 2"})
    assert "y" in lance.dataset(uri).schema.names
    _action(client, "drop_columns", dataset="act/ds", columns=["x"])
    assert lance.dataset(uri).schema.names == ["id", "s", "y"]
    out = _action(client, "compact", dataset="act/ds", target_rows_per_fragment=1000)
    assert out["fragments_removed"] > 0
    assert lance.dataset(uri).to_table(columns=["id"])["id"].to_pylist() == list(range(1200, 3000))
    versions = _action(client, "versions", dataset="act/ds")["versions"]
    assert [v["version"] for v in versions] == [v["version"] for v in lance.dataset(uri).versions()]
    restored = _action(client, "restore", dataset="act/ds", version="before")
    assert lance.dataset(uri).count_rows() == 3000 and restored["restored"] == 1
    _action(client, "delete_tag", dataset="act/ds", tag="before")
    assert lance.dataset(uri).tags.list() == {}
    stats = _action(client, "cleanup", dataset="act/ds", older_than_seconds=0)
    assert stats["old_versions"] >= 1
    assert lance.dataset(uri).count_rows() == 3000
    assert _action(client, "cache_stats")["capacity_bytes"] == 64 << 20
    assert _action(client, "health")["status"] == "ok"


@pytest.mark.parametrize(
    "make",
    [
        lambda: _cmd(dataset="tpch/items", bogus=1),
        lambda: _cmd(dataset="tpch/items", limit=-1),
        lambda: _cmd(dataset="tpch/items", columns="id"),
        lambda: _cmd(dataset="tpch/items", columns=["nope"]),
        lambda: _cmd(dataset="tpch/items", filter="nope > 1"),
        lambda: _cmd(dataset="tpch/items", filter="id >"),
        lambda: fl.FlightDescriptor.for_command(b"not json"),
        lambda: _cmd(dataset="../outside"),
        lambda: _cmd(dataset="/etc"),
        lambda: fl.FlightDescriptor.for_path("tpch/../../x"),
    ],
    ids=[
        "key",
        "negative",
        "columns-type",
        "column",
        "filter-col",
        "filter-sql",
        "json",
        "dots",
        "abs",
        "path",
    ],
)
def test_bad_requests_are_invalid_argument(client, make):
    with pytest.raises(fl.FlightServerError) as e:
        client.get_flight_info(make())
    assert error_kind(e.value) == "INVALID_ARGUMENT"
    assert "Traceback" not in str(e.value)
    assert _action(client, "health")["status"] == "ok"  # the server still answers


def test_not_found_and_bad_tickets(client, root, tmp_path):
    for d in (_cmd(dataset="no/such"), _cmd(dataset="tpch/items", version=99)):
        with pytest.raises(fl.FlightServerError) as e:
            client.get_flight_info(d)
        assert error_kind(e.value) == "NOT_FOUND"
    with pytest.raises(fl.FlightServerError) as e:
        _action(client, "no_such_action")
    assert error_kind(e.value) == "NOT_FOUND"
    for raw in (b"garbage", b'{"v":1}', b'{"v":1,"dataset":"tpch/items","version":1,"start":5}'):
        with pytest.raises(fl.FlightServerError) as e:
            client.do_get(fl.Ticket(raw)).read_all()
        assert error_kind(e.value) == "INVALID_ARGUMENT"
    # a symlink inside the root that points outside it is not followed
    outside = tmp_path / "outside"
    lance.write_dataset(_table(10), str(outside))
    os.symlink(outside, os.path.join(root, "escape"))
    try:
        with pytest.raises(fl.FlightServerError) as e:
            client.get_flight_info(fl.FlightDescriptor.for_path("escape"))
        assert error_kind(e.value) == "INVALID_ARGUMENT"
        assert "escape" not in _action(client, "list_datasets")["datasets"]
    finally:
        os.unlink(os.path.join(root, "escape"))


def test_workers_spread_endpoints(root):
    with serve(root, "--workers", "2", "--no-warm") as s:
        workers = s.lines[-1].split()[1:]
        assert len(workers) == 2 and s.location == workers[0]
        c = fl.connect(s.location)
        info = c.get_flight_info(fl.FlightDescriptor.for_path("tpch/items"))
        firsts = {e.locations[0].uri.decode() for e in info.endpoints}
        assert firsts == set(workers)
        theirs = lance.dataset(os.path.join(root, "tpch/items")).to_table().combine_chunks()
        # every ticket can be redeemed at its first location and at the other one
        for shift in (0, 1):
            tables = []
            for e in info.endpoints:
                loc = e.locations[shift].uri.decode()
                with fl.connect(loc) as other:
                    tables.append(other.do_get(e.ticket).read_all())
            assert pa.concat_tables(tables).combine_chunks().equals(theirs)
        c.close()
    assert s.process.returncode == 0


def test_sigint_stops_gracefully(root):
    with serve(root, "--no-warm") as s:
        assert s.stop(signal.SIGINT) == 0
    assert REPO  # the fixture module resolved the repository
