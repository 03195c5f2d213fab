"""``LanceFileReader``: the public reader of one Lance data file (legacy 0.1, 2.0, 2.1, 2.2).

Named like pylance's ``lance.file.LanceFileReader`` so its users feel at home, with the
reads the Flight server needs: row ranges (for page-aligned endpoints), ``take`` (random
access through the search cache) and bounded-memory batches.
"""

from __future__ import annotations

import functools
import operator
import os
from collections.abc import Iterator, Sequence
from typing import cast

import numpy as np
import pyarrow as pa

from . import storage
from .cache import PageCache, SearchCache
from .cache import page_cache as process_page_cache
from .container.footer import Tail, is_legacy_footer
from .container.metadata import FileMetadata, read_file_metadata
from .errors import CorruptFileError, InvalidArgumentError, LanceError, check_size
from .extensions import view_as
from .io import IOStats, RandomAccessFile, open_file
from .legacy.container import LegacyMetadata, read_legacy_metadata
from .schema import LEGACY_BLOB_DESCRIPTOR, LanceField, LanceSchema, is_legacy_blob
from .storage.base import io_pool
from .structural.column import (
    LeafColumnReader,
    LeafResult,
    build_array,
    concat_results,
    leaf_fields,
    owns_column,
)
from .version import LanceFileVersion
from .workers import POOL_SIZE, pool

DEFAULT_BATCH_SIZE = 8192
# reads (ranges / takes) of at least this many rows decode their columns on a thread pool
PARALLEL_MIN_ROWS = 65536
PARALLEL_MIN_TAKE = 64
# takes of at most this many rows decode only the wanted values of each chunk
POINT_MAX_ROWS = 1 << 16
MIN_SPLIT_ROWS = 32768  # a leaf's range is cut into parts of at least this many rows
# ... and of at least this much decoding (measured): handing a part to another thread and
# joining the parts cost more than they save on a small read (a 200k-row integer column
# took 0.9 ms in two parts, 0.5 ms in one)
MIN_SPLIT_SECONDS = 2e-3


def _read_metadata(file: RandomAccessFile) -> FileMetadata | LegacyMetadata:
    """A v2 file's metadata or, when the footer says v1, the legacy layer's equivalent."""
    tail = Tail(file)
    if is_legacy_footer(tail.data, file.size):
        return read_legacy_metadata(file, tail)
    return read_file_metadata(file, tail)


