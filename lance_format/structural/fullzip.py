"""The full-zip layout (2.1/2.2): wide values zipped together with their levels.

Buffer 0 holds, for each level, an optional control word ``(rep << bits_def) | def``, then
the value: fixed-width bytes for every visible level, or ``[length][bytes]`` only for levels
with def == 0 (variable width).  Buffer 1, the repetition index, holds num_rows + 1
byte-packed offsets into buffer 0; fixed-width pages without lists have none, because every
row has the same size.  The index is what the search cache keeps, so one row costs one read.

Rows are parsed together: a loop over the level position *within* a row, each step
vectorised across all rows being decoded (a row without lists has one level, so pages without
lists take a single step).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..compression.blocks import FixedWidthBlock, VariableWidthBlock, gather_ranges
from ..compression.decompress import decompress_per_value
from ..errors import CorruptFileError
from ..pb import encodings_v2_1_pb2 as pb
from . import repdef
from .leaf import LeafPiece
from .page import EncodedPage


def control_word_bytes(bits_rep: int, bits_def: int) -> int:
    total = bits_rep + bits_def
    if total == 0:
        return 0
    return 1 if total <= 8 else 2 if total <= 16 else 4


def _read_uint(base: np.ndarray, pos: np.ndarray, width: int) -> np.ndarray:
    out = np.zeros(len(pos), dtype=np.int64)
    for b in range(width):
        out |= base[pos + b].astype(np.int64) << (8 * b)
    return out


@dataclass
class FullZipMeta:
    row_offsets: np.ndarray | None  # num_rows + 1 byte offsets into buffer 0 (None = stride)

    @property
    def nbytes(self) -> int:
        return (self.row_offsets.nbytes if self.row_offsets is not None else 0) + 100


class FullZipPage:
    def __init__(self, page, layout):
        self.page = page
        self.layout = layout
        self.layers = list(layout.layers)
        self.max_rep = repdef.max_rep(self.layers)
        self.max_visible_def = repdef.max_visible_def(self.layers)
        self.bits_def = int(layout.bits_def)
        self.bits_rep = int(layout.bits_rep)
        if self.bits_def > 16 or self.bits_rep > 16:
            raise CorruptFileError(
                f"full-zip control word claims {self.bits_rep}+{self.bits_def} bits"
            )
        self.cw_bytes = control_word_bytes(self.bits_rep, self.bits_def)
        self.variable = layout.WhichOneof("details") == "bits_per_offset"
        if self.variable:
            self.offset_bytes = int(layout.bits_per_offset) // 8
            if self.offset_bytes not in (4, 8):
                raise CorruptFileError(f"full-zip offsets of {layout.bits_per_offset} bits")
        else:
            bits = int(layout.bits_per_value)
            if bits % 8:
                raise CorruptFileError(f"full-zip fixed values of {bits} bits are not byte-sized")
            self.value_bytes = bits // 8
        self.has_index = self.variable or self.max_rep > 0
        if len(page.buffers) < 1 + self.has_index:
            raise CorruptFileError("full-zip page is missing its buffers")
        self.stride = None if self.has_index else self.cw_bytes + self.value_bytes

    def metadata_ranges(self) -> list[tuple[int, int]]:
        return [self.page.buffers[1]] if self.has_index else []

    def load_meta(self, raw: list[bytes]) -> FullZipMeta:
        if not self.has_index:
            expect = self.page.num_rows * self.stride
            if self.page.buffers[0][1] < expect:
                raise CorruptFileError(
                    f"full-zip buffer has {self.page.buffers[0][1]} bytes, rows need {expect}"
                )
            return FullZipMeta(None)
        n = self.page.num_rows + 1
        size = len(raw[0])
        if n == 0 or size % n or size // n not in (1, 2, 4, 8):
            raise CorruptFileError(f"repetition index of {size} bytes for {n - 1} rows")
        offsets = np.frombuffer(raw[0], dtype=f"<u{size // n}").astype(np.int64)
        if (np.diff(offsets) < 0).any() or offsets[-1] > self.page.buffers[0][1]:
            raise CorruptFileError("full-zip repetition index is not a valid offset list")
        return FullZipMeta(offsets)

    def row_groups(self, rows: np.ndarray | None) -> list[tuple[int, int]]:
        """Contiguous row ranges [a, b) to read (sorted unique rows, page-relative)."""
        n = self.page.num_rows
        if rows is None:
            return [(0, n)] if n else []
        brk = np.flatnonzero(np.diff(rows) != 1) + 1
        firsts = rows[np.concatenate([[0], brk])]
        lasts = rows[np.concatenate([brk - 1, [len(rows) - 1]])]
        return list(zip(firsts.tolist(), (lasts + 1).tolist(), strict=True))

    def byte_range(self, meta: FullZipMeta, a: int, b: int) -> tuple[int, int]:
        if meta.row_offsets is not None:
            lo, hi = int(meta.row_offsets[a]), int(meta.row_offsets[b])
        else:
            lo, hi = a * self.stride, b * self.stride
        return self.page.buffers[0][0] + lo, hi - lo

    def decode(
        self, meta: FullZipMeta, groups: list[tuple[int, int]], data: list[bytes]
    ) -> LeafPiece:
        base = np.frombuffer(b"".join(data), dtype=np.uint8)
        lens = np.array([len(d) for d in data], dtype=np.int64)
        data_base = np.cumsum(lens) - lens
        if meta.row_offsets is not None:
            starts = np.concatenate(
                [
                    meta.row_offsets[a:b] - meta.row_offsets[a] + db
                    for (a, b), db in zip(groups, data_base, strict=True)
                ]
            )
            ends = np.concatenate(
                [
                    meta.row_offsets[a + 1 : b + 1] - meta.row_offsets[a] + db
                    for (a, b), db in zip(groups, data_base, strict=True)
                ]
            )
        else:
            starts = (
                np.concatenate(
                    [
                        np.arange(b - a, dtype=np.int64) * self.stride + db
                        for (a, b), db in zip(groups, data_base, strict=True)
                    ]
                )
                if groups
                else np.zeros(0, np.int64)
            )
            ends = starts + self.stride
        num_rows = len(starts)
        if self.max_rep == 0 and not self.variable:
            return self._decode_fixed_rows(base, groups, data_base)
        return self._decode_levels(base, starts, ends, num_rows)

    def _decode_fixed_rows(
        self, base: np.ndarray, groups: list[tuple[int, int]], data_base: np.ndarray
    ) -> LeafPiece:
        """Fixed-width rows without lists: each group of rows is a (rows x stride) matrix."""
        stride = self.stride
        assert stride is not None  # fixed-width rows without lists have a stride
        mats = []
        for (a, b), db in zip(groups, data_base.tolist(), strict=True):
            n = b - a
            if db + n * stride > len(base):
                raise CorruptFileError("full-zip data is truncated")
            mats.append(base[db : db + n * stride].reshape(n, stride))
        return self.fixed_rows_piece(mats[0] if len(mats) == 1 else np.concatenate(mats))

    def fixed_rows_piece(self, rows: np.ndarray) -> LeafPiece:
        """The piece of fixed-width rows without lists, given as a (rows x stride) matrix:
        each row's control word (def level), then its value."""
        cw = self.cw_bytes
        n = len(rows)
        defs = None
        if cw:
            word = rows[:, 0].astype(np.int64)
            for b in range(1, cw):
                word |= rows[:, b].astype(np.int64) << (8 * b)
            defs = (word & ((1 << self.bits_def) - 1)).astype(np.uint16)
        data = np.ascontiguousarray(rows[:, cw:]).reshape(-1)
        block = FixedWidthBlock(data, self.value_bytes * 8, n)
        values = decompress_per_value(self.layout.value_compression, block)
        return LeafPiece(None, defs, n, values, n)

    def _decode_levels(
        self, base: np.ndarray, starts: np.ndarray, ends: np.ndarray, num_rows: int
    ) -> LeafPiece:
        if len(base) < (int(ends.max()) if len(ends) else 0):
            raise CorruptFileError("full-zip data is truncated")
        def_mask = (1 << self.bits_def) - 1
        pos = starts.copy()
        rows = np.arange(num_rows, dtype=np.int64)
        parts: list[tuple[np.ndarray, ...]] = []
        step = 0
        active = rows[pos < ends]
        while len(active):
            p = pos[active]
            cw = _read_uint(base, p, self.cw_bytes) if self.cw_bytes else np.zeros(len(p), np.int64)
            rep = cw >> self.bits_def
            d = cw & def_mask
            p = p + self.cw_bytes
            if self.variable:
                has_value = d == 0
                length = np.zeros(len(p), dtype=np.int64)
                hv = np.flatnonzero(has_value)
                if (p[hv] + self.offset_bytes > ends[active[hv]]).any():
                    raise CorruptFileError("full-zip value length runs past its row")
                length[hv] = _read_uint(base, p[hv], self.offset_bytes)
                p = p + np.where(has_value, self.offset_bytes, 0)
                vstart = p
                p = p + length
            else:
                has_value = d <= self.max_visible_def
                length = np.where(has_value, self.value_bytes, 0)
                vstart = p
                p = p + length
            if (p > ends[active]).any():
                raise CorruptFileError("full-zip value runs past its row")
            pos[active] = p
            parts.append((active, np.full(len(active), step), rep, d, vstart, length))
            step += 1
            active = active[p < ends[active]]
            if step > 1 << 24:
                raise CorruptFileError("full-zip row has too many levels")
        if not parts:
            return LeafPiece(None, None, 0, self._empty_values(), num_rows)
        row_id, step_id, rep, defs, vstart, vlen = (
            np.concatenate(x) for x in zip(*parts, strict=True)
        )
        order = np.lexsort((step_id, row_id))
        rep, defs, vstart, vlen = rep[order], defs[order], vstart[order], vlen[order]
        visible = defs <= self.max_visible_def
        vstart, vlen = vstart[visible], vlen[visible]
        block: FixedWidthBlock | VariableWidthBlock
        if self.variable:
            offsets = np.zeros(len(vlen) + 1, dtype=np.int64)
            np.cumsum(vlen, out=offsets[1:])
            block = VariableWidthBlock(offsets, gather_ranges(base, vstart, vlen))
        else:
            block = FixedWidthBlock(
                gather_ranges(base, vstart, vlen), self.value_bytes * 8, len(vlen)
            )
        values = decompress_per_value(self.layout.value_compression, block)
        return LeafPiece(
            rep.astype(np.uint16) if self.max_rep else None,
            defs.astype(np.uint16) if self.bits_def else None,
            len(defs),
            values,
            num_rows,
        )

    def _empty_values(self):
        if self.variable:
            return decompress_per_value(
                self.layout.value_compression,
                VariableWidthBlock(np.zeros(1, np.int64), np.zeros(0, np.uint8)),
            )
        return decompress_per_value(
            self.layout.value_compression,
            FixedWidthBlock(np.zeros(0, np.uint8), self.value_bytes * 8, 0),
        )


