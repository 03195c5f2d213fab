"""pylance's low-level write-then-commit API: ``write_fragments`` and
``LanceFragment.create``, then ``LanceOperation.*`` with ``LanceDataset.commit``.

A caller writes data files itself (``write_fragments``, ``LanceFragment.create``,
``fragment.delete``), describes the change with one of these dataclasses (pylance's names,
fields and defaults) and commits it against a read version.  Each converts to the table
layer's :mod:`.operations` dataclass, which does the rest: the manifest, the conflict check
against everything committed since the read version, the ``.txn`` file.  As pylance, a
commit through this API cannot name the rows a Delete or Update hit, so such a change over
a concurrent change to the same fragment is a retryable conflict rather than a merge.
"""

from __future__ import annotations

import datetime as dt
import os
import uuid as uuidlib
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyroaring

from .. import storage
from ..errors import (
    InvalidArgumentError,
    InvalidDataError,
    NotSupportedError,
    ObjectNotFoundError,
    UnsupportedError,
)
from ..pb import table_pb2
from ..schema import LanceSchema
from ..version import DEFAULT_VERSION, writable
from . import commit as commit_module
from . import manifest, operations, paths, write
from .fragment_metadata import DataFile, FragmentMetadata
from .transaction import as_transaction, new_transaction, new_uuid, read_transaction_file

LANCE_COMMIT_MESSAGE_KEY = "__lance_commit_message"  # pylance's transaction property
_UPDATE_MODES = {
    "": operations.Update.REWRITE_ROWS,
    "rewrite_rows": operations.Update.REWRITE_ROWS,
    "rewrite_columns": operations.Update.REWRITE_COLUMNS,
}


def _fragments(fragments: Any, what: str = "fragments") -> list[table_pb2.DataFragment]:
    """pylance's check (a list of FragmentMetadata), then the protobufs."""
    if not isinstance(fragments, list):
        raise TypeError(f"{what} must be list[FragmentMetadata], got {type(fragments)}")
    for f in fragments:
        if not isinstance(f, FragmentMetadata):
            raise TypeError(f"{what} must be list[FragmentMetadata], got {type(f)}")
    return [f.to_pb() for f in fragments]


@dataclass
class _Target:
    """What a conversion may need to know about the dataset committed to."""

    root: str
    read_version: int
    schema: LanceSchema | None  # None before the dataset exists


def _lance_schema(schema: Any, target: _Target) -> LanceSchema:
    """A schema given as our LanceSchema or an Arrow schema; Arrow fields the dataset has
    keep their field ids, new ones get ids after every id in use."""
    if isinstance(schema, LanceSchema):
        return schema
    if not isinstance(schema, pa.Schema):
        raise TypeError(f"schema must be a LanceSchema or pyarrow.Schema, got {type(schema)}")
    if target.schema is None:
        return LanceSchema.from_arrow(schema)
    existing = {f.name: f for f in target.schema.fields}
    next_id = max((f.id for f in target.schema.walk()), default=-1) + 1
    fields = []
    for f in schema:
        if f.name in existing:
            fields.append(existing[f.name])
        else:
            (new,) = LanceSchema.from_arrow(pa.schema([f]), first_id=next_id).fields
            next_id = max(g.id for g in new.walk()) + 1
            fields.append(new)
    metadata = {k.decode(): v for k, v in (schema.metadata or {}).items()}
    return LanceSchema(fields, metadata)


@dataclass
class IndexFile:
    """pylance's ``IndexFile``: one file of an index segment and its size."""

    path: str
    size_bytes: int


