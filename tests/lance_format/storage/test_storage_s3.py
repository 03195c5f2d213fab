"""Datasets on S3 (moto's server): both implementations on one bucket, conditional-put
commits, the external manifest store on DynamoDB, killed writers, ranged reads."""

from __future__ import annotations

import datetime as dt
import multiprocessing as mp
import os
import random
import signal
import time

import lance
import numpy as np
import pyarrow as pa
import pytest

import lance_format as lf
from lance_format import storage
from lance_format.errors import CommitConflictError, CorruptFileError
from lance_format.storage.commit import ExternalManifestCommitHandler
from lance_format.storage.s3 import S3Store
from lance_format.table import paths


def _table(n: int, start: int = 0) -> pa.Table:
    ids = np.arange(start, start + n)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "x": pa.array(ids * 0.5),
            "s": [None if i % 7 == 0 else f"value-{i}" for i in ids.tolist()],
        }
    )


def _same_everywhere(uri: str, options: dict) -> int:
    """Every version reads the same through both implementations; the latest version."""
    ours = lf.dataset(uri, storage_options=options)
    theirs = lance.dataset(uri, storage_options=options)
    assert ours.version == theirs.version
    for v in range(1, ours.version + 1):
        mine = lf.dataset(uri, v, storage_options=options).to_table()
        assert mine.equals(lance.dataset(uri, version=v, storage_options=options).to_table())
    return ours.version


def test_s3_store_refuses_put_if_not_exists_overwrite(moto_server):
    store = S3Store(moto_server.new_bucket(), moto_server.options)
    assert store.put_if_not_exists("ds/_versions/1.manifest", b"first")
    assert not store.put_if_not_exists("ds/_versions/1.manifest", b"second")
    assert store.get("ds/_versions/1.manifest") == b"first"


def test_pylance_writes_we_read_every_version(moto_server, s3_root):
    uri, opts = f"{s3_root}/theirs.lance", moto_server.options
    lance.write_dataset(_table(300), uri, storage_options=opts, max_rows_per_file=120)
    lance.write_dataset(_table(50, 300), uri, mode="append", storage_options=opts)
    lance.dataset(uri, storage_options=opts).delete("id % 10 = 3")
    lance.write_dataset(_table(20, 1000), uri, mode="overwrite", storage_options=opts)
    assert _same_everywhere(uri, opts) == 4
    ds = lf.dataset(uri, 3, storage_options=opts)
    theirs = lance.dataset(uri, version=3, storage_options=opts)
    assert ds.take([0, 5, 200]).equals(theirs.take([0, 5, 200]))


def test_we_write_append_delete_compact_and_pylance_reads(moto_server, s3_root):
    uri, opts = f"{s3_root}/ours.lance", moto_server.options
    lf.write_dataset(_table(200), uri, storage_options=opts, max_rows_per_file=80)
    lf.write_dataset(_table(40, 200), uri, mode="append", storage_options=opts)
    lf.dataset(uri, storage_options=opts).delete("id < 15 OR s IS NULL")
    lf.dataset(uri, storage_options=opts).compact_files()
    assert _same_everywhere(uri, opts) >= 4
    ds = lf.dataset(uri, storage_options=opts)
    assert len(ds.get_fragments()) == 1
    ds.cleanup_old_versions(dt.timedelta(0), delete_unverified=True)
    theirs = lance.dataset(uri, storage_options=opts)
    kept = {df.path for f in theirs.get_fragments() for df in f.data_files()}
    assert set(storage.list_names(f"{uri}/data")) == kept  # the compacted-away files are gone
    expected = [i for i in range(240) if i >= 15 and i % 7 != 0]
    assert sorted(theirs.to_table().column("id").to_pylist()) == expected


