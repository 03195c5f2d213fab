"""Commit handlers: how a manifest is made the next version without ever overwriting one.

* :class:`ConditionalPutCommitHandler` - the store's own put-if-not-exists (``link(2)``
  locally, a conditional ``PUT`` with ``If-None-Match: *`` on S3, a locked check in memory).
* :class:`ExternalManifestCommitHandler` - for stores without it: a key-value store with
  put-if-not-exists decides which manifest wins each version.  The protocol: stage the
  manifest under ``<final name>-<uuid>``, put ``(dataset, version) -> staged path`` if
  absent (the commit point), copy the staged manifest to its final name, point the entry
  at the final name, delete the staged copy.  A reader that finds the latest entry still
  pointing at a staged manifest finishes those steps (repair), or refuses to load the
  dataset when the staged manifest is gone too.
"""

from __future__ import annotations

import logging
import re
import threading
import uuid
from abc import ABC, abstractmethod

from ..errors import CorruptFileError, LanceIOError, ObjectNotFoundError
from .registry import key_prefix, mount_of, resolve

log = logging.getLogger(__name__)

# "<final manifest name>-<uuid>": a staged manifest of the external-store protocol
_STAGED = re.compile(r"^(?P<final>.+\.manifest)-[0-9A-Fa-f-]{32,36}$")


class ExternalManifestStore(ABC):
    """A key-value store with put-if-not-exists, keyed by (dataset, version); values are
    manifest paths relative to the bucket, as pylance stores them."""

    @abstractmethod
    def get_latest(self, base: str) -> tuple[int, str] | None:
        """The newest ``(version, path)`` recorded for the dataset, if any."""

    @abstractmethod
    def put_if_not_exists(self, base: str, version: int, path: str, size: int) -> bool:
        """Record ``version``; False if it is already recorded."""

    @abstractmethod
    def put_if_exists(self, base: str, version: int, path: str, size: int) -> None:
        """Re-point an already recorded ``version``."""


class CommitHandler(ABC):
    @abstractmethod
    def commit_manifest(self, root: str, version: int, path: str, data: bytes) -> bool:
        """Make ``data`` the manifest at ``path``; False if the version exists already."""

    def synchronize(self, root: str) -> None:
        """Bring the object store up to date before a listing (nothing to do by default)."""
        return None


class ConditionalPutCommitHandler(CommitHandler):
    def commit_manifest(self, root: str, version: int, path: str, data: bytes) -> bool:
        store, key = resolve(path)
        return store.put_if_not_exists(key, data)


class ExternalManifestCommitHandler(CommitHandler):
    def __init__(self, external: ExternalManifestStore):
        self.external = external

    @staticmethod
    def _key(path: str) -> str:
        return resolve(path)[1]

    def commit_manifest(self, root: str, version: int, path: str, data: bytes) -> bool:
        store, final_key = resolve(path)
        staged_key = f"{final_key}-{uuid.uuid4()}"
        store.put(staged_key, data)
        base = self._key(root)
        if not self.external.put_if_not_exists(base, version, staged_key, len(data)):
            store.delete(staged_key, missing_ok=True)
            return False
        self._finalize(root, version, staged_key, final_key, len(data))
        return True

    def _finalize(self, root: str, version: int, staged_key: str, final_key: str, size: int):
        """Copy the winning staged manifest to its final name, then tidy up.  Once the
        final manifest exists the commit is durable: a failure to re-point the entry or to
        delete the staged copy is left for the next reader to repair, not reported."""
        store, _ = resolve(root)
        store.copy(staged_key, final_key)
        self._tidy(root, version, staged_key, final_key, size)

    def _tidy(self, root: str, version: int, staged_key: str, final_key: str, size: int):
        """Point the entry at the final manifest and drop the staged copy (best effort)."""
        store, _ = resolve(root)
        try:
            self.external.put_if_exists(self._key(root), version, final_key, size)
            store.delete(staged_key, missing_ok=True)
        except LanceIOError as exc:
            log.warning("version %d of %s is committed; tidying up failed: %s", version, root, exc)

    def synchronize(self, root: str) -> None:
        """The reader rule: finish a commit whose writer stopped after the commit point."""
        base = self._key(root)
        latest = self.external.get_latest(base)
        if latest is None:
            return
        version, key = latest
        name = key.rsplit("/", 1)[-1]
        staged = _STAGED.match(name)
        if staged is None:
            return  # the entry names the final manifest: the commit was finished
        store, _ = resolve(root)
        final_key = key[: len(key) - len(name)] + staged.group("final")
        final = store.head(final_key)
        if final is not None:
            self._tidy(root, version, key, final_key, final.size)
            return
        meta = store.head(key)
        if meta is None:
            raise CorruptFileError(
                f"the external manifest store records version {version} at {key}, which "
                "does not exist, and its final manifest is missing too: refusing to load "
                "a dataset whose two stores disagree",
                path=key_prefix(root) + key,
            )
        try:
            self._finalize(root, version, key, final_key, meta.size)
        except ObjectNotFoundError:
            if not store.exists(final_key):  # else another reader finished it meanwhile
                raise


CONDITIONAL_PUT = ConditionalPutCommitHandler()
_handlers: dict[tuple[str, tuple], CommitHandler] = {}
_lock = threading.Lock()


def handler_for(root: str) -> CommitHandler:
    """The commit handler of a dataset root: the external store for ``s3+ddb://`` roots,
    put-if-not-exists everywhere else."""
    mount = mount_of(root)
    if mount is None or not mount.ddb_table:
        return CONDITIONAL_PUT
    with _lock:
        handler = _handlers.get((mount.ddb_table, mount.options))
        if handler is None:
            from .dynamodb import DynamoDBManifestStore

            handler = ExternalManifestCommitHandler(
                DynamoDBManifestStore(mount.ddb_table, dict(mount.options))
            )
            _handlers[(mount.ddb_table, mount.options)] = handler
        return handler
