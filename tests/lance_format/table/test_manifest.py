"""Versions, manifests, feature flags and tags against pylance 14 in both directions.

pylance writes histories (create in two fragments, append, a partial delete, a delete that
empties a fragment, add_columns, tags, a config change, overwrite) in file versions 2.0, 2.1
and 2.2, with V1 and V2 manifest names, with stable row ids on and off.  Every manifest is
read with ours and compared with ``lance.dataset(uri, version=v)``.  Then we write
manifests (a restore of an older version as the next version) and pylance must open them,
read the same rows and keep committing on top of them.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import struct
import time
import uuid

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute  # noqa: F401
import pytest

from lance_format.errors import (
    CorruptFileError,
    InvalidArgumentError,
    LanceError,
    UnsupportedError,
)
from lance_format.pb import table_pb2, transaction_pb2
from lance_format.table import dataset_write, features, manifest, paths, tags
from lance_format.table.paths import ManifestNaming

STORAGE = ["2.0", "2.1", "2.2"]
MATRIX = [(s, v2, stable) for s in STORAGE for v2 in (True, False) for stable in (False, True)]
MATRIX_IDS = [f"{s}-{'V2' if v2 else 'V1'}-{'stable' if st else 'addr'}" for s, v2, st in MATRIX]


def _table(start: int, n: int) -> pa.Table:
    ids = np.arange(start, start + n, dtype=np.int64)
    return pa.table({"a": ids, "s": pa.array([f"s{i}" for i in ids])})


def _build_history(root: str, storage: str, v2_names: bool, stable: bool) -> None:
    lance.write_dataset(
        _table(0, 300),
        root,
        data_storage_version=storage,
        enable_v2_manifest_paths=v2_names,
        enable_stable_row_ids=stable,
        max_rows_per_file=150,
    )  # v1: fragments 0, 1
    lance.write_dataset(_table(300, 100), root, mode="append")  # v2: fragment 2
    lance.dataset(root).delete("a < 20")  # v3: deletion file on fragment 0
    lance.dataset(root).delete("a >= 300")  # v4: fragment 2 dropped
    lance.dataset(root).add_columns({"x2": "a * 2"})  # v5: a second data file per fragment
    ds = lance.dataset(root)
    ds.tags.create("first", 1)
    ds.tags.create("with_x2", 5)
    ds.update_config({"lf.test": "yes"})  # v6: table config (writer flag 8)
    lance.write_dataset(_table(1000, 50), root, mode="overwrite")  # v7


@pytest.fixture(scope="module")
def histories(tmp_path_factory) -> dict:
    base = tmp_path_factory.mktemp("manifest_histories")
    out = {}
    for case, name in zip(MATRIX, MATRIX_IDS, strict=True):
        root = str(base / name)
        _build_history(root, *case)
        out[case] = root
    return out


@pytest.fixture(params=MATRIX, ids=MATRIX_IDS)
def history(request, histories, tmp_path):
    """A private copy of one history (tests may commit to it)."""
    storage, v2_names, stable = request.param
    root = str(tmp_path / "ds")
    shutil.copytree(histories[request.param], root)
    return root, storage, v2_names, stable


def _local_utc(naive: dt.datetime) -> dt.datetime:
    """pylance's versions() timestamps are naive local times."""
    return naive.astimezone(dt.UTC)


# -- reading what pylance wrote ------------------------------------------------------------


def _compare_version(root: str, entry: paths.VersionEntry, stable: bool) -> manifest.Manifest:
    m = manifest.read_manifest(entry.path)
    ds = lance.dataset(root, version=entry.version)
    assert m.version == ds.version == entry.version
    assert m.schema.to_arrow().equals(ds.schema)
    assert m.data_storage_version == ds.data_storage_version
    assert m.stable_row_ids == ds.has_stable_row_ids == stable
    frags = ds.get_fragments()
    assert m.fragment_ids == [f.fragment_id for f in frags]
    assert m.max_fragment_id is not None and m.max_fragment_id >= max(m.fragment_ids)
    for pbf, frag in zip(m.fragments, frags, strict=True):
        md = frag.metadata
        assert pbf.physical_rows == md.physical_rows
        assert [f.path for f in pbf.files] == [f.path for f in md.files]
        assert [list(f.fields) for f in pbf.files] == [list(f.fields) for f in md.files]
        for f in pbf.files:
            on_disk = paths.data_file_path(root, f.path)
            assert os.path.getsize(on_disk) == f.file_size_bytes
        if md.deletion_file is None:
            assert not pbf.HasField("deletion_file")
        else:
            ours = paths.deletion_file_path(root, pbf.id, pbf.deletion_file)
            assert ours == os.path.join(root, md.deletion_file.path(frag.fragment_id))
            assert os.path.exists(ours)
            assert pbf.deletion_file.num_deleted_rows == md.deletion_file.num_deleted_rows
        assert features.has_row_id_sequence(pbf) == (md.row_id_meta is not None)
    # flags: ours computed from the contents equal what pylance stored, and we support them
    assert features.required_flags(m.pb) == (m.reader_feature_flags, m.writer_feature_flags)
    features.check_reader_flags(m)
    features.check_writer_flags(m)
    # the transaction: inline copy == the .txn file, named {read_version}-{uuid}.txn
    txn = m.transaction
    assert m.transaction_file == paths.transaction_file_name(txn.read_version, txn.uuid)
    with open(paths.transaction_file_path(root, m.transaction_file), "rb") as f:
        assert f.read() == m.transaction_bytes
    # commit time as pylance reports it
    listed = {v["version"]: v["timestamp"] for v in ds.versions()}
    assert abs(m.timestamp - _local_utc(listed[m.version])) < dt.timedelta(microseconds=2)
    # re-encoding reproduces pylance's bytes exactly (framing, field 23, footer 0.2)
    with open(entry.path, "rb") as f:
        assert manifest.encode_manifest(m) == f.read()
    return m


