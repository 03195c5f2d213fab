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

import math
import re
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import CorruptFileError, InvalidArgumentError, UnsupportedError
from ..jit import kernel, load_u64, readonly, store_u64
from ..version import LanceFileVersion
from .blocks import Block, FixedWidthBlock, VariableWidthBlock, gather_ranges

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

_U64_PATTERN = re.compile(r"\+?[0-9]+")
_I32_MAX = 2**31 - 1


@dataclass(frozen=True)
class DictBudget:
    """What a dictionary may cost before it is abandoned (pylance's ``DictEncodingBudget``)."""

    max_items: int
    max_encoded_bytes: int


# -- the decision ----------------------------------------------------------------------------


def should_dictionary_encode(
    block: Block, num_values: int, metadata: dict[str, str] | None, version: str | LanceFileVersion
) -> bool:
    """Whether pylance 14 would dictionary-encode this page (see the module docstring).

    ``block`` holds every value of the page, nulls included as their placeholders (zeros or
    empty strings), which is what pylance counts too; ``num_values`` must be its length.
    The exact check hashes the page once; a writer that will encode anyway should call
    :func:`encode_if_worthwhile` instead, which decides and encodes in one pass.
    """
    budget = dictionary_budget(block, num_values, metadata, version)
    if budget is None:
        return False
    assert isinstance(block, (FixedWidthBlock, VariableWidthBlock))  # eligible: it has a budget
    items, item_bytes = _distinct_items(block)
    return _fits(block, items, item_bytes, budget)


def encode_if_worthwhile(
    block: Block, num_values: int, metadata: dict[str, str] | None, version: str | LanceFileVersion
) -> tuple[np.ndarray, Block] | None:
    """``encode(block)`` when :func:`should_dictionary_encode` holds, else ``None``."""
    budget = dictionary_budget(block, num_values, metadata, version)
    if budget is None:
        return None
    indices, items = encode(block)
    item_bytes = int(items.offsets[-1]) if isinstance(items, VariableWidthBlock) else 0
    if not _fits(block, items.num_values, item_bytes, budget):
        return None
    return indices, items


