"""Our .proto definitions against the bytes pylance 14 writes.

Two properties are checked:

* the committed modules in lance_format/pb/ are exactly what scripts/gen_protos.py produces;
* every protobuf pylance writes (data-file column metadata, page/column encodings, the file
  descriptor, manifests, transactions, index sections, row-id sequences) parses with our
  modules leaving no unknown field anywhere, re-serializes to the same number of bytes, and
  agrees with what pylance itself reports (buffer positions, layout variants, values).

The byte-level framing helpers here are deliberately small and independent of
lance_format.container, following docs/format/container.md and docs/format/table.md.
"""

from __future__ import annotations

import os
import re
import struct
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import lance
import lance.file
import numpy as np
import pyarrow as pa
import pytest
from google.protobuf import any_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from google.protobuf.unknown_fields import UnknownFieldSet
from repo_paths import REPO as ROOT

from lance_format.pb import (
    encodings_v2_0_pb2,
    encodings_v2_1_pb2,
    file2_pb2,
    file_pb2,
    rowids_pb2,
    table_pb2,
    transaction_pb2,
)

N = 400

# Any type URLs that legitimately name messages outside our protos (index plugins).
OPAQUE_ANY_FIELDS = {"index_details", "new_index_details"}

M = TypeVar("M", bound=Message)


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def unknown_field_paths(msg: Message, path: str = "") -> list[str]:
    """Every place in `msg` (recursively, including packed Any) that holds unknown fields."""
    here = path or msg.DESCRIPTOR.full_name
    found = [f"{here}#{f.field_number}" for f in UnknownFieldSet(msg)]
    if msg.DESCRIPTOR.full_name == "google.protobuf.Any":
        inner = unpack_any(msg, allow_opaque=here.rsplit(".", 1)[-1] in OPAQUE_ANY_FIELDS)
        if inner is not None:
            found += unknown_field_paths(inner, f"{here}<{inner.DESCRIPTOR.full_name}>")
        return found
    for fd, value in msg.ListFields():
        if fd.message_type is None:
            continue
        sub = f"{here}.{fd.name}"
        if fd.message_type.GetOptions().map_entry:
            if fd.message_type.fields_by_name["value"].message_type is not None:
                for key, item in value.items():
                    found += unknown_field_paths(item, f"{sub}[{key!r}]")
        elif fd.is_repeated:
            for i, item in enumerate(value):
                found += unknown_field_paths(item, f"{sub}[{i}]")
        else:
            found += unknown_field_paths(value, sub)
    return found


def unpack_any(msg: any_pb2.Any, allow_opaque: bool = False) -> Message | None:
    """Decode a google.protobuf.Any with the message type named by its URL."""
    name = msg.type_url.rsplit("/", 1)[-1]
    try:
        desc = descriptor_pool.Default().FindMessageTypeByName(name)
    except KeyError:
        if allow_opaque:
            return None
        raise AssertionError(f"Any type {msg.type_url!r} is not defined by our protos") from None
    inner = message_factory.GetMessageClass(desc)()
    inner.ParseFromString(msg.value)
    return inner


def parse_exact(cls: type[M], raw: bytes) -> M:
    """Parse `raw` as `cls`, requiring no unknown fields and a byte-for-byte size match."""
    msg = cls()
    msg.ParseFromString(raw)
    assert unknown_field_paths(msg) == []
    assert msg.ByteSize() == len(raw), f"{cls.__name__}: {msg.ByteSize()} != {len(raw)}"
    return msg


def decode_direct_any(enc: file2_pb2.Encoding) -> Message:
    """Unwrap ColumnMetadata's Encoding (always `direct` from pylance) into the typed message."""
    assert enc.WhichOneof("location") == "direct"
    wrapper = parse_exact(any_pb2.Any, enc.direct.encoding)
    inner = unpack_any(wrapper)
    assert inner is not None
    assert inner.ByteSize() == len(wrapper.value)
    assert unknown_field_paths(inner) == []
    return inner


@dataclass
class DataFile:
    version: tuple[int, int]
    descriptor: file_pb2.FileDescriptor
    columns: list[file2_pb2.ColumnMetadata]


def read_data_file(path: str | os.PathLike[str]) -> DataFile:
    """Split a 2.x data file into FileDescriptor and ColumnMetadata per docs/format/container.md."""
    data = Path(path).read_bytes()
    assert data[-4:] == b"LANC"
    cm_start, cmo_start, gbo_start, n_gb, n_col, major, minor = struct.unpack(
        "<QQQIIHH", data[-40:-4]
    )
    assert cm_start <= cmo_start
    assert cmo_start + 16 * n_col == gbo_start
    assert gbo_start + 16 * n_gb == len(data) - 40
    cmo = np.frombuffer(data, "<u8", 2 * n_col, cmo_start).reshape(-1, 2)
    gbo = np.frombuffer(data, "<u8", 2 * n_gb, gbo_start).reshape(-1, 2)
    columns = [
        parse_exact(file2_pb2.ColumnMetadata, data[int(pos) : int(pos) + int(size)])
        for pos, size in cmo
    ]
    pos, size = (int(x) for x in gbo[0])
    descriptor = parse_exact(file_pb2.FileDescriptor, data[pos : pos + size])
    return DataFile((major, minor), descriptor, columns)