def test_read_every_version(history):
    root, storage, v2_names, stable = history
    versions = paths.list_versions(root)
    assert [e.version for e in versions] == [v["version"] for v in lance.dataset(root).versions()]
    assert [e.version for e in versions] == list(range(1, 8))
    naming = ManifestNaming.V2 if v2_names else ManifestNaming.V1
    assert {e.naming for e in versions} == {naming}
    for e in versions:
        assert os.path.basename(e.path) == paths.manifest_name(e.version, naming)
    assert paths.latest_version(root) == versions[-1]
    assert paths.read_version_hint(root) == 7
    ops = []
    for e in versions:
        m = _compare_version(root, e, stable)
        assert m.data_storage_version == storage
        ops.append(m.transaction.WhichOneof("operation"))
    assert ops == ["overwrite", "append", "delete", "delete", "merge", "update_config", "overwrite"]
    by_version = {e.version: manifest.read_manifest(e.path) for e in versions}
    assert by_version[2].fragment_ids == [0, 1, 2]
    assert by_version[4].fragment_ids == [0, 1]  # fragment 2 fully deleted
    assert by_version[5].fragments[0].files[1].fields == [2]  # x2 in its own data file
    assert by_version[6].config == {"lf.test": "yes"}
    assert by_version[6].writer_feature_flags & features.FLAG_TABLE_CONFIG
    assert by_version[7].fragment_ids == [3]  # ids are never reused
    assert by_version[7].max_fragment_id == 3
    if stable:
        assert by_version[1].next_row_id == 300 and by_version[2].next_row_id == 400
    else:
        assert by_version[3].next_row_id == 0


def test_naming_scheme_names():
    assert paths.manifest_name(1, ManifestNaming.V2) == "18446744073709551614.manifest"
    assert paths.manifest_name(1, ManifestNaming.V1) == "1.manifest"
    for v in (1, 2, 99, 12345678):
        for naming in ManifestNaming:
            assert paths.parse_manifest_name(paths.manifest_name(v, naming)) == (v, naming)
    # newer versions sort first under V2
    names = [paths.manifest_name(v, ManifestNaming.V2) for v in (1, 2, 10)]
    assert sorted(names) == names[::-1]
    for other in ("latest_version_hint.json", ".tmp-abc", "x.manifest", "d9.manifest", "1.txn"):
        assert paths.parse_manifest_name(other) is None


def test_listing_ignores_detached_and_temporary_files(history):
    root = history[0]
    before = paths.list_versions(root)
    vdir = paths.versions_dir(root)
    detached = paths.manifest_name((1 << 63) | 5, ManifestNaming.V1)
    assert detached.startswith("d")
    shutil.copy(before[0].path, os.path.join(vdir, detached))
    with open(os.path.join(vdir, ".tmp_8.manifest_0123"), "wb") as f:
        f.write(b"partial")
    assert paths.list_versions(root) == before


