"""The Lance Namespace REST API beside Flight, driven by real clients.

pylance's ``RestNamespace`` (and the ``lance-namespace`` urllib3 client) drive our server on a
loopback port; every operation is also run against pylance's reference server,
``RestAdapter("dir", ...)``, on a root of its own, and the two answers must be equal.  The
flat adapter (``manifest_enabled=false``) lays tables out exactly as we do (``t.lance`` under
the root); nested namespaces are compared with the default adapter, whose layout differs
(a ``__manifest`` table) but whose answers must not.  Where pylance 14 departs from the spec
(noted at each place), the spec's answer is asserted instead.
"""

from __future__ import annotations

import io
import json
import os
import ssl
import urllib.error
import urllib.request

import lance
import lance.namespace as ln
import lance_namespace as lns
import lance_namespace_urllib3_client as lnc
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from lance_namespace import (
    AlterTableAddColumnsRequest,
    AlterTableAlterColumnsRequest,
    AlterTableDropColumnsRequest,
    CountTableRowsRequest,
    CreateNamespaceRequest,
    CreateTableRequest,
    CreateTableTagRequest,
    DeleteFromTableRequest,
    DeleteTableTagRequest,
    DescribeNamespaceRequest,
    DescribeTableRequest,
    DropNamespaceRequest,
    DropTableRequest,
    GetTableTagVersionRequest,
    InsertIntoTableRequest,
    ListNamespacesRequest,
    ListTablesRequest,
    ListTableTagsRequest,
    ListTableVersionsRequest,
    MergeInsertIntoTableRequest,
    NamespaceExistsRequest,
    QueryTableRequest,
    RenameTableRequest,
    RestoreTableRequest,
    TableExistsRequest,
    UpdateTableRequest,
    UpdateTableTagRequest,
)
from tls_util import make_self_signed_cert

from flight_server.auth import Authenticator, Identity
from flight_server.catalog import Catalog
from flight_server.context import ServiceContext
from flight_server.logs import LogfmtFormatter
from flight_server.rest import RestApp, RestServer
from lance_format import write_dataset
from lance_format.cache import SearchCache

READ_TOKEN = "read-token-0123456789abcdef"
WRITE_TOKEN = "write-token-0123456789abcdef"


def _ipc(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()


def _table(start: int = 0, n: int = 5) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": [f"n{i}" for i in ids],
            "score": pa.array([i * 0.5 for i in ids], pa.float64()),
        }
    )


def _serve(root: str, **kwargs) -> RestServer:
    return RestServer(
        RestApp(
            ServiceContext(
                Catalog(root, SearchCache(16 << 20)), metrics=kwargs.pop("metrics", None)
            ),
            **kwargs,
        ),
        port=0,
    ).start()


class Pair:
    """Our server and pylance's adapter, each over a root of its own, with a client each."""

    def __init__(self, tmp, manifest: bool):
        self.our_root, self.their_root = str(tmp / "ours"), str(tmp / "theirs")
        os.makedirs(self.our_root)
        os.makedirs(self.their_root)
        self.server = _serve(self.our_root)
        props = {"root": self.their_root, "manifest_enabled": str(manifest).lower()}
        self.adapter = ln.RestAdapter("dir", props, port=0)
        self.adapter.start()
        self.ours = ln.RestNamespace(uri=self.server.url)
        self.theirs = ln.RestNamespace(uri=f"http://127.0.0.1:{self.adapter.port}")

    def both(self, call):
        """``call(client)`` on both servers: both answers (context headers dropped), or the
        exception class both raised (which must be the same)."""
        out = []
        for client in (self.ours, self.theirs):
            try:
                result = call(client)
            except lns.LanceNamespaceError as exc:
                out.append(type(exc))
                continue
            if hasattr(result, "context"):
                result.context = None
            out.append(result)
        return out

    def same(self, call):
        ours, theirs = self.both(call)
        assert ours == theirs
        return ours

    def close(self) -> None:
        self.server.stop()
        self.adapter.stop()


@pytest.fixture
def flat(tmp_path):
    pair = Pair(tmp_path, manifest=False)
    yield pair
    pair.close()


@pytest.fixture
def nested(tmp_path):
    pair = Pair(tmp_path, manifest=True)
    yield pair
    pair.close()


