"""``do_put`` with ``"mode": "merge"`` through a real ``pyarrow.flight`` client: the stream is
a ``merge_insert`` source, and what the server commits is what pylance's ``merge_insert``
gives on the same data (read back with ``lance.dataset``)."""

from __future__ import annotations

import os

import lance
import pyarrow as pa
import pyarrow.flight as fl
import pytest
from flight_fixtures import SERVER_ERRORS, action, cmd, make_table, put, serve

from flight_server.errors import error_kind


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("merge_root"))


@pytest.fixture(scope="module")
def client(root):
    with serve(root, "--no-warm") as s:
        c = fl.connect(s.location)
        yield c
        c.close()


def _source() -> pa.Table:
    """Rows 30..69: 30..59 match the target (0..59), 60..69 are new."""
    t = make_table(40, start=30, seed=5)
    return t.set_column(2, "s", pa.array([f"new{i}" for i in range(40)]))


@pytest.mark.parametrize(
    "clauses, pylance",
    [
        (
            {"when_matched_update_all": True, "when_not_matched_insert_all": True},
            lambda b: b.when_matched_update_all().when_not_matched_insert_all(),
        ),
        (
            {"when_matched_update_all": "target.id % 3 = 0"},
            lambda b: b.when_matched_update_all("target.id % 3 = 0"),
        ),
        ({"when_not_matched_insert_all": True}, lambda b: b.when_not_matched_insert_all()),
        (
            {"when_matched_update_all": True, "when_not_matched_by_source_delete": "id < 10"},
            lambda b: b.when_matched_update_all().when_not_matched_by_source_delete("id < 10"),
        ),
        (
            {"when_not_matched_by_source_delete": True, "when_not_matched_insert_all": True},
            lambda b: b.when_not_matched_by_source_delete().when_not_matched_insert_all(),
        ),
    ],
)
def test_merge_put_as_pylance(client, root, tmp_path, clauses, pylance):
    name = tmp_path.name
    lance.write_dataset(make_table(60), os.path.join(root, name), max_rows_per_file=25)
    ref = lance.write_dataset(make_table(60), str(tmp_path / "ref"), max_rows_per_file=25)
    out = put(
        client, cmd(dataset=name, mode="merge", on=["id"], **clauses), _source(), max_chunksize=7
    )
    want = pylance(ref.merge_insert("id")).execute(_source())
    assert out == {
        "version": 2,
        "rows_written": 40,
        "inserted": want["num_inserted_rows"],
        "updated": want["num_updated_rows"],
        "deleted": want["num_deleted_rows"],
    }
    got = lance.dataset(os.path.join(root, name)).to_table().sort_by("id")
    assert got.equals(ref.to_table().sort_by("id"))


@pytest.mark.parametrize(
    "body",
    [
        {"mode": "merge"},
        {"mode": "merge", "on": []},
        {"mode": "merge", "on": ["id"]},
        {"mode": "merge", "on": ["id"], "when_not_matched_insert_all": "x > 1"},
        {"mode": "merge", "on": ["id"], "when_matched_update_all": ""},
        {"mode": "merge", "on": ["id"], "when_matched_update_all": True, "idempotency_key": "k"},
        {"mode": "append", "on": ["id"]},
        {"mode": "merge", "on": ["nope"], "when_not_matched_insert_all": True},
    ],
)
def test_bad_merge_puts(client, root, body):
    name = "bad_merge"
    if not os.path.exists(os.path.join(root, name)):
        lance.write_dataset(make_table(10), os.path.join(root, name))
    with pytest.raises(SERVER_ERRORS) as e:
        put(client, cmd(dataset=name, **body), make_table(5))
    assert error_kind(e.value) == "INVALID_ARGUMENT", str(e.value)
    assert lance.dataset(os.path.join(root, name)).version == 1
    assert action(client, "health")["status"] == "ok"


def test_merge_into_a_missing_dataset(client):
    with pytest.raises(SERVER_ERRORS) as e:
        put(
            client,
            cmd(dataset="absent", mode="merge", on="id", when_not_matched_insert_all=True),
            make_table(3),
        )
    assert error_kind(e.value) == "NOT_FOUND"
