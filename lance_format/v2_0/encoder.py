"""Encoding fields of a Lance 2.0 data file: one column per field, ``ArrayEncoding`` pages.

The writer side of :mod:`.decoder` and :mod:`.arrays` (docs/format/v2_0.md).  A slice of rows of a
top-level field becomes one page in *every* column of the field, in
:func:`~.decoder.v20_column_fields` order.  Keeping the pages of a parent and its children
cut at the same rows is what pylance's 2.0 reader needs: an item page may not be shared by
two list-offset pages.  Only plain encodings are written (as pylance's 2.0 writer does by
default):

* fixed-width values (ints, floats, bools, dates, times, timestamps, durations, decimals,
  fixed-size binary): ``Nullable{no_nulls | some_nulls(validity bitmap) | all_nulls}`` around
  ``Flat``; a fixed-size list puts ``FixedSizeList{items}`` inside that ``Nullable``;
* string / binary (and large): ``Binary`` of u64 *end* offsets and the bytes, a null storing
  ``end + null_adjustment`` (``len(bytes) + 1``); ``lance-encoding:compression`` compresses
  the bytes buffer;
* a string page of at least 100 rows with fewer than 100 distinct values: the writer's own
  ``Dictionary`` (u8 indices, 0 = null), pylance's 2.0 default;
* Arrow dictionaries: ``Dictionary`` of the keys (key width kept) and the items; a null key
  points at a null item, because pylance's reader takes the keys without validity;
* a struct: a ``SimpleStruct`` page without buffers (:mod:`.page_meta` merges them into the
  one page pylance's reader wants; 2.0 stores no struct validity, so null structs are
  refused as pylance does); a packed struct: one ``PackedStruct`` page, children row-major;
* a list: ``List`` of u64 end offsets local to the page (null = ``end + num_items + 1``);
  its child column gets the items of the same rows, possibly zero of them;
* a blob column (``lance-encoding:blob``): ``PackedStruct[position, size]`` descriptors of
  bytes written elsewhere in the file (:class:`PendingBlobPage`); a null is (1, 0).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..compression import general
from ..compression.compress import ColumnOptions
from ..errors import UnsupportedError
from ..pb import encodings_v2_0_pb2 as pb
from ..schema import LanceField, is_blob_leaf
from ..structural.page import EncodedPage
from ..structural.repdef import valid_mask
from .decoder import v20_column_fields

# pylance's 2.0 rule for giving a string page a dictionary of its own
DICT_MIN_ROWS = 100
DICT_MAX_ITEMS = 100
DICT_SAMPLE_ROWS = 4096

WriteExternal = Callable[[np.ndarray], int]  # writes bytes, returns their file position

_VARIABLE = (
    pa.types.is_string,
    pa.types.is_large_string,
    pa.types.is_binary,
    pa.types.is_large_binary,
)


def _storage(t: pa.DataType) -> pa.DataType:
    return t.storage_type if isinstance(t, pa.BaseExtensionType) else t


def _storage_array(arr: pa.Array) -> pa.Array:
    return arr.storage if isinstance(arr, pa.ExtensionArray) else arr


def _is_variable(t: pa.DataType) -> bool:
    return any(f(t) for f in _VARIABLE)


def _flat_bits(t: pa.DataType) -> int | None:
    """Bits per value of a type stored as ``Flat`` (None: not a whole-byte or 1-bit type)."""
    if pa.types.is_boolean(t):
        return 1
    if pa.types.is_dictionary(t) or pa.types.is_nested(t) or _is_variable(t):
        return None
    try:
        bits = t.bit_width
    except ValueError:
        return None
    return bits if bits > 0 and bits % 8 == 0 else None


def _fsl_item(t: pa.DataType) -> pa.DataType:
    while pa.types.is_fixed_size_list(t):
        t = _storage(t.value_type)
    return t


def _packed_bits(t: pa.DataType) -> int | None:
    """Bits per row a packed-struct child takes (whole bytes only), None if it cannot."""
    t = _storage(t)
    if pa.types.is_fixed_size_list(t):
        inner = _packed_bits(t.value_type)
        return None if inner is None else inner * t.list_size
    bits = _flat_bits(t)
    return bits if bits is not None and bits % 8 == 0 else None


# -- schema check ----------------------------------------------------------------------------


def unstorable(f: LanceField, t: pa.DataType | None = None) -> str | None:
    """Why field ``f`` cannot be written in a 2.0 file (checked once, before any data)."""
    t = _storage(f.arrow_type if t is None else t)
    if pa.types.is_map(t):
        return "maps cannot be stored in Lance 2.0 files; write version 2.2"
    if pa.types.is_dictionary(t):
        v = _storage(t.value_type)
        if _flat_bits(v) is None and not _is_variable(v):
            return f"dictionaries of {v} cannot be stored in Lance 2.0 files"
        return None
    if pa.types.is_struct(t):
        if f.is_packed_struct():
            for child in t:
                if _packed_bits(child.type) is None:
                    return (
                        f"packed struct child {child.name!r} of type {child.type}: a 2.0 packed "
                        "struct holds only fixed-width children of whole bytes"
                    )
            return None
        for child_field, child in zip(f.children, t, strict=True):
            problem = unstorable(child_field, child.type)
            if problem is not None:
                return problem
        return None
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return unstorable(f.children[0], t.value_type) if f.children else None
    if pa.types.is_fixed_size_list(t):
        item = _fsl_item(t)
        if _flat_bits(item) is None:
            return f"fixed-size lists of {item} items cannot be stored in Lance 2.0 files"
        return None
    if pa.types.is_null(t) or _is_variable(t) or _flat_bits(t) is not None:
        return None
    return f"the type {t} cannot be stored in Lance 2.0 files"


# -- buffers -----------------------------------------------------------------------------------


@dataclass
class _Buffers:
    """The buffers of one page, numbered in the order they are added."""

    data: list[np.ndarray | bytes] = field(default_factory=list)

    def add(self, buf: np.ndarray | bytes) -> pb.Buffer:
        if isinstance(buf, np.ndarray):  # the file writer counts bytes with len()
            buf = np.ascontiguousarray(buf).reshape(-1).view(np.uint8)
        self.data.append(buf)
        return pb.Buffer(buffer_index=len(self.data) - 1, buffer_type=pb.Buffer.page)

    def flat(self, bits: int, buf: np.ndarray | bytes, compression: pb.Compression | None = None):
        return pb.ArrayEncoding(
            flat=pb.Flat(bits_per_value=bits, buffer=self.add(buf), compression=compression)
        )


def _bytes(buf: pa.Buffer | None) -> np.ndarray:
    if buf is None:
        return np.zeros(0, dtype=np.uint8)
    return np.frombuffer(buf, dtype=np.uint8)


def _bitmap(buf: pa.Buffer | None, offset: int, n: int) -> np.ndarray:
    """Bits [offset, offset + n) of an Arrow bitmap, re-based to bit 0 (LSB first)."""
    raw = _bytes(buf)
    if offset % 8 == 0:
        return raw[offset // 8 : offset // 8 + (n + 7) // 8]
    bits = np.unpackbits(raw[offset // 8 : (offset + n + 7) // 8 + 1], bitorder="little")
    return np.packbits(bits[offset % 8 : offset % 8 + n], bitorder="little")


def _validity(arr: pa.Array) -> np.ndarray:
    """The validity bitmap of ``arr`` from bit 0."""
    return _bitmap(arr.buffers()[0], arr.offset, len(arr))


def _nullable(arr: pa.Array, bufs: _Buffers, values: Callable[[], pb.ArrayEncoding]):
    """``Nullable`` around the encoding ``values()`` builds (validity goes first)."""
    n = len(arr)
    nulls = arr.null_count
    if n == 0 or nulls == n:
        return pb.ArrayEncoding(nullable=pb.Nullable(all_nulls=pb.Nullable.AllNull()))
    if nulls == 0:
        return pb.ArrayEncoding(nullable=pb.Nullable(no_nulls=pb.Nullable.NoNull(values=values())))
    validity = bufs.flat(1, _validity(arr))
    return pb.ArrayEncoding(
        nullable=pb.Nullable(some_nulls=pb.Nullable.SomeNull(validity=validity, values=values()))
    )


# -- leaf values -----------------------------------------------------------------------------


def _values(arr: pa.Array, bufs: _Buffers, opts: ColumnOptions) -> pb.ArrayEncoding:
    """The encoding of a leaf array (anything that is not a struct, list or blob)."""
    arr = _storage_array(arr)
    t = arr.type
    if pa.types.is_null(t):
        return pb.ArrayEncoding(nullable=pb.Nullable(all_nulls=pb.Nullable.AllNull()))
    if pa.types.is_string(t) and _few_distinct(arr):
        return _string_dictionary(arr, bufs, opts)
    if _is_variable(t):
        return _binary(arr, bufs, opts)
    if pa.types.is_dictionary(t):
        return _dictionary(arr, bufs, opts)
    return _nullable(arr, bufs, lambda: _plain(arr, bufs, opts))


def _plain(arr: pa.Array, bufs: _Buffers, opts: ColumnOptions) -> pb.ArrayEncoding:
    """Fixed-width values (or a fixed-size list of them) without their validity."""
    t = arr.type
    n = len(arr)
    if pa.types.is_fixed_size_list(t):
        dim = t.list_size
        items = arr.values.slice(arr.offset * dim, n * dim)
        return pb.ArrayEncoding(
            fixed_size_list=pb.FixedSizeList(dimension=dim, items=_values(items, bufs, opts))
        )
    bits = _flat_bits(t)
    if bits is None:
        raise UnsupportedError(f"the type {t} cannot be stored in Lance 2.0 files")
    if bits == 1:
        return bufs.flat(1, _bitmap(arr.buffers()[1], arr.offset, n))
    width = bits // 8
    data = _bytes(arr.buffers()[1])[arr.offset * width : (arr.offset + n) * width]
    return bufs.flat(bits, data)


def _variable_parts(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(offsets from 0, int64, n + 1 entries; the bytes they cover) of a string/binary array."""
    large = pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type)
    _, off_buf, data_buf = arr.buffers()
    n = len(arr)
    if off_buf is None:
        return np.zeros(n + 1, dtype=np.int64), np.zeros(0, dtype=np.uint8)
    offsets = np.frombuffer(off_buf, dtype=np.int64 if large else np.int32)
    offsets = offsets[arr.offset : arr.offset + n + 1].astype(np.int64)
    data = _bytes(data_buf)[offsets[0] : offsets[-1]]
    return offsets - offsets[0], data


