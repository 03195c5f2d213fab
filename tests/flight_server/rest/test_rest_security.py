"""The REST API holds to the Flight server's rules: per-dataset grants, login rate limits,
dataset-name rules and message-size bounds, checked with pylance's ``RestNamespace``, plain
HTTP and (for parity) pyarrow's Flight client with the same token."""

from __future__ import annotations

import base64
import io
import json
import os
import urllib.error
import urllib.request
from urllib.parse import quote, urlencode

import lance
import lance.namespace as ln
import lance_namespace as lns
import pyarrow as pa
import pyarrow.flight as fl
import pytest
from lance_namespace import (
    CountTableRowsRequest,
    CreateNamespaceRequest,
    CreateTableRequest,
    CreateTableTagRequest,
    DescribeNamespaceRequest,
    DescribeTableRequest,
    DropNamespaceRequest,
    DropTableRequest,
    InsertIntoTableRequest,
    ListNamespacesRequest,
    ListTablesRequest,
    MergeInsertIntoTableRequest,
    NamespaceExistsRequest,
    RenameTableRequest,
    TableExistsRequest,
    UpdateTableRequest,
)

from flight_server.auth import Authenticator, Identity, hash_password
from flight_server.catalog import Catalog
from flight_server.context import ServiceContext
from flight_server.limits import Limits
from flight_server.loginlimit import LoginLimiter, Rate
from flight_server.permissions import Grants
from flight_server.rest import RestApp, RestServer
from flight_server.server import LanceFlightServer
from lance_format import write_dataset
from lance_format.cache import SearchCache

TEAM_READER = "team-reader-0123456789abcdef"
TEAM_WRITER = "team-writer-0123456789abcdef"


def _ipc(table: pa.Table, chunk: int | None = None) -> bytes:
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        for batch in table.to_batches(max_chunksize=chunk):
            writer.write_batch(batch)
    return sink.getvalue()


def _rows(start: int, n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64())})


def _http(url: str, body=None, headers=None) -> tuple[int, dict, object]:
    """(status, headers, parsed JSON body) of one POST."""
    data = json.dumps(body).encode() if isinstance(body, dict) else body
    req = urllib.request.Request(url, data=data, method="POST", headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, dict(resp.headers), json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), json.loads(err.read() or b"null")


def _client(url: str, token: str) -> ln.RestNamespace:
    return ln.RestNamespace(uri=url, **{"header.x-api-key": token})


@pytest.fixture
def granted(tmp_path):
    """A root with ``team/a.lance``, ``other/b.lance`` and ``top.lance``; a reader limited
    to ``team/`` and a writer limited to ``team/``, served over REST."""
    root = tmp_path / "root"
    for name in ("team/a.lance", "other/b.lance", "top.lance"):
        write_dataset(_rows(0, 3), str(root / name))
    auth = Authenticator(
        static_tokens={
            TEAM_READER: Identity("tr", "read"),
            TEAM_WRITER: Identity("tw", "write"),
        },
        grants={"tr": Grants.parse("read=team/"), "tw": Grants.parse("write=team/")},
        secret="g" * 32,
    )
    catalog = Catalog(str(root), SearchCache(8 << 20))
    with RestServer(RestApp(ServiceContext(catalog), authenticator=auth), port=0) as server:
        yield server, auth, str(root)


def test_grants_hide_and_refuse_reads(granted):
    server, auth, root = granted
    reader = _client(server.url, TEAM_READER)
    # listings hide what the grant does not cover
    assert reader.list_namespaces(ListNamespacesRequest(id=[])).namespaces == ["team"]
    assert reader.list_tables(ListTablesRequest(id=["team"])).tables == ["a"]
    assert reader.list_tables(ListTablesRequest(id=[])).tables == []
    req = urllib.request.Request(server.url + "/v1/table", headers={"x-api-key": TEAM_READER})
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert json.loads(resp.read())["tables"] == ["team$a"]
    assert reader.count_table_rows(CountTableRowsRequest(id=["team", "a"])).count == 3
    # reading outside the grant is refused, whether or not the table exists
    refused = [
        lambda: reader.count_table_rows(CountTableRowsRequest(id=["other", "b"])),
        lambda: reader.describe_table(DescribeTableRequest(id=["other", "b"])),
        lambda: reader.table_exists(TableExistsRequest(id=["other", "b"])),
        lambda: reader.table_exists(TableExistsRequest(id=["other", "nope"])),
        lambda: reader.count_table_rows(CountTableRowsRequest(id=["top"])),
        lambda: reader.list_tables(ListTablesRequest(id=["other"])),
    ]
    for call in refused:
        with pytest.raises(lns.PermissionDeniedError):
            call()
    for call in (
        lambda: reader.describe_namespace(DescribeNamespaceRequest(id=["other"])),
        lambda: reader.namespace_exists(NamespaceExistsRequest(id=["other"])),
        lambda: reader.list_namespaces(ListNamespacesRequest(id=["other"])),
    ):
        with pytest.raises(lns.PermissionDeniedError):
            call()
    reader.namespace_exists(NamespaceExistsRequest(id=["team"]))
    for path in ("/v1/table/other$b/query", "/v1/table/other$b/version/list"):
        status, _, body = _http(
            server.url + path, {"k": 1, "vector": {}}, {"x-api-key": TEAM_READER}
        )
        assert (status, body["code"]) == (403, 15), path
    # parity: the Flight server lists exactly what REST lists, for the same token
    flight = LanceFlightServer(root, "grpc://127.0.0.1:0", authenticator=auth, warm=False)
    try:
        client = fl.connect(f"grpc://127.0.0.1:{flight.port}")
        options = fl.FlightCallOptions(
            headers=[(b"authorization", f"Bearer {TEAM_READER}".encode())]
        )
        names = [i.descriptor.path[0].decode() for i in client.list_flights(options=options)]
        assert names == ["team/a.lance"]
    finally:
        flight.shutdown()


