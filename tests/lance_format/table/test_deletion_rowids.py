"""Deletion files and stable row-id sequences against pylance 14.

Truth comes from pylance: the rows it still returns (``_rowaddr``) give the deleted set, its
``_rowid`` column gives the ids by physical offset, and it must read the deletion files we
write in place of its own.  Manifests are parsed here with a few lines of framing code so
that these tests do not depend on the table layer under construction.
"""

from __future__ import annotations

import os
import shutil
import struct

import lance
import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyroaring
import pytest

from lance_format.errors import CorruptFileError, InvalidArgumentError, LanceIOError
from lance_format.pb import rowids_pb2, table_pb2
from lance_format.table import deletion, rowids

VERSIONS = ["2.0", "2.1", "2.2"]
LOW32 = np.uint64(0xFFFFFFFF)


# -- helpers ----------------------------------------------------------------------------------


def manifest(uri: str, version: int) -> table_pb2.Manifest:
    """The manifest of ``version`` (V2 names, pylance's default), from its framing."""
    name = f"{(1 << 64) - 1 - version:020d}.manifest"
    with open(os.path.join(uri, "_versions", name), "rb") as f:
        data = f.read()
    assert data[-4:] == b"LANC"
    pos = struct.unpack_from("<q", data, len(data) - 16)[0]
    (length,) = struct.unpack_from("<I", data, pos)
    m = table_pb2.Manifest()
    m.ParseFromString(data[pos + 4 : pos + 4 + length])
    return m


def pylance_deleted(ds: lance.LanceDataset, frag_id: int, physical_rows: int) -> np.ndarray:
    """Deleted offsets as pylance sees them: all offsets minus the surviving addresses."""
    frag = ds.get_fragment(frag_id)
    addr = frag.to_table(columns=["x"], with_row_address=True)["_rowaddr"].to_numpy()
    assert ((addr >> np.uint64(32)) == frag_id).all()
    return np.setdiff1d(np.arange(physical_rows, dtype=np.int64), (addr & LOW32).astype(np.int64))


def pylance_row_ids(ds: lance.LanceDataset, frag_id: int) -> tuple[np.ndarray, np.ndarray]:
    """(physical offsets, row ids) of a fragment's surviving rows, from pylance."""
    t = ds.get_fragment(frag_id).to_table(columns=["x"], with_row_id=True, with_row_address=True)
    offsets = (t["_rowaddr"].to_numpy() & LOW32).astype(np.int64)
    return offsets, t["_rowid"].to_numpy()


def int_table(lo: int, hi: int) -> pa.Table:
    x = np.arange(lo, hi, dtype=np.int64)
    return pa.table({"x": x, "y": x * 3})


# -- deletion files written by pylance ---------------------------------------------------------


@pytest.fixture(scope="module", params=VERSIONS)
def deleted_dataset(request, tmp_path_factory):
    """Fragment 0 (100k rows) loses 90% of its rows (bitmap), fragment 1 (20k) a few (arrow)."""
    uri = str(tmp_path_factory.mktemp("del") / f"ds-{request.param}")
    ds = lance.write_dataset(
        int_table(0, 120_000), uri, data_storage_version=request.param, max_rows_per_file=100_000
    )
    ds.delete("(x < 100000 AND x % 10 != 3) OR (x >= 100000 AND x % 1777 = 5)")
    return uri


def _deletion_files(uri: str) -> dict[int, table_pb2.DeletionFile]:
    ds = lance.dataset(uri)
    m = manifest(uri, ds.version)
    out = {}
    for f in m.fragments:
        assert f.HasField("deletion_file")
        out[f.id] = (f.deletion_file, f.physical_rows)
    return out


def test_read_pylance_deletion_files(deleted_dataset):
    uri = deleted_dataset
    ds = lance.dataset(uri)
    files = _deletion_files(uri)
    assert sorted(files) == [0, 1]
    assert files[0][0].file_type == deletion.BITMAP
    assert files[1][0].file_type == deletion.ARROW_ARRAY
    for frag_id, (dfile, physical) in files.items():
        ours = deletion.read_deletion_file(uri, frag_id, dfile)
        assert ours.dtype == np.uint32
        truth = pylance_deleted(ds, frag_id, physical)
        np.testing.assert_array_equal(ours, truth)
        assert dfile.num_deleted_rows == len(truth)
        path = deletion.deletion_path(uri, frag_id, dfile)
        ext = "bin" if dfile.file_type == deletion.BITMAP else "arrow"
        assert os.path.basename(path) == f"{frag_id}-1-{dfile.id}.{ext}"
        assert dfile.read_version == 1
    assert files[0][0].num_deleted_rows == 90_000


