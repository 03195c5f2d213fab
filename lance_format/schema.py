"""Lance schemas (the flat ``lance.file.Field`` list) and their Arrow equivalents.

A Lance schema is stored as a depth-first list of ``Field`` protobufs linked by ``id`` and
``parent_id``; each field names its Arrow type with a *logical type* string
(docs/format/container.md). Nested types keep their children as fields of their own (struct members,
list items, map entries, and the item of a fixed-size list of structs), while every other type,
including fixed-size lists of primitives, is spelled out completely in its logical type string.

The mapping follows what pylance 14 writes and reads back, which differs from the older
upstream snapshot in a few places: fixed-size lists of structs have a child field, ``map`` is
a logical type, ``extension_name`` (proto field 9) is written, and 2.2 blob descriptor columns
list their packed children with ``id = parent_id = -1`` (docs/format/structural.md).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar, cast

import nanoarrow
import pyarrow as pa

from .errors import InvalidArgumentError, InvalidDataError, SchemaError
from .pb import file_pb2

T = TypeVar("T")

EXT_NAME_KEY = "ARROW:extension:name"
EXT_META_KEY = "ARROW:extension:metadata"
BLOB_KEY = "lance-encoding:blob"
PACKED_KEYS = ("packed", "lance-encoding:packed")
BLOB_V2_EXT_NAME = "lance.blob.v2"
BFLOAT16_EXT_NAME = "lance.bfloat16"
JSON_EXT_NAME = "lance.json"
ARROW_JSON_EXT_NAME = "arrow.json"

# Legacy ``lance.file.Encoding`` hints (only written, never needed to read v2 files).
ENCODING_NONE = 0
ENCODING_PLAIN = 1
ENCODING_VAR_BINARY = 2
ENCODING_DICTIONARY = 3

_TIME_UNITS = ("s", "ms", "us", "ns")

_SIMPLE_TYPES: dict[str, pa.DataType] = {
    "null": pa.null(),
    "bool": pa.bool_(),
    "int8": pa.int8(),
    "uint8": pa.uint8(),
    "int16": pa.int16(),
    "uint16": pa.uint16(),
    "int32": pa.int32(),
    "uint32": pa.uint32(),
    "int64": pa.int64(),
    "uint64": pa.uint64(),
    "halffloat": pa.float16(),
    "float": pa.float32(),
    "double": pa.float64(),
    "string": pa.string(),
    "binary": pa.binary(),
    "large_string": pa.large_string(),
    "large_binary": pa.large_binary(),
    "json": pa.large_binary(),  # lance.json: JSONB bytes, extension name kept in metadata
    "date32:day": pa.date32(),
    "date64:ms": pa.date64(),
    "time32:s": pa.time32("s"),
    "time32:ms": pa.time32("ms"),
    "time64:us": pa.time64("us"),
    "time64:ns": pa.time64("ns"),
    "duration:s": pa.duration("s"),
    "duration:ms": pa.duration("ms"),
    "duration:us": pa.duration("us"),
    "duration:ns": pa.duration("ns"),
}
_SIMPLE_NAMES: dict[pa.DataType, str] = {
    t: name for name, t in _SIMPLE_TYPES.items() if name != "json"
}
_SIMPLE_NAMES[pa.string_view()] = "string"  # pylance stores views as the plain types
_SIMPLE_NAMES[pa.binary_view()] = "binary"

_NESTED = ("list", "large_list", "list.struct", "large_list.struct", "struct", "map")


def _truthy(value: bytes | None) -> bool:
    return value is not None and value.strip().lower() == b"true"


def _bfloat16_item() -> pa.Field:
    return pa.field(
        "item",
        pa.binary(2),
        True,
        {EXT_NAME_KEY.encode(): BFLOAT16_EXT_NAME.encode(), EXT_META_KEY.encode(): b""},
    )


def _int_or_error(text: str, what: str, name: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise SchemaError(f"bad {what} {text!r} in logical type", column=name) from None


def parse_logical_type(lt: str, name: str = "?") -> pa.DataType:
    """The Arrow type of a logical type string that needs no child fields."""
    simple = _SIMPLE_TYPES.get(lt)
    if simple is not None:
        return simple
    parts = lt.split(":")
    head = parts[0]
    if head == "fixed_size_list" and len(parts) >= 3:
        size = _int_or_error(parts[-1], "list size", name)
        inner = ":".join(parts[1:-1])
        if size < 0:
            raise SchemaError(f"negative fixed_size_list size in {lt!r}", column=name)
        if inner == BFLOAT16_EXT_NAME:
            return pa.list_(_bfloat16_item(), size)
        return pa.list_(pa.field("item", parse_logical_type(inner, name), True), size)
    if head == "fixed_size_binary" and len(parts) == 2:
        size = _int_or_error(parts[1], "binary width", name)
        if size < 0:
            raise SchemaError(f"negative fixed_size_binary width in {lt!r}", column=name)
        return pa.binary(size)
    if head == "decimal" and len(parts) == 4:
        bits = parts[1]
        precision = _int_or_error(parts[2], "decimal precision", name)
        scale = _int_or_error(parts[3], "decimal scale", name)
        try:
            if bits == "128":
                return pa.decimal128(precision, scale)
            if bits == "256":
                return pa.decimal256(precision, scale)
        except (ValueError, pa.ArrowException) as exc:
            raise SchemaError(f"invalid decimal {lt!r}: {exc}", column=name) from None
        raise SchemaError(f"decimal width must be 128 or 256 in {lt!r}", column=name)
    if head == "timestamp" and len(parts) >= 3:
        unit = parts[1]
        if unit not in _TIME_UNITS:
            raise SchemaError(f"bad time unit in {lt!r}", column=name)
        tz = ":".join(parts[2:])  # offsets like "+05:30" contain the separator
        return pa.timestamp(unit, None if tz == "-" else tz)
    if head == "dict" and len(parts) >= 4:
        # dict:{value}:{key}:{ordered}; the value type may itself contain ':'
        ordered = parts[-1].lower() == "true"
        key = parse_logical_type(parts[-2], name)
        value = parse_logical_type(":".join(parts[1:-2]), name)
        if not pa.types.is_integer(key):
            raise SchemaError(f"dictionary key type must be an integer in {lt!r}", column=name)
        return pa.dictionary(key, value, ordered)
    raise SchemaError(f"unsupported logical type {lt!r}", column=name)


def logical_type_of(t: pa.DataType, name: str = "?") -> str:
    """The logical type string pylance writes for an Arrow type (children not included)."""
    if isinstance(t, pa.BaseExtensionType):
        t = t.storage_type
    simple = _SIMPLE_NAMES.get(t)
    if simple is not None:
        return simple
    if pa.types.is_timestamp(t):
        return f"timestamp:{t.unit}:{t.tz if t.tz else '-'}"
    if pa.types.is_decimal128(t):
        return f"decimal:128:{t.precision}:{t.scale}"
    if pa.types.is_decimal256(t):
        return f"decimal:256:{t.precision}:{t.scale}"
    if pa.types.is_fixed_size_binary(t):
        return f"fixed_size_binary:{t.byte_width}"
    if pa.types.is_dictionary(t):
        if not _dictionary_value_ok(t.value_type):
            # pylance refuses to write these ("Cannot encode dictionary type"), and panics
            # reading a file that has one
            raise SchemaError(f"cannot encode dictionary type {t}", column=name)
        value = logical_type_of(t.value_type, name)
        return f"dict:{value}:{logical_type_of(t.index_type, name)}:false"
    if pa.types.is_fixed_size_list(t):
        item = t.value_field
        if _ext_name(item) == BFLOAT16_EXT_NAME:
            return f"fixed_size_list:{BFLOAT16_EXT_NAME}:{t.list_size}"
        return f"fixed_size_list:{logical_type_of(item.type, name)}:{t.list_size}"
    if pa.types.is_map(t):
        return "map"
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        prefix = "list" if pa.types.is_list(t) else "large_list"
        return prefix + (".struct" if pa.types.is_struct(_storage(t.value_type)) else "")
    if pa.types.is_struct(t):
        return "struct"
    raise SchemaError(f"Arrow type {t} has no Lance logical type", column=name)


def _dictionary_value_ok(t: pa.DataType) -> bool:
    """Whether pylance encodes a dictionary of these values: numbers, booleans, strings and
    binaries (not dates, times, decimals, fixed-size binaries or views)."""
    return (
        pa.types.is_integer(t)
        or pa.types.is_floating(t)
        or pa.types.is_boolean(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
    )


def _storage(t: pa.DataType) -> pa.DataType:
    return t.storage_type if isinstance(t, pa.BaseExtensionType) else t


def _ext_name(f: pa.Field) -> str | None:
    if isinstance(f.type, pa.BaseExtensionType):
        return f.type.extension_name
    md = f.metadata or {}
    value = md.get(EXT_NAME_KEY.encode())
    return value.decode("utf-8", "replace") if value is not None else None


def _encoding_hint(t: pa.DataType) -> int:
    """The legacy ``encoding`` value pylance writes for a field of this type
    (docs/format/container.md)."""
    t = _storage(t)
    if pa.types.is_null(t) or pa.types.is_struct(t):
        return ENCODING_NONE
    if pa.types.is_dictionary(t):
        return ENCODING_DICTIONARY
    if (
        pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_string_view(t)
        or pa.types.is_binary_view(t)
    ):
        return ENCODING_VAR_BINARY
    return ENCODING_PLAIN


def _resolve_extensions(schema: pa.Schema) -> pa.Schema:
    """Let pyarrow turn ``ARROW:extension:name`` metadata into registered extension types,
    as it does for schemas imported from pylance (e.g. ``arrow.uuid``)."""
    return pa.ipc.read_schema(pa.py_buffer(schema.serialize()))


def _extension_metadata(t: pa.DataType) -> dict[str, bytes]:
    """``ARROW:extension:name/metadata`` of an extension type.

    C++-defined types (``arrow.uuid``, ``arrow.fixed_shape_tensor``...) have no Python
    serializer, so the metadata is read from the type's Arrow C schema export (nanoarrow's
    view of it)."""
    serialize = getattr(t, "__arrow_ext_serialize__", None)
    if serialize is not None:
        return {EXT_NAME_KEY: t.extension_name.encode(), EXT_META_KEY: bytes(serialize())}
    out = {EXT_NAME_KEY: t.extension_name.encode(), EXT_META_KEY: b""}
    exported = nanoarrow.c_schema(pa.field("x", t)).metadata
    for key, value in exported.items() if exported is not None else ():
        if key in (EXT_NAME_KEY.encode(), EXT_META_KEY.encode()):
            out[key.decode()] = bytes(value)
    return out


def _has_extension(f: LanceField) -> bool:
    """An extension type anywhere in the field, bfloat16 fixed-size-list items included
    (their extension lives in the logical type string, not in a child field)."""
    return any(EXT_NAME_KEY in g.metadata or BFLOAT16_EXT_NAME in g.logical_type for g in f.walk())


def arrow_schema_key(schema: pa.Schema) -> bytes | None:
    """A key for what is kept per Arrow schema: its IPC form, since Arrow's ``==`` (and
    hash) ignore field metadata, which steers encodings and holds extension types.  None
    for a schema IPC cannot carry (then nothing is kept for it)."""
    try:
        return schema.serialize().to_pybytes()
    except (pa.ArrowException, TypeError, ValueError):
        return None


def cached_per_type(fn):
    """``functools.lru_cache`` by Arrow type, except for types that cannot be hashed
    (extension types defined in Python, e.g. pylance's bfloat16): those are computed each
    time.  For the questions asked of every column of every batch or page."""
    cached = functools.lru_cache(maxsize=1024)(fn)

    @functools.wraps(fn)
    def wrapper(t: pa.DataType):
        try:
            return cached(t)
        except TypeError:  # unhashable (raised before any call of fn)
            return fn(t)

    return wrapper


@dataclass
class LanceField:
    """One Lance field with its children.  Treat it as immutable once built: the Arrow type
    is computed once and cached."""

    id: int
    parent_id: int
    name: str
    logical_type: str
    nullable: bool = True
    metadata: dict[str, bytes] = field(default_factory=dict)
    encoding: int = ENCODING_NONE
    children: list[LanceField] = field(default_factory=list)
    unenforced_primary_key: bool = False
    unenforced_primary_key_position: int = 0
    _arrow: pa.Field | None = field(default=None, init=False, repr=False, compare=False)
    _dataset_arrow: pa.Field | None = field(default=None, init=False, repr=False, compare=False)

    # -- Arrow ----------------------------------------------------------------------------

    def _raw_arrow(self, json_text: bool = False) -> pa.Field:
        """The Arrow field, extension metadata left as metadata; ``json_text`` turns
        ``lance.json`` (JSONB bytes) into ``arrow.json`` text, as datasets return it."""
        if json_text and self.logical_type == "json":
            return pa.field(self.name, pa.json_(pa.string()), self.nullable)
        md = {k.encode(): v for k, v in self.metadata.items()} or None
        return pa.field(self.name, self._raw_type(json_text), self.nullable, md)

    def _raw_type(self, json_text: bool = False) -> pa.DataType:
        lt = self.logical_type
        kids = self.children
        if lt in ("list", "list.struct", "large_list", "large_list.struct"):
            if len(kids) != 1:
                raise SchemaError(
                    f"{lt} field has {len(kids)} children, expected 1", column=self.name
                )
            item = kids[0]._raw_arrow(json_text)
            return pa.list_(item) if lt.startswith("list") else pa.large_list(item)
        if lt == "struct":
            return pa.struct([c._raw_arrow(json_text) for c in kids])
        if lt == "map":
            if len(kids) != 1 or kids[0].logical_type != "struct" or len(kids[0].children) != 2:
                raise SchemaError(
                    "map field must have one entries struct with two children", column=self.name
                )
            key, value = (c._raw_arrow(json_text) for c in kids[0].children)
            if key.nullable:
                raise SchemaError("map keys must be non-nullable", column=self.name)
            try:
                return pa.map_(key, value)
            except (pa.ArrowException, TypeError, ValueError) as exc:
                raise SchemaError(f"invalid map: {exc}", column=self.name) from None
        if lt.startswith("fixed_size_list:") and kids:
            # pylance 14 keeps a child field for fixed-size lists of structs.
            if len(kids) != 1:
                raise SchemaError(
                    f"{lt} field has {len(kids)} children, expected 1", column=self.name
                )
            size = _int_or_error(lt.rsplit(":", 1)[-1], "list size", self.name)
            if size < 0:
                raise SchemaError(f"negative fixed_size_list size in {lt!r}", column=self.name)
            return pa.list_(kids[0]._raw_arrow(json_text), size)
        if kids:
            raise SchemaError(f"field of type {lt!r} cannot have children", column=self.name)
        return parse_logical_type(lt, self.name)

    def to_arrow(self) -> pa.Field:
        """The Arrow field a data file holds, with field metadata (bytes) and registered
        extension types."""
        if self._arrow is None:
            self._arrow = self._resolved(self._raw_arrow())
        return self._arrow

    def to_dataset_arrow(self) -> pa.Field:
        """The Arrow field a dataset read returns: :meth:`to_arrow` with ``lance.json``
        columns as ``arrow.json`` text, as pylance presents them."""
        if self._dataset_arrow is None:  # once per field: every take and scan asks
            self._dataset_arrow = (
                self._resolved(self._raw_arrow(json_text=True))
                if self.has_json()
                else self.to_arrow()
            )
        return self._dataset_arrow

    def _resolved(self, f: pa.Field) -> pa.Field:
        if _has_extension(self):
            try:
                return _resolve_extensions(pa.schema([f])).field(0)
            except (pa.ArrowException, ValueError, TypeError):
                pass  # keep the plain storage type with its metadata
        return f

    def has_json(self) -> bool:
        """Whether this field or one below it is a ``lance.json`` column."""
        return any(f.logical_type == "json" for f in self.walk())

    @property
    def arrow_type(self) -> pa.DataType:
        return self.to_arrow().type

    # -- flags ----------------------------------------------------------------------------

    def is_packed_struct(self) -> bool:
        """Packed structs store all children row-major in one column (metadata opt-in)."""
        return self.logical_type == "struct" and any(
            _truthy(self.metadata.get(k)) for k in PACKED_KEYS
        )

    def is_blob(self) -> bool:
        """A blob column: ``lance-encoding:blob=true`` (2.0/2.1 large_binary, the 2.2
        data-file descriptor struct) or the 2.2 table-level ``lance.blob.v2`` struct."""
        if _truthy(self.metadata.get(BLOB_KEY)):
            return True
        ext = self.metadata.get(EXT_NAME_KEY)
        return ext is not None and ext.decode("utf-8", "replace") == BLOB_V2_EXT_NAME

    def walk(self) -> Iterator[LanceField]:
        """Depth-first, this field first."""
        yield self
        for c in self.children:
            yield from c.walk()

    def child(self, name: str) -> LanceField | None:
        for c in self.children:
            if c.name == name:
                return c
        return None

    # -- protobuf -------------------------------------------------------------------------

    def to_proto(self) -> file_pb2.Field:
        """This field alone (no children) as pylance writes it."""
        pb = file_pb2.Field(
            type=file_pb2.Field.PARENT,
            name=self.name,
            id=self.id,
            parent_id=self.parent_id,
            logical_type=self.logical_type,
            nullable=self.nullable,
            # a protobuf enum field takes the plain int at runtime
            encoding=cast("file_pb2.Encoding", self.encoding),
        )
        for k, v in self.metadata.items():
            pb.metadata[k] = v
        ext = self.metadata.get(EXT_NAME_KEY)
        if ext:
            pb.extension_name = ext.decode("utf-8", "replace")
        if self.unenforced_primary_key:
            pb.unenforced_primary_key = True
            pb.unenforced_primary_key_position = self.unenforced_primary_key_position
        return pb

    @classmethod
    def from_proto(cls, pb: file_pb2.Field) -> LanceField:
        metadata = dict(pb.metadata)
        if pb.extension_name and EXT_NAME_KEY not in metadata:
            metadata[EXT_NAME_KEY] = pb.extension_name.encode()
        return cls(
            id=int(pb.id),
            parent_id=int(pb.parent_id),
            name=pb.name,
            logical_type=pb.logical_type,
            nullable=bool(pb.nullable),
            metadata=metadata,
            encoding=int(pb.encoding),
            unenforced_primary_key=bool(pb.unenforced_primary_key),
            unenforced_primary_key_position=int(pb.unenforced_primary_key_position),
        )

    @classmethod
    def from_arrow(cls, f: pa.Field, next_id: list[int], parent_id: int) -> LanceField:
        """Assign ids depth-first; ``next_id`` is a one-element counter shared by the walk."""
        t = f.type
        metadata = _utf8_metadata(f.metadata, f"field {f.name!r}")
        if isinstance(t, pa.BaseExtensionType):
            metadata.update(_utf8_metadata(_extension_metadata(t), f"field {f.name!r}"))
            t = t.storage_type
        _check_list_sizes(t, f.name)
        ext = metadata.get(EXT_NAME_KEY)
        if ext == ARROW_JSON_EXT_NAME.encode() or (
            ext == JSON_EXT_NAME.encode() and pa.types.is_large_binary(t)
        ):
            # pylance stores arrow.json as lance.json (JSONB in large_binary)
            lt = "json"
            metadata[EXT_NAME_KEY] = JSON_EXT_NAME.encode()
            metadata[EXT_META_KEY] = b""
            t = pa.large_binary()
        else:
            lt = logical_type_of(t, f.name)
        me = cls(
            id=next_id[0],
            parent_id=parent_id,
            name=f.name,
            logical_type=lt,
            nullable=f.nullable,
            metadata=metadata,
            encoding=_encoding_hint(t),
        )
        next_id[0] += 1
        kids: list[pa.Field] = []
        if pa.types.is_struct(t):
            kids = [t.field(i) for i in range(t.num_fields)]
        elif pa.types.is_map(t):
            if t.keys_sorted:
                raise SchemaError("maps with keys_sorted=true are not supported", column=f.name)
            kids = [pa.field("entries", pa.struct([t.key_field, t.item_field]), False)]
        elif pa.types.is_list(t) or pa.types.is_large_list(t):
            kids = [t.value_field]
        elif pa.types.is_fixed_size_list(t):
            if pa.types.is_struct(_storage(t.value_type)):
                kids = [t.value_field]
            elif _has_nested(t.value_type):
                raise SchemaError(
                    f"fixed_size_list of {t.value_type} is not supported", column=f.name
                )
        me.children = [cls.from_arrow(k, next_id, me.id) for k in kids]
        return me


def _utf8_metadata(metadata: Mapping | None, owner: str) -> dict[str, bytes]:
    """Arrow metadata with text keys; keys and values must be UTF-8, as Lance stores text
    (pylance refuses anything else rather than read it back with replacement characters)."""
    out: dict[str, bytes] = {}
    for key, value in (metadata or {}).items():
        raw_key = key.encode() if isinstance(key, str) else bytes(key)
        raw_value = value.encode() if isinstance(value, str) else bytes(value)
        try:
            text_key = raw_key.decode("utf-8")
            raw_value.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidArgumentError(
                f"the metadata of {owner} is not valid UTF-8 (key {raw_key!r}); "
                "encode binary metadata, e.g. as base64"
            ) from None
        out[text_key] = raw_value
    return out


def _check_list_sizes(t: pa.DataType, name: str) -> None:
    """A fixed-size list of 0 items cannot be stored (its values take no room, so readers
    cannot size it); pylance refuses it at any depth of fixed-size lists too."""
    while True:
        if isinstance(t, pa.BaseExtensionType):
            t = t.storage_type
        if not pa.types.is_fixed_size_list(t):
            return
        if t.list_size <= 0:
            raise InvalidDataError(
                f"fixed-size list of {t.value_type} has dimension {t.list_size}; "
                "the dimension must be a positive integer",
                column=name,
            )
        t = t.value_type


def _has_nested(t: pa.DataType) -> bool:
    """Whether an FSL item type needs child fields that a logical type string cannot hold."""
    t = _storage(t)
    if pa.types.is_fixed_size_list(t):
        return _has_nested(t.value_type)
    return pa.types.is_nested(t) and not pa.types.is_fixed_size_list(t)


# The data-file descriptor of a 2.2 blob v2 column (docs/format/structural.md): (name, logical
# type).
BLOB_V2_DESCRIPTOR = (
    ("kind", "uint8"),
    ("position", "uint64"),
    ("size", "uint64"),
    ("blob_id", "uint32"),
    ("blob_uri", "string"),
)
# ids the table schema gives a blob v2 column's children (``data``, ``uri``); the data file
# leaves them unused so its ids match the manifest's
BLOB_V2_TABLE_CHILDREN = 2


# what a read of a 2.0/2.1 blob column returns in descriptor mode (pylance's scans): where
# each value's bytes sit in the data file
LEGACY_BLOB_DESCRIPTOR = pa.struct([("position", pa.uint64()), ("size", pa.uint64())])


def is_legacy_blob(f: LanceField) -> bool:
    """A 2.0/2.1 blob column: binary marked ``lance-encoding:blob`` whose bytes sit in the
    data file beside (position, size) descriptors."""
    return is_blob_leaf(f) and not is_blob_v2_column(f)


def is_blob_leaf(f: LanceField) -> bool:
    """A binary column marked ``lance-encoding:blob`` (what blob v2 turns into descriptors)."""
    return f.logical_type in ("binary", "large_binary") and _truthy(f.metadata.get(BLOB_KEY))


def blob_v2_descriptor_field(f: LanceField, new_id: int, parent_id: int) -> LanceField:
    """The data-file field of a blob v2 column: a packed ``struct`` whose descriptor children
    have ``id = parent_id = -1``; pylance keeps no other field metadata."""
    kids = [
        LanceField(
            id=-1,
            parent_id=-1,
            name=name,
            logical_type=lt,
            nullable=False,
            encoding=_encoding_hint(parse_logical_type(lt)),
        )
        for name, lt in BLOB_V2_DESCRIPTOR
    ]
    return LanceField(
        id=new_id,
        parent_id=parent_id,
        name=f.name,
        logical_type="struct",
        nullable=f.nullable,
        metadata={BLOB_KEY: b"true", PACKED_KEYS[1]: b"true"},
        encoding=ENCODING_NONE,
        children=kids,
    )


def blob_v2_file_schema(schema: LanceSchema, keep_ids: bool = False) -> LanceSchema:
    """The FileDescriptor schema pylance 14 writes for a 2.2 dataset with blob v2 columns.

    Every blob leaf becomes its descriptor struct, and the ids are those of the table
    schema, where a blob column is ``struct<data, uri>`` and so takes two more ids than in
    ``schema`` (a field after a blob column keeps the manifest's id).  ``keep_ids``: the
    ids of ``schema`` are already the manifest's (a dataset's own schema, see
    :func:`blob_v2_leaf_schema`)."""
    counter = [schema.fields[0].id if schema.fields else 0]

    def convert(f: LanceField, parent_id: int) -> LanceField:
        new_id = f.id if keep_ids else counter[0]
        counter[0] += 1
        if is_blob_leaf(f):
            counter[0] += BLOB_V2_TABLE_CHILDREN
            return blob_v2_descriptor_field(f, new_id, parent_id)
        kids = [convert(c, new_id) for c in f.children]
        return replace(f, id=new_id, parent_id=parent_id, children=kids)

    return LanceSchema([convert(f, -1) for f in schema.fields], dict(schema.metadata))


def _dataset_arrow(schema: LanceSchema) -> pa.Schema:
    md = {k.encode(): v for k, v in schema.metadata.items()} or None
    return pa.schema([f.to_dataset_arrow() for f in schema.fields], metadata=md)


def is_blob_v2_column(f: LanceField) -> bool:
    """A table-level blob v2 column: the ``lance.blob.v2`` struct (``data``, ``uri``, and in
    pylance's ``blob_field`` also ``position``, ``size``)."""
    ext = f.metadata.get(EXT_NAME_KEY)
    return f.logical_type == "struct" and ext is not None and ext.decode() == BLOB_V2_EXT_NAME


def blob_v2_leaf_schema(schema: LanceSchema) -> LanceSchema:
    """A dataset schema with each blob v2 column as the ``lance-encoding:blob`` binary leaf
    the file writer takes (same ids; the size thresholds kept)."""
    fields = []
    for f in schema.fields:
        if is_blob_v2_column(f):
            md = {k: v for k, v in f.metadata.items() if not k.startswith("ARROW:extension")}
            md[BLOB_KEY] = b"true"
            f = LanceField(
                id=f.id,
                parent_id=f.parent_id,
                name=f.name,
                logical_type="large_binary",
                nullable=f.nullable,
                metadata=md,
                encoding=_encoding_hint(pa.large_binary()),
            )
        fields.append(f)
    return LanceSchema(fields, dict(schema.metadata))


_PATH_TOKEN = re.compile(r"`((?:[^`]|``)*)`|([^.`]+)")


def split_path(path: str) -> list[str]:
    """Split ``a.b.c``; a part may be back-quoted to contain dots (``a.`x.y```)."""
    parts: list[str] = []
    pos = 0
    while pos <= len(path):
        m = _PATH_TOKEN.match(path, pos)
        if m is None:
            raise InvalidArgumentError(f"invalid field path {path!r}")
        parts.append(m.group(1).replace("``", "`") if m.group(1) is not None else m.group(2))
        pos = m.end()
        if pos == len(path):
            return parts
        if path[pos] != ".":
            raise InvalidArgumentError(f"invalid field path {path!r}")
        pos += 1
    raise InvalidArgumentError(f"invalid field path {path!r}")


@dataclass
class LanceSchema:
    fields: list[LanceField]
    metadata: dict[str, bytes] = field(default_factory=dict)

    # -- protobuf -------------------------------------------------------------------------

    @classmethod
    def from_protos(
        cls, fields: Sequence[file_pb2.Field], metadata: Mapping[str, bytes] | None = None
    ) -> LanceSchema:
        """Rebuild the tree from the flat depth-first list, validating every type.

        The same protos give the same (shared, never modified) schema: every commit reads
        the dataset's schema again, and building it costs ten times its cache key."""
        key = (
            tuple(map(file_pb2.Field.SerializeToString, fields)),  # (no Python frame a field)
            tuple(sorted((k, bytes(v)) for k, v in (metadata or {}).items())),
        )
        return _schema_of_protos(*key)

    @classmethod
    def _build(cls, fields: Sequence[file_pb2.Field], metadata: Mapping[str, bytes]) -> LanceSchema:
        top: list[LanceField] = []
        by_id: dict[int, LanceField] = {}
        blob_parent: LanceField | None = None
        for pb in fields:
            f = LanceField.from_proto(pb)
            if f.id == -1 and f.parent_id == -1 and blob_parent is not None:
                # 2.2 blob descriptor children are written with id = parent_id = -1
                # (docs/format/structural.md)
                blob_parent.children.append(f)
                continue
            blob_parent = None
            if f.id != -1:
                if f.id in by_id:
                    raise SchemaError(f"duplicate field id {f.id}", column=f.name)
                by_id[f.id] = f
            if f.parent_id == -1:
                top.append(f)
            else:
                parent = by_id.get(f.parent_id)
                if parent is None:
                    raise SchemaError(
                        f"parent id {f.parent_id} is not an earlier field", column=f.name
                    )
                parent.children.append(f)
            if f.logical_type == "struct" and f.is_blob() and f.is_packed_struct():
                blob_parent = f
        schema = cls(top, {k: bytes(v) for k, v in metadata.items()})
        for f in top:
            try:
                f._raw_arrow()
            except SchemaError as exc:
                raise exc.with_context(column=f.name) from None
        return schema

    def to_protos(self) -> list[file_pb2.Field]:
        return [f.to_proto() for top in self.fields for f in top.walk()]

    def to_proto_schema(self) -> file_pb2.Schema:
        pb = file_pb2.Schema(fields=self.to_protos())
        for k, v in self.metadata.items():
            pb.metadata[k] = v
        return pb

    # -- Arrow ----------------------------------------------------------------------------

    @classmethod
    def from_arrow(cls, schema: pa.Schema, first_id: int = 0) -> LanceSchema:
        counter = [first_id]
        fields = [LanceField.from_arrow(f, counter, -1) for f in schema]
        return cls(fields, _utf8_metadata(schema.metadata, "the schema"))

    def to_arrow(self) -> pa.Schema:
        md = {k.encode(): v for k, v in self.metadata.items()} or None
        return pa.schema([f.to_arrow() for f in self.fields], metadata=md)

    @classmethod
    def from_pyarrow(cls, schema: pa.Schema) -> LanceSchema:
        """pylance's name for :meth:`from_arrow`."""
        return cls.from_arrow(schema)

    def to_pyarrow(self) -> pa.Schema:
        """pylance's name for :meth:`to_arrow`."""
        return self.to_arrow()

    def to_dataset_arrow(self) -> pa.Schema:
        """The schema a dataset read returns (see :meth:`LanceField.to_dataset_arrow`);
        kept (see :meth:`memo`) with the metadata it was made with, the one part of a
        schema that callers may change."""
        return self.memo(("dataset_arrow", tuple(self.metadata.items())), _dataset_arrow)

    def memo(self, key: object, build: Callable[[LanceSchema], T]) -> T:
        """``build(self)``, kept on the schema under ``key``: its fields are never changed
        once built, and a dataset's every write asks the same questions of its one schema
        (a small append's setup asked them of every field each time)."""
        kept = self.__dict__.setdefault("_memo", {})
        if key not in kept:
            kept[key] = build(self)
        return kept[key]

    @property
    def has_blob_v2(self) -> bool:
        """Whether a top-level field is a blob v2 column (see :func:`is_blob_v2_column`)."""
        return self.memo("has_blob_v2", lambda s: any(map(is_blob_v2_column, s.fields)))

    # -- lookup ---------------------------------------------------------------------------

    def walk(self) -> Iterator[LanceField]:
        for f in self.fields:
            yield from f.walk()

    def field_by_id(self, field_id: int) -> LanceField:
        for f in self.walk():
            if f.id == field_id:
                return f
        raise InvalidArgumentError(f"no field with id {field_id}")

    def _chain(self, path: str) -> list[LanceField]:
        """The fields from the top level down to ``path``."""
        for f in self.fields:  # a top-level name may itself contain dots
            if f.name == path:
                return [f]
        names = split_path(path)
        chain: list[LanceField] = []
        candidates = self.fields
        for name in names:
            found = next((c for c in candidates if c.name == name), None)
            if found is None:
                raise InvalidArgumentError(f"no field {path!r} in the schema")
            chain.append(found)
            candidates = found.children
        return chain

    def field_by_path(self, path: str) -> LanceField:
        return self._chain(path)[-1]

    def project(self, paths: Sequence[str]) -> LanceSchema:
        """Keep the named fields (with all their children) and the parents leading to them.

        Top-level fields come in the order they are first named (as pylance's projections
        do); children keep schema order.  A map can only be projected whole (its entries
        need both key and value)."""
        selected: set[int] = set()  # python ids of chosen fields
        on_path: set[int] = set()
        order: list[LanceField] = []
        for p in paths:
            chain = self._chain(p)
            selected.add(id(chain[-1]))
            on_path.update(id(f) for f in chain[:-1])
            if not any(f is chain[0] for f in order):
                order.append(chain[0])

        def prune(f: LanceField) -> LanceField | None:
            if id(f) in selected:
                return f
            if id(f) not in on_path:
                return None
            kids = [k for k in (prune(c) for c in f.children) if k is not None]
            if f.logical_type == "map" and (len(kids) != 1 or len(kids[0].children) != 2):
                raise InvalidArgumentError(f"cannot project part of map field {f.name!r}")
            out = replace(f, children=kids)
            return out

        fields = [k for k in (prune(f) for f in order) if k is not None]
        return LanceSchema(fields, dict(self.metadata))


@functools.lru_cache(maxsize=64)
def _schema_of_protos(
    fields: tuple[bytes, ...], metadata: tuple[tuple[str, bytes], ...]
) -> LanceSchema:
    return LanceSchema._build([file_pb2.Field.FromString(b) for b in fields], dict(metadata))
