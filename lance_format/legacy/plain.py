"""v1 plain encoding: fixed-stride values stored back to back, no validity.

Values of a fixed size are stored contiguously and the format defines no nulls; the writer
keeps none: a null reads back as whatever value the Arrow buffer held under it (booleans as
false).  Booleans are bit-packed (LSB first) from
the page start; a fixed-size list stores its items flattened (nested lists multiply), so a
row of ``fixed_size_list<float, 3>`` is 12 bytes and of ``fixed_size_list<bool, 2>`` 2 bits.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ..errors import CorruptFileError, UnsupportedError
from ..io import RandomAccessFile
from . import rows as R

# A take reads the page span covering its rows in one request unless that span is more
# than twice the bytes it needs plus this much; then it reads each run of rows on its own.
DENSE_SLACK = 64 * 1024


def storage(t: pa.DataType) -> pa.DataType:
    return t.storage_type if isinstance(t, pa.BaseExtensionType) else t


@dataclass(frozen=True)
class FixedLayout:
    """How one row of a fixed-stride type is laid out: ``row_bits`` bits, items of
    ``leaf_bits`` each (1 for booleans)."""

    leaf_bits: int
    items_per_row: int

    @property
    def row_bits(self) -> int:
        return self.leaf_bits * self.items_per_row

    @property
    def bit_packed(self) -> bool:
        return self.leaf_bits == 1


def fixed_layout(t: pa.DataType) -> FixedLayout | None:
    """The layout of a fixed-stride Arrow type (upstream ``is_fixed_stride``), else None."""
    t = storage(t)
    if pa.types.is_boolean(t):
        return FixedLayout(1, 1)
    if pa.types.is_fixed_size_list(t):
        inner = fixed_layout(t.value_type)
        if inner is None:
            return None
        return FixedLayout(inner.leaf_bits, inner.items_per_row * t.list_size)
    if pa.types.is_fixed_size_binary(t) and not pa.types.is_decimal(t):
        return FixedLayout(8 * t.byte_width, 1)
    if (
        pa.types.is_integer(t)
        or pa.types.is_floating(t)
        or pa.types.is_decimal(t)
        or pa.types.is_temporal(t)
    ) and not pa.types.is_interval(t):
        return FixedLayout(t.bit_width, 1)
    return None


def _flatten(pages: list[tuple[int, int, np.ndarray]]):
    """Page positions, lengths, all ranges (concatenated) and each page's range count."""
    pages = [p for p in pages if len(p[2])]
    pos = np.array([p[0] for p in pages], dtype=np.int64)
    length = np.array([p[1] for p in pages], dtype=np.int64)
    counts = np.array([len(p[2]) for p in pages], dtype=np.int64)
    ranges = np.concatenate([p[2] for p in pages]) if pages else np.zeros((0, 2), np.int64)
    return pos, length, ranges.astype(np.int64, copy=False), counts


def _validate(
    file: RandomAccessFile,
    w_bits: int,
    pos: np.ndarray,
    length: np.ndarray,
    ranges: np.ndarray,
    page_of: np.ndarray,
    what: str,
) -> None:
    s, e = ranges[:, 0], ranges[:, 1]
    same_page = page_of[1:] == page_of[:-1]
    if (
        (s < 0).any()
        or (e < s).any()
        or (e > length[page_of]).any()
        or (same_page & (s[1:] < e[:-1])).any()
    ):
        raise CorruptFileError(f"{what}: rows outside a page's entries or out of order")
    # lengths first, so that the byte count below cannot overflow
    if (length > (8 * file.size) // max(w_bits, 1)).any() or (
        pos + (length * w_bits + 7) // 8 > file.size
    ).any():
        raise CorruptFileError(
            f"{what}: a page of {w_bits}-bit entries runs past the end of the file "
            f"({file.size} bytes)"
        )