def test_listing_follows_the_name_rules_one_name_at_a_time(tmp_path):
    """The listing matches all names at once; what it finds must be what
    ``parse_manifest_name`` says of each name on its own (an independent reading), for
    listings mixing good names with look-alikes: other digits, line breaks, 20-digit stems
    past u64, temporary and detached files."""
    rng = np.random.default_rng(3)
    junk = [
        "٣.manifest", "5.manifest.tmp", ".manifest", "x5.manifest", "5.manifest\n7",
        "7\n5.manifest", f"{(1 << 64) + 3:020d}.manifest", "d5.manifest", "5.manifes",
        "99999999999999999999.manifest", "_latest_manifest_hint.json",
    ]  # fmt: skip
    for trial in range(40):
        root = tmp_path / f"ds{trial}"
        vdir = root / "_versions"
        vdir.mkdir(parents=True)
        naming = ManifestNaming.V2 if trial % 2 else ManifestNaming.V1
        versions = {int(v) for v in rng.choice(5000, int(rng.integers(0, 40)), replace=False)}
        names = [paths.manifest_name(v, naming) for v in versions if v]
        names += list(rng.choice(junk, int(rng.integers(0, 5)), replace=False))
        for name in names:
            (vdir / name).write_bytes(b"")
        expected = sorted(
            (parsed[0], str(vdir / name))
            for name in os.listdir(vdir)
            if (parsed := paths.parse_manifest_name(name)) is not None
        )
        if len({n for _, n in expected}) and len({v for v, _ in expected}) < len(expected):
            with pytest.raises(CorruptFileError):
                paths.list_versions(str(root))
            continue
        kinds = {paths.parse_manifest_name(os.path.basename(p))[1] for _, p in expected}
        if len(kinds) > 1:
            with pytest.raises(CorruptFileError, match="both"):
                paths.list_versions(str(root))
            with pytest.raises(CorruptFileError, match="both"):
                paths.latest_version(str(root))
            continue
        listed = paths.list_versions(str(root))
        assert [(e.version, e.path) for e in listed] == expected
        latest = paths.latest_version(str(root))
        assert (latest.version, latest.path) == expected[-1] if expected else latest is None


def test_mixed_naming_is_corrupt(history):
    root, _, v2_names, _ = history
    entries = paths.list_versions(root)
    other = ManifestNaming.V1 if v2_names else ManifestNaming.V2
    shutil.copy(entries[-1].path, paths.manifest_path(root, 8, other))
    with pytest.raises(CorruptFileError, match="both the V1"):
        paths.list_versions(root)
    with pytest.raises(CorruptFileError):
        paths.latest_version(root)
    with pytest.raises(Exception, match="multiple manifest naming schemes"):
        lance.dataset(root)  # pylance refuses the same directory


def test_two_manifests_of_one_version_are_corrupt(tmp_path):
    root = str(tmp_path / "ds")
    lance.write_dataset(_table(0, 10), root, enable_v2_manifest_paths=False)
    shutil.copy(
        paths.manifest_path(root, 1, ManifestNaming.V1),
        os.path.join(root, "_versions", "01.manifest"),
    )
    with pytest.raises(CorruptFileError, match="two manifests for version 1"):
        paths.list_versions(root)


def test_find_version(history):
    root = history[0]
    assert paths.find_version(root, 3).version == 3
    with pytest.raises(InvalidArgumentError, match="no version 42"):
        paths.find_version(root, 42)
    assert paths.list_versions(os.path.join(root, "nothing-here")) == []
    assert paths.latest_version(os.path.join(root, "nothing-here")) is None


# -- file names ------------------------------------------------------------------------------

_DATA_NAME = re.compile(r"[01]{24}[0-9a-f]{26}\.lance\Z")


def _uuid_of_data_name(name: str) -> uuid.UUID:
    stem = name[: -len(".lance")]
    raw = int(stem[:24], 2).to_bytes(3, "big") + bytes.fromhex(stem[24:])
    return uuid.UUID(bytes=raw)


def test_data_file_names_match_pylance(histories):
    theirs = []
    for root in histories.values():
        theirs += os.listdir(os.path.join(root, "data"))
    ours = [paths.new_data_file_name() for _ in range(200)]
    assert len(set(ours)) == len(ours)
    for name in theirs + ours:
        assert _DATA_NAME.match(name), name
        # the layout (3 bytes in binary, 13 in hex) puts the UUIDv4 version and variant
        # nibbles where a UUID has them: both pylance's names and ours decode as v4 UUIDs
        u = _uuid_of_data_name(name)
        assert u.version == 4 and u.variant == uuid.RFC_4122, name


def test_deletion_and_transaction_names(histories):
    for root in histories.values():
        for e in paths.list_versions(root):
            m = manifest.read_manifest(e.path)
            for f in m.fragments:
                if f.HasField("deletion_file"):
                    d = f.deletion_file
                    name = paths.deletion_file_name(f.id, d.read_version, d.id, d.file_type)
                    assert name == f"{f.id}-{d.read_version}-{d.id}.arrow"
                    assert os.path.exists(os.path.join(root, "_deletions", name))
        txns = sorted(os.listdir(os.path.join(root, "_transactions")))
        assert txns[0].startswith("0-")  # the creating write read version 0
    assert paths.deletion_file_name(3, 7, 11, 1) == "3-7-11.bin"
    ids = {paths.new_deletion_id() for _ in range(100)}
    assert len(ids) == 100 and all(0 <= i < 2**64 for i in ids)
    with pytest.raises(CorruptFileError):
        paths.deletion_file_name(3, 7, 11, 9)


