"""Dictionary pages decoded: the compiled expansion of the items (``dictionary.VariableItems``
and ``FixedItems``) on every path that reads them (whole pages, row ranges,
point lookups), against pylance's read of the files pylance wrote.

The string columns cover each copy mode of the kernel (items of at most 16 bytes, at most
32, longer), empty strings, nulls, 32- and 64-bit offsets (``large_string``/``large_binary``)
and bytes that are not text; decimals and (2.2) 64-bit integers with nulls go through
``dictionary.FixedItems``.  Every page is checked to really be a dictionary page.
"""

from __future__ import annotations

import decimal

import lance.file
import numpy as np
import pyarrow as pa
import pytest
from fixtures import assert_tables_equal

from lance_format import LanceFileReader
from lance_format.compression import dictionary as D
from lance_format.errors import CorruptFileError
from lance_format.structural.arrow import dictionary_items, take_dictionary
from lance_format.structural.column import owns_column
from lance_format.version import LanceFileVersion

N = 3000


def _pool(kind: str) -> list[bytes]:
    if kind == "short":  # every item fits two words
        return [b"", b"A", b"NO", b"YES", b"R" * 16]
    if kind == "mid":  # some item needs three or four words
        return [b"", b"DELIVER IN PERSON", b"TAKE BACK RETURN", b"x" * 32, b"COLLECT COD"]
    # items longer than four words: copied word by word
    return [b"", b"short", b"y" * 33, bytes(range(70)), b"\xff\x00" * 50]


def _column(kind: str, arrow_type: pa.DataType, rng: np.random.Generator, nulls: bool):
    pool = _pool(kind)
    picks = rng.integers(0, len(pool), N)
    values: list = [pool[i] for i in picks]
    if not pa.types.is_binary(arrow_type) and not pa.types.is_large_binary(arrow_type):
        values = [v.decode("latin-1") for v in values]
    mask = (rng.random(N) < 0.1) if nulls else None
    return pa.array(values, type=arrow_type, mask=mask)


def _fixed(arrow_type: pa.DataType, rng: np.random.Generator) -> pa.Array:
    pool = rng.integers(-(10**12), 10**12, 20)
    values = (
        [decimal.Decimal(int(v)) / 100 for v in pool] if pa.types.is_decimal(arrow_type) else pool
    )
    picks = rng.integers(0, len(pool), N)
    return pa.array([values[i] for i in picks], type=arrow_type, mask=rng.random(N) < 0.1)


def _table() -> pa.Table:
    rng = np.random.default_rng(23)
    return pa.table(
        {
            "decimal": _fixed(pa.decimal128(15, 2), rng),
            "int64": _fixed(pa.int64(), rng),
            "short": _column("short", pa.string(), rng, nulls=False),
            "short_nulls": _column("short", pa.string(), rng, nulls=True),
            "mid": _column("mid", pa.string(), rng, nulls=True),
            "long": _column("long", pa.binary(), rng, nulls=True),
            "large_string": _column("mid", pa.large_string(), rng, nulls=True),
            "large_binary": _column("long", pa.large_binary(), rng, nulls=False),
        }
    )


@pytest.fixture(scope="module", params=["2.1", "2.2"])
def written(request, tmp_path_factory) -> tuple[str, pa.Table]:
    table = _table()
    path = str(tmp_path_factory.mktemp("dict") / "dict.lance")
    with lance.file.LanceFileWriter(path, table.schema, version=request.param) as w:
        w.write_batch(table)
    theirs = lance.file.LanceFileReader(path).read_all().to_table()
    assert theirs.equals(table)
    return path, theirs


def _leaves(reader: LanceFileReader) -> list:
    return [reader._leaf_reader(f) for f in reader.lance_schema.fields if owns_column(f)]


def test_every_column_is_a_string_dictionary_page(written):
    path, theirs = written
    reader = LanceFileReader(path)
    leaves = _leaves(reader)
    assert len(leaves) == theirs.num_columns
    modes = set()
    for leaf in leaves:
        name = leaf.field.name
        for page in leaf.column.pages:
            meta = leaf.meta(page)
            if name == "int64" and reader.version < LanceFileVersion.V2_2:
                assert meta.dictionary is None  # 64-bit values: dictionaries from 2.2 on
                continue
            assert meta.dictionary is not None, name
            if name in ("decimal", "int64"):
                assert isinstance(meta.items, D.FixedItems), name
                continue
            assert isinstance(meta.items, D.VariableItems), name
            modes.add(meta.items.words)
    assert modes == {0, 2, 4}  # each copy mode of the kernel: longer items, <= 32, <= 16


