"""Dictionary encoding: cardinality estimate, exact encode, and the decision against pylance.

The decision tests write a one-column file with pylance and look for ``dictionary: Some`` in
the page encoding, so every case pins our rule to pylance's real choice, both sides of each
boundary included (item budget, size budget, sample gate, the 100-value floor, the
100 000-item cap, the metadata overrides).
"""

from __future__ import annotations

import decimal
import re

import numpy as np
import pyarrow as pa
import pytest
from lance import file as lance_file

from lance_format.compression import dictionary as D
from lance_format.compression.blocks import Block, FixedWidthBlock, VariableWidthBlock
from lance_format.errors import InvalidArgumentError

# -- helpers -----------------------------------------------------------------------------------


def to_block(arr: pa.Array) -> Block:
    """The values of a null-free array as a block (written here, independent of the writer)."""
    t = arr.type
    bufs = arr.buffers()
    n = len(arr)
    large = pa.types.is_large_string(t) or pa.types.is_large_binary(t)
    if large or pa.types.is_string(t) or pa.types.is_binary(t):
        off = np.frombuffer(bufs[1], dtype=np.int64 if large else np.int32)
        off = off[arr.offset : arr.offset + n + 1].astype(np.int64)
        data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(0)
        return VariableWidthBlock(off - off[0], data[off[0] : off[-1]], 64 if large else 32)
    width = t.byte_width
    data = np.frombuffer(bufs[1], dtype=np.uint8)[arr.offset * width : (arr.offset + n) * width]
    return FixedWidthBlock(data, width * 8, n)


def fixed(values: np.ndarray) -> FixedWidthBlock:
    values = np.ascontiguousarray(values)
    return FixedWidthBlock(
        values.view(np.uint8).reshape(-1), values.dtype.itemsize * 8, len(values)
    )


