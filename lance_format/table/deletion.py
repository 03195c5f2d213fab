"""Deletion files: which physical rows of a fragment are hidden (docs/format/table.md).

A fragment's rows are never rewritten to delete them; instead the manifest points the
fragment at a deletion file holding the *cumulative* set of deleted physical offsets, and
every new delete writes a fresh file with the whole set.  Two file types exist:

* ``.arrow`` (``ARROW_ARRAY``): an Arrow IPC *file* with one record batch of schema
  ``row_id: uint32 not null``.  pylance writes the offsets in hash-set order with ZSTD body
  compression; readers must not assume any order.
* ``.bin`` (``BITMAP``): a 32-bit roaring bitmap in the portable serialization.

pylance 14 switches to the bitmap when the set grows past :data:`BITMAP_THRESHOLD`
(5000) offsets.  A *first* delete of exactly 5000 rows already gives a bitmap, while a set
that reaches exactly 5000 through later deletes stays an arrow file; both kinds are read
either way, so :func:`write_deletion_file` uses the "more than 5000" rule.

Files are named ``_deletions/{fragment_id}-{read_version}-{id}.{arrow|bin}`` where ``id`` is
a random u64 also stored in the ``DeletionFile`` message (the manifest stores no path).
"""

from __future__ import annotations

import array
from typing import cast

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyroaring

from ..errors import CorruptFileError, InvalidArgumentError, LanceError
from ..pb import table_pb2
from . import paths

ARROW_ARRAY = table_pb2.DeletionFile.ARROW_ARRAY
BITMAP = table_pb2.DeletionFile.BITMAP

# More deleted offsets than this are stored as a roaring bitmap (pylance's
# ``BITMAP_THRESDHOLD`` in lance-core's deletion vector).
BITMAP_THRESHOLD = 5000

# The only schema pylance accepts in an arrow deletion file (it compares schemas exactly,
# so the field must be non-nullable and carry no metadata).
DELETION_ARROW_SCHEMA = pa.schema([pa.field("row_id", pa.uint32(), nullable=False)])

_SUFFIXES = {ARROW_ARRAY: "arrow", BITMAP: "bin"}
_MAX_OFFSET = (1 << 32) - 1
_ROARING_COOKIES = (12346, 12347)  # no run containers / with run containers (low 16 bits)


def deletion_path(root: str, fragment_id: int, deletion: table_pb2.DeletionFile) -> str:
    """Absolute path of the deletion file ``deletion`` of fragment ``fragment_id``:
    ``{root}/_deletions/{fragment_id}-{read_version}-{id}.{arrow|bin}`` (fragment first,
    as pylance 14 names them).

    ``root`` is the base the file lives under (the dataset root, or the base path named by
    ``deletion.base_id`` once the caller has resolved it)."""
    return paths.deletion_file_path(root, int(fragment_id), deletion)


def read_deletion_file(root: str, fragment_id: int, deletion: table_pb2.DeletionFile) -> np.ndarray:
    """Sorted unique uint32 physical offsets deleted from the fragment.

    ``num_deleted_rows`` is checked against the file when it is set (old writers left it
    0), because the row count of the fragment is computed from it without opening the file.
    """
    path = deletion_path(root, fragment_id, deletion)
    data = paths.read_bytes(path)
    try:
        if deletion.file_type == ARROW_ARRAY:
            offsets = decode_arrow_deletions(data)
        else:  # deletion_path refused any other type
            offsets = decode_bitmap_deletions(data)
        expected = deletion.num_deleted_rows
        if expected and expected != len(offsets):
            raise CorruptFileError(
                f"deletion file holds {len(offsets)} offsets but the manifest says "
                f"num_deleted_rows={expected}"
            )
    except LanceError as exc:
        raise exc.with_context(path=path) from None
    return offsets


