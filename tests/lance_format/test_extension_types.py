"""Arrow extension types (tensors, uuid, bool8, opaque, JSON, bfloat16, user types), both ways.

The truth is pylance: a dataset it writes must read back from us with the same schema
(extension types and field metadata) and values, whole, projected, filtered, taken and in
batches, for every file version; a dataset we write must read back in pylance exactly as the
one it wrote itself.  JSON columns are stored as JSONB and read as ``arrow.json`` text: the
bytes we encode and the text we decode are compared with pylance's on a corpus of values.
"""

from __future__ import annotations

import glob
import json

import lance
import lance.file
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.flight as fl
import pytest
from flight_fixtures import cmd, read_info, serve
from flight_sql_helpers import adbc_connect, running_server
from lance.arrow import bfloat16_array

import lance_format
from lance_format import jsonb
from lance_format.errors import CorruptFileError, InvalidArgumentError, SchemaError

VERSIONS = ["2.0", "2.1", "2.2"]
N = 300


class _Celsius(pa.ExtensionType):
    """A Python-defined extension type (pyarrow knows it only while registered)."""

    def __init__(self) -> None:
        super().__init__(pa.float64(), "test.celsius")

    def __arrow_ext_serialize__(self) -> bytes:
        return b"unit=C"

    @classmethod
    def __arrow_ext_deserialize__(cls, storage_type, serialized):
        return cls()


@pytest.fixture(scope="module", autouse=True)
def _celsius_registered():
    pa.register_extension_type(_Celsius())
    yield
    pa.unregister_extension_type("test.celsius")


def _json_texts(n: int) -> list[str | None]:
    docs = [
        '{"name": "a", "tags": [1, 2.5, null, true], "nested": {"z": 1, "a": "x"}}',
        "[]",
        '"just a string with \\"quotes\\" and \\u00e9"',
        "-12345678901",
        "1e-7",
        None,
        '{"b": false, "a": {"c": [{"d": 18446744073709551615}]}}',
    ]
    return [docs[i % len(docs)] for i in range(n)]


def _ext_table(n: int = N) -> pa.Table:
    """One column per extension type pylance stores, with nulls, plus nested uses."""
    rng = np.random.default_rng(7)
    ids = np.arange(n)
    valid = ids % 5 != 3
    tensor_storage = pa.FixedSizeListArray.from_arrays(
        pa.array(rng.random(n * 6).astype(np.float32)), 6, mask=pa.array(~valid)
    )
    uuids = pa.array([rng.bytes(16) if v else None for v in valid.tolist()], pa.binary(16))
    uuid = pa.ExtensionArray.from_storage(pa.uuid(), uuids)
    json_col = pa.array(_json_texts(n), pa.json_(pa.string()))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "tensor": pa.ExtensionArray.from_storage(
                pa.fixed_shape_tensor(pa.float32(), [2, 3]), tensor_storage
            ),
            "uuid": uuid,
            "flag": pa.ExtensionArray.from_storage(
                pa.bool8(), pa.array(np.where(valid, ids % 2, 0), pa.int8(), mask=~valid)
            ),
            "opaque": pa.ExtensionArray.from_storage(
                pa.opaque(pa.binary(), "geometry", "vendor.x"),
                pa.array([b"wkb%d" % i if i % 4 else None for i in ids]),
            ),
            "doc": json_col,
            "doc_large": pa.array(_json_texts(n)[::-1], pa.json_(pa.large_string())),
            "bf16": bfloat16_array([float(i) / 4 if i % 6 else None for i in ids]),
            "celsius": pa.ExtensionArray.from_storage(_Celsius(), pa.array(rng.random(n))),
            "st": pa.StructArray.from_arrays([uuid, json_col], names=["u", "j"]),
            "uuids": pa.ListArray.from_arrays(
                pa.array(np.minimum(np.arange(n + 1) * 2, n), pa.int32()), uuid
            ),
            "docs": pa.ListArray.from_arrays(
                pa.array(np.minimum(np.arange(n + 1) * 3, n), pa.int32()), json_col
            ),
        }
    )


def _assert_same(ours: pa.Table, theirs: pa.Table) -> None:
    assert ours.schema.equals(theirs.schema, check_metadata=True), (ours.schema, theirs.schema)
    assert ours.equals(theirs)