# -- writing manifests pylance reads ------------------------------------------------------


def _commit_restore(root: str, version: int, in_place: bool = False) -> manifest.Manifest:
    """Commit the contents of ``version`` as the next version, written entirely by us
    (``in_place``: the pb is encoded as it is, and the returned manifest made from it)."""
    latest_entry = paths.latest_version(root)
    latest = manifest.read_manifest(latest_entry.path)
    old = manifest.read_manifest(paths.find_version(root, version).path)
    pb = table_pb2.Manifest()
    pb.CopyFrom(old.pb)
    pb.version = latest.version + 1
    pb.max_fragment_id = max(latest.max_fragment_id or 0, old.max_fragment_id or 0)
    pb.next_row_id = max(latest.next_row_id, old.next_row_id)
    pb.tag = ""
    pb.writer_version.library = "lance-flight"
    pb.writer_version.version = "0.1.0"
    pb.timestamp.FromNanoseconds(time.time_ns())
    txn = transaction_pb2.Transaction(
        read_version=latest.version,
        uuid=str(uuid.uuid4()),
        restore=transaction_pb2.Transaction.Restore(version=version),
    )
    pb.transaction_file = paths.transaction_file_name(txn.read_version, txn.uuid)
    paths.write_atomic(
        paths.transaction_file_path(root, pb.transaction_file), txn.SerializeToString()
    )
    features.apply_feature_flags(pb)
    written = manifest.write_manifest(
        root, pb, latest_entry.naming, txn, index_section=old.index_section, in_place=in_place
    )
    assert written is not None
    assert written.path == paths.manifest_path(root, pb.version, latest_entry.naming)
    paths.write_version_hint(root, pb.version)
    return _read_back_equals(written)


def _read_back_equals(written: manifest.Manifest) -> manifest.Manifest:
    """A read of the file ``written`` came from; what write_manifest (or a commit) returned
    must be just that: pb, size, inline transaction and index section."""
    read = manifest.read_manifest(written.path)
    assert (read.pb, read.size, read.transaction_bytes) == (
        written.pb,
        written.size,
        written.transaction_bytes,
    )
    assert read.index_section == written.index_section
    return read


@pytest.mark.parametrize("in_place", [False, True])
@pytest.mark.parametrize("source", [7, 5, 3])
def test_pylance_opens_our_manifest(history, source, in_place):
    root, storage, v2_names, stable = history
    expected = lance.dataset(root, version=source).to_table()
    ours = _commit_restore(root, source, in_place)
    assert ours.version == 8
    assert ours.transaction.WhichOneof("operation") == "restore"
    with open(paths.version_hint_path(root), "rb") as f:
        assert f.read() == b'{"version":8}'
    naming = ManifestNaming.V2 if v2_names else ManifestNaming.V1
    assert os.path.basename(ours.path) == paths.manifest_name(8, naming)

    ds = lance.dataset(root)
    assert ds.version == 8
    assert ds.to_table().equals(expected)
    assert ds.versions()[-1]["version"] == 8
    assert ds.has_stable_row_ids == stable
    assert _compare_version(root, paths.latest_version(root), stable).writer_version == (
        "lance-flight",
        "0.1.0",
    )

    # pylance commits on top of ours: same naming, fresh fragment id, row ids continue
    more = _table(5000, 10)
    if "x2" in ds.schema.names:
        more = more.append_column("x2", pa.compute.multiply(more.column("a"), 2))
    lance.write_dataset(more, root, mode="append")
    after = paths.list_versions(root)
    assert after[-1].version == 9 and after[-1].naming == naming
    top = manifest.read_manifest(after[-1].path)
    assert top.fragment_ids[-1] == 4  # max_fragment_id was 3 before our commit
    ds = lance.dataset(root)
    assert ds.count_rows() == expected.num_rows + 10
    if stable:
        rowids = ds.to_table(with_row_id=True).column("_rowid").to_numpy()
        assert len(np.unique(rowids)) == len(rowids)
        assert rowids.max() < top.next_row_id


