"""Lance <-> Arrow schema mapping, checked against what pylance writes and reads back.

The FileDescriptor and manifest protobufs are pulled out of pylance-written files with a
small parser of the footers (docs/format/container.md) kept here, independent of the reader.
"""

from __future__ import annotations

import decimal
import struct

import lance
import lance.file
import numpy as np
import pyarrow as pa
import pytest
from fixtures import read_manifest

from lance_format.errors import InvalidArgumentError, SchemaError
from lance_format.pb import file_pb2
from lance_format.schema import LanceField, LanceSchema, parse_logical_type

# -- helpers -------------------------------------------------------------------------------


def read_descriptor(path: str) -> file_pb2.FileDescriptor:
    """Global buffer 0 of a v2 data file, found through the 40-byte footer."""
    with open(path, "rb") as fh:
        data = fh.read()
    _cm, _cmo, gbo_start, n_gb, _ncol, _major, _minor, magic = struct.unpack(
        "<QQQIIHH4s", data[-40:]
    )
    assert magic == b"LANC" and n_gb >= 1
    pos, size = struct.unpack_from("<QQ", data, gbo_start)
    fd = file_pb2.FileDescriptor()
    fd.ParseFromString(data[pos : pos + size])
    return fd


def sample(t: pa.DataType, n: int) -> pa.Array:
    """``n`` valid (non-null) values of any type, so non-nullable children are satisfied."""
    if isinstance(t, pa.BaseExtensionType):
        return pa.ExtensionArray.from_storage(t, sample(t.storage_type, n))
    if pa.types.is_null(t):
        return pa.nulls(n)
    if pa.types.is_boolean(t):
        return pa.array([i % 2 == 0 for i in range(n)])
    if pa.types.is_float16(t):
        return pa.array(np.arange(n, dtype=np.float16))
    if pa.types.is_integer(t) or pa.types.is_floating(t):
        return pa.array(np.arange(n) % 100).cast(t)
    if pa.types.is_date32(t) or pa.types.is_time32(t):
        return pa.array(np.arange(n, dtype=np.int32)).cast(t)
    if pa.types.is_temporal(t):
        return pa.array(np.arange(n, dtype=np.int64)).cast(t)
    if pa.types.is_decimal(t):
        return pa.array([decimal.Decimal(i * 1000) for i in range(n)], t)
    if pa.types.is_fixed_size_binary(t):
        return pa.array([bytes([i % 256]) * t.byte_width for i in range(n)], t)
    if (
        pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
    ):
        return pa.array([f"v{i}" for i in range(n)], t)
    if pa.types.is_dictionary(t):
        idx = pa.array(np.arange(n) % 2).cast(t.index_type)
        return pa.DictionaryArray.from_arrays(idx, sample(t.value_type, 2))
    if pa.types.is_fixed_size_list(t):
        return pa.FixedSizeListArray.from_arrays(sample(t.value_type, n * t.list_size), type=t)
    if pa.types.is_map(t):
        offsets = pa.array(np.arange(n + 1, dtype=np.int32))
        return pa.MapArray.from_arrays(
            offsets, sample(t.key_type, n), sample(t.item_type, n), type=t
        )
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        dt = np.int32 if pa.types.is_list(t) else np.int64
        offsets = pa.array(np.arange(n + 1, dtype=dt))
        cls = pa.ListArray if pa.types.is_list(t) else pa.LargeListArray
        return cls.from_arrays(offsets, sample(t.value_type, n), type=t)
    if pa.types.is_struct(t):
        return pa.StructArray.from_arrays(
            [sample(t.field(i).type, n) for i in range(t.num_fields)],
            fields=[t.field(i) for i in range(t.num_fields)],
        )
    raise AssertionError(f"no sample for {t}")


