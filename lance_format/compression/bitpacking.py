"""FastLanes bitpacking (docs/format/compression.md): InlineBitpacking and OutOfLineBitpacking.

Both pack blocks of 1024 unsigned T-bit values (T = 8, 16, 32, 64) down to W bits each in
the FastLanes *transposed* layout: a block is ``W x LANES`` words (``LANES = 1024 / T``),
word ``w`` of lane ``l`` sits at index ``w * LANES + l``, and lane ``l`` is a little-endian
bit stream in which row ``r`` (0..T) holds input element
``FL_ORDER[r // 8] * 16 + (r % 8) * 128 + l``.

Packing and unpacking run in compiled kernels (:mod:`lance_format.jit`) over all the
blocks of a page at once, each block with its own width.

* **InlineBitpacking** stores ``[W as one T-bit word][packed block]`` per 1024 values; a
  mini-block chunk is exactly one such block (the last chunk zero-padded to 1024 values),
  the block form (dictionaries) is the concatenation of them.
* **OutOfLineBitpacking** keeps one W for the whole buffer in the encoding tree; the tail
  (< 1024 values) is either a zero-padded packed block or the raw T-bit values, told apart
  by the buffer length (docs/format/structural.md).
"""

from __future__ import annotations

import numpy as np

from ..errors import CorruptFileError, UnsupportedError
from ..jit import kernel, readonly
from .blocks import ChunkRanges, gather_ranges, place_ranges

BLOCK = 1024
FL_ORDER = (0, 4, 2, 6, 1, 5, 3, 7)
_DTYPES: dict[int, np.dtype] = {
    8: np.dtype("<u1"),
    16: np.dtype("<u2"),
    32: np.dtype("<u4"),
    64: np.dtype("<u8"),
}


def word_dtype(t: int) -> np.dtype:
    """The little-endian unsigned dtype of a T-bit word."""
    try:
        return _DTYPES[t]
    except KeyError:
        raise UnsupportedError(f"bitpacking of {t}-bit values (only 8/16/32/64)") from None


def packed_words(width: int, t: int) -> int:
    """Number of T-bit words in one packed block of width W."""
    return BLOCK * width // t


def _check_width(width: int, t: int) -> None:
    if not 0 <= width <= t:
        raise CorruptFileError(f"bit width {width} is outside 0..{t} for {t}-bit values")


def unpack_blocks(words: np.ndarray, width: int, t: int) -> np.ndarray:
    """Unpack ``words`` (shape ``blocks x (1024*W/T)``, dtype uT) to ``blocks x 1024`` uT."""
    _check_width(width, t)
    wpb = packed_words(width, t)
    words = np.ascontiguousarray(words, dtype=word_dtype(t))
    nblocks = words.shape[0] if words.ndim == 2 else len(words) // max(wpb, 1)
    words = words.reshape(-1)
    starts = np.arange(nblocks, dtype=np.int64) * wpb
    widths = np.full(nblocks, width, dtype=np.int64)
    counts = np.full(nblocks, BLOCK, dtype=np.int64)
    return _unpack_into(words, starts, widths, counts, t).reshape(nblocks, BLOCK)


def _unpack_into(
    words: np.ndarray, starts: np.ndarray, width: np.ndarray, counts: np.ndarray, t: int
) -> np.ndarray:
    """Unpack block ``i`` (``widths[i]`` bits, its packed words from ``words[starts[i]]``)
    keeping its first ``counts[i]`` values, all blocks end to end in one compiled pass.
    ``words`` is uT; callers check that every block lies inside it."""
    dtype = word_dtype(t)
    total = int(counts.sum())
    if not total:
        return np.empty(0, dtype=dtype)
    # every block is unpacked whole where its values go, the next block overwriting what a
    # short one wrote past its count: one block of slack at the end
    out = np.empty(total + BLOCK, dtype=dtype)
    _unpack(
        readonly(np.ascontiguousarray(words, dtype=dtype)),
        readonly(np.asarray(starts, dtype=np.int64)),
        readonly(np.asarray(width, dtype=np.int64)),
        readonly(np.asarray(counts, dtype=np.int64)),
        out,
    )
    return out[:total]


_UNPACK_SIGNATURES = [
    f"void(ro({u}[::1]), ro(i8[::1]), ro(i8[::1]), ro(i8[::1]), {u}[::1])"
    for u in ("u1", "u2", "u4", "u8")
]


