"""Conflict detection between concurrent transactions, following pylance 14.

When a commit loses the race for version N, the writer reads the transactions of every
version committed since its read version and decides, pair by pair, whether its own change
still makes sense on top of theirs (docs/format/table.md; upstream
``rust/lance/src/io/commit/conflict_resolver.rs``, ``TransactionRebase::check_txn`` and the
``check_<op>_txn`` function per operation kind).  The verdict is one of:

``COMPATIBLE``
    Rebase and retry: re-apply our transaction to the new latest manifest (fragment ids
    for new fragments are assigned from the new ``max_fragment_id``; nothing in the
    transaction itself changes).  Two appends; an append and a delete; deletes of
    different fragments.
``MERGE_DELETIONS``
    Compatible after a row-level merge: both deleted rows of the same fragment without
    touching its data files.  pylance's ``ds.delete`` / ``update`` (which know the rows they
    hit) union the deletion vectors (``finish_delete_update``); a shared row turns this
    into ``RETRYABLE`` (:func:`merge_concurrent_deletions` raises then).
``RETRYABLE``
    "Preempted" (pylance's ``RetryableCommitConflict``): this transaction cannot be rebased,
    but re-running the operation against the new version may work.  A delete against a
    compaction of the same fragment; two schema changes.
``CONFLICT``
    "Incompatible" (pylance's ``IncompatibleTransaction``): anything against a concurrent
    overwrite or restore, two updates of the same config key, and - the seed's rule -
    anything against a missing transaction or an unknown operation.

The matrix was established from the upstream sources and checked pair by pair against
pylance 14.0.2's own commits (``tests/test_transactions.py`` runs that comparison): the rules
are those of the newest upstream ``check_txn`` (the snapshot's differ for
Overwrite-vs-Overwrite, which pylance 14 treats as retryable, and lack the nullability and
metadata preambles), plus one rule only observed on pylance 14: Restore against an
UpdateConfig that changes schema or field metadata is incompatible, in either order.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

import numpy as np
import pyroaring

from ..errors import CommitConflictError, InvalidArgumentError, RetryableCommitConflictError
from ..pb import table_pb2
from .transaction import (
    Append,
    Clone,
    CreateIndex,
    DataOverlay,
    DataReplacement,
    Delete,
    Merge,
    Operation,
    Overwrite,
    PbTransaction,
    Project,
    ReserveFragments,
    Restore,
    Rewrite,
    Transaction,
    UnknownOperation,
    Update,
    UpdateBases,
    UpdateConfig,
    UpdateMap,
    UpdateMemWalState,
    as_transaction,
)

FRAG_REUSE_INDEX_NAME = "__lance_frag_reuse"
MEM_WAL_INDEX_NAME = "__lance_mem_wal"


class Resolution(enum.Enum):
    """What a writer may do about one concurrently committed transaction (module doc)."""

    COMPATIBLE = "compatible"
    MERGE_DELETIONS = "merge_deletions"
    RETRYABLE = "retryable"
    CONFLICT = "conflict"


COMPATIBLE = Resolution.COMPATIBLE
MERGE_DELETIONS = Resolution.MERGE_DELETIONS
RETRYABLE = Resolution.RETRYABLE
CONFLICT = Resolution.CONFLICT

_SEVERITY = {COMPATIBLE: 0, MERGE_DELETIONS: 1, RETRYABLE: 2, CONFLICT: 3}


@dataclass(frozen=True)
class Verdict:
    """A resolution, why, and (for ``MERGE_DELETIONS``) which fragments need merging."""

    resolution: Resolution
    reason: str = ""
    merge_fragment_ids: frozenset[int] = frozenset()


_OK = Verdict(COMPATIBLE)


def _retry(reason: str) -> Verdict:
    return Verdict(RETRYABLE, reason)


def _conflict(reason: str) -> Verdict:
    return Verdict(CONFLICT, reason)


# -- what an operation touches ------------------------------------------------------------


def modified_fragment_ids(op: Operation) -> frozenset[int]:
    """Existing fragments an operation changes or removes (``TransactionRebase::try_new``).
    Appends, overwrites, schema and config changes modify none."""
    if isinstance(op, Delete):
        return frozenset([f.id for f in op.updated_fragments] + list(op.deleted_fragment_ids))
    if isinstance(op, Update):
        return frozenset([f.id for f in op.updated_fragments] + list(op.removed_fragment_ids))
    if isinstance(op, Rewrite):
        return frozenset(op.old_fragment_ids)
    if isinstance(op, DataReplacement | DataOverlay):
        return frozenset(op.fragment_ids)
    if isinstance(op, Merge):
        return frozenset(f.id for f in op.fragments)
    return frozenset()


def _deleted_or_updated(op: Delete | Update) -> tuple[list[table_pb2.DataFragment], list[int]]:
    if isinstance(op, Delete):
        return list(op.updated_fragments), list(op.deleted_fragment_ids)
    return list(op.updated_fragments), list(op.removed_fragment_ids)


def _may_alter_nullability(op: Operation) -> bool:
    """A projection or merge that does not assert ``preserves_nullability`` (newest
    upstream ``may_alter_nullability``; pylance's add/drop_columns do assert it)."""
    return isinstance(op, Project | Merge) and not op.preserves_nullability


def _supplies_values(op: Operation) -> bool:
    """Writes that could falsify such a schema change (upstream ``supplies_values``)."""
    return isinstance(op, Append | Update | DataReplacement | DataOverlay)


def _updates_schema_or_field_metadata(op: Operation) -> bool:
    """Upstream ``updates_schema_or_field_metadata``: an UpdateConfig that changes schema or
    per-field metadata (an empty, non-replacing map changes nothing)."""
    if not isinstance(op, UpdateConfig):
        return False
    n = op.normalized()
    schema = n.schema_metadata_updates
    return (schema is not None and schema.is_effective) or any(
        m.is_effective for m in n.field_metadata_updates.values()
    )


def _config_keys(op: Operation) -> tuple[set[str], set[str]]:
    """(upserted, deleted) config keys (``get_upsert_config_keys`` /
    ``get_delete_config_keys``)."""
    if isinstance(op, Overwrite):
        return set(op.config_upsert_values), set()
    if isinstance(op, UpdateConfig):
        c = op.normalized().config_updates
        if c is not None:
            return c.upserted_keys, c.deleted_keys
    return set(), set()


def _upsert_key_conflict(a: Operation, b: Operation) -> bool:
    """One side upserts a config key the other upserts or deletes (``upsert_key_conflict``)."""
    a_up, a_del = _config_keys(a)
    b_up, b_del = _config_keys(b)
    return bool(a_up & (b_up | b_del)) or bool(b_up & (a_up | a_del))


def _update_maps_conflict(a: UpdateMap | None, b: UpdateMap | None) -> bool:
    if a is None or b is None:
        return False
    return a.replace or b.replace or bool(a.keys & b.keys)


def _modifies_same_metadata(a: UpdateConfig, b: UpdateConfig) -> bool:
    """``modifies_same_metadata``: shared table-metadata keys (or a replace), both changing
    schema metadata, or both changing metadata of the same field."""
    a, b = a.normalized(), b.normalized()
    if _update_maps_conflict(a.table_metadata_updates, b.table_metadata_updates):
        return True
    if a.schema_metadata_updates is not None and b.schema_metadata_updates is not None:
        return True
    return bool(set(a.field_metadata_updates) & set(b.field_metadata_updates))


def _fragment_bitmap(index: table_pb2.IndexMetadata) -> set[int] | None:
    """Fragment ids an index covers; None when unknown (absent or unreadable)."""
    if not index.fragment_bitmap:
        return None
    try:
        return set(pyroaring.BitMap.deserialize(index.fragment_bitmap))
    except (ValueError, OverflowError):
        return None


def _has_index(indices: Iterable[table_pb2.IndexMetadata], name: str) -> bool:
    return any(i.name == name for i in indices)


def _sstables(committed, to_commit) -> Verdict:
    """``check_compacted_sstables_conflict``: the same MemWAL shard compacted by both sides;
    an equal or newer committed generation is final, an older one worth a retry."""
    for c in committed:
        for t in to_commit:
            if c.shard_id == t.shard_id:
                if c.generation >= t.generation:
                    return _conflict("the same MemWAL shard was already compacted")
                return _retry("the same MemWAL shard was compacted concurrently")
    return _OK


# -- the checks, one per kind of *our* operation ------------------------------------------


@dataclass
class _Ctx:
    ours: Transaction
    modified: frozenset[int]
    initial: Mapping[int, table_pb2.DataFragment] | None
    rows_known: bool


def _rebase_deletions(ctx: _Ctx, theirs: Delete | Update) -> Verdict:
    """Our delete/update against their delete/update (the shared arm of
    ``check_delete_txn`` and ``check_update_txn``).

    Disjoint fragments are compatible.  On shared fragments pylance can only rebase when it
    knows our affected rows and their change to each shared fragment was a new deletion file
    alone (same data files as at our read version), and they removed none of ours."""
    updated, removed = _deleted_or_updated(theirs)
    touched = {f.id for f in updated} | set(removed)
    if not touched & ctx.modified:
        return _OK
    if not ctx.rows_known:
        return _retry("both modified the same fragments and our affected rows are unknown")
    initial = ctx.initial if ctx.initial is not None else _proxy_initial(ctx.ours.operation)
    merge = set()
    for frag in updated:
        if frag.id not in ctx.modified:
            continue
        init = None if initial is None else initial.get(frag.id)
        if init is None:
            return _retry(f"fragment {frag.id} was modified by both and cannot be merged")
        if list(init.files) != list(frag.files):
            return _retry(f"fragment {frag.id} had its data files changed concurrently")
        if _deletion_of(init) != _deletion_of(frag):
            merge.add(frag.id)
    for fid in removed:
        if fid in ctx.modified:
            return _retry(f"fragment {fid} was removed concurrently")
    if merge:
        return Verdict(MERGE_DELETIONS, "both deleted rows of the same fragments", frozenset(merge))
    return _OK


def _deletion_of(frag: table_pb2.DataFragment) -> table_pb2.DeletionFile | None:
    return frag.deletion_file if frag.HasField("deletion_file") else None


def _proxy_initial(op: Operation) -> dict[int, table_pb2.DataFragment] | None:
    """Stand-in for "our fragments as they were at our read version" when the caller did not
    supply them: a delete (or a row-moving update) changes only deletion files, so our
    updated fragments still carry the read version's data files.  Fragments we removed
    outright are absent, so any concurrent change to them is a retry - as in pylance, where
    our affected rows then necessarily overlap theirs."""
    if isinstance(op, Delete) or (isinstance(op, Update) and op.update_mode == Update.REWRITE_ROWS):
        return {f.id: f for f in op.updated_fragments}
    return None


def _check_delete(ctx: _Ctx, theirs: Operation) -> Verdict:
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
        return _OK
    if isinstance(theirs, Rewrite):
        if theirs.old_fragment_ids & ctx.modified:
            return _retry("a fragment we delete from was rewritten (compacted)")
        return _OK
    if isinstance(theirs, DataReplacement):
        if theirs.fragment_ids & ctx.modified:
            return _retry("a fragment we delete from had its data replaced")
        return _OK
    if isinstance(theirs, Delete | Update):
        return _rebase_deletions(ctx, theirs)
    if isinstance(theirs, Merge):
        return _retry("columns were added concurrently")
    return _conflict("the dataset was replaced")  # Overwrite, Restore, UpdateMemWalState


def _check_update(ctx: _Ctx, theirs: Operation) -> Verdict:
    """``check_update_txn``.  Where pylance compares bloom filters of inserted keys or rows
    moved under an overlay, this answers RETRYABLE (a conservative superset)."""
    ours: Update = ctx.ours.operation  # type: ignore[assignment]
    if isinstance(theirs, Update):
        a, b = ours.inserted_rows, theirs.inserted_rows
        if a is not None and b is not None:
            if list(a.field_ids) != list(b.field_ids):
                return _retry("primary-key inserts on different key columns")
            if a.WhichOneof("data") == b.WhichOneof("data") == "exact":
                if set(a.exact.key_hashes) & set(b.exact.key_hashes):
                    return _retry("both inserted the same primary keys")
            else:
                return _retry("primary-key inserts may overlap (bloom filters)")
        elif a is not None:
            return _retry("the concurrent update did not record its inserted keys")
    if isinstance(
        theirs, CreateIndex | ReserveFragments | Project | Clone | UpdateConfig | UpdateBases
    ):
        return _OK
    if isinstance(theirs, DataOverlay):
        if theirs.fragment_ids & ctx.modified:
            return _retry("an overlay was added to a fragment we update")
        return _OK
    if isinstance(theirs, Append):
        if ours.inserted_rows is not None:
            return _retry("appended rows may collide with our inserted primary keys")
        return _OK
    if isinstance(theirs, Rewrite):
        if theirs.old_fragment_ids & ctx.modified:
            return _retry("a fragment we update was rewritten (compacted)")
        return _OK
    if isinstance(theirs, DataReplacement):
        if theirs.fragment_ids & ctx.modified:
            return _retry("a fragment we update had its data replaced")
        return _OK
    if isinstance(theirs, Delete | Update):
        return _rebase_deletions(ctx, theirs)
    if isinstance(theirs, Merge):
        return _retry("columns were added concurrently")
    if isinstance(theirs, UpdateMemWalState):
        return _sstables(theirs.compacted_sstables, ours.compacted_sstables)
    return _conflict("the dataset was replaced")  # Overwrite, Restore


def _check_create_index(ctx: _Ctx, theirs: Operation) -> Verdict:
    """``check_create_index_txn`` (the pruning of fragments a concurrent Update rewrote from
    the new index's bitmap is done by :func:`plan_rebase`)."""
    ours: CreateIndex = ctx.ours.operation  # type: ignore[assignment]
    mem_wal = _has_index(ours.new_indices, MEM_WAL_INDEX_NAME)
    if isinstance(theirs, Append | Clone | DataOverlay | UpdateBases):
        return _OK
    if isinstance(theirs, CreateIndex):
        return _index_vs_index(ours, theirs)
    if isinstance(theirs, Delete | Update | ReserveFragments | Project | UpdateConfig):
        return _OK
    if isinstance(theirs, Merge):
        return _retry("the MemWAL index depends on the schema") if mem_wal else _OK
    if isinstance(theirs, Rewrite):
        covered: set[int] = set()
        for idx in ours.new_indices:
            bitmap = _fragment_bitmap(idx)
            if bitmap is None:
                return _retry("the new index does not say which fragments it covers")
            covered |= bitmap
        if theirs.old_fragment_ids & covered:
            return _retry("fragments the new index covers were rewritten")
        return _OK
    if isinstance(theirs, DataReplacement):
        indexed = {f for idx in ours.new_indices for f in idx.fields}
        for r in theirs.replacements:
            if r.new_file is not None and indexed & set(r.new_file.fields):
                return _retry("indexed column data was replaced")
        return _OK
    if isinstance(theirs, UpdateMemWalState):
        return _OK if mem_wal else _conflict("MemWAL state changed")
    return _conflict("the dataset was replaced")  # Overwrite, Restore


def _prune_updated_fields(ours: CreateIndex, theirs: Operation) -> None:
    """pylance's rebase of a CreateIndex over an Update: fragments whose indexed fields the
    update rewrote leave the new index's fragment bitmap (their rows there are stale)."""
    if not isinstance(theirs, Update) or not theirs.fields_modified:
        return
    modified = set(theirs.fields_modified)
    updated = {f.id for f in theirs.updated_fragments}
    for index in ours.new_indices:
        covered = _fragment_bitmap(index)
        if covered is None or not modified & set(index.fields):
            continue
        bitmap = pyroaring.BitMap(covered - updated)
        bitmap.run_optimize()
        index.fragment_bitmap = bitmap.serialize()


def _index_vs_index(ours: CreateIndex, theirs: CreateIndex) -> Verdict:
    """Two index commits: the same system index, the same index name, or one side dropping
    what the other extends or replaces."""
    special = {FRAG_REUSE_INDEX_NAME, MEM_WAL_INDEX_NAME}
    for name in special:
        if _has_index(ours.new_indices, name) and _has_index(theirs.new_indices, name):
            return _retry(f"both changed the {name} index")
    their_new = {i.name for i in theirs.new_indices}
    if any(i.name not in special and i.name in their_new for i in ours.new_indices):
        return _retry("both built an index of the same name")
    our_removed = {i.name for i in ours.removed_indices}
    their_removed = {i.name for i in theirs.removed_indices}
    if any(i.name not in our_removed and i.name in their_removed for i in ours.new_indices):
        return _retry("the index we extend was dropped concurrently")
    if any(i.name not in their_removed and i.name in our_removed for i in theirs.new_indices):
        return _retry("an index we drop was extended concurrently")
    for r in ours.removed_indices:
        for c in theirs.removed_indices:
            if c.uuid == r.uuid:
                names = {r.name, c.name}
                if any(i.name in names for i in ours.new_indices) or any(
                    i.name in names for i in theirs.new_indices
                ):
                    return _retry("both replaced the same index segment")
    return _OK


def _check_rewrite(ctx: _Ctx, theirs: Operation) -> Verdict:
    """``check_rewrite_txn``.  A transaction file never carries a fragment-reuse index, so
    the index arms reduce to the fragment-bitmap overlap test."""
    ours: Rewrite = ctx.ours.operation  # type: ignore[assignment]
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
        return _OK
    if isinstance(theirs, Delete | Update):
        updated, removed = _deleted_or_updated(theirs)
        if ({f.id for f in updated} | set(removed)) & ctx.modified:
            return _retry("a fragment we rewrite was modified concurrently")
        return _OK
    if isinstance(theirs, DataOverlay | DataReplacement):
        if theirs.fragment_ids & ctx.modified:
            return _retry("a fragment we rewrite was modified concurrently")
        return _OK
    if isinstance(theirs, Rewrite):
        if theirs.old_fragment_ids & ctx.modified:
            return _retry("a fragment we rewrite was rewritten concurrently")
        return _OK
    if isinstance(theirs, Merge):
        return _retry("columns were added concurrently")
    if isinstance(theirs, CreateIndex):
        if _has_index(theirs.new_indices, FRAG_REUSE_INDEX_NAME):
            if len(theirs.new_indices) != 1 or len(theirs.removed_indices) != 1:
                return _conflict("a fragment-reuse index was committed with other indices")
            return _OK
        covered: set[int] = set()
        for idx in theirs.new_indices:
            bitmap = _fragment_bitmap(idx)
            if bitmap is None:
                return _retry("a new index does not say which fragments it covers")
            covered |= bitmap
        if ours.old_fragment_ids & covered:
            return _retry("a new index covers fragments we rewrite")
        return _OK
    return _conflict("the dataset was replaced")  # Overwrite, Restore


def _check_overwrite(ctx: _Ctx, theirs: Operation) -> Verdict:
    """``check_overwrite_txn`` (pylance 14: a concurrent overwrite preempts ours, so the
    user can decide whether theirs should still be overwritten)."""
    ours = ctx.ours.operation
    if isinstance(theirs, Overwrite):
        if _upsert_key_conflict(ours, theirs):
            return _conflict("both set the same config key")
        return _retry("the dataset was overwritten concurrently")
    if isinstance(theirs, UpdateConfig):
        if _upsert_key_conflict(ours, theirs):
            return _conflict("both set the same config key")
        return _OK
    if isinstance(theirs, UpdateMemWalState):
        return _conflict("MemWAL state changed")
    return _OK


def _check_append(ctx: _Ctx, theirs: Operation) -> Verdict:
    """``check_append_txn``: only whole-dataset replacements get in the way."""
    if isinstance(theirs, Overwrite | Restore | UpdateMemWalState):
        return _conflict("the dataset was replaced")
    return _OK


def _check_data_replacement(ctx: _Ctx, theirs: Operation) -> Verdict:
    """``check_data_replacement_txn`` (newest upstream form)."""
    ours: DataReplacement = ctx.ours.operation  # type: ignore[assignment]
    if isinstance(
        theirs, Append | Clone | UpdateConfig | ReserveFragments | DataOverlay | UpdateBases
    ):
        return _OK
    if isinstance(theirs, Project):
        kept = {f.id for f in theirs.schema}
        for r in ours.replacements:
            fields = r.new_file.fields if r.new_file is not None else []
            if any(f >= 0 and f not in kept for f in fields):
                return _conflict(f"a column we replace in fragment {r.fragment_id} was dropped")
        return _OK
    if isinstance(theirs, Merge):
        return _retry("columns were added concurrently")
    if isinstance(theirs, Delete):
        gone = set(theirs.deleted_fragment_ids) & ours.fragment_ids
        if gone:
            return _conflict(f"fragment {min(gone)} we replace data in was removed")
        return _OK
    if isinstance(theirs, Update):
        updated = {f.id for f in theirs.updated_fragments}
        for r in ours.replacements:
            if r.fragment_id in theirs.removed_fragment_ids:
                return _conflict(f"fragment {r.fragment_id} we replace data in was removed")
            if r.fragment_id not in updated:
                continue
            moved = bool(theirs.new_fragments) and theirs.update_mode == Update.REWRITE_ROWS
            fields = r.new_file.fields if r.new_file is not None else []
            if moved or any(f >= 0 and f in theirs.fields_modified for f in fields):
                return _retry(f"rows of fragment {r.fragment_id} were updated concurrently")
        return _OK
    if isinstance(theirs, CreateIndex):
        indexed = {f for idx in theirs.new_indices for f in idx.fields}
        for r in ours.replacements:
            if r.new_file is not None and indexed & set(r.new_file.fields):
                return _retry("an index was built on a column we replace")
        return _OK
    if isinstance(theirs, Rewrite):
        if theirs.old_fragment_ids & ours.fragment_ids:
            return _retry("a fragment we replace data in was rewritten")
        return _OK
    if isinstance(theirs, DataReplacement):
        for r in ours.replacements:
            for o in theirs.replacements:
                if r.fragment_id != o.fragment_id or r.new_file is None or o.new_file is None:
                    continue
                if set(r.new_file.fields) & set(o.new_file.fields):
                    return _retry(f"both replaced the same column of fragment {r.fragment_id}")
        return _OK
    return _conflict("the dataset was replaced")  # Overwrite, Restore, UpdateMemWalState


def _check_data_overlay(ctx: _Ctx, theirs: Operation) -> Verdict:
    """``check_data_overlay_txn``; a row-moving update of an overlaid fragment (checked row
    by row upstream) is a retry here."""
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
        return _OK
    if isinstance(theirs, Delete):
        if set(theirs.deleted_fragment_ids) & ctx.modified:
            return _retry("an overlaid fragment was removed")
        return _OK
    if isinstance(theirs, Update):
        if set(theirs.removed_fragment_ids) & ctx.modified:
            return _retry("an overlaid fragment was removed")
        moves = bool(theirs.new_fragments) and theirs.update_mode == Update.REWRITE_ROWS
        if moves and {f.id for f in theirs.updated_fragments} & ctx.modified:
            return _retry("rows of an overlaid fragment were moved")
        return _OK
    if isinstance(theirs, Rewrite):
        if theirs.old_fragment_ids & ctx.modified:
            return _retry("an overlaid fragment was rewritten")
        return _OK
    if isinstance(theirs, Merge):
        return _retry("columns were added concurrently")
    return _conflict("the dataset was replaced")  # Overwrite, Restore, UpdateMemWalState


def _check_merge(ctx: _Ctx, theirs: Operation) -> Verdict:
    """``check_merge_txn``: a merge carries every fragment, so any concurrent change to
    fragments preempts it; a concurrent schema replacement is incompatible."""
    if isinstance(theirs, CreateIndex):
        if _has_index(theirs.new_indices, MEM_WAL_INDEX_NAME):
            return _retry("the MemWAL index was changed")
        return _OK
    if isinstance(theirs, ReserveFragments | Clone | UpdateConfig | UpdateBases):
        return _OK
    if isinstance(
        theirs, Update | Append | Delete | Rewrite | Merge | DataReplacement | DataOverlay
    ):
        return _retry("fragments changed concurrently")
    return _conflict("the schema or dataset was replaced")  # Overwrite, Restore, Project, ...


def _check_restore(ctx: _Ctx, theirs: Operation) -> Verdict:
    """``check_restore_txn``: restoring wins over everything but MemWAL state."""
    if isinstance(theirs, UpdateMemWalState):
        return _conflict("MemWAL state changed")
    return _OK


def _check_reserve_fragments(ctx: _Ctx, theirs: Operation) -> Verdict:
    """``check_reserve_fragments_txn``."""
    if isinstance(theirs, Overwrite | Restore):
        return _conflict("the dataset was replaced")
    return _OK


def _check_project(ctx: _Ctx, theirs: Operation) -> Verdict:
    """``check_project_txn``: fine unless the schema changed under us."""
    if isinstance(theirs, Merge | Project):
        return _retry("the schema changed concurrently")
    if isinstance(theirs, Overwrite | Restore | UpdateMemWalState):
        return _conflict("the dataset was replaced")
    return _OK


def _check_update_config(ctx: _Ctx, theirs: Operation) -> Verdict:
    """``check_update_config_txn``."""
    ours_op = ctx.ours.operation
    assert isinstance(ours_op, UpdateConfig)  # this check runs for UpdateConfig only
    ours = ours_op.normalized()
    if isinstance(theirs, Overwrite):
        if (
            ours.schema_metadata_updates is not None
            or ours.field_metadata_updates
            or _upsert_key_conflict(ours, theirs)
        ):
            return _conflict("the dataset was overwritten under our metadata change")
        return _OK
    if isinstance(theirs, UpdateConfig):
        if _upsert_key_conflict(ours, theirs) or _modifies_same_metadata(ours, theirs):
            return _conflict("both changed the same config or metadata")
        return _OK
    return _OK


def _check_update_mem_wal_state(ctx: _Ctx, theirs: Operation) -> Verdict:
    """``check_update_mem_wal_state_txn``.  Against a MemWAL index commit (whose compacted
    SSTables live in index details we do not decode) this answers CONFLICT."""
    ours: UpdateMemWalState = ctx.ours.operation  # type: ignore[assignment]
    if isinstance(theirs, UpdateMemWalState | Update):
        return _sstables(theirs.compacted_sstables, ours.compacted_sstables)
    if isinstance(theirs, CreateIndex):
        if _has_index(theirs.new_indices, MEM_WAL_INDEX_NAME):
            return _conflict("the MemWAL index was changed")
        return _OK
    if isinstance(theirs, UpdateConfig | Rewrite | ReserveFragments | UpdateBases):
        return _OK
    return _conflict("data changed under the MemWAL state")


def _check_update_bases(ctx: _Ctx, theirs: Operation) -> Verdict:
    """``check_add_bases_txn``: two base paths with the same id, name or path."""
    ours: UpdateBases = ctx.ours.operation  # type: ignore[assignment]
    if not isinstance(theirs, UpdateBases):
        return _OK
    for a in ours.new_bases:
        for b in theirs.new_bases:
            same_id = a.id != 0 and b.id != 0 and a.id == b.id
            same_name = a.HasField("name") and b.HasField("name") and a.name == b.name
            if same_id or same_name or a.path == b.path:
                return _conflict("both added the same base path")
    return _OK


_CHECKS = {
    Delete: _check_delete,
    Update: _check_update,
    CreateIndex: _check_create_index,
    Rewrite: _check_rewrite,
    Overwrite: _check_overwrite,
    Append: _check_append,
    DataReplacement: _check_data_replacement,
    DataOverlay: _check_data_overlay,
    Merge: _check_merge,
    Restore: _check_restore,
    ReserveFragments: _check_reserve_fragments,
    Project: _check_project,
    UpdateConfig: _check_update_config,
    UpdateMemWalState: _check_update_mem_wal_state,
    Clone: lambda ctx, theirs: _OK,
    UpdateBases: _check_update_bases,
}


# -- public API ---------------------------------------------------------------------------


def verdict(
    ours: Transaction | PbTransaction,
    theirs: Transaction | PbTransaction | None,
    *,
    initial_fragments: Mapping[int, table_pb2.DataFragment] | None = None,
    affected_rows_known: bool = True,
) -> Verdict:
    """Judge our transaction against one committed since our read version.

    ``theirs`` None means the committed version has no readable transaction.
    ``initial_fragments`` are our modified fragments as they were at our read version
    (when omitted, a delete's own updated fragments stand in for them: see
    ``_proxy_initial``).  ``affected_rows_known`` says whether our delete/update can name
    the rows it hit, as pylance's in-process ``delete`` and ``update`` can (so a delete
    against a delete of the same fragment can merge deletion vectors) and a transaction
    committed through the low-level ``LanceDataset.commit`` cannot (then it is RETRYABLE).
    """
    ours_t = as_transaction(ours)
    if theirs is None:
        return _conflict("the concurrent version has no transaction (seed: assume a conflict)")
    theirs_op = as_transaction(theirs).operation
    ours_op = ours_t.operation
    if isinstance(ours_op, UnknownOperation) or isinstance(theirs_op, UnknownOperation):
        return _conflict("an unknown operation (seed: assume a conflict)")

    # Preambles of pylance 14's check_txn, symmetric in the two operations.
    if (_may_alter_nullability(ours_op) and _supplies_values(theirs_op)) or (
        _supplies_values(ours_op) and _may_alter_nullability(theirs_op)
    ):
        return _retry("a schema change that may alter nullability raced a data write")
    if (isinstance(ours_op, Merge) and _updates_schema_or_field_metadata(theirs_op)) or (
        _updates_schema_or_field_metadata(ours_op) and isinstance(theirs_op, Merge)
    ):
        return _retry("a merge carries the whole schema and would drop a metadata change")
    if (isinstance(ours_op, Restore) and _updates_schema_or_field_metadata(theirs_op)) or (
        _updates_schema_or_field_metadata(ours_op) and isinstance(theirs_op, Restore)
    ):  # observed on pylance 14.0.2; not in the upstream sources we could read
        return _conflict("a restore and a schema/field metadata change")

    # pylance cannot merge rows for a delete/update that only removed whole fragments
    rows_known = (
        affected_rows_known
        and isinstance(ours_op, Delete | Update)
        and bool(ours_op.updated_fragments)
    )
    ctx = _Ctx(
        ours=ours_t,
        modified=modified_fragment_ids(ours_op),
        initial=initial_fragments,
        rows_known=rows_known,
    )
    return _CHECKS[type(ours_op)](ctx, theirs_op)


def check(
    ours: Transaction | PbTransaction,
    theirs: Transaction | PbTransaction | None,
    *,
    initial_fragments: Mapping[int, table_pb2.DataFragment] | None = None,
    affected_rows_known: bool = True,
) -> Resolution:
    """The :class:`Resolution` of :func:`verdict`."""
    return verdict(
        ours,
        theirs,
        initial_fragments=initial_fragments,
        affected_rows_known=affected_rows_known,
    ).resolution


@dataclass
class RebasePlan:
    """Outcome of checking our transaction against every version committed since its read
    version: the transaction to commit next and the fragments whose deletion vectors must
    first be merged with the latest ones (:func:`merge_concurrent_deletions`)."""

    transaction: Transaction
    merge_fragment_ids: frozenset[int] = frozenset()
    checked_versions: list[int] = field(default_factory=list)


def plan_rebase(
    ours: Transaction | PbTransaction,
    committed: Iterable[tuple[int, Transaction | PbTransaction | None]],
    *,
    latest_version: int | None = None,
    initial_fragments: Mapping[int, table_pb2.DataFragment] | None = None,
    affected_rows_known: bool = True,
) -> RebasePlan:
    """Check ``ours`` against each ``(version, transaction)`` committed after its read
    version, in version order (``TransactionRebase::check_txn`` in a loop), stopping at the
    first that is not compatible.

    Raises :class:`RetryableCommitConflictError` or :class:`CommitConflictError` with
    pylance's wording.  As pylance's ``finish``, a delete or update is moved to the latest
    version (its ``read_version`` becomes ``latest_version``); other operations keep their
    read version, their new fragments simply get ids after the latest ``max_fragment_id``
    when the manifest is built.
    """
    t = as_transaction(ours)
    merge: set[int] = set()
    checked: list[int] = []
    for version, theirs in sorted(committed, key=lambda vt: vt[0]):
        if version <= t.read_version:
            continue
        v = verdict(
            t, theirs, initial_fragments=initial_fragments, affected_rows_known=affected_rows_known
        )
        checked.append(version)
        their_name = str(as_transaction(theirs).operation) if theirs is not None else "(missing)"
        if v.resolution is RETRYABLE:
            raise RetryableCommitConflictError(
                f"This {t.operation} transaction was preempted by concurrent transaction "
                f"{their_name} at version {version}: {v.reason}. Please retry.",
                version=version,
            )
        if v.resolution is CONFLICT:
            raise CommitConflictError(
                f"This {t.operation} transaction is incompatible with concurrent transaction "
                f"{their_name} at version {version}: {v.reason}.",
                version=version,
            )
        merge |= v.merge_fragment_ids
        if isinstance(t.operation, CreateIndex) and theirs is not None:
            _prune_updated_fields(t.operation, as_transaction(theirs).operation)
    latest = max([t.read_version, *checked]) if latest_version is None else latest_version
    if isinstance(t.operation, Delete | Update) and latest != t.read_version:
        t = replace(t, read_version=latest)
    return RebasePlan(t, frozenset(merge), checked)


def affected_rows(ours_deleted: np.ndarray, initial_deleted: np.ndarray | None) -> np.ndarray:
    """Rows our delete hit in one fragment: our cumulative deletion set minus the one the
    fragment had at our read version (sorted unique uint32)."""
    ours_arr = np.unique(np.asarray(ours_deleted, dtype=np.uint32))
    if initial_deleted is None or not len(initial_deleted):
        return ours_arr
    return np.setdiff1d(ours_arr, np.asarray(initial_deleted, dtype=np.uint32), assume_unique=False)


def merge_deleted_rows(
    ours_affected: np.ndarray,
    latest_deleted: np.ndarray | None,
    *,
    fragment_id: int,
    version: int | None = None,
) -> np.ndarray:
    """Union of the rows we deleted and the latest deletion vector of a fragment
    (``finish_delete_update``); a row deleted by both means the two changes overlap, which
    pylance reports as a retryable conflict."""
    ours_arr = np.unique(np.asarray(ours_affected, dtype=np.uint32))
    theirs_arr = (
        np.unique(np.asarray(latest_deleted, dtype=np.uint32))
        if latest_deleted is not None
        else np.empty(0, np.uint32)
    )
    shared = np.intersect1d(ours_arr, theirs_arr, assume_unique=True)
    if len(shared):
        sample = [int(fragment_id) << 32 | int(x) for x in shared[:5]]
        raise RetryableCommitConflictError(
            f"both transactions modified rows at addresses {sample} of fragment "
            f"{fragment_id}. Please retry.",
            version=version,
        )
    return np.union1d(ours_arr, theirs_arr).astype(np.uint32)


def merge_concurrent_deletions(
    root: str,
    txn: Transaction,
    fragment_ids: Iterable[int],
    *,
    initial_fragments: Mapping[int, table_pb2.DataFragment],
    latest_fragments: Mapping[int, table_pb2.DataFragment],
    latest_version: int,
    ours_affected: Mapping[int, np.ndarray] | None = None,
) -> Transaction:
    """Carry out a ``MERGE_DELETIONS`` rebase of our Delete (or Update): for each fragment,
    union our affected rows with the latest deletion vector and write it as a new deletion
    file (a roaring bitmap, as pylance writes rebased deletions); a fragment left with no
    rows leaves the manifest instead.  Returns the transaction to commit, based on
    ``latest_version``.

    ``initial_fragments`` / ``latest_fragments`` are the fragments at our read version and
    at the latest version; ``ours_affected`` may give our affected rows per fragment
    directly, otherwise they are our deletion file minus the initial one.
    """
    from . import deletion

    op = txn.operation
    if not isinstance(op, Delete | Update):
        raise InvalidArgumentError(f"cannot merge deletions into a {op} transaction")
    ours_by_id = {f.id: f for f in op.updated_fragments}
    replaced: dict[int, table_pb2.DataFragment] = {}
    emptied: list[int] = []
    for fid in sorted(set(fragment_ids)):
        mine = ours_by_id.get(fid)
        init = initial_fragments.get(fid)
        latest = latest_fragments.get(fid)
        if mine is None or init is None or latest is None:
            raise RetryableCommitConflictError(
                f"fragment {fid} cannot be merged: it is not in both versions",
                version=latest_version,
            )
        if ours_affected is not None and fid in ours_affected:
            hit = np.asarray(ours_affected[fid], dtype=np.uint32)
        else:
            ours_set = _read_deletions(deletion, root, mine)
            hit = affected_rows(ours_set, _read_deletions(deletion, root, init))
        merged = merge_deleted_rows(
            hit, _read_deletions(deletion, root, latest), fragment_id=fid, version=latest_version
        )
        if init.physical_rows and len(merged) >= init.physical_rows:
            emptied.append(fid)
            continue
        frag = table_pb2.DataFragment()
        frag.CopyFrom(latest)
        frag.deletion_file.CopyFrom(
            deletion.write_deletion_file(
                root, fid, latest_version, merged, file_type=table_pb2.DeletionFile.BITMAP
            )
        )
        replaced[fid] = frag
    updated = [replaced.get(f.id, f) for f in op.updated_fragments if f.id not in emptied]
    if isinstance(op, Delete):
        new_op: Operation = replace(
            op,
            updated_fragments=updated,
            deleted_fragment_ids=[*op.deleted_fragment_ids, *emptied],
        )
    else:
        new_op = replace(
            op,
            updated_fragments=updated,
            removed_fragment_ids=[*op.removed_fragment_ids, *emptied],
        )
    return replace(txn, operation=new_op, read_version=latest_version)


def _read_deletions(deletion, root: str, frag: table_pb2.DataFragment) -> np.ndarray:
    if not frag.HasField("deletion_file"):
        return np.empty(0, np.uint32)
    return deletion.read_deletion_file(root, frag.id, frag.deletion_file)


def worst(resolutions: Iterable[Resolution]) -> Resolution:
    """The most restrictive of several resolutions (COMPATIBLE if none)."""
    out = COMPATIBLE
    for r in resolutions:
        if _SEVERITY[r] > _SEVERITY[out]:
            out = r
    return out


__all__ = [
    "COMPATIBLE",
    "CONFLICT",
    "MERGE_DELETIONS",
    "RETRYABLE",
    "RebasePlan",
    "Resolution",
    "Verdict",
    "affected_rows",
    "check",
    "merge_concurrent_deletions",
    "merge_deleted_rows",
    "modified_fragment_ids",
    "plan_rebase",
    "verdict",
    "worst",
]
