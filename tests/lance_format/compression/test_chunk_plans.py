"""Mini-block chunk planners (Variable and RLE) against the original per-chunk loops.

The references below are the loop implementations the planners replaced, kept verbatim in
behaviour (the Variable one gains the upstream 4096-value cap, which only binds for large
``aim``).  The planners must return exactly the same counts.
"""

from __future__ import annotations

import numpy as np
import pytest

from lance_format.compression import compress, rle, variable
from lance_format.compression.blocks import FixedWidthBlock

MAX_VALUES = 4096


# -- references --------------------------------------------------------------------------------


def ref_variable(offsets: np.ndarray, bits: int, aim: int, cap: bool = False) -> np.ndarray:
    width = bits // 8
    offsets = np.asarray(offsets, dtype=np.int64)
    n = len(offsets) - 1
    out = []
    pos = 0
    while pos < n:
        rest = n - pos
        if (not cap or rest <= MAX_VALUES) and offsets[n] - offsets[pos] + (
            rest + 1
        ) * width <= aim:
            out.append(rest)
            break
        k = 1
        while (
            k * 2 < rest
            and (not cap or k * 2 <= MAX_VALUES)
            and offsets[pos + k * 2] - offsets[pos] + (k * 2 + 1) * width <= aim
        ):
            k *= 2
        out.append(k)
        pos += k
    return np.array(out, dtype=np.int64)


def ref_rle(block: FixedWidthBlock, max_bytes: int) -> np.ndarray:
    width = block.bits_per_value // 8
    rows = np.asarray(block.data[: block.num_values * width]).reshape(-1, width)
    n = len(rows)

    def cost(a: int, b: int) -> int:
        return len(rle.encode_runs(rows[a:b])[1]) * (width + 1)

    out = []
    pos = 0
    while pos < n:
        rest = n - pos
        if rest <= MAX_VALUES and cost(pos, n) <= max_bytes:
            out.append(rest)
            break
        k = 1
        while k * 2 < rest and k * 2 <= MAX_VALUES and cost(pos, pos + k * 2) <= max_bytes:
            k *= 2
        out.append(k)
        pos += k
    return np.array(out, dtype=np.int64)


def offsets_of(lengths: np.ndarray, start: int = 0) -> np.ndarray:
    out = np.full(len(lengths) + 1, start, dtype=np.int64)
    np.cumsum(lengths, out=out[1:])
    out[1:] += start
    return out


def check_shape(counts: np.ndarray, n: int) -> None:
    """Every chunk but the last holds a power of two of at most 4096 values."""
    assert counts.sum() == n
    assert (counts > 0).all()
    head = counts[:-1]
    assert ((head & (head - 1)) == 0).all()
    assert (counts <= MAX_VALUES).all()


# -- Variable ------------------------------------------------------------------------------------


@pytest.mark.parametrize("bits", [32, 64])
@pytest.mark.parametrize("seed", range(6))
def test_variable_matches_reference_random(bits: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 5000))
    kind = seed % 3
    if kind == 0:  # short strings
        lengths = rng.integers(0, 20, n)
    elif kind == 1:  # mix with values larger than the whole chunk budget
        lengths = rng.integers(0, 50, n)
        lengths[rng.random(n) < 0.05] = rng.integers(4000, 20000)
    else:  # long values, few per chunk
        lengths = rng.integers(200, 3000, n)
    offsets = offsets_of(lengths, start=int(rng.integers(0, 100)))
    for aim in (4096, 1000, 64, 8, 1):
        got = variable.plan_chunks(offsets, bits, aim)
        np.testing.assert_array_equal(got, ref_variable(offsets, bits, aim), err_msg=f"{aim=}")
        check_shape(got, n)


def test_variable_empty_and_single() -> None:
    assert len(variable.plan_chunks(np.zeros(1, dtype=np.int64), 32)) == 0
    assert len(variable.plan_chunks(np.zeros(0, dtype=np.int64), 32)) == 0
    # one huge value: a chunk of one, even though it does not fit
    np.testing.assert_array_equal(variable.plan_chunks(np.array([0, 10**6]), 32), [1])
    # two huge values: each alone
    np.testing.assert_array_equal(variable.plan_chunks(np.array([0, 10**6, 2 * 10**6]), 32), [1, 1])


