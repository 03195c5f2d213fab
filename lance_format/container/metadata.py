"""Column and page metadata of a v2 data file, with the ``Any``-wrapped encodings unpacked.

Encodings are stored as ``direct { bytes }`` holding a serialized ``google.protobuf.Any``;
the type URL tells a 2.0 ``ArrayEncoding`` from a 2.1/2.2 ``PageLayout``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np
from google.protobuf import any_pb2, empty_pb2
from google.protobuf.message import DecodeError, Message

from ..errors import CorruptFileError, UnsupportedError
from ..pb import encodings_v2_0_pb2, encodings_v2_1_pb2, file2_pb2, file_pb2
from ..schema import LanceSchema
from ..version import LanceFileVersion
from .footer import ContainerLayout, Tail, read_layout

M = TypeVar("M", bound=Message)

# The type URLs of the Any-wrapped encodings: 2.1+ page layouts, 2.0 page encodings, and
# the column encoding (both).  pylance writes them bare, without a type.googleapis.com host.
PAGE_LAYOUT_URL = "/lance.encodings21.PageLayout"
ARRAY_ENCODING_URL = "/lance.encodings.ArrayEncoding"
COLUMN_ENCODING_URL = "/lance.encodings.ColumnEncoding"
_ENCODING_TYPES: dict[str, type[Message]] = {
    PAGE_LAYOUT_URL: encodings_v2_1_pb2.PageLayout,
    ARRAY_ENCODING_URL: encodings_v2_0_pb2.ArrayEncoding,
    COLUMN_ENCODING_URL: encodings_v2_0_pb2.ColumnEncoding,
}


def parse_message(cls: type[M], data: bytes, what: str) -> M:
    """Parse a protobuf, turning any decode failure into a CorruptFileError."""
    msg = cls()
    try:
        msg.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise CorruptFileError(f"cannot parse {what}: {exc}") from exc
    return msg


def unpack_encoding(enc: file2_pb2.Encoding, what: str) -> Message | None:
    """Unwrap ``Encoding{direct{Any}}`` into the concrete message (None if absent)."""
    kind = enc.WhichOneof("location")
    if kind is None or kind == "none":
        return None
    if kind != "direct":
        raise UnsupportedError(f"{what}: deferred (indirect) encodings are not supported")
    wrapped = parse_message(any_pb2.Any, enc.direct.encoding, what)
    cls = _ENCODING_TYPES.get(wrapped.type_url)
    if cls is None:
        raise UnsupportedError(f"{what}: unknown encoding type {wrapped.type_url!r}")
    return parse_message(cls, wrapped.value, what)


@dataclass
class PageInfo:
    """One page of one column: where its buffers are and how it is encoded."""

    buffers: list[tuple[int, int]]  # (absolute position, size)
    num_rows: int  # top-level rows (2.1+), entries of this column (2.0)
    first_row: int  # row number of the page's first row within the column
    encoding: Message  # PageLayout (2.1+) or ArrayEncoding (2.0)
    index: int  # page number within the column


@dataclass
class ColumnInfo:
    pages: list[PageInfo]
    encoding: Message | None  # ColumnEncoding
    buffers: list[tuple[int, int]] = field(default_factory=list)

    def page_starts(self) -> np.ndarray:
        """First row of each page followed by the total, for searchsorted lookups."""
        rows = np.array([p.num_rows for p in self.pages], dtype=np.int64)
        return np.concatenate([[0], np.cumsum(rows)])

    def stored_bytes(self) -> int:
        """Bytes the column's pages take in the file (what reading all of it costs)."""
        return sum(size for page in self.pages for _, size in page.buffers)


@dataclass
class FileMetadata:
    layout: ContainerLayout
    version: LanceFileVersion
    num_rows: int
    schema: LanceSchema
    columns: list[ColumnInfo]


def _check_buffers(
    offsets: list[int], sizes: list[int], file_size: int, what: str
) -> list[tuple[int, int]]:
    if len(offsets) != len(sizes):
        raise CorruptFileError(f"{what}: {len(offsets)} buffer offsets but {len(sizes)} sizes")
    out = []
    for pos, size in zip(offsets, sizes, strict=True):
        if pos > file_size or size > file_size - pos:
            raise CorruptFileError(
                f"{what}: buffer at {pos} with size {size} is outside the file ({file_size} bytes)"
            )
        out.append((pos, size))
    return out


