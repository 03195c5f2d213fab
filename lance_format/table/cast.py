"""Changing a column's type (``alter_columns`` with ``data_type``), as pylance 14 does it.

Only casts within one kind of type are allowed (integers to integers, floats to floats,
temporal to temporal, strings and binaries to their size variants, decimals to decimals,
lists of any size kind to lists whose items may be cast); anything else, a cast of an
indexed column, or a cast together with making a column non-nullable is refused.  A value
the new type cannot hold fails the whole alteration (temporal casts truncate, as pylance's).

The cast column becomes a new field (a fresh id, same parent) whose values go into one new
data file per fragment; the old files keep listing the old field id, which the schema no
longer has.  Committed as a Merge, so every row's last-update version moves on.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from ..errors import InvalidDataError, UnsupportedError
from ..schema import LanceField, LanceSchema
from . import udf, write

if TYPE_CHECKING:
    from .dataset import Dataset
    from .fragment import Fragment

CAST_ROWS = 128 * 1024  # rows cast per step (bounded memory)

_LISTS = (pa.types.is_list, pa.types.is_large_list, pa.types.is_fixed_size_list)


def _is_list(t: pa.DataType) -> bool:
    return any(test(t) for test in _LISTS)


def castable(src: pa.DataType, dst: pa.DataType) -> bool:
    """pylance's "upcast or downcast" rule: the same general kind of type."""
    if pa.types.is_dictionary(src):
        return castable(src.value_type, dst)
    if pa.types.is_dictionary(dst):
        return castable(src, dst.value_type)
    for kind in (pa.types.is_integer, pa.types.is_floating, pa.types.is_temporal):
        if kind(src):
            return kind(dst)
    if pa.types.is_boolean(src):
        return pa.types.is_boolean(dst)
    if pa.types.is_string(src) or pa.types.is_large_string(src):
        return pa.types.is_string(dst) or pa.types.is_large_string(dst)
    if pa.types.is_binary(src) or pa.types.is_large_binary(src):
        return pa.types.is_binary(dst) or pa.types.is_large_binary(dst)
    if pa.types.is_decimal(src):
        return pa.types.is_decimal(dst)
    if _is_list(src):
        return _is_list(dst) and castable(src.value_type, dst.value_type)
    return False


def cast_values(values: pa.Array | pa.ChunkedArray, dst: pa.DataType):
    """``values`` as ``dst``: an out-of-range number fails; temporal values truncate."""
    try:
        return values.cast(dst, safe=not pa.types.is_temporal(dst))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise InvalidDataError(f"cast error: {exc}") from None


def check_cast(path: str, src: pa.DataType, dst: pa.DataType) -> None:
    if not castable(src, dst):
        raise InvalidDataError(f'Cannot cast column "{path}" from {src} to {dst}')
    try:
        pa.array([], src).cast(dst)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        raise InvalidDataError(f'Cannot cast column "{path}" from {src} to {dst}') from None


def cast_fields(
    fields: list[LanceField], casts: Mapping[int, pa.DataType], next_id: int
) -> tuple[list[LanceField], dict[int, LanceField]]:
    """The top-level fields with every field in ``casts`` (by id) replaced by a new field
    of the new type (new id, same parent, name and nullability); and the new fields by
    the old ids."""
    counter = [next_id]
    replaced: dict[int, LanceField] = {}

    def walk(f: LanceField) -> LanceField:
        if f.id in casts:
            arrow = f.to_arrow()
            new = LanceField.from_arrow(
                pa.field(f.name, casts[f.id], f.nullable, arrow.metadata), counter, f.parent_id
            )
            replaced[f.id] = new
            return new
        if not f.children:
            return f
        return dataclasses.replace(f, children=[walk(c) for c in f.children])

    return [walk(f) for f in fields], replaced


def _file_field(new: LanceField, replaced_ids: set[int]) -> LanceField | None:
    """What a new data file holds of top-level field ``new``: itself when it is a new
    field, its struct path down to the new fields inside it, or None."""
    if new.id in replaced_ids:
        return new
    kids = [k for k in (_file_field(c, replaced_ids) for c in new.children) if k is not None]
    if not kids:
        return None
    if new.logical_type != "struct":
        raise UnsupportedError(
            f"casting a field inside {new.logical_type} column {new.name!r} is not supported"
        )
    return dataclasses.replace(new, children=kids)


def _values_for(
    file_field: LanceField, old: LanceField, column, casts, origin: Mapping[int, int]
) -> pa.Array:
    """``column`` (the old field's values) shaped as ``file_field``: cast where cast, the
    struct rebuilt around the cast children otherwise (``origin``: new id -> old id)."""
    if old.id in casts:
        return cast_values(column, casts[old.id])
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    position = {c.id: i for i, c in enumerate(old.children)}
    kids, arrow_fields = [], []
    for new_kid in file_field.children:
        i = position[origin.get(new_kid.id, new_kid.id)]
        kids.append(_values_for(new_kid, old.children[i], column.field(i), casts, origin))
        arrow_fields.append(new_kid.to_dataset_arrow())
    mask = column.is_null() if column.null_count else None
    return pa.StructArray.from_arrays(kids, fields=arrow_fields, mask=mask)


def cast_columns(
    ds: Dataset,
    fields: list[LanceField],
    casts: Mapping[int, pa.DataType],
    next_id: int,
) -> tuple[list, LanceSchema]:
    """Write the cast columns of every fragment; the new fragments (not committed) and
    the new schema."""
    new_fields, replaced = cast_fields(fields, casts, next_id)
    schema = LanceSchema(new_fields, dict(ds.lance_schema.metadata))
    old_top = {f.id: f for f in ds.lance_schema.fields}
    origin = {new.id: old_id for old_id, new in replaced.items()}
    file_fields = []
    sources = []
    for new, current in zip(new_fields, fields, strict=True):
        ff = _file_field(new, set(origin))
        if ff is not None:
            file_fields.append(ff)
            sources.append(old_top[current.id])
    file_schema = LanceSchema(file_fields, {})

    def values(frag: Fragment, offsets: np.ndarray) -> pa.Table:
        table = frag.read(sources, offsets)
        arrays = [
            _values_for(ff, src, table.column(src.name), casts, origin)
            for ff, src in zip(file_fields, sources, strict=True)
        ]
        return pa.Table.from_arrays(arrays, schema=file_schema.to_dataset_arrow())

    fragments = []
    try:
        for frag in ds.get_fragments():
            fragments.append(udf.write_values_file(ds, frag, file_schema, values, CAST_ROWS))
    except BaseException:
        write.remove_fragment_files(ds.uri, fragments)
        raise
    return fragments, schema


__all__ = ["castable", "cast_columns", "cast_fields", "cast_values", "check_cast"]
