"""Committing fragments that are already written (*staged*): one Append or one Overwrite.

:func:`~lance_format.table.write.write_fragments` writes data files without committing, so a
writer can stream its input first and decide afterwards (a Flight ``do_put`` commits when its
stream ends cleanly; distributed writers stage in many places and commit once).  This module
turns such fragments into the one transaction :func:`~lance_format.table.commit.commit`
checks against concurrent writers.  ``properties`` are stored in the committed transaction
(``Transaction.transaction_properties``), where later writers can find them (e.g. an
idempotency key).

A distributed writer may lose track of what it staged (Spark drops the result of a task
whose upstream failed elsewhere, of a killed task, of a retried or speculative attempt), so
staged writes can belong to a *job*: :class:`StagingJob` keeps a registry under
``<root>/_staging/<job>/``, one ``<put-uuid>.json`` per staged write listing its data files,
each name recorded *before* its file is created (a crash leaves a name to find, never a
nameless file).  Ending the job leaves a marker (``ABORTED`` or ``COMMITTED``) so that writes
still running learn that they are too late, and removes every listed file no version
references.  Registry files are small JSON written atomically (temp file + rename);
pylance and this package's readers ignore the ``_staging`` directory, and
:func:`remove_stale_jobs` (called by cleanup) drops job directories untouched for longer
than the unverified age.
"""

from __future__ import annotations

import json
import re
import time
import uuid as uuidlib
from collections.abc import Mapping, Sequence

from .. import storage
from ..errors import InvalidArgumentError, LanceIOError, ObjectNotFoundError
from ..pb import table_pb2
from ..schema import LanceSchema
from ..version import LanceFileVersion
from . import commit, manifest, paths
from .operations import Append, Operation, Overwrite
from .transaction import Transaction, new_transaction

MODES = ("append", "overwrite")
STAGING_DIR = "_staging"
ABORTED = "ABORTED"
COMMITTED = "COMMITTED"
JOB_ID_RULE = "1 to 64 characters of A-Z a-z 0-9 '_' '.' '-', and not '.' or '..'"
_JOB_ID = re.compile(r"[A-Za-z0-9_.-]{1,64}\Z")
_DATA_FILE = re.compile(r"[A-Za-z0-9_-]{1,200}\.lance\Z")  # a plain name in data/
_ENTRY = re.compile(r"[0-9a-f]{32}\.json\Z")


def staged_transaction(
    fragments: Sequence[table_pb2.DataFragment],
    *,
    mode: str,
    read_version: int,
    schema: LanceSchema | None = None,
    schema_metadata: Mapping[str | bytes, bytes] | None = None,
    properties: Mapping[str, str] | None = None,
    config: Mapping[str, str] | None = None,
) -> Transaction:
    """The transaction adding ``fragments`` (``append``) or replacing every row with them
    (``overwrite``, which also creates: ``read_version`` 0; it needs ``schema``, and sets
    the ``config`` keys given)."""
    op: Operation
    if mode == "append":
        op = Append(fragments=list(fragments))
    elif mode == "overwrite":
        if schema is None:
            raise InvalidArgumentError("an overwrite needs the schema of the new version")
        op = Overwrite(
            fragments=list(fragments),
            schema=schema.to_protos(),
            schema_metadata={
                k.decode() if isinstance(k, bytes) else k: v
                for k, v in (schema_metadata or {}).items()
            },
            config_upsert_values=dict(config or {}),
        )
    else:
        raise InvalidArgumentError(f"mode must be one of {list(MODES)}, not {mode!r}")
    return new_transaction(read_version, op, transaction_properties=properties)


def commit_staged(
    root: str,
    fragments: Sequence[table_pb2.DataFragment],
    *,
    mode: str,
    read_version: int,
    schema: LanceSchema | None = None,
    schema_metadata: Mapping[str | bytes, bytes] | None = None,
    data_storage_version: str | LanceFileVersion | None = None,
    properties: Mapping[str, str] | None = None,
) -> manifest.Manifest:
    """Commit staged ``fragments`` in one conflict-checked transaction against
    ``read_version``; ``data_storage_version`` applies to an overwrite (an append keeps the
    dataset's).  Raises ``CommitConflictError`` when a concurrent commit makes it impossible."""
    txn = staged_transaction(
        fragments,
        mode=mode,
        read_version=read_version,
        schema=schema,
        schema_metadata=schema_metadata,
        properties=properties,
    )
    storage = data_storage_version if mode == "overwrite" else None
    return commit.commit(root, txn, data_storage_version=storage)


# -- staging jobs ------------------------------------------------------------------------------


def valid_job_id(job: object) -> bool:
    """Whether ``job`` may name a staging job (it becomes a directory name)."""
    return isinstance(job, str) and bool(_JOB_ID.match(job)) and job not in (".", "..")


