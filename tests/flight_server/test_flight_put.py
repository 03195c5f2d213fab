"""``do_put`` through a real ``pyarrow.flight`` client against ``lance-flight serve``.

Truth is pylance: what a put committed is read back with ``lance.dataset(...)``, and the data
directory is listed to prove that refused, failed and abandoned puts leave no file behind.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import subprocess
import sys
import textwrap
import threading
import time

import lance
import numpy as np
import pyarrow as pa
import pyarrow.flight as fl
import pytest
from flight_fixtures import SERVER_ERRORS, action, cmd, data_files, make_table, put, serve

import lance_format
from flight_server.catalog import Catalog
from flight_server.errors import AlreadyExists, error_kind
from flight_server.ingest import PutOptions, aligned, ingest
from lance_format.cache import SearchCache
from lance_format.errors import InvalidArgumentError
from lance_format.schema import LanceSchema
from lance_format.table import cleanup, staging, write


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("root"))


@pytest.fixture(scope="module")
def server(root):
    with serve(root, "--no-warm") as s:
        yield s
    assert s.process.returncode == 0


@pytest.fixture
def client(server):
    c = fl.connect(server.location)
    yield c
    c.close()


def _refused(client, descriptor, table: pa.Table) -> Exception:
    with pytest.raises(SERVER_ERRORS) as e:
        put(client, descriptor, table)
    assert "Traceback" not in str(e.value)
    return e.value


def test_path_put_creates_then_appends(client, root):
    uri = os.path.join(root, "path", "ds")
    t1, t2 = make_table(2500), make_table(700, start=2500)
    out = put(client, fl.FlightDescriptor.for_path("path/ds"), t1, max_chunksize=1000)
    assert out == {"version": 1, "rows_written": 2500}
    out = put(client, fl.FlightDescriptor.for_path("path/ds"), t2)
    assert out == {"version": 2, "rows_written": 700}
    assert lance.dataset(uri).to_table().equals(pa.concat_tables([t1, t2]))


def test_every_mode(client, root):
    uri = os.path.join(root, "modes")
    t1, t2 = make_table(1000), make_table(700, start=1000)
    # create rolls files at max_rows_per_file: one fragment each
    out = put(client, cmd(dataset="modes", mode="create", max_rows_per_file=300), t1)
    assert out["version"] == 1
    assert [f.count_rows() for f in lance.dataset(uri).get_fragments()] == [300, 300, 300, 100]
    files = data_files(uri)
    e = _refused(client, cmd(dataset="modes", mode="create"), t2)
    assert isinstance(e, fl.FlightServerError) and error_kind(e) == "ALREADY_EXISTS"
    assert data_files(uri) == files and lance.dataset(uri).version == 1
    assert put(client, cmd(dataset="modes", mode="append"), t2)["version"] == 2
    assert lance.dataset(uri).to_table().equals(pa.concat_tables([t1, t2]))
    # overwrite may change the schema; older versions stay readable
    t3 = pa.table({"k": pa.array(["a", "b", None]), "v": pa.array([1.5, None, 3.0])})
    assert put(client, cmd(dataset="modes", mode="overwrite"), t3)["version"] == 3
    assert lance.dataset(uri).to_table().equals(t3)
    assert lance.dataset(uri, version=2).count_rows() == 1700
    # overwrite of a dataset that does not exist creates it
    assert put(client, cmd(dataset="fresh/ow", mode="overwrite"), t3)["version"] == 1
    assert lance.dataset(os.path.join(root, "fresh/ow")).to_table().equals(t3)


@pytest.mark.parametrize("version", ["2.0", "2.1", "2.2"], ids=["v2.0", "v2.1", "v2.2"])
def test_data_storage_versions(client, root, version):
    name = f"dsv/{version.replace('.', '_')}"
    uri = os.path.join(root, name)
    t = make_table(500)
    put(client, cmd(dataset=name, mode="create", data_storage_version=version), t)
    put(client, cmd(dataset=name), make_table(10, start=500))
    ds = lance.dataset(uri)
    assert ds.data_storage_version == version
    assert ds.to_table().equals(pa.concat_tables([t, make_table(10, start=500)]))
    other = "2.1" if version != "2.1" else "2.0"
    e = _refused(client, cmd(dataset=name, data_storage_version=other), t)
    assert error_kind(e) == "INVALID_ARGUMENT"


def test_nested_types_round_trip(client, root):
    n = 300
    rng = np.random.default_rng(1)
    t = pa.table(
        {
            "id": pa.array(np.arange(n), pa.int32()),
            "vec": pa.FixedSizeListArray.from_arrays(
                pa.array(rng.random(n * 4, dtype=np.float32)), 4
            ),
            "tags": pa.array([[f"t{j}" for j in range(i % 4)] or None for i in range(n)]),
            "point": pa.StructArray.from_arrays(
                [pa.array(rng.random(n)), pa.array(np.arange(n) % 7, pa.int16())], ["x", "y"]
            ),
            "ts": pa.array(np.arange(n) * 10**9, pa.timestamp("us")),
        }
    )
    put(client, cmd(dataset="nested", mode="create"), t, max_chunksize=77)
    assert lance.dataset(os.path.join(root, "nested")).to_table().equals(t)


def test_view_and_large_string_data_is_stored_as_the_datasets_types(client, root):
    """Producers (DuckDB, Polars, Parquet readers) send string_view; a string column takes
    string, large_string or string_view data alike."""
    uri = os.path.join(root, "views")
    t = make_table(100)
    views = t.cast(pa.schema([("id", pa.int64()), ("x", pa.float64()), ("s", pa.string_view())]))
    put(client, cmd(dataset="views", mode="create"), views)
    assert lance.dataset(uri).schema == t.schema  # string_view is stored as string
    large = make_table(10, start=100)
    large = large.cast(
        pa.schema([("id", pa.int64()), ("x", pa.float64()), ("s", pa.large_string())])
    )
    put(client, cmd(dataset="views"), large)
    assert lance.dataset(uri).to_table().equals(pa.concat_tables([t, make_table(10, start=100)]))


def test_refused_appends_write_nothing(client, root):
    uri = os.path.join(root, "strict")
    t = make_table(100)
    put(client, cmd(dataset="strict"), t)
    files = data_files(uri)
    bad = [
        t.drop_columns(["x"]),
        t.select(["x", "id", "s"]),
        t.set_column(0, "id", t.column("id").cast(pa.int32())),
    ]
    for data in bad:
        e = _refused(client, cmd(dataset="strict", mode="append"), data)
        assert error_kind(e) == "INVALID_ARGUMENT"
    assert data_files(uri) == files
    assert lance.dataset(uri).version == 1 and lance.dataset(uri).to_table().equals(t)


def test_nulls_in_a_not_null_column_are_refused(client, root):
    """A put of nulls into a NOT NULL column (or a nested NOT NULL field) commits nothing."""
    uri = os.path.join(root, "notnull")
    schema = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            pa.field("s", pa.struct([pa.field("x", pa.int32(), nullable=False)])),
        ]
    )
    good = pa.table({"id": [1, 2], "s": [{"x": 1}, {"x": 2}]}, schema=schema)
    put(client, cmd(dataset="notnull"), good)
    files = data_files(uri)
    loose = pa.table({"id": pa.array([3, None], pa.int64()), "s": good.column("s")})
    child = pa.StructArray.from_arrays(
        [pa.array([None, 4], pa.int32())], fields=[schema[1].type[0]]
    )
    nested = pa.Table.from_arrays([pa.array([5, 6], pa.int64()), child], schema=schema)
    for data in (loose, nested):
        with pytest.raises(OSError):  # pylance refuses both
            lance.write_dataset(data, uri, mode="append")
        e = _refused(client, cmd(dataset="notnull", mode="append"), data)
        assert error_kind(e) == "INVALID_ARGUMENT" and "non-nullable" in str(e)
    assert data_files(uri) == files
    assert lance.dataset(uri).version == 1 and lance.dataset(uri).to_table().equals(good)


def _bad_offsets(n: int, typ: pa.DataType) -> pa.Array:
    """``n`` values whose offsets go backwards (a client can send such an array)."""
    offsets = pa.array([0, 5, 2] + list(range(3, n + 1)), pa.int32()).buffers()[1]
    return pa.Array.from_buffers(typ, n, [None, offsets, pa.py_buffer(b"abcdef" * n)])


def test_nested_nullability_may_differ_as_in_pylance(client, root, tmp_path):
    """Vectors with non-nullable items (a common export) create and extend a dataset whose
    stored items are nullable, as with pylance; nulls the dataset forbids are refused."""
    strict = pa.list_(pa.field("item", pa.float32(), nullable=False), 2)
    loose = pa.list_(pa.float32(), 2)
    uri = os.path.join(root, "vectors")
    first = pa.table({"v": pa.array([[1, 2], [3, 4]], strict)})
    put(client, cmd(dataset="vectors"), first)
    put(client, cmd(dataset="vectors", mode="append"), pa.table({"v": pa.array([[5, 6]], loose)}))
    put(client, cmd(dataset="vectors", mode="append"), first)
    expected = str(tmp_path / "vectors-pylance")
    lance.write_dataset(first, expected)
    lance.write_dataset(pa.table({"v": pa.array([[5, 6]], loose)}), expected, mode="append")
    lance.write_dataset(first, expected, mode="append")
    assert lance.dataset(uri).to_table().equals(lance.dataset(expected).to_table())
    lists = pa.list_(pa.field("item", pa.int32(), nullable=False))
    put(client, cmd(dataset="strict-lists"), pa.table({"l": pa.array([[1]], lists)}))
    files = data_files(os.path.join(root, "strict-lists"))
    e = _refused(
        client,
        cmd(dataset="strict-lists", mode="append"),
        pa.table({"l": pa.array([[2, None]], pa.list_(pa.int32()))}),
    )
    assert error_kind(e) == "INVALID_ARGUMENT"
    assert data_files(os.path.join(root, "strict-lists")) == files


@pytest.mark.parametrize("stored", [pa.binary(), pa.large_binary(), pa.string()])
def test_invalid_arrays_are_refused_before_any_use(client, root, stored):
    """Offsets that go backwards: refused before a cast to the dataset's type (or a copy)
    reads them, and nothing is written."""
    name = f"offsets-{stored}"
    uri = os.path.join(root, name)
    good = pa.table({"id": pa.array([1, 2], pa.int64()), "b": pa.array(["ab", "c"]).cast(stored)})
    put(client, cmd(dataset=name), good)
    files = data_files(uri)
    sent = pa.binary() if stored == pa.large_binary() else stored  # a cast on the server
    bad = pa.Table.from_arrays(
        [pa.array([3, 4, 5], pa.int64()), _bad_offsets(3, sent)], names=["id", "b"]
    )
    e = _refused(client, cmd(dataset=name, mode="append"), bad)
    assert error_kind(e) == "INVALID_ARGUMENT" and "offset" in str(e).lower()
    assert data_files(uri) == files
    assert lance.dataset(uri).version == 1 and lance.dataset(uri).to_table().equals(good)


@pytest.mark.parametrize(
    "body",
    [
        {"dataset": "bad/x", "bogus": 1},
        {"dataset": "bad/x", "mode": "upsert"},
        {"dataset": "bad/x", "data_storage_version": "0.1"},
        {"dataset": "bad/x", "stage": "yes"},
        {"dataset": "bad/x", "max_rows_per_file": 0},
        {"dataset": "bad/x", "max_rows_per_file": "10"},
        {"dataset": "bad/x", "idempotency_key": 123},
        {"dataset": "bad/x", "idempotency_key": ""},
        {"dataset": "bad/x", "job": "j1"},
        {"dataset": "bad/x", "stage": False, "job": "j1"},
        {"dataset": "bad/x", "stage": True, "job": ""},
        {"dataset": "bad/x", "stage": True, "job": "a/b"},
        {"dataset": "bad/x", "stage": True, "job": ".."},
        {"dataset": "bad/x", "stage": True, "job": "j" * 65},
        {"dataset": "bad/x", "stage": True, "job": 7},
        {"mode": "create"},
        {"dataset": "../escape"},
        {"dataset": "/abs"},
    ],
    ids=[
        "key",
        "mode",
        "version",
        "stage",
        "rows-zero",
        "rows-type",
        "key-type",
        "key-empty",
        "job-unstaged",
        "job-stage-false",
        "job-empty",
        "job-slash",
        "job-dots",
        "job-long",
        "job-type",
        "no-dataset",
        "dots",
        "abs",
    ],
)
def test_bad_put_commands(client, root, body):
    e = _refused(client, cmd(**body), make_table(10))
    assert error_kind(e) == "INVALID_ARGUMENT"
    if "job" in body:
        assert ("stage" in str(e)) if body.get("stage") is not True else ("64" in str(e))
    assert not os.path.exists(os.path.join(root, "bad"))
    assert not os.path.exists(os.path.join(os.path.dirname(root), "escape"))
    assert action(client, "health")["status"] == "ok"


def test_empty_streams(client, root):
    schema = make_table(1).schema
    out = put(client, cmd(dataset="empty", mode="create"), schema.empty_table())
    assert out == {"version": 1, "rows_written": 0}
    ds = lance.dataset(os.path.join(root, "empty"))
    assert ds.count_rows() == 0 and ds.schema.names == schema.names
    put(client, cmd(dataset="empty"), make_table(5))
    out = put(client, cmd(dataset="empty"), schema.empty_table())
    assert out == {"version": 2, "rows_written": 0}  # nothing to commit: no new version
    assert lance.dataset(os.path.join(root, "empty")).version == 2


def test_staged_puts_commit_in_one_transaction(client, root):
    uri = os.path.join(root, "staged")
    lance.write_dataset(make_table(100), uri)
    staged = []
    for i in range(3):
        t = make_table(200, start=1000 * (i + 1))
        out = put(client, cmd(dataset="staged", stage=True, max_rows_per_file=150), t)
        assert out["staged"] and out["rows_written"] == 200 and out["read_version"] == 1
        assert len(out["fragments"]) == 2
        staged.append(out)
    assert lance.dataset(uri).version == 1  # nothing committed yet
    frags = [f for s in staged for f in s["fragments"]]
    out = action(client, "commit_staged", dataset="staged", fragments=frags, read_version=1)
    assert out["version"] == 2 and out["rows_written"] == 600
    ds = lance.dataset(uri)
    assert ds.version == 2 and len(ds.get_fragments()) == 1 + 6
    expected = [make_table(100)] + [make_table(200, start=1000 * (i + 1)) for i in range(3)]
    assert ds.to_table().sort_by("id").equals(pa.concat_tables(expected).sort_by("id"))


def test_staged_create_and_overwrite(client, root):
    uri = os.path.join(root, "staged_new")
    t = make_table(120)
    out = put(client, cmd(dataset="staged_new", stage=True), t)
    assert out["read_version"] == 0 and not os.path.isdir(os.path.join(uri, "_versions"))
    body = {"dataset": "staged_new", "fragments": out["fragments"]}
    e = pytest.raises(pa.ArrowInvalid, action, client, "commit_staged", **body)
    assert error_kind(e.value) == "INVALID_ARGUMENT"  # creating needs the schema
    e = pytest.raises(
        pa.ArrowInvalid,
        action,
        client,
        "commit_staged",
        **body,
        schema=out["schema"],
        data_storage_version="2.1",
    )
    assert error_kind(e.value) == "INVALID_ARGUMENT"  # the staged files are 2.2
    done = action(client, "commit_staged", **body, schema=out["schema"])
    assert done["version"] == 1 and lance.dataset(uri).to_table().equals(t)
    t2 = make_table(30, start=500)
    out = put(client, cmd(dataset="staged_new", stage=True), t2)
    done = action(
        client,
        "commit_staged",
        dataset="staged_new",
        fragments=out["fragments"],
        mode="overwrite",
        schema=out["schema"],
    )
    assert done["version"] == 2 and lance.dataset(uri).to_table().equals(t2)
    # nothing staged: an append commits nothing, an overwrite empties the dataset
    nothing = {"dataset": "staged_new", "fragments": [], "schema": out["schema"]}
    assert action(client, "commit_staged", **nothing)["version"] == 2
    assert action(client, "commit_staged", **nothing, mode="overwrite")["version"] == 3
    assert lance.dataset(uri).count_rows() == 0 and lance.dataset(uri).schema == t2.schema


def test_commit_staged_is_checked(client, root):
    uri = os.path.join(root, "staged_chk")
    lance.write_dataset(make_table(10), uri)
    out = put(client, cmd(dataset="staged_chk", stage=True), make_table(10, start=10))
    frag = json.loads(out["fragments"][0])
    forged = dict(frag, files=[dict(frag["files"][0], path="../../outside.lance")])
    missing = dict(frag, files=[dict(frag["files"][0], path="0" * 50 + ".lance")])
    for fragments, kind in (
        ([json.dumps(forged)], "INVALID_ARGUMENT"),
        (["{not json"], "INVALID_ARGUMENT"),
        ("x", "INVALID_ARGUMENT"),
        ([json.dumps(missing)], "NOT_FOUND"),
    ):
        with pytest.raises((pa.ArrowInvalid, pa.ArrowKeyError)) as e:
            action(client, "commit_staged", dataset="staged_chk", fragments=fragments)
        assert error_kind(e.value) == kind
    with pytest.raises(pa.ArrowInvalid) as e:
        action(client, "commit_staged", dataset="staged_chk", fragments=out["fragments"], mode="x")
    assert error_kind(e.value) == "INVALID_ARGUMENT"
    # staged against version 1; an overwrite commits meanwhile: the append conflicts
    lance.write_dataset(make_table(5, start=100), uri, mode="overwrite")
    with pytest.raises(fl.FlightServerError) as e:
        action(
            client,
            "commit_staged",
            dataset="staged_chk",
            fragments=out["fragments"],
            read_version=1,
        )
    assert error_kind(e.value) == "ABORTED"
    assert lance.dataset(uri).version == 2
    # abandoned staged files are removed on request; committed ones never
    removed = action(client, "discard_staged", dataset="staged_chk", fragments=out["fragments"])
    assert removed["removed"] == 1 and data_files(uri) == {
        f.path for f in lance.dataset(uri, version=1).get_fragments()[0].data_files()
    } | {f.path for f in lance.dataset(uri).get_fragments()[0].data_files()}
    committed = lance.dataset(uri, version=1).get_fragments()[0].metadata.to_json()
    with pytest.raises(pa.ArrowInvalid):
        action(client, "discard_staged", dataset="staged_chk", fragments=[json.dumps(committed)])
    assert lance.dataset(uri, version=1).count_rows() == 10


# -- staging jobs: every staged file of a job is committed or removed ------------------------


def _referenced(uri: str) -> set[str]:
    """The data files pylance's latest manifest references."""
    return {df.path for f in lance.dataset(uri).get_fragments() for df in f.data_files()}