def test_pylance_arrow_deletions_are_unsorted_zstd(deleted_dataset):
    """What pylance writes that our reader must cope with: hash-set order, ZSTD bodies."""
    uri = deleted_dataset
    dfile, _ = _deletion_files(uri)[1]
    path = deletion.deletion_path(uri, 1, dfile)
    reader = ipc.open_file(path)
    assert reader.schema == deletion.DELETION_ARROW_SCHEMA
    raw = reader.get_batch(0).column(0).to_numpy()
    assert len(raw) == dfile.num_deleted_rows > 5
    assert (np.diff(raw.astype(np.int64)) < 0).any()  # not sorted
    with open(path, "rb") as f:
        assert f.read(6) == b"ARROW1"


def _swap_and_check(uri: str, frag_id: int, dfile, new_bytes: bytes, expected_x: np.ndarray):
    """Put ``new_bytes`` in place of pylance's deletion file; pylance must return exactly
    ``expected_x`` from that fragment."""
    path = deletion.deletion_path(uri, frag_id, dfile)
    with open(path, "wb") as f:
        f.write(new_bytes)
    ds = lance.dataset(uri)
    got = ds.get_fragment(frag_id).to_table(columns=["x"])["x"].to_numpy()
    np.testing.assert_array_equal(np.sort(got), expected_x)


@pytest.mark.parametrize("frag_id", [0, 1])
def test_our_deletion_files_replace_pylance_files(deleted_dataset, tmp_path, frag_id):
    src = deleted_dataset
    uri = str(tmp_path / "copy")
    shutil.copytree(src, uri)
    dfile, physical = _deletion_files(uri)[frag_id]
    truth = pylance_deleted(lance.dataset(uri), frag_id, physical)
    base = 0 if frag_id == 0 else 100_000

    # ours, written for the same set with the same type, parse back with ours
    ours = deletion.write_deletion_file(str(tmp_path / "ours"), frag_id, 1, truth[::-1])
    assert ours.file_type == dfile.file_type
    assert ours.num_deleted_rows == len(truth)
    back = deletion.read_deletion_file(str(tmp_path / "ours"), frag_id, ours)
    np.testing.assert_array_equal(back, truth)
    with open(deletion.deletion_path(str(tmp_path / "ours"), frag_id, ours), "rb") as f:
        our_bytes = f.read()
    with open(deletion.deletion_path(uri, frag_id, dfile), "rb") as f:
        their_bytes = f.read()
    if dfile.file_type == deletion.BITMAP:
        assert our_bytes == their_bytes  # both: portable roaring, no run containers

    before = lance.dataset(uri)
    expected_rows = before.count_rows()
    survivors = np.setdiff1d(np.arange(physical), truth) + base
    _swap_and_check(uri, frag_id, dfile, our_bytes, survivors)
    assert lance.dataset(uri).count_rows() == expected_rows
    assert lance.dataset(uri).to_table().num_rows == expected_rows

    # a different set of the same size proves pylance really reads our bytes
    shifted = (truth + 1) % physical
    kind = "bitmap" if dfile.file_type == deletion.BITMAP else "arrow"
    data = (
        deletion.encode_bitmap_deletions(np.sort(shifted))
        if kind == "bitmap"
        else deletion.encode_arrow_deletions(shifted)
    )
    _swap_and_check(uri, frag_id, dfile, data, np.setdiff1d(np.arange(physical), shifted) + base)


def test_bitmap_bytes_identical_at_container_limits(tmp_path):
    """Containers of exactly 4096 (array) and 4097 (bitmap) values, and a full one."""
    uri = str(tmp_path / "ds")
    lance.write_dataset(int_table(0, 200_000), uri, max_rows_per_file=300_000)
    ds = lance.dataset(uri)
    ds.delete(
        "x < 4096 OR (x >= 65536 AND x < 69633) OR (x >= 131072 AND x < 196608) OR x = 199999"
    )
    dfile, physical = _deletion_files(uri)[0]
    assert dfile.file_type == deletion.BITMAP
    truth = pylance_deleted(lance.dataset(uri), 0, physical)
    with open(deletion.deletion_path(uri, 0, dfile), "rb") as f:
        theirs = f.read()
    assert deletion.encode_bitmap_deletions(truth) == theirs
    np.testing.assert_array_equal(deletion.decode_bitmap_deletions(theirs), truth)


