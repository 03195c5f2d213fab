"""The datasets under a root (a directory or an object-store prefix): names, confinement,
opening, warming the cache.

A dataset's name is its path relative to the root (``tpch/lineitem``); a dataset is a
directory holding ``_versions/``.  Names come from clients, so they are checked before any
file-system or storage call, here and only here (:meth:`Catalog.path_of`, which every way in
uses): ``/``-separated parts of ASCII letters, digits, ``_``, ``-``, ``.`` and ``=``, each
1-255 characters, not starting with ``.`` or ``_`` (``_versions``, ``_staging`` are the
format's), at most 512 characters in all; nothing else (no spaces, control characters,
newlines, non-ASCII); on a local root the real path (symlinks resolved) must stay under the
root.  Every listing and read goes through :mod:`lance_format.storage`, so several server
processes over one bucket see the same datasets: nothing here remembers a "latest" version
between requests.  Opened versions are kept in a small LRU: a version
never changes, so any cached ``Dataset`` stays valid; "latest" is resolved per request by
listing ``_versions/`` (cheap), which is what makes a commit visible at once.
"""

from __future__ import annotations

import copy
import re
import threading
from collections import OrderedDict

from lance_format import Dataset, SearchCache, layout, storage, tags
from lance_format.dataset import find_entry, open_version
from lance_format.errors import InvalidArgumentError, LanceError, LanceIOError

from . import permissions
from .errors import BadRequest, NotFound

MAX_NAME = 512
MAX_PART = 255  # a file name on every common file system
# fullmatch, not ``$``: ``$`` also matches before a trailing newline ("public/nl\n")
_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.=-]*")
OPEN_VERSIONS = 64  # Dataset objects kept (manifests parsed, readers open)


def check_name(name: object) -> str:
    """``name`` if it is a well-formed dataset name (see the module docstring), else
    :class:`BadRequest` (INVALID_ARGUMENT) saying what is wrong, with the name escaped."""
    if not isinstance(name, str) or not name:
        raise BadRequest(f"a dataset name must be a non-empty string, got {name!r}")
    if len(name) > MAX_NAME:
        raise BadRequest(f"a dataset name is at most {MAX_NAME} characters, got {len(name)}")
    if name.startswith("/"):
        raise BadRequest(f"dataset name {name!r}: absolute paths are not allowed")
    for part in name.split("/"):
        if len(part) > MAX_PART or not _PART.fullmatch(part):
            raise BadRequest(
                f"dataset name {name!r}: each '/'-separated part must be 1-{MAX_PART} ASCII "
                "letters, digits, '_', '-', '.' or '=', starting with a letter or digit"
            )
    return name


def _well_formed(name: str) -> bool:
    try:
        check_name(name)
    except BadRequest:
        return False
    return True