def test_whole_read_matches_pylance(written):
    path, theirs = written
    assert_tables_equal(LanceFileReader(path).read(), theirs)


def test_row_ranges_match_pylance(written):
    path, theirs = written
    reader = LanceFileReader(path)
    for start, stop in [(0, 1), (1, 2), (5, 1005), (N - 300, N), (N - 1, N)]:
        assert_tables_equal(reader.read_range(start, stop), theirs.slice(start, stop - start))


def test_takes_match_pylance(written):
    path, _ = written
    reader = LanceFileReader(path)
    rows = [0, 3, 7, 8, 999, 1500, N - 1]
    expected = lance.file.LanceFileReader(path).take_rows(rows).to_table()
    assert_tables_equal(reader.take(rows), expected)
    for row in rows[:3]:  # single-row point lookups
        assert_tables_equal(reader.take([row]), expected.slice(rows.index(row), 1))


def test_exact_size_count_gives_the_same_values(written, monkeypatch):
    """Above a bound on the expanded size the kernel counts the exact size first."""
    path, theirs = written
    monkeypatch.setattr(D, "_EXACT_SIZE_ABOVE", 0)
    assert_tables_equal(LanceFileReader(path).read(), theirs)


def test_skewed_items_are_counted_before_allocating(monkeypatch):
    """One long item among short ones: the expansion counts the exact size instead of
    reserving room for every value to be the long one (memory no cache would see)."""
    offsets = np.array([0, 1, 2, 3, 3 + 4000], np.int64)
    items = D.VariableItems.of(offsets, np.frombuffer(b"abc" + b"z" * 4000, np.uint8))
    counted = []
    real = D._expanded_size

    def spy(*args):
        counted.append(real(*args))
        return counted[-1]

    monkeypatch.setattr(D, "_expanded_size", spy)
    indices = np.tile(np.array([0, 1, 2], np.uint8), 1000)
    offs, data = items.expand(indices, None)
    assert counted == [3000] and data.tobytes() == b"abc" * 1000
    assert data.base is not None and data.base.nbytes <= 3000 + D._SLACK
    items.expand(np.array([3, 0], np.uint8), None)  # short pages use the bound
    assert len(counted) == 1


def test_index_past_the_items_is_corrupt(written):
    path, _ = written
    reader = LanceFileReader(path)
    for leaf in _leaves(reader):
        meta = leaf.meta(leaf.column.pages[0])
        if meta.dictionary is None:  # int64 in 2.1
            continue
        items = len(meta.dictionary)
        for dtype in (np.uint8, np.uint16, np.uint32, np.uint64):
            bad = np.array([0, items, 1], dtype=dtype)
            with pytest.raises(CorruptFileError, match="dictionary index"):
                take_dictionary(meta.dictionary, meta.items, bad, None)
        # a null slot's index is never looked at
        got = take_dictionary(meta.dictionary, meta.items, bad, np.array([True, False, True]))
        assert got.to_pylist() == [meta.dictionary[0].as_py(), None, meta.dictionary[1].as_py()]
        huge = np.array([2**63 + 1], dtype=np.uint64)  # negative as a signed index
        with pytest.raises(CorruptFileError, match="dictionary index"):
            meta.items.expand(huge, None)


def test_items_arrow_takes_keep_their_range_check():
    dictionary = pa.array([1, 2, 3], type=pa.int16())  # not a width Lance dictionary-encodes
    assert dictionary_items(dictionary) is None
    got = take_dictionary(dictionary, None, np.array([2, 0, 1], np.uint32), None)
    assert got.to_pylist() == [3, 1, 2]
    with pytest.raises(CorruptFileError, match="dictionary index"):
        take_dictionary(dictionary, None, np.array([3], np.uint32), None)


def test_offsets_outside_the_items_are_corrupt():
    data = np.frombuffer(b"abcdef", np.uint8)
    with pytest.raises(CorruptFileError, match="outside"):
        D.VariableItems.of(np.array([0, 4, 2], np.int32), data)  # decreasing
    with pytest.raises(CorruptFileError, match="outside"):
        D.VariableItems.of(np.array([0, 3, 7], np.int64), data)  # past the bytes
