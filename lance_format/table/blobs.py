"""Blob columns of a dataset: rows' descriptors turned into :class:`BlobFile` objects or
bytes (``take_blobs``, ``read_blobs``, scans with ``blob_handling="all_binary"``).

A blob v2 column's data files hold one descriptor per row (see
:mod:`lance_format.structural.blob`); where the bytes are depends on the data file that
holds the descriptor, so every lookup goes through the fragment that owns the row.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ..blob import BlobFile
from ..errors import InvalidArgumentError
from ..schema import is_legacy_blob
from ..structural.blob import blob_location
from .fragment import Fragment, is_blob_v2


def blob_field(ds, column: str):
    """The top-level blob field named ``column``, v2 or 2.0/2.1 (InvalidArgumentError
    otherwise)."""
    for f in ds.lance_schema.fields:
        if f.name == column:
            if not (is_blob_v2(f) or is_legacy_blob(f)):
                raise InvalidArgumentError(f"the column {column!r} is not a blob column")
            return f
    raise InvalidArgumentError(f"no column {column!r} in the dataset")


def files_of(frag: Fragment, field, descriptors: pa.Array, buffer_size: int) -> list:
    """A :class:`BlobFile` (None for null) per descriptor read from ``frag``."""
    data_path = frag.data_file_of(field)
    out: list[BlobFile | None] = []
    legacy = is_legacy_blob(field)
    for d in descriptors.to_pylist():
        if d is None or data_path is None:
            out.append(None)
            continue
        if legacy:  # the bytes sit in the data file itself; 2.0 stores a null as (1, 0)
            null = d["size"] == 0 and d["position"] != 0
            out.append(None if null else BlobFile(data_path, d["position"], d["size"], buffer_size))
            continue
        path, position, size = blob_location(
            data_path, d["kind"], d["position"], d["size"], d["blob_id"], d["blob_uri"]
        )
        out.append(BlobFile(path, position, size, buffer_size))
    return out


def take_blobs(ds, column: str, groups, n: int, buffer_size: int) -> list[BlobFile | None]:
    """The blob files of rows given as (fragment number, request positions, offsets)."""
    field = blob_field(ds, column)
    out: list[BlobFile | None] = [None] * n
    for i, where, offsets in groups:
        frag = ds.get_fragments()[i]
        uniq, inverse = np.unique(offsets, return_inverse=True)
        descriptors = frag.read([field], uniq).column(0).combine_chunks()
        files = files_of(frag, field, descriptors, buffer_size)
        for pos, k in zip(where.tolist(), inverse.tolist(), strict=True):
            out[pos] = files[k]
    return out


def to_binary(frag: Fragment, field, descriptors) -> pa.Array:
    """The bytes behind a column of descriptors (``blob_handling="all_binary"``)."""
    if isinstance(descriptors, pa.ChunkedArray):
        descriptors = descriptors.combine_chunks()
    values = []
    for f in files_of(frag, field, descriptors, 0):
        values.append(None if f is None else f.readall())
        if f is not None:
            f.close()
    return pa.array(values, pa.large_binary())
