"""Committing a transaction: the "Committing Datasets" protocol, on any store.

1. The data files are already written (staged).
2. The transaction is written to ``_transactions/{read_version}-{uuid}.txn``.
3. The next manifest is built by applying the transaction to the latest manifest and written
   through the dataset's commit handler (:mod:`lance_format.storage.commit`): put-if-not-exists
   on the store, or the external manifest store; it fails if another writer got there first
   (a manifest is never overwritten).
4. If another writer won, the transactions committed since our read version are checked
   against ours (:mod:`.conflicts`): compatible ones are rebased over (the transaction is
   re-applied to the new latest manifest) and the commit retried; anything else raises
   :class:`CommitConflictError`.
5. ``latest_version_hint.json`` is updated for other tools (a hint only: readers list).

What an operation does to the manifest is the operation's own
(:meth:`~.operations.Operation.apply`); the transaction stays a dataclass until it is written.
"""

from __future__ import annotations

import random
import time
import warnings

from ..errors import (
    CommitConflictError,
    CorruptFileError,
    DatasetExistsError,
    LanceError,
    LanceIOError,
)
from ..pb import table_pb2
from ..version import LanceFileVersion
from . import conflicts, features, manifest, operations, paths, transaction
from .transaction import PbTransaction, Transaction, as_transaction

WRITER_LIBRARY = "lance-flight"
WRITER_VERSION = "0.1.0"
MAX_RETRIES = 50
BACKOFF_BASE, BACKOFF_CAP = 0.005, 1.0  # seconds: jittered exponential backoff between attempts


def commit(
    root: str,
    txn: Transaction | PbTransaction,
    *,
    naming: paths.ManifestNaming | None = None,
    stable_row_ids: bool = False,
    data_storage_version: str | LanceFileVersion | None = None,
    max_retries: int = MAX_RETRIES,
    affected_rows_known: bool = True,
    read: manifest.Manifest | None = None,
) -> manifest.Manifest:
    """Commit ``txn`` (based on ``txn.read_version``; 0 = creating the dataset).

    ``affected_rows_known`` says whether a delete or update can name the rows it hit (the
    dataset's own writes can; a low-level commit of caller-made fragments cannot), which
    decides whether it can be merged with a concurrent one on the same fragment.

    ``read``, the manifest of ``txn.read_version`` as the caller read it, lets the first
    attempt skip listing the versions: the manifest is written if absent, so a commit made
    meanwhile makes that attempt fail and the next one lists, rebases and retries at once.
    (A dataset taking many small appends has thousands of versions: the listing was the
    cost of an append that grew with them.)  Pass it only when it was read moments ago: a
    version made meanwhile and already removed by a cleanup would not stop the write (a
    listing first narrows that window, it cannot close it).  ``read`` is given over: the
    first attempt turns its pb into the new manifest (a copy cost more than the rest of a
    small append's commit, and grows with the fragments).

    Raises :class:`CommitConflictError` (``RetryableCommitConflictError`` when redoing the
    operation against the new version may succeed) if a concurrent commit is incompatible.
    """
    txn = as_transaction(txn)
    read_version = txn.read_version
    txn_bytes = txn.to_bytes()  # the .txn file's bytes, embedded in the manifest too
    txn_name = transaction.write_transaction_file(root, txn, txn_bytes)
    guess = read if read is not None and read.version == read_version else None
    for attempt in range(max_retries):
        if attempt > (guess is not None):  # no wait after the unlisted first attempt
            _backoff(attempt)
        latest: manifest.Manifest | None
        newest_naming: paths.ManifestNaming | None
        if attempt == 0 and guess is not None and guess.naming is not None:
            latest, newest_naming = guess, guess.naming
        else:
            newest = paths.latest_version(root)
            latest = manifest.read_manifest(newest.path) if newest is not None else None
            newest_naming = newest.naming if newest is not None else None
        if naming is None:
            naming = newest_naming or paths.ManifestNaming.V2
        if latest is None and read_version:
            raise CommitConflictError(
                f"the dataset at {root} has no version {read_version} to commit against"
            )
        if latest is not None:
            features.check_writer_flags(latest)
            if latest.version > read_version:
                if txn.read_version == 0 and txn.operation.CREATES_DATASET:
                    raise DatasetExistsError(f"dataset already exists at {root}")
                versions = paths.list_versions(root)  # the commits to rebase over
                rebased, txn_name = _rebase(
                    root, txn, txn_name, read_version, versions, latest, affected_rows_known
                )
                if rebased is not txn:
                    txn, txn_bytes = rebased, rebased.to_bytes()
                read_version = latest.version
        pb, index_section = build_manifest(
            latest.pb if latest is not None else None,
            txn,
            txn_name,
            index_section=latest.index_section if latest is not None else None,
            stable_row_ids=stable_row_ids,
            data_storage_version=data_storage_version,
            root=root,
            reuse_prev=latest is not None and latest is guess,  # ``read`` is given over
        )
        # the new manifest is this attempt's own: encoded in place, not copied
        committed = manifest.write_manifest(
            root, pb, naming, txn_bytes, index_section=index_section, in_place=True
        )
        if committed is not None:
            paths.write_version_hint(root, committed.version)
            # cleanup reaches staging, which commits through here: imported on use
            from .cleanup import auto_cleanup

            try:
                auto_cleanup(root, committed)
            except LanceError as e:  # the commit stands; the cleanup is only housekeeping
                warnings.warn(
                    f"auto cleanup after version {committed.version} failed: {e}", stacklevel=2
                )
            return committed
    raise CommitConflictError(f"gave up committing to {root} after {max_retries} attempts")