@dataclass
class ManifestFile:
    manifest: table_pb2.Manifest
    transaction: transaction_pb2.Transaction
    transaction_bytes: bytes
    index_section: table_pb2.IndexSection | None


def read_manifest_file(path: Path) -> ManifestFile:
    """Parse the [IndexSection] [Transaction] Manifest framing of docs/format/table.md."""
    data = path.read_bytes()
    assert data[-4:] == b"LANC"
    pos, major, minor = struct.unpack("<qHH", data[-16:-4])
    assert (major, minor) == (0, 2)

    def section(at: int) -> tuple[bytes, int]:
        (length,) = struct.unpack_from("<I", data, at)
        return data[at + 4 : at + 4 + length], at + 4 + length

    raw_manifest, end = section(pos)
    assert end == len(data) - 16
    manifest = parse_exact(table_pb2.Manifest, raw_manifest)
    # Field 23 has explicit presence and is always written by pylance 14; 21 never is.
    assert manifest.HasField("transaction_section")
    assert not manifest.HasField("transaction_section_deprecated")
    raw_txn, end = section(manifest.transaction_section)
    assert end == pos
    transaction = parse_exact(transaction_pb2.Transaction, raw_txn)
    index_section = None
    if manifest.HasField("index_section"):
        raw_idx, end = section(manifest.index_section)
        assert end == manifest.transaction_section
        index_section = parse_exact(table_pb2.IndexSection, raw_idx)
    else:
        assert manifest.transaction_section == 0
    return ManifestFile(manifest, transaction, raw_txn, index_section)


def camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


def expected_debug_tokens(msg: Message) -> list[str]:
    """Tokens that prost's Debug rendering (pylance's `page.encoding`) must contain for `msg`.

    Covers the chosen oneof variants and every non-default integer/bool value, so a wrong
    field number or a wrong oneof tag in our protos shows up as a missing token.
    """
    tokens = []
    for fd, value in msg.ListFields():
        oneof = fd.containing_oneof
        real_oneof = oneof is not None and not (len(oneof.fields) == 1 and oneof.name[0] == "_")
        if fd.message_type is not None:
            items = value if fd.is_repeated else [value]
            if real_oneof:
                tokens.append(f"{camel(fd.name)}(")
            for item in items:
                tokens += expected_debug_tokens(item)
            continue
        if fd.type == FieldDescriptor.TYPE_BOOL:
            rendered = "true" if value else "false"
        elif fd.type in (FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_UINT32):
            rendered = str(value)
        else:
            continue
        if fd.is_repeated:
            continue
        if real_oneof:
            tokens.append(f"{camel(fd.name)}({rendered})")
        elif oneof is not None:  # proto3 `optional`
            tokens.append(f"{fd.name}:Some({rendered})")
        else:
            tokens.append(f"{fd.name}:{rendered}")
    return tokens


def squash(text: str) -> str:
    """Collapse prost's pretty Debug output so `Variant(\\n 32,\\n)` reads `Variant(32)`."""
    return re.sub(r"\s+", "", text).replace(",)", ")")


# --------------------------------------------------------------------------------------------
# Data written by pylance
# --------------------------------------------------------------------------------------------


def sample_table(version: str) -> pa.Table:
    rng = np.random.default_rng(7)
    ints = np.arange(N, dtype=np.int32)
    strings = [None if i % 7 == 0 else f"s{i % 13}" * (i % 5) for i in range(N)]
    lists = [None if i % 11 == 0 else list(range(i % 4)) for i in range(N)]
    cols = {
        "i": pa.array(ints),
        "f": pa.array(rng.standard_normal(N)),
        "s": pa.array(strings, pa.string()),
        "big": pa.array([rng.bytes(600) if i % 3 else None for i in range(N)], pa.binary()),
        "l": pa.array(lists, pa.list_(pa.int32())),
        "st": pa.StructArray.from_arrays(
            [pa.array(ints.astype(np.int64) * 3), pa.array(strings, pa.string())],
            names=["x", "y"],
        ),
        "fsl": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(4 * N, np.float32)), 4),
        "c": pa.array(np.full(N, 7, np.int32)),
        "cs": pa.array(["constant"] * N),
        "n": pa.nulls(N, pa.int64()),
    }
    if version == "2.2":
        cols["m"] = pa.array(
            [[(f"k{j}", i + j) for j in range(i % 3)] for i in range(N)],
            pa.map_(pa.string(), pa.int32()),
        )
    return pa.table(cols)


