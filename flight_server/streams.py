"""Lazy DoGet streams that carry dictionary batches and keep the server's error mapping.

pyarrow offers two ways to stream a Python iterator of batches, and neither alone is right:

* ``GeneratorStream(schema, batches)`` serialises each record batch on its own and sends no
  dictionary batches, so a client reading a dictionary-typed column (a pandas categorical)
  fails with "IPC stream did not have the expected number (1) of dictionaries".
* ``RecordBatchStream(RecordBatchReader.from_batches(...))`` runs a real IPC writer (each
  dictionary sent before the first batch using it, and again, as a replacement, whenever a
  batch brings a different one), but an exception raised while the reader is pulled loses
  its Flight class: the client gets an internal error carrying the server's Python
  traceback instead of, say, UNAVAILABLE during a shutdown.

So the batches travel through ONE lazy reader, handed to a ``GeneratorStream`` as its only
sub-stream: the IPC writer sends the dictionaries, gRPC pulls one batch at a time (a slow
client slows the producer down; a cancelled call drops the reader, closing the iterator),
and an error ends the reader quietly and is raised by the outer generator, where pyarrow
maps Flight exceptions to their gRPC status.

A dictionary equal to the one last sent is not sent again; a different one is sent whole,
as a replacement (the IPC writer's default: every stream reader handles replacements, while
deltas need the new dictionary to extend the old one, which separately written fragments'
dictionaries seldom do).

A scan without dictionary columns travels faster as :func:`range_stream`: the batches are
grouped into tables of about ``RANGE_BYTES`` (message-sized zero-copy slices), each handed
to Flight whole, so gRPC serialises and sends a range's messages without taking the GIL once
per message (a hot read is then near transport speed, and decoding threads and the sender
stop trading the GIL at every batch).  Each range is its own IPC sub-stream, which would
resend dictionaries: dictionary-typed schemas keep :func:`batch_stream`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import pyarrow as pa
import pyarrow.flight as flight

# gRPC moves messages of a few MB several times faster than ones of tens or hundreds of MB
# (measured on loopback: 3 MB batches ~1.4 GB/s, 15-200 MB ones ~0.25 GB/s), and a pyarrow
# client spends less CPU on smaller ones still (it faults in fresh memory for each large
# message): hot TPC-H reads took 0.63 s in 1.5 MB messages against 0.76 s in 4 MB ones,
# the client's CPU 0.39-0.75 s against 0.62-1.09 s (Arrow's in-memory table: 1.4 MB batches)
MESSAGE_BYTES = 3 << 19
# The second message of a scan's stream is one batch of about this size, when the scan has
# that much (the first stays small: the first rows leave early).  A pyarrow client on glibc
# gives each freed message buffer back to the system and faults the next one in afresh
# (glibc's defaults: blocks over 128 KiB are mapped and unmapped, a heap's free top over
# 128 KiB is trimmed) until it frees one mapped block larger than that, which raises the
# mapping limit to the block's size and the trimming limit to twice it.  One 8 MB message
# early took a new client's read of TPC-H SF1 from 0.83 to 0.36 CPU-s (228,000 page faults
# to 20,000; 6 MB did as well, 4 MB half as well).  The other messages keep MESSAGE_BYTES.
LARGE_MESSAGE_BYTES = 8 << 20
# gRPC's Go, Java and Rust clients refuse messages over 4 MiB unless told otherwise (ADBC's
# Go driver allows 16 MiB); Arrow's C++ Flight client, pyarrow's, takes any size
_TAKES_LARGE = "grpc-c++/"


def large_message_bytes(user_agent: str | None) -> int:
    """The large message's size for a client with this gRPC user agent: LARGE_MESSAGE_BYTES
    for Arrow's C++ Flight client (pyarrow's, the one whose allocator it helps), 0 (none)
    for any other or unknown client."""
    return LARGE_MESSAGE_BYTES if user_agent and user_agent.startswith(_TAKES_LARGE) else 0


# Arrow bytes per range handed to Flight in one piece: a few messages per GIL hand-off, while
# the ranges in flight (one sending, one queued, one being decoded) stay small
RANGE_BYTES = 32 << 20


def message_sized(
    batches: Iterator[pa.RecordBatch], max_bytes: int = MESSAGE_BYTES
) -> Iterator[pa.RecordBatch]:
    """``batches`` cut into zero-copy slices of at most about ``max_bytes`` each (a batch
    of wide rows, such as vectors, would otherwise travel as one huge message)."""
    for batch in batches:
        n, size = batch.num_rows, batch.nbytes
        if size <= max_bytes or n <= 1:
            yield batch
            continue
        rows = max(1, n * max_bytes // size)
        for start in range(0, n, rows):
            yield batch.slice(start, rows)


def batch_stream(schema: pa.Schema, batches: Iterator[pa.RecordBatch]) -> flight.FlightDataStream:
    """A DoGet stream of ``batches`` (already error-mapped: raise Flight exceptions)."""
    failure: list[Exception] = []

    def pulled() -> Iterator[pa.RecordBatch]:
        try:
            yield from batches
        except Exception as exc:  # noqa: BLE001 - raised below, outside the IPC reader
            failure.append(exc)

    def substreams() -> Iterator[pa.RecordBatchReader]:
        yield pa.RecordBatchReader.from_batches(schema, pulled())
        if failure:
            raise failure[0]

    return flight.GeneratorStream(schema, substreams())


def has_dictionary(schema: pa.Schema) -> bool:
    """Whether any field, at any depth, is dictionary-encoded."""

    def walk(t: pa.DataType) -> bool:
        if pa.types.is_dictionary(t):
            return True
        return any(walk(t.field(i).type) for i in range(t.num_fields))

    return any(walk(f.type) for f in schema)


class Range(NamedTuple):
    """A range of a scan as Flight sends it, with its Arrow size (for metrics and the
    request log: measuring a table of slices costs more than cutting it)."""

    table: pa.Table
    nbytes: int


def range_tables(
    schema: pa.Schema,
    items: Iterator[pa.Table],
    batch_rows: int,
    range_bytes: int = RANGE_BYTES,
    max_bytes: int = MESSAGE_BYTES,
    large_bytes: int = LARGE_MESSAGE_BYTES,
) -> Iterator[Range]:
    """``items`` (decoded ranges as tables whose chunks are the decoded pages) regrouped as
    tables of about ``range_bytes`` (the first ones smaller), whose chunks are the messages:
    slices of at most ``batch_rows`` rows and about ``max_bytes``, cut where a column's chunk
    ends (no copy joining pages).  The second range is one message of about ``large_bytes``
    (joined: a copy of that much at most; see LARGE_MESSAGE_BYTES), or of ``batch_rows``
    rows if fewer; none with ``large_bytes=0``.

    Sizes are measured once per item and shared out by rows: the item's arrays are whole
    pages (cheap to measure), while measuring each slice walked every column's buffers
    again, twice per message (a tenth of a hot read's server CPU)."""

    def pieces() -> Iterator[tuple[pa.RecordBatch, float]]:
        for item in items:
            n = item.num_rows
            if not n:
                continue
            per_row = item.nbytes / n
            rows = batch_rows if per_row <= 0 else max(1, min(batch_rows, int(max_bytes / per_row)))
            for batch in item.to_batches(max_chunksize=rows):
                yield batch, batch.num_rows * per_row

    group: list[pa.RecordBatch] = []
    size = 0.0
    rows = 0
    # the first range is one message (the client gets rows as soon as the first are
    # decoded), the second one large message, each next one twice the last up to
    # ``range_bytes``
    limit = min(max_bytes, range_bytes)
    stage = 0  # the range being grouped: 0 the first, 1 the large message, 2 the others
    for batch, nbytes in pieces():
        if not batch.num_rows:
            continue
        if stage == 1 and rows + batch.num_rows > batch_rows:
            # the large message may not pass the ticket's batch size: it ends there
            take = batch_rows - rows
            share = nbytes * take / batch.num_rows
            yield _joined(schema, [*group, batch.slice(0, take)], size + share)
            batch, nbytes = batch.slice(take), nbytes - share
            group, size, rows, stage = [], 0.0, 0, 2
            limit = min(2 * limit, range_bytes)
        group.append(batch)
        size += nbytes
        rows += batch.num_rows
        if size >= limit:
            if stage == 1:
                yield _joined(schema, group, size)
            else:
                yield Range(pa.Table.from_batches(group, schema=schema), round(size))
            group, size, rows = [], 0.0, 0
            large = stage == 0 and large_bytes > 0
            limit = min(max(large_bytes, 2 * limit) if large else 2 * limit, range_bytes)
            stage = 1 if large else 2
    if group:
        yield Range(pa.Table.from_batches(group, schema=schema), round(size))


def _joined(schema: pa.Schema, group: list[pa.RecordBatch], size: float) -> Range:
    """``group`` as one message (columns already in one piece are not copied)."""
    return Range(pa.Table.from_batches(group, schema=schema).combine_chunks(), round(size))


def range_stream(schema: pa.Schema, tables: Iterator[pa.Table]) -> flight.FlightDataStream:
    """A DoGet stream of ``tables`` (already error-mapped: raise Flight exceptions), each
    sent by Flight as one sub-stream: no Python between a range's messages, and gRPC still
    pulls one range at a time (a slow client slows the producer down; a cancelled call
    drops the generator).  Not for dictionary-typed schemas (see the module notes)."""
    return flight.GeneratorStream(schema, tables)