def test_histories_alternate_between_the_two(moto_server, s3_root):
    uri, opts = f"{s3_root}/both.lance", moto_server.options
    lance.write_dataset(_table(50), uri, storage_options=opts)
    lf.write_dataset(_table(50, 50), uri, mode="append", storage_options=opts)
    lance.write_dataset(_table(50, 100), uri, mode="append", storage_options=opts)
    lf.dataset(uri, storage_options=opts).delete("id % 5 = 0")
    lance.dataset(uri, storage_options=opts).delete("id % 5 = 1")
    lf.write_dataset(_table(10, 500), uri, mode="append", storage_options=opts)
    assert _same_everywhere(uri, opts) == 6
    ids = lf.dataset(uri, storage_options=opts).to_table().column("id").to_pylist()
    assert sorted(ids) == [i for i in range(150) if i % 5 > 1] + list(range(500, 510))


def test_aws_environment_variables_configure_the_store(moto_server, s3_root, monkeypatch):
    for key, value in moto_server.env.items():
        monkeypatch.setenv(key, value)
    uri = f"{s3_root}/env.lance"
    lance.write_dataset(_table(30), uri, storage_options={"allow_http": "true"})
    # a fresh store (no options) is built from the environment
    storage.registry._s3_stores.clear()
    storage.registry._mounts.clear()
    assert lf.dataset(uri).to_table().equals(lance.dataset(uri).to_table())


def test_conditional_put_refusal_rebases_a_compatible_commit(moto_server, s3_root):
    uri, opts = f"{s3_root}/rebase.lance", moto_server.options
    lf.write_dataset(_table(100), uri, storage_options=opts)
    stale = lf.dataset(uri, storage_options=opts)  # read at version 1
    lance.write_dataset(_table(10, 100), uri, mode="append", storage_options=opts)  # v2
    stale.delete("id < 5")  # its first attempt at v2 is refused by the store, then rebased
    assert _same_everywhere(uri, opts) == 3
    v2 = lance.dataset(uri, version=2, storage_options=opts)
    assert v2.count_rows() == 110  # the append's v2 was not overwritten
    latest = lf.dataset(uri, storage_options=opts)
    assert sorted(latest.to_table().column("id").to_pylist()) == list(range(5, 110))


def test_conditional_put_refusal_of_an_incompatible_commit_raises(moto_server, s3_root):
    uri, opts = f"{s3_root}/conflict.lance", moto_server.options
    lf.write_dataset(_table(100), uri, storage_options=opts)
    stale = lf.dataset(uri, storage_options=opts)
    lance.write_dataset(_table(3, 900), uri, mode="overwrite", storage_options=opts)
    with pytest.raises(CommitConflictError):
        stale.delete("id < 5")
    assert _same_everywhere(uri, opts) == 2


def test_take_costs_at_most_two_requests_per_column_after_warm_up(moto_server, s3_root):
    uri, opts = f"{s3_root}/take.lance", moto_server.options
    lf.write_dataset(_table(20_000), uri, storage_options=opts, max_rows_per_file=5000)
    ds = lf.dataset(uri, storage_options=opts, cache=lf.SearchCache(64 << 20))
    rng = np.random.default_rng(3)
    ds.take(rng.integers(0, 20_000, 50).tolist())  # warm-up: file metadata cached
    stats = storage.stats(uri)
    for row in rng.integers(0, 20_000, 20).tolist():
        stats.reset()
        got = ds.take([row])
        assert got.column("id").to_pylist() == [row]
        assert 1 <= stats.requests <= 2 * ds.schema.__len__()
    stats.reset()
    assert paths.latest_version(uri).version == 1
    assert stats.requests == 1  # one LIST finds the latest version


def test_ranged_reads_are_coalesced(moto_server):
    store = S3Store(moto_server.new_bucket(), moto_server.options)
    blob = bytes(range(256)) * 4096  # 1 MiB
    store.put("f", blob)
    store.stats.reset()
    ranges = [(0, 10), (100, 10), (500_000, 20), (1_000_000, 5)]
    got = store.get_ranges("f", ranges)
    assert got == [blob[o : o + n] for o, n in ranges]
    assert store.stats.requests == 3  # the first two are one request, the others apart
    assert store.stats.bytes_read == 110 + 20 + 5


