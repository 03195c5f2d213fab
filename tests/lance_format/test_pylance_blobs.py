"""pylance's blob API through datasets: ``blob_field``/``blob_array`` columns written with
``write_dataset``, scans returning descriptors, ``take_blobs``/``BlobFile``, ``read_blobs``
and ``blob_handling="all_binary"``, compared with pylance on the same data and calls.

Small size thresholds put blobs of a few hundred bytes in all three places (inline in the
data file, a shared pack sidecar, a dedicated sidecar), so every read path is covered.
"""

from __future__ import annotations

import io

import lance
import numpy as np
import pyarrow as pa
import pytest

import lance_format
from lance_format.errors import InvalidArgumentError, UnsupportedError

LIBS = {"pylance": lance, "ours": lance_format}
THRESHOLDS = {"inline_size_threshold": 16, "dedicated_size_threshold": 300}


def _values(n: int = 9, seed: int = 3) -> list[bytes | None]:
    rng = np.random.default_rng(seed)
    sizes = [5, None, 0, 40, 200, 1000, 16, 17, 301][:n]
    return [None if s is None else rng.integers(0, 256, s, dtype=np.uint8).tobytes() for s in sizes]


VALUES = _values()


def _table(lib, form: str) -> pa.Table:
    n = len(VALUES)
    if form == "extension":
        field = lib.blob_field("blob", **THRESHOLDS)
        column = lib.blob_array(VALUES)
    else:  # pylance's older spelling: binary marked as a blob
        md = {"lance-encoding:blob": "true"}
        md.update(
            {
                f"lance-encoding:blob-{k.split('_size')[0]}-size-threshold": str(v)
                for k, v in THRESHOLDS.items()
            }
        )
        field = pa.field("blob", pa.large_binary(), metadata=md)
        column = pa.array(VALUES, pa.large_binary())
    schema = pa.schema([pa.field("id", pa.int64()), field, pa.field("tail", pa.string())])
    return pa.table(
        {"id": np.arange(n), "blob": column, "tail": [str(i) for i in range(n)]}, schema=schema
    )


@pytest.fixture(scope="module", params=["extension", "metadata"])
def written(request, tmp_path_factory):
    """The same blob table written by pylance and by us (three fragments, one row deleted)."""
    out = {}
    for name, lib in LIBS.items():
        uri = str(tmp_path_factory.mktemp(f"blobs_{request.param}") / name)
        lib.write_dataset(_table(lib, request.param), uri, max_rows_per_file=4)
        lib.dataset(uri).delete("id = 2")
        out[name] = uri
    return out


def _descriptors_without_inline_positions(table: pa.Table) -> list:
    """Descriptors as a reader sees them; an inline blob's position is where the writer put
    it in its data file, which differs between writers."""
    rows = table.column("blob").to_pylist()
    return [
        None if r is None else {**r, "position": None if r["kind"] == 0 else r["position"]}
        for r in rows
    ]


def test_written_blob_datasets_match_pylance(written):
    theirs = lance_format.dataset(written["pylance"])
    ours = lance_format.dataset(written["ours"])
    # the same manifest schema (field ids, the lance.blob.v2 column and its children)
    assert ours.manifest.schema.to_protos() == theirs.manifest.schema.to_protos()
    for reader in (lance.dataset, lance_format.dataset):
        a, b = reader(written["pylance"]).to_table(), reader(written["ours"]).to_table()
        assert a.select(["id", "tail"]).equals(b.select(["id", "tail"]))
        assert a.schema == b.schema
        assert _descriptors_without_inline_positions(a) == _descriptors_without_inline_positions(b)
    # our reads of pylance's dataset are pylance's, positions included
    assert (
        lance_format.dataset(written["pylance"])
        .to_table()
        .equals(lance.dataset(written["pylance"]).to_table())
    )


@pytest.mark.parametrize(
    "select",
    [
        {"indices": [6, 0, 1, 7]},
        {"addresses": [1, 4294967296, 8589934592]},
        {"ids": [0, 4294967297, 8589934592]},
    ],
)
def test_take_blobs_and_read_blobs(written, select):
    expected = None
    for uri in written.values():
        for lib in LIBS.values():
            ds = lib.dataset(uri)
            files = ds.take_blobs("blob", **select)
            got = [None if f is None else f.readall() for f in files]
            pairs = ds.read_blobs("blob", **select)
            if expected is None:
                expected = (got, pairs)
            assert (got, pairs) == expected, (lib.__name__, uri)
    assert any(v is not None and len(v) > 300 for v in expected[0]) or "addresses" in select