def _job_put(client, dataset: str, job: str, table: pa.Table, rows_per_file: int = 100) -> dict:
    body = {"dataset": dataset, "stage": True, "job": job, "max_rows_per_file": rows_per_file}
    return put(client, cmd(**body), table, max_chunksize=50)


def _refused_by_job(client, dataset: str, job: str, table: pa.Table) -> None:
    e = _refused(client, cmd(dataset=dataset, stage=True, job=job), table)
    assert error_kind(e) == "FAILED_PRECONDITION" and job in str(e)


def _registry(uri: str, job: str) -> list[str]:
    directory = os.path.join(uri, "_staging", job)
    return sorted(os.listdir(directory)) if os.path.isdir(directory) else []


def test_job_commit_removes_the_stages_it_did_not_commit(client, root):
    uri = os.path.join(root, "job_commit")
    lance.write_dataset(make_table(100), uri)
    tables = [make_table(250, start=1000 * (i + 1)) for i in range(3)]
    reported = [_job_put(client, "job_commit", "spark-1", t) for t in tables[:2]]
    dropped = _job_put(client, "job_commit", "spark-1", tables[2])  # its result is lost
    assert [len(r["fragments"]) for r in [*reported, dropped]] == [3, 3, 3]
    assert len(data_files(uri)) == 1 + 9 and len(_registry(uri, "spark-1")) == 3
    frags = [f for r in reported for f in r["fragments"]]
    out = action(client, "commit_staged", dataset="job_commit", fragments=frags, job="spark-1")
    assert out["version"] == 2 and out["rows_written"] == 500
    assert out["job"] == "spark-1" and out["leftovers_removed"] == 3
    ds = lance.dataset(uri)
    expected = pa.concat_tables([make_table(100), *tables[:2]]).sort_by("id")
    assert ds.version == 2 and ds.to_table().sort_by("id").equals(expected)
    assert data_files(uri) == _referenced(uri) and len(_referenced(uri)) == 1 + 6
    assert _registry(uri, "spark-1") == ["COMMITTED"]
    # the job is over: a late attempt is refused and leaves nothing; no second commit
    _refused_by_job(client, "job_commit", "spark-1", tables[2])
    with pytest.raises(fl.FlightServerError) as e:
        action(client, "commit_staged", dataset="job_commit", fragments=[], job="spark-1")
    assert error_kind(e.value) == "FAILED_PRECONDITION"
    assert data_files(uri) == _referenced(uri) and lance.dataset(uri).version == 2
    # discarding a committed job keeps what it committed
    out = action(client, "discard_staged", dataset="job_commit", job="spark-1")
    assert out["job_state"] == "committed" and out["removed"] == 0
    assert lance.dataset(uri).to_table().sort_by("id").equals(expected)
    # the registry is invisible to the catalog and to pylance, whose cleanup ignores it
    names = action(client, "list_datasets")["datasets"]
    assert "job_commit" in names and not any("_staging" in n for n in names)
    lance.write_dataset(make_table(10, start=9000), uri, mode="append")
    lance.dataset(uri).cleanup_old_versions(older_than=dt.timedelta(0))
    assert lance.dataset(uri).count_rows() == 610 and data_files(uri) == _referenced(uri)
    assert _registry(uri, "spark-1") == ["COMMITTED"]
    stats = action(client, "cleanup", dataset="job_commit", older_than_seconds=0)
    assert stats["old_versions"] == 0  # pylance removed them already
    assert _registry(uri, "spark-1") == ["COMMITTED"]  # younger than the unverified age


