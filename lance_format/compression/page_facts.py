"""One compiled pass over a page's values for every choice the writer makes about it.

A page of native-width values (ints, floats, dates, timestamps) meets four questions, in
this order: are all its valid values one value (a 2.2 constant page)?  Does it
dictionary-encode within its budget (pylance's rules, :mod:`.dictionary`)?  Then, for the
values it stores (the indices, if it did), the bit widths and runs that choose between
Flat, InlineBitpacking and RLE (:func:`.compress._fixed_chunks`).  Each was its own kernel
with its own Python around it; a small append's page of 100 values is all overhead, and
a small append encodes one page per column, so :func:`scan` answers all of them in one
call.  The answers are the ones the separate checks give (same dictionary order, same
abandonment points, same sizes), so the bytes written do not change.

Strings and binary values (:func:`scan_variable`) meet the same questions, with one more
between the first two: is the longest value long enough for full-zip?
"""

from __future__ import annotations

import numpy as np

from ..errors import InvalidArgumentError
from ..jit import kernel, readonly
from .bitpacking import BLOCK
from .blocks import VariableWidthBlock, unaligned_words
from .compress import _word_stats
from .dictionary import _HASH_K, _WORD_MASKS, DictBudget, _gather_items, _hash_encode

_NO_LEVELS = readonly(np.zeros(0, dtype=np.uint16))
_NO_BYTES = readonly(np.zeros(16, dtype=np.uint8))  # nothing hashed from bytes
_NO_WORDS = unaligned_words(_NO_BYTES)

# (constant, count, indices, first, width_sum, runs)
Facts = tuple[int, int, np.ndarray, np.ndarray, int, int]
# (constant, longest, count, indices, item offsets, item bytes, width_sum, runs)
VariableFacts = tuple[int, int, int, np.ndarray, np.ndarray, np.ndarray, int, int]