def _same_as_pylance(uri: str) -> None:
    theirs = lance.dataset(uri)
    ours = lance_format.dataset(uri)
    assert ours.schema.equals(theirs.schema, check_metadata=True)
    _assert_same(ours.to_table(), theirs.to_table())
    for name in theirs.schema.names:  # each column alone, and beside the filter's column
        _assert_same(ours.to_table(columns=[name]), theirs.to_table(columns=[name]))
        flt = "id % 3 = 1"
        _assert_same(
            ours.to_table(columns=[name], filter=flt), theirs.to_table(columns=[name], filter=flt)
        )
    flt = "id > 40 AND doc IS NOT NULL"
    _assert_same(ours.to_table(filter=flt), theirs.to_table(filter=flt))
    expr = pc.field("id") > 40  # an Arrow expression binds beside struct<uuid>, list<uuid>
    _assert_same(ours.to_table(filter=expr), theirs.to_table(filter=expr))
    _assert_same(ours.to_table(limit=9, offset=17), theirs.to_table(limit=9, offset=17))
    idx = np.random.default_rng(3).integers(0, N, 40).tolist()
    _assert_same(ours.take(idx), theirs.take(idx))
    _assert_same(
        ours.take(idx, columns=["tensor", "doc"]), theirs.take(idx, columns=["tensor", "doc"])
    )
    batches = list(ours.to_batches(batch_size=64))
    assert all(b.schema.equals(theirs.schema, check_metadata=True) for b in batches)
    assert pa.Table.from_batches(batches).equals(theirs.to_table())


@pytest.mark.parametrize("version", VERSIONS)
def test_pylance_extension_dataset_read_by_us(tmp_path, version):
    uri = str(tmp_path / "ds")
    table = _ext_table()
    lance.write_dataset(table, uri, data_storage_version=version, max_rows_per_file=120)
    _same_as_pylance(uri)
    assert lance_format.dataset(uri).schema.field("doc").type == pa.json_(pa.string())


@pytest.mark.parametrize("version", VERSIONS)
def test_our_extension_dataset_read_by_pylance(tmp_path, version):
    table = _ext_table()
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    lance_format.write_dataset(table, ours, data_storage_version=version, max_rows_per_file=120)
    lance.write_dataset(table, theirs, data_storage_version=version, max_rows_per_file=120)
    _assert_same(lance.dataset(ours).to_table(), lance.dataset(theirs).to_table())
    assert lance.dataset(ours).schema.equals(lance.dataset(theirs).schema, check_metadata=True)
    _same_as_pylance(ours)
    # appending JSON text of another string type to both, then reading both with pylance
    more = _ext_table(40).set_column(
        6, "doc_large", pa.array(_json_texts(40), pa.json_(pa.string()))
    )
    lance_format.write_dataset(more, ours, mode="append")
    lance.write_dataset(more, theirs, mode="append")
    _assert_same(lance.dataset(ours).to_table(), lance.dataset(theirs).to_table())


def test_unregistered_extension_reads_as_storage_with_metadata(tmp_path):
    """pyarrow cannot build a type it does not know: like pylance, the storage type with
    the extension's name and metadata kept as field metadata."""
    uri = str(tmp_path / "ds")
    lance.write_dataset(_ext_table().select(["id", "celsius"]), uri)
    pa.unregister_extension_type("test.celsius")
    try:
        theirs = lance.dataset(uri).to_table()
        ours = lance_format.dataset(uri).to_table()
        assert ours.schema.field("celsius").type == pa.float64()
        assert ours.schema.field("celsius").metadata[b"ARROW:extension:name"] == b"test.celsius"
        _assert_same(ours, theirs)
        _assert_same(lance_format.dataset(uri).take([5, 1]), lance.dataset(uri).take([5, 1]))
    finally:
        pa.register_extension_type(_Celsius())


@pytest.mark.parametrize("version", VERSIONS)
def test_extension_files_both_ways(tmp_path, version):
    """File level: pylance's file reader gets the same columns from our file as from its
    own (JSON stays JSONB there, as pylance's file API keeps it)."""
    table = _ext_table(50).drop_columns(["st", "uuids"])
    ours, theirs = str(tmp_path / "ours.lance"), str(tmp_path / "theirs.lance")
    with lance_format.LanceFileWriter(ours, table.schema, version=version) as w:
        w.write_batch(table)
    with lance.file.LanceFileWriter(theirs, table.schema, version=version) as w:
        w.write_batch(table)
    expected = lance.file.LanceFileReader(theirs).read_all().to_table()
    assert lance.file.LanceFileReader(ours).read_all().to_table().equals(expected)
    assert lance_format.LanceFileReader(theirs).read().equals(expected)


# -- JSONB -----------------------------------------------------------------------------------

