"""The operations a transaction can carry, one dataclass each (``lance.table.Transaction``'s
``operation`` oneof, field names as in the proto).

Each class owns everything about its operation:

* its protobuf form (:meth:`Operation.from_pb` / :meth:`Operation.fill_pb`; the default,
  driven by the proto descriptor, copies fields of the same name, so most classes need none);
* how it turns the manifest it was read against into the next one (:meth:`Operation.apply`);
* its conflict rules against an operation committed concurrently (:meth:`Operation.check`),
  following pylance 14 (upstream ``conflict_resolver.rs``, one ``check_<op>_txn`` per kind:
  the verdicts are explained in :mod:`.conflicts`).

Adding an operation means adding one class here (and to :data:`OPERATIONS`).  Fragments,
files, fields and indices stay the generated protobuf messages the rest of
:mod:`lance_format.table` works with.  An operation this library does not know (a newer
writer's) is kept as :class:`UnknownOperation`, bytes intact, and conflicts with everything.
"""

from __future__ import annotations

import enum
import operator
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, ClassVar

import numpy as np
import pyroaring
from google.protobuf import timestamp_pb2
from google.protobuf.message import Message

from ..errors import InvalidArgumentError
from ..pb import file_pb2, table_pb2, transaction_pb2
from ..version import DEFAULT_VERSION, writable
from . import features, manifest, paths, row_versions, rowids

DataFragment = table_pb2.DataFragment
DataFile = table_pb2.DataFile
Field = file_pb2.Field
IndexMetadata = table_pb2.IndexMetadata

FRAG_REUSE_INDEX_NAME = "__lance_frag_reuse"
MEM_WAL_INDEX_NAME = "__lance_mem_wal"


# -- protobuf helpers ---------------------------------------------------------------------


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


def _field_from_pb(msg: Message, name: str) -> Any:
    """A proto field as a dataclass field holds it: messages as detached copies, optional
    fields as None when unset, scalar maps as dicts."""
    fd = msg.DESCRIPTOR.fields_by_name[name]
    value = getattr(msg, name)
    if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
        return dict(value)
    if fd.is_repeated:
        return _copies(value) if fd.message_type is not None else list(value)
    if fd.message_type is not None:
        return _copy_or_none(msg, name)
    if fd.has_presence and not msg.HasField(name):
        return None
    return value


def _field_to_pb(msg: Message, name: str, value: Any) -> None:
    if value is None:
        return
    fd = msg.DESCRIPTOR.fields_by_name[name]
    target = getattr(msg, name)
    if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
        target.update(value)
    elif fd.is_repeated:
        target.extend(value)
    elif fd.message_type is not None:
        target.CopyFrom(value)
    else:
        setattr(msg, name, value)


# -- conflict vocabulary ------------------------------------------------------------------


class Resolution(enum.Enum):
    """What a writer may do about one concurrently committed transaction (see
    :mod:`.conflicts`)."""

    COMPATIBLE = "compatible"
    MERGE_DELETIONS = "merge_deletions"
    RETRYABLE = "retryable"
    CONFLICT = "conflict"


COMPATIBLE = Resolution.COMPATIBLE
MERGE_DELETIONS = Resolution.MERGE_DELETIONS
RETRYABLE = Resolution.RETRYABLE
CONFLICT = Resolution.CONFLICT


@dataclass(frozen=True)
class Verdict:
    """A resolution, why, and (for ``MERGE_DELETIONS``) which fragments need merging."""

    resolution: Resolution
    reason: str = ""
    merge_fragment_ids: frozenset[int] = frozenset()


OK = Verdict(COMPATIBLE)


def retry(reason: str) -> Verdict:
    return Verdict(RETRYABLE, reason)


def conflict(reason: str) -> Verdict:
    return Verdict(CONFLICT, reason)


@dataclass
class CheckContext:
    """What a check knows about our side beyond the operation: the fragments it modifies,
    those fragments as they were at our read version (None: unknown), and whether our
    delete/update can name the rows it hit."""

    modified: frozenset[int]
    initial: Mapping[int, DataFragment] | None
    rows_known: bool


def fragment_bitmap(index: IndexMetadata) -> set[int] | None:
    """Fragment ids an index covers; None when unknown (absent or unreadable)."""
    if not index.fragment_bitmap:
        return None
    try:
        return set(pyroaring.BitMap.deserialize(index.fragment_bitmap))
    except (ValueError, OverflowError):
        return None


def _has_index(indices: Iterable[IndexMetadata], name: str) -> bool:
    return any(i.name == name for i in indices)


def _covered(indices: Iterable[IndexMetadata]) -> set[int] | None:
    """Union of the fragment bitmaps; None when one is unknown."""
    out: set[int] = set()
    for idx in indices:
        bitmap = fragment_bitmap(idx)
        if bitmap is None:
            return None
        out |= bitmap
    return out


def _sstables(committed, to_commit) -> Verdict:
    """``check_compacted_sstables_conflict``: the same MemWAL shard compacted by both sides;
    an equal or newer committed generation is final, an older one worth a retry."""
    for c in committed:
        for t in to_commit:
            if c.shard_id == t.shard_id:
                if c.generation >= t.generation:
                    return conflict("the same MemWAL shard was already compacted")
                return retry("the same MemWAL shard was compacted concurrently")
    return OK


def _deletion_of(frag: DataFragment) -> table_pb2.DeletionFile | None:
    return frag.deletion_file if frag.HasField("deletion_file") else None


# -- building the next manifest -----------------------------------------------------------


@dataclass
class ManifestChange:
    """The next manifest while an operation is applied to it: ``manifest`` starts as a copy
    of the read one (None before the dataset exists), with the version bumped."""

    manifest: table_pb2.Manifest
    index_section: table_pb2.IndexSection | None
    root: str
    creating: bool
    data_storage_version: str | None = None