def build_manifest(
    prev: table_pb2.Manifest | None,
    txn: Transaction,
    txn_name: str,
    *,
    index_section: table_pb2.IndexSection | None = None,
    stable_row_ids: bool = False,
    data_storage_version: str | None = None,
    root: str = "",
    reuse_prev: bool = False,
) -> tuple[table_pb2.Manifest, table_pb2.IndexSection | None]:
    """The manifest and index section that result from applying ``txn`` to ``prev`` (None =
    no dataset yet; ``reuse_prev``: see :func:`operations.new_manifest`)."""
    return operations.new_manifest(
        prev,
        txn.operation,
        transaction_file=txn_name,
        writer=(WRITER_LIBRARY, WRITER_VERSION),
        index_section=index_section,
        stable_row_ids=stable_row_ids,
        data_storage_version=data_storage_version,
        root=root,
        reuse_prev=reuse_prev,
    )


def _backoff(attempt: int) -> None:
    """Wait a random while after losing a race: writers that keep colliding spread out
    (on an object store an attempt takes several round trips, so without it the same few
    writers could keep winning while one starves)."""
    time.sleep(random.uniform(0, min(BACKOFF_CAP, BACKOFF_BASE * 2 ** min(attempt, 16))))


def _rebase(
    root: str,
    txn: Transaction,
    txn_name: str,
    read_version: int,
    versions,
    latest,
    affected_rows_known: bool = True,
):
    """Check ``txn`` against everything committed after ``read_version``; returns the
    transaction to commit now and its file name (a transaction that changed in the rebase -
    a delete over concurrent deletes of the same fragments gets merged deletion vectors and
    moves to the latest version, as pylance does - is written again)."""
    committed = []
    for entry in versions:
        if read_version < entry.version <= latest.version:
            committed.append((entry.version, _committed_transaction(root, entry)))
    initial = None
    first = txn.read_version
    if first and any(v.version == first for v in versions):  # (it may be cleaned up)
        initial = {
            f.id: f for f in manifest.read_manifest(paths.find_version(root, first).path).fragments
        }
    plan = conflicts.plan_rebase(
        txn,
        committed,
        latest_version=latest.version,
        initial_fragments=initial,
        affected_rows_known=affected_rows_known,
    )
    rebased = plan.transaction
    if plan.merge_fragment_ids:
        rebased = conflicts.merge_concurrent_deletions(
            root,
            rebased,
            plan.merge_fragment_ids,
            initial_fragments=initial or {},
            latest_fragments={f.id: f for f in latest.fragments},
            latest_version=latest.version,
        )
    if rebased == txn:
        return txn, txn_name
    return rebased, transaction.write_transaction_file(root, rebased)


def _committed_transaction(root: str, entry) -> Transaction | None:
    """The transaction that made version ``entry`` (None when it cannot be found)."""
    m = manifest.read_manifest(entry.path)
    if m.pb.transaction_file:
        try:
            return transaction.read_transaction_file(root, m.pb.transaction_file)
        except (LanceIOError, CorruptFileError):
            pass
    # transaction files may be disabled: the manifest embeds it too
    return as_transaction(m.transaction) if m.transaction is not None else None