JSON_VALUES = [
    "0",
    "-0",
    "1",
    "-1",
    "127",
    "128",
    "255",
    "256",
    "-129",
    "65535",
    "65536",
    "-40000",
    "4294967295",
    "4294967296",
    "-2147483649",
    "9223372036854775807",
    "18446744073709551615",
    "18446744073709551616",
    "-9223372036854775808",
    "-9223372036854775809",
    "1.0",
    "0.0",
    "-0.0",
    "0.1",
    "1e100",
    "1E-7",
    "2.5e-5",
    "1e-5",
    "1.5e-6",
    "1e15",
    "1e16",
    "12345678901234567.0",
    "123e4",
    "5e-324",
    "1.7976931348623157e308",
    "1e400",
    "-1e400",
    "0.30000000000000004",
    "123456789012345678901234567890",
    "NaN",
    "-Infinity",
    json.dumps("".join(chr(i) for i in range(32)) + '\x7f\u2028é"\\/😀'),
    '"\\ud83d\\ude00 \\u00E9 \\/"',
    '"\\ud800"',
    '"\x01raw control"',
    '{"b":1,"ab":2,"é":3,"z":4,"":5,"B":6}',
    '{"b":{"d":1,"c":[2,{"y":null,"x":true}]}}',
    "[]",
    "{}",
    "[[],{},[[]]]",
    "true",
    "false",
    "null",
    '  {"x" : [1, 2.0, "s"] }\n',
]
INVALID_JSON = ["abc", '{"a":}', "[1,2", '{"a":1} x', '{"a":1,"a":2}', "-", "1e"]


def test_jsonb_bytes_and_text_match_pylance(tmp_path):
    path = str(tmp_path / "j.lance")
    table = pa.table({"j": pa.array(JSON_VALUES, pa.json_())})
    lance.write_dataset(table, str(tmp_path / "ds"), data_storage_version="2.1")
    texts = lance.dataset(str(tmp_path / "ds")).to_table().column("j").to_pylist()
    data_file = glob.glob(str(tmp_path / "ds" / "data" / "*.lance"))[0]
    stored = lance.file.LanceFileReader(data_file).read_all().to_table().column("j")
    for value, raw, text in zip(JSON_VALUES, stored.to_pylist(), texts, strict=True):
        assert jsonb.encode(value) == raw, value
        assert jsonb.decode(raw) == text, value
    # and our file writer stores the same bytes from the same text
    with lance_format.LanceFileWriter(path, table.schema) as w:
        w.write_batch(table)
    assert lance.file.LanceFileReader(path).read_all().to_table().column("j").equals(stored)


def test_jsonb_random_numbers_match_pylance(tmp_path):
    """Random doubles (every decade, every bit pattern) and integers: our bytes and text are
    pylance's."""
    rng = np.random.default_rng(8)
    bits = rng.integers(0, 2**63, 1500, dtype=np.uint64) | (
        rng.integers(0, 2, 1500, dtype=np.uint64) << np.uint64(63)
    )
    doubles = [float(x) for x in bits.view(np.float64) if np.isfinite(x)]
    doubles += (rng.uniform(-1, 1, 1500) * 10.0 ** rng.integers(-12, 22, 1500)).tolist()
    ints = rng.integers(-(2**63), 2**63 - 1, 500, dtype=np.int64).tolist()
    values = [repr(d) for d in doubles] + [str(i) for i in ints]
    uri = str(tmp_path / "ds")
    lance.write_dataset(pa.table({"j": pa.array(values, pa.json_())}), uri)
    texts = lance.dataset(uri).to_table().column("j").to_pylist()
    data_file = glob.glob(str(tmp_path / "ds" / "data" / "*.lance"))[0]
    stored = lance.file.LanceFileReader(data_file).read_all().to_table().column("j").to_pylist()
    assert [jsonb.encode(v) for v in values] == stored
    assert [jsonb.decode(raw) for raw in stored] == texts


@pytest.mark.parametrize("text", INVALID_JSON)
def test_invalid_json_is_refused_like_pylance(tmp_path, text):
    table = pa.table({"j": pa.array([text], pa.json_())})
    with pytest.raises(OSError, match="Failed to encode JSON"):
        lance.write_dataset(table, str(tmp_path / "theirs"))
    with pytest.raises(InvalidArgumentError, match="not valid JSON"):
        lance_format.write_dataset(table, str(tmp_path / "ours"))
    assert not glob.glob(str(tmp_path / "ours" / "data" / "*"))  # nothing half-written


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\x20\x00\x00\x00",
        b"\x80\x00\x00\x05\x00",
        b"\x20\x00\x00\x00\x20\x00\x00\x09\x60",
        b"\x20\x00\x00\x00\x70\x00\x00\x00",
        b"\x40\x00\x00\x01\x20\x00\x00\x01\x00\x00\x00\x00\x00",
    ],
)
def test_corrupt_jsonb_is_a_clear_error(raw):
    with pytest.raises(CorruptFileError, match="invalid JSONB"):
        jsonb.decode(raw)


