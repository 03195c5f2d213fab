"""Variable (docs/format/compression.md): variable-width values, with three byte formats by context.

* **Mini-block chunk**: ``(k+1)`` offsets (u32 or u64, the width of ``Variable.offsets``)
  measured from the start of the chunk buffer, so ``offset[0] = (k+1) * width``; then the
  value bytes; then ``0x48`` padding to a multiple of the offset width.
* **Block** (dictionaries): ``u32 32, u32 bytes_start`` (or ``u64 64, u64 bytes_start``),
  ``n+1`` offsets relative to the data section, then the bytes.  An older header
  ``u8 bits, uN num_values, uN bytes_start`` is also accepted, as the reference reader does.
* **Per value** (full-zip): a length before each value; the full-zip layout parses that and
  hands over a :class:`VariableWidthBlock`, see :func:`from_lengths`.
"""

from __future__ import annotations

import numpy as np

from ..errors import CorruptFileError, UnsupportedError
from ..jit import copy_bytes, kernel, load_u32, load_u64, readonly
from .blocks import ChunkRanges, VariableWidthBlock

PAD_BYTE = 0x48
AIM_CHUNK_BYTES = 4096
_OFFSET_DTYPES: dict[int, np.dtype] = {32: np.dtype("<u4"), 64: np.dtype("<u8")}


def offset_dtype(bits: int) -> np.dtype:
    try:
        return _OFFSET_DTYPES[bits]
    except KeyError:
        raise UnsupportedError(f"Variable encoding with {bits}-bit offsets") from None


def from_lengths(
    lengths: np.ndarray, data: np.ndarray, bits_per_offset: int = 32
) -> VariableWidthBlock:
    """Build a block from per-value lengths and the concatenated value bytes."""
    lengths = np.asarray(lengths, dtype=np.int64)
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if (lengths < 0).any() or offsets[-1] > len(data):
        raise CorruptFileError("variable-width lengths run past the value bytes")
    return VariableWidthBlock(offsets, np.asarray(data)[: int(offsets[-1])], bits_per_offset)


# -- mini-block ------------------------------------------------------------------------------


def decode_chunks(chunks: ChunkRanges, counts: np.ndarray, bits: int) -> VariableWidthBlock:
    """Decode the Variable value buffer of many mini-block chunks into one block."""
    base, starts, lengths, counts, width = checked_chunks(chunks, counts, bits)
    offsets = np.empty(int(counts.sum()) + 1, dtype=np.int64)
    total = _chunk_offsets(base, starts, lengths, counts, width, offsets)
    if total < 0:
        raise CorruptFileError(
            "Variable mini-block offsets are not monotonic or run past the chunk"
        )
    data = np.empty(total, dtype=np.uint8)
    _chunk_bytes(base, starts, counts, width, readonly(offsets), data)
    return VariableWidthBlock(offsets, data, bits)


