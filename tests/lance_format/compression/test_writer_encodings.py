"""Each compression path of the writer: the encoding tree it chose, read back by pylance.

For every path the data is shaped so the path should win (small integers for bitpacking,
long runs for RLE, text for FSST, ...), the file is written with our writer, the chosen
layout is read from the *file* (our container parser, not the writer's own report), and
pylance must read the file back equal to the input.  Shared checks: both versions where
the path exists in both.
"""

from __future__ import annotations

import lance.file
import numpy as np
import pyarrow as pa
import pytest

from lance_format import InvalidArgumentError, LanceFileReader, LanceFileWriter
from lance_format.container.describe import describe
from lance_format.structural.column import leaf_fields

N = 5000
RNG_SEED = 7


def _write(tmp_path, table: pa.Table, version: str, **kw) -> str:
    path = str(tmp_path / f"t_{version}.lance")
    with LanceFileWriter(path, table.schema, version=version, **kw) as w:
        w.write_table(table)
    return path


def _layouts(path: str) -> dict[str, list[str]]:
    """Per leaf column (by leaf name), the page layouts stored in the file."""
    meta = LanceFileReader(path).metadata
    out: dict[str, list[str]] = {}
    for f, col in zip(leaf_fields(meta.schema.fields), meta.columns, strict=True):
        out.setdefault(f.name, []).extend(describe(p.encoding) for p in col.pages)
    return out


def _roundtrip(tmp_path, table: pa.Table, version: str, **kw) -> dict[str, list[str]]:
    path = _write(tmp_path, table, version, **kw)
    theirs = lance.file.LanceFileReader(path).read_all().to_table()
    assert theirs.equals(table), f"pylance read back different data ({version})"
    ours = LanceFileReader(path).read()
    assert ours.equals(table), f"our reader read back different data ({version})"
    return _layouts(path)


def _one(layouts: dict[str, list[str]], name: str | None = None) -> str:
    """The single page layout of a column (of the only column when ``name`` is None)."""
    if name is None:
        assert len(layouts) == 1, layouts
        (pages,) = layouts.values()
    else:
        pages = layouts[name]
    assert len(pages) == 1, pages
    return pages[0]


def _field(name: str, t: pa.DataType, **md: str) -> pa.Field:
    return pa.field(name, t, metadata={f"lance-encoding:{k}": v for k, v in md.items()} or None)


def _table(arr: pa.Array, **md: str) -> pa.Table:
    return pa.Table.from_arrays([arr], schema=pa.schema([_field("a", arr.type, **md)]))


VERSIONS = ["2.1", "2.2"]


@pytest.mark.parametrize("version", VERSIONS)
def test_inline_bitpacking_for_small_integers(tmp_path, version):
    rng = np.random.default_rng(RNG_SEED)
    table = _table(pa.array(rng.integers(0, 16, N), pa.int32()))
    layout = _one(_roundtrip(tmp_path, table, version))
    assert "MiniBlockLayout" in layout and "InlineBitpacking32" in layout


@pytest.mark.parametrize("version", VERSIONS)
def test_full_width_integers_stay_flat(tmp_path, version):
    rng = np.random.default_rng(RNG_SEED)
    table = _table(pa.array(rng.integers(-(2**62), 2**62, N), pa.int64()))
    assert "value_compression=Flat64" in _one(_roundtrip(tmp_path, table, version))


@pytest.mark.parametrize("version", VERSIONS)
def test_out_of_line_bitpacking_for_def_levels(tmp_path, version):
    rng = np.random.default_rng(RNG_SEED)
    mask = rng.random(N) < 0.3  # scattered nulls: short runs, so not RLE
    table = _table(pa.array(rng.integers(0, 1000, N), pa.int32(), mask=mask))
    layout = _one(_roundtrip(tmp_path, table, version))
    assert "def_compression=OutOfLineBitpacking16(Flat1)" in layout


def test_list_levels_bitpacked_with_repetition_index(tmp_path):
    rng = np.random.default_rng(RNG_SEED)
    lists = [None if i % 13 == 0 else list(range(rng.integers(0, 5))) for i in range(N)]
    table = _table(pa.array(lists, pa.list_(pa.int32())))
    layout = _one(_roundtrip(tmp_path, table, "2.2"))
    assert "rep_compression=OutOfLineBitpacking16(Flat1)" in layout
    assert "def_compression=OutOfLineBitpacking16(Flat2)" in layout
    assert "repetition_index_depth=1" in layout and "[AV_ITEM,NE_LIST]" in layout