def _binary(arr: pa.Array, bufs: _Buffers, opts: ColumnOptions) -> pb.ArrayEncoding:
    data: np.ndarray | bytes
    offsets, data = _variable_parts(arr)
    adjust = len(data) + 1
    ends = offsets[1:].astype(np.uint64)
    valid = valid_mask(arr)
    if valid is not None:
        ends[~valid] += np.uint64(adjust)
    indices = pb.ArrayEncoding(
        nullable=pb.Nullable(no_nulls=pb.Nullable.NoNull(values=bufs.flat(64, ends)))
    )
    compression = None
    if opts.compression is not None and len(data):
        compression = pb.Compression(scheme=opts.compression)
        if opts.compression_level is not None:
            compression.level = opts.compression_level
        data = general.compress_buffer(data, opts.compression, opts.compression_level)
    return pb.ArrayEncoding(
        binary=pb.Binary(
            indices=indices,
            bytes=bufs.flat(8, data, compression),
            null_adjustment=adjust,
        )
    )


def _few_distinct(arr: pa.Array) -> bool:
    """Whether a string page gets the writer's own dictionary: as pylance, from
    :data:`DICT_MIN_ROWS` rows with fewer than :data:`DICT_MAX_ITEMS` distinct values (a
    sample is checked first, so high-cardinality pages cost no full hash pass)."""
    if len(arr) < DICT_MIN_ROWS:
        return False
    sample = arr.slice(0, DICT_SAMPLE_ROWS)
    if pc.count_distinct(sample, mode="only_valid").as_py() >= DICT_MAX_ITEMS:
        return False
    return pc.count_distinct(arr, mode="only_valid").as_py() < DICT_MAX_ITEMS