def assign_ids(m: table_pb2.Manifest, fragments: Iterable[DataFragment]) -> list[DataFragment]:
    """New fragments get ids after ``max_fragment_id`` (ids are never reused; an unset
    ``max_fragment_id`` means no fragment ever existed), and stable row ids from
    ``next_row_id`` when the dataset has them."""
    stable = bool(m.reader_feature_flags & features.FLAG_STABLE_ROW_IDS)
    start = m.max_fragment_id + 1 if m.HasField("max_fragment_id") else 0
    out = []
    for i, f in enumerate(fragments):
        g = DataFragment()
        g.CopyFrom(f)
        g.id = start + i
        if stable and g.WhichOneof("row_id_sequence") is None:
            # rows moved by an update keep their ids; only new rows get fresh ones
            first = m.next_row_id
            g.inline_row_ids = rowids.encode_row_ids(
                np.arange(first, first + g.physical_rows, dtype=np.uint64)
            )
            m.next_row_id = first + g.physical_rows
            row_versions.stamp_new(g, m.version)
        out.append(g)
    if out:
        m.max_fragment_id = out[-1].id
    return out


def _replace_fragments(m: table_pb2.Manifest, updated, removed) -> None:
    """Swap in fragments with new deletion files and drop the fully deleted ones."""
    by_id = {f.id: f for f in updated}
    gone = set(removed)
    kept = [by_id.get(f.id, f) for f in m.fragments if f.id not in gone]
    del m.fragments[:]
    m.fragments.extend(kept)


def _set_fields(m: table_pb2.Manifest, schema: Iterable[Field]) -> None:
    del m.fields[:]
    m.fields.extend(schema)


def _set_fragments(m: table_pb2.Manifest, fragments: Iterable[DataFragment]) -> None:
    del m.fragments[:]
    m.fragments.extend(fragments)


def _set_metadata(m: table_pb2.Manifest, metadata: Mapping[str, bytes]) -> None:
    m.schema_metadata.clear()
    m.schema_metadata.update(dict(metadata))


def _restamp_rewritten(m: table_pb2.Manifest, fragments: list[DataFragment]) -> list:
    """Fragments whose data files changed had all their rows rewritten in place: their
    last-update version becomes this commit's (a fragment new to the manifest is new
    throughout), as pylance's Merge and DataReplacement stamp them."""
    prev = {f.id: f for f in m.fragments}
    out = []
    for f in fragments:
        old = prev.get(f.id)
        if old is not None and list(old.files) == list(f.files):
            out.append(f)
            continue
        g = DataFragment()
        g.CopyFrom(f)
        if old is None:
            row_versions.stamp_new(g, m.version)
        else:
            row_versions.restamp_updated(g, m.version)
        out.append(g)
    return out


# -- the base class -----------------------------------------------------------------------


class Operation:
    """Base of the operation dataclasses.  ``KIND`` is the proto oneof member name (as
    ``Transaction.WhichOneof("operation")`` returns it); ``NAME`` is pylance's display name,
    used in conflict messages."""

    KIND: ClassVar[str] = ""
    NAME: ClassVar[str] = ""
    CREATES_DATASET: ClassVar[bool] = False
    """Whether it may be the first commit of a dataset."""
    REBASES_TO_LATEST: ClassVar[bool] = False
    """A delete or update moves to the latest version when rebased, as pylance's ``finish``."""
    SUPPLIES_VALUES: ClassVar[bool] = False
    """A write that could falsify a concurrent schema change (upstream ``supplies_values``)."""
    CUSTOM_FIELDS: ClassVar[frozenset[str]] = frozenset()
    """Fields the descriptor-driven conversion skips (the class converts them itself)."""
    ONLY_ADDS_FRAGMENTS: ClassVar[bool] = False
    """Keeps the previous version's fragments, unchanged and first, and adds some after
    them (so their feature flags are known: see ``features.required_flags``)."""

    # -- protobuf -------------------------------------------------------------------------

    @classmethod
    def from_pb(cls, msg: Any) -> Operation:
        return cls(
            **{
                f.name: _field_from_pb(msg, f.name)
                for f in fields(cls)  # type: ignore[arg-type]
                if f.name not in cls.CUSTOM_FIELDS
            }
        )

    def fill_pb(self, msg: Any) -> None:
        for f in fields(self):  # type: ignore[arg-type]
            if f.name not in self.CUSTOM_FIELDS:
                _field_to_pb(msg, f.name, getattr(self, f.name))

    # -- the manifest ---------------------------------------------------------------------

    def apply(self, change: ManifestChange) -> None:
        """Turn ``change.manifest`` (the read manifest) into the manifest after this
        operation."""
        raise InvalidArgumentError(f"committing a {self.KIND} operation is not supported")

    # -- conflicts ------------------------------------------------------------------------

    @property
    def modified_fragment_ids(self) -> frozenset[int]:
        """Existing fragments it changes or removes (``TransactionRebase::try_new``)."""
        return frozenset()

    @property
    def may_alter_nullability(self) -> bool:
        return False

    @property
    def updates_schema_or_field_metadata(self) -> bool:
        return False

    def config_keys(self) -> tuple[set[str], set[str]]:
        """(upserted, deleted) config keys."""
        return set(), set()

    def check(self, ctx: CheckContext, theirs: Operation) -> Verdict:
        """Our verdict on ``theirs``, committed since our read version."""
        return conflict(f"{self.NAME} cannot be rebased")

    def rebased_over(self, theirs: Operation) -> Operation:
        """This operation as it commits after a compatible ``theirs`` (usually unchanged)."""
        return self

    def __str__(self) -> str:
        return self.NAME


def _upsert_key_conflict(a: Operation, b: Operation) -> bool:
    """One side upserts a config key the other upserts or deletes (``upsert_key_conflict``)."""
    a_up, a_del = a.config_keys()
    b_up, b_del = b.config_keys()
    return bool(a_up & (b_up | b_del)) or bool(b_up & (a_up | a_del))


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


def _update_maps_conflict(a: UpdateMap | None, b: UpdateMap | None) -> bool:
    if a is None or b is None:
        return False
    return a.replace or b.replace or bool(a.keys & b.keys)


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


# -- the operations -----------------------------------------------------------------------


