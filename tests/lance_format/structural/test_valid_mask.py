"""``repdef.valid_mask`` reads validity from the Arrow bitmap itself (a small write asks it of
every nullable column).  Checked against pyarrow's own ``is_valid()`` on every kind of array
the writer meets: slices at every bit offset, no nulls, all nulls, the null type,
dictionaries, extension types, booleans, strings, unions, and columns a pylance read gives
back; and the levels ``ravel`` makes from it against ``is_null()``."""

from __future__ import annotations

import lance
import numpy as np
import pyarrow as pa
import pytest
from lance.arrow import bfloat16_array  # pylance's: it must register lance.bfloat16 first

from lance_format.structural import repdef


def _truth(arr: pa.Array) -> np.ndarray | None:
    if arr.null_count == 0:
        return None
    return np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=bool)


def _same(arr: pa.Array) -> None:
    got, want = repdef.valid_mask(arr), _truth(arr)
    if want is None:
        assert got is None
        return
    assert got is not None and got.dtype == np.bool_ and len(got) == len(arr)
    assert np.array_equal(got, want)


def _arrays() -> list[pa.Array]:
    rng = np.random.default_rng(5)
    n = 203
    mask = rng.random(n) < 0.3
    ints = pa.array(rng.integers(-50, 50, n), mask=mask)
    strings = pa.array([f"s{i}" for i in range(n)], mask=mask)
    return [
        ints,
        pa.array(rng.random(n).astype(np.float32), mask=mask),
        strings,
        pa.array(rng.random(n) < 0.5, mask=mask),  # boolean values, bit-packed too
        pa.array(rng.integers(0, 9, n)),  # no nulls: no bitmap
        pa.array([None] * 17, pa.int64()),  # every slot null
        pa.nulls(12),  # the null type: no bitmap at all
        strings.dictionary_encode(),
        pa.DictionaryArray.from_arrays(pa.array([0, 1, None, 1, 0], pa.int8()), ["a", "b"]),
        bfloat16_array([1.5, None, -2.0, None, 3.25] * 9),
        pa.UnionArray.from_sparse(
            pa.array([0, 1, 0, 1], pa.int8()),
            [pa.array([1, None, 3, 4]), pa.array(["a", "b", None, "d"])],
        ),
        pa.array([[1, 2], None, [3], None] * 11, pa.list_(pa.int32())),
    ]


@pytest.mark.parametrize("i", range(12))
def test_matches_pyarrow_at_every_offset(i):
    arr = _arrays()[i]
    _same(arr)
    for start in range(0, min(len(arr), 19)):  # every bit offset, and byte-crossing ones
        for length in (0, 1, 7, 8, 9, len(arr) - start):
            if start + length <= len(arr):
                _same(arr.slice(start, length))


def test_ravel_levels_are_the_nulls():
    for arr in _arrays()[:4]:
        for piece in (arr, arr.slice(3, 150), arr.slice(9)):
            (rav,) = repdef.ravel(piece)
            want = np.asarray(piece.is_null().to_numpy(zero_copy_only=False), dtype=np.uint16)
            assert rav.defs is not None and rav.defs.dtype == np.uint16
            assert np.array_equal(rav.defs, want)


def test_columns_pylance_reads_back(tmp_path):
    """Arrays as a pylance read hands them over (its own buffers and offsets)."""
    rng = np.random.default_rng(8)
    n = 5000
    mask = rng.random(n) < 0.1
    table = pa.table(
        {
            "i": pa.array(rng.integers(0, 100, n), mask=mask),
            "s": pa.array([f"v{i % 37}" for i in range(n)], mask=mask),
            "f": pa.array(rng.random(n), mask=~mask),
        }
    )
    lance.write_dataset(table, str(tmp_path / "d"))
    for batch in lance.dataset(str(tmp_path / "d")).to_batches(batch_size=333):
        for col in batch.columns:
            _same(col)
            _same(col.slice(5, 100))
