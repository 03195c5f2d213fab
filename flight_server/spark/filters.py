"""Spark's pushed filters -> the SQL predicate our scanner evaluates on the server.

Spark (``pyspark.sql.datasource``, 4.1+) hands :meth:`DataSourceReader.pushFilters` a list of
filter objects (``EqualTo(("col",), 5)``, ``Not(In(...))``, ...) that are ANDed together.  A
filter we accept is *removed from Spark's plan*: Spark will not evaluate it again, so the SQL
we send must keep exactly Spark's semantics for every row, or rows silently change.  Anything
we cannot translate exactly is handed back to Spark, which then filters as usual.

Why the translation is exact:

* identifiers are always backtick-quoted (our dialect matches quoted names exactly, Spark's
  attribute names come from our own schema), so no case folding or keyword clash;
* string literals are single-quoted with ``''`` (backslash is an ordinary character there);
  LIKE patterns escape ``\\``, ``%`` and ``_`` with a backslash (our LIKE escape);
* three-valued logic is the same on both sides (a NULL predicate drops the row, ``NOT NULL``
  is NULL); ``<=>`` is spelled with ``IS NULL`` / ``IS NOT NULL``;
* floats: our filters compare in total order (NaN = NaN, NaN above every number), as Spark
  does; non-finite literals are not written (SQL has no spelling for them), so they go back;
* a filter is pushed only for columns whose values Spark sees unchanged: the source's Arrow
  type must convert to the Spark type losslessly (no nanosecond timestamps, which Spark
  truncates to microseconds, no ``uint64``, no ``date64``, no binary), and the literal must
  be of the column's kind (``int`` for integers, ``Decimal`` no finer than the column's scale,
  aware ``datetime`` for zoned timestamps, naive for zone-less ones, ...).

Pure Python: no JVM needed to use or test it.

The ``lance_flight`` source does not call it while Spark (4.3) shares the read plan of a
pushdown between every plan of a loaded DataFrame (see :mod:`.source`): kept, exact and
tested, for a Spark that keeps that plan per scan.
"""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import pyarrow as pa

try:  # the filter classes exist from pyspark 4.1; without them nothing is ever pushed
    from pyspark.sql.datasource import (
        EqualNullSafe,
        EqualTo,
        Filter,
        GreaterThan,
        GreaterThanOrEqual,
        In,
        IsNotNull,
        IsNull,
        LessThan,
        LessThanOrEqual,
        Not,
        StringContains,
        StringEndsWith,
        StringStartsWith,
    )
except ImportError:  # pragma: no cover - pyspark older than 4.1 or absent
    Filter = object  # type: ignore[misc,assignment]
    EqualNullSafe = EqualTo = GreaterThan = GreaterThanOrEqual = In = None  # type: ignore
    IsNotNull = IsNull = LessThan = LessThanOrEqual = Not = None  # type: ignore
    StringContains = StringEndsWith = StringStartsWith = None  # type: ignore

__all__ = [
    "Pushdown",
    "column_sql",
    "filter_sql",
    "literal_sql",
    "pushable_type",
    "quote_identifier",
    "string_sql",
    "translate_filters",
]

_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


@dataclass(frozen=True)
class Pushdown:
    """What :func:`translate_filters` decided: the SQL sent to the server (``None``: no
    filter), the filters it covers, and the ones Spark must still evaluate."""

    sql: str | None
    pushed: list = field(default_factory=list)
    rejected: list = field(default_factory=list)


# -- SQL spelling -------------------------------------------------------------------------


def quote_identifier(name: str) -> str:
    """`` `name` `` with backticks doubled: matched exactly by our filter dialect."""
    return "`" + name.replace("`", "``") + "`"


def column_sql(path: Sequence[str]) -> str:
    """``("st", "x")`` -> `` `st`.`x` `` (struct field access)."""
    return ".".join(quote_identifier(p) for p in path)


def string_sql(text: str) -> str:
    """A single-quoted SQL string literal (quotes doubled; backslash needs no escape)."""
    return "'" + text.replace("'", "''") + "'"


