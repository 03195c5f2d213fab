"""Arrow schemas as the spec's ``JsonArrowSchema``, written the way pylance writes them.

Type names are Arrow's lower-case ones; fixed sizes travel in ``length`` (decimals as
``precision * 1000 + scale``), a dictionary is its value type, and units and time zones are
not carried (pylance 14 drops them too, so clients compare equal).
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pyarrow.types as pt
from lance_namespace.errors import ErrorCode

from .errors import RestError

_SIMPLE: list[tuple] = [
    (pt.is_null, "null"),
    (pt.is_boolean, "bool"),
    (pt.is_int8, "int8"),
    (pt.is_uint8, "uint8"),
    (pt.is_int16, "int16"),
    (pt.is_uint16, "uint16"),
    (pt.is_int32, "int32"),
    (pt.is_uint32, "uint32"),
    (pt.is_int64, "int64"),
    (pt.is_uint64, "uint64"),
    (pt.is_float16, "float16"),
    (pt.is_float32, "float32"),
    (pt.is_float64, "float64"),
    (pt.is_date32, "date32"),
    (pt.is_date64, "date64"),
    (pt.is_time32, "time32"),
    (pt.is_time64, "time64"),
    (pt.is_timestamp, "timestamp"),
    (pt.is_duration, "duration"),
    (pt.is_interval, "interval"),
    (pt.is_string, "utf8"),
    (pt.is_large_string, "large_utf8"),
    (pt.is_binary, "binary"),
    (pt.is_large_binary, "large_binary"),
]


def schema_to_json(schema: pa.Schema) -> dict:
    out: dict = {"fields": [field_to_json(f) for f in schema]}
    if schema.metadata:
        out["metadata"] = _text_map(schema.metadata)
    return out


def field_to_json(field: pa.Field) -> dict:
    out: dict = {"name": field.name, "nullable": field.nullable, "type": type_to_json(field.type)}
    if field.metadata:
        out["metadata"] = _text_map(field.metadata)
    return out


def type_to_json(t: pa.DataType) -> dict:
    for test, name in _SIMPLE:
        if test(t):
            return {"type": name}
    if pt.is_dictionary(t):
        return type_to_json(t.value_type)
    if pt.is_fixed_size_binary(t) and not pt.is_decimal(t):
        return {"type": "fixed_size_binary", "length": t.byte_width}
    if pt.is_decimal(t):
        return {"type": f"decimal{t.bit_width}", "length": t.precision * 1000 + t.scale}
    if pt.is_list(t):
        return {"type": "list", "fields": [field_to_json(t.value_field)]}
    if pt.is_large_list(t):
        return {"type": "large_list", "fields": [field_to_json(t.value_field)]}
    if pt.is_fixed_size_list(t):
        return {
            "type": "fixed_size_list",
            "fields": [field_to_json(t.value_field)],
            "length": t.list_size,
        }
    if pt.is_struct(t):
        return {
            "type": "struct",
            "fields": [field_to_json(t.field(i)) for i in range(t.num_fields)],
        }
    if pt.is_map(t):
        if t.keys_sorted:
            raise RestError(ErrorCode.INTERNAL, f"cannot describe a map with sorted keys ({t})")
        entries = pa.field("entries", pa.struct([t.key_field, t.item_field]), nullable=False)
        return {"type": "map", "fields": [field_to_json(entries)]}
    if pt.is_union(t):
        return {"type": "union"}
    raise RestError(ErrorCode.INTERNAL, f"cannot describe the Arrow type {t} as JSON")


# JSON names that name one Arrow type on their own (units and time zones are not carried,
# so temporal types other than dates cannot be named)
_BY_NAME: dict[str, pa.DataType] = {
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
    "float16": pa.float16(),
    "float32": pa.float32(),
    "float64": pa.float64(),
    "date32": pa.date32(),
    "date64": pa.date64(),
    "utf8": pa.string(),
    "large_utf8": pa.large_string(),
    "binary": pa.binary(),
    "large_binary": pa.large_binary(),
}


def type_from_json(value: Any) -> pa.DataType:
    """The Arrow type a ``JsonArrowDataType`` names, as :func:`type_to_json` writes them (a
    client's cast target). Types whose unit the JSON form drops are refused."""
    if not isinstance(value, dict) or not isinstance(value.get("type"), str):
        raise RestError(ErrorCode.INVALID_INPUT, "a data type is an object with a 'type' name")
    name, length, fields = value["type"], value.get("length"), value.get("fields") or []
    if name in _BY_NAME:
        return _BY_NAME[name]
    if name == "fixed_size_binary" and isinstance(length, int) and length > 0:
        return pa.binary(length)
    if name in ("decimal128", "decimal256") and isinstance(length, int) and length > 0:
        make = pa.decimal128 if name == "decimal128" else pa.decimal256
        try:
            return make(length // 1000, length % 1000)
        except (ValueError, pa.ArrowInvalid) as exc:
            raise RestError(ErrorCode.INVALID_INPUT, f"bad decimal type: {exc}") from None
    if name in ("list", "large_list", "fixed_size_list") and len(fields) == 1:
        item = fields[0] if isinstance(fields[0], dict) else {}
        value_field = pa.field(
            str(item.get("name", "item")),
            type_from_json(item.get("type")),
            bool(item.get("nullable", True)),
        )
        if name == "list":
            return pa.list_(value_field)
        if name == "large_list":
            return pa.large_list(value_field)
        if isinstance(length, int) and length > 0:
            return pa.list_(value_field, length)
    raise RestError(ErrorCode.INVALID_INPUT, f"cannot read the data type {json.dumps(value)}")


def _text_map(meta: dict) -> dict[str, str]:
    def text(v) -> str:
        return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)

    return {text(k): text(v) for k, v in meta.items()}