def assert_fields_equal(ours: pa.Field, theirs: pa.Field, path: str = "") -> None:
    """Type, nullability and metadata equal at every nesting level."""
    where = path + ours.name
    assert ours.name == theirs.name, where
    assert ours.type == theirs.type, f"{where}: {ours.type} != {theirs.type}"
    assert ours.nullable == theirs.nullable, where
    assert (ours.metadata or {}) == (theirs.metadata or {}), where
    t1, t2 = ours.type, theirs.type
    if isinstance(t1, pa.BaseExtensionType):
        return
    if pa.types.is_struct(t1):
        for i in range(t1.num_fields):
            assert_fields_equal(t1.field(i), t2.field(i), where + ".")
    elif pa.types.is_map(t1):
        assert_fields_equal(t1.key_field, t2.key_field, where + ".")
        assert_fields_equal(t1.item_field, t2.item_field, where + ".")
    elif pa.types.is_list(t1) or pa.types.is_large_list(t1) or pa.types.is_fixed_size_list(t1):
        assert_fields_equal(t1.value_field, t2.value_field, where + ".")


def assert_schemas_equal(ours: pa.Schema, theirs: pa.Schema) -> None:
    assert ours.names == theirs.names
    for a, b in zip(ours, theirs, strict=True):
        assert_fields_equal(a, b)
    assert (ours.metadata or {}) == (theirs.metadata or {})


BF16 = pa.field(
    "item",
    pa.binary(2),
    metadata={"ARROW:extension:name": "lance.bfloat16", "ARROW:extension:metadata": ""},
)
ST = pa.struct([pa.field("a", pa.int32(), False, {"inner": "1"}), ("b", pa.string())])

# (name, type, field metadata, versions that accept it)
ALL = ("2.0", "2.1", "2.2")
TYPES: list[tuple[str, pa.DataType, dict | None, tuple[str, ...]]] = [
    ("i8", pa.int8(), None, ALL),
    ("i16", pa.int16(), None, ALL),
    ("i32", pa.int32(), {"k": "v", "lance-encoding:compression": "zstd"}, ALL),
    ("i64", pa.int64(), None, ALL),
    ("u8", pa.uint8(), None, ALL),
    ("u16", pa.uint16(), None, ALL),
    ("u32", pa.uint32(), None, ALL),
    ("u64", pa.uint64(), None, ALL),
    ("f16", pa.float16(), None, ALL),
    ("f32", pa.float32(), None, ALL),
    ("f64", pa.float64(), None, ALL),
    ("b", pa.bool_(), None, ALL),
    ("s", pa.string(), None, ALL),
    ("ls", pa.large_string(), None, ALL),
    ("bin", pa.binary(), None, ALL),
    ("lbin", pa.large_binary(), None, ALL),
    ("blob", pa.large_binary(), {"lance-encoding:blob": "true"}, ("2.0", "2.1")),
    ("d32", pa.date32(), None, ALL),
    ("d64", pa.date64(), None, ALL),
    ("t32s", pa.time32("s"), None, ALL),
    ("t32ms", pa.time32("ms"), None, ALL),
    ("t64us", pa.time64("us"), None, ALL),
    ("t64ns", pa.time64("ns"), None, ALL),
    ("dur_s", pa.duration("s"), None, ALL),
    ("dur_ms", pa.duration("ms"), None, ALL),
    ("dur_us", pa.duration("us"), None, ALL),
    ("dur_ns", pa.duration("ns"), None, ALL),
    ("ts_s", pa.timestamp("s"), None, ALL),
    ("ts_ms_utc", pa.timestamp("ms", "UTC"), None, ALL),
    ("ts_us_off", pa.timestamp("us", "+05:30"), None, ALL),
    ("ts_ns_ny", pa.timestamp("ns", "America/New_York"), None, ALL),
    ("dec128", pa.decimal128(10, 2), None, ALL),
    ("dec256", pa.decimal256(40, -3), None, ALL),
    ("fsb", pa.binary(7), None, ALL),
    ("fsl_f32", pa.list_(pa.float32(), 4), None, ALL),
    ("fsl_named_nn", pa.list_(pa.field("x", pa.float32(), False), 3), None, ALL),
    ("fsl_fsl", pa.list_(pa.list_(pa.int8(), 2), 3), None, ALL),
    ("fsl_bf16", pa.list_(BF16, 4), None, ALL),
    ("fsl_str", pa.list_(pa.string(), 2), None, ("2.1", "2.2")),
    ("fsl_struct", pa.list_(pa.field("q", ST, False), 2), None, ("2.2",)),
    ("lst", pa.list_(pa.int32()), {"m": "x"}, ALL),
    ("lst_named", pa.list_(pa.field("val", pa.int64(), False, {"z": "2"})), None, ALL),
    ("llst", pa.large_list(pa.string()), None, ALL),
    ("lst_lst", pa.list_(pa.large_list(pa.int8())), None, ALL),
    ("lst_fsl", pa.list_(pa.list_(pa.float32(), 2)), None, ALL),
    ("lst_struct", pa.list_(ST), None, ALL),
    ("llst_struct", pa.large_list(ST), None, ALL),
    ("st", pa.struct([("x", pa.int32()), ("l", pa.list_(pa.string())), ("n", ST)]), None, ALL),
    (
        "packed",
        pa.struct([("x", pa.int32()), ("y", pa.float64()), ("z", pa.uint8())]),
        {"lance-encoding:packed": "true"},
        ALL,
    ),
    ("dict_s", pa.dictionary(pa.int32(), pa.string()), None, ALL),
    ("dict_i8", pa.dictionary(pa.int8(), pa.int64()), None, ALL),
    ("dict_u16", pa.dictionary(pa.uint16(), pa.large_string()), None, ALL),
    ("nul", pa.null(), None, ALL),
    ("uuid", pa.uuid(), None, ALL),
    ("map", pa.map_(pa.string(), pa.int32()), None, ("2.2",)),
    ("map_st", pa.map_(pa.int64(), ST), {"mm": "1"}, ("2.2",)),
]


