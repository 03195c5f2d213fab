"""Transactions: the change that produced a dataset version (``lance.table.Transaction``).

A transaction records *what* a commit did (append these fragments, delete these rows, ...)
rather than the resulting state, so that a writer that lost the race for a version can check
whether the winner's change is compatible with its own (:mod:`.conflicts`) and, if it is,
re-apply its change on top of the new latest manifest.

pylance 14 writes each transaction twice, byte for byte the same (docs/format/table.md):

* ``_transactions/{read_version}-{uuid}.txn`` holds the bare protobuf: no length prefix, no
  footer, no magic;
* the manifest file embeds the same bytes (``Manifest`` field 23 points at them).

``read_version`` is the version the change was based on (0, i.e. absent on the wire, for the
creating write); fragments that the commit creates carry id 0 until the
manifest builder assigns ids from ``max_fragment_id``.  Creating a tag writes no
transaction; compaction writes two (ReserveFragments, then Rewrite) with the same read
version.

The dataclasses below mirror the operations of pylance 14's ``transaction.proto`` one to one
(field names are the proto's), keeping fragments, files, fields and indices as the generated
protobuf messages that the rest of :mod:`lance_format.table` works with.  An operation this
library does not know (a newer writer's) is kept as :class:`UnknownOperation`, bytes intact,
so it can be read, reported and conservatively treated as a conflict.
"""

from __future__ import annotations

import re
import uuid as uuidlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from google.protobuf.message import DecodeError, Message
from google.protobuf.unknown_fields import UnknownFieldSet

from .. import storage
from ..errors import CorruptFileError, InvalidArgumentError, ObjectNotFoundError
from ..pb import file_pb2, table_pb2, transaction_pb2

TXN_DIR = "_transactions"
TXN_SUFFIX = ".txn"
OPERATION_FIELD_MIN = 100
"""Operation oneof members are numbered from 100 (``Append = 100`` ... ``DataOverlay = 115``);
an unknown field from 100 up on a transaction without a known operation is a newer operation."""

_TXN_NAME = re.compile(r"^(\d+)-([^/\\]+)\.txn$")

PbTransaction = transaction_pb2.Transaction
DataFragment = table_pb2.DataFragment
DataFile = table_pb2.DataFile
Field = file_pb2.Field
IndexMetadata = table_pb2.IndexMetadata


def _copies(messages: Iterable[Message]) -> list[Any]:
    """Detached copies, so a dataclass never aliases a message it was built from."""
    out = []
    for m in messages:
        c = type(m)()
        c.CopyFrom(m)
        out.append(c)
    return out


def _copy_or_none(parent: Message, name: str) -> Any:
    if not parent.HasField(name):
        return None
    sub = getattr(parent, name)
    c = type(sub)()
    c.CopyFrom(sub)
    return c


# -- small value types --------------------------------------------------------------------


@dataclass
class UpdateMap:
    """Incremental (or, with ``replace``, wholesale) change of a string map.  An entry whose
    value is None removes the key."""

    entries: list[tuple[str, str | None]] = field(default_factory=list)
    replace: bool = False

    @classmethod
    def from_pb(cls, msg: transaction_pb2.Transaction.UpdateMap) -> UpdateMap:
        return cls(
            entries=[(e.key, e.value if e.HasField("value") else None) for e in msg.update_entries],
            replace=msg.replace,
        )

    def fill_pb(self, msg: transaction_pb2.Transaction.UpdateMap) -> None:
        for key, value in self.entries:
            e = msg.update_entries.add(key=key)
            if value is not None:
                e.value = value
        msg.replace = self.replace

    @property
    def upserted_keys(self) -> set[str]:
        return {k for k, v in self.entries if v is not None}

    @property
    def deleted_keys(self) -> set[str]:
        return {k for k, v in self.entries if v is None}

    @property
    def keys(self) -> set[str]:
        return {k for k, _ in self.entries}

    @property
    def is_effective(self) -> bool:
        """Whether applying it can change anything (upstream treats an empty, non-replacing
        map as no update)."""
        return self.replace or bool(self.entries)