@dataclass
class Index:
    """pylance's ``Index``: one index segment as ``LanceOperation.CreateIndex`` takes it
    (the manifest's ``IndexMetadata`` with Python types)."""

    uuid: str
    name: str
    fields: list[int]
    dataset_version: int
    fragment_ids: Any  # a set or list of fragment ids (pylance: a Bitmap)
    index_version: int
    created_at: dt.datetime | None = None
    base_id: int | None = None
    files: list[IndexFile] | None = None
    index_details: tuple[str, bytes] | None = None
    covering_fields: list[int] = field(default_factory=list)

    def to_pb(self) -> table_pb2.IndexMetadata:
        pb = table_pb2.IndexMetadata(
            uuid=table_pb2.UUID(uuid=uuidlib.UUID(str(self.uuid)).bytes),
            fields=[int(f) for f in self.fields],
            name=self.name,
            dataset_version=int(self.dataset_version),
            fragment_bitmap=pyroaring.BitMap(int(i) for i in self.fragment_ids).serialize(),
            index_version=int(self.index_version),
            covering_fields=[int(f) for f in self.covering_fields],
        )
        if self.created_at is not None:
            pb.created_at = int(self.created_at.timestamp() * 1000)
        if self.base_id is not None:
            pb.base_id = int(self.base_id)
        for f in self.files or []:
            pb.files.add(path=f.path, size_bytes=int(f.size_bytes))
        if self.index_details is not None:
            pb.index_details.type_url, pb.index_details.value = self.index_details
        return pb

    @classmethod
    def from_pb(cls, pb: table_pb2.IndexMetadata) -> Index:
        created = pb.created_at if pb.HasField("created_at") else None
        details = pb.index_details
        return cls(
            uuid=str(uuidlib.UUID(bytes=pb.uuid.uuid)),
            name=pb.name,
            fields=list(pb.fields),
            dataset_version=int(pb.dataset_version),
            fragment_ids=set(pyroaring.BitMap.deserialize(pb.fragment_bitmap))
            if pb.fragment_bitmap
            else set(),
            index_version=int(pb.index_version),
            created_at=None if created is None else dt.datetime.fromtimestamp(created / 1000),
            base_id=int(pb.base_id) if pb.HasField("base_id") else None,
            files=[IndexFile(f.path, int(f.size_bytes)) for f in pb.files] or None,
            index_details=(details.type_url, details.value)
            if pb.HasField("index_details")
            else None,
            covering_fields=list(pb.covering_fields),
        )


def _index_pb(index: Any) -> table_pb2.IndexMetadata:
    """An index segment given as pylance's ``Index`` (or as the protobuf itself)."""
    if isinstance(index, table_pb2.IndexMetadata):
        return index
    if isinstance(index, Index):
        return index.to_pb()
    raise TypeError(f"indices must be lance.dataset.Index objects, got {type(index)}")