@dataclass
class Append(Operation):
    """New rows in new fragments (ids are assigned at commit)."""

    KIND: ClassVar[str] = "append"
    NAME: ClassVar[str] = "Append"
    SUPPLIES_VALUES: ClassVar[bool] = True
    ONLY_ADDS_FRAGMENTS: ClassVar[bool] = True
    fragments: list[DataFragment] = field(default_factory=list)

    def apply(self, change: ManifestChange) -> None:
        change.manifest.fragments.extend(assign_ids(change.manifest, self.fragments))

    def check(self, ctx: CheckContext, theirs: Operation) -> Verdict:
        """``check_append_txn``: only whole-dataset replacements get in the way."""
        if isinstance(theirs, Overwrite | Restore | UpdateMemWalState):
            return conflict("the dataset was replaced")
        return OK


class RowChange(Operation):
    """Shared by Delete and Update: fragments given new deletion files and fragments that
    lost every row."""

    updated_fragments: list[DataFragment]

    @property
    def gone_fragment_ids(self) -> list[int]:
        raise NotImplementedError

    @property
    def modified_fragment_ids(self) -> frozenset[int]:
        return frozenset([f.id for f in self.updated_fragments] + list(self.gone_fragment_ids))

    def proxy_initial(self) -> dict[int, DataFragment] | None:
        """Stand-in for "our fragments as they were at our read version" when the caller did
        not supply them: a delete (or a row-moving update) changes only deletion files, so
        our updated fragments still carry the read version's data files.  Fragments we
        removed outright are absent, so any concurrent change to them is a retry - as in
        pylance, where our affected rows then necessarily overlap theirs."""
        return {f.id: f for f in self.updated_fragments}

    def with_merged(self, updated: list[DataFragment], emptied: list[int]) -> Operation:
        """This change after merging deletion vectors: ``updated`` fragments, and ``emptied``
        ones removed too."""
        raise NotImplementedError

    def rebase_deletions(self, ctx: CheckContext, theirs: RowChange) -> Verdict:
        """Our delete/update against their delete/update.

        Disjoint fragments are compatible.  On shared fragments pylance can only rebase when
        it knows our affected rows and their change to each shared fragment was a new
        deletion file alone (same data files as at our read version), and they removed none
        of ours."""
        if not theirs.modified_fragment_ids & ctx.modified:
            return OK
        if not ctx.rows_known:
            return retry("both modified the same fragments and our affected rows are unknown")
        initial = ctx.initial if ctx.initial is not None else self.proxy_initial()
        merge = set()
        for frag in theirs.updated_fragments:
            if frag.id not in ctx.modified:
                continue
            init = None if initial is None else initial.get(frag.id)
            if init is None:
                return retry(f"fragment {frag.id} was modified by both and cannot be merged")
            if list(init.files) != list(frag.files):
                return retry(f"fragment {frag.id} had its data files changed concurrently")
            if _deletion_of(init) != _deletion_of(frag):
                merge.add(frag.id)
        for fid in theirs.gone_fragment_ids:
            if fid in ctx.modified:
                return retry(f"fragment {fid} was removed concurrently")
        if merge:
            return Verdict(
                MERGE_DELETIONS, "both deleted rows of the same fragments", frozenset(merge)
            )
        return OK


@dataclass
class Delete(RowChange):
    """Rows deleted: fragments that got a new deletion file, and fragments that lost every row
    (those leave the manifest)."""

    KIND: ClassVar[str] = "delete"
    NAME: ClassVar[str] = "Delete"
    REBASES_TO_LATEST: ClassVar[bool] = True
    updated_fragments: list[DataFragment] = field(default_factory=list)
    deleted_fragment_ids: list[int] = field(default_factory=list)
    predicate: str = ""

    @property
    def gone_fragment_ids(self) -> list[int]:
        return self.deleted_fragment_ids

    def with_merged(self, updated: list[DataFragment], emptied: list[int]) -> Operation:
        return replace(
            self,
            updated_fragments=updated,
            deleted_fragment_ids=[*self.deleted_fragment_ids, *emptied],
        )

    def apply(self, change: ManifestChange) -> None:
        _replace_fragments(change.manifest, self.updated_fragments, self.deleted_fragment_ids)

    def check(self, ctx: CheckContext, theirs: Operation) -> Verdict:
        """``check_delete_txn``."""
        if isinstance(
            theirs,
            CreateIndex
            | ReserveFragments
            | Clone
            | Project
            | Append
            | UpdateConfig
            | DataOverlay
            | UpdateBases,
        ):
            return OK
        if isinstance(theirs, Rewrite):
            if theirs.old_fragment_ids & ctx.modified:
                return retry("a fragment we delete from was rewritten (compacted)")
            return OK
        if isinstance(theirs, DataReplacement):
            if theirs.fragment_ids & ctx.modified:
                return retry("a fragment we delete from had its data replaced")
            return OK
        if isinstance(theirs, RowChange):
            return self.rebase_deletions(ctx, theirs)
        if isinstance(theirs, Merge):
            return retry("columns were added concurrently")
        return conflict("the dataset was replaced")  # Overwrite, Restore, UpdateMemWalState


@dataclass
class Overwrite(Operation):
    """Creates the dataset or replaces all of it (schema and fragments)."""

    KIND: ClassVar[str] = "overwrite"
    NAME: ClassVar[str] = "Overwrite"
    CREATES_DATASET: ClassVar[bool] = True
    fragments: list[DataFragment] = field(default_factory=list)
    schema: list[Field] = field(default_factory=list)
    schema_metadata: dict[str, bytes] = field(default_factory=dict)
    config_upsert_values: dict[str, str] = field(default_factory=dict)
    initial_bases: list[table_pb2.BasePath] = field(default_factory=list)

    def apply(self, change: ManifestChange) -> None:
        m = change.manifest
        if change.creating or change.data_storage_version is not None:
            fmt = writable(change.data_storage_version or DEFAULT_VERSION, legacy=True)
            m.data_format.file_format = "lance"
            m.data_format.version = str(fmt)
        del m.fragments[:]
        m.fragments.extend(assign_ids(m, self.fragments))
        _set_fields(m, self.schema)
        _set_metadata(m, self.schema_metadata)
        for key, value in self.config_upsert_values.items():
            m.config[key] = value

    def config_keys(self) -> tuple[set[str], set[str]]:
        return set(self.config_upsert_values), set()

    def check(self, ctx: CheckContext, theirs: Operation) -> Verdict:
        """``check_overwrite_txn`` (pylance 14: a concurrent overwrite preempts ours, so the
        user can decide whether theirs should still be overwritten)."""
        if isinstance(theirs, Overwrite):
            if _upsert_key_conflict(self, theirs):
                return conflict("both set the same config key")
            return retry("the dataset was overwritten concurrently")
        if isinstance(theirs, UpdateConfig):
            if _upsert_key_conflict(self, theirs):
                return conflict("both set the same config key")
            return OK
        if isinstance(theirs, UpdateMemWalState):
            return conflict("MemWAL state changed")
        return OK


