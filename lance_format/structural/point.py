"""Point lookups in mini-block pages without lists: decode only the wanted values.

A take of a few rows needs one value per row out of chunks of ~1,000.  The general
mini-block path decodes whole chunks through the codec pipeline, a few dozen numpy calls
per column and page, which is most of a point lookup's time.  Here a plan made once per
page (where the chunks are, the chunk header layout, the value codec and its parameters)
drives compiled kernels that read each wanted value straight out of the chunk bytes: the
header fields, the bit-unpacking of one value, the run holding a row, the bytes of one
string.  Pages whose codecs have no plan (general compression, byte-stream split,
fixed-size lists, packed structs, booleans, lists) keep the general path.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..compression import fsst
from ..compression.bitpacking import FL_ORDER
from ..compression.blocks import Block, FixedWidthBlock, VariableWidthBlock
from ..errors import CorruptFileError
from ..jit import kernel, readonly
from .leaf import LeafPiece
from .miniblock import MiniBlockMeta, MiniBlockPage

# value codecs with a point decoder, and RLE's block form (def levels: a u64 size first)
FLAT, BITPACK, RLE, VARIABLE, RLE_BLOCK = 0, 1, 2, 3, 4


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
    return rows, lane_of


_INVERSE = {t: _inverse_fastlanes(t) for t in (8, 16, 32, 64)}


@dataclass
class PointPlan:
    """How to read single values of one mini-block page (built once per page)."""

    data_start: int  # file offset of the chunk buffer
    meta: MiniBlockMeta
    chunk_first_row: np.ndarray  # page row of each chunk's first value
    level_fields: int  # u16 level-size fields in the chunk header (rep and def)
    has_def: bool
    def_kind: int  # RLE (block form) or FLAT (u16), when has_def
    num_buffers: int
    size_word: int  # bytes of a value buffer size in the header
    kind: int  # FLAT, BITPACK, RLE or VARIABLE
    width: int  # bytes per value (FLAT, RLE), word bytes (BITPACK), offset bytes (VARIABLE)
    bits: int  # bits per decoded value (fixed kinds) or per offset (VARIABLE)
    table: fsst.SymbolTable | None  # FSST symbols applied after VARIABLE

    def locate(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Chunks holding the (sorted, unique, page-relative) rows: the distinct chunk
        ids, each row's position among them and its value index inside its chunk."""
        chunk = np.searchsorted(self.meta.completed, rows, side="right")
        if len(chunk) and int(chunk[-1]) >= len(self.meta.completed):
            raise CorruptFileError("row is beyond the last mini-block chunk")
        within = rows - self.chunk_first_row[chunk]
        if len(chunk) == 1:
            return chunk, np.zeros(1, dtype=np.int64), within
        new = np.empty(len(chunk), dtype=bool)
        new[0] = True
        np.not_equal(chunk[1:], chunk[:-1], out=new[1:])
        return chunk[new], np.cumsum(new) - 1, within

    @property
    def nbytes(self) -> int:
        return self.meta.nbytes + self.chunk_first_row.nbytes + 200

    def ranges(self, chunks: np.ndarray) -> list[tuple[int, int]]:
        starts = (self.meta.chunk_starts[chunks] + self.data_start).tolist()
        return list(zip(starts, self.meta.chunk_sizes[chunks].tolist(), strict=True))

    def decode(
        self,
        chunks: np.ndarray,
        row_chunk: np.ndarray,
        within: np.ndarray,
        data: list[bytes],
        dictionary,
    ) -> LeafPiece:
        """The wanted values (and def levels) out of the chunks' bytes (``data[i]`` holds
        chunk ``chunks[i]``)."""
        base = readonly(np.frombuffer(data[0] if len(data) == 1 else b"".join(data), np.uint8))
        sizes = self.meta.chunk_sizes[chunks]
        pos = np.cumsum(sizes) - sizes
        nfields = self.level_fields + self.num_buffers
        bufs = np.empty((len(chunks), 2 * nfields), dtype=np.int64)
        if not _chunk_buffers(
            base,
            readonly(pos),
            readonly(sizes),
            self.level_fields,
            self.num_buffers,
            self.size_word,
            bufs,
        ):
            raise CorruptFileError("mini-block chunk buffers overflow their chunk")
        n = len(within)
        row_chunk, within = readonly(row_chunk), readonly(within)
        defs = None
        if self.has_def:  # the def buffer follows the rep buffer, when there is one
            d = 2 * (self.level_fields - 1)
            out = np.empty(2 * n, dtype=np.uint8)
            self._fixed(self.def_kind, 2, base, bufs, d, row_chunk, within, out)
            defs = out.view("<u2")
        v = 2 * self.level_fields
        values: Block
        if self.kind == VARIABLE:
            starts = readonly(np.ascontiguousarray(bufs[:, v]))
            lens = readonly(np.ascontiguousarray(bufs[:, v + 1]))
            offsets = np.empty(n + 1, dtype=np.int64)
            total = _variable_offsets(base, starts, lens, row_chunk, within, self.width, offsets)
            if total < 0:
                raise CorruptFileError("Variable mini-block offsets run past their chunk")
            out = np.empty(total, dtype=np.uint8)
            _variable_bytes(base, starts, row_chunk, within, self.width, readonly(offsets), out)
            values = VariableWidthBlock(offsets, out, self.bits)
            if self.table is not None:
                values = fsst.decompress(values, self.table)
        else:
            out = np.empty(n * self.width, dtype=np.uint8)
            self._fixed(self.kind, self.width, base, bufs, v, row_chunk, within, out)
            values = FixedWidthBlock(out, self.bits, n)
        return LeafPiece(None, defs, n, values, n, dictionary)

    @staticmethod
    def _fixed(kind, width, base, bufs, col, row_chunk, within, out) -> None:
        starts = readonly(np.ascontiguousarray(bufs[:, col]))
        lens = readonly(np.ascontiguousarray(bufs[:, col + 1]))
        if kind == FLAT:
            ok = _take_flat(base, starts, lens, row_chunk, within, width, out)
        elif kind == BITPACK:
            rows, lanes = _INVERSE[8 * width]
            ok = _take_bitpacked(base, starts, lens, row_chunk, within, width, rows, lanes, out)
        elif kind == RLE:  # run lengths in the next buffer
            runs = readonly(np.ascontiguousarray(bufs[:, col + 2]))
            run_lens = readonly(np.ascontiguousarray(bufs[:, col + 3]))
            ok = _take_rle(base, starts, lens, runs, run_lens, row_chunk, within, width, out)
        else:  # block-form RLE (def levels): u64 values size, values, run lengths
            ok = _take_rle(base, starts, lens, starts, lens, row_chunk, within, -width, out)
        if not ok:
            raise CorruptFileError("a mini-block value lies outside its chunk")


