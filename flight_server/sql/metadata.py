"""The catalog metadata commands: catalogs, schemas, tables, table types, keys, type info.

Result schemas are those of FlightSql.proto to the letter, nullability included: the ADBC
driver compares the schema it receives with its own copy and rejects any difference.  Rows
come sorted as the spec asks.  Lance datasets have no primary or foreign keys, so the key
commands answer with no rows (with the right schema).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

import pyarrow as pa

from . import flight_sql_pb2 as pb
from .naming import CATALOG, TABLE_TYPE, TableName, table_name

__all__ = [
    "CATALOGS_SCHEMA",
    "DB_SCHEMAS_SCHEMA",
    "KEYS_SCHEMA",
    "PRIMARY_KEYS_SCHEMA",
    "TABLES_SCHEMA",
    "TABLES_WITH_SCHEMA_SCHEMA",
    "TABLE_TYPES_SCHEMA",
    "XDBC_TYPE_INFO_SCHEMA",
    "catalogs",
    "db_schemas",
    "empty_keys",
    "like_matcher",
    "table_types",
    "tables",
    "xdbc_type_info",
]


def _f(name: str, typ: pa.DataType, nullable: bool = True) -> pa.Field:
    return pa.field(name, typ, nullable=nullable)


_S = pa.string()

CATALOGS_SCHEMA = pa.schema([_f("catalog_name", _S, False)])
DB_SCHEMAS_SCHEMA = pa.schema([_f("catalog_name", _S), _f("db_schema_name", _S, False)])
TABLES_SCHEMA = pa.schema(
    [
        _f("catalog_name", _S),
        _f("db_schema_name", _S),
        _f("table_name", _S, False),
        _f("table_type", _S, False),
    ]
)
TABLES_WITH_SCHEMA_SCHEMA = TABLES_SCHEMA.append(_f("table_schema", pa.binary(), False))
TABLE_TYPES_SCHEMA = pa.schema([_f("table_type", _S, False)])
PRIMARY_KEYS_SCHEMA = pa.schema(
    [
        _f("catalog_name", _S),
        _f("db_schema_name", _S),
        _f("table_name", _S, False),
        _f("column_name", _S, False),
        _f("key_name", _S),
        _f("key_sequence", pa.int32(), False),
    ]
)
#: CommandGetExportedKeys, CommandGetImportedKeys and CommandGetCrossReference.
KEYS_SCHEMA = pa.schema(
    [
        _f("pk_catalog_name", _S),
        _f("pk_db_schema_name", _S),
        _f("pk_table_name", _S, False),
        _f("pk_column_name", _S, False),
        _f("fk_catalog_name", _S),
        _f("fk_db_schema_name", _S),
        _f("fk_table_name", _S, False),
        _f("fk_column_name", _S, False),
        _f("key_sequence", pa.int32(), False),
        _f("fk_key_name", _S),
        _f("pk_key_name", _S),
        _f("update_rule", pa.uint8(), False),
        _f("delete_rule", pa.uint8(), False),
    ]
)
XDBC_TYPE_INFO_SCHEMA = pa.schema(
    [
        _f("type_name", _S, False),
        _f("data_type", pa.int32(), False),
        _f("column_size", pa.int32()),
        _f("literal_prefix", _S),
        _f("literal_suffix", _S),
        _f("create_params", pa.list_(pa.field("item", _S, nullable=False))),
        _f("nullable", pa.int32(), False),
        _f("case_sensitive", pa.bool_(), False),
        _f("searchable", pa.int32(), False),
        _f("unsigned_attribute", pa.bool_()),
        _f("fixed_prec_scale", pa.bool_(), False),
        _f("auto_increment", pa.bool_()),
        _f("local_type_name", _S),
        _f("minimum_scale", pa.int32()),
        _f("maximum_scale", pa.int32()),
        _f("sql_data_type", pa.int32(), False),
        _f("datetime_subcode", pa.int32()),
        _f("num_prec_radix", pa.int32()),
        _f("interval_precision", pa.int32()),
    ]
)


def like_matcher(pattern: str | None) -> Callable[[str], bool]:
    """A matcher for a Flight SQL filter pattern (``%`` any run, ``_`` one character, ``\\``
    escapes); no pattern matches everything.  Matching is case-sensitive, as in the spec."""
    if pattern is None:
        return lambda _: True
    out, i = [], 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        out.append(".*" if ch == "%" else "." if ch == "_" else re.escape(ch))
        i += 1
    regex = re.compile("".join(out), re.DOTALL)
    return lambda text: regex.fullmatch(text) is not None


def _catalog_ok(catalog: str | None) -> bool:
    """The spec: unset = any catalog, "" = tables without a catalog (none here)."""
    return catalog is None or catalog == CATALOG


def catalogs() -> pa.Table:
    return pa.Table.from_pylist([{"catalog_name": CATALOG}], schema=CATALOGS_SCHEMA)


def db_schemas(datasets: Iterable[str], catalog: str | None, pattern: str | None) -> pa.Table:
    match = like_matcher(pattern)
    names = sorted({table_name(d).db_schema for d in datasets}) if _catalog_ok(catalog) else []
    rows = [{"catalog_name": CATALOG, "db_schema_name": s} for s in names if match(s)]
    return pa.Table.from_pylist(rows, schema=DB_SCHEMAS_SCHEMA)


def tables(
    datasets: Iterable[str],
    catalog: str | None,
    schema_pattern: str | None,
    table_pattern: str | None,
    table_types: Iterable[str],
    schema_of: Callable[[TableName], pa.Schema] | None,
) -> pa.Table:
    """CommandGetTables; ``schema_of`` (when the client asked include_schema) gives each
    table's Arrow schema, serialised into ``table_schema``."""
    types = list(table_types)
    if not _catalog_ok(catalog) or (types and TABLE_TYPE not in types):
        names: list[TableName] = []
    else:
        match_schema, match_table = like_matcher(schema_pattern), like_matcher(table_pattern)
        names = [
            t
            for t in map(table_name, datasets)
            if match_schema(t.db_schema) and (match_table(t.table) or match_table(t.dataset))
        ]
    names.sort(key=lambda t: (t.db_schema, t.table))
    rows = []
    for t in names:
        row = {
            "catalog_name": t.catalog,
            "db_schema_name": t.db_schema,
            # a pattern naming the full dataset path gets that path back, so that clients
            # that look the row up by the name they asked for find it
            "table_name": t.dataset
            if (table_pattern == t.dataset and "/" in t.dataset)
            else t.table,
            "table_type": TABLE_TYPE,
        }
        if schema_of is not None:
            row["table_schema"] = annotate(schema_of(t), t).serialize().to_pybytes()
        rows.append(row)
    schema = TABLES_WITH_SCHEMA_SCHEMA if schema_of is not None else TABLES_SCHEMA
    return pa.Table.from_pylist(rows, schema=schema)


