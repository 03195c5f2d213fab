"""Pages of a 2.0 column: their row ranges, encodings and lazily read buffers.

In 2.0 every page of a column carries a nested ``lance.encodings.ArrayEncoding`` whose
``Buffer`` leaves point at the page's buffers (digest §7).  ``Page.length`` counts the entries
of *that* column (items for a list's child column), and pages of different columns are
independent, so each column keeps its own cumulative page starts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from google.protobuf import any_pb2
from google.protobuf.message import DecodeError, Message

from ..errors import CorruptFileError, UnsupportedError
from ..pb import encodings_v2_0_pb2 as pb

ReadRanges = Callable[[list[tuple[int, int]]], list[bytes]]

ARRAY_ENCODING_URL = "/lance.encodings.ArrayEncoding"
COLUMN_ENCODING_URL = "/lance.encodings.ColumnEncoding"


def _parse_any(enc, cls: type[Message], url: str, what: str) -> Message | None:
    """Unwrap ``Encoding{direct{Any}}``; None when the column has no encoding at all."""
    kind = enc.WhichOneof("location")
    if kind is None or kind == "none":
        return None
    if kind != "direct":
        raise UnsupportedError(f"{what}: deferred (indirect) encodings are not supported")
    try:
        wrapped = any_pb2.Any()
        wrapped.ParseFromString(enc.direct.encoding)
        if wrapped.type_url != url:
            raise UnsupportedError(f"{what}: expected {url}, found {wrapped.type_url!r}")
        msg = cls()
        msg.ParseFromString(wrapped.value)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise CorruptFileError(f"cannot parse {what}: {exc}") from exc
    return msg


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


def _buffers(offsets, sizes, what: str) -> list[tuple[int, int]]:
    if len(offsets) != len(sizes):
        raise CorruptFileError(f"{what}: {len(offsets)} buffer offsets but {len(sizes)} sizes")
    return [(int(o), int(s)) for o, s in zip(offsets, sizes, strict=True)]


def parse_column(meta, col: int) -> ColumnPages:
    """Parse a ``lance.file.v2.ColumnMetadata`` holding 2.0 pages."""
    what = f"column {col}"
    lengths = np.array([int(p.length) for p in meta.pages], dtype=np.int64)
    starts = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=starts[1:])
    encodings = []
    buffers = []
    for i, page in enumerate(meta.pages):
        pwhat = f"{what} page {i}"
        enc = _parse_any(page.encoding, pb.ArrayEncoding, ARRAY_ENCODING_URL, pwhat)
        if enc is None:
            raise CorruptFileError(f"{pwhat} has no encoding")
        encodings.append(enc)
        buffers.append(_buffers(page.buffer_offsets, page.buffer_sizes, pwhat))
    col_enc = _parse_any(meta.encoding, pb.ColumnEncoding, COLUMN_ENCODING_URL, what)
    col_bufs = _buffers(meta.buffer_offsets, meta.buffer_sizes, what)
    return ColumnPages(lengths, starts, buffers, encodings, col_enc, col_bufs)


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
