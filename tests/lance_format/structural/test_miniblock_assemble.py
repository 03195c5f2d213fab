"""Mini-block chunk assembly: a one-chunk page (a small write) is joined directly, its
header packed from Python ints; its bytes must be those the general, many-chunk assembly
lays out for the same chunk."""

from __future__ import annotations

import numpy as np
import pytest

from lance_format.compression.compress import Chunked, compress_levels, flat_enc
from lance_format.errors import UnsupportedError
from lance_format.pb import encodings_v2_1_pb2 as pb
from lance_format.structural import repdef
from lance_format.structural.miniblock import (
    _assemble,
    _chunk_meta,
    _many_chunks,
    _one_chunk,
    encode_page,
)
from lance_format.version import LanceFileVersion


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


def test_a_page_of_one_chunk_without_levels_is_the_general_page():
    """``encode_page`` lays out a one-chunk page without levels from Python ints; its
    buffers and layout must be those the general assembly gives the same chunk."""
    rng = np.random.default_rng(13)
    for _ in range(300):
        large = bool(rng.integers(0, 2))
        n = int(rng.integers(1, 4097))
        value_buffers = []
        for _ in range(int(rng.integers(1, 4))):
            size = int(rng.integers(0, 3000))
            value_buffers.append((rng.integers(0, 256, size).astype(np.uint8), np.array([size])))
        chunked = Chunked(flat_enc(64), np.array([n]), value_buffers)
        dictionary = None
        if rng.integers(0, 2):
            dictionary = (flat_enc(32), rng.integers(0, 256, 40).astype(np.uint8), 10)
        version = LanceFileVersion.V2_2 if large else LanceFileVersion.V2_1
        page = encode_page(chunked, None, None, [repdef.ALL_VALID_ITEM], n, version, dictionary)
        many, sizes = _many_chunks(np.array([0]), [], value_buffers, large)
        assert page.buffers[1].tobytes() == many.tobytes()
        assert page.buffers[0].tobytes() == _chunk_meta(sizes, np.array([n]), large).tobytes()
        layout = page.layout.mini_block_layout
        assert list(layout.layers) == [repdef.ALL_VALID_ITEM]
        assert (layout.num_items, layout.num_buffers) == (n, len(value_buffers))
        assert layout.has_large_chunk == large
        assert layout.value_compression == chunked.encoding
        assert not layout.HasField("def_compression") and not layout.HasField("rep_compression")
        if dictionary is None:
            assert len(page.buffers) == 2 and not layout.HasField("dictionary")
        else:
            assert page.buffers[2].tobytes() == dictionary[1].tobytes()
            assert layout.dictionary == dictionary[0] and layout.num_dictionary_items == 10
        assert page.num_rows == n


def test_a_page_of_one_chunk_with_def_levels_is_the_general_page():
    """A one-chunk page with def levels and no repetition (a small append's nullable
    column) is laid out from Python ints too: levels compressed as the general path
    compresses them (flat, bitpacked or RLE), then the chunk the general assembly gives."""
    rng = np.random.default_rng(14)
    kinds = set()
    for _ in range(300):
        large = bool(rng.integers(0, 2))
        version = LanceFileVersion.V2_2 if large else LanceFileVersion.V2_1
        n = int(rng.integers(1, 4097))
        top = int(rng.integers(1, 4))
        if rng.integers(0, 2):  # long runs: RLE in 2.2
            defs = np.repeat(rng.integers(0, top + 1, n // 50 + 1), 50)[:n].astype(np.uint16)
        else:
            defs = rng.integers(0, top + 1, n).astype(np.uint16)
        value_buffers = [(rng.integers(0, 256, n * 2).astype(np.uint8), np.array([n * 2]))]
        chunked = Chunked(flat_enc(16), np.array([n]), value_buffers)
        layers = [repdef.NULLABLE_ITEM] * top
        page = encode_page(chunked, None, defs, layers, n, version)
        enc, data, sizes = compress_levels(defs, np.array([n]), version)
        kinds.add(enc.WhichOneof("compression"))
        many, chunk_sizes = _many_chunks(np.array([n]), [(data, sizes)], value_buffers, large)
        assert page.buffers[1].tobytes() == many.tobytes()
        assert page.buffers[0].tobytes() == _chunk_meta(chunk_sizes, np.array([n]), large).tobytes()
        layout = page.layout.mini_block_layout
        assert layout.def_compression == enc and not layout.HasField("rep_compression")
        assert list(layout.layers) == layers and layout.num_items == n
        assert layout.value_compression == chunked.encoding and len(page.buffers) == 2
    assert {"flat", "out_of_line_bitpacking", "rle"} <= kinds  # every level encoding met


def test_equal_one_chunk_pages_share_one_layout():
    """A small append writes the same few page layouts for every file, so equal pages share
    one layout message: it must equal the one built for the page, and be told apart by
    everything it holds (encoding, layers, items, width, def levels, dictionary)."""
    values = [(np.arange(800, dtype=np.uint8), np.array([800]))]
    defs = np.array([0, 1] * 50, dtype=np.uint16)

    def page(n=100, enc=64, layers=(repdef.ALL_VALID_ITEM,), version="2.2", d=None, dct=None):
        chunked = Chunked(flat_enc(enc), np.array([n]), values)
        v = LanceFileVersion.parse(version)
        return encode_page(chunked, None, d, list(layers), n, v, dct)

    first, again = page(), page()
    assert first.layout is again.layout
    built = pb.MiniBlockLayout(
        layers=[repdef.ALL_VALID_ITEM],
        num_buffers=1,
        num_items=100,
        has_large_chunk=True,
        value_compression=flat_enc(64),
    )
    assert first.layout == pb.PageLayout(mini_block_layout=built)
    others = [
        page(n=99),
        page(enc=32),
        page(version="2.1"),
        page(layers=(repdef.NULLABLE_ITEM,), d=defs),
        page(layers=(repdef.ALL_VALID_ITEM, repdef.NULLABLE_ITEM), d=defs),
    ]
    layouts = [first.layout, *(p.layout for p in others)]
    assert len({lay.SerializeToString() for lay in layouts}) == len(layouts)
    items = np.arange(40, dtype=np.uint8)
    with_dict = page(dct=(flat_enc(32), items, 10))
    assert with_dict.layout is page(dct=(flat_enc(32), items[::-1].copy(), 10)).layout
    assert with_dict.buffers[2].tobytes() == items.tobytes()  # each page's own items
    built.dictionary.CopyFrom(flat_enc(32))
    built.num_dictionary_items = 10
    assert with_dict.layout == pb.PageLayout(mini_block_layout=built)
    for other in (page(dct=(flat_enc(32), items, 11)), page(dct=(flat_enc(16), items, 10))):
        assert other.layout != with_dict.layout
    assert not first.layout.mini_block_layout.HasField("dictionary")
