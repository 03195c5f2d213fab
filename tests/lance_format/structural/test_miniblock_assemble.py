"""Mini-block chunk assembly: a one-chunk page (a small write) is joined directly, its
header packed from Python ints; its bytes must be those the general, many-chunk assembly
lays out for the same chunk."""

from __future__ import annotations

import numpy as np
import pytest

from lance_format.errors import UnsupportedError
from lance_format.structural.miniblock import _assemble, _chunk_meta, _many_chunks, _one_chunk


def test_a_one_chunk_page_is_laid_out_as_the_first_of_many():
    rng = np.random.default_rng(11)
    for _ in range(500):
        width = int(rng.integers(2, 20))
        headers = rng.integers(0, 256, (2, width)).astype(np.uint8)
        parts_one, parts_two = [], []
        for _ in range(int(rng.integers(0, 4))):
            first, second = (int(x) for x in rng.integers(0, 50, 2))
            data = rng.integers(0, 256, first + second).astype(np.uint8)
            parts_two.append((data, np.array([first, second])))
            parts_one.append((data[:first], np.array([first])))
        one = _assemble(headers[:1], parts_one)
        two = _assemble(headers, parts_two)  # two chunks: the general path
        assert len(one) % 8 == 0
        assert one.tobytes() == two[: len(one)].tobytes()


def test_a_one_chunk_page_gets_the_header_and_size_of_the_general_layout():
    rng = np.random.default_rng(12)
    for _ in range(500):
        large = bool(rng.integers(0, 2))
        levels = int(rng.integers(0, 1 << 16))

        def parts(n: int, limit: int) -> list:
            out = []
            for _ in range(n):
                size = int(rng.integers(0, limit))
                out.append((rng.integers(0, 256, size).astype(np.uint8), np.array([size])))
            return out

        level_parts = parts(int(rng.integers(0, 3)), 300)
        value_buffers = parts(int(rng.integers(1, 4)), 3000)
        one, one_size = _one_chunk(levels, level_parts, value_buffers, large)
        many, many_size = _many_chunks(np.array([levels]), level_parts, value_buffers, large)
        assert one.tobytes() == many.tobytes()
        assert one_size.tolist() == many_size.tolist() == [len(one)]


def test_the_metadata_word_of_a_one_chunk_page():
    """``(size / 8 - 1) << 4``, the last chunk's log2 being 0, as u32 (2.2) or u16 (2.1);
    a chunk past the format's limit is refused as the many-chunk path refuses it."""
    for large, limit in ((True, 1 << 28), (False, 1 << 12)):
        width = 4 if large else 2
        for size in (8, 16, 4096, 8 * limit):
            got = _chunk_meta(np.array([size]), np.array([7]), large)
            assert got.tobytes() == ((size // 8 - 1) << 4).to_bytes(width, "little")
        for sizes in ([8 * limit + 8], [64, 8 * limit + 8]):
            with pytest.raises(UnsupportedError):
                _chunk_meta(np.array(sizes), np.array([4, 7]), large)
