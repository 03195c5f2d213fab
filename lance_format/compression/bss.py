"""Byte stream split (docs/format/compression.md): a chunk of n values of B bytes is stored as B
streams of n bytes, stream j holding byte j of every value.  It only reorders bytes so that a
general compressor (zstd) finds more redundancy; it is always applied per mini-block chunk.
"""

from __future__ import annotations

import numpy as np

from ..errors import CorruptFileError, UnsupportedError
from .blocks import ChunkRanges, FixedWidthBlock


def _width(bits: int) -> int:
    if bits <= 0 or bits % 8:
        raise UnsupportedError(f"byte stream split of {bits}-bit values")
    return bits // 8


def decode_chunks(chunks: ChunkRanges, counts: np.ndarray, bits: int) -> FixedWidthBlock:
    """Un-split the BSS buffer of many chunks at once."""
    width = _width(bits)
    counts = np.asarray(counts, dtype=np.int64)
    starts = np.asarray(chunks.starts, dtype=np.int64)
    if (np.asarray(chunks.lengths) < counts * width).any() or (
        starts + counts * width > len(chunks.base)
    ).any():
        raise CorruptFileError("a byte-stream-split chunk is shorter than its values need")
    total = int(counts.sum())
    chunk_of = np.repeat(np.arange(len(counts)), counts)
    pos = np.arange(total, dtype=np.int64) - (np.cumsum(counts) - counts)[chunk_of]
    # byte j of value (chunk c, position p) is at start[c] + j * counts[c] + p
    idx = (starts[chunk_of] + pos)[:, None] + np.arange(width)[None, :] * counts[chunk_of][:, None]
    return FixedWidthBlock(chunks.base[idx.reshape(-1)], bits, total)


def encode_chunks(block: FixedWidthBlock, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Split each chunk (chunk i takes the next ``counts[i]`` values).

    Returns ``(buffer, chunk_sizes)``.
    """
    width = _width(block.bits_per_value)
    counts = np.asarray(counts, dtype=np.int64)
    rows = np.asarray(block.data[: block.num_values * width]).reshape(-1, width)
    total = int(counts.sum())
    chunk_of = np.repeat(np.arange(len(counts)), counts)
    first = np.cumsum(counts) - counts
    pos = np.arange(total, dtype=np.int64) - first[chunk_of]
    dest = (first[chunk_of] * width + pos)[:, None] + np.arange(width)[None, :] * counts[chunk_of][
        :, None
    ]
    out = np.empty(total * width, dtype=np.uint8)
    out[dest.reshape(-1)] = rows[:total].reshape(-1)
    return out, counts * width