def point_plan(dec: MiniBlockPage, meta: MiniBlockMeta) -> PointPlan | None:
    """The point-lookup plan of a mini-block page, or None when it has lists or a codec
    without a point decoder."""
    if dec.max_rep or dec.has_rep or dec.rep_index_depth:
        return None
    def_kind = 0
    if dec.has_def:
        enc = dec.layout.def_compression
        k = enc.WhichOneof("compression")
        if k == "flat" and enc.flat.bits_per_value == 16:
            def_kind = FLAT
        elif k == "rle" and _flat_bits(enc.rle.values) == 16 and _flat_bits(enc.rle.run_lengths) == 8:
            def_kind = RLE_BLOCK
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


@kernel("b1(ro(u1[::1]), ro(i8[::1]), ro(i8[::1]), i8, i8, i8, i8[:, ::1])")
def _chunk_buffers(base, pos, sizes, level_fields, nbuf, size_word, out):  # pragma: no cover
    """Parse each chunk's header: ``out[c]`` gets (start, size) of its level buffers, then
    of its value buffers, each padded to 8 bytes as the layout stores them.  False when a
    buffer runs past its chunk."""
    header = 2 + 2 * level_fields + size_word * nbuf
    for c in range(len(pos)):
        p = pos[c]
        end = p + sizes[c]
        if p + header > end or end > len(base):
            return False
        at = p + ((header + 7) & ~7)
        for f in range(level_fields + nbuf):
            if f < level_fields:
                size = np.int64(_uint_at(base, p + 2 + 2 * f, 2))
            else:
                off = p + 2 + 2 * level_fields + size_word * (f - level_fields)
                size = np.int64(_uint_at(base, off, size_word))
            out[c, 2 * f] = at
            out[c, 2 * f + 1] = size
            if at + size > end:
                return False
            at += (size + 7) & ~7
    return True


@kernel("b1(ro(u1[::1]), ro(i8[::1]), ro(i8[::1]), ro(i8[::1]), ro(i8[::1]), i8, u1[::1])")
def _take_flat(base, starts, lens, row_chunk, within, width, out):  # pragma: no cover
    """Flat: value ``j`` of a chunk is ``width`` bytes at ``j * width``."""
    for i in range(len(row_chunk)):
        c = row_chunk[i]
        off = within[i] * width
        if off + width > lens[c]:
            return False
        p = starts[c] + off
        out[i * width : (i + 1) * width] = base[p : p + width]
    return True