@pytest.mark.parametrize(
    "steps,kind",
    [
        ([4999], "arrow"),
        ([5000], "bin"),  # a first delete of exactly 5000 already gives a bitmap
        ([3000, 2000], "arrow"),  # ... but a set growing to 5000 stays an arrow file
        ([3000, 2001], "bin"),
    ],
)
def test_pylance_threshold(tmp_path, steps, kind):
    uri = str(tmp_path / "ds")
    lance.write_dataset(int_table(0, 20_000), uri)
    lo = 0
    for n in steps:
        lance.dataset(uri).delete(f"x >= {lo} AND x < {lo + n}")
        lo += n
    names = os.listdir(os.path.join(uri, "_deletions"))
    newest = max(names, key=lambda n: int(n.split("-")[1]))
    assert newest.endswith("." + kind)
    # our rule ("more than 5000") agrees except for a first delete of exactly 5000
    ours = deletion.write_deletion_file(str(tmp_path / "o"), 0, 1, np.arange(lo))
    if steps == [5000]:
        assert ours.file_type == deletion.ARROW_ARRAY
    else:
        assert (ours.file_type == deletion.BITMAP) == (kind == "bin")


def test_write_deletion_file_naming_and_forced_type(tmp_path):
    root = str(tmp_path)
    msg = deletion.write_deletion_file(root, 7, 12, np.array([5, 3, 3, 9]), file_type=1)
    assert msg.file_type == deletion.BITMAP and msg.read_version == 12
    assert msg.num_deleted_rows == 3
    name = f"7-12-{msg.id}.bin"
    assert os.listdir(os.path.join(root, "_deletions")) == [name]
    with open(os.path.join(root, "_deletions", name), "rb") as f:
        assert list(pyroaring.BitMap.deserialize(f.read())) == [3, 5, 9]
    msg2 = deletion.write_deletion_file(root, 7, 12, np.array([1]))
    assert msg2.file_type == deletion.ARROW_ARRAY
    t = ipc.open_file(deletion.deletion_path(root, 7, msg2)).read_all()
    assert t.schema == deletion.DELETION_ARROW_SCHEMA and t["row_id"].to_pylist() == [1]
    with pytest.raises(InvalidArgumentError):
        deletion.write_deletion_file(root, 7, 12, np.array([], dtype=np.int64))
    with pytest.raises(InvalidArgumentError):
        deletion.write_deletion_file(root, 7, 12, np.array([-1]))
    with pytest.raises(InvalidArgumentError):
        deletion.write_deletion_file(root, 7, 12, np.array([1 << 32]))


def _write_raw(root, frag_id, file_type, data, num_deleted=0):
    msg = table_pb2.DeletionFile(file_type=file_type, read_version=1, id=42)
    msg.num_deleted_rows = num_deleted
    path = deletion.deletion_path(root, frag_id, msg)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    return msg