def test_job_commit_with_nothing_to_append_still_removes_the_jobs_stages(client, root):
    uri = os.path.join(root, "job_empty")
    lance.write_dataset(make_table(10), uri)
    before = data_files(uri)
    _job_put(client, "job_empty", "j-empty", make_table(150, start=100))  # never reported
    out = action(client, "commit_staged", dataset="job_empty", fragments=[], job="j-empty")
    assert out["version"] == 1 and out["leftovers_removed"] == 2
    assert data_files(uri) == before and lance.dataset(uri).version == 1


def test_discard_by_job_removes_every_stage(client, root):
    uri = os.path.join(root, "job_discard")
    lance.write_dataset(make_table(100), uri)
    before = data_files(uri)
    reported = _job_put(client, "job_discard", "j.2", make_table(250, start=100))
    _job_put(client, "job_discard", "j.2", make_table(120, start=500))  # dropped
    assert len(data_files(uri) - before) == 5
    frags = reported["fragments"]
    out = action(client, "discard_staged", dataset="job_discard", job="j.2", fragments=frags)
    assert out == {"dataset": "job_discard", "job": "j.2", "job_state": "aborted", "removed": 5}
    assert data_files(uri) == before and _registry(uri, "j.2") == ["ABORTED"]
    again = action(client, "discard_staged", dataset="job_discard", job="j.2")
    assert again["removed"] == 0 and again["job_state"] == "aborted"
    # a task that starts after the abort is refused and leaves nothing
    _refused_by_job(client, "job_discard", "j.2", make_table(30))
    assert data_files(uri) == before and _registry(uri, "j.2") == ["ABORTED"]
    with pytest.raises(fl.FlightServerError) as e:
        action(client, "commit_staged", dataset="job_discard", fragments=frags, job="j.2")
    assert error_kind(e.value) == "FAILED_PRECONDITION"
    # discarding a job nobody staged in marks it, so its late puts are refused too
    assert action(client, "discard_staged", dataset="job_discard", job="ghost")["removed"] == 0
    _refused_by_job(client, "job_discard", "ghost", make_table(30))
    assert data_files(uri) == before
    assert lance.dataset(uri).version == 1 and lance.dataset(uri).to_table().equals(make_table(100))


