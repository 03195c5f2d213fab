"""Pages of a 2.0 column: their row ranges, encodings and lazily read buffers.

In 2.0 every page of a column carries a nested ``lance.encodings.ArrayEncoding`` whose
``Buffer`` leaves point at the page's buffers (docs/format/v2_0.md).  ``Page.length`` counts the
entries of *that* column (items for a list's child column), and pages of different columns are
independent, so each column keeps its own cumulative page starts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..container.metadata import ColumnInfo
from ..errors import CorruptFileError, UnsupportedError
from ..pb import encodings_v2_0_pb2 as pb

ReadRanges = Callable[[list[tuple[int, int]]], list[bytes]]


@dataclass
class ColumnPages:
    """The parsed pages of one column."""

    lengths: np.ndarray  # int64, entries per page
    starts: np.ndarray  # int64, first entry of each page, plus the total at the end
    buffers: list[list[tuple[int, int]]]  # (position, size) of each page's buffers
    encodings: list[pb.ArrayEncoding]
    column_encoding: pb.ColumnEncoding | None
    column_buffers: list[tuple[int, int]] = field(default_factory=list)

    @property
    def num_entries(self) -> int:
        return int(self.starts[-1])

    def overlapping(self, start: int, stop: int) -> range:
        """Indices of the pages holding entries [start, stop)."""
        if stop <= start:
            return range(0)
        first = int(np.searchsorted(self.starts, start, side="right")) - 1
        last = int(np.searchsorted(self.starts, stop, side="left"))
        return range(max(first, 0), min(last, len(self.lengths)))


def parse_column(info: ColumnInfo, col: int) -> ColumnPages:
    """The 2.0 view of a column the container has parsed (and bounds-checked against the
    file): each page's encoding must be an ``ArrayEncoding``, the column's a
    ``ColumnEncoding`` or none."""
    what = f"column {col}"
    lengths = np.array([p.num_rows for p in info.pages], dtype=np.int64)
    starts = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=starts[1:])
    encodings: list[pb.ArrayEncoding] = []
    for page in info.pages:
        if not isinstance(page.encoding, pb.ArrayEncoding):
            raise UnsupportedError(
                f"{what} page {page.index}: a 2.0 page needs an ArrayEncoding, found "
                f"{page.encoding.DESCRIPTOR.full_name}"
            )
        encodings.append(page.encoding)
    col_enc = info.encoding
    if col_enc is not None and not isinstance(col_enc, pb.ColumnEncoding):
        raise UnsupportedError(
            f"{what}: a 2.0 column encoding must be a ColumnEncoding, found "
            f"{col_enc.DESCRIPTOR.full_name}"
        )
    buffers = [p.buffers for p in info.pages]
    return ColumnPages(lengths, starts, buffers, encodings, col_enc, info.buffers)


class PageData:
    """The buffers of one page, read on demand by byte range (whole buffers are cached)."""

    def __init__(
        self,
        buffers: list[tuple[int, int]],
        column_buffers: list[tuple[int, int]],
        read_ranges: ReadRanges,
    ):
        self._buffers = buffers
        self._column_buffers = column_buffers
        self._read_ranges = read_ranges
        self._whole: dict[tuple[int, int], np.ndarray] = {}

    def _locate(self, buf: pb.Buffer) -> tuple[int, int]:
        index = int(buf.buffer_index)
        if buf.buffer_type == pb.Buffer.page:
            table = self._buffers
        elif buf.buffer_type == pb.Buffer.column:
            table = self._column_buffers
        else:
            raise UnsupportedError("2.0 encodings pointing at file (global) buffers")
        if index >= len(table):
            raise CorruptFileError(f"buffer index {index} but the page has {len(table)} buffers")
        return table[index]

    def size(self, buf: pb.Buffer) -> int:
        return self._locate(buf)[1]

    def read(self, buf: pb.Buffer, start: int, length: int) -> np.ndarray:
        """Bytes [start, start+length) of a buffer, as uint8."""
        pos, size = self._locate(buf)
        if start < 0 or length < 0 or start + length > size:
            raise CorruptFileError(
                f"read of {length} bytes at {start} runs past a page buffer of {size} bytes"
            )
        whole = self._whole.get((int(buf.buffer_type), int(buf.buffer_index)))
        if whole is not None:
            return whole[start : start + length]
        if length == 0:
            return np.zeros(0, dtype=np.uint8)
        (data,) = self._read_ranges([(pos + start, length)])
        if len(data) != length:
            raise CorruptFileError(f"short read: wanted {length} bytes, got {len(data)}")
        return np.frombuffer(data, dtype=np.uint8)

    def read_all(self, buf: pb.Buffer) -> np.ndarray:
        key = (int(buf.buffer_type), int(buf.buffer_index))
        whole = self._whole.get(key)
        if whole is None:
            whole = self.read(buf, 0, self.size(buf))
            self._whole[key] = whole
        return whole