@dataclass
class RewriteGroup:
    """Fragments replaced together by new fragments holding the same rows (compaction)."""

    old_fragments: list[DataFragment] = field(default_factory=list)
    new_fragments: list[DataFragment] = field(default_factory=list)


@dataclass
class DataReplacementGroup:
    """A fragment's data file for some fields, replaced by ``new_file``."""

    fragment_id: int
    new_file: DataFile | None = None


# -- operations ---------------------------------------------------------------------------


class Operation:
    """Base of the operation dataclasses.  ``KIND`` is the proto oneof member name (as
    ``Transaction.WhichOneof("operation")`` returns it); ``NAME`` is pylance's display name,
    used in conflict messages."""

    KIND: ClassVar[str] = ""
    NAME: ClassVar[str] = ""

    @classmethod
    def from_pb(cls, msg: Any) -> Operation:
        raise NotImplementedError

    def fill_pb(self, msg: Any) -> None:
        raise NotImplementedError

    def __str__(self) -> str:
        return self.NAME


@dataclass
class Append(Operation):
    """New rows in new fragments (ids are assigned at commit)."""

    KIND: ClassVar[str] = "append"
    NAME: ClassVar[str] = "Append"
    fragments: list[DataFragment] = field(default_factory=list)

    @classmethod
    def from_pb(cls, msg: Any) -> Append:
        return cls(fragments=_copies(msg.fragments))

    def fill_pb(self, msg: Any) -> None:
        msg.fragments.extend(self.fragments)


@dataclass
class Delete(Operation):
    """Rows deleted: fragments that got a new deletion file, and fragments that lost every row
    (those leave the manifest)."""

    KIND: ClassVar[str] = "delete"
    NAME: ClassVar[str] = "Delete"
    updated_fragments: list[DataFragment] = field(default_factory=list)
    deleted_fragment_ids: list[int] = field(default_factory=list)
    predicate: str = ""

    @classmethod
    def from_pb(cls, msg: Any) -> Delete:
        return cls(
            updated_fragments=_copies(msg.updated_fragments),
            deleted_fragment_ids=list(msg.deleted_fragment_ids),
            predicate=msg.predicate,
        )

    def fill_pb(self, msg: Any) -> None:
        msg.updated_fragments.extend(self.updated_fragments)
        msg.deleted_fragment_ids.extend(self.deleted_fragment_ids)
        msg.predicate = self.predicate


@dataclass
class Overwrite(Operation):
    """Creates the dataset or replaces all of it (schema and fragments)."""

    KIND: ClassVar[str] = "overwrite"
    NAME: ClassVar[str] = "Overwrite"
    fragments: list[DataFragment] = field(default_factory=list)
    schema: list[Field] = field(default_factory=list)
    schema_metadata: dict[str, bytes] = field(default_factory=dict)
    config_upsert_values: dict[str, str] = field(default_factory=dict)
    initial_bases: list[table_pb2.BasePath] = field(default_factory=list)

    @classmethod
    def from_pb(cls, msg: Any) -> Overwrite:
        return cls(
            fragments=_copies(msg.fragments),
            schema=_copies(msg.schema),
            schema_metadata=dict(msg.schema_metadata),
            config_upsert_values=dict(msg.config_upsert_values),
            initial_bases=_copies(msg.initial_bases),
        )

    def fill_pb(self, msg: Any) -> None:
        msg.fragments.extend(self.fragments)
        msg.schema.extend(self.schema)
        msg.schema_metadata.update(self.schema_metadata)
        msg.config_upsert_values.update(self.config_upsert_values)
        msg.initial_bases.extend(self.initial_bases)