@pytest.mark.parametrize("rolls", [False, True], ids=["open-file", "next-file"])
def test_a_put_running_when_its_job_is_discarded_keeps_nothing(client, root, rolls):
    """Discarded mid-stream: with a file open (its temporary file is removed, the put fails
    when it closes it) or between files (the next file is refused before it exists)."""
    name = f"job_inflight_{int(rolls)}"
    uri = os.path.join(root, name)
    lance.write_dataset(make_table(100), uri)
    before = data_files(uri)
    t = make_table(400, start=1000)
    desc = cmd(dataset=name, stage=True, job="running", max_rows_per_file=100)
    writer, reader = client.do_put(desc, t.schema)
    try:
        sent, files = (200, 2) if rolls else (250, 3)  # 2 files, or 2 and an open 3rd
        for b in t.slice(0, sent).to_batches(max_chunksize=50):
            writer.write_batch(b)
        deadline = time.monotonic() + 30
        while len(data_files(uri) - before) < files and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(data_files(uri) - before) == files
        out = action(client, "discard_staged", dataset=name, job="running")
        assert out["removed"] == files and data_files(uri) == before
        rest = t.slice(sent, 20)
        with pytest.raises(fl.FlightError) as e:
            for b in rest.to_batches(max_chunksize=50):
                writer.write_batch(b)
            writer.done_writing()
            assert reader.read() is None  # no PutResult: the call's status says why
            writer.close()
        assert error_kind(e.value) == "FAILED_PRECONDITION" and "Traceback" not in str(e.value)
    finally:
        with contextlib.suppress(fl.FlightError):
            writer.close()
    assert data_files(uri) == before and _registry(uri, "running") == ["ABORTED"]
    assert lance.dataset(uri).version == 1


