"""Writing v1 ("legacy", 0.1) data files, as pylance 14 still writes them
(``data_storage_version="legacy"``); the layout :mod:`.container` reads.

Rows are written in batches (row groups) of ``max_rows_per_group``; each batch writes one
page per field id, depth first (a struct's page is ``(0, 0)``: it has no data of its own
and no validity), pages back to back with no padding:

* plain: fixed-stride values (booleans bit-packed LSB first, fixed-size lists flattened);
  the format has no nulls, so a null keeps the value under it (booleans: false);
* binary/string: the values' bytes, then ``rows + 1`` i64 absolute positions (the page
  table points at them); a null is an empty value;
* list: ``rows + 1`` offsets (i32 for ``list``, i64 for ``large_list``) relative to the
  child's page in the same batch; a null list is an empty one.

Then the page table (``i64[fields][batches][2]``), the embedded manifest (the schema), the
``Metadata`` (batch offsets, both positions) and the footer (version 0.2).  Page
statistics are optional and not written; dictionary columns are refused (see
:func:`_check_writable`).
"""

from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa

from .. import storage
from ..errors import InvalidArgumentError, UnsupportedError
from ..pb import file_pb2, table_pb2
from ..schema import LanceField, LanceSchema
from ..version import LanceFileVersion
from ..writer import WriteResult
from .binary import is_binary_like
from .plain import storage as storage_type

DEFAULT_ROWS_PER_GROUP = 1024  # pylance's max_rows_per_group
FOOTER_VERSION = (0, 2)
_U32 = struct.Struct("<I")
_FOOTER = struct.Struct("<qHH4s")