@dataclass
class CreateIndex(Operation):
    """Adds and/or removes index segments (create_index, drop_index, pylance's builds)."""

    KIND: ClassVar[str] = "create_index"
    NAME: ClassVar[str] = "CreateIndex"
    new_indices: list[IndexMetadata] = field(default_factory=list)
    removed_indices: list[IndexMetadata] = field(default_factory=list)

    @classmethod
    def from_pb(cls, msg: Any) -> CreateIndex:
        return cls(
            new_indices=_copies(msg.new_indices), removed_indices=_copies(msg.removed_indices)
        )

    def fill_pb(self, msg: Any) -> None:
        msg.new_indices.extend(self.new_indices)
        msg.removed_indices.extend(self.removed_indices)


@dataclass
class Rewrite(Operation):
    """Rows moved to new fragments without changing them (compaction).  The deprecated flat
    ``old_fragments``/``new_fragments`` form is read as one group, as upstream does."""

    KIND: ClassVar[str] = "rewrite"
    NAME: ClassVar[str] = "Rewrite"
    groups: list[RewriteGroup] = field(default_factory=list)
    rewritten_indices: list[transaction_pb2.Transaction.Rewrite.RewrittenIndex] = field(
        default_factory=list
    )

    @classmethod
    def from_pb(cls, msg: Any) -> Rewrite:
        if len(msg.groups):
            groups = [
                RewriteGroup(_copies(g.old_fragments), _copies(g.new_fragments)) for g in msg.groups
            ]
        elif len(msg.old_fragments) or len(msg.new_fragments):
            groups = [RewriteGroup(_copies(msg.old_fragments), _copies(msg.new_fragments))]
        else:
            groups = []
        return cls(groups=groups, rewritten_indices=_copies(msg.rewritten_indices))

    def fill_pb(self, msg: Any) -> None:
        for g in self.groups:
            out = msg.groups.add()
            out.old_fragments.extend(g.old_fragments)
            out.new_fragments.extend(g.new_fragments)
        msg.rewritten_indices.extend(self.rewritten_indices)

    @property
    def old_fragment_ids(self) -> set[int]:
        return {f.id for g in self.groups for f in g.old_fragments}


@dataclass
class Merge(Operation):
    """Columns added: every fragment (with its new data files) and the new schema.
    pylance's add_columns writes ``preserves_nullability = True``."""

    KIND: ClassVar[str] = "merge"
    NAME: ClassVar[str] = "Merge"
    fragments: list[DataFragment] = field(default_factory=list)
    schema: list[Field] = field(default_factory=list)
    schema_metadata: dict[str, bytes] = field(default_factory=dict)
    preserves_nullability: bool = False

    @classmethod
    def from_pb(cls, msg: Any) -> Merge:
        return cls(
            fragments=_copies(msg.fragments),
            schema=_copies(msg.schema),
            schema_metadata=dict(msg.schema_metadata),
            preserves_nullability=msg.preserves_nullability,
        )

    def fill_pb(self, msg: Any) -> None:
        msg.fragments.extend(self.fragments)
        msg.schema.extend(self.schema)
        msg.schema_metadata.update(self.schema_metadata)
        msg.preserves_nullability = self.preserves_nullability


@dataclass
class Project(Operation):
    """Columns dropped or renamed: only the schema changes.  pylance's drop_columns writes
    ``preserves_nullability = True``."""

    KIND: ClassVar[str] = "project"
    NAME: ClassVar[str] = "Project"
    schema: list[Field] = field(default_factory=list)
    preserves_nullability: bool = False

    @classmethod
    def from_pb(cls, msg: Any) -> Project:
        return cls(schema=_copies(msg.schema), preserves_nullability=msg.preserves_nullability)

    def fill_pb(self, msg: Any) -> None:
        msg.schema.extend(self.schema)
        msg.preserves_nullability = self.preserves_nullability


@dataclass
class Restore(Operation):
    """An old version made current again."""

    KIND: ClassVar[str] = "restore"
    NAME: ClassVar[str] = "Restore"
    version: int = 0

    @classmethod
    def from_pb(cls, msg: Any) -> Restore:
        return cls(version=msg.version)

    def fill_pb(self, msg: Any) -> None:
        msg.version = self.version