@kernel(inline="always")
def _fl_order(i):  # pragma: no cover - compiled
    """``FL_ORDER[i]``: ``i`` (0..7) with its three bits reversed."""
    return ((i & 1) << 2) | (i & 2) | ((i >> 2) & 1)


@kernel(*_UNPACK_SIGNATURES)
def _unpack(words, starts, widths, counts, out):  # pragma: no cover - compiled
    """Row ``r`` of lane ``l`` sits at bit ``r * W`` of the lane's stream (word
    ``w * LANES + l``) and goes to ``FL_ORDER[r // 8] * 16 + (r % 8) * 128 + l``.  Each
    block is unpacked whole at its output position (``out`` has a block of slack) and the
    next block overwrites what a block keeping fewer than 1024 values wrote past them; a
    width of -1 marks ``counts[b]`` words stored raw (an out-of-line tail).

    The inner loops index slices by the loop counter alone: LLVM then knows every index
    is in range and non-negative and vectorises them (3-12x faster than indexing ``out``
    with computed offsets, whose negative-index checks it cannot drop)."""
    t = words.itemsize * 8
    lanes = 1024 // t
    at = 0
    for b in range(len(starts)):
        width, count, base = widths[b], counts[b], starts[b]
        if width < 0:  # stored raw
            out[at : at + count] = words[base : base + count]
        elif width == 0:
            out[at : at + 1024] = 0
        else:
            mask = np.uint64(0xFFFFFFFFFFFFFFFF) >> np.uint64(64 - width)
            for r in range(t):
                bit = r * width
                src = base + bit // t * lanes
                shift = np.uint64(bit % t)
                o = at + _fl_order(r // 8) * 16 + (r % 8) * 128
                dst = out[o : o + lanes]
                low = words[src : src + lanes]
                if bit % t + width > t:  # the row straddles two words of its lane
                    high = words[src + lanes : src + 2 * lanes]
                    back = np.uint64(t - bit % t)
                    for lane in range(lanes):
                        v = np.uint64(low[lane]) >> shift | np.uint64(high[lane]) << back
                        dst[lane] = v & mask
                else:
                    for lane in range(lanes):
                        dst[lane] = np.uint64(low[lane]) >> shift & mask
        at += count


def pack_blocks(values: np.ndarray, width: int, t: int) -> np.ndarray:
    """Pack ``blocks x 1024`` uT values to ``blocks x (1024*W/T)`` words (bits above W dropped)."""
    dtype = word_dtype(t)
    _check_width(width, t)
    values = np.ascontiguousarray(values, dtype=dtype).reshape(-1, BLOCK)
    nblocks = len(values)
    wpb = packed_words(width, t)
    words = np.zeros(nblocks * wpb, dtype=dtype)
    if width:
        starts = np.arange(nblocks, dtype=np.int64) * wpb
        _pack(
            readonly(values.reshape(-1)),
            readonly(np.full(nblocks, width, dtype=np.int64)),
            readonly(starts),
            words,
        )
    return words.reshape(nblocks, wpb)


_PACK_SIGNATURES = [
    f"void(ro({u}[::1]), ro(i8[::1]), ro(i8[::1]), {u}[::1])" for u in ("u1", "u2", "u4", "u8")
]


@kernel(*_PACK_SIGNATURES)
def _pack(values, widths, starts, words):  # pragma: no cover - compiled
    """Pack block ``b`` (``values[b * 1024:][:1024]``) to ``widths[b]`` bits into ``words``
    from ``starts[b]`` (zeroed by the caller): the inverse of :func:`_unpack`, its inner
    loops over slices for the same reason."""
    t = words.itemsize * 8
    lanes = 1024 // t
    for b in range(len(widths)):
        width = widths[b]
        if width == 0:
            continue
        mask = np.uint64(0xFFFFFFFFFFFFFFFF) >> np.uint64(64 - width)
        base = starts[b]
        for r in range(t):
            bit = r * width
            shift = np.uint64(bit % t)
            dst = base + bit // t * lanes
            o = b * 1024 + _fl_order(r // 8) * 16 + (r % 8) * 128
            src = values[o : o + lanes]
            low = words[dst : dst + lanes]
            for lane in range(lanes):
                low[lane] |= (np.uint64(src[lane]) & mask) << shift
            if bit % t + width > t:
                back = np.uint64(t - bit % t)
                high = words[dst + lanes : dst + 2 * lanes]
                for lane in range(lanes):
                    high[lane] |= (np.uint64(src[lane]) & mask) >> back


def bit_widths(values: np.ndarray, t: int) -> np.ndarray:
    """Bit length of the maximum of each row of ``values`` (shape ``blocks x n``)."""
    if len(values) <= 1 and values.dtype.kind == "u":  # a small page: Python's bit_length
        top = int(values.max()) if values.size else 0
        return np.full(len(values), top.bit_length(), dtype=np.int64)
    maxes = values.max(axis=1) if values.shape[1] else np.zeros(len(values), values.dtype)
    # the bit length of m is the number of powers of two at most m (one search, exact)
    powers = np.left_shift(np.ones(t, dtype=maxes.dtype), np.arange(t, dtype=maxes.dtype))
    return np.searchsorted(powers, maxes, side="right").astype(np.int64)


def _block_words(
    base: np.ndarray, byte_starts: np.ndarray, nbytes: np.ndarray, t: int
) -> tuple[np.ndarray, np.ndarray]:
    """The uT words of blocks stored at ``base[byte_starts[i]:][:nbytes[i]]`` and each
    block's first word: a view of ``base`` when the blocks sit on word boundaries (the
    usual case), else the blocks gathered into a fresh buffer."""
    word = t // 8
    byte_starts = np.asarray(byte_starts, dtype=np.int64)
    if base.ctypes.data % word == 0 and not (byte_starts % word).any():
        usable = len(base) - len(base) % word
        return base[:usable].view(word_dtype(t)), byte_starts // word
    nbytes = np.asarray(nbytes, dtype=np.int64)
    packed = np.ascontiguousarray(gather_ranges(base, byte_starts, nbytes)).copy()
    return packed.view(word_dtype(t)), (np.cumsum(nbytes) - nbytes) // word


# -- InlineBitpacking ------------------------------------------------------------------------


def _read_words(base: np.ndarray, starts: np.ndarray, t: int) -> np.ndarray:
    nbytes = t // 8
    raw = gather_ranges(base, starts, np.full(len(starts), nbytes, dtype=np.int64))
    return np.ascontiguousarray(raw).view(word_dtype(t)).astype(np.int64)


def decode_inline_chunks(chunks: ChunkRanges, counts: np.ndarray, t: int) -> np.ndarray:
    """Decode the InlineBitpacking value buffer of many mini-block chunks at once.

    Each chunk is ``[W][1024*W/T packed words]``; chunk i yields its first ``counts[i]``
    values.  Returns the concatenated values as uT.
    """
    word = t // 8
    counts = np.asarray(counts, dtype=np.int64)
    starts = np.asarray(chunks.starts, dtype=np.int64)
    lengths = np.asarray(chunks.lengths, dtype=np.int64)
    if len(starts) == 0:
        return np.zeros(0, dtype=word_dtype(t))
    if (counts > BLOCK).any() or (counts < 0).any():
        raise CorruptFileError("an InlineBitpacking chunk holds more than 1024 values")
    if (lengths < word).any() or (starts + lengths > len(chunks.base)).any():
        raise CorruptFileError("an InlineBitpacking chunk is too short for its width word")
    widths = _read_words(chunks.base, starts, t)
    if (widths > t).any():
        raise CorruptFileError(f"InlineBitpacking width above {t} bits")
    if (lengths < word + 128 * widths).any():
        raise CorruptFileError("an InlineBitpacking chunk is shorter than its packed block")
    words, first = _block_words(chunks.base, starts + word, 128 * widths, t)
    return _unpack_into(words, first, widths, counts, t)


def decode_inline_block(data: np.ndarray, num_values: int, t: int) -> np.ndarray:
    """Decode the block form: ``ceil(n/1024)`` concatenated ``[W][packed]`` blocks."""
    word = t // 8
    nblocks = -(-num_values // BLOCK)
    starts = np.zeros(nblocks, dtype=np.int64)
    widths = np.zeros(nblocks, dtype=np.int64)
    pos = 0
    # each block's position depends on the widths before it: a short walk, one step per block
    for i in range(nblocks):
        if pos + word > len(data):
            raise CorruptFileError("InlineBitpacking block buffer is truncated")
        width = int.from_bytes(data[pos : pos + word].tobytes(), "little")
        if width > t:
            raise CorruptFileError(f"InlineBitpacking width {width} above {t} bits")
        starts[i] = pos + word
        widths[i] = width
        pos += word + 128 * width
    if pos > len(data):
        raise CorruptFileError("InlineBitpacking block buffer is truncated")
    counts = np.minimum(BLOCK, num_values - np.arange(nblocks, dtype=np.int64) * BLOCK)
    words, first = _block_words(data, starts, 128 * widths, t)
    return _unpack_into(words, first, widths, counts, t)


def encode_inline_chunks(values: np.ndarray, t: int) -> tuple[np.ndarray, np.ndarray]:
    """Pack values in chunks of 1024 (the last zero-padded), each ``[W][packed]``.

    Returns ``(buffer, chunk_sizes)``: the concatenated chunks and each chunk's byte size.
    W per chunk is the bit length of its maximum (no zigzag, no frame of reference).
    """
    values = np.ascontiguousarray(values, dtype=word_dtype(t))
    out, sizes = _inline_chunks(readonly(values))
    return out.view(np.uint8), sizes


@kernel(*(f"Tuple(({u}[::1], i8[::1]))(ro({u}[::1]))" for u in ("u1", "u2", "u4", "u8")))
def _inline_chunks(values):  # pragma: no cover - compiled
    """:func:`encode_inline_chunks` in one call (a small page's dozen numpy calls cost
    more than packing it): each 1024-value block (the last zero-padded) to the bit length
    of its maximum, after a word holding that width."""
    n = len(values)
    t = values.itemsize * 8
    nblocks = (n + BLOCK - 1) // BLOCK
    padded = np.zeros(nblocks * BLOCK, dtype=values.dtype)
    padded[:n] = values
    widths = np.empty(nblocks, dtype=np.int64)
    sizes = np.empty(nblocks, dtype=np.int64)
    starts = np.empty(nblocks, dtype=np.int64)  # each block's first packed word
    total = 0
    for b in range(nblocks):
        top = np.uint64(0)
        for i in range(b * BLOCK, (b + 1) * BLOCK):
            if np.uint64(padded[i]) > top:
                top = np.uint64(padded[i])
        width = 0
        while top:
            top = top >> np.uint64(1)
            width += 1
        widths[b] = width
        sizes[b] = t // 8 + 128 * width
        starts[b] = total + 1
        total += 1 + BLOCK * width // t
    out = np.zeros(total, dtype=values.dtype)
    for b in range(nblocks):
        out[starts[b] - 1] = widths[b]
    _pack(padded, widths, starts, out)
    return out, sizes


def encode_inline_block(values: np.ndarray, t: int) -> np.ndarray:
    """Block form of InlineBitpacking: all chunks back to back."""
    return encode_inline_chunks(values, t)[0]


# -- OutOfLineBitpacking ---------------------------------------------------------------------


def decode_out_of_line(data: np.ndarray, num_values: int, width: int, t: int) -> np.ndarray:
    """Decode an out-of-line bitpacked buffer of ``num_values`` values packed to W bits."""
    out = decode_out_of_line_chunks(
        ChunkRanges(data, np.zeros(1, dtype=np.int64), np.array([len(data)], dtype=np.int64)),
        np.array([num_values], dtype=np.int64),
        width,
        t,
    )
    return out


def decode_out_of_line_chunks(
    chunks: ChunkRanges, counts: np.ndarray, width: int, t: int
) -> np.ndarray:
    """Decode many independent out-of-line buffers (e.g. the def levels of every mini-block
    chunk) in one pass; buffer i holds ``counts[i]`` values.  Returns them concatenated."""
    _check_width(width, t)
    word = t // 8
    counts = np.asarray(counts, dtype=np.int64)
    starts = np.asarray(chunks.starts, dtype=np.int64)
    lengths = np.asarray(chunks.lengths, dtype=np.int64)
    if (starts + lengths > len(chunks.base)).any() or (lengths % word).any():
        raise CorruptFileError(
            "out-of-line bitpacked buffer has a partial word or runs past its data"
        )
    wpb = packed_words(width, t)
    nfull, tail = np.divmod(counts, BLOCK)
    nwords = lengths // word
    raw_tail = (tail > 0) & (nwords == nfull * wpb + tail)
    padded_tail = (tail > 0) & ~raw_tail
    nblocks = nfull + padded_tail
    if (nwords < nblocks * wpb).any():
        raise CorruptFileError("out-of-line bitpacked buffer is shorter than its values need")
    # every buffer: its packed blocks (the last keeping ``tail`` values when padded), then
    # its raw tail as a block of width -1
    nraw = raw_tail.astype(np.int64)
    per_chunk = nblocks + nraw
    owner = np.repeat(np.arange(len(counts)), per_chunk)
    j = np.arange(int(per_chunk.sum())) - (np.cumsum(per_chunk) - per_chunk)[owner]
    raw = j >= nblocks[owner]
    block_counts = np.where(raw | (j >= nfull[owner]), tail[owner], BLOCK)
    block_widths = np.where(raw, -1, width)
    byte_starts = starts[owner] + j * wpb * word
    nbytes = np.where(raw, tail[owner] * word, wpb * word)
    words, first = _block_words(chunks.base, byte_starts, nbytes, t)
    return _unpack_into(words, first, block_widths, block_counts, t)


def encode_out_of_line(values: np.ndarray, width: int, t: int) -> np.ndarray:
    """Pack values to W bits in 1024-value blocks; the tail is padded to a block when that is
    smaller than storing it raw (``W*(1024-tail) < (T-W)*tail``), else kept raw.  Bytes out."""
    dtype = word_dtype(t)
    _check_width(width, t)
    values = np.asarray(values, dtype=dtype)
    n = len(values)
    nfull, tail = divmod(n, BLOCK)
    parts = [pack_blocks(values[: nfull * BLOCK].reshape(nfull, BLOCK), width, t).reshape(-1)]
    if tail:
        if width * (BLOCK - tail) < (t - width) * tail:
            last = np.zeros(BLOCK, dtype=dtype)
            last[:tail] = values[nfull * BLOCK :]
            parts.append(pack_blocks(last[None, :], width, t).reshape(-1))
        else:
            parts.append(values[nfull * BLOCK :])
    return np.concatenate(parts).astype(dtype, copy=False).view(np.uint8)


def encode_out_of_line_chunks(
    values: np.ndarray, counts: np.ndarray, width: int, t: int
) -> tuple[np.ndarray, np.ndarray]:
    """Many independent out-of-line buffers at once (the levels of every mini-block chunk):
    buffer i packs the next ``counts[i]`` values to W bits, with the tail rule of
    :func:`encode_out_of_line`.  Returns ``(bytes, size of each buffer)``."""
    dtype = word_dtype(t)
    _check_width(width, t)
    values = np.asarray(values, dtype=dtype)
    counts = np.asarray(counts, dtype=np.int64)
    starts = np.cumsum(counts) - counts
    nfull, tail = np.divmod(counts, BLOCK)
    padded_tail = (tail > 0) & (width * (BLOCK - tail) < (t - width) * tail)
    raw_tail = np.where((tail > 0) & ~padded_tail, tail, 0)
    nblocks = nfull + padded_tail
    wpb = packed_words(width, t)
    words = nblocks * wpb + raw_tail  # output words per buffer
    out = np.zeros(int(words.sum()), dtype=dtype)
    out_start = np.cumsum(words) - words
    nb = int(nblocks.sum())
    if nb:
        owner = np.repeat(np.arange(len(counts)), nblocks)
        j = np.arange(nb) - (np.cumsum(nblocks) - nblocks)[owner]
        src = starts[owner] + j * BLOCK
        take = np.minimum(counts[owner] - j * BLOCK, BLOCK)  # values in this block
        blocks = np.zeros((nb, BLOCK), dtype=dtype)  # a short last block is zero-padded
        place_ranges(values, src, take, np.arange(nb, dtype=np.int64) * BLOCK, blocks.reshape(-1))
        packed = pack_blocks(blocks, width, t)  # nb x wpb
        dest = out_start[owner] + j * wpb
        place_ranges(
            packed.reshape(-1),
            np.arange(nb, dtype=np.int64) * wpb,
            np.full(nb, wpb, dtype=np.int64),
            dest,
            out,
        )
    if raw_tail.any():
        sel = np.flatnonzero(raw_tail)
        src = gather_ranges(values, starts[sel] + nfull[sel] * BLOCK, raw_tail[sel])
        dest = gather_ranges(
            np.arange(len(out), dtype=np.int64), out_start[sel] + nfull[sel] * wpb, raw_tail[sel]
        )
        out[dest] = src
    return out.view(np.uint8), words * (t // 8)
