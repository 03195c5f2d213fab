"""Compressive encodings of Lance 2.1/2.2 (lance_format.compression).

Truth comes from outside the code under test:

* a slow, straightforward FastLanes packer/unpacker written here from the layout's formula
  (docs/format/compression.md), checked against our vectorised one in both directions for
  every T and W;
* the hex examples of the format notes (docs/format/structural.md);
* the zstandard / lz4 libraries' own framing;
* real pylance 14 files: a tiny parser in this file (footer -> ColumnMetadata -> page
  buffers -> mini-block chunks / full-zip values) feeds our codecs, and the result is
  compared with pylance's own read of the column.
"""

from __future__ import annotations

import struct

import lance
import lance.file
import lz4.block
import numpy as np
import pyarrow as pa
import pytest
import zstandard
from google.protobuf import any_pb2

from lance_format.compression import (
    bitpacking,
    bss,
    flat,
    fsl,
    fsst,
    general,
    packed,
    rle,
    variable,
)
from lance_format.compression.blocks import (
    ChunkRanges,
    FixedSizeListBlock,
    FixedWidthBlock,
    StructBlock,
    VariableWidthBlock,
)
from lance_format.compression.decompress import (
    decompress_block,
    decompress_levels,
    decompress_levels_chunks,
    decompress_miniblock,
    decompress_per_value,
    describe,
)
from lance_format.errors import CorruptFileError, UnsupportedError
from lance_format.pb import encodings_v2_1_pb2 as pb
from lance_format.pb import file2_pb2

RNG_SEED = 20240611
FL_ORDER_SPEC = [0, 4, 2, 6, 1, 5, 3, 7]


def h(s: str) -> np.ndarray:
    """Hex (spaces and '|' allowed) to a uint8 array."""
    return np.frombuffer(bytes.fromhex(s.replace("|", " ")), dtype=np.uint8)


def ranges(chunks: list[bytes]) -> ChunkRanges:
    """Chunks laid out back to back with a little junk between them (so starts matter)."""
    base = bytearray()
    starts, lengths = [], []
    for c in chunks:
        base += b"\xee" * 3
        starts.append(len(base))
        lengths.append(len(c))
        base += c
    base += b"\xee" * 5
    return ChunkRanges(
        np.frombuffer(bytes(base), dtype=np.uint8),
        np.array(starts, dtype=np.int64),
        np.array(lengths, dtype=np.int64),
    )


# ---- encoding messages ---------------------------------------------------------------------


def e_flat(bits: int) -> pb.CompressiveEncoding:
    return pb.CompressiveEncoding(flat=pb.Flat(bits_per_value=bits))


def e_var(bits: int = 32) -> pb.CompressiveEncoding:
    return pb.CompressiveEncoding(variable=pb.Variable(offsets=e_flat(bits)))


def e_general(scheme: int, inner: pb.CompressiveEncoding) -> pb.CompressiveEncoding:
    return pb.CompressiveEncoding(
        general=pb.General(compression=pb.BufferCompression(scheme=scheme), values=inner)
    )


LZ4, ZSTD = 1, 2


# ---- a slow FastLanes reference, straight from docs/format/compression.md -----------------