class LanceFileReader:
    """Read a Lance data file.

    ``cache`` keeps per-page metadata for random access; share one :class:`SearchCache`
    between readers to bound the memory of a whole server.  ``field_columns`` maps field ids
    to column indices when a dataset manifest says so (``DataFile.column_indices``);
    by default columns follow the file's own schema.  ``page_cache`` keeps decoded pages
    for repeated reads (default: ``cache.pages``, else the process's, see
    :func:`lance_format.cache.page_cache`; ``PageCache(0)`` reads without one).
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | RandomAccessFile,
        *,
        cache: SearchCache | None = None,
        stats: IOStats | None = None,
        field_columns: dict[int, int] | None = None,
        storage_options: dict[str, str] | None = None,
        page_cache: PageCache | None = None,
        blob_descriptors: bool = False,
    ):
        # 2.0/2.1 blob columns as their (position, size) descriptors, not their bytes (as a
        # dataset scan returns them; the bytes are read through BlobFile)
        self.blob_descriptors = blob_descriptors
        if isinstance(path, (str, os.PathLike)):
            self._file = open_file(storage.register(path, storage_options), stats)
        else:
            self._file = path
        self.path = self._file.path
        self.cache = cache
        if page_cache is None:
            page_cache = getattr(cache, "pages", None)
        if page_cache is None:
            page_cache = process_page_cache()
        self.page_cache = page_cache
        try:
            self._meta: FileMetadata | LegacyMetadata = _read_metadata(self._file)
        except LanceError as exc:
            raise exc.with_context(path=self.path) from None
        self._lance_schema: LanceSchema = self._meta.schema
        self._field_columns = field_columns or self._default_columns()
        for fid, col in self._field_columns.items():
            if not 0 <= col < len(self._meta.columns):
                raise CorruptFileError(
                    f"field {fid} maps to column {col}, the file has {len(self._meta.columns)}",
                    path=self.path,
                )
        self._leaf_readers: dict[int, LeafColumnReader] = {}
        self._v20_columns: dict = {}  # parsed 2.0 columns, by column index
        self._schemas: dict[tuple, pa.Schema] = {}  # result schemas, by projection
        self._projections: dict[tuple, list[LanceField]] = {}  # fields, by column names
        self._leaf_lists: dict[tuple, tuple] = {}  # see _read_fields

    # -- properties ------------------------------------------------------------------------

    @functools.cached_property
    def schema(self) -> pa.Schema:
        # built once: the Arrow conversion round-trips extension types through IPC
        return self._lance_schema.to_arrow()

    @functools.cached_property
    def identity(self) -> tuple:
        """What tells this file from any other that has (or had) the same path: its size,
        where its column metadata sits, and the store's modification time and inode when
        it reports them.  Keys of the decoded-page cache start with it."""
        layout = getattr(self._meta, "layout", None)
        cols = tuple(layout.column_meta) if layout is not None else ()
        return (self.path, self._file.size, getattr(self._file, "version_tag", None), cols)

    @property
    def lance_schema(self) -> LanceSchema:
        return self._lance_schema

    @property
    def num_rows(self) -> int:
        return self._meta.num_rows

    @property
    def version(self) -> LanceFileVersion:
        return self._meta.version

    @property
    def metadata(self) -> FileMetadata | LegacyMetadata:
        return self._meta

    def page_encodings(self) -> list[tuple[str | None, list[str]]]:
        """Per physical column: the field it stores (None for a column past the schema's) and
        a short description of each page's encoding, so that tools report encodings without
        reading protobufs themselves."""
        from .container.describe import describe
        from .v2_0.decoder import v20_column_fields

        fields = self._lance_schema.fields
        named = (
            v20_column_fields(fields)
            if self.version == LanceFileVersion.V2_0
            else leaf_fields(fields)
        )
        return [
            (named[i].name if i < len(named) else None, [describe(p.encoding) for p in col.pages])
            for i, col in enumerate(self._meta.columns)
        ]

    @functools.cached_property
    def _legacy(self):
        """The v1 ("legacy", version 0.1) read path; only used for such files."""
        from .legacy.reader import LegacyReader

        return LegacyReader(self._file, self._meta, self._field_columns, self.path)

    @property
    def io_stats(self) -> IOStats:
        return self._file.stats

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> LanceFileReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def global_buffer(self, index: int) -> bytes:
        """The bytes of global buffer ``index`` (index files keep their protobuf metadata
        in global buffers; buffer 0 holds the file's schema)."""
        layout = getattr(self._meta, "layout", None)
        buffers = layout.global_buffers if layout is not None else []
        if not 0 <= index < len(buffers):
            raise CorruptFileError(
                f"global buffer {index} does not exist (the file has {len(buffers)})",
                path=self.path,
            )
        pos, size = buffers[index]
        assert layout is not None  # buffers exist only with a layout
        check_size(pos + size, layout.file_size, f"end of global buffer {index}")
        return self._file.read_at(pos, size)

    # -- reads -----------------------------------------------------------------------------

    def read(self, columns: Sequence[str] | None = None) -> pa.Table:
        return self.read_range(0, self.num_rows, columns)

    def read_range(self, start: int, stop: int, columns: Sequence[str] | None = None) -> pa.Table:
        """Rows [start, stop) (clamped to the file), reading only the pages that hold them."""
        start, stop = int(start), int(stop)
        if start < 0 or stop < start or stop > self.num_rows:
            raise InvalidArgumentError(
                f"invalid row range [{start}, {stop}) for a file of {self.num_rows} rows",
                path=self.path,
            )
        return self._read(columns, None, start, stop)

    def take(
        self, indices: Sequence[int] | np.ndarray, columns: Sequence[str] | None = None
    ) -> pa.Table:
        """Rows at the given positions, in the given order (duplicates allowed)."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        if len(idx) and (idx.min() < 0 or idx.max() >= self.num_rows):
            raise InvalidArgumentError(
                f"row index out of range for a file of {self.num_rows} rows", path=self.path
            )
        if len(idx) < 2 or (idx[1:] > idx[:-1]).all():  # sorted and unique already
            return self._read(columns, idx, 0, 0)
        uniq, inverse = np.unique(idx, return_inverse=True)
        table = self._read(columns, uniq, 0, 0)
        return table.take(pa.array(inverse.astype(np.int64)))

    def read_batches(
        self,
        columns: Sequence[str] | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        start: int = 0,
        stop: int | None = None,
    ) -> Iterator[pa.RecordBatch]:
        """Stream the file in batches; memory stays bounded by about one batch of pages."""
        if batch_size <= 0:
            raise InvalidArgumentError("batch_size must be positive")
        self._project(columns)  # validate the projection even when there is nothing to read
        stop = self.num_rows if stop is None else min(stop, self.num_rows)
        for s in range(start, stop, batch_size):
            table = self.read_range(s, min(s + batch_size, stop), columns)
            yield from table.combine_chunks().to_batches()

    def warm(self, columns: Sequence[str] | None = None) -> None:
        """Load the random-access metadata and point-lookup plan of every page into the
        cache (initialization)."""
        if self.cache is None:
            self.cache = SearchCache()
        if self.version == LanceFileVersion.LEGACY:
            return self._legacy.warm(self._project(columns), self.cache)
        if self.version == LanceFileVersion.V2_0:
            return
        for f in self._project(columns):
            for leaf in _leaves(f):
                reader = self._leaf_reader(leaf)
                for page in reader.column.pages:
                    reader.meta(page)
                    reader.point(page)  # the point-lookup plan, beside the metadata

    def page_boundaries(self, columns: Sequence[str] | None = None) -> np.ndarray:
        """Row numbers where a page of the heaviest projected column starts, plus the total.

        Readers that split a file into row ranges (Flight endpoints, Spark partitions) cut
        at these rows so that the column costing most to decode is never decoded twice;
        lighter columns may straddle a cut by at most one page each.
        """
        if self.version == LanceFileVersion.LEGACY:  # every column's pages are the row groups
            return self._legacy.page_boundaries()
        best: tuple[int, np.ndarray] | None = None
        for f in self._project(columns):
            for leaf in _leaves(f) if self.version >= LanceFileVersion.V2_1 else [f]:
                col = self._field_columns.get(leaf.id)
                if col is None:
                    continue
                info = self._meta.columns[col]
                starts = info.page_starts()
                if starts[-1] != self.num_rows:  # 2.0 nested columns count items, not rows
                    continue
                size = info.stored_bytes()
                if best is None or size > best[0]:
                    best = (size, starts)
        if best is None:
            return np.array([0, self.num_rows], dtype=np.int64)
        return np.unique(best[1])

    def stored_bytes(self, columns: Sequence[str] | None = None) -> int | None:
        """Bytes the projected columns' pages take in the file (None for legacy files,
        whose row groups mix columns): how much a range of rows costs to read, so that
        scanners can size their steps by bytes rather than rows."""
        if self.version == LanceFileVersion.LEGACY:
            return None
        total = 0
        for f in self._project(columns):
            for leaf in _leaves(f) if self.version >= LanceFileVersion.V2_1 else _subtree(f):
                col = self._field_columns.get(leaf.id)
                if col is not None:
                    total += self._meta.columns[col].stored_bytes()
        return total

    def pages_cached(self, columns: Sequence[str], row: int, stop: int | None = None) -> bool:
        """Whether the decoded-page cache holds the page of ``row`` of every leaf column of
        ``columns`` (a scan then starts with full steps: slicing cached pages is quick);
        with ``stop``, every page of the rows [row, stop)."""
        if self.version < LanceFileVersion.V2_1:
            return False
        for f in self._project(columns):
            for leaf in _leaves(f):
                if leaf.id not in self._field_columns:
                    return False
                if not self._leaf_reader(leaf).page_cached(row, stop):
                    return False
        return True

    # -- internals -------------------------------------------------------------------------

    def _default_columns(self) -> dict[int, int]:
        fields = self._lance_schema.fields
        if self.version == LanceFileVersion.LEGACY:
            from .legacy.reader import default_field_rows

            assert isinstance(self._meta, LegacyMetadata)
            return default_field_rows(self._meta)
        if self.version == LanceFileVersion.V2_0:
            from .v2_0.decoder import v20_column_fields

            ids = [f.id for f in v20_column_fields(fields)]
        else:
            ids = [f.id for f in leaf_fields(fields)]
        return {fid: i for i, fid in enumerate(ids)}

    def _project(self, columns: Sequence[str] | None) -> list[LanceField]:
        if columns is None:
            return list(self._lance_schema.fields)
        if isinstance(columns, str):
            columns = [columns]
        key = tuple(columns)
        fields = self._projections.get(key)
        if fields is None:  # made once per projection: point lookups repeat them
            try:
                fields = list(self._lance_schema.project(list(columns)).fields)
            except LanceError as exc:
                raise InvalidArgumentError(str(exc.problem), path=self.path) from exc
            if len(self._projections) < 256:
                self._projections[key] = fields
        return list(fields)

    def _leaf_reader(self, leaf: LanceField) -> LeafColumnReader:
        reader = self._leaf_readers.get(leaf.id)
        if reader is None:
            col = self._field_columns.get(leaf.id)
            if col is None:
                raise CorruptFileError(
                    f"field {leaf.name!r} (id {leaf.id}) has no column", path=self.path
                )
            reader = LeafColumnReader(
                self._file,
                self._meta.columns[col],
                col,
                leaf,
                self.version,
                self.cache,
                (self.path, col),
                self.page_cache,
                (self.identity, col, leaf.id),
            )
            reader.blob_descriptors = self.blob_descriptors
            self._leaf_readers[leaf.id] = reader
        return reader

    def _read(self, columns, rows: np.ndarray | None, start: int, stop: int) -> pa.Table:
        fields = self._project(columns)
        try:
            return self._read_fields(fields, rows, start, stop)
        except LanceError as exc:
            raise exc.with_context(path=self.path) from None
        except (ValueError, IndexError, TypeError, OverflowError, pa.ArrowException) as exc:
            # Arrow validates what we assemble; a corrupt file can still get that far
            raise CorruptFileError(f"cannot assemble the result: {exc}", path=self.path) from exc

    def _read_fields(self, fields, rows: np.ndarray | None, start: int, stop: int) -> pa.Table:
        n = len(rows) if rows is not None else stop - start
        if self.version == LanceFileVersion.LEGACY:
            meta = self.schema.metadata
            return self._legacy.read_table(fields, rows, start, stop, self.cache, meta)
        results = {}
        # by the fields' identities (a projection's fields are made once, see _project);
        # the entry holds the fields, so no id is reused while it exists
        leaf_key = tuple(map(id, fields))
        entry = self._leaf_lists.get(leaf_key)
        if entry is None:
            leaves_of = [leaf for f in fields for leaf in _leaves(f)]
            # per field: whether it is read as blob descriptors, whether it is a leaf
            # column, and its Arrow type
            info = [
                (bool(self.blob_descriptors and is_legacy_blob(f)), owns_column(f), f.arrow_type)
                for f in fields
            ]
            entry = (tuple(fields), leaves_of, [leaf.id for leaf in leaves_of], info)
            if len(self._leaf_lists) < 256:
                self._leaf_lists[leaf_key] = entry
        if n and self.version >= LanceFileVersion.V2_1:
            leaves = entry[1]
            found = list(map(self._leaf_readers.get, entry[2]))
            if None in found:  # created on this thread
                readers = [self._leaf_reader(leaf) for leaf in leaves]
            else:
                readers = cast("list[LeafColumnReader]", found)

            # a range pays off from many rows; a take from a few (each row is a chunk decode)
            big = n >= (PARALLEL_MIN_TAKE if rows is not None else PARALLEL_MIN_ROWS)
            remote = getattr(self._file, "remote", False)
            if rows is not None and n <= POINT_MAX_ROWS:
                decoded = self._take_leaves(readers, rows)
            elif big and (len(readers) > 1 or rows is None):
                decoded = _decode_in_parallel(readers, rows, start, stop)
            elif len(readers) > 1 and remote:
                # small reads on an object store wait on the network: overlap the columns
                jobs = [io_pool().submit(r.read, rows, start, stop) for r in readers]
                decoded = [job.result() for job in jobs]
            else:
                decoded = [r.read(rows, start, stop) for r in readers]
            results = dict(zip(entry[2], decoded, strict=True))
        v20 = self.version == LanceFileVersion.V2_0
        arrays = []
        for f, (descriptors, owns, arrow_type) in zip(fields, entry[3], strict=True):
            if n == 0:
                arrays.append(
                    pa.array([], type=LEGACY_BLOB_DESCRIPTOR if descriptors else arrow_type)
                )
                continue
            if v20:
                arr = self._read_v20(f, rows, start, stop)
            elif owns:  # a top-level leaf: keep its pages as chunks, no copy
                arr = pa.chunked_array(results[f.id].chunks)
            else:
                arr = build_array(f, results)
            if not descriptors and arr.type != arrow_type:
                arr = view_as(arr, arrow_type)  # the decoders build storage arrays
            arrays.append(arr)
        key: tuple | None = tuple(
            zip(map(_field_id, fields), [a.type for a in arrays], strict=True)
        )
        try:
            hash(key)
        except TypeError:  # an extension type defined in Python may not be hashable
            key = None
        schema = self._schemas.get(key) if key is not None else None
        if schema is None:  # built once per projection: a point lookup cannot afford it
            schema = pa.schema(
                [
                    pa.field(f.name, a.type, f.nullable, f.to_arrow().metadata)
                    for f, a in zip(fields, arrays, strict=True)
                ],
                metadata=self.schema.metadata,
            )
            if key is not None and len(self._schemas) < 256:
                self._schemas[key] = schema
        return pa.Table.from_arrays(arrays, schema=schema)

    def _take_leaves(self, readers: list[LeafColumnReader], rows: np.ndarray) -> list[LeafResult]:
        """A take decoding only the wanted values: every leaf plans which chunks it needs,
        the chunks of all leaves are read in one request set (the store coalesces
        neighbours), then each leaf decodes its values (pages without a point plan
        through the general path)."""
        plans = [r.take_plan(rows) for r in readers]
        ranges = [rng for p in plans for rng in p.ranges]
        data = self._file.read_ranges(ranges) if ranges else []
        out = []
        at = 0
        for reader, plan in zip(readers, plans, strict=True):
            k = len(plan.ranges)
            out.append(reader.take_finish(plan, data[at : at + k]))
            at += k
        return out

    def _read_v20(self, field: LanceField, rows, start: int, stop: int) -> pa.Array:
        from .v2_0.decoder import decode_v20_field, take_v20_field

        assert isinstance(self._meta, FileMetadata)  # a 2.0 file
        columns = self._meta.columns
        try:
            if rows is None:
                return decode_v20_field(
                    field,
                    self._field_columns,
                    columns,
                    self._file.read_ranges,
                    start,
                    stop,
                    self._v20_columns,
                    self.blob_descriptors,
                )
            return take_v20_field(
                field,
                self._field_columns,
                columns,
                self._file.read_ranges,
                rows,
                self._v20_columns,
                self.blob_descriptors,
            )
        except LanceError as exc:
            raise exc.with_context(path=self.path, column=field.name) from None
        except (ValueError, IndexError, TypeError, OverflowError, pa.ArrowException) as exc:
            raise CorruptFileError(
                f"cannot decode: {exc}", path=self.path, column=field.name
            ) from exc


def _decode_in_parallel(
    readers: list[LeafColumnReader], rows: np.ndarray | None, start: int, stop: int
) -> list[LeafResult]:
    """Decode leaves on the shared pool; numpy and pyarrow release the GIL in their bulk work.

    Tasks run slowest first (measured seconds per row), so no long decode starts last while
    the other threads idle.  For a range, a leaf costing more than a thread's fair share
    (one string column often dominates: FSST) is cut into row ranges decoded side by side
    and joined like pages.
    """
    workers = POOL_SIZE
    costs = [r.seconds_per_row for r in readers]
    tasks: list[tuple[int, int, int]] = []  # (reader index, start, stop)
    if rows is None:
        share = sum(costs) / workers
        for i, cost in enumerate(costs):
            parts = min(workers, int(cost // share) + 1 if share > 0 else 1)
            parts = max(1, min(parts, (stop - start) // MIN_SPLIT_ROWS))
            if cost * (stop - start) < parts * MIN_SPLIT_SECONDS:
                parts = max(1, int(cost * (stop - start) / MIN_SPLIT_SECONDS))
            cuts = np.linspace(start, stop, parts + 1).astype(np.int64)
            tasks += [(i, int(a), int(b)) for a, b in zip(cuts[:-1], cuts[1:], strict=True)]
    else:
        tasks = [(i, start, stop) for i in range(len(readers))]
    tasks.sort(key=lambda t: -costs[t[0]] * (t[2] - t[1] if rows is None else 1))
    futures = [(t[0], pool().submit(readers[t[0]].read, rows, t[1], t[2])) for t in tasks]
    parts_of: dict[int, list[tuple[int, LeafResult]]] = {}
    for (i, fut), t in zip(futures, tasks, strict=True):
        parts_of.setdefault(i, []).append((t[1], fut.result()))
    return [concat_results([res for _, res in sorted(parts_of[i])]) for i in range(len(readers))]


_field_id = operator.attrgetter("id")


def _subtree(field: LanceField) -> list[LanceField]:
    return [field] + [f for c in field.children for f in _subtree(c)]


def _leaves(field: LanceField) -> list[LanceField]:
    if owns_column(field):
        return [field]
    return [f for c in field.children for f in _leaves(c)]