@dataclass
class CreateIndex(Operation):
    """Adds and/or removes index segments (create_index, drop_index, pylance's builds)."""

    KIND: ClassVar[str] = "create_index"
    NAME: ClassVar[str] = "CreateIndex"
    new_indices: list[IndexMetadata] = field(default_factory=list)
    removed_indices: list[IndexMetadata] = field(default_factory=list)

    def apply(self, change: ManifestChange) -> None:
        """The fragments stay; as pylance, existing segments listed as removed (or with a
        new one's uuid) go, and the new ones are appended to the index section (a new
        segment of an existing name is a delta segment beside the others)."""
        gone = {m.uuid.uuid for m in self.removed_indices} | {m.uuid.uuid for m in self.new_indices}
        section = change.index_section
        kept = [
            m for m in (section.indices if section is not None else []) if m.uuid.uuid not in gone
        ]
        change.index_section = table_pb2.IndexSection(indices=[*kept, *self.new_indices])

    def check(self, ctx: CheckContext, theirs: Operation) -> Verdict:
        """``check_create_index_txn`` (the pruning of fragments a concurrent Update rewrote
        from the new index's bitmap is :meth:`rebased_over`)."""
        mem_wal = _has_index(self.new_indices, MEM_WAL_INDEX_NAME)
        if isinstance(theirs, Append | Clone | DataOverlay | UpdateBases):
            return OK
        if isinstance(theirs, CreateIndex):
            return self._against_index(theirs)
        if isinstance(theirs, Delete | Update | ReserveFragments | Project | UpdateConfig):
            return OK
        if isinstance(theirs, Merge):
            return retry("the MemWAL index depends on the schema") if mem_wal else OK
        if isinstance(theirs, Rewrite):
            covered = _covered(self.new_indices)
            if covered is None:
                return retry("the new index does not say which fragments it covers")
            if theirs.old_fragment_ids & covered:
                return retry("fragments the new index covers were rewritten")
            return OK
        if isinstance(theirs, DataReplacement):
            indexed = {f for idx in self.new_indices for f in idx.fields}
            for r in theirs.replacements:
                if r.new_file is not None and indexed & set(r.new_file.fields):
                    return retry("indexed column data was replaced")
            return OK
        if isinstance(theirs, UpdateMemWalState):
            return OK if mem_wal else conflict("MemWAL state changed")
        return conflict("the dataset was replaced")  # Overwrite, Restore

    def rebased_over(self, theirs: Operation) -> Operation:
        """pylance's rebase over an Update: fragments whose indexed fields the update
        rewrote leave the new index's fragment bitmap (their rows there are stale)."""
        if not isinstance(theirs, Update) or not theirs.fields_modified:
            return self
        modified = set(theirs.fields_modified)
        updated = {f.id for f in theirs.updated_fragments}
        indices = _copies(self.new_indices)
        for index in indices:
            covered = fragment_bitmap(index)
            if covered is None or not modified & set(index.fields):
                continue
            bitmap = pyroaring.BitMap(covered - updated)
            bitmap.run_optimize()
            index.fragment_bitmap = bitmap.serialize()
        return replace(self, new_indices=indices)

    def _against_index(self, theirs: CreateIndex) -> Verdict:
        """Two index commits: the same system index, the same index name, or one side
        dropping what the other extends or replaces."""
        special = {FRAG_REUSE_INDEX_NAME, MEM_WAL_INDEX_NAME}
        for name in special:
            if _has_index(self.new_indices, name) and _has_index(theirs.new_indices, name):
                return retry(f"both changed the {name} index")
        their_new = {i.name for i in theirs.new_indices}
        if any(i.name not in special and i.name in their_new for i in self.new_indices):
            return retry("both built an index of the same name")
        our_removed = {i.name for i in self.removed_indices}
        their_removed = {i.name for i in theirs.removed_indices}
        if any(i.name not in our_removed and i.name in their_removed for i in self.new_indices):
            return retry("the index we extend was dropped concurrently")
        if any(i.name not in their_removed and i.name in our_removed for i in theirs.new_indices):
            return retry("an index we drop was extended concurrently")
        for r in self.removed_indices:
            for c in theirs.removed_indices:
                if c.uuid == r.uuid:
                    names = {r.name, c.name}
                    if any(i.name in names for i in self.new_indices) or any(
                        i.name in names for i in theirs.new_indices
                    ):
                        return retry("both replaced the same index segment")
        return OK


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

    @property
    def modified_fragment_ids(self) -> frozenset[int]:
        return frozenset(self.old_fragment_ids)

    def apply(self, change: ManifestChange) -> None:
        """The groups' old fragments go and their new ones come (with ids reserved
        beforehand by ReserveFragments, or given now); the fragments end up in id order,
        as pylance 14 lists them after a rewrite (so the new ones follow the others)."""
        m = change.manifest
        replace_at: dict[int, list] = {}
        appended: list[DataFragment] = []
        removed: set[int] = set()
        for g in self.groups:
            olds = [f.id for f in g.old_fragments]
            if not olds:
                continue
            if all(f.id for f in g.new_fragments):
                replace_at[olds[0]] = list(g.new_fragments)
            else:
                appended.extend(g.new_fragments)
            removed.update(olds)
        out = []
        for f in m.fragments:
            if f.id in replace_at:
                out.extend(replace_at[f.id])
            if f.id not in removed:
                out.append(f)
        out.extend(assign_ids(m, appended))
        _set_fragments(m, sorted(out, key=lambda f: f.id))

    def check(self, ctx: CheckContext, theirs: Operation) -> Verdict:
        """``check_rewrite_txn``.  A transaction file never carries a fragment-reuse index,
        so the index arms reduce to the fragment-bitmap overlap test."""
        if isinstance(
            theirs,
            Append
            | ReserveFragments
            | Project
            | Clone
            | UpdateConfig
            | UpdateMemWalState
            | UpdateBases,
        ):
            return OK
        if isinstance(theirs, RowChange | DataOverlay | DataReplacement):
            if theirs.modified_fragment_ids & ctx.modified:
                return retry("a fragment we rewrite was modified concurrently")
            return OK
        if isinstance(theirs, Rewrite):
            if theirs.old_fragment_ids & ctx.modified:
                return retry("a fragment we rewrite was rewritten concurrently")
            return OK
        if isinstance(theirs, Merge):
            return retry("columns were added concurrently")
        if isinstance(theirs, CreateIndex):
            if _has_index(theirs.new_indices, FRAG_REUSE_INDEX_NAME):
                if len(theirs.new_indices) != 1 or len(theirs.removed_indices) != 1:
                    return conflict("a fragment-reuse index was committed with other indices")
                return OK
            covered = _covered(theirs.new_indices)
            if covered is None:
                return retry("a new index does not say which fragments it covers")
            if self.old_fragment_ids & covered:
                return retry("a new index covers fragments we rewrite")
            return OK
        return conflict("the dataset was replaced")  # Overwrite, Restore


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

    @property
    def modified_fragment_ids(self) -> frozenset[int]:
        return frozenset(f.id for f in self.fragments)

    @property
    def may_alter_nullability(self) -> bool:
        return not self.preserves_nullability

    def apply(self, change: ManifestChange) -> None:
        m = change.manifest
        fragments = self.fragments
        if m.reader_feature_flags & features.FLAG_STABLE_ROW_IDS:
            fragments = _restamp_rewritten(m, fragments)
        _set_fragments(m, fragments)
        _set_fields(m, self.schema)
        if self.schema_metadata:
            _set_metadata(m, self.schema_metadata)

    def check(self, ctx: CheckContext, theirs: Operation) -> Verdict:
        """``check_merge_txn``: a merge carries every fragment, so any concurrent change to
        fragments preempts it; a concurrent schema replacement is incompatible."""
        if isinstance(theirs, CreateIndex):
            if _has_index(theirs.new_indices, MEM_WAL_INDEX_NAME):
                return retry("the MemWAL index was changed")
            return OK
        if isinstance(theirs, ReserveFragments | Clone | UpdateConfig | UpdateBases):
            return OK
        if isinstance(
            theirs, Update | Append | Delete | Rewrite | Merge | DataReplacement | DataOverlay
        ):
            return retry("fragments changed concurrently")
        return conflict("the schema or dataset was replaced")  # Overwrite, Restore, Project