def test_grants_refuse_writes_before_anything_changes(granted):
    server, _, root = granted
    writer = _client(server.url, TEAM_WRITER)
    denied = [
        lambda: writer.insert_into_table(InsertIntoTableRequest(id=["other", "b"]), _ipc(_rows(9, 1))),
        lambda: writer.create_table(CreateTableRequest(id=["other", "new"]), _ipc(_rows(0, 1))),
        lambda: writer.drop_table(DropTableRequest(id=["other", "b"])),
        lambda: writer.update_table(UpdateTableRequest(id=["other", "b"], updates=[["id", "id + 1"]])),
        lambda: writer.merge_insert_into_table(MergeInsertIntoTableRequest(id=["other", "b"], on=["id"], when_not_matched_insert_all=True), _ipc(_rows(9, 1))),
        lambda: writer.create_table_tag(CreateTableTagRequest(id=["top"], tag="t1", version=1)),
        lambda: writer.create_namespace(CreateNamespaceRequest(id=["elsewhere"])),
    ]  # fmt: skip
    for call in denied:
        with pytest.raises(lns.PermissionDeniedError):
            call()
    # a refused upload is refused before its body is read: nothing was created or committed
    assert sorted(os.listdir(os.path.join(root, "other"))) == ["b.lance"]
    assert sorted(os.listdir(root)) == ["other", "team", "top.lance"]
    assert lance.dataset(os.path.join(root, "other", "b.lance")).version == 1
    assert lance.dataset(os.path.join(root, "top.lance")).tags.list() == {}
    # inside the grant every write works, and pylance sees it
    done = writer.insert_into_table(InsertIntoTableRequest(id=["team", "a"]), _ipc(_rows(3, 2)))
    assert (done.num_inserted_rows, done.version) == (2, 2)
    writer.create_namespace(CreateNamespaceRequest(id=["team", "sub"]))
    writer.create_table(CreateTableRequest(id=["team", "sub", "c"]), _ipc(_rows(0, 1)))
    assert lance.dataset(os.path.join(root, "team", "a.lance")).count_rows() == 5
    assert lance.dataset(os.path.join(root, "team", "sub", "c.lance")).count_rows() == 1
    # a rename may not carry a table out of the grant; a cascade stays within it
    with pytest.raises(lns.PermissionDeniedError):
        writer.rename_table(
            RenameTableRequest(id=["team", "a"], new_namespace_id=["other"], new_table_name="a")
        )
    assert lance.dataset(os.path.join(root, "team", "a.lance")).count_rows() == 5
    writer.drop_namespace(DropNamespaceRequest(id=["team", "sub"], behavior="Cascade"))
    assert sorted(os.listdir(os.path.join(root, "team"))) == ["a.lance"]
    # without read= a grant limits writes only: the writer reads every table
    assert writer.list_namespaces(ListNamespacesRequest(id=["team"])).namespaces == []
    assert writer.count_table_rows(CountTableRowsRequest(id=["other", "b"])).count == 3


def _login(url: str, user: str, password: str) -> tuple[int, dict, object]:
    form = urlencode(
        {"grant_type": "client_credentials", "client_id": user, "client_secret": password}
    )
    headers = {"content-type": "application/x-www-form-urlencoded"}
    return _http(url + "/oauth/token", form.encode(), headers)


def test_login_limits_apply_to_oauth_and_bearer_tokens(tmp_path):
    users = {
        "ana": (hash_password("right", iterations=1000), "read"),
        "bob": (hash_password("right", iterations=1000), "read"),
    }
    limiter = LoginLimiter(Rate(2, 600.0), Rate(0, 1.0))
    auth = Authenticator(users, secret="l" * 32, limiter=limiter)
    write_dataset(_rows(0, 2), str(tmp_path / "t.lance"))
    app = RestApp(ServiceContext(Catalog(str(tmp_path), SearchCache(1 << 20))), authenticator=auth)
    with RestServer(app) as srv:
        assert _login(srv.url, "ana", "wrong")[0] == 401
        assert _login(srv.url, "ana", "wrong")[0] == 401
        # the user's bucket is empty: even the right password is refused, without a check
        status, headers, body = _login(srv.url, "ana", "right")
        assert status == 429 and body["error"] == "slow_down"
        assert int(headers["retry-after"]) > 0 and "access_token" not in body
        # Basic credentials on the token endpoint take the same path
        basic = {"authorization": "Basic " + base64.b64encode(b"ana:right").decode()}
        status, _, _ = _http(srv.url + "/oauth/token", b"grant_type=client_credentials", basic)
        assert status == 429
        assert limiter.refused == 2
        # bad bearer tokens naming bob count against bob, as over Flight
        forged = auth.issue_token(Identity("bob", "read"))[:-4] + "AAAA"
        for _ in range(2):
            status, _, body = _http(
                srv.url + "/v1/table/t/count_rows", {}, {"authorization": f"Bearer {forged}"}
            )
            assert (status, body["code"]) == (401, 16)
        status, headers, _ = _login(srv.url, "bob", "right")
        assert status == 429 and "retry-after" in headers