class LanceOperation:
    """The operations pylance's ``LanceDataset.commit`` takes (same names and fields)."""

    class BaseOperation(ABC):
        """Base class of the operations."""

        @abstractmethod
        def _to_operation(self, target: _Target) -> operations.Operation:
            """The table layer's operation for this change."""

    @dataclass
    class Overwrite(BaseOperation):
        """Create the dataset or replace all of it with ``fragments`` and ``new_schema``."""

        new_schema: Any
        fragments: list[FragmentMetadata]
        initial_bases: list | None = None

        def __post_init__(self):
            _fragments(self.fragments)
            if self.initial_bases:
                raise UnsupportedError("initial_bases (multi-base datasets) are not supported")

        @classmethod
        def _from_operation(cls, op: Any) -> LanceOperation.Overwrite:
            return cls(_schema_of(op), _metadata(op.fragments))

        def _to_operation(self, target: _Target) -> operations.Operation:
            schema = self.new_schema
            if isinstance(schema, pa.Schema):
                schema = LanceSchema.from_arrow(schema)
            schema = _lance_schema(schema, target)
            return operations.Overwrite(
                fragments=_fragments(self.fragments),
                schema=schema.to_protos(),
                schema_metadata=dict(schema.metadata),
            )

    @dataclass
    class Append(BaseOperation):
        """New fragments (their ids are assigned at commit)."""

        fragments: list[FragmentMetadata]

        def __post_init__(self):
            _fragments(self.fragments)

        @classmethod
        def _from_operation(cls, op: Any) -> LanceOperation.Append:
            return cls(_metadata(op.fragments))

        def _to_operation(self, target: _Target) -> operations.Operation:
            return operations.Append(fragments=_fragments(self.fragments))

    @dataclass
    class Delete(BaseOperation):
        """Fragments with new deletion files, and fragments removed entirely."""

        updated_fragments: list[FragmentMetadata]
        deleted_fragment_ids: Iterable[int]
        predicate: str

        def __post_init__(self):
            _fragments(self.updated_fragments, "updated_fragments")

        @classmethod
        def _from_operation(cls, op: Any) -> LanceOperation.Delete:
            return cls(_metadata(op.updated_fragments), list(op.deleted_fragment_ids), op.predicate)

        def _to_operation(self, target: _Target) -> operations.Operation:
            return operations.Delete(
                updated_fragments=_fragments(self.updated_fragments),
                deleted_fragment_ids=[int(i) for i in self.deleted_fragment_ids],
                predicate=str(self.predicate),
            )

    @dataclass
    class Update(BaseOperation):
        """Rows changed: removed and updated fragments, new fragments with the new rows."""

        removed_fragment_ids: list[int] = field(default_factory=list)
        updated_fragments: list[FragmentMetadata] = field(default_factory=list)
        new_fragments: list[FragmentMetadata] = field(default_factory=list)
        fields_modified: list[int] = field(default_factory=list)
        fields_for_preserving_frag_bitmap: list[int] = field(default_factory=list)
        update_mode: str = ""
        updated_fragment_offsets: dict[int, bytes] | None = None

        def __post_init__(self):
            _fragments(self.updated_fragments, "updated_fragments")
            _fragments(self.new_fragments, "new_fragments")
            if self.update_mode not in _UPDATE_MODES:
                raise InvalidArgumentError(f"unknown update_mode {self.update_mode!r}")

        @classmethod
        def _from_operation(cls, op: Any) -> LanceOperation.Update:
            modes = {v: k for k, v in _UPDATE_MODES.items() if k}
            return cls(
                removed_fragment_ids=list(op.removed_fragment_ids),
                updated_fragments=_metadata(op.updated_fragments),
                new_fragments=_metadata(op.new_fragments),
                fields_modified=list(op.fields_modified),
                fields_for_preserving_frag_bitmap=list(op.fields_for_preserving_frag_bitmap),
                update_mode=modes[op.update_mode],
                updated_fragment_offsets=dict(op.updated_fragment_offset_bitmaps) or None,
            )

        def _to_operation(self, target: _Target) -> operations.Operation:
            return operations.Update(
                removed_fragment_ids=[int(i) for i in self.removed_fragment_ids],
                updated_fragments=_fragments(self.updated_fragments),
                new_fragments=_fragments(self.new_fragments),
                fields_modified=[int(i) for i in self.fields_modified],
                fields_for_preserving_frag_bitmap=[
                    int(i) for i in self.fields_for_preserving_frag_bitmap
                ],
                update_mode=_UPDATE_MODES[self.update_mode],
                updated_fragment_offset_bitmaps=dict(self.updated_fragment_offsets or {}),
            )

    @dataclass
    class Merge(BaseOperation):
        """Columns added: every fragment (with its new data files) and the new schema."""

        fragments: list[FragmentMetadata]
        schema: Any
        preserves_nullability: bool = False

        def __post_init__(self):
            _fragments(self.fragments)

        @classmethod
        def _from_operation(cls, op: Any) -> LanceOperation.Merge:
            return cls(_metadata(op.fragments), _schema_of(op), op.preserves_nullability)

        def _to_operation(self, target: _Target) -> operations.Operation:
            schema = _lance_schema(self.schema, target)
            return operations.Merge(
                fragments=_fragments(self.fragments),
                schema=schema.to_protos(),
                schema_metadata=dict(schema.metadata),
                preserves_nullability=bool(self.preserves_nullability),
            )

    @dataclass
    class Project(BaseOperation):
        """Only the schema changes (columns dropped or renamed)."""

        schema: Any
        preserves_nullability: bool = False

        @classmethod
        def _from_operation(cls, op: Any) -> LanceOperation.Project:
            return cls(_schema_of(op), op.preserves_nullability)

        def _to_operation(self, target: _Target) -> operations.Operation:
            schema = _lance_schema(self.schema, target)
            return operations.Project(
                schema=schema.to_protos(), preserves_nullability=bool(self.preserves_nullability)
            )

    @dataclass
    class Restore(BaseOperation):
        """Make an old version the latest again."""

        version: int

        @classmethod
        def _from_operation(cls, op: Any) -> LanceOperation.Restore:
            return cls(op.version)

        def _to_operation(self, target: _Target) -> operations.Operation:
            return operations.Restore(version=int(self.version))

    @dataclass
    class RewriteGroup:
        """Old fragments whose rows the new fragments now hold."""

        old_fragments: list[FragmentMetadata]
        new_fragments: list[FragmentMetadata]

    @dataclass
    class RewrittenIndex:
        """An index remapped by a rewrite (not supported here)."""

        old_id: str
        new_id: str
        new_details_type_url: str
        new_details_value: bytes
        new_index_version: int

    @dataclass
    class Rewrite(BaseOperation):
        """Rows moved to new fragments unchanged (compaction)."""

        groups: list[LanceOperation.RewriteGroup]
        rewritten_indices: list[LanceOperation.RewrittenIndex] = field(default_factory=list)

        def __post_init__(self):
            for g in self.groups:
                _fragments(g.old_fragments, "old_fragments")
                _fragments(g.new_fragments, "new_fragments")
            if self.rewritten_indices:
                raise UnsupportedError("rewritten_indices are not supported")

        @classmethod
        def _from_operation(cls, op: Any) -> LanceOperation.Rewrite:
            if op.rewritten_indices:
                raise UnsupportedError("reading a Rewrite's rewritten_indices is not supported")
            return cls(
                [
                    LanceOperation.RewriteGroup(
                        _metadata(g.old_fragments), _metadata(g.new_fragments)
                    )
                    for g in op.groups
                ]
            )

        def _to_operation(self, target: _Target) -> operations.Operation:
            return operations.Rewrite(
                groups=[
                    operations.RewriteGroup(
                        _fragments(g.old_fragments), _fragments(g.new_fragments)
                    )
                    for g in self.groups
                ]
            )

    @dataclass
    class CreateIndex(BaseOperation):
        """Index segments added and removed (pylance's ``Index`` objects)."""

        new_indices: list[Index]
        removed_indices: list[Index]

        @classmethod
        def _from_operation(cls, op: Any) -> LanceOperation.CreateIndex:
            return cls(
                [Index.from_pb(i) for i in op.new_indices],
                [Index.from_pb(i) for i in op.removed_indices],
            )

        def _to_operation(self, target: _Target) -> operations.Operation:
            return operations.CreateIndex(
                new_indices=[_index_pb(i) for i in self.new_indices],
                removed_indices=[_index_pb(i) for i in self.removed_indices],
            )

    @dataclass
    class UpdateMap:
        """Changes to a string map: ``updates`` set keys (None removes one), or with
        ``replace`` become the whole map."""

        updates: dict[str, str | None]
        replace: bool = False

        def _to_map(self) -> operations.UpdateMap:
            return operations.UpdateMap(list(self.updates.items()), bool(self.replace))

        @classmethod
        def _from_map(cls, m: operations.UpdateMap | None) -> LanceOperation.UpdateMap | None:
            return None if m is None else cls(dict(m.entries), m.replace)

    @dataclass
    class UpdateConfig(BaseOperation):
        """Config, table-metadata, schema-metadata or per-field (by field id) metadata
        changes, each a ``LanceOperation.UpdateMap``."""

        config_updates: LanceOperation.UpdateMap | None = None
        table_metadata_updates: LanceOperation.UpdateMap | None = None
        schema_metadata_updates: LanceOperation.UpdateMap | None = None
        field_metadata_updates: dict[int, LanceOperation.UpdateMap] | None = None

        @staticmethod
        def _map(m: operations.UpdateMap) -> LanceOperation.UpdateMap:
            return LanceOperation.UpdateMap(dict(m.entries), m.replace)

        @classmethod
        def _from_operation(cls, op: Any) -> LanceOperation.UpdateConfig:
            op = op.normalized()
            conv = LanceOperation.UpdateMap._from_map
            return cls(
                conv(op.config_updates),
                conv(op.table_metadata_updates),
                conv(op.schema_metadata_updates),
                {k: cls._map(v) for k, v in op.field_metadata_updates.items()} or None,
            )

        def _to_operation(self, target: _Target) -> operations.Operation:
            def conv(m: Any) -> operations.UpdateMap | None:
                if m is None:
                    return None
                if not isinstance(m, LanceOperation.UpdateMap):
                    raise TypeError(f"expected a LanceOperation.UpdateMap, got {type(m)}")
                return m._to_map()

            return operations.UpdateConfig(
                config_updates=conv(self.config_updates),
                table_metadata_updates=conv(self.table_metadata_updates),
                schema_metadata_updates=conv(self.schema_metadata_updates),
                field_metadata_updates={
                    int(k): v._to_map() for k, v in (self.field_metadata_updates or {}).items()
                },
            )

    @dataclass
    class DataReplacementGroup:
        """A fragment's data file for some fields, replaced by ``new_file``."""

        fragment_id: int
        new_file: DataFile

    @dataclass
    class DataReplacement(BaseOperation):
        """Data files of existing fragments replaced."""

        replacements: list[LanceOperation.DataReplacementGroup]

        @classmethod
        def _from_operation(cls, op: Any) -> LanceOperation.DataReplacement:
            return cls(
                [
                    LanceOperation.DataReplacementGroup(r.fragment_id, DataFile.from_pb(r.new_file))
                    for r in op.replacements
                ]
            )

        def _to_operation(self, target: _Target) -> operations.Operation:
            return operations.DataReplacement(
                replacements=[
                    operations.DataReplacementGroup(int(r.fragment_id), r.new_file.to_pb())
                    for r in self.replacements
                ]
            )


