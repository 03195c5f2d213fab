"""What a structural page decoder hands back: levels and visible values for whole rows.

Page decoders (mini-block, full-zip, constant, blob) decode *some* chunks or byte ranges of
a page.  Those may begin with the tail of a row that started earlier and may contain rows
nobody asked for; :func:`select_rows` trims the levels and values to exactly the wanted
rows, vectorised, so the rep/def unraveling only ever sees whole rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ..compression.blocks import Block, slice_block, take_block
from ..compression.dictionary import DictionaryItems
from ..errors import CorruptFileError

Rows = np.ndarray | range
"""Sorted unique page-relative rows: an index array, or a ``range`` for a contiguous run
(a scan step's part of a page), which flat mini-block pages decode by chunk range and a
slice, with no index array built; other decoders take it as an array (:func:`row_array`)."""


@dataclass
class LeafPiece:
    """Levels and values of whole rows of one leaf column, in row order."""

    rep: np.ndarray | None  # uint16 per level, None when the column has no lists
    defs: np.ndarray | None  # uint16 per level, None when everything is valid
    num_levels: int
    values: Block | pa.Array  # one value per visible level (dictionary indices if a dictionary;
    # an Arrow array only for the null placeholders of all-null pages)
    num_rows: int
    dictionary: pa.Array | None = None  # the dictionary items, when the page has one
    items: DictionaryItems | None = None  # the same, ready to expand (see dictionary_items)
    layers: list[int] | None = None  # the page's rep/def layers, innermost first


def select_rows(
    rep: np.ndarray | None,
    defs: np.ndarray | None,
    num_levels: int,
    values: Block,
    *,
    max_rep: int,
    max_visible_def: int,
    group_starts: np.ndarray,
    group_first_row: np.ndarray,
    wanted: Rows | None,
) -> tuple[np.ndarray | None, np.ndarray | None, int, Block, int]:
    """Keep only the levels (and their values) of the ``wanted`` rows.

    ``group_starts`` are the level indices where each contiguous run of decoded chunks
    begins and ``group_first_row`` the page row number of the first row that *starts* in
    it; levels before a group's first row start belong to a row decoded elsewhere.
    ``wanted`` are sorted unique page row numbers (None = every complete row decoded).
    Returns (rep, defs, num_levels, values, num_rows).
    """
    if wanted is None and (
        max_rep == 0
        or (rep is not None and len(group_starts) and (rep[group_starts] == max_rep).all())
    ):
        # every group begins on a row boundary: all decoded levels are wanted (full scans)
        num_rows = num_levels if max_rep == 0 else int(np.count_nonzero(rep == max_rep))
        return rep, defs, num_levels, values, num_rows
    if max_rep == 0 and wanted is not None and _contiguous(wanted):
        # a row range inside one group (range reads of part of a page): slice, no gather
        ends = np.array([wanted[0], wanted[-1]], dtype=np.int64)
        g0, g1 = np.searchsorted(group_first_row, ends, side="right") - 1
        end = group_starts[g0 + 1] if g0 + 1 < len(group_starts) else num_levels
        lv0 = int(group_starts[g0] + (wanted[0] - group_first_row[g0])) if g0 >= 0 else -1
        n = len(wanted)
        if g0 == g1 and g0 >= 0 and lv0 + n <= end:
            if isinstance(values, pa.Array):
                values = values.slice(lv0, n)
            else:
                values = slice_block(values, lv0, lv0 + n)
            return None, defs[lv0 : lv0 + n] if defs is not None else None, n, values, n
    if wanted is not None:
        wanted = row_array(wanted)
    if max_rep == 0 and wanted is not None:
        # without lists a level is a row and every level has a value: index directly
        g = np.searchsorted(group_first_row, wanted, side="right") - 1
        lv = group_starts[np.maximum(g, 0)] + (wanted - group_first_row[np.maximum(g, 0)])
        if len(lv) and ((g < 0).any() or lv.max() >= num_levels):
            raise CorruptFileError("requested rows are not in the decoded chunks")
        if isinstance(values, pa.Array):
            values = values.take(pa.array(lv))
        else:
            values = take_block(values, lv)
        return None, defs[lv] if defs is not None else None, len(lv), values, len(lv)
    if max_rep:
        is_start = rep == max_rep
    else:
        is_start = np.ones(num_levels, dtype=bool)
    start_count = np.cumsum(is_start)  # rows started up to and including each level
    # starts before each group, to number rows within the group
    group_idx = np.searchsorted(group_starts, np.arange(num_levels), side="right") - 1
    starts_before = np.concatenate([[0], start_count])[group_starts]
    in_row = start_count > starts_before[group_idx]  # false for a group's leading tail
    row_of_level = group_first_row[group_idx] + (start_count - starts_before[group_idx]) - 1
    keep = in_row
    if wanted is not None:
        pos = np.searchsorted(wanted, row_of_level)
        pos = np.minimum(pos, max(len(wanted) - 1, 0))
        keep = keep & (wanted[pos] == row_of_level) if len(wanted) else np.zeros_like(keep)
    num_rows = int(np.count_nonzero(keep & is_start))
    if wanted is not None and num_rows != len(wanted):
        raise CorruptFileError(
            f"decoded {num_rows} of {len(wanted)} requested rows: the chunk or repetition "
            "index does not match the levels"
        )
    if keep.all():
        return rep, defs, num_levels, values, num_rows
    visible = defs <= max_visible_def if defs is not None else np.ones(num_levels, dtype=bool)
    value_idx = np.flatnonzero(keep[visible])
    if isinstance(values, pa.Array):  # all-null placeholder
        values = values.take(pa.array(value_idx))
    else:
        values = take_block(values, value_idx)
    rep = rep[keep] if rep is not None else None
    defs = defs[keep] if defs is not None else None
    return rep, defs, int(np.count_nonzero(keep)), values, num_rows


def row_array(rows: Rows) -> np.ndarray:
    """``rows`` as an int64 index array (a ``range`` expanded without a Python loop)."""
    if isinstance(rows, range):
        return np.arange(rows.start, rows.stop, dtype=np.int64)
    return rows


def _contiguous(rows: Rows) -> bool:
    """Sorted unique rows that form one run (a range read)."""
    return len(rows) > 1 and int(rows[-1]) - int(rows[0]) + 1 == len(rows)
