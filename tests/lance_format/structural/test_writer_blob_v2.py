"""Blob v2 writing (``LanceFileWriter(..., version="2.2", blob_v2=True)``), checked by pylance.

The oracle is a dataset: pylance writes the table with ``lance.write_dataset(...,
data_storage_version="2.2")``, then its data file and sidecars are deleted and the same table
is written by our writer to the same path (the manifest's ``file_size_bytes`` patched to our
file's size).  pylance must then return the same descriptors (inline positions aside, since
the data files differ), the same blob bytes through ``take_blobs``/``read_blobs``, and our
sidecars must be byte-identical to the ones it wrote itself.
"""

from __future__ import annotations

import glob
import os
import shutil
import struct

import lance
import numpy as np
import pyarrow as pa
import pytest

from lance_format import LanceFileReader, LanceFileWriter
from lance_format.errors import InvalidArgumentError, SchemaError, UnsupportedError
from lance_format.pb import table_pb2
from lance_format.structural import blob as blob_v2
from lance_format.writer import MAX_INFLIGHT

BLOB_MD = {"lance-encoding:blob": "true"}
MiB = 1024 * 1024


def _payloads(sizes: list[int | None], seed: int) -> list[bytes | None]:
    rng = np.random.default_rng(seed)
    return [None if s is None else rng.integers(0, 256, s, dtype=np.uint8).tobytes() for s in sizes]


def _blob_table(sizes: list[int | None], seed: int = 7, metadata: dict | None = None) -> pa.Table:
    f = pa.field("blob", pa.large_binary(), metadata=metadata or BLOB_MD)
    n = len(sizes)
    schema = pa.schema([pa.field("id", pa.int32()), f, pa.field("after", pa.int64())])
    return pa.table(
        {
            "id": pa.array(range(n), pa.int32()),
            "blob": pa.array(_payloads(sizes, seed), pa.large_binary()),
            "after": pa.array([i * 10 for i in range(n)], pa.int64()),
        },
        schema=schema,
    )


def _patch_file_size(uri: str, data_file: str) -> None:
    """Point the manifest's DataFile.file_size_bytes at our file (framing: docs/format/table.md)."""
    (path,) = glob.glob(os.path.join(uri, "_versions", "*.manifest"))
    raw = open(path, "rb").read()
    (pos,) = struct.unpack_from("<q", raw, len(raw) - 16)
    (length,) = struct.unpack_from("<I", raw, pos)
    manifest = table_pb2.Manifest()
    manifest.ParseFromString(raw[pos + 4 : pos + 4 + length])
    name = os.path.basename(data_file)
    hits = [f for frag in manifest.fragments for f in frag.files if f.path == name]
    assert len(hits) == 1
    hits[0].file_size_bytes = os.path.getsize(data_file)
    body = manifest.SerializeToString()
    with open(path, "wb") as out:
        out.write(raw[:pos] + struct.pack("<I", len(body)) + body + raw[-16:])


class Swapped:
    """pylance's dataset for ``table`` before and after its data file became ours."""

    def __init__(self, tmp_path, table: pa.Table, **writer_options):
        self.uri = str(tmp_path / "ds")
        theirs = lance.write_dataset(table, self.uri, data_storage_version="2.2")
        self.their_table = theirs.to_table()
        (self.data_file,) = glob.glob(os.path.join(self.uri, "data", "*.lance"))
        self.sidecar_dir = os.path.splitext(self.data_file)[0]
        self.their_sidecars = _read_dir(self.sidecar_dir)
        their_reader = LanceFileReader(self.data_file)
        self.their_fields = their_reader.lance_schema.to_protos()
        self.their_layouts = _layouts(their_reader)
        their_reader.close()
        shutil.rmtree(self.sidecar_dir, ignore_errors=True)
        os.unlink(self.data_file)
        writer = LanceFileWriter(
            self.data_file, table.schema, version="2.2", blob_v2=True, **writer_options
        )
        writer.write_batch(table)
        self.result = writer.close()
        _patch_file_size(self.uri, self.data_file)
        self.ds = lance.dataset(self.uri)
        self.our_table = self.ds.to_table()
        self.our_sidecars = _read_dir(self.sidecar_dir)