def test_index_section_is_carried(tmp_path):
    root = str(tmp_path / "idx")
    ds = lance.write_dataset(_table(0, 200), root)
    ds.create_scalar_index("a", "BTREE")
    m = manifest.read_manifest(paths.latest_version(root).path)
    assert m.pb.HasField("index_section") and len(m.indices) == 1
    assert m.pb.transaction_section > 0  # after the index section, as pylance lays it out
    with open(m.path, "rb") as f:
        assert manifest.encode_manifest(m) == f.read()
    # a bare pb that still points at an index section must say what to do with it
    with pytest.raises(InvalidArgumentError, match="index section"):
        manifest.encode_manifest(m.pb)
    _commit_restore(root, m.version)
    ds = lance.dataset(root)
    assert ds.version == m.version + 1
    assert [i.name for i in ds.describe_indices()] == [m.indices[0].name]
    assert ds.to_table(filter="a = 17").num_rows == 1


def test_encode_layout_without_transaction():
    pb = table_pb2.Manifest(version=3)
    data = manifest.encode_manifest(pb)
    pos, major, minor, magic = struct.unpack("<qhh4s", data[-16:])
    assert (pos, major, minor, magic) == (0, 0, 2, b"LANC")
    (n,) = struct.unpack_from("<I", data, 0)
    assert 4 + n + 16 == len(data)
    m = manifest.decode_manifest(data)
    assert m.version == 3 and m.transaction is None and m.index_section is None
    # a transaction given as a message or as bytes lands identically
    txn = transaction_pb2.Transaction(read_version=2, uuid="u")
    assert manifest.encode_manifest(pb, txn) == manifest.encode_manifest(
        pb, txn.SerializeToString()
    )
    assert manifest.decode_manifest(manifest.encode_manifest(pb, txn)).transaction == txn


def test_write_manifest_never_overwrites(history):
    root = history[0]
    entry = paths.latest_version(root)
    m = manifest.read_manifest(entry.path)
    with open(entry.path, "rb") as f:
        before = f.read()
    pb = table_pb2.Manifest()
    pb.CopyFrom(m.pb)
    pb.tag = "changed"
    assert manifest.write_manifest(root, pb, entry.naming, m.transaction_bytes) is None
    with open(entry.path, "rb") as f:
        assert f.read() == before


def test_version_hint(tmp_path):
    root = str(tmp_path / "h")
    assert paths.read_version_hint(root) is None
    os.makedirs(paths.versions_dir(root))
    paths.write_version_hint(root, 5)
    with open(paths.version_hint_path(root), "rb") as f:
        assert f.read() == b'{"version":5}'
    paths.write_version_hint(root, 3)  # never moves backwards
    assert paths.read_version_hint(root) == 5
    paths.write_version_hint(root, 12)
    assert paths.read_version_hint(root) == 12
    with open(paths.version_hint_path(root), "w") as f:
        f.write("garbage")
    assert paths.read_version_hint(root) is None
    paths.write_version_hint(root, 2)
    assert paths.read_version_hint(root) == 2


# -- feature flags ---------------------------------------------------------------------------


def _commit_with_flags(root: str, reader: int = 0, writer: int = 0) -> str:
    entry = paths.latest_version(root)
    m = manifest.read_manifest(entry.path)
    pb = table_pb2.Manifest()
    pb.CopyFrom(m.pb)
    pb.version += 1
    pb.reader_feature_flags |= reader
    pb.writer_feature_flags |= writer
    written = manifest.write_manifest(root, pb, entry.naming, m.transaction_bytes)
    assert written is not None
    return written.path


def test_unknown_reader_flag(history):
    root = history[0]
    path = _commit_with_flags(root, reader=1 << 12)
    m = manifest.read_manifest(path)  # reading the manifest itself is fine
    with pytest.raises(UnsupportedError, match=r"4096 \(unknown\)") as info:
        features.check_reader_flags(m)
    assert path in str(info.value)
    with pytest.raises(Exception, match="(?i)not supported"):
        lance.dataset(root).count_rows()  # pylance refuses it too


def test_unknown_writer_flag(history):
    root = history[0]
    path = _commit_with_flags(root, writer=features.FLAG_DATA_OVERLAY_FILES)
    m = manifest.read_manifest(path)
    features.check_reader_flags(m)  # a writer-only flag does not stop readers
    with pytest.raises(UnsupportedError, match="data overlay files"):
        features.check_writer_flags(m)
    lance.dataset(root).count_rows()  # pylance: reads ...
    with pytest.raises(Exception, match="(?i)not supported"):  # ... but will not write
        lance.write_dataset(_table(0, 5), root, mode="append")


def test_base_paths_flag_is_refused(history):
    # pylance supports multiple base paths; we do not resolve them, so we must refuse
    root = history[0]
    m = manifest.read_manifest(_commit_with_flags(root, reader=16, writer=16))
    with pytest.raises(UnsupportedError, match="multiple base paths"):
        features.check_reader_flags(m)
    with pytest.raises(UnsupportedError, match="multiple base paths"):
        features.check_writer_flags(m)