def test_block_rle_def_levels_for_long_null_runs_in_2_2(tmp_path):
    valid = np.repeat(np.arange(N // 500) % 2 == 0, 500)  # nulls in runs of 500
    table = _table(pa.array(np.arange(N) % 7, pa.int32(), mask=~valid))
    layout = _one(_roundtrip(tmp_path, table, "2.2"))
    assert "def_compression=Rle(Flat16, Flat8)" in layout
    # 2.1 has no block RLE: bitpacked levels instead
    layout21 = _one(_roundtrip(tmp_path, table, "2.1"))
    assert "def_compression=OutOfLineBitpacking16(Flat1)" in layout21


@pytest.mark.parametrize("version", VERSIONS)
def test_rle_follows_the_run_threshold(tmp_path, version):
    rng = np.random.default_rng(RNG_SEED)
    # runs of exactly two full-width values: runs / values = 0.5, not below the 0.5 default
    values = np.repeat(rng.integers(-(2**31), 2**31 - 1, N // 2), 2).astype(np.int32)
    default = _one(_roundtrip(tmp_path, _table(pa.array(values)), version))
    assert "Rle" not in default
    forced = _one(
        _roundtrip(tmp_path, _table(pa.array(values), **{"rle-threshold": "0.9"}), version)
    )
    assert "value_compression=Rle(Flat32, Flat8)" in forced and "num_buffers=2" in forced


def test_rle_for_long_runs_by_default(tmp_path):
    values = np.repeat(np.arange(N // 500) * 1_000_003, 500).astype(np.int64)
    layout = _one(_roundtrip(tmp_path, _table(pa.array(values)), "2.1"))
    assert "Rle(" in layout


@pytest.mark.parametrize("version", VERSIONS)
def test_fsst_for_text_pages(tmp_path, version):
    rng = np.random.default_rng(RNG_SEED)
    words = np.array(["quick", "brown", "fox", "jumps", "over", "lazy", "dogs", "furiously"])
    text = [" ".join(rng.choice(words, 6)) + f" {i}" for i in range(N)]  # ~45 B each, > 32 KiB
    layout = _one(_roundtrip(tmp_path, _table(pa.array(text)), version))
    assert "value_compression=Fsst(Variable(Flat32))" in layout and "MiniBlockLayout" in layout


@pytest.mark.parametrize("version", VERSIONS)
def test_fsst_per_value_in_full_zip(tmp_path, version):
    rng = np.random.default_rng(RNG_SEED)
    words = np.array(["select", "from", "where", "group", "order", "having", "limit"])
    text = [" ".join(rng.choice(words, 60)) for _ in range(800)]  # ~330 B each
    layout = _one(_roundtrip(tmp_path, _table(pa.array(text)), version))
    assert layout.startswith("FullZipLayout") and "Fsst(Variable(Flat32))" in layout


@pytest.mark.parametrize("version", VERSIONS)
def test_random_binary_is_not_fsst(tmp_path, version):
    rng = np.random.default_rng(RNG_SEED)
    vals = [rng.bytes(int(k)) for k in rng.integers(1, 20, N)]
    layout = _one(_roundtrip(tmp_path, _table(pa.array(vals, pa.binary())), version))
    assert "value_compression=Variable(Flat32)" in layout


@pytest.mark.parametrize("version", VERSIONS)
def test_general_zstd_over_bss_for_floats(tmp_path, version):
    rng = np.random.default_rng(RNG_SEED)
    vals = np.round(rng.normal(100, 5, N), 2)
    layout = _one(_roundtrip(tmp_path, _table(pa.array(vals), compression="zstd"), version))
    assert "General[zstd](BSS(Flat64))" in layout
    off = _one(_roundtrip(tmp_path, _table(pa.array(vals), compression="zstd", bss="off"), version))
    assert "General[zstd](Flat64)" in off
    on = _one(_roundtrip(tmp_path, _table(pa.array(vals), compression="lz4", bss="on"), version))
    assert "General[lz4](BSS(Flat64))" in on


def test_bss_alone_is_ignored_without_compression(tmp_path):
    vals = np.random.default_rng(RNG_SEED).random(N).astype(np.float32)
    layout = _one(_roundtrip(tmp_path, _table(pa.array(vals), bss="on"), "2.2"))
    assert "value_compression=Flat32" in layout


@pytest.mark.parametrize("version", VERSIONS)
def test_general_lz4_on_strings_and_integers(tmp_path, version):
    rng = np.random.default_rng(RNG_SEED)
    text = [f"row {i} value {rng.integers(0, 50)}" for i in range(N)]
    layout = _one(_roundtrip(tmp_path, _table(pa.array(text), compression="lz4"), version))
    assert "General[lz4](Variable(Flat32))" in layout
    # 20-bit values (bitpacked) repeating every 64 rows: lz4 shrinks the packed chunks further
    ints = pa.array(np.tile(rng.integers(0, 1 << 20, 64), N // 64 + 1)[:N], pa.int32())
    layout = _one(_roundtrip(tmp_path, _table(ints, compression="lz4"), version))
    assert "General[lz4](InlineBitpacking32)" in layout


def test_compression_level_is_applied(tmp_path):
    rng = np.random.default_rng(RNG_SEED)
    text = pa.array([" ".join(map(str, rng.integers(0, 100, 20))) for _ in range(N)])
    sizes = {}
    for level in ("1", "19"):
        table = _table(text, compression="zstd", **{"compression-level": level})
        sizes[level] = _size(tmp_path, table, level)
    assert sizes["19"] < sizes["1"]


def _size(tmp_path, table: pa.Table, tag: str) -> int:
    path = str(tmp_path / f"lvl_{tag}.lance")
    with LanceFileWriter(path, table.schema, version="2.2") as w:
        w.write_table(table)
    assert lance.file.LanceFileReader(path).read_all().to_table().equals(table)
    return sum(
        s for c in LanceFileReader(path).metadata.columns for p in c.pages for _, s in p.buffers
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_general_zstd_per_value_in_full_zip(tmp_path, version):
    text = [f"long value {i} " * 30 for i in range(600)]
    layout = _one(_roundtrip(tmp_path, _table(pa.array(text), compression="zstd"), version))
    assert layout.startswith("FullZipLayout") and "General[zstd](Variable(Flat32))" in layout


@pytest.mark.parametrize("version", VERSIONS)
def test_packed_struct(tmp_path, version):
    rng = np.random.default_rng(RNG_SEED)
    arr = pa.StructArray.from_arrays(
        [
            pa.array(rng.integers(0, 100, N), pa.int32()),
            pa.array(rng.random(N).astype(np.float32)),
            pa.array(rng.integers(0, 1 << 40, N)),
        ],
        names=["x", "y", "z"],
    )
    layout = _one(_roundtrip(tmp_path, _table(arr, packed="true"), version))
    assert "PackedStruct[32, 32, 64](Flat128)" in layout and "MiniBlockLayout" in layout


def test_variable_packed_struct_in_2_2(tmp_path):
    arr = pa.StructArray.from_arrays(
        [pa.array(np.arange(N, dtype=np.int32)), pa.array([f"n{i}" for i in range(N)])],
        names=["a", "s"],
    )
    layout = _one(_roundtrip(tmp_path, _table(arr, packed="true"), "2.2"))
    assert layout.startswith("FullZipLayout")
    assert "VariablePackedStruct[Flat32, Variable(Flat32)]" in layout


@pytest.mark.parametrize("version", VERSIONS)
def test_fixed_size_list_with_item_validity(tmp_path, version):
    rng = np.random.default_rng(RNG_SEED)
    items = pa.array(rng.random(N * 8).astype(np.float32), mask=rng.random(N * 8) < 0.1)
    arr = pa.FixedSizeListArray.from_arrays(items, 8)
    layout = _one(_roundtrip(tmp_path, _table(arr), version))
    assert "FixedSizeList8+validity(Flat32)" in layout and "num_buffers=2" in layout


@pytest.mark.parametrize("version", VERSIONS)
def test_wide_vectors_are_full_zip(tmp_path, version):
    rng = np.random.default_rng(RNG_SEED)
    arr = pa.FixedSizeListArray.from_arrays(pa.array(rng.random(500 * 128).astype(np.float32)), 128)
    layout = _one(_roundtrip(tmp_path, _table(arr), version))
    assert layout.startswith("FullZipLayout") and "bits_per_value=4096" in layout


def test_map_in_2_2(tmp_path):
    maps = [None if i % 9 == 0 else [(f"k{j}", i * j) for j in range(i % 3)] for i in range(N)]
    table = _table(pa.array(maps, pa.map_(pa.string(), pa.int32())))
    layouts = _roundtrip(tmp_path, table, "2.2")
    assert "[AV_ITEM,AV_ITEM,NE_LIST]" in layouts["key"][0]
    assert "[AV_ITEM,AV_ITEM,NE_LIST]" in layouts["value"][0]


@pytest.mark.parametrize("version", VERSIONS)
def test_structural_encoding_override(tmp_path, version):
    short = pa.array([f"s{i}" for i in range(N)])
    layout = _one(
        _roundtrip(tmp_path, _table(short, **{"structural-encoding": "fullzip"}), version)
    )
    assert layout.startswith("FullZipLayout")
    long = pa.array(["x" * 300 + str(i) for i in range(200)])
    layout = _one(
        _roundtrip(tmp_path, _table(long, **{"structural-encoding": "miniblock"}), version)
    )
    assert layout.startswith("MiniBlockLayout")


@pytest.mark.parametrize("version", VERSIONS)
def test_all_null_pages_are_constant(tmp_path, version):
    table = pa.table({"a": pa.nulls(N, pa.int32()), "s": pa.nulls(N, pa.string())})
    layouts = _roundtrip(tmp_path, table, version)
    assert _one(layouts, "a") == "ConstantLayout([N_ITEM])"
    assert _one(layouts, "s") == "ConstantLayout([N_ITEM])"


def test_constant_values_in_2_2_and_not_in_2_1(tmp_path):
    table = pa.table(
        {
            "a": pa.array([7] * N, pa.int32()),
            "s": pa.array(["constant"] * N),
            "n": pa.array([42 if i % 5 else None for i in range(N)], pa.int32()),
        }
    )
    layouts = _roundtrip(tmp_path, table, "2.2")
    assert _one(layouts, "a") == "ConstantLayout([AV_ITEM] inline_value=<4B>)"
    assert _one(layouts, "s") == "ConstantLayout([AV_ITEM])"  # value in a scalar buffer
    n = _one(layouts, "n")
    assert "inline_value=<4B>" in n and "[N_ITEM]" in n
    layouts = _roundtrip(tmp_path, table, "2.1")
    assert all(_one(layouts, c).startswith("MiniBlockLayout") for c in ("a", "s", "n"))


@pytest.mark.parametrize("version", VERSIONS)
def test_blob_layout(tmp_path, version):
    vals = [b"x" * 1000, None, b"", b"abc" * 100]
    arr = pa.array(vals * 50, pa.large_binary())
    layout = _one(_roundtrip(tmp_path, _table(arr, blob="true"), version))
    assert layout.startswith("BlobLayout") and "PackedStruct[64, 64](Flat128)" in layout


def test_pages_split_by_max_page_bytes(tmp_path):
    table = _table(pa.array(np.arange(200_000, dtype=np.int64)))
    layouts = _roundtrip(tmp_path, table, "2.2", max_page_bytes=256 * 1024)
    assert len(layouts["a"]) >= 6


@pytest.mark.parametrize(
    "metadata",
    [
        {"lance-encoding:compression": "brotli"},
        {"lance-encoding:bss": "sometimes"},
        {"lance-encoding:structural-encoding": "zigzag"},
        {"lance-encoding:rle-threshold": "lots"},
    ],
)
def test_bad_encoding_metadata_is_refused_before_any_file(tmp_path, metadata):
    schema = pa.schema([pa.field("a", pa.int32(), metadata=metadata)])
    path = tmp_path / "bad.lance"
    with pytest.raises(InvalidArgumentError, match="lance-encoding"):
        LanceFileWriter(str(path), schema)
    assert list(tmp_path.iterdir()) == []