@dataclass
class ReserveFragments(Operation):
    """Fragment ids reserved (bumps ``max_fragment_id``) for a later Rewrite."""

    KIND: ClassVar[str] = "reserve_fragments"
    NAME: ClassVar[str] = "ReserveFragments"
    num_fragments: int = 0

    @classmethod
    def from_pb(cls, msg: Any) -> ReserveFragments:
        return cls(num_fragments=msg.num_fragments)

    def fill_pb(self, msg: Any) -> None:
        msg.num_fragments = self.num_fragments


@dataclass
class Update(Operation):
    """Rows updated: in place (REWRITE_COLUMNS: new data files) or moved (REWRITE_ROWS: old
    rows deleted, new versions in ``new_fragments``), as ``update`` and merge-insert do."""

    KIND: ClassVar[str] = "update"
    NAME: ClassVar[str] = "Update"
    REWRITE_ROWS: ClassVar[int] = transaction_pb2.Transaction.REWRITE_ROWS
    REWRITE_COLUMNS: ClassVar[int] = transaction_pb2.Transaction.REWRITE_COLUMNS
    removed_fragment_ids: list[int] = field(default_factory=list)
    updated_fragments: list[DataFragment] = field(default_factory=list)
    new_fragments: list[DataFragment] = field(default_factory=list)
    fields_modified: list[int] = field(default_factory=list)
    compacted_sstables: list[table_pb2.CompactedSsTable] = field(default_factory=list)
    fields_for_preserving_frag_bitmap: list[int] = field(default_factory=list)
    update_mode: int = 0
    inserted_rows: transaction_pb2.Transaction.KeyExistenceFilter | None = None
    updated_fragment_offsets: dict[int, list[int]] = field(default_factory=dict)
    updated_fragment_offset_bitmaps: dict[int, bytes] = field(default_factory=dict)

    @classmethod
    def from_pb(cls, msg: Any) -> Update:
        return cls(
            removed_fragment_ids=list(msg.removed_fragment_ids),
            updated_fragments=_copies(msg.updated_fragments),
            new_fragments=_copies(msg.new_fragments),
            fields_modified=list(msg.fields_modified),
            compacted_sstables=_copies(msg.compacted_sstables),
            fields_for_preserving_frag_bitmap=list(msg.fields_for_preserving_frag_bitmap),
            update_mode=msg.update_mode,
            inserted_rows=_copy_or_none(msg, "inserted_rows"),
            updated_fragment_offsets={
                k: list(v.values) for k, v in msg.updated_fragment_offsets.items()
            },
            updated_fragment_offset_bitmaps=dict(msg.updated_fragment_offset_bitmaps),
        )

    def fill_pb(self, msg: Any) -> None:
        msg.removed_fragment_ids.extend(self.removed_fragment_ids)
        msg.updated_fragments.extend(self.updated_fragments)
        msg.new_fragments.extend(self.new_fragments)
        msg.fields_modified.extend(self.fields_modified)
        msg.compacted_sstables.extend(self.compacted_sstables)
        msg.fields_for_preserving_frag_bitmap.extend(self.fields_for_preserving_frag_bitmap)
        msg.update_mode = self.update_mode
        if self.inserted_rows is not None:
            msg.inserted_rows.CopyFrom(self.inserted_rows)
        for k, values in self.updated_fragment_offsets.items():
            msg.updated_fragment_offsets[k].values.extend(values)
        msg.updated_fragment_offset_bitmaps.update(self.updated_fragment_offset_bitmaps)


