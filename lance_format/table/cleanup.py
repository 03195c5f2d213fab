"""Removing old versions and the files only they (or nobody) reference.

A version is kept when it is the latest, is tagged, or is newer than ``older_than``.  Every
file a kept version references (data files, blob sidecar directories, deletion files, its
transaction file) survives; the manifests of the other versions go first, then their
unreferenced files.  Unreferenced files younger than ``UNVERIFIED_AGE`` may belong to a write
in progress, so they are left alone unless ``delete_unverified`` is set (which is also how
the leftovers of a killed writer are reclaimed: partial data files, transaction files of
commits that never landed, temporary manifests).

Staging-job registries (``_staging/<job>/``, see :mod:`.staging`) are what running and
just-ended distributed writes rely on (a finished job's marker refuses its late writers), so
a job directory goes only once nothing in it changed for ``UNVERIFIED_AGE``, whatever
``delete_unverified`` says; the data files it lists are judged like any other.
"""

from __future__ import annotations

import datetime as dt
import re
import time
from dataclasses import dataclass

from .. import storage
from ..errors import InvalidArgumentError, ObjectNotFoundError
from . import manifest, paths, staging, tags

UNVERIFIED_AGE = dt.timedelta(days=7)
DEFAULT_OLDER_THAN = dt.timedelta(days=14)


@dataclass
class CleanupStats:
    bytes_removed: int = 0
    old_versions: int = 0
    data_files_removed: int = 0


def cleanup_old_versions(
    root: str,
    older_than: dt.timedelta = DEFAULT_OLDER_THAN,
    *,
    delete_unverified: bool = False,
    error_if_tagged_old_versions: bool = True,
    keep_from: int | None = None,
) -> CleanupStats:
    """``keep_from``: versions from this one on are kept whatever their age (default: the
    latest)."""
    if not isinstance(older_than, dt.timedelta) or older_than < dt.timedelta(0):
        raise InvalidArgumentError("older_than must be a non-negative timedelta")
    now = time.time()
    cutoff_ns = int((now - older_than.total_seconds()) * 1e9)
    versions = paths.list_versions(root)
    if not versions:
        return CleanupStats()
    tagged = set(tags.list_tags(root).values())
    keep, drop = [], []
    for i, entry in enumerate(versions):
        m = manifest.read_manifest(entry.path)
        latest = i == len(versions) - 1 or (keep_from is not None and entry.version >= keep_from)
        old = (m.timestamp_ns or 0) < cutoff_ns
        if latest or not old:
            keep.append(m)
        elif entry.version in tagged:
            if error_if_tagged_old_versions:
                raise InvalidArgumentError(
                    f"version {entry.version} is tagged; delete the tag or pass "
                    "error_if_tagged_old_versions=False to keep it"
                )
            keep.append(m)
        else:
            drop.append(entry)
    referenced: set[str] = set()
    for m in keep:
        for frag in m.fragments:
            for df in frag.files:
                path = paths.data_file_path(root, df.path)
                referenced.add(path)
                referenced.add(path.rsplit(".", 1)[0])  # blob sidecar directory
            if frag.HasField("deletion_file"):
                referenced.add(paths.deletion_file_path(root, frag.id, frag.deletion_file))
        if m.pb.transaction_file:
            referenced.add(paths.transaction_file_path(root, m.pb.transaction_file))
    stats = CleanupStats()
    for entry in drop:
        stats.bytes_removed += _remove([storage.ObjectMeta(entry.path, 0, 0)], entry.path)
        stats.old_versions += 1
    unverified_before = now - UNVERIFIED_AGE.total_seconds()
    for sub in (paths.DATA_DIR, paths.DELETIONS_DIR, paths.TRANSACTIONS_DIR, paths.VERSIONS_DIR):
        directory = storage.join(root, sub)
        entries: dict[str, list[storage.ObjectMeta]] = {}
        for meta in storage.list_files(directory):
            name = meta.key[len(directory) + 1 :].split("/", 1)[0]
            entries.setdefault(name, []).append(meta)
        for name, found in sorted(entries.items()):
            path = storage.join(directory, name)
            if path in referenced:
                continue
            if sub == paths.VERSIONS_DIR and not _is_temporary(name):
                continue  # manifests and the hint; only a killed commit's temp files go
            if not delete_unverified and max(m.mtime for m in found) > unverified_before:
                continue
            removed = _remove(found, path)
            stats.bytes_removed += removed
            if sub == paths.DATA_DIR and path.endswith(".lance"):
                stats.data_files_removed += 1
    stats.bytes_removed += staging.remove_stale_jobs(root, unverified_before)
    return stats


def _is_temporary(name: str) -> bool:
    """A write that never finished: ``<name>.<uuid>.partial`` (or the older ``.tmp-*``)."""
    return name.endswith(".partial") or name.startswith(".tmp-")


def _remove(found: list[storage.ObjectMeta], path: str) -> int:
    """Delete a file or a sidecar directory; bytes freed (0 when already gone)."""
    if len(found) == 1 and found[0].key == path:
        try:
            size = found[0].size or storage.file_size(path)
            storage.delete(path)
        except ObjectNotFoundError:
            return 0
        return size
    return storage.delete_prefix(path)


AUTO_CLEANUP_INTERVAL = "lance.auto_cleanup.interval"
AUTO_CLEANUP_OLDER_THAN = "lance.auto_cleanup.older_than"
_DURATION_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "ms": 1e-3,
    "s": 1,
    "sec": 1,
    "m": 60,
    "min": 60,
    "h": 3600,
    "d": 86400,
    "w": 7 * 86400,
}


def auto_cleanup_config(interval: int, older_than_seconds: int) -> dict[str, str]:
    """The dataset config that asks for a cleanup every ``interval`` versions."""
    if not isinstance(interval, int) or interval <= 0:
        raise InvalidArgumentError("auto cleanup interval must be a positive integer")
    if not isinstance(older_than_seconds, int) or older_than_seconds < 0:
        raise InvalidArgumentError("auto cleanup older_than_seconds must be a non-negative int")
    return {AUTO_CLEANUP_INTERVAL: str(interval), AUTO_CLEANUP_OLDER_THAN: f"{older_than_seconds}s"}


def parse_duration(text: str) -> dt.timedelta:
    """A duration as pylance's config writes it: numbers with units, ``"14d"``,
    ``"1h 30m"``, ``"1ms"``."""
    parts = re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]+)", text.strip().lower())
    if not parts or re.sub(r"[\d.\sa-z]", "", text.lower()):
        raise InvalidArgumentError(f"not a duration: {text!r}")
    seconds = 0.0
    for number, unit in parts:
        if unit not in _DURATION_UNITS:
            raise InvalidArgumentError(f"unknown duration unit {unit!r} in {text!r}")
        seconds += float(number) * _DURATION_UNITS[unit]
    return dt.timedelta(seconds=seconds)


def auto_cleanup(root: str, m: manifest.Manifest) -> None:
    """After committing ``m``: when its config asks for a cleanup every N versions and this
    is one, remove versions older than the configured age, keeping the version it was
    based on and later ones (as pylance's commit hook does)."""
    config = m.config
    interval = config.get(AUTO_CLEANUP_INTERVAL)
    if not interval:
        return
    try:
        every = int(interval)
        older_than = parse_duration(config.get(AUTO_CLEANUP_OLDER_THAN, "14d"))
    except (ValueError, InvalidArgumentError):
        return  # a config pylance could not use either: no cleanup
    if every <= 0 or m.version % every:
        return
    cleanup_old_versions(
        root, older_than, error_if_tagged_old_versions=False, keep_from=m.version - 1
    )
