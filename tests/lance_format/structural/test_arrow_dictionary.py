"""Fields of Arrow dictionary type (pandas categoricals) keep their dictionary, as pylance does.

pylance 2.1/2.2 files store such a column as a dictionary page whose items are the column's
own dictionary: the categories as written, in their order, unused ones included.  Reading
must give that dictionary back (re-encoding the values gave the categories in first-seen
order), and writing must store it so pylance reads back the categories it was given.
Lance keeps no ``ordered`` flag: an ordered categorical is written (pylance accepts it) and
reads back unordered, as from pylance.  Truth: pylance's own read and write.
"""

from __future__ import annotations

import lance
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import lance_format
from lance_format.errors import CorruptFileError, SchemaError
from lance_format.structural.arrow import dictionary_array

LEVELS = ["low", "medium", "high", "unused"]


def _rows(column: pa.ChunkedArray) -> list[tuple[tuple, int | None]]:
    """Each row as (its chunk's dictionary, its key): equal only if both readers return
    the same dictionaries and keys, however they chunk."""
    out = []
    for chunk in column.chunks:
        items = tuple(chunk.dictionary.to_pylist())
        out += [(items, k) for k in chunk.indices.to_pylist()]
    return out


def _table(batches: int = 2) -> pa.Table:
    rng = np.random.default_rng(3)
    n = 5000
    ordered = pd.Categorical(
        rng.choice(LEVELS[:3] + [None], n), categories=LEVELS, ordered=True
    )  # an ordered categorical with nulls and an unused category
    small_keys = pa.DictionaryArray.from_arrays(
        pa.array(rng.integers(0, 3, n), pa.int8()), pa.array(["x", "y", "z"])
    )
    first = pa.table({"id": np.arange(n), "level": pa.array(ordered), "tag": small_keys})
    if batches == 1:
        return first
    # a second batch whose dictionaries are other objects, one with other items
    second = pa.table(
        {
            "id": np.arange(n, n + 10),
            "level": pa.array(pd.Categorical(["high"] * 10, categories=LEVELS, ordered=True)),
            "tag": pa.DictionaryArray.from_arrays(
                pa.array([0, 1] * 5, pa.int8()), pa.array(["w", "x"])
            ),
        }
    )
    return pa.concat_tables([first, second])


def _plain(table: pa.Table) -> pa.Table:
    return table.cast(
        pa.schema([("id", pa.int64()), ("level", pa.large_string()), ("tag", pa.string())])
    )


@pytest.mark.parametrize("version", ["2.0", "2.1", "2.2"])
@pytest.mark.parametrize("batches", [1, 2])
def test_pylance_written_dictionaries_read_as_pylance_reads_them(tmp_path, version, batches):
    uri = str(tmp_path / "theirs")
    lance.write_dataset(_table(batches), uri, data_storage_version=version)
    theirs = lance.dataset(uri).to_table()
    ours = lance_format.dataset(uri).to_table()
    assert ours.schema.equals(theirs.schema)
    for name in ("level", "tag"):
        assert _rows(ours[name]) == _rows(theirs[name])
    # pandas wants unique, non-null categories: pylance repeats the items of differing
    # dictionaries, and its 2.0 files add a null item
    if batches == 1 and version != "2.0":
        level = ours.to_pandas()["level"]
        assert list(level.cat.categories) == LEVELS


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_our_written_dictionaries_read_back_as_written(tmp_path, version):
    table = _table()
    uri = str(tmp_path / "ours")
    lance_format.write_dataset(table, uri, data_storage_version=version)
    for got in (lance.dataset(uri).to_table(), lance_format.dataset(uri).to_table()):
        assert _plain(got).equals(_plain(table))
        assert not got.schema.field("level").type.ordered  # as pylance stores it
        assert list(got.to_pandas()["level"].cat.categories) == LEVELS
        # the page dictionary is the column's own; differing batches' are united in order
        assert {tuple(c.dictionary.to_pylist()) for c in got["level"].chunks} == {tuple(LEVELS)}
        assert {tuple(c.dictionary.to_pylist()) for c in got["tag"].chunks} == {
            ("x", "y", "z", "w")
        }