def write_deletion_file(
    root: str,
    fragment_id: int,
    read_version: int,
    offsets: np.ndarray,
    *,
    file_type: int | None = None,
) -> table_pb2.DeletionFile:
    """Write the cumulative deleted ``offsets`` of a fragment; return the manifest message.

    ``read_version`` is the version the delete was based on (it is part of the name).  The
    type follows pylance (bitmap above :data:`BITMAP_THRESHOLD`) unless ``file_type`` forces
    one.  An empty set is refused: a fragment without deletions has no deletion file.
    """
    sorted_offsets = _validate_offsets(offsets)
    if not len(sorted_offsets):
        raise InvalidArgumentError("no deleted offsets: a fragment without deletions has no file")
    if file_type is None:
        file_type = BITMAP if len(sorted_offsets) > BITMAP_THRESHOLD else ARROW_ARRAY
    if file_type == ARROW_ARRAY:
        data = encode_arrow_deletions(sorted_offsets)
    elif file_type == BITMAP:
        data = encode_bitmap_deletions(sorted_offsets)
    else:
        raise InvalidArgumentError(f"unknown deletion file type {file_type}")
    msg = table_pb2.DeletionFile(
        # a protobuf enum field takes the plain int at runtime
        file_type=cast("table_pb2.DeletionFile.DeletionFileType", file_type),
        read_version=int(read_version),
        id=paths.new_deletion_id(),
        num_deleted_rows=len(sorted_offsets),
    )
    paths.write_atomic(deletion_path(root, fragment_id, msg), data)
    return msg


# -- byte formats ---------------------------------------------------------------------------


def encode_arrow_deletions(offsets: np.ndarray) -> bytes:
    """An Arrow IPC file with one ``row_id: uint32 not null`` batch, ZSTD bodies as pylance."""
    values = pa.array(np.asarray(offsets, dtype=np.uint32), type=pa.uint32())
    batch = pa.record_batch([values], schema=DELETION_ARROW_SCHEMA)
    sink = pa.BufferOutputStream()
    options = ipc.IpcWriteOptions(compression="zstd")
    with ipc.new_file(sink, DELETION_ARROW_SCHEMA, options=options) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def decode_arrow_deletions(data: bytes) -> np.ndarray:
    """Sorted unique offsets of an arrow deletion file (any order and duplicates accepted,
    as pylance collects them into a hash set)."""
    try:
        reader = ipc.open_file(pa.py_buffer(data))
        n_batches = reader.num_record_batches
        schema = reader.schema
        if n_batches != 1:
            raise CorruptFileError(f"expected one record batch, found {n_batches}")
        if len(schema) != 1 or schema.field(0).type != pa.uint32():
            raise CorruptFileError(f"expected a single uint32 column, found schema {schema}")
        column = reader.get_batch(0).column(0)
    except (pa.ArrowInvalid, pa.ArrowIOError, OSError) as exc:
        raise CorruptFileError(f"not a valid Arrow IPC deletion file: {exc}") from exc
    if column.null_count:
        raise CorruptFileError("null offsets in deletion file")
    return np.unique(column.to_numpy(zero_copy_only=False).astype(np.uint32, copy=False))


def encode_bitmap_deletions(offsets: np.ndarray) -> bytes:
    """Portable 32-bit roaring serialization without run containers, as roaring-rs writes.

    pyroaring run-optimizes by default (and a ``range`` builds run containers), which
    changes the cookie and the bytes; ``optimize=False`` keeps array/bitmap containers only.
    """
    values = array.array("I", np.ascontiguousarray(offsets, dtype=np.uint32).tobytes())
    return pyroaring.BitMap(values, optimize=False).serialize()


def decode_bitmap_deletions(data: bytes) -> np.ndarray:
    """Sorted offsets of a portable roaring bitmap (run containers accepted)."""
    if len(data) < 4 or (int.from_bytes(data[:4], "little") & 0xFFFF) not in _ROARING_COOKIES:
        raise CorruptFileError("not a portable roaring bitmap (bad cookie)")
    try:
        bitmap = pyroaring.BitMap.deserialize(data)
    except (ValueError, MemoryError) as exc:
        raise CorruptFileError(f"corrupt roaring bitmap: {exc}") from exc
    return np.frombuffer(bitmap.to_array(), dtype=np.uint32).copy()


def _validate_offsets(offsets: np.ndarray) -> np.ndarray:
    arr = np.asarray(offsets)
    if arr.ndim != 1:
        raise InvalidArgumentError("deleted offsets must be a 1-d array")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise InvalidArgumentError(f"deleted offsets must be integers, got {arr.dtype}")
    if arr.size and (arr.min() < 0 or int(arr.max()) > _MAX_OFFSET):
        raise InvalidArgumentError("deleted offsets must be in 0..2**32-1")
    return np.unique(arr.astype(np.uint32, copy=False))
