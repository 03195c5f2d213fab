"""v1 page statistics, and pruning the row groups a comparison cannot match.

pylance's v1 writer keeps, per batch (row group), the ``null_count``, ``min_value`` and
``max_value`` of every field of a supported type (booleans, integers, float32/64, date32/64,
decimal128, strings and binary; struct members too, never list items or dictionaries).  They
are stored as a v1 "file" of their own inside the data file: a schema of structs named by
field id, one batch with one row per data batch, and a page table covering ids ``0..max``.

The bounds describe the values the writer was given, and a read can differ from them, so
pruning has to respect what a *read* returns (see :mod:`.plain` and :mod:`.binary`):

* plain-encoded columns keep no nulls: a null reads back as some value the bounds do not
  cover, so a batch with ``null_count > 0`` is never pruned on its values;
* a nullable string/binary column reads an empty value as null, so a null ``min_value``
  stands for ``""`` (the smallest value) and a null ``max_value`` means every value reads
  as null;
* floats: NaN is left out of the bounds but sorts above every number in this project's
  filters, so ``>``, ``>=`` and ``!=`` never prune, nor does any comparison with NaN;
* strings longer than 64 bytes have truncated bounds that still bound the values.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..cache import SearchCache
from ..container.footer import Tail
from ..errors import CorruptFileError, InvalidArgumentError, LanceError
from ..io import RandomAccessFile
from ..schema import LanceField
from . import binary
from .arrays import PageSource, read_field
from .container import LegacyMetadata, read_page_table

OPS = ("=", "==", "!=", "<>", "<", "<=", ">", ">=", "in", "is_null", "is_not_null")


def read_statistics(
    file: RandomAccessFile, meta: LegacyMetadata, path: str, cache: SearchCache | None = None
) -> pa.Table | None:
    """The statistics of every field that has them: one row per batch, columns named by
    field id (``struct<null_count, min_value, max_value>``); None if the file kept none."""
    stats = meta.statistics
    if stats is None or meta.num_batches == 0:
        return None
    ids = [f.id for f in stats.schema.walk()]
    if min(ids) < 0:
        raise CorruptFileError(f"negative field id {min(ids)} in the statistics schema")
    table = read_page_table(file, Tail(file), stats.page_table_position, max(ids) + 1, 1)
    src = PageSource(file, table, {i: i for i in ids}, {}, (path, "v1-stats"))
    whole = [(0, np.array([[0, meta.num_batches]], dtype=np.int64))]
    arrays = [read_field(src, f, whole, cache) for f in stats.schema.fields]
    return pa.table(arrays, names=[f.name for f in stats.schema.fields])


def may_match(
    stats: pa.StructArray | None,
    field: LanceField,
    op: str,
    value: object,
    batch_rows: np.ndarray,
) -> np.ndarray | None:
    """Per batch, whether some row *as read* may satisfy ``field <op> value`` (a bool
    array), or None when nothing can be pruned.  ``stats`` is the field's statistics and
    ``batch_rows`` the number of rows of every batch."""
    if op not in OPS:
        raise InvalidArgumentError(f"unknown comparison {op!r}; use one of {', '.join(OPS)}")
    if stats is None:
        return None
    t = field.arrow_type
    nulls = stats.field("null_count").to_numpy(zero_copy_only=False)
    if len(nulls) != len(batch_rows):
        raise CorruptFileError(f"{len(nulls)} statistics rows for {len(batch_rows)} batches")
    lo, hi = stats.field("min_value"), stats.field("max_value")
    is_var = binary.is_binary_like(t)
    if is_var:
        # A null bound was written as an empty value or none: a null minimum stands for ""
        # (the smallest value anyway).  A null maximum is "" or no value at all, or a
        # truncated bound that could not be rounded up: only trust it for all-null batches.
        empty = pa.scalar(
            b"" if pa.types.is_binary(lo.type) or pa.types.is_large_binary(lo.type) else "", lo.type
        )
        hi_null = hi.is_null().to_numpy(zero_copy_only=False)
        lo, hi = lo.fill_null(empty), hi.fill_null(empty)
        all_null_on_read = hi_null & (nulls >= batch_rows)
        unbounded = hi_null & ~all_null_on_read
    else:
        all_null_on_read = np.zeros(len(nulls), dtype=bool)
        unbounded = nulls > 0  # nulls read back as arbitrary values
    if op == "is_null":
        if is_var and field.nullable:
            # null if written null, or an empty value (then the minimum is "")
            return (nulls > 0) | pc.equal(lo, empty).to_numpy(zero_copy_only=False)
        return np.zeros(len(nulls), dtype=bool)  # plain columns read no nulls
    if op == "is_not_null":
        return ~all_null_on_read
    floating = pa.types.is_floating(t)
    if floating and op in ("!=", "<>", ">", ">="):
        return None
    values = list(value) if op == "in" and isinstance(value, Iterable) else [value]
    scalars = []
    for v in values:
        if v is None or (floating and isinstance(v, float) and math.isnan(v)):
            return None
        try:
            scalars.append(
                pa.scalar(v, type=lo.type) if not isinstance(v, pa.Scalar) else v.cast(lo.type)
            )
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            return None  # a value of another type: leave the comparison to the filter

    def col(x: pa.Array) -> np.ndarray:
        return x.fill_null(True).to_numpy(zero_copy_only=False).astype(bool)

    if op in ("=", "=="):
        hit = col(pc.and_(pc.less_equal(lo, scalars[0]), pc.greater_equal(hi, scalars[0])))
    elif op == "in":
        hit = np.zeros(len(nulls), dtype=bool)
        for s in scalars:
            hit |= col(pc.and_(pc.less_equal(lo, s), pc.greater_equal(hi, s)))
    elif op in ("!=", "<>"):
        s = scalars[0]
        hit = ~col(pc.and_(pc.equal(lo, s), pc.equal(hi, s)))
    elif op == "<":
        hit = col(pc.less(lo, scalars[0]))
    elif op == "<=":
        hit = col(pc.less_equal(lo, scalars[0]))
    elif op == ">":
        hit = col(pc.greater(hi, scalars[0]))
    else:
        hit = col(pc.greater_equal(hi, scalars[0]))
    return (hit | unbounded) & ~all_null_on_read


def pages_that_may_match(reader, field: str | int, op: str, value: object = None) -> np.ndarray:
    """File row ranges (``int64 (k, 2)``, ``[start, stop)``, ascending) that may hold a row
    matching ``field <op> value`` as the reader reads it; rows outside them cannot match.

    ``reader`` is a :class:`~lance_format.reader.LanceFileReader`; ``field`` a column path
    (``"a"``, ``"s.x"``) or field id; ``op`` one of :data:`OPS` (``in`` takes a list;
    ``is_null`` / ``is_not_null`` take no value).  Files without statistics (every v2
    file, fields of other types) return the whole file."""
    return rows_that_may_match(reader, [(field, op, value)])


def rows_that_may_match(reader, terms: Sequence[tuple[str | int, str, object]]) -> np.ndarray:
    """Like :func:`pages_that_may_match` for a conjunction (AND) of ``(field, op, value)``
    terms: the row groups every term may match."""
    whole = np.array([[0, reader.num_rows]], dtype=np.int64)
    for _, op, _ in terms:
        if op not in OPS:
            raise InvalidArgumentError(f"unknown comparison {op!r}; use one of {', '.join(OPS)}")
    meta = reader.metadata
    if not isinstance(meta, LegacyMetadata) or reader.num_rows == 0:
        return whole
    keep = np.ones(meta.num_batches, dtype=bool)
    rows = np.diff(meta.batch_offsets)
    schema = reader.lance_schema
    for field, op, value in terms:
        try:
            f = schema.field_by_id(field) if isinstance(field, int) else schema.field_by_path(field)
        except LanceError as exc:
            raise InvalidArgumentError(str(exc.problem), path=reader.path) from exc
        mask = may_match(_field_stats(reader, f.id), f, op, value, rows)
        if mask is not None:
            keep &= mask
    return _ranges(meta.batch_offsets, keep)


def _field_stats(reader, field_id: int) -> pa.StructArray | None:
    """The statistics of one field (the legacy read path reads them once per file)."""
    try:
        table = reader._legacy.statistics(reader.cache)
    except LanceError as exc:
        raise exc.with_context(path=reader.path) from None
    if table is None or str(field_id) not in table.column_names:
        return None
    col = table.column(str(field_id)).combine_chunks()
    t = col.type
    want = reader.lance_schema.field_by_id(field_id).arrow_type
    if (
        not pa.types.is_struct(t)
        or t.num_fields != 3
        or t.field(1).type != want
        or t.names != ["null_count", "min_value", "max_value"]
        or t.field(0).type != pa.int64()
        or t.field(1).type != t.field(2).type
    ):
        raise CorruptFileError(
            f"statistics of field {field_id} are {t}, not struct<null_count, min, max>",
            path=reader.path,
        )
    return col


def _ranges(offsets: np.ndarray, mask: np.ndarray | Sequence[bool]) -> np.ndarray:
    """Batches where ``mask`` holds as merged row ranges."""
    keep = np.asarray(mask, dtype=bool)
    if not keep.any():
        return np.zeros((0, 2), dtype=np.int64)
    edges = np.diff(np.concatenate([[0], keep.astype(np.int8), [0]]))
    first, last = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    return np.stack([offsets[first], offsets[last]], axis=1).astype(np.int64)