def _schema_for(version: str) -> pa.Schema:
    fields = [
        pa.field(name, t, nullable=name != "i64", metadata=md)
        for name, t, md, versions in TYPES
        if version in versions
    ]
    return pa.schema(fields, metadata={"schema-level": "yes"})


@pytest.fixture(scope="module", params=ALL)
def written(request, tmp_path_factory):
    version = request.param
    schema = _schema_for(version)
    # pylance 14 panics on non-null fixed_size_list<string> ("compute_stat should only be
    # called once"), so that column holds null rows.
    arrays = [pa.nulls(3, f.type) if f.name == "fsl_str" else sample(f.type, 3) for f in schema]
    table = pa.Table.from_arrays(arrays, schema=schema)
    path = str(tmp_path_factory.mktemp("schema") / f"all_{version}.lance")
    with lance.file.LanceFileWriter(path, schema, version=version) as w:
        w.write_batch(table)
    return version, schema, path


# -- against pylance -----------------------------------------------------------------------


def test_file_schema_matches_pylance_read(written):
    _version, _schema, path = written
    fd = read_descriptor(path)
    ours = LanceSchema.from_protos(fd.schema.fields, fd.schema.metadata).to_arrow()
    assert_schemas_equal(ours, lance.file.LanceFileReader(path).metadata().schema)
    # pylance 14 cannot read fixed_size_list<struct> together with other columns (it counts
    # its rows twice), so it is read on its own.
    groups = [[n for n in ours.names if n != "fsl_struct"]]
    if "fsl_struct" in ours.names:
        groups.append(["fsl_struct"])
    for names in groups:
        theirs = lance.file.LanceFileReader(path, columns=names).read_all().to_table().schema
        assert_schemas_equal(
            pa.schema([ours.field(n) for n in names], metadata=ours.metadata), theirs
        )


def test_from_arrow_writes_what_pylance_writes(written):
    """ids, parent ids, logical types, encoding hints, metadata and extension names."""
    _version, schema, path = written
    fd = read_descriptor(path)
    ours = LanceSchema.from_arrow(schema)
    theirs = list(fd.schema.fields)
    mine = ours.to_protos()
    assert len(mine) == len(theirs)
    for a, b in zip(mine, theirs, strict=True):
        assert a == b, f"{a} != {b}"
    assert ours.to_proto_schema().metadata == fd.schema.metadata


def test_proto_round_trip(written):
    _version, _schema, path = written
    fd = read_descriptor(path)
    schema = LanceSchema.from_protos(fd.schema.fields, fd.schema.metadata)
    assert schema.to_protos() == list(fd.schema.fields)
    # Arrow -> Lance -> Arrow keeps the schema as pylance reads it back
    again = LanceSchema.from_arrow(schema.to_arrow())
    assert again.to_protos() == list(fd.schema.fields)


