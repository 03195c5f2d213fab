"""Arrow extension types between what a file stores and what readers and writers see.

A Lance field keeps an extension type as ``ARROW:extension:name/metadata`` beside its storage
type, and the decoders build storage arrays; :func:`view_as` gives them the schema's
(extension) type back without copying, at any depth.  When pyarrow does not know the
extension, the schema holds the storage type with the metadata, as pylance returns it.

``lance.json`` is the one extension whose values change: files hold JSONB, datasets return
``arrow.json`` text (:func:`to_dataset_array`) and writers accept that text
(:func:`to_stored_array`), both as pylance does.
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa

from . import jsonb
from .errors import CorruptFileError, InvalidArgumentError, LanceError, SchemaError
from .schema import LanceField, LanceSchema


def view_as(arr: pa.Array | pa.ChunkedArray, t: pa.DataType) -> pa.Array | pa.ChunkedArray:
    """``arr`` (decoded storage) with the schema's type ``t``: a zero-copy view, so
    extension types are restored at any nesting depth."""
    if arr.type == t:
        return arr
    if isinstance(arr, pa.ChunkedArray):
        return pa.chunked_array([c.view(t) for c in arr.chunks], type=t)
    return arr.view(t)


def to_dataset_array(arr: pa.Array | pa.ChunkedArray, field: LanceField):
    """A column as a dataset read returns it: JSONB values as ``arrow.json`` text."""
    if not field.has_json():
        return arr
    return _map_json(arr, field, jsonb.decode_array, field.to_dataset_arrow().type)


def to_stored_array(arr: pa.Array | pa.ChunkedArray, field: LanceField):
    """A column as the file stores it: ``arrow.json`` (or plain) text as JSONB; JSONB
    given as binary (pylance's ``lance.json`` arrays, our file reader's) is kept."""
    if not field.has_json():
        return arr
    return _map_json(arr, field, _encode_leaf, field.to_arrow().type)


def json_compatible(expected: pa.DataType, given: pa.Field) -> bool:
    """Whether data of field ``given`` can be written to a column of dataset type
    ``expected`` holding JSON: JSON text in any string type, or JSONB bytes."""
    try:
        f = LanceSchema.from_arrow(pa.schema([given])).fields[0]
    except LanceError:
        return False
    return f.has_json() and f.to_dataset_arrow().type.equals(expected)


def _encode_leaf(arr: pa.Array) -> pa.Array:
    storage = arr.storage if isinstance(arr, pa.ExtensionArray) else arr
    t = storage.type
    if pa.types.is_large_binary(t) or pa.types.is_binary(t):
        for value in storage.to_pylist():  # never store bytes pylance could not read
            if value is not None:
                try:
                    jsonb.decode(value)
                except CorruptFileError as exc:
                    raise InvalidArgumentError(
                        f"a JSON column got bytes that are not JSONB: {exc.problem}"
                    ) from None
        return storage.cast(pa.large_binary())
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return jsonb.encode_array(storage)
    raise SchemaError(f"a JSON column cannot hold values of type {arr.type}")


def _map_json(arr, field: LanceField, leaf: Callable[[pa.Array], pa.Array], t: pa.DataType):
    if isinstance(arr, pa.ChunkedArray):
        return pa.chunked_array([_map_json(c, field, leaf, t) for c in arr.chunks], type=t)
    return view_as(_rebuild(arr, field, leaf), t)


def _rebuild(arr: pa.Array, field: LanceField, leaf: Callable[[pa.Array], pa.Array]) -> pa.Array:
    """``arr`` with ``leaf`` applied to every JSON column below ``field``."""
    if not field.has_json():
        return arr
    if field.logical_type == "json":
        return leaf(arr)
    if isinstance(arr, pa.ExtensionArray):
        arr = arr.storage
    t = arr.type
    mask = arr.is_null() if arr.null_count else None
    if pa.types.is_struct(t):
        children = [_rebuild(arr.field(i), c, leaf) for i, c in enumerate(field.children)]
        names = [c.name for c in field.children]
        return pa.StructArray.from_arrays(children, names=names, mask=mask)
    if pa.types.is_map(t):
        entries = field.children[0].children
        keys = _rebuild(arr.keys, entries[0], leaf)
        items = _rebuild(arr.items, entries[1], leaf)
        return pa.MapArray.from_arrays(arr.offsets, keys, items, mask=mask)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        values = _rebuild(arr.values, field.children[0], leaf)
        cls = pa.ListArray if pa.types.is_list(t) else pa.LargeListArray
        return cls.from_arrays(arr.offsets, values, mask=mask)
    raise SchemaError(f"JSON values inside {t} are not supported", column=field.name)