_WITHOUT_READ_VERSION = (LanceOperation.Overwrite, LanceOperation.Restore)
_BY_KIND: dict[type, Any] = {
    operations.Overwrite: LanceOperation.Overwrite,
    operations.Append: LanceOperation.Append,
    operations.Delete: LanceOperation.Delete,
    operations.Update: LanceOperation.Update,
    operations.Merge: LanceOperation.Merge,
    operations.Project: LanceOperation.Project,
    operations.Restore: LanceOperation.Restore,
    operations.Rewrite: LanceOperation.Rewrite,
    operations.CreateIndex: LanceOperation.CreateIndex,
    operations.DataReplacement: LanceOperation.DataReplacement,
    operations.UpdateConfig: LanceOperation.UpdateConfig,
}


def _metadata(fragments: Iterable[table_pb2.DataFragment]) -> list[FragmentMetadata]:
    return [FragmentMetadata.from_pb(f) for f in fragments]


def _schema_of(op: Any) -> LanceSchema:
    return LanceSchema.from_protos(op.schema, dict(getattr(op, "schema_metadata", {}) or {}))


@dataclass
class Transaction:
    """pylance's ``Transaction``: an operation, the version it was made against, and
    properties (``LanceDataset.commit`` takes one; ``read_transaction`` returns one)."""

    read_version: int
    operation: LanceOperation.BaseOperation
    uuid: str = field(default_factory=new_uuid)
    transaction_properties: dict[str, str] | None = field(default_factory=dict)


