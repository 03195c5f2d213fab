"""What ``CommandGetSqlInfo`` reports: the server and the SQL dialect (DuckDB's), truthfully.

Each value goes into the member of the spec's dense union that its code calls for: strings
(type code 0), booleans (1), int64 for the ``SQL_MAX_*`` limits (2), int32 for ordinals and
bitmasks (3), string lists (4) and the int32 -> list<int32> conversion map (5).  The ADBC
driver reads code 8 (transactions) from the int32 member, and codes 0..7 only from the string
and boolean members.

Facts reported (beyond names and versions): not read-only (DELETE and bulk ingest change
data), SQL yes, Substrait no, transactions NONE (each statement commits on its own, so the
ADBC dbapi warns that autocommit cannot be disabled instead of calling BeginTransaction),
cancellation yes (running result streams), bulk ingestion yes without transactions; DuckDB's
syntax: identifiers quoted with ``"`` and case-insensitive (quoted ones too), NULLs sort last,
ANSI-92 entry and intermediate levels, ODBC minimum and core grammar, full outer joins.
The Substrait version codes (6, 7) are left out: there is no Substrait support to describe.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

import duckdb
import pyarrow as pa

from . import flight_sql_pb2 as pb

__all__ = ["SQL_INFO_SCHEMA", "info_table", "info_values"]

SERVER_NAME = "lance-flight"

_STRING, _BOOL, _INT64, _INT32, _LIST, _MAP = range(6)

_UNION = pa.dense_union(
    [
        pa.field("string_value", pa.string()),
        pa.field("bool_value", pa.bool_()),
        pa.field("bigint_value", pa.int64()),
        pa.field("int32_bitmask", pa.int32()),
        pa.field("string_list", pa.list_(pa.field("item", pa.string()))),
        pa.field(
            "int32_to_int32_list_map",
            pa.map_(pa.int32(), pa.list_(pa.field("item", pa.int32()))),
        ),
    ],
    type_codes=[_STRING, _BOOL, _INT64, _INT32, _LIST, _MAP],
)

#: The result schema of CommandGetSqlInfo, as FlightSql.proto gives it.
SQL_INFO_SCHEMA = pa.schema(
    [pa.field("info_name", pa.uint32(), nullable=False), pa.field("value", _UNION, nullable=False)]
)


def _bits(*positions: int) -> int:
    out = 0
    for p in positions:
        out |= 1 << p
    return out


I = pb.SqlInfo  # noqa: E741 - short alias for the table below

# ODBC scalar function names DuckDB implements (checked against duckdb_functions() in tests).
NUMERIC_FUNCTIONS = [
    "abs", "acos", "asin", "atan", "atan2", "ceil", "ceiling", "cos", "cot", "degrees",
    "exp", "floor", "ln", "log", "log10", "log2", "mod", "pi", "pow", "power", "radians",
    "random", "round", "sign", "sin", "sqrt", "tan", "trunc",
]  # fmt: skip
STRING_FUNCTIONS = [
    "ascii", "bit_length", "char_length", "character_length", "chr", "concat", "left",
    "length", "lower", "lpad", "ltrim", "octet_length", "position", "repeat", "replace",
    "reverse", "right", "rpad", "rtrim", "strpos", "substr", "substring", "trim", "upper",
]  # fmt: skip
SYSTEM_FUNCTIONS = ["coalesce", "current_database", "current_schema", "ifnull", "nullif", "version"]
DATETIME_FUNCTIONS = [
    "current_date", "current_time", "current_timestamp", "date_add", "date_diff",
    "date_part", "date_sub", "date_trunc", "dayname", "dayofmonth", "dayofweek", "dayofyear",
    "extract", "hour", "minute", "month", "monthname", "now", "quarter", "second", "week",
    "year",
]  # fmt: skip

# SQL_SUPPORTS_CONVERT: CAST(x AS y) works in DuckDB between these ODBC type families.
_C = pb.SqlSupportsConvert
_NUMBERS = [
    _C.SQL_CONVERT_BIGINT, _C.SQL_CONVERT_BIT, _C.SQL_CONVERT_DECIMAL, _C.SQL_CONVERT_FLOAT,
    _C.SQL_CONVERT_INTEGER, _C.SQL_CONVERT_NUMERIC, _C.SQL_CONVERT_REAL,
    _C.SQL_CONVERT_SMALLINT, _C.SQL_CONVERT_TINYINT,
]  # fmt: skip
_TEXT = [_C.SQL_CONVERT_CHAR, _C.SQL_CONVERT_VARCHAR, _C.SQL_CONVERT_LONGVARCHAR]
_BINARY = [_C.SQL_CONVERT_BINARY, _C.SQL_CONVERT_VARBINARY, _C.SQL_CONVERT_LONGVARBINARY]
_TEMPORAL = [_C.SQL_CONVERT_DATE, _C.SQL_CONVERT_TIME, _C.SQL_CONVERT_TIMESTAMP]


def _conversions() -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for t in _NUMBERS:
        out[t] = sorted(_NUMBERS + _TEXT)
    for t in _TEXT:
        out[t] = sorted(_NUMBERS + _TEXT + _BINARY + _TEMPORAL)
    for t in _BINARY:
        out[t] = sorted(_BINARY + _TEXT)
    out[_C.SQL_CONVERT_DATE] = sorted([_C.SQL_CONVERT_DATE, _C.SQL_CONVERT_TIMESTAMP] + _TEXT)
    out[_C.SQL_CONVERT_TIME] = sorted([_C.SQL_CONVERT_TIME] + _TEXT)
    out[_C.SQL_CONVERT_TIMESTAMP] = sorted(_TEMPORAL + _TEXT)
    return out


@functools.cache
def _keywords() -> list[str]:
    """DuckDB's reserved and unreserved keywords, from DuckDB itself."""
    con = duckdb.connect(":memory:")
    try:
        rows = con.sql("SELECT keyword_name FROM duckdb_keywords() ORDER BY 1").fetchall()
    finally:
        con.close()
    return [r[0].upper() for r in rows]


