"""Size limits on what a client sends, checked before anything is decoded or copied.

gRPC delivers every message whole: Arrow's Flight server raises gRPC's receive limit to
unlimited (``SetMaxReceiveMessageSize(-1)``) and pyarrow exposes no ``builder_hook`` to lower
it, so a message is already in memory when the auth middleware or a handler first sees the
call: about 2.5 times its size at the peak for a call refused for its credentials, and for an
authenticated ticket or command more (pyarrow copies it into Python objects three more times
before the handler runs).  It is released when the call ends, and :mod:`.memory` hands it back
to the system.  What the server can do is refuse at once, before decoding, copying or keeping
anything: control messages (tickets, descriptor commands and paths, action bodies, put
metadata) are bounded by ``max_message_bytes``, each record batch of a put by
``max_batch_bytes``.  Headers are bounded by gRPC itself (16 KiB of metadata per call).  To
stop large messages before they are read at all, put a proxy with a request-size limit in
front of the server.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.flight as flight

from lance_format.errors import InvalidArgumentError

from .errors import ResourceExhausted

DEFAULT_MAX_MESSAGE_BYTES = 16 << 20
DEFAULT_MAX_BATCH_BYTES = 256 << 20


@dataclass(frozen=True)
class Limits:
    """The server's bounds on one client message."""

    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES

    def __post_init__(self) -> None:
        if self.max_message_bytes < 1024 or self.max_batch_bytes < 1024:
            raise InvalidArgumentError("message size limits must be at least 1 KiB")

    def check_message(self, size: int, what: str) -> None:
        """Refuse a control message (ticket, command, action body) over the limit."""
        if size > self.max_message_bytes:
            raise ResourceExhausted(
                f"{what} is {size} bytes, over the server's limit of {self.max_message_bytes} bytes"
            )

    def check_descriptor(self, descriptor: flight.FlightDescriptor) -> None:
        if descriptor.descriptor_type == flight.DescriptorType.CMD:
            self.check_message(len(descriptor.command), "the descriptor's command")
        else:
            size = sum(len(p) for p in descriptor.path or ())
            self.check_message(size, "the descriptor's path")

    def check_batch(self, batch: pa.RecordBatch | None, metadata: pa.Buffer | None) -> None:
        """Refuse one put message over the limit (its record batch and its app metadata)."""
        if metadata is not None:
            self.check_message(metadata.size, "a put message's app metadata")
        if batch is not None and batch.nbytes > self.max_batch_bytes:
            raise ResourceExhausted(
                f"a put record batch holds {batch.nbytes} bytes, over the server's limit of "
                f"{self.max_batch_bytes} bytes: send smaller batches (max_chunksize)"
            )


class BoundedReader:
    """A put's ``MetadataRecordBatchReader`` that refuses any message over the limits and,
    when ``whole`` (data the server keeps in memory, such as Flight SQL parameters), a stream
    over ``max_batch_bytes`` in total."""

    def __init__(
        self, reader: flight.MetadataRecordBatchReader, limits: Limits, *, whole: bool = False
    ):
        self._reader = reader
        self._limits = limits
        self._whole = whole
        self._total = 0

    @property
    def schema(self) -> pa.Schema:
        return self._reader.schema

    def read_chunk(self) -> flight.FlightStreamChunk:
        chunk = self._reader.read_chunk()
        self._limits.check_batch(chunk.data, chunk.app_metadata)
        if self._whole and chunk.data is not None:
            self._total += chunk.data.nbytes
            if self._total > self._limits.max_batch_bytes:
                raise ResourceExhausted(
                    f"the put's data exceeds the server's limit of "
                    f"{self._limits.max_batch_bytes} bytes in all"
                )
        return chunk

    def __iter__(self) -> Iterator[flight.FlightStreamChunk]:
        while True:
            try:
                yield self.read_chunk()
            except StopIteration:
                return

    def read_all(self) -> pa.Table:
        batches = [c.data for c in self if c.data is not None]
        return pa.Table.from_batches(batches, schema=self.schema)