def test_json_column_refuses_other_types(tmp_path):
    uri = str(tmp_path / "ds")
    lance_format.write_dataset(pa.table({"j": pa.array(["1"], pa.json_())}), uri)
    with pytest.raises(SchemaError):
        lance_format.write_dataset(pa.table({"j": pa.array([1])}), uri, mode="append")
    # JSONB given as bytes (what the file reader returns) is kept, but only if it is JSONB
    jsonb_field = pa.field("j", pa.large_binary(), metadata={"ARROW:extension:name": "lance.json"})
    good = pa.table({"j": pa.array([jsonb.encode('{"a": [1]}')], pa.large_binary())})
    lance_format.write_dataset(good.cast(pa.schema([jsonb_field])), uri, mode="append")
    assert lance.dataset(uri).to_table().column("j").to_pylist() == ["1", '{"a":[1]}']
    bad = pa.table({"j": pa.array([b"not jsonb"], pa.large_binary())})
    with pytest.raises(InvalidArgumentError, match="not JSONB"):
        lance_format.write_dataset(bad.cast(pa.schema([jsonb_field])), uri, mode="append")
    assert lance.dataset(uri).count_rows() == 2


def test_extension_columns_over_flight(tmp_path):
    """The user's sequence: a served dataset with tensor, uuid, JSON... columns is read over
    Flight (every endpoint) and equals pylance's read, also with a filter beside them."""
    table = _ext_table().drop_columns(["bf16", "celsius"])  # Python types: not in the server
    lance.write_dataset(table, str(tmp_path / "ext"), data_storage_version="2.1")
    expected = lance.dataset(str(tmp_path / "ext"))
    with serve(str(tmp_path)) as server:
        client = fl.FlightClient(server.location)
        info = client.get_flight_info(fl.FlightDescriptor.for_path("ext"))
        _assert_same(read_info(client, info), expected.to_table())
        query = cmd(dataset="ext", columns=["tensor", "doc"], filter="id % 3 = 1")
        got = read_info(client, client.get_flight_info(query))
        _assert_same(got, expected.to_table(columns=["tensor", "doc"], filter="id % 3 = 1"))


def test_extension_dataset_through_flight_sql(tmp_path):
    """Flight SQL (DuckDB over our scanner, with its filter pushed down as an Arrow
    expression) reads a dataset with nested extension columns; JSON comes back as text."""
    table = _ext_table().drop_columns(["bf16", "celsius"])
    lance.write_dataset(table, str(tmp_path / "ext"), data_storage_version="2.2")
    expected = lance.dataset(str(tmp_path / "ext")).to_table(
        columns=["id", "doc"], filter="id > 250"
    )
    with running_server(str(tmp_path)) as server, adbc_connect(server) as conn:
        cur = conn.cursor()
        cur.execute("SELECT id, doc, st, uuids FROM ext WHERE id > 250 ORDER BY id")
        got = cur.fetch_arrow_table()
    assert got.column("id").to_pylist() == expected.column("id").to_pylist()
    assert got.column("doc").to_pylist() == expected.column("doc").to_pylist()


def test_json_map_values_both_ways(tmp_path):
    """JSON below a map (2.2): decoded and encoded at that depth too."""
    values = pa.array(['{"b": 1, "a": [2]}', None, "[2, 1.5]", "true"], pa.json_())
    offsets = pa.array([0, 2, 2, 4], pa.int32())
    table = pa.table(
        {"id": [1, 2, 3], "m": pa.MapArray.from_arrays(offsets, pa.array(list("wxyz")), values)}
    )
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    lance.write_dataset(table, theirs, data_storage_version="2.2")
    lance_format.write_dataset(table, ours, data_storage_version="2.2")
    expected = lance.dataset(theirs).to_table()
    assert expected.column("m").to_pylist()[0] == [("w", '{"a":[2],"b":1}'), ("x", None)]
    _assert_same(lance_format.dataset(theirs).to_table(), expected)
    _assert_same(lance.dataset(ours).to_table(), expected)
    _assert_same(lance_format.dataset(theirs).take([2, 0]), lance.dataset(theirs).take([2, 0]))
