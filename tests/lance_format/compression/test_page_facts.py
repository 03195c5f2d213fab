"""page_facts.scan: one pass answering the constant check, the dictionary encode and the
Flat/InlineBitpacking/RLE statistics, checked against values computed another way (numpy)
and against the separate checks the writer used before (the dictionary encoder with its
budget, ``_word_stats``)."""

from __future__ import annotations

import numpy as np
import pytest

from lance_format.compression import bitpacking, page_facts
from lance_format.compression import compress as cz
from lance_format.compression import dictionary as D
from lance_format.compression.blocks import FixedWidthBlock
from lance_format.jit import readonly

WIDTHS = (np.uint8, np.uint16, np.uint32, np.uint64)


def _bytes(words: np.ndarray) -> np.ndarray:
    return readonly(words.view(np.uint8))


def _numpy_dictionary(words: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Items in order of first appearance, and each value's item: with numpy's unique."""
    uniq, first, inverse = np.unique(words, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")  # item k = the k-th value to appear
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return first[order], rank[inverse.reshape(-1)].astype(np.uint32)


def _numpy_stats(words: np.ndarray) -> tuple[int, int]:
    """Bit lengths of each 1024-value block's maximum, summed; runs split at 255."""
    width_sum = sum(
        int(b.max()).bit_length() for b in np.split(words, range(1024, len(words), 1024))
    )
    runs = 0
    run = 0
    for i, v in enumerate(words.tolist()):
        if i == 0 or v != words[i - 1] or run == 255:
            runs += 1
            run = 0
        run += 1
    return width_sum, runs


def _pages(rng: np.random.Generator):
    for dtype in WIDTHS:
        top = np.iinfo(dtype).max
        for n in (1, 2, 99, 100, 101, 1000, 1024, 1025, 5000):
            yield "random", rng.integers(0, top, n, dtype=dtype, endpoint=True)
            yield "few", rng.integers(0, 4, n).astype(dtype) * dtype(top // 5)
            yield "runs", np.repeat(rng.integers(0, 3, n // 50 + 1), 50)[:n].astype(dtype)
            yield "constant", np.full(n, dtype(top // 3), dtype=dtype)
            yield "long run", np.full(n, dtype(7), dtype=dtype)  # runs split at 255


@pytest.mark.parametrize("nullable", [False, True])
def test_scan_agrees_with_numpy_and_the_separate_checks(nullable: bool) -> None:
    rng = np.random.default_rng(11)
    seen = {"const": 0, "dict": 0, "abandoned": 0, "plain": 0}
    for kind, words in _pages(rng):
        n = len(words)
        defs = None
        if nullable:
            defs = (rng.random(n) < 0.2).astype(np.uint16)
            if kind == "constant" and n > 1:  # nulls hide other values: still constant
                words = words.copy()
                words[defs != 0] = 1
        block = FixedWidthBlock(words.view(np.uint8), words.dtype.itemsize * 8, n)
        budget = D.dictionary_budget(block, n, None, "2.2")
        const, count, indices, first, width_sum, runs = page_facts.scan(
            readonly(words), defs, True, budget
        )
        valid = words if defs is None else words[defs == 0]
        is_constant = len(valid) > 0 and bool((valid == valid[0]).all())
        if is_constant:
            seen["const"] += 1
            assert const >= 0 and (defs is None or defs[const] == 0)
            assert words[const] == valid[0], kind
            continue
        assert const == -1, kind
        expected = D.encode_if_worthwhile(block, n, None, "2.2")  # the separate decision and encode
        if expected is None:
            seen["abandoned" if budget is not None else "plain"] += 1
            assert count == -1
            stored = words
        else:
            seen["dict"] += 1
            np_first, np_indices = _numpy_dictionary(words)
            assert count == len(np_first)
            np.testing.assert_array_equal(first, np_first)
            np.testing.assert_array_equal(indices, np_indices)
            np.testing.assert_array_equal(indices, expected[0])
            np.testing.assert_array_equal(words[first].view(np.uint8), expected[1].data)
            stored = indices
        assert (width_sum, runs) == _numpy_stats(stored), kind
        assert (width_sum, runs) == cz._word_stats(readonly(stored), bitpacking.BLOCK)
    assert all(seen.values()), seen  # every outcome was exercised


def test_scan_without_constant_check_or_budget() -> None:
    words = np.full(300, 5, dtype=np.uint64)
    const, count, _, _, width_sum, runs = page_facts.scan(readonly(words), None, False, None)
    assert (const, count) == (-1, -1)  # asked neither
    assert (width_sum, runs) == (3, 2)  # 300 values in runs of at most 255


def test_budget_boundaries_match_the_dictionary_encoder() -> None:
    """Item and size budgets abandon at the same point as the encoder with a budget."""
    for distinct in range(40, 61):
        words = np.tile(np.arange(distinct, dtype=np.uint64) * 1000, 4)[:100]
        block = FixedWidthBlock(words.view(np.uint8), 64, 100)
        for budget in (
            D.DictBudget(50, 10**6),
            D.DictBudget(10**6, 400 + 8 * 50),  # 400 bytes of indices, then 50 items
            D.DictBudget(50, 400 + 8 * 49),
        ):
            expected = D._hash_encode_block(block, budget)
            _, count, indices, _, _, _ = page_facts.scan(readonly(words), None, False, budget)
            if expected is None:
                assert count == -1, (distinct, budget)
            else:
                assert count == expected[1].num_values
                np.testing.assert_array_equal(indices, expected[0])


def _strings(rng: np.random.Generator):
    for n in (1, 2, 99, 100, 101, 1000, 1025):
        yield "few", [f"v{k}" for k in rng.integers(0, 4, n)]
        yield "many", [f"value-{k}-{'x' * int(k % 20)}" for k in rng.integers(0, 10**6, n)]
        yield "constant", ["same text"] * n
        yield "empty", [""] * n
        yield "long", ["y" * 300 if i == n // 2 else "short" for i in range(n)]  # full-zip
        yield "runs", [f"r{(i // 40) % 3}" for i in range(n)]


@pytest.mark.parametrize("nullable", [False, True])
@pytest.mark.parametrize("bits", [32, 64])
def test_scan_variable_agrees_with_the_separate_checks(nullable: bool, bits: int) -> None:
    from lance_format.compression.blocks import VariableWidthBlock

    rng = np.random.default_rng(5)
    seen = {"const": 0, "fullzip": 0, "dict": 0, "plain": 0}
    for _kind, values in _strings(rng):
        n = len(values)
        data = np.frombuffer("".join(values).encode(), dtype=np.uint8)
        offsets = np.concatenate([[0], np.cumsum([len(v) for v in values])]).astype(np.int64)
        defs = (rng.random(n) < 0.2).astype(np.uint16) if nullable else None
        block = VariableWidthBlock(offsets, data, bits)
        budget = D.dictionary_budget(block, n, None, "2.2")
        const, longest, count, indices, item_offsets, item_data, width_sum, runs = (
            page_facts.scan_variable(block, defs, True, 256, budget)
        )
        valid = values if defs is None else [v for v, d in zip(values, defs, strict=True) if d == 0]
        if valid and all(v == valid[0] for v in valid):
            seen["const"] += 1
            assert const >= 0 and values[const] == valid[0]
            continue
        assert const == -1
        assert longest == max(len(v) for v in values)
        if longest >= 256:
            seen["fullzip"] += 1
            assert count == -1
            continue
        expected = D.encode_if_worthwhile(block, n, None, "2.2")
        if expected is None:
            seen["plain"] += 1
            assert count == -1
            continue
        seen["dict"] += 1
        items = list(dict.fromkeys(values))  # in order of first appearance
        assert count == len(items)
        np.testing.assert_array_equal(indices, [items.index(v) for v in values])
        np.testing.assert_array_equal(indices, expected[0])
        np.testing.assert_array_equal(item_offsets, expected[1].offsets)
        assert item_data.tobytes() == "".join(items).encode()
        assert (width_sum, runs) == _numpy_stats(indices)
    assert all(seen.values()), seen


@pytest.mark.parametrize("nullable", [False, True])
def test_scan_of_128_bit_values_as_two_lanes(nullable: bool) -> None:
    """Decimals and UUIDs: equal low lanes with different high lanes are different values
    (the hash of two lanes is no bijection: values are compared)."""
    rng = np.random.default_rng(3)
    for n in (100, 1000, 1025):
        for lows, highs in (
            (rng.integers(0, 5, n), rng.integers(0, 3, n)),  # 15 values, lows collide
            (np.full(n, 9), np.full(n, 2)),  # constant
            (rng.integers(0, 2**62, n), rng.integers(0, 2**62, n)),  # distinct
        ):
            lanes = np.stack([lows, highs], axis=1).astype(np.uint64).reshape(-1)
            defs = (rng.random(n) < 0.2).astype(np.uint16) if nullable else None
            block = FixedWidthBlock(lanes.view(np.uint8), 128, n)
            budget = D.dictionary_budget(block, n, None, "2.1")
            const, count, indices, first, width_sum, runs = page_facts.scan(
                readonly(lanes), defs, True, budget, 2, _bytes(lanes)
            )
            pairs = list(zip(lows.tolist(), highs.tolist(), strict=True))
            valid = (
                pairs if defs is None else [p for p, d in zip(pairs, defs, strict=True) if d == 0]
            )
            if all(p == valid[0] for p in valid):
                assert const >= 0 and pairs[const] == valid[0]
                continue
            assert const == -1
            expected = D.encode_if_worthwhile(block, n, None, "2.1")
            if expected is None:
                assert count == -1
                continue
            items = list(dict.fromkeys(pairs))
            assert count == len(items) == 15
            np.testing.assert_array_equal(indices, [items.index(p) for p in pairs])
            np.testing.assert_array_equal(indices, expected[0])
            assert lanes.reshape(-1, 2)[first].tobytes() == expected[1].data.tobytes()
            assert (width_sum, runs) == _numpy_stats(indices)


def test_two_lane_hash_collisions_are_told_apart() -> None:
    """Two different 128-bit values made to hash alike (the second lane cancels the
    difference of the first): still two dictionary items."""
    mask = (1 << 64) - 1

    def mixed(low: int) -> int:  # the hash state after the first lane (salt: 16 bytes)
        h = ((low ^ 16) * D._HASH_K) & mask
        return h ^ (h >> 29)

    a = (1, 0)
    b = (2, mixed(1) ^ mixed(2))  # (mixed(2) ^ b[1]) == (mixed(1) ^ a[1]): same hash
    pairs = [a, b] * 50
    lanes = np.array(pairs, dtype=np.uint64).reshape(-1)
    block = FixedWidthBlock(lanes.view(np.uint8), 128, 100)
    budget = D.dictionary_budget(block, 100, None, "2.2")
    _, count, indices, first, _, _ = page_facts.scan(
        readonly(lanes), None, True, budget, 2, _bytes(lanes)
    )
    assert count == 2
    np.testing.assert_array_equal(indices, [0, 1] * 50)
    np.testing.assert_array_equal(first, [0, 1])