def test_required_flags_rules():
    pb = table_pb2.Manifest()
    assert features.required_flags(pb) == (0, 0)
    frag = pb.fragments.add(id=0, physical_rows=10)
    frag.deletion_file.num_deleted_rows = 1
    assert features.required_flags(pb) == (1, 1)
    with pytest.raises(InvalidArgumentError, match="row-id sequence on every fragment"):
        features.required_flags(pb, stable_row_ids=True)
    frag.inline_row_ids = b"\x00"
    assert features.required_flags(pb) == (3, 3)  # a sequence implies the flag
    pb.config["k"] = "v"
    assert features.required_flags(pb) == (3, 11)
    assert features.required_flags(pb, disable_transaction_file=True) == (3, 43)
    frag.ClearField("deletion_file")
    pb.writer_feature_flags = 1 | 4  # stale bits are not kept
    features.apply_feature_flags(pb)
    assert (pb.reader_feature_flags, pb.writer_feature_flags) == (2, 10)


def _random_fragment(pb, rng, fid: int, ids: bool) -> None:
    frag = pb.fragments.add(id=fid, physical_rows=10)
    if rng.random() < 0.2:
        frag.deletion_file.num_deleted_rows = 1
    if ids:
        frag.inline_row_ids = b"\x00"
    if rng.random() < 0.1:
        frag.overlays.add()
    f = frag.files.add(path=f"{fid}.lance")
    f.file_major_version, f.file_minor_version = 2, int(rng.choice([1, 2], p=[0.1, 0.9]))


def test_flags_of_an_append_from_the_previous_flags_equal_a_full_count():
    """An append keeps the previous fragments first and unchanged: its flags, worked out
    from the previous manifest's flags and the new fragments alone, are those the whole
    manifest needs (or the same error, for a fragment without row ids in a stable-row-id
    dataset)."""
    rng = np.random.default_rng(5)
    for _ in range(400):
        prev = table_pb2.Manifest()
        prev.data_format.version = "2.2"
        stable = rng.random() < 0.3
        for fid in range(int(rng.integers(0, 6))):
            _random_fragment(prev, rng, fid, stable)
        prev.reader_feature_flags, prev.writer_feature_flags = features.required_flags(
            prev, stable_row_ids=stable
        )
        out = table_pb2.Manifest()
        out.CopyFrom(prev)
        for fid in range(len(prev.fragments), len(prev.fragments) + int(rng.integers(1, 4))):
            _random_fragment(out, rng, fid, stable if rng.random() < 0.9 else not stable)
        known = (len(prev.fragments), int(prev.reader_feature_flags))
        try:
            whole = features.required_flags(out)
        except InvalidArgumentError:
            with pytest.raises(InvalidArgumentError, match="row-id sequence on every fragment"):
                features.required_flags(out, known=known)
            continue
        assert features.required_flags(out, known=known) == whole


# -- corrupt manifests -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sample_manifest(histories) -> tuple[str, bytes]:
    root = histories[("2.2", True, True)]
    path = paths.find_version(root, 5).path
    with open(path, "rb") as f:
        return path, f.read()


def _decode_error(tmp_path, data: bytes, name: str = "18446744073709551610.manifest"):
    path = str(tmp_path / name)
    with open(path, "wb") as f:
        f.write(data)
    with pytest.raises(CorruptFileError) as info:
        manifest.read_manifest(path)
    assert path in str(info.value)
    return info.value


