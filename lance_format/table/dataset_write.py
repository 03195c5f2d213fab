"""Writing one new version from a stream: ``write_dataset``'s create / append / overwrite,
with what a service needs to offer it safely to many clients.

* **Cleanup.**  Only a stream that ends cleanly commits.  A failed, cancelled or refused
  write removes every data file it wrote, and the dataset directory if the write created it
  (never a recursive delete: another writer may be creating the same dataset).
* **Create races.**  Two writers may create the same dataset at once; the one that loses
  the race for version 1 appends to the winner's dataset in ``append`` mode (after checking
  its data fits the winner's schema) and fails with :class:`DatasetExistsError` otherwise.
* **Idempotency keys.**  A write given ``idempotency_key`` stores it (and its row count) in
  the committed transaction's properties, so a retry that reaches any process, even after
  a restart, finds it and commits nothing more: it returns the earlier version.  The newest
  :data:`IDEMPOTENCY_WINDOW` versions (retries come seconds or minutes later, not after a
  hundred commits) are searched before the stream is read and again just before
  committing; within one process, writes with the same key are serialised from that second
  check to the end of their commit, so only two processes committing the same key within
  milliseconds of each other could both commit.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from .. import storage
from ..errors import (
    CommitConflictError,
    DatasetExistsError,
    InvalidArgumentError,
    SchemaError,
    SchemaMismatchError,
    UnsupportedError,
)
from ..schema import LanceSchema
from ..version import DEFAULT_VERSION, writable
from . import commit, manifest, paths, staging, write
from .fragment_metadata import DataFile, FragmentMetadata
from .manifest import Manifest

IDEMPOTENCY_KEY = "lance_flight.idempotency_key"
ROWS_PROPERTY = "lance_flight.rows"
FRESH_READ_SECONDS = 1.0  # see write_version
IDEMPOTENCY_WINDOW = 100
MODES = ("create", "append", "overwrite")
_BEFORE_COMMIT_POINT = (CommitConflictError, InvalidArgumentError, SchemaError, UnsupportedError)
"""What the commit raises when it refuses to commit, before writing any manifest."""
_KEY_LOCKS: dict[tuple[str, str], threading.Lock] = {}
_KEY_LOCKS_GUARD = threading.Lock()


@dataclass(frozen=True)
class WriteOutcome:
    """What a write committed: the new version and its rows, or (``duplicate``) the
    earlier version that committed the same idempotency key and that version's rows."""

    version: int
    rows_written: int
    duplicate: bool = False
    # the committed manifest, as read back by the commit (None for a duplicate): opening
    # the new version from it needs no second listing and read
    manifest: Manifest | None = field(default=None, repr=False, compare=False)


def find_idempotent(uri: str | os.PathLike[str], key: str) -> WriteOutcome | None:
    """The earlier commit carrying idempotency ``key`` among the newest versions, if any."""
    root = storage.register(uri)
    for entry in reversed(paths.list_versions(root)[-IDEMPOTENCY_WINDOW:]):
        txn = manifest.read_manifest(entry.path).transaction
        if txn is not None and txn.transaction_properties.get(IDEMPOTENCY_KEY) == key:
            rows = int(txn.transaction_properties.get(ROWS_PROPERTY, "0"))
            return WriteOutcome(entry.version, rows, duplicate=True)
    return None


def _key_lock(root: str, key: str) -> threading.Lock:
    with _KEY_LOCKS_GUARD:
        if len(_KEY_LOCKS) > 10_000:  # forget idle locks now and then
            for k in [k for k, lock in _KEY_LOCKS.items() if not lock.locked()]:
                del _KEY_LOCKS[k]
        return _KEY_LOCKS.setdefault((root, key), threading.Lock())