def annotate(schema: pa.Schema, name: TableName) -> pa.Schema:
    """Add the column metadata the spec defines (where it comes from, its SQL type name)."""
    fields = []
    for f in schema:
        meta = dict(f.metadata or {})
        meta.update(
            {
                b"ARROW:FLIGHT:SQL:CATALOG_NAME": name.catalog.encode(),
                # the spec's text says DB_SCHEMA_NAME; the Go, C++ and Java libraries (and
                # so the drivers) read SCHEMA_NAME: both are written
                b"ARROW:FLIGHT:SQL:DB_SCHEMA_NAME": name.db_schema.encode(),
                b"ARROW:FLIGHT:SQL:SCHEMA_NAME": name.db_schema.encode(),
                b"ARROW:FLIGHT:SQL:TABLE_NAME": name.table.encode(),
                b"ARROW:FLIGHT:SQL:TYPE_NAME": sql_type_name(f.type).encode(),
                b"ARROW:FLIGHT:SQL:IS_AUTO_INCREMENT": b"0",
                b"ARROW:FLIGHT:SQL:IS_SEARCHABLE": b"1",
            }
        )
        if pa.types.is_decimal(f.type):
            meta[b"ARROW:FLIGHT:SQL:PRECISION"] = str(f.type.precision).encode()
            meta[b"ARROW:FLIGHT:SQL:SCALE"] = str(f.type.scale).encode()
        fields.append(f.with_metadata(meta))
    return pa.schema(fields, metadata=schema.metadata)


def sql_type_name(t: pa.DataType) -> str:
    """DuckDB's name for the type an Arrow column reads as."""
    simple = {
        pa.bool_(): "BOOLEAN",
        pa.int8(): "TINYINT",
        pa.int16(): "SMALLINT",
        pa.int32(): "INTEGER",
        pa.int64(): "BIGINT",
        pa.uint8(): "UTINYINT",
        pa.uint16(): "USMALLINT",
        pa.uint32(): "UINTEGER",
        pa.uint64(): "UBIGINT",
        pa.float16(): "FLOAT",
        pa.float32(): "FLOAT",
        pa.float64(): "DOUBLE",
        pa.string(): "VARCHAR",
        pa.large_string(): "VARCHAR",
        pa.string_view(): "VARCHAR",
        pa.binary(): "BLOB",
        pa.large_binary(): "BLOB",
        pa.binary_view(): "BLOB",
        pa.date32(): "DATE",
        pa.date64(): "DATE",
    }
    if t in simple:
        return simple[t]
    if pa.types.is_decimal(t):
        return f"DECIMAL({t.precision},{t.scale})"
    if pa.types.is_timestamp(t):
        return "TIMESTAMP WITH TIME ZONE" if t.tz else "TIMESTAMP"
    if pa.types.is_time(t):
        return "TIME"
    if pa.types.is_fixed_size_binary(t):
        return "BLOB"
    if pa.types.is_fixed_size_list(t):
        return f"{sql_type_name(t.value_type)}[{t.list_size}]"
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_list_view(t):
        return f"{sql_type_name(t.value_type)}[]"
    if pa.types.is_struct(t):
        inner = ", ".join(
            f'"{t.field(i).name}" {sql_type_name(t.field(i).type)}' for i in range(t.num_fields)
        )
        return f"STRUCT({inner})"
    if pa.types.is_map(t):
        return f"MAP({sql_type_name(t.key_type)}, {sql_type_name(t.item_type)})"
    if pa.types.is_dictionary(t):
        return sql_type_name(t.value_type)
    if pa.types.is_duration(t):
        return "INTERVAL"
    return str(t).upper()