def read_transaction(root: str, version: int) -> Transaction | None:
    """The transaction that made ``version`` of the dataset at ``root`` (None if it has
    none), with its operation as a ``LanceOperation``."""
    m = manifest.read_manifest(paths.find_version(root, version).path)
    txn = None
    if m.pb.transaction_file:
        try:
            txn = read_transaction_file(root, m.pb.transaction_file)
        except ObjectNotFoundError:
            txn = None
    if txn is None and m.transaction is not None:
        txn = as_transaction(m.transaction)
    if txn is None:
        return None
    facade = _BY_KIND.get(type(txn.operation))
    if facade is None:
        raise UnsupportedError(f"a {txn.operation} transaction has no LanceOperation form here")
    return Transaction(
        read_version=txn.read_version,
        operation=facade._from_operation(txn.operation),
        uuid=txn.uuid,
        transaction_properties=dict(txn.transaction_properties),
    )


def commit(
    base_uri: Any,
    operation: LanceOperation.BaseOperation | Transaction,
    read_version: int | None = None,
    commit_lock: Any = None,
    storage_options: dict[str, str] | None = None,
    enable_v2_manifest_paths: bool | None = None,
    detached: bool | None = False,
    max_retries: int = 20,
    *,
    commit_message: str | None = None,
    enable_stable_row_ids: bool | None = None,
) -> tuple[str, int]:
    """pylance's ``LanceDataset.commit``: commit ``operation`` made against
    ``read_version`` (required except for Overwrite and Restore), or a ``Transaction``
    (which carries its read version and properties); the dataset root and the new version
    (``Dataset.commit`` opens it)."""
    txn_uuid, properties = None, None
    if isinstance(operation, Transaction):
        if commit_message is not None:
            raise InvalidArgumentError(
                "commit_message is not supported when calling commit with a Transaction.  "
                "Set the message on the transaction properties instead."
            )
        txn_uuid, properties = operation.uuid, dict(operation.transaction_properties or {})
        read_version, operation = operation.read_version, operation.operation
    elif commit_message is not None:
        properties = {LANCE_COMMIT_MESSAGE_KEY: commit_message}

    base_uri = getattr(base_uri, "uri", base_uri)  # a dataset: its root
    if not isinstance(base_uri, str | os.PathLike):
        raise TypeError(f"base_uri must be str, Path, or LanceDataset, got {type(base_uri)}")
    if not isinstance(operation, LanceOperation.BaseOperation):
        raise TypeError(f"operation must be a LanceOperation.BaseOperation, got {type(operation)}")
    if commit_lock is not None:
        raise UnsupportedError("commit_lock is not supported (commits are put-if-absent)")
    if detached:
        raise UnsupportedError("detached commits are not supported")
    if read_version is None and not isinstance(operation, _WITHOUT_READ_VERSION):
        raise InvalidArgumentError(
            "read_version is required for all operations except Overwrite and Restore"
        )
    root = storage.register(base_uri, storage_options)
    versions = paths.list_versions(root)
    if not versions and not isinstance(operation, LanceOperation.Overwrite):
        raise ObjectNotFoundError(
            f"Dataset at path {root} was not found: the dataset must already exist unless "
            "the operation is Overwrite"
        )
    if read_version is None or (not read_version and isinstance(operation, _WITHOUT_READ_VERSION)):
        read_version = versions[-1].version if versions else 0  # replaces whatever is there
    elif read_version and not any(v.version == read_version for v in versions):
        raise ObjectNotFoundError(f"the dataset at {root} has no version {read_version}")
    schema = None
    if read_version:
        schema = manifest.read_manifest(paths.find_version(root, read_version).path).schema
    op = operation._to_operation(_Target(root, read_version, schema))
    txn = new_transaction(read_version, op, transaction_properties=properties)
    if txn_uuid:
        txn.uuid = txn_uuid
    naming = None
    if not versions:
        v1 = enable_v2_manifest_paths is False
        naming = paths.ManifestNaming.V1 if v1 else paths.ManifestNaming.V2
    committed = commit_module.commit(
        root,
        txn,
        naming=naming,
        stable_row_ids=bool(enable_stable_row_ids),
        data_storage_version=_file_version(op) if isinstance(op, operations.Overwrite) else None,
        max_retries=max_retries,
        affected_rows_known=False,
    )
    return root, int(committed.version)