def write_version(
    data,
    uri: str | os.PathLike[str],
    schema: pa.Schema | None = None,
    mode: str = "create",
    *,
    max_rows_per_file: int = write.DEFAULT_MAX_ROWS_PER_FILE,
    max_rows_per_group: int | None = None,
    data_storage_version: str | None = None,
    enable_stable_row_ids: bool = False,
    enable_v2_manifest_paths: bool = True,
    max_page_bytes: int | None = None,
    storage_options: dict[str, str] | None = None,
    idempotency_key: str | None = None,
    transaction_properties: Mapping[str, str] | None = None,
    max_bytes_per_file: int | None = None,
    config: Mapping[str, str] | None = None,
    progress: Any = None,
) -> WriteOutcome:
    """Write ``data`` (a Table, RecordBatchReader or iterable of batches, streamed) as a new
    dataset (``create``), new fragments (``append``; creates a missing dataset) or a new
    version replacing the rows (``overwrite``), in one conflict-checked commit.  See the
    module docstring for cleanup, create races and ``idempotency_key``.  ``config`` keys
    are set by a create or overwrite; ``progress`` (a ``FragmentWriteProgress``) hears of
    each fragment begun and written."""
    root = storage.register(uri, storage_options)
    if mode not in MODES:
        raise InvalidArgumentError(f"mode must be create, append or overwrite, not {mode!r}")
    if idempotency_key is not None and not (
        isinstance(idempotency_key, str) and 0 < len(idempotency_key) <= 256
    ):
        raise InvalidArgumentError("idempotency_key must be a string of 1 to 256 characters")
    reader = write.to_reader(data, schema)
    if idempotency_key:
        earlier = find_idempotent(root, idempotency_key)
        if earlier is not None:
            for _ in reader:  # drain: a streaming source is still sending
                pass
            return earlier
    newest = paths.latest_version(root, hinted=True)
    if mode == "create" and newest is not None:
        raise DatasetExistsError(f"dataset already exists at {root} (use mode='append')")
    current = manifest.read_manifest(newest.path) if newest is not None else None
    read_at = time.monotonic()
    appending = mode == "append" and current is not None
    file_schema = None
    if current is not None and appending:
        lance_schema = current.schema
        version = writable(current.data_storage_version, "append to a dataset of", legacy=True)
        file_schema = _append_subset(lance_schema, reader.schema)
    else:
        version = writable(
            data_storage_version or (current.data_storage_version if current else DEFAULT_VERSION),
            legacy=True,
        )
        # blob columns become pylance's lance.blob.v2 columns in 2.2
        lance_schema = LanceSchema.from_arrow(write.blob_table_schema(reader.schema, version))
    created_from = storage.outermost_missing(root)
    rows = [0]

    def counted() -> Iterator[pa.RecordBatch]:
        for b in reader:
            rows[0] += b.num_rows
            yield b

    try:  # a failed stream removes the files it wrote (write_fragments does)
        fragments = write.write_fragments(
            pa.RecordBatchReader.from_batches(reader.schema, counted()),
            root,
            file_schema or lance_schema,
            max_rows_per_file=max_rows_per_file,
            max_rows_per_group=max_rows_per_group,
            data_storage_version=version,
            max_page_bytes=max_page_bytes,
            max_bytes_per_file=max_bytes_per_file,
            on_new_file=None if progress is None else _progress_begin(progress),
        )
    except BaseException:
        remove_created_dirs(root, created_from)
        raise
    if progress is not None:
        for frag in fragments:
            progress.complete(FragmentMetadata.from_pb(frag))
    properties = dict(transaction_properties or {})
    if idempotency_key:
        properties[IDEMPOTENCY_KEY] = idempotency_key
        properties[ROWS_PROPERTY] = str(rows[0])
    staged = dict(
        mode="append" if appending else "overwrite",
        read_version=current.version if current is not None else 0,
        schema=lance_schema,
        schema_metadata=reader.schema.metadata,
        properties=properties,
        config=None if appending else config,
    )
    naming = None
    if current is None:
        naming = paths.ManifestNaming.V2 if enable_v2_manifest_paths else paths.ManifestNaming.V1
    # a small append's commit may skip listing the versions (see commit.commit): only
    # while what it read is fresh, so that the window in which another writer's commit and
    # a cleanup could both pass unseen stays as short as a listing's
    fresh = time.monotonic() - read_at < FRESH_READ_SECONDS
    options: dict[str, Any] = dict(
        naming=naming,
        stable_row_ids=enable_stable_row_ids,
        data_storage_version=None if appending else version,
        read=current if fresh else None,
    )
    try:
        if not idempotency_key:
            m = _commit(root, fragments, staged, options, mode, reader)
            return WriteOutcome(m.version, rows[0], manifest=m)
        with _key_lock(root, idempotency_key):
            earlier = find_idempotent(root, idempotency_key)
            if earlier is None:
                try:
                    m = _commit(root, fragments, staged, options, mode, reader)
                    return WriteOutcome(m.version, rows[0], manifest=m)
                except CommitConflictError:  # a concurrent retry of the same write won?
                    earlier = find_idempotent(root, idempotency_key)
                    if earlier is None:
                        raise
            write.remove_fragment_files(root, fragments)
            return earlier
    except _BEFORE_COMMIT_POINT:
        # refused before any manifest was written: the files can never be referenced.
        # (Anything else may come after the commit point, e.g. from finishing an external
        # store's commit: then the files stay, for cleanup_old_versions to judge.)
        write.remove_fragment_files(root, fragments)
        remove_created_dirs(root, created_from)
        raise