def _server_version() -> str:
    try:
        from importlib.metadata import version

        return version("lance-flight")
    except Exception:  # not installed (running from a checkout)
        return "0.1.0"


@functools.cache
def info_values() -> dict[int, tuple[int, object]]:
    """Every code this server reports -> (union type code, value)."""
    T = pb.SqlTransactionIsolationLevel
    values: dict[int, tuple[int, object]] = {
        I.FLIGHT_SQL_SERVER_NAME: (_STRING, SERVER_NAME),
        I.FLIGHT_SQL_SERVER_VERSION: (_STRING, _server_version()),
        I.FLIGHT_SQL_SERVER_ARROW_VERSION: (_STRING, pa.__version__),
        I.FLIGHT_SQL_SERVER_READ_ONLY: (_BOOL, False),
        I.FLIGHT_SQL_SERVER_SQL: (_BOOL, True),
        I.FLIGHT_SQL_SERVER_SUBSTRAIT: (_BOOL, False),
        I.FLIGHT_SQL_SERVER_TRANSACTION: (
            _INT32,
            pb.SqlSupportedTransaction.SQL_SUPPORTED_TRANSACTION_NONE,
        ),
        I.FLIGHT_SQL_SERVER_CANCEL: (_BOOL, True),
        I.FLIGHT_SQL_SERVER_BULK_INGESTION: (_BOOL, True),
        I.FLIGHT_SQL_SERVER_INGEST_TRANSACTIONS_SUPPORTED: (_BOOL, False),
        I.FLIGHT_SQL_SERVER_STATEMENT_TIMEOUT: (_INT32, 0),
        I.FLIGHT_SQL_SERVER_TRANSACTION_TIMEOUT: (_INT32, 0),
        I.SQL_DDL_CATALOG: (_BOOL, False),
        I.SQL_DDL_SCHEMA: (_BOOL, False),
        I.SQL_DDL_TABLE: (_BOOL, False),
        I.SQL_IDENTIFIER_CASE: (
            _INT32,
            pb.SqlSupportedCaseSensitivity.SQL_CASE_SENSITIVITY_CASE_INSENSITIVE,
        ),
        I.SQL_IDENTIFIER_QUOTE_CHAR: (_STRING, '"'),
        I.SQL_QUOTED_IDENTIFIER_CASE: (
            _INT32,
            pb.SqlSupportedCaseSensitivity.SQL_CASE_SENSITIVITY_CASE_INSENSITIVE,
        ),
        I.SQL_ALL_TABLES_ARE_SELECTABLE: (_BOOL, True),
        I.SQL_NULL_ORDERING: (_INT32, pb.SqlNullOrdering.SQL_NULLS_SORTED_AT_END),
        I.SQL_KEYWORDS: (_LIST, _keywords()),
        I.SQL_NUMERIC_FUNCTIONS: (_LIST, [f.upper() for f in NUMERIC_FUNCTIONS]),
        I.SQL_STRING_FUNCTIONS: (_LIST, [f.upper() for f in STRING_FUNCTIONS]),
        I.SQL_SYSTEM_FUNCTIONS: (_LIST, [f.upper() for f in SYSTEM_FUNCTIONS]),
        I.SQL_DATETIME_FUNCTIONS: (_LIST, [f.upper() for f in DATETIME_FUNCTIONS]),
        I.SQL_SEARCH_STRING_ESCAPE: (_STRING, "\\"),
        I.SQL_EXTRA_NAME_CHARACTERS: (_STRING, ""),
        I.SQL_SUPPORTS_COLUMN_ALIASING: (_BOOL, True),
        I.SQL_NULL_PLUS_NULL_IS_NULL: (_BOOL, True),
        I.SQL_SUPPORTS_CONVERT: (_MAP, _conversions()),
        I.SQL_SUPPORTS_TABLE_CORRELATION_NAMES: (_BOOL, True),
        I.SQL_SUPPORTS_DIFFERENT_TABLE_CORRELATION_NAMES: (_BOOL, False),
        I.SQL_SUPPORTS_EXPRESSIONS_IN_ORDER_BY: (_BOOL, True),
        I.SQL_SUPPORTS_ORDER_BY_UNRELATED: (_BOOL, True),
        I.SQL_SUPPORTED_GROUP_BY: (
            _INT32,
            _bits(
                pb.SqlSupportedGroupBy.SQL_GROUP_BY_UNRELATED,
                pb.SqlSupportedGroupBy.SQL_GROUP_BY_BEYOND_SELECT,
            ),
        ),
        I.SQL_SUPPORTS_LIKE_ESCAPE_CLAUSE: (_BOOL, True),
        I.SQL_SUPPORTS_NON_NULLABLE_COLUMNS: (_BOOL, True),
        I.SQL_SUPPORTED_GRAMMAR: (
            _INT32,
            _bits(
                pb.SupportedSqlGrammar.SQL_MINIMUM_GRAMMAR, pb.SupportedSqlGrammar.SQL_CORE_GRAMMAR
            ),
        ),
        I.SQL_ANSI92_SUPPORTED_LEVEL: (
            _INT32,
            _bits(
                pb.SupportedAnsi92SqlGrammarLevel.ANSI92_ENTRY_SQL,
                pb.SupportedAnsi92SqlGrammarLevel.ANSI92_INTERMEDIATE_SQL,
            ),
        ),
        I.SQL_SUPPORTS_INTEGRITY_ENHANCEMENT_FACILITY: (_BOOL, False),
        I.SQL_OUTER_JOINS_SUPPORT_LEVEL: (
            _INT32,
            pb.SqlOuterJoinsSupportLevel.SQL_FULL_OUTER_JOINS,
        ),
        I.SQL_SCHEMA_TERM: (_STRING, "schema"),
        I.SQL_PROCEDURE_TERM: (_STRING, "procedure"),
        I.SQL_CATALOG_TERM: (_STRING, "catalog"),
        I.SQL_CATALOG_AT_START: (_BOOL, True),
        I.SQL_SCHEMAS_SUPPORTED_ACTIONS: (_INT32, 0),
        I.SQL_CATALOGS_SUPPORTED_ACTIONS: (_INT32, 0),
        I.SQL_SUPPORTED_POSITIONED_COMMANDS: (_INT32, 0),
        I.SQL_SELECT_FOR_UPDATE_SUPPORTED: (_BOOL, False),
        I.SQL_STORED_PROCEDURES_SUPPORTED: (_BOOL, False),
        I.SQL_SUPPORTED_SUBQUERIES: (
            _INT32,
            _bits(
                pb.SqlSupportedSubqueries.SQL_SUBQUERIES_IN_COMPARISONS,
                pb.SqlSupportedSubqueries.SQL_SUBQUERIES_IN_EXISTS,
                pb.SqlSupportedSubqueries.SQL_SUBQUERIES_IN_INS,
                pb.SqlSupportedSubqueries.SQL_SUBQUERIES_IN_QUANTIFIEDS,
            ),
        ),
        I.SQL_CORRELATED_SUBQUERIES_SUPPORTED: (_BOOL, True),
        I.SQL_SUPPORTED_UNIONS: (
            _INT32,
            _bits(pb.SqlSupportedUnions.SQL_UNION, pb.SqlSupportedUnions.SQL_UNION_ALL),
        ),
        I.SQL_DEFAULT_TRANSACTION_ISOLATION: (_INT32, T.SQL_TRANSACTION_NONE),
        I.SQL_TRANSACTIONS_SUPPORTED: (_BOOL, False),
        I.SQL_SUPPORTED_TRANSACTIONS_ISOLATION_LEVELS: (_INT32, _bits(T.SQL_TRANSACTION_NONE)),
        I.SQL_DATA_DEFINITION_CAUSES_TRANSACTION_COMMIT: (_BOOL, False),
        I.SQL_DATA_DEFINITIONS_IN_TRANSACTIONS_IGNORED: (_BOOL, False),
        I.SQL_SUPPORTED_RESULT_SET_TYPES: (
            _INT32,
            _bits(pb.SqlSupportedResultSetType.SQL_RESULT_SET_TYPE_FORWARD_ONLY),
        ),
        I.SQL_SUPPORTED_CONCURRENCIES_FOR_RESULT_SET_UNSPECIFIED: (_INT32, 0),
        I.SQL_SUPPORTED_CONCURRENCIES_FOR_RESULT_SET_FORWARD_ONLY: (
            _INT32,
            _bits(pb.SqlSupportedResultSetConcurrency.SQL_RESULT_SET_CONCURRENCY_READ_ONLY),
        ),
        I.SQL_SUPPORTED_CONCURRENCIES_FOR_RESULT_SET_SCROLL_SENSITIVE: (_INT32, 0),
        I.SQL_SUPPORTED_CONCURRENCIES_FOR_RESULT_SET_SCROLL_INSENSITIVE: (_INT32, 0),
        I.SQL_BATCH_UPDATES_SUPPORTED: (_BOOL, True),
        I.SQL_SAVEPOINTS_SUPPORTED: (_BOOL, False),
        I.SQL_NAMED_PARAMETERS_SUPPORTED: (_BOOL, False),
        I.SQL_LOCATORS_UPDATE_COPY: (_BOOL, False),
        I.SQL_STORED_FUNCTIONS_USING_CALL_SYNTAX_SUPPORTED: (_BOOL, False),
    }
    # the SQL_MAX_* limits and SQL_DB_SCHEMA_NAME_LENGTH: 0 means no known limit
    for code in range(I.SQL_MAX_BINARY_LITERAL_LENGTH, I.SQL_MAX_USERNAME_LENGTH + 1):
        if code != I.SQL_MAX_ROW_SIZE_INCLUDES_BLOBS:
            values[code] = (_INT64, 0)
    values[I.SQL_MAX_ROW_SIZE_INCLUDES_BLOBS] = (_BOOL, False)
    return values


def info_table(codes: Iterable[int] = ()) -> pa.Table:
    """The CommandGetSqlInfo result for ``codes`` (all reported codes when empty), in the
    order asked; codes this server does not report are left out, as the spec allows."""
    values = info_values()
    wanted = list(codes) or sorted(values)
    rows = [(c, *values[c]) for c in wanted if c in values]
    kinds = [k for _, k, _ in rows]
    children: list[list[object]] = [[] for _ in range(6)]
    offsets = []
    for _, kind, value in rows:
        offsets.append(len(children[kind]))
        if kind == _MAP:
            assert isinstance(value, dict)  # the only map is SQL_SUPPORTS_CONVERT's
            value = list(value.items())
        children[kind].append(value)
    arrays = [pa.array(children[i], type=_UNION.field(i).type) for i in range(6)]
    union = pa.UnionArray.from_dense(
        pa.array(kinds, pa.int8()),
        pa.array(offsets, pa.int32()),
        arrays,
        [f.name for f in _UNION],
        list(_UNION.type_codes),
    )
    names = pa.array([c for c, _, _ in rows], pa.uint32())
    return pa.Table.from_arrays([names, union], schema=SQL_INFO_SCHEMA)