def checked_chunks(
    chunks: ChunkRanges, counts: np.ndarray, bits: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """``(base, starts, lengths, counts, offset width)`` of Variable mini-block chunks as
    the kernels take them, once every chunk is checked to lie inside ``base`` and to hold
    its ``counts[c] + 1`` offsets (which :func:`offset_at` then reads unchecked)."""
    width = offset_dtype(bits).itemsize
    counts = np.asarray(counts, dtype=np.int64)
    starts = np.asarray(chunks.starts, dtype=np.int64)
    lengths = np.asarray(chunks.lengths, dtype=np.int64)
    base = readonly(np.ascontiguousarray(chunks.base, dtype=np.uint8))
    if (lengths < (counts + 1) * width).any() or (starts + lengths > len(base)).any():
        raise CorruptFileError("a Variable mini-block chunk is shorter than its offsets")
    if len(starts) and starts.min() < 0:
        raise CorruptFileError("a Variable mini-block chunk starts before its buffer")
    return base, readonly(starts), readonly(lengths), readonly(counts), width


@kernel("i8(ro(u1[::1]), ro(i8[::1]), ro(i8[::1]), ro(i8[::1]), i8, i8[::1])")
def _chunk_offsets(base, starts, lengths, counts, width, out):  # pragma: no cover - compiled
    """The values' offsets in the joined bytes of all chunks (chunk ``c`` stores
    ``counts[c] + 1`` little-endian offsets of ``width`` bytes, relative to the chunk);
    returns the total size, or -1 when a chunk's offsets decrease or leave the chunk.

    Each chunk is read through slices indexed by the loop counter, with no branch in the
    loop (a bad offset is remembered and reported after it): LLVM then reads each offset
    as one load, about 17x faster than indexing ``base`` at computed positions."""
    at = 0
    total = 0
    out[0] = 0
    for c in range(len(starts)):
        n, limit = counts[c], lengths[c]
        chunk = base[starts[c] : starts[c] + (n + 1) * width]
        first = offset_at(chunk, 0, width)
        if first < 0 or first > limit:
            return -1
        dst = out[at + 1 : at + 1 + n]
        bad = False
        prev = first
        for k in range(n):
            cur = offset_at(chunk, (k + 1) * width, width)
            bad |= (cur < prev) | (cur > limit)
            dst[k] = total + cur - first
            prev = cur
        if bad:
            return -1
        total += prev - first
        at += n
    return total


@kernel("void(ro(u1[::1]), ro(i8[::1]), ro(i8[::1]), i8, ro(i8[::1]), u1[::1])")
def _chunk_bytes(base, starts, counts, width, offsets, out):  # pragma: no cover - compiled
    """Copy every chunk's value bytes (checked by :func:`_chunk_offsets`) end to end."""
    at = 0
    for c in range(len(starts)):
        first = starts[c] + offset_at(base, starts[c], width)
        size = offsets[at + counts[c]] - offsets[at]
        copy_bytes(out, offsets[at], base, first, size)
        at += counts[c]


@kernel(inline="always")
def offset_at(base, pos, width):  # pragma: no cover - compiled
    """The little-endian unsigned offset of ``width`` (4 or 8) bytes at ``base[pos]``."""
    if width == 4:
        return np.int64(load_u32(base, pos))
    return np.int64(load_u64(base, pos))  # past 2**63: negative, which callers reject


def plan_chunks(offsets: np.ndarray, bits: int, aim: int = AIM_CHUNK_BYTES) -> np.ndarray:
    """Values per chunk: the largest power of two (at most 4096, the upstream mini-block cap)
    whose offsets and bytes fit in ``aim`` bytes (at least one value); the last chunk takes
    whatever is left if it fits.

    The greedy walk is sequential (a chunk starts where the previous one ends): a compiled
    loop over chunks, whose search starts from the previous chunk's size and usually
    settles after two probes.
    """
    width = offset_dtype(bits).itemsize
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    n = len(offsets) - 1
    if n <= 0:
        return np.zeros(0, dtype=np.int64)
    out = np.empty(n, dtype=np.int64)
    count = _plan(readonly(offsets), width, aim, out)
    return out[:count].copy()


@kernel("i8(ro(i8[::1]), i8, i8, i8[::1])")
def _plan(off, width, aim, out):  # pragma: no cover - compiled
    max_values = 4096  # upstream MAX_MINIBLOCK_VALUES
    n = len(off) - 1
    end = off[n]
    count = 0
    pos = 0
    k = 1
    while pos < n:
        rest = n - pos
        base = off[pos] - width  # chunk [pos, pos+k) fits when off[pos+k] - base + k*width <= aim
        if rest <= max_values and end - base + rest * width <= aim:
            out[count] = rest
            count += 1
            break
        # a non-last chunk leaves at least one value behind (the reference loop's `2k < rest`)
        limit = min(rest - 1, max_values)
        top = 1
        while top * 2 <= limit:
            top *= 2
        k = min(k, top)
        if off[pos + k] - base + k * width <= aim:
            while k < top and off[pos + 2 * k] - base + 2 * k * width <= aim:
                k *= 2
        else:
            while k > 1:
                k >>= 1
                if off[pos + k] - base + k * width <= aim:
                    break
        out[count] = k
        count += 1
        pos += k
    return count


def encode_chunks(block: VariableWidthBlock, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Write the mini-block chunk form; chunk i takes the next ``counts[i]`` values.

    Returns ``(buffer, chunk_sizes)``; each chunk is padded with 0x48 to the offset width.
    """
    return _write_chunks(
        readonly(np.ascontiguousarray(block.offsets, dtype=np.int64)),
        readonly(np.ascontiguousarray(block.data, dtype=np.uint8)),
        readonly(np.ascontiguousarray(counts, dtype=np.int64)),
        offset_dtype(block.bits_per_offset).itemsize,
    )


@kernel("Tuple((u1[::1], i8[::1]))(ro(i8[::1]), ro(u1[::1]), ro(i8[::1]), i8)")
def _write_chunks(offsets, data, counts, width):  # pragma: no cover - compiled
    """Chunk by chunk: ``counts[c] + 1`` little-endian offsets measured from the chunk's
    start, then its value bytes, padded with 0x48 to the offset width; returns the
    buffer and the chunk sizes (sized here: a small page's every numpy call counts)."""
    nchunks = len(counts)
    sizes = np.empty(nchunks, dtype=np.int64)
    total = 0
    first = 0
    for c in range(nchunks):
        k = counts[c]
        raw = (k + 1) * width + offsets[first + k] - offsets[first]
        sizes[c] = -(-raw // width) * width
        total += sizes[c]
        first += k
    out = np.full(total, PAD_BYTE, dtype=np.uint8)
    pos = 0
    first = 0
    for c in range(nchunks):
        k = counts[c]
        header = (k + 1) * width
        shift = header - offsets[first]
        for j in range(k + 1):
            value = offsets[first + j] + shift
            at = pos + j * width
            for b in range(width):
                out[at + b] = (value >> (8 * b)) & 0xFF
        start, stop = offsets[first], offsets[first + k]
        out[pos + header : pos + header + stop - start] = data[start:stop]
        pos += sizes[c]
        first += k
    return out, sizes


# -- block -----------------------------------------------------------------------------------


def decode_block(data: np.ndarray, num_values: int) -> VariableWidthBlock:
    """Parse the block form (dictionary items)."""
    if len(data) < 9:
        raise CorruptFileError(f"Variable block buffer of {len(data)} bytes is too short")
    raw = data.tobytes() if len(data) < 64 else data[:24].tobytes()
    old_scheme = raw[1] != 0 or raw[2] != 0 or raw[3] != 0
    if old_scheme:
        bits = raw[0]
        if bits == 32:
            bytes_start = int.from_bytes(raw[5:9], "little")
            off_start = 9
        elif bits == 64:
            if len(data) < 17:
                raise CorruptFileError("Variable block header is truncated")
            bytes_start = int.from_bytes(raw[9:17], "little")
            off_start = 17
        else:
            raise CorruptFileError(f"Variable block with {bits}-bit offsets")
    else:
        bits = int.from_bytes(raw[0:4], "little")
        if bits == 32:
            bytes_start = int.from_bytes(raw[4:8], "little")
            off_start = 8
        elif bits == 64:
            if len(data) < 16:
                raise CorruptFileError("Variable block header is truncated")
            bytes_start = int.from_bytes(raw[8:16], "little")
            off_start = 16
        else:
            raise CorruptFileError(f"Variable block with {bits}-bit offsets")
    width = bits // 8
    need = off_start + (num_values + 1) * width
    if bytes_start < need or bytes_start > len(data):
        raise CorruptFileError(
            f"Variable block data starts at {bytes_start}, the offsets of {num_values} values "
            f"end at {need} and the buffer has {len(data)} bytes"
        )
    offs = np.ascontiguousarray(data[off_start:need]).view(offset_dtype(bits)).astype(np.int64)
    values = data[bytes_start:]
    offs = offs - offs[0]
    if (np.diff(offs) < 0).any() or offs[-1] > len(values):
        raise CorruptFileError("Variable block offsets are not monotonic or run past the data")
    return VariableWidthBlock(offs, np.asarray(values[: int(offs[-1])]), bits)


def encode_block(block: VariableWidthBlock) -> np.ndarray:
    """Write the block form: ``[bits][bytes_start]`` header, offsets from 0, then bytes."""
    bits = block.bits_per_offset
    dtype = offset_dtype(bits)
    width = dtype.itemsize
    offsets = np.asarray(block.offsets, dtype=np.int64)
    offsets = offsets - offsets[0]
    bytes_start = 2 * width + len(offsets) * width
    header = np.array([bits, bytes_start], dtype=dtype).view(np.uint8)
    data = np.asarray(block.data)[int(block.offsets[0]) : int(block.offsets[-1])]
    return np.concatenate([header, offsets.astype(dtype).view(np.uint8), data])