@pytest.fixture(scope="module")
def data_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, pa.Table]]:
    out = tmp_path_factory.mktemp("pb_files")
    files = {}
    for version in ("2.0", "2.1", "2.2"):
        table = sample_table(version)
        path = str(out / f"v{version}.lance")
        with lance.file.LanceFileWriter(path, table.schema, version=version) as writer:
            writer.write_batch(table)
        files[version] = (path, table)
    return files


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("pb_datasets")
    table = sample_table("2.2").select(["i", "s", "l", "st"])

    plain = out / "plain"
    ds = lance.write_dataset(table, plain, max_rows_per_file=N // 2)
    ds.delete("i < 10")
    ds.add_columns({"i2": "i * 2"})
    ds.create_scalar_index("i", "BTREE")

    stable = out / "stable"
    ds = lance.write_dataset(table, stable, enable_stable_row_ids=True, data_storage_version="2.1")
    lance.write_dataset(table, stable, mode="append")
    ds = lance.dataset(stable)
    ds.delete("i % 3 = 0")
    ds.drop_columns(["s"])
    return {"plain": plain, "stable": stable}


# --------------------------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------------------------


def test_generated_modules_are_fresh() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_protos.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr


def test_type_urls_resolve() -> None:
    """The Any type URLs pylance uses must name our messages (package names matter)."""
    pool = descriptor_pool.Default()
    for name, cls in [
        ("lance.encodings21.PageLayout", encodings_v2_1_pb2.PageLayout),
        ("lance.encodings.ArrayEncoding", encodings_v2_0_pb2.ArrayEncoding),
        ("lance.encodings.ColumnEncoding", encodings_v2_0_pb2.ColumnEncoding),
        ("lance.file.FileDescriptor", file_pb2.FileDescriptor),
        ("lance.file.v2.ColumnMetadata", file2_pb2.ColumnMetadata),
        ("lance.table.Manifest", table_pb2.Manifest),
        ("lance.table.Transaction", transaction_pb2.Transaction),
        ("lance.table.RowIdSequence", rowids_pb2.RowIdSequence),
    ]:
        assert pool.FindMessageTypeByName(name) is cls.DESCRIPTOR


def test_unknown_field_detection_works() -> None:
    """The walker must see unknown fields nested inside a packed Any, else the tests are void."""
    page = encodings_v2_1_pb2.PageLayout()
    page.mini_block_layout.num_items = 3
    raw = page.SerializeToString() + b"\xf8\x07\x01"  # field 127, varint 1
    wrapper = any_pb2.Any(type_url="/lance.encodings21.PageLayout", value=raw)
    assert unknown_field_paths(wrapper) == ["google.protobuf.Any<lance.encodings21.PageLayout>#127"]

    def wrap(field: int, body: bytes) -> bytes:  # length-delimited field, short lengths only
        return bytes([field << 3 | 2, len(body)]) + body

    flat = encodings_v2_1_pb2.Flat(bits_per_value=8).SerializeToString() + b"\xa0\x06\x02"
    raw = wrap(1, wrap(3, wrap(1, flat)))  # PageLayout.mini_block_layout.value_compression.flat
    assert unknown_field_paths(encodings_v2_1_pb2.PageLayout.FromString(raw)) == [
        "lance.encodings21.PageLayout.mini_block_layout.value_compression.flat#100"
    ]


@pytest.mark.parametrize("version", ["2.0", "2.1", "2.2"])
def test_data_file_protos(data_files: dict[str, tuple[str, pa.Table]], version: str) -> None:
    path, table = data_files[version]
    parsed = read_data_file(path)
    oracle = lance.file.LanceFileReader(path).metadata()

    assert parsed.version == {"2.0": (0, 3), "2.1": (2, 1), "2.2": (2, 2)}[version]
    assert parsed.descriptor.length == table.num_rows == oracle.num_rows
    fields = parsed.descriptor.schema.fields
    assert [f.name for f in fields if f.parent_id == -1] == table.column_names
    assert len(parsed.columns) == len(oracle.columns)

    page_type = "PageLayout" if version != "2.0" else "ArrayEncoding"
    layouts: dict[str, list[str]] = {}
    for col_idx, (col, ocol) in enumerate(zip(parsed.columns, oracle.columns, strict=True)):
        col_enc = decode_direct_any(col.encoding)
        assert isinstance(col_enc, encodings_v2_0_pb2.ColumnEncoding)
        assert col_enc.WhichOneof("column_encoding") == "values"
        assert len(col.pages) == len(ocol.pages)
        for page, opage in zip(col.pages, ocol.pages, strict=True):
            assert [(b.position, b.size) for b in opage.buffers] == list(
                zip(page.buffer_offsets, page.buffer_sizes, strict=True)
            )
            enc = decode_direct_any(page.encoding)
            assert type(enc).__name__ == page_type
            debug = squash(opage.encoding)
            for token in expected_debug_tokens(enc):
                assert token in debug, (col_idx, token, opage.encoding)
            if version != "2.0":
                layouts.setdefault(enc.WhichOneof("layout"), []).append(col_idx)
                if enc.HasField("mini_block_layout"):
                    assert enc.mini_block_layout.has_large_chunk == (version == "2.2")

    if version == "2.0":
        return
    # 2.1/2.2 give leaf fields a column each, in schema order; find c, cs and n.
    # (Field.type is always 0 in pylance's output, so leaves are fields nobody points at.)
    parents = {f.parent_id for f in fields}
    leaves = [f.name for f in fields if f.id not in parents]
    assert len(leaves) == len(parsed.columns)
    col_c, col_cs, col_n = (leaves.index(name) for name in ("c", "cs", "n"))
    assert col_n in layouts["constant_layout"]
    null_layout = decode_direct_any(parsed.columns[col_n].pages[0].encoding).constant_layout
    assert not null_layout.HasField("inline_value")
    if version == "2.2":
        const = decode_direct_any(parsed.columns[col_c].pages[0].encoding).constant_layout
        assert const.inline_value == struct.pack("<i", 7)
        assert col_cs in layouts["constant_layout"]
    assert "full_zip_layout" in layouts  # the 600-byte binaries


def test_dataset_manifests_and_transactions(datasets: dict[str, Path]) -> None:
    ops_seen = set()
    for name, root in datasets.items():
        ds = lance.dataset(root)
        manifests = sorted((root / "_versions").glob("*.manifest"))
        assert len(manifests) == len(ds.versions())
        for mpath in manifests:
            mf = read_manifest_file(mpath)
            m = mf.manifest
            op = mf.transaction.WhichOneof("operation")
            ops_seen.add(op)
            # The inline transaction is byte-identical to the .txn file it names.
            txn_path = root / "_transactions" / m.transaction_file
            assert txn_path.read_bytes() == mf.transaction_bytes
            assert m.writer_version.library == "lance"
            assert m.data_format.file_format == "lance"
            v = lance.dataset(root, version=m.version)
            assert sum(f.physical_rows for f in m.fragments) == sum(
                f.physical_rows for f in v.get_fragments()
            )
            assert [f.name for f in m.fields if f.parent_id == -1] == v.schema.names
            for frag in m.fragments:
                for df in frag.files:
                    data_path = root / "data" / df.path
                    assert df.file_size_bytes == data_path.stat().st_size
                    parsed = read_data_file(data_path)
                    assert parsed.descriptor.length == frag.physical_rows
                    assert list(df.column_indices) == list(range(len(parsed.columns)))
                if frag.HasField("deletion_file"):
                    assert m.reader_feature_flags & 1
                if name == "stable":
                    assert m.reader_feature_flags & 2
                    check_row_id_sequences(frag)
            if op in ("merge", "project"):
                assert getattr(mf.transaction, op).preserves_nullability
            if mf.index_section is not None:
                check_index_section(root, mf.index_section)
    assert {"overwrite", "append", "delete", "merge", "project", "create_index"} <= ops_seen


def check_row_id_sequences(frag: table_pb2.DataFragment) -> None:
    assert frag.WhichOneof("row_id_sequence") == "inline_row_ids"
    seq = parse_exact(rowids_pb2.RowIdSequence, frag.inline_row_ids)
    total = 0
    for seg in seq.segments:
        kind = seg.WhichOneof("segment")
        assert kind is not None
        if kind == "range":
            total += seg.range.end - seg.range.start
    assert total in (0, frag.physical_rows)  # fresh fragments are one contiguous range
    for field in ("inline_last_updated_at_versions", "inline_created_at_versions"):
        if frag.HasField(field):
            versions = parse_exact(rowids_pb2.RowDatasetVersionSequence, getattr(frag, field))
            assert all(run.version >= 1 for run in versions.runs)


def check_index_section(root: Path, section: table_pb2.IndexSection) -> None:
    assert len(section.indices) == 1
    index = section.indices[0]
    assert len(index.uuid.uuid) == 16
    assert index.files, "pylance 14 lists index files (IndexMetadata.files = 10)"
    index_dir = root / "_indices" / str(uuid.UUID(bytes=index.uuid.uuid))
    for f in index.files:
        assert (index_dir / f.path).stat().st_size == f.size_bytes