def _string_dictionary(arr: pa.Array, bufs: _Buffers, opts: ColumnOptions):
    """The writer's own dictionary (pylance's 2.0 default for low-cardinality strings):
    u8 indices where 0 is null and ``k`` is item ``k - 1``; an all-null page gets one null
    item."""
    encoded = arr.dictionary_encode()
    items = encoded.dictionary
    indices = encoded.indices.fill_null(-1).to_numpy(zero_copy_only=False) + 1
    if len(items) == 0:
        items = pa.nulls(1, arr.type)
    flat = bufs.flat(8, np.asarray(indices, dtype=np.uint8))
    return pb.ArrayEncoding(
        dictionary=pb.Dictionary(
            indices=pb.ArrayEncoding(
                nullable=pb.Nullable(no_nulls=pb.Nullable.NoNull(values=flat))
            ),
            items=_binary(items, bufs, opts),
            num_dictionary_items=len(items),
        )
    )


def _dictionary(arr: pa.DictionaryArray, bufs: _Buffers, opts: ColumnOptions):
    """An Arrow dictionary column: keys as they are, null keys pointing at a null item."""
    key_type = arr.type.index_type
    items = arr.dictionary
    keys = np.asarray(arr.indices.fill_null(0).to_numpy(zero_copy_only=False))
    if arr.indices.null_count or len(items) == 0:
        nulls = np.asarray(arr.indices.is_null().to_numpy(zero_copy_only=False), dtype=bool)
        keys, items = _with_null_item(keys, nulls, items, key_type)
    dtype = np.dtype(key_type.to_pandas_dtype()).newbyteorder("<")
    key_bits = key_type.bit_width
    indices = pb.ArrayEncoding(
        nullable=pb.Nullable(
            no_nulls=pb.Nullable.NoNull(
                values=bufs.flat(key_bits, keys.astype(dtype, copy=False).view(np.uint8))
            )
        )
    )
    return pb.ArrayEncoding(
        dictionary=pb.Dictionary(
            indices=indices,
            items=_values(items, bufs, opts),
            num_dictionary_items=len(items),
        )
    )