@dataclass
class Project(Operation):
    """Columns dropped or renamed: only the schema changes.  pylance's drop_columns writes
    ``preserves_nullability = True``."""

    KIND: ClassVar[str] = "project"
    NAME: ClassVar[str] = "Project"
    schema: list[Field] = field(default_factory=list)
    preserves_nullability: bool = False

    @property
    def may_alter_nullability(self) -> bool:
        return not self.preserves_nullability

    def apply(self, change: ManifestChange) -> None:
        _set_fields(change.manifest, self.schema)
        # as pylance: a data file left with none of the schema's fields is no longer listed
        kept = {f.id for f in self.schema}
        for frag in change.manifest.fragments:
            files = [d for d in frag.files if any(i in kept for i in d.fields)]
            if len(files) != len(frag.files):
                del frag.files[:]
                frag.files.extend(files)
        # and an index over a dropped column goes with it
        section = change.index_section
        if section is not None and any(not kept.issuperset(m.fields) for m in section.indices):
            indices = [m for m in section.indices if kept.issuperset(m.fields)]
            change.index_section = table_pb2.IndexSection(indices=indices)

    def check(self, ctx: CheckContext, theirs: Operation) -> Verdict:
        """``check_project_txn``: fine unless the schema changed under us."""
        if isinstance(theirs, Merge | Project):
            return retry("the schema changed concurrently")
        if isinstance(theirs, Overwrite | Restore | UpdateMemWalState):
            return conflict("the dataset was replaced")
        return OK


@dataclass
class Restore(Operation):
    """An old version made current again."""

    KIND: ClassVar[str] = "restore"
    NAME: ClassVar[str] = "Restore"
    version: int = 0

    def apply(self, change: ManifestChange) -> None:
        old = manifest.read_manifest(paths.find_version(change.root, self.version).path).pb
        _set_fragments(change.manifest, old.fragments)
        _set_fields(change.manifest, old.fields)

    def check(self, ctx: CheckContext, theirs: Operation) -> Verdict:
        """``check_restore_txn``: restoring wins over everything but MemWAL state."""
        if isinstance(theirs, UpdateMemWalState):
            return conflict("MemWAL state changed")
        return OK


@dataclass
class ReserveFragments(Operation):
    """Fragment ids reserved (bumps ``max_fragment_id``) for a later Rewrite; they are never
    reused."""

    KIND: ClassVar[str] = "reserve_fragments"
    NAME: ClassVar[str] = "ReserveFragments"
    num_fragments: int = 0

    def apply(self, change: ManifestChange) -> None:
        m = change.manifest
        first = m.max_fragment_id + 1 if m.HasField("max_fragment_id") else 0
        m.max_fragment_id = first + self.num_fragments - 1

    def check(self, ctx: CheckContext, theirs: Operation) -> Verdict:
        """``check_reserve_fragments_txn``."""
        if isinstance(theirs, Overwrite | Restore):
            return conflict("the dataset was replaced")
        return OK


