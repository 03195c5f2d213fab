"""v1 variable-length binary encoding (strings, binary, and their large variants).

The values' bytes come first, then an ``i64`` array of ``rows + 1`` *absolute file
positions*; the page table points at that array.  Row ``i`` is the bytes between positions
``i`` and ``i + 1``, and in a nullable field equal positions mean null (so an empty string
in a nullable field reads back as null, exactly as pylance reads it).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ..errors import CorruptFileError, UnsupportedError
from ..io import RandomAccessFile
from . import rows as R
from .plain import storage

_INT32_MAX = 2**31 - 1


def is_binary_like(t: pa.DataType) -> bool:
    t = storage(t)
    return (
        pa.types.is_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_string(t)
        or pa.types.is_large_binary(t)
    )


def read(
    file: RandomAccessFile,
    t: pa.DataType,
    nullable: bool,
    ranges: np.ndarray,
    entries: np.ndarray,
    what: str,
) -> pa.Array:
    """Selected rows as one array: ``ranges`` are the selected rows of every page
    (concatenated) and ``entries`` their position entries (``s..e`` of each range)."""
    bounds, lens = R.spans(entries, ranges, what)
    if len(bounds) and bounds[:, 1].max() > file.size:
        raise CorruptFileError(f"{what}: value positions point past the end of the file")
    sizes = bounds[:, 1] - bounds[:, 0]
    keep = sizes > 0
    io = list(zip(bounds[keep, 0].tolist(), sizes[keep].tolist(), strict=True))
    data = b"".join(file.read_ranges(io))
    return build(t, nullable, lens, data)


def build(t: pa.DataType, nullable: bool, lens: np.ndarray, data: bytes) -> pa.Array:
    """An Arrow binary-like array from row lengths and the concatenated bytes."""
    st = storage(t)
    n = len(lens)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    if offsets[-1] != len(data):
        raise CorruptFileError(f"{len(data)} value bytes for offsets ending at {offsets[-1]}")
    large = pa.types.is_large_string(st) or pa.types.is_large_binary(st)
    if not large:
        if offsets[-1] > _INT32_MAX:
            raise UnsupportedError(
                f"{offsets[-1]} bytes of {st} in one read exceed its 2 GiB offsets; "
                "read fewer rows at a time"
            )
        offsets = offsets.astype(np.int32)
    validity = None
    if nullable:
        empty = lens == 0
        if empty.any():
            validity = pa.py_buffer(np.packbits(~empty, bitorder="little"))
    arr = pa.Array.from_buffers(st, n, [validity, pa.py_buffer(offsets), pa.py_buffer(data)])
    if st is not t:
        arr = pa.ExtensionArray.from_storage(t, arr)
    return arr