def table_types() -> pa.Table:
    return pa.Table.from_pylist([{"table_type": TABLE_TYPE}], schema=TABLE_TYPES_SCHEMA)


def empty_keys(primary: bool) -> pa.Table:
    return (PRIMARY_KEYS_SCHEMA if primary else KEYS_SCHEMA).empty_table()


X = pb.XdbcDataType
_SUB = pb.XdbcDatetimeSubcode
_NULLABLE = pb.Nullable.NULLABILITY_NULLABLE
_FULL, _BASIC = pb.Searchable.SEARCHABLE_FULL, pb.Searchable.SEARCHABLE_BASIC


def _type(
    name: str,
    data_type: int,
    *,
    size: int | None = None,
    prefix: str | None = None,
    suffix: str | None = None,
    params: list[str] | None = None,
    case_sensitive: bool = False,
    searchable: int = _BASIC,
    unsigned: bool | None = None,
    fixed: bool = False,
    auto_increment: bool | None = None,
    scale: tuple[int, int] | None = None,
    sql_data_type: int | None = None,
    subcode: int | None = None,
    radix: int | None = None,
) -> dict:
    return {
        "type_name": name,
        "data_type": data_type,
        "column_size": size,
        "literal_prefix": prefix,
        "literal_suffix": suffix,
        "create_params": params,
        "nullable": _NULLABLE,
        "case_sensitive": case_sensitive,
        "searchable": searchable,
        "unsigned_attribute": unsigned,
        "fixed_prec_scale": fixed,
        "auto_increment": auto_increment,
        "local_type_name": name,
        "minimum_scale": None if scale is None else scale[0],
        "maximum_scale": None if scale is None else scale[1],
        "sql_data_type": data_type if sql_data_type is None else sql_data_type,
        "datetime_subcode": subcode,
        "num_prec_radix": radix,
        "interval_precision": None,
    }


# The DuckDB types a Lance column reads as, with their JDBC/ODBC codes.
_TYPES = [
    _type("BOOLEAN", X.XDBC_BIT, size=1),
    _type("TINYINT", X.XDBC_TINYINT, size=3, unsigned=False, radix=10, scale=(0, 0), fixed=True),
    _type("SMALLINT", X.XDBC_SMALLINT, size=5, unsigned=False, radix=10, scale=(0, 0), fixed=True),
    _type("INTEGER", X.XDBC_INTEGER, size=10, unsigned=False, radix=10, scale=(0, 0), fixed=True),
    _type("BIGINT", X.XDBC_BIGINT, size=19, unsigned=False, radix=10, scale=(0, 0), fixed=True),
    _type("FLOAT", X.XDBC_REAL, size=24, unsigned=False, radix=2),
    _type("DOUBLE", X.XDBC_DOUBLE, size=53, unsigned=False, radix=2),
    _type(
        "DECIMAL",
        X.XDBC_DECIMAL,
        size=38,
        params=["precision", "scale"],
        unsigned=False,
        radix=10,
        scale=(0, 38),
    ),
    _type(
        "VARCHAR",
        X.XDBC_VARCHAR,
        prefix="'",
        suffix="'",
        case_sensitive=True,
        searchable=_FULL,
    ),
    _type("BLOB", X.XDBC_VARBINARY, prefix="'", suffix="'::BLOB"),
    _type(
        "DATE",
        X.XDBC_DATE,
        size=10,
        prefix="DATE '",
        suffix="'",
        sql_data_type=X.XDBC_DATETIME,
        subcode=_SUB.XDBC_SUBCODE_DATE,
    ),
    _type(
        "TIME",
        X.XDBC_TIME,
        size=15,
        prefix="TIME '",
        suffix="'",
        sql_data_type=X.XDBC_DATETIME,
        subcode=_SUB.XDBC_SUBCODE_TIME,
        scale=(0, 6),
    ),
    _type(
        "TIMESTAMP",
        X.XDBC_TIMESTAMP,
        size=26,
        prefix="TIMESTAMP '",
        suffix="'",
        sql_data_type=X.XDBC_DATETIME,
        subcode=_SUB.XDBC_SUBCODE_TIMESTAMP,
        scale=(0, 6),
    ),
]


def xdbc_type_info(data_type: int | None) -> pa.Table:
    """CommandGetXdbcTypeInfo, optionally for one data type; sorted by data_type, name."""
    rows = [r for r in _TYPES if data_type is None or r["data_type"] == data_type]
    rows.sort(key=lambda r: (r["data_type"], r["type_name"]))
    return pa.Table.from_pylist(rows, schema=XDBC_TYPE_INFO_SCHEMA)