def test_job_creating_a_dataset(client, root):
    """A job staging into a dataset that does not exist yet: discarded, it leaves no data
    directory and no dataset (only its marker); committed, it creates the dataset."""
    uri = os.path.join(root, "job_new", "ds")
    _job_put(client, "job_new/ds", "create-1", make_table(150))
    assert len(data_files(uri)) == 2 and not os.path.isdir(os.path.join(uri, "_versions"))
    out = action(client, "discard_staged", dataset="job_new/ds", job="create-1")
    assert out["removed"] == 2 and not os.path.exists(os.path.join(uri, "data"))
    assert sorted(os.listdir(uri)) == ["_staging"] and _registry(uri, "create-1") == ["ABORTED"]
    assert not any(n.startswith("job_new") for n in action(client, "list_datasets")["datasets"])
    _refused_by_job(client, "job_new/ds", "create-1", make_table(10))
    assert not os.path.exists(os.path.join(uri, "data"))

    tables = [make_table(50, start=i) for i in (0, 50)]
    staged = [_job_put(client, "job_new/ds", "create-2", t) for t in tables]
    _job_put(client, "job_new/ds", "create-2", make_table(50, start=999))  # dropped
    frags = [f for s in staged for f in s["fragments"]]
    out = action(
        client,
        "commit_staged",
        dataset="job_new/ds",
        fragments=frags,
        schema=staged[0]["schema"],
        job="create-2",
    )
    assert out["version"] == 1 and out["leftovers_removed"] == 1
    assert lance.dataset(uri).to_table().sort_by("id").equals(pa.concat_tables(tables))
    assert data_files(uri) == _referenced(uri) and len(_referenced(uri)) == 2
    assert "job_new/ds" in action(client, "list_datasets")["datasets"]


