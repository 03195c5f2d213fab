"""Stateless replicas: two ``lance-flight serve s3://...`` processes over one bucket serve
the same datasets and take concurrent appends with no loss."""

from __future__ import annotations

import threading

import lance
import numpy as np
import pyarrow as pa
import pyarrow.flight as fl
from flight_fixtures import action, cmd, put, read_info, serve

import lance_format as lf

WRITERS = 8
APPENDS = 10
ROWS = 3


def _options_args(options: dict) -> list[str]:
    out = []
    for key, value in options.items():
        out += ["--storage-option", f"{key}={value}"]
    return out


def test_two_servers_over_one_bucket_lose_no_acknowledged_append(moto_server, s3_root):
    opts = moto_server.options
    lf.write_dataset(
        pa.table({"id": pa.array([], pa.int64()), "w": pa.array([], pa.int32())}),
        f"{s3_root}/shared/ds",
        storage_options=opts,
    )
    args = ["--no-warm", *_options_args(opts)]
    with serve(s3_root, *args) as a, serve(s3_root, *args) as b:
        clients = [fl.connect(a.location), fl.connect(b.location)]
        for c in clients:  # both list the dataset from the bucket
            names = [i.descriptor.path[0].decode() for i in c.list_flights()]
            assert "shared/ds" in names
        acked: list[list[int]] = [[] for _ in range(WRITERS)]
        errors: list[BaseException] = []

        def writer(w: int) -> None:
            try:
                client = fl.connect((a if w % 2 else b).location)  # 4 writers per server
                for i in range(APPENDS):
                    ids = np.arange(ROWS) + (w * APPENDS + i) * ROWS
                    t = pa.table(
                        {"id": pa.array(ids, pa.int64()), "w": pa.array([w] * ROWS, pa.int32())}
                    )
                    out = put(client, cmd(dataset="shared/ds", mode="append"), t)
                    assert out["rows_written"] == ROWS
                    acked[w].extend(ids.tolist())
            except BaseException as exc:  # reported below, with the acknowledged rows
                errors.append(exc)

        threads = [threading.Thread(target=writer, args=(w,)) for w in range(WRITERS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        expected = sorted(i for ids in acked for i in ids)
        assert len(expected) == WRITERS * APPENDS * ROWS
        for c in clients:  # each replica serves every row, exactly once
            info = c.get_flight_info(cmd(dataset="shared/ds"))
            got = read_info(c, info).column("id").to_pylist()
            assert sorted(got) == expected
        version = action(clients[0], "versions", dataset="shared/ds")["latest"]
        assert version == 1 + WRITERS * APPENDS
    theirs = lance.dataset(f"{s3_root}/shared/ds", storage_options=opts)
    assert theirs.version == 1 + WRITERS * APPENDS
    assert sorted(theirs.to_table().column("id").to_pylist()) == expected


def test_rest_namespace_over_a_bucket(moto_server, s3_root):
    """The REST API over an s3:// root: namespaces are prefixes with a marker object, and
    what it creates, renames and drops is what pylance and the bucket show."""
    import io

    import lance.namespace as ln
    from lance_namespace import (
        CreateNamespaceRequest,
        CreateTableRequest,
        DropNamespaceRequest,
        DropTableRequest,
        InsertIntoTableRequest,
        ListNamespacesRequest,
        ListTablesRequest,
        ListTableVersionsRequest,
        NamespaceExistsRequest,
        RenameTableRequest,
    )

    from flight_server.catalog import Catalog
    from flight_server.context import ServiceContext
    from flight_server.rest import RestApp, RestServer
    from lance_format.cache import SearchCache

    def ipc(table: pa.Table) -> bytes:
        sink = io.BytesIO()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        return sink.getvalue()

    def keys() -> list[str]:
        found = moto_server.client().list_objects_v2(Bucket=s3_root[5:])
        return sorted(o["Key"] for o in found.get("Contents", []))

    opts = moto_server.options
    rows = pa.table({"id": pa.array([1, 2, 3], pa.int64())})
    catalog = Catalog(s3_root, SearchCache(8 << 20), storage_options=opts)
    with RestServer(RestApp(ServiceContext(catalog))) as server:
        client = ln.RestNamespace(uri=server.url)
        client.create_namespace(CreateNamespaceRequest(id=["sales"]))
        assert keys() == ["sales/.lance-namespace"]  # an empty namespace exists
        client.namespace_exists(NamespaceExistsRequest(id=["sales"]))
        assert client.list_namespaces(ListNamespacesRequest(id=[])).namespaces == ["sales"]
        made = client.create_table(CreateTableRequest(id=["sales", "t"]), ipc(rows))
        assert made.location == f"{s3_root}/sales/t.lance"
        client.insert_into_table(InsertIntoTableRequest(id=["sales", "t"]), ipc(rows))
        assert lance.dataset(made.location, storage_options=opts).count_rows() == 6
        versions = client.list_table_versions(ListTableVersionsRequest(id=["sales", "t"]))
        assert [v.version for v in versions.versions] == [1, 2]
        assert all(
            v.e_tag and v.manifest_path.startswith("sales/t.lance/_versions/")
            for v in versions.versions
        )
        client.rename_table(RenameTableRequest(id=["sales", "t"], new_table_name="u"))
        assert client.list_tables(ListTablesRequest(id=["sales"])).tables == ["u"]
        assert not [k for k in keys() if k.startswith("sales/t.lance/")]
        moved = lance.dataset(f"{s3_root}/sales/u.lance", storage_options=opts)
        assert (moved.version, moved.count_rows()) == (2, 6)
        client.drop_table(DropTableRequest(id=["sales", "u"]))
        assert keys() == ["sales/.lance-namespace"]
        client.drop_namespace(DropNamespaceRequest(id=["sales"]))
        assert keys() == []
        assert client.list_namespaces(ListNamespacesRequest(id=[])).namespaces == []


def test_serve_rest_port_on_a_bucket(moto_server, s3_root):
    """``serve s3://... --rest-port 0`` starts (it was refused before) and serves the
    bucket's datasets as tables."""
    import lance.namespace as ln
    from lance_namespace import CountTableRowsRequest, ListTablesRequest

    opts = moto_server.options
    lf.write_dataset(pa.table({"id": [1, 2]}), f"{s3_root}/ns/t.lance", storage_options=opts)
    args = ["--no-warm", "--no-sql", "--rest-port", "0", *_options_args(opts)]
    with serve(s3_root, *args) as srv:
        line = srv.process.stdout.readline().strip()
        assert line.startswith("Lance Namespace REST API on http://")
        client = ln.RestNamespace(uri=line.rsplit(" ", 1)[1])
        assert client.list_tables(ListTablesRequest(id=["ns"])).tables == ["t"]
        assert client.count_table_rows(CountTableRowsRequest(id=["ns", "t"])).count == 2
