"""Point lookups that decode only what they need: the wanted values of the chunks or rows
holding them, for pages without lists.

A take of a few rows needs one value per row out of mini-block chunks of ~1,000.  The
general mini-block path decodes whole chunks through the codec pipeline, a few dozen numpy
calls per column and page, which is most of a point lookup's time.  Here a plan made once
per page (where the chunks are, the chunk header layout, the value codec and its
parameters) drives one compiled pass that reads each wanted value straight out of the chunk
bytes: the header fields, the bit-unpacking of one value, the run holding a row, the bytes
of one string, the def level of a nullable row.  Full-zip pages of fixed-width values read
exactly the wanted rows.  Plans also say which byte ranges a take needs, so that a file
reader fetches the chunks of all its columns in one request set.  Pages without a plan
(general compression, byte-stream split, fixed-size lists in mini-blocks,
packed structs, lists, constant pages) keep the general path.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..compression import fsst
from ..compression.bitpacking import FL_ORDER
from ..compression.blocks import Block, FixedWidthBlock, VariableWidthBlock, gather_ranges
from ..compression.dictionary import VariableItems
from ..errors import CorruptFileError
from ..jit import kernel, readonly
from .fullzip import FullZipPage
from .leaf import LeafPiece
from .miniblock import MiniBlockMeta, MiniBlockPage

# chunks of a column closer than this are read in one range, gap included: copying 16 KiB
# costs less than one more request (a system call locally, a round trip remotely)
GAP = 16 * 1024
# value codecs with a point decoder, RLE's block form (def levels: a u64 size first) and
# OutOfLineBitpacking of u16 def levels (what pylance writes for a nullable column)
FLAT, BITPACK, RLE, VARIABLE, RLE_BLOCK, OUT_OF_LINE = 0, 1, 2, 3, 4, 5
BITS = 6  # Flat1: booleans, an LSB-first bitmap in and out


def _inverse_fastlanes(t: int) -> tuple[np.ndarray, np.ndarray]:
    """For each of the 1024 values of a FastLanes block of T-bit words: its row in the
    lane's bit stream and its lane (the inverse of the transposed order)."""
    lanes = 1024 // t
    rows = np.empty(1024, dtype=np.int64)
    lane_of = np.empty(1024, dtype=np.int64)
    for r in range(t):
        o = FL_ORDER[r // 8] * 16 + (r % 8) * 128
        rows[o : o + lanes] = r
        lane_of[o : o + lanes] = np.arange(lanes)
    return readonly(rows), readonly(lane_of)


_INVERSE = {t: _inverse_fastlanes(t) for t in (8, 16, 32, 64)}


@dataclass
class PointPlan:
    """How to read single values of one mini-block page (built once per page)."""

    data_start: int  # file offset of the chunk buffer
    meta: MiniBlockMeta
    chunk_first_row: np.ndarray  # page row of each chunk's first value
    level_fields: int  # u16 level-size fields in the chunk header (1: the def levels')
    has_def: bool
    def_kind: int  # RLE_BLOCK, FLAT (u16) or OUT_OF_LINE, when has_def
    def_bits: int  # packed width W of OUT_OF_LINE def levels
    num_buffers: int
    size_word: int  # bytes of a value buffer size in the header
    kind: int  # FLAT, BITPACK, RLE or VARIABLE
    width: int  # bytes per value (FLAT, RLE), word bytes (BITPACK), offset bytes (VARIABLE)
    bits: int  # bits per decoded value (fixed kinds) or per offset (VARIABLE)
    table: fsst.SymbolTable | None  # FSST symbols applied after VARIABLE

    def locate(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Chunks holding the (sorted, unique, page-relative) rows: the distinct chunk
        ids, each row's position among them and its value index inside its chunk."""
        chunk = self.meta.completed.searchsorted(rows, side="right")
        if chunk.size and chunk[-1] >= self.meta.completed.size:
            raise CorruptFileError("row is beyond the last mini-block chunk")
        within = rows - self.chunk_first_row[chunk]
        if chunk.size == 1:
            return chunk, np.zeros(1, dtype=np.int64), within
        new = np.empty(len(chunk), dtype=bool)
        new[0] = True
        np.not_equal(chunk[1:], chunk[:-1], out=new[1:])
        return chunk[new], np.cumsum(new) - 1, within

    @property
    def nbytes(self) -> int:
        return self.meta.nbytes + self.chunk_first_row.nbytes + 200

    def plan(self, rows: np.ndarray) -> tuple[list[tuple[int, int]], tuple]:
        """The byte ranges a take of ``rows`` (sorted, unique, page-relative) reads, and
        what :meth:`decode` needs to find the rows in their bytes."""
        chunks, row_chunk, within = self.locate(rows)
        starts = self.meta.chunk_starts[chunks]
        sizes = self.meta.chunk_sizes[chunks]
        ranges, pos = merge_ranges(starts, sizes, self.data_start)
        return ranges, (sizes, pos, row_chunk, within)

    def decode(self, where: tuple, data: list[bytes]) -> LeafPiece:
        """The wanted values (and def levels) out of the chunks' bytes (``data``: the
        ranges of :meth:`plan`, whose chunks start at ``pos`` of their bytes laid end to
        end), in one compiled pass."""
        sizes, pos, row_chunk, within = where
        dictionary = self.meta.dictionary
        base = np.frombuffer(data[0] if len(data) == 1 else b"".join(data), np.uint8)
        if base.flags.writeable:  # bytes are read-only already
            base = readonly(base)
        n = within.size
        variable = self.kind == VARIABLE
        # values of distinct rows are distinct bytes of the chunks: len(base) bounds them
        if self.kind == BITS:
            out = np.zeros((n + 7) // 8, dtype=np.uint8)
        else:
            out = np.empty(base.size if variable else n * self.width, dtype=np.uint8)
        offsets = np.empty(n + 1 if variable else 1, dtype=np.int64)
        defs = np.empty(n if self.has_def else 0, dtype=np.uint16)
        rows, lanes = _INVERSE[8 * self.width if self.kind == BITPACK else 8]
        def_rows, def_lanes = _INVERSE[16]
        total = _take_values(
            base,
            pos,
            sizes,
            self.level_fields,
            self.num_buffers,
            self.size_word,
            row_chunk,
            within,
            self.kind,
            self.width,
            self.def_kind if self.has_def else -1,
            self.def_bits,
            rows,
            lanes,
            def_rows,
            def_lanes,
            out,
            offsets,
            defs,
        )
        if total < 0:
            raise CorruptFileError("a mini-block value lies outside its chunk")
        values: Block
        if variable:
            values = VariableWidthBlock(offsets, out[:total], self.bits)
            if self.table is not None:
                values = fsst.decompress(values, self.table)
        else:
            values = FixedWidthBlock(out, self.bits, n)
            if dictionary is not None:
                looked_up = self._lookup(values)
                if looked_up is not None:
                    values, dictionary = looked_up, None
        return LeafPiece(None, defs if self.has_def else None, n, values, n, dictionary)

    def _lookup(self, indices: FixedWidthBlock) -> Block | None:
        """The dictionary items of ``indices`` as a block, by the dictionary's compiled
        expansion (Arrow's take costs more than a point lookup's whole decode); None for
        a dictionary kept as Arrow (booleans, nested, ...)."""
        items = self.meta.items
        if items is None or indices.bits_per_value not in (8, 16, 32, 64):
            return None
        idx = indices.data.view(f"<u{indices.bits_per_value // 8}")[: indices.num_values]
        if isinstance(items, VariableItems):
            offsets, data = items.expand(idx, None)
            return VariableWidthBlock(offsets, data, 8 * offsets.itemsize)
        return FixedWidthBlock(items.expand(idx, None), items.width * 8, len(idx))


def merge_ranges(
    starts: np.ndarray, sizes: np.ndarray, data_start: int
) -> tuple[list[tuple[int, int]], np.ndarray]:
    """File byte ranges holding the pieces ``[starts, starts + sizes)`` of a buffer at
    ``data_start`` (ascending; pieces closer than GAP bytes share a range, gap included),
    and where each piece starts in the ranges' bytes laid end to end."""
    if starts.size == 1:
        return [(int(starts[0]) + data_start, int(sizes[0]))], np.zeros(1, dtype=np.int64)
    ends = starts + sizes
    new = np.empty(len(starts), dtype=bool)
    new[0] = True
    np.greater(starts[1:], ends[:-1] + GAP, out=new[1:])
    first = np.flatnonzero(new)
    g_start = starts[first]
    g_len = np.append(ends[first[1:] - 1], ends[-1]) - g_start
    group = np.cumsum(new) - 1
    pos = (np.cumsum(g_len) - g_len - g_start)[group] + starts
    offsets = (g_start + data_start).tolist()
    return list(zip(offsets, g_len.tolist(), strict=True)), pos


@dataclass
class FullZipPoint:
    """Point lookups in a full-zip page of fixed-width values without lists: row ``r`` is
    the ``stride`` bytes at ``r * stride`` (its control word, then its value), so a take
    reads exactly its rows, neighbours sharing a read."""

    page: FullZipPage

    nbytes = 100

    def plan(self, rows: np.ndarray) -> tuple[list[tuple[int, int]], tuple]:
        stride = self.page.stride
        assert stride is not None  # a page without a repetition index
        sizes = np.full(len(rows), stride, dtype=np.int64)
        ranges, pos = merge_ranges(rows * stride, sizes, int(self.page.page.buffers[0][0]))
        return ranges, (pos, sizes)

    def decode(self, where: tuple, data: list[bytes]) -> LeafPiece:
        pos, sizes = where
        base = np.frombuffer(data[0] if len(data) == 1 else b"".join(data), np.uint8)
        n = len(pos)
        if len(base) != n * self.page.stride:  # neighbours read with the gaps between them
            base = gather_ranges(base, pos, sizes)
        return self.page.fixed_rows_piece(base.reshape(n, -1))


def point_plan(dec, meta) -> PointPlan | FullZipPoint | None:
    """The point-lookup plan of a page, or None when the page needs the general path (a
    layout or codec without a point decoder, lists)."""
    if type(dec) is FullZipPage:
        return FullZipPoint(dec) if dec.max_rep == 0 and dec.stride is not None else None
    if type(dec) is not MiniBlockPage:
        return None
    if dec.max_rep or dec.has_rep or dec.rep_index_depth:
        return None
    def_kind = def_bits = 0
    if dec.has_def:
        enc = dec.layout.def_compression
        k = enc.WhichOneof("compression")
        if k == "flat" and enc.flat.bits_per_value == 16:
            def_kind = FLAT
        elif (
            k == "rle" and _flat_bits(enc.rle.values) == 16 and _flat_bits(enc.rle.run_lengths) == 8
        ):
            def_kind = RLE_BLOCK
        elif (
            k == "out_of_line_bitpacking"
            and enc.out_of_line_bitpacking.uncompressed_bits_per_value == 16
            and 0 <= (def_bits := _flat_bits(enc.out_of_line_bitpacking.values)) <= 16
        ):
            def_kind = OUT_OF_LINE
        else:
            return None
    codec = _value_codec(dec.layout.value_compression)
    if codec is None:
        return None
    kind, width, bits, table = codec
    if (kind == RLE) != (dec.num_buffers == 2) or dec.num_buffers not in (1, 2):
        return None
    values = meta.chunk_values
    return PointPlan(
        data_start=int(dec.page.buffers[1][0]),
        meta=meta,
        chunk_first_row=meta.completed - values,
        level_fields=int(dec.has_def),
        has_def=dec.has_def,
        def_kind=def_kind,
        def_bits=def_bits,
        num_buffers=dec.num_buffers,
        size_word=4 if dec.large else 2,
        kind=kind,
        width=width,
        bits=bits,
        table=table,
    )


def _flat_bits(enc) -> int:
    return int(enc.flat.bits_per_value) if enc.WhichOneof("compression") == "flat" else -1


def _value_codec(enc) -> tuple[int, int, int, fsst.SymbolTable | None] | None:
    kind = enc.WhichOneof("compression")
    if kind == "flat":
        bits = int(enc.flat.bits_per_value)
        if bits == 1:
            return BITS, 1, 1, None
        return (FLAT, bits // 8, bits, None) if bits in (8, 16, 32, 64, 128) else None
    if kind == "inline_bitpacking":
        t = int(enc.inline_bitpacking.uncompressed_bits_per_value)
        return (BITPACK, t // 8, t, None) if t in _INVERSE else None
    if kind == "rle":
        bits = _flat_bits(enc.rle.values)
        if bits not in (8, 16, 32, 64, 128) or _flat_bits(enc.rle.run_lengths) != 8:
            return None
        return RLE, bits // 8, bits, None
    if kind == "variable":
        bits = _flat_bits(enc.variable.offsets)
        return (VARIABLE, bits // 8, bits, None) if bits in (32, 64) else None
    if kind == "fsst":
        inner = _value_codec(enc.fsst.values)
        if inner is None or inner[0] != VARIABLE:
            return None
        return VARIABLE, inner[1], inner[2], fsst.parse_symbol_table(enc.fsst.symbol_table)
    return None


# -- kernels ---------------------------------------------------------------------------------


@kernel()
def _uint_at(base, pos, width):  # pragma: no cover - compiled
    """The little-endian unsigned integer of ``width`` (1..8) bytes at ``base[pos]``."""
    value = np.uint64(0)
    for k in range(width):
        value |= np.uint64(base[pos + k]) << np.uint64(8 * k)
    return value


@kernel()
def _buffer(base, p, end, level_fields, nbuf, size_word, f):  # pragma: no cover - compiled
    """(start, size) of buffer ``f`` (level buffers first, then value buffers) of the chunk
    at ``base[p:end]``, from its header; (-1, 0) when the header or buffer overflows."""
    header = 2 + 2 * level_fields + size_word * nbuf
    if p + header > end:
        return -1, 0
    at = p + ((header + 7) & ~7)
    for k in range(f + 1):
        if k < level_fields:
            size = np.int64(_uint_at(base, p + 2 + 2 * k, 2))
        else:
            off = p + 2 + 2 * level_fields + size_word * (k - level_fields)
            size = np.int64(_uint_at(base, off, size_word))
        if k == f:
            if at + size > end:
                return -1, 0
            return at, size
        at += (size + 7) & ~7
    return -1, 0


@kernel()
def _run_of(base, lstart, nruns, run, seen, j):  # pragma: no cover - compiled
    """Advance (run, values before it) to the run holding value ``j``; run == nruns when
    the runs end first."""
    while run < nruns and seen + np.int64(base[lstart + run]) <= j:
        seen += np.int64(base[lstart + run])
        run += 1
    return run, seen


@kernel()
def _unpack_one(base, at, j, w, width, fl_rows, fl_lanes):  # pragma: no cover - compiled
    """Value ``j`` of the FastLanes block of ``width``-byte words packed to ``w`` bits at
    ``base[at]``: row ``fl_rows[j]`` of lane ``fl_lanes[j]``, whose bits start in word
    ``(r * w // T) * LANES + lane`` and may run into the lane's next word."""
    if w == 0:
        return np.uint64(0)
    t = 8 * width
    lanes = 1024 // t
    bit = fl_rows[j] * w
    shift = bit % t
    at += ((bit // t) * lanes + fl_lanes[j]) * width
    v = _uint_at(base, at, width) >> np.uint64(shift)
    if shift + w > t:
        v |= _uint_at(base, at + lanes * width, width) << np.uint64(t - shift)
    return v & (np.uint64(0xFFFFFFFFFFFFFFFF) >> np.uint64(64 - w))


@kernel(
    "i8(ro(u1[::1]), i8[::1], i8[::1], i8, i8, i8, i8[::1], i8[::1], i8, i8, i8, i8, "
    "ro(i8[::1]), ro(i8[::1]), ro(i8[::1]), ro(i8[::1]), u1[::1], i8[::1], u2[::1])"
)
def _take_values(
    base,
    pos,
    sizes,
    level_fields,
    nbuf,
    size_word,
    row_chunk,
    within,
    kind,
    width,
    def_kind,
    def_bits,
    fl_rows,
    fl_lanes,
    def_fl_rows,
    def_fl_lanes,
    out,
    offsets,
    defs,
):  # pragma: no cover - compiled
    """Value ``within[i]`` of chunk ``row_chunk[i]`` for every wanted row (chunk ``c`` is
    ``base[pos[c]:][:sizes[c]]``; rows come in order), and its def level
    when ``def_kind >= 0``.  Fixed kinds write ``width`` bytes per row to ``out``;
    VARIABLE writes the bytes end to end with ``offsets``.  Returns the bytes written, or
    -1 when a value or buffer lies outside its chunk.

    * FLAT: value ``j`` is ``width`` bytes at ``j * width``;
    * BITPACK: ``[W][1024 values packed to W bits, FastLanes order]``; value ``j`` is row
      ``fl_rows[j]`` of lane ``fl_lanes[j]``, whose bits start in word
      ``(r * W // T) * LANES + lane`` and may run into the lane's next word;
    * RLE: run values, one u8 length per run in the next buffer (def levels: the block
      form, a u64 values size, the values, the lengths); a chunk's runs are walked once;
    * OUT_OF_LINE def levels: 1024-level blocks of u16 packed to ``def_bits`` (no width
      word), the last partial block either padded or raw u16 (told apart by the size);
    * VARIABLE: the chunk starts with its values' offsets, relative to the chunk;
    * BITS: value ``j`` is bit ``j`` (LSB first), written as bit ``i`` of ``out``.
    """
    prev = -1
    vstart = vsize = lstart = nruns = run = seen = 0
    dstart = dsize = dlstart = dnruns = drun = dseen = 0
    dcount = dfull = dwords = 0
    draw = False
    written = 0
    t = 8 * width
    offsets[0] = 0
    for i in range(len(row_chunk)):
        c = row_chunk[i]
        j = within[i]
        if c != prev:
            prev = c
            p = pos[c]
            end = p + sizes[c]
            if p < 0 or end > len(base):
                return -1
            vstart, vsize = _buffer(base, p, end, level_fields, nbuf, size_word, level_fields)
            if vstart < 0:
                return -1
            if kind == RLE:
                lstart, lsize = _buffer(
                    base, p, end, level_fields, nbuf, size_word, level_fields + 1
                )
                if lstart < 0 or vsize % width or lsize != vsize // width:
                    return -1
                nruns, run, seen = vsize // width, 0, 0
            if def_kind >= 0:  # the def buffer is the last level buffer
                dstart, dsize = _buffer(
                    base, p, end, level_fields, nbuf, size_word, level_fields - 1
                )
                if dstart < 0:
                    return -1
                if def_kind == RLE_BLOCK:
                    if dsize < 8:
                        return -1
                    vbytes = np.int64(_uint_at(base, dstart, 8))
                    dnruns = vbytes // 2
                    dlstart = dstart + 8 + vbytes
                    if vbytes < 0 or vbytes % 2 or dsize - 8 - vbytes != dnruns:
                        return -1
                    dstart += 8
                    drun = dseen = 0
                elif def_kind == OUT_OF_LINE:
                    dcount = np.int64(_uint_at(base, p, 2))  # the chunk's num_levels
                    if dsize % 2:
                        return -1
                    dfull = dcount // 1024
                    dwords = 64 * def_bits  # u16 words per packed block
                    draw = dcount % 1024 > 0 and dsize // 2 == dfull * dwords + dcount % 1024
        if def_kind == FLAT:
            if 2 * j + 2 > dsize:
                return -1
            defs[i] = np.uint16(_uint_at(base, dstart + 2 * j, 2))
        elif def_kind == RLE_BLOCK:
            drun, dseen = _run_of(base, dlstart, dnruns, drun, dseen, j)
            if drun >= dnruns:
                return -1
            defs[i] = np.uint16(_uint_at(base, dstart + 2 * drun, 2))
        elif def_kind == OUT_OF_LINE:
            if j >= dcount:
                return -1
            b = j // 1024
            if draw and b == dfull:
                at = dstart + 2 * (dfull * dwords + j % 1024)
                defs[i] = np.uint16(_uint_at(base, at, 2))
            else:
                if 2 * (b + 1) * dwords > dsize:
                    return -1
                at = dstart + 2 * b * dwords
                v = _unpack_one(base, at, j % 1024, def_bits, 2, def_fl_rows, def_fl_lanes)
                defs[i] = np.uint16(v)
        if kind == VARIABLE:
            if (j + 2) * width > vsize:
                return -1
            a = np.int64(_uint_at(base, vstart + j * width, width))
            b = np.int64(_uint_at(base, vstart + (j + 1) * width, width))
            if b < a or b > vsize or written + b - a > len(out):
                return -1
            out[written : written + b - a] = base[vstart + a : vstart + b]
            written += b - a
            offsets[i + 1] = written
            continue
        if kind == BITS:
            if j // 8 >= vsize:
                return -1
            if (base[vstart + j // 8] >> (j % 8)) & 1:
                out[i // 8] |= np.uint8(1 << (i % 8))
            written += 1
            continue
        src = -1
        if kind == FLAT:
            if (j + 1) * width > vsize:
                return -1
            src = vstart + j * width
        elif kind == RLE:
            run, seen = _run_of(base, lstart, nruns, run, seen, j)
            if run >= nruns:
                return -1
            src = vstart + run * width
        if src >= 0:
            out[i * width : (i + 1) * width] = base[src : src + width]
        else:  # BITPACK
            if j >= 1024 or vsize < width:
                return -1
            w = np.int64(_uint_at(base, vstart, width))
            if w > t or vsize < width + 128 * w:
                return -1
            v = _unpack_one(base, vstart + width, j, w, width, fl_rows, fl_lanes)
            for k in range(width):
                out[i * width + k] = (v >> np.uint64(8 * k)) & np.uint64(0xFF)
        written += width
    return written