def _committing_writer(uri: str, options: dict, run: int) -> None:
    base = 10_000_000 * (run + 1)
    for i in range(100_000):
        batch = pa.table({"id": pa.array(np.arange(100) + 100 * i + base, pa.int64())})
        lf.write_dataset(batch, uri, mode="append", storage_options=options)
        if i % 3 == 2:
            lf.dataset(uri, storage_options=options).delete(f"id = {base + 100 * i}")


def test_writer_killed_mid_commit_leaves_every_version_readable(moto_server, s3_root):
    uri, opts = f"{s3_root}/killed.lance", moto_server.options
    lf.write_dataset(
        pa.table({"id": pa.array(np.arange(10), pa.int64())}), uri, storage_options=opts
    )
    ctx = mp.get_context("spawn")
    rng = random.Random(11)
    for run in range(2):
        before = lf.dataset(uri, storage_options=opts).version
        p = ctx.Process(target=_committing_writer, args=(uri, opts, run))
        p.start()
        deadline = time.monotonic() + 60
        while lf.dataset(uri, storage_options=opts).version < before + 2 + run:
            assert time.monotonic() < deadline, "the writer never committed"
            time.sleep(0.05)
        time.sleep(rng.random() * 0.5)  # land somewhere inside a write or a commit
        os.kill(p.pid, signal.SIGKILL)
        p.join()
        _same_everywhere(uri, opts)
    ids = lance.dataset(uri, storage_options=opts).to_table().column("id").to_numpy()
    assert len(np.unique(ids)) == len(ids)


# -- the external manifest store (s3+ddb://) ---------------------------------------------


def _ddb(moto_server, s3_root: str, name: str) -> tuple[str, dict]:
    table = moto_server.new_ddb_table()
    bucket = s3_root.removeprefix("s3://")
    opts = {**moto_server.options, "dynamodb_endpoint": moto_server.endpoint}
    return f"s3+ddb://{bucket}/{name}?ddbTableName={table}", opts


def _ddb_items(moto_server, uri: str) -> list[dict]:
    table = uri.rsplit("=", 1)[1]
    return moto_server.client("dynamodb").scan(TableName=table, ConsistentRead=True)["Items"]


def test_external_store_commits_and_pylance_interoperates(moto_server, s3_root):
    uri, opts = _ddb(moto_server, s3_root, "ext.lance")
    lf.write_dataset(_table(40), uri, storage_options=opts)
    lance.write_dataset(_table(10, 40), uri, mode="append", storage_options=opts)
    lf.write_dataset(_table(10, 50), uri, mode="append", storage_options=opts)
    lance.dataset(uri, storage_options=opts).delete("id < 4")
    assert _same_everywhere(uri, opts) == 4
    items = _ddb_items(moto_server, uri)
    assert sorted(int(i["version"]["N"]) for i in items) == [1, 2, 3, 4]
    for item in items:  # every entry ends pointing at a final manifest name
        assert item["path"]["S"].endswith(".manifest")
        assert item["base_uri"]["S"] == "ext.lance"


def _commit_cut_after_the_commit_point(uri: str, opts: dict, monkeypatch) -> str:
    """Version 1, then an append whose writer dies right after its DynamoDB entry is put
    (the staged manifest is never copied to its final name); the dataset root."""
    lf.write_dataset(_table(20), uri, storage_options=opts)

    def crash(*args, **kwargs):
        raise KeyboardInterrupt("the writer died after putting the DynamoDB entry")

    with monkeypatch.context() as m:
        m.setattr(ExternalManifestCommitHandler, "_finalize", crash)
        with pytest.raises(KeyboardInterrupt):
            lf.write_dataset(_table(5, 20), uri, mode="append", storage_options=opts)
    return storage.normalize(uri)


