"""LanceFileVersion against pylance: the names it accepts, what it resolves them to, and
the (major, minor) it records in the manifest and in the data file's footer."""

from __future__ import annotations

import struct

import lance
import pyarrow as pa
import pytest

from lance_format import LanceFileVersion, LanceFileWriter, UnsupportedError
from lance_format.errors import InvalidArgumentError
from lance_format.version import WRITABLE_VERSIONS, writable

NAMES = ["stable", "STABLE", "next", "legacy", "0.1", "2.0", "2.1", "2.2", "2.3"]


@pytest.fixture(scope="module")
def pylance_versions(tmp_path_factory) -> dict[str, tuple[str, tuple[int, int], bytes]]:
    """For each name: pylance's data_storage_version, its data file's (major, minor) in
    the manifest, and the file's last 8 bytes (footer version and magic)."""
    out = {}
    table = pa.table({"a": pa.array([1, 2, 3], pa.int64())})
    for name in NAMES:
        root = tmp_path_factory.mktemp("v")
        ds = lance.write_dataset(table, str(root / "ds"), data_storage_version=name)
        data_file = ds.get_fragments()[0].data_files()[0]
        with open(root / "ds" / "data" / data_file.path, "rb") as fh:
            tail = fh.read()[-8:]
        numbers = (data_file.file_major_version, data_file.file_minor_version)
        out[name] = (ds.data_storage_version, numbers, tail)
    return out


@pytest.mark.parametrize("name", NAMES)
def test_names_resolve_as_pylance_resolves_them(pylance_versions, name: str) -> None:
    theirs, numbers, tail = pylance_versions[name]
    ours = LanceFileVersion.parse(name)
    assert ours == theirs and str(ours) == theirs
    assert ours.numbers == numbers
    major, minor, magic = struct.unpack("<HH4s", tail)
    assert magic == b"LANC"
    if ours != LanceFileVersion.LEGACY:  # the v1 footer is laid out differently
        assert ours.footer_numbers == (major, minor)
        assert LanceFileVersion.from_numbers(major, minor) == ours


def test_order_is_by_version_number() -> None:
    v = LanceFileVersion
    assert sorted([v.V2_2, v.LEGACY, v.V2_3, v.V2_0, v.V2_1]) == [
        v.LEGACY,
        v.V2_0,
        v.V2_1,
        v.V2_2,
        v.V2_3,
    ]
    assert v.V2_2 >= v.V2_1 and v.V2_2 >= "2.2" and not v.V2_1 >= "stable"
    assert v.V2_1 < "2.2" and v.V2_0 <= "2.0" and v.V2_2 > "2.1"
    assert v.V2_1.is_structural and not v.V2_0.is_structural
    assert {"2.2": 1}[v.V2_2] == 1  # hashes and compares as its name
    # aliases and other spellings order as the versions they name, both ways round
    assert v.V2_0 >= "0.3" and v.V2_0 <= "0.3" and v.V2_1 > "legacy" and v.V2_2 < "NEXT"
    assert "2.1" < v.V2_2 and "stable" >= v.V2_2 and not "legacy" > v.LEGACY
    with pytest.raises(InvalidArgumentError, match="unknown Lance file version"):
        _ = v.V2_1 < "9.9"


@pytest.mark.parametrize("name", ["9.9", "", "v2", "2"])
def test_unknown_names_are_invalid(name: str) -> None:
    with pytest.raises(InvalidArgumentError, match="unknown Lance file version"):
        LanceFileVersion.parse(name)
    with pytest.raises(UnsupportedError, match="writable versions are"):
        writable(name)


@pytest.mark.parametrize("name", ["legacy", "0.1", "next", "2.3"])
def test_known_but_unwritable_versions_have_one_message(tmp_path, name: str) -> None:
    with pytest.raises(UnsupportedError, match="writable versions are 2.0, 2.1, 2.2"):
        LanceFileWriter(str(tmp_path / "f.lance"), pa.schema([("a", pa.int64())]), version=name)
    assert [str(v) for v in WRITABLE_VERSIONS] == ["2.0", "2.1", "2.2"]
