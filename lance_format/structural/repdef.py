"""Repetition and definition levels (2.1/2.2): turning levels back into nested structure.

A page lists one layer per nesting level, innermost first (digest §4).  Definition levels
are numbered from the innermost layer outward; a level ``def`` at a position means "every
layer that claimed a level <= def... is valid", so a slot is valid at a layer exactly when
its def is at most the number of levels claimed by the layers *inside* it.  Repetition
level k starts a new list at nesting depth k (max_rep = the outermost list).

Everything here works on whole arrays of levels at once: the structure of every layer is
found with a couple of vectorised comparisons, ``flatnonzero`` and ``searchsorted``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import CorruptFileError, UnsupportedError

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
