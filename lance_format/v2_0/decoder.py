"""Reading fields of a Lance 2.0 data file (``lance.encodings.ArrayEncoding`` pages).

In 2.0 every field has a column of its own, parents included (docs/format/container.md): a struct's
column holds ``SimpleStruct`` pages without buffers, a list's column holds the list's end offsets
and its child column holds the items.  Only the children of a packed struct have no column
(the struct's column holds them row-major).  So a field is read by walking the schema:

* a leaf (or packed struct, or fixed-size list) decodes the pages of its column that overlap
  the requested entries;
* a struct reads each child over the same entries (2.0 has no struct validity);
* a list decodes its offsets for the requested rows, which gives the (contiguous) item range
  to read from the child column.  List offsets are page-local: page ``p`` counts its items
  from 0, and its first item is the sum of ``List.num_items`` of the earlier pages;
* a blob column (``ColumnEncoding.blob``) holds ``PackedStruct[position, size]`` descriptors
  of byte ranges elsewhere in the file; ``position = 1, size = 0`` marks a null.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..container.metadata import ColumnInfo
from ..errors import CorruptFileError, InvalidArgumentError, LanceError, UnsupportedError
from ..schema import LEGACY_BLOB_DESCRIPTOR, LanceField, is_legacy_blob
from .arrays import decode_array, decode_packed_struct, decode_uints, storage_type
from .pages import ColumnPages, PageData, ReadRanges, parse_column

# ``take`` decodes runs of nearby rows together: indices closer than this share one range.
TAKE_GAP = 64

_BLOB_DESCRIPTOR = LEGACY_BLOB_DESCRIPTOR
_LISTS = ("list", "large_list", "list.struct", "large_list.struct")


def v20_column_fields(fields: Sequence[LanceField]) -> list[LanceField]:
    """The fields that own a column in a 2.0 file, in column order: every field depth-first,
    except the children of a packed struct (which live in the struct's column)."""
    out: list[LanceField] = []

    def walk(f: LanceField) -> None:
        out.append(f)
        if f.is_packed_struct():
            return
        for c in f.children:
            walk(c)

    for f in fields:
        walk(f)
    return out


class _Reader:
    """Decodes fields of one file; holds the column lookups for one call."""

    def __init__(
        self,
        column_index: dict[int, int],
        columns: list[ColumnInfo],
        read_ranges: ReadRanges,
        parsed: dict[int, ColumnPages] | None,
        blob_descriptors: bool = False,
    ):
        self.blob_descriptors = blob_descriptors
        self.column_index = column_index
        self.columns = columns
        self.read_ranges = read_ranges
        # parsed columns, memoised by the caller (one dict per open file)
        self.parsed = parsed if parsed is not None else {}

    def pages(self, field: LanceField) -> ColumnPages:
        col = self.column_index.get(field.id)
        if col is None:
            raise CorruptFileError(f"field {field.name!r} (id {field.id}) has no column")
        if not 0 <= col < len(self.columns):
            raise CorruptFileError(f"field {field.name!r} maps to missing column {col}")
        pages = self.parsed.get(col)
        if pages is None:
            pages = self.parsed[col] = parse_column(self.columns[col], col)
        return pages

    def page_data(self, pages: ColumnPages, p: int) -> PageData:
        return PageData(pages.buffers[p], pages.column_buffers, self.read_ranges)

    def num_entries(self, field: LanceField) -> int:
        return self.pages(field).num_entries

    # -- dispatch --------------------------------------------------------------------------

    def decode(self, field: LanceField, start: int, stop: int) -> pa.Array:
        """Entries [start, stop) of the field's column as an array of its Arrow type."""
        t = field.arrow_type
        if stop <= start:
            return _empty(t)
        st = storage_type(t)
        lt = field.logical_type
        if field.is_blob() and (pa.types.is_large_binary(st) or pa.types.is_binary(st)):
            out = self._blob(field, st, start, stop)
        elif lt == "struct" and not field.is_packed_struct():
            out = self._struct(field, st, start, stop)
        elif lt in _LISTS:
            out = self._list(field, st, start, stop)
        elif lt == "map":
            raise UnsupportedError("maps cannot be stored in Lance 2.0 files")
        elif lt.startswith("fixed_size_list") and field.children:
            raise UnsupportedError("fixed-size lists of structs cannot be stored in Lance 2.0")
        else:
            out = self._leaf(field, st, start, stop)
        if isinstance(t, pa.BaseExtensionType):
            out = pa.ExtensionArray.from_storage(t, out)
        if len(out) != stop - start:
            raise CorruptFileError(
                f"decoded {len(out)} entries of {field.name!r}, expected {stop - start}"
            )
        return out

    def _check_range(self, pages: ColumnPages, field: LanceField, start: int, stop: int) -> None:
        if start < 0 or stop < start or stop > pages.num_entries:
            raise CorruptFileError(
                f"entries [{start}, {stop}) of {field.name!r} are outside its column of "
                f"{pages.num_entries} entries"
            )

    def _page_pieces(self, field: LanceField, start: int, stop: int):
        """(page number, page data, local start, local stop) for each overlapping page."""
        pages = self.pages(field)
        self._check_range(pages, field, start, stop)
        for p in pages.overlapping(start, stop):
            base = int(pages.starts[p])
            r0 = max(start, base) - base
            r1 = min(stop, base + int(pages.lengths[p])) - base
            if r1 > r0:
                yield pages, p, self.page_data(pages, p), r0, r1

    def _leaf(self, field: LanceField, t: pa.DataType, start: int, stop: int) -> pa.Array:
        parts = [
            decode_array(pages.encodings[p], data, r0, r1, t)
            for pages, p, data, r0, r1 in self._page_pieces(field, start, stop)
        ]
        return _concat(parts, t)

    # -- structs ---------------------------------------------------------------------------

    def _struct(self, field: LanceField, t: pa.DataType, start: int, stop: int) -> pa.Array:
        pages = self.pages(field)
        self._check_range(pages, field, start, stop)
        for p in pages.overlapping(start, stop):
            kind = pages.encodings[p].WhichOneof("array_encoding")
            if kind != "struct":
                raise UnsupportedError(f"2.0 struct column page encoded as {kind}")
        n = stop - start
        if not field.children:
            return pa.array([{}] * n, type=t)
        children = [self.decode(c, start, stop) for c in field.children]
        return pa.StructArray.from_arrays(children, fields=list(t))

    # -- lists -----------------------------------------------------------------------------

    def _list(self, field: LanceField, t: pa.DataType, start: int, stop: int) -> pa.Array:
        if len(field.children) != 1:
            raise CorruptFileError(f"list field {field.name!r} without exactly one child")
        pages = self.pages(field)
        self._check_range(pages, field, start, stop)
        item_base = self._list_item_bases(field, pages)
        lo_parts, hi_parts, valid_parts = [], [], []
        for _, p, data, r0, r1 in self._page_pieces(field, start, stop):
            enc = pages.encodings[p].list
            adjust = int(enc.null_offset_adjustment)
            first = r0 - 1 if r0 > 0 else 0
            ends, ends_valid = decode_uints(enc.offsets, data, first, r1)
            if ends_valid is not None and not ends_valid.all():
                raise CorruptFileError("list offsets with nulls")
            nulls = ends >= adjust if adjust > 0 else np.zeros(len(ends), dtype=bool)
            ends = np.where(nulls, ends - np.uint64(adjust), ends).astype(np.int64)
            if r0 > 0:
                begin = ends[0]
                ends, nulls = ends[1:], nulls[1:]
            else:
                begin = 0
            if (ends > int(enc.num_items)).any() or begin > int(enc.num_items):
                raise CorruptFileError("list offsets beyond the page's items")
            starts_local = np.empty(len(ends), dtype=np.int64)
            if len(ends):
                starts_local[0] = begin
                starts_local[1:] = ends[:-1]
            if (ends < starts_local).any():
                raise CorruptFileError("list end offsets are not increasing")
            lo_parts.append(starts_local + item_base[p])
            hi_parts.append(ends + item_base[p])
            valid_parts.append(~nulls)
        lo = np.concatenate(lo_parts)
        hi = np.concatenate(hi_parts)
        valid = np.concatenate(valid_parts)
        if len(lo) > 1 and (lo[1:] != hi[:-1]).any():
            raise CorruptFileError("list items of consecutive rows are not contiguous")
        first_item, last_item = int(lo[0]), int(hi[-1])
        items = self.decode(field.children[0], first_item, last_item)
        large = pa.types.is_large_list(t)
        offsets = np.empty(len(hi) + 1, dtype=np.int64)
        offsets[0] = 0
        offsets[1:] = hi - first_item
        if not large and offsets[-1] > np.iinfo(np.int32).max:
            raise CorruptFileError("more list items than 32-bit offsets can address")
        off = offsets.astype(np.int64 if large else np.int32)
        vb = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
        return pa.Array.from_buffers(t, len(hi), [vb, pa.py_buffer(off)], children=[items])

    def _list_item_bases(self, field: LanceField, pages: ColumnPages) -> np.ndarray:
        """First item (in the child column) of each page of a list column."""
        counts = np.zeros(len(pages.lengths) + 1, dtype=np.int64)
        for p, enc in enumerate(pages.encodings):
            if enc.WhichOneof("array_encoding") != "list":
                raise UnsupportedError(
                    f"2.0 list column page encoded as {enc.WhichOneof('array_encoding')}"
                )
            counts[p + 1] = int(enc.list.num_items)
        bases = np.cumsum(counts)
        child_entries = self.num_entries(field.children[0])
        if bases[-1] != child_entries:
            raise CorruptFileError(
                f"list {field.name!r} refers to {bases[-1]} items, its child column has "
                f"{child_entries}"
            )
        return bases[:-1]

    # -- blobs -----------------------------------------------------------------------------

    def _blob(self, field: LanceField, t: pa.DataType, start: int, stop: int) -> pa.Array:
        pages = self.pages(field)
        enc = pages.column_encoding
        if enc is None or enc.WhichOneof("column_encoding") != "blob":
            # a blob hint without a blob column: plain binary data
            return self._leaf(field, t, start, stop)
        parts = []
        for _, p, data, r0, r1 in self._page_pieces(field, start, stop):
            page_enc = pages.encodings[p]
            if page_enc.WhichOneof("array_encoding") != "packed_struct":
                raise UnsupportedError("2.0 blob descriptions that are not packed structs")
            parts.append(
                decode_packed_struct(page_enc.packed_struct, data, r0, r1, _BLOB_DESCRIPTOR)
            )
        desc = _concat(parts, _BLOB_DESCRIPTOR)
        if self.blob_descriptors:  # as stored: a null is (1, 0)
            return desc
        positions = desc.field(0).to_numpy().astype(np.int64)
        sizes = desc.field(1).to_numpy().astype(np.int64)
        nulls = (positions == 1) & (sizes == 0)
        if (positions < 0).any() or (sizes < 0).any():
            raise CorruptFileError("blob position or size beyond the range of the file")
        wanted = np.flatnonzero(sizes > 0)
        ranges = list(zip(positions[wanted].tolist(), sizes[wanted].tolist(), strict=True))
        chunks = self.read_ranges(ranges) if ranges else []
        data = b"".join(chunks)
        if len(data) != int(sizes.sum()):
            raise CorruptFileError("blob reads returned the wrong number of bytes")
        offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        large = pa.types.is_large_binary(t)
        if not large and offsets[-1] > np.iinfo(np.int32).max:
            raise CorruptFileError("blob bytes exceed 32-bit offsets")
        vb = pa.py_buffer(np.packbits(~nulls, bitorder="little")) if nulls.any() else None
        return pa.Array.from_buffers(
            t,
            len(sizes),
            [vb, pa.py_buffer(offsets.astype(np.int64 if large else np.int32)), pa.py_buffer(data)],
        )


def _concat(parts: list[pa.Array], t: pa.DataType) -> pa.Array:
    if not parts:
        return _empty(t)
    if len(parts) == 1:
        return parts[0]
    if not _has_dictionary(t):
        return pa.concat_arrays(parts)
    if isinstance(t, pa.BaseExtensionType):
        storage = _concat([p.storage for p in parts], t.storage_type)
        return pa.ExtensionArray.from_storage(t, storage)
    if pa.types.is_dictionary(t):
        return _concat_dictionaries(parts)
    return _concat_nested(parts, t)


def _has_dictionary(t: pa.DataType) -> bool:
    t = storage_type(t)
    if pa.types.is_dictionary(t):
        return True
    return any(_has_dictionary(t.field(i).type) for i in range(t.num_fields))


def _concat_nested(parts: list[pa.Array], t: pa.DataType) -> pa.Array:
    """Join nested pieces child by child, so that dictionaries below the top level are
    joined by :func:`_concat_dictionaries` (Arrow cannot unify dictionaries holding nulls)."""
    n = sum(len(p) for p in parts)
    valid = None
    if any(p.null_count for p in parts):
        mask = np.concatenate([p.is_valid().to_numpy(zero_copy_only=False) for p in parts])
        valid = pa.py_buffer(np.packbits(mask, bitorder="little"))
    if pa.types.is_struct(t):
        children = [
            _concat([p.field(i) for p in parts], t.field(i).type) for i in range(t.num_fields)
        ]
        return pa.Array.from_buffers(t, n, [valid], children=children)
    if pa.types.is_fixed_size_list(t):
        size = t.list_size
        values = [p.values.slice(p.offset * size, len(p) * size) for p in parts]
        return pa.Array.from_buffers(t, n, [valid], children=[_concat(values, t.value_type)])
    # list, large_list and map: offsets rebased onto the joined values
    values, offsets, base = [], [np.zeros(1, np.int64)], 0
    for p in parts:
        off = np.asarray(p.offsets, dtype=np.int64)
        values.append(p.values.slice(int(off[0]), int(off[-1] - off[0])))
        offsets.append(off[1:] - off[0] + base)
        base += int(off[-1] - off[0])
    dtype = np.int64 if pa.types.is_large_list(t) else np.int32
    buf = pa.py_buffer(np.concatenate(offsets).astype(dtype))
    child = _concat(values, values[0].type)
    return pa.Array.from_buffers(t, n, [valid, buf], children=[child])


def _concat_dictionaries(parts: list[pa.DictionaryArray]) -> pa.DictionaryArray:
    """Join pieces that each carry a dictionary: distinct dictionaries are appended and the
    keys shifted (as pylance does; Arrow cannot unify dictionaries holding nulls).  Pieces
    of the same page share one dictionary."""
    t = parts[0].type
    uniques: list[pa.Array] = []
    shifts: list[int] = []  # first key of each distinct dictionary
    part_shift: list[int] = []
    total = 0
    for part in parts:
        d = part.dictionary
        found = next((i for i, u in enumerate(uniques) if u is d or u.equals(d)), None)
        if found is None:
            uniques.append(d)
            shifts.append(total)
            total += len(d)
            found = len(uniques) - 1
        part_shift.append(shifts[found])
    if total > np.iinfo(t.index_type.to_pandas_dtype()).max + 1:
        # too many entries for the key type: re-encode the values instead
        values = pa.concat_arrays([p.dictionary_decode() for p in parts])
        try:
            return values.dictionary_encode().cast(t)
        except (pa.ArrowInvalid, OverflowError) as exc:
            raise UnsupportedError(f"the pages' dictionaries do not fit {t}: {exc}") from None
    keys = []
    for part, shift in zip(parts, part_shift, strict=True):
        k = part.indices
        keys.append(pc.add(k, pa.scalar(shift, k.type)) if shift else k)
    dictionary = uniques[0] if len(uniques) == 1 else pa.concat_arrays(uniques)
    return pa.DictionaryArray.from_arrays(pa.concat_arrays(keys), dictionary)


def _empty(t: pa.DataType) -> pa.Array:
    if isinstance(t, pa.BaseExtensionType):
        return pa.ExtensionArray.from_storage(t, pa.array([], type=t.storage_type))
    return pa.array([], type=t)


def _result_type(field: LanceField, blob_descriptors: bool) -> pa.DataType:
    if blob_descriptors and is_legacy_blob(field):
        return _BLOB_DESCRIPTOR
    return field.arrow_type


def decode_v20_field(
    field: LanceField,
    column_index: dict[int, int],
    columns: list[ColumnInfo],
    read_ranges: ReadRanges,
    start: int,
    stop: int,
    parsed: dict[int, ColumnPages] | None = None,
    blob_descriptors: bool = False,
) -> pa.Array:
    """Top-level rows [start, stop) of ``field`` from a 2.0 file.

    ``columns[c]`` is column ``c`` as the container parsed it (``FileMetadata.columns``);
    ``column_index`` maps field ids to columns; ``read_ranges`` reads (offset, length) pairs.
    With ``blob_descriptors`` a blob column gives its (position, size) descriptors.
    """
    reader = _Reader(column_index, columns, read_ranges, parsed, blob_descriptors)
    total = reader.num_entries(field)
    if start < 0 or stop < start or stop > total:
        raise InvalidArgumentError(f"rows [{start}, {stop}) outside a column of {total} rows")
    if stop == start:
        return _empty(_result_type(field, blob_descriptors))
    with _corrupt_on_failure(field):
        return reader.decode(field, start, stop)


def take_v20_field(
    field: LanceField,
    column_index: dict[int, int],
    columns: list[ColumnInfo],
    read_ranges: ReadRanges,
    indices: np.ndarray,
    parsed: dict[int, ColumnPages] | None = None,
    blob_descriptors: bool = False,
) -> pa.Array:
    """Rows at ``indices`` (any order, repeats allowed) of ``field`` from a 2.0 file.

    Nearby rows are decoded together as one range, so only the pages (and, for flat data,
    the byte ranges) around the requested rows are read."""
    idx = np.asarray(indices, dtype=np.int64).reshape(-1)
    reader = _Reader(column_index, columns, read_ranges, parsed, blob_descriptors)
    result_type = _result_type(field, blob_descriptors)
    if len(idx) == 0:
        return _empty(result_type)
    total = reader.num_entries(field)
    if idx.min() < 0 or idx.max() >= total:
        raise InvalidArgumentError(f"row index out of range for a column of {total} rows")
    uniq, inverse = np.unique(idx, return_inverse=True)
    cut = np.flatnonzero(np.diff(uniq) > TAKE_GAP) + 1
    bounds = np.concatenate([[0], cut, [len(uniq)]])
    pieces = []
    with _corrupt_on_failure(field):
        for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
            lo, hi = int(uniq[a]), int(uniq[b - 1]) + 1
            arr = reader.decode(field, lo, hi)
            if hi - lo == b - a:
                pieces.append(arr)
            else:
                pieces.append(arr.take(pa.array(uniq[a:b] - lo)))
        out = _concat(pieces, result_type)
        if len(uniq) == len(idx) and (np.diff(idx) > 0).all():
            return out
        return out.take(pa.array(inverse.astype(np.int64)))


@contextmanager
def _corrupt_on_failure(field: LanceField) -> Iterator[None]:
    """Whatever numpy or Arrow reject in decoded data means the file is corrupt."""
    try:
        yield
    except LanceError as exc:
        exc.with_context(column=field.name)
        raise
    except (
        ValueError,
        IndexError,
        TypeError,
        OverflowError,
        struct.error,
        pa.ArrowException,
    ) as exc:
        raise CorruptFileError(f"cannot decode: {exc}", column=field.name) from exc