def dictionary_budget(
    block: Block, num_values: int, metadata: dict[str, str] | None, version: str | LanceFileVersion
) -> DictBudget | None:
    """Steps 1-5 of the decision: the budgets, or ``None`` when the page is ruled out
    without an exact count.  Costs at most one pass over a 4096-value sample."""
    if num_values != block.num_values:
        raise InvalidArgumentError(
            f"num_values={num_values} but the block holds {block.num_values} values"
        )
    if not _eligible(block, LanceFileVersion.parse(version)):
        return None
    if num_values < DICT_TOO_SMALL:
        return None
    md = _str_metadata(metadata)
    divisor = _parse_u64(md.get(DICT_DIVISOR_KEY), DEFAULT_DICT_DIVISOR)
    max_items = min(num_values // max(divisor, 1), DEFAULT_DICT_MAX_CARDINALITY)
    if max_items == 0:
        return None
    ratio = _parse_f64(md.get(DICT_SIZE_RATIO_KEY), DEFAULT_DICT_SIZE_RATIO)
    if ratio <= 0.0 or ratio > 1.0:  # pylance panics on this (the whole write fails)
        raise InvalidArgumentError(
            f"{DICT_SIZE_RATIO_KEY} is {ratio}, which is not in the range (0, 1]"
        )
    assert isinstance(block, (FixedWidthBlock, VariableWidthBlock))  # _eligible() checked it
    size = raw_size(block)
    if size == 0:
        return None
    max_encoded = 0 if math.isnan(ratio) else int(size * ratio)  # Rust `as u64` truncation
    if encoded_size(block, 1, 0) > max_encoded:
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


def _eligible(block: Block, version: LanceFileVersion) -> bool:
    if version < LanceFileVersion.V2_1:
        return False  # 2.0 dictionaries are a different (array-level) encoding
    if isinstance(block, VariableWidthBlock):
        return block.bits_per_offset in (32, 64)
    if isinstance(block, FixedWidthBlock):
        return block.bits_per_value == 128 or (
            block.bits_per_value == 64 and version >= LanceFileVersion.V2_2
        )
    return False


def _fits(block: Block, num_items: int, item_bytes: int, budget: DictBudget) -> bool:
    """The exact budget check.  pylance aborts its encode loop as soon as a running total
    passes a budget; every total only grows, so checking the final totals is the same."""
    if num_items > budget.max_items:
        return False
    return encoded_size(block, num_items, item_bytes) <= budget.max_encoded_bytes


def _sample_indices(n: int) -> np.ndarray | None:
    """pylance's deterministic sample: the first values of 32 equal blocks of the page."""
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
    return np.repeat(starts - before, take) + np.arange(total, dtype=np.int64)


def _sample_unique_ratio(block: FixedWidthBlock | VariableWidthBlock) -> float | None:
    idx = _sample_indices(block.num_values)
    if idx is None:
        return None
    distinct = _count_distinct(_to_arrow(_take(block, idx)))
    return distinct / len(idx)


def _take(
    block: FixedWidthBlock | VariableWidthBlock, idx: np.ndarray
) -> FixedWidthBlock | VariableWidthBlock:
    if isinstance(block, VariableWidthBlock):
        starts = block.offsets[idx]
        lengths = block.offsets[idx + 1] - starts
        offsets = np.zeros(len(idx) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        data = gather_ranges(np.asarray(block.data), starts, lengths)
        return VariableWidthBlock(offsets, data, block.bits_per_offset)
    width = block.bits_per_value // 8
    rows = np.asarray(block.data[: block.num_values * width]).reshape(-1, width)
    return FixedWidthBlock(rows[idx].reshape(-1), block.bits_per_value, len(idx))


def _distinct_items(block: FixedWidthBlock | VariableWidthBlock) -> tuple[int, int]:
    """Exact ``(distinct values, their total bytes)`` (bytes only for variable width)."""
    uniq = pc.unique(_to_arrow(block))
    if isinstance(block, VariableWidthBlock):
        offs, _ = _binary_parts(uniq)
        return len(uniq), int(offs[-1])
    return len(uniq), 0


def _count_distinct(arr: pa.Array) -> int:
    return int(pc.count_distinct(arr).as_py())


# -- encoding ----------------------------------------------------------------------------------


def encode(block: Block) -> tuple[np.ndarray, Block]:
    """``(indices, items)``: ``uint32`` indices into the distinct items, which keep the
    order of first appearance (as pylance writes them), so ``items[indices] == values``.

    Fixed width of any whole number of bytes gives a :class:`FixedWidthBlock` of the same
    width; variable width gives a :class:`VariableWidthBlock` with offsets from 0 and the
    same ``bits_per_offset``.  Arrow's hash kernel does the work: it beat ``np.unique`` by
    5-15x on a million values (and ``np.unique`` sorts, which loses the appearance order).
    """
    if isinstance(block, FixedWidthBlock | VariableWidthBlock):
        encoded = pc.dictionary_encode(_to_arrow(block))
    else:
        raise UnsupportedError(f"dictionary encoding of a {type(block).__name__}")
    # int32 keys from Arrow, never negative: the same bytes as uint32, without a copy
    indices = encoded.indices.to_numpy(zero_copy_only=False).view(np.uint32)
    return indices, _from_arrow(encoded.dictionary, block)


def _to_arrow(block: FixedWidthBlock | VariableWidthBlock) -> pa.Array:
    """A zero-copy Arrow view of the block's values (no validity: nulls are placeholders)."""
    n = block.num_values
    if isinstance(block, VariableWidthBlock):
        offsets = np.asarray(block.offsets, dtype=np.int64)
        base = int(offsets[0])
        data = np.ascontiguousarray(np.asarray(block.data)[base : int(offsets[-1])])
        rel = offsets - base
        if int(rel[-1]) < 2**31:
            return pa.Array.from_buffers(
                pa.binary(), n, [None, pa.py_buffer(rel.astype(np.int32)), pa.py_buffer(data)]
            )
        return pa.Array.from_buffers(
            pa.large_binary(), n, [None, pa.py_buffer(rel), pa.py_buffer(data)]
        )
    bits = block.bits_per_value
    if bits % 8 or bits <= 0:
        raise UnsupportedError(f"dictionary encoding of {bits}-bit values")
    width = bits // 8
    data = np.ascontiguousarray(np.asarray(block.data[: n * width]))
    if width in (1, 2, 4, 8):  # integer hashing is faster than fixed-size binary
        return pa.array(data.view(f"<u{width}"))
    return pa.Array.from_buffers(pa.binary(width), n, [None, pa.py_buffer(data)])


def _from_arrow(items: pa.Array, like: FixedWidthBlock | VariableWidthBlock) -> Block:
    if isinstance(like, VariableWidthBlock):
        offs, data = _binary_parts(items)
        return VariableWidthBlock(offs, data, like.bits_per_offset)
    width = like.bits_per_value // 8
    buf = items.buffers()[1]
    raw = np.frombuffer(buf, dtype=np.uint8) if buf is not None else np.zeros(0, np.uint8)
    raw = raw[items.offset * width : (items.offset + len(items)) * width]
    return FixedWidthBlock(raw, like.bits_per_value, len(items))


def _binary_parts(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Offsets (int64, from 0) and the bytes they cover, of a (large) binary array."""
    dtype = np.int64 if pa.types.is_large_binary(arr.type) else np.int32
    _, off_buf, data_buf = arr.buffers()
    offs = np.frombuffer(off_buf, dtype=dtype)[arr.offset : arr.offset + len(arr) + 1]
    offs = offs.astype(np.int64)
    start, stop = int(offs[0]), int(offs[-1])
    if data_buf is None or stop == start:
        return offs - start, np.zeros(0, dtype=np.uint8)
    return offs - start, np.frombuffer(data_buf, dtype=np.uint8)[start:stop]


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
    exact count, and Arrow's hash kernel counts exactly about as fast as this estimates.
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