def _http(url: str, method: str = "POST", body=None, headers=None, context=None):
    """(status, parsed JSON or raw bytes) of one raw HTTP call."""
    data = json.dumps(body).encode() if isinstance(body, dict) else body
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    if isinstance(body, dict):
        req.add_header("content-type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=30, context=context) as resp:
            status, raw, ctype = resp.status, resp.read(), resp.headers.get("content-type", "")
    except urllib.error.HTTPError as err:
        status, raw, ctype = err.code, err.read(), err.headers.get("content-type", "")
    return status, (json.loads(raw) if "json" in ctype and raw else raw)


# -- namespaces ------------------------------------------------------------------------------


def test_namespaces_answer_as_pylance(nested):
    same = nested.same
    same(lambda c: c.create_namespace(CreateNamespaceRequest(id=["sales"])))
    same(lambda c: c.create_namespace(CreateNamespaceRequest(id=["sales", "eu"])))
    same(lambda c: c.create_namespace(CreateNamespaceRequest(id=["hr"])))
    assert same(lambda c: c.list_namespaces(ListNamespacesRequest(id=[]))).namespaces == [
        "hr",
        "sales",
    ]
    assert same(lambda c: c.list_namespaces(ListNamespacesRequest(id=["sales"]))).namespaces == [
        "eu"
    ]
    same(lambda c: c.describe_namespace(DescribeNamespaceRequest(id=["sales", "eu"])))
    same(lambda c: c.namespace_exists(NamespaceExistsRequest(id=["sales"])))
    errors = [
        (lambda c: c.namespace_exists(NamespaceExistsRequest(id=["nope"])), lns.NamespaceNotFoundError),
        (lambda c: c.describe_namespace(DescribeNamespaceRequest(id=["nope"])), lns.NamespaceNotFoundError),
        (lambda c: c.create_namespace(CreateNamespaceRequest(id=["sales"])), lns.NamespaceAlreadyExistsError),
        (lambda c: c.create_namespace(CreateNamespaceRequest(id=["x", "y"])), lns.NamespaceNotFoundError),
        (lambda c: c.drop_namespace(DropNamespaceRequest(id=["sales"])), lns.NamespaceNotEmptyError),
        (lambda c: c.drop_namespace(DropNamespaceRequest(id=[])), lns.InvalidInputError),
    ]  # fmt: skip
    for call, error in errors:
        assert same(call) is error
    # a table makes its namespace non-empty on both
    created = nested.both(
        lambda c: c.create_table(CreateTableRequest(id=["hr", "staff"]), _ipc(_table()))
    )
    assert [r.version for r in created] == [1, 1]
    assert same(lambda c: c.list_tables(ListTablesRequest(id=["hr"]))).tables == ["staff"]
    assert (
        same(lambda c: c.drop_namespace(DropNamespaceRequest(id=["hr"])))
        is lns.NamespaceNotEmptyError
    )
    same(lambda c: c.drop_namespace(DropNamespaceRequest(id=["sales", "eu"])))
    same(lambda c: c.drop_namespace(DropNamespaceRequest(id=["sales"])))
    assert same(lambda c: c.list_namespaces(ListNamespacesRequest(id=[]))).namespaces == ["hr"]
    # ours: a namespace is a directory, a table ns/t.lance in it, which pylance opens
    assert sorted(os.listdir(nested.our_root)) == ["hr"]
    assert lance.dataset(os.path.join(nested.our_root, "hr", "staff.lance")).to_table() == _table()


def test_namespace_modes_and_spec_departures(nested):
    ours = nested.ours
    ours.create_namespace(CreateNamespaceRequest(id=["a"]))
    # ExistOk keeps the namespace (pylance 14 answers 409 whatever the mode; the spec says ok)
    ours.create_namespace(CreateNamespaceRequest(id=["a"], mode="ExistOk"))
    ours.create_namespace(CreateNamespaceRequest(id=["a"], mode="exist_ok"))
    with pytest.raises(lns.InvalidInputError):
        ours.create_namespace(CreateNamespaceRequest(id=["a"], mode="sometimes"))
    # listing a namespace that does not exist: NamespaceNotFound per spec (pylance: [])
    with pytest.raises(lns.NamespaceNotFoundError):
        ours.list_namespaces(ListNamespacesRequest(id=["missing"]))
    # Skip drops nothing and succeeds; Fail (the default) is NamespaceNotFound
    ours.drop_namespace(DropNamespaceRequest(id=["missing"], mode="Skip"))
    with pytest.raises(lns.NamespaceNotFoundError):
        ours.drop_namespace(DropNamespaceRequest(id=["missing"]))
    for _ in range(3):
        ours.create_namespace(CreateNamespaceRequest(id=["a", f"c{_}"]))
    # pages: names after the token, a token while more remain
    first = ours.list_namespaces(ListNamespacesRequest(id=["a"], limit=2))
    assert first.namespaces == ["c0", "c1"] and first.page_token == "c1"
    rest = ours.list_namespaces(ListNamespacesRequest(id=["a"], limit=2, page_token="c1"))
    assert rest.namespaces == ["c2"] and not rest.page_token
    # Cascade (pylance 14 refuses it): tables and child namespaces go, other files stay
    ours.create_table(CreateTableRequest(id=["a", "c1", "t"]), _ipc(_table()))
    ours.create_table(CreateTableRequest(id=["a", "top"]), _ipc(_table()))
    ours.create_namespace(CreateNamespaceRequest(id=["keep"]))
    ours.create_table(CreateTableRequest(id=["keep", "t"]), _ipc(_table()))
    note = os.path.join(nested.our_root, "a", "c2", "notes.txt")
    with open(note, "w") as f:
        f.write("not a table")
    with pytest.raises(lns.NamespaceNotEmptyError):
        ours.drop_namespace(DropNamespaceRequest(id=["a"], behavior="Cascade"))
    assert ours.list_namespaces(ListNamespacesRequest(id=["a"])).namespaces == ["c2"]
    assert ours.list_tables(ListTablesRequest(id=["a"])).tables == []
    os.remove(note)
    ours.drop_namespace(DropNamespaceRequest(id=["a"], behavior="Cascade"))
    assert ours.list_namespaces(ListNamespacesRequest(id=[])).namespaces == ["keep"]
    assert sorted(os.listdir(nested.our_root)) == ["keep"]
    assert lance.dataset(os.path.join(nested.our_root, "keep", "t.lance")).count_rows() == 5


def test_names_are_confined_to_the_root(flat):
    url = flat.server.url
    for raw in ("..$etc", ".hidden", "_versions", "a.lance"):
        status, body = _http(f"{url}/v1/namespace/{raw}/create", body={})
        assert (status, body["code"]) == (400, 13), raw
    assert not os.path.exists(os.path.join(os.path.dirname(flat.our_root), "etc"))
    assert os.listdir(flat.our_root) == []


# -- tables ------------------------------------------------------------------------------------


def _describe(client, ids, **kw):
    return client.describe_table(DescribeTableRequest(id=ids, load_detailed_metadata=True, **kw))


def test_tables_answer_as_pylance(flat):
    same, both = flat.same, flat.both
    data = _table()
    created = both(lambda c: c.create_table(CreateTableRequest(id=["t"]), _ipc(data)))
    assert [r.version for r in created] == [1, 1]
    for r in created:  # a location pylance opens, holding the rows sent
        assert lance.dataset(r.location).to_table() == data
    assert same(lambda c: c.create_table(CreateTableRequest(id=["t"]), _ipc(data))) is (
        lns.TableAlreadyExistsError
    )
    both(lambda c: c.create_table(CreateTableRequest(id=["u"]), _ipc(_table(100, 3))))
    assert same(lambda c: c.list_tables(ListTablesRequest(id=[]))).tables == ["t", "u"]
    same(lambda c: c.table_exists(TableExistsRequest(id=["t"])))
    assert same(lambda c: c.table_exists(TableExistsRequest(id=["zz"]))) is lns.TableNotFoundError
    assert same(lambda c: _describe(c, ["zz"])) is lns.TableNotFoundError

    # inserts and overwrites report rows and versions alike
    for mode, rows in (
        ("append", _table(5, 4)),
        ("append", _table(9, 2)),
        ("overwrite", _table(20, 6)),
    ):
        same(
            lambda c, m=mode, r=rows: c.insert_into_table(
                InsertIntoTableRequest(id=["t"], mode=m), _ipc(r)
            )
        )
    same(lambda c: c.insert_into_table(InsertIntoTableRequest(id=["t"]), _ipc(_table(40, 3))))

    # detailed description: version, schema and statistics as pylance gives them
    ours, theirs = both(lambda c: _describe(c, ["t"]))
    assert (ours.table, ours.namespace, ours.version) == (theirs.table, theirs.namespace, 5)
    assert ours.var_schema == theirs.var_schema
    assert ours.metadata["total_rows"] == theirs.metadata["total_rows"] == "9"
    for key in ("total_fragments", "total_data_files", "total_deletion_files"):
        assert ours.metadata[key] == theirs.metadata[key], key
    assert lance.dataset(ours.location).to_table().equals(lance.dataset(theirs.location).to_table())
    old = both(lambda c: _describe(c, ["t"], version=2))
    assert old[0].version == old[1].version == 2

    # counts: bare integers, with predicates and versions
    for req in (
        CountTableRowsRequest(id=["t"]),
        CountTableRowsRequest(id=["t"], predicate="id > 21"),
        CountTableRowsRequest(id=["t"], version=3, predicate="name = 'n9' OR score < 1"),
    ):
        assert same(lambda c, r=req: c.count_table_rows(r)).count > 0
    assert same(lambda c: c.count_table_rows(CountTableRowsRequest(id=["t"], version=99))) is (
        lns.TableVersionNotFoundError
    )

    # versions: the same history; each entry's manifest is a real file of that size
    ours, theirs = both(lambda c: c.list_table_versions(ListTableVersionsRequest(id=["t"])))
    assert (
        [v.version for v in ours.versions]
        == [v.version for v in theirs.versions]
        == [1, 2, 3, 4, 5]
    )
    for v in ours.versions:
        assert os.path.getsize("/" + v.manifest_path) == v.manifest_size
        assert v.e_tag and v.timestamp_millis > 0
    page = flat.ours.list_table_versions(
        ListTableVersionsRequest(id=["t"], limit=2, descending=True)
    )
    assert [v.version for v in page.versions] == [5, 4]

    # deletes, restore and the data both hold afterwards
    assert [
        r.version
        for r in both(
            lambda c: c.delete_from_table(DeleteFromTableRequest(id=["t"], predicate="id < 23"))
        )
    ] == [6, 6]
    same(
        lambda c: (
            c.restore_table(RestoreTableRequest(id=["t"], version=3)).transaction_id is not None
        )
    )
    with pytest.raises(lns.TableVersionNotFoundError):  # the spec's (pylance 14: Internal)
        flat.ours.restore_table(RestoreTableRequest(id=["t"], version=77))
    _same_data(flat, ["t"])

    # renaming: pylance 14 has no rename; ours moves the directory, into another namespace too
    flat.ours.create_namespace(CreateNamespaceRequest(id=["archive"]))
    flat.ours.rename_table(RenameTableRequest(id=["u"], new_table_name="u2"))
    flat.ours.rename_table(
        RenameTableRequest(id=["u2"], new_table_name="u", new_namespace_id=["archive"])
    )
    assert flat.ours.count_table_rows(CountTableRowsRequest(id=["archive", "u"])).count == 3
    with pytest.raises(lns.TableAlreadyExistsError):
        flat.ours.rename_table(
            RenameTableRequest(id=["t"], new_table_name="u", new_namespace_id=["archive"])
        )
    with pytest.raises(lns.NamespaceNotFoundError):
        flat.ours.rename_table(
            RenameTableRequest(id=["t"], new_table_name="v", new_namespace_id=["nope"])
        )
    flat.ours.rename_table(
        RenameTableRequest(id=["archive", "u"], new_table_name="u", new_namespace_id=[])
    )
    assert lance.dataset(os.path.join(flat.our_root, "u.lance")).count_rows() == 3

    # dropping
    dropped = both(lambda c: c.drop_table(DropTableRequest(id=["u"])))
    assert [d.id for d in dropped] == [["u"], ["u"]]
    assert same(lambda c: c.list_tables(ListTablesRequest(id=[]))).tables == ["t"]
    assert (
        same(lambda c: c.describe_table(DescribeTableRequest(id=["u"]))) is lns.TableNotFoundError
    )


def _same_data(pair: Pair, ids: list[str]) -> None:
    ours, theirs = pair.both(lambda c: _describe(c, ids))
    assert lance.dataset(ours.location).to_table().equals(lance.dataset(theirs.location).to_table())


def _query(client, **kw) -> pa.Table:
    kw.setdefault("k", 0)
    kw.setdefault("vector", {})
    kw.setdefault("id", ["q"])
    data = client.query_table(QueryTableRequest(**kw)).data
    return pa.ipc.open_file(data).read_all()


def test_queries_answer_as_pylance(flat):
    first, second = _table(0, 6), _table(6, 5)
    for client in (flat.ours, flat.theirs):
        client.create_table(CreateTableRequest(id=["q"]), _ipc(first))
        client.insert_into_table(InsertIntoTableRequest(id=["q"]), _ipc(second))
    cases = [
        {},
        {"filter": "id >= 3 AND name <> 'n7'"},
        {"columns": {"column_names": ["name", "id"]}},
        {"columns": {"column_aliases": {"who": "name"}}, "k": 4},
        {"k": 3, "offset": 4},
        {"version": 1, "filter": "score > 1"},
        {"with_row_id": True, "filter": "id % 2 = 0"},
        {"filter": "id > 1000"},
    ]
    for kw in cases:
        ours, theirs = _query(flat.ours, **kw), _query(flat.theirs, **kw)
        assert ours.schema.names == theirs.schema.names, kw
        assert ours.combine_chunks().equals(theirs.combine_chunks()), kw
    # an offset without k skips rows as the spec says (pylance 14 ignores it without k)
    everything = _query(flat.theirs)
    assert _query(flat.ours, offset=9).combine_chunks().equals(everything.slice(9).combine_chunks())
    # unknown columns: TableColumnNotFound per spec (pylance 14: Internal)
    for kw in ({"columns": {"column_names": ["nope"]}}, {"filter": "nope > 1"}):
        with pytest.raises(lns.TableColumnNotFoundError):
            _query(flat.ours, **kw)
    # a vector query over a table with no vector column: the spec's error, as pylance's
    assert flat.both(
        lambda c: _query(c, k=3, vector={"single_vector": [1.0, 2.0]}, vector_column="id")
    ) == [lns.InvalidInputError, lns.InvalidInputError]


def test_large_query_streams_every_row(tmp_path):
    root = str(tmp_path)
    n = 50_000
    table = pa.table(
        {"i": pa.array(range(n), pa.int64()), "s": pc.cast(pa.array(range(n)), pa.string())}
    )
    write_dataset(table, os.path.join(root, "big.lance"), max_rows_per_file=20_000)
    with _serve(root) as server:
        client = ln.RestNamespace(uri=server.url)
        data = client.query_table(
            QueryTableRequest(id=["big"], k=0, vector={}, filter="i % 7 = 0")
        ).data
    got = pa.ipc.open_file(data).read_all()
    want = lance.dataset(os.path.join(root, "big.lance")).to_table(filter="i % 7 = 0")
    assert got.combine_chunks().equals(want.combine_chunks())


def test_tags_answer_as_pylance(flat):
    same = flat.same
    for client in (flat.ours, flat.theirs):
        client.create_table(CreateTableRequest(id=["t"]), _ipc(_table()))
        client.insert_into_table(InsertIntoTableRequest(id=["t"]), _ipc(_table(5)))
    same(lambda c: c.create_table_tag(CreateTableTagRequest(id=["t"], tag="first", version=1)))
    same(lambda c: c.create_table_tag(CreateTableTagRequest(id=["t"], tag="second", version=2)))
    ours, theirs = flat.both(lambda c: c.list_table_tags(ListTableTagsRequest(id=["t"])))
    assert {n: t.version for n, t in ours.tags.items()} == {
        n: t.version for n, t in theirs.tags.items()
    }
    assert (
        same(
            lambda c: c.get_table_tag_version(GetTableTagVersionRequest(id=["t"], tag="second"))
        ).version
        == 2
    )
    errors = [
        (lambda c: c.create_table_tag(CreateTableTagRequest(id=["t"], tag="first", version=2)), lns.TableTagAlreadyExistsError),
        (lambda c: c.create_table_tag(CreateTableTagRequest(id=["t"], tag="later", version=9)), lns.TableVersionNotFoundError),
        (lambda c: c.get_table_tag_version(GetTableTagVersionRequest(id=["t"], tag="nope")), lns.TableTagNotFoundError),
        (lambda c: c.update_table_tag(UpdateTableTagRequest(id=["t"], tag="nope", version=1)), lns.TableTagNotFoundError),
        (lambda c: c.update_table_tag(UpdateTableTagRequest(id=["t"], tag="first", version=9)), lns.TableVersionNotFoundError),
        (lambda c: c.list_table_tags(ListTableTagsRequest(id=["zz"])), lns.TableNotFoundError),
    ]  # fmt: skip
    for call, error in errors:
        assert same(call) is error
    same(lambda c: c.update_table_tag(UpdateTableTagRequest(id=["t"], tag="first", version=2)))
    assert (
        same(
            lambda c: c.get_table_tag_version(GetTableTagVersionRequest(id=["t"], tag="first"))
        ).version
        == 2
    )
    same(lambda c: c.delete_table_tag(DeleteTableTagRequest(id=["t"], tag="first")))
    assert (
        same(lambda c: c.delete_table_tag(DeleteTableTagRequest(id=["t"], tag="first")))
        is lns.TableTagNotFoundError
    )
    # tags written over REST are tags pylance reads
    ours = _describe(flat.ours, ["t"])
    assert lance.dataset(ours.location).tags.list()["second"]["version"] == 2


def test_schema_changes_answer_as_pylance(flat):
    same = flat.same
    for client in (flat.ours, flat.theirs):
        client.create_table(CreateTableRequest(id=["t"]), _ipc(_table()))
    add = AlterTableAddColumnsRequest(
        id=["t"], new_columns=[{"name": "double", "expression": "id * 2"}]
    )
    assert same(lambda c: c.alter_table_add_columns(add)).version == 2
    _same_data(flat, ["t"])
    assert (
        same(
            lambda c: c.alter_table_drop_columns(
                AlterTableDropColumnsRequest(id=["t"], columns=["score"])
            )
        ).version
        == 3
    )
    _same_data(flat, ["t"])
    alter = AlterTableAlterColumnsRequest(
        id=["t"],
        alterations=[{"path": "name", "rename": "label"}, {"path": "id", "nullable": False}],
    )
    assert same(lambda c: c.alter_table_alter_columns(alter)).version == 4
    _same_data(flat, ["t"])
    ours, theirs = flat.both(lambda c: _describe(c, ["t"]))
    assert ours.var_schema == theirs.var_schema
    # unknown columns: TableColumnNotFound per spec (pylance 14: Internal)
    with pytest.raises(lns.TableColumnNotFoundError):
        flat.ours.alter_table_drop_columns(AlterTableDropColumnsRequest(id=["t"], columns=["nope"]))
    bad = AlterTableAlterColumnsRequest(id=["t"], alterations=[{"path": "nope", "rename": "x"}])
    with pytest.raises(lns.TableColumnNotFoundError):
        flat.ours.alter_table_alter_columns(bad)


def test_casts_over_rest_as_pylance_casts(flat):
    """A ``data_type`` alteration casts the column as pylance's ``alter_columns`` does on
    the same data. (pylance 14's own adapter wants the type as a JSON string, which its
    client's model refuses, so pylance's library is the oracle here.)"""
    flat.ours.create_table(CreateTableRequest(id=["t"]), _ipc(_table()))
    location = _describe(flat.ours, ["t"]).location
    oracle = os.path.join(flat.their_root, "oracle.lance")
    lance.write_dataset(_table(), oracle)
    cast = AlterTableAlterColumnsRequest(
        id=["t"],
        alterations=[
            {"path": "id", "data_type": {"type": "int32"}},
            {"path": "score", "data_type": {"type": "float32"}, "rename": "s32"},
        ],
    )
    assert flat.ours.alter_table_alter_columns(cast).version == 2
    theirs = lance.dataset(oracle)
    theirs.alter_columns(
        {"path": "id", "data_type": pa.int32()},
        {"path": "score", "data_type": pa.float32(), "name": "s32"},
    )
    assert lance.dataset(location).to_table() == theirs.to_table()
    assert lance.dataset(location).schema == theirs.schema
    # a cast across kinds is refused, as pylance refuses it; types the JSON form cannot name
    # (no unit) are bad input; nothing is committed by either
    with pytest.raises(OSError):
        theirs.alter_columns({"path": "name", "data_type": pa.int64()})
    across = {"path": "name", "data_type": {"type": "int64"}}
    no_unit = {"path": "id", "data_type": {"type": "timestamp"}}
    for alteration in (across, no_unit):
        with pytest.raises(lns.InvalidInputError):
            flat.ours.alter_table_alter_columns(
                AlterTableAlterColumnsRequest(id=["t"], alterations=[alteration])
            )
    assert lance.dataset(location).version == 2


def test_flight_datasets_are_tables(tmp_path):
    """The REST view holds what the Flight catalog serves: ``nyc/flights`` (no suffix) is table
    ``flights`` of namespace ``nyc``; a table created over REST is a Flight dataset."""
    root = str(tmp_path)
    write_dataset(_table(0, 7), os.path.join(root, "nyc", "flights"))
    write_dataset(_table(0, 2), os.path.join(root, "top.lance"))
    catalog = Catalog(root, SearchCache(1 << 20))
    with RestServer(RestApp(ServiceContext(catalog)), port=0).start() as server:
        client = ln.RestNamespace(uri=server.url)
        assert client.list_namespaces(ListNamespacesRequest(id=[])).namespaces == ["nyc"]
        assert client.list_tables(ListTablesRequest(id=["nyc"])).tables == ["flights"]
        assert client.list_tables(ListTablesRequest(id=[])).tables == ["top"]
        assert client.count_table_rows(CountTableRowsRequest(id=["nyc", "flights"])).count == 7
        client.create_table(CreateTableRequest(id=["nyc", "planes"]), _ipc(_table(0, 3)))
        # the lance-namespace package's own generated client, with a custom delimiter
        http = lnc.ApiClient(lnc.Configuration(host=server.url))
        tables, spaces = lnc.TableApi(http), lnc.NamespaceApi(http)
        assert sorted(tables.list_all_tables().tables) == ["nyc$flights", "nyc$planes", "top"]
        assert tables.list_all_tables(delimiter=".").tables == ["nyc.flights", "nyc.planes", "top"]
        spaces.create_namespace("nyc.2013", lns.CreateNamespaceRequest(), delimiter=".")
        assert spaces.list_namespaces("nyc").namespaces == ["2013"]
        count = lnc.DataApi(http).count_table_rows(
            "nyc.flights", lns.CountTableRowsRequest(predicate="id > 3"), delimiter="."
        )
        assert count == 3
        described = tables.describe_table(
            "nyc$flights", lns.DescribeTableRequest(), load_detailed_metadata=True
        )
        assert described.version == 1 and [f.name for f in described.var_schema.fields] == [
            "id",
            "name",
            "score",
        ]
    assert catalog.names() == ["nyc/flights", "nyc/planes.lance", "top.lance"]
    assert catalog.open("nyc/planes.lance").count_rows() == 3


# -- errors ----------------------------------------------------------------------------------


def test_errors_have_the_spec_codes_and_statuses(flat):
    url = flat.server.url
    flat.ours.create_table(CreateTableRequest(id=["t"]), _ipc(_table()))
    cases = [
        ("/v1/table/t/describe", b"{not json", (400, 13)),
        ("/v1/table/t/query", {"vector": {}}, (400, 13)),  # k is required
        ("/v1/table/t/describe", {"id": ["other"]}, (400, 13)),  # body and route disagree
        ("/v1/table/zz/describe", {}, (404, 4)),
        ("/v1/table/nope$t/describe", {}, (404, 1)),
        ("/v1/table/t/count_rows", {"version": 42}, (404, 11)),
        (
            "/v1/table/t/query",
            {"k": 0, "vector": {}, "columns": {"column_names": ["x"]}},
            (404, 12),
        ),
        ("/v1/table/t/create_index", {"column": "id", "index_type": "BTREE"}, (406, 0)),
        ("/v1/table/t/register", {"location": "/etc"}, (406, 0)),
        ("/v1/table/t/tags/version", {"tag": "nope"}, (404, 8)),
        ("/v1/no/such/route", {}, (404, 13)),
        ("/v1/table/t/count_rows", {"branch": "dev"}, (406, 0)),  # only the main history
    ]
    for path, body, want in cases:
        status, got = _http(url + path, body=body, headers={"content-type": "application/json"})
        assert (status, got["code"]) == want, path
        assert got["error"] and flat.our_root not in got["error"]
    arrow = {"content-type": "application/vnd.apache.arrow.stream"}
    status, got = _http(url + "/v1/table/t/insert", body=b"not arrow", headers=arrow)
    assert (status, got["code"]) == (400, 13)
    wrong = _ipc(pa.table({"other": [1]}))
    status, got = _http(url + "/v1/table/t/insert", body=wrong, headers=arrow)
    assert (status, got["code"]) == (400, 20)
    status, got = _http(url + "/v1/table/t/create", body=_ipc(_table()), headers=arrow)
    assert (status, got["code"]) == (409, 5)
    # a null sent into a non-nullable column is bad input, and nothing is committed
    strict = pa.schema([pa.field("k", pa.int64(), nullable=False)])
    _http(url + "/v1/table/s/create", body=_ipc(pa.table({"k": [1]}, schema=strict)), headers=arrow)
    status, got = _http(
        url + "/v1/table/s/insert", body=_ipc(pa.table({"k": [2, None]})), headers=arrow
    )
    assert (status, got["code"]) == (400, 13)
    assert lance.dataset(os.path.join(flat.our_root, "s.lance")).count_rows() == 1
    # nothing was committed by the failed writes
    assert lance.dataset(os.path.join(flat.our_root, "t.lance")).version == 1


def test_count_rows_is_a_bare_integer_and_query_an_ipc_file(flat):
    flat.ours.create_table(CreateTableRequest(id=["t"]), _ipc(_table()))
    status, body = _http(flat.server.url + "/v1/table/t/count_rows", body={"predicate": "id < 2"})
    assert (status, body) == (200, 2)
    status, raw = _http(flat.server.url + "/v1/table/t/query", body={"k": 2, "vector": {}})
    assert status == 200 and raw[:6] == b"ARROW1" and raw[-6:] == b"ARROW1"
    assert pa.ipc.open_file(raw).read_all() == _table(0, 2)


# -- auth and TLS ------------------------------------------------------------------------------


@pytest.fixture
def secured(tmp_path):
    auth = Authenticator(
        static_tokens={
            READ_TOKEN: Identity("reader", "read"),
            WRITE_TOKEN: Identity("writer", "write"),
        },
        secret="s" * 32,
    )
    write_dataset(_table(), str(tmp_path / "t.lance"))
    server = _serve(str(tmp_path), authenticator=auth)
    yield server, auth
    server.stop()


def test_auth_bearer_and_api_key(secured):
    server, auth = secured

    def client(**headers):
        return ln.RestNamespace(uri=server.url, **{f"header.{k}": v for k, v in headers.items()})

    count = CountTableRowsRequest(id=["t"])
    with pytest.raises(lns.UnauthenticatedError):
        client().count_table_rows(count)
    with pytest.raises(lns.UnauthenticatedError):
        client(Authorization="Bearer wrong-token-000000000").count_table_rows(count)
    assert client(Authorization=f"Bearer {READ_TOKEN}").count_table_rows(count).count == 5
    assert client(**{"x-api-key": READ_TOKEN}).count_table_rows(count).count == 5
    signed = auth.issue_token(Identity("alice", "write"))
    assert client(Authorization=f"Bearer {signed}").count_table_rows(count).count == 5
    # writes need the write role
    insert = InsertIntoTableRequest(id=["t"])
    with pytest.raises(lns.PermissionDeniedError):
        client(**{"x-api-key": READ_TOKEN}).insert_into_table(insert, _ipc(_table(5, 1)))
    done = client(**{"x-api-key": WRITE_TOKEN}).insert_into_table(insert, _ipc(_table(5, 1)))
    assert (done.num_inserted_rows, done.version) == (1, 2)
    # the body's identity counts when no header is sent; unsupported routes ask for auth too
    status, body = _http(
        server.url + "/v1/table/t/count_rows", body={"identity": {"api_key": READ_TOKEN}}
    )
    assert (status, body) == (200, 6)
    status, body = _http(server.url + "/v1/table/t/create_scalar_index", body={})
    assert (status, body["code"]) == (401, 16)
    status, body = _http(
        server.url + "/v1/table/t/count_rows", body={}, headers={"Authorization": "Basic dXNlcjpw"}
    )
    assert (status, body["code"]) == (401, 16)


def test_tls(tmp_path):
    cert, key = make_self_signed_cert(tmp_path)
    root = tmp_path / "root"
    write_dataset(_table(), str(root / "t.lance"))
    app = RestApp(ServiceContext(Catalog(str(root), SearchCache(1 << 20))))
    with RestServer(app, port=0, tls_cert=str(cert), tls_key=str(key)).start() as server:
        assert server.url.startswith("https://")
        context = ssl.create_default_context(cafile=str(cert))
        status, body = _http(server.url + "/v1/table/t/count_rows", body={}, context=context)
        assert (status, body) == (200, 5)
        with pytest.raises(urllib.error.URLError):  # an untrusting client refuses it
            _http(
                server.url + "/v1/table/t/count_rows", body={}, context=ssl.create_default_context()
            )


# -- the server command ------------------------------------------------------------------------


def test_serve_rest_port_with_workers(tmp_path):
    """``serve --rest-port 0 --workers 2``: both workers answer on one REST port, with the
    Flight server's tokens, and a table created over REST is a Flight dataset."""
    import pyarrow.flight as fl
    from flight_fixtures import serve

    root = tmp_path / "root"
    write_dataset(_table(0, 4), str(root / "nyc" / "flights"))
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{WRITE_TOKEN} writer write\n")
    args = (
        "--workers",
        "2",
        "--rest-port",
        "0",
        "--auth-tokens",
        str(tokens),
        "--no-sql",
        "--shutdown-grace",
        "1",
    )
    with serve(str(root), *args) as srv:
        line = srv.process.stdout.readline().strip()
        assert line.startswith("Lance Namespace REST API on http://127.0.0.1:")
        url = line.rsplit(" ", 1)[1]
        client = ln.RestNamespace(uri=url, **{"header.Authorization": f"Bearer {WRITE_TOKEN}"})
        client.create_table(CreateTableRequest(id=["nyc", "planes"]), _ipc(_table(0, 3)))
        for _ in range(6):  # new connections, spread over both workers by the kernel
            fresh = ln.RestNamespace(uri=url, **{"header.x-api-key": WRITE_TOKEN})
            assert fresh.list_tables(ListTablesRequest(id=["nyc"])).tables == ["flights", "planes"]
        with pytest.raises(lns.UnauthenticatedError):
            ln.RestNamespace(uri=url).list_tables(ListTablesRequest(id=["nyc"]))
        flight = fl.connect(srv.location)
        options = fl.FlightCallOptions(
            headers=[(b"authorization", f"Bearer {WRITE_TOKEN}".encode())]
        )
        info = flight.get_flight_info(fl.FlightDescriptor.for_path("nyc/planes.lance"), options)
        assert info.total_records == 3


def test_metrics_request_log_and_version_description(tmp_path, caplog):
    from flight_server.metrics import ServerMetrics

    write_dataset(_table(), str(tmp_path / "t.lance"))
    write_dataset(_table(5, 2), str(tmp_path / "t.lance"), mode="append")
    metrics = ServerMetrics()
    with _serve(str(tmp_path), metrics=metrics) as server:
        caplog.set_level("INFO", logger="flight_server.requests")
        headers = {"x-request-id": "trace-42"}
        status, body = _http(server.url + "/v1/table/t/count_rows", body={}, headers=headers)
        assert (status, body) == (200, 7)
        status, body = _http(server.url + "/v1/table/zz/count_rows", body={})
        assert (status, body["code"]) == (404, 4)
        client = ln.RestNamespace(uri=server.url)
        described = client.describe_table_version({"id": ["t"], "version": 1})
        listed = client.list_table_versions(ListTableVersionsRequest(id=["t"])).versions[0]
        # an empty table from a schema-only stream
        made = client.create_table(CreateTableRequest(id=["e"]), _ipc(_table().slice(0, 0)))
        client.insert_into_table(InsertIntoTableRequest(id=["e"]), _ipc(_table(0, 2)))
        served = client.query_table(QueryTableRequest(id=["t"], k=0, vector={}, filter="id > 2"))
    assert described["version"]["version"] == 1
    assert described["version"]["manifest_path"] == listed.manifest_path
    assert made.version == 1 and lance.dataset(made.location, version=1).count_rows() == 0
    assert lance.dataset(made.location).schema == _table().schema
    assert metrics.value("lance_flight_rows_written_total") == 2
    assert metrics.value("lance_flight_bytes_written_total") > 0
    rows_served = metrics.value("lance_flight_rows_served_total")
    assert rows_served == pa.ipc.open_file(served.data).read_all().num_rows == 4
    requests = "lance_flight_requests_total"
    assert metrics.value(requests, method="rest.count_table_rows", status="OK") == 1
    assert metrics.value(requests, method="rest.count_table_rows", status="TABLE_NOT_FOUND") == 1
    lines = [text(r) for r in caplog.records if r.name == "flight_server.requests"]
    assert any("request_id=trace-42" in line and "status=OK" in line for line in lines)
    assert any("status=TABLE_NOT_FOUND" in line and "http_status=404" in line for line in lines)


def test_concurrent_inserts_all_land(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    write_dataset(_table(), str(tmp_path / "t.lance"))
    with _serve(str(tmp_path)) as server:

        def insert(i: int) -> int:
            client = ln.RestNamespace(uri=server.url)
            done = client.insert_into_table(
                InsertIntoTableRequest(id=["t"]), _ipc(_table(100 * i, 3))
            )
            return done.version

        with ThreadPoolExecutor(4) as pool:
            versions = list(pool.map(insert, range(1, 7)))
    assert sorted(versions) == list(range(2, 8))  # every append committed, each once
    got = lance.dataset(str(tmp_path / "t.lance")).to_table().sort_by("id")
    want = pa.concat_tables([_table()] + [_table(100 * i, 3) for i in range(1, 7)])
    assert got.equals(want.sort_by("id"))


def test_uploads_need_credentials_before_the_body_is_read(secured, tmp_path):
    server, _ = secured
    arrow = {"content-type": "application/vnd.apache.arrow.stream"}
    status, body = _http(server.url + "/v1/table/t/insert", body=_ipc(_table(9, 1)), headers=arrow)
    assert (status, body["code"]) == (401, 16)
    read = {**arrow, "x-api-key": READ_TOKEN}
    status, body = _http(server.url + "/v1/table/t/insert", body=_ipc(_table(9, 1)), headers=read)
    assert (status, body["code"]) == (403, 15)
    status, body = _http(server.url + "/v1/table/new/create", body=_ipc(_table()), headers=read)
    assert (status, body["code"]) == (403, 15)
    assert sorted(os.listdir(os.path.dirname(server.app.catalog.root + "/"))) == ["t.lance"]
    assert lance.dataset(os.path.join(server.app.catalog.root, "t.lance")).version == 1


def test_describe_a_copy_of_one_root_as_pylance(flat):
    """A pylance-written table with many types, deletions and metadata, copied into both
    roots: DescribeTable's schema and statistics are pylance's exactly."""
    import shutil

    table = pa.table(
        {
            "i32": pa.array([1, 2, 3, 4], pa.int32()),
            "s": ["x", None, "z", "w"],
            "st": [{"p": 1, "q": "a"}] * 4,
            "l": [[1, 2]] * 4,
            "ll": pa.array([["a"]] * 4, pa.large_list(pa.large_string())),
            "fsl": pa.array([[1.0, 2.0]] * 4, pa.list_(pa.float32(), 2)),
            "ts": pa.array([1, 2, 3, 4], pa.timestamp("us", tz="UTC")),
            "d": pa.array([1, 2, 3, 4], pa.date32()),
            "dec": pa.array([1, 2, 3, 4], pa.decimal128(10, 2)),
            "b": [True, False, None, True],
            "bin": [b"a", b"b", b"c", b"d"],
            "lb": pa.array([b"x"] * 4, pa.large_binary()),
            "fsb": pa.array([b"ab"] * 4, pa.binary(2)),
            "f16": pa.array([1, 2, 3, 4], pa.float16()),
            "u8": pa.array([1, 2, 3, 4], pa.uint8()),
            "t32": pa.array([1, 2, 3, 4], pa.time32("ms")),
            "du": pa.array([1, 2, 3, 4], pa.duration("s")),
        }
    ).replace_schema_metadata({"owner": "ops"})
    source = os.path.join(flat.our_root, "wide.lance")
    lance.write_dataset(table, source, max_rows_per_file=2)
    lance.dataset(source).delete("i32 = 2")
    shutil.copytree(source, os.path.join(flat.their_root, "wide.lance"))
    for version in (None, 1):
        kw = {} if version is None else {"version": version}
        ours, theirs = flat.both(lambda c, kw=kw: _describe(c, ["wide"], **kw))
        assert ours.var_schema == theirs.var_schema
        assert ours.metadata == theirs.metadata
        assert ours.version == theirs.version
    ours, theirs = flat.both(lambda c: c.list_table_versions(ListTableVersionsRequest(id=["wide"])))
    for a, b in zip(ours.versions, theirs.versions, strict=True):
        assert (a.version, a.manifest_size, a.timestamp_millis) == (
            b.version,
            b.manifest_size,
            b.timestamp_millis,
        )
        assert a.manifest_path.rsplit("/", 1)[1] == b.manifest_path.rsplit("/", 1)[1]


def test_oauth_client_credentials_trade_a_password_for_a_token(tmp_path):
    """The spec's OAuth2 flow (``POST /oauth/token``): the token works for pylance's client
    and the Flight server alike (one signer)."""
    from urllib.parse import urlencode

    from flight_server.auth import hash_password

    users = {"ana": (hash_password("s3cret", iterations=1000), "write")}
    auth = Authenticator(users, secret="k" * 32)
    write_dataset(_table(), str(tmp_path / "t.lance"))
    form = {"content-type": "application/x-www-form-urlencoded"}
    with _serve(str(tmp_path), authenticator=auth) as server:
        url = server.url + "/oauth/token"
        good = urlencode(
            {"grant_type": "client_credentials", "client_id": "ana", "client_secret": "s3cret"}
        )
        status, body = _http(url, body=good.encode(), headers=form)
        assert status == 200 and body["token_type"] == "Bearer" and body["expires_in"] > 0
        assert auth.verify_token(body["access_token"]) == Identity("ana", "write")
        client = ln.RestNamespace(
            uri=server.url, **{"header.Authorization": f"Bearer {body['access_token']}"}
        )
        assert client.count_table_rows(CountTableRowsRequest(id=["t"])).count == 5
        basic = {**form, "authorization": "Basic YW5hOnMzY3JldA=="}  # ana:s3cret
        status, body = _http(url, body=b"grant_type=client_credentials", headers=basic)
        assert status == 200 and auth.verify_token(body["access_token"]).user == "ana"
        bad = urlencode(
            {"grant_type": "client_credentials", "client_id": "ana", "client_secret": "no"}
        )
        status, body = _http(url, body=bad.encode(), headers=form)
        assert (status, body["error"]) == (401, "invalid_client") and "access_token" not in body
        status, body = _http(url, body=b"grant_type=password", headers=form)
        assert (status, body["error"]) == (400, "unsupported_grant_type")


def test_bodies_beyond_the_limit_are_refused(tmp_path):
    write_dataset(_table(), str(tmp_path / "t.lance"))
    big = _ipc(_table(0, 2000))
    arrow = {"content-type": "application/vnd.apache.arrow.stream"}
    with _serve(str(tmp_path), max_body_bytes=len(big) - 1) as server:
        status, body = _http(server.url + "/v1/table/t/insert", body=big, headers=arrow)
        assert (status, body["code"]) == (400, 13) and "exceeds" in body["error"]
        status, body = _http(
            server.url + "/v1/table/t/insert", body=_ipc(_table(5, 1)), headers=arrow
        )
        assert (status, body["version"]) == (200, 2)
    assert lance.dataset(str(tmp_path / "t.lance")).count_rows() == 6


# -- update and merge-insert -----------------------------------------------------------------


def _same_rows(pair: Pair, ids: list[str]) -> None:
    """The same rows read back with pylance, in key order (a merge may place rows anywhere)."""
    ours, theirs = pair.both(lambda c: _describe(c, ids))
    read = [lance.dataset(d.location).to_table().sort_by("id") for d in (ours, theirs)]
    assert read[0].equals(read[1])


def test_update_and_merge_insert_answer_as_pylance(flat):
    both = flat.both
    for client in (flat.ours, flat.theirs):
        client.create_table(CreateTableRequest(id=["t"]), _ipc(_table(0, 8)))
    ours, theirs = both(
        lambda c: c.update_table(
            UpdateTableRequest(
                id=["t"], predicate="id >= 5", updates=[["score", "score * 10"], ["name", "'big'"]]
            )
        )
    )
    assert (ours.updated_rows, ours.version) == (theirs.updated_rows, theirs.version) == (3, 2)
    _same_data(flat, ["t"])
    # every row when there is no predicate
    ours, theirs = both(
        lambda c: c.update_table(UpdateTableRequest(id=["t"], updates=[["id", "id + 100"]]))
    )
    assert ours.updated_rows == theirs.updated_rows == 8
    _same_data(flat, ["t"])

    # upsert: rows 104..107 updated (those with score > 2 only), 200..201 inserted
    source = pa.concat_tables([_table(104, 4), _table(200, 2)])
    req = MergeInsertIntoTableRequest(
        id=["t"],
        on=["id"],
        when_matched_update_all=True,
        when_matched_update_all_filt="target.score > 2",
        when_not_matched_insert_all=True,
    )
    ours, theirs = both(lambda c: c.merge_insert_into_table(req, _ipc(source)))
    for field in ("num_inserted_rows", "num_updated_rows", "num_deleted_rows", "version"):
        assert getattr(ours, field) == getattr(theirs, field), field
    assert (ours.num_updated_rows, ours.num_inserted_rows) == (3, 2)
    _same_rows(flat, ["t"])
    # by-source delete with a condition, matched rows updated
    req = MergeInsertIntoTableRequest(
        id=["t"],
        on=["id"],
        when_matched_update_all=True,
        when_not_matched_by_source_delete=True,
        when_not_matched_by_source_delete_filt="id < 103",
    )
    ours, theirs = both(lambda c: c.merge_insert_into_table(req, _ipc(_table(200, 2))))
    for field in ("num_inserted_rows", "num_updated_rows", "num_deleted_rows", "version"):
        assert getattr(ours, field) == getattr(theirs, field), field
    assert ours.num_deleted_rows == 3
    _same_rows(flat, ["t"])
    # the same errors: an unknown table, an unknown column
    assert (
        flat.same(lambda c: c.update_table(UpdateTableRequest(id=["nope"], updates=[["id", "1"]])))
        is lns.TableNotFoundError
    )
    # an unknown column: the spec's TableColumnNotFound (pylance 14 answers InvalidInput)
    bad = [
        lambda c: c.update_table(UpdateTableRequest(id=["t"], updates=[["nope", "1"]])),
        lambda c: c.update_table(UpdateTableRequest(id=["t"], updates=[["id", "nope + 1"]])),
        lambda c: c.merge_insert_into_table(
            MergeInsertIntoTableRequest(id=["t"], on=["nope"], when_not_matched_insert_all=True),
            _ipc(_table(0, 1)),
        ),
    ]
    for call in bad:
        assert flat.both(call) == [lns.TableColumnNotFoundError, lns.InvalidInputError]
    _same_rows(flat, ["t"])  # nothing committed by a refused change


def test_merge_insert_on_a_composite_key_as_pylance(flat):
    """``on`` repeated in the query: a row matches only when every key column is equal."""
    for client in (flat.ours, flat.theirs):
        client.create_table(CreateTableRequest(id=["t"]), _ipc(_table(0, 4)))
    source = _table(2, 4).set_column(1, "name", pa.array(["n2", "other", "n4", "n5"]))
    req = MergeInsertIntoTableRequest(
        id=["t"], on=["id", "name"], when_matched_update_all=True, when_not_matched_insert_all=True
    )
    ours, theirs = flat.both(lambda c: c.merge_insert_into_table(req, _ipc(source)))
    for field in ("num_inserted_rows", "num_updated_rows", "num_deleted_rows", "version"):
        assert getattr(ours, field) == getattr(theirs, field), field
    assert (ours.num_updated_rows, ours.num_inserted_rows) == (1, 3)
    read = [
        lance.dataset(d.location).to_table().sort_by([("id", "ascending"), ("name", "ascending")])
        for d in flat.both(lambda c: _describe(c, ["t"]))
    ]
    assert read[0].equals(read[1])


def text(record) -> str:
    """The line the server's text formatter writes for ``record``."""
    return LogfmtFormatter().format(record)


# -- indexes and vector queries ------------------------------------------------------------


def _vectors(n: int, dim: int, seed: int, start: int = 0) -> pa.Table:
    import numpy as np

    rng = np.random.default_rng(seed)
    values = pa.array(rng.standard_normal(n * dim).astype("float32"))
    return pa.table(
        {
            "id": pa.array(range(start, start + n), pa.int64()),
            "label": [f"r{i % 7}" for i in range(start, start + n)],
            "vec": pa.FixedSizeListArray.from_arrays(values, dim),
        }
    )


def _indices(url: str, table: str) -> list:
    api = lnc.TableApi(lnc.ApiClient(lnc.Configuration(host=url)))
    return api.list_table_indices(table, lnc.ListTableIndicesRequest(id=[table])).indexes


def _comparable(content) -> dict:
    """An IndexContent without what differs between two builds (uuid, size, time) and
    pylance's runtime hints (build parameters it records and we do not)."""
    out = content.to_dict()
    for key in ("index_uuid", "size_bytes", "created_at"):
        assert out.pop(key) is not None, key
    details = json.loads(out.pop("index_details"))
    details.pop("runtime_hints", None)
    return {**out, "index_details": details}


def test_index_operations_answer_as_pylance(flat):
    """CreateTableIndex, ListTableIndices, DescribeTableIndexStats and DropTableIndex on
    the same table through both servers: the same indexes listed, the same statistics, the
    same errors."""
    from lance_namespace import (
        CreateTableIndexRequest,
        DescribeTableIndexStatsRequest,
        DropTableIndexRequest,
    )

    both = flat.both
    for client in (flat.ours, flat.theirs):
        client.create_table(CreateTableRequest(id=["v"]), _ipc(_vectors(1200, 16, seed=1)))
    # 16 sub-vectors of one dimension: pylance's adapter builds that whatever it is asked
    pq = CreateTableIndexRequest(
        id=["v"],
        column="vec",
        index_type="IVF_PQ",
        distance_type="cosine",
        num_partitions=2,
        num_sub_vectors=16,
    )
    flat_index = CreateTableIndexRequest(
        id=["v"], column="vec", index_type="IVF_FLAT", name="flat", num_partitions=2
    )
    for req in (pq, flat_index):
        ours, theirs = both(lambda c, req=req: c.create_table_index(req))
        assert ours.transaction_id and theirs.transaction_id
    assert both(lambda c: c.create_table_index(pq)) == [lns.TableIndexAlreadyExistsError] * 2
    ours, theirs = (
        _indices(flat.server.url, "v"),
        _indices(f"http://127.0.0.1:{flat.adapter.port}", "v"),
    )
    assert [_comparable(i) for i in ours] == [_comparable(i) for i in theirs]
    assert [i.index_name for i in ours] == ["flat", "vec_idx"]
    # rows appended after the build are unindexed, for both
    for client in (flat.ours, flat.theirs):
        client.insert_into_table(InsertIntoTableRequest(id=["v"]), _ipc(_vectors(50, 16, 2, 1200)))
    for name, metric in (("vec_idx", "cosine"), ("flat", "l2")):
        req = DescribeTableIndexStatsRequest(id=["v"], index_name=name)
        ours, theirs = both(lambda c, req=req: c.describe_table_index_stats(req))
        # the spec's distance_type (pylance 14's adapter leaves it out)
        assert (ours.distance_type, theirs.distance_type) == (metric, None)
        ours.distance_type = None
        assert ours == theirs
        assert (ours.num_indexed_rows, ours.num_unindexed_rows, ours.num_indices) == (1200, 50, 1)
    missing = DescribeTableIndexStatsRequest(id=["v"], index_name="nope")
    assert (
        both(lambda c: c.describe_table_index_stats(missing)) == [lns.TableIndexNotFoundError] * 2
    )
    drop = DropTableIndexRequest(id=["v"], index_name="flat")
    ours, theirs = both(lambda c: c.drop_table_index(drop))
    assert ours.transaction_id and theirs.transaction_id
    assert both(lambda c: c.drop_table_index(drop)) == [lns.TableIndexNotFoundError] * 2
    assert [i.index_name for i in _indices(flat.server.url, "v")] == ["vec_idx"]
    # pylance reads what our server built and dropped
    assert [
        i.name for i in lance.dataset(os.path.join(flat.our_root, "v.lance")).describe_indices()
    ] == ["vec_idx"]
    # what this server does not build is refused with the spec's error, nothing committed
    version = lance.dataset(os.path.join(flat.our_root, "v.lance")).version
    for bad, error in (
        ({"index_type": "BTREE", "column": "id"}, lns.UnsupportedOperationError),
        ({"index_type": "IVF_HNSW_SQ", "column": "vec"}, lns.UnsupportedOperationError),
        ({"index_type": "IVF_PQ", "column": "vec", "name": "x"}, lns.InvalidInputError),
        ({"index_type": "IVF_FLAT", "column": "id", "name": "x"}, lns.InvalidInputError),
    ):
        with pytest.raises(error):
            flat.ours.create_table_index(CreateTableIndexRequest(id=["v"], **bad))
    assert lance.dataset(os.path.join(flat.our_root, "v.lance")).version == version


def test_vector_queries_answer_as_pylance(flat):
    """QueryTable's vector fields over a copy of one table with an index our server built:
    pylance's adapter and our server return the same rows and distances."""
    import shutil

    import numpy as np
    from lance_namespace import CreateTableIndexRequest

    flat.ours.create_table(CreateTableRequest(id=["v"]), _ipc(_vectors(1500, 16, seed=3)))
    flat.ours.create_table_index(
        CreateTableIndexRequest(
            id=["v"], column="vec", index_type="IVF_PQ", num_partitions=4, num_sub_vectors=4
        )
    )
    flat.ours.insert_into_table(InsertIntoTableRequest(id=["v"]), _ipc(_vectors(60, 16, 4, 1500)))
    shutil.copytree(
        os.path.join(flat.our_root, "v.lance"), os.path.join(flat.their_root, "v.lance")
    )
    q = np.random.default_rng(9).standard_normal(16).astype("float32").tolist()
    base = {"vector": {"single_vector": q}, "vector_column": "vec", "k": 7}
    cases = [
        {},
        {"columns": {"column_names": ["id"]}, "nprobes": 2},
        {"with_row_id": True, "nprobes": 1, "refine_factor": 3},
        {"filter": "label = 'r2'", "prefilter": True, "nprobes": 2},
        {"filter": "label = 'r2'", "columns": {"column_names": ["id", "label"]}},
        {"bypass_vector_index": True, "distance_type": "dot"},
        {"fast_search": True, "nprobes": 4},
        {"offset": 3, "distance_type": "l2", "columns": {"column_names": ["id"]}},
        {"columns": {"column_aliases": {"key": "id"}}, "nprobes": 3},
    ]
    for kw in cases:
        ours, theirs = (
            _query(flat.ours, id=["v"], **{**base, **kw}),
            _query(flat.theirs, id=["v"], **{**base, **kw}),
        )
        assert ours.schema.names == theirs.schema.names, kw
        assert ours["_distance"].type == pa.float32()
        for name in ours.schema.names:
            if name == "_distance":
                np.testing.assert_allclose(
                    ours[name].to_numpy(), theirs[name].to_numpy(), rtol=2e-5, atol=1e-5
                )
            else:
                assert ours[name].to_pylist() == theirs[name].to_pylist(), (kw, name)
    # the same errors for a wrong dimension, an unknown metric or column
    for kw in (
        {"vector": {"single_vector": q[:3]}},
        {"distance_type": "manhattan"},
        {"vector_column": "nope"},
    ):
        assert flat.both(lambda c, kw=kw: _query(c, id=["v"], **{**base, **kw}))[0] in (
            lns.InvalidInputError,
            lns.TableColumnNotFoundError,
        )
    # options this server does not implement are refused, never ignored
    for kw in ({"vector": {"multi_vector": [q, q]}}, {"lower_bound": 0.5}, {"ef": 10}):
        with pytest.raises(lns.UnsupportedOperationError):
            _query(flat.ours, id=["v"], **{**base, **kw})


def test_merge_insert_timeout_and_use_index(flat):
    """MergeInsert's ``timeout`` bounds its retries and ``use_index`` is a lookup hint: the
    rows changed are pylance's; a timeout that is not a duration is invalid input."""
    for client in (flat.ours, flat.theirs):
        client.create_table(CreateTableRequest(id=["t"]), _ipc(_table(0, 6)))
    for use_index in (True, False):
        req = MergeInsertIntoTableRequest(
            id=["t"],
            on=["id"],
            when_matched_update_all=True,
            when_not_matched_insert_all=True,
            timeout="30s",
            use_index=use_index,
        )
        ours, theirs = flat.both(
            lambda c, req=req: c.merge_insert_into_table(req, _ipc(_table(4, 4)))
        )
        assert (ours.num_updated_rows, ours.num_inserted_rows) == (
            theirs.num_updated_rows,
            theirs.num_inserted_rows,
        )
        _same_rows(flat, ["t"])
    bad = MergeInsertIntoTableRequest(
        id=["t"], on=["id"], when_not_matched_insert_all=True, timeout="soon"
    )
    with pytest.raises(lns.InvalidInputError):
        flat.ours.merge_insert_into_table(bad, _ipc(_table(50, 1)))
