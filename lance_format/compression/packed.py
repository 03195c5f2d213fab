"""Packed structs (docs/format/compression.md): a struct's children stored together, row by row.

* **PackedStruct** (fixed-width children): each row is the children's bytes back to back in
  field order; the whole row is one fixed-width value (``values = Flat(sum of widths)``).
* **VariablePackedStruct** (2.2, full-zip): each row is ``[child0][child1]...`` where a
  fixed child is its raw bytes and a variable child is ``[u32|u64 len][bytes]``.  The row's
  own length prefix belongs to the full-zip layout and is already stripped here.  A null row
  has no bytes at all (it arrives as an empty row) and decodes to zeros / empty values.

Both directions work column-wise: one numpy pass per child field, over all rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import CorruptFileError, UnsupportedError
from .blocks import FixedWidthBlock, StructBlock, VariableWidthBlock, gather_ranges


def _byte_widths(bits_per_child: list[int]) -> list[int]:
    for b in bits_per_child:
        if b <= 0 or b % 8:
            raise UnsupportedError(f"packed struct child of {b} bits")
    return [b // 8 for b in bits_per_child]


def unpack_fixed(block: FixedWidthBlock, bits_per_child: list[int]) -> StructBlock:
    """Split row-major packed rows into one block per child."""
    widths = _byte_widths(bits_per_child)
    row = sum(widths)
    if block.bits_per_value != row * 8:
        raise CorruptFileError(
            f"packed struct rows are {block.bits_per_value} bits, the children sum to {row * 8}"
        )
    n = block.num_values
    if len(block.data) < n * row:
        raise CorruptFileError("packed struct data is shorter than its rows")
    rows = np.asarray(block.data[: n * row]).reshape(n, row)
    children: list = []
    off = 0
    for b, w in zip(bits_per_child, widths, strict=True):
        children.append(
            FixedWidthBlock(np.ascontiguousarray(rows[:, off : off + w]).reshape(-1), b, n)
        )
        off += w
    return StructBlock(children, n)


def pack_fixed(children: list[FixedWidthBlock]) -> FixedWidthBlock:
    """Row-major rows from fixed-width children (the PackedStruct writer)."""
    widths = _byte_widths([c.bits_per_value for c in children])
    n = children[0].num_values
    cols = [
        np.asarray(c.data[: n * w]).reshape(n, w) for c, w in zip(children, widths, strict=True)
    ]
    data = np.concatenate(cols, axis=1).reshape(-1) if cols else np.zeros(0, np.uint8)
    return FixedWidthBlock(data, sum(widths) * 8, n)


@dataclass(frozen=True)
class PackedField:
    """One child of a VariablePackedStruct: fixed (``bits`` per value) or variable
    (``bits`` per length prefix)."""

    variable: bool
    bits: int


def _read_uint(base: np.ndarray, pos: np.ndarray, nbytes: int) -> np.ndarray:
    out = np.zeros(len(pos), dtype=np.int64)
    for b in range(nbytes):
        out |= base[pos + b].astype(np.int64) << (8 * b)
    return out


def unpack_variable(rows: VariableWidthBlock, fields: list[PackedField]) -> list:
    """Split VariablePackedStruct rows into raw child blocks (before per-child decoding)."""
    offsets = np.asarray(rows.offsets, dtype=np.int64)
    data = np.asarray(rows.data)
    n = len(offsets) - 1
    row_start, row_end = offsets[:-1], offsets[1:]
    if n and (row_end[-1] > len(data) or (row_end < row_start).any()):
        raise CorruptFileError("packed struct rows run past their data")
    present = row_end > row_start  # null rows carry no bytes
    idx = np.flatnonzero(present)
    cursor = row_start[idx].copy()
    end = row_end[idx]
    out: list = []
    for f in fields:
        if f.bits <= 0 or f.bits % 8:
            raise UnsupportedError(f"packed struct field of {f.bits} bits")
        nbytes = f.bits // 8
        if not f.variable:
            if (cursor + nbytes > end).any():
                raise CorruptFileError("packed struct fixed child runs past its row")
            values = np.zeros((n, nbytes), dtype=np.uint8)
            values[idx] = gather_ranges(data, cursor, np.full(len(idx), nbytes)).reshape(-1, nbytes)
            cursor = cursor + nbytes
            out.append(FixedWidthBlock(values.reshape(-1), f.bits, n))
        else:
            if nbytes not in (4, 8):
                raise UnsupportedError(f"packed struct length prefix of {f.bits} bits")
            if (cursor + nbytes > end).any():
                raise CorruptFileError("packed struct length prefix runs past its row")
            lengths = _read_uint(data, cursor, nbytes)
            cursor = cursor + nbytes
            if (cursor + lengths > end).any():
                raise CorruptFileError("packed struct variable child runs past its row")
            all_len = np.zeros(n, dtype=np.int64)
            all_len[idx] = lengths
            child_offsets = np.zeros(n + 1, dtype=np.int64)
            np.cumsum(all_len, out=child_offsets[1:])
            out.append(
                VariableWidthBlock(child_offsets, gather_ranges(data, cursor, lengths), f.bits)
            )
            cursor = cursor + lengths
    if (cursor != end).any():
        raise CorruptFileError("packed struct row has bytes left over after its children")
    return out


def pack_variable(children: list) -> tuple[VariableWidthBlock, list[PackedField]]:
    """Build VariablePackedStruct rows from (already per-value encoded) children."""
    n = children[0].num_values
    row_len = np.zeros(n, dtype=np.int64)
    fields: list[PackedField] = []
    for c in children:
        if isinstance(c, FixedWidthBlock):
            _byte_widths([c.bits_per_value])
            row_len += c.bits_per_value // 8
            fields.append(PackedField(False, c.bits_per_value))
        else:
            bits = c.bits_per_offset
            row_len += bits // 8 + np.diff(np.asarray(c.offsets, dtype=np.int64))
            fields.append(PackedField(True, bits))
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(row_len, out=offsets[1:])
    out = np.zeros(int(offsets[-1]), dtype=np.uint8)
    positions = np.arange(len(out), dtype=np.int64)
    cursor = offsets[:-1].copy()
    for c, f in zip(children, fields, strict=True):
        if not f.variable:
            w = f.bits // 8
            out[gather_ranges(positions, cursor, np.full(n, w))] = np.asarray(c.data[: n * w])
            cursor += w
        else:
            w = f.bits // 8
            off = np.asarray(c.offsets, dtype=np.int64)
            lengths = np.diff(off)
            prefix = lengths.astype("<u4" if w == 4 else "<u8").view(np.uint8)
            out[gather_ranges(positions, cursor, np.full(n, w))] = prefix
            cursor += w
            out[gather_ranges(positions, cursor, lengths)] = gather_ranges(
                np.asarray(c.data), off[:-1], lengths
            )
            cursor += lengths
    return VariableWidthBlock(offsets, out, 32), fields