def _ipc_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with ipc.new_file(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


@pytest.mark.parametrize(
    "file_type,data",
    [
        (0, b"ARROW1\0\0garbage"),
        (0, deletion.encode_arrow_deletions(np.arange(10))[:-20]),
        (0, _ipc_bytes(pa.table({"row_id": pa.array([1, 2], pa.int32())}))),
        (0, _ipc_bytes(pa.table({"row_id": pa.array([1, None], pa.uint32())}))),
        (0, _ipc_bytes(pa.table({"row_id": pa.array([], pa.uint32())}).slice(0, 0))),
        (1, b"\x00\x01"),
        (1, b"\xde\xad\xbe\xef" * 8),
        (1, deletion.encode_bitmap_deletions(np.arange(0, 100_000, 3))[:-100]),
    ],
)
def test_corrupt_deletion_files(tmp_path, file_type, data):
    msg = _write_raw(str(tmp_path), 3, file_type, data)
    with pytest.raises(CorruptFileError) as info:
        deletion.read_deletion_file(str(tmp_path), 3, msg)
    assert info.value.path == deletion.deletion_path(str(tmp_path), 3, msg)


def test_deletion_count_mismatch_and_missing_file(tmp_path):
    msg = _write_raw(str(tmp_path), 0, 0, deletion.encode_arrow_deletions(np.arange(4)), 5)
    with pytest.raises(CorruptFileError, match="num_deleted_rows"):
        deletion.read_deletion_file(str(tmp_path), 0, msg)
    msg.num_deleted_rows = 0  # old writers left it unset: accepted
    np.testing.assert_array_equal(deletion.read_deletion_file(str(tmp_path), 0, msg), np.arange(4))
    msg.id = 43
    with pytest.raises(LanceIOError):
        deletion.read_deletion_file(str(tmp_path), 0, msg)


# -- row-id sequences written by pylance -------------------------------------------------------


def _segments(data: bytes) -> list[str]:
    seq = rowids_pb2.RowIdSequence()
    seq.ParseFromString(data)
    return [s.WhichOneof("segment") for s in seq.segments]


def _check_version(uri: str, version: int, kinds: set[str]) -> dict[int, tuple[bytes, np.ndarray]]:
    """Ours vs pylance for every fragment of ``version``; returns id -> (bytes, surviving ids)."""
    ds = lance.dataset(uri, version=version)
    out = {}
    for f in manifest(uri, version).fragments:
        assert f.WhichOneof("row_id_sequence") == "inline_row_ids"
        data = f.inline_row_ids
        kinds.update(_segments(data))
        ids = rowids.fragment_row_ids(uri, f)
        assert ids.dtype == np.uint64 and len(ids) == f.physical_rows
        offsets, truth = pylance_row_ids(ds, f.id)
        np.testing.assert_array_equal(ids[offsets], truth)
        # same segment boundaries and kinds -> the same bytes
        assert rowids.encode_row_id_segments(rowids.decode_row_id_segments(data)) == data
        if len(_segments(data)) == 1:
            assert rowids.encode_row_ids(ids) == data
        live = ids
        if f.HasField("deletion_file"):
            dead = deletion.read_deletion_file(uri, f.id, f.deletion_file)
            live = np.delete(ids, dead.astype(np.int64))
        np.testing.assert_array_equal(live, truth)
        # row version sequences reuse U64Segment for their spans: one entry per row (the
        # span values themselves restart at 0 per run after compaction)
        for field in ("inline_created_at_versions", "inline_last_updated_at_versions"):
            runs = rowids_pb2.RowDatasetVersionSequence()
            runs.ParseFromString(getattr(f, field))
            assert sum(len(rowids.decode_segment(r.span)) for r in runs.runs) == f.physical_rows
        out[f.id] = (data, live)
    return out


def _check_compaction(uri: str, before: int, after: int, kinds: set[str]) -> None:
    """pylance's compacted sequences equal ours, predicted from the sources' live ids."""
    old = _check_version(uri, before, kinds)
    new = _check_version(uri, after, kinds)
    old_frags = [f.id for f in manifest(uri, before).fragments]
    rewritten = [fid for fid in new if fid not in old]
    removed = [fid for fid in old_frags if fid not in new]
    assert rewritten and removed
    sizes = [int(len(new[fid][1])) for fid in rewritten]
    predicted = rowids.rechunk_row_ids([old[fid][1] for fid in removed], sizes)
    assert predicted == [new[fid][0] for fid in rewritten]


@pytest.mark.parametrize("version", VERSIONS)
def test_pylance_row_id_sequences(tmp_path, version):
    uri = str(tmp_path / "ds")
    kinds: set[str] = set()
    ds = lance.write_dataset(
        int_table(0, 3000),
        uri,
        data_storage_version=version,
        enable_stable_row_ids=True,
        max_rows_per_file=1000,
    )
    ds = lance.write_dataset(int_table(3000, 4000), uri, mode="append")
    ds.delete("x = 5 OR x = 500")  # a few holes
    ds.delete("x >= 1000 AND x < 2000 AND x % 97 != 0")  # sparse survivors: sorted array
    ds.delete("x >= 2000 AND x < 3000 AND x % 2 = 0")  # every other row: bitmap
    ds.delete("x >= 3000 AND x < 3100")  # a range cut short
    src = pa.table(
        {
            "x": np.array([2999, 2001, 2501, 2003, 2777, 3500, 3501, 3502], dtype=np.int64),
            "y": np.zeros(8, dtype=np.int64),
        }
    )
    ds.merge_insert("x").when_matched_update_all().execute(src)  # moved rows keep their ids
    ds.update({"y": "y + 1"}, where="x >= 3900")
    ds = lance.dataset(uri)
    before = ds.version
    _check_version(uri, before, kinds)
    ds.optimize.compact_files(target_rows_per_fragment=100_000)
    after = lance.dataset(uri).version
    _check_compaction(uri, before, after, kinds)
    assert {"range", "range_with_holes", "range_with_bitmap", "sorted_array"} <= kinds


def test_compaction_merges_touching_ranges(tmp_path):
    uri = str(tmp_path / "ds")
    kinds: set[str] = set()
    lance.write_dataset(int_table(0, 2000), uri, enable_stable_row_ids=True, max_rows_per_file=500)
    lance.dataset(uri).delete("x = 1700")
    before = lance.dataset(uri).version
    lance.dataset(uri).optimize.compact_files(
        target_rows_per_fragment=100_000, materialize_deletions_threshold=0.0001
    )
    after = lance.dataset(uri).version
    _check_compaction(uri, before, after, kinds)
    (frag,) = manifest(uri, after).fragments
    assert _segments(frag.inline_row_ids) == ["range", "range_with_holes"]


# -- our encoding --------------------------------------------------------------------------------


def _one_segment(ids) -> rowids_pb2.U64Segment:
    seq = rowids_pb2.RowIdSequence()
    seq.ParseFromString(rowids.encode_row_ids(np.asarray(ids, dtype=np.uint64)))
    assert len(seq.segments) == 1
    return seq.segments[0]


def test_segment_kind_choice():
    # contiguous -> range
    seg = _one_segment(np.arange(10, 20))
    assert seg.WhichOneof("segment") == "range" and (seg.range.start, seg.range.end) == (10, 20)
    # one hole in 100 slots: holes 28 B < bitmap 37 B < array 222 B
    seg = _one_segment(np.delete(np.arange(100), 50))
    assert seg.WhichOneof("segment") == "range_with_holes"
    holes = seg.range_with_holes.holes
    assert holes.WhichOneof("array") == "u16_array" and holes.u16_array.base == 50
    assert holes.u16_array.offsets == b"\x00\x00"
    # every other of 1001 slots: bitmap 150 B beats holes 2024 B and array 1026 B; LSB first
    seg = _one_segment(np.arange(0, 1001, 2) + 7)
    rb = seg.range_with_bitmap
    assert (rb.start, rb.end) == (7, 1008) and rb.bitmap[:2] == b"\x55\x55"
    assert len(rb.bitmap) == 126 and rb.bitmap[-1] == 0x01  # 1001 bits, unused bits clear
    # ten ids spread over 100k: sorted array with u32 offsets
    seg = _one_segment(np.linspace(5, 100_004, 10).astype(np.uint64))
    assert seg.WhichOneof("segment") == "sorted_array"
    assert seg.sorted_array.WhichOneof("array") == "u32_array"
    assert seg.sorted_array.u32_array.base == 5
    # unsorted -> array, order kept, spread beyond u32 -> u64 values
    seg = _one_segment([5, 1 << 40, 3])
    assert seg.WhichOneof("segment") == "array"
    assert np.frombuffer(seg.array.u64_array.values, "<u8").tolist() == [5, 1 << 40, 3]
    # tie between holes and bitmap (1 hole in 32 slots: 28 B each) -> holes first
    seg = _one_segment(np.delete(np.arange(32), 5))
    assert seg.WhichOneof("segment") == "range_with_holes"
    # 2 holes in 32 slots: bitmap 28 B beats holes 32 B
    seg = _one_segment(np.delete(np.arange(32), [5, 6]))
    assert seg.WhichOneof("segment") == "range_with_bitmap"


def test_encode_segments_merges_touching_ranges():
    data = rowids.encode_row_id_segments(
        [np.arange(0, 5), np.arange(5, 9), np.array([], np.uint64), np.arange(20, 22), [22]]
    )
    seq = rowids_pb2.RowIdSequence()
    seq.ParseFromString(data)
    assert [(s.range.start, s.range.end) for s in seq.segments] == [(0, 9), (20, 23)]
    assert rowids.encode_row_ids(np.array([], np.uint64)) == b""
    assert len(rowids.decode_row_ids(b"")) == 0


def _random_ids(rng: np.random.Generator) -> np.ndarray:
    n = int(rng.integers(1, 3000))
    start = int(rng.choice([0, 1 << 20, (1 << 64) - 10_000_000]))
    density = float(rng.choice([1.0, 0.999, 0.9, 0.5, 0.1, 0.001, 1e-7]))
    span = max(n, int(n / density))
    span = min(span, (1 << 64) - 2 - start)
    ids = np.sort(rng.choice(span, size=n, replace=False)).astype(np.uint64) + np.uint64(start)
    if rng.random() < 0.25:
        ids = rng.permutation(ids)
    return ids


def test_round_trip_random_sets():
    rng = np.random.default_rng(1234)
    seen = set()
    for _ in range(400):
        pieces = [_random_ids(rng) for _ in range(int(rng.integers(1, 4)))]
        flat = np.concatenate(pieces)
        if len(np.unique(flat)) != len(flat):
            continue
        for data in (rowids.encode_row_ids(flat), rowids.encode_row_id_segments(pieces)):
            seen.update(_segments(data))
            np.testing.assert_array_equal(rowids.decode_row_ids(data), flat)
        got = rowids.decode_row_id_segments(rowids.encode_row_id_segments(pieces))
        assert sum(len(g) for g in got) == len(flat)
    assert seen == {"range", "range_with_holes", "range_with_bitmap", "sorted_array", "array"}


def test_rechunk_splits_sources_at_chunk_boundaries():
    src = [np.arange(0, 10), np.array([20, 22, 23, 40])]
    out = rowids.rechunk_row_ids(src, [4, 8, 2])
    got = [rowids.decode_row_ids(b) for b in out]
    np.testing.assert_array_equal(np.concatenate(got), np.concatenate(src))
    assert [len(g) for g in got] == [4, 8, 2]
    # 4..10 from the first source, then [20, 22] (bitmap 25 B < holes/array 28 B)
    assert _segments(out[1]) == ["range", "range_with_bitmap"]
    assert _segments(out[0]) == ["range"]
    with pytest.raises(InvalidArgumentError):
        rowids.rechunk_row_ids(src, [4, 4])


def test_encode_refuses_bad_ids():
    for bad in ([1, 1], [3, 1, 3], [-1], [(1 << 64) - 1], [[1, 2]], [1.5]):
        arr = np.asarray(bad, dtype=np.uint64 if bad == [(1 << 64) - 1] else None)
        with pytest.raises(InvalidArgumentError):
            rowids.encode_row_ids(arr)


# -- corrupt sequences ---------------------------------------------------------------------------


def _seq(*segments: rowids_pb2.U64Segment) -> bytes:
    return rowids_pb2.RowIdSequence(segments=list(segments)).SerializeToString()


def _u16(base, offsets_bytes):
    return rowids_pb2.EncodedU64Array(
        u16_array=rowids_pb2.EncodedU64Array.U16Array(base=base, offsets=offsets_bytes)
    )


S = rowids_pb2.U64Segment


@pytest.mark.parametrize(
    "data",
    [
        b"\xff\xff\xff",
        _seq(S()),
        _seq(S(range=S.Range(start=10, end=5))),
        _seq(S(range=S.Range(start=0, end=1 << 40))),  # refused before allocating
        _seq(S(range_with_bitmap=S.RangeWithBitmap(start=0, end=100, bitmap=b"\xff"))),
        _seq(S(range_with_holes=S.RangeWithHoles(start=0, end=10, holes=_u16(20, b"\0\0")))),
        _seq(S(range_with_holes=S.RangeWithHoles(start=0, end=10))),
        _seq(S(sorted_array=_u16(0, b"\x01"))),
        _seq(S(array=rowids_pb2.EncodedU64Array())),
        _seq(S(array=_u16((1 << 64) - 2, b"\x05\x00"))),
        _seq(S(sorted_array=_u16(0, b"\x01\x00\x01\x00"))),
    ],
)
def test_corrupt_sequences(data):
    with pytest.raises(CorruptFileError):
        rowids.decode_row_ids(data)


def test_sequence_longer_than_fragment_is_refused():
    frag = table_pb2.DataFragment(
        id=1, physical_rows=10, inline_row_ids=rowids.encode_row_ids(np.arange(11))
    )
    with pytest.raises(CorruptFileError):
        rowids.fragment_row_ids("/nonexistent", frag)


def test_external_row_ids(tmp_path):
    ids = np.array([7, 3, 100, 5], dtype=np.uint64)
    data = rowids.encode_row_ids(ids)
    with open(tmp_path / "ids.bin", "wb") as f:
        f.write(b"junk" + data + b"tail")
    frag = table_pb2.DataFragment(id=2, physical_rows=4)
    frag.external_row_ids.path = "ids.bin"
    frag.external_row_ids.offset = 4
    frag.external_row_ids.size = len(data)
    np.testing.assert_array_equal(rowids.fragment_row_ids(str(tmp_path), frag), ids)
    frag.external_row_ids.size = len(data) + 100
    with pytest.raises(CorruptFileError):
        rowids.fragment_row_ids(str(tmp_path), frag)
    assert rowids.fragment_row_ids(str(tmp_path), table_pb2.DataFragment(id=3)) is None