@kernel(
    "b1(ro(u1[::1]), ro(i8[::1]), ro(i8[::1]), ro(i8[::1]), ro(i8[::1]), i8, "
    "ro(i8[::1]), ro(i8[::1]), u1[::1])"
)
def _take_bitpacked(base, starts, lens, row_chunk, within, word, rows, lanes_of, out):  # pragma: no cover
    """InlineBitpacking: a chunk is ``[W][1024 values packed to W bits, FastLanes order]``;
    value ``j`` is row ``rows[j]`` of lane ``lanes_of[j]``, whose bits start in word
    ``(r * W // T) * LANES + lane`` and may run into the same lane's next word."""
    t = 8 * word
    lanes = 1024 // t
    for i in range(len(row_chunk)):
        c = row_chunk[i]
        j = within[i]
        p = starts[c]
        if lens[c] < word or j >= 1024:
            return False
        width = np.int64(_uint_at(base, p, word))
        if width > t or lens[c] < word + 128 * width:
            return False
        v = np.uint64(0)
        if width:
            bit = rows[j] * width
            shift = bit % t
            at = p + word + ((bit // t) * lanes + lanes_of[j]) * word
            v = _uint_at(base, at, word) >> np.uint64(shift)
            if shift + width > t:
                v |= _uint_at(base, at + lanes * word, word) << np.uint64(t - shift)
            v &= np.uint64(0xFFFFFFFFFFFFFFFF) >> np.uint64(64 - width)
        for k in range(word):
            out[i * word + k] = (v >> np.uint64(8 * k)) & np.uint64(0xFF)
    return True


@kernel(
    "b1(ro(u1[::1]), ro(i8[::1]), ro(i8[::1]), ro(i8[::1]), ro(i8[::1]), ro(i8[::1]), "
    "ro(i8[::1]), i8, u1[::1])"
)
def _take_rle(base, starts, lens, runs, run_lens, row_chunk, within, width, out):  # pragma: no cover
    """RLE: run values, and one u8 length per run in the next buffer (``runs``); a
    negative ``width`` marks the block form, one buffer of a u64 values size, the values
    and the run lengths.  Rows of a chunk come in order: its runs are walked once."""
    block = width < 0
    width = -width if block else width
    prev = -1
    run = seen = vstart = lstart = nruns = 0  # ``seen``: values in the runs before ``run``
    for i in range(len(row_chunk)):
        c = row_chunk[i]
        j = within[i]
        if c != prev:
            prev = c
            run = 0
            seen = 0
            if block:
                if lens[c] < 8:
                    return False
                vbytes = np.int64(_uint_at(base, starts[c], 8))
                vstart = starts[c] + 8
                lstart = vstart + vbytes
                if vbytes < 0 or vbytes % width or lens[c] - 8 - vbytes != vbytes // width:
                    return False
            else:
                vbytes = lens[c]
                vstart = starts[c]
                lstart = runs[c]
                if vbytes % width or run_lens[c] != vbytes // width:
                    return False
            nruns = vbytes // width
        while run < nruns and seen + np.int64(base[lstart + run]) <= j:
            seen += np.int64(base[lstart + run])
            run += 1
        if run >= nruns:
            return False
        p = vstart + run * width
        out[i * width : (i + 1) * width] = base[p : p + width]
    return True


@kernel("i8(ro(u1[::1]), ro(i8[::1]), ro(i8[::1]), ro(i8[::1]), ro(i8[::1]), i8, i8[::1])")
def _variable_offsets(base, starts, lens, row_chunk, within, width, out):  # pragma: no cover
    """Variable: a chunk starts with its values' offsets (relative to the chunk); the
    wanted values' offsets end to end, or -1 when an offset leaves its chunk."""
    out[0] = 0
    for i in range(len(row_chunk)):
        c = row_chunk[i]
        j = within[i]
        if (j + 2) * width > lens[c]:
            return -1
        a = np.int64(_uint_at(base, starts[c] + j * width, width))
        b = np.int64(_uint_at(base, starts[c] + (j + 1) * width, width))
        if b < a or b > lens[c]:
            return -1
        out[i + 1] = out[i] + b - a
    return out[len(row_chunk)]


@kernel("void(ro(u1[::1]), ro(i8[::1]), ro(i8[::1]), ro(i8[::1]), i8, ro(i8[::1]), u1[::1])")
def _variable_bytes(base, starts, row_chunk, within, width, offsets, out):  # pragma: no cover
    """Copy the wanted values' bytes (checked by :func:`_variable_offsets`)."""
    for i in range(len(row_chunk)):
        c = row_chunk[i]
        a = starts[c] + np.int64(_uint_at(base, starts[c] + within[i] * width, width))
        out[offsets[i] : offsets[i + 1]] = base[a : a + offsets[i + 1] - offsets[i]]