def _read_dir(path: str) -> dict[str, bytes]:
    if not os.path.isdir(path):
        return {}
    return {name: open(os.path.join(path, name), "rb").read() for name in os.listdir(path)}


def _layouts(reader: LanceFileReader) -> list[list]:
    return [[p.encoding for p in c.pages] for c in reader.metadata.columns]


def _without_inline_positions(descriptors: list) -> list:
    """Inline positions are offsets in the data file, which differ between the writers."""
    out = []
    for d in descriptors:
        if d is not None and d["kind"] == blob_v2.KIND_INLINE:
            d = {**d, "position": None}
        out.append(d)
    return out


def _check_against_pylance(sw: Swapped, table: pa.Table, expected_kinds: list) -> None:
    ours = sw.our_table.column("blob").to_pylist()
    theirs = sw.their_table.column("blob").to_pylist()
    assert [d and d["kind"] for d in ours] == expected_kinds
    assert _without_inline_positions(ours) == _without_inline_positions(theirs)
    for name in ("id", "after"):  # the field after the blob keeps the manifest's id
        assert sw.our_table.column(name).equals(sw.their_table.column(name))
    # the blob bytes, through pylance's two blob APIs
    want = table.column("blob").to_pylist()
    n = len(want)
    files = sw.ds.take_blobs("blob", indices=list(range(n)))
    assert [None if f is None else f.readall() for f in files] == want
    read = dict(sw.ds.read_blobs("blob", indices=list(range(n)), preserve_order=True))
    assert [read[i] for i in range(n)] == want
    # sidecars: the same names and bytes as pylance's, and reported by the writer
    assert sw.our_sidecars == sw.their_sidecars
    assert sorted(sw.result.sidecars) == sorted(
        os.path.join(sw.sidecar_dir, name) for name in sw.their_sidecars
    )
    # the data file's schema and the blob column's page layouts are pylance's
    reader = LanceFileReader(sw.data_file)
    assert reader.lance_schema.to_protos() == sw.their_fields
    ours_pages, (their_page, *more) = _layouts(reader)[1], sw.their_layouts[1]
    if not more and len(ours_pages) == 1:
        assert ours_pages == [their_page]
    else:  # pages cut differently: each page still has pylance's encoding
        for page in ours_pages:
            zipped = page.full_zip_layout
            assert zipped.value_compression == their_page.full_zip_layout.value_compression
            assert zipped.bits_per_offset == their_page.full_zip_layout.bits_per_offset
    # our own reader returns the descriptors pylance reads from our file
    assert reader.read().column("blob").to_pylist() == ours
    assert reader.take([n - 1, 0]).column("blob").to_pylist() == [ours[n - 1], ours[0]]
    reader.close()


def test_default_thresholds_match_pylance(tmp_path) -> None:
    """Inline (0 B, 100 B, 64 KiB), packed (64 KiB + 1, 70 KB, 200 KB), dedicated (5 MiB),
    nulls; ids (a dedicated blob before the first pack: ids go in row order) and packed
    positions equal pylance's."""
    sizes = [0, 100, None, 5 * MiB, 70_000, 200_000, 65536, 65537, 1000, None]
    table = _blob_table(sizes)
    sw = Swapped(tmp_path, table)
    kinds = [0, 0, None, 2, 1, 1, 0, 1, 0, None]
    _check_against_pylance(sw, table, kinds)
    assert sw.result.encodings["blob"] == sw.result.encodings["blob"][:1]  # one page
    # inline bytes sit in the data file at their absolute positions
    raw = open(sw.data_file, "rb").read()
    ours = sw.our_table.column("blob").to_pylist()
    for d, v in zip(ours, table.column("blob").to_pylist(), strict=True):
        if d is not None and d["kind"] == blob_v2.KIND_INLINE:
            assert raw[d["position"] : d["position"] + d["size"]] == v
            assert d["size"] == 0 or d["position"] % 64 == 0


