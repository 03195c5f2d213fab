"""Repetition and definition levels (2.1/2.2): turning levels back into nested structure.

A page lists one layer per nesting level, innermost first (docs/format/structural.md).  Definition
levels are numbered from the innermost layer outward; a level ``def`` at a position means "every
layer that claimed a level <= def... is valid", so a slot is valid at a layer exactly when
its def is at most the number of levels claimed by the layers *inside* it.  Repetition
level k starts a new list at nesting depth k (max_rep = the outermost list).

Everything here works on whole arrays of levels at once: the structure of every layer is
found with a couple of vectorised comparisons, ``flatnonzero`` and ``searchsorted``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import numpy as np
import pyarrow as pa

from ..errors import CorruptFileError, UnsupportedError
from ..pb import encodings_v2_1_pb2 as pb
from ..schema import cached_per_type

ALL_VALID_ITEM = 1
ALL_VALID_LIST = 2
NULLABLE_ITEM = 3
NULLABLE_LIST = 4
EMPTYABLE_LIST = 5
NULL_AND_EMPTY_LIST = 6

LIST_LAYERS = frozenset({ALL_VALID_LIST, NULLABLE_LIST, EMPTYABLE_LIST, NULL_AND_EMPTY_LIST})
ITEM_LAYERS = frozenset({ALL_VALID_ITEM, NULLABLE_ITEM})


@dataclass(frozen=True)
class LayerLevels:
    """The def levels one layer owns: slots with def <= inner are valid at this layer."""

    inner: int  # levels claimed by the layers inside this one
    null: int | None
    empty: int | None


def pb_layers(layers: list[int]) -> list[pb.RepDefLayer]:
    """``layers`` for a protobuf ``layers`` field (an enum field takes plain ints at runtime)."""
    return cast("list[pb.RepDefLayer]", layers)


def layer_levels(layers: list[int]) -> tuple[list[LayerLevels], int]:
    """Def levels claimed by each layer (innermost first) and max_def."""
    d = 0
    out = []
    for kind in layers:
        prev = d
        null = empty = None
        if kind in (NULLABLE_ITEM, NULLABLE_LIST):
            d += 1
            null = d
        elif kind == EMPTYABLE_LIST:
            d += 1
            empty = d
        elif kind == NULL_AND_EMPTY_LIST:
            null, empty = d + 1, d + 2
            d += 2
        elif kind not in (ALL_VALID_ITEM, ALL_VALID_LIST):
            raise UnsupportedError(f"unknown rep/def layer kind {kind}")
        out.append(LayerLevels(prev, null, empty))
    return out, d


def max_visible_def(layers: list[int]) -> int:
    """Levels with def <= this have a slot in the value buffer (no list above is null/empty)."""
    levels, max_def = layer_levels(layers)
    for kind, lv in zip(layers, levels, strict=True):
        if kind in LIST_LAYERS:
            return lv.inner
    return max_def


def max_rep(layers: list[int]) -> int:
    return sum(1 for kind in layers if kind in LIST_LAYERS)


@dataclass
class Layer:
    """One reconstructed nesting level, outermost first."""

    is_list: bool
    validity: np.ndarray | None  # bool per slot; None = all valid
    offsets: np.ndarray | None = None  # int64, len(slots)+1, for lists

    def list_offsets(self) -> np.ndarray:
        """The offsets of a list layer."""
        if self.offsets is None:
            raise CorruptFileError("a list layer without offsets")
        return self.offsets


@dataclass
class Unraveled:
    layers: list[Layer]  # outermost first
    num_rows: int
    num_leaf_slots: int


def unravel(
    rep: np.ndarray | None, defs: np.ndarray | None, layers: list[int], num_levels: int
) -> Unraveled:
    """Rebuild validity and list offsets of every layer from levels covering whole rows."""
    levels, _ = layer_levels(layers)
    n_rep = max_rep(layers)
    if defs is None:
        defs = np.zeros(num_levels, dtype=np.uint16)
    if n_rep:
        if rep is None:
            raise CorruptFileError("the page has list layers but no repetition levels")
        starts = np.flatnonzero(rep == n_rep)
        if num_levels and (len(starts) == 0 or starts[0] != 0):
            raise CorruptFileError("repetition levels do not start with a new row")
    else:
        starts = None  # every level is a row
    num_rows = len(starts) if starts is not None else num_levels
    out: list[Layer] = []
    k = n_rep
    for kind, lv in zip(reversed(layers), reversed(levels), strict=True):
        d = defs[starts] if n_rep else defs  # without lists every level is a row
        valid = d <= lv.inner
        if kind in LIST_LAYERS:
            assert starts is not None and rep is not None  # list layers imply repetition
            if lv.empty is not None:
                valid = valid | (d == lv.empty)
            if k == 1:
                child = np.flatnonzero(defs <= lv.inner)
            else:
                child = np.flatnonzero((rep >= k - 1) & (defs <= lv.inner))
            offsets = np.empty(len(starts) + 1, dtype=np.int64)
            offsets[:-1] = np.searchsorted(child, starts)
            offsets[-1] = len(child)
            out.append(Layer(True, None if valid.all() else valid, offsets))
            starts = child
            k -= 1
        else:
            out.append(Layer(False, None if valid.all() else valid))
    return Unraveled(out, num_rows, len(starts) if starts is not None else num_levels)


# -- writer side: nested Arrow arrays to levels ---------------------------------------------


@dataclass
class Raveled:
    """One leaf column of a page, ready to encode: its layers, levels and visible values."""

    layers: list[int]  # innermost first, kinds chosen from the data
    rep: np.ndarray | None  # uint16 per level (None without lists)
    defs: np.ndarray | None  # uint16 per level (None when every layer is all-valid)
    num_rows: int
    values: pa.Array  # one per visible level; null where the level is not valid at the leaf

    @property
    def num_levels(self) -> int:
        if self.rep is not None:
            return len(self.rep)
        return len(self.defs) if self.defs is not None else self.num_rows


@dataclass
class _Levels:
    """Level state while walking down a nested array (outermost layer first).

    ``slot`` maps each level to an index into the current array (None = the identity, the
    common flat case); ``term`` is 0 for levels still alive, else the code of the layer that
    made them null (2*i+1) or empty (2*i+2).
    """

    n: int
    slot: np.ndarray | None
    term: np.ndarray | None
    rdepth: np.ndarray | None  # per level: 0 = starts a row, d = next item of a depth-d list
    kinds: list[list]  # per layer, outermost first: [is_list, saw_null, saw_empty]
    depth: int = 0  # list layers passed
    # a layer above had nulls: pylance 14 then marks every layer below nullable too (Arrow
    # pushes a struct's nulls into its children) and its reader expects exactly that
    null_above: bool = False

    def copy(self) -> _Levels:
        kinds = [list(k) for k in self.kinds]
        return _Levels(
            self.n, self.slot, self.term, self.rdepth, kinds, self.depth, self.null_above
        )


def valid_mask(arr: pa.Array) -> np.ndarray | None:
    """Which slots of ``arr`` are valid (None: every one), read from its validity bitmap.
    A small write asks this of every nullable column, and pyarrow's ``is_valid()`` with its
    conversion to numpy costs 3-15 us on a 100-row page where unpacking the bits costs
    about 1.  Arrays without a bitmap (the null type, unions) or with a bitmap shorter
    than their slots ask pyarrow."""
    if arr.null_count == 0:
        return None
    n = len(arr)
    bitmap = arr.buffers()[0]
    off = arr.offset
    if bitmap is None or bitmap.size * 8 < off + n:
        return np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    return bitmap_bits(bitmap, off, n)


def bitmap_bits(bitmap: pa.Buffer, offset: int, n: int) -> np.ndarray:
    """Bits [offset, offset + n) of an Arrow bitmap (LSB first) as bools, unpacking only
    the bytes that hold them."""
    first = offset >> 3
    raw = np.frombuffer(bitmap, dtype=np.uint8, count=((offset + n + 7) >> 3) - first, offset=first)
    skip = offset & 7
    return np.unpackbits(raw, count=skip + n, bitorder="little")[skip:].view(np.bool_)


def _item_layer(st: _Levels, arr: pa.Array) -> _Levels:
    """A struct or leaf layer: nulls end their levels here."""
    st = st.copy()
    code = 2 * len(st.kinds) + 1
    valid = valid_mask(arr)
    saw_null = False
    if valid is not None:
        if st.slot is None:
            v = valid
        else:
            v = np.ones(st.n, dtype=bool)
            live = np.flatnonzero(st.slot >= 0)
            v[live] = valid[st.slot[live]]
        alive = st.term == 0 if st.term is not None else None
        null = ~v if alive is None else (~v & alive)
        if null.any():
            saw_null = True
            term = np.zeros(st.n, dtype=np.int32) if st.term is None else st.term.copy()
            term[null] = code
            st.term = term
    st.kinds.append([False, saw_null or st.null_above, False])
    st.null_above = st.null_above or saw_null
    return st


def _list_layer(st: _Levels, arr: pa.Array) -> tuple[_Levels, pa.Array]:
    """A list layer: each alive, non-empty list becomes one level per item."""
    above = st.null_above
    st = _item_layer(st, arr)
    st.null_above = above  # a null list hides its items; it does not make them nullable
    st.kinds[-1][0] = True
    null_code = 2 * (len(st.kinds) - 1) + 1
    empty_code = null_code + 1
    offs = np.asarray(arr.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
    slot = np.arange(st.n, dtype=np.int64) if st.slot is None else st.slot
    alive = (slot >= 0) if st.term is None else ((slot >= 0) & (st.term == 0))
    s = np.where(alive, slot, 0)  # dead levels may point nowhere (e.g. under a null list)
    live = np.flatnonzero(alive)
    first_item = np.zeros(st.n, dtype=np.int64)
    lens = np.zeros(st.n, dtype=np.int64)
    first_item[live] = offs[s[live]]
    lens[live] = offs[s[live] + 1] - first_item[live]
    empty = alive & (lens == 0)
    term = st.term
    if empty.any():
        term = np.zeros(st.n, dtype=np.int32) if term is None else term.copy()
        term[empty] = empty_code
        st.kinds[-1][2] = True
    expanded = lens > 0
    cnt = np.where(expanded, lens, 1)
    total = int(cnt.sum())
    first = np.cumsum(cnt) - cnt
    st.depth += 1
    rdepth = np.full(total, st.depth, dtype=np.uint16)
    rdepth[first] = st.rdepth if st.rdepth is not None else 0
    new_slot = np.repeat(np.where(expanded, first_item - first, -1 - total), cnt)
    new_slot += np.arange(total, dtype=np.int64)
    new_slot[new_slot < 0] = -1
    st.slot = new_slot
    st.term = np.repeat(term, cnt) if term is not None else None
    st.rdepth = rdepth
    st.n = total
    return st, arr.values


def _leaf_like(t: pa.DataType, field_metadata: dict | None) -> bool:
    if pa.types.is_fixed_size_list(t):
        return True
    if pa.types.is_struct(t):
        md = field_metadata or {}
        return t.num_fields == 0 or any(
            k in md for k in (b"lance-encoding:packed", b"packed", b"lance-encoding:blob")
        )
    return not (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_map(t))


@cached_per_type
def _flat_leaf_type(t: pa.DataType) -> bool:
    """A column of this type is one leaf with one level per row (field metadata only
    matters for structs, which are never flat here)."""
    return not pa.types.is_struct(t) and _leaf_like(t, None)


def _finish(st: _Levels, leaf: pa.Array, num_rows: int) -> Raveled:
    st = _item_layer(st, leaf)
    kinds_out = []
    for is_list, null, empty in st.kinds:
        if is_list:
            kind = (
                NULL_AND_EMPTY_LIST
                if null and empty
                else NULLABLE_LIST
                if null
                else EMPTYABLE_LIST
                if empty
                else ALL_VALID_LIST
            )
        else:
            kind = NULLABLE_ITEM if null else ALL_VALID_ITEM
        kinds_out.append(kind)
    layers = kinds_out[::-1]  # innermost first
    levels, max_def = layer_levels(layers)
    defs = None
    if max_def:
        lut = np.zeros(2 * len(layers) + 1, dtype=np.uint16)
        for i, lv in enumerate(reversed(levels)):  # outermost first, like the codes
            if lv.null is not None:
                lut[2 * i + 1] = lv.null
            if lv.empty is not None:
                lut[2 * i + 2] = lv.empty
        defs = lut[st.term] if st.term is not None else np.zeros(st.n, dtype=np.uint16)
    # visible levels: alive, or ended by an item layer inside the innermost list
    inner_list = max((i for i, k in enumerate(st.kinds) if k[0]), default=-1)
    if st.slot is None:
        # no lists: one level per row, every level visible; under a null struct the child's
        # own (ignored) value stays as the placeholder, so no gather is needed
        values = leaf
    else:
        slot = st.slot.copy()
        if st.term is not None:
            layer_of = (st.term - 1) // 2
            visible = (st.term == 0) | (layer_of > inner_list)
            slot[st.term != 0] = -1
            slot = slot[visible]
        if pa.types.is_string_view(leaf.type) or pa.types.is_binary_view(leaf.type):
            leaf = leaf.cast(pa.string() if pa.types.is_string_view(leaf.type) else pa.binary())
        idx = pa.array(slot, mask=slot < 0, type=pa.int64())
        values = leaf.take(idx)
    rep = None
    if st.depth:
        assert st.rdepth is not None  # recorded whenever there is a list
        rep = (np.uint16(st.depth) - st.rdepth).astype(np.uint16)
    return Raveled(layers, rep, defs, num_rows, values)


def ravel(arr: pa.Array, field_metadata: dict | None = None) -> list[Raveled]:
    """Levels and visible values of every leaf column under ``arr`` (depth-first order).

    The inverse of :func:`unravel`: layer kinds come from the data (a layer is nullable or
    emptyable only if some slot needs it), so pages without nulls carry no def levels.
    Packed and blob structs are leaves (their metadata is read from the fields).
    """
    n = len(arr)
    t = arr.type
    if _flat_leaf_type(t):
        # a flat column (most are): one level per row, what the walk below gives for it
        if arr.null_count == 0:
            return [Raveled([ALL_VALID_ITEM], None, None, n, arr)]
        valid = valid_mask(arr)
        assert valid is not None  # the array has nulls
        defs = np.logical_not(valid).view(np.uint8).astype(np.uint16)
        return [Raveled([NULLABLE_ITEM], None, defs, n, arr)]
    out: list[Raveled] = []
    _walk(arr, field_metadata, _Levels(n, None, None, None, []), n, out)
    return out


def _walk(arr: pa.Array, md, st: _Levels, num_rows: int, out: list) -> None:
    t = arr.type
    if _leaf_like(t, md):
        out.append(_finish(st, arr, num_rows))
        return
    if pa.types.is_struct(t):
        st = _item_layer(st, arr)
        for i, f in enumerate(t):
            _walk(arr.field(i), f.metadata, st, num_rows, out)
        return
    st, child = _list_layer(st, arr)
    _walk(child, None, st, num_rows, out)
