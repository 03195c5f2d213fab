"""Turning decoded blocks and reconstructed layers into Arrow arrays.

Arrays are built with ``pa.Array.from_buffers`` straight from numpy memory, so no value is
touched by Python.  The logical Arrow type always comes from the schema; the block only
says how the bytes are laid out.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ..compression.blocks import (
    Block,
    FixedSizeListBlock,
    FixedWidthBlock,
    StructBlock,
    VariableWidthBlock,
)
from ..compression.dictionary import DictionaryItems, FixedItems, VariableItems
from ..errors import CorruptFileError, UnsupportedError
from ..schema import cached_per_type
from .repdef import bitmap_bits, valid_mask


def validity_buffer(valid: np.ndarray | None) -> pa.Buffer | None:
    if valid is None:
        return None
    return pa.py_buffer(np.packbits(valid, bitorder="little"))


def _storage_type(t: pa.DataType) -> pa.DataType:
    return t.storage_type if isinstance(t, pa.BaseExtensionType) else t


def _typed(arr: pa.Array, arrow_type: pa.DataType) -> pa.Array:
    """A child of its parent's declared type: an extension child (bfloat16 items of a
    fixed-size list) comes back as its storage, and Arrow aborts the process on a parent
    whose child has another type."""
    if isinstance(arrow_type, pa.BaseExtensionType) and not arr.type.equals(arrow_type):
        return pa.ExtensionArray.from_storage(arrow_type, arr)
    return arr


# how a point lookup builds a flat column's array without validity (see flat_kind)
OTHER, FIXED, VARIABLE32, VARIABLE64 = 0, 1, 2, 3


def flat_kind(t: pa.DataType) -> int:
    """Which of :func:`flat_array`'s direct builds an Arrow type takes: FIXED for
    fixed-width values of whole bytes, VARIABLE32/64 for (large) strings and binaries,
    OTHER for the rest (booleans, dictionaries, extensions, nested: block_to_arrow)."""
    if pa.types.is_string(t) or pa.types.is_binary(t):
        return VARIABLE32
    if pa.types.is_large_string(t) or pa.types.is_large_binary(t):
        return VARIABLE64
    if (
        pa.types.is_integer(t)
        or pa.types.is_floating(t)
        or pa.types.is_temporal(t)
        or pa.types.is_decimal(t)
        or pa.types.is_fixed_size_binary(t)
    ) and not isinstance(t, pa.BaseExtensionType):
        try:
            return FIXED if t.byte_width > 0 else OTHER
        except ValueError:
            return OTHER
    return OTHER


def flat_array(kind: int, t: pa.DataType, block: Block) -> pa.Array | None:
    """``block`` as an all-valid array of ``t`` (of :func:`flat_kind` ``kind``) in one
    Arrow call, the same array :func:`block_to_arrow` builds; None when the block does not
    have the layout the kind expects (block_to_arrow decides)."""
    if kind == FIXED:
        if type(block) is not FixedWidthBlock or block.bits_per_value != 8 * t.byte_width:
            return None
        data = block.data
        if data.size < block.num_values * t.byte_width:
            return None
        return pa.Array.from_buffers(t, block.num_values, [None, pa.py_buffer(data)])
    if kind == OTHER or type(block) is not VariableWidthBlock:
        return None
    offsets = block.offsets
    n = offsets.size - 1
    if n < 0 or offsets[-1] > block.data.size or offsets[0] != 0:
        return None
    off = offsets.astype(np.int64 if kind == VARIABLE64 else np.int32, copy=False)
    return pa.Array.from_buffers(t, n, [None, pa.py_buffer(off), pa.py_buffer(block.data)])


def block_to_arrow(block: Block, arrow_type: pa.DataType, valid: np.ndarray | None) -> pa.Array:
    """Wrap a decoded block as an Arrow array of ``arrow_type`` with the given validity."""
    t = _storage_type(arrow_type)
    if pa.types.is_dictionary(t):
        values = block_to_arrow(block, t.value_type, valid)
        return values.dictionary_encode().cast(t)
    if pa.types.is_null(t):
        return pa.nulls(block.num_values)
    if isinstance(block, FixedWidthBlock):
        return _fixed_to_arrow(block, t, valid)
    if isinstance(block, VariableWidthBlock):
        return _variable_to_arrow(block, t, valid)
    if isinstance(block, FixedSizeListBlock):
        if not pa.types.is_fixed_size_list(t):
            raise CorruptFileError(f"a fixed-size-list encoding cannot hold {t}")
        child = _typed(block_to_arrow(block.child, t.value_type, block.validity), t.value_type)
        n = block.num_values
        return pa.Array.from_buffers(t, n, [validity_buffer(valid)], children=[child])
    if isinstance(block, StructBlock):
        if not pa.types.is_struct(t) or t.num_fields != len(block.children):
            raise CorruptFileError(
                f"a packed struct with {len(block.children)} fields cannot hold {t}"
            )
        children = [
            _typed(block_to_arrow(c, t.field(i).type, None), t.field(i).type)
            for i, c in enumerate(block.children)
        ]
        return pa.Array.from_buffers(
            t, block.num_values, [validity_buffer(valid)], children=children
        )
    raise CorruptFileError(f"cannot convert {type(block).__name__} to {t}")


def _fixed_to_arrow(block: FixedWidthBlock, t: pa.DataType, valid: np.ndarray | None) -> pa.Array:
    n = block.num_values
    if block.bits_per_value == 0:
        # values that are never stored (all null): zero-filled slots of the logical type
        return _zeros(t, n, valid)
    if pa.types.is_boolean(t):
        if block.bits_per_value != 1:
            raise CorruptFileError(f"booleans stored with {block.bits_per_value} bits per value")
        return pa.Array.from_buffers(t, n, [validity_buffer(valid), pa.py_buffer(block.data)])
    width = t.byte_width * 8 if t.byte_width > 0 else None
    if width is None or width != block.bits_per_value:
        raise CorruptFileError(f"{block.bits_per_value}-bit values cannot hold {t}")
    data = block.data
    if len(data) < n * t.byte_width:
        raise CorruptFileError(f"{n} values of {t} need {n * t.byte_width} bytes, have {len(data)}")
    return pa.Array.from_buffers(t, n, [validity_buffer(valid), pa.py_buffer(data)])


def _variable_to_arrow(
    block: VariableWidthBlock, t: pa.DataType, valid: np.ndarray | None
) -> pa.Array:
    large = pa.types.is_large_string(t) or pa.types.is_large_binary(t)
    if not (large or pa.types.is_string(t) or pa.types.is_binary(t)):
        raise CorruptFileError(f"variable-width values cannot hold {t}")
    offsets = block.offsets
    if len(offsets) and (offsets[-1] > len(block.data) or offsets[0] != 0):
        raise CorruptFileError("variable-width offsets run past the data")
    off = offsets.astype(np.int64 if large else np.int32, copy=False)
    return pa.Array.from_buffers(
        t,
        block.num_values,
        [validity_buffer(valid), pa.py_buffer(off), pa.py_buffer(block.data)],
    )


def dictionary_items(dictionary: pa.Array) -> DictionaryItems | None:
    """A dictionary ready for :func:`take_dictionary`'s compiled expansion: strings and
    binaries, and fixed-width values of 64 or 128 bits; None for other items (and, never
    written by Lance, items with nulls)."""
    t = dictionary.type
    if dictionary.null_count or isinstance(t, pa.BaseExtensionType):
        return None
    large = pa.types.is_large_string(t) or pa.types.is_large_binary(t)
    bufs = dictionary.buffers()
    first, n = dictionary.offset, len(dictionary)
    if large or pa.types.is_string(t) or pa.types.is_binary(t):
        offsets = np.frombuffer(bufs[1], np.int64 if large else np.int32)
        return VariableItems.of(offsets[first : first + n + 1], _buffer_bytes(bufs[2]))
    try:
        bits = t.bit_width
    except ValueError:  # not a fixed-width type
        return None
    if len(bufs) != 2 or bits not in (64, 128):
        return None
    width = bits // 8
    return FixedItems.of(_buffer_bytes(bufs[1])[first * width : (first + n) * width], width)


def take_dictionary(
    dictionary: pa.Array,
    items: DictionaryItems | None,
    indices: np.ndarray,
    valid: np.ndarray | None,
) -> pa.Array:
    """The values of a dictionary page: the ``dictionary`` items its ``indices`` name,
    null where ``valid`` is False.  ``items`` (from :func:`dictionary_items`) are
    expanded by a compiled kernel, other dictionaries by Arrow's take.  An index past the
    items raises CorruptFileError."""
    n = len(indices)
    if isinstance(items, VariableItems):
        offsets, data = items.expand(indices, valid)
        buffers = [validity_buffer(valid), pa.py_buffer(offsets), pa.py_buffer(data)]
        return pa.Array.from_buffers(dictionary.type, n, buffers)
    if isinstance(items, FixedItems):
        data = items.expand(indices, valid)
        return pa.Array.from_buffers(
            dictionary.type, n, [validity_buffer(valid), pa.py_buffer(data)]
        )
    if n and int(indices.max()) >= len(dictionary):
        raise CorruptFileError("dictionary index out of range")
    return dictionary.take(pa.array(indices, mask=None if valid is None else ~valid))


def dictionary_array(
    dictionary: pa.Array,
    indices: np.ndarray,
    valid: np.ndarray | None,
    arrow_type: pa.DictionaryType,
) -> pa.Array:
    """A dictionary page of a field of Arrow dictionary type, as that type: the page's items
    are the dictionary and its indices the keys, as pylance returns them.  The categories
    come back as written, in their order and with the unused ones (re-encoding the expanded
    values put them in first-seen order, which changes what an ordered dictionary means),
    and nothing is expanded.  An index past the items raises CorruptFileError."""
    n = len(indices)
    key_dtype = np.dtype(arrow_type.index_type.to_pandas_dtype())
    live = indices if valid is None else indices[valid]
    if len(live):
        top = int(live.max())
        if top >= len(dictionary) or top > np.iinfo(key_dtype).max:
            raise CorruptFileError("dictionary index out of range")
    keys = indices.astype(key_dtype, copy=False)
    if valid is not None:  # the keys under nulls are whatever was stored: make them 0
        keys = np.where(valid, keys, 0).astype(key_dtype, copy=False)
    key_array = pa.Array.from_buffers(
        arrow_type.index_type, n, [validity_buffer(valid), pa.py_buffer(keys)]
    )
    values = dictionary
    if values.type != arrow_type.value_type:
        values = values.cast(arrow_type.value_type)
    return pa.DictionaryArray.from_arrays(key_array, values, ordered=arrow_type.ordered, safe=False)


def _zeros(t: pa.DataType, n: int, valid: np.ndarray | None) -> pa.Array:
    """An array of ``n`` zero-filled slots (fixed-width types, nested fixed-size lists)."""
    if pa.types.is_fixed_size_list(t):
        child = _zeros(t.value_type, n * t.list_size, np.zeros(n * t.list_size, dtype=bool))
        return pa.Array.from_buffers(t, n, [validity_buffer(valid)], children=[child])
    if pa.types.is_boolean(t):
        return pa.Array.from_buffers(
            t, n, [validity_buffer(valid), pa.py_buffer(np.zeros((n + 7) // 8, np.uint8))]
        )
    try:
        width = t.byte_width
    except ValueError:
        raise CorruptFileError(f"values of {t} cannot be left unstored") from None
    return pa.Array.from_buffers(
        t, n, [validity_buffer(valid), pa.py_buffer(np.zeros(n * width, np.uint8))]
    )


# -- writer side -----------------------------------------------------------------------------


def _buffer_bytes(buf: pa.Buffer | None) -> np.ndarray:
    if buf is None:
        return np.zeros(0, dtype=np.uint8)
    return np.frombuffer(buf, dtype=np.uint8)


def plain_storage(arr: pa.Array) -> pa.Array:
    """The array a column stores: extension storage, dictionaries decoded."""
    if isinstance(arr.type, pa.BaseExtensionType):
        arr = arr.storage
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    if pa.types.is_string_view(arr.type):  # stored as the plain type, like pylance does
        arr = arr.cast(pa.string())
    elif pa.types.is_binary_view(arr.type):
        arr = arr.cast(pa.binary())
    return arr


@cached_per_type
def plain_width(t: pa.DataType) -> int:
    """Bytes per value of a plain fixed-width type (integers, floats, dates, times,
    decimals, fixed-size binary), else 0: the common leaf, told apart in one lookup."""
    if isinstance(t, pa.BaseExtensionType) or pa.types.is_dictionary(t):
        return 0
    try:
        return t.byte_width  # booleans and nested or variable-width types raise
    except ValueError:
        return 0


def _variable_block(arr: pa.Array, large: bool) -> VariableWidthBlock:
    n = len(arr)
    bufs = arr.buffers()
    off = np.frombuffer(bufs[1], dtype=np.int64 if large else np.int32)
    off = off[arr.offset : arr.offset + n + 1].astype(np.int64)
    data = _buffer_bytes(bufs[2])[off[0] : off[-1]] if n else np.zeros(0, np.uint8)
    return VariableWidthBlock(off - off[0], data, 64 if large else 32)


@cached_per_type
def plain_offsets(t: pa.DataType) -> int:
    """Bits per offset of a plain string or binary type (32, or 64 for the large ones),
    else 0: the other common leaf, told apart in one lookup."""
    if pa.types.is_string(t) or pa.types.is_binary(t):
        return 32
    if pa.types.is_large_string(t) or pa.types.is_large_binary(t):
        return 64
    return 0


def arrow_to_block(arr: pa.Array) -> Block:
    """The values of a leaf array as a block (the bytes under nulls are kept as they are)."""
    t = arr.type
    width = plain_width(t)
    if width:
        n = len(arr)
        data = _buffer_bytes(arr.buffers()[1])[arr.offset * width : (arr.offset + n) * width]
        return FixedWidthBlock(data, width * 8, n)
    offset_bits = plain_offsets(t)
    if offset_bits:
        return _variable_block(arr, offset_bits == 64)
    arr = plain_storage(arr)
    t = arr.type
    n = len(arr)
    bufs = arr.buffers()
    if pa.types.is_boolean(t):
        bits = bitmap_bits(bufs[1], arr.offset, n)
        return FixedWidthBlock(np.packbits(bits, bitorder="little"), 1, n)
    if pa.types.is_null(t):
        return FixedWidthBlock(np.zeros(0, dtype=np.uint8), 0, n)
    if pa.types.is_fixed_size_list(t):
        dim = t.list_size
        child = plain_storage(arr.values.slice(arr.offset * dim, n * dim))
        return FixedSizeListBlock(arrow_to_block(child), dim, valid_mask(child))
    if pa.types.is_struct(t):
        return StructBlock([arrow_to_block(arr.field(i)) for i in range(t.num_fields)], n)
    offset_bits = plain_offsets(t)
    if offset_bits:
        return _variable_block(arr, offset_bits == 64)
    try:
        width = t.byte_width
    except ValueError:
        raise UnsupportedError(f"Lance cannot store values of type {t}") from None
    data = _buffer_bytes(bufs[1])[arr.offset * width : (arr.offset + n) * width]
    return FixedWidthBlock(data, width * 8, n)