def test_threshold_metadata_pack_rolling_and_pages_match_pylance(tmp_path) -> None:
    """The per-field threshold keys pylance reads; small pack files roll over; several pages
    (ids and pack offsets continue across pages)."""
    md = {
        **BLOB_MD,
        blob_v2.INLINE_KEY: "10",
        blob_v2.DEDICATED_KEY: "1000",
        blob_v2.PACK_FILE_KEY: "1500",
    }
    # packs: [11, 1000] [500, 1000] (exactly full) [700] [999, 12, 400, 20]
    sizes = [10, 11, 1000, 1001, 0, None, 500, 1000, 700, 999, 12, 1001, 400, 3, None, 20]
    table = _blob_table(sizes, seed=3, metadata=md)
    sw = Swapped(tmp_path, table, max_page_bytes=2000)
    assert len(sw.result.encodings["blob"]) > 1
    kinds = [0, 1, 1, 2, 0, None, 1, 1, 1, 1, 1, 2, 1, 0, None, 1]
    _check_against_pylance(sw, table, kinds)
    assert len(sw.our_sidecars) == 6  # four packs and two dedicated blobs


def test_nested_non_nullable_and_all_null_blob_columns_match_pylance(tmp_path) -> None:
    inner = pa.field("b", pa.large_binary(), metadata=BLOB_MD)
    st = pa.struct([inner])
    schema = pa.schema(
        [
            pa.field("s", st),
            pa.field("req", pa.binary(), nullable=False, metadata=BLOB_MD),
            pa.field("none", pa.large_binary(), metadata=BLOB_MD),
        ]
    )
    big = b"\x07" * 70_000
    table = pa.table(
        {
            "s": pa.array([{"b": b"x"}, None, {"b": None}, {"b": big}], st),
            "req": pa.array([b"", b"abc", big, b"z"], pa.binary()),
            "none": pa.array([None] * 4, pa.large_binary()),
        },
        schema=schema,
    )
    uri = str(tmp_path / "ds")
    theirs = lance.write_dataset(table, uri, data_storage_version="2.2")
    want = theirs.to_table()
    (data_file,) = glob.glob(os.path.join(uri, "data", "*.lance"))
    their_reader = LanceFileReader(data_file)
    their_fields = their_reader.lance_schema.to_protos()
    their_layouts = _layouts(their_reader)
    their_reader.close()
    sidecars = _read_dir(os.path.splitext(data_file)[0])
    shutil.rmtree(os.path.splitext(data_file)[0])
    os.unlink(data_file)
    with LanceFileWriter(data_file, schema, version="2.2", blob_v2=True) as w:
        w.write_batch(table)
    _patch_file_size(uri, data_file)
    ds = lance.dataset(uri)
    got = ds.to_table()
    for name in ("s", "req", "none"):
        a = got.column(name).to_pylist()
        b = want.column(name).to_pylist()
        if name == "s":
            a = [r and {"b": _without_inline_positions([r["b"]])[0]} for r in a]
            b = [r and {"b": _without_inline_positions([r["b"]])[0]} for r in b]
        else:
            a, b = _without_inline_positions(a), _without_inline_positions(b)
        assert a == b, name
    assert _read_dir(os.path.splitext(data_file)[0]) == sidecars
    reader = LanceFileReader(data_file)
    assert reader.lance_schema.to_protos() == their_fields
    assert _layouts(reader) == their_layouts
    assert reader.read().equals(got)
    assert [f and f.readall() for f in ds.take_blobs("req", indices=[0, 1, 2, 3])] == [
        b"",
        b"abc",
        big,
        b"z",
    ]
    nested = [f and f.readall() for f in ds.take_blobs("s.b", indices=[0, 1, 2, 3])]
    assert nested == [b"x", None, None, big]