@pytest.mark.parametrize("bits", [32, 64])
def test_variable_exact_fit_boundaries(bits: int) -> None:
    width = bits // 8
    aim = 4096
    # 2^j values of equal length that fill `aim` exactly, plus or minus one byte
    for k in (1, 2, 8, 64, 256):
        exact = (aim - (k + 1) * width) // k
        for length, extra in ((exact, 0), (exact + 1, 0), (exact, 1)):
            n = 3 * k + extra
            lengths = np.full(n, length, dtype=np.int64)
            # make the chunk fill exactly, by moving the remainder to the first value
            lengths[0] += aim - (k + 1) * width - k * exact
            offsets = offsets_of(lengths)
            got = variable.plan_chunks(offsets, bits, aim)
            np.testing.assert_array_equal(got, ref_variable(offsets, bits, aim))
    # the last chunk fits exactly / misses by one byte
    for slack in (0, 1):
        n = 100
        total = aim - (n + 1) * width + 1 - slack
        lengths = np.full(n, total // n)
        lengths[0] += total - lengths.sum()
        offsets = offsets_of(lengths)
        got = variable.plan_chunks(offsets, bits, aim)
        np.testing.assert_array_equal(got, ref_variable(offsets, bits, aim))
        assert (len(got) == 1) == (slack == 1)


def test_variable_cap_at_4096_values() -> None:
    """A large budget with empty strings: chunks stop at 4096 values (upstream cap)."""
    n = 20_000
    offsets = np.zeros(n + 1, dtype=np.int64)
    got = variable.plan_chunks(offsets, 32, aim=1 << 20)
    np.testing.assert_array_equal(got, ref_variable(offsets, 32, 1 << 20, cap=True))
    np.testing.assert_array_equal(got, [4096] * 4 + [n - 4 * 4096])
    check_shape(got, n)


def test_variable_chunks_respect_aim() -> None:
    """Independent check with the encoder: every multi-value chunk's bytes fit ``aim``."""
    rng = np.random.default_rng(7)
    lengths = rng.integers(0, 300, 3000)
    offsets = offsets_of(lengths)
    counts = variable.plan_chunks(offsets, 32)
    first = np.cumsum(counts) - counts
    nbytes = offsets[first + counts] - offsets[first] + (counts + 1) * 4
    assert (nbytes[counts > 1] <= 4096).all()
    # and a chunk could not have doubled (except the last)
    doubled = np.minimum(first + 2 * counts, len(lengths))
    nb2 = offsets[doubled] - offsets[first] + (doubled - first + 1) * 4
    assert ((nb2 > 4096) | (first + 2 * counts >= len(lengths)))[:-1].all()


# -- RLE -----------------------------------------------------------------------------------------


def rle_block(values: np.ndarray) -> FixedWidthBlock:
    values = np.ascontiguousarray(values)
    data = values.view(np.uint8).reshape(-1).copy()
    return FixedWidthBlock(data, values.dtype.itemsize * 8, len(values))


def runs_of(rng: np.random.Generator, n: int, max_run: int, card: int, dtype) -> np.ndarray:
    lengths = rng.integers(1, max_run + 1, n)
    vals = rng.integers(0, card, len(lengths)).astype(dtype)
    return np.repeat(vals, lengths)[:n]


@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.int32, np.int64])
@pytest.mark.parametrize("seed", range(4))
def test_rle_matches_reference_random(dtype, seed: int) -> None:
    rng = np.random.default_rng(seed)
    max_run = [1, 3, 300, 2000][seed]
    n = int(rng.integers(1, 1500 if max_run == 1 else 5000))
    values = runs_of(rng, n, max_run, 4, dtype)
    block = rle_block(values)
    for max_bytes in (4096, 500, 9, 1):
        got = rle.plan_chunks(block, max_bytes)
        np.testing.assert_array_equal(got, ref_rle(block, max_bytes), err_msg=f"{max_bytes=}")
        check_shape(got, len(values))


@pytest.mark.parametrize("width", [3, 16])
def test_rle_matches_reference_odd_widths(width: int) -> None:
    """Widths without a numpy integer view (24-bit, 128-bit) use the byte-row comparison."""
    rng = np.random.default_rng(width)
    n = 6000
    row_ids = runs_of(rng, n, 400, 3, np.int64)
    table = rng.integers(0, 256, (3, width), dtype=np.uint8)
    block = FixedWidthBlock(table[row_ids].reshape(-1), width * 8, n)
    for max_bytes in (4096, 300):
        np.testing.assert_array_equal(rle.plan_chunks(block, max_bytes), ref_rle(block, max_bytes))


def test_rle_edge_cases() -> None:
    empty = FixedWidthBlock(np.zeros(0, dtype=np.uint8), 32, 0)
    assert len(rle.plan_chunks(empty)) == 0
    # one long run: 4096-value chunks (16 pieces of 255 each fit easily), then the rest
    block = rle_block(np.full(10_000, 5, dtype=np.int32))
    got = rle.plan_chunks(block)
    np.testing.assert_array_equal(got, ref_rle(block, 4096))
    np.testing.assert_array_equal(got, [4096, 4096, 10_000 - 8192])
    # runs of exactly 255 and 256 values straddle the split rule
    for run in (255, 256, 510, 511):
        block = rle_block(np.repeat(np.arange(50, dtype=np.int64), run))
        for max_bytes in (4096, 27, 18):
            np.testing.assert_array_equal(
                rle.plan_chunks(block, max_bytes), ref_rle(block, max_bytes)
            )


