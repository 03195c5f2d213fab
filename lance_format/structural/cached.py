"""Rows of a decoded page held by the page cache, without decoding anything again.

A cached page is the :class:`~.column.LeafResult` of the whole page: layers (validity and
list offsets, outermost first) and the leaf values.  A read wanting part of the page cuts
those arrays instead of decoding: a slice for a row range, a gather for a take.  List
layers turn the wanted rows into the wanted child slots, layer by layer, so nested columns
are served the same way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from .leaf import Rows, row_array
from .repdef import Layer

if TYPE_CHECKING:
    from .column import LeafResult


def result_nbytes(result: LeafResult) -> int:
    """What a cached page costs: its Arrow buffers (whole, even when the array is a slice
    of a larger decoded buffer: the cache holds all of it) and its level arrays."""
    n = sum(c.get_total_buffer_size() for c in result.chunks)
    for layer in result.layers:
        if layer.validity is not None:
            n += layer.validity.nbytes
        if layer.offsets is not None:
            n += layer.offsets.nbytes
    return n + 200


def select_cached(result: LeafResult, rows: Rows) -> LeafResult:
    """The sorted, unique, page-relative ``rows`` of a cached whole page."""
    from .column import LeafResult

    if len(rows) and int(rows[-1]) - int(rows[0]) + 1 == len(rows):
        return _slice(result, int(rows[0]), int(rows[-1]) + 1)
    idx = np.asarray(row_array(rows), dtype=np.int64)
    layers = []
    for layer in result.layers:
        valid = layer.validity[idx] if layer.validity is not None else None
        if not layer.is_list:
            layers.append(Layer(False, valid))
            continue
        assert layer.offsets is not None  # a list layer has offsets
        starts = layer.offsets[idx]
        lengths = layer.offsets[idx + 1] - starts
        offsets = np.zeros(len(idx) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        # the child slots of the kept lists, in order
        idx = np.repeat(starts - offsets[:-1], lengths) + np.arange(offsets[-1], dtype=np.int64)
        layers.append(Layer(True, valid, offsets))
    values = result.array
    return LeafResult(layers, [values.take(pa.array(idx))], len(rows))


def _slice(result: LeafResult, a: int, b: int) -> LeafResult:
    from .column import LeafResult

    n = b - a
    layers = []
    for layer in result.layers:
        valid = layer.validity[a:b] if layer.validity is not None else None
        if not layer.is_list:
            layers.append(Layer(False, valid))
            continue
        assert layer.offsets is not None  # a list layer has offsets
        offsets = layer.offsets[a : b + 1]
        a, b = int(offsets[0]), int(offsets[-1])
        layers.append(Layer(True, valid, offsets - a))
    values = result.array
    return LeafResult(layers, [values.slice(a, b - a)], n)
