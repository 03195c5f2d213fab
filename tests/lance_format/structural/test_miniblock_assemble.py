"""Mini-block chunk assembly: a one-chunk page (a small write) is joined directly, its
header packed from Python ints; its bytes must be those the general, many-chunk assembly
lays out for the same chunk."""

from __future__ import annotations

import numpy as np

from lance_format.structural.miniblock import _assemble, _many_chunks, _one_chunk


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