@dataclass
class Update(RowChange):
    """Rows updated: in place (REWRITE_COLUMNS: new data files) or moved (REWRITE_ROWS: old
    rows deleted, new versions in ``new_fragments``), as ``update`` and merge-insert do."""

    KIND: ClassVar[str] = "update"
    NAME: ClassVar[str] = "Update"
    REBASES_TO_LATEST: ClassVar[bool] = True
    SUPPLIES_VALUES: ClassVar[bool] = True
    REWRITE_ROWS: ClassVar[int] = transaction_pb2.Transaction.REWRITE_ROWS
    REWRITE_COLUMNS: ClassVar[int] = transaction_pb2.Transaction.REWRITE_COLUMNS
    CUSTOM_FIELDS: ClassVar[frozenset[str]] = frozenset(["updated_fragment_offsets"])
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
        op: Update = super().from_pb(msg)  # type: ignore[assignment]
        op.updated_fragment_offsets = {
            k: list(v.values) for k, v in msg.updated_fragment_offsets.items()
        }
        return op

    def fill_pb(self, msg: Any) -> None:
        super().fill_pb(msg)
        for k, values in self.updated_fragment_offsets.items():
            msg.updated_fragment_offsets[k].values.extend(values)

    @property
    def gone_fragment_ids(self) -> list[int]:
        return self.removed_fragment_ids

    def proxy_initial(self) -> dict[int, DataFragment] | None:
        return super().proxy_initial() if self.update_mode == Update.REWRITE_ROWS else None

    def with_merged(self, updated: list[DataFragment], emptied: list[int]) -> Operation:
        return replace(
            self,
            updated_fragments=updated,
            removed_fragment_ids=[*self.removed_fragment_ids, *emptied],
        )

    def apply(self, change: ManifestChange) -> None:
        m = change.manifest
        touched = {f.id for f in self.updated_fragments} | set(self.removed_fragment_ids)
        sources = [f for f in m.fragments if f.id in touched]
        _replace_fragments(m, self.updated_fragments, self.removed_fragment_ids)
        new = assign_ids(m, self.new_fragments)
        if m.reader_feature_flags & features.FLAG_STABLE_ROW_IDS:
            for old, f in zip(self.new_fragments, new, strict=True):
                if old.WhichOneof("row_id_sequence") is not None:
                    # moved rows (they kept their ids) keep their creation version
                    row_versions.stamp_moved(change.root, f, sources, m.version)
        m.fragments.extend(new)

    def check(self, ctx: CheckContext, theirs: Operation) -> Verdict:
        """``check_update_txn``.  Where pylance compares bloom filters of inserted keys or
        rows moved under an overlay, this answers RETRYABLE (a conservative superset)."""
        if isinstance(theirs, Update):
            a, b = self.inserted_rows, theirs.inserted_rows
            if a is not None and b is not None:
                if list(a.field_ids) != list(b.field_ids):
                    return retry("primary-key inserts on different key columns")
                if a.WhichOneof("data") == b.WhichOneof("data") == "exact":
                    if set(a.exact.key_hashes) & set(b.exact.key_hashes):
                        return retry("both inserted the same primary keys")
                else:
                    return retry("primary-key inserts may overlap (bloom filters)")
            elif a is not None:
                return retry("the concurrent update did not record its inserted keys")
        if isinstance(
            theirs, CreateIndex | ReserveFragments | Project | Clone | UpdateConfig | UpdateBases
        ):
            return OK
        if isinstance(theirs, DataOverlay):
            if theirs.fragment_ids & ctx.modified:
                return retry("an overlay was added to a fragment we update")
            return OK
        if isinstance(theirs, Append):
            if self.inserted_rows is not None:
                return retry("appended rows may collide with our inserted primary keys")
            return OK
        if isinstance(theirs, Rewrite):
            if theirs.old_fragment_ids & ctx.modified:
                return retry("a fragment we update was rewritten (compacted)")
            return OK
        if isinstance(theirs, DataReplacement):
            if theirs.fragment_ids & ctx.modified:
                return retry("a fragment we update had its data replaced")
            return OK
        if isinstance(theirs, RowChange):
            return self.rebase_deletions(ctx, theirs)
        if isinstance(theirs, Merge):
            return retry("columns were added concurrently")
        if isinstance(theirs, UpdateMemWalState):
            return _sstables(theirs.compacted_sstables, self.compacted_sstables)
        return conflict("the dataset was replaced")  # Overwrite, Restore