def _with_null_item(
    keys: np.ndarray, nulls: np.ndarray, items: pa.Array, key_type: pa.DataType
) -> tuple[np.ndarray, pa.Array]:
    """Keys whose nulls point at a null item (added when the dictionary has none; when the
    key type has no room left, the dictionary keeps only the items in use first)."""
    null_items = np.flatnonzero(np.asarray(items.is_null().to_numpy(zero_copy_only=False)))
    if len(null_items):
        null_key = int(null_items[0])
    else:
        max_key = int(np.iinfo(key_type.to_pandas_dtype()).max)
        if len(items) > max_key:
            used = np.unique(keys[~nulls])
            remap = np.zeros(len(items), dtype=np.int64)
            remap[used] = np.arange(len(used))
            keys, items = remap[keys], items.take(pa.array(used))
            if len(items) > max_key:
                raise UnsupportedError(
                    f"{len(items)} dictionary items in use leave no {key_type} key for the "
                    "null item Lance 2.0 stores null keys as"
                )
        null_key = len(items)
        items = pa.concat_arrays([items, pa.nulls(1, items.type)])
    keys = keys.copy()
    keys[nulls] = null_key
    return keys, items


# -- structs and blobs -----------------------------------------------------------------------


def _packed_struct(arr: pa.StructArray, bufs: _Buffers) -> pb.ArrayEncoding:
    """All children row-major in one buffer (fixed-width, no nulls: checked by the caller)."""
    n = len(arr)
    inner = []
    columns = []
    scratch = _Buffers()
    for i in range(arr.type.num_fields):
        child = _storage_array(arr.field(i))
        if child.null_count:
            raise UnsupportedError(
                f"packed struct child {arr.type.field(i).name!r} has nulls; a packed struct "
                "stores no child validity"
            )
        bits = _packed_bits(child.type)
        assert bits is not None  # unstorable() refused other children before any data
        columns.append(_packed_child_bytes(child).reshape(n, bits // 8))
        inner.append(
            pb.ArrayEncoding(
                nullable=pb.Nullable(
                    no_nulls=pb.Nullable.NoNull(values=_plain(child, scratch, ColumnOptions()))
                )
            )
        )
    rows = np.ascontiguousarray(np.hstack(columns)) if columns else np.zeros(0, np.uint8)
    row_buffer = bufs.add(rows.reshape(-1))
    _point_at(inner, row_buffer)
    return pb.ArrayEncoding(packed_struct=pb.PackedStruct(inner=inner, buffer=row_buffer))


def _point_at(encodings: list[pb.ArrayEncoding], buf: pb.Buffer) -> None:
    """Make every ``Flat`` of a packed child name the shared row buffer (as pylance does)."""
    for enc in encodings:
        for sub in _walk(enc):
            if sub.WhichOneof("array_encoding") == "flat":
                sub.flat.buffer.CopyFrom(buf)


def _walk(enc: pb.ArrayEncoding):
    yield enc
    kind = enc.WhichOneof("array_encoding")
    if kind == "nullable" and enc.nullable.WhichOneof("nullability") == "no_nulls":
        yield from _walk(enc.nullable.no_nulls.values)
    elif kind == "fixed_size_list":
        yield from _walk(enc.fixed_size_list.items)


def _packed_child_bytes(arr: pa.Array) -> np.ndarray:
    """The raw bytes of a fixed-width (or fixed-size list of fixed-width) array."""
    arr = _storage_array(arr)
    t = arr.type
    if pa.types.is_fixed_size_list(t):
        return _packed_child_bytes(
            arr.values.slice(arr.offset * t.list_size, len(arr) * t.list_size)
        )
    bits = _flat_bits(t)
    assert bits is not None  # only whole-byte types reach here (see _packed_bits)
    width = bits // 8
    return _bytes(arr.buffers()[1])[arr.offset * width : (arr.offset + len(arr)) * width]


@dataclass
class PendingBlobPage:
    """A blob page: its bytes are written first, then descriptors with their positions."""

    offsets: np.ndarray  # int64, n + 1, from 0
    data: np.ndarray  # uint8, every value's bytes
    valid: np.ndarray | None  # bools, None when nothing is null

    def place(self, write_external: WriteExternal) -> EncodedPage:
        base = write_external(self.data) if len(self.data) else 0
        size = np.diff(self.offsets).astype(np.uint64)
        position = self.offsets[:-1].astype(np.uint64) + np.uint64(base)
        position[size == 0] = 0
        if self.valid is not None:
            position[~self.valid] = 1  # (1, 0) marks a null, as pylance writes it
            size[~self.valid] = 0
        bufs = _Buffers()
        rows = bufs.add(np.stack([position, size], axis=1).reshape(-1).view(np.uint8))
        word = pb.ArrayEncoding(
            nullable=pb.Nullable(
                no_nulls=pb.Nullable.NoNull(
                    values=pb.ArrayEncoding(flat=pb.Flat(bits_per_value=64, buffer=rows))
                )
            )
        )
        enc = pb.ArrayEncoding(packed_struct=pb.PackedStruct(inner=[word, word], buffer=rows))
        return EncodedPage(enc, bufs.data, len(size))


# -- fields ----------------------------------------------------------------------------------


def encode_field(
    top: LanceField, arr: pa.Array, options: Sequence[ColumnOptions]
) -> list[tuple[int, EncodedPage | PendingBlobPage]]:
    """One page for every column of ``top`` holding the rows of ``arr``.

    Returns (column number within the field, page) in :func:`v20_column_fields` order;
    ``options[c]`` are the encoding options of column ``c``.  A page's ``num_rows`` counts
    the entries of its own column (items, for a list's child)."""
    columns = {id(f): c for c, f in enumerate(v20_column_fields([top]))}
    out: list[tuple[int, EncodedPage | PendingBlobPage]] = []

    def walk(f: LanceField, arr: pa.Array) -> None:
        c = columns[id(f)]
        arr = _storage_array(arr)
        t = arr.type
        n = len(arr)
        if pa.types.is_struct(t):
            if arr.null_count:
                raise UnsupportedError(
                    f"field {f.name!r} holds {arr.null_count} null struct(s), but Lance file "
                    "version 2.0 does not store struct validity; write version 2.1 or later"
                )
            if f.is_packed_struct():
                bufs = _Buffers()
                out.append((c, EncodedPage(_packed_struct(arr, bufs), bufs.data, n)))
                return
            out.append((c, EncodedPage(pb.ArrayEncoding(struct=pb.SimpleStruct()), [], n)))
            for i, child in enumerate(f.children):
                walk(child, arr.field(i))
            return
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            offsets = np.asarray(arr.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
            first, last = int(offsets[0]), int(offsets[-1])
            num_items = last - first
            ends = (offsets[1:] - first).astype(np.uint64)
            valid = valid_mask(arr)
            if valid is not None:
                ends[~valid] += np.uint64(num_items + 1)
            bufs = _Buffers()
            offsets_enc = pb.ArrayEncoding(
                nullable=pb.Nullable(no_nulls=pb.Nullable.NoNull(values=bufs.flat(64, ends)))
            )
            enc = pb.ArrayEncoding(
                list=pb.List(
                    offsets=offsets_enc, null_offset_adjustment=num_items + 1, num_items=num_items
                )
            )
            out.append((c, EncodedPage(enc, bufs.data, n)))
            walk(f.children[0], arr.values.slice(first, num_items))
            return
        if is_blob_leaf(f) and _is_variable(t):
            offsets, data = _variable_parts(arr)
            out.append((c, PendingBlobPage(offsets, data, valid_mask(arr))))
            return
        bufs = _Buffers()
        out.append((c, EncodedPage(_values(arr, bufs, options[c]), bufs.data, n)))

    walk(top, arr)
    return out
