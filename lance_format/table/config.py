"""Dataset config and metadata: the manifest's ``config``, ``table_metadata``, schema
metadata and per-field metadata, changed by an ``UpdateConfig`` transaction as pylance 14
changes them (``update_config``, ``update_metadata``, ``update_schema_metadata``,
``update_field_metadata``, ``delete_config_keys``).

Each change is an *update map*: entries set a key (a value) or remove it (None), or, with
``replace``, the entries become the whole map.  :func:`apply_update_config` is the
manifest side of the operation (what a commit does to the next manifest);
:func:`update_config_operation` builds the operation pylance writes for each call.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import InvalidArgumentError, SchemaError
from ..pb import table_pb2
from ..schema import LanceSchema, split_path
from .transaction import UpdateConfig, UpdateMap


def apply_update_map(current: Mapping[str, str], update: UpdateMap | None) -> dict[str, str]:
    """``current`` after ``update`` (None: unchanged)."""
    if update is None:
        return dict(current)
    if update.replace:
        return {k: v for k, v in update.entries if v is not None}
    out = dict(current)
    for key, value in update.entries:
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def _set_map(target, values: Mapping, encode=lambda v: v) -> None:
    target.clear()
    target.update({k: encode(v) for k, v in values.items()})


def apply_update_config(m: table_pb2.Manifest, op: UpdateConfig) -> None:
    """Apply ``op`` to the manifest ``m`` being built (config, table metadata, schema
    metadata, field metadata by field id); an unknown field id is refused."""
    op = op.normalized()
    if op.config_updates is not None:
        _set_map(m.config, apply_update_map(m.config, op.config_updates))
    if op.table_metadata_updates is not None:
        _set_map(m.table_metadata, apply_update_map(m.table_metadata, op.table_metadata_updates))
    if op.schema_metadata_updates is not None:
        current = {k: v.decode() for k, v in m.schema_metadata.items()}
        new = apply_update_map(current, op.schema_metadata_updates)
        _set_map(m.schema_metadata, new, str.encode)
    by_id = {f.id: f for f in m.fields}
    for field_id, update in op.field_metadata_updates.items():
        f = by_id.get(field_id)
        if f is None:
            raise InvalidArgumentError(f"no field with id {field_id} in the schema")
        current = {k: v.decode() for k, v in f.metadata.items()}
        _set_map(f.metadata, apply_update_map(current, update), str.encode)


def _update_map(values: Mapping[str, str | None], replace: bool) -> UpdateMap:
    if not isinstance(values, Mapping):
        raise InvalidArgumentError("metadata updates must be a dict of str to str or None")
    entries = []
    for k, v in values.items():
        if not isinstance(k, str) or not (v is None or isinstance(v, str)):
            raise InvalidArgumentError(
                f"metadata keys and values must be strings, got {k!r}: {v!r}"
            )
        entries.append((k, v))  # a removal in a replacement is kept, and means nothing
    return UpdateMap(entries, bool(replace))


def update_config_operation(
    *,
    config: Mapping[str, str | None] | None = None,
    table_metadata: Mapping[str, str | None] | None = None,
    schema_metadata: Mapping[str, str | None] | None = None,
    field_metadata: Mapping[str, Mapping[str, str | None]] | None = None,
    schema: LanceSchema | None = None,
    replace: bool = False,
) -> UpdateConfig:
    """The UpdateConfig pylance writes for one of its calls; ``field_metadata`` is keyed by
    field path (``"a"`` or ``"a.b"``), resolved to field ids through ``schema``."""
    fields: dict[int, UpdateMap] = {}
    for path, values in (field_metadata or {}).items():
        if schema is None:
            raise InvalidArgumentError("field metadata updates need the schema")
        fields[_field_id(schema, path)] = _update_map(values, replace)
    return UpdateConfig(
        config_updates=None if config is None else _update_map(config, replace),
        table_metadata_updates=None
        if table_metadata is None
        else _update_map(table_metadata, replace),
        schema_metadata_updates=None
        if schema_metadata is None
        else _update_map(schema_metadata, replace),
        field_metadata_updates=fields,
    )


def _field_id(schema: LanceSchema, path: str) -> int:
    parts = split_path(path)
    fields = schema.fields
    found = None
    for part in parts:
        found = next((f for f in fields if f.name == part), None)
        if found is None:
            raise SchemaError(f"no field {path!r} in the schema")
        fields = found.children
    if found is None:
        raise SchemaError(f"no field {path!r} in the schema")
    return found.id