@dataclass
class UpdateConfig(Operation):
    """Config, table-metadata, schema-metadata or field-metadata changes.

    pylance 14 writes the map-update fields (6-9).  The deprecated fields (1-4) are kept
    as read, for a lossless round trip; :meth:`normalized` gives the map-update view of
    either form, translated as upstream's ``TryFrom<pb::Transaction>`` does (old config
    upserts/deletes become one incremental map, old schema/field metadata a replacing map).
    Applied to the manifest by :func:`lance_format.table.config.apply_update_config`.
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

    def apply(self, change: ManifestChange) -> None:
        from .config import apply_update_config  # the config module builds on this one

        apply_update_config(change.manifest, self)

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
        fields_md = {k: UpdateMap(list(md.items()), True) for k, md in self.field_metadata.items()}
        return UpdateConfig(
            config_updates=config,
            table_metadata_updates=None,
            schema_metadata_updates=schema,
            field_metadata_updates=fields_md,
        )

    @property
    def updates_schema_or_field_metadata(self) -> bool:
        """Upstream ``updates_schema_or_field_metadata`` (an empty, non-replacing map
        changes nothing)."""
        n = self.normalized()
        schema = n.schema_metadata_updates
        return (schema is not None and schema.is_effective) or any(
            m.is_effective for m in n.field_metadata_updates.values()
        )

    def config_keys(self) -> tuple[set[str], set[str]]:
        c = self.normalized().config_updates
        return (c.upserted_keys, c.deleted_keys) if c is not None else (set(), set())

    def _modifies_same_metadata(self, other: UpdateConfig) -> bool:
        """``modifies_same_metadata``: shared table-metadata keys (or a replace), both
        changing schema metadata, or both changing metadata of the same field."""
        a, b = self.normalized(), other.normalized()
        if _update_maps_conflict(a.table_metadata_updates, b.table_metadata_updates):
            return True
        if a.schema_metadata_updates is not None and b.schema_metadata_updates is not None:
            return True
        return bool(set(a.field_metadata_updates) & set(b.field_metadata_updates))

    def check(self, ctx: CheckContext, theirs: Operation) -> Verdict:
        """``check_update_config_txn``."""
        ours = self.normalized()
        if isinstance(theirs, Overwrite):
            if (
                ours.schema_metadata_updates is not None
                or ours.field_metadata_updates
                or _upsert_key_conflict(ours, theirs)
            ):
                return conflict("the dataset was overwritten under our metadata change")
            return OK
        if isinstance(theirs, UpdateConfig):
            if _upsert_key_conflict(ours, theirs) or ours._modifies_same_metadata(theirs):
                return conflict("both changed the same config or metadata")
            return OK
        return OK


@dataclass
class DataReplacement(Operation):
    """Data files of existing fragments replaced (e.g. an all-null column backfilled)."""

    KIND: ClassVar[str] = "data_replacement"
    NAME: ClassVar[str] = "DataReplacement"
    SUPPLIES_VALUES: ClassVar[bool] = True
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

    @property
    def modified_fragment_ids(self) -> frozenset[int]:
        return frozenset(self.fragment_ids)

    def apply(self, change: ManifestChange) -> None:
        """The file holding exactly the new file's fields is swapped for it; a file for
        fields no file holds yet (all-null columns) is added."""
        by_fragment: dict[int, list[DataFile]] = {}
        for r in self.replacements:
            if r.new_file is None:
                raise InvalidArgumentError(f"replacement for fragment {r.fragment_id} has no file")
            by_fragment.setdefault(r.fragment_id, []).append(r.new_file)
        found = set()
        for frag in change.manifest.fragments:
            for new in by_fragment.get(frag.id, []):
                found.add(frag.id)
                same = [i for i, f in enumerate(frag.files) if list(f.fields) == list(new.fields)]
                held = {fid for f in frag.files for fid in f.fields}
                if same:
                    frag.files[same[0]].CopyFrom(new)
                elif not held & set(new.fields):
                    frag.files.add().CopyFrom(new)
                else:
                    raise InvalidArgumentError(
                        f"fragment {frag.id} has no data file with exactly the fields "
                        f"{list(new.fields)}"
                    )
        missing = set(by_fragment) - found
        if missing:
            raise InvalidArgumentError(f"no fragment {min(missing)} to replace data in")

    def check(self, ctx: CheckContext, theirs: Operation) -> Verdict:
        """``check_data_replacement_txn`` (newest upstream form)."""
        if isinstance(
            theirs, Append | Clone | UpdateConfig | ReserveFragments | DataOverlay | UpdateBases
        ):
            return OK
        if isinstance(theirs, Project):
            kept = {f.id for f in theirs.schema}
            for r in self.replacements:
                fids = r.new_file.fields if r.new_file is not None else []
                if any(f >= 0 and f not in kept for f in fids):
                    return conflict(f"a column we replace in fragment {r.fragment_id} was dropped")
            return OK
        if isinstance(theirs, Merge):
            return retry("columns were added concurrently")
        if isinstance(theirs, Delete):
            gone = set(theirs.deleted_fragment_ids) & self.fragment_ids
            if gone:
                return conflict(f"fragment {min(gone)} we replace data in was removed")
            return OK
        if isinstance(theirs, Update):
            updated = {f.id for f in theirs.updated_fragments}
            for r in self.replacements:
                if r.fragment_id in theirs.removed_fragment_ids:
                    return conflict(f"fragment {r.fragment_id} we replace data in was removed")
                if r.fragment_id not in updated:
                    continue
                moved = bool(theirs.new_fragments) and theirs.update_mode == Update.REWRITE_ROWS
                fids = r.new_file.fields if r.new_file is not None else []
                if moved or any(f >= 0 and f in theirs.fields_modified for f in fids):
                    return retry(f"rows of fragment {r.fragment_id} were updated concurrently")
            return OK
        if isinstance(theirs, CreateIndex):
            indexed = {f for idx in theirs.new_indices for f in idx.fields}
            for r in self.replacements:
                if r.new_file is not None and indexed & set(r.new_file.fields):
                    return retry("an index was built on a column we replace")
            return OK
        if isinstance(theirs, Rewrite):
            if theirs.old_fragment_ids & self.fragment_ids:
                return retry("a fragment we replace data in was rewritten")
            return OK
        if isinstance(theirs, DataReplacement):
            for r in self.replacements:
                for o in theirs.replacements:
                    if r.fragment_id != o.fragment_id or r.new_file is None or o.new_file is None:
                        continue
                    if set(r.new_file.fields) & set(o.new_file.fields):
                        return retry(f"both replaced the same column of fragment {r.fragment_id}")
            return OK
        return conflict("the dataset was replaced")  # Overwrite, Restore, UpdateMemWalState


@dataclass
class UpdateMemWalState(Operation):
    """MemWAL SSTables merged into the base table (read support only)."""

    KIND: ClassVar[str] = "update_mem_wal_state"
    NAME: ClassVar[str] = "UpdateMemWalState"
    compacted_sstables: list[table_pb2.CompactedSsTable] = field(default_factory=list)

    def check(self, ctx: CheckContext, theirs: Operation) -> Verdict:
        """``check_update_mem_wal_state_txn``.  Against a MemWAL index commit (whose
        compacted SSTables live in index details we do not decode) this answers CONFLICT."""
        if isinstance(theirs, UpdateMemWalState | Update):
            return _sstables(theirs.compacted_sstables, self.compacted_sstables)
        if isinstance(theirs, CreateIndex):
            if _has_index(theirs.new_indices, MEM_WAL_INDEX_NAME):
                return conflict("the MemWAL index was changed")
            return OK
        if isinstance(theirs, UpdateConfig | Rewrite | ReserveFragments | UpdateBases):
            return OK
        return conflict("data changed under the MemWAL state")


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

    def check(self, ctx: CheckContext, theirs: Operation) -> Verdict:
        return OK


@dataclass
class UpdateBases(Operation):
    """Base paths added (read support only)."""

    KIND: ClassVar[str] = "update_bases"
    NAME: ClassVar[str] = "UpdateBases"
    new_bases: list[table_pb2.BasePath] = field(default_factory=list)

    def check(self, ctx: CheckContext, theirs: Operation) -> Verdict:
        """``check_add_bases_txn``: two base paths with the same id, name or path."""
        if not isinstance(theirs, UpdateBases):
            return OK
        for a in self.new_bases:
            for b in theirs.new_bases:
                same_id = a.id != 0 and b.id != 0 and a.id == b.id
                same_name = a.HasField("name") and b.HasField("name") and a.name == b.name
                if same_id or same_name or a.path == b.path:
                    return conflict("both added the same base path")
        return OK


@dataclass
class DataOverlay(Operation):
    """Overlay files appended to fragments (read support only)."""

    KIND: ClassVar[str] = "data_overlay"
    NAME: ClassVar[str] = "DataOverlay"
    SUPPLIES_VALUES: ClassVar[bool] = True
    groups: list[transaction_pb2.Transaction.DataOverlayGroup] = field(default_factory=list)

    @property
    def fragment_ids(self) -> set[int]:
        return {g.fragment_id for g in self.groups}

    @property
    def modified_fragment_ids(self) -> frozenset[int]:
        return frozenset(self.fragment_ids)

    def check(self, ctx: CheckContext, theirs: Operation) -> Verdict:
        """``check_data_overlay_txn``; a row-moving update of an overlaid fragment (checked
        row by row upstream) is a retry here."""
        if isinstance(
            theirs,
            Append
            | CreateIndex
            | ReserveFragments
            | Project
            | UpdateConfig
            | UpdateBases
            | Clone
            | DataReplacement
            | DataOverlay,
        ):
            return OK
        if isinstance(theirs, Delete):
            if set(theirs.deleted_fragment_ids) & ctx.modified:
                return retry("an overlaid fragment was removed")
            return OK
        if isinstance(theirs, Update):
            if set(theirs.removed_fragment_ids) & ctx.modified:
                return retry("an overlaid fragment was removed")
            moves = bool(theirs.new_fragments) and theirs.update_mode == Update.REWRITE_ROWS
            if moves and {f.id for f in theirs.updated_fragments} & ctx.modified:
                return retry("rows of an overlaid fragment were moved")
            return OK
        if isinstance(theirs, Rewrite):
            if theirs.old_fragment_ids & ctx.modified:
                return retry("an overlaid fragment was rewritten")
            return OK
        if isinstance(theirs, Merge):
            return retry("columns were added concurrently")
        return conflict("the dataset was replaced")  # Overwrite, Restore, UpdateMemWalState


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
"""Every known operation by its proto oneof name."""


_ID = operator.attrgetter("id")


def new_manifest(
    prev: table_pb2.Manifest | None,
    operation: Operation,
    *,
    transaction_file: str,
    writer: tuple[str, str],
    index_section: table_pb2.IndexSection | None = None,
    stable_row_ids: bool = False,
    data_storage_version: str | None = None,
    root: str = "",
    reuse_prev: bool = False,
) -> tuple[table_pb2.Manifest, table_pb2.IndexSection | None]:
    """The manifest (and index section) after applying ``operation`` to ``prev`` (None = no
    dataset yet): the parts every version shares, then the operation's own change.
    ``reuse_prev``: ``prev`` is the caller's to give, and becomes the new manifest (copying
    it cost more than the rest of a small append's commit, and grows with the fragments)."""
    known = (0, 0)
    if prev is not None and operation.ONLY_ADDS_FRAGMENTS:  # prev's fragments lead, unchanged
        known = (len(prev.fragments), int(prev.reader_feature_flags))
    version = (prev.version if prev is not None else 0) + 1
    if prev is not None and reuse_prev:
        out = prev
    else:
        out = table_pb2.Manifest()
        if prev is not None:
            out.CopyFrom(prev)
    if prev is not None:
        out.ClearField("transaction_section")
        out.ClearField("transaction_file")
        out.ClearField("tag")
    elif not operation.CREATES_DATASET:
        raise InvalidArgumentError(f"cannot {operation.KIND} a dataset that does not exist yet")
    elif stable_row_ids:
        out.reader_feature_flags |= features.FLAG_STABLE_ROW_IDS
        out.writer_feature_flags |= features.FLAG_STABLE_ROW_IDS
    out.version = version
    out.writer_version.library, out.writer_version.version = writer
    ts = timestamp_pb2.Timestamp()
    ts.FromNanoseconds(time.time_ns())
    out.timestamp.CopyFrom(ts)
    out.transaction_file = transaction_file
    change = ManifestChange(
        out, index_section, root, creating=prev is None, data_storage_version=data_storage_version
    )
    operation.apply(change)
    if out.fragments:
        # (C-level, no Python frame per fragment: every commit scans them all)
        out.max_fragment_id = max(out.max_fragment_id, max(map(_ID, out.fragments)))
    features.apply_feature_flags(out, known=known)
    return out, change.index_section


__all__ = [
    "COMPATIBLE",
    "CONFLICT",
    "MERGE_DELETIONS",
    "OPERATIONS",
    "RETRYABLE",
    "Append",
    "CheckContext",
    "Clone",
    "CreateIndex",
    "DataOverlay",
    "DataReplacement",
    "DataReplacementGroup",
    "Delete",
    "ManifestChange",
    "Merge",
    "Operation",
    "Overwrite",
    "Project",
    "ReserveFragments",
    "Resolution",
    "RowChange",
    "Restore",
    "Rewrite",
    "RewriteGroup",
    "UnknownOperation",
    "Update",
    "UpdateBases",
    "UpdateConfig",
    "UpdateMap",
    "UpdateMemWalState",
    "Verdict",
    "assign_ids",
    "fragment_bitmap",
    "new_manifest",
]
