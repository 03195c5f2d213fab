"""Reads of a v1 file for :class:`lance_format.reader.LanceFileReader`.

The public reader validates the request (rows, projection) and hands the projected fields
here; this turns file rows into per-batch ranges and assembles every field.  Batches (row
groups) are v1's pages: every field has one page per batch, so page boundaries are the
batch offsets for all columns.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from ..cache import SearchCache
from ..io import RandomAccessFile
from ..schema import LanceField
from ..workers import pool
from . import rows as R
from .arrays import PageSource, read_field, warm_field
from .container import LegacyMetadata

# reads of at least this many rows assemble their fields on the shared thread pool
PARALLEL_MIN_ROWS = 65536
_UNREAD = object()


def default_field_rows(meta: LegacyMetadata) -> dict[int, int]:
    """Field id -> page-table row: the table covers every id from the smallest one up."""
    return {f.id: f.id - meta.min_field_id for f in meta.schema.walk()}


class LegacyReader:
    def __init__(
        self, file: RandomAccessFile, meta: LegacyMetadata, field_rows: dict[int, int], path: str
    ):
        self.meta = meta
        self.path = path
        self._stats: pa.Table | None | object = _UNREAD
        self.source = PageSource(file, meta.page_table, field_rows, meta.dictionaries, (path, "v1"))

    def requests(self, rows: np.ndarray | None, start: int, stop: int) -> list[R.Request]:
        """Sorted unique file rows, or the range ``[start, stop)``, as per-batch ranges."""
        offsets = self.meta.batch_offsets
        if rows is not None:
            return R.split_rows_by_batch(offsets, np.asarray(rows, dtype=np.int64))
        return R.split_by_batch(offsets, start, stop)

    def read_arrays(
        self,
        fields: Sequence[LanceField],
        rows: np.ndarray | None,
        start: int,
        stop: int,
        cache: SearchCache | None,
    ) -> list[pa.Array]:
        reqs = self.requests(rows, start, stop)
        n = sum(R.total(r) for _, r in reqs)
        if n == 0:
            return [pa.array([], type=f.arrow_type) for f in fields]

        def one(f: LanceField) -> pa.Array:
            return read_field(self.source, f, reqs, cache)

        if n >= PARALLEL_MIN_ROWS and len(fields) > 1:
            return list(pool().map(one, fields))
        return [one(f) for f in fields]

    def read_table(
        self,
        fields: Sequence[LanceField],
        rows: np.ndarray | None,
        start: int,
        stop: int,
        cache: SearchCache | None,
        schema_metadata: dict | None,
    ) -> pa.Table:
        arrays = self.read_arrays(fields, rows, start, stop, cache)
        schema = pa.schema(
            [
                pa.field(f.name, a.type, f.nullable, f.to_arrow().metadata)
                for f, a in zip(fields, arrays, strict=True)
            ],
            metadata=schema_metadata,
        )
        return pa.Table.from_arrays(arrays, schema=schema)

    def warm(self, fields: Sequence[LanceField], cache: SearchCache) -> None:
        for f in fields:
            warm_field(self.source, f, self.meta.num_batches, cache)

    def page_boundaries(self) -> np.ndarray:
        return np.unique(self.meta.batch_offsets)

    def statistics(self, cache: SearchCache | None) -> pa.Table | None:
        """The page statistics (read once per reader; see :mod:`.statistics`)."""
        if self._stats is _UNREAD:
            from .statistics import read_statistics

            self._stats = read_statistics(self.source.file, self.meta, self.path, cache)
        return self._stats