def fetch(
    file: RandomAccessFile,
    layout: FixedLayout,
    pages: list[tuple[int, int, np.ndarray]],
    what: str,
) -> np.ndarray:
    """The selected rows of several pages, read with one batched IO call, concatenated.

    ``pages`` holds ``(position, length, ranges)``.  The result is the rows' bytes (uint8,
    row-major) or, for bit-packed layouts, their bits (bool).  Everything is planned with
    array arithmetic: a page whose rows are dense is read as one span, a sparse one as one
    request per run of rows."""
    w_bits = layout.row_bits
    pos, length, ranges, counts = _flatten(pages)
    page_of = np.repeat(np.arange(len(counts)), counts)
    _validate(file, w_bits, pos, length, ranges, page_of, what)
    bit_packed = layout.bit_packed
    if not len(ranges) or w_bits == 0:
        return np.zeros(0, dtype=bool if bit_packed else np.uint8)
    s, e = ranges[:, 0], ranges[:, 1]
    last = np.cumsum(counts) - 1
    first = last - counts + 1
    s0, e1 = s[first], e[last]
    if bit_packed:
        b0, b1 = s0 * w_bits // 8, (e1 * w_bits + 7) // 8
        io = list(zip((pos + b0).tolist(), (b1 - b0).tolist(), strict=True))
        buf = np.frombuffer(b"".join(file.read_ranges(io)), dtype=np.uint8)
        base = np.cumsum(b1 - b0) - (b1 - b0)  # each page's first byte in buf
        start = 8 * (base - b0)[page_of] + s * w_bits
        bit_ranges = np.stack([start, start + (e - s) * w_bits], axis=1)
        bits = np.unpackbits(buf, bitorder="little").astype(bool)
        if len(bit_ranges) == 1:
            return bits[bit_ranges[0, 0] : bit_ranges[0, 1]]
        return bits[R.to_indices(bit_ranges)]
    w = w_bits // 8
    need = np.add.reduceat(e - s, first)
    dense = (counts == 1) | ((e1 - s0) <= 2 * need + DENSE_SLACK // w)
    # segments read: a dense page's span, or each range of a sparse page, in range order
    own = ~dense[page_of]
    seg_key = np.concatenate([first[dense], np.flatnonzero(own)])
    seg_s = np.concatenate([s0[dense], s[own]])
    seg_e = np.concatenate([e1[dense], e[own]])
    seg_page = np.concatenate([np.flatnonzero(dense), page_of[own]])
    order = np.argsort(seg_key, kind="stable")
    seg_s, seg_e, seg_page = seg_s[order], seg_e[order], seg_page[order]
    io = list(
        zip((pos[seg_page] + seg_s * w).tolist(), ((seg_e - seg_s) * w).tolist(), strict=True)
    )
    buf = np.frombuffer(b"".join(file.read_ranges(io)), dtype=np.uint8)
    if len(seg_s) == len(ranges):  # every segment is exactly one wanted range
        return buf
    # where each wanted range sits in the joined segments, then one gather of its rows
    seg_of_range = np.empty(len(ranges), dtype=np.int64)
    seg_of_range[np.sort(seg_key)] = np.arange(len(seg_key))
    # ranges of dense pages share their page's segment: carry the index forward
    is_key = np.zeros(len(ranges), dtype=bool)
    is_key[seg_key] = True
    seg_of_range = np.maximum.accumulate(np.where(is_key, seg_of_range, -1))
    seg_base = np.cumsum(seg_e - seg_s) - (seg_e - seg_s)
    joined = seg_base[seg_of_range] + s - seg_s[seg_of_range]
    rows_ = buf.view(np.dtype(f"V{w}"))[R.to_indices(np.stack([joined, joined + e - s], axis=1))]
    return rows_.view(np.uint8).reshape(-1)


def to_arrow(t: pa.DataType, layout: FixedLayout, data: np.ndarray, n: int) -> pa.Array:
    """Build ``n`` rows of type ``t`` from their bytes (or bits, for bit-packed layouts)."""
    st = storage(t)
    if pa.types.is_fixed_size_list(st):
        inner = fixed_layout(st.value_type)
        if inner is None:
            raise UnsupportedError(f"fixed-size lists of {st.value_type} in a legacy file")
        child = to_arrow(st.value_type, inner, data, n * st.list_size)
        arr = pa.Array.from_buffers(st, n, [None], children=[child])
    elif layout.bit_packed:
        buf = pa.py_buffer(np.packbits(data, bitorder="little")) if n else pa.py_buffer(b"")
        arr = pa.Array.from_buffers(st, n, [None, buf])
    else:
        if len(data) != n * layout.row_bits // 8:
            raise CorruptFileError(f"expected {n} values of {layout.row_bits} bits")
        arr = pa.Array.from_buffers(st, n, [None, pa.py_buffer(data)])
    if st is not t:
        arr = pa.ExtensionArray.from_storage(t, arr)
    return arr


def read(
    file: RandomAccessFile,
    t: pa.DataType,
    pages: list[tuple[int, int, np.ndarray]],
    what: str,
) -> pa.Array:
    """Selected rows of plain pages of type ``t`` as one Arrow array."""
    layout = fixed_layout(t)
    if layout is None:
        raise UnsupportedError(f"{what}: {t} is not a fixed-stride type")
    data = fetch(file, layout, pages, what)
    n = sum(R.total(r) for _, _, r in pages)
    return to_arrow(t, layout, data, n)


def read_integers(
    file: RandomAccessFile,
    dtype: np.dtype,
    pages: list[tuple[int, int, np.ndarray]],
    what: str,
) -> np.ndarray:
    """Plain little-endian integers (offsets, positions, dictionary keys), concatenated."""
    layout = FixedLayout(8 * dtype.itemsize, 1)
    return fetch(file, layout, pages, what).view(dtype.newbyteorder("<"))