def test_blob_handling_all_binary(written):
    want = lance.dataset(written["pylance"]).to_table(blob_handling="all_binary")
    for uri in written.values():
        got = lance_format.dataset(uri).to_table(blob_handling="all_binary")
        assert got.equals(want)
        assert lance.dataset(uri).to_table(blob_handling="all_binary").equals(want)
    filtered = lance_format.dataset(written["ours"]).to_table(
        columns=["blob"], filter="id > 4", blob_handling="all_binary"
    )
    assert filtered.column(0).to_pylist() == [v for i, v in enumerate(VALUES) if i > 4]


def test_blob_file_behaves_like_pylances(written):
    """Every file-object call on the 1000-byte (dedicated) blob, both implementations."""

    def script(f):
        out = [
            f.size(),
            f.tell(),
            f.read(10),
            f.tell(),
            f.seek(-5, io.SEEK_END),
            f.read(),
            f.seek(100),
            f.read(3),
            f.seek(2, io.SEEK_CUR),
            f.tell(),
            f.read_range(7, 4),
            f.tell(),
            f.readable(),
            f.seekable(),
            repr(f),
        ]
        buf = bytearray(6)
        out += [f.readinto(buf), bytes(buf), f.read1(4), f.seek(0), len(f.readall()), f.read(5)]
        f.close()
        out.append(f.closed)
        with pytest.raises(ValueError):
            f.read()
        return out

    results = [
        script(lib.dataset(written["ours"]).take_blobs("blob", indices=[4])[0])
        for lib in LIBS.values()
    ]
    assert results[0] == results[1]
    with lance_format.dataset(written["ours"]).take_blobs("blob", indices=[3])[0] as f:
        assert f.read() == VALUES[4]


def test_blob_selection_errors(written):
    ds = lance_format.dataset(written["ours"])
    with pytest.raises(ValueError, match="not a blob column"):
        ds.take_blobs("id", indices=[0])
    with pytest.raises(ValueError, match="Exactly one"):
        ds.take_blobs("blob", indices=[0], ids=[0])
    with pytest.raises(ValueError):
        ds.take_blobs("blob", indices=[100])
    with pytest.raises(InvalidArgumentError, match="blob_handling"):
        ds.to_table(blob_handling="bytes")


def test_append_to_pylances_blob_dataset(tmp_path):
    uri = str(tmp_path / "ds")
    lance.write_dataset(_table(lance, "extension"), uri)
    lance_format.write_dataset(_table(lance_format, "extension"), uri, mode="append")
    ds = lance.dataset(uri)
    assert ds.count_rows() == 2 * len(VALUES)
    got = ds.to_table(blob_handling="all_binary").column("blob").to_pylist()
    assert got == VALUES + VALUES


def test_blobs_need_2_2_and_inline_bytes(tmp_path):
    with pytest.raises(UnsupportedError, match="2.2"):
        lance_format.write_dataset(
            _table(lance_format, "extension"), str(tmp_path / "a"), data_storage_version="2.1"
        )
    external = pa.table(
        {"blob": lance_format.blob_array([lance_format.Blob.from_uri("file:///x")])}
    )
    with pytest.raises(UnsupportedError, match="external"):
        lance_format.write_dataset(external, str(tmp_path / "b"))


def test_reading_pylances_mixed_blobs_with_an_external_one(tmp_path):
    """pylance's own mixed-storage scenario (inline, packed, dedicated, external, null and
    empty blobs over three fragments): our reads of its dataset are its reads."""
    external = tmp_path / "external.bin"
    external.write_bytes(b"external")
    values = [b"in", b"packed!!", b"dedicated payload", external.as_uri(), None, b""]
    schema = pa.schema(
        [
            lance.blob_field("blobs", inline_size_threshold=4, dedicated_size_threshold=12),
            pa.field("idx", pa.uint64()),
        ]
    )
    table = pa.table({"blobs": lance.blob_array(values), "idx": range(len(values))}, schema=schema)
    uri = str(tmp_path / "mixed")
    theirs = lance.write_dataset(
        table, uri, allow_external_blob_outside_bases=True, max_rows_per_file=2
    )
    ours = lance_format.dataset(uri)
    assert ours.to_table().equals(theirs.to_table())
    assert ours.to_table(blob_handling="all_binary").equals(
        theirs.to_table(blob_handling="all_binary")
    )
    for select in ({"indices": [5, 3, 0, 4]}, {"addresses": [4294967297, 1, 8589934592]}):
        assert ours.read_blobs("blobs", **select) == theirs.read_blobs("blobs", **select)
        mine = [None if f is None else f.readall() for f in ours.take_blobs("blobs", **select)]
        want = [None if f is None else f.readall() for f in theirs.take_blobs("blobs", **select)]
        assert mine == want
    assert [f.size() for f in ours.take_blobs("blobs", indices=[3])] == [8]