class LegacyFileWriter:
    """One v1 data file: ``write_batch`` as often as needed, then ``close`` (or ``abort``)."""

    def __init__(
        self,
        path: str,
        lance_schema: LanceSchema,
        *,
        max_rows_per_group: int = DEFAULT_ROWS_PER_GROUP,
    ):
        if not isinstance(max_rows_per_group, int) or max_rows_per_group <= 0:
            raise InvalidArgumentError("max_rows_per_group must be a positive integer")
        for f in lance_schema.walk():
            _check_writable(f)
        self.path = storage.register(path)
        self.schema = lance_schema
        self.group_rows = max_rows_per_group
        self._ids = [f.id for f in lance_schema.walk()]
        self._min_id = min(self._ids)
        self._rows_by_id = max(self._ids) - self._min_id + 1
        self._pages: list[dict[int, tuple[int, int]]] = []  # per batch: field id -> page
        self._batch_offsets = [0]
        self._pending: list[pa.RecordBatch] = []
        self._pending_rows = 0
        self._out = storage.create(self.path)
        self._pos = 0
        self._closed = False

    @property
    def bytes_written(self) -> int:
        return self._pos

    def _write(self, data: bytes) -> int:
        at = self._pos
        if data:
            self._out.write(data)
            self._pos += len(data)
        return at

    # -- rows ----------------------------------------------------------------------------

    def write_batch(self, batch: pa.RecordBatch) -> None:
        self._pending.append(batch)
        self._pending_rows += batch.num_rows
        while self._pending_rows >= self.group_rows:
            self._flush(self.group_rows)

    # the name the dataset writer calls (the v2 writer's)
    def _write_batch(self, batch: pa.RecordBatch, arrays_checked: bool = False) -> None:
        self.write_batch(batch)

    def _flush(self, rows: int) -> None:
        table = pa.Table.from_batches(self._pending).combine_chunks()
        group, rest = table.slice(0, rows), table.slice(rows)
        self._pending = rest.to_batches() if rest.num_rows else []
        self._pending_rows = rest.num_rows
        pages: dict[int, tuple[int, int]] = {}
        for f in self.schema.fields:
            column = group.column(f.name).combine_chunks()
            self._field_pages(f, column, pages)
        self._pages.append(pages)
        self._batch_offsets.append(self._batch_offsets[-1] + group.num_rows)

    def _field_pages(self, f: LanceField, arr: pa.Array, pages: dict) -> None:
        if isinstance(arr, pa.ExtensionArray):
            arr = arr.storage
        t = arr.type
        n = len(arr)
        if pa.types.is_struct(t):
            pages[f.id] = (0, 0)
            for i, child in enumerate(f.children):
                self._field_pages(child, arr.field(i), pages)
        elif pa.types.is_list(t) or pa.types.is_large_list(t):
            offsets = np.asarray(arr.offsets, dtype=np.int64)
            start, end = int(offsets[0]), int(offsets[-1])
            rel = offsets - start
            if arr.null_count:  # a null list is empty: its slots hold no items
                valid = np.asarray(arr.is_valid(), dtype=bool)
                lens = np.where(valid, np.diff(rel), 0)
                rel = np.concatenate([[0], np.cumsum(lens)])
                keep = np.repeat(valid, np.diff(offsets))
                items = arr.values.slice(start, end - start).filter(pa.array(keep))
            else:
                items = arr.values.slice(start, end - start)
            width = "<i8" if pa.types.is_large_list(t) else "<i4"
            pages[f.id] = (self._write(rel.astype(width).tobytes()), n + 1)
            self._field_pages(f.children[0], items, pages)
        elif is_binary_like(t):
            large = pa.types.is_large_string(t) or pa.types.is_large_binary(t)
            if arr.null_count:
                arr = arr.fill_null(
                    "" if pa.types.is_string(t) or pa.types.is_large_string(t) else b""
                )
            offsets = np.frombuffer(
                arr.buffers()[1],
                dtype="<i8" if large else "<i4",
                count=n + 1,
                offset=arr.offset * (8 if large else 4),
            ).astype(np.int64)
            data = arr.buffers()[2]
            values = b"" if data is None else data.to_pybytes()[int(offsets[0]) : int(offsets[-1])]
            base = self._write(values)
            positions = base + (offsets - offsets[0])
            pages[f.id] = (self._write(positions.astype("<i8").tobytes()), n)
        elif pa.types.is_null(t):
            pages[f.id] = (self._pos, n)
        else:
            pages[f.id] = (self._write(_plain_bytes(arr)), n)

    # -- the end -------------------------------------------------------------------------

    def close(self) -> WriteResult:
        if self._closed:
            raise InvalidArgumentError(f"the writer for {self.path} is already closed")
        try:
            if self._pending_rows:
                self._flush(self._pending_rows)
            batches = len(self._pages)
            table = np.zeros((self._rows_by_id, batches, 2), dtype="<i8")
            for b, pages in enumerate(self._pages):
                for fid, (pos, length) in pages.items():
                    table[fid - self._min_id, b] = (pos, length)
            page_table_position = self._write(table.tobytes())
            manifest = table_pb2.Manifest(fields=self.schema.to_protos(), version=1)
            manifest.schema_metadata.update(self.schema.metadata)
            manifest.data_format.file_format = "lance"
            manifest.data_format.version = str(LanceFileVersion.LEGACY)
            manifest_position = self._write_message(manifest.SerializeToString())
            meta = file_pb2.Metadata(
                batch_offsets=self._batch_offsets,
                page_table_position=page_table_position,
                manifest_position=manifest_position,
            )
            meta_position = self._write_message(meta.SerializeToString())
            self._write(_FOOTER.pack(meta_position, *FOOTER_VERSION, b"LANC"))
            self._out.commit()
        except BaseException:
            self.abort()
            raise
        self._closed = True
        return WriteResult(self.path, self._batch_offsets[-1], self._pos, LanceFileVersion.LEGACY)

    def _write_message(self, data: bytes) -> int:
        return self._write(_U32.pack(len(data)) + data)

    def abort(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._out.abort()


def _check_writable(f: LanceField) -> None:
    """pylance keeps a legacy dictionary column's values in the dataset's manifest file,
    which this package's manifests do not carry: such columns (and maps) are refused."""
    t = storage_type(f.arrow_type)
    if pa.types.is_dictionary(t) or f.logical_type == "map":
        raise UnsupportedError(
            f"column {f.name!r}: {f.logical_type} columns are not written in legacy files here"
        )


def _plain_bytes(arr: pa.Array) -> bytes:
    """The fixed-stride bytes of ``arr``'s rows (booleans bit-packed from bit 0)."""
    t = arr.type
    if pa.types.is_fixed_size_list(t):
        size = t.list_size
        return _plain_bytes(arr.values.slice(arr.offset * size, len(arr) * size))
    if pa.types.is_boolean(t):
        values = np.asarray(arr.fill_null(False), dtype=bool)
        return np.packbits(values, bitorder="little").tobytes()
    width = t.bit_width // 8
    if t.bit_width % 8 or width == 0:
        raise UnsupportedError(f"{t} cannot be stored with the legacy plain encoding")
    buf = arr.buffers()[1]
    return buf.to_pybytes()[arr.offset * width : (arr.offset + len(arr)) * width]


__all__ = ["DEFAULT_ROWS_PER_GROUP", "LegacyFileWriter"]
