"""``alter_columns`` with ``data_type`` against pylance 14.

Each cast runs on the same data through both libraries (with a deleted row, so the new data
files must fill deleted slots): both must accept or both refuse (an ``OSError`` either way,
as pylance raises), and where they accept, each library reads both results and sees the
same table.  A dataset pylance cast is read by us, one we cast is read by pylance.
"""

from __future__ import annotations

import lance
import pyarrow as pa
import pytest

import lance_format
from lance_format.errors import InvalidDataError


def _table() -> pa.Table:
    return pa.table(
        {
            "i": pa.array([1, 2, None, 4, 5], pa.int64()),
            "f": [1.5, 2.5, 3.5, 4.5, 5.5],
            "s": ["a", "b", "c", "d", None],
            "b": [b"x", b"y", b"z", b"", None],
            "l": [[1], [2, 3], [], None, [4]],
            "st": [{"x": 1, "y": "a"}, {"x": 2, "y": "b"}, {"x": None, "y": "c"}, None, None],
            "ts": pa.array([1, 2, 3, 4, 5_000], pa.timestamp("us")),
            "u": pa.array([1, 2, 3, 4, 5], pa.uint8()),
            "fsl": pa.array([[1.0, 2.0]] * 5, pa.list_(pa.float32(), 2)),
            "big": pa.array([1, 2, 3, 2**40, 5], pa.int64()),
        }
    )


CASTS = [
    ("i", pa.int32()),
    ("i", pa.uint64()),
    ("i", pa.float64()),
    ("i", pa.string()),
    ("i", pa.bool_()),
    ("f", pa.float32()),
    ("f", pa.float16()),
    ("f", pa.int64()),
    ("s", pa.large_string()),
    ("s", pa.binary()),
    ("b", pa.large_binary()),
    ("b", pa.string()),
    ("l", pa.large_list(pa.int64())),
    ("l", pa.list_(pa.int32())),
    ("st.x", pa.int32()),
    ("st", pa.struct([("x", pa.int32()), ("y", pa.string())])),
    ("ts", pa.timestamp("ms")),
    ("ts", pa.int64()),
    ("u", pa.int64()),
    ("fsl", pa.list_(pa.float16(), 2)),
    ("big", pa.int32()),
]


def _cast(lib, uri: str, version: str, path: str, data_type: pa.DataType):
    table = _table()
    if version == "2.0":  # 2.0 cannot store null structs
        table = table.set_column(5, "st", pa.array([{"x": 1, "y": "a"}] * 5))
    ds = lib.write_dataset(table, uri, max_rows_per_file=2, data_storage_version=version)
    ds.delete("u = 2")
    alteration = {"path": path, "data_type": data_type}
    if "." not in path:
        alteration["name"] = "renamed"
    try:
        ds.alter_columns(alteration)
    except OSError as exc:
        return exc
    return ds


# every cast in 2.2; in 2.1 (other encodings) those that rewrite differently shaped data
CASES = [("2.2", p, t) for p, t in CASTS] + [
    ("2.1", p, t) for p, t in CASTS if p in ("i", "s", "l", "st.x", "fsl") and t != pa.string()
]


@pytest.mark.parametrize(
    ("version", "path", "data_type"), CASES, ids=[f"{v}-{p}-{t}" for v, p, t in CASES]
)
def test_cast_matches_pylance(tmp_path, version, path, data_type):
    theirs = _cast(lance, str(tmp_path / "pylance"), version, path, data_type)
    ours = _cast(lance_format, str(tmp_path / "ours"), version, path, data_type)
    if isinstance(theirs, Exception):
        assert isinstance(ours, InvalidDataError), ours
        return
    assert not isinstance(ours, Exception), ours
    truth = lance.dataset(str(tmp_path / "pylance")).to_table()
    assert ours.version == theirs.version
    assert ours.to_table() == truth  # in place, as pylance
    assert lance.dataset(str(tmp_path / "ours")).to_table() == truth
    assert lance_format.dataset(str(tmp_path / "pylance")).to_table() == truth


def test_cast_in_a_2_0_dataset(tmp_path):
    theirs = _cast(lance, str(tmp_path / "pylance"), "2.0", "i", pa.int8())
    ours = _cast(lance_format, str(tmp_path / "ours"), "2.0", "i", pa.int8())
    truth = theirs.to_table()
    assert ours.to_table() == truth
    assert lance.dataset(str(tmp_path / "ours")).to_table() == truth


def test_cast_refusals_match_pylance(tmp_path):
    for lib, name in ((lance, "pylance"), (lance_format, "ours")):
        uri = str(tmp_path / name)
        lib.write_dataset(pa.table({"i": range(200), "j": range(200)}), uri)
        lance.dataset(uri).create_scalar_index("i", "BTREE")  # pylance's index in both
        ds = lib.dataset(uri)
        with pytest.raises(OSError):  # an index on the column
            ds.alter_columns({"path": "i", "data_type": pa.int32()})
        with pytest.raises(OSError):  # a cast together with a nullability tightening
            ds.alter_columns({"path": "j", "data_type": pa.int32(), "nullable": False})
        with pytest.raises(OSError):  # a value the new type cannot hold
            ds.alter_columns({"path": "j", "data_type": pa.int8()})
        assert ds.version == 2 and lib.dataset(uri).version == 2  # nothing committed