def test_truncated_manifests(tmp_path, sample_manifest):
    _, data = sample_manifest
    for cut in (0, 10, 19, 20, len(data) // 2, len(data) - 16, len(data) - 1):
        _decode_error(tmp_path, data[:cut])


def test_corrupt_framing(tmp_path, sample_manifest):
    _, data = sample_manifest
    pos = struct.unpack_from("<q", data, len(data) - 16)[0]
    _decode_error(tmp_path, data[:-4] + b"LANX")
    for bad_pos in (-1, len(data), pos - 1, pos + 1, 0):
        tail = struct.pack("<q", bad_pos) + data[-8:]
        _decode_error(tmp_path, data[:-16] + tail)
    garbage = data[: pos + 4] + b"\xff" * (len(data) - pos - 20) + data[-16:]
    assert "does not parse" in str(_decode_error(tmp_path, garbage))


def test_bad_section_offsets(tmp_path, sample_manifest):
    _, data = sample_manifest
    m = manifest.decode_manifest(data)
    for field_name in ("index_section", "transaction_section"):
        pb = table_pb2.Manifest()
        pb.CopyFrom(m.pb)
        setattr(pb, field_name, 10**6)
        body = pb.SerializeToString()
        framed = struct.pack("<I", len(body)) + body + struct.pack("<qhh4s", 0, 0, 2, b"LANC")
        assert "offset" in str(_decode_error(tmp_path, framed))


def test_version_must_match_name(tmp_path, sample_manifest):
    _, data = sample_manifest  # version 5
    err = _decode_error(tmp_path, data, paths.manifest_name(6, ManifestNaming.V2))
    assert "named for version 6" in str(err)


def test_stable_row_ids_without_sequences_is_corrupt(tmp_path, sample_manifest):
    _, data = sample_manifest
    m = manifest.decode_manifest(data)
    pb = table_pb2.Manifest()
    pb.CopyFrom(m.pb)
    pb.fragments[0].ClearField("inline_row_ids")
    _decode_error(tmp_path, manifest.encode_manifest(pb, m.transaction_bytes))


def test_random_damage_gives_only_corrupt_file_errors(sample_manifest):
    _, data = sample_manifest
    rng = np.random.default_rng(7)
    failures = 0
    for _ in range(300):
        buf = bytearray(data)
        for i in rng.integers(0, len(buf), rng.integers(1, 4)):
            buf[i] = int(rng.integers(0, 256))
        try:
            m = manifest.decode_manifest(bytes(buf), "damaged")
            _ = m.transaction
            _ = m.schema
        except CorruptFileError:
            failures += 1
        except LanceError:
            pass  # e.g. a damaged schema type: SchemaError names the field
    assert failures > 0


def test_missing_manifest_is_io_error(tmp_path):
    with pytest.raises(LanceError, match="not found"):
        manifest.read_manifest(str(tmp_path / "1.manifest"))


# -- tags ------------------------------------------------------------------------------------


def test_tags_pylance_created(history):
    root = history[0]
    theirs = lance.dataset(root).tags.list()
    assert tags.list_tags(root) == {"first": 1, "with_x2": 5}
    ours = tags.Tags(root).list()
    assert set(ours) == set(theirs)
    for name, t in theirs.items():
        o = ours[name]
        assert (o["version"], o["manifest_size"], o["branch"]) == (
            t["version"],
            t["manifest_size"],
            t["branch"],
        )
        assert o["created_at"] == t["created_at"]
        assert o["manifest_size"] == os.path.getsize(paths.find_version(root, t["version"]).path)
    assert tags.Tags(root).get_version("with_x2") == 5
    assert [n for n, _ in tags.Tags(root).list_ordered()] == ["with_x2", "first"]
    assert [n for n, _ in tags.Tags(root).list_ordered("asc")] == ["first", "with_x2"]


def test_tags_we_create_pylance_reads(history):
    root = history[0]
    tags.create_tag(root, "ours-1.0_x", 3)
    tags.Tags(root).create("latest_one")  # no reference: the latest version
    ds = lance.dataset(root)
    theirs = ds.tags.list()
    assert theirs["ours-1.0_x"]["version"] == 3
    assert theirs["ours-1.0_x"]["manifest_size"] == os.path.getsize(
        paths.find_version(root, 3).path
    )
    assert theirs["latest_one"]["version"] == 7
    assert lance.dataset(root, version="ours-1.0_x").version == 3
    # the file is laid out as pylance lays it out: same keys, order and formatting
    with open(paths.tag_path(root, "ours-1.0_x")) as f:
        ours_text = f.read()
    with open(paths.tag_path(root, "first")) as f:
        their_text = f.read()
    for text in (ours_text, their_text):
        assert text == json.dumps(json.loads(text), indent=2)
    assert list(json.loads(ours_text)) == list(json.loads(their_text))
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z", json.loads(ours_text)["createdAt"]
    )

    tags.update_tag(root, "ours-1.0_x", 5)
    assert lance.dataset(root).tags.get_version("ours-1.0_x") == 5
    created = tags.read_tag(root, "ours-1.0_x")
    assert created.updated_at >= created.created_at
    tags.Tags(root).update("first", "ours-1.0_x")  # a tag as reference
    assert lance.dataset(root).tags.get_version("first") == 5
    tags.delete_tag(root, "ours-1.0_x")
    assert "ours-1.0_x" not in lance.dataset(root).tags.list()

    # pylance updates and deletes tags we made, and we see it
    lance.dataset(root).tags.update("latest_one", 2)
    assert tags.list_tags(root)["latest_one"] == 2
    lance.dataset(root).tags.delete("latest_one")
    assert "latest_one" not in tags.list_tags(root)


