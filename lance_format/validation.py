"""Checks on Arrow data before it is written, so that no file holds what a reader refuses.

pylance refuses nulls in a non-nullable field (anywhere in the nesting) and invalid arrays
(offsets that go backwards, bad UTF-8, dictionary keys out of range); a file written from
either is unreadable or silently wrong.  Each batch is checked once, before any of it is
buffered: Arrow's full validation (C++, linear in the data, with no copies), then null
counts, which are cached on the arrays, so a schema whose fields are all nullable costs
nothing more.  Nested children are only looked at when a non-nullable field lies below.

Null semantics match pylance 14: a null under a null struct parent is masked (allowed), but
every value in a list's or fixed-size list's range counts, whether or not its slot is null.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from .errors import InvalidDataError, first_line
from .schema import arrow_schema_key, cached_per_type

__all__ = ["check_arrays", "check_batch", "forget_checked", "has_required_field", "vouch"]


def check_batch(batch: pa.RecordBatch, required: Sequence[bool], *, arrays: bool = True) -> None:
    """Refuse ``batch`` if it is not valid Arrow data or has nulls where the schema forbids
    them; ``required[i]`` says the target schema declares top-level column ``i`` non-nullable
    (a dataset's own nullability, which an append's data may not repeat).  ``arrays=False``
    skips Arrow's full validation, for data the caller has just validated itself."""
    schema = batch.schema
    facts = _schema_facts(schema)
    if arrays:
        check_arrays(batch, facts.layouts)
    for i, (nullable, deep) in enumerate(zip(facts.nullable, facts.deep, strict=True)):
        if nullable and not required[i] and not deep:
            continue  # nulls allowed and no non-nullable field below: nothing to look at
        f = schema.field(i)
        _check_nulls(batch.column(i), not required[i] and nullable, f.name, None)


class _SchemaFacts:
    """Per column of a schema: nullable, a non-nullable field below, and the layout type
    full validation uses (see :func:`_layout_type`)."""

    __slots__ = ("deep", "layouts", "nullable")

    def __init__(self, schema: pa.Schema):
        self.nullable = tuple(f.nullable for f in schema)
        self.deep = tuple(has_required_field(t) for t in schema.types)
        self.layouts = tuple(_layout_type(t) for t in schema.types)


_SCHEMA_FACTS: dict[bytes, _SchemaFacts] = {}
_SCHEMA_FACTS_MAX = 64


def _schema_facts(schema: pa.Schema) -> _SchemaFacts:
    """The facts of ``schema``, kept by :func:`arrow_schema_key`: a stream of batches asks
    for the same schema each time."""
    key = arrow_schema_key(schema)
    if key is None:
        return _SchemaFacts(schema)
    facts = _SCHEMA_FACTS.get(key)
    if facts is None:
        facts = _SchemaFacts(schema)
        if len(_SCHEMA_FACTS) >= _SCHEMA_FACTS_MAX:
            _SCHEMA_FACTS.clear()  # a bound; schemas are few
        _SCHEMA_FACTS[key] = facts
    return facts