@dataclass
class UpdateConfig(Operation):
    """Config, table-metadata, schema-metadata or field-metadata changes.

    pylance 14 writes the map-update fields (6-9).  The deprecated fields (1-4) are kept
    as read, for a lossless round trip; :meth:`normalized` gives the map-update view of
    either form, translated as upstream's ``TryFrom<pb::Transaction>`` does (old config
    upserts/deletes become one incremental map, old schema/field metadata a replacing map).
    """

    KIND: ClassVar[str] = "update_config"
    NAME: ClassVar[str] = "UpdateConfig"
    config_updates: UpdateMap | None = None
    table_metadata_updates: UpdateMap | None = None
    schema_metadata_updates: UpdateMap | None = None
    field_metadata_updates: dict[int, UpdateMap] = field(default_factory=dict)
    upsert_values: dict[str, str] = field(default_factory=dict)
    delete_keys: list[str] = field(default_factory=list)
    schema_metadata: dict[str, str] = field(default_factory=dict)
    field_metadata: dict[int, dict[str, str]] = field(default_factory=dict)

    @classmethod
    def from_pb(cls, msg: Any) -> UpdateConfig:
        def opt(name: str) -> UpdateMap | None:
            return UpdateMap.from_pb(getattr(msg, name)) if msg.HasField(name) else None

        return cls(
            config_updates=opt("config_updates"),
            table_metadata_updates=opt("table_metadata_updates"),
            schema_metadata_updates=opt("schema_metadata_updates"),
            field_metadata_updates={
                k: UpdateMap.from_pb(v) for k, v in msg.field_metadata_updates.items()
            },
            upsert_values=dict(msg.upsert_values),
            delete_keys=list(msg.delete_keys),
            schema_metadata=dict(msg.schema_metadata),
            field_metadata={k: dict(v.metadata) for k, v in msg.field_metadata.items()},
        )

    def fill_pb(self, msg: Any) -> None:
        for name in ("config_updates", "table_metadata_updates", "schema_metadata_updates"):
            value = getattr(self, name)
            if value is not None:
                value.fill_pb(getattr(msg, name))
        for k, m in self.field_metadata_updates.items():
            m.fill_pb(msg.field_metadata_updates[k])
        msg.upsert_values.update(self.upsert_values)
        msg.delete_keys.extend(self.delete_keys)
        msg.schema_metadata.update(self.schema_metadata)
        for k, md in self.field_metadata.items():
            msg.field_metadata[k].metadata.update(md)

    @property
    def has_legacy_fields(self) -> bool:
        return bool(
            self.upsert_values or self.delete_keys or self.schema_metadata or self.field_metadata
        )

    def normalized(self) -> UpdateConfig:
        """The same change expressed with the map-update fields only."""
        if not self.has_legacy_fields:
            return self
        config = None
        if self.upsert_values or self.delete_keys:
            config = UpdateMap(
                [*self.upsert_values.items(), *((k, None) for k in self.delete_keys)]
            )
        schema = (
            UpdateMap(list(self.schema_metadata.items()), True) if self.schema_metadata else None
        )
        fields = {k: UpdateMap(list(md.items()), True) for k, md in self.field_metadata.items()}
        return UpdateConfig(
            config_updates=config,
            table_metadata_updates=None,
            schema_metadata_updates=schema,
            field_metadata_updates=fields,
        )


@dataclass
class DataReplacement(Operation):
    """Data files of existing fragments replaced (e.g. an all-null column backfilled)."""

    KIND: ClassVar[str] = "data_replacement"
    NAME: ClassVar[str] = "DataReplacement"
    replacements: list[DataReplacementGroup] = field(default_factory=list)

    @classmethod
    def from_pb(cls, msg: Any) -> DataReplacement:
        return cls(
            replacements=[
                DataReplacementGroup(r.fragment_id, _copy_or_none(r, "new_file"))
                for r in msg.replacements
            ]
        )

    def fill_pb(self, msg: Any) -> None:
        for r in self.replacements:
            out = msg.replacements.add(fragment_id=r.fragment_id)
            if r.new_file is not None:
                out.new_file.CopyFrom(r.new_file)

    @property
    def fragment_ids(self) -> set[int]:
        return {r.fragment_id for r in self.replacements}