def test_external_store_reader_repairs_a_commit_cut_after_the_commit_point(
    moto_server, s3_root, monkeypatch
):
    uri, opts = _ddb(moto_server, s3_root, "repair.lance")
    root = _commit_cut_after_the_commit_point(uri, opts, monkeypatch)
    names = storage.list_names(f"{root}/_versions")
    assert any(".manifest-" in n for n in names)  # only the staged manifest exists
    assert lance.dataset(uri, storage_options=opts).version == 2  # pylance sees it via DDB
    ds = lf.dataset(uri, storage_options=opts)  # we finish the commit while listing
    assert ds.version == 2 and ds.count_rows() == 25
    names = storage.list_names(f"{root}/_versions")
    assert not any(".manifest-" in n for n in names)
    assert _same_everywhere(uri, opts) == 2


def test_external_store_reader_refuses_when_the_stores_disagree(moto_server, s3_root, monkeypatch):
    uri, opts = _ddb(moto_server, s3_root, "refuse.lance")
    root = _commit_cut_after_the_commit_point(uri, opts, monkeypatch)
    for name in storage.list_names(f"{root}/_versions"):
        if ".manifest-" in name:
            storage.delete(f"{root}/_versions/{name}")  # the staged manifest is lost too
    with pytest.raises(CorruptFileError, match="refusing to load"):
        lf.dataset(uri, storage_options=opts)


def test_file_reader_and_writer_take_object_store_uris(moto_server, s3_root):
    opts = moto_server.options
    table = _table(5000)
    ours_path, theirs_path = f"{s3_root}/files/ours.lance", f"{s3_root}/files/theirs.lance"
    with lf.LanceFileWriter(ours_path, table.schema, storage_options=opts) as w:
        w.write_table(table)
    from lance.file import LanceFileReader as TheirReader
    from lance.file import LanceFileWriter as TheirWriter

    theirs = TheirReader(ours_path, storage_options=opts).read_all().to_table()
    assert theirs.equals(table)
    with TheirWriter(theirs_path, table.schema, storage_options=opts) as w:
        w.write_batch(table)
    ours = lf.LanceFileReader(theirs_path, storage_options=opts)
    assert ours.read().equals(table)
    assert ours.take([4999, 0, 17]).equals(table.take([4999, 0, 17]))


def test_an_aborted_file_write_leaves_nothing_in_the_bucket(moto_server, s3_root):
    path = f"{s3_root}/files/aborted.lance"
    w = lf.LanceFileWriter(path, _table(100).schema, storage_options=moto_server.options)
    w.write_table(_table(100))
    w.abort()
    storage.register(s3_root, moto_server.options)
    assert storage.list_names(f"{s3_root}/files") == []


def test_a_server_root_in_a_missing_bucket_is_refused_at_start(moto_server, s3_root):
    from flight_server.catalog import Catalog

    with pytest.raises(lf.LanceError, match="cannot list the dataset root"):
        Catalog("s3://no-such-bucket-here/x", lf.SearchCache(1 << 20), moto_server.options)
    lf.write_dataset(_table(3), f"{s3_root}/a/b", storage_options=moto_server.options)
    catalog = Catalog(s3_root, lf.SearchCache(1 << 20), moto_server.options)
    assert catalog.names() == ["a/b"]
    assert catalog.open("a/b").count_rows() == 3


def test_external_store_commit_is_durable_once_the_final_manifest_exists(
    moto_server, s3_root, monkeypatch
):
    """A DynamoDB failure after the copy does not fail the commit; a reader re-points the
    entry afterwards."""
    from lance_format.storage.dynamodb import DynamoDBManifestStore

    uri, opts = _ddb(moto_server, s3_root, "durable.lance")
    lf.write_dataset(_table(20), uri, storage_options=opts)
    real = DynamoDBManifestStore.put_if_exists

    def unavailable(self, *args, **kwargs):
        raise lf.LanceIOError("DynamoDB unavailable")

    monkeypatch.setattr(DynamoDBManifestStore, "put_if_exists", unavailable)
    assert lf.write_dataset(_table(5, 20), uri, mode="append", storage_options=opts).version == 2
    staged = [i for i in _ddb_items(moto_server, uri) if int(i["version"]["N"]) == 2]
    assert ".manifest-" in staged[0]["path"]["S"]  # the entry still names the staged copy
    monkeypatch.setattr(DynamoDBManifestStore, "put_if_exists", real)
    assert _same_everywhere(uri, opts) == 2
    entry = [i for i in _ddb_items(moto_server, uri) if int(i["version"]["N"]) == 2][0]
    assert entry["path"]["S"].endswith(".manifest")  # repaired by our reader


