"""The v2 data-file container: footer, offset tables, column metadata, global buffers.

Layout (docs/format/container.md): page buffers ... | global buffer 0 (FileDescriptor) |
ColumnMetadata protobufs | column-metadata offset table | global-buffer offset table | 40-byte
footer. Everything here is validated against the file size before it is used, so a corrupt footer
gives a :class:`CorruptFileError` instead of a giant allocation.
"""

from __future__ import annotations

import itertools
import struct
from dataclasses import dataclass

import numpy as np

from ..errors import CorruptFileError, UnsupportedError, check_size
from ..io import RandomAccessFile
from ..version import READABLE_V2_VERSIONS, LanceFileVersion

MAGIC = b"LANC"
FOOTER_LEN = 40
LEGACY_FOOTER_LEN = 16

# The footer (major, minor) pairs this container reader opens.  2.0 files say (0, 3).
_VERSIONS = {v.footer_numbers: v for v in READABLE_V2_VERSIONS} | {(2, 0): LanceFileVersion.V2_0}
# How much of the tail to fetch on open: usually covers the footer, offset tables, column
# metadata and the schema in one request.
TAIL_READ = 64 * 1024


@dataclass(frozen=True)
class Footer:
    column_meta_start: int
    column_meta_offsets_start: int
    global_buff_offsets_start: int
    num_global_buffers: int
    num_columns: int
    major: int
    minor: int

    @property
    def version(self) -> LanceFileVersion:
        return _VERSIONS[(self.major, self.minor)]


@dataclass(frozen=True)
class ContainerLayout:
    """Where everything in the file is: parsed footer plus both offset tables."""

    footer: Footer
    file_size: int
    column_meta: list[tuple[int, int]]  # (position, size) of each ColumnMetadata
    global_buffers: list[tuple[int, int]]  # (position, size) of each global buffer


def parse_footer(tail: bytes, file_size: int) -> Footer:
    """Parse and sanity-check the 40-byte footer at the end of ``tail``."""
    if file_size < FOOTER_LEN:
        if file_size >= LEGACY_FOOTER_LEN and tail[-4:] == MAGIC:
            _reject_legacy(tail, file_size)
        raise CorruptFileError(f"file is {file_size} bytes, too small for a Lance footer")
    raw = tail[-FOOTER_LEN:]
    if raw[-4:] != MAGIC:
        raise CorruptFileError("bad magic: the file does not end with b'LANC'")
    cm_start, cmo_start, gbo_start, n_gb, n_col, major, minor = struct.unpack("<QQQIIHH", raw[:36])
    if (major, minor) not in _VERSIONS:
        _reject_legacy(tail, file_size)
        raise UnsupportedError(f"unsupported Lance file version {major}.{minor}")
    body_end = file_size - FOOTER_LEN
    check_size(cm_start, body_end, "column metadata start")
    check_size(cmo_start, body_end, "column metadata offset table start")
    check_size(gbo_start, body_end, "global buffer offset table start")
    if cmo_start + 16 * n_col > body_end or gbo_start + 16 * n_gb > body_end:
        raise CorruptFileError(
            f"offset tables ({n_col} columns at {cmo_start}, {n_gb} global buffers at "
            f"{gbo_start}) run past the footer"
        )
    return Footer(cm_start, cmo_start, gbo_start, n_gb, n_col, major, minor)


def is_legacy_footer(tail: bytes, file_size: int) -> bool:
    """Whether the file ends with a v1 ("legacy") footer: version 0.0, 0.1 or 0.2 then
    ``LANC``, 16 bytes in all.

    The v2 footer ends with the same ``u16 major, u16 minor, LANC`` words, where 2.0 says
    0.3, so the two are told apart by the version alone."""
    if file_size < LEGACY_FOOTER_LEN or len(tail) < LEGACY_FOOTER_LEN or tail[-4:] != MAGIC:
        return False
    major, minor = struct.unpack("<HH", tail[-8:-4])
    return major == 0 and minor in (0, 1, 2)


def _reject_legacy(tail: bytes, file_size: int) -> None:
    if is_legacy_footer(tail, file_size):
        minor = struct.unpack("<H", tail[-6:-4])[0]
        raise UnsupportedError(
            f"this is a legacy (v1, footer version 0.{minor}) Lance file, not a v2 "
            "container: read it with LanceFileReader or lance_format.legacy"
        )


def _offset_table(raw: bytes, count: int, file_size: int, what: str) -> list[tuple[int, int]]:
    table = np.frombuffer(raw, dtype="<u8", count=2 * count).reshape(count, 2)
    out: list[tuple[int, int]] = []
    for i, (pos, size) in enumerate(table.tolist()):
        if pos > file_size or size > file_size - pos:
            raise CorruptFileError(
                f"{what} {i} at {pos} with size {size} is outside the file ({file_size} bytes)"
            )
        out.append((pos, size))
    return out


class Tail:
    """The bytes at the end of the file, with reads that fall back to the file when needed."""

    def __init__(self, file: RandomAccessFile):
        self.file = file
        self.start = max(0, file.size - TAIL_READ)
        self.data = file.read_at(self.start, file.size - self.start)

    def read(self, pos: int, size: int) -> bytes:
        if pos >= self.start:
            off = pos - self.start
            return self.data[off : off + size]
        return self.file.read_at(pos, size)


def read_layout(file: RandomAccessFile, tail: Tail) -> ContainerLayout:
    footer = parse_footer(tail.data, file.size)
    column_meta = _offset_table(
        tail.read(footer.column_meta_offsets_start, 16 * footer.num_columns),
        footer.num_columns,
        file.size,
        "column metadata",
    )
    global_buffers = _offset_table(
        tail.read(footer.global_buff_offsets_start, 16 * footer.num_global_buffers),
        footer.num_global_buffers,
        file.size,
        "global buffer",
    )
    if not global_buffers:
        raise CorruptFileError("the file has no global buffers, so no schema")
    return ContainerLayout(footer, file.size, column_meta, global_buffers)


# -- writer side -----------------------------------------------------------------------------


def encode_tail(
    start: int, global_buffers: list[bytes], column_meta: list[bytes], version: LanceFileVersion
) -> bytes:
    """Everything after the data, for a file whose data ends at ``start`` (64-aligned):
    global buffers, column metadata, both offset tables and the footer
    (docs/format/container.md)."""
    if start % 64:
        raise ValueError("the tail must start 64-byte aligned")
    major, minor = version.footer_numbers
    # each global buffer starts 64-byte aligned (readers refuse others): pad all but the last
    padded = [b + bytes(-len(b) % 64) for b in global_buffers[:-1]] + global_buffers[-1:]
    parts: list[bytes] = [*padded, *column_meta]
    spans = list(map(len, parts))
    # (position, size) of each part, as little-endian u64 pairs
    table = np.empty((len(parts), 2), dtype="<u8")
    table[:, 0] = list(itertools.accumulate(spans[:-1], initial=start)) if parts else []
    table[:, 1] = [*map(len, global_buffers), *map(len, column_meta)]
    n_gb = len(global_buffers)
    cm_start = start + sum(spans[:n_gb])
    cmo_start = start + sum(spans)
    gbo_start = cmo_start + 16 * len(column_meta)
    parts.append(table[n_gb:].tobytes())  # column metadata offsets, then global buffers'
    parts.append(table[:n_gb].tobytes())
    footer = struct.pack(
        "<QQQIIHH",
        cm_start,
        cmo_start,
        gbo_start,
        len(global_buffers),
        len(column_meta),
        major,
        minor,
    )
    parts.append(footer + MAGIC)
    return b"".join(parts)
