"""The v1 ("legacy", 0.1) data-file container: footer, ``Metadata``, page table, schema.

Layout (docs/format/container.md)::

    pages ... | page table | [statistics pages + their page table] | [dictionaries]
    | [embedded Manifest] | Metadata | i64 metadata position, u16 0, u16 minor, "LANC"

``Metadata`` (``lance.file.Metadata``, u32-length-prefixed) holds the cumulative row count of
every batch (row group) and where the page table and the embedded manifest are.  The page
table is a dense ``i64[fields][batches][2]`` array of (position, length) for every field id
from the schema's smallest to its largest, parents included ((0, 0) for structs).  The schema
lives in the embedded ``lance.table.Manifest``; a dictionary field's values are stored in the
file at ``Field.dictionary`` (offset, length).  pylance 14 writes footer version 0.2 and calls
the format "0.1" (``LanceFileVersion::Legacy``).

Everything read here is checked against the file size before it is sliced or allocated.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..container.footer import LEGACY_FOOTER_LEN, Tail, is_legacy_footer
from ..container.metadata import parse_message
from ..errors import CorruptFileError, UnsupportedError
from ..io import RandomAccessFile
from ..pb import file_pb2, table_pb2
from ..schema import LanceSchema
from ..version import LanceFileVersion

LEGACY_VERSION = LanceFileVersion.LEGACY  # "0.1", the name pylance gives the format
_FOOTER = struct.Struct("<qHH4s")
_U32 = struct.Struct("<I")
# A protobuf section longer than this is not metadata but garbage.
_MAX_MESSAGE = 1 << 30


@dataclass
class LegacyPage:
    """One page (one field in one batch), shaped like a v2 ``PageInfo`` for generic tools."""

    position: int
    length: int  # entries stored (rows; rows + 1 for list offsets; items for list children)
    num_rows: int  # rows of the batch
    first_row: int
    index: int  # batch number
    encoding: None = None

    @property
    def buffers(self) -> list[tuple[int, int]]:
        return [(self.position, 0)]  # sizes are implied by the type, not stored


@dataclass
class LegacyColumn:
    """One row of the page table (one field id), shaped like a v2 ``ColumnInfo``."""

    field_id: int
    pages: list[LegacyPage]
    encoding: None = None
    batch_offsets: np.ndarray = field(default_factory=lambda: np.zeros(1, np.int64))

    def page_starts(self) -> np.ndarray:
        return self.batch_offsets


@dataclass
class StatisticsInfo:
    """Where the page statistics are: their own schema and page table (one batch)."""

    schema: LanceSchema
    page_table_position: int
    field_ids: list[int]


@dataclass
class LegacyMetadata:
    """Everything but the data of a v1 file."""

    file_size: int
    footer_version: tuple[int, int]
    schema: LanceSchema
    batch_offsets: np.ndarray  # int64, [0, rows of batch 0, ...], len = batches + 1
    min_field_id: int
    page_table: np.ndarray  # int64 (field rows, batches, 2): position, length
    dictionaries: dict[int, tuple[int, int]]  # field id -> (offset, length) of the values
    statistics: StatisticsInfo | None
    version: LanceFileVersion = LEGACY_VERSION

    @property
    def num_rows(self) -> int:
        return int(self.batch_offsets[-1])

    @property
    def num_batches(self) -> int:
        return len(self.batch_offsets) - 1

    @property
    def columns(self) -> _Columns:
        """One entry per page-table row (field id ``min_field_id + i``), built on access."""
        return _Columns(self)


class _Columns(Sequence):
    """A lazy list of :class:`LegacyColumn`: ``len()`` is free, columns are built on use."""

    def __init__(self, meta: LegacyMetadata):
        self._meta = meta

    def __len__(self) -> int:
        return int(self._meta.page_table.shape[0])

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if not -len(self) <= i < len(self):
            raise IndexError(i)
        i %= len(self)
        m = self._meta
        starts = m.batch_offsets
        rows = np.diff(starts)
        pages = [
            LegacyPage(
                int(m.page_table[i, b, 0]),
                int(m.page_table[i, b, 1]),
                int(rows[b]),
                int(starts[b]),
                b,
            )
            for b in range(m.num_batches)
        ]
        return LegacyColumn(m.min_field_id + i, pages, None, starts)


def _message(tail: Tail, pos: int, limit: int, what: str) -> bytes:
    """The bytes of a u32-length-prefixed protobuf at ``pos`` that must end by ``limit``."""
    if pos < 0 or pos + 4 > limit:
        raise CorruptFileError(f"{what} position {pos} is outside the file (0..{limit - 4})")
    (length,) = _U32.unpack(tail.read(pos, 4))
    if length > min(_MAX_MESSAGE, limit - pos - 4):
        raise CorruptFileError(f"{what} at {pos} claims {length} bytes, past the end")
    return tail.read(pos + 4, length)


def _batch_offsets(raw: list[int]) -> np.ndarray:
    if not raw:
        return np.zeros(1, dtype=np.int64)
    offsets = np.asarray(raw, dtype=np.int64)
    if offsets[0] != 0 or (np.diff(offsets) < 0).any():
        raise CorruptFileError(
            "batch offsets must start at 0 and never decrease "
            f"(got {offsets[:8].tolist()}{'...' if len(offsets) > 8 else ''})"
        )
    return offsets


def read_page_table(
    file: RandomAccessFile, tail: Tail, position: int, num_fields: int, num_batches: int
) -> np.ndarray:
    """The dense (position, length) table, validated: every page starts inside the file."""
    size = 16 * num_fields * num_batches
    if num_fields < 0 or position < 0 or size > file.size or position > file.size - size:
        raise CorruptFileError(
            f"page table of {num_fields} fields x {num_batches} batches at {position} "
            f"does not fit in the file ({file.size} bytes)"
        )
    table = np.frombuffer(tail.read(position, size), dtype="<i8").astype(np.int64)
    table = table.reshape(num_fields, num_batches, 2)
    pos, length = table[..., 0], table[..., 1]
    if (pos < 0).any() or (pos > file.size).any() or (length < 0).any():
        raise CorruptFileError("the page table has a page outside the file or a negative length")
    return table


def read_legacy_metadata(file: RandomAccessFile, tail: Tail | None = None) -> LegacyMetadata:
    """Parse the footer, ``Metadata``, embedded schema, page table and statistics location."""
    tail = tail or Tail(file)
    if not is_legacy_footer(tail.data, file.size):
        raise CorruptFileError("not a legacy (v1) Lance file")
    meta_pos, major, minor, _ = _FOOTER.unpack(tail.data[-LEGACY_FOOTER_LEN:])
    body_end = file.size - LEGACY_FOOTER_LEN
    meta = parse_message(
        file_pb2.Metadata, _message(tail, meta_pos, body_end, "Metadata"), "the v1 Metadata"
    )
    offsets = _batch_offsets(list(meta.batch_offsets))
    num_batches = len(offsets) - 1

    if meta.manifest_position == 0:
        raise UnsupportedError(
            "this v1 file is not self-describing (no embedded manifest), so its schema "
            "is unknown; read it through its dataset"
        )
    manifest = parse_message(
        table_pb2.Manifest,
        _message(tail, int(meta.manifest_position), body_end, "embedded manifest"),
        "the embedded manifest",
    )
    schema = LanceSchema.from_protos(manifest.fields, dict(manifest.schema_metadata))
    ids = [int(f.id) for f in manifest.fields]
    if not ids:
        raise CorruptFileError("the embedded schema has no fields")
    min_id, max_id = min(ids), max(ids)
    if min_id < 0:
        raise CorruptFileError(f"negative field id {min_id} in a v1 schema")
    page_table = read_page_table(
        file, tail, int(meta.page_table_position), max_id - min_id + 1, num_batches
    )
    dictionaries = {
        int(f.id): (int(f.dictionary.offset), int(f.dictionary.length))
        for f in manifest.fields
        if f.HasField("dictionary")
    }
    stats = None
    if meta.HasField("statistics") and len(meta.statistics.fields):
        st = meta.statistics
        stats = StatisticsInfo(
            LanceSchema.from_protos(st.schema, {}),
            int(st.page_table_position),
            [int(i) for i in st.fields],
        )
    return LegacyMetadata(
        file_size=file.size,
        footer_version=(major, minor),
        schema=schema,
        batch_offsets=offsets,
        min_field_id=min_id,
        page_table=page_table,
        dictionaries=dictionaries,
        statistics=stats,
    )