def test_tags_and_restore_on_s3_are_shared_with_pylance(moto_server, s3_root):
    uri, opts = f"{s3_root}/tags.lance", moto_server.options
    lf.write_dataset(_table(10), uri, storage_options=opts)
    lf.write_dataset(_table(10, 10), uri, mode="append", storage_options=opts)
    ours = lf.dataset(uri, storage_options=opts)
    ours.tags.create("first", 1)
    with pytest.raises(lf.LanceError):
        ours.tags.create("first", 2)  # a tag is created once (put-if-not-exists)
    theirs = lance.dataset(uri, storage_options=opts)
    assert theirs.tags.list()["first"]["version"] == 1
    theirs.tags.create("second", 2)
    assert lf.dataset(uri, "second", storage_options=opts).count_rows() == 20
    assert lf.dataset(uri, "first", storage_options=opts).count_rows() == 10
    lf.dataset(uri, storage_options=opts).restore("first")
    assert _same_everywhere(uri, opts) == 3
    assert lance.dataset(uri, storage_options=opts).count_rows() == 10
    ours.tags.delete("second")
    assert set(lance.dataset(uri, storage_options=opts).tags.list()) == {"first"}


def test_staging_jobs_on_s3_remove_what_they_staged(moto_server, s3_root):
    from lance_format.table import staging, write

    uri, opts = f"{s3_root}/staged.lance", moto_server.options
    ds = lf.write_dataset(_table(10), uri, storage_options=opts)
    job = staging.StagingJob(ds.uri, "job-1")
    record = job.new_put(ds.version)
    frags = write.write_fragments(
        _table(30, 10), ds.uri, ds.lance_schema, max_rows_per_file=10, on_new_file=record.add
    )
    staged = {df.path for f in frags for df in f.files}
    assert staged <= set(storage.list_names(f"{ds.uri}/data")) and len(staged) == 3
    job.mark(staging.ABORTED)
    assert job.state() == "aborted"
    assert job.remove_uncommitted() == 3
    assert set(storage.list_names(f"{ds.uri}/data")).isdisjoint(staged)
    assert staging.remove_stale_jobs(ds.uri, time.time() + 60) > 0  # the marker goes too
    assert storage.list_names(f"{ds.uri}/_staging") == []
    assert _same_everywhere(uri, opts) == 1


def test_option_values_may_be_python_booleans(moto_server, s3_root):
    opts = {**moto_server.options, "allow_http": True, "virtual_hosted_style_request": False}
    uri = f"{s3_root}/bools.lance"
    lf.write_dataset(_table(5), uri, storage_options=opts)
    assert lance.dataset(uri, storage_options=moto_server.options).count_rows() == 5


def test_a_large_data_file_goes_up_in_parts(moto_server, s3_root):
    """Over the part size the upload is multipart; the object appears whole, once."""
    from lance_format.storage import s3 as s3_backend

    rng = np.random.default_rng(5)
    table = pa.table({"v": pa.array(rng.random(1_500_000))})  # ~12 MB of incompressible doubles
    path = f"{s3_root}/big/one.lance"
    with lf.LanceFileWriter(path, table.schema, storage_options=moto_server.options) as w:
        w.write_table(table)
    assert storage.file_size(path) > s3_backend.PART_SIZE
    bucket = s3_root.removeprefix("s3://")
    etag = moto_server.client().head_object(Bucket=bucket, Key="big/one.lance")["ETag"]
    assert "-" in etag  # S3 gives multipart objects an ETag ending in -<parts>
    from lance.file import LanceFileReader as TheirReader

    got = TheirReader(path, storage_options=moto_server.options).read_all().to_table()
    assert got.equals(table)
