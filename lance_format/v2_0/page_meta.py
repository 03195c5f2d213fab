"""Page and column metadata of a 2.0 column, as the writer records them (the writer side of
:mod:`.pages`).

2.0 differs from 2.1+ only in what is wrapped (an ``ArrayEncoding`` per page), in
``Page.length`` (entries of the column, not top-level rows), in ``Page.priority`` (always
0), in the column encoding of a blob column (``ColumnEncoding.blob``) (docs/format/container.md) and
in the single page of a struct's column.
"""

from __future__ import annotations

from google.protobuf import empty_pb2

from ..container.metadata import ARRAY_ENCODING_URL, COLUMN_ENCODING_URL, wrap_encoding
from ..pb import encodings_v2_0_pb2 as pb
from ..pb import file2_pb2
from ..schema import LanceField, is_blob_leaf


def page_entry(
    encoding: pb.ArrayEncoding, buffers: list[tuple[int, int]], num_entries: int
) -> file2_pb2.ColumnMetadata.Page:
    """A page of ``num_entries`` entries whose buffers are at ``(position, size)``."""
    return file2_pb2.ColumnMetadata.Page(
        buffer_offsets=[p for p, _ in buffers],
        buffer_sizes=[s for _, s in buffers],
        length=num_entries,
        encoding=wrap_encoding(encoding, ARRAY_ENCODING_URL),
        priority=0,
    )


def encode_column(field: LanceField, pages: list[file2_pb2.ColumnMetadata.Page]) -> bytes:
    """The ColumnMetadata of the 2.0 column of ``field``.

    A struct's column gets one ``SimpleStruct`` page covering every row, however many
    slices were written: pylance's 2.0 reader accepts no other (its children keep their
    pages).  A blob column says so in its column encoding."""
    values = pb.ColumnEncoding(values=empty_pb2.Empty())
    column = pb.ColumnEncoding(blob=pb.Blob(inner=values)) if is_blob_leaf(field) else values
    if field.logical_type == "struct" and not field.is_packed_struct():
        rows = sum(int(p.length) for p in pages)
        pages = [page_entry(pb.ArrayEncoding(struct=pb.SimpleStruct()), [], rows)]
    meta = file2_pb2.ColumnMetadata(
        encoding=wrap_encoding(column, COLUMN_ENCODING_URL), pages=pages
    )
    return meta.SerializeToString()
