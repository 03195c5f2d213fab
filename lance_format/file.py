"""pylance's ``lance.file`` API: ``LanceFileReader`` / ``LanceFileWriter`` with its shapes.

The project's own reader and writer (:mod:`lance_format.reader`, :mod:`lance_format.writer`)
expose properties and return tables directly, which the Flight server relies on.  pylance
users call methods instead (``metadata()``, ``num_rows()``) and get a :class:`ReaderResults`
back from every read, so this module wraps ours in those shapes; nothing here decodes.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from . import storage
from .errors import FileMissingError, InvalidArgumentError, LanceIOError, ObjectNotFoundError
from .reader import LanceFileReader as _Reader
from .version import DEFAULT_VERSION, LanceFileVersion
from .writer import LanceFileWriter as _Writer

DEFAULT_BATCH_SIZE = 1024  # pylance's default rows per batch for file reads


def stable_version() -> str:
    """The file version written when none is asked for (pylance 14's stable: 2.2)."""
    return LanceFileVersion.parse("stable").value


class ReaderResults:
    """The result of a read, converted on demand (as pylance's)."""

    def __init__(self, reader: pa.RecordBatchReader):
        self.reader = reader

    def to_batches(self) -> pa.RecordBatchReader:
        return self.reader

    def to_table(self) -> pa.Table:
        return self.reader.read_all()


@dataclass(frozen=True)
class LanceBufferDescriptor:
    position: int
    size: int


@dataclass(frozen=True)
class LancePageMetadata:
    buffers: list[LanceBufferDescriptor]
    encoding: str  # the page's encoding message, as text


@dataclass(frozen=True)
class LanceColumnMetadata:
    column_buffers: list[LanceBufferDescriptor]
    pages: list[LancePageMetadata]


@dataclass(frozen=True)
class LanceFileMetadata:
    schema: pa.Schema
    num_rows: int
    num_data_bytes: int
    num_column_metadata_bytes: int
    num_global_buffer_bytes: int
    global_buffers: list[LanceBufferDescriptor]
    columns: list[LanceColumnMetadata]
    major_version: int
    minor_version: int


@dataclass(frozen=True)
class LanceColumnStatistics:
    num_pages: int
    size_bytes: int


@dataclass(frozen=True)
class LanceFileStatistics:
    columns: list[LanceColumnStatistics]


def _buffers(pairs) -> list[LanceBufferDescriptor]:
    return [LanceBufferDescriptor(int(p), int(s)) for p, s in pairs]


class LanceFileReader:
    """Read one Lance data file; every read returns a :class:`ReaderResults`.

    ``columns`` restricts every read to those top-level columns, as pylance's does."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        storage_options: dict[str, str] | None = None,
        columns: list[str] | None = None,
    ):
        try:
            self._reader = _Reader(path, storage_options=storage_options)
        except LanceIOError as exc:
            where = storage.register(path, storage_options)
            if isinstance(exc, ObjectNotFoundError) or not storage.exists(where):
                raise FileMissingError("no such file", path=where) from None
            raise
        self._columns = None if columns is None else list(columns)
        if self._columns is not None:
            self._reader.read_range(0, 0, self._columns)  # unknown names fail here, not later

    def _results(self, tables: Iterator[pa.Table], batch_size: int) -> ReaderResults:
        if not isinstance(batch_size, int) or batch_size <= 0:
            raise InvalidArgumentError("batch_size must be a positive integer")
        schema = self._reader.schema
        if self._columns is not None:
            schema = pa.schema([schema.field(c) for c in self._columns], metadata=schema.metadata)

        def batches() -> Iterator[pa.RecordBatch]:
            for table in tables:
                yield from table.combine_chunks().to_batches(max_chunksize=batch_size)

        return ReaderResults(pa.RecordBatchReader.from_batches(schema, batches()))

    def read_all(
        self, *, batch_size: int = DEFAULT_BATCH_SIZE, batch_readahead=16
    ) -> ReaderResults:
        """Every row, in batches of ``batch_size`` rows (read lazily)."""
        return self.read_range(0, self._reader.num_rows, batch_size=batch_size)

    def read_range(
        self, start: int, num_rows: int, *, batch_size: int = DEFAULT_BATCH_SIZE, batch_readahead=16
    ) -> ReaderResults:
        """``num_rows`` rows from row ``start``."""
        stop = start + num_rows
        if start < 0 or num_rows < 0 or stop > self._reader.num_rows:
            raise InvalidArgumentError(
                f"cannot read rows [{start}, {stop}) from a file of {self._reader.num_rows} rows"
            )
        step = max(batch_size, 64 * 1024)

        def tables() -> Iterator[pa.Table]:
            for s in range(start, stop, step):
                yield self._reader.read_range(s, min(s + step, stop), self._columns)

        return self._results(tables(), batch_size)

    def take_rows(
        self, indices: Sequence[int], *, batch_size: int = DEFAULT_BATCH_SIZE, batch_readahead=16
    ) -> ReaderResults:
        """The rows at ``indices``, which must be in ascending order (as pylance asks)."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        if len(idx) > 1 and (np.diff(idx) < 0).any():
            raise InvalidArgumentError("indices must be sorted in ascending order for the file API")
        return self._results(iter([self._reader.take(idx, self._columns)]), batch_size)

    def metadata(self) -> LanceFileMetadata:
        """Where everything in the file is, with pylance's field names."""
        meta = self._reader.metadata
        layout = getattr(meta, "layout", None)
        if layout is None:
            raise InvalidArgumentError("metadata() describes Lance 2.x files only")
        footer = layout.footer
        globals_ = _buffers(layout.global_buffers)
        columns = [
            LanceColumnMetadata(
                _buffers(c.buffers),
                [LancePageMetadata(_buffers(p.buffers), str(p.encoding)) for p in c.pages],
            )
            for c in meta.columns
        ]
        column_bytes = sum(size for _, size in layout.column_meta)
        return LanceFileMetadata(
            schema=self._reader.schema,
            num_rows=meta.num_rows,
            num_data_bytes=min(
                (p for p, _ in layout.global_buffers), default=footer.column_meta_start
            ),
            num_column_metadata_bytes=column_bytes,
            num_global_buffer_bytes=sum(s for _, s in layout.global_buffers),
            global_buffers=globals_,
            columns=columns,
            major_version=footer.major,
            minor_version=footer.minor,
        )

    def file_statistics(self) -> LanceFileStatistics:
        """Pages and stored bytes per column."""
        return LanceFileStatistics(
            [
                LanceColumnStatistics(len(c.pages), c.stored_bytes())
                for c in self._reader.metadata.columns
            ]
        )

    def read_global_buffer(self, index: int) -> bytes:
        return self._reader.global_buffer(index)

    def num_rows(self) -> int:
        return self._reader.num_rows


class LanceFileWriter:
    """Write one Lance data file from batches; ``close()`` returns the rows written and
    sets ``size_bytes``, as pylance's does.  Extra keyword options are our writer's
    (``max_page_bytes``, ``blob_v2``)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        schema: pa.Schema | None = None,
        *,
        data_cache_bytes: int | None = None,
        version: str | None = None,
        storage_options: dict[str, str] | None = None,
        max_page_bytes: int | None = None,
        **kwargs,
    ):
        # data_cache_bytes only sizes pylance's write buffers: nothing to honour here
        options = dict(kwargs)
        if max_page_bytes is not None:
            options["max_page_bytes"] = max_page_bytes
        self._writer = _Writer(
            path,
            schema,
            version=DEFAULT_VERSION if version is None else version,
            storage_options=storage_options,
            **options,
        )
        self.closed = False
        self.size_bytes: int | None = None

    def write_batch(self, batch: pa.RecordBatch | pa.Table) -> None:
        self._writer.write_batch(batch)

    def close(self) -> int | None:
        """Write the metadata and footer; the rows written (None when already closed)."""
        if self.closed:
            return None
        self.closed = True
        result = self._writer.close()
        self.size_bytes = result.num_bytes
        return result.num_rows

    def add_schema_metadata(self, key: str, value: str) -> None:
        self._writer.add_schema_metadata(key, value)

    def add_global_buffer(self, data: bytes) -> int:
        """Keep ``data`` as a global buffer; its index (the first is 1)."""
        return self._writer.add_global_buffer(data)

    def __enter__(self) -> LanceFileWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None and not self.closed:
            self.closed = True
            self._writer.abort()
        else:
            self.close()


class LanceFileSession:
    """pylance's ``LanceFileSession``: readers, writers and small file operations under one
    base path (local or object store), named by paths relative to it."""

    def __init__(
        self, base_path: str | os.PathLike[str], storage_options: dict[str, str] | None = None
    ):
        self._options = storage_options
        self._base = storage.register(base_path, storage_options)

    def _path(self, path: str | None) -> str:
        return self._base if not path else storage.join(self._base, path)

    def open_reader(self, path: str, columns: list[str] | None = None) -> LanceFileReader:
        return LanceFileReader(self._path(path), self._options, columns)

    def open_writer(
        self, path: str, *, schema: pa.Schema | None = None, **options
    ) -> LanceFileWriter:
        return LanceFileWriter(self._path(path), schema, storage_options=self._options, **options)

    def contains(self, path: str) -> bool:
        return storage.exists(self._path(path))

    def list(self, path: str | None = None) -> list[str]:
        """Every file under ``path`` (all of them by default), relative to the base."""
        head = self._base.rstrip("/") + "/"
        return sorted(m.key[len(head) :] for m in storage.list_files(self._path(path)))

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        return storage.open_file(self._path(path)).read_at(offset, length)

    def delete_file(self, path: str) -> None:
        storage.delete(self._path(path))

    def upload_file(self, local_path: str | os.PathLike[str], remote_path: str) -> None:
        storage.put(self._path(remote_path), storage.read_bytes(os.fspath(local_path)))

    def download_file(self, remote_path: str, local_path: str | os.PathLike[str]) -> None:
        storage.put(os.fspath(local_path), storage.read_bytes(self._path(remote_path)))


__all__ = [
    "LanceBufferDescriptor",
    "LanceColumnMetadata",
    "LanceFileMetadata",
    "LanceFileReader",
    "LanceFileSession",
    "LanceFileStatistics",
    "LanceFileWriter",
    "LancePageMetadata",
    "ReaderResults",
    "stable_version",
]