@dataclass
class UpdateMemWalState(Operation):
    """MemWAL SSTables merged into the base table (read support only)."""

    KIND: ClassVar[str] = "update_mem_wal_state"
    NAME: ClassVar[str] = "UpdateMemWalState"
    compacted_sstables: list[table_pb2.CompactedSsTable] = field(default_factory=list)

    @classmethod
    def from_pb(cls, msg: Any) -> UpdateMemWalState:
        return cls(compacted_sstables=_copies(msg.compacted_sstables))

    def fill_pb(self, msg: Any) -> None:
        msg.compacted_sstables.extend(self.compacted_sstables)


@dataclass
class Clone(Operation):
    """A (shallow) clone of another dataset (read support only)."""

    KIND: ClassVar[str] = "clone"
    NAME: ClassVar[str] = "Clone"
    is_shallow: bool = False
    ref_name: str | None = None
    ref_version: int = 0
    ref_path: str = ""
    branch_name: str | None = None

    @classmethod
    def from_pb(cls, msg: Any) -> Clone:
        return cls(
            is_shallow=msg.is_shallow,
            ref_name=msg.ref_name if msg.HasField("ref_name") else None,
            ref_version=msg.ref_version,
            ref_path=msg.ref_path,
            branch_name=msg.branch_name if msg.HasField("branch_name") else None,
        )

    def fill_pb(self, msg: Any) -> None:
        msg.is_shallow = self.is_shallow
        if self.ref_name is not None:
            msg.ref_name = self.ref_name
        msg.ref_version = self.ref_version
        msg.ref_path = self.ref_path
        if self.branch_name is not None:
            msg.branch_name = self.branch_name


@dataclass
class UpdateBases(Operation):
    """Base paths added (read support only)."""

    KIND: ClassVar[str] = "update_bases"
    NAME: ClassVar[str] = "UpdateBases"
    new_bases: list[table_pb2.BasePath] = field(default_factory=list)

    @classmethod
    def from_pb(cls, msg: Any) -> UpdateBases:
        return cls(new_bases=_copies(msg.new_bases))

    def fill_pb(self, msg: Any) -> None:
        msg.new_bases.extend(self.new_bases)


@dataclass
class DataOverlay(Operation):
    """Overlay files appended to fragments (read support only)."""

    KIND: ClassVar[str] = "data_overlay"
    NAME: ClassVar[str] = "DataOverlay"
    groups: list[transaction_pb2.Transaction.DataOverlayGroup] = field(default_factory=list)

    @classmethod
    def from_pb(cls, msg: Any) -> DataOverlay:
        return cls(groups=_copies(msg.groups))

    def fill_pb(self, msg: Any) -> None:
        msg.groups.extend(self.groups)

    @property
    def fragment_ids(self) -> set[int]:
        return {g.fragment_id for g in self.groups}


@dataclass
class UnknownOperation(Operation):
    """An operation this library does not know, e.g. from a newer lance.  ``field_number`` is
    its oneof field number; ``raw`` holds its wire bytes (tag included), so the transaction
    re-serialises unchanged.  Conflict checks treat it as conflicting with everything."""

    KIND: ClassVar[str] = "unknown"
    NAME: ClassVar[str] = "Unknown"
    field_number: int = 0
    raw: bytes = b""

    def __str__(self) -> str:
        return f"Unknown(field {self.field_number})"


OPERATIONS: dict[str, type[Operation]] = {
    cls.KIND: cls
    for cls in (
        Append,
        Delete,
        Overwrite,
        CreateIndex,
        Rewrite,
        Merge,
        Restore,
        ReserveFragments,
        Update,
        Project,
        UpdateConfig,
        DataReplacement,
        UpdateMemWalState,
        Clone,
        UpdateBases,
        DataOverlay,
    )
}


# -- the transaction ----------------------------------------------------------------------


def new_uuid() -> str:
    """A fresh hyphenated UUIDv4, the form pylance uses in transaction file names."""
    return str(uuidlib.uuid4())