class StagingJob:
    """The registry of one job's staged writes under ``<root>/_staging/<job>/``.

    State: running (no marker), ``"aborted"`` or ``"committed"`` (a marker file; committed
    wins if both exist: its files are in a version).  The registry lives on the dataset's own
    storage, so every server process over the same root sees the same jobs.
    """

    def __init__(self, root: str, job: str):
        if not valid_job_id(job):
            raise InvalidArgumentError(f"a staging job id must be {JOB_ID_RULE}, got {job!r}")
        self.root = root
        self.job = job
        self.directory = storage.join(root, STAGING_DIR, job)

    def state(self) -> str | None:
        """``None`` while the job runs, else ``"committed"`` or ``"aborted"``."""
        if storage.exists(storage.join(self.directory, COMMITTED)):
            return "committed"
        if storage.exists(storage.join(self.directory, ABORTED)):
            return "aborted"
        return None

    def mark(self, marker: str, **info: object) -> None:
        """End the job: ``ABORTED`` or ``COMMITTED`` (with ``info``, e.g. the version)."""
        if marker not in (ABORTED, COMMITTED):
            raise InvalidArgumentError(f"a job marker is {ABORTED} or {COMMITTED}, not {marker!r}")
        body = {"job": self.job, "at": time.time(), **info}
        paths.write_atomic(storage.join(self.directory, marker), json.dumps(body).encode())

    def new_put(self, read_version: int) -> StagedPut:
        """The registry entry of one more staged write (created with its first file)."""
        return StagedPut(self, read_version)

    def entries(self) -> list[tuple[str, dict]]:
        """(path, content) of every registry entry that reads as one; an unreadable entry is
        left alone (its files are then reclaimed by cleanup like any unreferenced file)."""
        out = []
        for name in sorted(paths.list_names(self.directory)):
            if not _ENTRY.match(name):
                continue
            path = storage.join(self.directory, name)
            try:
                entry = json.loads(paths.read_bytes(path))
                files = entry["files"]
                read_version = entry["read_version"]
            except (LanceIOError, ValueError, KeyError, TypeError):
                continue
            if not (isinstance(files, list) and isinstance(read_version, int)):
                continue
            out.append((path, entry))
        return out

    def remove_uncommitted(self) -> int:
        """Remove every listed data file that no version references, with the temporary file
        of one still being written, then the entries; the number of files removed.  Call after :meth:`mark`, so that a write still running either is
        listed here or finds the marker before it returns."""
        entries = self.entries()
        if not entries:
            return 0
        since = min(entry["read_version"] for _, entry in entries)
        referenced = referenced_data_files(self.root, after=since)
        data = storage.join(self.root, paths.DATA_DIR)
        partial: dict[str, list[str]] = {}  # file writers write <name>.<hex>.partial first
        for n in paths.list_names(data):
            if n.endswith(".partial"):
                partial.setdefault(n.rsplit(".", 2)[0], []).append(n)
        removed = 0
        for path, entry in entries:
            for name in entry["files"]:
                if not isinstance(name, str) or not _DATA_FILE.match(name) or name in referenced:
                    continue
                for n in [name, *partial.get(name, ())]:
                    try:
                        storage.delete(storage.join(data, n))
                        removed += 1
                    except ObjectNotFoundError:
                        pass
            paths.remove(path, missing_ok=True)
        return removed


class StagedPut:
    """One staged write's registry entry: the names of its data files, saved (atomically)
    before each file is created."""

    def __init__(self, job: StagingJob, read_version: int):
        self.job = job
        self.read_version = read_version
        self.path = storage.join(job.directory, f"{uuidlib.uuid4().hex}.json")
        self.files: list[str] = []

    def add(self, name: str) -> None:
        self.files.append(name)
        body = {"read_version": self.read_version, "files": self.files}
        data = json.dumps(body).encode()
        for attempt in range(3):
            try:  # a failed sibling write may remove the empty job directory meanwhile
                paths.write_atomic(self.path, data)
                return
            except LanceIOError:
                if attempt == 2:
                    raise

    def drop(self) -> None:
        """Forget the entry (its files are gone or committed)."""
        paths.remove(self.path, missing_ok=True)


def referenced_data_files(root: str, *, after: int = 0) -> set[str]:
    """Data files (names under ``data/``) referenced by any version newer than ``after``: a
    file staged while version ``after`` was the latest cannot be in an older manifest."""
    out: set[str] = set()
    for entry in paths.list_versions(root):
        if entry.version > after:
            m = manifest.read_manifest(entry.path)
            out |= {df.path for f in m.fragments for df in f.files}
    return out


def remove_stale_jobs(root: str, before: float) -> int:
    """Remove the job directories under ``_staging/`` in which nothing changed since
    ``before`` (a POSIX time): finished jobs whose late writers are long gone, or jobs whose
    driver died.  Their data files are not touched (cleanup judges those on their own).
    Returns the bytes freed."""
    base = storage.join(root, STAGING_DIR)
    jobs: dict[str, list[storage.ObjectMeta]] = {}
    for meta in storage.list_files(base):
        jobs.setdefault(meta.key[len(base) + 1 :].split("/", 1)[0], []).append(meta)
    freed = 0
    for job, found in jobs.items():
        if max(m.mtime for m in found) >= before:
            continue
        freed += storage.delete_prefix(storage.join(base, job))
    storage.prune(base)
    return freed


__all__ = [
    "ABORTED",
    "COMMITTED",
    "JOB_ID_RULE",
    "MODES",
    "STAGING_DIR",
    "StagedPut",
    "StagingJob",
    "commit_staged",
    "referenced_data_files",
    "remove_stale_jobs",
    "staged_transaction",
    "valid_job_id",
]