def strings(values: list[bytes], bits: int = 32) -> VariableWidthBlock:
    lengths = np.array([len(v) for v in values], dtype=np.int64)
    offsets = np.zeros(len(values) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return VariableWidthBlock(offsets, np.frombuffer(b"".join(values), dtype=np.uint8), bits)


def block_values(block: Block) -> list:
    if isinstance(block, VariableWidthBlock):
        data = block.data.tobytes()
        o = block.offsets.tolist()
        return [data[o[i] : o[i + 1]] for i in range(block.num_values)]
    w = block.bits_per_value // 8
    raw = block.data[: block.num_values * w].tobytes()
    return [raw[i * w : (i + 1) * w] for i in range(block.num_values)]


def pylance_page(arr: pa.Array, version: str, meta: dict | None, tmp_path) -> str:
    field = pa.field("x", arr.type, metadata=meta)
    schema = pa.schema([field])
    path = str(tmp_path / "f.lance")
    writer = lance_file.LanceFileWriter(path, schema, version=version)
    writer.write_batch(pa.table({"x": arr}, schema=schema))
    writer.close()
    pages = lance_file.LanceFileReader(path).metadata().columns[0].pages
    assert len(pages) == 1, "the cases are meant to fit one page"
    return pages[0].encoding


def with_cardinality(rng, card: int, n: int) -> np.ndarray:
    """Indices 0..card-1, each at least once, shuffled."""
    idx = np.concatenate([np.arange(card), rng.integers(0, card, n - card)])
    rng.shuffle(idx)
    return idx


def random_strings(rng, count: int, length: int) -> list[bytes]:
    return [bytes(rng.integers(97, 123, length, dtype=np.uint8)) for _ in range(count)]


# -- estimate_cardinality ----------------------------------------------------------------------


def _estimate_cases():
    rng = np.random.default_rng(5)
    n = 60_000
    zipf = rng.zipf(1.3, n)
    yield "uniform-10-int64", fixed(rng.integers(0, 10, n).astype(np.int64))
    yield "uniform-3000-int32", fixed(rng.integers(0, 3000, n).astype(np.int32))
    yield "all-distinct-int64", fixed(rng.permutation(n).astype(np.int64) * 977)
    yield "all-distinct-int16", fixed(np.arange(n % 65536, dtype=np.uint16))
    yield "skewed-zipf-int64", fixed(zipf.astype(np.int64))
    yield "uint8", fixed(rng.integers(0, 256, n).astype(np.uint8))
    wide = rng.integers(0, 2**62, (5000, 2)).astype(np.uint64)
    yield "128-bit-5000", fixed(wide[rng.integers(0, 5000, n)])
    yield "24-bit", FixedWidthBlock(rng.integers(0, 40, (n, 3), dtype=np.uint8).reshape(-1), 24, n)
    pool = random_strings(rng, 700, 12)
    yield "strings-700", strings([pool[i] for i in rng.integers(0, 700, n)])
    yield "strings-distinct", strings([b"value-%d" % i for i in range(n)])
    # values that differ only past the first 8 bytes, or only by trailing zero bytes
    yield "strings-long-tails", strings([b"prefix--" * 3 + b"%d" % (i % 5000) for i in range(n)])
    yield "strings-zero-bytes", strings([b"\x00" * (i % 40) for i in range(n)])
    yield "strings-skewed-with-empty", strings([b"" if z == 1 else b"s%d" % z for z in zipf], 64)


@pytest.mark.parametrize(
    "name,block", list(_estimate_cases()), ids=lambda v: v if isinstance(v, str) else None
)
def test_estimate_within_ten_percent(name: str, block: Block) -> None:
    exact = len(set(block_values(block)))
    est = D.estimate_cardinality(block)
    assert abs(est - exact) <= 0.10 * exact, (name, est, exact)


def test_estimate_edge_cases() -> None:
    assert D.estimate_cardinality(fixed(np.zeros(0, dtype=np.int32))) == 0
    assert D.estimate_cardinality(strings([])) == 0
    assert D.estimate_cardinality(strings([b""] * 50)) == 1
    bools = np.packbits(np.array([1, 0, 1, 1], dtype=np.uint8), bitorder="little")
    assert D.estimate_cardinality(FixedWidthBlock(bools, 1, 4)) == 2
    assert D.estimate_cardinality(FixedWidthBlock(np.full(1, 0xFF, np.uint8), 1, 8)) == 1


# -- encode ------------------------------------------------------------------------------------


def check_encoding(block: Block) -> None:
    indices, items = D.encode(block)
    assert indices.dtype == np.uint32 and len(indices) == block.num_values
    values = block_values(block)
    item_values = block_values(items)
    assert [item_values[i] for i in indices.tolist()] == values
    # distinct items, in order of first appearance
    first_seen = list(dict.fromkeys(values))
    assert item_values == first_seen
    assert type(items) is type(block)
    if isinstance(block, VariableWidthBlock):
        assert items.bits_per_offset == block.bits_per_offset and items.offsets[0] == 0
    else:
        assert items.bits_per_value == block.bits_per_value


@pytest.mark.parametrize("width", [1, 2, 3, 4, 8, 12, 16])
def test_encode_round_trip_fixed(width: int) -> None:
    rng = np.random.default_rng(width)
    table = rng.integers(0, 256, (37, width), dtype=np.uint8)
    rows = table[rng.integers(0, 37, 5000)]
    check_encoding(FixedWidthBlock(rows.reshape(-1), width * 8, 5000))


@pytest.mark.parametrize("bits", [32, 64])
def test_encode_round_trip_strings(bits: int) -> None:
    rng = np.random.default_rng(bits)
    pool = [b"", b"a", b"", b"bb", b"\x00", b"\x00\x00", b"long value " * 10]
    values = [pool[i] for i in rng.integers(0, len(pool), 3000)]
    check_encoding(strings(values, bits))
    check_encoding(strings([b""] * 10, bits))
    check_encoding(strings([], bits))


def test_encode_words_and_tails() -> None:
    """Values compared 8 bytes at a time: lengths around a word, trailing zero bytes that a
    masked word alone cannot tell apart, shared prefixes, and values that end at the last
    byte of the data (their words are gathered byte by byte)."""
    pool = [
        b"abcdefgh",
        b"abcdefghi",
        b"abcdefgh\x00",
        b"abcdefg",
        b"abcdefg\x00",
        b"\x00",
        b"",
        b"x" * 16,
        b"x" * 17,
        b"x" * 15 + b"y",
        b"abcdefghijklmnopq",
        b"abcdefghijklmnopr",
    ]
    rng = np.random.default_rng(7)
    values = [pool[i] for i in rng.integers(0, len(pool), 2000)]
    for tail in pool:  # each value once more as the very last bytes
        check_encoding(strings([*values, tail]))
        check_encoding(strings([tail, tail]))


def test_encode_many_distinct_values() -> None:
    """Enough items for long probe runs in the hash table, each seen several times."""
    rng = np.random.default_rng(3)
    check_encoding(fixed(rng.integers(0, 1 << 62, 30_000)[rng.integers(0, 30_000, 90_000)]))
    words = rng.integers(0, 1 << 40, 20_000)
    check_encoding(strings([b"k%d" % w for w in words[rng.integers(0, 20_000, 60_000)]]))


@pytest.mark.parametrize("kind", ["fixed", "strings"])
def test_budget_stops_the_encode_as_the_finished_totals_would(kind: str) -> None:
    """Stopping at the first excess decides as the whole encode and the final totals do:
    for budgets on both sides of the exact item count and encoded size."""
    rng = np.random.default_rng(11)
    if kind == "fixed":
        block: Block = fixed(rng.integers(0, 300, 4000).astype(np.int64))
    else:
        block = strings([b"v%d" % v * (1 + v % 3) for v in rng.integers(0, 300, 4000)])
    values = block_values(block)
    distinct = list(dict.fromkeys(values))
    size = D.encoded_size(block, len(distinct), sum(len(v) for v in distinct))
    for max_items in (len(distinct) - 1, len(distinct), len(distinct) + 1):
        for max_bytes in (size - 1, size, size + 1):
            budget = D.DictBudget(max_items, max_bytes)
            fits = len(distinct) <= max_items and size <= max_bytes
            got = D._hash_encode_block(block, budget)
            assert (got is not None) == fits, (max_items, max_bytes)
            if got is not None:
                assert [block_values(got[1])[i] for i in got[0].tolist()] == values


def test_encode_block_with_offset_and_slack() -> None:
    """Offsets that do not start at 0, and bytes past the last offset, are handled."""
    data = np.frombuffer(b"XXabcabcYY", dtype=np.uint8)
    block = VariableWidthBlock(np.array([2, 5, 8]), data, 32)
    indices, items = D.encode(block)
    assert indices.tolist() == [0, 0]
    assert block_values(items) == [b"abc"]


def test_encode_matches_digest_null_placeholder_order() -> None:
    """Nulls are empty-string placeholders, which become their own item
    (docs/format/structural.md)."""
    block = strings([b"b0", b"b1", b"", b"b2", b"b0", b""])
    indices, items = D.encode(block)
    assert block_values(items) == [b"b0", b"b1", b"", b"b2"]
    assert indices.tolist() == [0, 1, 2, 3, 0, 2]


# -- the decision, against pylance -------------------------------------------------------------


def _decision_cases():
    rng = np.random.default_rng(2)

    def i64_card(card: int, n: int = 3000) -> pa.Array:
        return pa.array(with_cardinality(rng, card, n).astype(np.int64) * 1000003 + 12345)

    def str_card(card: int, n: int = 3000, length: int = 20) -> pa.Array:
        pool = random_strings(rng, card, length)
        return pa.array([pool[i] for i in with_cardinality(rng, card, n)], pa.binary())

    four = rng.choice(["a", "bb", "ccc", "dddd"], 3000)
    # docs/format/compression.md cases
    yield "int64-10-of-3000", pa.array(rng.integers(0, 10, 3000) * 10**12), "2.2", None, True
    yield "int64-10-of-3000-v2.1", pa.array(rng.integers(0, 10, 3000) * 10**12), "2.1", None, False
    yield (
        "int32-full-range",
        pa.array(rng.integers(-(2**31), 2**31, 5000, dtype=np.int32)),
        "2.2",
        None,
        False,
    )
    yield (
        "int32-4-distinct",
        pa.array(rng.integers(0, 4, 3000).astype(np.int32) << 20),
        "2.2",
        None,
        False,
    )
    yield "strings-4-distinct", pa.array(four), "2.2", None, True
    yield "strings-4-distinct-v2.1", pa.array(four), "2.1", None, True
    binary = [bytes(rng.integers(0, 256, rng.integers(1, 21), dtype=np.uint8)) for _ in range(5000)]
    yield "random-binary-1-20", pa.array(binary, pa.binary()), "2.2", None, False
    yield (
        "large-string-3-v2.1",
        pa.array(rng.choice(["a", "bb", "c"], 3000), pa.large_string()),
        "2.1",
        None,
        True,
    )
    fsb = [bytes(16 * [i % 256]) for i in rng.integers(0, 256, 3000)]
    yield "fsb16-256-v2.1", pa.array(fsb, pa.binary(16)), "2.1", None, True
    dec = [decimal.Decimal(int(v)) / 100 for v in rng.integers(-(10**9), 10**9, 3000)]
    yield "decimal128-random-v2.1", pa.array(dec, pa.decimal128(12, 2)), "2.1", None, False
    few = [decimal.Decimal(int(v)) for v in rng.integers(0, 5, 3000)]
    yield "decimal128-5-v2.1", pa.array(few, pa.decimal128(12, 2)), "2.1", None, True
    yield "float64-10", pa.array(rng.integers(0, 10, 3000) * 0.5), "2.2", None, True
    # the size budget: 3000 int64 may keep at most 900 items (900*8 + 3000*4 <= 24000*0.8)
    yield "int64-900", i64_card(900), "2.2", None, True
    yield "int64-901", i64_card(901), "2.2", None, False
    # the size budget for strings (divisor 1 lifts the item budget): 20-byte strings
    yield "str20-1899", str_card(1899), "2.2", {"lance-encoding:dict-divisor": "1"}, True
    yield "str20-1900", str_card(1900), "2.2", {"lance-encoding:dict-divisor": "1"}, False
    # the sample projection: ceil(sample_ratio * n) against n // 2
    yield "str100-1400", str_card(1400, length=100), "2.2", None, True
    yield "str100-1499", str_card(1499, length=100), "2.2", None, False
    yield "str100-1600", str_card(1600, length=100), "2.2", None, False
    # divisor overrides: 4 items, budget 3000 // d; the projection is ceil(4/2976*3000) = 5
    yield "divisor-600", pa.array(four), "2.2", {"lance-encoding:dict-divisor": "600"}, True
    yield "divisor-750", pa.array(four), "2.2", {"lance-encoding:dict-divisor": "750"}, False
    yield "divisor-1000", pa.array(four), "2.2", {"lance-encoding:dict-divisor": "1000"}, False
    yield "divisor-junk", pa.array(four), "2.2", {"lance-encoding:dict-divisor": "1.5"}, True
    yield "ratio-0.01", pa.array(four), "2.2", {"lance-encoding:dict-size-ratio": "0.01"}, False
    yield "ratio-junk", pa.array(four), "2.2", {"lance-encoding:dict-size-ratio": "abc"}, True
    # the indices alone: one-byte strings (4 bytes of offset each) never fit, two-byte do
    yield "str1-3-distinct", pa.array(rng.choice(["N", "O", "R"], 3000)), "2.2", None, False
    yield "str2-3-distinct", pa.array(rng.choice(["NN", "OO", "RR"], 3000)), "2.2", None, True
    yield "99-values", pa.array(rng.choice(["a", "bb"], 99)), "2.2", None, False
    yield "100-values", pa.array(rng.choice(["a", "bb"], 100)), "2.2", None, True
    # sample traps: only the sampled positions (first 128 of 32 blocks of 512) vary
    pos = (np.arange(32)[:, None] * 512 + np.arange(128)).ravel()
    trap = np.full(16384, 7, dtype=np.int64)
    trap[pos] = np.arange(4096) + 100  # sample 100% distinct, page 4097 distinct
    yield "sample-all-distinct", pa.array(trap), "2.2", None, False
    trap = np.full(16384, 7, dtype=np.int64)
    trap[pos] = np.arange(4096) % 2458 + 100  # projection 9830 > 8192, page fits
    yield "sample-projection", pa.array(trap), "2.2", None, False
    trap = np.full(16384, 7, dtype=np.int64)
    trap[pos] = np.arange(4096) % 1000 + 100
    yield "sample-control", pa.array(trap), "2.2", None, True
    # the 100 000-item cap, through the projection: about 24% of a sample distinct
    yield "cap-400k", pa.array(rng.integers(0, 1000, 400_000) * 7919), "2.2", None, True
    yield "cap-420k", pa.array(rng.integers(0, 1000, 420_000) * 7919), "2.2", None, False


@pytest.mark.parametrize(
    "name,arr,version,meta,expected",
    list(_decision_cases()),
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_decision_agrees_with_pylance(name, arr, version, meta, expected, tmp_path) -> None:
    page = pylance_page(arr, version, meta, tmp_path)
    pylance_chose = "dictionary: Some" in page
    assert pylance_chose == expected, f"pylance changed its mind on {name}"
    block = to_block(arr)
    assert D.should_dictionary_encode(block, len(arr), meta, version) == expected
    got = D.encode_if_worthwhile(block, len(arr), meta, version)
    assert (got is not None) == expected
    if got is not None:
        match = re.search(r"num_dictionary_items: (\d+)", page)
        assert match and int(match.group(1)) == got[1].num_values


def test_bad_size_ratio_fails_like_pylance(tmp_path) -> None:
    arr = pa.array(np.random.default_rng(0).choice(["a", "bb"], 3000))
    meta = {"lance-encoding:dict-size-ratio": "1.5"}
    with pytest.raises(BaseException, match="dict-size-ratio"):  # pylance panics
        pylance_page(arr, "2.2", meta, tmp_path)
    with pytest.raises(InvalidArgumentError, match="dict-size-ratio"):
        D.should_dictionary_encode(to_block(arr), len(arr), meta, "2.2")


@pytest.mark.parametrize(
    "values",
    [
        pa.array(np.arange(3000) % 7),
        pa.array(np.random.default_rng(0).choice(["a", "bb"], 3000)),
        pa.array([decimal.Decimal(f"{k % 5}.25") for k in range(3000)], pa.decimal128(9, 2)),
    ],
    ids=["int64", "string", "decimal128"],
)
def test_bad_size_ratio_refuses_the_write_only_where_the_dictionary_is_considered(
    tmp_path, values: pa.Array
) -> None:
    """Our writer refuses a page that reaches the dictionary decision with the bad option
    (pylance panics there); a constant page never reaches it and is written, as pylance
    reads it back."""
    from lance_format.writer import LanceFileWriter

    field = pa.field("x", values.type, metadata={"lance-encoding:dict-size-ratio": "1.5"})
    schema = pa.schema([field])
    with pytest.raises(InvalidArgumentError, match="dict-size-ratio"):
        w = LanceFileWriter(str(tmp_path / "varied.lance"), schema, version="2.2")
        w.write_batch(pa.record_batch([values], schema=schema))
        w.close()
    assert not (tmp_path / "varied.lance").exists()
    constant = pa.array([values[0].as_py()] * 3000, values.type)
    path = str(tmp_path / "constant.lance")
    w = LanceFileWriter(path, schema, version="2.2")
    w.write_batch(pa.record_batch([constant], schema=schema))
    w.close()
    got = lance_file.LanceFileReader(path).read_all().to_table()
    assert got.column(0).combine_chunks().equals(constant)


@pytest.mark.parametrize(
    "version,meta,expected",
    [
        ("2.2", None, ("lz4", None)),
        ("2.2", {"lance-encoding:dict-values-compression": "none"}, (None, None)),
        (
            "2.2",
            {
                "lance-encoding:dict-values-compression": "zstd",
                "lance-encoding:dict-values-compression-level": "7",
            },
            ("zstd", 7),
        ),
        ("2.1", {"lance-encoding:dict-values-compression": "zstd"}, (None, None)),
    ],
)
def test_dict_values_compression_agrees_with_pylance(version, meta, expected, tmp_path) -> None:
    arr = pa.array(np.random.default_rng(1).choice(["a", "bb", "ccc"], 3000))
    page = pylance_page(arr, version, meta, tmp_path)
    dictionary = page[page.index("dictionary: Some") : page.index("num_dictionary_items")]
    scheme = re.search(r"scheme: CompressionAlgorithm(\w+)", dictionary)
    level = re.search(r"level: Some\(\s*(\d+)", dictionary)
    seen = (scheme.group(1).lower() if scheme else None, int(level.group(1)) if level else None)
    assert seen == expected
    assert D.dict_values_compression(meta, version) == expected


# -- the rule's pieces, without pylance ----------------------------------------------------------


def test_budget_pieces() -> None:
    rng = np.random.default_rng(3)
    block = fixed(rng.integers(0, 10, 3000).astype(np.int64))
    budget = D.dictionary_budget(block, 3000, {}, "2.2")
    assert budget == D.DictBudget(max_items=1500, max_encoded_bytes=19200)
    assert D.dictionary_budget(block, 3000, {}, "2.1") is None
    assert D.dictionary_budget(block, 3000, {}, "2.0") is None
    assert D.dictionary_budget(block, 3000, {b"lance-encoding:dict-divisor": b"10"}, "stable") == (
        D.DictBudget(300, 19200)
    )
    with pytest.raises(InvalidArgumentError):
        D.dictionary_budget(block, 2999, {}, "2.2")
    with pytest.raises(InvalidArgumentError):
        D.dictionary_budget(block, 3000, {}, "v9")
    s = strings([b"abc", b"de"] * 100)
    assert D.raw_size(s) == 500 + 201 * 4
    assert D.encoded_size(s, 2, 5) == 5 + 3 * 4 + 200 * 4
    assert D.should_dictionary_encode(s, 200, None, "2.1")
    # width-32 values never qualify, however repetitive
    assert not D.should_dictionary_encode(fixed(np.zeros(5000, np.int32)), 5000, None, "2.2")


def test_sample_indices_follow_pylance_layout() -> None:
    assert D._sample_indices(1023) is None
    idx = D._sample_indices(3000)
    assert len(idx) == 32 * 93 and idx[:3].tolist() == [0, 1, 2]
    assert idx[93] == 3000 // 32  # second block starts at 1 * n // 32
    idx = D._sample_indices(16384)
    assert len(idx) == 4096 and idx[128] == 512
