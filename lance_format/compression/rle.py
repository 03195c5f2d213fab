"""Run-length encoding (docs/format/compression.md).

* **Mini-block**: two value buffers per chunk, the run values (native width) and one u8
  run length per value.  Runs longer than 255 are split into several runs.
* **Block** (2.2, rep/def levels and constant pages): ``u64 values_byte_len``, the run
  values, then one u8 run length per value to the end of the buffer.  Example:
  ``0a00000000000000 | 0100 x5 | ff ff ff ff 04`` is 1024 ones.

Decoding runs in one compiled kernel over all runs of all chunks.
"""

from __future__ import annotations

import numpy as np

from ..errors import CorruptFileError, UnsupportedError
from ..jit import kernel, readonly
from .blocks import ChunkRanges, FixedWidthBlock, gather_ranges

MAX_RUN = 255
MAX_CHUNK_BYTES = 4096
MAX_CHUNK_VALUES = 4096


def _bytes_per_value(bits: int) -> int:
    if bits <= 0 or bits % 8:
        raise UnsupportedError(f"RLE of {bits}-bit values")
    return bits // 8


def _expand(
    base: np.ndarray,
    value_starts: np.ndarray,
    length_starts: np.ndarray,
    nruns: np.ndarray,
    counts: np.ndarray,
    width: int,
) -> np.ndarray:
    """Repeat the runs of every chunk: chunk c has ``nruns[c]`` run values of ``width``
    bytes at ``base[value_starts[c]:]`` and as many u8 run lengths at
    ``base[length_starts[c]:]``, and keeps its first ``counts[c]`` values (extra is
    dropped, as the reference decoder does; too few is corruption).  Returns the bytes."""
    # the run values gathered into words of the widest type dividing the value width
    word = next(w for w in (8, 4, 2, 1) if width % w == 0)
    values = np.ascontiguousarray(gather_ranges(base, value_starts, nruns * width)).copy()
    lengths = gather_ranges(base, length_starts, nruns)
    out = np.empty(int(counts.sum()) * width // word, dtype=f"<u{word}")
    ok = _repeat_runs(
        readonly(values.view(f"<u{word}")),
        width // word,
        readonly(np.ascontiguousarray(lengths, dtype=np.uint8)),
        readonly(np.ascontiguousarray(nruns, dtype=np.int64)),
        readonly(np.ascontiguousarray(counts, dtype=np.int64)),
        out,
    )
    if not ok:
        raise CorruptFileError("RLE runs hold fewer values than the chunk says")
    return out.view(np.uint8)


@kernel(
    *[
        f"b1(ro({u}[::1]), i8, ro(u1[::1]), ro(i8[::1]), ro(i8[::1]), {u}[::1])"
        for u in ("u1", "u2", "u4", "u8")
    ]
)
def _repeat_runs(values, words, lengths, nruns, counts, out):  # pragma: no cover - compiled
    """Runs of values of ``words`` words each, chunk after chunk."""
    at = 0
    run = 0
    for c in range(len(counts)):
        left = counts[c]
        for r in range(run, run + nruns[c]):
            times = min(np.int64(lengths[r]), left)
            if words == 1:
                out[at : at + times] = values[r]
            else:
                for _ in range(times):
                    out[at : at + words] = values[r * words : (r + 1) * words]
                    at += words
                at -= times * words
            at += times * words
            left -= times
        run += nruns[c]
        if left:
            return False
    return True


def decode_chunks(
    values: ChunkRanges, run_lengths: ChunkRanges, counts: np.ndarray, bits: int
) -> FixedWidthBlock:
    """Decode the two RLE buffers of many mini-block chunks into one block."""
    width = _bytes_per_value(bits)
    counts = np.asarray(counts, dtype=np.int64)
    vlen = np.asarray(values.lengths, dtype=np.int64)
    rlen = np.asarray(run_lengths.lengths, dtype=np.int64)
    if (vlen % width).any() or (vlen // width != rlen).any():
        raise CorruptFileError("RLE chunk has a different number of run values and run lengths")
    if (values.starts + vlen > len(values.base)).any() or (
        run_lengths.starts + rlen > len(run_lengths.base)
    ).any():
        raise CorruptFileError("RLE chunk buffers run past their data")
    if values.base is run_lengths.base:
        base, vstarts, lstarts = values.base, values.starts, run_lengths.starts
    else:  # both buffers of a chunk live in one base in practice; join them otherwise
        base = np.concatenate([values.base, run_lengths.base])
        vstarts, lstarts = values.starts, run_lengths.starts + len(values.base)
    data = _expand(base, vstarts, lstarts, rlen, counts, width)
    return FixedWidthBlock(data, bits, int(counts.sum()))


def decode_block(data: np.ndarray, num_values: int, bits: int) -> FixedWidthBlock:
    """Decode the 2.2 block form ``[u64 values_byte_len][values][u8 run lengths]``."""
    width = _bytes_per_value(bits)
    if len(data) < 8:
        raise CorruptFileError(f"block RLE buffer of {len(data)} bytes has no length prefix")
    vbytes = int.from_bytes(data[:8].tobytes(), "little")
    if vbytes % width or vbytes > len(data) - 8:
        raise CorruptFileError(f"block RLE values length {vbytes} is invalid")
    nruns = vbytes // width
    lens = data[8 + vbytes :]
    if len(lens) != nruns:
        raise CorruptFileError(f"block RLE has {nruns} run values but {len(lens)} run lengths")
    one = np.ones(1, dtype=np.int64)
    out = _expand(data, 8 * one, (8 + vbytes) * one, nruns * one, num_values * one, width)
    return FixedWidthBlock(out, bits, num_values)


def decode_block_chunks(chunks: ChunkRanges, counts: np.ndarray, bits: int) -> FixedWidthBlock:
    """Decode many independent block-form buffers (e.g. the def levels of every mini-block
    chunk) at once; buffer i holds ``counts[i]`` values."""
    width = _bytes_per_value(bits)
    counts = np.asarray(counts, dtype=np.int64)
    starts = np.asarray(chunks.starts, dtype=np.int64)
    lengths = np.asarray(chunks.lengths, dtype=np.int64)
    if (lengths < 8).any() or (starts + lengths > len(chunks.base)).any():
        raise CorruptFileError("a block RLE buffer is truncated")
    prefix = gather_ranges(chunks.base, starts, np.full(len(starts), 8, dtype=np.int64))
    vbytes = np.ascontiguousarray(prefix).view("<u8").astype(np.int64)
    nruns = vbytes // width
    if (vbytes < 0).any() or (vbytes % width).any() or (lengths - 8 - vbytes != nruns).any():
        raise CorruptFileError("block RLE values and run lengths do not match")
    data = _expand(chunks.base, starts + 8, starts + 8 + vbytes, nruns, counts, width)
    return FixedWidthBlock(np.ascontiguousarray(data), bits, int(counts.sum()))


# -- encoder ---------------------------------------------------------------------------------


_WORDS = ("u1", "u2", "u4", "u8")


@kernel(*(f"i8(ro({w}[::1]), {w}[::1], u1[::1])" for w in _WORDS))
def _word_runs(values, out_values, out_lengths):  # pragma: no cover - compiled
    """Runs of equal words split at :data:`MAX_RUN`: each piece's value and length, in
    order; returns the number of pieces (``out_*`` hold one per value at most)."""
    n = len(values)
    count = 0
    i = 0
    while i < n:
        v = values[i]
        j = i + 1
        while j < n and j - i < MAX_RUN and values[j] == v:
            j += 1
        out_values[count] = v
        out_lengths[count] = j - i
        count += 1
        i = j
    return count


def _words(rows: np.ndarray) -> np.ndarray | None:
    """The rows as one native word each (1, 2, 4 or 8 bytes), else None."""
    width = rows.shape[1]
    if width not in (1, 2, 4, 8):
        return None
    return readonly(np.ascontiguousarray(rows).view(f"<u{width}").reshape(-1))


def run_pieces(rows: np.ndarray) -> int:
    """Runs of equal rows (``rows`` is ``n x B`` bytes), each split at 255: the run
    count RLE stores."""
    return len(encode_runs(rows)[1])


def encode_runs(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Runs of equal rows (``rows`` is ``n x B`` bytes), split at 255.

    Returns ``(run_values n_runs x B, run_lengths uint8)``.
    """
    n = len(rows)
    if n == 0:
        return rows[:0], np.zeros(0, dtype=np.uint8)
    words = _words(rows)
    if words is not None:  # one compiled pass
        out_values = np.empty(n, dtype=words.dtype)
        out_lengths = np.empty(n, dtype=np.uint8)
        count = _word_runs(words, out_values, out_lengths)
        values, lengths = out_values[:count], out_lengths[:count]
        if 2 * count < n:  # a page of long runs keeps no page-sized buffers alive
            values, lengths = values.copy(), lengths.copy()
        return values.view(np.uint8).reshape(count, -1), lengths
    change = _changes(rows)
    starts = np.flatnonzero(change)
    lengths = np.diff(np.append(starts, n))
    pieces = -(-lengths // MAX_RUN)
    run_idx = np.repeat(np.arange(len(starts)), pieces)
    piece_no = np.arange(len(run_idx)) - np.repeat(np.cumsum(pieces) - pieces, pieces)
    piece_len = np.minimum(lengths[run_idx] - piece_no * MAX_RUN, MAX_RUN)
    return rows[starts[run_idx]], piece_len.astype(np.uint8)


def rows_of(block: FixedWidthBlock) -> np.ndarray:
    width = _bytes_per_value(block.bits_per_value)
    return np.asarray(block.data[: block.num_values * width]).reshape(-1, width)


def _changes(rows: np.ndarray) -> np.ndarray:
    """Where each row differs from the one before (the first row always counts)."""
    n, width = rows.shape
    change = np.ones(n, dtype=bool)
    if n > 1 and width in (1, 2, 4, 8):  # compare whole values, not byte columns
        vals = np.ascontiguousarray(rows).view(f"<u{width}").reshape(-1)
        np.not_equal(vals[1:], vals[:-1], out=change[1:])
    elif n > 1:
        change[1:] = (rows[1:] != rows[:-1]).any(axis=1)
    return change


def _run_bounds(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start of every run of equal rows, and the cumulative number of 255-value pieces of
    the runs before it (``n_runs + 1`` entries), computed once per page."""
    n, width = rows.shape
    change = _changes(rows)
    starts = np.flatnonzero(change)
    lengths = np.diff(np.append(starts, n))
    pieces = np.zeros(len(starts) + 1, dtype=np.int64)
    np.cumsum(-(-lengths // MAX_RUN), out=pieces[1:])
    return starts, pieces


def plan_chunks(block: FixedWidthBlock, max_bytes: int = MAX_CHUNK_BYTES) -> np.ndarray:
    """Values per mini-block chunk: the largest power of two (at most 4096) whose runs fit
    in ``max_bytes``; the last chunk takes the rest when it fits.

    A chunk ``[a, b)`` costs ``(width + 1)`` bytes per run piece.  The runs are found once
    for the page; the piece count of any range is then two bisections into the run starts,
    the cumulative pieces of the whole runs inside, and the pieces of the two cut runs at
    the ends.  The greedy walk over chunks is sequential; each chunk's size search starts
    from the previous chunk's size, so it usually takes two probes.
    """
    rows = rows_of(block)
    width = rows.shape[1]
    n = len(rows)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    max_pieces = max_bytes // (width + 1)  # cost <= max_bytes  <=>  pieces <= max_pieces
    run_starts, run_pieces = _run_bounds(rows)
    out = np.empty(n, dtype=np.int64)
    count = _plan(
        readonly(np.ascontiguousarray(run_starts, dtype=np.int64)),
        readonly(run_pieces),
        n,
        max_pieces,
        out,
    )
    return out[:count].copy()


@kernel()
def _last_at_most(starts, value, lo):  # pragma: no cover - compiled
    """The last index ``i >= lo`` with ``starts[i] <= value`` (``starts`` ascending and
    ``starts[lo] <= value``): ``bisect_right(starts, value, lo) - 1``."""
    hi = len(starts)
    while lo < hi:
        mid = (lo + hi) // 2
        if starts[mid] <= value:
            lo = mid + 1
        else:
            hi = mid
    return lo - 1


@kernel()
def _pieces(starts, cum, n, a, b):  # pragma: no cover - compiled
    """Run pieces (runs split at 255) of values ``[a, b)``, ``a < b``."""
    ra = _last_at_most(starts, a, 0)
    rb = _last_at_most(starts, b - 1, ra)
    if ra == rb:
        return (b - a + MAX_RUN - 1) // MAX_RUN
    end_a = starts[ra + 1] if ra + 1 < len(starts) else n
    head = (end_a - a + MAX_RUN - 1) // MAX_RUN
    tail = (b - starts[rb] + MAX_RUN - 1) // MAX_RUN
    return head + cum[rb] - cum[ra + 1] + tail


@kernel("i8(ro(i8[::1]), ro(i8[::1]), i8, i8, i8[::1])")
def _plan(starts, cum, n, max_pieces, out):  # pragma: no cover - compiled
    """The greedy walk of :func:`plan_chunks`; returns the number of chunks."""
    count = 0
    pos = 0
    k = 1
    while pos < n:
        rest = n - pos
        if rest <= MAX_CHUNK_VALUES and _pieces(starts, cum, n, pos, n) <= max_pieces:
            out[count] = rest
            count += 1
            break
        # a non-last chunk leaves at least one value behind (the reference loop's `2k < rest`)
        limit = min(rest - 1, MAX_CHUNK_VALUES)
        top = 1
        while top * 2 <= limit:
            top *= 2
        k = min(k, top)
        if _pieces(starts, cum, n, pos, pos + k) <= max_pieces:
            while k < top and _pieces(starts, cum, n, pos, pos + 2 * k) <= max_pieces:
                k *= 2
        else:
            while k > 1:
                k >>= 1
                if _pieces(starts, cum, n, pos, pos + k) <= max_pieces:
                    break
        out[count] = k
        count += 1
        pos += k
    return count


def encode_page(
    block: FixedWidthBlock, max_bytes: int = MAX_CHUNK_BYTES
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`plan_chunks` then :func:`encode_chunks`: ``(counts, values_buffer,
    run_lengths_buffer, values_sizes, run_lengths_sizes)``.

    A page whose runs fit one chunk (small appends) is that chunk, as the plan's first
    step decides: its runs are found once, not planned and then encoded.
    """
    rows = rows_of(block)
    n, width = rows.shape
    if 0 < n <= MAX_CHUNK_VALUES:
        values, lengths = encode_runs(rows)
        runs = len(lengths)
        if runs <= max_bytes // (width + 1):
            sizes = np.array([runs * width], dtype=np.int64)
            return (
                np.array([n], dtype=np.int64),
                values.reshape(-1),
                lengths,
                sizes,
                np.array([runs], dtype=np.int64),
            )
    counts = plan_chunks(block, max_bytes)
    return (counts, *encode_chunks(block, counts))


def encode_chunks(
    block: FixedWidthBlock, counts: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Mini-block form for the given values per chunk (runs never cross a chunk).

    Returns ``(values_buffer, run_lengths_buffer, values_sizes, run_lengths_sizes)``.
    """
    rows = rows_of(block)
    width = rows.shape[1]
    counts = np.asarray(counts, dtype=np.int64)
    n = len(rows)
    chunk_of = np.repeat(np.arange(len(counts)), counts)
    change = _changes(rows)
    if n:
        change[1:] |= chunk_of[1:] != chunk_of[:-1]
    starts = np.flatnonzero(change)
    lengths = np.diff(np.append(starts, n))
    pieces = -(-lengths // MAX_RUN)
    run_idx = np.repeat(np.arange(len(starts)), pieces)
    piece_no = np.arange(len(run_idx)) - np.repeat(np.cumsum(pieces) - pieces, pieces)
    piece_len = np.minimum(lengths[run_idx] - piece_no * MAX_RUN, MAX_RUN)
    run_chunk = chunk_of[starts[run_idx]] if n else np.zeros(0, dtype=np.int64)
    runs_per_chunk = np.bincount(run_chunk, minlength=len(counts)).astype(np.int64)
    values = rows[starts[run_idx]].reshape(-1)
    return values, piece_len.astype(np.uint8), runs_per_chunk * width, runs_per_chunk


def encode_block(block: FixedWidthBlock) -> np.ndarray:
    """The 2.2 block form."""
    run_vals, run_lens = encode_runs(rows_of(block))
    vbytes = run_vals.reshape(-1)
    prefix = np.array([len(vbytes)], dtype="<u8").view(np.uint8)
    return np.concatenate([prefix, vbytes, run_lens])


def encode_blocks(block: FixedWidthBlock, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The 2.2 block form of each run of ``counts[i]`` values, back to back, in one
    compiled pass (a page's levels have one block per chunk).  Returns ``(bytes, size of
    each block)``; each block is what :func:`encode_block` makes of its values."""
    counts = np.asarray(counts, dtype=np.int64)
    width = _bytes_per_value(block.bits_per_value)
    n = int(counts.sum())
    data = np.ascontiguousarray(np.asarray(block.data[: n * width]), dtype=np.uint8)
    if len(data) < n * width:
        raise UnsupportedError(f"{n} values need {n * width} bytes, the block has {len(data)}")
    # at most one run per value: its bytes and a length, plus each block's u64 prefix
    out = np.empty(n * (width + 1) + 8 * len(counts), dtype=np.uint8)
    sizes = np.empty(len(counts), dtype=np.int64)
    change = _changes(data.reshape(n, width))  # vectorised: a whole-value compare
    total = _encode_blocks(readonly(data), width, readonly(counts), readonly(change), out, sizes)
    return out[:total], sizes


@kernel("i8(ro(u1[::1]), i8, ro(i8[::1]), ro(b1[::1]), u1[::1], i8[::1])")
def _encode_blocks(data, width, counts, change, out, sizes):  # pragma: no cover - compiled
    """Per block of ``counts[c]`` values: a u64 of its run values' bytes, the value of each
    run (runs of equal values, split at :data:`MAX_RUN`; ``change[i]``: value ``i`` differs
    from the one before), then each run's length.  A first walk counts the runs (so the
    lengths' place is known), a second writes them."""
    o = 0
    pos = 0
    for c in range(len(counts)):
        end = pos + counts[c]
        runs = 0
        i = pos
        while i < end:
            j = i + 1
            while j < end and j - i < MAX_RUN and not change[j]:
                j += 1
            runs += 1
            i = j
        value_bytes = runs * width
        for k in range(8):
            out[o + k] = (value_bytes >> (8 * k)) & 0xFF
        at = o + 8
        lengths_at = at + value_bytes
        r = 0
        i = pos
        while i < end:
            j = i + 1
            while j < end and j - i < MAX_RUN and not change[j]:
                j += 1
            for k in range(width):
                out[at + r * width + k] = data[i * width + k]
            out[lengths_at + r] = j - i
            r += 1
            i = j
        sizes[c] = 8 + value_bytes + runs
        o += sizes[c]
        pos = end
    return o
