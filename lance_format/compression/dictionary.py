"""Dictionary encoding for the 2.1/2.2 writer (docs/format/structural.md).

Dictionary encoding is a layout-level transform: a mini-block page stores ``u32`` indices as
its values and the distinct items as one extra buffer.  This module decides *whether* a page
gets it, following pylance 14, and computes the indices and items.

The decision (pylance 14, ``should_dictionary_encode`` + ``dictionary_encode`` with a budget;
the snapshot under ``/work/.mirror`` is older and uses a HyperLogLog cardinality instead):

1. Only variable-width values (32- or 64-bit offsets) and 128-bit values qualify; from 2.2
   on, 64-bit values too.  Everything else (booleans, 8/16/32-bit, FSL, structs) never does.
2. Pages of fewer than 100 values are left alone.
3. A budget of distinct items: ``min(num_values // dict-divisor, 100_000)`` (divisor 2).
4. A size budget: ``int(raw_size * dict-size-ratio)`` (ratio 0.8), where the raw size is the
   value bytes (plus the offsets for variable width) and the encoded size is the items, four
   bytes per index, plus the items' offsets for variable width.
   No dictionary can fit when one item and the indices already exceed it, so such a
   page is ruled out before any hashing (the exact encode would abandon it).
5. A cheap gate on a deterministic sample (32 blocks of consecutive values, up to 4096 in
   all, only when at least 1024 are sampled): skip the page when the sample is at least 98%
   distinct, or when ``ceil(sample_ratio * num_values)`` exceeds the item budget.
6. The exact encode, abandoned when the items or the encoded size exceed their budgets.

Every step is pinned against pylance's real choice in ``tests/lance_format/compression/test_dictionary_encode.py``
(including both sides of each boundary).  pylance also reads the environment variables
``LANCE_ENCODING_DICT_TOO_SMALL``, ``..._DICT_DIVISOR``, ``..._DICT_MAX_CARDINALITY`` and
``..._DICT_SIZE_RATIO``; this writer does not.

Items are kept in order of first appearance, as pylance writes them, so that the indices and
the dictionary buffer come out byte-identical.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ..errors import CorruptFileError, InvalidArgumentError, UnsupportedError
from ..jit import copy_bytes, kernel, load_u64, readonly, store_u64
from ..version import LanceFileVersion
from .blocks import Block, FixedWidthBlock, VariableWidthBlock, unaligned_words

DICT_DIVISOR_KEY = "lance-encoding:dict-divisor"
DICT_SIZE_RATIO_KEY = "lance-encoding:dict-size-ratio"
DICT_VALUES_COMPRESSION_KEY = "lance-encoding:dict-values-compression"
DICT_VALUES_COMPRESSION_LEVEL_KEY = "lance-encoding:dict-values-compression-level"

DEFAULT_DICT_DIVISOR = 2
DEFAULT_DICT_MAX_CARDINALITY = 100_000
DEFAULT_DICT_SIZE_RATIO = 0.8
DEFAULT_DICT_VALUES_COMPRESSION = "lz4"
DICT_TOO_SMALL = 100  # pages with fewer values are never dictionary encoded
INDEX_BYTES = 4  # indices are always u32

SAMPLE_MAX = 4096
SAMPLE_BLOCKS = 32
SAMPLE_MIN_RELIABLE = 1024
SAMPLE_UNIQUE_RATIO = 0.98

HLL_PRECISION = 12  # 4096 registers: about 1.6% standard error
_HASH_CHUNK_BYTES = 1 << 24  # bound the temporaries of the string hash (~8 bytes a byte)

_NO_ROWS = readonly(np.zeros(0, dtype=np.int64))  # no sample, no offsets (kernels read none)
_U64_PATTERN = re.compile(r"\+?[0-9]+")
_I32_MAX = 2**31 - 1


class DictBudget(NamedTuple):
    """What a dictionary may cost before it is abandoned (pylance's ``DictEncodingBudget``;
    a named tuple: every int64 and string page of every write makes one)."""

    max_items: int
    max_encoded_bytes: int


# -- the decision ----------------------------------------------------------------------------


def should_dictionary_encode(
    block: Block, num_values: int, metadata: dict[str, str] | None, version: str | LanceFileVersion
) -> bool:
    """Whether pylance 14 would dictionary-encode this page (see the module docstring).

    ``block`` holds every value of the page, nulls included as their placeholders (zeros or
    empty strings), which is what pylance counts too; ``num_values`` must be its length.
    The exact check hashes the page once; :func:`encode_if_worthwhile` decides and encodes
    in one pass (the writer does both inside :func:`.page_facts.scan`, with this module's
    budget).
    """
    budget = dictionary_budget(block, num_values, metadata, version)
    if budget is None:
        return False
    assert isinstance(block, (FixedWidthBlock, VariableWidthBlock))  # eligible: it has a budget
    return _hash_encode_block(block, budget) is not None


def encode_if_worthwhile(
    block: Block, num_values: int, metadata: dict[str, str] | None, version: str | LanceFileVersion
) -> tuple[np.ndarray, Block] | None:
    """``encode(block)`` when :func:`should_dictionary_encode` holds, else ``None``."""
    budget = dictionary_budget(block, num_values, metadata, version)
    if budget is None:
        return None
    assert isinstance(block, (FixedWidthBlock, VariableWidthBlock))  # eligible: it has a budget
    # the encode stops as soon as a budget is passed (as pylance's loop does)
    return _hash_encode_block(block, budget)


def dictionary_budget(
    block: Block, num_values: int, metadata: dict[str, str] | None, version: str | LanceFileVersion
) -> DictBudget | None:
    """Steps 1-5 of the decision: the budgets, or ``None`` when the page is ruled out
    without an exact count.  Costs at most one pass over a 4096-value sample."""
    if num_values != block.num_values:
        raise InvalidArgumentError(
            f"num_values={num_values} but the block holds {block.num_values} values"
        )
    if not _eligible(block, version):
        return None
    if num_values < DICT_TOO_SMALL:
        return None
    if metadata:
        md = _str_metadata(metadata)
        divisor = _parse_u64(md.get(DICT_DIVISOR_KEY), DEFAULT_DICT_DIVISOR)
        ratio = _parse_f64(md.get(DICT_SIZE_RATIO_KEY), DEFAULT_DICT_SIZE_RATIO)
    else:  # most fields: the defaults, without parsing (a small append's every column)
        divisor, ratio = DEFAULT_DICT_DIVISOR, DEFAULT_DICT_SIZE_RATIO
    max_items = min(num_values // max(divisor, 1), DEFAULT_DICT_MAX_CARDINALITY)
    if max_items == 0:
        return None
    if ratio <= 0.0 or ratio > 1.0:  # pylance panics on this (the whole write fails)
        raise InvalidArgumentError(
            f"{DICT_SIZE_RATIO_KEY} is {ratio}, which is not in the range (0, 1]"
        )
    assert isinstance(block, (FixedWidthBlock, VariableWidthBlock))  # _eligible() checked it
    size = raw_size(block)
    if size == 0:
        return None
    max_encoded = 0 if math.isnan(ratio) else int(size * ratio)  # Rust `as u64` truncation
    if _one_item_size(block) > max_encoded:
        # the indices alone pass the size budget (short strings: one-byte flags cost 4 bytes
        # of offsets and 4 of index), so the exact encode would be abandoned
        return None
    sample_ratio = _sample_unique_ratio(block)
    if sample_ratio is not None:
        if sample_ratio >= SAMPLE_UNIQUE_RATIO:
            return None
        if math.ceil(sample_ratio * num_values) > max_items:
            return None
    return DictBudget(min(max_items, _I32_MAX), max_encoded)


def raw_size(block: FixedWidthBlock | VariableWidthBlock) -> int:
    """Bytes of the page as pylance sizes it: values, plus offsets for variable width."""
    if isinstance(block, VariableWidthBlock):
        data = int(block.offsets[-1] - block.offsets[0])
        return data + (block.num_values + 1) * (block.bits_per_offset // 8)
    return block.num_values * block.bits_per_value // 8


def encoded_size(block: Block, num_items: int, item_bytes: int) -> int:
    """Bytes of the dictionary-encoded page as pylance estimates them: the items (for
    variable width their bytes plus ``num_items + 1`` offsets) and four bytes per index."""
    indices = block.num_values * INDEX_BYTES
    if isinstance(block, VariableWidthBlock):
        return item_bytes + (num_items + 1) * (block.bits_per_offset // 8) + indices
    assert isinstance(block, FixedWidthBlock)  # only these two kinds are dictionary-encoded
    return num_items * (block.bits_per_value // 8) + indices


def dict_values_compression(
    metadata: dict[str, str] | None, version: str | LanceFileVersion
) -> tuple[str | None, int | None]:
    """General compression wrapped around the dictionary items: ``(scheme, level)``.

    2.2+: ``dict-values-compression`` (``lz4`` by default, ``zstd``, ``none`` -> None) and
    ``dict-values-compression-level``.  2.1 never wraps the items (pylance 14 ignores both
    keys there: a 2.1 file written with ``zstd`` still holds a bare ``Variable(Flat32)``).
    """
    if LanceFileVersion.parse(version) < LanceFileVersion.V2_2:
        return None, None
    if not metadata:  # most fields
        return DEFAULT_DICT_VALUES_COMPRESSION, None
    md = _str_metadata(metadata)
    scheme = md.get(DICT_VALUES_COMPRESSION_KEY, DEFAULT_DICT_VALUES_COMPRESSION).lower()
    if scheme in ("none", ""):
        return None, None
    if scheme not in ("lz4", "zstd"):
        raise InvalidArgumentError(
            f"{DICT_VALUES_COMPRESSION_KEY}={scheme!r}: expected lz4, zstd or none"
        )
    level_text = md.get(DICT_VALUES_COMPRESSION_LEVEL_KEY)
    try:
        level = int(level_text) if level_text is not None else None
    except ValueError:
        raise InvalidArgumentError(
            f"{DICT_VALUES_COMPRESSION_LEVEL_KEY}={level_text!r} is not an integer"
        ) from None
    return scheme, level


def _one_item_size(block: FixedWidthBlock | VariableWidthBlock) -> int:
    """:func:`encoded_size` of one empty item (the indices, plus two offsets)."""
    if type(block) is FixedWidthBlock:  # the common case, without the general sizing
        return block.num_values * INDEX_BYTES + block.bits_per_value // 8
    return encoded_size(block, 1, 0)


def _eligible(block: Block, version: str | LanceFileVersion) -> bool:
    """Whether pages of this kind may be dictionary-encoded in ``version``; answered once
    per (kind, width, version): every page of every column asks."""
    if isinstance(block, VariableWidthBlock):
        return _eligible_kind(True, block.bits_per_offset, version)
    if isinstance(block, FixedWidthBlock):
        return _eligible_kind(False, block.bits_per_value, version)
    return False


@functools.lru_cache(maxsize=64)
def _eligible_kind(variable: bool, bits: int, name: str | LanceFileVersion) -> bool:
    version = LanceFileVersion.parse(name)
    if version < LanceFileVersion.V2_1:
        return False  # 2.0 dictionaries are a different (array-level) encoding
    if variable:
        return bits in (32, 64)
    return bits == 128 or (bits == 64 and version >= LanceFileVersion.V2_2)


@functools.lru_cache(maxsize=64)  # a file's columns share their page sizes
def _sample_indices(n: int) -> np.ndarray | None:
    """pylance's deterministic sample: the first values of 32 equal blocks of the page
    (read-only: the array is shared)."""
    count = max(min(n, SAMPLE_MAX), 1)
    if count < SAMPLE_MIN_RELIABLE:
        return None
    blocks = max(min(SAMPLE_BLOCKS, count, n), 1)
    per_block = max(count // blocks, 1)
    b = np.arange(blocks, dtype=np.int64)
    starts = b * n // blocks
    ends = np.minimum((b + 1) * n // blocks, n)
    take = np.minimum(per_block, np.maximum(ends - starts, 0))
    total = int(take.sum())
    if total < SAMPLE_MIN_RELIABLE:
        return None
    # the ranges [starts[b], starts[b] + take[b]) end to end, without a page-long arange
    before = np.cumsum(take) - take
    out = np.repeat(starts - before, take) + np.arange(total, dtype=np.int64)
    out.flags.writeable = False
    return out


def _sample_unique_ratio(block: FixedWidthBlock | VariableWidthBlock) -> float | None:
    idx = _sample_indices(block.num_values)
    if idx is None:
        return None
    encoded = _hash_encode_block(block, None, rows=idx)
    assert encoded is not None  # no budget: never abandoned
    return encoded[1].num_values / len(idx)


# -- encoding ----------------------------------------------------------------------------------


def encode(block: Block) -> tuple[np.ndarray, Block]:
    """``(indices, items)``: ``uint32`` indices into the distinct items, which keep the
    order of first appearance (as pylance writes them), so ``items[indices] == values``.

    Fixed width of any whole number of bytes gives a :class:`FixedWidthBlock` of the same
    width; variable width gives a :class:`VariableWidthBlock` with offsets from 0 and the
    same ``bits_per_offset``.
    """
    if not isinstance(block, FixedWidthBlock | VariableWidthBlock):
        raise UnsupportedError(f"dictionary encoding of a {type(block).__name__}")
    encoded = _hash_encode_block(block, None)
    assert encoded is not None  # no budget: never abandoned
    return encoded


def _hash_encode_block(
    block: FixedWidthBlock | VariableWidthBlock,
    budget: DictBudget | None,
    rows: np.ndarray | None = None,
) -> tuple[np.ndarray, Block] | None:
    """:func:`encode`, or None as soon as the items pass ``budget`` (pylance's running
    totals only grow, so stopping at the first excess decides as the finished encode
    would).  ``rows`` encodes just those values of the block (a sample), in that order."""
    total = block.num_values
    picked = _NO_ROWS if rows is None else readonly(np.asarray(rows, dtype=np.int64))
    n = total if rows is None else len(picked)
    if isinstance(block, VariableWidthBlock):
        offsets = np.ascontiguousarray(block.offsets, dtype=np.int64)
        data = np.ascontiguousarray(block.data, dtype=np.uint8)
        width = 0
        per_item = block.bits_per_offset // 8  # each item adds an offset
        fixed_cost = n * INDEX_BYTES + per_item  # the indices and the first offset
    else:
        bits = block.bits_per_value
        if bits % 8 or bits <= 0:
            raise UnsupportedError(f"dictionary encoding of {bits}-bit values")
        width = bits // 8
        offsets = _NO_ROWS
        data = np.ascontiguousarray(np.asarray(block.data[: total * width]), dtype=np.uint8)
        per_item = 0
        fixed_cost = n * INDEX_BYTES
    max_items, max_bytes = n, -1  # -1: no byte budget
    if budget is not None:
        max_items = min(n, budget.max_items)
        max_bytes = budget.max_encoded_bytes - fixed_cost
        if max_bytes < 0:
            return None
    room = min(n, max_items + 1)
    capacity = 16
    while capacity < 2 * room:
        capacity *= 2
    count, indices, first = _hash_encode_page(
        readonly(data),
        unaligned_words(data),
        readonly(offsets),
        picked,
        width,
        max_items,
        max_bytes,
        per_item,
        n,
        room,
        capacity,
    )
    if count < 0:
        return None
    first = first[:count]
    if isinstance(block, VariableWidthBlock):
        item_offsets, item_data = _gather_items(readonly(data), readonly(offsets), readonly(first))
        return indices, VariableWidthBlock(item_offsets, item_data, block.bits_per_offset)
    values = data.reshape(total, width)
    return indices, FixedWidthBlock(values[first].reshape(-1), block.bits_per_value, count)


@kernel("Tuple((i8[::1], u1[::1]))(ro(u1[::1]), ro(i8[::1]), ro(i8[::1]))")
def _gather_items(data, offsets, first):  # pragma: no cover - compiled
    """The dictionary items of variable-width values: value ``first[k]`` becomes item
    ``k``; returns their offsets (from 0) and bytes."""
    count = len(first)
    item_offsets = np.empty(count + 1, dtype=np.int64)
    item_offsets[0] = 0
    for k in range(count):
        r = first[k]
        item_offsets[k + 1] = item_offsets[k] + offsets[r + 1] - offsets[r]
    out = np.empty(item_offsets[count], dtype=np.uint8)
    for k in range(count):
        r = first[k]
        copy_bytes(out, item_offsets[k], data, offsets[r], offsets[r + 1] - offsets[r])
    return item_offsets, out


@kernel(
    "Tuple((i8, u4[::1], i8[::1]))(ro(u1[::1]), ro(u8[:]), ro(i8[::1]), ro(i8[::1]), i8, i8,"
    " i8, i8, i8, i8, i8)"
)
def _hash_encode_page(
    data, words, offsets, rows, width, max_items, max_bytes, per_item, n, room, capacity
):  # pragma: no cover - compiled
    """:func:`_hash_encode_words` (values of 1 to 8 bytes) or :func:`_hash_encode`, with
    their scratch made here (a small page's every numpy allocation is a Python call):
    ``(count, indices, first)``, count -1 once a budget is passed."""
    indices = np.empty(n, dtype=np.uint32)
    first = np.empty(room, dtype=np.int64)
    table = np.full(capacity, -1, dtype=np.int32)
    keys = np.empty(room, dtype=np.uint64)
    if 0 < width <= 8:
        count = _hash_encode_words(
            data, words, rows, width, max_items, max_bytes, indices, first, table, keys
        )
    else:
        lengths = np.empty(room, dtype=np.int64)
        count = _hash_encode(
            data,
            words,
            offsets,
            rows,
            _WORD_MASKS,
            width,
            max_items,
            max_bytes,
            per_item,
            indices,
            first,
            table,
            keys,
            lengths,
        )
    return count, indices, first


_HASH_K = 0x9E3779B97F4A7C15  # odd: multiplying by it is a bijection on 64 bits
_WORD_MASKS = readonly(
    np.array([(1 << (8 * k)) - 1 for k in range(8)] + [(1 << 64) - 1], dtype=np.uint64)
)


@kernel("i8(ro(u1[::1]), ro(u8[:]), ro(i8[::1]), i8, i8, i8, u4[::1], i8[::1], i4[::1], u8[::1])")
def _hash_encode_words(
    data, words, rows, width, max_items, max_bytes, indices, first, table, keys
):  # pragma: no cover - compiled
    """:func:`_hash_encode` for fixed-width values of 1 to 8 bytes (``max_bytes`` counts
    ``width`` per item): each value is one word, whose hash is a bijection of it, so equal
    hashes are equal values and nothing else is compared."""
    mask = len(table) - 1
    shift = np.uint64(64)
    while (np.uint64(1) << (np.uint64(64) - shift)) < np.uint64(len(table)):
        shift -= np.uint64(1)
    keep = np.uint64(0xFFFFFFFFFFFFFFFF) >> np.uint64(64 - 8 * width)
    salt = np.uint64(width)
    size = len(data)
    k = np.uint64(_HASH_K)
    items = 0
    spent = 0
    sampled = len(rows) > 0
    for i in range(len(indices)):
        r = rows[i] if sampled else i
        start = r * width
        if start + 8 <= size:
            w = words[start]
        else:
            w = np.uint64(0)
            for b in range(size - start):
                w |= np.uint64(data[start + b]) << np.uint64(8 * b)
        h = ((w & keep) ^ salt) * k
        slot = np.int64(h >> shift)
        while True:
            item = table[slot]
            if item < 0:
                if items >= max_items:
                    return -1
                spent += width
                if max_bytes >= 0 and spent > max_bytes:
                    return -1
                table[slot] = items
                first[items] = r
                keys[items] = h
                indices[i] = items
                items += 1
                break
            if keys[item] == h:
                indices[i] = item
                break
            slot = (slot + 1) & mask
    return items


@kernel(
    "i8(ro(u1[::1]), ro(u8[:]), ro(i8[::1]), ro(i8[::1]), ro(u8[::1]), i8, i8, i8, i8,"
    " u4[::1], i8[::1], i4[::1], u8[::1], i8[::1])"
)
def _hash_encode(
    data,
    words,
    offsets,
    rows,
    masks,
    width,
    max_items,
    max_bytes,
    per_item,
    indices,
    first,
    table,
    keys,
    lengths,
):  # pragma: no cover - compiled
    """Dictionary-encode values in order of first appearance, with an open-addressing hash
    table (``table``: item per slot, -1 empty; a power of two at least twice the items),
    slots chosen by the top bits of a multiplicative hash.

    Value ``r`` is ``data[r*width:][:width]`` (``width > 0``) or
    ``data[offsets[r]:offsets[r+1]]``, for ``r`` in ``rows`` (every value when empty);
    values are read 8 bytes at a time (``words``; a read that would pass the end of
    ``data`` gathers its bytes, see ``unaligned_words``; ``masks[k]`` keeps k bytes).
    The hash of a value of at most 8 bytes is a bijection of it for a given length, so
    equal hashes and lengths mean equal values; longer values are compared byte by byte.
    Writes each value's item to ``indices`` and each item's first value (its ``r``) to
    ``first``; returns the item count, or -1 once there would be more than ``max_items``
    items or their bytes (plus ``per_item`` each) would pass ``max_bytes`` (-1: no
    limit)."""
    mask = len(table) - 1
    shift = np.uint64(64)
    while (np.uint64(1) << (np.uint64(64) - shift)) < np.uint64(len(table)):
        shift -= np.uint64(1)
    size = len(data)
    k = np.uint64(_HASH_K)
    items = 0
    spent = 0
    sampled = len(rows) > 0
    for i in range(len(indices)):
        r = rows[i] if sampled else i
        if width > 0:
            start = r * width
            length = width
        else:
            start = offsets[r]
            length = offsets[r + 1] - start
        if start + 8 <= size:
            w = words[start]
        else:
            w = np.uint64(0)
            for b in range(size - start):
                w |= np.uint64(data[start + b]) << np.uint64(8 * b)
        w &= masks[min(length, 8)]
        h = (w ^ np.uint64(length)) * k
        pos = start + 8
        while pos < start + length:  # the words after the first, if any
            if pos + 8 <= size:
                w = words[pos]
            else:
                w = np.uint64(0)
                for b in range(size - pos):
                    w |= np.uint64(data[pos + b]) << np.uint64(8 * b)
            w &= masks[min(start + length - pos, 8)]
            h = ((h ^ (h >> np.uint64(29))) ^ w) * k
            pos += 8
        slot = np.int64(h >> shift) if shift < 64 else 0
        while True:
            item = table[slot]
            if item < 0:
                if items >= max_items:
                    return -1
                spent += length + per_item
                if max_bytes >= 0 and spent > max_bytes:
                    return -1
                table[slot] = items
                first[items] = r
                keys[items] = h
                lengths[items] = length
                indices[i] = items
                items += 1
                break
            if keys[item] == h and lengths[item] == length:
                same = True
                if length > 8:
                    j = first[item]
                    other = j * width if width > 0 else offsets[j]
                    end = max(start, other) + 8
                    at = 0
                    while same and at + 8 <= length and end + at <= size:
                        same = words[start + at] == words[other + at]
                        at += 8
                    while same and at < length:
                        same = data[start + at] == data[other + at]
                        at += 1
                if same:
                    indices[i] = item
                    break
            slot = (slot + 1) & mask
    return items


# -- decoding ----------------------------------------------------------------------------------
# A dictionary page's values are the items its indices name, expanded by compiled kernels
# that check every index: strings and binaries by :class:`VariableItems`, which copies each
# item as whole 8-byte words (3-6x faster than Arrow's take on TPC-H strings), 64- and
# 128-bit values by :class:`FixedItems` (in a serving process 7x faster than Arrow's take,
# whose buffers come from the jemalloc pool there; in a plain process about as fast).

_INDEX_TYPES = ("u1", "u2", "u4", "u8")
_SLACK = 32  # bytes a copy may read past an item or write past the values (4 words)
_I32_LIMIT = 2**31 - 1


@dataclass(frozen=True)
class VariableItems:
    """The items of a variable-width dictionary, ready for :meth:`expand`: Arrow
    ``offsets`` (``int32`` or ``int64``) into ``padded``, the items' bytes followed by
    _SLACK zero bytes (a word copy reads past an item).  Built once per page."""

    offsets: np.ndarray
    padded: np.ndarray
    longest: int  # bytes of the longest item
    words: int  # 2 or 4: every item fits in that many 8-byte words; 0: some item does not

    @classmethod
    def of(cls, offsets: np.ndarray, data: np.ndarray) -> VariableItems:
        """Check the offsets against the bytes and pad a copy of the bytes."""
        if offsets.dtype not in (np.int32, np.int64) or len(offsets) == 0:
            raise CorruptFileError("dictionary offsets must be 32- or 64-bit and non-empty")
        sizes = offsets[1:] - offsets[:-1]
        if len(sizes) and (offsets[0] < 0 or offsets[-1] > len(data) or sizes.min() < 0):
            raise CorruptFileError("dictionary offsets run outside the dictionary's bytes")
        longest = int(sizes.max()) if len(sizes) else 0
        padded = np.zeros(len(data) + _SLACK, dtype=np.uint8)
        padded[: len(data)] = data
        words = 2 if longest <= 16 else 4 if longest <= 32 else 0
        return cls(readonly(np.ascontiguousarray(offsets)), readonly(padded), longest, words)

    @property
    def nbytes(self) -> int:
        return self.offsets.nbytes + self.padded.nbytes

    def expand(
        self, indices: np.ndarray, valid: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The items ``indices`` name, as Arrow offsets (the items' width) and data.  A
        slot whose ``valid`` is False gets an empty value and its index is not looked at.
        An index past the items raises CorruptFileError."""
        indices = np.ascontiguousarray(indices)
        n = len(indices)
        mask = np.zeros(0, np.bool_) if valid is None else np.ascontiguousarray(valid, np.bool_)
        if len(mask) not in (0, n):
            raise CorruptFileError(f"{len(mask)} validity flags for {n} dictionary indices")
        items = len(self.offsets) - 1
        args = (self.offsets, self.padded, readonly(indices), readonly(mask))
        size = n * self.longest  # room for any indices: address space, touched as written
        items_bytes = int(self.offsets[-1] - self.offsets[0])
        if size > _EXACT_SIZE_ABOVE or size > 2 * n * items_bytes // max(items, 1) + _SLOP:
            # long items, or a few much longer than the rest: the bound could hold far more
            # than the values (memory the decoded-page cache would not see), so count first
            size = _expanded_size(*args)
            if size < 0:
                raise CorruptFileError(f"dictionary index beyond the {items} items")
        if self.offsets.dtype == np.int32 and size > _I32_LIMIT:
            raise CorruptFileError("expanded dictionary values exceed 32-bit offsets")
        out_offsets = np.empty(n + 1, dtype=self.offsets.dtype)
        out = np.empty(size + _SLACK, dtype=np.uint8)
        total = _expand(*args, self.words, out_offsets, out)
        if total < 0:
            raise CorruptFileError(f"dictionary index beyond the {items} items")
        return out_offsets, out[:total]


@dataclass(frozen=True)
class FixedItems:
    """The items of a dictionary of fixed-width values of whole 8-byte words (the 64-
    and 128-bit values Lance dictionary-encodes), ready for :meth:`expand`: one row of
    little-endian words per item.  Built once per page."""

    words: np.ndarray  # (items, words per item) uint64, read-only

    @classmethod
    def of(cls, data: np.ndarray, width: int) -> FixedItems:
        """The items of ``width`` bytes (a multiple of 8) laid end to end in ``data``."""
        if width <= 0 or width % 8 or len(data) % width:
            raise CorruptFileError(f"{len(data)} bytes are not items of {width} bytes")
        words = np.frombuffer(np.ascontiguousarray(data, np.uint8).tobytes(), "<u8")
        return cls(readonly(words.reshape(-1, width // 8)))

    @property
    def width(self) -> int:
        return 8 * self.words.shape[1]

    @property
    def nbytes(self) -> int:
        return self.words.nbytes

    def expand(self, indices: np.ndarray, valid: np.ndarray | None) -> np.ndarray:
        """The bytes of the items ``indices`` name, end to end.  A slot whose ``valid`` is
        False is zeros and its index is not looked at.  An index past the items raises
        CorruptFileError."""
        indices = np.ascontiguousarray(indices)
        n = len(indices)
        mask = np.zeros(0, np.bool_) if valid is None else np.ascontiguousarray(valid, np.bool_)
        if len(mask) not in (0, n):
            raise CorruptFileError(f"{len(mask)} validity flags for {n} dictionary indices")
        out = np.empty((n, self.words.shape[1]), dtype=np.uint64)
        if not _expand_fixed(self.words, readonly(indices), readonly(mask), out):
            raise CorruptFileError(f"dictionary index beyond the {len(self.words)} items")
        return out.reshape(-1).view(np.uint8)


DictionaryItems = VariableItems | FixedItems


@kernel(*(f"b1(ro(u8[:, ::1]), ro({i}[::1]), ro(b1[::1]), u8[:, ::1])" for i in _INDEX_TYPES))
def _expand_fixed(items, indices, valid, out):  # pragma: no cover - compiled
    """``out[r] = items[indices[r]]`` (zeros where ``valid`` is False); False for an
    index past the items."""
    count, k = items.shape
    check = len(valid) > 0
    for r in range(len(indices)):
        if check and not valid[r]:
            for w in range(k):
                out[r, w] = 0
            continue
        j = np.int64(indices[r])  # u8 indices past 2**63 turn negative
        if j < 0 or j >= count:
            return False
        if k == 2:  # decimals: the common case, without the inner loop
            out[r, 0] = items[j, 0]
            out[r, 1] = items[j, 1]
        else:
            for w in range(k):
                out[r, w] = items[j, w]
    return True


# above this many bytes of upper bound, the exact size is counted before allocating
_EXACT_SIZE_ABOVE = 1 << 28
_SLOP = 1 << 20  # bytes a bound may exceed twice the items' mean size without a count

_EXPAND_SIGNATURES = tuple(
    f"i8(ro({o}[::1]), ro(u1[::1]), ro({i}[::1]), ro(b1[::1]), i8, {o}[::1], u1[::1])"
    for o in ("i4", "i8")
    for i in _INDEX_TYPES
)
_SIZE_SIGNATURES = tuple(
    f"i8(ro({o}[::1]), ro(u1[::1]), ro({i}[::1]), ro(b1[::1]))"
    for o in ("i4", "i8")
    for i in _INDEX_TYPES
)


@kernel(*_EXPAND_SIGNATURES)
def _expand(offsets, data, indices, valid, words, out_offsets, out):  # pragma: no cover
    """Write the items of ``indices`` end to end into ``out`` and their Arrow offsets into
    ``out_offsets``; returns the bytes written, or -1 for an index past the items.  Items
    are copied as whole 8-byte words, 2 or 4 of them (``words``, when every item fits),
    else as many as each needs, and the next item overwrites the excess: ``data`` and
    ``out`` have _SLACK bytes past their values."""
    items = len(offsets) - 1
    check = len(valid) > 0
    o = 0
    out_offsets[0] = 0
    for r in range(len(indices)):
        if check and not valid[r]:
            out_offsets[r + 1] = o
            continue
        k = np.int64(indices[r])  # u8 indices past 2**63 turn negative
        if k < 0 or k >= items:
            return -1
        s = np.int64(offsets[k])
        size = np.int64(offsets[k + 1]) - s
        if words == 2:
            w0 = load_u64(data, s)
            w1 = load_u64(data, s + 8)
            store_u64(out, o, w0)
            store_u64(out, o + 8, w1)
        elif words == 4:
            w0 = load_u64(data, s)
            w1 = load_u64(data, s + 8)
            w2 = load_u64(data, s + 16)
            w3 = load_u64(data, s + 24)
            store_u64(out, o, w0)
            store_u64(out, o + 8, w1)
            store_u64(out, o + 16, w2)
            store_u64(out, o + 24, w3)
        else:
            j = 0
            while j < size:
                store_u64(out, o + j, load_u64(data, s + j))
                j += 8
        o += size
        out_offsets[r + 1] = o
    return o


@kernel(*_SIZE_SIGNATURES)
def _expanded_size(offsets, data, indices, valid):  # pragma: no cover - compiled
    """The bytes :func:`_expand` will write, or -1 for an index past the items."""
    items = len(offsets) - 1
    check = len(valid) > 0
    total = 0
    for r in range(len(indices)):
        if check and not valid[r]:
            continue
        k = np.int64(indices[r])  # u8 indices past 2**63 turn negative
        if k < 0 or k >= items:
            return -1
        total += np.int64(offsets[k + 1]) - np.int64(offsets[k])
    return total


# -- cardinality estimate ----------------------------------------------------------------------


def estimate_cardinality(block: Block) -> int:
    """Approximate number of distinct values, in O(n) numpy work (no sort).

    Each value is hashed to 64 bits (fixed width: its little-endian words through the
    splitmix64 finaliser, a bijection, so values of up to 8 bytes never collide; variable
    width: a polynomial over its 8-byte words, computed for all values at once, mixed with
    the length), then a HyperLogLog with 4096 registers counts them: about 1.6% standard error,
    near-exact below a few thousand distinct values (linear counting).

    Not used by :func:`should_dictionary_encode`: pylance 14 decides with a sample and an
    exact count, and the compiled hash encode counts exactly about as fast as this estimates.
    """
    if isinstance(block, FixedWidthBlock):
        if block.num_values == 0:
            return 0
        if block.bits_per_value == 1:
            bits = np.unpackbits(np.asarray(block.data), bitorder="little", count=block.num_values)
            return int(np.count_nonzero(np.bincount(bits, minlength=2)))
        hashes = _hash_fixed(block)
    elif isinstance(block, VariableWidthBlock):
        if block.num_values == 0:
            return 0
        hashes = _hash_variable(block)
    else:
        raise UnsupportedError(f"cardinality of a {type(block).__name__}")
    return _hyperloglog(hashes)


_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_POLY = np.uint64(0x100000001B3)
_BYTE_MASKS = np.array([(1 << (8 * i)) - 1 for i in range(9)], dtype=np.uint64)


def _mix(z: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a bijection on uint64 with good avalanche (in place)."""
    z ^= z >> np.uint64(30)
    z *= _M1
    z ^= z >> np.uint64(27)
    z *= _M2
    z ^= z >> np.uint64(31)
    return z


def _hash_fixed(block: FixedWidthBlock) -> np.ndarray:
    bits = block.bits_per_value
    if bits % 8 or bits <= 0:
        raise UnsupportedError(f"cardinality of {bits}-bit values")
    width = bits // 8
    n = block.num_values
    data = np.ascontiguousarray(np.asarray(block.data[: n * width]))
    if width in (1, 2, 4, 8):
        return _mix(data.view(f"<u{width}").astype(np.uint64) + _GOLDEN)
    words = -(-width // 8)
    padded = np.zeros((n, words * 8), dtype=np.uint8)
    padded[:, :width] = data.reshape(n, width)
    cols = padded.view("<u8")  # (n, words)
    h = np.full(n, np.uint64(width), dtype=np.uint64)
    for j in range(words):  # a loop over the 8-byte words of a value, not over values
        h = _mix(h ^ (cols[:, j] + _GOLDEN))
    return h


def _hash_variable(block: VariableWidthBlock) -> np.ndarray:
    """Hash every value: its bytes read as 8-byte little-endian words (the last one masked
    to the value's length), a polynomial over the words modulo 2**64, then mixed with the
    length.  Work is per 8-byte word, not per byte."""
    offsets = np.asarray(block.offsets, dtype=np.int64)
    n = len(offsets) - 1
    lengths = np.diff(offsets)
    words = (lengths + 7) // 8
    acc = np.zeros(n, dtype=np.uint64)
    powers = np.full(max(int(words.max()) if n else 1, 1), _POLY, dtype=np.uint64)
    powers[0] = 1
    np.cumprod(powers, out=powers)  # _POLY ** j, wrapping modulo 2**64
    # groups of whole values with about _HASH_CHUNK_BYTES bytes each (a loop over blocks)
    cuts = np.searchsorted(
        offsets, np.arange(offsets[0], offsets[-1], _HASH_CHUNK_BYTES), side="right"
    )
    bounds = np.unique(np.concatenate([[0], np.minimum(cuts, n), [n]]))
    for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        nw = words[lo:hi]
        nonempty = np.flatnonzero(nw)
        if len(nonempty) == 0:
            continue
        start, stop = int(offsets[lo]), int(offsets[hi])
        padded = np.zeros(stop - start + 8, dtype=np.uint8)
        padded[: stop - start] = np.asarray(block.data[start:stop])
        # every byte position viewed as the start of an (unaligned) u64
        at = np.ndarray((stop - start + 1,), dtype="<u8", buffer=padded, strides=(1,))
        first_word = np.cumsum(nw) - nw
        j = np.arange(int(nw.sum()), dtype=np.int64) - np.repeat(first_word, nw)
        w = at[np.repeat(offsets[lo:hi] - start, nw) + 8 * j]
        left = np.repeat(lengths[lo:hi], nw) - 8 * j  # bytes of this value from the word on
        w &= _BYTE_MASKS[np.minimum(left, 8)]  # drop the next value's bytes
        w *= powers[j]
        acc[lo + nonempty] = np.add.reduceat(w, first_word[nonempty])
    return _mix(acc ^ _mix(lengths.astype(np.uint64) * _POLY + _GOLDEN))


def _hyperloglog(hashes: np.ndarray) -> int:
    p = HLL_PRECISION
    m = 1 << p
    reg = (hashes >> np.uint64(64 - p)).astype(np.int64)
    rest = (hashes & np.uint64((1 << (64 - p)) - 1)).astype(np.float64)  # < 2**52: exact
    _, exp = np.frexp(rest)  # exp = bit length of `rest` (0 for 0)
    rank = (64 - p + 1) - exp  # leading zeros within the 52 bits, plus one
    seen = np.bincount(reg * 64 + rank, minlength=m * 64).reshape(m, 64) > 0
    registers = np.where(seen.any(axis=1), 63 - np.argmax(seen[:, ::-1], axis=1), 0)
    alpha = 0.7213 / (1 + 1.079 / m)
    raw = alpha * m * m / float(np.sum(np.exp2(-registers.astype(np.float64))))
    zeros = int(np.count_nonzero(registers == 0))
    if raw <= 2.5 * m and zeros:
        return round(m * math.log(m / zeros))  # linear counting for small cardinalities
    return round(raw)


# -- metadata parsing (as pylance parses it: a bad value falls back to the default) -----------


def _str_metadata(metadata: dict | None) -> dict[str, str]:
    return {
        (k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
        for k, v in (metadata or {}).items()
    }


def _parse_u64(text: str | None, default: int) -> int:
    """Rust's ``str::parse::<u64>``: digits with an optional ``+``; anything else (spaces,
    signs, decimals, overflow) is ignored in favour of the default, as pylance does."""
    if text is None or not _U64_PATTERN.fullmatch(text):
        return default
    value = int(text)
    return value if value < 2**64 else default


def _parse_f64(text: str | None, default: float) -> float:
    """Rust's ``str::parse::<f64>`` closely enough: Python's float without the whitespace
    and underscores it also accepts; unparseable text gives the default, as in pylance."""
    if text is None or text != text.strip() or "_" in text:
        return default
    try:
        return float(text)
    except ValueError:
        return default