def test_tag_errors(history):
    root = history[0]
    with pytest.raises(InvalidArgumentError, match="already exists"):
        tags.create_tag(root, "first", 2)
    with pytest.raises(InvalidArgumentError, match="no version 99"):
        tags.create_tag(root, "nope", 99)
    with pytest.raises(InvalidArgumentError, match="does not exist"):
        tags.delete_tag(root, "missing")
    with pytest.raises(InvalidArgumentError, match="does not exist"):
        tags.update_tag(root, "missing", 1)
    with pytest.raises(InvalidArgumentError, match="does not exist"):
        tags.Tags(root).get_version("missing")
    ds = lance.dataset(root)
    for bad in ("", "a/b", ".hidden", "end.", "x..y", "v1.lock", "sp ace", "q?", "../up"):
        with pytest.raises(InvalidArgumentError, match="invalid tag name"):
            tags.create_tag(root, bad, 1)
        with pytest.raises(Exception):  # noqa: B017 - pylance refuses the same names
            ds.tags.create(bad, 1)
    for good in ("v1.2.3-rc4", "under_score", "ünïcode"):
        tags.check_valid_tag(good)
        ds.tags.create(good, 1)  # and pylance accepts them


def test_corrupt_tag_file(history):
    root = history[0]
    with open(paths.tag_path(root, "broken"), "w") as f:
        f.write("{not json")
    with pytest.raises(CorruptFileError, match="broken.json"):
        tags.list_tags(root)
    with open(paths.tag_path(root, "broken"), "w") as f:
        f.write('{"version": "three"}')
    with pytest.raises(CorruptFileError, match="integer version"):
        tags.read_tag(root, "broken")


def test_storage_version_inferred_like_pylance(history):
    # manifests from before data_format existed: the version comes from the data files
    root, storage, _, _ = history
    entry = paths.latest_version(root)
    m = manifest.read_manifest(entry.path)
    pb = table_pb2.Manifest()
    pb.CopyFrom(m.pb)
    pb.version += 1
    pb.ClearField("data_format")
    written = manifest.write_manifest(root, pb, entry.naming, m.transaction_bytes)
    assert written is not None
    ours = manifest.read_manifest(written.path)
    assert ours.data_storage_version == storage == lance.dataset(root).data_storage_version


def test_deprecated_transaction_pointer_is_read():
    # field 21 (the snapshot's transaction_section) framed the same way; never written by us
    txn = transaction_pb2.Transaction(read_version=4, uuid="old")
    raw = txn.SerializeToString()
    pb = table_pb2.Manifest(version=5, transaction_section_deprecated=0)
    body = pb.SerializeToString()
    data = (
        struct.pack("<I", len(raw))
        + raw
        + struct.pack("<I", len(body))
        + body
        + struct.pack("<qhh4s", 4 + len(raw), 0, 1, b"LANC")
    )
    m = manifest.decode_manifest(data)
    assert m.transaction == txn
    again = manifest.decode_manifest(manifest.encode_manifest(m))
    assert again.transaction == txn
    assert not again.pb.HasField("transaction_section_deprecated")
    assert again.pb.transaction_section == 0


def test_encoding_in_place_gives_the_same_bytes_and_only_then_changes_the_pb(history):
    """A commit's own new manifest is encoded in place (no copy); any other pb is left as
    it was.  Both give the same file."""
    root = history[0]
    m = manifest.read_manifest(paths.latest_version(root).path)
    pb = table_pb2.Manifest()
    pb.CopyFrom(m.pb)
    pb.ClearField("index_section")  # as a commit builds it: the sections are placed anew
    pb.transaction_section = 12345  # a stale offset the encode must replace
    before = pb.SerializeToString()
    copied = manifest.encode_manifest(pb, m.transaction_bytes, index_section=m.index_section)
    assert pb.SerializeToString() == before
    in_place = manifest.encode_manifest(
        pb, m.transaction_bytes, index_section=m.index_section, in_place=True
    )
    assert in_place == copied
    assert pb.SerializeToString() != before
    decoded = manifest.decode_manifest(in_place, "x")
    assert decoded.transaction_bytes == m.transaction_bytes
    assert decoded.pb.version == m.version


@pytest.mark.parametrize("stable", [False, True])
def test_a_commit_returns_the_manifest_it_wrote(tmp_path, stable):
    """A commit encodes its new manifest in place and returns it without reading the file
    back: it must be what a read of the file gives, index section and inline transaction
    included (here pylance's scalar index is carried over by an append)."""
    root = str(tmp_path / "indexed")
    lance.write_dataset(_table(0, 300), root, enable_stable_row_ids=stable)
    lance.dataset(root).create_scalar_index("a", "BTREE")
    outcome = dataset_write.write_version(_table(300, 50), root, mode="append")
    written = outcome.manifest
    assert written is not None and written.index_section is not None
    read = _read_back_equals(written)
    assert read.index_section is not None and len(read.index_section.indices) == 1
    assert lance.dataset(root).count_rows() == 350