class Catalog:
    """The datasets under ``root``, sharing one search cache."""

    def __init__(
        self, root: str, cache: SearchCache, storage_options: dict[str, str] | None = None
    ):
        self.root = storage.realpath(storage.register(root, storage_options))
        self.local = storage.scheme_of(self.root) == "file"
        if self.local and not storage.is_dir(self.root):
            raise InvalidArgumentError(f"the dataset root {root!r} is not a directory")
        if not self.local:  # fail at start, not on every request, when the store is unusable
            try:
                storage.list_dir(self.root)
            except LanceIOError as exc:
                raise InvalidArgumentError(
                    f"cannot list the dataset root {root!r}: {exc.problem}"
                ) from None
        self.cache = cache
        # (name, version) -> (dataset, its manifest's path and identity): both are checked on
        # every hit, so a version removed by ``cleanup`` is not served from the cache, nor a
        # dataset dropped and made again under its name (its new version 1 has the old path)
        self._open: OrderedDict[tuple[str, int], tuple[Dataset, str, tuple]] = OrderedDict()
        self._lock = threading.Lock()

    # -- names ----------------------------------------------------------------------------

    def path_of(self, name: object) -> str:
        """The directory of dataset ``name`` (which need not exist yet), confined to the root."""
        parts = check_name(name).split("/")
        path = storage.join(self.root, *parts)
        if not self.local:
            return path  # no symlinks in an object store: the checked name is the path
        real = storage.realpath(path)
        if real != self.root and not real.startswith(self.root + "/"):
            raise BadRequest(f"dataset name {name!r} leads outside the root")
        return real

    def exists(self, name: str) -> bool:
        return bool(layout.list_versions(self.path_of(name)))

    def names(self) -> list[str]:
        """Every dataset under the root (sorted), not following symlinks out of it: one
        delimited listing per directory level."""
        out = []
        pending = [""]
        while pending:
            rel = pending.pop()
            _files, dirs = storage.list_dir(storage.join(self.root, rel) if rel else self.root)
            if layout.VERSIONS_DIR in dirs:
                if rel and _well_formed(rel):  # one no client could name stays hidden
                    out.append(rel)
                continue  # a dataset's own directories hold no datasets
            pending += [f"{rel}/{d}" if rel else d for d in dirs if not d.startswith((".", "_"))]
        return sorted(out)

    # -- opening --------------------------------------------------------------------------

    def latest_version(self, name: str) -> int:
        versions = layout.list_versions(self.path_of(name))
        if not versions:
            raise NotFound(f"no dataset named {name!r}")
        return versions[-1].version

    def open(self, name: str, version: int | str | None = None) -> Dataset:
        """Dataset ``name`` at ``version`` (a number, a tag, or None for the latest), if the
        current caller may read it (:mod:`.permissions`): one listing of ``_versions/`` per
        call, so a commit by any process is seen at once."""
        path = self.path_of(name)
        permissions.check_read(name)
        if isinstance(version, str):
            version = self._resolve_tag(name, path, version)
        try:
            entry = find_entry(path, None if version is None else int(version))
        except LanceIOError:
            raise NotFound(f"no dataset named {name!r}") from None
        except InvalidArgumentError:
            raise NotFound(f"dataset {name!r} has no version {version}") from None
        key = (name, entry.version)
        identity = _identity(entry.path)
        with self._lock:
            hit = self._open.get(key)
            if hit is not None and hit[1:] == (entry.path, identity):  # the listing saw it
                self._open.move_to_end(key)
                return hit[0]
        try:
            ds = open_version(path, entry, cache=self.cache)
        except LanceIOError:
            raise NotFound(f"dataset {name!r} has no version {entry.version}") from None
        with self._lock:
            self._open[key] = (ds, entry.path, identity)
            while len(self._open) > OPEN_VERSIONS:
                self._open.popitem(last=False)
        return ds

    def open_to_change(self, name: str, version: int | str | None = None) -> Dataset:
        """A private ``Dataset`` to write through: writes move their object to the new
        version in place (as pylance's do), which must never happen to a cached, shared
        one."""
        return copy.copy(self.open(name, version))

    def _resolve_tag(self, name: str, path: str, tag: str) -> int:
        if not layout.list_versions(path):
            raise NotFound(f"no dataset named {name!r}")
        try:
            return tags.resolve_tag(path, tag)
        except InvalidArgumentError as exc:
            raise NotFound(f"dataset {name!r} has no tag {tag!r}: {exc.problem}") from None

    # -- warming --------------------------------------------------------------------------

    def warm(self, budget_bytes: int | None = None) -> dict[str, int]:
        """Load page metadata of every dataset's latest version into the search cache, until
        ``budget_bytes`` (default: 90% of the cache) is used; returns what was warmed."""
        budget = int(budget_bytes if budget_bytes is not None else 0.9 * self.cache.capacity_bytes)
        warmed = {"datasets": 0, "files": 0}
        for name in self.names():
            try:
                ds = self.open(name)
                for frag in ds.get_fragments():
                    for reader in frag.readers():
                        if self.cache.currsize >= budget:
                            return warmed
                        reader.warm()
                        warmed["files"] += 1
            except LanceError:  # a broken dataset must not stop the server from starting
                continue
            warmed["datasets"] += 1
        return warmed


def _identity(path: str) -> tuple:
    """What tells one manifest file from another at the same path (a stat on a local disk,
    a HEAD on an object store): its size, modification time and entity tag."""
    try:
        meta = storage.head(path)
    except LanceIOError:
        return ()
    return () if meta is None else (meta.size, meta.mtime, meta.e_tag)
