"""One compiled pass over a page of 8- to 64-bit values for every choice the writer makes
about it.

A page of native-width values (ints, floats, dates, timestamps) meets four questions, in
this order: are all its valid values one value (a 2.2 constant page)?  Does it
dictionary-encode within its budget (pylance's rules, :mod:`.dictionary`)?  Then, for the
values it stores (the indices, if it did), the bit widths and runs that choose between
Flat, InlineBitpacking and RLE (:func:`.compress._fixed_chunks`).  Each was its own kernel
with its own Python around it; a small append's page of 100 values is all overhead, and
a small append encodes one page per column, so :func:`scan` answers all of them in one
call.  The answers are the ones the separate checks give (same dictionary order, same
abandonment points, same sizes), so the bytes written do not change.
"""

from __future__ import annotations

import numpy as np

from ..jit import kernel, readonly
from .bitpacking import BLOCK
from .dictionary import DictBudget
from .rle import MAX_RUN

_NO_LEVELS = readonly(np.zeros(0, dtype=np.uint16))
_HASH_K = 0x9E3779B97F4A7C15  # odd: multiplying by it is a bijection on 64 bits

# (constant, count, indices, first, width_sum, runs)
Facts = tuple[int, int, np.ndarray, np.ndarray, int, int]


def scan(
    words: np.ndarray, defs: np.ndarray | None, check_constant: bool, budget: DictBudget | None
) -> Facts:
    """The facts of a page whose values are ``words`` (unsigned, of the values' width):

    * ``constant``: with ``check_constant``, the position of a valid value every valid one
      equals (``defs``: one level per value, non-zero for a null), else -1;
    * ``count``, ``indices``, ``first``: with a ``budget``, the dictionary encode (items
      in order of first appearance, ``first`` the position of each), count -1 when not
      tried or abandoned at the first excess of the budget, as pylance abandons it;
    * ``width_sum``, ``runs``: of the words stored, the indices if the encode held
      (:func:`.compress._word_stats`; runs of indices are runs of values).
    """
    n = len(words)
    max_items = max_bytes = capacity = room = 0
    if budget is not None:
        max_items = min(n, budget.max_items)
        # the indices (4 bytes each) count against the size budget before any item
        max_bytes = budget.max_encoded_bytes - 4 * n
        room = min(n, max_items + 1)
        capacity = 16
        while capacity < 2 * room:
            capacity *= 2
        if max_bytes < 0:  # the indices alone pass it: no dictionary
            max_items = 0
    levels = _NO_LEVELS if defs is None else readonly(np.ascontiguousarray(defs, np.uint16))
    return _scan(words, levels, check_constant, max_items, max_bytes, room, capacity, BLOCK)


@kernel(
    *(
        f"Tuple((i8, i8, u4[::1], i8[::1], i8, i8))(ro({w}[::1]), ro(u2[::1]), b1, i8, i8, i8,"
        " i8, i8)"
        for w in ("u1", "u2", "u4", "u8")
    )
)
def _scan(
    words, defs, check_constant, max_items, max_bytes, room, capacity, block_values
):  # pragma: no cover - compiled
    n = len(words)
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
            elif words[i] != words[at]:
                same = False
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
        mask = capacity - 1
        shift = np.uint64(64)
        while (np.uint64(1) << (np.uint64(64) - shift)) < np.uint64(capacity):
            shift -= np.uint64(1)
        width = words.itemsize
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
    width_sum = 0
    pieces = 0
    run = 0
    top = np.uint64(0)
    one = np.uint64(1)
    for i in range(n):
        v = np.uint64(indices[i]) if count >= 0 else np.uint64(words[i])
        if i % block_values == 0 or v > top:
            top = v
        if i == 0 or words[i] != words[i - 1] or run == MAX_RUN:
            pieces += 1
            run = 0
        run += 1
        if i % block_values == block_values - 1 or i == n - 1:
            while top:  # the bit length of the block's maximum
                top = top >> one
                width_sum += 1
    if count < 0:
        indices = none_u4
        first = none_i8
    else:
        first = first[:count]
    return -1, count, indices, first, width_sum, pieces