def scan(
    words: np.ndarray,
    defs: np.ndarray | None,
    check_constant: bool,
    budget: DictBudget | None,
    lanes: int = 1,
    data: np.ndarray | None = None,
) -> Facts:
    """The facts of a page whose values are ``words`` (unsigned, of the values' width; of
    128-bit values, two ``u8`` lanes each, whose statistics come only with a dictionary,
    and whose bytes ``data`` the dictionary's hashing reads):

    * ``constant``: with ``check_constant``, the position of a valid value every valid one
      equals (``defs``: one level per value, non-zero for a null), else -1;
    * ``count``, ``indices``, ``first``: with a ``budget``, the dictionary encode (items
      in order of first appearance, ``first`` the position of each), count -1 when not
      tried or abandoned at the first excess of the budget, as pylance abandons it;
    * ``width_sum``, ``runs``: of the words stored, the indices if the encode held
      (:func:`.compress._word_stats`; runs of indices are runs of values).
    """
    max_items, max_bytes, room, capacity = _table(len(words) // lanes, budget, 0)
    raw, words8 = _NO_BYTES, _NO_WORDS
    if lanes > 1 and max_items > 0:
        if data is None:
            raise InvalidArgumentError("128-bit values are hashed from their bytes: pass data")
        raw, words8 = readonly(data), unaligned_words(data)
    return _scan(
        words,
        lanes,
        raw,
        words8,
        _levels(defs),
        check_constant,
        max_items,
        max_bytes,
        room,
        capacity,
        BLOCK,
    )


def scan_variable(
    block: VariableWidthBlock,
    defs: np.ndarray | None,
    check_constant: bool,
    fullzip_min: int,
    budget: DictBudget | None,
) -> VariableFacts:
    """:func:`scan` of variable-width values, plus ``longest``, the longest value's length.
    With ``fullzip_min`` > 0, a page whose longest value reaches it is full-zip: nothing
    after the constant check is answered (count -1).  A dictionary's items come as the
    block :func:`.dictionary.encode` makes (offsets from 0, then their bytes)."""
    offsets = readonly(np.ascontiguousarray(block.offsets, dtype=np.int64))
    data = readonly(np.ascontiguousarray(block.data, dtype=np.uint8))
    per_item = block.bits_per_offset // 8  # each item adds an offset
    max_items, max_bytes, room, capacity = _table(block.num_values, budget, per_item)
    return _scan_variable(
        data,
        unaligned_words(data),
        offsets,
        _levels(defs),
        check_constant,
        fullzip_min,
        max_items,
        max_bytes,
        per_item,
        room,
        capacity,
        BLOCK,
    )


def _table(n: int, budget: DictBudget | None, per_item: int) -> tuple[int, int, int, int]:
    """The dictionary encode's limits (no attempt: 0 items) and its hash table's sizes:
    ``(max_items, max_bytes, room, capacity)``, as :func:`.dictionary._hash_encode_block`
    sets them."""
    if budget is None:
        return 0, 0, 0, 0
    max_items = min(n, budget.max_items)
    # the indices (4 bytes each) and the first offset count against the size budget
    max_bytes = budget.max_encoded_bytes - 4 * n - per_item
    if max_bytes < 0:  # they alone pass it: no dictionary
        return 0, 0, 0, 0
    room = min(n, max_items + 1)
    capacity = 16
    while capacity < 2 * room:
        capacity *= 2
    return max_items, max_bytes, room, capacity


def _levels(defs: np.ndarray | None) -> np.ndarray:
    return _NO_LEVELS if defs is None else readonly(np.ascontiguousarray(defs, np.uint16))


@kernel(
    *(
        f"Tuple((i8, i8, u4[::1], i8[::1], i8, i8))(ro({w}[::1]), i8, ro(u1[::1]), ro(u8[:]),"
        " ro(u2[::1]), b1, i8, i8, i8, i8, i8)"
        for w in ("u1", "u2", "u4", "u8")
    )
)
def _scan(
    words,
    lanes,
    data,
    words8,
    defs,
    check_constant,
    max_items,
    max_bytes,
    room,
    capacity,
    block_values,
):  # pragma: no cover - compiled
    """Value ``i`` is ``words[i * lanes:][:lanes]``; with two lanes, ``data`` holds the
    values' bytes and ``words8`` their unaligned words, for the dictionary's hashing."""
    n = len(words) // lanes
    none_u4 = np.empty(0, dtype=np.uint32)
    none_i8 = np.empty(0, dtype=np.int64)
    if check_constant:
        at = -1
        same = True
        nullable = len(defs) > 0
        for i in range(n):
            if nullable and defs[i] != 0:
                continue
            if at < 0:
                at = i
                continue
            for j in range(lanes):
                if words[i * lanes + j] != words[at * lanes + j]:
                    same = False
            if not same:
                break
        if same and at >= 0:
            return at, -1, none_u4, none_i8, 0, 0
    count = -1
    indices = none_u4
    first = none_i8
    if max_items > 0:
        indices = np.empty(n, dtype=np.uint32)
        first = np.empty(room, dtype=np.int64)
        table = np.full(capacity, -1, dtype=np.int32)
        keys = np.empty(room, dtype=np.uint64)
        width = words.itemsize * lanes
        if lanes > 1:  # 128 bits: the dictionary encoder's kernel for wide values
            count = _hash_encode(
                data,
                words8,
                none_i8,
                none_i8,
                _WORD_MASKS,
                width,
                max_items,
                max_bytes,
                0,
                indices,
                first,
                table,
                keys,
                np.empty(room, dtype=np.int64),
            )
        else:
            # dictionary._hash_encode_words on values read at their own width rather than
            # as unaligned 8-byte loads of their bytes: the same hash of the same value
            # (a bijection of it), so the same items in the same order and the same
            # abandonment points; no bytes and no unaligned view to make per page
            mask = capacity - 1
            shift = np.uint64(64)
            while (np.uint64(1) << (np.uint64(64) - shift)) < np.uint64(capacity):
                shift -= np.uint64(1)
            salt = np.uint64(width)
            k = np.uint64(_HASH_K)
            count = 0
            spent = 0
            for i in range(n):
                h = (np.uint64(words[i]) ^ salt) * k
                slot = np.int64(h >> shift)
                while True:
                    item = table[slot]
                    if item < 0:
                        spent += width
                        if count >= max_items or spent > max_bytes:
                            count = -1
                            break
                        table[slot] = count
                        first[count] = i
                        keys[count] = h
                        indices[i] = count
                        count += 1
                        break
                    if keys[item] == h:
                        indices[i] = item
                        break
                    slot = (slot + 1) & mask
                if count < 0:
                    break
    if count >= 0:  # runs of indices are runs of values
        width_sum, runs = _word_stats(indices, block_values)
        return -1, count, indices, first[:count], width_sum, runs
    if lanes == 1:
        width_sum, runs = _word_stats(words, block_values)
        return -1, -1, none_u4, none_i8, width_sum, runs
    return -1, -1, none_u4, none_i8, 0, 0


@kernel(
    "Tuple((i8, i8, i8, u4[::1], i8[::1], u1[::1], i8, i8))(ro(u1[::1]), ro(u8[:]), ro(i8[::1]),"
    " ro(u2[::1]), b1, i8, i8, i8, i8, i8, i8, i8)"
)
def _scan_variable(
    data,
    words,
    offsets,
    defs,
    check_constant,
    fullzip_min,
    max_items,
    max_bytes,
    per_item,
    room,
    capacity,
    block_values,
):  # pragma: no cover - compiled
    n = len(offsets) - 1
    none_u4 = np.empty(0, dtype=np.uint32)
    none_i8 = np.empty(0, dtype=np.int64)
    none_u1 = np.empty(0, dtype=np.uint8)
    if check_constant:
        at = -1
        same = True
        nullable = len(defs) > 0
        for i in range(n):
            if nullable and defs[i] != 0:
                continue
            if at < 0:
                at = i
                continue
            start, length = offsets[i], offsets[i + 1] - offsets[i]
            other = offsets[at]
            if length != offsets[at + 1] - other:
                same = False
                break
            for b in range(length):
                if data[start + b] != data[other + b]:
                    same = False
                    break
            if not same:
                break
        if same and at >= 0:
            return at, 0, -1, none_u4, none_i8, none_u1, 0, 0
    longest = 0
    for i in range(n):
        longest = max(longest, offsets[i + 1] - offsets[i])
    if (fullzip_min > 0 and longest >= fullzip_min) or max_items == 0:
        return -1, longest, -1, none_u4, none_i8, none_u1, 0, 0
    indices = np.empty(n, dtype=np.uint32)
    first = np.empty(room, dtype=np.int64)
    count = _hash_encode(
        data,
        words,
        offsets,
        none_i8,
        _WORD_MASKS,
        0,
        max_items,
        max_bytes,
        per_item,
        indices,
        first,
        np.full(capacity, -1, dtype=np.int32),
        np.empty(room, dtype=np.uint64),
        np.empty(room, dtype=np.int64),
    )
    if count < 0:
        return -1, longest, -1, none_u4, none_i8, none_u1, 0, 0
    item_offsets, item_data = _gather_items(data, offsets, first[:count])
    width_sum, runs = _word_stats(indices, block_values)
    return -1, longest, count, indices, item_offsets, item_data, width_sum, runs