@dataclass
class Transaction:
    """One transaction.  ``unknown_fields`` carries (as wire bytes) any header field a newer
    writer added, so that re-writing a transaction keeps it (a field unknown to us *inside*
    an operation message is kept only where that message is held as a protobuf)."""

    read_version: int
    operation: Operation
    uuid: str = field(default_factory=new_uuid)
    tag: str | None = None
    transaction_properties: dict[str, str] = field(default_factory=dict)
    unknown_fields: bytes = b""

    @property
    def kind(self) -> str:
        """The proto oneof member name (``"append"``, ``"delete"``, ...; ``"unknown"``)."""
        return self.operation.KIND

    @property
    def file_name(self) -> str:
        """``{read_version}-{uuid}.txn``, the name under ``_transactions/`` (and the value of
        ``Manifest.transaction_file``)."""
        return f"{self.read_version}-{self.uuid}{TXN_SUFFIX}"

    # -- protobuf -------------------------------------------------------------------------

    def to_pb(self) -> PbTransaction:
        msg = PbTransaction(read_version=self.read_version, uuid=self.uuid, tag=self.tag or "")
        msg.transaction_properties.update(self.transaction_properties)
        if isinstance(self.operation, UnknownOperation):
            msg.MergeFromString(self.operation.raw)
        else:
            self.operation.fill_pb(getattr(msg, self.operation.KIND))
        if self.unknown_fields:
            msg.MergeFromString(self.unknown_fields)
        return msg

    def to_bytes(self) -> bytes:
        return self.to_pb().SerializeToString()

    @classmethod
    def from_pb(cls, msg: PbTransaction, *, path: str | None = None) -> Transaction:
        """Decode a ``lance.table.Transaction``.  A transaction with no operation at all is
        corrupt; one whose operation is unknown becomes :class:`UnknownOperation`."""
        unknown: list[tuple[int, bytes]] = []
        if len(UnknownFieldSet(msg)):  # rare: only then re-serialise to find their bytes
            known_numbers = {f.number for f in PbTransaction.DESCRIPTOR.fields}
            unknown = [
                span
                for span in _scan_fields(msg.SerializeToString(), path)
                if span[0] not in known_numbers
            ]
        kind = msg.WhichOneof("operation")
        header_unknown = unknown
        if kind is not None:
            operation: Operation = OPERATIONS[kind].from_pb(getattr(msg, kind))
        else:
            ops = [s for s in unknown if s[0] >= OPERATION_FIELD_MIN]
            if not ops:
                raise CorruptFileError("the transaction has no operation", path=path)
            number = ops[0][0]
            operation = UnknownOperation(
                field_number=number, raw=b"".join(s[1] for s in ops if s[0] == number)
            )
            header_unknown = [s for s in unknown if s[0] != number]
        return cls(
            read_version=msg.read_version,
            operation=operation,
            uuid=msg.uuid,
            tag=msg.tag or None,
            transaction_properties=dict(msg.transaction_properties),
            unknown_fields=b"".join(s[1] for s in header_unknown),
        )

    @classmethod
    def from_bytes(cls, data: bytes, *, path: str | None = None) -> Transaction:
        """Decode the bare protobuf bytes of a ``.txn`` file (or of a manifest's inline
        transaction section); anything that does not parse is a :class:`CorruptFileError`."""
        try:
            msg = PbTransaction.FromString(data)
        except (DecodeError, RuntimeError, ValueError) as e:
            raise CorruptFileError(f"the transaction does not parse: {e}", path=path) from None
        return cls.from_pb(msg, path=path)


def as_transaction(txn: Transaction | PbTransaction) -> Transaction:
    """Accept either form: the dataset layer sometimes holds the raw protobuf."""
    if isinstance(txn, Transaction):
        return txn
    if isinstance(txn, PbTransaction):
        return Transaction.from_pb(txn)
    raise InvalidArgumentError(f"expected a transaction, got {type(txn).__name__}")


def new_transaction(
    read_version: int,
    operation: Operation,
    *,
    tag: str | None = None,
    transaction_properties: Mapping[str, str] | None = None,
) -> Transaction:
    """A transaction with a fresh uuid."""
    if read_version < 0:
        raise InvalidArgumentError(f"read_version must be >= 0, got {read_version}")
    return Transaction(
        read_version=read_version,
        operation=operation,
        tag=tag,
        transaction_properties=dict(transaction_properties or {}),
    )


