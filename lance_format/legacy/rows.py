"""Row selections inside v1 pages: sorted, non-overlapping ``[start, stop)`` ranges.

Every v1 decoder takes, per page, an ``int64 (k, 2)`` array of ranges and returns the rows
they cover, concatenated in order.  A range read is one range; a take is its rows merged into
runs; a list's child read is the item ranges of the selected rows.  Keeping ranges (not row
indices) makes full reads free of index arrays and lets takes read runs in one request.
"""

from __future__ import annotations

import numpy as np

from ..errors import CorruptFileError

# (batch number, ranges) pairs: the unit every v1 decoder reads
Request = tuple[int, np.ndarray]


def lengths(ranges: np.ndarray) -> np.ndarray:
    return ranges[:, 1] - ranges[:, 0]


def total(ranges: np.ndarray) -> int:
    return int(lengths(ranges).sum()) if len(ranges) else 0


def to_indices(ranges: np.ndarray) -> np.ndarray:
    """The row numbers the ranges cover, in order (vectorised ``concat(arange(s, e))``)."""
    n = lengths(ranges)
    out_start = np.cumsum(n) - n
    return np.arange(int(n.sum()), dtype=np.int64) + np.repeat(ranges[:, 0] - out_start, n)


def from_sorted_rows(rows: np.ndarray) -> np.ndarray:
    """Runs of consecutive values of a sorted unique row array, as ranges."""
    if not len(rows):
        return np.zeros((0, 2), dtype=np.int64)
    breaks = np.flatnonzero(np.diff(rows) != 1) + 1
    starts = rows[np.concatenate([[0], breaks])]
    stops = rows[np.concatenate([breaks - 1, [len(rows) - 1]])] + 1
    return np.stack([starts, stops], axis=1).astype(np.int64)


def non_empty(ranges: np.ndarray) -> np.ndarray:
    return ranges[ranges[:, 1] > ranges[:, 0]]


def check_within(ranges: np.ndarray, length: int, what: str) -> None:
    """Ranges must be ascending, non-overlapping and inside a page of ``length`` entries."""
    if not len(ranges):
        return
    if (
        ranges[0, 0] < 0
        or ranges[-1, 1] > length
        or (ranges[:, 1] < ranges[:, 0]).any()
        or (ranges[1:, 0] < ranges[:-1, 1]).any()
    ):
        raise CorruptFileError(
            f"{what}: rows {ranges[0, 0]}..{ranges[-1, 1]} are outside the page's {length} "
            "entries or out of order"
        )


def split_by_batch(offsets: np.ndarray, start: int, stop: int) -> list[Request]:
    """File rows ``[start, stop)`` as one range per batch they touch."""
    if stop <= start:
        return []
    first = int(np.searchsorted(offsets, start, side="right")) - 1
    last = int(np.searchsorted(offsets, stop, side="left"))
    out = []
    for b in range(first, last):
        lo = max(start, int(offsets[b])) - int(offsets[b])
        hi = min(stop, int(offsets[b + 1])) - int(offsets[b])
        if hi > lo:
            out.append((b, np.array([[lo, hi]], dtype=np.int64)))
    return out


def split_rows_by_batch(offsets: np.ndarray, rows: np.ndarray) -> list[Request]:
    """Sorted unique file rows as runs per batch."""
    if not len(rows):
        return []
    batch = np.searchsorted(offsets, rows, side="right") - 1
    cuts = np.flatnonzero(np.diff(batch)) + 1
    out = []
    for part_rows, part_batch in zip(np.split(rows, cuts), np.split(batch, cuts), strict=True):
        b = int(part_batch[0])
        out.append((b, from_sorted_rows(part_rows - offsets[b])))
    return out


def with_end_entry(ranges: np.ndarray) -> np.ndarray:
    """Entries ``s..e`` inclusive: an offsets array has one more entry than rows."""
    return ranges + np.array([0, 1], dtype=np.int64)


def spans(entries: np.ndarray, ranges: np.ndarray, what: str) -> tuple[np.ndarray, np.ndarray]:
    """From the offset entries ``s..e`` of every range (concatenated), the (first, last)
    offset of each range and the length of each row; offsets must never decrease."""
    sizes = lengths(ranges) + 1
    if len(entries) != int(sizes.sum()):
        raise CorruptFileError(f"{what}: {len(entries)} offsets for {int(sizes.sum())} wanted")
    ends = np.cumsum(sizes) - 1
    starts = ends - (sizes - 1)
    entries = entries.astype(np.int64, copy=False)
    diffs = np.diff(entries)
    row_lengths = np.delete(diffs, ends[:-1]) if len(ends) > 1 else diffs
    if (row_lengths < 0).any() or (len(entries) and entries[starts].min() < 0):
        raise CorruptFileError(f"{what}: offsets decrease or are negative")
    return np.stack([entries[starts], entries[ends]], axis=1), row_lengths


def merge_adjacent(ranges: np.ndarray) -> np.ndarray:
    """Join ranges where one ends exactly where the next starts (same rows, fewer ranges;
    offsets reads need it, since touching row ranges share an offsets entry)."""
    if len(ranges) < 2:
        return ranges
    new = ranges[1:, 0] != ranges[:-1, 1]
    starts = ranges[np.concatenate([[True], new]), 0]
    stops = ranges[np.concatenate([new, [True]]), 1]
    return np.stack([starts, stops], axis=1)
