"""Conflict detection between concurrent transactions, following pylance 14.

When a commit loses the race for version N, the writer reads the transactions of every
version committed since its read version and decides, pair by pair, whether its own change
still makes sense on top of theirs (docs/format/table.md; upstream
``rust/lance/src/io/commit/conflict_resolver.rs``, ``TransactionRebase::check_txn``).  Each
operation's own rules are its :meth:`~.operations.Operation.check` (upstream's
``check_<op>_txn``); this module holds what is common to all of them.  The verdict is one of:

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
    overwrite or restore, two updates of the same config key, and
    anything against a missing transaction or an unknown operation.

The matrix was established from the upstream sources and checked pair by pair against
pylance 14.0.2's own commits (``tests/lance_format/table/test_transactions.py`` runs that comparison): the rules
are those of the newest upstream ``check_txn`` (the snapshot's differ for
Overwrite-vs-Overwrite, which pylance 14 treats as retryable, and lack the nullability and
metadata preambles), plus one rule only observed on pylance 14: Restore against an
UpdateConfig that changes schema or field metadata is incompatible, in either order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from ..errors import CommitConflictError, InvalidArgumentError, RetryableCommitConflictError
from ..pb import table_pb2
from .operations import (
    COMPATIBLE,
    CONFLICT,
    MERGE_DELETIONS,
    RETRYABLE,
    CheckContext,
    Merge,
    Operation,
    Resolution,
    Restore,
    RowChange,
    UnknownOperation,
    Verdict,
    conflict,
    retry,
)
from .transaction import PbTransaction, Transaction, as_transaction

_SEVERITY = {COMPATIBLE: 0, MERGE_DELETIONS: 1, RETRYABLE: 2, CONFLICT: 3}


def modified_fragment_ids(op: Operation) -> frozenset[int]:
    """Existing fragments an operation changes or removes."""
    return op.modified_fragment_ids


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
    ``proxy_initial``).  ``affected_rows_known`` says whether our delete/update can name
    the rows it hit, as pylance's in-process ``delete`` and ``update`` can (so a delete
    against a delete of the same fragment can merge deletion vectors) and a transaction
    committed through the low-level ``LanceDataset.commit`` cannot (then it is RETRYABLE).
    """
    ours_t = as_transaction(ours)
    if theirs is None:
        return conflict("the concurrent version has no transaction (assume a conflict)")
    theirs_op = as_transaction(theirs).operation
    ours_op = ours_t.operation
    if isinstance(ours_op, UnknownOperation) or isinstance(theirs_op, UnknownOperation):
        return conflict("an unknown operation (assume a conflict)")

    # Preambles of pylance 14's check_txn, symmetric in the two operations.
    if (ours_op.may_alter_nullability and theirs_op.SUPPLIES_VALUES) or (
        ours_op.SUPPLIES_VALUES and theirs_op.may_alter_nullability
    ):
        return retry("a schema change that may alter nullability raced a data write")
    if (isinstance(ours_op, Merge) and theirs_op.updates_schema_or_field_metadata) or (
        ours_op.updates_schema_or_field_metadata and isinstance(theirs_op, Merge)
    ):
        return retry("a merge carries the whole schema and would drop a metadata change")
    if (isinstance(ours_op, Restore) and theirs_op.updates_schema_or_field_metadata) or (
        ours_op.updates_schema_or_field_metadata and isinstance(theirs_op, Restore)
    ):  # observed on pylance 14.0.2; not in the upstream sources we could read
        return conflict("a restore and a schema/field metadata change")

    ctx = CheckContext(
        modified=ours_op.modified_fragment_ids,
        initial=initial_fragments,
        # pylance cannot merge rows for a delete/update that only removed whole fragments
        rows_known=affected_rows_known
        and isinstance(ours_op, RowChange)
        and bool(ours_op.updated_fragments),
    )
    return ours_op.check(ctx, theirs_op)


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
        if theirs is not None:
            rebased = t.operation.rebased_over(as_transaction(theirs).operation)
            if rebased is not t.operation:
                t = replace(t, operation=rebased)
    latest = max([t.read_version, *checked]) if latest_version is None else latest_version
    if t.operation.REBASES_TO_LATEST and latest != t.read_version:
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
    if not isinstance(op, RowChange):
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
    new_op = op.with_merged(updated, emptied)
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
