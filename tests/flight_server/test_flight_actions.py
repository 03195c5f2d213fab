"""``do_action`` through a real ``pyarrow.flight`` client against ``lance-flight serve``.

Every action's effect is checked with pylance (``lance.dataset(...)``) on the same files.
"""

from __future__ import annotations

import json
import os

import lance
import pyarrow as pa
import pyarrow.flight as fl
import pytest
from flight_fixtures import CLIENT_ERRORS, action, cmd, make_table, read_info, serve

from flight_server.errors import error_kind

EVERY_ACTION = {
    "list_datasets",
    "dataset_info",
    "versions",
    "create_tag",
    "delete_tag",
    "restore",
    "delete",
    "update",
    "add_columns",
    "drop_columns",
    "create_index",
    "drop_index",
    "list_indices",
    "describe_indices",
    "compact",
    "cleanup",
    "commit_staged",
    "discard_staged",
    "cache_stats",
    "health",
}


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("root")
    lance.write_dataset(make_table(3000), str(root / "a" / "one"), max_rows_per_file=1000)
    lance.write_dataset(make_table(10), str(root / "two"), data_storage_version="2.0")
    lance.dataset(str(root / "two")).tags.create("v1", 1)
    return str(root)


@pytest.fixture(scope="module")
def server(root):
    with serve(root, "--cache-bytes", "32M") as s:
        yield s
    assert s.process.returncode == 0


@pytest.fixture
def client(server):
    c = fl.connect(server.location)
    yield c
    c.close()


def _fails(client, kind: str, name: str, **body) -> str:
    with pytest.raises(CLIENT_ERRORS[kind]) as e:
        action(client, name, **body)
    assert error_kind(e.value) == kind, (name, body, str(e.value))
    assert "Traceback" not in str(e.value)
    return str(e.value)


def test_list_actions_describes_every_action(client):
    listed = {a.type: a.description for a in client.list_actions()}
    assert EVERY_ACTION <= set(listed)
    assert all(len(listed[name]) > 10 for name in EVERY_ACTION)


def test_list_datasets_and_dataset_info(client, root):
    assert {"a/one", "two"} <= set(action(client, "list_datasets")["datasets"])
    uri = os.path.join(root, "a", "one")
    theirs = lance.dataset(uri)
    info = action(client, "dataset_info", dataset="a/one")
    assert info["version"] == info["latest_version"] == theirs.version
    assert info["rows"] == theirs.count_rows()
    assert info["data_storage_version"] == theirs.data_storage_version
    assert [f["name"] for f in info["schema"]] == theirs.schema.names
    assert [f["type"] for f in info["schema"]] == [str(f.type) for f in theirs.schema]
    assert [f["id"] for f in info["fragments"]] == [f.fragment_id for f in theirs.get_fragments()]
    assert [f["rows"] for f in info["fragments"]] == [
        f.count_rows() for f in theirs.get_fragments()
    ]
    on_disk = sum(
        os.path.getsize(os.path.join(uri, "data", df.path))
        for f in theirs.get_fragments()
        for df in f.data_files()
    )
    assert info["bytes"] == on_disk
    assert set(info["encodings"]) == {"id", "x", "s"}
    assert info["versions"] == [v["version"] for v in theirs.versions()]
    old = action(client, "dataset_info", dataset="two", version=1)
    assert old["data_storage_version"] == "2.0" and old["rows"] == 10


def test_history_actions(client, root):
    uri = os.path.join(root, "hist")
    lance.write_dataset(make_table(3000), uri, max_rows_per_file=500)  # v1, 6 fragments
    out = action(client, "delete", dataset="hist", filter="id < 1200")  # v2
    assert out == {"dataset": "hist", "version": 2, "deleted": 1200}
    assert lance.dataset(uri).count_rows() == 1800
    out = action(client, "create_tag", dataset="hist", tag="before", version=1)
    assert out["version"] == 1 and lance.dataset(uri).tags.list()["before"]["version"] == 1
    action(client, "create_tag", dataset="hist", tag="latest")
    assert lance.dataset(uri).tags.list()["latest"]["version"] == 2
    out = action(client, "add_columns", dataset="hist", columns={"y": "id * 2"})  # v3
    assert out["version"] == 3 and "y" in [f["name"] for f in out["schema"]]
    got = lance.dataset(uri).to_table(columns=["id", "y"])
    assert got.column("y").to_pylist() == [2 * i for i in got.column("id").to_pylist()]
    action(client, "drop_columns", dataset="hist", columns=["x"])  # v4
    assert lance.dataset(uri).schema.names == ["id", "s", "y"]
    out = action(client, "compact", dataset="hist", target_rows_per_fragment=1000)
    assert out["fragments_removed"] > 0 and out["version"] == lance.dataset(uri).version > 4
    compacted = out["version"]
    assert lance.dataset(uri).to_table(columns=["id"])["id"].to_pylist() == list(range(1200, 3000))
    versions = action(client, "versions", dataset="hist")
    assert versions["latest"] == compacted
    assert [v["version"] for v in versions["versions"]] == [
        v["version"] for v in lance.dataset(uri).versions()
    ]
    restored = action(client, "restore", dataset="hist", version="before")
    assert restored == {"dataset": "hist", "restored": 1, "version": compacted + 1}
    assert lance.dataset(uri).to_table().equals(lance.dataset(uri, version=1).to_table())
    assert action(client, "delete_tag", dataset="hist", tag="before")["deleted"] == "before"
    assert set(lance.dataset(uri).tags.list()) == {"latest"}
    # cleanup keeps the latest and tagged versions; tickets of removed versions: NOT_FOUND
    info = client.get_flight_info(cmd(dataset="hist", version=3))
    stats = action(client, "cleanup", dataset="hist", older_than_seconds=0)
    assert stats["old_versions"] >= 3
    kept = [v["version"] for v in lance.dataset(uri).versions()]
    assert kept == [2, compacted + 1]
    with pytest.raises(pa.ArrowKeyError) as e:
        read_info(client, info)
    assert error_kind(e.value) == "NOT_FOUND"
    assert lance.dataset(uri).count_rows() == 3000