def commit_batch(
    dest: Any,
    transactions: list[Transaction],
    commit_lock: Any = None,
    storage_options: dict[str, str] | None = None,
    enable_v2_manifest_paths: bool | None = None,
    detached: bool | None = False,
    max_retries: int = 20,
) -> tuple[str, int, Transaction]:
    """pylance's ``LanceDataset.commit_batch``: several Append transactions committed as
    ONE (against the oldest read version); the root, the new version and the Transaction
    committed."""
    if not transactions:
        raise InvalidArgumentError("commit_batch needs at least one transaction")
    appended: list = []
    for t in transactions:
        if not isinstance(t, Transaction):
            raise TypeError(f"transactions must be Transaction objects, got {type(t)}")
        if not isinstance(t.operation, LanceOperation.Append):
            raise NotSupportedError("only append transactions are supported in batch commits")
        appended.extend(t.operation.fragments)
    merged = Transaction(
        read_version=min(t.read_version for t in transactions),
        operation=LanceOperation.Append(appended),
    )
    root, version = commit(
        dest,
        merged,
        commit_lock=commit_lock,
        storage_options=storage_options,
        enable_v2_manifest_paths=enable_v2_manifest_paths,
        detached=detached,
        max_retries=max_retries,
    )
    return root, version, merged


