"""Arrow data a client sends, fully validated before any code of the server touches it.

A DoPut stream or an IPC stream inside a statement handle is decoded by pyarrow without
checking what its buffers say: a string column whose offsets go backwards, or dictionary
indices past the dictionary's end, reach native code (DuckDB, Arrow kernels, our writer)
and can crash the process.  Every batch is therefore validated in full
(:func:`lance_format.validation.check_arrays`: Arrow's full validation of offsets,
indices, UTF-8 and buffer sizes) and checked against the stream's schema here, the one
place every entry point reads client data through (plain do_put, Flight SQL bulk ingest,
statement parameters sent with DoPut or carried in a handle).  Anything invalid is a :class:`~flight_server.errors.BadRequest`
(INVALID_ARGUMENT) raised before the first use, so it changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pyarrow as pa
import pyarrow.flight as flight

from lance_format.errors import InvalidDataError, first_line
from lance_format.validation import check_arrays

from .errors import BadRequest

__all__ = ["checked_batch", "decode_stream", "read_batches", "read_table", "stream_schema"]

# what pyarrow's server reports when a DoPut ends before any message (ADBC's update calls)
_NO_DATA = "never sent a data message"


def checked_batch(batch: pa.RecordBatch, schema: pa.Schema, what: str) -> pa.RecordBatch:
    """``batch`` once it is known to be structurally valid Arrow data of ``schema``."""
    if not batch.schema.equals(schema):
        raise BadRequest(f"{what}: a batch's schema differs from the stream's")
    try:
        check_arrays(batch)
    except InvalidDataError as exc:
        raise BadRequest(f"{what} is not valid: {exc}") from None
    return batch


def stream_schema(reader: flight.MetadataRecordBatchReader, what: str) -> pa.Schema | None:
    """The schema of a DoPut stream; None when the client sent nothing at all."""
    try:
        return reader.schema
    except OSError as exc:
        if _NO_DATA in str(exc):
            return None
        raise BadRequest(f"{what} could not be read: {first_line(exc)}") from None
    except pa.ArrowException as exc:
        raise BadRequest(f"{what} is not an Arrow IPC stream: {first_line(exc)}") from None


def read_batches(
    reader: flight.MetadataRecordBatchReader,
    schema: pa.Schema,
    what: str,
    context: flight.ServerCallContext | None = None,
    between: Callable[[], None] | None = None,
) -> Iterator[pa.RecordBatch]:
    """The validated non-empty batches of a DoPut stream whose schema is ``schema``.

    With ``context``, a cancelled call stops the stream with CANCELLED, also at its end: a
    client that vanished mid-stream looks like the end of the stream to the reader, only the
    call's cancellation tells it apart from ``done_writing()``.  ``between`` runs before each
    batch (e.g. a shutdown check)."""
    while True:
        try:
            chunk = reader.read_chunk()
        except StopIteration:
            break
        except (pa.ArrowException, OSError) as exc:  # a body shorter than its header says
            raise BadRequest(f"{what} is not a valid Arrow IPC stream: {first_line(exc)}") from None
        if context is not None and context.is_cancelled():
            raise flight.FlightCancelledError(f"the client cancelled {what}")
        if between is not None:
            between()
        if chunk.data is not None and chunk.data.num_rows:
            yield checked_batch(chunk.data, schema, what)
    if context is not None and context.is_cancelled():
        raise flight.FlightCancelledError(f"the client went away during {what}")


def read_table(reader: flight.MetadataRecordBatchReader, what: str) -> pa.Table | None:
    """A whole (small) DoPut stream as a table of validated batches; None when the client
    sent no data at all."""
    schema = stream_schema(reader, what)
    if schema is None:
        return None
    return pa.Table.from_batches(list(read_batches(reader, schema, what)), schema=schema)


def decode_stream(body: bytes, what: str) -> pa.Table:
    """An Arrow IPC stream a client handed back (e.g. inside a handle), validated."""
    try:
        stream = pa.ipc.open_stream(body)
        batches = list(stream)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise BadRequest(f"{what} is not a valid Arrow IPC stream: {first_line(exc)}") from None
    schema = stream.schema
    return pa.Table.from_batches([checked_batch(b, schema, what) for b in batches], schema=schema)