@pytest.mark.parametrize(
    "name,body",
    [
        ("discard_staged", {"dataset": "job_commit"}),
        ("discard_staged", {"dataset": "job_commit", "job": "a b"}),
        ("discard_staged", {"dataset": "job_commit", "job": "."}),
        ("commit_staged", {"dataset": "job_commit", "fragments": [], "job": ["x"]}),
        ("commit_staged", {"dataset": "job_commit", "fragments": [], "job": "x" * 65}),
    ],
    ids=["discard-nothing", "discard-space", "discard-dot", "commit-type", "commit-long"],
)
def test_bad_job_bodies(client, root, name, body):
    with pytest.raises(pa.ArrowInvalid) as e:
        action(client, name, **body)
    assert error_kind(e.value) == "INVALID_ARGUMENT" and "Traceback" not in str(e.value)
    assert not os.path.exists(os.path.join(root, "job_commit", "_staging", "a b"))


def test_cleanup_removes_job_registries_only_when_stale(tmp_path):
    """lance_format.table.cleanup: a job directory goes once nothing in it changed for the
    unverified age (whatever delete_unverified says); pylance reads on regardless."""
    uri = str(tmp_path / "ds")
    t = make_table(100)
    schema = LanceSchema.from_arrow(t.schema)
    lance.write_dataset(t, uri)
    fresh, stale = staging.StagingJob(uri, "fresh"), staging.StagingJob(uri, "stale")
    frags = write.write_fragments(
        make_table(10, start=100), uri, schema, on_new_file=stale.new_put(1).add
    )
    stale.mark(staging.ABORTED)
    fresh.mark(staging.COMMITTED, version=1)
    assert stale.state() == "aborted" and fresh.state() == "committed"
    assert [e["files"] for _, e in stale.entries()] == [[frags[0].files[0].path]]
    old = time.time() - cleanup.UNVERIFIED_AGE.total_seconds() - 60
    for name in os.listdir(stale.directory):
        os.utime(os.path.join(stale.directory, name), (old, old))
    os.utime(stale.directory, (old, old))
    lance_format.dataset(uri).cleanup_old_versions(
        dt.timedelta(0), delete_unverified=True, error_if_tagged_old_versions=False
    )
    assert os.listdir(os.path.join(uri, "_staging")) == ["fresh"]
    assert data_files(uri) == _referenced(uri)  # the stale job's file: unreferenced, removed
    assert lance.dataset(uri).to_table().equals(t)
    with pytest.raises(InvalidArgumentError):
        staging.StagingJob(uri, "../escape")