# -- writer side -----------------------------------------------------------------------------


def _uint_bytes(values: np.ndarray, width: int) -> np.ndarray:
    """``values`` as ``width``-byte little-endian integers, one row per value."""
    return np.asarray(values).astype(f"<u{width}").view(np.uint8).reshape(-1, width)


def rep_index_width(max_value: int) -> int:
    """Byte-packed offsets: the smallest of u8/u16/u32/u64 that holds the maximum."""
    return 1 if max_value <= 0xFF else 2 if max_value <= 0xFFFF else 4 if max_value < 1 << 32 else 8


def encode_page(
    encoding,
    values: FixedWidthBlock | VariableWidthBlock,
    rep: np.ndarray | None,
    defs: np.ndarray | None,
    layers: list[int],
    num_rows: int,
):
    """Zip per-value encoded ``values`` (one per visible level) with their control words."""

    levels_info, max_def = repdef.layer_levels(layers)
    max_rep = repdef.max_rep(layers)
    mvd = repdef.max_visible_def(layers)
    bits_rep, bits_def = max_rep.bit_length(), max_def.bit_length()
    cw = control_word_bytes(bits_rep, bits_def)
    n_levels = len(defs) if defs is not None else (len(rep) if rep is not None else num_rows)
    d = defs.astype(np.int64) if defs is not None else np.zeros(n_levels, dtype=np.int64)
    r = rep.astype(np.int64) if rep is not None else np.zeros(n_levels, dtype=np.int64)
    visible = d <= mvd
    vis_idx = np.cumsum(visible) - 1  # value index of each visible level
    variable = isinstance(values, VariableWidthBlock)
    sizes = np.full(n_levels, cw, dtype=np.int64)
    if isinstance(values, VariableWidthBlock):
        width = values.bits_per_offset // 8
        lengths = np.diff(np.asarray(values.offsets, dtype=np.int64))
        has_value = d == 0
        vlen = np.zeros(n_levels, dtype=np.int64)
        vlen[has_value] = lengths[vis_idx[has_value]]
        sizes += np.where(has_value, width + vlen, 0)
    else:
        vbytes = values.bits_per_value // 8
        has_value = visible
        sizes += np.where(has_value, vbytes, 0)
    starts = np.cumsum(sizes) - sizes
    out = np.zeros(int(sizes.sum()), dtype=np.uint8)
    # fixed-width values on every level (vectors, most columns): the page is rows of
    # control word + value, written as two column slices of one 2-D view, not scattered
    # through index arrays as long as the page's bytes
    whole_rows = not variable and bool(has_value.all())
    if cw:
        word = (r << bits_def) | d
        if whole_rows:
            out.reshape(n_levels, cw + vbytes)[:, :cw] = _uint_bytes(word, cw)
        else:
            pos = (starts[:, None] + np.arange(cw)[None, :]).reshape(-1)
            out[pos] = _uint_bytes(word, cw).reshape(-1)
    hv = np.flatnonzero(has_value)
    if whole_rows:
        src = np.asarray(values.data[: values.num_values * vbytes]).reshape(-1, vbytes)
        out.reshape(n_levels, cw + vbytes)[:, cw:] = src[:n_levels]  # value i on level i
    elif isinstance(values, VariableWidthBlock):
        pos_all = np.arange(len(out), dtype=np.int64)
        pfx = starts[hv] + cw
        out[(pfx[:, None] + np.arange(width)[None, :]).reshape(-1)] = _uint_bytes(
            vlen[hv], width
        ).reshape(-1)
        src_start = np.asarray(values.offsets, dtype=np.int64)[vis_idx[hv]]
        data = gather_ranges(np.asarray(values.data), src_start, vlen[hv])
        out[gather_ranges(pos_all, pfx + width, vlen[hv])] = data
    else:
        src = np.asarray(values.data[: values.num_values * vbytes]).reshape(-1, vbytes)
        dest = ((starts[hv] + cw)[:, None] + np.arange(vbytes)[None, :]).reshape(-1)
        out[dest] = src[vis_idx[hv]].reshape(-1)
    layout = pb.FullZipLayout(
        bits_rep=bits_rep,
        bits_def=bits_def,
        num_items=n_levels,
        num_visible_items=int(np.count_nonzero(visible)),
        value_compression=encoding,
        layers=repdef.pb_layers(layers),
    )
    if isinstance(values, VariableWidthBlock):
        layout.bits_per_offset = values.bits_per_offset
    else:
        layout.bits_per_value = values.bits_per_value
    buffers: list = [out]
    if variable or max_rep:
        row_starts = np.flatnonzero(r == max_rep) if max_rep else np.arange(n_levels)
        offsets = np.append(starts[row_starts], len(out))
        w = rep_index_width(int(offsets[-1]))
        buffers.append(_uint_bytes(offsets, w).reshape(-1))
    return EncodedPage(pb.PageLayout(full_zip_layout=layout), buffers, num_rows)
