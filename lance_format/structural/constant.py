"""The constant layout (2.1 all-null pages; 2.2 also constant-valued pages).

Buffer order depends on whether there is an inline value and how many buffers there are
(docs/format/structural.md): [] | [rep, def] | [scalar] | [scalar, rep, def].  The levels are raw
u16 or, in 2.2, block-compressed; the value is either ``inline_value`` (raw bytes of one fixed-width
value) or a "scalar buffer" (``u32 n, n x u32 len``, then the Arrow buffers of a one-element
array).  Levels and value are small, so they are the cached metadata; decoding a row range
only selects levels and repeats the value.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ..compression import rle
from ..compression.blocks import (
    Block,
    FixedWidthBlock,
    VariableWidthBlock,
    take_block,
)
from ..compression.compress import rle_enc
from ..compression.decompress import decompress_levels
from ..errors import CorruptFileError
from ..jit import kernel, readonly
from ..pb import encodings_v2_1_pb2 as pb
from ..version import LanceFileVersion
from . import repdef
from .leaf import LeafPiece, select_rows
from .page import EncodedPage


@dataclass
class ConstantMeta:
    rep: np.ndarray | None
    defs: np.ndarray | None
    value: Block | None  # one value, or None for all-null pages
    num_levels: int

    @property
    def nbytes(self) -> int:
        n = 100
        for a in (self.rep, self.defs):
            if a is not None:
                n += a.nbytes
        return n


def parse_scalar_buffer(raw: bytes, arrow_type: pa.DataType) -> Block:
    """Decode the Arrow buffers of a one-element array into a one-value block."""
    try:
        (n,) = struct.unpack_from("<I", raw, 0)
        if n > 8:
            raise CorruptFileError(f"scalar value buffer claims {n} buffers")
        lens = struct.unpack_from(f"<{n}I", raw, 4)
    except struct.error as exc:
        raise CorruptFileError(f"truncated scalar value buffer: {exc}") from exc
    pos = 4 + 4 * n
    bufs = []
    for ln in lens:
        if pos + ln > len(raw):
            raise CorruptFileError("scalar value buffer is truncated")
        bufs.append(np.frombuffer(raw, dtype=np.uint8, count=ln, offset=pos))
        pos += ln
    t = arrow_type.storage_type if isinstance(arrow_type, pa.BaseExtensionType) else arrow_type
    if pa.types.is_dictionary(t):
        t = t.value_type
    if (
        pa.types.is_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_string(t)
        or pa.types.is_large_binary(t)
    ):
        if len(bufs) != 2 or len(bufs[0]) not in (8, 16):
            raise CorruptFileError("a variable-width scalar needs an offsets and a data buffer")
        offsets = bufs[0].view("<i4" if len(bufs[0]) == 8 else "<i8").astype(np.int64)
        lo, hi = int(offsets[0]), int(offsets[1])
        if not 0 <= lo <= hi <= len(bufs[1]):
            raise CorruptFileError("scalar value offsets are out of range")
        return VariableWidthBlock(np.array([0, hi - lo], dtype=np.int64), bufs[1][lo:hi].copy())
    if not bufs:
        raise CorruptFileError("scalar value buffer has no buffers")
    data = bufs[-1]
    bits = 1 if pa.types.is_boolean(t) else len(data) * 8
    return FixedWidthBlock(data.copy(), bits, 1)


class ConstantPage:
    def __init__(self, page, layout, arrow_type: pa.DataType):
        self.page = page
        self.layout = layout
        self.arrow_type = arrow_type
        self.layers = list(layout.layers)
        self.max_rep = repdef.max_rep(self.layers)
        self.max_visible_def = repdef.max_visible_def(self.layers)
        self.has_inline = layout.HasField("inline_value")
        nb = len(page.buffers)
        if (self.has_inline and nb not in (0, 2)) or (
            not self.has_inline and nb not in (0, 1, 2, 3)
        ):
            raise CorruptFileError(f"constant page with {nb} buffers is not a valid form")
        self.has_scalar = not self.has_inline and nb in (1, 3)
        self.has_levels = nb in (2, 3)

    def metadata_ranges(self) -> list[tuple[int, int]]:
        return list(self.page.buffers)

    def load_meta(self, raw: list[bytes]) -> ConstantMeta:
        i = 0
        value: Block | None = None
        if self.has_inline:
            inline = np.frombuffer(self.layout.inline_value, dtype=np.uint8).copy()
            t = self.arrow_type
            bits = 1 if pa.types.is_boolean(t) else len(inline) * 8
            value = FixedWidthBlock(inline, bits, 1)
        elif self.has_scalar:
            value = parse_scalar_buffer(raw[0], self.arrow_type)
            i = 1
        n = self.page.num_rows
        rep = defs = None
        if self.has_levels:
            rep_raw, def_raw = raw[i], raw[i + 1]
            rep = self._levels(
                self.layout.rep_compression if self.layout.HasField("rep_compression") else None,
                rep_raw,
                int(self.layout.num_rep_values),
            )
            defs = self._levels(
                self.layout.def_compression if self.layout.HasField("def_compression") else None,
                def_raw,
                int(self.layout.num_def_values),
            )
            if rep is not None and defs is not None and len(rep) != len(defs):
                raise CorruptFileError(
                    f"constant page has {len(rep)} rep and {len(defs)} def levels"
                )
            num_levels = len(defs) if defs is not None else (len(rep) if rep is not None else n)
        else:
            num_levels = n
        if value is None and defs is None and self._empty_struct():
            # struct<> has no children to hold data: pylance writes it as an all-null page
            # without levels but reads every row back as a valid empty struct
            defs = np.zeros(n, dtype=np.uint16)
        elif value is None and defs is None:
            # all null without levels: every row is null at the outermost layer
            levels, _ = repdef.layer_levels(self.layers)
            outer = levels[-1]
            fill = outer.null if outer.null is not None else (outer.empty or 0)
            defs = np.full(n, fill, dtype=np.uint16)
            if self.max_rep and rep is None:
                rep = np.full(n, self.max_rep, dtype=np.uint16)
        return ConstantMeta(rep, defs, value, num_levels)

    def _empty_struct(self) -> bool:
        t = self.arrow_type
        return pa.types.is_struct(t) and t.num_fields == 0

    def _placeholder(self, n: int) -> pa.Array:
        if self._empty_struct():
            return pa.Array.from_buffers(self.arrow_type, n, [None], children=[])
        return pa.nulls(n, self.arrow_type)

    @staticmethod
    def _levels(enc, raw: bytes, count: int) -> np.ndarray | None:
        if not raw:
            return None
        if enc is None:
            if len(raw) % 2:
                raise CorruptFileError("raw u16 levels have an odd number of bytes")
            return np.frombuffer(raw, dtype="<u2")
        return decompress_levels(enc, np.frombuffer(raw, dtype=np.uint8), count)

    def _values(self, meta: ConstantMeta, defs: np.ndarray | None, n: int) -> Block | pa.Array:
        """The constant repeated once per visible level (placeholders for all-null pages)."""
        vis = n if defs is None else int(np.count_nonzero(defs <= self.max_visible_def))
        if meta.value is None:
            return self._placeholder(vis)
        return take_block(meta.value, np.zeros(vis, dtype=np.int64))

    def decode(self, meta: ConstantMeta, rows: np.ndarray | None) -> LeafPiece:
        if meta.rep is None and self.max_rep == 0 and rows is not None:
            # one level per row: select first, so only the wanted values are materialised
            defs = meta.defs[rows] if meta.defs is not None else None
            return LeafPiece(None, defs, len(rows), self._values(meta, defs, len(rows)), len(rows))
        values = self._values(meta, meta.defs, meta.num_levels)
        rep, defs, num_levels, values, num_rows = select_rows(
            meta.rep,
            meta.defs,
            meta.num_levels,
            values,
            max_rep=self.max_rep,
            max_visible_def=self.max_visible_def,
            group_starts=np.zeros(1, dtype=np.int64),
            group_first_row=np.zeros(1, dtype=np.int64),
            wanted=rows,
        )
        return LeafPiece(rep, defs, num_levels, values, num_rows)


# -- writer side -----------------------------------------------------------------------------

MAX_INLINE_BYTES = 32


def scalar_buffer(arrow_buffers: list[bytes]) -> bytes:
    """``u32 n, n x u32 length``, then the Arrow buffers of a one-element array."""
    head = struct.pack(f"<I{len(arrow_buffers)}I", len(arrow_buffers), *map(len, arrow_buffers))
    return head + b"".join(arrow_buffers)


def constant_value(
    block: Block, version: LanceFileVersion
) -> tuple[bytes | None, bytes | None] | None:
    """If every value of ``block`` is the same, how a 2.2 constant page stores it:
    ``(inline_value, None)`` for fixed width up to 32 bytes, ``(None, scalar_buffer)`` for
    strings; None when the values differ (or the form is not available)."""
    if version < LanceFileVersion.V2_2 or block.num_values == 0:
        return None
    if isinstance(block, FixedWidthBlock):
        bits = block.bits_per_value
        if bits == 1:
            bools = np.unpackbits(block.data, bitorder="little", count=block.num_values)
            if bools.min() != bools.max():
                return None
            return bytes([int(bools[0])]), None
        if bits % 8 or bits // 8 > MAX_INLINE_BYTES:
            return None
        w = bits // 8
        data = np.ascontiguousarray(block.data[: block.num_values * w], dtype=np.uint8)
        if not _repeats(readonly(data), w):
            return None
        return data[:w].tobytes(), None
    if isinstance(block, VariableWidthBlock):
        off = np.ascontiguousarray(block.offsets, dtype=np.int64)
        w = int(off[1] - off[0])
        if not _equal_steps(readonly(off)):
            return None
        # equal lengths: the values lie end to end from the first offset
        start = int(off[0])
        data = np.ascontiguousarray(
            block.data[start : start + block.num_values * w], dtype=np.uint8
        )
        if w and not _repeats(readonly(data), w):
            return None
        odt = "<i4" if block.bits_per_offset == 32 else "<i8"
        offsets = np.array([0, w], dtype=odt).tobytes()
        return None, scalar_buffer([offsets, data[:w].tobytes()])
    return None


@kernel("b1(ro(u1[::1]), i8)")
def _repeats(data, width):  # pragma: no cover - compiled
    """Whether ``data`` is its first ``width`` bytes repeated; stops at the first
    difference, so a varying page (the usual case) costs a few comparisons."""
    for i in range(width, len(data)):
        if data[i] != data[i - width]:
            return False
    return True


@kernel("b1(ro(i8[::1]))")
def _equal_steps(offsets):  # pragma: no cover - compiled
    """Whether all values between ``offsets`` have the same length (stops early)."""
    if len(offsets) < 2:
        return True
    step = offsets[1] - offsets[0]
    for i in range(2, len(offsets)):
        if offsets[i] - offsets[i - 1] != step:
            return False
    return True


def encode_page(
    layers: list[int],
    rep: np.ndarray | None,
    defs: np.ndarray | None,
    num_rows: int,
    version: LanceFileVersion,
    inline: bytes | None = None,
    scalar: bytes | None = None,
):
    """A constant page: all null (``inline`` and ``scalar`` None) or one repeated value."""

    layout = pb.ConstantLayout(layers=repdef.pb_layers(layers))
    buffers: list = []
    if inline is not None:
        layout.inline_value = inline
    if scalar is not None:
        buffers.append(scalar)
    need_levels = rep is not None
    if defs is not None and not need_levels:
        if inline is not None or scalar is not None:
            need_levels = bool(len(defs)) and bool(defs.any())
        else:
            # the level-less all-null form only for a single layer: pylance 14 cannot
            # infer the levels of nested all-null pages (it writes their levels too)
            levels, _ = repdef.layer_levels(layers)
            outer = levels[-1]
            fill = outer.null if outer.null is not None else (outer.empty or 0)
            need_levels = len(layers) > 1 or not (defs == fill).all()
    if need_levels:
        for levels_arr, which in ((rep, "rep"), (defs, "def")):
            if levels_arr is None:
                buffers.append(b"")
                continue
            n = len(levels_arr)
            raw = np.asarray(levels_arr, dtype="<u2")
            data = None
            # 2.2 block-RLEs the levels of all-null pages (2.1 reads raw u16 only, and
            # pylance 14 mis-reads RLE levels beside a constant value: it writes those raw)
            if version >= LanceFileVersion.V2_2 and inline is None and scalar is None:
                data = rle.encode_block(FixedWidthBlock(raw.view(np.uint8), 16, n))
                if len(data) < raw.nbytes:
                    getattr(layout, f"{which}_compression").CopyFrom(rle_enc(16))
                else:
                    data = None
            buffers.append(raw.tobytes() if data is None else data)
            setattr(layout, f"num_{which}_values", n)
    return EncodedPage(pb.PageLayout(constant_layout=layout), buffers, num_rows)