def _dataset_table() -> pa.Table:
    schema = pa.schema(
        [
            pa.field("id", pa.int32(), False),
            pa.field("b", pa.large_binary(), metadata={"lance-encoding:blob": "true"}),
            pa.field("s", pa.struct([("x", pa.int32()), ("l", pa.list_(pa.string()))])),
            pa.field("u", pa.uuid()),
            pa.field("v", pa.list_(pa.float32(), 8)),
        ],
        metadata={"owner": "test"},
    )
    return pa.Table.from_arrays([sample(f.type, 4) for f in schema], schema=schema)


@pytest.mark.parametrize("version", ALL)
def test_manifest_schema_matches_dataset(tmp_path, version):
    table = _dataset_table()
    ds = lance.write_dataset(table, str(tmp_path / "ds"), data_storage_version=version)
    m = read_manifest(str(tmp_path / "ds"))
    ours = LanceSchema.from_protos(m.fields, m.schema_metadata)
    assert_schemas_equal(ours.to_arrow(), ds.schema)
    assert ours.to_protos() == list(m.fields)
    blob = ours.field_by_path("b")
    assert blob.is_blob()
    if version == "2.2":
        # blob v2: struct<data, uri> with the lance.blob.v2 extension name
        # (docs/format/structural.md)
        assert blob.logical_type == "struct"
        assert [c.name for c in blob.children] == ["data", "uri"]
        assert [f.id for f in ours.walk()] == list(range(10))
    else:
        assert ours.to_protos() == LanceSchema.from_arrow(table.schema).to_protos()


def test_blob_v2_data_file_descriptor_children(tmp_path):
    """In the 2.2 data file, the descriptor children carry id = parent_id = -1."""
    table = _dataset_table()
    lance.write_dataset(table, str(tmp_path / "ds"), data_storage_version="2.2")
    m = read_manifest(str(tmp_path / "ds"))
    (frag,) = m.fragments
    fd = read_descriptor(str(tmp_path / "ds" / "data" / frag.files[0].path))
    schema = LanceSchema.from_protos(fd.schema.fields, fd.schema.metadata)
    assert [f.name for f in schema.fields] == ["id", "b", "s", "u", "v"]
    blob = schema.fields[1]
    assert blob.is_blob() and blob.is_packed_struct()
    assert [(c.name, c.id, c.parent_id, c.nullable) for c in blob.children] == [
        ("kind", -1, -1, False),
        ("position", -1, -1, False),
        ("size", -1, -1, False),
        ("blob_id", -1, -1, False),
        ("blob_uri", -1, -1, False),
    ]
    assert blob.arrow_type == pa.struct(
        [
            pa.field("kind", pa.uint8(), False),
            pa.field("position", pa.uint64(), False),
            pa.field("size", pa.uint64(), False),
            pa.field("blob_id", pa.uint32(), False),
            pa.field("blob_uri", pa.string(), False),
        ]
    )
    assert schema.to_protos() == list(fd.schema.fields)
    # DataFile.fields lists the struct's id only: the leaf columns follow the file schema
    assert list(frag.files[0].fields)[:2] == [0, 1]


# -- independent expectations --------------------------------------------------------------

LOGICAL = {
    "int8": pa.int8(),
    "uint64": pa.uint64(),
    "halffloat": pa.float16(),
    "float": pa.float32(),
    "double": pa.float64(),
    "bool": pa.bool_(),
    "string": pa.string(),
    "large_binary": pa.large_binary(),
    "date32:day": pa.date32(),
    "date64:ms": pa.date64(),
    "time32:ms": pa.time32("ms"),
    "time64:ns": pa.time64("ns"),
    "duration:us": pa.duration("us"),
    "timestamp:us:-": pa.timestamp("us"),
    "timestamp:s:Europe/Paris": pa.timestamp("s", "Europe/Paris"),
    "timestamp:ms:-07:00": pa.timestamp("ms", "-07:00"),
    "decimal:128:38:10": pa.decimal128(38, 10),
    "decimal:256:76:0": pa.decimal256(76, 0),
    "fixed_size_binary:16": pa.binary(16),
    "fixed_size_list:float:128": pa.list_(pa.float32(), 128),
    "fixed_size_list:fixed_size_list:int16:2:5": pa.list_(pa.list_(pa.int16(), 2), 5),
    "dict:string:int8:false": pa.dictionary(pa.int8(), pa.string()),
    "dict:timestamp:us:-:int32:false": pa.dictionary(pa.int32(), pa.timestamp("us")),
    "null": pa.null(),
    "json": pa.large_binary(),
}