def ref_index(r: int, lane: int) -> int:
    return FL_ORDER_SPEC[r // 8] * 16 + (r % 8) * 128 + lane


def ref_pack(values: list[int], w: int, t: int) -> list[int]:
    """Each lane is one little-endian bit stream of W*T bits; row r sits at bits r*W.."""
    lanes = 1024 // t
    words = [0] * (w * lanes)
    for lane in range(lanes):
        stream = 0
        for r in range(t):
            stream |= (values[ref_index(r, lane)] & ((1 << w) - 1)) << (r * w)
        for k in range(w):
            words[k * lanes + lane] = (stream >> (k * t)) & ((1 << t) - 1)
    return words


def ref_unpack(words: list[int], w: int, t: int) -> list[int]:
    lanes = 1024 // t
    out = [0] * 1024
    for lane in range(lanes):
        stream = 0
        for k in range(w):
            stream |= words[k * lanes + lane] << (k * t)
        for r in range(t):
            out[ref_index(r, lane)] = (stream >> (r * w)) & ((1 << w) - 1)
    return out


def random_values(rng, w: int, t: int, n: int = 1024) -> np.ndarray:
    dtype = bitpacking.word_dtype(t)
    raw = rng.integers(0, 2**63, size=n, dtype=np.uint64) * np.uint64(2) + rng.integers(
        0, 2, size=n, dtype=np.uint64
    )
    mask = np.uint64((1 << w) - 1) if w < 64 else np.uint64(2**64 - 1)
    return (raw & mask).astype(dtype)


@pytest.mark.parametrize("t", [8, 16, 32, 64])
def test_fastlanes_matches_reference_for_every_width(t):
    rng = np.random.default_rng(RNG_SEED + t)
    for w in range(t + 1):
        vals = random_values(rng, w, t)
        ref_words = ref_pack([int(v) for v in vals], w, t)
        ours = bitpacking.pack_blocks(vals[None, :], w, t)
        assert ours.shape == (1, 1024 * w // t)
        assert [int(x) for x in ours[0]] == ref_words, (t, w)
        # reference-packed words unpack with ours, our words unpack with the reference
        dtype = bitpacking.word_dtype(t)
        back = bitpacking.unpack_blocks(np.array(ref_words, dtype=dtype)[None, :], w, t)
        assert (back[0] == vals).all(), (t, w)
        assert ref_unpack([int(x) for x in ours[0]], w, t) == [int(v) for v in vals]


def test_fastlanes_pack_drops_bits_above_width():
    vals = np.arange(1024, dtype=np.uint16) | 0xF000
    packed_words = bitpacking.pack_blocks(vals[None, :], 10, 16)
    assert (bitpacking.unpack_blocks(packed_words, 10, 16)[0] == (vals & 0x3FF)).all()


def test_fastlanes_first_lane_bits_by_hand():
    # u8, W=3: lane 0 rows are inputs 0,128,...,896; values 1..8 (8 -> 0 in 3 bits)
    vals = np.zeros(1024, dtype=np.uint8)
    for r in range(8):
        vals[r * 128] = r + 1
    words = bitpacking.pack_blocks(vals[None, :], 3, 8)[0]
    stream = int(words[0]) | int(words[128]) << 8 | int(words[256]) << 16
    assert [(stream >> (3 * r)) & 7 for r in range(8)] == [1, 2, 3, 4, 5, 6, 7, 0]


# ---- InlineBitpacking ----------------------------------------------------------------------


@pytest.mark.parametrize("t", [8, 16, 32, 64])
def test_inline_chunks_decode_reference_packed(t):
    rng = np.random.default_rng(RNG_SEED)
    widths = [0, 1, t // 2, t, 3, 1]
    counts = [1024] * (len(widths) - 1) + [77]
    chunks, expected = [], []
    for w, c in zip(widths, counts, strict=True):
        vals = random_values(rng, w, t)
        vals[c:] = 0
        words = ref_pack([int(v) for v in vals], w, t)
        dtype = bitpacking.word_dtype(t)
        chunks.append(np.array([w] + words, dtype=dtype).tobytes())
        expected.append(vals[:c])
    got = bitpacking.decode_inline_chunks(ranges(chunks), np.array(counts), t)
    assert (got == np.concatenate(expected)).all()
    # encoder: the same values give the same chunks (W is the bit length of the max)
    buf, sizes = bitpacking.encode_inline_chunks(np.concatenate(expected), t)
    again = bitpacking.decode_inline_chunks(
        ChunkRanges(buf, np.cumsum(sizes) - sizes, sizes), np.array(counts), t
    )
    assert (again == np.concatenate(expected)).all()


def test_inline_width_word_is_the_element_width():
    # docs/format/compression.md: u8 data with W=3 is `03` then 384 bytes
    buf, sizes = bitpacking.encode_inline_chunks(np.arange(1024, dtype=np.uint8) % 8, 8)
    assert buf[0] == 3 and sizes.tolist() == [1 + 384]
    buf, sizes = bitpacking.encode_inline_chunks(np.full(5, 100, dtype=np.uint16), 16)
    assert buf[:2].tolist() == [7, 0] and sizes.tolist() == [2 + 896]
    buf, sizes = bitpacking.encode_inline_chunks(np.zeros(10, dtype=np.uint32), 32)
    assert buf.tolist() == [0, 0, 0, 0]


def test_inline_block_form_is_concatenated_chunks():
    rng = np.random.default_rng(RNG_SEED)
    vals = np.concatenate(
        [rng.integers(0, 5, 1024), rng.integers(0, 2**40, 1024), rng.integers(0, 3, 500)]
    ).astype(np.uint64)
    block = bitpacking.encode_inline_block(vals, 64)
    enc = pb.CompressiveEncoding(
        inline_bitpacking=pb.InlineBitpacking(uncompressed_bits_per_value=64)
    )
    out = decompress_block(enc, block, len(vals))
    assert (out.data.view("<u8") == vals).all()
    with pytest.raises(CorruptFileError):
        decompress_block(enc, block[:-8], len(vals))


def test_inline_corrupt_width_and_short_chunk():
    with pytest.raises(CorruptFileError):
        bitpacking.decode_inline_chunks(ranges([bytes([9]) + bytes(1152)]), np.array([5]), 8)
    with pytest.raises(CorruptFileError):
        bitpacking.decode_inline_chunks(ranges([bytes([3]) + bytes(100)]), np.array([5]), 8)


# ---- OutOfLineBitpacking -------------------------------------------------------------------


def test_out_of_line_raw_and_padded_tails():
    rng = np.random.default_rng(RNG_SEED)
    w, t = 2, 16
    # 1024 + 1000: padding costs 2*24 bits, raw costs 14*1000 -> padded
    a = rng.integers(0, 4, 2024).astype(np.uint16)
    # 1024 + 10: padding costs 2*1014 bits > 14*10 -> raw tail
    b = rng.integers(0, 4, 1034).astype(np.uint16)
    # exactly one block, and a tail-only buffer
    c = rng.integers(0, 4, 1024).astype(np.uint16)
    d = rng.integers(0, 4, 7).astype(np.uint16)
    bufs = []
    for v in (a, b, c, d):
        nfull, tail = divmod(len(v), 1024)
        words = []
        for i in range(nfull):
            words += ref_pack([int(x) for x in v[i * 1024 : (i + 1) * 1024]], w, t)
        if tail:
            if w * (1024 - tail) < (t - w) * tail:
                last = [int(x) for x in v[nfull * 1024 :]] + [0] * (1024 - tail)
                words += ref_pack(last, w, t)
            else:
                words += [int(x) for x in v[nfull * 1024 :]]
        buf = np.array(words, dtype="<u2").tobytes()
        assert buf == bitpacking.encode_out_of_line(v, w, t).tobytes()
        bufs.append(buf)
    assert len(bufs[0]) == 2 * 128 * 2 and len(bufs[1]) == 2 * 128 + 20
    counts = np.array([len(a), len(b), len(c), len(d)])
    got = bitpacking.decode_out_of_line_chunks(ranges(bufs), counts, w, t)
    assert (got == np.concatenate([a, b, c, d])).all()
    # the same through the dispatcher, block by block and for all chunks at once
    enc = pb.CompressiveEncoding(
        out_of_line_bitpacking=pb.OutOfLineBitpacking(
            uncompressed_bits_per_value=16, values=e_flat(2)
        )
    )
    for buf, v in zip(bufs, (a, b, c, d), strict=True):
        assert (decompress_levels(enc, np.frombuffer(buf, np.uint8), len(v)) == v).all()
    assert (decompress_levels_chunks(enc, ranges(bufs), counts) == got).all()
    with pytest.raises(CorruptFileError):
        decompress_levels(enc, np.frombuffer(bufs[0][:100], np.uint8), len(a))


# ---- Flat ----------------------------------------------------------------------------------


def test_flat_bool_chunks_join_bit_by_bit():
    rng = np.random.default_rng(RNG_SEED)
    counts = [8, 4096, 3, 13, 0, 5]
    bools = [rng.random(c) < 0.5 for c in counts]
    chunks = [flat.pack_bools(b).tobytes() for b in bools]
    block = decompress_miniblock(e_flat(1), [ranges(chunks)], np.array(counts))
    assert block.bits_per_value == 1 and block.num_values == sum(counts)
    assert (flat.unpack_bools(block.data, block.num_values) == np.concatenate(bools)).all()


def test_flat_chunks_and_short_chunk():
    chunks = [np.arange(4, dtype="<i8").tobytes(), np.arange(4, 6, dtype="<i8").tobytes()]
    block = decompress_miniblock(e_flat(64), [ranges(chunks)], np.array([4, 2]))
    assert block.data.view("<i8").tolist() == [0, 1, 2, 3, 4, 5]
    with pytest.raises(CorruptFileError):
        decompress_miniblock(e_flat(64), [ranges(chunks)], np.array([4, 3]))


# ---- Variable ------------------------------------------------------------------------------


def test_variable_chunk_digest_example():
    # docs/format/structural.md: the value buffer of ["a", null, "ccc"]
    chunk = h("10000000 11000000 11000000 14000000 61636363")
    block = decompress_miniblock(e_var(32), [ranges([chunk.tobytes()])], np.array([3]))
    assert block.offsets.tolist() == [0, 1, 1, 4]
    assert block.data.tobytes() == b"accc"


def test_variable_chunks_roundtrip_u32_and_u64():
    rng = np.random.default_rng(RNG_SEED)
    vals = [bytes(rng.integers(0, 256, rng.integers(0, 40))) for _ in range(2000)]
    lengths = np.array([len(v) for v in vals])
    src = variable.from_lengths(lengths, np.frombuffer(b"".join(vals), np.uint8))
    for bits in (32, 64):
        src.bits_per_offset = bits
        counts = variable.plan_chunks(src.offsets, bits)
        assert (counts[:-1] & (counts[:-1] - 1) == 0).all()  # powers of two but the last
        buf, sizes = variable.encode_chunks(src, counts)
        assert (sizes % (bits // 8) == 0).all() and (sizes <= 4096).all()
        # first chunk: offset[0] = (k+1)*width, padding is 0x48
        first = np.frombuffer(buf[: (counts[0] + 1) * bits // 8].tobytes(), f"<u{bits // 8}")
        assert first[0] == (counts[0] + 1) * bits // 8
        out = decompress_miniblock(
            e_var(bits), [ChunkRanges(buf, np.cumsum(sizes) - sizes, sizes)], counts
        )
        assert out.offsets.tolist() == src.offsets.tolist()
        assert out.data.tobytes() == b"".join(vals)


def test_variable_corrupt_offsets():
    chunk = h("10000000 11000000 09000000 14000000 61636363")  # goes backwards
    with pytest.raises(CorruptFileError):
        decompress_miniblock(e_var(32), [ranges([chunk.tobytes()])], np.array([3]))
    chunk = h("10000000 11000000 11000000 54000000 61636363")  # runs past the chunk
    with pytest.raises(CorruptFileError):
        decompress_miniblock(e_var(32), [ranges([chunk.tobytes()])], np.array([3]))


DICT_EXAMPLE = "20000000 1c000000 | 00000000 03000000 08000000 0c000000 12000000 | " + (
    b"redgreenblueyellow".hex()
)


def test_variable_block_digest_dictionary_example():
    data = h(DICT_EXAMPLE)
    block = decompress_block(e_var(32), data, 4)
    assert block.offsets.tolist() == [0, 3, 8, 12, 18]
    assert block.data.tobytes() == b"redgreenblueyellow"
    assert variable.encode_block(block).tobytes() == data.tobytes()
    # 2.2 wraps the same bytes in LZ4: u32 46 then an LZ4 block
    framed = lz4.block.compress(data.tobytes(), store_size=True)
    assert framed[:4] == bytes.fromhex("2e000000")
    out = decompress_block(e_general(LZ4, e_var(32)), np.frombuffer(framed, np.uint8), 4)
    assert out.data.tobytes() == b"redgreenblueyellow"


def test_variable_block_u64_and_old_header():
    src = VariableWidthBlock(np.array([0, 2, 2, 7]), np.frombuffer(b"abcdefg", np.uint8), 64)
    buf = variable.encode_block(src)
    assert buf[:16].tobytes() == struct.pack("<QQ", 64, 16 + 8 * 4)
    out = decompress_block(e_var(64), buf, 3)
    assert out.offsets.tolist() == [0, 2, 2, 7] and out.data.tobytes() == b"abcdefg"
    # the older header: u8 bits, u32 num_values, u32 bytes_start
    old = struct.pack("<BII", 32, 3, 9 + 16) + struct.pack("<4I", 0, 2, 2, 7) + b"abcdefg"
    out = decompress_block(e_var(32), np.frombuffer(old, np.uint8), 3)
    assert out.offsets.tolist() == [0, 2, 2, 7] and out.data.tobytes() == b"abcdefg"
    with pytest.raises(CorruptFileError):
        decompress_block(e_var(32), h(DICT_EXAMPLE)[:20], 4)


# ---- FSST ----------------------------------------------------------------------------------


def make_symbol_table(symbols: list[bytes], enabled: bool = True) -> bytes:
    n = len(symbols)
    header = (0x46535354 << 32) | (int(enabled) << 24) | (n & 0xFF)
    out = bytearray(fsst.SYMBOL_TABLE_SIZE)
    out[:8] = header.to_bytes(8, "little")
    for i, s in enumerate(symbols):
        out[8 + 8 * i : 8 + 8 * i + len(s)] = s
    for i, s in enumerate(symbols):
        out[8 + 8 * n + i] = len(s)
    return bytes(out)


def ref_fsst_encode(s: bytes, symbols: list[bytes]) -> bytes:
    """Greedy longest-match encoder; bytes without a symbol are escaped with 255."""
    out = bytearray()
    i = 0
    while i < len(s):
        best = -1
        for code, sym in enumerate(symbols):
            if s.startswith(sym, i) and (best < 0 or len(sym) > len(symbols[best])):
                best = code
        if best >= 0:
            out.append(best)
            i += len(symbols[best])
        else:
            out += bytes([255, s[i]])
            i += 1
    return bytes(out)


def test_fsst_header_example_and_length_position():
    # docs/format/compression.md: header ff 00 48 01 54 53 53 46 = 255 symbols, encoder switch on
    table = bytearray(fsst.SYMBOL_TABLE_SIZE)
    table[:8] = h("ff004801 54535346").tobytes()
    table[8 + 8 * 7 : 8 + 8 * 8] = b"sevenxyz"
    table[8 + 8 * 255 + 7] = 5  # the length of symbol 7 is at 8 + 8n + 7
    st = fsst.parse_symbol_table(bytes(table))
    assert st.enabled and st.n_symbols == 255 and st.lengths[7] == 5
    out = fsst.decompress(VariableWidthBlock(np.array([0, 2]), h("07ff")), st)
    assert out.data.tobytes() == b"seven" and out.offsets.tolist() == [0, 5]
    with pytest.raises(CorruptFileError):
        fsst.parse_symbol_table(bytes(table[:-1]))


def test_fsst_many_strings_with_escape_runs():
    rng = np.random.default_rng(RNG_SEED)
    alphabet = np.frombuffer(b"ab\xff\xfe c", np.uint8)
    # 255 symbols so that code 254 exists; some symbols contain 0xFF bytes
    symbols = []
    while len(symbols) < 255:
        s = bytes(rng.choice(alphabet, rng.integers(1, 9)))
        if s not in symbols and b"\xff" not in s[:1]:
            symbols.append(s)
    strings = [bytes(rng.choice(alphabet, rng.integers(0, 30))) for _ in range(3000)]
    strings += [b"", b"\xff", b"\xff\xff\xff", b"\x00\xff\xff\x01", b"\xfe\xff"]
    # bytes not covered by any symbol, so runs of escapes/literal 0xFF appear in the codes
    strings += [b"\xff\xff\x00\xff" * 3, b"\x00" * 5]
    compressed = [ref_fsst_encode(s, symbols) for s in strings]
    assert any(b"\xff\xff\xff" in c for c in compressed)
    lengths = np.array([len(c) for c in compressed])
    block = variable.from_lengths(lengths, np.frombuffer(b"".join(compressed), np.uint8))
    table = make_symbol_table(symbols)
    out = fsst.decompress(block, table)
    got = [out.data[a:b].tobytes() for a, b in zip(out.offsets[:-1], out.offsets[1:], strict=True)]
    assert got == strings
    # raw mode: encoder_switch = 0 leaves the bytes alone
    raw = fsst.decompress(block, make_symbol_table(symbols, enabled=False))
    assert raw.data.tobytes() == b"".join(compressed)
    assert fsst.parse_symbol_table(fsst.raw_symbol_table()).enabled is False


def test_fsst_code_beyond_table_is_corrupt():
    table = make_symbol_table([b"a", b"b"])
    with pytest.raises(CorruptFileError):
        fsst.decompress(VariableWidthBlock(np.array([0, 2]), h("0005")), table)


def test_fsst_decreasing_offsets_are_corrupt():
    table = make_symbol_table([b"a", b"b"])
    block = VariableWidthBlock(np.array([0, 3, 1, 4]), h("00010001"))
    with pytest.raises(CorruptFileError, match="decrease"):
        fsst.decompress(block, table)


def test_fsst_over_variable_chunks_decodes_from_the_chunks():
    """A page read decodes FSST strings straight from the Variable chunks: the same
    strings as decoding the chunks and then the strings, corrupt input rejected alike."""
    symbols = [b"ab", b"cdefghij", b"k", b"\xff"]
    strings = [b"", b"ab", b"cdefghijk", b"zz", b"abab\xff", b"k" * 40, b"\x00"] * 300
    compressed = [ref_fsst_encode(s, symbols) for s in strings]
    lengths = np.array([len(c) for c in compressed])
    src = variable.from_lengths(lengths, np.frombuffer(b"".join(compressed), np.uint8))
    table = make_symbol_table(symbols)
    for bits in (32, 64):
        src.bits_per_offset = bits
        counts = variable.plan_chunks(src.offsets, bits, aim=256)
        assert len(counts) > 4
        buf, sizes = variable.encode_chunks(src, counts)
        chunks = ChunkRanges(buf, np.cumsum(sizes) - sizes, sizes)
        enc = pb.CompressiveEncoding(fsst=pb.Fsst(symbol_table=table, values=e_var(bits)))
        out = decompress_miniblock(enc, [chunks], counts)
        got = [
            out.data[a:b].tobytes() for a, b in zip(out.offsets[:-1], out.offsets[1:], strict=True)
        ]
        assert got == strings
        two_step = fsst.decompress(variable.decode_chunks(chunks, counts, bits), table)
        assert out.offsets.tolist() == two_step.offsets.tolist()
    one = [ref_fsst_encode(s, symbols) for s in (b"ab", b"k", b"ab")]
    width = 4
    header = np.array([4 * width, 4 * width + 1, 4 * width + 2, 4 * width + 3], "<u4")
    good = header.tobytes() + b"".join(one)
    enc = pb.CompressiveEncoding(fsst=pb.Fsst(symbol_table=table, values=e_var(32)))
    assert decompress_miniblock(enc, [ranges([good])], np.array([3])).data.tobytes() == b"abkab"
    backwards = header.copy()
    backwards[2] = backwards[1] - 1
    with pytest.raises(CorruptFileError):
        decompress_miniblock(enc, [ranges([backwards.tobytes() + b"".join(one)])], np.array([3]))
    bad_code = header.tobytes() + bytes([0, 9, 0])  # code 9: no such symbol
    with pytest.raises(CorruptFileError, match="beyond"):
        decompress_miniblock(enc, [ranges([bad_code])], np.array([3]))
    # an escape that ends its string emits nothing, and the next string's first byte is
    # a code again (not the escaped literal it would be if the chunk were one string)
    lone = header.tobytes() + bytes([255, 0, 2, 255])
    out = decompress_miniblock(enc, [ranges([lone])], np.array([3]))
    got = [out.data[a:b].tobytes() for a, b in zip(out.offsets[:-1], out.offsets[1:], strict=True)]
    assert got == [b"", b"ab", b"k"]
    two_step = fsst.decompress(variable.decode_chunks(ranges([lone]), np.array([3]), 32), table)
    assert two_step.offsets.tolist() == out.offsets.tolist()


def test_fsst_chunks_eight_codes_at_a_time_meet_escapes_and_bad_codes():
    """The chunk decoder takes eight codes at once between escapes: escapes and their
    literals (0xFF among them) at every position of an eight-byte window decode as string by
    string, and a code without a symbol anywhere in a window is refused."""
    rng = np.random.default_rng(RNG_SEED)
    symbols = [b"ab", b"cdefghij", b"k", b"lmn"]
    table = make_symbol_table(symbols)
    pieces = [b"ab", b"cdefghij", b"k", b"lmn", b"\xff", b"\x00", b"z"]
    odds = [0.25, 0.2, 0.25, 0.2, 0.04, 0.03, 0.03]  # escapes now and then
    strings = [b"".join(rng.choice(pieces, rng.integers(0, 30), p=odds)) for _ in range(2000)]
    strings += [b"k" * 64, b"\xff" * 17, b"ab" * 9 + b"\xff", b""]
    compressed = [ref_fsst_encode(s, symbols) for s in strings]
    assert sum(len(c) >= 8 and 255 not in c for c in compressed) > 100  # whole windows
    assert sum(255 in c for c in compressed) > 100
    lengths = np.array([len(c) for c in compressed])
    src = variable.from_lengths(lengths, np.frombuffer(b"".join(compressed), np.uint8))
    counts = variable.plan_chunks(src.offsets, 32, aim=512)
    buf, sizes = variable.encode_chunks(src, counts)
    chunks = ChunkRanges(buf, np.cumsum(sizes) - sizes, sizes)
    out = fsst.decompress_chunks(chunks, counts, 32, fsst.parse_symbol_table(table))
    got = [out.data[a:b].tobytes() for a, b in zip(out.offsets[:-1], out.offsets[1:], strict=True)]
    assert got == strings
    width = 4
    for at in range(12):  # the bad code at each place of the first windows of one string
        codes = bytearray([2] * 12)
        codes[at] = 9  # no symbol 9
        header = np.array([2 * width, 2 * width + len(codes)], "<u4")
        bad = ranges([header.tobytes() + bytes(codes)])
        with pytest.raises(CorruptFileError, match="beyond"):
            fsst.decompress_chunks(bad, np.array([1]), 32, fsst.parse_symbol_table(table))


# ---- RLE -----------------------------------------------------------------------------------


def e_rle(bits: int) -> pb.CompressiveEncoding:
    return pb.CompressiveEncoding(rle=pb.Rle(values=e_flat(bits), run_lengths=e_flat(8)))


@pytest.mark.parametrize("width", [1, 2, 3, 4, 8])
def test_block_rle_of_many_chunks_is_each_chunks_block(width):
    """The one-pass encode of a page's chunks equals each chunk's own block form, for runs
    shorter and longer than 255 values, runs cut by chunk ends and empty chunks."""
    rng = np.random.default_rng(width)
    values = np.repeat(rng.integers(0, 3, 200), rng.integers(1, 700, 200))[:20_000]
    rows = np.zeros((len(values), width), np.uint8)
    rows[:, -1] = values
    counts = np.array([4096, 0, 1, 5000, 255, 256, len(values) - 9608])
    got, sizes = rle.encode_blocks(FixedWidthBlock(rows.reshape(-1), width * 8, len(rows)), counts)
    starts = np.cumsum(counts) - counts
    blocks = [
        rle.encode_block(FixedWidthBlock(rows[s : s + c].reshape(-1), width * 8, int(c))).tobytes()
        for s, c in zip(starts, counts, strict=True)
    ]
    assert sizes.tolist() == [len(b) for b in blocks]
    assert got.tobytes() == b"".join(blocks)


def test_block_rle_digest_example():
    data = h("0a000000 00000000 | 0100 0100 0100 0100 0100 | ff ff ff ff 04")
    levels = decompress_levels(e_rle(16), data, 1024)
    assert levels.dtype == np.uint16 and (levels == 1).all() and len(levels) == 1024
    enc = rle.encode_block(FixedWidthBlock(np.ones(1024, "<u2").view(np.uint8), 16, 1024))
    assert enc.tobytes() == data.tobytes()
    # many chunks' def buffers at once (2.2 mini-block def levels use this form)
    other = rle.encode_block(FixedWidthBlock(np.array([0, 0, 2, 1], "<u2").view(np.uint8), 16, 4))
    empty = rle.encode_block(FixedWidthBlock(np.zeros(0, np.uint8), 16, 0))
    got = decompress_levels_chunks(
        e_rle(16),
        ranges([data.tobytes(), other.tobytes(), empty.tobytes()]),
        np.array([1024, 4, 0]),
    )
    assert got.tolist() == [1] * 1024 + [0, 0, 2, 1]
    with pytest.raises(CorruptFileError):
        decompress_levels_chunks(e_rle(16), ranges([data[:-1].tobytes()]), np.array([1024]))
    with pytest.raises(CorruptFileError):
        decompress_levels(e_rle(16), data[:-1], 1024)
    with pytest.raises(CorruptFileError):
        decompress_levels(e_rle(16), data, 1025)


def test_block_rle_of_many_chunks_decodes_per_chunk():
    """A page's level blocks encoded in one pass: each block decodes to its own levels,
    and is the same bytes as encoding that chunk alone (runs never cross a chunk)."""
    rng = np.random.default_rng(RNG_SEED)
    levels = np.repeat(rng.integers(0, 3, 400), rng.integers(1, 600, 400)).astype("<u2")
    counts = np.array([0, 1, 700, 4096, 3, 0, len(levels) - 4800], dtype=np.int64)
    data, sizes = rle.encode_blocks(FixedWidthBlock(levels.view(np.uint8), 16, len(levels)), counts)
    assert sizes.sum() == len(data)
    got = decompress_levels_chunks(
        e_rle(16), ChunkRanges(data, np.cumsum(sizes) - sizes, sizes), counts
    )
    assert got.tolist() == levels.tolist()
    starts = np.cumsum(counts) - counts
    for s, c, at, n in zip(starts, counts, np.cumsum(sizes) - sizes, sizes, strict=True):
        alone = rle.encode_block(FixedWidthBlock(levels[s : s + c].view(np.uint8), 16, int(c)))
        assert data[at : at + n].tobytes() == alone.tobytes()


def test_rle_miniblock_roundtrip_and_truncation():
    rng = np.random.default_rng(RNG_SEED)
    vals = np.repeat(rng.integers(-5, 5, 60), rng.integers(1, 700, 60)).astype("<i4")
    block = FixedWidthBlock(vals.view(np.uint8), 32, len(vals))
    counts = rle.plan_chunks(block)
    assert counts.sum() == len(vals) and (counts <= 4096).all()
    v, r, vs, rs = rle.encode_chunks(block, counts)
    assert (r.astype(int) <= 255).all()
    out = decompress_miniblock(
        e_rle(32),
        [
            ChunkRanges(v, np.cumsum(vs) - vs, vs),
            ChunkRanges(r, np.cumsum(rs) - rs, rs),
        ],
        counts,
    )
    assert (out.data.view("<i4") == vals).all()
    # runs covering more than the chunk's count are cut (as the reference reader does)
    two = [ranges([np.array([7, 9], "<u2").tobytes()]), ranges([bytes([3, 4])])]
    out = decompress_miniblock(e_rle(16), two, np.array([5]))
    assert out.data.view("<u2").tolist() == [7, 7, 7, 9, 9]
    with pytest.raises(CorruptFileError):
        decompress_miniblock(e_rle(16), two, np.array([8]))


# ---- BSS, General --------------------------------------------------------------------------


def test_bss_chunks():
    chunk = h("01 05 | 02 06 | 03 07 | 04 08")
    enc = pb.CompressiveEncoding(byte_stream_split=pb.ByteStreamSplit(values=e_flat(32)))
    out = decompress_miniblock(
        enc, [ranges([chunk.tobytes(), chunk[::2].tobytes()])], np.array([2, 1])
    )
    assert out.data.view("<u4").tolist() == [0x04030201, 0x08070605, 0x04030201]
    rng = np.random.default_rng(RNG_SEED)
    vals = rng.normal(size=1500)
    counts = np.array([512, 512, 476])
    buf, sizes = bss.encode_chunks(FixedWidthBlock(vals.view(np.uint8), 64, 1500), counts)
    back = bss.decode_chunks(ChunkRanges(buf, np.cumsum(sizes) - sizes, sizes), counts, 64)
    assert (back.data.view("<f8") == vals).all()


def test_general_framing_with_the_libraries():
    payload = np.arange(5000, dtype="<u4").view(np.uint8)
    raw = payload.tobytes()
    zstd_prefixed = len(raw).to_bytes(8, "little") + zstandard.ZstdCompressor().compress(raw)
    cobj = zstandard.ZstdCompressor().compressobj()  # a frame without the content size
    zstd_stream = len(raw).to_bytes(8, "little") + cobj.compress(raw) + cobj.flush()
    bare = zstandard.ZstdCompressor().compress(raw)
    lz4_framed = lz4.block.compress(raw, store_size=True)
    for buf, scheme in [
        (zstd_prefixed, "zstd"),
        (zstd_stream, "zstd"),
        (bare, "zstd"),
        (lz4_framed, "lz4"),
        (general.compress_buffer(raw, "zstd"), "zstd"),
        (general.compress_buffer(raw, "lz4"), "lz4"),
    ]:
        assert general.decompress_buffer(buf, scheme).tobytes() == raw
    # ours is readable by the libraries
    ours = general.compress_buffer(raw, "zstd")
    assert zstandard.ZstdDecompressor().decompress(ours[8:], max_output_size=len(raw)) == raw
    assert lz4.block.decompress(general.compress_buffer(raw, "lz4")) == raw
    with pytest.raises(CorruptFileError):
        general.decompress_buffer(zstd_prefixed[:-3], "zstd")
    with pytest.raises(CorruptFileError):
        general.decompress_buffer(b"\xff\xff\xff\x7f" + lz4_framed[4:], "lz4")
    with pytest.raises(CorruptFileError):
        general.decompress_buffer(lz4_framed[:10], "lz4")


def test_general_miniblock_only_buffer0_is_compressed():
    # Rle chunks where only the values buffer is zstd-compressed
    values = [np.array([1, 2], "<u4").tobytes(), np.array([3], "<u4").tobytes()]
    runs = [bytes([2, 1]), bytes([4])]
    comp = [general.compress_buffer(v, "zstd") for v in values]
    out = decompress_miniblock(
        e_general(ZSTD, e_rle(32)), [ranges(comp), ranges(runs)], np.array([3, 4])
    )
    assert out.data.view("<u4").tolist() == [1, 1, 2, 3, 3, 3, 3]


def test_general_per_value():
    strings = [b"x" * 300, b"", b"hello world" * 40]
    for scheme, code in (("zstd", ZSTD), ("lz4", LZ4)):
        parts = [general.compress_buffer(s, scheme) if s else b"" for s in strings]
        block = variable.from_lengths(
            np.array([len(p) for p in parts]), np.frombuffer(b"".join(parts), np.uint8)
        )
        out = decompress_per_value(e_general(code, e_var(32)), block)
        assert out.data.tobytes() == b"".join(strings)
        assert np.diff(out.offsets).tolist() == [len(s) for s in strings]


# ---- packed structs, FSL -------------------------------------------------------------------


def test_packed_struct_fixed():
    n = 300
    a = np.arange(n, dtype="<i4")
    b = np.arange(n, dtype="<f4") / 3
    c = np.arange(n, dtype="<i8") * -7
    rows = np.zeros(n, dtype=[("a", "<i4"), ("b", "<f4"), ("c", "<i8")])
    rows["a"], rows["b"], rows["c"] = a, b, c
    raw = rows.tobytes()
    enc = pb.CompressiveEncoding(
        packed_struct=pb.PackedStruct(bits_per_value=[32, 32, 64], values=e_flat(128))
    )
    out = decompress_miniblock(
        enc, [ranges([raw[: 256 * 16], raw[256 * 16 :]])], np.array([256, 44])
    )
    assert isinstance(out, StructBlock) and out.num_values == n
    assert (out.children[0].data.view("<i4") == a).all()
    assert (out.children[1].data.view("<f4") == b).all()
    assert (out.children[2].data.view("<i8") == c).all()
    assert packed.pack_fixed(out.children).data.tobytes() == raw


def test_variable_packed_struct_digest_row():
    # docs/format/compression.md: a=0, s="n0" is `0a000000 | 00000000 | 02000000 6e30`; the
    # row length prefix belongs to full-zip, so the row handed over is the rest.  Row 2 is null
    # (empty).
    rows_bytes = [
        h("00000000 02000000 6e30"),
        h("05000000 00000000"),
        h(""),
        h("07000000 0100000078"),
    ]
    rows = variable.from_lengths(np.array([len(r) for r in rows_bytes]), np.concatenate(rows_bytes))
    field = pb.VariablePackedStruct.FieldEncoding
    enc = pb.CompressiveEncoding(
        variable_packed_struct=pb.VariablePackedStruct(
            fields=[
                field(value=e_flat(32), bits_per_value=32),
                field(value=e_var(32), bits_per_length=32),
            ]
        )
    )
    out = decompress_per_value(enc, rows)
    assert out.children[0].data.view("<i4").tolist() == [0, 5, 0, 7]
    assert out.children[1].offsets.tolist() == [0, 2, 2, 2, 3]
    assert out.children[1].data.tobytes() == b"n0x"
    again, fields = packed.pack_variable(out.children)
    assert [f.variable for f in fields] == [False, True]
    # the null row comes back as a full row of zeros/empties, the others byte for byte
    assert again.data.tobytes() == b"".join(
        r.tobytes() for r in rows_bytes[:2] + [h("00000000 00000000")] + rows_bytes[3:]
    )
    bad = variable.from_lengths(np.array([9]), h("00000000 05000000 6e"))
    with pytest.raises(CorruptFileError):
        decompress_per_value(enc, bad)


def e_fsl(dim: int, validity: bool, inner) -> pb.CompressiveEncoding:
    return pb.CompressiveEncoding(
        fixed_size_list=pb.FixedSizeList(items_per_value=dim, has_validity=validity, values=inner)
    )


def test_fsl_miniblock_validity_and_per_value_rows():
    rng = np.random.default_rng(RNG_SEED)
    dim, counts = 3, np.array([4, 2])  # 12 and 6 items: bitmaps of 2 and 1 bytes
    items = rng.random(18).astype("<f4")
    valid = rng.random(18) < 0.7
    bitmaps, bsizes = fsl.encode_validity_chunks(valid, counts * dim)
    assert bsizes.tolist() == [2, 1]
    vals = [items[:12].tobytes(), items[12:].tobytes()]
    enc = e_fsl(dim, True, e_flat(32))
    out = decompress_miniblock(
        enc,
        [ChunkRanges(bitmaps, np.array([0, 2]), bsizes), ranges(vals)],
        counts,
    )
    assert isinstance(out, FixedSizeListBlock) and out.num_values == 6
    assert (out.validity == valid).all() and (out.child.data.view("<f4") == items).all()
    # per value: each row is [1-byte bitmap of 3 items][12 value bytes]
    rows = fsl.zip_rows(out)
    assert rows.bits_per_value == 8 * 13
    first = np.frombuffer(rows.data[:13].tobytes(), np.uint8)
    assert first[0] == sum(int(v) << i for i, v in enumerate(valid[:3]))
    back = decompress_per_value(enc, rows)
    assert (back.validity == valid).all() and (back.child.data.view("<f4") == items).all()
    # nested FSL without validity, per value
    nested = e_fsl(2, False, e_fsl(3, False, e_flat(32)))
    back = decompress_per_value(nested, FixedWidthBlock(items.view(np.uint8)[:72], 192, 3))
    assert back.dimension == 2 and back.child.dimension == 3 and back.child.child.num_values == 18


# ---- dispatcher edges ----------------------------------------------------------------------


def test_unsupported_and_missing_encodings():
    dict_enc = pb.CompressiveEncoding(dictionary=pb.Dictionary())
    with pytest.raises(UnsupportedError, match="dictionary"):
        decompress_block(dict_enc, h("00"), 1)
    with pytest.raises(UnsupportedError):
        decompress_miniblock(dict_enc, [ranges([b"\x00"])], np.array([1]))
    with pytest.raises(CorruptFileError):
        decompress_block(pb.CompressiveEncoding(), h("00"), 1)
    with pytest.raises(UnsupportedError):
        decompress_block(e_flat(12), h("0000"), 1)
    assert (
        describe(
            e_general(
                ZSTD,
                pb.CompressiveEncoding(byte_stream_split=pb.ByteStreamSplit(values=e_flat(64))),
            )
        )
        == "General[zstd](BSS(Flat64))"
    )


def _mutations(rng, data: np.ndarray, n: int, rounds: int = 150):
    """Corrupted variants of a valid buffer: flipped bytes, truncation, a wrong count."""
    for _ in range(rounds):
        d, k = data.copy(), n
        m = rng.integers(0, 3)
        if m == 0:
            d[rng.integers(0, len(d), size=rng.integers(1, 4))] = rng.integers(
                0, 256, dtype=np.uint8
            )
        elif m == 1:
            d = d[: rng.integers(0, len(d))]
        else:
            k = max(0, n + int(rng.integers(-9, 9)))
        yield d, k


def test_corrupt_bytes_raise_lance_errors_only():
    """Whatever the damage, decoding either succeeds or raises a LanceError (never an
    IndexError/ValueError from numpy)."""
    from lance_format.errors import LanceError

    rng = np.random.default_rng(RNG_SEED)
    v = rng.integers(0, 1000, 2500).astype("<u8")
    lv = rng.integers(0, 4, 3000).astype("<u2")
    block_cases = [
        (e_var(32), h(DICT_EXAMPLE), 4),
        (
            e_general(LZ4, e_var(32)),
            np.frombuffer(lz4.block.compress(h(DICT_EXAMPLE).tobytes()), np.uint8),
            4,
        ),
        (
            pb.CompressiveEncoding(
                inline_bitpacking=pb.InlineBitpacking(uncompressed_bits_per_value=64)
            ),
            bitpacking.encode_inline_block(v, 64),
            2500,
        ),
        (
            pb.CompressiveEncoding(
                out_of_line_bitpacking=pb.OutOfLineBitpacking(
                    uncompressed_bits_per_value=16, values=e_flat(2)
                )
            ),
            bitpacking.encode_out_of_line(lv, 2, 16),
            3000,
        ),
        (
            e_rle(16),
            rle.encode_block(FixedWidthBlock(np.repeat(lv[:30], 40).view(np.uint8), 16, 1200)),
            1200,
        ),
    ]
    for enc, data, n in block_cases:
        decompress_block(enc, data, n)
        for d, k in _mutations(rng, data, n):
            try:
                decompress_block(enc, d, k)
            except LanceError:
                pass
    # mini-block: one-chunk buffers of several encodings
    vals = [bytes(rng.integers(0, 256, rng.integers(0, 30))) for _ in range(300)]
    src = variable.from_lengths(
        np.array([len(x) for x in vals]), np.frombuffer(b"".join(vals), np.uint8)
    )
    var_buf, _ = variable.encode_chunks(src, np.array([300]))
    ibp_buf, _ = bitpacking.encode_inline_chunks(v[:1000].astype("<u4"), 32)
    mb_cases = [
        (e_var(32), var_buf, 300),
        (
            pb.CompressiveEncoding(
                inline_bitpacking=pb.InlineBitpacking(uncompressed_bits_per_value=32)
            ),
            ibp_buf,
            1000,
        ),
        (
            e_general(ZSTD, e_flat(64)),
            np.frombuffer(general.compress_buffer(v.tobytes(), "zstd"), np.uint8),
            2500,
        ),
    ]
    for enc, data, n in mb_cases:
        for d, k in _mutations(rng, data, n):
            try:
                decompress_miniblock(enc, [ranges([d.tobytes()])], np.array([k]))
            except LanceError:
                pass


def test_levels_raw_and_flat16():
    data = h("00000100 0000")
    assert decompress_levels(None, data, 3).tolist() == [0, 1, 0]
    assert decompress_levels(e_flat(16), data, 3).tolist() == [0, 1, 0]
    with pytest.raises(CorruptFileError):
        decompress_levels(None, data, 4)


def test_digest_list_chunk_example():
    # docs/format/structural.md: list<int16> [[1,2], [], null]:
    # rep [1,0,1,1], def [0,0,2,1], values [1,2]
    rep = h("01000000 01000100")
    defs = h("00000000 02000100")
    assert decompress_levels(e_flat(16), rep, 4).tolist() == [1, 0, 1, 1]
    assert decompress_levels_chunks(
        e_flat(16), ranges([defs.tobytes()]), np.array([4])
    ).tolist() == [0, 0, 2, 1]
    vals = decompress_miniblock(e_flat(16), [ranges([h("01000200").tobytes()])], np.array([2]))
    assert vals.data.view("<i2").tolist() == [1, 2]


# ---- real pylance files --------------------------------------------------------------------


def _u(buf: np.ndarray, pos: int, nbytes: int) -> int:
    return int.from_bytes(buf[pos : pos + nbytes].tobytes(), "little")


def read_pages(path: str):
    """Footer -> column 0's ColumnMetadata -> (PageLayout, page buffers, rows) per page."""
    raw = open(path, "rb").read()
    assert raw[-4:] == b"LANC"
    _cm, cmo, _gbo, _ngb, _ncol, major, minor = struct.unpack("<QQQIIHH", raw[-40:-4])
    pos, size = struct.unpack_from("<QQ", raw, cmo)
    cm = file2_pb2.ColumnMetadata.FromString(raw[pos : pos + size])
    pages = []
    for p in cm.pages:
        layout = pb.PageLayout.FromString(any_pb2.Any.FromString(p.encoding.direct.encoding).value)
        bufs = [
            np.frombuffer(raw[o : o + s], np.uint8)
            for o, s in zip(p.buffer_offsets, p.buffer_sizes, strict=True)
        ]
        pages.append((layout, bufs, p.length))
    return (major, minor), pages


def miniblock_chunks(mb, bufs, large: bool):
    """Locate every chunk's rep/def/value buffers (a plain loop: this is the test's parser)."""
    words = np.frombuffer(bufs[0].tobytes(), "<u4" if large else "<u2").astype(int)
    data = bufs[1]
    has_rep, has_def = mb.HasField("rep_compression"), mb.HasField("def_compression")
    pos, counts, nlevels = 0, [], []
    rep, dfn = ([], []), ([], [])
    vals = [([], []) for _ in range(mb.num_buffers)]
    for i, w in enumerate(words):
        size = ((w >> 4) + 1) * 8
        counts.append(1 << (w & 0xF) if i < len(words) - 1 else mb.num_items - sum(counts))
        nlevels.append(_u(data, pos, 2))
        off = 2
        rsize = dsize = None
        if has_rep:
            rsize, off = _u(data, pos + off, 2), off + 2
        if has_def:
            dsize, off = _u(data, pos + off, 2), off + 2
        wsz = 4 if large else 2
        sizes = [_u(data, pos + off + j * wsz, wsz) for j in range(mb.num_buffers)]
        p = pos + (off + wsz * mb.num_buffers + 7) // 8 * 8
        for target, s in ((rep, rsize), (dfn, dsize)):
            if s is not None:
                target[0].append(p)
                target[1].append(s)
                p += (s + 7) // 8 * 8
        for j, s in enumerate(sizes):
            vals[j][0].append(p)
            vals[j][1].append(s)
            p += (s + 7) // 8 * 8
        assert p <= pos + size
        pos += size
    mk = lambda sl: ChunkRanges(data, np.array(sl[0], np.int64), np.array(sl[1], np.int64))  # noqa: E731
    return (
        np.array(counts),
        np.array(nlevels),
        mk(rep) if has_rep else None,
        mk(dfn) if has_def else None,
        [mk(v) for v in vals],
    )


def fullzip_values(fz, bufs) -> VariableWidthBlock | FixedWidthBlock:
    """Values of a full-zip page without rep/def (no control words)."""
    assert fz.bits_rep == 0 and fz.bits_def == 0
    data = bufs[0]
    n = fz.num_items
    if fz.WhichOneof("details") == "bits_per_value":
        return FixedWidthBlock(data, fz.bits_per_value, n)
    width = fz.bits_per_offset // 8
    lengths, starts, pos = [], [], 0
    for _ in range(n):
        ln = _u(data, pos, width)
        starts.append(pos + width)
        lengths.append(ln)
        pos += width + ln
    assert pos == len(data)
    parts = [data[s : s + ln] for s, ln in zip(starts, lengths, strict=True)]
    return variable.from_lengths(np.array(lengths), np.concatenate(parts))


def to_arrow(block, typ: pa.DataType) -> pa.Array:
    if isinstance(block, VariableWidthBlock):
        off = np.asarray(block.offsets, np.int64)
        return pa.Array.from_buffers(
            pa.large_binary(), len(off) - 1, [None, pa.py_buffer(off), pa.py_buffer(block.data)]
        ).cast(typ)
    return pa.Array.from_buffers(typ, block.num_values, [None, pa.py_buffer(block.data)])


N = 5000


def _columns():
    rng = np.random.default_rng(RNG_SEED)
    words = np.array(["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"])
    text = [" ".join(rng.choice(words, 2)) + str(i) for i in range(N)]
    longs = ["x" * 300 + " ".join(rng.choice(words, 5)) for _ in range(N)]

    def fsl_arr(dim, null_frac):
        v = rng.random(dim * N).astype(np.float32)
        mask = rng.random(dim * N) < null_frac
        return pa.FixedSizeListArray.from_arrays(pa.array(v, mask=mask), dim)

    md = lambda **kw: {f"lance-encoding:{k.replace('_', '-')}": v for k, v in kw.items()}  # noqa: E731
    return {
        "ibp32": (pa.int32(), None, pa.array(rng.integers(0, 16, N).astype(np.int32))),
        "ibp8": (pa.uint8(), None, pa.array(rng.integers(0, 8, N).astype(np.uint8))),
        "ibp16": (pa.int16(), None, pa.array(rng.integers(0, 100, N).astype(np.int16))),
        "ibp64": (pa.int64(), None, pa.array(np.arange(N) * 3)),
        "fsst": (pa.string(), None, pa.array(text)),
        "fsst64": (pa.large_string(), None, pa.array(text, pa.large_string())),
        "rle": (
            pa.int32(),
            md(rle_threshold="0.9"),
            pa.array(np.repeat(np.arange(N // 500, dtype=np.int32), 500)),
        ),
        "zstd_bss": (
            pa.float64(),
            md(compression="zstd", bss="on"),
            pa.array(rng.normal(size=N).round(2)),
        ),
        "zstd_i64": (pa.int64(), md(compression="zstd"), pa.array(rng.integers(0, 1000, N))),
        "lz4_bss": (
            pa.int32(),
            md(compression="lz4"),
            pa.array(rng.integers(0, 1000, N).astype(np.int32)),
        ),
        "lz4_var": (
            pa.string(),
            md(compression="lz4"),
            pa.array([f"s{i}" for i in rng.integers(0, 10**5, N)]),
        ),
        "dict_str": (
            pa.string(),
            None,
            pa.array(rng.choice(["red", "green", "blue", "yellow"], N)),
        ),
        "sorted_runs": (pa.int64(), None, pa.array(np.repeat(np.arange(N // 100) * 1000003, 100))),
        "bools": (pa.bool_(), None, pa.array(rng.random(N) < 0.5)),
        "fsl_valid": (pa.list_(pa.float32(), 8), None, fsl_arr(8, 0.1)),
        "packed": (
            pa.struct([("a", pa.int32()), ("b", pa.float32()), ("c", pa.int64())]),
            md(packed="true"),
            pa.StructArray.from_arrays(
                [
                    pa.array(np.arange(N, dtype=np.int32)),
                    pa.array(rng.random(N).astype(np.float32)),
                    pa.array(np.arange(N) * 7),
                ],
                ["a", "b", "c"],
            ),
        ),
        "lists": (
            pa.list_(pa.int32()),
            None,
            pa.array([list(range(i % 5)) for i in range(N)], pa.list_(pa.int32())),
        ),
        "nullable": (
            pa.int32(),
            None,
            pa.array(np.arange(N, dtype=np.int32), mask=np.arange(N) % 1000 < 600),
        ),
        "fz_fsst": (pa.string(), None, pa.array(longs)),
        "fz_zstd": (pa.string(), md(compression="zstd"), pa.array(longs)),
        "fz_vec": (pa.list_(pa.float32(), 128), None, fsl_arr(128, 0.0)),
        "fz_vec_valid": (pa.list_(pa.float32(), 128), None, fsl_arr(128, 0.1)),
        "fz_packed_var": (
            pa.struct([("a", pa.int32()), ("s", pa.string())]),
            md(packed="true"),
            pa.StructArray.from_arrays(
                [pa.array(np.arange(N, dtype=np.int32)), pa.array([f"n{i}" for i in range(N)])],
                ["a", "s"],
            ),
        ),
        "const_null_list": (pa.list_(pa.int32()), None, pa.nulls(N, pa.list_(pa.int32()))),
    }


COLUMNS = _columns()
CASES = [
    (name, ver)
    for name in COLUMNS
    for ver in ("2.1", "2.2")
    if not (name == "fz_packed_var" and ver == "2.1")  # 2.1 refuses it (checked below)
]


@pytest.fixture(scope="module")
def lance_files(tmp_path_factory):
    root = tmp_path_factory.mktemp("compression")
    cache: dict = {}

    def get(name: str, ver: str):
        if (name, ver) not in cache:
            typ, meta, arr = COLUMNS[name]
            schema = pa.schema([pa.field(name, typ, metadata=meta)])
            path = str(root / f"{name}-{ver}.lance")
            with lance.file.LanceFileWriter(path, schema, version=ver) as w:
                w.write_batch(pa.table({name: arr}, schema=schema))
            truth = (
                lance.file.LanceFileReader(path).read_all().to_table().column(0).combine_chunks()
            )
            cache[(name, ver)] = (path, truth)
        return cache[(name, ver)]

    return get


def test_pylance_refuses_variable_packed_struct_in_21(lance_files):
    with pytest.raises(Exception, match="[Vv]ariable packed struct"):
        lance_files("fz_packed_var", "2.1")


# encodings we expect pylance to pick: if these drift, the test still decodes whatever it
# finds, but says so, because it is then no longer covering what it claims to
EXPECTED = {
    "ibp32": "InlineBitpacking32",
    "ibp8": "InlineBitpacking8",
    "ibp16": "InlineBitpacking16",
    "ibp64": "InlineBitpacking64",
    "fsst": "Fsst(Variable(Flat32))",
    "fsst64": "Fsst(Variable(Flat64))",
    "rle": "Rle(Flat32, Flat8)",
    "lz4_var": "General[lz4](Variable(Flat32))",
    "bools": "Flat1",
    "fsl_valid": "FixedSizeList8+validity(Flat32)",
    "packed": "PackedStruct[32, 32, 64](Flat128)",
    "fz_fsst": "Fsst(Variable(Flat32))",
    "fz_zstd": "General[zstd](Variable(Flat32))",
    "fz_vec": "FixedSizeList128(Flat32)",
    "fz_vec_valid": "FixedSizeList128+validity(Flat32)",
    "fz_packed_var": "VariablePackedStruct[Flat32, Fsst(Variable(Flat32))]",
}


def _check_against(block, truth: pa.Array):
    typ = truth.type
    if pa.types.is_struct(typ):
        assert isinstance(block, StructBlock)
        for i, child in enumerate(block.children):
            _check_against(child, truth.field(i))
    elif pa.types.is_fixed_size_list(typ):
        assert isinstance(block, FixedSizeListBlock) and block.dimension == typ.list_size
        values = truth.flatten() if truth.null_count == 0 else truth.values
        valid = np.asarray(values.is_valid())
        if block.validity is None:
            assert values.null_count == 0
        else:
            assert (block.validity == valid).all()
        got = np.frombuffer(block.child.data.tobytes(), np.float32)
        assert (got[valid] == values.to_numpy(zero_copy_only=False)[valid]).all()
    elif pa.types.is_boolean(typ):
        got = flat.unpack_bools(block.data, block.num_values)
        assert (got == truth.to_numpy(zero_copy_only=False)).all()
    else:
        assert to_arrow(block, typ).equals(truth)


@pytest.mark.parametrize(("name", "ver"), CASES, ids=[f"{n}-{v}" for n, v in CASES])
def test_pylance_pages_decode(lance_files, name, ver):
    path, truth = lance_files(name, ver)
    (major, minor), pages = read_pages(path)
    assert (major, minor) == (2, int(ver[-1]))
    assert len(pages) == 1
    layout, bufs, rows = pages[0]
    kind = layout.WhichOneof("layout")
    lay = getattr(layout, kind)
    if name in EXPECTED:
        assert describe(lay.value_compression) == EXPECTED[name]

    if kind == "constant_layout":
        # all-null list<int32>: every row is one null-list level (rep 1, def 1)
        rep_enc = lay.rep_compression if lay.HasField("rep_compression") else None
        def_enc = lay.def_compression if lay.HasField("def_compression") else None
        if ver == "2.2":
            assert describe(def_enc) == "Rle(Flat16, Flat8)"
        rep = decompress_levels(rep_enc, bufs[0], lay.num_rep_values or rows)
        dfn = decompress_levels(def_enc, bufs[1], lay.num_def_values or rows)
        assert truth.null_count == rows == len(rep) == len(dfn)
        assert set(rep.tolist()) == {1} and set(dfn.tolist()) == {1}
        return

    if kind == "full_zip_layout":
        block = decompress_per_value(lay.value_compression, fullzip_values(lay, bufs))
        _check_against(block, truth)
        return

    assert kind == "mini_block_layout"
    counts, nlevels, rep_r, def_r, vals = miniblock_chunks(lay, bufs, ver == "2.2")
    block = decompress_miniblock(lay.value_compression, vals, counts)
    assert block.num_values == lay.num_items
    if lay.HasField("dictionary"):
        items = decompress_block(lay.dictionary, bufs[2], lay.num_dictionary_items)
        idx = np.frombuffer(block.data.tobytes(), f"<u{block.bits_per_value // 8}")
        values = to_arrow(items, truth.type).take(pa.array(idx.astype(np.int64)))
        assert values.equals(truth)
        return
    if name == "lists":
        rep = decompress_levels_chunks(lay.rep_compression, rep_r, nlevels)
        dfn = decompress_levels_chunks(lay.def_compression, def_r, nlevels)
        assert (rep == 1).sum() == rows  # every row starts with rep = max_rep = 1
        assert (dfn == 1).sum() == (np.asarray(truth.value_lengths()) == 0).sum()  # empties
        assert to_arrow(block, pa.int32()).equals(truth.flatten())
        return
    if name == "nullable":
        dfn = decompress_levels_chunks(lay.def_compression, def_r, nlevels)
        assert (dfn == np.asarray(truth.is_null())).all()
        got = np.frombuffer(block.data.tobytes(), "<i4")
        valid = np.asarray(truth.is_valid())
        assert (got[valid] == truth.to_numpy(zero_copy_only=False)[valid]).all()
        return
    _check_against(block, truth)


@pytest.mark.parametrize("width", [1, 2, 3, 15])
def test_out_of_line_many_buffers_at_once_match_one_at_a_time(width):
    """The vectorised per-chunk encoder equals the single-buffer encoder run per chunk, and
    the chunked decoder reads it back."""
    rng = np.random.default_rng(width)
    counts = rng.integers(0, 3000, 40)
    counts[:4] = [1024, 1, 2048, 0]
    values = rng.integers(0, 1 << width, int(counts.sum())).astype(np.uint16)
    data, sizes = bitpacking.encode_out_of_line_chunks(values, counts, width, 16)
    starts = np.cumsum(counts) - counts
    one_by_one = [
        bitpacking.encode_out_of_line(values[a : a + c], width, 16)
        for a, c in zip(starts, counts, strict=True)
    ]
    assert np.array_equal(data, np.concatenate(one_by_one))
    assert sizes.tolist() == [len(p) for p in one_by_one]
    ranges = ChunkRanges(data, np.cumsum(sizes) - sizes, sizes)
    decoded = bitpacking.decode_out_of_line_chunks(ranges, counts, width, 16)
    assert np.array_equal(decoded, values)


def test_bit_widths_of_one_block_are_the_bit_length_of_its_maximum():
    """A small page's single block takes a scalar path; both paths must give the bit
    length Python computes for the block's maximum (and 0 for an empty block)."""
    rng = np.random.default_rng(21)
    for t in (8, 16, 32, 64):
        dtype = bitpacking.word_dtype(t)
        for n in (0, 1, 5, 1024):
            for top in (0, 1, 2, 255, (1 << t) - 1):
                block = rng.integers(0, top + 1, n, dtype=np.uint64).astype(dtype)
                expected = int(block.max()).bit_length() if n else 0
                assert bitpacking.bit_widths(block.reshape(1, n), t).tolist() == [expected]
                two = np.stack([block, np.zeros(n, dtype)])  # the general path, two rows
                assert bitpacking.bit_widths(two, t).tolist() == [expected, 0]
        assert bitpacking.bit_widths(np.zeros((0, 1024), dtype), t).tolist() == []