def parse_column(raw: bytes, col: int, file_size: int) -> ColumnInfo:
    what = f"column {col} metadata"
    meta = parse_message(file2_pb2.ColumnMetadata, raw, what)
    pages: list[PageInfo] = []
    first_row = 0
    for i, page in enumerate(meta.pages):
        pwhat = f"column {col} page {i}"
        buffers = _check_buffers(
            list(page.buffer_offsets), list(page.buffer_sizes), file_size, pwhat
        )
        encoding = unpack_encoding(page.encoding, pwhat)
        if encoding is None:
            raise CorruptFileError(f"{pwhat} has no encoding")
        pages.append(PageInfo(buffers, int(page.length), first_row, encoding, i))
        first_row += int(page.length)
    col_buffers = _check_buffers(
        list(meta.buffer_offsets), list(meta.buffer_sizes), file_size, what
    )
    return ColumnInfo(pages, unpack_encoding(meta.encoding, what), col_buffers)


def read_file_metadata(file, tail: Tail | None = None) -> FileMetadata:
    """Read everything but the data of a v2 file: footer, schema, column and page metadata.

    A legacy (v1) file is refused here: the legacy layer builds on this one, so the reader
    above both tells them apart (:func:`.footer.is_legacy_footer`)."""
    tail = tail or Tail(file)
    layout = read_layout(file, tail)
    gb_pos, gb_size = layout.global_buffers[0]
    descriptor = parse_message(
        file_pb2.FileDescriptor, tail.read(gb_pos, gb_size), "the file descriptor (global buffer 0)"
    )
    schema = LanceSchema.from_protos(descriptor.schema.fields, dict(descriptor.schema.metadata))
    columns = [
        parse_column(tail.read(pos, size), i, layout.file_size)
        for i, (pos, size) in enumerate(layout.column_meta)
    ]
    return FileMetadata(layout, layout.footer.version, int(descriptor.length), schema, columns)


# -- writer side -----------------------------------------------------------------------------


def wrap_encoding(msg: Message, type_url: str) -> file2_pb2.Encoding:
    """An ``Any``-wrapped direct encoding, with the bare type URL pylance writes."""
    return _wrap_bytes(msg.SerializeToString(), type_url)


def _wrap_bytes(value: bytes, type_url: str) -> file2_pb2.Encoding:
    wrapped = any_pb2.Any(type_url=type_url, value=value)
    return file2_pb2.Encoding(direct=file2_pb2.DirectEncoding(encoding=wrapped.SerializeToString()))


def encode_column(pages: list[file2_pb2.ColumnMetadata.Page]) -> bytes:
    """The ColumnMetadata of a 2.1+ column: its pages and an empty ColumnEncoding."""
    meta = file2_pb2.ColumnMetadata(encoding=_plain_column_encoding(), pages=pages)
    return meta.SerializeToString()


@functools.cache
def _plain_column_encoding() -> file2_pb2.Encoding:
    """Every 2.1+ column's (constant) encoding; the constructor above copies it."""
    return wrap_encoding(
        encodings_v2_0_pb2.ColumnEncoding(values=empty_pb2.Empty()), COLUMN_ENCODING_URL
    )


def page_entry(
    layout: Message, offsets: list[int], sizes: list[int], num_rows: int, priority: int
) -> file2_pb2.ColumnMetadata.Page:
    return file2_pb2.ColumnMetadata.Page(
        buffer_offsets=offsets,
        buffer_sizes=sizes,
        length=num_rows,
        encoding=_wrapped_layout(layout.SerializeToString()),
        priority=priority,
    )


def _wrapped_layout(layout: bytes) -> file2_pb2.Encoding:
    """A page layout's wrapped encoding, by its bytes: a small append writes the same few
    layouts for every file (bounded; the Page constructor copies what it is given)."""
    found = _WRAPPED_LAYOUTS.get(layout)
    if found is None:
        if len(_WRAPPED_LAYOUTS) >= 1024:
            _WRAPPED_LAYOUTS.clear()
        found = _WRAPPED_LAYOUTS[layout] = _wrap_bytes(layout, PAGE_LAYOUT_URL)
    return found


_WRAPPED_LAYOUTS: dict[bytes, file2_pb2.Encoding] = {}
