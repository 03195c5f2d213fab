"""FastLanes bitpacking (docs/format/compression.md): InlineBitpacking and OutOfLineBitpacking.

Both pack blocks of 1024 unsigned T-bit values (T = 8, 16, 32, 64) down to W bits each in
the FastLanes *transposed* layout: a block is ``W x LANES`` words (``LANES = 1024 / T``),
word ``w`` of lane ``l`` sits at index ``w * LANES + l``, and lane ``l`` is a little-endian
bit stream in which row ``r`` (0..T) holds input element
``FL_ORDER[r // 8] * 16 + (r % 8) * 128 + l``.

Packing and unpacking work on many blocks at once: one numpy operation per row (at most
64), each over ``blocks x LANES`` words, so a page decodes in a few hundred array calls
whatever its size.

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
from .blocks import ChunkRanges, gather_ranges

BLOCK = 1024
FL_ORDER = (0, 4, 2, 6, 1, 5, 3, 7)
_DTYPES: dict[int, np.dtype] = {
    8: np.dtype("<u1"),
    16: np.dtype("<u2"),
    32: np.dtype("<u4"),
    64: np.dtype("<u8"),
}
_INDEX_CACHE: dict[int, np.ndarray] = {}


def word_dtype(t: int) -> np.dtype:
    """The little-endian unsigned dtype of a T-bit word."""
    try:
        return _DTYPES[t]
    except KeyError:
        raise UnsupportedError(f"bitpacking of {t}-bit values (only 8/16/32/64)") from None


def _row_index(t: int) -> np.ndarray:
    """``idx[r, l]``: the input position packed at row r, lane l (shape T x LANES)."""
    idx = _INDEX_CACHE.get(t)
    if idx is None:
        lanes = BLOCK // t
        rows = np.arange(t)
        base = np.array(FL_ORDER)[rows // 8] * 16 + (rows % 8) * 128
        idx = base[:, None] + np.arange(lanes)[None, :]
        _INDEX_CACHE[t] = idx
    return idx


def packed_words(width: int, t: int) -> int:
    """Number of T-bit words in one packed block of width W."""
    return BLOCK * width // t


def _check_width(width: int, t: int) -> None:
    if not 0 <= width <= t:
        raise CorruptFileError(f"bit width {width} is outside 0..{t} for {t}-bit values")


def unpack_blocks(words: np.ndarray, width: int, t: int) -> np.ndarray:
    """Unpack ``words`` (shape ``blocks x (1024*W/T)``, dtype uT) to ``blocks x 1024`` uT."""
    dtype = word_dtype(t)
    _check_width(width, t)
    lanes = BLOCK // t
    words = np.asarray(words, dtype=dtype)
    nblocks = words.shape[0] if words.ndim == 2 else len(words) // max(1, width * lanes)
    if width == 0:
        return np.zeros((nblocks, BLOCK), dtype=dtype)
    words = words.reshape(-1, width, lanes)
    nblocks = len(words)
    out = np.empty((nblocks, BLOCK), dtype=dtype)
    idx = _row_index(t)
    if width == t:
        out[:, idx.reshape(-1)] = words.reshape(nblocks, width * lanes)
        return out
    # every row at once: row r starts at bit r*W of its lane, in word w0 at `shift`, and may
    # straddle into word w0+1 (tables cached per (W, T))
    w0, nxt, shift, back, straddle = _unpack_plan(width, t)
    val = words[:, w0, :] >> shift
    hi = words[:, nxt, :] << back
    val = np.where(straddle, val | hi, val) & dtype.type((1 << width) - 1)
    _scatter_rows(out, val, t)
    return out


def _scatter_rows(out: np.ndarray, val: np.ndarray, t: int) -> None:
    """``out[:, _row_index(t)] = val`` as one strided copy: output position
    ``(r % 8) * 128 + FL_ORDER[r // 8] * 16 + lane`` splits into axes (r % 8, slot, lane),
    so reorder the row groups into slot order and transpose (a fancy scatter of every
    value costs several times more)."""
    lanes = BLOCK // t
    groups = t // 8
    n = len(out)
    order = _slot_order(t)
    v = val.reshape(n, groups, 8, lanes)
    if groups > 1:
        v = v[:, order]
    out.reshape(n, 8, groups, lanes)[...] = v.transpose(0, 2, 1, 3)


_SLOT_ORDER: dict[int, np.ndarray] = {}


def _slot_order(t: int) -> np.ndarray:
    """The row groups (of 8 rows) in the order of their slots in a block."""
    order = _SLOT_ORDER.get(t)
    if order is None:
        slot = np.array(FL_ORDER)[: t // 8] * 16 // (BLOCK // t)
        order = _SLOT_ORDER[t] = np.argsort(slot)
    return order


def _gather_rows(values: np.ndarray, t: int) -> np.ndarray:
    """``values[:, _row_index(t)]`` (blocks x T x LANES) as one strided copy: the inverse
    of :func:`_scatter_rows`."""
    lanes = BLOCK // t
    groups = t // 8
    n = len(values)
    order = _slot_order(t)
    rows = np.empty((n, groups, 8, lanes), dtype=values.dtype)
    src = values.reshape(n, 8, groups, lanes).transpose(0, 2, 1, 3)
    if groups > 1:
        rows[:, order] = src
    else:
        rows[...] = src
    return rows.reshape(n, t, lanes)


_PLAN_CACHE: dict[tuple[int, int], tuple[np.ndarray, ...]] = {}


def _unpack_plan(width: int, t: int) -> tuple[np.ndarray, ...]:
    plan = _PLAN_CACHE.get((width, t))
    if plan is None:
        dtype = word_dtype(t)
        bit = np.arange(t) * width
        w0, shift = np.divmod(bit, t)
        nxt = np.minimum(w0 + 1, width - 1)
        plan = (
            w0,
            nxt,
            shift.astype(dtype)[:, None],
            ((t - shift) % t).astype(dtype)[:, None],
            (shift + width > t)[:, None],
        )
        _PLAN_CACHE[(width, t)] = plan
    return plan


def pack_blocks(values: np.ndarray, width: int, t: int) -> np.ndarray:
    """Pack ``blocks x 1024`` uT values to ``blocks x (1024*W/T)`` words (bits above W dropped)."""
    dtype = word_dtype(t)
    _check_width(width, t)
    lanes = BLOCK // t
    values = np.asarray(values, dtype=dtype).reshape(-1, BLOCK)
    nblocks = len(values)
    words = np.zeros((nblocks, width, lanes), dtype=dtype)
    if width == 0:
        return words.reshape(nblocks, 0)
    idx = _row_index(t)
    if width == t:
        # (fancy indexing along axis 1 may hand back a Fortran-ordered array)
        return np.ascontiguousarray(values[:, idx.reshape(-1)]).reshape(nblocks, width * lanes)
    mask = dtype.type((1 << width) - 1)
    rows = _gather_rows(values, t)
    for r in range(t):
        w0, shift = divmod(r * width, t)
        v = rows[:, r, :] & mask
        words[:, w0, :] |= v << dtype.type(shift)
        if shift + width > t:
            words[:, w0 + 1, :] |= v >> dtype.type(t - shift)
    return words.reshape(nblocks, width * lanes)


def bit_widths(values: np.ndarray, t: int) -> np.ndarray:
    """Bit length of the maximum of each row of ``values`` (shape ``blocks x n``)."""
    maxes = values.max(axis=1) if values.shape[1] else np.zeros(len(values), values.dtype)
    widths = np.zeros(len(maxes), dtype=np.int64)
    for k in range(t):
        widths += (maxes >> maxes.dtype.type(k)) != 0
    return widths


def _unpack_grouped(
    base: np.ndarray, data_starts: np.ndarray, widths: np.ndarray, t: int
) -> np.ndarray:
    """Unpack block ``i`` (width ``widths[i]``, bytes at ``base[data_starts[i]:]``) for all i,
    one group of equal widths at a time; returns ``blocks x 1024``."""
    dtype = word_dtype(t)
    out = np.zeros((len(widths), BLOCK), dtype=dtype)
    for width in np.unique(widths).tolist():
        if width == 0:
            continue
        sel = np.flatnonzero(widths == width)
        nbytes = 128 * width  # 1024 * W / 8
        raw = gather_ranges(base, data_starts[sel], np.full(len(sel), nbytes, dtype=np.int64))
        words = np.ascontiguousarray(raw).view(dtype).reshape(len(sel), -1)
        out[sel] = unpack_blocks(words, width, t)
    return out


def _keep_first(blocks: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Concatenate the first ``counts[i]`` values of each row of ``blocks``."""
    if len(counts) and (counts == BLOCK).all():
        return blocks.reshape(-1)
    keep = np.arange(BLOCK)[None, :] < counts[:, None]
    return blocks[keep]


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
    blocks = _unpack_grouped(chunks.base, starts + word, widths, t)
    return _keep_first(blocks, counts)


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
    blocks = _unpack_grouped(data, starts, widths, t)
    return blocks.reshape(-1)[:num_values]


_MAX_RUNS = 32  # more changes of width than this: pack by width group, scatter the bytes


def encode_inline_chunks(values: np.ndarray, t: int) -> tuple[np.ndarray, np.ndarray]:
    """Pack values in chunks of 1024 (the last zero-padded), each ``[W][packed]``.

    Returns ``(buffer, chunk_sizes)``: the concatenated chunks and each chunk's byte size.
    W per chunk is the bit length of its maximum (no zigzag, no frame of reference).
    """
    dtype = word_dtype(t)
    values = np.asarray(values, dtype=dtype)
    n = len(values)
    nblocks = -(-n // BLOCK)
    padded = np.zeros(nblocks * BLOCK, dtype=dtype)
    padded[:n] = values
    padded = padded.reshape(nblocks, BLOCK)
    widths = bit_widths(padded, t)
    word = t // 8
    sizes = word + 128 * widths
    offsets = np.cumsum(sizes) - sizes
    header = widths.astype(dtype)
    runs = np.flatnonzero(np.diff(widths)) + 1
    if len(runs) <= _MAX_RUNS:
        # consecutive blocks of one width form a (blocks x size) matrix of the output:
        # write it through a reshaped view (usual: widths change slowly along a column)
        out = np.empty(int(sizes.sum()), dtype=np.uint8)
        bounds = [0, *runs.tolist(), nblocks]
        for a, b in zip(bounds[:-1], bounds[1:], strict=True):
            width, start = int(widths[a]), int(offsets[a])
            size = word + 128 * width
            rows = out[start : start + (b - a) * size].reshape(b - a, size)
            rows[:, :word] = header[a:b].view(np.uint8).reshape(b - a, word)
            if width:
                rows[:, word:] = pack_blocks(padded[a:b], width, t).view(np.uint8)
        return out, sizes
    out = np.zeros(int(sizes.sum()), dtype=np.uint8)
    hdr_bytes = header.view(np.uint8).reshape(nblocks, word)
    out[(offsets[:, None] + np.arange(word)[None, :]).reshape(-1)] = hdr_bytes.reshape(-1)
    for width in np.unique(widths).tolist():
        if width == 0:
            continue
        sel = np.flatnonzero(widths == width)
        packed = pack_blocks(padded[sel], width, t).view(np.uint8)
        pos = offsets[sel][:, None] + word + np.arange(128 * width)[None, :]
        out[pos.reshape(-1)] = packed.reshape(-1)
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
    dtype = word_dtype(t)
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
    total = int(counts.sum())
    out_start = np.cumsum(counts) - counts
    out = np.zeros(total, dtype=dtype)
    nb = int(nblocks.sum())
    if nb:
        chunk_of = np.repeat(np.arange(len(counts)), nblocks)
        first = np.cumsum(nblocks) - nblocks
        j = np.arange(nb) - first[chunk_of]
        block_starts = starts[chunk_of] + j * wpb * word
        if width == 0:
            blocks = np.zeros((nb, BLOCK), dtype=dtype)
        else:
            blocks = _unpack_grouped(
                chunks.base, block_starts, np.full(nb, width, dtype=np.int64), t
            )
        # values held in each block: 1024, except a padded tail block
        keep_n = np.where(j < nfull[chunk_of], BLOCK, tail[chunk_of])
        dest0 = out_start[chunk_of] + j * BLOCK
        keep = np.arange(BLOCK)[None, :] < keep_n[:, None]
        dest = (dest0[:, None] + np.arange(BLOCK)[None, :])[keep]
        out[dest] = blocks[keep]
    if raw_tail.any():
        sel = np.flatnonzero(raw_tail)
        raw = gather_ranges(chunks.base, starts[sel] + nfull[sel] * wpb * word, tail[sel] * word)
        dest = gather_ranges(
            np.arange(total, dtype=np.int64), out_start[sel] + nfull[sel] * BLOCK, tail[sel]
        )
        out[dest] = np.ascontiguousarray(raw).view(dtype)
    return out


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
        blocks = np.zeros((nb, BLOCK), dtype=dtype)
        keep = np.arange(BLOCK)[None, :] < take[:, None]
        blocks[keep] = values[(src[:, None] + np.arange(BLOCK)[None, :])[keep]]
        packed = pack_blocks(blocks, width, t)  # nb x wpb
        dest = out_start[owner] + j * wpb
        out[(dest[:, None] + np.arange(wpb)[None, :]).reshape(-1)] = packed.reshape(-1)
    if raw_tail.any():
        sel = np.flatnonzero(raw_tail)
        src = gather_ranges(values, starts[sel] + nfull[sel] * BLOCK, raw_tail[sel])
        dest = gather_ranges(
            np.arange(len(out), dtype=np.int64), out_start[sel] + nfull[sel] * wpb, raw_tail[sel]
        )
        out[dest] = src
    return out.view(np.uint8), words * (t // 8)
