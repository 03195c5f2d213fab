"""The datasets under a root directory: names, confinement, opening, warming the cache.

A dataset's name is its path relative to the root (``tpch/lineitem``); a dataset is a
directory holding ``_versions/``.  Names come from clients, so they are checked before any
file-system call, here and only here (:meth:`Catalog.path_of`, which every way in uses):
``/``-separated parts of ASCII letters, digits, ``_``, ``-``, ``.`` and ``=``, each 1-255
characters, not starting with ``.`` or ``_`` (``_versions``, ``_staging`` are the format's),
at most 512 characters in all; nothing else (no spaces, control characters, newlines,
non-ASCII), and the real path (symlinks resolved) must stay under the root.  Opened versions are kept in a small LRU: a version
never changes, so any cached ``Dataset`` stays valid; "latest" is resolved per request by
listing ``_versions/`` (cheap), which is what makes a commit visible at once.
"""

from __future__ import annotations

import os
import re
import threading
from collections import OrderedDict

from lance_format.cache import SearchCache
from lance_format.errors import InvalidArgumentError, LanceError, LanceIOError
from lance_format.table import paths, tags
from lance_format.table.dataset import Dataset
from lance_format.table.dataset import dataset as open_dataset

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

    def __init__(self, root: str, cache: SearchCache):
        self.root = os.path.realpath(root)
        if not os.path.isdir(self.root):
            raise InvalidArgumentError(f"the dataset root {root!r} is not a directory")
        self.cache = cache
        # (name, version) -> (dataset, its manifest's path): the path is checked on every hit,
        # so a version removed by ``cleanup`` is not served from the cache
        self._open: OrderedDict[tuple[str, int], tuple[Dataset, str]] = OrderedDict()
        self._lock = threading.Lock()

    # -- names ----------------------------------------------------------------------------

    def path_of(self, name: object) -> str:
        """The directory of dataset ``name`` (which need not exist yet), confined to the root."""
        check_name(name)
        parts = name.split("/")
        path = os.path.join(self.root, *parts)
        real = os.path.realpath(path)
        if real != self.root and not real.startswith(self.root + os.sep):
            raise BadRequest(f"dataset name {name!r} leads outside the root")
        return real

    def exists(self, name: str) -> bool:
        return os.path.isdir(os.path.join(self.path_of(name), paths.VERSIONS_DIR))

    def names(self) -> list[str]:
        """Every dataset under the root (sorted), not following symlinks out of it."""
        out = []
        for dirpath, dirnames, _ in os.walk(self.root, followlinks=False):
            if paths.VERSIONS_DIR in dirnames:
                rel = os.path.relpath(dirpath, self.root).replace(os.sep, "/")
                if rel != "." and _well_formed(rel):  # one no client could name stays hidden
                    out.append(rel)
                dirnames[:] = []  # a dataset's own directories hold no datasets
                continue
            dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "_")))
        return sorted(out)

    # -- opening --------------------------------------------------------------------------

    def latest_version(self, name: str) -> int:
        path = self.path_of(name)
        versions = paths.list_versions(path) if os.path.isdir(path) else []
        if not versions:
            raise NotFound(f"no dataset named {name!r}")
        return versions[-1].version

    def open(self, name: str, version: int | str | None = None) -> Dataset:
        """Dataset ``name`` at ``version`` (a number, a tag, or None for the latest), if the
        current caller may read it (:mod:`.permissions`)."""
        path = self.path_of(name)
        permissions.check_read(name)
        if version is None:
            version = self.latest_version(name)
        elif isinstance(version, str):
            version = self._resolve_tag(name, path, version)
        key = (name, int(version))
        with self._lock:
            hit = self._open.get(key)
            if hit is not None:
                self._open.move_to_end(key)
        if hit is not None:
            if os.path.exists(hit[1]):
                return hit[0]
            with self._lock:
                self._open.pop(key, None)
        if not os.path.isdir(os.path.join(path, paths.VERSIONS_DIR)):
            raise NotFound(f"no dataset named {name!r}")
        try:
            entry = paths.find_version(path, int(version))
            ds = open_dataset(path, int(version), cache=self.cache)
        except (InvalidArgumentError, LanceIOError):
            raise NotFound(f"dataset {name!r} has no version {version}") from None
        with self._lock:
            self._open[key] = (ds, entry.path)
            while len(self._open) > OPEN_VERSIONS:
                self._open.popitem(last=False)
        return ds

    def _resolve_tag(self, name: str, path: str, tag: str) -> int:
        if not os.path.isdir(os.path.join(path, paths.VERSIONS_DIR)):
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