def test_body_sizes_are_bounded_by_the_flight_limits(tmp_path):
    write_dataset(_rows(0, 2), str(tmp_path / "t.lance"))
    users = {"ana": (hash_password("right", iterations=1000), "write")}
    auth = Authenticator(users, secret="b" * 32)
    limits = Limits(max_message_bytes=2048, max_batch_bytes=4096)
    app = RestApp(
        ServiceContext(Catalog(str(tmp_path), SearchCache(1 << 20)), limits=limits),
        authenticator=auth,
    )
    with RestServer(app) as srv:
        token = _login(srv.url, "ana", "right")[2]["access_token"]
        key = {"x-api-key": token}
        # JSON bodies: --max-message-bytes
        big = {"predicate": "id IN (" + ",".join(["1"] * 1500) + ")"}
        status, _, body = _http(srv.url + "/v1/table/t/count_rows", big, key)
        assert (status, body["code"]) == (400, 13) and "2048" in body["error"]
        status, _, body = _http(srv.url + "/v1/table/t/count_rows", {"predicate": "id = 1"}, key)
        assert (status, body) == (200, 1)
        # the token endpoint too
        status, _, body = _http(srv.url + "/oauth/token", b"x" * 3000, {})
        assert (status, body["error"]) == (400, "invalid_request")
        # Arrow bodies: each record batch within --max-batch-bytes, as a Flight put's
        arrow = {**key, "content-type": "application/vnd.apache.arrow.stream"}
        rows = _rows(100, 1000)  # 8000 bytes of int64
        status, _, body = _http(srv.url + "/v1/table/t/insert", _ipc(rows), arrow)
        assert (status, body["code"]) == (400, 13) and "4096" in body["error"]
        assert lance.dataset(str(tmp_path / "t.lance")).version == 1
        status, _, body = _http(srv.url + "/v1/table/t/insert", _ipc(rows, chunk=256), arrow)
        assert (status, body["num_inserted_rows"]) == (200, 1000)
    assert lance.dataset(str(tmp_path / "t.lance")).count_rows() == 1002


def test_names_follow_the_dataset_name_rules(tmp_path):
    with RestServer(RestApp(ServiceContext(Catalog(str(tmp_path), SearchCache(1 << 20))))) as srv:
        for bad in ("nl\n", "with space", "caf\u00e9", "-dash", "x" * 256):
            raw = quote(bad, safe="")
            status, _, body = _http(f"{srv.url}/v1/namespace/{raw}/create", {})
            assert (status, body["code"]) == (400, 13), bad
            status, _, body = _http(
                f"{srv.url}/v1/table/{raw}/create",
                _ipc(_rows(0, 1)),
                {"content-type": "application/vnd.apache.arrow.stream"},
            )
            assert (status, body["code"]) == (400, 13), bad
        status, _, _ = _http(f"{srv.url}/v1/namespace/ok-name_1.x/create", {})
        assert status == 200
    assert os.listdir(tmp_path) == ["ok-name_1.x"]


def test_namespaces_on_the_in_memory_store():
    """The same code path over ``memory://``: an empty namespace is its marker object, and
    tables made over REST are datasets pylance's layout opens there too."""
    import uuid

    from lance_format import dataset, storage

    root = f"memory://rest-{uuid.uuid4().hex[:8]}"
    with RestServer(RestApp(ServiceContext(Catalog(root, SearchCache(1 << 20))))) as srv:
        client = ln.RestNamespace(uri=srv.url)
        client.create_namespace(CreateNamespaceRequest(id=["ns"]))
        assert storage.list_names(f"{root}/ns") == [".lance-namespace"]
        with pytest.raises(lns.NamespaceAlreadyExistsError):
            client.create_namespace(CreateNamespaceRequest(id=["ns"]))
        client.create_table(CreateTableRequest(id=["ns", "t"]), _ipc(_rows(0, 4)))
        assert dataset(f"{root}/ns/t.lance").count_rows() == 4
        with pytest.raises(lns.NamespaceNotEmptyError):
            client.drop_namespace(DropNamespaceRequest(id=["ns"]))
        client.drop_table(DropTableRequest(id=["ns", "t"]))
        client.drop_namespace(DropNamespaceRequest(id=["ns"]))
        assert storage.list_names(f"{root}/ns") == []
        assert client.list_namespaces(ListNamespacesRequest(id=[])).namespaces == []
