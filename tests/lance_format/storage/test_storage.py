"""The storage layer on the local file system and in memory: URIs, ``~``, ``memory://``, the
put-if-not-exists primitive each backend must really enforce, and request counters."""

from __future__ import annotations

import os
import threading

import lance
import numpy as np
import pyarrow as pa
import pytest

import lance_format as lf
from lance_format import storage
from lance_format.errors import InvalidArgumentError, ObjectNotFoundError, UnsupportedError
from lance_format.storage.local import LocalStore
from lance_format.storage.memory import MemoryStore
from lance_format.table import paths


def _table(n: int, start: int = 0) -> pa.Table:
    ids = np.arange(start, start + n)
    return pa.table({"id": pa.array(ids, pa.int64()), "s": [f"v{i}" for i in ids.tolist()]})


def _run_threads(target, n: int) -> None:
    threads = [threading.Thread(target=target, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def _refuses_overwrite(store, key: str) -> None:
    assert store.put_if_not_exists(key, b"first")
    assert not store.put_if_not_exists(key, b"second")
    assert store.get(key) == b"first"  # the loser wrote nothing


def test_local_store_refuses_put_if_not_exists_overwrite(tmp_path):
    store = LocalStore()
    _refuses_overwrite(store, str(tmp_path / "v" / "1.manifest"))
    assert os.listdir(tmp_path / "v") == ["1.manifest"]  # no temporary file left behind


@pytest.mark.parametrize("size", [0, 1, 4095, 1 << 16, (1 << 16) + 1, 3 << 20])
def test_local_whole_file_writes_and_reads_keep_every_byte(tmp_path, size):
    """put/get move whole small files with plain system calls: every size comes back
    exactly (empty, around the read size, several reads' worth), nothing left behind."""
    store = LocalStore()
    data = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8).tobytes()
    key = str(tmp_path / "d" / "f.bin")  # the directory is made on the first write
    store.put(key, data)
    assert store.get(key) == data
    with open(key, "rb") as f:
        assert f.read() == data
    assert store.put_if_not_exists(str(tmp_path / "d" / "g.bin"), data)
    assert store.get(str(tmp_path / "d" / "g.bin")) == data
    assert sorted(os.listdir(tmp_path / "d")) == ["f.bin", "g.bin"]
    with pytest.raises(ObjectNotFoundError):
        store.get(str(tmp_path / "d" / "missing"))


def _fsync_spy(monkeypatch) -> list[tuple[str, bool]]:
    """Every fsync as (the file's path, whether its final name existed at that moment)."""
    calls: list[tuple[str, bool]] = []
    real = os.fsync

    def spy(fd: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        final = path.rsplit(".", 2)[0]  # <final>.<uuid>.partial
        calls.append((path, os.path.exists(final)))
        real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    return calls


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc to name fds")
def test_durable_local_store_fsyncs_each_file_before_it_becomes_visible(tmp_path, monkeypatch):
    calls = _fsync_spy(monkeypatch)
    store = LocalStore(durable=True)
    store.put(str(tmp_path / "a"), b"a")
    assert store.put_if_not_exists(str(tmp_path / "b"), b"b")
    w = store.create(str(tmp_path / "c"))
    w.write(b"c")
    w.commit()
    assert [os.path.basename(p).split(".")[0] for p, _ in calls] == ["a", "b", "c"]
    assert all(p.endswith(".partial") and not visible for p, visible in calls)
    assert [store.get(str(tmp_path / k)) for k in "abc"] == [b"a", b"b", b"c"]
    assert sorted(os.listdir(tmp_path)) == ["a", "b", "c"]


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc to name fds")
def test_default_local_store_is_atomic_without_fsync_like_pylance(tmp_path, monkeypatch):
    """pylance's local store never fsyncs; ours neither, by default, and a dataset written
    and appended this way is complete for pylance, with no temporary file left behind."""
    # the library's default (a server started in this process, as some CLI tests do, turns
    # durability on for the whole process)
    monkeypatch.setattr(storage.registry.LOCAL, "durable", False)
    calls = _fsync_spy(monkeypatch)
    uri = str(tmp_path / "ds")
    lf.write_dataset(_table(100), uri)
    lf.write_dataset(_table(50, 100), uri, mode="append")
    assert calls == []
    got = lance.dataset(uri).to_table()
    assert got.column("id").to_pylist() == list(range(150))
    leftovers = [n for _, _, files in os.walk(uri) for n in files if n.endswith(".partial")]
    assert leftovers == []


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc to name fds")
def test_local_durability_switch_fsyncs_data_before_the_manifest(tmp_path, monkeypatch):
    """``storage.local_durability(True)`` (the server's default) makes dataset writes fsync
    every data file before the manifest that names them, and the manifest before it is
    visible; switching it off again restores pylance's behaviour."""
    calls = _fsync_spy(monkeypatch)
    uri = str(tmp_path / "ds")
    storage.local_durability(True)
    try:
        lf.write_dataset(_table(100), uri)
    finally:
        storage.local_durability(False)
    kinds = [os.path.basename(os.path.dirname(p)) for p, _ in calls]
    assert "data" in kinds and kinds[-1] == "_versions"
    assert kinds.index("data") < kinds.index("_transactions") < kinds.index("_versions")
    # the manifest and the hint become visible whole: fsynced under a temporary name
    replaced = [(p, visible) for p, visible in calls if p.endswith(".partial")]
    assert {os.path.basename(os.path.dirname(p)) for p, _ in replaced} == {"_versions"}
    assert not any(visible for _, visible in replaced)
    # data and transaction files have fresh names only the manifest gives out: written in
    # place, and fsynced before it
    in_place = {os.path.basename(os.path.dirname(p)) for p, _ in calls if p not in dict(replaced)}
    assert in_place == {"data", "_transactions"}
    calls.clear()
    lf.write_dataset(_table(50, 100), uri, mode="append")
    assert calls == []
    assert lance.dataset(uri).count_rows() == 150


def test_memory_store_refuses_put_if_not_exists_overwrite():
    _refuses_overwrite(MemoryStore(), "ds/_versions/1.manifest")


def test_put_if_not_exists_has_one_winner_under_contention(tmp_path):
    """16 threads race for one name: exactly one wins, and its bytes are the file's."""
    path = str(tmp_path / "race")
    wins: list[bytes] = []
    barrier = threading.Barrier(16)

    def attempt(i: int) -> None:
        data = f"writer {i}".encode()
        barrier.wait()
        if storage.put_if_not_exists(path, data):
            wins.append(data)

    _run_threads(attempt, 16)
    assert len(wins) == 1
    assert storage.read_bytes(path) == wins[0]


def test_memory_dataset_is_in_memory_and_not_a_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    uri = "memory://tests/mem-ds"
    lf.write_dataset(_table(10), uri)
    lf.write_dataset(_table(5, 10), uri, mode="append")
    ds = lf.dataset(uri)
    assert ds.version == 2
    assert ds.to_table().column("id").to_pylist() == list(range(15))
    assert os.listdir(tmp_path) == []  # no ./memory:/ folder
    assert storage.list_names("memory://tests/mem-ds/_versions")  # the store holds it
    ds.delete("id < 3")
    assert lf.dataset(uri).count_rows() == 12


def test_memory_store_is_shared_by_uri_within_the_process():
    lf.write_dataset(_table(4), "memory://tests/shared")
    assert lf.dataset("memory://tests/shared/").count_rows() == 4  # trailing / is the same
    with pytest.raises(lf.LanceError):
        lf.dataset("memory://tests/other")


def test_tilde_follows_home_when_it_changes(tmp_path, monkeypatch):
    """Resolved paths are kept for speed, but not those with ``~``: HOME may change."""
    for name in ("a", "b"):
        monkeypatch.setenv("HOME", str(tmp_path / name))
        assert storage.normalize("~/d.lance/") == str(tmp_path / name / "d.lance")
        assert storage.resolve("~/d.lance")[1] == str(tmp_path / name / "d.lance")
    assert storage.normalize("/x/y//") == "/x/y" == storage.normalize("file:///x/y")


def test_tilde_expands_to_home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    lf.write_dataset(_table(7), "~/tilde.lance")
    assert os.path.isdir(tmp_path / "tilde.lance" / "_versions")
    assert not os.path.exists("~")
    assert (
        lance.dataset(str(tmp_path / "tilde.lance"))
        .to_table()
        .equals(lf.dataset("~/tilde.lance").to_table())
    )
    writer = lf.LanceFileWriter("~/one.lance", _table(3).schema)
    writer.write_table(_table(3))
    writer.close()
    assert lf.LanceFileReader("~/one.lance").read().equals(_table(3))
    assert os.path.isfile(tmp_path / "one.lance")


def test_file_uri_is_the_local_path(tmp_path):
    lf.write_dataset(_table(6), f"file://{tmp_path}/f.lance")
    assert lance.dataset(str(tmp_path / "f.lance")).count_rows() == 6
    assert lf.dataset(str(tmp_path / "f.lance")).count_rows() == 6


def test_bad_uris_are_refused_clearly():
    with pytest.raises(UnsupportedError, match="unsupported storage scheme gs://"):
        lf.dataset("gs://bucket/ds")
    with pytest.raises(InvalidArgumentError, match="ddbTableName"):
        lf.dataset("s3+ddb://bucket/ds")
    with pytest.raises(InvalidArgumentError, match="names no bucket"):
        storage.normalize("s3:///ds")
    with pytest.raises(InvalidArgumentError, match="storage_options"):
        lf.dataset("memory://x", storage_options=["endpoint"])


def test_missing_objects_raise_not_found(tmp_path):
    for path in (str(tmp_path / "nope"), "memory://tests/nope"):
        with pytest.raises(ObjectNotFoundError):
            storage.read_bytes(path)
        with pytest.raises(FileNotFoundError):  # a FileNotFoundError too
            storage.file_size(path)
        assert not storage.exists(path)
        storage.delete(path, missing_ok=True)


def test_latest_version_is_one_listing(tmp_path):
    """V2 names: the newest version comes from one LIST of _versions/, whatever the count."""
    uri = "memory://tests/one-list"
    lf.write_dataset(_table(2), uri)
    for i in range(5):
        lf.write_dataset(_table(2, 10 * i), uri, mode="append")
    stats = storage.stats(uri)
    stats.reset()
    assert paths.latest_version(uri).version == 6
    assert stats.requests == 1


def test_counters_see_reads_and_writes():
    uri = "memory://tests/counted"
    stats = storage.stats(uri)
    stats.reset()
    lf.write_dataset(_table(100), uri)
    written = stats.bytes_written
    assert written > 0 and stats.requests > 0
    stats.reset()
    table = lf.dataset(uri).to_table()
    assert table.num_rows == 100
    assert stats.bytes_read > 0 and stats.bytes_written == 0


def test_cleanup_and_compaction_on_memory_store():
    uri = "memory://tests/compact"
    lf.write_dataset(_table(10), uri)
    for i in range(1, 4):
        lf.write_dataset(_table(10, 10 * i), uri, mode="append")
    ds = lf.dataset(uri)
    ds.compact_files()
    ds = lf.dataset(uri)
    assert len(ds.get_fragments()) == 1
    import datetime as dt

    ds.cleanup_old_versions(dt.timedelta(0), delete_unverified=True)
    names = storage.list_names(f"{uri}/data")
    assert names == [f.pb.files[0].path for f in lf.dataset(uri).get_fragments()]
    assert sorted(lf.dataset(uri).to_table().column("id").to_pylist()) == list(range(40))


def test_unknown_s3_option_is_refused_by_name():
    with pytest.raises(InvalidArgumentError, match="'bogus_key' is not valid") as e:
        lf.dataset("s3://some-bucket/ds", storage_options={"bogus_key": "1"})
    assert "\n" not in str(e.value)  # one clear line, no debug dump


def test_storage_option_flags_parse_into_a_dict():
    from flight_server.serve import storage_options

    assert storage_options([]) is None
    assert storage_options(["endpoint=http://h:1", "allow_http=true", "k=a=b"]) == {
        "endpoint": "http://h:1",
        "allow_http": "true",
        "k": "a=b",
    }
    with pytest.raises(InvalidArgumentError, match="KEY=VALUE"):
        storage_options(["endpoint"])


def test_concurrent_appends_to_a_memory_dataset_all_land():
    uri = "memory://tests/threads"
    lf.write_dataset(_table(1).slice(0, 0), uri)
    errors: list[BaseException] = []

    def appender(w: int) -> None:
        try:
            for i in range(5):
                lf.write_dataset(_table(2, 100 * w + 2 * i), uri, mode="append")
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)

    _run_threads(appender, 6)
    assert not errors
    ds = lf.dataset(uri)
    assert ds.version == 1 + 6 * 5
    expected = sorted(100 * w + j for w in range(6) for j in range(10))
    assert sorted(ds.to_table().column("id").to_pylist()) == expected


@pytest.mark.parametrize("kind", ["local", "memory", "s3"])
def test_object_operations_behave_alike_on_every_backend(kind, tmp_path, request):
    if kind == "s3":
        moto = request.getfixturevalue("moto_server")
        base = storage.register(f"s3://{moto.new_bucket()}/ops", moto.options)
    else:
        base = str(tmp_path / "ops") if kind == "local" else "memory://tests/ops"
    storage.put(f"{base}/a/x.bin", b"12345")
    storage.put(f"{base}/a/sub/y.bin", b"6")
    storage.copy(f"{base}/a/x.bin", f"{base}/b/x.bin")
    storage.rename(f"{base}/a/sub/y.bin", f"{base}/b/y.bin")
    emptied = ["sub"] if kind == "local" else []  # a local directory stays until pruned
    assert storage.list_dir(f"{base}/a") == (["x.bin"], emptied)
    assert storage.list_dir(f"{base}/b") == (["x.bin", "y.bin"], [])
    assert storage.read_bytes(f"{base}/b/y.bin") == b"6"
    assert storage.file_size(f"{base}/b/x.bin") == 5
    f = storage.open_file(f"{base}/b/x.bin")
    assert f.read_ranges([(3, 2), (0, 1)]) == [b"45", b"1"]
    with pytest.raises(lf.CorruptFileError):
        f.read_at(4, 2)  # past the end: refused before any request
    assert storage.delete_prefix(base) == 11
    assert storage.list_files(base) == []


def test_fresh_names_are_written_in_place_on_a_local_disk(tmp_path, monkeypatch):
    """Objects under fresh names nothing reads before a manifest names them (data and
    transaction files) skip the temporary file and its rename; a name that turns out to
    exist is replaced atomically, as by put/create."""
    store = LocalStore()
    renames = []
    real_replace = os.replace
    monkeypatch.setattr(os, "replace", lambda a, b: renames.append(b) or real_replace(a, b))
    w = store.create_new(str(tmp_path / "d" / "f.lance"))
    w.write(b"abc")
    assert os.listdir(tmp_path / "d") == ["f.lance"]  # in place, no temporary file
    w.write(b"def")
    w.commit()
    store.put_new(str(tmp_path / "t" / "1.txn"), b"txn")
    assert renames == []
    assert store.get(str(tmp_path / "d" / "f.lance")) == b"abcdef"
    assert store.get(str(tmp_path / "t" / "1.txn")) == b"txn"
    aborted = store.create_new(str(tmp_path / "d" / "g.lance"))
    aborted.write(b"x")
    aborted.abort()
    assert os.listdir(tmp_path / "d") == ["f.lance"]
    # not fresh after all: replaced whole, through a temporary file
    store.put_new(str(tmp_path / "t" / "1.txn"), b"again")
    again = store.create_new(str(tmp_path / "d" / "f.lance"))
    again.write(b"new")
    assert store.get(str(tmp_path / "d" / "f.lance")) == b"abcdef"  # still the old bytes
    again.commit()
    assert store.get(str(tmp_path / "d" / "f.lance")) == b"new"
    assert store.get(str(tmp_path / "t" / "1.txn")) == b"again"
    assert len(renames) == 2


def test_an_append_renames_only_the_version_hint(tmp_path, monkeypatch):
    uri = str(tmp_path / "ds")
    lf.write_dataset(_table(100), uri)
    renamed = []
    real_replace = os.replace
    monkeypatch.setattr(os, "replace", lambda a, b: renamed.append(b) or real_replace(a, b))
    lf.write_dataset(_table(50, 100), uri, mode="append")
    assert [os.path.basename(p) for p in renamed] == ["latest_version_hint.json"]
    assert lance.dataset(uri).to_table().column("id").to_pylist() == list(range(150))
    leftovers = [n for _, _, files in os.walk(uri) for n in files if n.endswith(".partial")]
    assert leftovers == []


@pytest.mark.parametrize("kind", ["memory", "s3"])
def test_fresh_names_on_other_stores_are_whole_writes(kind, request):
    if kind == "s3":
        moto = request.getfixturevalue("moto_server")
        base = storage.register(f"s3://{moto.new_bucket()}/fresh", moto.options)
    else:
        base = "memory://tests/fresh"
    storage.put_new(f"{base}/t/1.txn", b"txn")
    w = storage.create_new(f"{base}/d/f.lance")
    w.write(b"abc")
    assert not storage.exists(f"{base}/d/f.lance")  # an upload: nothing until commit
    w.commit()
    assert storage.read_bytes(f"{base}/d/f.lance") == b"abc"
    assert storage.read_bytes(f"{base}/t/1.txn") == b"txn"
    storage.put_new(f"{base}/t/1.txn", b"again")
    assert storage.read_bytes(f"{base}/t/1.txn") == b"again"
    assert storage.delete_prefix(base) == 8