def test_a_dictionary_key_past_the_items_is_corrupt():
    t = pa.dictionary(pa.int32(), pa.string())
    items = pa.array(["a", "b", "c"])
    with pytest.raises(CorruptFileError):
        dictionary_array(items, np.array([0, 3, 1], np.uint32), None, t)
    # a key under a null is never looked at: it reads as null, whatever was stored
    got = dictionary_array(items, np.array([0, 9, 1], np.uint32), np.array([1, 0, 1], bool), t)
    assert got.to_pylist() == ["a", None, "b"]
    got.validate(full=True)
    # keys too wide for the field's key type are corrupt as well
    small = pa.dictionary(pa.int8(), pa.string())
    many = pa.array([f"v{i}" for i in range(300)])
    with pytest.raises(CorruptFileError):
        dictionary_array(many, np.array([0, 200], np.uint32), None, small)


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_takes_and_filters_keep_the_written_categories(tmp_path, version):
    """Rows by position and by filter: pylance's values, with the categories as written
    (where pylance's own take re-encodes the taken values and its filtered scan repeats
    the items of every page), so a categorical's categories do not depend on the query."""
    sizes = ["S", "M", "L", "XL"]
    table = pa.table(
        {
            "n": np.arange(20_000),
            "size": pd.Categorical(np.resize(["L", "S", None, "M"], 20_000), sizes),
        }
    )
    uri = str(tmp_path / "ds")
    lance.write_dataset(table, uri, data_storage_version=version, max_rows_per_file=8000)
    ours, theirs = lance_format.dataset(uri), lance.dataset(uri)
    rows = [5, 19_999, 3, 8001, 7999, 2]
    for got, expected in (
        (ours.take(rows), theirs.take(rows)),
        (ours.to_table(filter="n % 1000 = 7"), theirs.to_table(filter="n % 1000 = 7")),
    ):
        assert got["size"].to_pylist() == expected["size"].to_pylist()
        assert {tuple(c.dictionary.to_pylist()) for c in got["size"].chunks} == {tuple(sizes)}


DICTIONARY_VALUES = {
    "int8": pa.array([1, 2, 3], pa.int8()),
    "uint64": pa.array([1, 2, 3], pa.uint64()),
    "float16": pa.array(np.array([1, 2, 3], np.float16)),
    "float64": pa.array([1.5, -0.0, 3.0]),
    "bool": pa.array([True, False, True]),
    "large_string": pa.array(["a", "bb", "c"], pa.large_string()),
    "binary": pa.array([b"a", b"\x00b", b"c"]),
    "large_binary": pa.array([b"a", b"b", b"c"], pa.large_binary()),
}
# values pylance refuses to dictionary-encode ("Cannot encode dictionary type"); a file
# holding one makes its reader panic
REFUSED_VALUES = {
    "date32": pa.array([1, 2, 3], pa.date32()),
    "timestamp": pa.array([1, 2, 3], pa.timestamp("us")),
    "decimal": pa.array([1, 2, 3], pa.decimal128(10, 2)),
    "fixed_size_binary": pa.array([b"ab", b"cd", b"ef"], pa.binary(2)),
    "list": pa.array([[1], [2, 3], []], pa.list_(pa.int8())),
}


def _dictionary_table(items: pa.Array) -> pa.Table:
    keys_array = pa.array(np.resize([2, 0, None, 1], 400), pa.int16())
    return pa.table({"c": pa.DictionaryArray.from_arrays(keys_array, items)})


@pytest.mark.parametrize("version", ["2.0", "2.1", "2.2"])
@pytest.mark.parametrize("kind", DICTIONARY_VALUES)
def test_dictionaries_of_every_value_kind_pylance_encodes(tmp_path, version, kind):
    table = _dictionary_table(DICTIONARY_VALUES[kind])
    uri = str(tmp_path / "ds")
    lance_format.write_dataset(table, uri, data_storage_version=version)
    theirs = lance.dataset(uri).to_table()
    assert theirs.schema.equals(table.schema)
    assert theirs["c"].to_pylist() == table["c"].to_pylist()
    assert _rows(lance_format.dataset(uri).to_table()["c"]) == _rows(theirs["c"])


@pytest.mark.parametrize("kind", REFUSED_VALUES)
@pytest.mark.parametrize("version", ["2.0", "2.2"])
def test_dictionaries_pylance_cannot_encode_are_refused_before_writing(tmp_path, kind, version):
    table = _dictionary_table(REFUSED_VALUES[kind])
    with pytest.raises(OSError, match="Cannot encode dictionary type"):
        lance.write_dataset(table, str(tmp_path / "theirs"), data_storage_version=version)
    with pytest.raises(SchemaError, match="cannot encode dictionary type"):
        lance_format.write_dataset(table, str(tmp_path / "ours"), data_storage_version=version)
    assert not (tmp_path / "ours").exists()


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_a_dictionary_longer_than_its_key_type_reaches_is_kept(tmp_path, version):
    """int8 keys reach 127 items, but an Arrow dictionary may hold more, unused: pylance
    writes it whole, and so do we (no key needs more than its type)."""
    items = pa.array([f"v{i}" for i in range(200)])
    table = pa.table(
        {"c": pa.DictionaryArray.from_arrays(pa.array([0, 99, 5] * 10, pa.int8()), items)}
    )
    uri = str(tmp_path / "ours")
    lance_format.write_dataset(table, uri, data_storage_version=version)
    for got in (lance.dataset(uri).to_table(), lance_format.dataset(uri).to_table()):
        assert got["c"].to_pylist() == table["c"].to_pylist()
        assert {len(c.dictionary) for c in got["c"].chunks} == {200}