def _scan_fields(data: bytes, path: str | None) -> list[tuple[int, bytes]]:
    """Split a serialised message into its top-level fields: (field number, wire bytes).

    Only needed to carry fields this library does not know through a round trip; the
    generated parser has already validated the structure, this re-checks it cheaply."""
    out = []
    pos, n = 0, len(data)

    def varint() -> int:
        nonlocal pos
        shift = value = 0
        while True:
            if pos >= n or shift > 63:
                raise CorruptFileError("truncated or overlong varint in transaction", path=path)
            b = data[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            if b < 0x80:
                return value
            shift += 7

    while pos < n:
        start = pos
        key = varint()
        number, wire = key >> 3, key & 7
        if wire == 0:
            varint()
        elif wire == 1:
            pos += 8
        elif wire == 2:
            length = varint()
            pos += length
        elif wire == 5:
            pos += 4
        else:  # groups (3/4) are not used by any Lance message
            raise CorruptFileError(f"unexpected wire type {wire} in transaction", path=path)
        if pos > n or number == 0:
            raise CorruptFileError("truncated field in transaction", path=path)
        out.append((number, data[start:pos]))
    return out


# -- files --------------------------------------------------------------------------------


def parse_transaction_file_name(name: str) -> tuple[int, str] | None:
    """``(read_version, uuid)`` of a ``{read_version}-{uuid}.txn`` name, else None."""
    m = _TXN_NAME.match(name)
    return (int(m.group(1)), m.group(2)) if m else None


def transaction_path(root: str, name: str) -> str:
    """Where a transaction named in a manifest lives.  The manifest stores the bare file
    name (pylance: ``Manifest.transaction_file``); a leading ``_transactions/`` is tolerated.
    Anything that could escape the directory is refused as corrupt."""
    rel = name[len(TXN_DIR) + 1 :] if name.startswith(TXN_DIR + "/") else name
    if not rel or "/" in rel or "\\" in rel or rel in (".", ".."):
        raise CorruptFileError(f"invalid transaction file name {name!r}")
    return storage.join(root, TXN_DIR, rel)


def write_transaction_file(root: str, txn: Transaction | PbTransaction) -> str:
    """Write ``_transactions/{read_version}-{uuid}.txn`` (bare protobuf, as pylance) and
    return its name, the value for ``Manifest.transaction_file``.

    Written atomically, so a reader never sees a partial file."""
    t = as_transaction(txn)
    if not t.uuid or "/" in t.uuid or "\\" in t.uuid:
        raise InvalidArgumentError(f"invalid transaction uuid {t.uuid!r}")
    data = t.to_bytes()
    name = t.file_name
    storage.put(storage.join(root, TXN_DIR, name), data)
    return name


def read_transaction_file(root: str, name: str) -> Transaction:
    """Read a transaction named in a manifest.  Missing or unreadable -> LanceIOError;
    bytes that do not form a transaction -> CorruptFileError."""
    path = transaction_path(root, name)
    try:
        data = storage.read_bytes(path)
    except ObjectNotFoundError:
        raise ObjectNotFoundError("transaction file not found", path=path) from None
    return Transaction.from_bytes(data, path=path)


__all__ = [
    "Append",
    "Clone",
    "CreateIndex",
    "DataOverlay",
    "DataReplacement",
    "DataReplacementGroup",
    "Delete",
    "Merge",
    "OPERATIONS",
    "Operation",
    "Overwrite",
    "Project",
    "ReserveFragments",
    "Restore",
    "Rewrite",
    "RewriteGroup",
    "Transaction",
    "UnknownOperation",
    "Update",
    "UpdateBases",
    "UpdateConfig",
    "UpdateMap",
    "UpdateMemWalState",
    "as_transaction",
    "new_transaction",
    "new_uuid",
    "parse_transaction_file_name",
    "read_transaction_file",
    "transaction_path",
    "write_transaction_file",
]
