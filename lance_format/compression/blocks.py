"""Decoded data blocks: what a compressive encoding turns bytes into.

These mirror the "data blocks" of the official implementation.  They are plain numpy
containers, independent of Arrow, so the codecs stay small; turning a block into an Arrow
array (which needs the logical type) is done by :func:`lance_format.structural.arrow`.

A *ChunkRanges* value describes the same value buffer of many mini-block chunks at once, so
that codecs decode a whole page (or a group of chunks) in a few numpy calls instead of a
Python loop per chunk.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from ..jit import copy_bytes, kernel, readonly


@dataclass
class FixedWidthBlock:
    """``num_values`` values of ``bits_per_value`` bits each, packed little-endian.

    For ``bits_per_value == 1`` (booleans) ``data`` is an LSB-first bitmap; otherwise the
    width is a multiple of 8 and ``data`` holds ``num_values * bits_per_value // 8`` bytes.
    """

    data: np.ndarray  # uint8
    bits_per_value: int
    num_values: int


@dataclass
class VariableWidthBlock:
    """Variable-length values: ``offsets`` (n+1 entries, start at 0) into ``data``."""

    offsets: np.ndarray  # int64, monotonically non-decreasing, offsets[0] == 0
    data: np.ndarray  # uint8
    bits_per_offset: int = 32  # 32 for string/binary, 64 for large_* (keeps the Arrow type)

    @property
    def num_values(self) -> int:
        return len(self.offsets) - 1

    def longest(self) -> int:
        """The length of the longest value (0 for none)."""
        off = self.offsets
        return int((off[1:] - off[:-1]).max()) if len(off) > 1 else 0


@dataclass
class FixedSizeListBlock:
    """``dimension`` child values per value; ``validity`` is per child item (None = all valid)."""

    child: Block
    dimension: int
    validity: np.ndarray | None = None  # bool, one per flattened item

    @property
    def num_values(self) -> int:
        return self.child.num_values // self.dimension if self.dimension else 0


@dataclass
class StructBlock:
    """A packed struct decoded into one block per child field, in field order."""

    children: list[Block]
    num_values: int


@dataclass
class ChunkRanges:
    """One value buffer across many mini-block chunks: chunk i is
    ``base[starts[i] : starts[i] + lengths[i]]``."""

    base: np.ndarray  # uint8
    starts: np.ndarray  # int64
    lengths: np.ndarray  # int64

    def gather(self) -> np.ndarray:
        """Concatenate the chunk slices (vectorised)."""
        return gather_ranges(self.base, self.starts, self.lengths)


Block = FixedWidthBlock | VariableWidthBlock | FixedSizeListBlock | StructBlock
_B = TypeVar("_B", FixedWidthBlock, VariableWidthBlock, FixedSizeListBlock, StructBlock)


def unaligned_words(data: np.ndarray) -> np.ndarray:
    """The 8 bytes from every position of ``data`` on, as one (unaligned) little-endian
    word each: a strided view, no copy, for kernels that read 8 bytes at a time (a read
    that would pass the end of ``data`` must gather its bytes one by one instead).  Short
    inputs are padded so that the view always has the one (non-contiguous) layout the
    kernels are compiled for, and it is read-only (the ``ro`` type they declare)."""
    if len(data) < 16:
        padded = np.zeros(16, dtype=np.uint8)
        padded[: len(data)] = data
        data = padded
    words = np.ndarray((len(data) - 7,), dtype="<u8", buffer=data, strides=(1,))
    words.flags.writeable = False
    return words


def gather_ranges(base: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """``concatenate([base[s:s+n] for s, n in zip(starts, lengths)])`` for a 1-D ``base``,
    copied by :func:`place_ranges`; one range is a view."""
    starts = np.ascontiguousarray(starts, dtype=np.int64)
    lengths = np.ascontiguousarray(lengths, dtype=np.int64)
    if len(starts) == 1:
        s, n = int(starts[0]), int(lengths[0])
        if s < 0 or n < 0 or s + n > len(base):
            raise IndexError("range outside the buffer")
        return base[s : s + n]
    total = int(lengths.sum())
    if total == 0:
        return base[:0]
    out = np.empty(total, dtype=base.dtype)
    place_ranges(base, starts, lengths, np.cumsum(lengths) - lengths, out)
    return out


def place_ranges(
    src: np.ndarray,
    starts: np.ndarray,
    lengths: np.ndarray,
    dst_starts: np.ndarray,
    out: np.ndarray,
) -> None:
    """``out[dst_starts[i]:][:lengths[i]] = src[starts[i]:][:lengths[i]]`` for every i, in
    one compiled loop (1-D arrays of one dtype, ``out`` contiguous).  A range outside either
    array raises IndexError, as indexing would."""
    src = np.ascontiguousarray(src)
    size = src.dtype.itemsize  # copied as bytes: one compiled signature for every dtype
    starts, lengths, dst_starts = (
        np.ascontiguousarray(a, dtype=np.int64) for a in (starts, lengths, dst_starts)
    )
    if size != 1:
        starts, lengths, dst_starts = starts * size, lengths * size, dst_starts * size
    ok = _copy_ranges(
        readonly(src.view(np.uint8)),
        readonly(starts),
        readonly(lengths),
        readonly(dst_starts),
        out.view(np.uint8),
    )
    if not ok:
        raise IndexError("range outside the buffer")


@kernel("b1(ro(u1[::1]), ro(i8[::1]), ro(i8[::1]), ro(i8[::1]), u1[::1])")
def _copy_ranges(src, starts, lengths, dst_starts, out):  # pragma: no cover - compiled
    for i in range(len(starts)):
        s, n, d = starts[i], lengths[i], dst_starts[i]
        if s < 0 or n < 0 or d < 0 or s + n > len(src) or d + n > len(out):
            return False
        copy_bytes(out, d, src, s, n)
    return True


def take_block(block: Block, indices: np.ndarray) -> Block:
    """Select values by position (vectorised), keeping the block's kind."""
    indices = np.asarray(indices, dtype=np.int64)
    if isinstance(block, FixedWidthBlock):
        bits = block.bits_per_value
        if bits == 1:
            unpacked = np.unpackbits(block.data, bitorder="little", count=block.num_values)
            data = np.packbits(unpacked[indices], bitorder="little")
        elif bits == 0:
            data = block.data[:0]
        else:
            width = bits // 8
            rows = block.data[: block.num_values * width].reshape(block.num_values, width)
            data = rows[indices].reshape(-1)
        return FixedWidthBlock(data, bits, len(indices))
    if isinstance(block, VariableWidthBlock):
        starts = block.offsets[indices]
        lengths = block.offsets[indices + 1] - starts
        offsets = np.zeros(len(indices) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        return VariableWidthBlock(
            offsets, gather_ranges(block.data, starts, lengths), block.bits_per_offset
        )
    if isinstance(block, FixedSizeListBlock):
        dim = block.dimension
        items = (indices[:, None] * dim + np.arange(dim)).reshape(-1)
        validity = block.validity[items] if block.validity is not None else None
        return FixedSizeListBlock(take_block(block.child, items), dim, validity)
    if isinstance(block, StructBlock):
        return StructBlock([take_block(c, indices) for c in block.children], len(indices))
    raise TypeError(f"cannot take from {type(block).__name__}")


def slice_block(block: Block, start: int, stop: int) -> Block:
    """Values [start, stop) as views where the layout allows (a range read of part of a
    page must not pay for a gather of every value)."""
    n = stop - start
    if isinstance(block, FixedWidthBlock):
        bits = block.bits_per_value
        if bits == 1:
            if start % 8 == 0:
                return FixedWidthBlock(block.data[start // 8 : (stop + 7) // 8], 1, n)
            return take_block(block, np.arange(start, stop, dtype=np.int64))
        if bits == 0:
            return FixedWidthBlock(block.data[:0], 0, n)
        width = bits // 8
        return FixedWidthBlock(block.data[start * width : stop * width], bits, n)
    if isinstance(block, VariableWidthBlock):
        offsets = block.offsets[start : stop + 1]
        lo, hi = int(offsets[0]), int(offsets[-1])
        if lo:  # a slice from the first value keeps its offsets as a view
            offsets = offsets - lo
        return VariableWidthBlock(offsets, block.data[lo:hi], block.bits_per_offset)
    if isinstance(block, FixedSizeListBlock):
        dim = block.dimension
        validity = block.validity[start * dim : stop * dim] if block.validity is not None else None
        return FixedSizeListBlock(slice_block(block.child, start * dim, stop * dim), dim, validity)
    if isinstance(block, StructBlock):
        return StructBlock([slice_block(c, start, stop) for c in block.children], n)
    raise TypeError(f"cannot slice {type(block).__name__}")


def same_kind(blocks: Sequence[Block], kind: type[_B]) -> list[_B]:
    """``blocks``, all of which must be ``kind`` (a TypeError otherwise)."""
    out = [b for b in blocks if isinstance(b, kind)]
    if len(out) != len(blocks):
        raise TypeError(f"expected only {kind.__name__}s")
    return out


def concat_blocks(blocks: list[Block]) -> Block:
    """Concatenate blocks of the same kind (vectorised per kind)."""
    first = blocks[0]
    if len(blocks) == 1:
        return first
    if isinstance(first, FixedWidthBlock):
        blocks_fw = same_kind(blocks, FixedWidthBlock)
        n = sum(b.num_values for b in blocks)
        if first.bits_per_value == 1:
            bits = np.concatenate(
                [np.unpackbits(b.data, bitorder="little", count=b.num_values) for b in blocks_fw]
            )
            return FixedWidthBlock(np.packbits(bits, bitorder="little"), 1, n)
        width = first.bits_per_value // 8
        data = np.concatenate([b.data[: b.num_values * width] for b in blocks_fw])
        return FixedWidthBlock(data, first.bits_per_value, n)
    if isinstance(first, VariableWidthBlock):
        blocks_vw = same_kind(blocks, VariableWidthBlock)
        datas = [b.data[: int(b.offsets[-1])] for b in blocks_vw]
        shifts = np.cumsum([0] + [len(d) for d in datas[:-1]])
        offsets = np.concatenate(
            [first.offsets[:1]]
            + [b.offsets[1:].astype(np.int64) + s for b, s in zip(blocks_vw, shifts, strict=True)]
        )
        return VariableWidthBlock(
            offsets.astype(np.int64), np.concatenate(datas), first.bits_per_offset
        )
    if isinstance(first, FixedSizeListBlock):
        blocks_fsl = same_kind(blocks, FixedSizeListBlock)
        child = concat_blocks([b.child for b in blocks_fsl])
        if any(b.validity is not None for b in blocks_fsl):
            validity = np.concatenate(
                [
                    b.validity
                    if b.validity is not None
                    else np.ones(b.child.num_values, dtype=bool)
                    for b in blocks_fsl
                ]
            )
        else:
            validity = None
        return FixedSizeListBlock(child, first.dimension, validity)
    if isinstance(first, StructBlock):
        blocks_st = same_kind(blocks, StructBlock)
        children = [
            concat_blocks([b.children[i] for b in blocks_st]) for i in range(len(first.children))
        ]
        return StructBlock(children, sum(b.num_values for b in blocks))
    raise TypeError(f"cannot concatenate {type(first).__name__}")
