"""Flat (docs/format/compression.md): fixed-width values packed little-endian, booleans LSB-first.

The leaf of most encoding trees.  Widths are whole bytes except 1-bit booleans; a chunk of
n booleans is ``ceil(n/8)`` bytes, so chunks are joined bit by bit rather than byte by byte.
"""

from __future__ import annotations

import numpy as np

from ..errors import CorruptFileError, UnsupportedError
from .blocks import ChunkRanges, FixedWidthBlock, gather_ranges


def check_bits(bits: int) -> None:
    """Only 1-bit (boolean) and whole-byte widths exist in Lance 2.1/2.2."""
    if bits != 1 and (bits <= 0 or bits % 8):
        raise UnsupportedError(f"Flat encoding with {bits} bits per value")


def needed_bytes(bits: int, num_values: int) -> int:
    return (bits * num_values + 7) // 8


def decode_block(data: np.ndarray, bits: int, num_values: int) -> FixedWidthBlock:
    """One buffer of ``num_values`` values (block or per-value context)."""
    check_bits(bits)
    need = needed_bytes(bits, num_values)
    if len(data) < need:
        raise CorruptFileError(
            f"{num_values} values of {bits} bits need {need} bytes, the buffer has {len(data)}"
        )
    return FixedWidthBlock(data[:need], bits, num_values)


def decode_chunks(chunks: ChunkRanges, counts: np.ndarray, bits: int) -> FixedWidthBlock:
    """Join the Flat value buffer of many mini-block chunks (chunk i holds ``counts[i]``)."""
    check_bits(bits)
    counts = np.asarray(counts, dtype=np.int64)
    starts = np.asarray(chunks.starts, dtype=np.int64)
    lengths = np.asarray(chunks.lengths, dtype=np.int64)
    need = (counts * bits + 7) // 8
    if (lengths < need).any() or (starts + need > len(chunks.base)).any():
        raise CorruptFileError("a Flat mini-block chunk is shorter than its values need")
    total = int(counts.sum())
    if bits != 1:
        return FixedWidthBlock(gather_ranges(chunks.base, starts, need), bits, total)
    return FixedWidthBlock(join_bitmaps(chunks.base, starts, counts), 1, total)


def join_bitmaps(base: np.ndarray, starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Concatenate LSB-first bitmaps (bitmap i: ``counts[i]`` bits at byte ``starts[i]``)."""
    counts = np.asarray(counts, dtype=np.int64)
    nbytes = (counts + 7) // 8
    raw = gather_ranges(base, starts, nbytes)
    if len(counts) <= 1 or (counts[:-1] % 8 == 0).all():
        # every bitmap but the last ends on a byte boundary: the bytes simply join
        return np.asarray(raw)
    bits = np.unpackbits(raw, bitorder="little")
    byte_start = np.cumsum(nbytes) - nbytes
    keep = gather_ranges(np.arange(len(bits), dtype=np.int64), byte_start * 8, counts)
    return np.packbits(bits[keep], bitorder="little")


def unpack_bools(data: np.ndarray, num_values: int) -> np.ndarray:
    """An LSB-first bitmap as a bool array."""
    return np.unpackbits(data, bitorder="little", count=num_values).astype(bool)


def pack_bools(values: np.ndarray) -> np.ndarray:
    """A bool array as an LSB-first bitmap (the Flat(1) encoding)."""
    return np.packbits(np.asarray(values, dtype=bool), bitorder="little")


def encode(block: FixedWidthBlock) -> np.ndarray:
    """The Flat bytes of a block: its data, trimmed to the values it holds."""
    check_bits(block.bits_per_value)
    return np.asarray(block.data[: needed_bytes(block.bits_per_value, block.num_values)])