def _progress_begin(progress: Any) -> Callable[[str], None]:
    def begin(name: str) -> None:
        progress.begin(FragmentMetadata(id=0, files=[DataFile(name, [])], physical_rows=0))

    return begin


def _append_subset(schema: LanceSchema, data: pa.Schema) -> LanceSchema | None:
    """The dataset's fields that appended ``data`` holds, in the data's order, when it
    holds only some of them or orders them otherwise: its files then store those, and the
    rows read null in the others, as pylance appends.  None when the data has the
    dataset's columns in order (or columns it lacks, which check_schema refuses)."""
    if data.names == schema.memo("names", lambda s: [f.name for f in s.fields]):
        return None  # the usual append: every column, in order
    names = set(data.names)
    by_name = {f.name: f for f in schema.fields}
    if data.names == list(by_name) or not names <= set(by_name) or len(names) != len(data):
        return None
    kept = [by_name[n] for n in data.names]
    missing = [f.name for f in schema.fields if f.name not in names and not f.nullable]
    if missing:
        raise SchemaMismatchError(f"the data lacks non-nullable columns {missing}")
    return LanceSchema(kept, dict(schema.metadata))


def _commit(root: str, fragments, staged: dict, options: dict, mode: str, reader) -> Manifest:
    """Commit; a create that lost the race to another creator becomes an append to the
    dataset the other one made (``append`` mode) or a :class:`DatasetExistsError`."""
    txn = staging.staged_transaction(fragments, **staged)
    try:
        return commit.commit(root, txn, **options)
    except DatasetExistsError:
        if mode != "append":
            raise DatasetExistsError(
                f"dataset at {root} was created by another writer meanwhile"
            ) from None
    newest = paths.latest_version(root)
    assert newest is not None  # another writer just created it
    theirs = manifest.read_manifest(newest.path)
    write.check_schema(theirs.schema.to_dataset_arrow(), reader.schema)
    again = dict(staged, mode="append", read_version=theirs.version)
    txn = staging.staged_transaction(fragments, **again)
    return commit.commit(root, txn)


def remove_created_dirs(root: str, created_from: str | None, *extra: str) -> None:
    """After a failed write that created ``root`` (``created_from`` is the outermost
    directory it created, None if ``root`` existed): remove the directories it made, if
    empty (``extra`` sub-directories of ``root`` first)."""
    if created_from is None:
        return
    subs = (*extra, paths.DATA_DIR, paths.VERSIONS_DIR, paths.TRANSACTIONS_DIR)
    storage.prune(root, subs, stop=storage.dirname(created_from))


__all__ = [
    "IDEMPOTENCY_KEY",
    "IDEMPOTENCY_WINDOW",
    "MODES",
    "ROWS_PROPERTY",
    "DatasetExistsError",
    "WriteOutcome",
    "find_idempotent",
    "remove_created_dirs",
    "write_version",
]