def test_default_thresholds_are_pylance_boundaries() -> None:
    """pylance 14 (observed): 65536 B inline, 65537 packed; 4 MiB packed, 4 MiB + 1
    dedicated (those two are too big to write in a fast test)."""
    sizes = np.array([0, 100, 65536, 65537, 4 * MiB, 4 * MiB + 1, 7])
    valid = np.array([True] * 6 + [False])
    kinds = blob_v2.classify(sizes, valid, blob_v2.BlobThresholds())
    assert kinds.tolist() == [0, 0, 0, 1, 1, 2, 0]
    assert blob_v2.sidecar_name(1) == "1" + "0" * 31 + ".blob"
    assert blob_v2.sidecar_name(6) == "011" + "0" * 29 + ".blob"


def test_blob_v2_needs_version_2_2(tmp_path) -> None:
    schema = _blob_table([1]).schema
    path = tmp_path / "x.lance"
    with pytest.raises(UnsupportedError):
        LanceFileWriter(path, schema, version="2.1", blob_v2=True)
    assert os.listdir(tmp_path) == []
    LanceFileWriter(path, schema, version="stable", blob_v2=True).abort()


def test_blob_v2_off_keeps_the_file_writer_layout(tmp_path) -> None:
    """Without blob_v2 a 2.2 file keeps the BlobLayout (like pylance's LanceFileWriter)."""
    table = _blob_table([100, 70_000, None])
    path = str(tmp_path / "x.lance")
    with LanceFileWriter(path, table.schema, version="2.2") as w:
        w.write_batch(table)
    assert sorted(os.listdir(tmp_path)) == ["x.lance"]
    (page,) = LanceFileReader(path).metadata.columns[1].pages
    assert page.encoding.WhichOneof("layout") == "blob_layout"
    got = lance.file.LanceFileReader(path).read_all().to_table()
    assert got.column("blob").equals(table.column("blob"))


def test_abort_removes_sidecars(tmp_path) -> None:
    md = {**BLOB_MD, blob_v2.INLINE_KEY: "4", blob_v2.DEDICATED_KEY: "100"}
    table = _blob_table([3, 50, 200, 60, None], metadata=md)
    path = str(tmp_path / "data" / "f.lance")
    os.makedirs(os.path.dirname(path))
    w = LanceFileWriter(path, table.schema, version="2.2", blob_v2=True, max_page_bytes=64)
    # small pages, and more of them than may wait in the encoding queue: blobs reach disk now
    for _ in range(MAX_INFLIGHT + 2):
        w.write_batch(table)
    side = os.path.join(tmp_path, "data", "f")
    names = os.listdir(side)
    assert names and all(n.endswith(".partial") for n in names)  # nothing final before close
    w.abort()
    assert os.listdir(tmp_path / "data") == []
    # an exception inside ``with`` aborts too
    with (
        pytest.raises(RuntimeError),
        LanceFileWriter(path, table.schema, version="2.2", blob_v2=True, max_page_bytes=64) as w2,
    ):
        w2.write_batch(table)
        raise RuntimeError("boom")
    assert os.listdir(tmp_path / "data") == []
    # a sidecar directory that already holds other files is left in place
    os.makedirs(side)
    open(os.path.join(side, "keep"), "wb").close()
    w3 = LanceFileWriter(path, table.schema, version="2.2", blob_v2=True, max_page_bytes=64)
    w3.write_batch(table)
    w3.abort()
    assert os.listdir(side) == ["keep"]


def test_bad_blob_v2_columns_are_refused(tmp_path) -> None:
    bad = pa.schema(
        [pa.field("b", pa.large_binary(), metadata={**BLOB_MD, blob_v2.DEDICATED_KEY: "0"})]
    )
    with pytest.raises(InvalidArgumentError, match="dedicated"):
        LanceFileWriter(tmp_path / "a.lance", bad, version="2.2", blob_v2=True)
    text = pa.schema([pa.field("b", pa.string(), metadata=BLOB_MD)])
    with pytest.raises(SchemaError, match="binary"):
        LanceFileWriter(tmp_path / "b.lance", text, version="2.2", blob_v2=True)
    assert os.listdir(tmp_path) == []