def write_fragments(
    data,
    dataset_uri: Any,
    schema: pa.Schema | None = None,
    *,
    return_transaction: bool = False,
    mode: str = "append",
    max_rows_per_file: int = write.DEFAULT_MAX_ROWS_PER_FILE,
    max_rows_per_group: int | None = None,
    max_page_bytes: int | None = None,
    max_bytes_per_file: int | None = None,
    data_storage_version: str | None = None,
    storage_options: dict[str, str] | None = None,
    progress: Any = None,
    fragment_id: int = 0,
) -> list[FragmentMetadata] | Transaction:
    """pylance's ``write_fragments``: stage ``data`` as new fragments (id 0) without
    committing, to be committed later, by anyone, with ``LanceDataset.commit`` or
    :meth:`Dataset.commit_fragments`.  An ``append`` to an existing dataset takes its
    schema and file version; otherwise (a new dataset, or ``overwrite``) the data's schema
    and ``data_storage_version`` (default "stable").  ``return_transaction`` gives the
    Append or Overwrite ``Transaction`` that commits them instead.  ``progress`` (a
    :class:`~lance_format.progress.FragmentWriteProgress`) is told of each fragment as its
    data file is begun and once it is written; the fragments take id ``fragment_id``."""
    if mode not in ("append", "create", "overwrite"):
        raise InvalidArgumentError(f"mode must be append, create or overwrite, not {mode!r}")
    reader = write.to_reader(data, schema)
    root = storage.register(getattr(dataset_uri, "uri", dataset_uri), storage_options)
    versions = paths.list_versions(root)
    current = manifest.read_manifest(versions[-1].path) if versions else None
    if mode == "create" and current is not None:
        raise InvalidArgumentError(f"dataset already exists at {root}")
    if current is not None and mode == "append":
        lance_schema = current.schema
        version = writable(
            data_storage_version or current.data_storage_version,
            "append to a dataset of",
            legacy=True,
        )
    else:
        lance_schema = LanceSchema.from_arrow(reader.schema)
        version = writable(data_storage_version or DEFAULT_VERSION, legacy=True)

    def begin(name: str) -> None:
        if progress is not None:
            file = DataFile(path=name, fields=[])
            progress.begin(FragmentMetadata(id=fragment_id, files=[file], physical_rows=0))

    frags = write.write_fragments(
        reader,
        root,
        lance_schema,
        max_rows_per_file=max_rows_per_file,
        data_storage_version=version,
        max_page_bytes=max_page_bytes,
        max_bytes_per_file=max_bytes_per_file,
        on_new_file=begin,
    )
    metadata = [FragmentMetadata.from_pb(f) for f in frags]
    for frag in metadata:
        frag.id = fragment_id
        if progress is not None:
            progress.complete(frag)
    if not return_transaction:
        return metadata
    read_version = current.version if current is not None else 0
    if current is not None and mode == "append":
        return Transaction(read_version, LanceOperation.Append(metadata))
    return Transaction(read_version, LanceOperation.Overwrite(lance_schema, metadata))


def create_fragment(
    dataset_uri,
    data,
    fragment_id: int | None = None,
    schema: pa.Schema | None = None,
    max_rows_per_group: int | None = 1024,
    progress=None,
    mode: str = "append",
    *,
    data_storage_version: str | None = None,
    storage_options: dict[str, str] | None = None,
) -> FragmentMetadata:
    """pylance's ``LanceFragment.create``: ``data`` as ONE uncommitted fragment."""
    reader = write.to_reader(data, schema)
    if not reader.schema.names:
        raise InvalidDataError("cannot write with an empty schema")
    frags = write_fragments(
        reader,
        dataset_uri,
        mode=mode,
        max_rows_per_file=2**62,
        data_storage_version=data_storage_version,
        storage_options=storage_options,
        progress=progress,
        fragment_id=int(fragment_id or 0),
    )
    assert isinstance(frags, list)  # no return_transaction: the fragments themselves
    if len(frags) != 1:
        raise InvalidDataError("cannot create a fragment without rows")
    return frags[0]


def _file_version(op: operations.Overwrite) -> str | None:
    """The data storage version an overwrite's files were written in (None: keep the
    dataset's, or the default for a new one)."""
    for frag in op.fragments:
        for f in frag.files:
            if f.file_major_version:
                return f"{f.file_major_version}.{f.file_minor_version}"
    return None


__all__ = [
    "Index",
    "IndexFile",
    "LANCE_COMMIT_MESSAGE_KEY",
    "LanceOperation",
    "Transaction",
    "commit",
    "read_transaction",
]