@pytest.mark.parametrize("lt", sorted(LOGICAL))
def test_parse_logical_type(lt):
    assert parse_logical_type(lt) == LOGICAL[lt]


def test_bfloat16_item_metadata():
    t = parse_logical_type("fixed_size_list:lance.bfloat16:3")
    assert t.list_size == 3 and t.value_type == pa.binary(2)
    assert t.value_field.metadata == {
        b"ARROW:extension:name": b"lance.bfloat16",
        b"ARROW:extension:metadata": b"",
    }


def _pb(id_, parent, name, lt, **kw) -> file_pb2.Field:
    return file_pb2.Field(id=id_, parent_id=parent, name=name, logical_type=lt, **kw)


@pytest.mark.parametrize(
    "fields, message",
    [
        ([_pb(0, -1, "bad", "int33")], "int33"),
        ([_pb(0, -1, "bad", "decimal:64:3:1")], "decimal"),
        ([_pb(0, -1, "bad", "fixed_size_list:float:x")], "list size"),
        ([_pb(0, -1, "bad", "timestamp:fortnight:-")], "unit"),
        ([_pb(0, -1, "bad", "dict:string:float:false")], "integer"),
        ([_pb(0, -1, "bad", "list")], "children"),
        ([_pb(0, -1, "ok", "int8"), _pb(1, 7, "orphan", "int8")], "parent"),
        ([_pb(0, -1, "bad", "int8"), _pb(0, -1, "dup", "int8")], "duplicate"),
        ([_pb(0, -1, "bad", "int8"), _pb(1, 0, "kid", "int8")], "children"),
        ([_pb(0, -1, "bad", "map"), _pb(1, 0, "entries", "struct")], "map"),
    ],
)
def test_schema_errors_name_the_field(fields, message):
    with pytest.raises(SchemaError) as info:
        LanceSchema.from_protos(fields, {})
    assert message in str(info.value)
    assert info.value.column in ("bad", "orphan", "dup")


def test_from_arrow_rejects_unsupported():
    with pytest.raises(SchemaError):
        LanceSchema.from_arrow(pa.schema([("lv", pa.list_view(pa.int8()))]))
    with pytest.raises(SchemaError):
        LanceSchema.from_arrow(pa.schema([("m", pa.map_(pa.string(), pa.int8(), True))]))
    with pytest.raises(SchemaError):
        LanceSchema.from_arrow(pa.schema([("f", pa.list_(pa.list_(pa.int8()), 2))]))


def _nested() -> LanceSchema:
    return LanceSchema.from_arrow(
        pa.schema(
            [
                ("a", pa.int32()),
                ("s", pa.struct([("x", pa.int32()), ("y", pa.struct([("p", pa.string())]))])),
                ("l", pa.list_(pa.struct([("q", pa.int8()), ("r", pa.int8())]))),
                ("m", pa.map_(pa.string(), pa.int64())),
                ("dot.name", pa.int8()),
            ]
        ),
        first_id=10,
    )


def test_ids_depth_first_and_lookup():
    schema = _nested()
    got = [(f.id, f.parent_id, f.name) for f in schema.walk()]
    assert got == [
        (10, -1, "a"),
        (11, -1, "s"),
        (12, 11, "x"),
        (13, 11, "y"),
        (14, 13, "p"),
        (15, -1, "l"),
        (16, 15, "item"),
        (17, 16, "q"),
        (18, 16, "r"),
        (19, -1, "m"),
        (20, 19, "entries"),
        (21, 20, "key"),
        (22, 20, "value"),
        (23, -1, "dot.name"),
    ]
    assert schema.field_by_id(14).name == "p"
    assert schema.field_by_path("s.y.p").id == 14
    assert schema.field_by_path("l.item.r").id == 18
    assert schema.field_by_path("dot.name").id == 23
    assert schema.field_by_path("`dot.name`").id == 23
    with pytest.raises(InvalidArgumentError):
        schema.field_by_path("s.nope")
    with pytest.raises(InvalidArgumentError):
        schema.field_by_id(99)