def test_cache_stats_and_health(client, server):
    stats = action(client, "cache_stats")
    assert stats["capacity_bytes"] == 32 << 20
    assert stats["bytes"] > 0 and stats["entries"] > 0  # warmed at start-up
    health = action(client, "health")
    assert health["status"] == "ok" and health["pid"] == server.process.pid
    assert health["datasets"] == len(action(client, "list_datasets")["datasets"])
    assert health["cache"]["capacity_bytes"] == 32 << 20


@pytest.mark.parametrize(
    "name,body,kind",
    [
        ("list_datasets", {"bogus": 1}, "INVALID_ARGUMENT"),
        ("dataset_info", {}, "INVALID_ARGUMENT"),
        ("dataset_info", {"dataset": 3}, "INVALID_ARGUMENT"),
        ("dataset_info", {"dataset": "nope"}, "NOT_FOUND"),
        ("dataset_info", {"dataset": "two", "version": 9}, "NOT_FOUND"),
        ("dataset_info", {"dataset": "../two"}, "INVALID_ARGUMENT"),
        ("versions", {"dataset": "two", "extra": True}, "INVALID_ARGUMENT"),
        ("create_tag", {"dataset": "two"}, "INVALID_ARGUMENT"),
        ("create_tag", {"dataset": "two", "tag": "t", "version": 5}, "NOT_FOUND"),
        ("create_tag", {"dataset": "two", "tag": "v1"}, "ALREADY_EXISTS"),
        ("create_tag", {"dataset": "two", "tag": "a/b"}, "INVALID_ARGUMENT"),
        ("delete_tag", {"dataset": "two", "tag": "nope"}, "NOT_FOUND"),
        ("restore", {"dataset": "two"}, "INVALID_ARGUMENT"),
        ("restore", {"dataset": "two", "version": "nope"}, "NOT_FOUND"),
        ("delete", {"dataset": "two"}, "INVALID_ARGUMENT"),
        ("delete", {"dataset": "two", "filter": "nope = 1"}, "INVALID_ARGUMENT"),
        ("update", {"dataset": "two"}, "INVALID_ARGUMENT"),
        ("update", {"dataset": "two", "values": {"x": 1}}, "INVALID_ARGUMENT"),
        ("update", {"dataset": "two", "values": {"nope": "1"}}, "INVALID_ARGUMENT"),
        ("update", {"dataset": "two", "values": {"x": "0"}, "where": ""}, "INVALID_ARGUMENT"),
        ("update", {"dataset": "two", "values": {"x": "nope + 1"}}, "INVALID_ARGUMENT"),
        ("add_columns", {"dataset": "two", "columns": ["y"]}, "INVALID_ARGUMENT"),
        ("add_columns", {"dataset": "two", "columns": {"y": "nope + 1"}}, "INVALID_ARGUMENT"),
        ("drop_columns", {"dataset": "two", "columns": []}, "INVALID_ARGUMENT"),
        ("drop_columns", {"dataset": "two", "columns": ["nope"]}, "INVALID_ARGUMENT"),
        ("compact", {"dataset": "two", "target_rows_per_fragment": -1}, "INVALID_ARGUMENT"),
        ("cleanup", {"dataset": "two", "older_than_seconds": -5}, "INVALID_ARGUMENT"),
        ("cleanup", {"dataset": "two", "delete_unverified": 1}, "INVALID_ARGUMENT"),
        ("commit_staged", {"dataset": "two", "fragments": "x"}, "INVALID_ARGUMENT"),
        ("cache_stats", {"x": 1}, "INVALID_ARGUMENT"),
        ("no_such_action", {}, "UNIMPLEMENTED"),
    ],
    ids=lambda v: v if isinstance(v, str) else json.dumps(v, sort_keys=True),
)
def test_bad_action_bodies(client, root, name, body, kind):
    before = lance.dataset(os.path.join(root, "two")).version
    _fails(client, kind, name, **body)
    assert lance.dataset(os.path.join(root, "two")).version == before
    assert action(client, "health")["status"] == "ok"


def test_bodies_that_are_not_json_objects(client):
    for raw in (b"not json", b"[1]", b'"x"', b"\xff"):
        with pytest.raises(pa.ArrowInvalid) as e:
            list(client.do_action(fl.Action("dataset_info", raw)))
        assert error_kind(e.value) == "INVALID_ARGUMENT"


def test_refused_actions_left_the_data_alone(root):
    ds = lance.dataset(os.path.join(root, "two"))
    assert ds.version == 1 and ds.to_table().equals(make_table(10))


def test_update_action_as_pylance(client, root, tmp_path):
    """The update action changes the same rows as pylance's update on the same data."""
    lance.write_dataset(make_table(60), os.path.join(root, "upd"), max_rows_per_file=25)
    ref = lance.write_dataset(make_table(60), str(tmp_path / "ref"), max_rows_per_file=25)
    values = {"x": "x + 100", "s": "concat(s, '!')"}
    out = action(client, "update", dataset="upd", values=values, where="id % 7 = 2")
    want = ref.update(values, where="id % 7 = 2")
    assert out["updated"] == want["num_rows_updated"] == 9
    assert out["version"] == 2
    got = lance.dataset(os.path.join(root, "upd")).to_table().sort_by("id")
    assert got.equals(ref.to_table().sort_by("id"))