def test_idempotency_key_commits_once_even_after_a_restart(server, client, root):
    uri = os.path.join(root, "idem")
    t = make_table(50)
    first = put(client, cmd(dataset="idem", idempotency_key="job-1"), t)
    files = data_files(uri)
    again = put(client, cmd(dataset="idem", idempotency_key="job-1"), t)
    assert again["version"] == first["version"] == 1 and again["duplicate"]
    assert again["rows_written"] == 50
    assert data_files(uri) == files and lance.dataset(uri).count_rows() == 50
    # the key lives in the committed transaction: a new server process still finds it
    with serve(root, "--no-warm") as other, fl.connect(other.location) as c2:
        assert put(c2, cmd(dataset="idem", idempotency_key="job-1"), t)["version"] == 1
        assert put(c2, cmd(dataset="idem", idempotency_key="job-2"), t)["version"] == 2
    assert lance.dataset(uri).count_rows() == 100
    # two retries racing each other still commit once
    results = []

    def retry() -> None:
        with fl.connect(server.location) as c:
            results.append(put(c, cmd(dataset="idem", idempotency_key="job-3"), t)["version"])

    threads = [threading.Thread(target=retry) for _ in range(3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert results == [3, 3, 3] and lance.dataset(uri).count_rows() == 150
    assert len(data_files(uri)) == len(files) + 2


def test_concurrent_creates_of_one_dataset_both_land(server, root):
    """Two path puts race to create the same dataset: one creates, the other appends."""
    tables = [make_table(200, start=0), make_table(300, start=1000)]
    results = []

    def go(t: pa.Table) -> None:
        with fl.connect(server.location) as c:
            results.append(put(c, fl.FlightDescriptor.for_path("race/ds"), t))

    threads = [threading.Thread(target=go, args=(t,)) for t in tables]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert sorted(r["version"] for r in results) == [1, 2]
    got = lance.dataset(os.path.join(root, "race/ds")).to_table().sort_by("id")
    assert got.equals(pa.concat_tables(tables).sort_by("id"))


_DISCONNECTING_CLIENT = textwrap.dedent(
    """
    import json, sys, time
    import numpy as np, pyarrow as pa, pyarrow.flight as fl
    c = fl.connect(sys.argv[1])
    t = pa.table({"id": pa.array(np.arange(10000), pa.int64())})
    d = fl.FlightDescriptor.for_command(json.dumps({"dataset": sys.argv[2]}).encode())
    w, r = c.do_put(d, t.schema)
    for i in range(1000):
        w.write_table(t)
        if i == 20:
            print("sent", flush=True)
        time.sleep(0.01)
    """
)


def _killed_mid_put(server, name: str, uri: str, before: set[str]) -> None:
    """Start a put of ``name`` in a client process; kill the client once the server has
    written a data file of its own."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _DISCONNECTING_CLIENT, server.location, name],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().strip() == "sent"
        assert _eventually(lambda: data_files(uri) - before)
    finally:
        proc.kill()
        proc.wait()


def _eventually(check, seconds: float = 20) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.1)
    return check()


def test_client_disconnect_mid_put_commits_nothing(server, client, root):
    uri = os.path.join(root, "put", "cut")
    lance.write_dataset(pa.table({"id": pa.array(np.arange(10), pa.int64())}), uri)
    before = data_files(uri)
    _killed_mid_put(server, "put/cut", uri, before)
    # the server notices the broken stream, then removes what it wrote
    assert _eventually(lambda: data_files(uri) == before)
    assert lance.dataset(uri).version == 1 and lance.dataset(uri).count_rows() == 10
    # a put that was creating the dataset leaves no directory behind
    _killed_mid_put(server, "put/new/cut", os.path.join(root, "put/new/cut"), set())
    assert _eventually(lambda: not os.path.exists(os.path.join(root, "put", "new")))
    assert action(client, "health")["status"] == "ok"


def _misaligned(data: bytes) -> pa.Buffer:
    """``data`` in a buffer that starts 1 byte past an 8-byte boundary (as gRPC gives)."""
    raw = bytearray(len(data) + 16)
    base = pa.py_buffer(raw)  # shares raw's memory
    k = (1 - base.address) % 8
    raw[k : k + len(data)] = data
    out = base.slice(k, len(data))
    assert out.address % 8 == 1
    return out


def test_unaligned_batches_are_copied():
    """do_put batches may point anywhere into a gRPC message; the writer gets aligned ones."""
    n = 1000
    values = np.arange(n, dtype=np.int64)
    ints = pa.Array.from_buffers(pa.int64(), n, [None, _misaligned(values.tobytes())])
    strings = pa.array([f"s{i}" for i in range(n)])
    _, offsets, data = strings.buffers()
    strings = pa.Array.from_buffers(
        pa.string(), n, [None, _misaligned(offsets.to_pybytes()), _misaligned(data.to_pybytes())]
    )
    list_offsets = np.arange(n + 1, dtype=np.int32)
    lists = pa.Array.from_buffers(
        pa.list_(pa.int64()), n, [None, _misaligned(list_offsets.tobytes())], children=[ints]
    )
    batch = pa.record_batch([ints, strings, lists, pa.array(values * 2)], names=list("abcd"))
    expected = pa.record_batch(
        [
            pa.array(values),
            pa.array([f"s{i}" for i in range(n)]),
            pa.array([[i] for i in range(n)], pa.list_(pa.int64())),
            pa.array(values * 2),
        ],
        names=list("abcd"),
    )
    assert batch.equals(expected)
    fixed = aligned(batch)
    assert fixed.equals(expected)
    assert all(b is None or b.address % 8 == 0 for c in fixed.columns for b in c.buffers())
    kept = fixed.column(3).buffers()[1].address
    assert kept == batch.column(3).buffers()[1].address  # aligned columns are not copied
    ok = pa.record_batch([pa.array(values)], names=["a"])
    assert aligned(ok) is ok


def _racing_batches(t: pa.Table, other: pa.Table, uri: str):
    """Yield ``t``'s batches; after the first, another writer creates the dataset."""
    for i, b in enumerate(t.to_batches(max_chunksize=50)):
        yield b
        if i == 0:
            lance.write_dataset(other, uri)


@pytest.mark.parametrize("mode", ["append", "create"])
def test_a_create_that_loses_the_race(tmp_path, mode):
    """In-process: another writer creates the dataset while a put is creating it.  A path
    put (append) appends to theirs; a ``create`` is ALREADY_EXISTS and removes its files."""
    catalog = Catalog(str(tmp_path), SearchCache(1 << 20))
    uri = str(tmp_path / "ds")
    t, other = make_table(200), make_table(30, start=1000)
    opts = PutOptions(dataset="ds", mode=mode)
    batches = _racing_batches(t, other, uri)
    if mode == "append":
        out = ingest(catalog, opts, t.schema, batches)
        assert out["version"] == 2
        got = lance.dataset(uri).to_table().sort_by("id")
        assert got.equals(pa.concat_tables([t, other]).sort_by("id"))
    else:
        with pytest.raises(AlreadyExists):
            ingest(catalog, opts, t.schema, batches)
        ds = lance.dataset(uri)
        assert ds.version == 1 and ds.to_table().equals(other)
        assert data_files(uri) == {f.path for f in ds.get_fragments()[0].data_files()}


def test_staging_commits_written_fragments(tmp_path):
    """lance_format.table.staging: fragments from write_fragments, committed later."""
    uri = str(tmp_path / "ds")
    t1, t2 = make_table(100), make_table(50, start=100)
    schema = LanceSchema.from_arrow(t1.schema)
    frags = write.write_fragments(t1, uri, schema, max_rows_per_file=40)
    m = staging.commit_staged(uri, frags, mode="overwrite", read_version=0, schema=schema)
    assert m.version == 1 and lance.dataset(uri).to_table().equals(t1)
    frags = write.write_fragments(t2, uri, schema)
    props = {"who": "test"}
    m = staging.commit_staged(uri, frags, mode="append", read_version=1, properties=props)
    assert m.version == 2 and lance.dataset(uri).to_table().equals(pa.concat_tables([t1, t2]))
    assert dict(m.transaction.transaction_properties) == props
    with pytest.raises(InvalidArgumentError):
        staging.staged_transaction(frags, mode="merge", read_version=2)
    with pytest.raises(InvalidArgumentError):
        staging.staged_transaction(frags, mode="overwrite", read_version=2)


def test_a_put_validates_each_batch_once(tmp_path, monkeypatch):
    """The stream's reader, the ingest and the file writer each need valid data; Arrow's
    full validation runs once per batch and column (what the ingest makes of checked data,
    a cast or aligned copies, counts as checked), and pylance reads what was committed."""
    from flight_server.server import LanceFlightServer
    from lance_format import validation

    runs: list[bool] = []  # one per batch that went on to Arrow's full validation
    checked = validation._checked_before

    def counted(batch):
        seen = checked(batch)
        if not seen:
            runs.append(True)
        return seen

    monkeypatch.setattr(validation, "_checked_before", counted)
    n = 40_000
    table = pa.table(
        {
            "id": pa.array(np.arange(n)),
            "s": [f"row {i}" for i in range(n)],
            "d": pa.array(np.arange(n), pa.int32()).cast(pa.decimal128(15, 2)),
        }
    )
    # appended as large_string: the ingest casts it to the dataset's string
    narrow = table.set_column(1, "s", table.column("s").cast(pa.large_string()))
    server = LanceFlightServer(str(tmp_path), "grpc://127.0.0.1:0", warm=False)
    try:
        client = fl.connect(f"grpc://127.0.0.1:{server.port}")
        for mode, data in (("create", table), ("append", narrow)):
            runs.clear()
            desc = fl.FlightDescriptor.for_command(json.dumps({"dataset": "v", "mode": mode}))
            writer, reader = client.do_put(desc, data.schema)
            writer.write_table(data, max_chunksize=10_000)
            writer.done_writing()
            reader.read()
            writer.close()
            # 4 batches; an append reads its first batch before the write starts
            assert len(runs) == (4 if mode == "create" else 5)
        client.close()
    finally:
        server.shutdown()
    got = lance.dataset(str(tmp_path / "v")).to_table()
    assert got.equals(pa.concat_tables([table, table]))