def test_project():
    schema = _nested()
    p = schema.project(["s.y.p", "a", "l.item.r", "s.y"])
    # top level in the order asked, parents kept, only the chosen children
    assert [(f.id, f.name) for f in p.walk()] == [
        (11, "s"),
        (13, "y"),
        (14, "p"),
        (10, "a"),
        (15, "l"),
        (16, "item"),
        (18, "r"),
    ]
    assert p.to_arrow().field("s").type == pa.struct([("y", pa.struct([("p", pa.string())]))])
    whole = schema.project(["m", "s", "s.x"])
    assert [f.name for f in whole.fields] == ["m", "s"]
    assert whole.fields[1] is schema.fields[1]
    with pytest.raises(InvalidArgumentError):
        schema.project(["m.entries.key"])
    with pytest.raises(InvalidArgumentError):
        schema.project(["zzz"])
    # the original schema is untouched
    assert [c.name for c in schema.field_by_path("s").children] == ["x", "y"]


def test_flags():
    f = LanceField(0, -1, "p", "struct", metadata={"packed": b"TRUE"})
    assert f.is_packed_struct() and not f.is_blob()
    f = LanceField(0, -1, "p", "struct", metadata={"lance-encoding:packed": b"false"})
    assert not f.is_packed_struct()
    assert LanceField(
        0, -1, "b", "large_binary", metadata={"lance-encoding:blob": b"true"}
    ).is_blob()
    v2 = LanceField(0, -1, "b", "struct", metadata={"ARROW:extension:name": b"lance.blob.v2"})
    assert v2.is_blob()
    assert not LanceField(0, -1, "b", "large_binary").is_blob()


def test_equal_protos_share_one_schema_and_bad_ones_fail_each_time():
    """A schema rebuilt from the same protos (every commit reads the dataset's again) is
    the one already built; other protos or metadata give another, equal to a fresh build;
    a refused schema is refused again, never remembered."""
    fields = [_pb(0, -1, "a", "int64"), _pb(1, -1, "s", "struct"), _pb(2, 1, "x", "string")]
    first = LanceSchema.from_protos(fields, {"k": b"v"})
    again = LanceSchema.from_protos(
        [file_pb2.Field.FromString(f.SerializeToString()) for f in fields], {"k": b"v"}
    )
    assert again is first
    assert first == LanceSchema._build(fields, {"k": b"v"})
    arrow = first.to_arrow()
    assert arrow.types == [pa.int64(), pa.struct([pa.field("x", pa.string(), False)])]
    assert arrow.names == ["a", "s"] and arrow.metadata == {b"k": b"v"}
    other = LanceSchema.from_protos(fields, {"k": b"w"})
    assert other is not first and other.metadata == {"k": b"w"}
    renamed = LanceSchema.from_protos([_pb(0, -1, "b", "int64")], {})
    assert [f.name for f in renamed.fields] == ["b"]
    for _ in range(2):
        with pytest.raises(SchemaError):
            LanceSchema.from_protos([_pb(0, -1, "bad", "int33")], {})


def test_values_kept_on_a_schema_are_built_once_and_per_schema() -> None:
    """``LanceSchema.memo``: what every write asks of a dataset's one schema (its leaf
    ids, its descriptor form, whether it has blob columns) is built once per schema and
    never shared between schemas."""
    a = LanceSchema.from_arrow(pa.schema([("x", pa.int64()), ("s", pa.struct([("y", pa.utf8())]))]))
    b = LanceSchema.from_arrow(pa.schema([("z", pa.utf8())]))
    calls: list[LanceSchema] = []

    def leaves(s: LanceSchema) -> list[int]:
        calls.append(s)
        return [f.id for f in s.walk() if not f.children]

    assert a.memo("leaves", leaves) == [0, 2] and a.memo("leaves", leaves) == [0, 2]
    assert b.memo("leaves", leaves) == [0]
    assert calls == [a, b]
    assert not a.has_blob_v2 and not b.has_blob_v2