def _like_escape(text: str) -> str:
    """``text`` as a LIKE pattern matching itself literally (backslash is the escape)."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def pushable_type(typ: pa.DataType) -> str | None:
    """The literal kind a column of Arrow type ``typ`` takes in a pushed filter, or ``None``
    when Spark does not see its values unchanged (so a pushed filter could disagree)."""
    if pa.types.is_dictionary(typ):
        typ = typ.value_type
    if pa.types.is_boolean(typ):
        return "bool"
    if pa.types.is_signed_integer(typ) or (
        pa.types.is_unsigned_integer(typ) and typ.bit_width < 64
    ):
        return "int"
    if pa.types.is_float32(typ) or pa.types.is_float64(typ):
        return "float"
    if pa.types.is_decimal128(typ):
        return "decimal"
    if pa.types.is_string(typ) or pa.types.is_large_string(typ) or pa.types.is_string_view(typ):
        return "string"
    if pa.types.is_date32(typ):
        return "date"
    if pa.types.is_timestamp(typ) and typ.unit in ("s", "ms", "us"):
        return "timestamp_tz" if typ.tz is not None else "timestamp_ntz"
    return None


def literal_sql(value: Any, typ: pa.DataType) -> str | None:
    """``value`` spelled as a SQL literal for a column of Arrow type ``typ``, or ``None``
    when it cannot be compared exactly (wrong kind, out of range, non-finite, too fine)."""
    kind = pushable_type(typ)
    if kind is None or value is None:
        return None
    if kind == "bool":
        return ("TRUE" if value else "FALSE") if isinstance(value, bool) else None
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            return None
        return str(value) if _INT64_MIN <= value <= _INT64_MAX else None
    if kind == "float":  # Spark sends a float for float and double columns alike
        if not isinstance(value, float) or not math.isfinite(value):
            return None
        return repr(value)
    if kind == "decimal":
        if isinstance(value, bool):
            return None
        if isinstance(value, int):
            value = Decimal(value)
        if not isinstance(value, Decimal) or not value.is_finite():
            return None
        exponent = value.as_tuple().exponent
        if isinstance(exponent, int) and -exponent > typ.scale:  # finer than the column
            return None
        if len(value.as_tuple().digits) - exponent > 2 * typ.precision + 2:
            return None  # absurdly large: Spark would not produce it; keep SQL short
        return format(value, "f")
    if kind == "string":
        return string_sql(value) if isinstance(value, str) else None
    if kind == "date":
        if isinstance(value, _dt.datetime) or not isinstance(value, _dt.date):
            return None
        return f"CAST({string_sql(value.isoformat())} AS DATE)"
    # timestamps: Spark's TimestampType arrives zone-aware, TimestampNTZType naive
    if not isinstance(value, _dt.datetime):
        return None
    aware = value.tzinfo is not None and value.utcoffset() is not None
    if aware != (kind == "timestamp_tz"):
        return None
    if aware:
        value = value.astimezone(_dt.UTC)
    text = value.replace(tzinfo=None).isoformat(sep=" ", timespec="microseconds")
    return string_sql(text + ("+00:00" if aware else ""))


def _field_type(schema: pa.Schema, path: Sequence[str]) -> pa.DataType | None:
    """Arrow type of the (possibly nested) column ``path``, matching names exactly."""
    if not path:
        return None
    idx = schema.get_field_index(path[0])
    if idx < 0:
        return None
    typ = schema.field(idx).type
    for part in path[1:]:
        if not pa.types.is_struct(typ):
            return None
        idx = typ.get_field_index(part)
        if idx < 0:
            return None
        typ = typ.field(idx).type
    return typ


# -- one filter ---------------------------------------------------------------------------

_COMPARISONS: dict[type, str] = {}
if EqualTo is not None:
    _COMPARISONS = {
        EqualTo: "=",
        GreaterThan: ">",
        GreaterThanOrEqual: ">=",
        LessThan: "<",
        LessThanOrEqual: "<=",
    }


def filter_sql(f: Any, schema: pa.Schema) -> str | None:
    """One Spark filter as a SQL predicate over ``schema`` (the source's Arrow schema), or
    ``None`` when it cannot be translated exactly (then Spark must keep it)."""
    if Not is not None and isinstance(f, Not):
        inner = filter_sql(f.child, schema)
        return None if inner is None else f"NOT ({inner})"
    path = getattr(f, "attribute", None)
    if not isinstance(path, tuple) or not path or not all(isinstance(p, str) for p in path):
        return None
    typ = _field_type(schema, path)
    if typ is None or pushable_type(typ) is None:
        return None
    col = column_sql(path)
    if isinstance(f, IsNull):
        return f"{col} IS NULL"
    if isinstance(f, IsNotNull):
        return f"{col} IS NOT NULL"
    op = _COMPARISONS.get(type(f))
    if op is not None:
        lit = literal_sql(f.value, typ)
        return None if lit is None else f"{col} {op} {lit}"
    if isinstance(f, EqualNullSafe):
        if f.value is None:
            return f"{col} IS NULL"
        lit = literal_sql(f.value, typ)
        # a <=> v is never NULL: false when a is NULL (so NOT of it keeps the NULL rows)
        return None if lit is None else f"({col} IS NOT NULL AND {col} = {lit})"
    if isinstance(f, In):
        values = f.value
        if not isinstance(values, (tuple, list)) or not values:
            return None  # an empty IN's NULL handling differs between Spark versions
        items = []
        for v in values:
            lit = "NULL" if v is None else literal_sql(v, typ)
            if lit is None:
                return None
            items.append(lit)
        return f"{col} IN ({', '.join(items)})"
    if isinstance(f, (StringStartsWith, StringEndsWith, StringContains)):
        if pushable_type(typ) != "string" or not isinstance(f.value, str):
            return None
        text = _like_escape(f.value)
        if isinstance(f, StringStartsWith):
            pattern = text + "%"
        elif isinstance(f, StringEndsWith):
            pattern = "%" + text
        else:
            pattern = "%" + text + "%"
        return f"{col} LIKE {string_sql(pattern)}"
    return None


def translate_filters(filters: Iterable[Any], schema: pa.Schema) -> Pushdown:
    """Split Spark's (ANDed) filters into one SQL predicate and the filters Spark keeps.

    ``schema`` is the Arrow schema of the source columns (as the server reports it, before
    any conversion to Spark types): it decides which columns are safe to filter on.
    """
    parts: list[str] = []
    pushed: list = []
    rejected: list = []
    for f in filters:
        sql = filter_sql(f, schema)
        if sql is None:
            rejected.append(f)
        else:
            parts.append(sql)
            pushed.append(f)
    if not parts:
        return Pushdown(None, pushed, rejected)
    sql = parts[0] if len(parts) == 1 else " AND ".join(f"({p})" for p in parts)
    return Pushdown(sql, pushed, rejected)