def check_arrays(
    batch: pa.RecordBatch, layouts: Sequence[pa.DataType | None] | None = None
) -> None:
    """Refuse ``batch`` unless every column is valid Arrow data (offsets, UTF-8, dictionary
    keys): what must hold before any kernel (a cast, a copy) reads it.

    Data passes several layers on its way to a file (a Flight stream's reader, the ingest,
    the file writer), each of which must know it is valid; a batch whose very buffers, in a
    range already checked, were validated moments ago on this thread is not validated again
    (see :func:`_checked_before`)."""
    if _checked_before(batch):
        return
    schema = batch.schema
    if layouts is None:  # (a caller that knows them passes the schema's layout types)
        layouts = [_layout_type(t) for t in schema.types]
    if all(t is None for t in layouts):
        try:  # one call for the whole batch; a failure is located column by column below
            batch.validate(full=True)
            _remember(batch)
            return
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
    for f, column, layout in zip(schema, batch.columns, layouts, strict=True):
        try:
            (column if layout is None else column.view(layout)).validate(full=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            problem = first_line(e)
            raise InvalidDataError(f"invalid Arrow data: {problem}", column=f.name) from None
    _remember(batch)


def _check_nulls(arr: pa.Array, nullable: bool, path: str, visible: pa.Array | None) -> None:
    """Raise if a non-nullable ``arr`` has a null at a ``visible`` position (all if None),
    then descend into children that hold a non-nullable field."""
    if isinstance(arr.type, pa.BaseExtensionType):
        arr = arr.storage
    if not nullable and arr.null_count:
        if visible is None or pc.any(pc.and_(visible, arr.is_null())).as_py():
            raise InvalidDataError("contains nulls but is declared non-nullable", column=path)
    t = arr.type
    if not has_required_field(t):
        return
    if pa.types.is_struct(t):
        if arr.null_count:
            valid = arr.is_valid()
            visible = valid if visible is None else pc.and_(visible, valid)
        for k in range(t.num_fields):
            child = t.field(k)
            _check_nulls(arr.field(k), child.nullable, f"{path}.{child.name}", visible)
    elif pa.types.is_fixed_size_list(t):
        size = t.list_size
        values = arr.values.slice(arr.offset * size, len(arr) * size)
        _check_nulls(values, t.value_field.nullable, f"{path}.{t.value_field.name}", None)
    elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_map(t):
        if len(arr) == 0:
            return
        offsets = arr.offsets
        start, stop = offsets[0].as_py(), offsets[-1].as_py()
        values = arr.values.slice(start, stop - start)
        # a map's entries are a non-nullable struct of its key and item fields
        item = pa.field("entries", values.type, False) if pa.types.is_map(t) else t.value_field
        _check_nulls(values, item.nullable, f"{path}.{item.name}", None)


@cached_per_type
def _layout_type(t: pa.DataType) -> pa.DataType | None:
    """``t`` with the types whose *values* Arrow's full validation judges (date64 in whole
    days, times within a day, decimals within their precision) replaced by plain types of
    the same layout, or None when there are none.  pylance stores and reads such values as
    they are; only the structure (offsets, UTF-8, dictionary keys) makes a file unreadable.
    """
    if isinstance(t, pa.BaseExtensionType):
        return _layout_type(t.storage_type) or t.storage_type
    if pa.types.is_date64(t) or pa.types.is_time(t):
        return pa.int64() if t.bit_width == 64 else pa.int32()
    if pa.types.is_decimal(t):
        return pa.binary(t.byte_width)
    if pa.types.is_dictionary(t):
        inner = _layout_type(t.value_type)
        return None if inner is None else pa.dictionary(t.index_type, inner, t.ordered)
    if pa.types.is_struct(t):
        fields = [t.field(k) for k in range(t.num_fields)]
        inner = [_layout_type(f.type) for f in fields]
        if all(x is None for x in inner):
            return None
        return pa.struct(
            [f if x is None else f.with_type(x) for f, x in zip(fields, inner, strict=True)]
        )
    if pa.types.is_map(t):
        key, item = _layout_type(t.key_type), _layout_type(t.item_type)
        if key is None and item is None:
            return None
        return pa.map_(
            t.key_field.with_type(key or t.key_type), t.item_field.with_type(item or t.item_type)
        )
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        inner = _layout_type(t.value_type)
        if inner is None:
            return None
        item = t.value_field.with_type(inner)
        if pa.types.is_fixed_size_list(t):
            return pa.list_(item, t.list_size)
        return pa.large_list(item) if pa.types.is_large_list(t) else pa.list_(item)
    return None


@cached_per_type
def has_required_field(t: pa.DataType) -> bool:
    """Whether a non-nullable field lies anywhere below type ``t`` (cached per type)."""
    if isinstance(t, pa.BaseExtensionType):
        t = t.storage_type
    if pa.types.is_struct(t):
        fields = [t.field(k) for k in range(t.num_fields)]
    elif pa.types.is_map(t):
        return True  # map keys are never nullable
    elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        fields = [t.value_field]
    else:
        return False
    return any(not f.nullable or has_required_field(f.type) for f in fields)


# -- batches validated moments ago -----------------------------------------------------------

_RECENT = 4  # batches remembered per thread
_recent = threading.local()


def forget_checked() -> None:
    """Start a new write: nothing validated before counts (Arrow data is immutable by
    contract, but a caller may still rewrite the memory under an array between writes)."""
    _recent.entries = []


def vouch(batch: pa.RecordBatch) -> None:
    """Count ``batch`` as validated: Arrow made it from validated data (a cast, aligned
    copies of its buffers), so validating it again would only repeat the work."""
    _remember(batch)


def _remember(batch: pa.RecordBatch) -> None:
    """Note a validated batch, weakly: while it lives, so do its buffers, so their
    addresses name the same bytes; once it is gone the entry is ignored.  Nothing is
    computed here (most batches are never looked up again)."""
    recent = getattr(_recent, "entries", None)
    if recent is None:
        recent = _recent.entries = []
    recent.insert(0, weakref.ref(batch))
    del recent[_RECENT:]


def _checked_before(batch: pa.RecordBatch) -> bool:
    """Whether ``batch`` is (a slice of) a batch this thread validated and that is still
    alive: the same object, or the same types and buffers with each column within the
    validated range."""
    recent = getattr(_recent, "entries", None)
    if not recent:
        return False
    live = [b for b in (ref() for ref in recent) if b is not None]
    if any(b is batch for b in live):
        return True
    n = batch.num_columns
    mine: list = [False] * n  # buffer keys, computed as the comparison needs them
    for old in live:
        if old.num_columns != n:
            continue
        # column by column, so that a batch of other data is told apart at its first column
        # (the usual case: a new batch), not after every column's buffers were listed
        for i in range(n):
            a, b = batch.column(i), old.column(i)
            if a.type != b.type or not (
                b.offset <= a.offset and a.offset + len(a) <= b.offset + len(b)
            ):
                break
            if mine[i] is False:
                mine[i] = _buffer_key(a)
            if mine[i] is None:
                return False  # dictionaries: always validated
            if mine[i] != _buffer_key(b):
                break
        else:
            return True
    return False


def _buffer_key(arr: pa.Array) -> tuple[tuple[int, int] | None, ...] | None:
    """The addresses and sizes of every buffer under ``arr``; None when the type holds a
    dictionary (whose values ``buffers()`` does not list)."""
    if _has_dictionary(arr.type):
        return None
    return tuple(None if b is None else (b.address, b.size) for b in arr.buffers())


@cached_per_type
def _has_dictionary(t: pa.DataType) -> bool:
    if isinstance(t, pa.BaseExtensionType):
        t = t.storage_type
    if pa.types.is_dictionary(t):
        return True
    return any(_has_dictionary(t.field(k).type) for k in range(t.num_fields))
