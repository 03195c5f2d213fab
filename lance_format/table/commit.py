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

Applying an operation to a manifest lives here too: fragment ids come from
``max_fragment_id``, stable row ids from ``next_row_id``, feature flags follow the contents.
"""

from __future__ import annotations

import random
import time
import uuid as uuidlib

import numpy as np
from google.protobuf import timestamp_pb2

from ..errors import CommitConflictError, CorruptFileError, InvalidArgumentError, LanceIOError
from ..pb import table_pb2, transaction_pb2
from ..version import DEFAULT_VERSION, LanceFileVersion, writable
from . import conflicts, features, manifest, paths, rowids, transaction

WRITER_LIBRARY = "lance-flight"
WRITER_VERSION = "0.1.0"
MAX_RETRIES = 50
BACKOFF_BASE, BACKOFF_CAP = 0.005, 1.0  # seconds: jittered exponential backoff between attempts


def new_transaction(read_version: int, **operation) -> transaction_pb2.Transaction:
    """A transaction with a fresh uuid and exactly one operation, e.g. ``append=...``."""
    ((kind, op),) = operation.items()
    txn = transaction_pb2.Transaction(read_version=read_version, uuid=str(uuidlib.uuid4()))
    getattr(txn, kind).CopyFrom(op)
    return txn


def commit(
    root: str,
    txn: transaction_pb2.Transaction,
    *,
    naming: paths.ManifestNaming | None = None,
    stable_row_ids: bool = False,
    data_storage_version: str | LanceFileVersion | None = None,
    max_retries: int = MAX_RETRIES,
) -> manifest.Manifest:
    """Commit ``txn`` (based on ``txn.read_version``; 0 = creating the dataset).

    Raises :class:`CommitConflictError` (``RetryableCommitConflictError`` when redoing the
    operation against the new version may succeed) if a concurrent commit is incompatible.
    """
    read_version = txn.read_version
    txn_name = transaction.write_transaction_file(root, txn)
    for attempt in range(max_retries):
        if attempt:
            _backoff(attempt)
        versions = paths.list_versions(root)
        latest = manifest.read_manifest(versions[-1].path) if versions else None
        if naming is None:
            naming = versions[-1].naming if versions else paths.ManifestNaming.V2
        if latest is None and read_version:
            raise CommitConflictError(
                f"the dataset at {root} has no version {read_version} to commit against"
            )
        if latest is not None:
            features.check_writer_flags(latest)
            if latest.version > read_version:
                if txn.read_version == 0 and txn.WhichOneof("operation") == "overwrite":
                    raise InvalidArgumentError(f"dataset already exists at {root}")
                txn, txn_name = _rebase(root, txn, txn_name, read_version, versions, latest)
                read_version = latest.version
        pb = build_manifest(
            latest.pb if latest is not None else None,
            txn,
            txn_name,
            stable_row_ids=stable_row_ids,
            data_storage_version=data_storage_version,
            root=root,
        )
        index_section = latest.index_section if latest is not None else None
        if txn.WhichOneof("operation") == "create_index":
            index_section = index_section_after(index_section, txn.create_index)
        written = manifest.write_manifest(
            root, pb, naming, txn.SerializeToString(), index_section=index_section
        )
        if written is not None:
            paths.write_version_hint(root, pb.version)
            return manifest.read_manifest(written)
    raise CommitConflictError(f"gave up committing to {root} after {max_retries} attempts")


def index_section_after(
    section: table_pb2.IndexSection | None, op: transaction_pb2.Transaction.CreateIndex
) -> table_pb2.IndexSection:
    """pylance's CreateIndex: existing segments named like a new one or listed as removed
    go, the new ones are appended."""
    new_names = {m.name for m in op.new_indices}
    removed = {m.uuid.uuid for m in op.removed_indices}
    kept = [
        m
        for m in (section.indices if section is not None else [])
        if m.name not in new_names and m.uuid.uuid not in removed
    ]
    return table_pb2.IndexSection(indices=[*kept, *op.new_indices])


def _backoff(attempt: int) -> None:
    """Wait a random while after losing a race: writers that keep colliding spread out
    (on an object store an attempt takes several round trips, so without it the same few
    writers could keep winning while one starves)."""
    time.sleep(random.uniform(0, min(BACKOFF_CAP, BACKOFF_BASE * 2 ** min(attempt, 16))))


def _rebase(root: str, txn, txn_name: str, read_version: int, versions, latest):
    """Check ``txn`` against everything committed after ``read_version``; returns the
    transaction to commit now (a delete over concurrent deletes of the same fragments gets
    merged deletion vectors and moves to the latest version, as pylance does)."""
    committed = []
    for entry in versions:
        if read_version < entry.version <= latest.version:
            committed.append((entry.version, _committed_transaction(root, entry)))
    initial = None
    first = txn.read_version
    if first:
        initial = {
            f.id: f for f in manifest.read_manifest(paths.find_version(root, first).path).fragments
        }
    plan = conflicts.plan_rebase(
        txn, committed, latest_version=latest.version, initial_fragments=initial
    )
    if not plan.merge_fragment_ids:
        rebased = plan.transaction.to_pb()
        pruned = txn.WhichOneof("operation") == "create_index" and rebased != txn
        if rebased.read_version == txn.read_version and not pruned:
            return txn, txn_name
        return rebased, transaction.write_transaction_file(root, rebased)
    merged = conflicts.merge_concurrent_deletions(
        root,
        plan.transaction,
        plan.merge_fragment_ids,
        initial_fragments=initial or {},
        latest_fragments={f.id: f for f in latest.fragments},
        latest_version=latest.version,
    )
    new_pb = merged.to_pb()
    return new_pb, transaction.write_transaction_file(root, new_pb)


def _committed_transaction(root: str, entry):
    """The transaction that made version ``entry`` (None when it cannot be found)."""
    m = manifest.read_manifest(entry.path)
    if m.pb.transaction_file:
        try:
            return transaction.read_transaction_file(root, m.pb.transaction_file)
        except (LanceIOError, CorruptFileError):
            pass
    return m.transaction  # transaction files may be disabled: the manifest embeds it too


# -- applying an operation -------------------------------------------------------------------


def build_manifest(
    prev: table_pb2.Manifest | None,
    txn: transaction_pb2.Transaction,
    txn_name: str,
    *,
    stable_row_ids: bool = False,
    data_storage_version: str | LanceFileVersion | None = None,
    root: str = "",
) -> table_pb2.Manifest:
    """The manifest that results from applying ``txn`` to ``prev`` (None = no dataset yet)."""
    kind = txn.WhichOneof("operation")
    out = table_pb2.Manifest()
    if prev is not None:
        out.CopyFrom(prev)
        out.ClearField("transaction_section")
        out.ClearField("transaction_file")
        out.ClearField("tag")
    elif kind != "overwrite":
        raise InvalidArgumentError(f"cannot {kind} a dataset that does not exist yet")
    if kind == "overwrite" and (prev is None or data_storage_version is not None):
        fmt = writable(data_storage_version or DEFAULT_VERSION)
        out.data_format.file_format = "lance"
        out.data_format.version = str(fmt)
    if prev is None:
        if stable_row_ids:
            out.reader_feature_flags |= features.FLAG_STABLE_ROW_IDS
            out.writer_feature_flags |= features.FLAG_STABLE_ROW_IDS
    out.version = (prev.version if prev is not None else 0) + 1
    out.writer_version.library = WRITER_LIBRARY
    out.writer_version.version = WRITER_VERSION
    ts = timestamp_pb2.Timestamp()
    ts.FromNanoseconds(time.time_ns())
    out.timestamp.CopyFrom(ts)
    out.transaction_file = txn_name
    op = getattr(txn, kind)
    if kind == "append":
        out.fragments.extend(_assign_ids(out, op.fragments))
    elif kind == "overwrite":
        del out.fragments[:]
        out.fragments.extend(_assign_ids(out, op.fragments))
        del out.fields[:]
        out.fields.extend(op.schema)
        out.schema_metadata.clear()
        out.schema_metadata.update(dict(op.schema_metadata))
    elif kind == "delete":
        _replace_fragments(out, op.updated_fragments, op.deleted_fragment_ids)
    elif kind == "update":
        _replace_fragments(out, op.updated_fragments, op.removed_fragment_ids)
        out.fragments.extend(_assign_ids(out, op.new_fragments))
    elif kind == "merge":
        del out.fragments[:]
        out.fragments.extend(op.fragments)
        del out.fields[:]
        out.fields.extend(op.schema)
        if op.schema_metadata:
            out.schema_metadata.clear()
            out.schema_metadata.update(dict(op.schema_metadata))
    elif kind == "project":
        del out.fields[:]
        out.fields.extend(op.schema)
    elif kind == "rewrite":
        _apply_rewrite(out, op)
    elif kind == "reserve_fragments":
        # claim ids for fragments written later (compaction): they are never reused
        first = out.max_fragment_id + 1 if out.HasField("max_fragment_id") else 0
        out.max_fragment_id = first + op.num_fragments - 1
    elif kind == "create_index":
        pass  # the fragments stay; the index section changes (see index_section_after)
    elif kind == "restore":
        old = manifest.read_manifest(paths.find_version(root, op.version).path).pb
        del out.fragments[:]
        out.fragments.extend(old.fragments)
        del out.fields[:]
        out.fields.extend(old.fields)
    else:
        raise InvalidArgumentError(f"committing a {kind} operation is not supported")
    if out.fragments and kind != "reserve_fragments":
        out.max_fragment_id = max([out.max_fragment_id, *(f.id for f in out.fragments)])
    features.apply_feature_flags(out)
    return out


def _replace_fragments(m: table_pb2.Manifest, updated, removed) -> None:
    """Swap in fragments with new deletion files and drop the fully deleted ones."""
    by_id = {f.id: f for f in updated}
    gone = set(removed)
    kept = [by_id.get(f.id, f) for f in m.fragments if f.id not in gone]
    del m.fragments[:]
    m.fragments.extend(kept)


def _assign_ids(m: table_pb2.Manifest, fragments) -> list[table_pb2.DataFragment]:
    """New fragments get ids after ``max_fragment_id`` (ids are never reused; an unset
    ``max_fragment_id`` means no fragment ever existed), and stable row ids from
    ``next_row_id`` when the dataset has them."""
    stable = bool(m.reader_feature_flags & features.FLAG_STABLE_ROW_IDS)
    start = m.max_fragment_id + 1 if m.HasField("max_fragment_id") else 0
    out = []
    for i, f in enumerate(fragments):
        g = table_pb2.DataFragment()
        g.CopyFrom(f)
        g.id = start + i
        if stable and g.WhichOneof("row_id_sequence") is None:
            # rows moved by an update keep their ids; only new rows get fresh ones
            first = m.next_row_id
            g.inline_row_ids = rowids.encode_row_ids(
                np.arange(first, first + g.physical_rows, dtype=np.uint64)
            )
            m.next_row_id = first + g.physical_rows
        out.append(g)
    if out:
        m.max_fragment_id = out[-1].id
    return out


def _apply_rewrite(m: table_pb2.Manifest, op) -> None:
    groups = list(op.groups) or [op]
    replace: dict[int, list] = {}
    removed: set[int] = set()
    for g in groups:
        olds = [f.id for f in g.old_fragments]
        if not olds:
            continue
        if all(f.id for f in g.new_fragments):
            new = list(g.new_fragments)  # ids reserved beforehand; row ids carried over
        else:
            new = _assign_ids(m, g.new_fragments)
        replace[olds[0]] = new
        removed.update(olds)
    out = []
    for f in m.fragments:
        if f.id in replace:
            out.extend(replace[f.id])
        if f.id not in removed:
            out.append(f)
    del m.fragments[:]
    m.fragments.extend(out)