def test_rle_chunks_respect_budget_via_encoder() -> None:
    """Independent check with the encoder: each chunk's two buffers fit ``max_bytes``."""
    rng = np.random.default_rng(11)
    values = runs_of(rng, 20_000, 40, 6, np.int32)
    block = rle_block(values)
    counts = rle.plan_chunks(block)
    _, _, vsizes, lsizes = rle.encode_chunks(block, counts)
    total = vsizes + lsizes
    assert (total[counts > 1] <= 4096).all()


# -- RLE runs (compiled for native widths) against a plain loop ---------------------------


def ref_runs(rows: np.ndarray) -> tuple[list[bytes], list[int]]:
    """Runs of equal rows split at 255, one row at a time."""
    values: list[bytes] = []
    lengths: list[int] = []
    for row in (bytes(r) for r in rows):
        if values and values[-1] == row and lengths[-1] < 255:
            lengths[-1] += 1
        else:
            values.append(row)
            lengths.append(1)
    return values, lengths


@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.float32, np.int64])
@pytest.mark.parametrize("max_run", [1, 3, 254, 256, 600])
def test_encode_runs_matches_a_loop(dtype, max_run: int) -> None:
    rng = np.random.default_rng(max_run)
    for n in (1, 2, 100, 255, 256, 1000, 3000):
        rows = rle.rows_of(rle_block(runs_of(rng, n, max_run, 3, dtype)))
        want_values, want_lengths = ref_runs(rows)
        got_values, got_lengths = rle.encode_runs(rows)
        assert [bytes(r) for r in got_values] == want_values
        assert got_lengths.dtype == np.uint8
        assert got_lengths.tolist() == want_lengths
        assert rle.run_pieces(rows) == len(want_lengths)


def test_encode_runs_odd_width_matches_a_loop() -> None:
    rng = np.random.default_rng(3)
    row_ids = runs_of(rng, 2000, 300, 3, np.int64)
    rows = rng.integers(0, 256, (3, 3), dtype=np.uint8)[row_ids]
    want_values, want_lengths = ref_runs(rows)
    got_values, got_lengths = rle.encode_runs(rows)
    assert [bytes(r) for r in got_values] == want_values
    assert got_lengths.tolist() == want_lengths
    assert rle.run_pieces(rows) == len(want_lengths)


@pytest.mark.parametrize("dtype", [np.uint8, np.int32, np.int64])
def test_encode_page_is_plan_then_encode(dtype) -> None:
    """The one-chunk shortcut of a small page gives what planning and encoding give."""
    rng = np.random.default_rng(5)
    for n in (1, 7, 100, 1000, 4096, 4097, 9000):
        for max_run in (1, 4, 300):
            block = rle_block(runs_of(rng, n, max_run, 4, dtype))
            for max_bytes in (4096, 60, 1):
                got = rle.encode_page(block, max_bytes)
                counts = rle.plan_chunks(block, max_bytes)
                want = (counts, *rle.encode_chunks(block, counts))
                assert len(got) == len(want)
                for g, w in zip(got, want, strict=True):
                    assert g.dtype == w.dtype
                    np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32, np.uint64])
def test_word_stats_match_numpy_and_a_loop(dtype) -> None:
    """The one-pass statistics behind the Flat / InlineBitpacking / RLE choice: the bit
    lengths of each 1024-value block's maximum (numpy, per block) and the RLE pieces (a
    plain loop)."""
    rng = np.random.default_rng(int(np.dtype(dtype).itemsize))
    top = np.iinfo(dtype).max
    for n in (1, 5, 1023, 1024, 1025, 3000, 5000):
        for max_run in (1, 40, 700):
            for high in (1, 2, 1000, int(top)):
                values = runs_of(rng, n, max_run, min(high, 2**62), np.uint64)
                values = (values % (high + 1) if high < top else values).astype(dtype)
                if high == top:
                    values[:: max(1, n // 3)] = top  # the top bit set in some blocks
                got_widths, got_pieces = compress._word_stats(values, 1024)
                pad = -n % 1024
                blocks = np.concatenate([values, np.zeros(pad, dtype)]).reshape(-1, 1024)
                widths = [int(m).bit_length() for m in blocks.max(axis=1)]
                assert got_widths == sum(widths)
                size = len(widths) * values.itemsize + 128 * sum(widths)
                assert compress.bitpacked_size(values, 8 * values.itemsize) == size
                rows = values.view(np.uint8).reshape(n, -1)
                assert got_pieces == len(ref_runs(rows)[1])
