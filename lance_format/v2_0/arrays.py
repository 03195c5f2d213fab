"""Decoding one page range of a 2.0 ``ArrayEncoding`` tree into an Arrow array.

Each function decodes entries ``[r0, r1)`` of one page and reads only the bytes it needs:
Flat values and bitmaps by byte range, Binary offsets for the range (plus the previous end)
and then just the string bytes they cover.  Compressed buffers and dictionary items are
read whole.  Byte semantics are in docs/format/v2_0.md:

* ``Binary`` / ``List`` offsets are *end* offsets; a null stores ``end + null_adjustment``.
* ``Dictionary`` indices written by the writer's own dictionary use 0 for null and ``k`` for
  item ``k-1``; an Arrow dictionary column keeps its keys and may hold a null item.
* ``Nullable.some_nulls`` has an Arrow validity bitmap beside the values.

The ``valid`` argument carries validity from an enclosing ``Nullable`` down to the array
constructor, so no array is built twice.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ..compression import fsst
from ..compression.blocks import VariableWidthBlock
from ..compression.general import decompress_buffer
from ..errors import CorruptFileError, UnsupportedError
from ..pb import encodings_v2_0_pb2 as pb
from .pages import PageData

_INT_DTYPES = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}


def storage_type(t: pa.DataType) -> pa.DataType:
    return t.storage_type if isinstance(t, pa.BaseExtensionType) else t


def _kind(enc: pb.ArrayEncoding) -> str:
    kind = enc.WhichOneof("array_encoding")
    if kind is None:
        raise CorruptFileError("empty ArrayEncoding")
    return kind


def validity_buffer(valid: np.ndarray | None) -> pa.Buffer | None:
    if valid is None or valid.all():
        return None
    return pa.py_buffer(np.packbits(valid, bitorder="little"))


def _and(a: np.ndarray | None, b: np.ndarray | None) -> np.ndarray | None:
    if a is None:
        return b
    if b is None:
        return a
    return a & b


# -- Flat ----------------------------------------------------------------------------------


def _flat_bytes(flat: pb.Flat, page: PageData, r0: int, r1: int, width: int) -> np.ndarray:
    """The bytes of values [r0, r1) of a byte-aligned Flat buffer."""
    if flat.HasField("compression") and flat.compression.scheme:
        whole = decompress_buffer(page.read_all(flat.buffer), flat.compression.scheme)
        if len(whole) < r1 * width:
            raise CorruptFileError(
                f"decompressed Flat buffer has {len(whole)} bytes, {r1 * width} needed"
            )
        return whole[r0 * width : r1 * width]
    return page.read(flat.buffer, r0 * width, (r1 - r0) * width)


def _flat_bits(flat: pb.Flat, page: PageData, r0: int, r1: int) -> np.ndarray:
    """Values [r0, r1) of a 1-bit Flat buffer (an LSB-first bitmap) as bools."""
    if flat.HasField("compression") and flat.compression.scheme:
        whole = decompress_buffer(page.read_all(flat.buffer), flat.compression.scheme)
        if len(whole) * 8 < r1:
            raise CorruptFileError("a compressed bitmap is shorter than its values")
        raw, first = whole[r0 // 8 : (r1 + 7) // 8], r0 % 8
    else:
        b0, b1 = r0 // 8, (r1 + 7) // 8
        raw, first = page.read(flat.buffer, b0, b1 - b0), r0 % 8
    bits = np.unpackbits(raw, bitorder="little")
    return bits[first : first + (r1 - r0)].astype(bool)


def _flat_width(flat: pb.Flat) -> int:
    bits = int(flat.bits_per_value)
    if bits == 1:
        return 0
    if bits <= 0 or bits % 8:
        raise UnsupportedError(f"2.0 Flat encoding with {bits} bits per value")
    return bits // 8


def decode_bools(enc: pb.ArrayEncoding, page: PageData, r0: int, r1: int) -> np.ndarray:
    """A validity bitmap (Flat 1-bit, possibly inside ``Nullable.no_nulls``)."""
    kind = _kind(enc)
    if kind == "nullable" and enc.nullable.WhichOneof("nullability") == "no_nulls":
        return decode_bools(enc.nullable.no_nulls.values, page, r0, r1)
    if kind == "constant":
        value = bool(enc.constant.value and enc.constant.value[0] & 1)
        return np.full(r1 - r0, value)
    if kind != "flat" or enc.flat.bits_per_value != 1:
        raise UnsupportedError(f"2.0 bitmap stored as {kind}")
    return _flat_bits(enc.flat, page, r0, r1)


def decode_uints(
    enc: pb.ArrayEncoding, page: PageData, r0: int, r1: int
) -> tuple[np.ndarray, np.ndarray | None]:
    """Unsigned integers (offsets, dictionary indices) as uint64, with validity if any."""
    kind = _kind(enc)
    if kind == "nullable":
        which = enc.nullable.WhichOneof("nullability")
        if which == "no_nulls":
            return decode_uints(enc.nullable.no_nulls.values, page, r0, r1)
        if which == "some_nulls":
            valid = decode_bools(enc.nullable.some_nulls.validity, page, r0, r1)
            values, inner = decode_uints(enc.nullable.some_nulls.values, page, r0, r1)
            return values, _and(valid, inner)
        if which == "all_nulls":
            return np.zeros(r1 - r0, dtype=np.uint64), np.zeros(r1 - r0, dtype=bool)
        raise CorruptFileError("Nullable encoding without a nullability")
    if kind == "flat":
        width = _flat_width(enc.flat)
        if width * 8 not in _INT_DTYPES:
            raise UnsupportedError(f"integers of {enc.flat.bits_per_value} bits")
        raw = _flat_bytes(enc.flat, page, r0, r1, width)
        return raw.view(np.dtype(_INT_DTYPES[width * 8]).newbyteorder("<")).astype(np.uint64), None
    if kind == "constant":
        value = int.from_bytes(enc.constant.value[:8], "little")
        return np.full(r1 - r0, value, dtype=np.uint64), None
    raise UnsupportedError(f"2.0 integers stored as {kind}")


# -- arrays --------------------------------------------------------------------------------


def decode_array(
    enc: pb.ArrayEncoding,
    page: PageData,
    r0: int,
    r1: int,
    t: pa.DataType,
    valid: np.ndarray | None = None,
) -> pa.Array:
    """Entries [r0, r1) of a page as an Arrow array of storage type ``t``."""
    n = r1 - r0
    kind = _kind(enc)
    if pa.types.is_null(t):
        return pa.nulls(n)
    if kind == "nullable":
        which = enc.nullable.WhichOneof("nullability")
        if which == "no_nulls":
            return decode_array(enc.nullable.no_nulls.values, page, r0, r1, t, valid)
        if which == "some_nulls":
            mine = decode_bools(enc.nullable.some_nulls.validity, page, r0, r1)
            return decode_array(enc.nullable.some_nulls.values, page, r0, r1, t, _and(valid, mine))
        if which == "all_nulls":
            return pa.nulls(n, t)
        raise CorruptFileError("Nullable encoding without a nullability")
    if kind == "flat":
        return _decode_flat(enc.flat, page, r0, r1, t, valid)
    if kind == "binary":
        block, nulls = decode_binary(enc.binary, page, r0, r1, t)
        return variable_to_arrow(block, t, _and(valid, nulls))
    if kind == "fsst":
        return _decode_fsst(enc.fsst, page, r0, r1, t, valid)
    if kind == "dictionary":
        return _decode_dictionary(enc.dictionary, page, r0, r1, t, valid)
    if kind == "fixed_size_list":
        return _decode_fsl(enc.fixed_size_list, page, r0, r1, t, valid)
    if kind == "packed_struct":
        return decode_packed_struct(enc.packed_struct, page, r0, r1, t, valid)
    if kind == "fixed_size_binary":
        return _decode_fixed_size_binary(enc.fixed_size_binary, page, r0, r1, t, valid)
    if kind == "constant":
        return _decode_constant(enc.constant.value, n, t, valid)
    if kind == "list" or kind == "struct":
        raise CorruptFileError(f"a {kind} page in a leaf column of type {t}")
    raise UnsupportedError(f"2.0 array encoding {kind!r}")


def _fixed_width_bits(t: pa.DataType) -> int:
    try:
        return t.bit_width
    except ValueError:
        raise CorruptFileError(f"a fixed-width encoding cannot hold {t}") from None


def _decode_flat(
    flat: pb.Flat, page: PageData, r0: int, r1: int, t: pa.DataType, valid: np.ndarray | None
) -> pa.Array:
    n = r1 - r0
    if pa.types.is_dictionary(t):
        return _dictionary_encode(_decode_flat(flat, page, r0, r1, t.value_type, valid), t)
    bits = int(flat.bits_per_value)
    if bits != _fixed_width_bits(t):
        raise CorruptFileError(f"{bits}-bit Flat values cannot hold {t}")
    if bits == 1:
        data = np.packbits(_flat_bits(flat, page, r0, r1), bitorder="little")
    else:
        data = _flat_bytes(flat, page, r0, r1, _flat_width(flat))
    return pa.Array.from_buffers(t, n, [validity_buffer(valid), pa.py_buffer(data)])


def _decode_constant(value: bytes, n: int, t: pa.DataType, valid: np.ndarray | None) -> pa.Array:
    bits = _fixed_width_bits(t)
    if bits == 1:
        fill = bool(value and value[0] & 1)
        data = np.packbits(np.full(n, fill), bitorder="little")
    else:
        width = bits // 8
        if len(value) != width:
            raise CorruptFileError(f"constant of {len(value)} bytes for {t}")
        data = np.tile(np.frombuffer(value, dtype=np.uint8), n)
    return pa.Array.from_buffers(t, n, [validity_buffer(valid), pa.py_buffer(data)])


def _dictionary_encode(values: pa.Array, t: pa.DictionaryType) -> pa.Array:
    return values.dictionary_encode().cast(t)


def decode_binary(
    binary: pb.Binary, page: PageData, r0: int, r1: int, t: pa.DataType
) -> tuple[VariableWidthBlock, np.ndarray | None]:
    """Values [r0, r1) of a Binary encoding: the strings and their validity (None = all valid)."""
    first = r0 - 1 if r0 > 0 else 0
    ends, ends_valid = decode_uints(binary.indices, page, first, r1)
    adjust = int(binary.null_adjustment)
    if adjust > 0:
        nulls = ends >= adjust
        ends = np.where(nulls, ends - np.uint64(adjust), ends)
    else:
        nulls = np.zeros(len(ends), dtype=bool)
    if r0 > 0:
        start = int(ends[0])
        ends, nulls = ends[1:], nulls[1:]
        if ends_valid is not None:
            ends_valid = ends_valid[1:]
    else:
        start = 0
    offsets = np.empty(len(ends) + 1, dtype=np.int64)
    offsets[0] = start
    offsets[1:] = ends.astype(np.int64)
    if (offsets < 0).any() or (len(offsets) > 1 and (np.diff(offsets) < 0).any()):
        raise CorruptFileError("Binary end offsets are not increasing")
    end = int(offsets[-1])
    data = _bytes_of(binary.bytes, page, start, end)
    offsets -= start
    valid = ~nulls if nulls.any() else None
    valid = _and(valid, ends_valid)
    large = pa.types.is_large_string(t) or pa.types.is_large_binary(t)
    return VariableWidthBlock(offsets, data, 64 if large else 32), valid


def _bytes_of(enc: pb.ArrayEncoding, page: PageData, start: int, end: int) -> np.ndarray:
    kind = _kind(enc)
    if kind == "nullable" and enc.nullable.WhichOneof("nullability") == "no_nulls":
        return _bytes_of(enc.nullable.no_nulls.values, page, start, end)
    if kind != "flat" or enc.flat.bits_per_value != 8:
        raise UnsupportedError(f"2.0 Binary bytes stored as {kind}")
    return _flat_bytes(enc.flat, page, start, end, 1)


def variable_to_arrow(
    block: VariableWidthBlock, t: pa.DataType, valid: np.ndarray | None
) -> pa.Array:
    if pa.types.is_dictionary(t):
        return _dictionary_encode(variable_to_arrow(block, t.value_type, valid), t)
    large = pa.types.is_large_string(t) or pa.types.is_large_binary(t)
    if not (large or pa.types.is_string(t) or pa.types.is_binary(t)):
        raise CorruptFileError(f"variable-width values cannot hold {t}")
    offsets = np.asarray(block.offsets, dtype=np.int64)
    if not large and len(offsets) and offsets[-1] > np.iinfo(np.int32).max:
        raise CorruptFileError(f"{offsets[-1]} bytes of {t} in one array exceed 32-bit offsets")
    off = offsets.astype(np.int64 if large else np.int32)
    return pa.Array.from_buffers(
        t,
        len(offsets) - 1,
        [validity_buffer(valid), pa.py_buffer(off), pa.py_buffer(block.data)],
    )


def _decode_fsst(
    enc: pb.Fsst, page: PageData, r0: int, r1: int, t: pa.DataType, valid: np.ndarray | None
) -> pa.Array:
    inner = enc.binary
    inner_valid = None
    # Fsst wraps the Binary encoding directly (sometimes inside Nullable.no_nulls)
    while _kind(inner) == "nullable":
        which = inner.nullable.WhichOneof("nullability")
        if which == "no_nulls":
            inner = inner.nullable.no_nulls.values
        elif which == "some_nulls":
            inner_valid = _and(
                inner_valid, decode_bools(inner.nullable.some_nulls.validity, page, r0, r1)
            )
            inner = inner.nullable.some_nulls.values
        else:
            return pa.nulls(r1 - r0, t)
    if _kind(inner) != "binary":
        raise UnsupportedError(f"Fsst over {_kind(inner)}")
    block, nulls = decode_binary(inner.binary, page, r0, r1, t)
    out = fsst.decompress(block, enc.symbol_table)
    offsets = np.asarray(out.offsets, dtype=np.int64)
    out = VariableWidthBlock(offsets - offsets[0], out.data, block.bits_per_offset)
    return variable_to_arrow(out, t, _and(_and(valid, nulls), inner_valid))


def _decode_dictionary(
    enc: pb.Dictionary,
    page: PageData,
    r0: int,
    r1: int,
    t: pa.DataType,
    valid: np.ndarray | None,
) -> pa.Array:
    num_items = int(enc.num_dictionary_items)
    indices, idx_valid = decode_uints(enc.indices, page, r0, r1)
    valid = _and(valid, idx_valid)
    if pa.types.is_dictionary(t):
        # An Arrow dictionary column: the keys are stored as they are and the items may
        # contain a null; pylance reports a key pointing at a null item as a null key.
        if num_items > np.iinfo(t.index_type.to_pandas_dtype()).max + 1:
            raise CorruptFileError(f"{num_items} dictionary items do not fit {t.index_type} keys")
        items = decode_array(enc.items, page, 0, num_items, t.value_type)
        if len(indices) and int(indices.max()) >= num_items:
            raise CorruptFileError(f"dictionary key beyond the {num_items} items")
        keys_valid = valid
        if items.null_count:
            item_ok = np.asarray(items.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
            keys_valid = _and(keys_valid, item_ok[indices.astype(np.int64)])
        keys = pa.array(
            indices.astype(t.index_type.to_pandas_dtype()),
            type=t.index_type,
            mask=None if keys_valid is None else ~keys_valid,
        )
        return pa.DictionaryArray.from_arrays(keys, items)
    # The writer's own dictionary: 0 = null, k >= 1 = item k-1.
    items = decode_array(enc.items, page, 0, num_items, t)
    if len(indices) and int(indices.max()) > num_items:
        raise CorruptFileError(f"dictionary index beyond the {num_items} items")
    present = indices > 0
    valid = _and(valid, present)
    positions = indices.astype(np.int64) - 1
    positions[~present] = 0
    take = pa.array(positions, type=pa.int64(), mask=None if valid is None else ~valid)
    if num_items == 0:
        return pa.nulls(r1 - r0, t)
    return items.take(take)


def _decode_fsl(
    enc: pb.FixedSizeList,
    page: PageData,
    r0: int,
    r1: int,
    t: pa.DataType,
    valid: np.ndarray | None,
) -> pa.Array:
    if not pa.types.is_fixed_size_list(t):
        raise CorruptFileError(f"a FixedSizeList encoding cannot hold {t}")
    dim = int(enc.dimension)
    if dim != t.list_size:
        raise CorruptFileError(f"FixedSizeList of {dim} items for {t}")
    child = decode_array(enc.items, page, r0 * dim, r1 * dim, storage_type(t.value_type))
    if isinstance(t.value_type, pa.BaseExtensionType):
        child = pa.ExtensionArray.from_storage(t.value_type, child)
    mask = None if valid is None or valid.all() else pa.array(~valid)
    return pa.FixedSizeListArray.from_arrays(child, type=t, mask=mask)


def _decode_fixed_size_binary(
    enc: pb.FixedSizeBinary,
    page: PageData,
    r0: int,
    r1: int,
    t: pa.DataType,
    valid: np.ndarray | None,
) -> pa.Array:
    """Variable-width values that all have ``byte_width`` bytes, stored without offsets."""
    width = int(enc.byte_width)
    data = _bytes_of(enc.bytes, page, r0 * width, r1 * width)
    offsets = np.arange(r1 - r0 + 1, dtype=np.int64) * width
    large = pa.types.is_large_string(t) or pa.types.is_large_binary(t)
    return variable_to_arrow(VariableWidthBlock(offsets, data, 64 if large else 32), t, valid)


# -- packed structs ------------------------------------------------------------------------


def _packed_bits(enc: pb.ArrayEncoding) -> int:
    """Bits per row that one packed-struct child occupies."""
    kind = _kind(enc)
    if kind == "nullable" and enc.nullable.WhichOneof("nullability") == "no_nulls":
        return _packed_bits(enc.nullable.no_nulls.values)
    if kind == "flat":
        return int(enc.flat.bits_per_value)
    if kind == "fixed_size_list":
        return int(enc.fixed_size_list.dimension) * _packed_bits(enc.fixed_size_list.items)
    raise UnsupportedError(f"packed struct child stored as {kind}")


def _fixed_from_bytes(data: np.ndarray, n: int, t: pa.DataType) -> pa.Array:
    """An all-valid fixed-width (or fixed-size-list of fixed-width) array from raw bytes."""
    st = storage_type(t)
    if pa.types.is_fixed_size_list(st):
        child = _fixed_from_bytes(data, n * st.list_size, st.value_type)
        out = pa.FixedSizeListArray.from_arrays(child, type=st)
    else:
        if _fixed_width_bits(st) % 8:
            raise UnsupportedError(f"packed struct child of type {st}")
        out = pa.Array.from_buffers(st, n, [None, pa.py_buffer(np.ascontiguousarray(data))])
    if isinstance(t, pa.BaseExtensionType):
        out = pa.ExtensionArray.from_storage(t, out)
    return out


def decode_packed_struct(
    enc: pb.PackedStruct,
    page: PageData,
    r0: int,
    r1: int,
    t: pa.DataType,
    valid: np.ndarray | None = None,
) -> pa.Array:
    """Rows [r0, r1) of a row-major packed struct."""
    if not pa.types.is_struct(t) or t.num_fields != len(enc.inner):
        raise CorruptFileError(f"a packed struct of {len(enc.inner)} fields cannot hold {t}")
    bits = [_packed_bits(e) for e in enc.inner]
    if any(b % 8 for b in bits):
        raise UnsupportedError("packed struct children that are not whole bytes")
    widths = [b // 8 for b in bits]
    row = sum(widths)
    n = r1 - r0
    rows = page.read(enc.buffer, r0 * row, n * row).reshape(n, row) if row else None
    children = []
    pos = 0
    for i, w in enumerate(widths):
        f = t.field(i)
        data = rows[:, pos : pos + w].reshape(-1) if rows is not None else np.zeros(0, np.uint8)
        children.append(_fixed_from_bytes(data, n, f.type))
        pos += w
    mask = None if valid is None or valid.all() else pa.array(~valid)
    return pa.StructArray.from_arrays(children, fields=list(t), mask=mask)
