"""New columns computed in Python: ``add_columns`` with a UDF or with the values themselves.

pylance takes, besides SQL expressions, a *batch UDF* (a function from a batch of existing
columns to a batch of new ones, see :func:`batch_udf`) or any reader-like value holding the
new columns, row for row.  Both see the dataset's live rows in order; each fragment gets one
new data file covering its physical rows (a deleted row's slot repeats a live row's value,
never read since the row is deleted), committed with the SQL path's Merge.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing
from typing import Any

import numpy as np
import pyarrow as pa

from ..errors import InvalidArgumentError, InvalidDataError, SchemaError
from ..schema import LanceSchema
from . import write
from .fragment import Fragment
from .scanner import ROW_ADDRESS, ROW_ID

UDF_ROWS = 8 * 1024  # live rows per UDF call when no batch_size is given


class BatchUDF:
    """A function from a RecordBatch (or pandas DataFrame) of existing columns to one of
    new columns (pylance's ``lance.udf.BatchUDF``)."""

    def __init__(
        self, func: Callable[[pa.RecordBatch], Any], output_schema=None, checkpoint_file=None
    ):
        self.func = func
        self.output_schema = output_schema
        self.cache = BatchUDFCheckpoint(checkpoint_file) if checkpoint_file is not None else None

    def __call__(self, batch: pa.RecordBatch) -> Any:
        return self.func(batch)


class BatchUDFCheckpoint:
    """The results of a UDF's batches so far, in a local SQLite file, so that an
    ``add_columns`` that failed part way computes only the rest when run again with the
    same file; the file is removed once the columns are committed."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = os.fspath(path)
        with closing(sqlite3.connect(self.path)) as conn:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS batches (fragment_id INT, batch_index INT, result BLOB)"
            )
            conn.commit()

    def get_batch(self, fragment_id: int, batch_index: int) -> pa.RecordBatch | None:
        with closing(sqlite3.connect(self.path)) as conn:
            row = conn.execute(
                "SELECT result FROM batches WHERE fragment_id = ? AND batch_index = ?",
                (fragment_id, batch_index),
            ).fetchone()
        if row is None:
            return None
        return pa.ipc.open_stream(row[0]).read_next_batch()

    def insert_batch(self, fragment_id: int, batch_index: int, batch: pa.RecordBatch) -> None:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, batch.schema) as out:
            out.write_batch(batch)
        with closing(sqlite3.connect(self.path)) as conn:
            conn.execute(
                "INSERT INTO batches (fragment_id, batch_index, result) VALUES (?, ?, ?)",
                (fragment_id, batch_index, sink.getvalue().to_pybytes()),
            )
            conn.commit()

    def cleanup(self) -> None:
        if os.path.exists(self.path):
            os.remove(self.path)


def batch_udf(output_schema: pa.Schema | None = None, checkpoint_file=None):
    """Decorator making a function a :class:`BatchUDF` for ``add_columns``."""

    def wrap(func: Callable[[pa.RecordBatch], Any]) -> BatchUDF:
        return BatchUDF(func, output_schema, checkpoint_file)

    return wrap


def _as_batch(result: Any) -> pa.RecordBatch:
    if type(result).__module__.split(".")[0] == "pandas":
        return pa.RecordBatch.from_pandas(result, preserve_index=False)
    if isinstance(result, pa.Table):
        return _one_batch(result)
    if not isinstance(result, pa.RecordBatch):
        raise InvalidArgumentError(
            f"a UDF must return a RecordBatch or a pandas DataFrame, got {type(result).__name__}"
        )
    return result


def _one_batch(table: pa.Table) -> pa.RecordBatch:
    batches = table.combine_chunks().to_batches()
    return batches[0] if batches else pa.RecordBatch.from_pylist([], schema=table.schema)


class _Source:
    """Live rows of one fragment range handed to the UDF / pulled from the reader."""

    def __init__(self, ds, read_columns: list[str] | None):
        names = [f.name for f in ds.lance_schema.fields]
        wanted = names if read_columns is None else list(read_columns)
        self.meta = [c for c in wanted if c in (ROW_ID, ROW_ADDRESS) and c not in names]
        unknown = [c for c in wanted if c not in names and c not in self.meta]
        if unknown:
            raise SchemaError(f"no column {unknown[0]!r} in the dataset (has {names})")
        self.fields = [f for c in wanted for f in ds.lance_schema.fields if f.name == c]
        self.order = wanted

    def live_batch(self, frag: Fragment, offsets: np.ndarray) -> pa.RecordBatch:
        table = frag.read(self.fields, offsets)
        columns = {f.name: table.column(f.name) for f in self.fields}
        for meta in self.meta:
            if meta == ROW_ID and frag.row_ids is not None:
                columns[meta] = pa.array(frag.row_ids[offsets])
            else:
                columns[meta] = pa.array(frag.row_addresses(offsets))
        return _one_batch(pa.table({c: columns[c] for c in self.order}))


def udf_values(ds, udf: BatchUDF | Callable, read_columns, batch_size: int | None):
    """(output schema, values(frag, live offsets) -> table) for a UDF."""
    source = _Source(ds, read_columns)
    if not isinstance(udf, BatchUDF):
        udf = BatchUDF(udf)
    step = batch_size or UDF_ROWS

    def values(frag: Fragment, offsets: np.ndarray) -> pa.Table:
        parts = []
        cache = udf.cache
        for i in range(0, len(offsets), step):
            key = (frag.fragment_id, int(offsets[i]))  # a batch by its first physical row
            cached = cache.get_batch(*key) if cache is not None else None
            if cached is not None:
                parts.append(cached)
                continue
            out = _as_batch(udf(source.live_batch(frag, offsets[i : i + step])))
            if udf.output_schema is not None and not out.schema.equals(udf.output_schema):
                raise InvalidArgumentError(
                    "Output schema of function does not match the expected schema: "
                    f"expected {udf.output_schema}, got {out.schema}"
                )
            if out.num_rows != min(step, len(offsets) - i):
                raise InvalidArgumentError(
                    f"the UDF returned {out.num_rows} rows for a batch of "
                    f"{min(step, len(offsets) - i)}"
                )
            if cache is not None:
                cache.insert_batch(*key, out)
            parts.append(out)
        return pa.Table.from_batches(parts)

    schema = udf.output_schema
    if schema is None:  # as pylance: the schema of the output for the first row
        first = next((f for f in ds.get_fragments() if f.count_rows()), None)
        if first is None:
            raise InvalidArgumentError("cannot infer a UDF's output schema on an empty dataset")
        schema = _as_batch(udf(source.live_batch(first, first.live_offsets[:1]))).schema
        udf.output_schema = schema
    return schema, values


def reader_values(data, reader_schema: pa.Schema | None):
    """(schema, values(frag, live offsets) -> table) for reader-like new columns, consumed
    in order; ``finish()`` checks nothing is left over."""
    reader = write.to_reader(data, reader_schema)
    pending: list[pa.RecordBatch] = []
    batches: Iterator[pa.RecordBatch] = iter(reader)

    def values(frag: Fragment, offsets: np.ndarray) -> pa.Table:
        need = len(offsets)
        taken, have = [], 0
        while have < need:
            batch = pending.pop(0) if pending else next(batches, None)
            if batch is None:
                raise InvalidDataError(
                    "Stream ended before producing values for all rows in dataset"
                )
            if have + batch.num_rows > need:
                pending.insert(0, batch.slice(need - have))
                batch = batch.slice(0, need - have)
            taken.append(batch)
            have += batch.num_rows
        return pa.Table.from_batches(taken, schema=reader.schema)

    def finish() -> None:
        rest = [b for b in pending if b.num_rows] or [
            b for b in iter(lambda: next(batches, None), None) if b.num_rows
        ][:1]
        if rest:
            raise InvalidDataError("Stream produced more values than expected for dataset")

    return reader.schema, values, finish


def write_values_file(ds, frag: Fragment, new_schema: LanceSchema, values, rows: int):
    """One new data file with the new columns for every physical row of ``frag``: the
    values of its live rows (``values(frag, offsets)``), deleted slots filled with a live
    row's value."""

    def tables() -> Iterator[pa.Table]:
        live = frag.live_offsets
        if not len(live):
            fields = new_schema.to_dataset_arrow()
            yield pa.table({f.name: pa.nulls(frag.physical_rows, f.type) for f in fields})
        start = 0
        # pieces of ``rows`` live rows; each covers the physical rows up to its last one,
        # so a deleted slot always has a live neighbour whose value it can repeat
        for i in range(0, len(live), rows):
            piece = live[i : i + rows]
            last = i + rows >= len(live)
            stop = frag.physical_rows if last else int(piece[-1]) + 1
            computed = values(frag, piece)
            slots = np.minimum(np.searchsorted(piece, np.arange(start, stop)), len(piece) - 1)
            yield computed.take(pa.array(slots))
            start = stop

    return write.write_column_file(ds.uri, frag.pb, new_schema, ds.data_storage_version, tables())
